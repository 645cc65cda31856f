//! `firmtime lab trace` / `lab billing` as processes: a tiny run prints the
//! paper's tables with the kernel line and writes the JSON envelope, leaves
//! no tracefs instance behind, traces a command, and bad flags exit 2
//! naming the flag and its range.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_firmtime");

fn firmtime(args: &[&str]) -> Output {
    Command::new(EXE).args(args).output().unwrap()
}

fn json_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "firmtime-lab-trace-{name}-{}.json",
        std::process::id()
    ))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    if !root {
        eprintln!("skipped: lab trace needs root (tracefs)");
    }
    root
}

#[test]
fn tiny_trace_prints_tables_and_writes_json() {
    if !is_root() {
        return;
    }
    let p = json_path("tiny");
    let out = firmtime(&[
        "lab",
        "trace",
        "--duration",
        "300ms",
        "--workload",
        "sorter,typist",
        "--buffer-kb",
        "512",
        "--json",
        p.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Table 4"));
    assert!(stdout.contains("Table 5"));
    assert!(
        stdout.contains("HZ="),
        "every table states the kernel: {stdout}"
    );
    assert!(stdout.contains("sorter (CPU-bound)"));
    assert!(stdout.contains("28.81"), "paper figure beside");
    assert!(stderr.contains("removed"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let _ = std::fs::remove_file(&p);
    assert_eq!(v["kind"], "lab-trace");
    assert_eq!(v["partial"], false);
    let r = &v["result"];
    assert_eq!(r["instance_removed"], true);
    assert!(!std::path::Path::new(r["instance"].as_str().unwrap()).exists());
    assert_eq!(r["apps"].as_array().unwrap().len(), 2);
    assert!(r["apps"][0]["quantum"]["p50_ns"].is_i64());
    assert!(r["kernel"]["config_hz"].is_u64());
}

#[test]
fn billing_prints_table3_and_the_accounting_scheme() {
    if !is_root() {
        return;
    }
    let out = firmtime(&[
        "lab",
        "billing",
        "--duration",
        "300ms",
        "--workload",
        "xserver",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Table 3"));
    assert!(stdout.contains("xserver (X Server)"));
    assert!(stdout.contains("0.0202"), "paper figure beside");
    assert!(stdout.contains("cputime_adjust"));
}

#[test]
fn a_command_is_traced_until_it_exits() {
    if !is_root() {
        return;
    }
    let out = firmtime(&[
        "lab",
        "trace",
        "--buffer-kb",
        "256",
        "--",
        "sh",
        "-c",
        "sleep 0.05",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("sh -c sleep 0.05"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited with status 0"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (vec!["lab", "trace", "--duration", "1ms"], "--duration"),
        (vec!["lab", "trace", "--workload", "emacs"], "--workload"),
        (vec!["lab", "trace", "--buffer-kb", "1"], "--buffer-kb"),
        (vec!["lab", "trace", "--pids", "999999999"], "--pids"),
        (
            vec!["lab", "trace", "--overhead", "--pairs", "0"],
            "--pairs",
        ),
        (
            vec!["lab", "trace", "--overhead", "--slice", "1ms"],
            "--slice",
        ),
        (
            vec!["lab", "trace", "--overhead", "--rates", "0,500000"],
            "--rates",
        ),
        (vec!["lab", "trace", "--overhead", "--cpu", "4096"], "--cpu"),
        (vec!["lab", "billing", "--duration", "2h"], "--duration"),
    ] {
        let out = firmtime(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(err.contains("valid"), "{args:?}: {err}");
    }
}
