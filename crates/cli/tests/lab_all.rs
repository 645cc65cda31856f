//! `firmtime lab all`: Ctrl-C keeps what was measured, flagged partial.

mod common;

use common::{assert_exit, read_json, EXE};
use std::process::Command;
use std::time::{Duration, Instant};

/// Interrupted, `lab all` exits 1 when what it measured already says "Not
/// reliably", else 2 (could not measure everything): never 0.
#[test]
fn ctrl_c_writes_a_partial_report_and_exits_1_or_2_by_its_verdict() {
    // The run's --out directory, in a scratch directory removed on drop
    // (also when the test fails).
    let scratch = common::TestDir::new("lab-all-ctrl-c");
    let dir = scratch.join("out");
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

    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md written");
    assert!(report.contains("**PARTIAL"), "report not flagged partial");
    assert!(report.contains("## Verdict"));
    let v = read_json(&json);
    assert_eq!(v["kind"], "lab-all");
    assert_eq!(v["partial"], true);
    let answer = v["verdict"]["answer"].as_str().expect("verdict.answer");
    assert!(
        ["meets", "misses", "unmeasured"].contains(&answer),
        "{answer}"
    );
    assert_exit(&out, if answer == "misses" { 1 } else { 2 }, &[]);
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
}

#[test]
fn quick_and_full_exclude_each_other() {
    common::assert_usage_error(
        &["lab", "all", "--quick", "--full", "--out", "/nonexistent"],
        &["--full", "--quick"],
    );
}

#[test]
fn explain_takes_auto_on_or_off_and_refuses_anything_else() {
    common::assert_usage_error(
        &["lab", "all", "--explain", "maybe", "--out", "/nonexistent"],
        &["--explain", "auto, on or off"],
    );
    // --kernel-stacks records into the explaining trace: refused with it
    // off, never dropped silently.
    common::assert_usage_error(
        &[
            "lab",
            "all",
            "--kernel-stacks",
            "--no-explain",
            "--out",
            "/nonexistent",
        ],
        &["--kernel-stacks", "--no-explain"],
    );
    // The old spelling still parses (as `--explain off`), hidden.
    let help = Command::new(EXE)
        .args(["lab", "all", "--no-explain", "--help"])
        .output()
        .expect("run firmtime");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--explain [<MODE>]"), "{text}");
    assert!(!text.contains("--no-explain"), "{text}");
}

/// Piped, `lab all` said nothing for minutes: each step is a line on
/// stderr, with the time so far and an estimate of the time left.
#[test]
fn piped_lab_all_prints_a_line_per_step_with_the_time_left() {
    use std::io::{BufRead, BufReader};
    let scratch = common::TestDir::new("lab-all-lines");
    let dir = scratch.join("out");
    let mut child = Command::new(EXE)
        .args(["lab", "all", "--quick", "--no-explain", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start firmtime");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Three steps are enough to see the lines and the estimate; then stop.
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !lines
        .iter()
        .any(|l: &String| l.starts_with("firmtime: step 3/"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = common::kill(child.id(), libc::SIGKILL);
                let _ = child.wait();
                panic!(
                    "no third step line within 300 s; stderr so far:\n{}",
                    lines.join("\n")
                );
            }
        }
    }
    assert_eq!(common::kill(child.id(), libc::SIGINT), 0);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("stdout");
    let status = child.wait().expect("wait");
    reader.join().expect("reader");
    lines.extend(rx.try_iter());
    // Interrupted: 1 when the verdict on what was measured is "Not reliably", else 2.
    let want = if stdout.starts_with("Not reliably") {
        1
    } else {
        2
    };
    assert_eq!(status.code(), Some(want), "interrupted, verdict: {stdout}");
    let steps: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("firmtime: step "))
        .collect();
    assert!(steps.len() >= 3, "{lines:#?}");
    let of = steps[0]
        .strip_prefix("firmtime: step 1/")
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("first step line: {}", steps[0]));
    assert!(of >= 10, "quick runs at least 10 steps, said {of}");
    for (i, l) in steps.iter().enumerate() {
        assert!(
            l.starts_with(&format!("firmtime: step {}/{of}: ", i + 1)),
            "{l}"
        );
        assert!(l.contains(" so far, "), "{l}");
        if i > 0 {
            assert!(l.contains(" left)"), "no estimate in {l}");
        }
    }
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("firmtime: interrupted")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("firmtime: lab all stopped in ")),
        "{lines:#?}"
    );
}
