//! `firmtime lab cyclic` and `firmtime lab sleep` as processes: tiny runs
//! write the files other tools read, bad flags exit 2 naming the flag and
//! its range, missing mechanisms are reported as skipped.

mod common;

use common::{assert_exit, assert_ok, assert_usage_errors, firmtime, read_json, text, TestDir};

#[test]
fn cyclic_writes_json_cyclictest_histogram_and_rt_tests_json() {
    let d = TestDir::new("lcyc-files");
    let json = d.0.join("c.json");
    let hist = d.0.join("h.txt");
    let rt = d.0.join("rt.json");
    let out = firmtime(&[
        "lab",
        "cyclic",
        "--duration",
        "100ms",
        "--policy",
        "other",
        "--no-mlock",
        "--cpu",
        "0",
        "--histogram-buckets",
        "200",
        "--json",
        json.to_str().unwrap(),
        "--histogram",
        hist.to_str().unwrap(),
        "--rt-tests-json",
        rt.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains("T:0") && stdout.contains("Varoquaux 2006"),
        "{stdout}"
    );

    let j = read_json(&json);
    assert_eq!(j["kind"], "lab-cyclic");
    assert_eq!(j["partial"], false);
    let t = &j["result"]["threads"][0];
    assert_eq!(t["status"], "measured");
    assert_eq!(t["cpu"], 0);
    assert_eq!(
        t["ticks"].as_u64().unwrap() + t["missed"].as_u64().unwrap(),
        100
    );
    assert!(t["conditions"]["obtained"]["tid"].as_i64().unwrap() > 0);

    let h = std::fs::read_to_string(&hist).unwrap();
    assert!(h.starts_with("# Histogram\n"), "{h}");
    assert_eq!(
        h.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count(),
        200
    );
    let parsed = firmtime_lab::output::parse_cyclictest_histogram(&h).unwrap();
    assert_eq!(parsed.threads.len(), 1);
    assert_eq!(parsed.threads[0].cycles, t["ticks"].as_u64().unwrap());

    let r = read_json(&rt);
    assert_eq!(r["file_version"], 1);
    assert_eq!(r["num_threads"], 1);
    assert_eq!(r["thread"]["0"]["cycles"], t["ticks"]);
}

#[test]
fn cyclic_bad_flags_exit_2_naming_the_flag_and_range() {
    assert_usage_errors(
        "lab cyclic",
        &[
            ("--period 1ns", &["--period 1ns is out of range"]),
            // The old spelling is read as --period and named so.
            ("--interval 1ns", &["--period 1ns is out of range"]),
            ("--duration 1ms", &["--duration"]),
            ("--cpu 4000", &["--cpu"]),
            ("--sleeper hybrid --margin 5ms", &["--margin"]),
            ("--histogram-buckets 0", &["--histogram-buckets"]),
            ("--policy other --priority 5", &["--priority"]),
            ("--policy fifo", &["--policy fifo", "--priority 80"]),
            ("--priority 150", &["--priority", "1-99"]),
            ("--load cpu:0", &["--load"]),
            ("--explain --explain-worst 0", &["--explain-worst"]),
            ("--explain bogus", &["--explain", "auto, on or off"]),
            // Stacks are recorded into the explaining trace: never dropped
            // silently when it is off.
            (
                "--kernel-stacks --no-explain",
                &["--kernel-stacks", "--no-explain"],
            ),
            (
                "--kernel-stacks --explain off",
                &["--kernel-stacks", "--explain off"],
            ),
            ("--max-latency soon", &["--max-latency"]),
            ("--max-missed many", &["--max-missed"]),
        ],
    );
}

/// Nothing measured: exit 2 (could not measure), as `watch check` without data.
#[test]
fn cyclic_without_rtc_reports_skipped_and_exits_2() {
    if std::path::Path::new("/dev/rtc").exists() || std::path::Path::new("/dev/rtc0").exists() {
        firmtime_rt::testing::skip_device("RTC-free machine", "this machine has an RTC");
        return;
    }
    let out = firmtime(&[
        "lab",
        "cyclic",
        "--duration",
        "20ms",
        "--policy",
        "other",
        "--cpu",
        "0",
        "--sleeper",
        "rtc",
    ]);
    assert_exit(&out, 2, &[]);
    assert!(
        text(&out.stdout).contains("skipped:"),
        "{}",
        text(&out.stdout)
    );
}

/// `lab cyclic` had no bar and exited 0 whatever it measured: with
/// `--max-latency` / `--max-missed` it exits 1 when the run misses them
/// (a nanosecond is a bar no wake-up meets), naming what missed; 0 with
/// `--exit-zero`, or when the bar is one no run this short can miss.
#[test]
fn cyclic_exits_1_when_it_misses_its_bar() {
    let run = |extra: &[&str]| {
        let mut a = vec![
            "lab",
            "cyclic",
            "--duration",
            "50ms",
            "--policy",
            "other",
            "--no-mlock",
            "--cpu",
            "0",
        ];
        a.extend_from_slice(extra);
        firmtime(&a)
    };
    let out = run(&["--max-latency", "1ns"]);
    assert_exit(
        &out,
        1,
        &[
            "firmtime: the run misses its bar: the worst wake-up was ",
            "more than --max-latency 1ns",
        ],
    );
    assert!(text(&out.stdout).contains("T:0"), "{}", text(&out.stdout));
    let out = run(&["--max-latency", "1ns", "--exit-zero"]);
    assert_ok(&out);
    // A 50 ms run cannot hold a wake-up 10 s late, nor miss more deadlines than it has.
    assert_ok(&run(&["--max-latency", "10s", "--max-missed", "50"]));
}

#[test]
fn sleep_writes_json_with_skipped_cells() {
    let d = TestDir::new("lcyc-sleep");
    let json = d.0.join("s.json");
    let out = firmtime(&[
        "lab",
        "sleep",
        "--sleeper",
        "clock_nanosleep,rtc",
        "--interval",
        "100us,1ms",
        "--samples",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains("clock_nanosleep") && stdout.contains("Finney 2001"),
        "{stdout}"
    );
    let j = read_json(&json);
    assert_eq!(j["kind"], "lab-sleep");
    let conds = j["result"]["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 3);
    assert_eq!(conds[0][0], "other");
    let cells = conds[0][1]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    assert_eq!(cells[0]["cell"]["achieved"]["samples"], 3);
}

#[test]
fn sleep_bad_flags_exit_2_naming_the_flag_and_range() {
    assert_usage_errors(
        "lab sleep",
        &[
            ("--interval 0s", &["--interval"]),
            ("--samples 0", &["--samples"]),
            ("--priority 100", &["--priority"]),
        ],
    );
}

/// Regression: `--policy fifo --priority 80` was refused ("fifo needs a
/// priority") though `--priority` is documented to supply it.
#[test]
fn priority_supplies_the_priority_of_a_bare_fifo_policy() {
    if !common::is_root() {
        firmtime_rt::testing::skip("SCHED_FIFO needs root here");
        return;
    }
    let d = TestDir::new("lcyc-prio");
    let json = d.0.join("c.json");
    let out = firmtime(&[
        "lab",
        "cyclic",
        "--duration",
        "30ms",
        "--policy",
        "fifo",
        "--priority",
        "42",
        "--cpu",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let j = read_json(&json);
    let obtained = &j["result"]["threads"][0]["conditions"]["obtained"]["policy"];
    assert_eq!(obtained["policy"], "fifo", "{obtained}");
    assert_eq!(obtained["priority"], 42, "{obtained}");
}

#[test]
fn cyclic_explain_adds_a_documented_block_and_prints_causes() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        firmtime_rt::testing::skip("--explain needs root (tracefs)");
        return;
    }
    let d = TestDir::new("lcyc-explain");
    let json = d.0.join("c.json");
    let out = firmtime(&[
        "lab",
        "cyclic",
        "--duration",
        "300ms",
        "--cpu",
        "0",
        "--explain",
        "--explain-above",
        "1us",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains("why the worst wake-ups were late"),
        "{stdout}"
    );
    assert!(stdout.contains("by cause: "), "{stdout}");
    let j = read_json(&json);
    let r = &j["result"];
    // The existing keys are unchanged; the block is added.
    assert_eq!(r["threads"][0]["status"], "measured");
    assert_eq!(r["config"]["explain"]["above_ns"], 1000);
    let e = &r["explain"];
    assert!(e["events_enabled"].as_array().unwrap().len() >= 2);
    assert_eq!(e["instance_removed"], true);
    let outliers = e["outliers"].as_array().unwrap();
    assert!(!outliers.is_empty(), "{e}");
    for o in outliers {
        assert!(o["cause"]["category"].is_string() && o["cause"]["detail"].is_string());
    }
    assert!(e["worst"].as_u64().unwrap() >= 1);

    // Without --explain there is no block and no explain config.
    let plain = d.0.join("p.json");
    assert_ok(&firmtime(&[
        "lab",
        "cyclic",
        "--duration",
        "50ms",
        "--cpu",
        "0",
        "--json",
        plain.to_str().unwrap(),
    ]));
    let p = read_json(&plain);
    assert!(p["result"].get("explain").is_none());
    assert!(p["result"]["config"].get("explain").is_none());

    // `--explain MODE`: the last of --explain and the old --no-explain
    // wins, `off` traces nothing, `auto` traces here (root).
    for (flags, traced) in [
        (&["--explain", "--no-explain"][..], false),
        (&["--no-explain", "--explain"][..], true),
        (&["--explain", "off"][..], false),
        (&["--explain=auto"][..], true),
    ] {
        let out = d.0.join("m.json");
        let mut a = vec!["lab", "cyclic", "--duration", "50ms", "--cpu", "0"];
        a.extend_from_slice(flags);
        a.extend_from_slice(&["--json", out.to_str().unwrap()]);
        assert_ok(&firmtime(&a));
        let m = read_json(&out);
        assert_eq!(
            m["result"]["config"].get("explain").is_some(),
            traced,
            "{flags:?}"
        );
    }
}

#[test]
fn output_paths_are_checked_before_anything_is_measured() {
    let d = TestDir::new("lcyc-outputs");
    let file = d.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let under_file = format!("{}/x.json", file.display());
    // Each would measure for an hour, then fail to write: refused at once,
    // naming the flag and the path, with nothing measured.
    assert_usage_errors(
        "lab cyclic --duration 1h --policy other --no-mlock",
        &[
            (
                "--histogram /nonexistent/x.hist",
                &[
                    "--histogram /nonexistent/x.hist",
                    "directory /nonexistent does not exist",
                    "nothing was measured",
                ],
            ),
            (
                "--rt-tests-json /nonexistent/rt.json",
                &["--rt-tests-json /nonexistent/rt.json", "does not exist"],
            ),
            (
                "--json /nonexistent/c.json",
                &["--json /nonexistent/c.json", "does not exist"],
            ),
            (
                &format!("--json {under_file}"),
                &["--json", "a-file is not a directory"],
            ),
            (
                &format!("--plots {under_file}"),
                &["--plots", "cannot be created"],
            ),
            (
                &format!("--histogram {}", d.0.display()),
                &["--histogram", "is a directory"],
            ),
        ],
    );
    assert_usage_errors(
        "lab all --quick",
        &[
            (
                &format!("--out {}", file.display()),
                &["--out", "exists and is not a directory"],
            ),
            (
                "--json /nonexistent/all.json",
                &["--json /nonexistent/all.json", "does not exist"],
            ),
        ],
    );
    assert_usage_errors(
        "lab trace --duration 1h",
        &[(
            "--png /nonexistent/q.png",
            &["--png /nonexistent/q.png", "does not exist"],
        )],
    );
}
