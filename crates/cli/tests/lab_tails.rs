//! `firmtime lab tails` as a process: a tiny run writes the table and the
//! JSON envelope with one measured cell per type × count, bad flags exit 2
//! naming the flag and range, Ctrl-C keeps what was measured (partial) and
//! leaves no worker behind, and a user without SCHED_RR gets skipped cells.

mod common;

use common::{
    assert_exit, assert_ok, assert_usage_errors, firmtime, is_root, take_json, TmpPath, EXE,
};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn tiny_run_writes_table_and_json_with_every_cell() {
    if !is_root() {
        firmtime_rt::testing::skip("needs SCHED_RR (run as root)");
        return;
    }
    let p = TmpPath::new("lab-tails-tiny.json");
    let out = firmtime(&[
        "lab",
        "tails",
        "--procs",
        "1,2",
        "--types",
        "blk,cont,percent",
        "--percents",
        "50",
        "--extra-cpu",
        "1",
        "--alarms",
        "4",
        "--max-delay",
        "3ms",
        "--seed",
        "77",
        "--json",
        p.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains("Table 6") && stdout.contains("CONFIG_HZ"),
        "{stdout}"
    );
    assert!(stdout.contains("high-resolution timers"), "{stdout}");
    assert!(
        stdout.contains("@20,000Hz (paper)") && stdout.contains("1+1CPU"),
        "{stdout}"
    );
    let v = take_json(&p);
    assert_eq!(v["kind"], "lab-tails");
    assert_eq!(v["partial"], false);
    let r = &v["result"];
    assert_eq!(r["config"]["seed"], 77);
    assert!(r["kernel"].get("config_hz").is_some() && r["kernel"].get("high_res_timers").is_some());
    let cells = r["cells"].as_array().unwrap();
    let labels: Vec<&str> = cells.iter().map(|c| c["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "BLK 1",
            "BLK 2",
            "CONT 1",
            "CONT 2",
            "50% 1",
            "50% 2",
            "50% 1+1CPU"
        ]
    );
    for c in cells {
        let m = &c["result"];
        assert_eq!(m["status"], "measured", "{c}");
        let procs = c["procs"].as_u64().unwrap();
        assert_eq!(m["summary"]["samples"], procs * 4, "{c}");
        assert_eq!(m["summary"]["missed"], 0);
        assert_eq!(m["requested"], procs * 4);
        for key in ["p90_ns", "p95_ns", "p99_ns", "p99_9_ns", "max_ns"] {
            assert!(m["summary"][key].as_i64().unwrap() >= 0, "{key} in {c}");
        }
        assert_eq!(m["conditions"]["obtained"]["policy"]["policy"], "rr");
        assert_eq!(
            m["conditions"]["obtained"]["cpus"],
            serde_json::json!([r["cpu"]])
        );
        let ps = m["processes"].as_array().unwrap();
        assert_eq!(ps.len() as u64, procs);
        assert!(ps
            .iter()
            .all(|p| p["latencies_ns"].as_array().unwrap().len() == 4));
    }
    assert_eq!(
        cells[1]["paper"]["hz100"]["max_us"], 40,
        "BLK 2 has a Table 6 row"
    );
    assert!(cells[0]["paper"].is_null(), "BLK 1 has none");
}

#[test]
fn bad_flags_exit_2_naming_the_flag_and_range() {
    assert_usage_errors(
        "lab tails --quick",
        &[
            (
                "--alarms 0",
                &["--alarms 0 is out of range: valid is 1 to 100000"],
            ),
            (
                "--percents 100",
                &["--percents 100 is out of range: valid is 1 to 99"],
            ),
            (
                "--max-delay 1ms",
                &["--max-delay 1ms is out of range: valid is 2ms to 10s"],
            ),
            (
                "--priority 0",
                &[
                    "'--priority <PRIORITY>'",
                    "give rr:P or P, a priority 1 to 99",
                ],
            ),
            (
                "--procs 0",
                &["--procs 0 is out of range: valid is 1 to 64"],
            ),
            (
                "--extra-cpu 99",
                &["--extra-cpu 99 is out of range: valid is 0 to 64"],
            ),
        ],
    );
}

#[test]
fn ctrl_c_writes_partial_result_and_reaps_workers() {
    if !is_root() {
        firmtime_rt::testing::skip("needs SCHED_RR (run as root)");
        return;
    }
    let p = TmpPath::new("lab-tails-partial.json");
    let child = Command::new(EXE)
        .args([
            "lab", "tails", "--procs", "2", "--types", "cont", "--alarms", "100000",
        ])
        .args(["--max-delay", "20ms", "--json", p.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the workers run (their parent is the child), then interrupt.
    let until = Instant::now() + Duration::from_secs(20);
    while workers_of(child.id()).len() < 2 {
        assert!(Instant::now() < until, "workers never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(600));
    common::kill(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 1, &[]);
    let v = take_json(&p);
    assert_eq!(v["partial"], true);
    let cell = &v["result"]["cells"][0]["result"];
    assert_eq!(cell["status"], "measured");
    assert_eq!(cell["partial"], true);
    for proc_ in cell["processes"].as_array().unwrap() {
        assert_eq!(proc_["interrupted"], true);
        let pid = proc_["pid"].as_u64().unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} was reaped"
        );
    }
}

/// Pids whose parent is `ppid`.
fn workers_of(ppid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name's closing parenthesis: state, ppid, …
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        if rest.split(' ').nth(1) == Some(&ppid.to_string()) {
            v.push(pid);
        }
    }
    v
}

#[test]
fn without_rt_privileges_cells_are_skipped_with_the_reason() {
    if !is_root() || !std::path::Path::new("/usr/bin/setpriv").exists() {
        firmtime_rt::testing::skip("needs root and setpriv to run as an unprivileged user");
        return;
    }
    // nobody, no capabilities, RLIMIT_RTPRIO 0 (prlimit sets it for the child).
    let out = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args(["--", "prlimit", "--rtprio=0", "--memlock=0"])
        .args([
            EXE, "lab", "tails", "--procs", "1", "--types", "blk", "--alarms", "2",
        ])
        .args(["--max-delay", "3ms", "--json", "-"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // With the JSON on stdout, the table (and its skip reason) goes to stderr.
    assert!(stderr.contains("skipped: "), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let cell = &v["result"]["cells"][0]["result"];
    assert_eq!(cell["status"], "skipped");
    assert!(!cell["reason"].as_str().unwrap().is_empty());
}
