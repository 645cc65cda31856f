//! `firmtime net bench` against a worker the test starts on loopback: what
//! it prints and writes about the usable fraction with and without `--ramp`.
//! The loop runs at SCHED_OTHER (`--priority other`): these tests check the
//! report, not timing.

mod common;

use common::{net_bench, NetWorker as Worker};

/// Long periods (1024 frames, 21 ms) and window 2: no period is late on a
/// busy test machine, so the one step (or some ramp step) is usable.
fn bench(worker: &Worker, json: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let mut args = vec![
        "--period-frames",
        "1024",
        "--window",
        "2",
        "--work-mode",
        "none",
        "--priority",
        "other",
    ];
    args.extend(extra);
    net_bench(worker, json, &args)
}

fn usable_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.starts_with("usable fraction "))
        .unwrap_or_else(|| panic!("no usable fraction line in:\n{stdout}"))
}

/// Issue 14: one fixed fraction printed "usable fraction 0.0 %", as if the
/// limit had been measured at 0.
#[test]
fn without_ramp_the_usable_fraction_is_not_measured() {
    let w = Worker::start();
    let (code, stdout, json) = bench(&w, "bench-plain.json", &["--duration", "1s"]);
    let line = usable_line(&stdout);
    assert!(
        line.starts_with("usable fraction not measured (no --ramp)  master CPU "),
        "{line}"
    );
    assert!(json["usable_fraction"].is_null(), "{json}");
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    // The exit status still says whether that one fraction was usable.
    let usable = steps[0]["usable"].as_bool().unwrap();
    assert_eq!(code, Some(if usable { 0 } else { 1 }), "{stdout}");
}

#[test]
fn with_ramp_the_usable_fraction_is_a_number() {
    let w = Worker::start();
    let (code, stdout, json) = bench(
        &w,
        "bench-ramp.json",
        &[
            "--ramp",
            "--work",
            "0",
            "--ramp-to",
            "0.1",
            "--ramp-step",
            "0.1",
            "--step-duration",
            "1s",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{json}");
    let usable = json["usable_fraction"].as_f64().expect("a number");
    let best = steps
        .iter()
        .filter(|s| s["usable"] == true)
        .map(|s| s["fraction"].as_f64().unwrap())
        .fold(f64::NAN, f64::max);
    assert_eq!(usable, best, "{json}");
    let line = usable_line(&stdout);
    let want = format!("usable fraction {:.1} %  master CPU ", usable * 100.0);
    assert!(line.starts_with(&want), "{line}");
}
