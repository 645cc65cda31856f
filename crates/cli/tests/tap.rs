//! Runs `firmtime tap …`: check, import-ftap, analyze; exit codes and files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn firmtime(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_firmtime"))
        .args(args)
        .output()
        .expect("run firmtime")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("firmtime-cli-tap-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn check_accepts_every_example_and_rejects_a_bad_file_with_line_and_column() {
    for f in std::fs::read_dir(root().join("examples")).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let out = firmtime(&["tap", "check", p.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
        }
    }
    let d = tmpdir("check");
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "[feedback]\nchannel = 0\n[end]\nbeats = 4\n").unwrap();
    let out = firmtime(&["tap", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2, column 11: a MIDI channel must be 1–16, got 0"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn import_ftap_writes_a_valid_experiment_file() {
    let d = tmpdir("import");
    let out_file = d.join("daf.toml");
    let src = root().join("crates/tap/tests/data/daf-sync.ftap");
    let out = firmtime(&[
        "tap",
        "import-ftap",
        src.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = firmtime(&["tap", "check", out_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("trigger 5 at keystroke 60: end"), "{text}");

    let bad = root().join("crates/tap/tests/data/unknown-keyword.ftap");
    let out = firmtime(&["tap", "import-ftap", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("line 4, column 1: unknown FTAP keyword `FEED_DELAY`"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn analyze_writes_summary_and_tap_files() {
    let d = tmpdir("analyze");
    let trial = root().join("crates/tap/tests/data/trial-small.csv");
    let out = firmtime(&[
        "tap",
        "analyze",
        trial.to_str().unwrap(),
        "--out",
        d.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sum = std::fs::read_to_string(d.join("summary.csv")).unwrap();
    assert_eq!(sum.lines().count(), 3);
    assert!(sum
        .lines()
        .nth(2)
        .unwrap()
        .starts_with("trial-small,continuation,3,0,1,2,505000.000,"));
    let taps = std::fs::read_to_string(d.join("trial-small-taps.csv")).unwrap();
    assert_eq!(taps.lines().count(), 6);

    let out = firmtime(&[
        "tap",
        "analyze",
        trial.to_str().unwrap(),
        "--gap-factor",
        "0.5",
    ]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    std::fs::remove_dir_all(&d).unwrap();
}
