//! `lab interrupts`: cache-size parsing, the sort benchmark, the RT timer
//! loop without allocation, paired medians, config errors naming the flag,
//! and the structure of a tiny interleaved run.

use crate::invalid_message;
use firmtime_lab::interrupts::{
    self, parse_cache_size, summarize_cell, timer_loop, Config, Run, SortBench, TimerRun,
};
use firmtime_lab::measure::Silent;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[test]
fn cache_sizes_parse_like_sysfs_writes_them() {
    assert_eq!(parse_cache_size("2048K\n"), Some(2048 * 1024));
    assert_eq!(parse_cache_size("8M"), Some(8 * 1024 * 1024));
    assert_eq!(parse_cache_size("512"), Some(512));
    assert_eq!(parse_cache_size(""), None);
    assert_eq!(parse_cache_size("K"), None);
    assert_eq!(parse_cache_size("0K"), None);
    assert_eq!(parse_cache_size("lots"), None);
}

#[test]
fn sort_bench_sorts_and_is_reproducible_from_its_seed() {
    let mut a = SortBench::new(1000, 7);
    let mut b = SortBench::new(1000, 7);
    let mut c = SortBench::new(1000, 8);
    for _ in 0..3 {
        assert_eq!(a.iterate(), 1000);
        b.iterate();
        c.iterate();
        assert!(a.data().windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a.data(), b.data());
        assert_ne!(a.data(), c.data());
    }
}

#[test]
fn timer_loop_counts_wakeups_without_allocating() {
    let done = AtomicBool::new(false);
    let run = std::thread::scope(|s| {
        let h = s.spawn(|| assert_no_alloc::assert_no_alloc(|| timer_loop(1000, &done)));
        std::thread::sleep(Duration::from_millis(30));
        done.store(true, Ordering::SeqCst);
        h.join().unwrap()
    });
    assert_eq!(run.rate_hz, 1000);
    assert!(run.wakeups > 0, "{run:?}");
    assert!(run.elapsed_ns > 0);
    assert_eq!(run.cpu_per_wakeup_ns(), Some(run.cpu_ns / run.wakeups));
}

fn run(repeat: u32, throughput: f64, timer: Option<(u64, u64)>) -> Run {
    Run {
        repeat,
        sorts: 1,
        sorted: 1,
        elapsed_ns: 1_000_000_000,
        throughput,
        timer: timer.map(|(wakeups, cpu_ns)| TimerRun {
            rate_hz: 1000,
            wakeups,
            missed: 1,
            cpu_ns,
            elapsed_ns: 1_000_000_000,
        }),
    }
}

#[test]
fn overhead_is_paired_by_repeat_and_split_into_direct_and_indirect() {
    // Repeat 1's baseline is slow: paired with it, its timer run lost 10 % too.
    let base = [run(0, 100.0, None), run(1, 50.0, None), run(2, 100.0, None)];
    let timed = [
        run(0, 90.0, Some((1000, 20_000_000))),
        run(1, 45.0, Some((1000, 20_000_000))),
        run(2, 80.0, Some((1000, 10_000_000))),
    ];
    let m = summarize_cell(&timed, &base, true);
    assert!((m.overhead.unwrap() - 0.10).abs() < 1e-12, "{m:?}");
    assert!((m.direct.unwrap() - 0.02).abs() < 1e-12);
    assert!((m.indirect.unwrap() - 0.08).abs() < 1e-12);
    assert!((m.direct_share.unwrap() - 0.2).abs() < 1e-12);
    assert_eq!(m.cpu_per_wakeup_ns, Some(20_000));
    assert_eq!(m.missed, 3);
    assert_eq!(m.throughput, 80.0);
    assert_eq!(m.runs.len(), 3);

    let b = summarize_cell(&base, &base, false);
    assert_eq!(b.overhead, None);
    assert_eq!(b.direct, None);
    assert_eq!(b.direct_share, None);
    assert_eq!(b.throughput, 100.0);

    // A faster timed run (noise) has no meaningful direct share.
    let m = summarize_cell(&[run(0, 110.0, Some((10, 10)))], &base, true);
    assert!(m.overhead.unwrap() < 0.0);
    assert_eq!(m.direct_share, None);
}

#[test]
fn bad_values_name_the_flag_and_the_range() {
    let cases: [(Config, &str, &str); 9] = [
        (
            Config {
                rates_hz: vec![0],
                ..Config::default()
            },
            "--rates",
            "1 to 100000",
        ),
        (
            Config {
                rates_hz: vec![],
                ..Config::default()
            },
            "--rates",
            "1 to 100000",
        ),
        (
            Config {
                levels: vec![65],
                ..Config::default()
            },
            "--levels",
            "1 to 64",
        ),
        (
            Config {
                levels: vec![],
                ..Config::default()
            },
            "--levels",
            "1 to 64",
        ),
        (
            Config {
                cell_ns: 1,
                ..Config::default()
            },
            "--duration",
            "100ms",
        ),
        (
            Config {
                repeats: 0,
                ..Config::default()
            },
            "--repeats",
            "1 to 100",
        ),
        (
            Config {
                timer_priority: 0,
                ..Config::default()
            },
            "--priority",
            "1 to 99",
        ),
        (
            Config {
                array_bytes: Some(1),
                ..Config::default()
            },
            "--array-size",
            "4096",
        ),
        (
            Config {
                cpu: Some(100_000),
                ..Config::default()
            },
            "--cpu",
            "valid are",
        ),
    ];
    for (c, flag, range) in cases {
        let m = invalid_message(&c);
        assert!(m.contains(flag) && m.contains(range), "{m}");
    }
}

#[test]
fn presets_validate() {
    Config::default().validate().unwrap();
    let q = Config::quick();
    q.validate().unwrap();
    assert!(q.rates_hz.len() < Config::default().rates_hz.len());
    let f = Config::full();
    f.validate().unwrap();
    assert_eq!(f.rates_hz, vec![100, 1000, 5000, 10_000, 20_000]);
    assert_eq!(f.levels, vec![1, 2, 4, 8]);
}

#[test]
fn tiny_run_has_every_cell_in_order_with_paired_repeats() {
    let cfg = Config {
        rates_hz: vec![1000],
        levels: vec![1, 2],
        cell_ns: 100_000_000,
        repeats: 2,
        array_bytes: Some(16 * 1024),
        ..Config::default()
    };
    let r = interrupts::run(&cfg, &mut Silent).unwrap();
    assert!(!r.partial);
    assert_eq!(r.array_elements, 4096);
    assert_eq!(r.array_source, "--array-size");
    let order: Vec<(u32, Option<u32>)> = r.cells.iter().map(|c| (c.level, c.rate_hz)).collect();
    assert_eq!(
        order,
        vec![(1, None), (1, Some(1000)), (2, None), (2, Some(1000))]
    );
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    for c in &r.cells {
        let Some(m) = c.result.measured() else {
            assert!(!root, "root gets SCHED_FIFO: no cell is skipped");
            continue;
        };
        let reps: Vec<u32> = m.runs.iter().map(|x| x.repeat).collect();
        assert_eq!(reps, vec![0, 1]);
        for x in &m.runs {
            assert_eq!(x.sorted, x.sorts * 4096);
            assert!(x.sorts > 0);
            assert_eq!(x.timer.is_some(), c.rate_hz.is_some());
            if let Some(t) = &x.timer {
                assert!(t.wakeups > 0);
            }
        }
        assert_eq!(m.overhead.is_some(), c.rate_hz.is_some());
    }
    if root {
        assert!(r.timer_conditions.is_some());
    }
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "config",
        "machine",
        "cpu",
        "l2_bytes",
        "array_bytes",
        "array_elements",
        "array_source",
        "timer_conditions",
        "cells",
        "partial",
    ] {
        assert!(j.get(k).is_some(), "missing {k}");
    }
    assert!(j["cells"][0]["rate_hz"].is_null());
    assert_eq!(j["cells"][1]["rate_hz"], 1000);
    for k in [
        "runs",
        "throughput",
        "overhead",
        "direct",
        "indirect",
        "direct_share",
        "missed",
    ] {
        assert!(j["cells"][1]["result"].get(k).is_some(), "missing {k}");
    }
}
