//! `firmtime lab all`: Ctrl-C keeps what was measured, flagged partial.

mod common;

use common::{assert_exit, read_json, EXE};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn ctrl_c_writes_a_partial_report_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("firmtime-lab-all-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let json = dir.join("all.json");
    let child = Command::new(EXE)
        .args(["lab", "all", "--quick", "--out"])
        .arg(&dir)
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start firmtime");
    // Wait until the doctor block is written, then interrupt during the first measurement.
    let start = Instant::now();
    while !dir.join("doctor.json").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "doctor.json never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(common::kill(child.id(), libc::SIGINT), 0);
    let out = child.wait_with_output().expect("wait");
    assert_exit(&out, 1, &[]);

    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md written");
    assert!(report.contains("**PARTIAL"), "report not flagged partial");
    assert!(report.contains("## Verdict"));
    let v = read_json(&json);
    assert_eq!(v["kind"], "lab-all");
    assert_eq!(v["partial"], true);
    let files: Vec<&str> = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("name"))
        .collect();
    assert!(
        files.contains(&"doctor.json") && files.contains(&"report.md"),
        "{files:?}"
    );
    // Every file listed exists; nothing half-written is left behind.
    for f in &files {
        assert!(dir.join(f).exists(), "{f} listed but missing");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quick_and_full_exclude_each_other() {
    common::assert_usage_error(
        &["lab", "all", "--quick", "--full", "--out", "/nonexistent"],
        &["--full", "--quick"],
    );
}
