//! `lab clock`: the measured loop stores only clock reads and never
//! allocates; the table has the paper's rows, counts and skipped reasons.

use firmtime_lab::clockread::{self, Config, FINNEY_TABLE1};
use firmtime_lab::measure::{Cell, Silent};
use firmtime_lab::ErrorKind;
use firmtime_rt::clock::{tsc_info, Clock, ClockKind};
use firmtime_rt::setup::RtConditions;
use std::sync::atomic::AtomicBool;

fn tiny(clock: ClockKind) -> Config {
    Config {
        clock,
        calls: 2_000,
        hogs: 0,
        ..Config::quick()
    }
}

#[test]
fn sample_fills_the_buffer_without_allocating() {
    let clock = Clock::open(ClockKind::Monotonic).unwrap();
    // More than one chunk, and not a multiple of it.
    let mut buf = vec![0u64; clockread::CHUNK * 2 + 17];
    let stop = AtomicBool::new(false);
    let n = assert_no_alloc::assert_no_alloc(|| clockread::sample(&clock, &mut buf, &stop));
    assert_eq!(n, buf.len());
    assert!(buf[0] > 0, "every slot holds a clock reading");
    assert!(
        buf.windows(2).all(|w| w[1] >= w[0]),
        "CLOCK_MONOTONIC never goes back"
    );
}

#[test]
fn sample_with_stop_set_reads_nothing() {
    let clock = Clock::open(ClockKind::Gettimeofday).unwrap();
    let mut buf = vec![7u64; 1000];
    let stop = AtomicBool::new(true);
    let n = assert_no_alloc::assert_no_alloc(|| clockread::sample(&clock, &mut buf, &stop));
    assert_eq!(n, 0);
    assert!(buf.iter().all(|&v| v == 7), "nothing was written");
}

#[test]
fn analyze_counts_zero_and_negative_gaps() {
    let cond = observed_conditions();
    let r = clockread::analyze(&[0, 0, 1000, 1000, 3000, 2500], cond, false);
    assert_eq!(r.reads, 6);
    assert_eq!(r.summary.samples, 5);
    assert_eq!(r.zero_gaps, 2);
    assert_eq!(r.negative_gaps, 1);
    assert_eq!(r.smallest_nonzero_gap_ns, Some(1000));
    assert_eq!(r.summary.min_ns, Some(-500));
    assert_eq!(r.summary.max_ns, Some(2000));
    assert_eq!(r.summary.mean_ns, Some(500));
    let total: u64 = r.histogram.iter().map(|b| b.count).sum();
    assert_eq!(total, 5, "every gap is in the histogram");
    assert!(r.histogram.windows(2).all(|w| w[0].low_ns < w[1].low_ns));
}

fn assert_every_bucket_holds_a_whole_us(histogram: &[clockread::GapBucket]) {
    for b in histogram {
        let first_whole_us = b.low_ns.div_euclid(1000) * 1000
            + if b.low_ns.rem_euclid(1000) == 0 {
                0
            } else {
                1000
            };
        assert!(
            first_whole_us <= b.high_ns,
            "bucket {b:?} holds no whole µs"
        );
    }
}

#[test]
fn wide_buckets_still_hold_their_whole_us_gaps() {
    // Gaps of 1, 17 and 250 µs (and one of −3 µs): above 2,048 ns the
    // buckets are wider than 1 ns and their bounds are not whole µs
    // (17,000 ns lands in 16,992..=17,007), but each holds its gap.
    let r = clockread::analyze(
        &[0, 1_000, 18_000, 268_000, 265_000],
        observed_conditions(),
        false,
    );
    assert_eq!(r.histogram.len(), 4);
    for (b, gap) in r.histogram.iter().zip([-3_000, 1_000, 17_000, 250_000]) {
        assert!(b.low_ns <= gap && gap <= b.high_ns, "{gap} not in {b:?}");
        assert_eq!(b.count, 1);
    }
    assert_ne!(
        r.histogram[2].low_ns % 1000,
        0,
        "17 µs starts a bucket off the µs grid"
    );
    assert_every_bucket_holds_a_whole_us(&r.histogram);
}

fn observed_conditions() -> RtConditions {
    RtConditions {
        requested: Default::default(),
        obtained: firmtime_rt::setup::observe().unwrap(),
        downgrades: vec![],
    }
}

#[test]
fn idle_table_has_the_three_priority_rows_with_counts() {
    let cfg = tiny(ClockKind::Monotonic);
    let r = clockread::run(&cfg, &mut Silent).unwrap();
    assert!(!r.partial);
    assert_eq!(r.clock, ClockKind::Monotonic);
    assert!(r.resolution_ns.is_some_and(|n| n >= 1));
    let labels: Vec<&str> = r.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "User, no load",
            "Setpriority, no load",
            "SCHED_FIFO, no load"
        ]
    );
    let policies: Vec<&str> = r.cells.iter().map(|c| c.policy.as_str()).collect();
    assert_eq!(policies, ["other", "other:-20", "fifo:80"]);
    for c in &r.cells {
        assert_eq!(c.hogs, 0);
        assert!(c.paper.is_some(), "{}: the paper has this row", c.label);
        match &c.result {
            Cell::Measured(m) => {
                assert_eq!(m.reads, 2_000);
                assert!(!m.partial);
                assert_eq!(m.summary.samples, 1_999);
                assert_eq!(m.negative_gaps, 0, "monotonic never goes back");
                let total: u64 = m.histogram.iter().map(|b| b.count).sum();
                assert_eq!(total, 1_999);
                assert_eq!(m.conditions.obtained.policy, m.conditions.requested.policy);
            }
            Cell::Skipped { reason } => {
                // Only without RT privileges; the reason says what is missing.
                assert_ne!(c.priority, "user", "a normal user can always read a clock");
                assert!(!reason.is_empty());
                firmtime_rt::testing::skip(format!("{}: {reason}", c.label));
            }
        }
    }
}

#[test]
fn gettimeofday_gaps_are_whole_microseconds() {
    let r = clockread::run(&tiny(ClockKind::Gettimeofday), &mut Silent).unwrap();
    let m = r.cells[0].result.measured().expect("user row always runs");
    assert_eq!(r.resolution_ns, Some(1000));
    // The gaps themselves (order statistics of the raw samples) are whole µs.
    let s = &m.summary;
    for v in [s.min_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p99_9_ns, s.max_ns] {
        assert_eq!(v.expect("gaps measured") % 1000, 0, "{s:?}");
    }
    // The histogram keeps 3 significant digits, so above 2,048 ns a bucket is
    // wider than 1 ns and its bounds need not be whole µs (17,000 ns lands in
    // 16,992..=17,007). What must hold at every width: each non-empty bucket
    // contains a whole-µs value.
    assert_every_bucket_holds_a_whole_us(&m.histogram);
    if let Some(g) = m.smallest_nonzero_gap_ns {
        assert_eq!(g % 1000, 0);
    }
}

#[test]
fn tsc_is_measured_only_where_invariant() {
    let r = clockread::run(&tiny(ClockKind::Tsc), &mut Silent).unwrap();
    assert_eq!(r.cells.len(), 3);
    if tsc_info().invariant {
        assert!(r.tsc_hz.is_some());
        assert!(r.cells[0].result.measured().is_some());
    } else {
        assert_eq!(r.tsc_hz, None);
        assert_eq!(r.resolution_ns, None);
        for c in &r.cells {
            match &c.result {
                Cell::Skipped { reason } => assert!(reason.contains("TSC"), "{reason}"),
                Cell::Measured(_) => panic!("{}: a non-invariant TSC was measured", c.label),
            }
        }
    }
}

#[test]
fn result_json_has_the_documented_keys() {
    let r = clockread::run(&tiny(ClockKind::Monotonic), &mut Silent).unwrap();
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "clock",
        "calls",
        "hogs",
        "resolution_ns",
        "tsc_hz",
        "cells",
        "partial",
    ] {
        assert!(j.get(k).is_some(), "missing {k}");
    }
    assert_eq!(j["clock"], "monotonic");
    let c = &j["cells"][0];
    assert_eq!(c["priority"], "user");
    assert_eq!(c["paper"]["mean_ns"], 1290);
    let m = &c["result"];
    assert_eq!(m["status"], "measured");
    for k in [
        "conditions",
        "reads",
        "partial",
        "summary",
        "smallest_nonzero_gap_ns",
        "zero_gaps",
        "negative_gaps",
        "histogram",
    ] {
        assert!(m.get(k).is_some(), "missing result.{k}");
    }
    for k in [
        "samples", "min_ns", "mean_ns", "sd_ns", "p50_ns", "p90_ns", "p95_ns", "p99_ns",
        "p99_9_ns", "max_ns", "missed",
    ] {
        assert!(m["summary"].get(k).is_some(), "missing summary.{k}");
    }
}

#[test]
fn bad_config_names_the_flag_and_range() {
    let check = |cfg: Config, flag: &str| {
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(flag), "{e}");
    };
    check(
        Config {
            calls: 1,
            ..tiny(ClockKind::Monotonic)
        },
        "--samples 1 is out of range: valid is 2 to 100000000",
    );
    check(
        Config {
            hogs: 257,
            ..tiny(ClockKind::Monotonic)
        },
        "--hogs 257 is out of range: valid is 0 to 256",
    );
    check(
        Config {
            fifo_priority: 0,
            ..tiny(ClockKind::Monotonic)
        },
        "--priority 0",
    );
    check(
        Config {
            hogs: 3,
            load_exe: None,
            ..tiny(ClockKind::Monotonic)
        },
        "firmtime executable",
    );
    // run() validates too, before doing anything.
    let e = clockread::run(
        &Config {
            calls: 0,
            ..tiny(ClockKind::Monotonic)
        },
        &mut Silent,
    )
    .unwrap_err();
    assert!(e.message().contains("--samples"), "{e}");
}

#[test]
fn paper_table_matches_finney_2001() {
    assert_eq!(FINNEY_TABLE1.len(), 6);
    let fifo_load = clockread::paper_row(firmtime_lab::measure::Priority::Fifo(80), true).unwrap();
    assert_eq!(fifo_load.max_ns, 69_000);
    let user_load = clockread::paper_row(firmtime_lab::measure::Priority::User, true).unwrap();
    assert_eq!(user_load.max_ns, 840_019_000);
    assert_eq!(user_load.mean_ns, 5_230);
}
