//! `firmtime lab frames` and `firmtime lab interrupts` as processes: tiny
//! runs print the paper beside the machine and write their JSON; bad flags
//! exit 2 naming the flag and its range.

use std::path::PathBuf;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_firmtime");

fn firmtime(args: &[&str]) -> Output {
    Command::new(EXE).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "firmtime-lframes-{name}-{}.json",
        std::process::id()
    ))
}

#[test]
fn frames_prints_the_paper_and_the_machine_and_writes_json() {
    let json = tmp("frames");
    let out = firmtime(&[
        "lab",
        "frames",
        "--fps",
        "100",
        "--duration",
        "200ms",
        "--sleepers",
        "clock_nanosleep,rtc",
        "--policies",
        "other",
        "--loads",
        "none,cpu:1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    assert!(stdout.contains("Etsion et al. 2003"), "{stdout}");
    assert!(
        stdout.contains("HZ=") && stdout.contains("clocksource"),
        "{stdout}"
    );
    assert!(
        stdout.contains("HZ=100") && stdout.contains("HZ=1000"),
        "{stdout}"
    );
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(j["kind"], "lab-frames");
    assert_eq!(j["partial"], false);
    let cells = j["result"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "2 sleepers × 1 policy × 2 loads");
    assert_eq!(cells[0]["result"]["played"], 20);
    assert!(cells[0]["load"].is_null());
    assert_eq!(cells[2]["load"]["kind"], "cpu");
    assert_eq!(cells[2]["result"]["played"], 20);
    let outcomes = j["result"]["load"].as_array().unwrap();
    assert_eq!(outcomes.len(), 1, "one load child, reaped");
    if !std::path::Path::new("/dev/rtc").exists() && !std::path::Path::new("/dev/rtc0").exists() {
        assert_eq!(cells[1]["result"]["status"], "skipped");
        assert!(text(&out.stderr).contains("skipped rtc"));
    }
}

#[test]
fn frames_bad_flags_exit_2_naming_the_flag() {
    for (args, want) in [
        (vec!["--fps", "0"], "--fps"),
        (vec!["--duration", "1ms"], "--duration"),
        (vec!["--loads", "bogus"], "--loads"),
        (vec!["--alarm", "0s"], "--alarm"),
        (vec!["--policies", "fifo:200"], "--policies"),
    ] {
        let mut a = vec!["lab", "frames"];
        a.extend(args.iter());
        let out = firmtime(&a);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let out = firmtime(&["lab", "frames", "--fps", "0"]);
    assert!(text(&out.stderr).contains("1 to 1000"));
}

#[test]
fn interrupts_runs_a_tiny_matrix_and_writes_json() {
    let json = tmp("intr");
    let out = firmtime(&[
        "lab",
        "interrupts",
        "--rates",
        "1000",
        "--levels",
        "1",
        "--cell",
        "100ms",
        "--repeats",
        "1",
        "--array-size",
        "16KiB",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    assert!(
        stdout.contains("Etsion et al. 2003") && stdout.contains("HZ="),
        "{stdout}"
    );
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(j["kind"], "lab-interrupts");
    assert_eq!(j["result"]["array_elements"], 4096);
    assert_eq!(j["result"]["cells"].as_array().unwrap().len(), 2);
}

#[test]
fn interrupts_bad_flags_exit_2_naming_the_flag() {
    for (args, want) in [
        (vec!["--rates", "0"], "--rates"),
        (vec!["--levels", "65"], "--levels"),
        (vec!["--cell", "1ms"], "--cell"),
        (vec!["--repeats", "0"], "--repeats"),
        (vec!["--array-size", "1"], "--array-size"),
    ] {
        let mut a = vec!["lab", "interrupts"];
        a.extend(args.iter());
        let out = firmtime(&a);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
