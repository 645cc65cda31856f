//! `firmtime lab clock` and `firmtime lab overhead` as processes: tiny runs
//! write the documented JSON, bad flags exit 2 naming the flag and range,
//! Ctrl-C writes what was measured (partial) and reaps the load children.

mod common;

use common::{assert_ok, assert_usage_errors, firmtime, take_json, text, TmpPath, EXE};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn clock_tiny_run_writes_six_rows() {
    let p = TmpPath::new("lab-clock.json");
    let out = firmtime(&[
        "lab",
        "clock",
        "--clock",
        "monotonic",
        "--samples",
        "2000",
        "--hogs",
        "1",
        "--json",
        p.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    for row in [
        "User, no load",
        "Setpriority, load",
        "SCHED_FIFO, load",
        "Finney 2001",
    ] {
        assert!(stdout.contains(row), "table lacks {row}:\n{stdout}");
    }
    let j = take_json(&p);
    assert_eq!(j["kind"], "lab-clock");
    assert_eq!(j["partial"], false);
    assert!(j["provenance"]["system"].is_object());
    let cells = j["result"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    let hogs: Vec<u64> = cells.iter().map(|c| c["hogs"].as_u64().unwrap()).collect();
    assert_eq!(hogs, [0, 0, 0, 1, 1, 1]);
    assert_eq!(cells[0]["result"]["summary"]["samples"], 1999);
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    assert_usage_errors(
        "lab clock",
        &[
            ("--calls 1", &["--samples", "2 to 100000000"]),
            ("--hogs 300", &["--hogs", "0 to 256"]),
            ("--clock sundial", &["--clock", "monotonic"]),
            ("--priority 0", &["--priority", "1 to 99"]),
            ("--load disk", &["--load", "cpu:N"]),
            ("--load cpu:0", &["--load", "1 to 256"]),
            ("--load cpu --hogs 2", &["--load", "--hogs"]),
        ],
    );
    assert_usage_errors(
        "lab overhead",
        &[
            ("--repeats 0", &["--repeats", "1 to 1000"]),
            ("--memcpy-size 1", &["--memcpy-size", "4KiB to 4GiB"]),
            ("--priority fifo:100", &["--priority", "fifo:1 to fifo:99"]),
        ],
    );
}

#[test]
fn overhead_tiny_run_writes_every_figure() {
    let p = TmpPath::new("lab-overhead.json");
    let out = firmtime(&[
        "lab",
        "overhead",
        "--repeats",
        "2",
        "--round-trips",
        "100",
        "--traps",
        "1000",
        "--clock-reads",
        "1000",
        "--memcpy-size",
        "1MiB",
        "--json",
        p.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(stdout.contains("context switch, same CPU"), "{stdout}");
    assert!(stdout.contains("PII-350"), "paper table printed:\n{stdout}");
    let j = take_json(&p);
    assert_eq!(j["kind"], "lab-overhead");
    let r = &j["result"];
    assert_eq!(r["context_switch_same_cpu"]["status"], "measured");
    assert_eq!(r["trap_getpid"]["ns"]["reps"], 2);
    assert_eq!(r["memcpy"]["bytes"], 1 << 20);
    assert_eq!(r["clock_reads"].as_array().unwrap().len(), 7);
}

/// Child pids of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                v.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
    }
    v
}

#[test]
fn ctrl_c_during_a_load_row_writes_partial_and_reaps_hogs() {
    let p = TmpPath::new("lab-clock-int.json");
    let child = Command::new(EXE)
        .args([
            "lab",
            "clock",
            "--clock",
            "monotonic",
            "--samples",
            "2000000",
            "--hogs",
            "1",
        ])
        .args(["--json", p.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let hogs = loop {
        let c = children(pid);
        if !c.is_empty() {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no load child appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    common::kill(pid, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "interrupted runs fail: {err}");
    assert!(err.contains("partial"), "{err}");
    let j = take_json(&p);
    assert_eq!(j["partial"], true);
    assert_eq!(j["result"]["partial"], true);
    let cells = j["result"]["cells"].as_array().unwrap();
    assert!(cells.len() >= 3 && cells.len() < 6, "{} rows", cells.len());
    for h in hogs {
        assert!(
            !std::path::Path::new(&format!("/proc/{h}")).exists(),
            "load child {h} was not reaped"
        );
    }
}
