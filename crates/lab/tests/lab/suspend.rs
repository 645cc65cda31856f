//! `lab sleep` (module `suspend`): config errors name the flag, the sample
//! loop does not allocate, sleepers never wake early, missing mechanisms
//! are skipped cells with their reason.

use crate::invalid_message;
use firmtime_lab::measure::{Cell, Silent};
use firmtime_lab::suspend::{self, Config};
use firmtime_rt::sleep::{self, Mechanism};
use std::sync::atomic::AtomicBool;

#[test]
fn defaults_cover_every_mechanism_and_the_papers_intervals() {
    let c = Config::default();
    assert_eq!(c.mechanisms, Mechanism::ALL.to_vec());
    assert_eq!(c.intervals_ns.len(), 8);
    assert_eq!(c.intervals_ns[0], 50_000);
    assert_eq!(c.intervals_ns[7], 20_000_000);
    c.validate().unwrap();
    Config::quick().validate().unwrap();
    Config::full().validate().unwrap();
    let labels: Vec<&str> = c.conditions().iter().map(|(l, _)| *l).collect();
    assert_eq!(labels, ["other", "other-slack-1ns", "fifo"]);
    assert_eq!(c.conditions()[1].1.timer_slack_ns, Some(1));
}

#[test]
fn bad_values_are_refused_naming_the_flag_and_range() {
    let m = invalid_message(&Config {
        intervals_ns: vec![1_000_000, 0],
        ..Config::default()
    });
    assert!(m.contains("--interval") && m.contains("1us"), "{m}");
    let m = invalid_message(&Config {
        intervals_ns: vec![],
        ..Config::default()
    });
    assert!(m.contains("--interval"), "{m}");
    let m = invalid_message(&Config {
        samples: 0,
        ..Config::default()
    });
    assert!(m.contains("--samples") && m.contains("1000000"), "{m}");
    let m = invalid_message(&Config {
        fifo_priority: 0,
        ..Config::default()
    });
    assert!(m.contains("--priority") && m.contains("99"), "{m}");
    let m = invalid_message(&Config {
        mechanisms: vec![],
        ..Config::default()
    });
    assert!(m.contains("--sleeper"), "{m}");
}

#[test]
fn a_cell_records_every_sample_without_allocating_and_never_early() {
    let mut s = sleep::open(Mechanism::ClockNanosleep).unwrap();
    let mut achieved = Vec::with_capacity(5);
    let mut overshoot = Vec::with_capacity(5);
    let stop = AtomicBool::new(false);
    assert_no_alloc::assert_no_alloc(|| {
        suspend::measure_cell(&mut *s, 100_000, 5, &mut achieved, &mut overshoot, &stop)
    })
    .unwrap();
    assert_eq!(achieved.len(), 5);
    assert_eq!(overshoot.len(), 5);
    for (a, o) in achieved.iter().zip(&overshoot) {
        assert!(*o >= 0, "woke before the deadline");
        assert_eq!(a - o, 100_000, "achieved = interval + overshoot");
    }
}

#[test]
fn a_cell_never_pushes_past_its_capacity() {
    let mut s = sleep::open(Mechanism::ClockNanosleep).unwrap();
    let mut achieved = Vec::with_capacity(2);
    let mut overshoot = Vec::with_capacity(2);
    let stop = AtomicBool::new(false);
    let cap = achieved.capacity();
    suspend::measure_cell(&mut *s, 10_000, 50, &mut achieved, &mut overshoot, &stop).unwrap();
    assert_eq!(achieved.len(), cap);
    assert_eq!(achieved.capacity(), cap);
}

#[test]
fn a_tiny_run_has_three_conditions_and_skips_what_is_missing() {
    // Regression: the tails worker's SIGALRM handler made setitimer refuse mid-run.
    let _alrm = crate::SIGALRM.lock().unwrap_or_else(|e| e.into_inner());
    let c = Config {
        mechanisms: vec![
            Mechanism::ClockNanosleep,
            Mechanism::Setitimer,
            Mechanism::Rtc,
        ],
        intervals_ns: vec![100_000, 200_000],
        samples: 3,
        fifo_priority: 80,
    };
    let r = suspend::run(&c, &mut Silent).unwrap();
    assert!(!r.partial);
    assert_eq!(r.conditions.len(), 3);
    let no_rtc =
        !std::path::Path::new("/dev/rtc").exists() && !std::path::Path::new("/dev/rtc0").exists();
    for (label, cond) in &r.conditions {
        let Some(cond) = cond.measured() else {
            // Only the real-time condition may be refused, and not to root.
            assert_eq!(label, "fifo");
            // SAFETY: geteuid has no preconditions and cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            assert!(!root, "SCHED_FIFO refused as root");
            firmtime_rt::testing::skip("SCHED_FIFO refused (needs root or an rtprio limit)");
            continue;
        };
        assert_eq!(&cond.label, label);
        assert_eq!(cond.cells.len(), 6);
        for cell in &cond.cells {
            match (&cell.cell, cell.mechanism) {
                (Cell::Skipped { reason }, Mechanism::Rtc) if no_rtc => {
                    assert!(reason.contains("/dev/rtc"), "{reason}")
                }
                (Cell::Measured(m), Mechanism::ClockNanosleep | Mechanism::Setitimer) => {
                    assert_eq!(m.achieved.samples, 3);
                    assert_eq!(m.overshoot.samples, 3);
                    assert!(m.overshoot.min_ns.unwrap() >= 0);
                    assert!(m.error.is_none());
                }
                (other, mech) => panic!("{label} {mech}: unexpected {other:?}"),
            }
        }
        if label == "other-slack-1ns" {
            assert_eq!(cond.timer_slack_ns, 1);
        }
    }
    let j = serde_json::to_value(&r).unwrap();
    let cell = &j["conditions"][0][1]["cells"][0];
    assert_eq!(cell["mechanism"], "clock_nanosleep");
    assert_eq!(cell["interval_ns"], 100_000);
    assert_eq!(cell["cell"]["status"], "measured");
    assert!(cell["cell"]["overshoot"]["p99_ns"].is_i64());
    assert!(cell["cell"]["achieved"]["mean_ns"].is_i64());
}
