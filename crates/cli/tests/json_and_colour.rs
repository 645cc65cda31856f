//! Every result machine-readable, every screen readable: the `--json` of
//! the commands that lacked one parse and carry their documented keys
//! (docs/VOCABULARY.md, docs/TAP.md, docs/NET.md, docs/LADSPA.md); status
//! words are coloured on a terminal only, never in a pipe or under
//! NO_COLOR; `ladspa list` stays aligned past 20 characters.

mod common;

use common::{assert_exit, assert_ok, firmtime, text, NetWorker, TestDir, EXE};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The JSON document on stdout of `out` (exit status 0 or `code`).
fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// Asserts `v` is an object with exactly `keys`.
fn assert_keys(v: &Value, keys: &[&str]) {
    let mut got: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    got.sort_unstable();
    let mut want = keys.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "{v}");
}

const SHORT_TRIAL: &str = "name = \"short\"\n[metronome]\nmspb = 50\n[end]\nduration_ms = 300\n";

#[test]
fn tap_check_json_says_valid_or_why_not_and_keeps_stdout_json_only() {
    let ok = firmtime(&[
        "tap",
        "check",
        root()
            .join("examples/sync-continuation.toml")
            .to_str()
            .unwrap(),
        "--json",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let v = stdout_json(&ok);
    assert_keys(&v, &["file", "valid", "error", "experiment"]);
    assert_eq!(v["valid"], true);
    assert!(v["error"].is_null());
    assert!(v["experiment"]["metronome"].is_object(), "{v}");
    // The human summary went to stderr.
    assert!(text(&ok.stderr).contains(": ok"), "{}", text(&ok.stderr));

    let d = TestDir::new("json-check");
    let bad = d.0.join("bad.toml");
    std::fs::write(&bad, "[feedback]\nchannel = 0\n[end]\nbeats = 4\n").unwrap();
    let json = d.0.join("check.json");
    let out = firmtime(&[
        "tap",
        "check",
        bad.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_exit(&out, 1, &["line 2, column 11"]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["experiment"].is_null());
    assert!(
        v["error"].as_str().unwrap().contains("line 2, column 11"),
        "{v}"
    );
}

#[test]
fn tap_import_ftap_json_has_the_experiment_and_its_notes() {
    let src = root().join("crates/tap/tests/data/daf-sync.ftap");
    let out = firmtime(&["tap", "import-ftap", src.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = stdout_json(&out);
    assert_keys(&v, &["source", "written", "notes", "experiment"]);
    assert!(v["written"].is_null(), "no -o: nothing written");
    assert!(v["notes"].is_array());
    assert_eq!(
        v["experiment"]["trigger"].as_array().unwrap().len(),
        5,
        "{v}"
    );
    // The TOML went to stderr, beside the JSON on stdout.
    assert!(
        text(&out.stderr).contains("# Imported from"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn tap_analyze_json_has_each_trials_phases_and_the_settings() {
    let trial = root().join("crates/tap/tests/data/trial-small.csv");
    let t = trial.to_str().unwrap();
    let v = stdout_json(&assert_ok_output(firmtime(&[
        "tap", "analyze", t, "--json",
    ])));
    assert_keys(&v, &["config", "trials"]);
    assert_eq!(v["config"]["debounce_us"], 50_000);
    assert_eq!(v["config"]["gap_factor"], 1.5);
    let trials = v["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 1);
    assert_keys(
        &trials[0],
        &[
            "trial",
            "file",
            "self_check_note",
            "flags",
            "certificate",
            "certificate_note",
            "analysis",
        ],
    );
    assert_eq!(trials[0]["trial"], "trial-small");
    assert_eq!(
        trials[0]["flags"],
        serde_json::json!([]),
        "taps in both phases"
    );
    let phases = trials[0]["analysis"]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2);
    assert_eq!(phases[1]["phase"], "continuation");
    assert_eq!(phases[1]["taps"], 3);
    // --debounce with units, and the old --debounce-ms, say the same.
    for flags in [["--debounce", "20ms"], ["--debounce-ms", "20"]] {
        let mut a = vec!["tap", "analyze", t, "--json"];
        a.extend(flags);
        let v = stdout_json(&assert_ok_output(firmtime(&a)));
        assert_eq!(v["config"]["debounce_us"], 20_000, "{flags:?}");
    }
}

fn assert_ok_output(out: Output) -> Output {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out
}

#[test]
fn tap_run_replay_and_export_json_summarise_what_they_did() {
    let d = TestDir::new("json-tap-run");
    let exp = d.0.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let json = d.0.join("session.json");
    let out = firmtime(&[
        "tap",
        "run",
        exp.to_str().unwrap(),
        "--subject",
        "J1",
        "--session",
        "1",
        "--trials",
        "1x2",
        "--backend",
        "loopback",
        "--no-rt",
        "--out",
        d.0.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_keys(
        &v,
        &["subject", "session", "seed", "out", "certificate", "trials"],
    );
    assert_eq!(v["subject"], "J1");
    let trials = v["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    for (i, t) in trials.iter().enumerate() {
        assert_keys(
            t,
            &[
                "trial",
                "experiment_file",
                "csv",
                "sidecar",
                "keystrokes",
                "beats",
                "ended",
                "incomplete",
                "input_lost",
                "unreported",
                "self_checks",
            ],
        );
        assert_eq!(t["trial"], i + 1);
        assert!(t["input_lost"].is_null(), "no input, none lost: {t}");
        assert_eq!(t["beats"], 4, "300 ms at 50 ms per beat from 100 ms");
        assert_eq!(t["ended"], "condition");
        assert_eq!(t["incomplete"], false);
        assert!(Path::new(t["csv"].as_str().unwrap()).exists(), "{t}");
        assert!(t["self_checks"]["late_outputs"].is_u64(), "{t}");
    }

    let csv = trials[0]["csv"].as_str().unwrap();
    let out = firmtime(&[
        "tap",
        "replay",
        csv,
        "--backend",
        "loopback",
        "--no-rt",
        "--json",
    ]);
    let v = stdout_json(&assert_ok_output(out));
    assert_keys(
        &v,
        &[
            "trial",
            "source",
            "notes",
            "played",
            "ports",
            "reported_sent",
            "refused",
            "late_over_1ms",
            "max_late_ns",
            "interrupted",
        ],
    );
    assert_eq!(v["source"], "outputs");
    assert_eq!(v["notes"], 8, "4 beats, each on and off");
    assert_eq!(v["played"], 8);
    assert_eq!(v["refused"], 0);

    let out = firmtime(&["tap", "export-ftap", csv, "--json"]);
    let v = stdout_json(&assert_ok_output(out));
    assert_keys(&v, &["written"]);
    let w = &v["written"][0];
    assert_eq!(w["trial"], csv);
    assert!(Path::new(w["abs"].as_str().unwrap()).exists(), "{v}");
}

#[test]
fn net_discover_and_stats_json_and_the_human_stats() {
    let w = NetWorker::start();
    let out = firmtime(&["net", "discover", "--to", &w.1, "--json"]);
    let v = stdout_json(&assert_ok_output(out));
    assert_keys(&v, &["workers"]);
    assert_eq!(v["workers"][0]["addr"], w.1.as_str());
    assert_keys(&v["workers"][0], &["addr", "sessions", "rtt_ns"]);
    assert!(v["workers"][0]["rtt_ns"].as_u64().unwrap() > 0);

    let out = firmtime(&["net", "stats", "--worker", &w.1, "--json"]);
    let v = stdout_json(&assert_ok_output(out));
    assert_keys(
        &v,
        &[
            "datagrams",
            "drops",
            "dropped",
            "periods",
            "sessions",
            "kernel_rcvbuf_errors",
            "socket_drops",
            "probes",
            "incomplete",
            "busy",
            "bad_controls",
            "cut_off",
            "recv_errors",
            "send_errors",
            "setups_refused",
            // Since the worker started, ended sessions included (issue 22).
            "periods_total",
            "late_total",
            "lost_total",
            "sessions_opened",
            "timed_periods",
            "worker_time_sum_ns",
        ],
    );
    assert_eq!(v["probes"], 1, "discover's probe was answered: {v}");
    // The worker's own socket is found, and its drops are its own: none here.
    assert_eq!(v["socket_drops"], 0, "{v}");
    // The probe of discover was one datagram on the data port.
    assert!(v["datagrams"].as_u64().unwrap() >= 1, "{v}");

    let out = firmtime(&["net", "stats", "--worker", &w.1]);
    let human = text(&assert_ok_output(out).stdout);
    assert!(
        !human.trim_start().starts_with('{'),
        "human by default: {human}"
    );
    for needle in [
        &format!("worker {}", w.1) as &str,
        "datagrams received",
        "sessions cut off by the watchdog",
        "dropped by the kernel at this worker's socket",
        "not this worker's alone",
    ] {
        assert!(human.contains(needle), "{needle:?} in\n{human}");
    }
}

#[test]
fn net_experiment_checks_its_json_path_before_running() {
    let d = TestDir::new("json-netexp");
    let bad = d.0.join("no-such-dir/results.json");
    let out = firmtime(&[
        "net",
        "experiment",
        "--quick",
        "--out",
        d.0.join("out").to_str().unwrap(),
        "--json",
        bad.to_str().unwrap(),
    ]);
    assert_exit(&out, 2, &["--json", "does not exist"]);
    assert!(!d.0.join("out").exists(), "nothing was run");
}

#[test]
fn lv2_bundle_json_lists_the_uris_ttl_files_and_libraries() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success(), "building firmtime-plugin-waste-time");
    let lib = Path::new(EXE)
        .parent()
        .unwrap()
        .join("libfirmtime_waste_time.so");
    let d = TestDir::new("json-lv2");
    let bundle = d.0.join("firmtime.lv2");
    let out = firmtime(&[
        "ladspa",
        "lv2-bundle",
        bundle.to_str().unwrap(),
        lib.to_str().unwrap(),
        "--json",
    ]);
    let v = stdout_json(&assert_ok_output(out));
    assert_keys(&v, &["dir", "plugins", "libraries"]);
    let plugins = v["plugins"].as_array().unwrap();
    assert!(!plugins.is_empty(), "{v}");
    for p in plugins {
        assert_keys(p, &["uri", "ttl"]);
        assert!(bundle.join(p["ttl"].as_str().unwrap()).exists(), "{p}");
    }
    assert_eq!(v["libraries"].as_array().unwrap().len(), 1, "{v}");
}

/// `firmtime ARGS` on a pseudo-terminal (util-linux `script`), with `env`;
/// its output as the terminal got it, or `None` without `script`.
fn on_a_terminal(args: &str, env: &[(&str, &str)]) -> Option<String> {
    if Command::new("script").arg("--version").output().is_err() {
        firmtime_rt::testing::skip("util-linux `script` is missing (apt install bsdutils)");
        return None;
    }
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &format!("{EXE} {args}"), "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Some(text(&cmd.output().unwrap().stdout))
}

#[test]
fn status_words_are_coloured_on_a_terminal_only_and_never_under_no_color() {
    const ESC: char = '\u{1b}';
    // Piped: no escape codes, whatever the terminal type.
    let piped = Command::new(EXE)
        .arg("doctor")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(!text(&piped.stdout).contains(ESC), "piped doctor coloured");
    assert!(text(&piped.stdout).contains("[pass]"));
    let example = root().join("examples/daf.toml");
    let check = format!("tap check {}", example.display());
    let piped = Command::new(EXE)
        .args(check.split(' '))
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(!text(&piped.stdout).contains(ESC));

    let Some(tty) = on_a_terminal("doctor", &[]) else {
        return;
    };
    assert!(
        tty.contains("\u{1b}[32m[pass]\u{1b}[0m"),
        "a terminal gets green [pass]:\n{tty}"
    );
    if tty.contains("[FAIL]") {
        assert!(tty.contains("\u{1b}[1;31m[FAIL]\u{1b}[0m"), "{tty}");
    }
    let tty = on_a_terminal(&check, &[]).unwrap();
    assert!(tty.contains(": \u{1b}[32mok\u{1b}[0m"), "{tty}");

    for (k, v) in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let tty = on_a_terminal("doctor", &[(k, v)]).unwrap();
        assert!(tty.contains("[pass]"), "{tty}");
        assert!(!tty.contains(ESC), "{k}={v} but coloured:\n{tty}");
    }
}

#[test]
fn ladspa_list_keeps_columns_aligned_past_twenty_characters() {
    let (short, long) = ("amp_1181.so", "delay_1898.so");
    for f in [short, long] {
        if !Path::new("/usr/lib/ladspa").join(f).exists() {
            firmtime_rt::testing::skip(format!(
                "/usr/lib/ladspa/{f} missing (apt install swh-plugins)"
            ));
            return;
        }
    }
    let d = TestDir::new("json-ladspa-list");
    std::fs::copy(Path::new("/usr/lib/ladspa").join(short), d.0.join(short)).unwrap();
    let long_name = "a_plugin_library_file_name_far_past_twenty_characters.so";
    std::fs::copy(Path::new("/usr/lib/ladspa").join(long), d.0.join(long_name)).unwrap();
    let out = Command::new(EXE)
        .args(["ladspa", "list"])
        .env("LADSPA_PATH", &d.0)
        .output()
        .unwrap();
    let table = text(&assert_ok_output(out).stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines.len() >= 3, "{table}");
    let header = lines[0];
    let at = |word: &str| header.find(word).unwrap();
    let (label, library, name) = (at("LABEL"), at("LIBRARY"), at("NAME"));
    let mut saw_long = false;
    for row in &lines[1..] {
        for col in [label, library, name] {
            assert!(
                row[..col].ends_with("  ") && !row[col..].starts_with(' '),
                "column at {col} misaligned:\n{table}"
            );
        }
        saw_long |= row[library..].starts_with(long_name);
        assert!(!row.ends_with(' '), "trailing blanks: {row:?}");
    }
    assert!(saw_long, "{table}");
}
