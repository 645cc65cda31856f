//! `lab trace`: the binary ring-buffer decoder agrees with the kernel's own
//! text rendering of the same captured buffer (tests/data/trace/), effective
//! quanta are exact on synthetic switch sequences, config errors name the
//! flag, and a live run (root) measures its workloads and removes its
//! tracefs instance.

use firmtime_lab::measure::Cell;
use firmtime_lab::measure::Silent;
use firmtime_lab::quanta::analysis::{self, Targets, TickSource};
use firmtime_lab::quanta::{self, overhead, Config};
use firmtime_lab::workloads::Workload;
use firmtime_lab::ErrorKind;
use firmtime_trace::raw::{Decoder, Event, EventKind, Format, EVENTS};
use firmtime_trace::tracefs;

fn fixture(name: &str) -> std::path::PathBuf {
    crate::data(&format!("trace/{name}"))
}

fn decoder() -> Decoder {
    let hp = std::fs::read_to_string(fixture("header_page")).unwrap();
    let formats: Vec<(EventKind, Format)> = EVENTS
        .iter()
        .map(|(path, kind)| {
            let file = path.rsplit('/').next().unwrap();
            let text = std::fs::read_to_string(fixture(&format!("{file}.format"))).unwrap();
            (*kind, Format::parse(&text).unwrap())
        })
        .collect();
    Decoder::new(&hp, &formats).unwrap()
}

fn decode_cpu(d: &Decoder, cpu: u16) -> Vec<Event> {
    let bytes = std::fs::read(fixture(&format!("cpu{cpu}.raw"))).unwrap();
    let mut out = Vec::with_capacity(10_000);
    for page in bytes.chunks(d.page_size()) {
        d.decode_page(page, cpu, &mut |e| out.push(e));
    }
    out
}

/// A `sched_switch` line of the text trace: (cpu, µs, prev_pid, state, next_pid).
fn text_switches() -> Vec<(u16, u64, i32, String, i32)> {
    let text = std::fs::read_to_string(fixture("trace.txt")).unwrap();
    let mut v = Vec::new();
    for line in text.lines().filter(|l| l.contains(": sched_switch:")) {
        let cpu: u16 = line[line.find('[').unwrap() + 1..line.find(']').unwrap()]
            .parse()
            .unwrap();
        let head = &line[..line.find(": sched_switch:").unwrap()];
        let ts = head.rsplit(' ').next().unwrap();
        let (s, us) = ts.split_once('.').unwrap();
        let us = s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap();
        let field = |k: &str| {
            let at = line.find(&format!(" {k}=")).unwrap() + k.len() + 2;
            line[at..].split(' ').next().unwrap().to_string()
        };
        v.push((
            cpu,
            us,
            field("prev_pid").parse().unwrap(),
            field("prev_state"),
            field("next_pid").parse().unwrap(),
        ));
    }
    v
}

#[test]
fn format_files_parse_with_offsets() {
    let f =
        Format::parse(&std::fs::read_to_string(fixture("sched_switch.format")).unwrap()).unwrap();
    assert_eq!(f.name, "sched_switch");
    let next = f.field("next_pid").unwrap();
    assert_eq!((next.offset, next.size, next.signed), (56, 4, true));
    assert_eq!(f.field("prev_comm").unwrap().size, 16);
    assert!(
        Format::parse("name: x\nformat:\n").is_err(),
        "no ID is an error"
    );
}

#[test]
fn binary_pages_decode_to_what_the_kernel_printed() {
    let d = decoder();
    assert_eq!(d.page_size(), 4096);
    let mut bin: Vec<Event> = (0..2).flat_map(|c| decode_cpu(&d, c)).collect();
    bin.sort_by_key(|e| (e.cpu, e.time_ns));
    let bin_sw: Vec<&Event> = bin.iter().filter(|e| e.kind == EventKind::Switch).collect();
    let mut txt = text_switches();
    txt.sort_by_key(|t| (t.0, t.1));
    assert!(!txt.is_empty());
    assert_eq!(
        bin_sw.len(),
        txt.len(),
        "every switch decoded, none invented"
    );
    for (b, t) in bin_sw.iter().zip(&txt) {
        assert_eq!(b.cpu, t.0);
        // The kernel prints ns2usecs(): rounded to the nearest µs.
        assert_eq!(
            (b.time_ns + 500) / 1000,
            t.1,
            "timestamps agree to the µs the text shows"
        );
        assert_eq!(b.prev_pid, t.2);
        assert_eq!(b.next_pid, t.4);
        assert_eq!(b.preempted(), t.3.starts_with('R'), "state {}", t.3);
    }
    // The other kinds were decoded too, with plausible fields.
    let text = std::fs::read_to_string(fixture("trace.txt")).unwrap();
    for (kind, name) in [
        (EventKind::Wakeup, ": sched_wakeup:"),
        (EventKind::HrtimerExpire, ": hrtimer_expire_entry:"),
        (EventKind::LocalTimer, ": local_timer_entry:"),
    ] {
        let n_txt = text.lines().filter(|l| l.contains(name)).count();
        let n_bin = bin.iter().filter(|e| e.kind == kind).count();
        assert_eq!(n_bin, n_txt, "{name}");
    }
    let wake_line = text
        .lines()
        .find(|l| l.contains(": sched_wakeup:"))
        .unwrap();
    let w = bin
        .iter()
        .filter(|e| e.kind == EventKind::Wakeup)
        .min_by_key(|e| e.time_ns)
        .unwrap();
    assert!(wake_line.contains(&format!("comm={} pid={}", w.comm_str(), w.prev_pid)));
}

#[test]
fn decoding_a_page_does_not_allocate() {
    let d = decoder();
    let bytes = std::fs::read(fixture("cpu0.raw")).unwrap();
    let mut store: Vec<Event> = Vec::with_capacity(10_000);
    let n = assert_no_alloc::assert_no_alloc(|| {
        let mut n = 0;
        for page in bytes.chunks(d.page_size()) {
            n += d
                .decode_page(page, 0, &mut |e| {
                    if store.len() < store.capacity() {
                        store.push(e)
                    }
                })
                .events;
        }
        n
    });
    assert_eq!(n as usize, store.len());
    assert!(n > 0);
}

#[test]
fn a_page_says_whether_it_was_full_so_the_drainer_knows_of_a_backlog() {
    // The captured buffers: the kernel had moved on from every page but
    // cpu1's last, which it was still writing (2688 of 4080 bytes).
    let d = decoder();
    let full = |cpu: u16| -> Vec<bool> {
        let bytes = std::fs::read(fixture(&format!("cpu{cpu}.raw"))).unwrap();
        bytes
            .chunks(d.page_size())
            .map(|p| d.decode_page(p, cpu, &mut |_| {}).full)
            .collect()
    };
    assert_eq!(full(0), [true; 5]);
    assert_eq!(full(1), [true, true, true, true, false]);
    // The same page with its commit cut to leave more than the slack.
    let mut page = std::fs::read(fixture("cpu0.raw")).unwrap()[..d.page_size()].to_vec();
    let keep = (d.page_size() - 16 - firmtime_trace::raw::FULL_SLACK - 1) as u64;
    page[8..16].copy_from_slice(&keep.to_le_bytes());
    let info = d.decode_page(&page, 0, &mut |_| {});
    assert!(!info.full);
    assert!(info.events > 0);
}

#[test]
fn truncated_and_garbage_pages_end_early_without_panicking() {
    let d = decoder();
    let bytes = std::fs::read(fixture("cpu0.raw")).unwrap();
    let page = &bytes[..d.page_size()];
    let mut n = 0;
    for cut in [0, 8, 17, 100, 1000] {
        d.decode_page(&page[..cut], 0, &mut |_| n += 1);
    }
    let garbage = vec![0xffu8; 4096];
    d.decode_page(&garbage, 0, &mut |_| n += 1);
    assert!(n < 10_000);
}

fn sw(t: u64, cpu: u16, prev: i32, state: i64, next: i32) -> Event {
    Event {
        time_ns: t,
        cpu,
        kind: EventKind::Switch,
        pid: prev,
        prev_pid: prev,
        next_pid: next,
        prev_state: state,
        arg: 0,
        comm: [0; 16],
    }
}

fn tick(t: u64, cpu: u16, pid: i32, f: u64) -> Event {
    Event {
        kind: EventKind::HrtimerExpire,
        pid,
        arg: f,
        ..sw(t, cpu, 0, 0, 0)
    }
}

#[test]
fn quanta_are_exact_on_a_synthetic_sequence() {
    const TICK_FN: u64 = 0xffff_ffff_8143_52e0;
    let events = vec![
        sw(1_000, 0, 0, 0, 10), // 10 in on cpu0 (start unknown before? no: 0 was running)
        tick(2_000, 0, 10, TICK_FN), // tick charges 10
        tick(2_500, 0, 10, 0x1234), // another hrtimer: not a tick
        sw(5_000, 0, 10, 1, 20), // 10 blocks (S) after 4 µs with 1 tick
        Event {
            kind: EventKind::Fork,
            prev_pid: 20,
            next_pid: 21,
            ..sw(5_500, 0, 0, 0, 0)
        },
        sw(6_000, 0, 20, 0, 0),      // 20 preempted (R) after 1 µs, no tick
        sw(7_000, 1, 99, 0, 21),     // cpu1: 99 (other, start unknown) -> 21 (child of 20)
        sw(9_000, 0, 0, 0, 10),      // idle 6000..9000 on cpu0, 10 in again
        sw(9_500, 1, 21, 0x100, 99), // 21 preempted (R+) after 2.5 µs
        sw(12_000, 0, 10, 0, 0),     // 10 preempted after 3 µs
        sw(13_000, 0, 0, 0, 20),     // 20 runs until the end: truncated
    ];
    let mut t = Targets::new(2, true);
    t.add(10, 0);
    t.add(20, 1);
    let a = analysis::analyze(&events, &mut t, TickSource::Handler(TICK_FN));
    let q0: Vec<(u64, u32, bool)> = a.quanta[0]
        .iter()
        .map(|q| (q.duration_ns, q.ticks, q.preempted))
        .collect();
    assert_eq!(q0, vec![(4_000, 1, false), (3_000, 0, true)]);
    let q1: Vec<(i32, u64, bool)> = a.quanta[1]
        .iter()
        .map(|q| (q.tid, q.duration_ns, q.preempted))
        .collect();
    assert_eq!(q1, vec![(20, 1_000, true), (21, 2_500, true)]);
    assert_eq!(
        t.app_of(21),
        Some(1),
        "the forked child joined its parent's app"
    );
    assert_eq!(a.truncated, vec![0, 1]);
    assert_eq!(a.idle_ns, 3_000 + 1_000);
    assert_eq!(a.other_ns, 0, "99's only quantum has an unknown start");
    assert_eq!(a.covered_ns, 4_000 + 1_000 + 3_000 + 2_500 + 3_000 + 1_000);
    assert_eq!(a.ticks_seen, 1);
    assert_eq!(a.tids[1], vec![20, 21]);

    // Without a tick handler, ticks are the grid's multiples inside each quantum.
    let mut t = Targets::new(2, true);
    t.add(10, 0);
    t.add(20, 1);
    let g = analysis::analyze(&events, &mut t, TickSource::Grid(2_000));
    let ticks: Vec<u32> = g.quanta[0].iter().map(|q| q.ticks).collect();
    // 1000..5000 holds 2000 and 4000; 9000..12000 holds 10000 and 12000.
    assert_eq!(ticks, vec![2, 2]);
}

#[test]
fn cdf_steps_are_nearest_rank() {
    let c = quanta::cdf(&(1..=100).collect::<Vec<i64>>());
    assert_eq!(c.len(), 20);
    assert_eq!(c[0].quantum_ns, 5);
    assert_eq!(c[9].quantum_ns, 50);
    assert_eq!(c[19].quantum_ns, 100);
    assert!(quanta::cdf(&[]).is_empty());
}

#[test]
fn kallsyms_and_stats_parse() {
    let ks = "ffffffff814352e0 t tick_nohz_handler\nffffffff81432e10 T tick_handle_periodic\n";
    assert_eq!(
        tracefs::parse_kallsyms(ks, &["tick_nohz_handler", "tick_sched_timer"]),
        Some(0xffff_ffff_8143_52e0)
    );
    let hidden = "0000000000000000 t tick_nohz_handler\n";
    assert_eq!(
        tracefs::parse_kallsyms(hidden, &["tick_nohz_handler"]),
        None
    );
    let stats =
        "entries: 5\noverrun: 3\ncommit overrun: 0\nbytes: 1\ndropped events: 2\nread events: 9\n";
    assert_eq!(tracefs::parse_stats_lost(stats), 5);
}

#[test]
fn bad_configs_name_the_flag_and_range() {
    let cases: Vec<(Config, &str)> = vec![
        (
            Config {
                duration_ns: 1,
                ..Config::default()
            },
            "--duration",
        ),
        (
            Config {
                buffer_kb: 1,
                ..Config::default()
            },
            "--buffer-kb",
        ),
        (
            Config {
                max_events: 5,
                ..Config::default()
            },
            "--max-events",
        ),
        (
            Config {
                pids: vec![-3],
                ..Config::default()
            },
            "--pids",
        ),
        (
            Config {
                workloads: vec![],
                ..Config::default()
            },
            "nothing to trace",
        ),
    ];
    for (c, flag) in cases {
        let e = c.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(flag), "{}", e.message());
        assert!(
            e.message().contains("valid") || flag == "nothing to trace",
            "{}",
            e.message()
        );
    }
    assert!(Config::quick().validate().is_ok());
    assert!(Config::full().validate().is_ok());
}

#[test]
fn live_trace_of_workloads_measures_them_and_removes_its_instance() {
    if !tracefs::is_root() {
        firmtime_rt::testing::skip("lab trace needs root (tracefs)");
        return;
    }
    let cfg = Config {
        duration_ns: 400_000_000,
        workloads: vec![Workload::Sorter, Workload::Player],
        buffer_kb: 1024,
        max_events: 200_000,
        ..Config::default()
    };
    let r = quanta::run(&cfg, &mut Silent).unwrap();
    assert!(r.instance_removed);
    assert!(
        !std::path::Path::new(&r.instance).exists(),
        "instance removed"
    );
    assert!(r
        .instance
        .contains(&format!("firmtime-{}", std::process::id())));
    assert_eq!(r.apps.len(), 2);
    assert_eq!(r.apps[0].name, "sorter");
    assert_eq!(r.apps[1].paper_application.as_deref(), Some("Xine"));
    for a in &r.apps {
        assert!(a.quanta > 0, "{} ran", a.name);
        assert_eq!(a.quanta, a.preempted + a.blocked);
        assert_eq!(a.quantum.samples, a.quanta);
        assert_eq!(a.billing.quanta, a.quanta);
        assert_eq!(a.billing.runtime_ns, a.cpu_ns);
        assert_eq!(a.tids.len(), 1, "one thread per workload");
        assert!(a.iterations.unwrap() > 0);
        assert!(a.billing.proc.is_some(), "/proc accounting read");
    }
    assert!(r.events > 0);
    assert!(r.events_enabled.contains(&EventKind::Switch));
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "kernel",
        "accounting",
        "mounted_tracefs",
        "instance_removed",
        "tick_source",
        "apps",
        "idle_share",
        "other_share",
        "lost",
        "dropped",
    ] {
        assert!(j.get(k).is_some(), "key {k}");
    }
    let a = &j["apps"][0];
    for k in [
        "quanta_per_s",
        "quantum",
        "preempted",
        "blocked",
        "cpu_share",
        "cdf",
        "billing",
        "fig4",
        "paper",
    ] {
        assert!(a.get(k).is_some(), "app key {k}");
    }
    assert!(a["quantum"].get("p50_ns").is_some());
    assert!(a["billing"].get("billing_ratio").is_some());
    assert!(a["billing"].get("missed_percent").is_some());
}

#[test]
fn live_trace_of_a_command_follows_its_children() {
    if !tracefs::is_root() {
        firmtime_rt::testing::skip("lab trace needs root (tracefs)");
        return;
    }
    let cfg = Config {
        duration_ns: 5_000_000_000,
        workloads: vec![],
        command: vec!["sh".into(), "-c".into(), "sleep 0.05; exit 3".into()],
        buffer_kb: 512,
        max_events: 100_000,
        ..Config::default()
    };
    let r = quanta::run(&cfg, &mut Silent).unwrap();
    assert_eq!(r.command_status, Some(3));
    assert!(
        r.duration_ns < 4_000_000_000,
        "stopped when the command exited"
    );
    let a = &r.apps[0];
    assert!(a.quanta > 0);
    assert!(a.tids.len() >= 2, "sh and its child sleep: {:?}", a.tids);
    assert!(r.instance_removed);
}

#[test]
fn overhead_configs_name_the_flag_and_range() {
    let d = overhead::Config::default;
    let cases: Vec<(overhead::Config, &str)> = vec![
        (overhead::Config { pairs: 0, ..d() }, "--repeats"),
        (
            overhead::Config {
                slice_ns: 1_000_000,
                ..d()
            },
            "--slice",
        ),
        (
            overhead::Config {
                rates_hz: vec![0, 200_000],
                ..d()
            },
            "--rates",
        ),
        (
            overhead::Config {
                rates_hz: vec![],
                ..d()
            },
            "--rates",
        ),
        (
            overhead::Config {
                cpu: Some(4096),
                ..d()
            },
            "--cpu",
        ),
        (
            overhead::Config {
                buffer_kb: 1,
                ..d()
            },
            "--buffer-kb",
        ),
        (
            overhead::Config {
                array_bytes: Some(100),
                ..d()
            },
            "--array-size",
        ),
    ];
    for (c, flag) in cases {
        let e = c.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(flag), "{}", e.message());
        assert!(e.message().contains("valid"), "{}", e.message());
    }
    assert!(overhead::Config::quick().validate().is_ok());
    assert!(overhead::Config::full().validate().is_ok());
}

#[test]
fn live_overhead_alternates_and_records_only_in_traced_slices() {
    // It measures sort throughput on the last CPU, the one the induced-cause
    // tests flood with real-time hogs (RT throttling holds a nice-0 sorter off
    // for 950 ms of each second): one at a time, or no sort finishes a slice.
    let _g = crate::explain::INDUCED
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !tracefs::is_root() {
        firmtime_rt::testing::skip("the trace overhead benchmark needs root (tracefs)");
        return;
    }
    let cfg = overhead::Config {
        pairs: 3,
        slice_ns: 80_000_000,
        buffer_kb: 1024,
        cpu: None,
        // Small, so that sorts fit many times in a slice even in a debug build.
        array_bytes: Some(64 * 1024),
        rates_hz: vec![0, 2000],
        explain_events: false,
    };
    let before = firmtime_rt::sched::affinity().unwrap();
    let r = overhead::run(&cfg, &mut Silent).unwrap();
    assert_eq!(
        firmtime_rt::sched::affinity().unwrap(),
        before,
        "the caller's affinity is given back"
    );
    assert!(!r.partial);
    assert_eq!(r.rates.len(), 2);
    assert_eq!(r.cpu, *firmtime_rt::sched::online_cpus().last().unwrap());
    for (cell, hz) in r.rates.iter().zip([0, 2000]) {
        let Cell::Measured(m) = cell else {
            panic!("rate {hz} skipped: {cell:?}");
        };
        assert_eq!(m.rate_hz, hz);
        let order: Vec<bool> = m.slices.iter().map(|s| s.traced).collect();
        assert_eq!(order, [true, false, false, true, true, false]);
        for w in m.slices.windows(2) {
            assert!(w[0].end_ns <= w[1].start_ns, "slices in time order");
        }
        for s in &m.slices {
            assert!(s.end_ns - s.start_ns >= cfg.slice_ns);
            if !s.traced {
                assert_eq!(s.events, 0, "an untraced slice recorded events: {s:?}");
            }
        }
        let traced: u64 = m.slices.iter().filter(|s| s.traced).map(|s| s.events).sum();
        assert!(traced > 0, "traced slices recorded nothing");
        assert!(m.events >= traced);
        assert_eq!(m.pairs.len(), 3, "a sort finished in every slice");
        assert!(m.slice_ns >= cfg.slice_ns);
        assert!(m.ratio_ci95.is_none(), "under 6 pairs, no interval");
        for p in &m.pairs {
            assert!((p.ratio - p.on_per_s / p.off_per_s).abs() < 1e-12);
        }
        match (&m.timer, hz) {
            (None, 0) => {}
            (Some(t), 2000) => assert!(t.wakeups > 0 && t.rate_hz == 2000),
            other => panic!("timer {other:?}"),
        }
    }
    assert_eq!(
        r.within_target,
        r.rates[0].measured().unwrap().within_target,
        "the acceptance figure is the rate-0 row's"
    );
    // Three pairs give no interval: the report judges nothing and says why.
    assert_eq!(r.within_target, None);
    let md = firmtime_lab::report::trace_overhead_section(&r);
    assert!(md.contains("nothing to judge"), "{md}");
    assert!(md.contains("3 pairs were asked for"), "{md}");
    assert_eq!(r.sort_len, 16 * 1024);
    assert!(md.contains(&r.kernel.describe()), "{md}");
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "config",
        "kernel",
        "cpu",
        "sort_len",
        "rates",
        "within_target",
    ] {
        assert!(j.get(k).is_some(), "key {k}");
    }
    assert_eq!(j["rates"][0]["status"], "measured");
}
