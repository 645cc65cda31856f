//! `lab overhead`: every figure present (or skipped with a reason), with
//! as many repetitions as asked, cycles only with an invariant TSC.

use firmtime_lab::measure::{Cell, Silent};
use firmtime_lab::overhead::{self, Config, Spread, ETSION_TABLE2};
use firmtime_lab::ErrorKind;
use firmtime_rt::clock::{tsc_info, ClockKind};
use firmtime_rt::sched;

fn tiny() -> Config {
    Config {
        repetitions: 3,
        round_trips: 200,
        traps: 1_000,
        memcpy_bytes: 1 << 20,
        clock_reads: 1_000,
        ..Config::quick()
    }
}

#[test]
fn spread_is_median_min_p90_max() {
    let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
    assert_eq!(
        (s.reps, s.median, s.min, s.p90, s.max),
        (5, 3.0, 1.0, 5.0, 5.0)
    );
    let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
    assert_eq!(s.median, 2.5);
    let ten: Vec<f64> = (1..=10).map(f64::from).collect();
    assert_eq!(Spread::of(&ten).unwrap().p90, 9.0);
    assert_eq!(Spread::of(&[]), None);
    assert_eq!(Spread::of(&[2.0]).unwrap().scaled(3.0).max, 6.0);
}

#[test]
fn every_figure_is_measured_with_the_repetitions_asked() {
    let cfg = tiny();
    let r = overhead::run(&cfg, &mut Silent).unwrap();
    assert!(!r.partial);
    let invariant = tsc_info().invariant;
    assert_eq!(r.tsc_hz.is_some(), invariant);
    assert_eq!(r.cycles_unavailable.is_some(), !invariant);

    let same = r
        .context_switch_same_cpu
        .measured()
        .expect("one CPU is enough");
    assert_eq!(same.parent_cpu, same.child_cpu);
    assert_eq!(same.cost.operations, 400, "two switches per round trip");
    assert_eq!(same.cost.ns.reps, 3);
    assert!(same.cost.ns.min > 0.0);
    assert_eq!(same.cost.cycles.is_some(), invariant);

    let cpus = sched::affinity().unwrap();
    match &r.context_switch_cross_cpu {
        Cell::Measured(c) => {
            assert!(cpus.len() >= 2);
            assert_ne!(c.parent_cpu, c.child_cpu);
            assert_eq!(c.cost.ns.reps, 3);
        }
        Cell::Skipped { reason } => {
            assert_eq!(cpus.len(), 1, "skipped only on one CPU: {reason}");
            assert!(reason.contains("two CPUs"), "{reason}");
        }
    }

    let trap = r.trap_getpid.measured().unwrap();
    assert_eq!(trap.operations, 1_000);
    assert_eq!(trap.ns.reps, 3);
    let bw = r.memcpy.measured().unwrap();
    assert_eq!(bw.bytes, 1 << 20);
    assert!(bw.mb_per_s.min > 0.0);

    let kinds: Vec<ClockKind> = r.clock_reads.iter().map(|c| c.clock).collect();
    assert_eq!(kinds, ClockKind::ALL);
    for c in &r.clock_reads {
        match &c.result {
            Cell::Measured(m) => {
                assert_eq!(m.operations, 1_000);
                assert_eq!(m.ns.reps, 3);
                assert!(m.ns.min <= m.ns.median && m.ns.median <= m.ns.max);
            }
            Cell::Skipped { reason } => {
                assert_eq!(c.clock, ClockKind::Tsc, "only the TSC may be missing");
                assert!(!invariant);
                assert!(reason.contains("TSC"), "{reason}");
            }
        }
    }
}

/// Our children that are zombies (exited, not waited for).
fn zombie_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut z = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let f: Vec<&str> = after.split_whitespace().collect();
        if f.len() > 2 && f[1] == me && f[0] == "Z" {
            z.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    z
}

#[test]
fn the_echo_child_is_reaped() {
    overhead::run(&tiny(), &mut Silent).unwrap();
    // Other tests may be reaping their own child right now: a zombie that
    // is still there half a second later was never waited for.
    let first = zombie_children();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let still: Vec<String> = zombie_children()
        .into_iter()
        .filter(|p| first.contains(p))
        .collect();
    assert!(still.is_empty(), "unreaped children: {still:?}");
}

#[test]
fn result_json_has_the_documented_keys() {
    let r = overhead::run(&tiny(), &mut Silent).unwrap();
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "conditions",
        "tsc_hz",
        "cycles_unavailable",
        "context_switch_same_cpu",
        "context_switch_cross_cpu",
        "trap_getpid",
        "memcpy",
        "clock_reads",
        "partial",
    ] {
        assert!(j.get(k).is_some(), "missing {k}");
    }
    let cs = &j["context_switch_same_cpu"];
    assert_eq!(cs["status"], "measured");
    for k in ["parent_cpu", "child_cpu", "operations", "ns", "cycles"] {
        assert!(cs.get(k).is_some(), "missing context_switch_same_cpu.{k}");
    }
    for k in ["reps", "median", "min", "p90", "max"] {
        assert!(cs["ns"].get(k).is_some(), "missing ns.{k}");
    }
    assert_eq!(j["memcpy"]["bytes"], 1 << 20);
    assert_eq!(j["clock_reads"][0]["clock"], "monotonic");
}

#[test]
fn bad_config_names_the_flag_and_range() {
    let check = |cfg: Config, msg: &str| {
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(msg), "{e}");
    };
    check(
        Config {
            repetitions: 0,
            ..tiny()
        },
        "--repeats 0 is out of range: valid is 1 to 1000",
    );
    check(
        Config {
            round_trips: 0,
            ..tiny()
        },
        "--round-trips 0",
    );
    check(Config { traps: 0, ..tiny() }, "--traps 0");
    check(
        Config {
            clock_reads: 1,
            ..tiny()
        },
        "--clock-reads 1 is out of range: valid is 2",
    );
    check(
        Config {
            memcpy_bytes: 100,
            ..tiny()
        },
        "--memcpy-size 100",
    );
}

#[test]
fn paper_table_matches_etsion_2003() {
    assert_eq!(ETSION_TABLE2.len(), 7);
    let p2 = ETSION_TABLE2
        .iter()
        .find(|p| p.processor == "PII-350")
        .unwrap();
    assert_eq!(
        (
            p2.context_switch_cycles,
            p2.context_switch_ns,
            p2.memcpy_mb_per_s,
            p2.trap_ns
        ),
        (1327, 3_800, 1314, 980)
    );
}
