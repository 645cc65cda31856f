//! The verdict at the top of `lab all`'s report, built from recorded
//! `cyclic-*.json` files of this development VM (tests/data/verdict/, the
//! bulky per-thread arrays trimmed): it must account for every condition it
//! measured and never contradict the table.
//!
//! - `stress-misses/`: a `lab all --quick` run: SCHED_FIFO 80 under stress
//!   missed 24 deadlines (p99.9 1.9 ms: this kernel has preempt model none),
//!   idle none.
//! - `idle-misses/`: `lab cyclic` runs: SCHED_FIFO 80 idle missed 1 deadline
//!   (1.43 ms, the VM), under stress 12 (p99.9 1.87 ms).
//! - `none/`: SCHED_FIFO 80 idle without a miss (worst 547 µs) and the
//!   SCHED_OTHER runs; no real-time run under stress (on this VM every one
//!   missed: a clean one could not be recorded).

use firmtime_lab::all::verdict_of;
use firmtime_lab::doctor::{Check, Report, Status};

fn doctor() -> Report {
    let check = |id: &str| Check {
        id: id.into(),
        title: id.into(),
        status: Status::Warn,
        value: "v".into(),
        fix: format!("fix {id}"),
    };
    Report {
        checks: [
            "virtualization",
            "isolcpus",
            "preempt_model",
            "nohz_full",
            "jack_server",
        ]
        .iter()
        .map(|id| check(id))
        .collect(),
        system: firmtime_rt::system::SystemInfo::collect(),
    }
}

fn dir(name: &str) -> std::path::PathBuf {
    super::data(&format!("verdict/{name}"))
}

#[test]
fn stress_misses_are_named_with_their_cause_and_idle_is_not_blamed() {
    let v = verdict_of(&dir("stress-misses"), &doctor()).unwrap();
    assert!(
        v.headline.starts_with("Not reliably: even under SCHED_FIFO 80 ")
            && v.headline.contains("SCHED_FIFO 80, stress missed 24 deadlines (worst 2.22 ms; all of them: task load-stress-3"),
        "{}",
        v.headline
    );
    assert!(!v.headline.contains("idle"), "{}", v.headline);
    // One finding per condition, then what it means for an experiment.
    assert_eq!(v.findings.len(), 5, "{:?}", v.findings);
    for (f, label) in v.findings.iter().zip([
        "SCHED_FIFO 80, idle:",
        "SCHED_FIFO 80, stress:",
        "SCHED_OTHER, idle:",
        "SCHED_OTHER, stress:",
        "For an experiment:",
    ]) {
        assert!(f.starts_with(label), "{f}");
    }
    assert!(
        v.findings[1].contains("24 deadlines missed"),
        "{}",
        v.findings[1]
    );
}

#[test]
fn an_idle_miss_is_named_beside_the_stress_ones() {
    let v = verdict_of(&dir("idle-misses"), &doctor()).unwrap();
    assert!(
        v.headline.starts_with("Not reliably")
            && v.headline
                .contains("SCHED_FIFO 80, stress missed 12 deadlines")
            && v.headline
                .contains("besides, SCHED_FIFO 80, idle missed 1 deadline (worst 1.43 ms"),
        "{}",
        v.headline
    );
}

#[test]
fn no_real_time_miss_is_a_plain_yes_and_the_normal_thread_is_still_reported() {
    let v = verdict_of(&dir("none"), &doctor()).unwrap();
    assert!(
        v.headline.starts_with(
            "Yes: millisecond timing works on this machine under SCHED_FIFO 80 — every wake-up of every real-time run (idle)"
        ),
        "{}",
        v.headline
    );
    let last = v.findings.last().unwrap();
    assert!(
        last.starts_with("For an experiment: run it real-time")
            && last.contains("A normal (SCHED_OTHER) thread missed 204 deadlines"),
        "{last}"
    );
}

#[test]
fn what_to_change_counts_each_outlier_once() {
    for d in ["stress-misses", "idle-misses", "none"] {
        let path = dir(d);
        let v = verdict_of(&path, &doctor()).unwrap();
        let explained: u64 = std::fs::read_dir(&path)
            .unwrap()
            .map(|f| {
                let j: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(f.unwrap().path()).unwrap())
                        .unwrap();
                j["result"]["explain"]["outliers"]
                    .as_array()
                    .map_or(0, |a| a.len() as u64)
            })
            .sum();
        // Every line ends "would remove N of …" or is the left-over line.
        let mut credited = 0;
        for a in &v.advice {
            let n = a
                .rsplit_once("would remove ")
                .or_else(|| a.split_once("Left over: "))
                .and_then(|(_, r)| r.split(' ').next()?.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{d}: a line without its count: {a}"));
            credited += n;
        }
        assert_eq!(credited, explained, "{d}: {:#?}", v.advice);
        assert!(
            v.other_advice.iter().any(|a| a.starts_with("jack_server")),
            "{d}: {:?}",
            v.other_advice
        );
    }
}
