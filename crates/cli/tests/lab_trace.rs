//! `firmtime lab trace` / `lab billing` as processes: a tiny run prints the
//! paper's tables with the kernel line and writes the JSON envelope, leaves
//! no tracefs instance behind, traces a command, and bad flags exit 2
//! naming the flag and its range.

mod common;

use common::{assert_ok, assert_usage_errors, firmtime, take_json, text, TmpPath};

fn is_root() -> bool {
    let root = common::is_root();
    if !root {
        firmtime_rt::testing::skip("lab trace needs root (tracefs)");
    }
    root
}

#[test]
fn tiny_trace_prints_tables_and_writes_json() {
    if !is_root() {
        return;
    }
    let p = TmpPath::new("lab-trace-tiny.json");
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
    let stdout = assert_ok(&out);
    let stderr = text(&out.stderr);
    assert!(stdout.contains("Table 4"));
    assert!(stdout.contains("Table 5"));
    assert!(
        stdout.contains("HZ="),
        "every table states the kernel: {stdout}"
    );
    assert!(stdout.contains("sorter (CPU-bound)"));
    assert!(stdout.contains("28.81"), "paper figure beside");
    assert!(stderr.contains("removed"));
    let v = take_json(&p);
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
    let stdout = assert_ok(&out);
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
    assert!(assert_ok(&out).contains("sh -c sleep 0.05"));
    assert!(text(&out.stderr).contains("exited with status 0"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    assert_usage_errors(
        "lab",
        &[
            ("trace --duration 1ms", &["--duration", "valid"]),
            ("trace --workload emacs", &["--workload", "valid"]),
            ("trace --buffer-kb 1", &["--buffer-kb", "valid"]),
            ("trace --pids 999999999", &["--pids", "valid"]),
            ("trace --overhead --repeats 0", &["--repeats", "valid"]),
            ("trace --overhead --slice 1ms", &["--slice", "valid"]),
            ("trace --overhead --rates 0,500000", &["--rates", "valid"]),
            ("trace --overhead --cpu 4096", &["--cpu", "valid"]),
            (
                "trace --overhead --array-size 1KiB",
                &["--array-size", "valid"],
            ),
            ("billing --duration 2h", &["--duration", "valid"]),
            // `lab quanta`, the measurement's name, is `lab trace`.
            ("quanta --duration 1ms", &["--duration", "valid"]),
            ("quanta --overhead --cpu 4096", &["--cpu", "valid"]),
        ],
    );
}
