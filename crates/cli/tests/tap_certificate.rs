//! The timing certificate (issue 30, item 4; docs/TAP.md §11): taken
//! before each session of `firmtime tap run` (and by `tap certify`), kept
//! in every trial's sidecar, CSV and `.abs` header, and printed by `tap
//! analyze`. The JACK tests start a private `jackd -d dummy` (SKIP without
//! jackd); sessions are a few hundred ms of trial.

mod common;

use common::{assert_ok, firmtime, text};
use firmtime_jack::{ServerKind, TestServer};
use firmtime_rt::testing::{until_checked, Attempt};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The JACK tests one at a time: each measures timing on this machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `--no-rt` unless real-time scheduling is allowed (root): the
/// certificate measures the machine as a session would run on it.
fn rt_flag() -> &'static str {
    if common::is_root() {
        "--priority=70"
    } else {
        "--no-rt"
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(name: &str) -> common::TestDir {
    common::TestDir::new(&format!("cli-tap-cert-{name}"))
}

/// 300 ms of trial with feedback 30 ms after each keystroke.
const DAF: &str = "name = \"daf\"\n[feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n\
                   [metronome]\nmspb = 100\n[end]\nduration_ms = 300\n";

/// The same with audio output (feedback as clicks of the synth).
const DAF_AUDIO: &str = "name = \"daf-audio\"\n[output]\ndevice = \"audio\"\n\
                         [feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n[end]\nduration_ms = 300\n";

fn json_of(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn server() -> Option<TestServer> {
    let srv = TestServer::start_for_test(ServerKind::Jackd, 48_000, 256);
    if srv.is_none() {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
    }
    srv
}

/// `firmtime tap run EXP` on `srv`'s server, session `session`, 2 trials.
fn run_on(
    srv: &TestServer,
    exp: &Path,
    out: &Path,
    session: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "tap",
        "run",
        exp.to_str().unwrap(),
        "--subject",
        "C1",
        "--session",
        session,
        "--trials",
        "1x2",
        "--no-prompt",
        rt_flag(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "jack",
        "--jack-server",
        srv.name(),
    ];
    args.extend_from_slice(extra);
    common::firmtime_on(srv, &args)
}

/// A check that failed while the server dropped cycles or had xruns
/// (they move JACK's frame clock): the run is waived, not judged.
fn disturbed_failure(cert: &Value) -> Option<String> {
    if cert["status"] != "failed" {
        return None;
    }
    let mut why = Vec::new();
    for k in ["audio_loop", "midi_stamping", "feedback_delay"] {
        let c = &cert[k];
        let dropped = c["xruns"].as_u64().unwrap_or(0) + c["frame_gaps"].as_u64().unwrap_or(0);
        if c["status"] == "failed" {
            assert!(
                dropped > 0,
                "{k} failed on an undisturbed server: {}",
                serde_json::to_string_pretty(cert).unwrap()
            );
            why.push(format!("{k}: {}", c["why"]));
        }
    }
    Some(why.join("; "))
}

/// Issue 30 item 4: every trial of a session carries the certificate
/// taken before it — the sidecar's `certificate` with its three checks and
/// their figures (a loop inside JACK is one period: 256 frames; probes
/// come back one period later; feedback scheduled at 30 ms), the same in
/// each trial; the CSV's `certificate` rows right after the header; the
/// `.abs` header; and `tap analyze` prints it once for the session.
#[test]
fn run_records_the_certificate_in_every_sidecar_csv_and_abs_and_analyze_prints_it() {
    let _g = serial();
    let Some(srv) = server() else { return };
    let d = tmpdir("run");
    let exp = d.join("daf.toml");
    std::fs::write(&exp, DAF).unwrap();
    let session = until_checked(3, |i| {
        let session = (i + 1).to_string();
        let out = run_on(&srv, &exp, &d, &session, &["--certify-loop", "self"]);
        assert_ok(&out);
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("firmtime: timing certificate (before the session at "),
            "{stderr}"
        );
        let side = json_of(&d.join(format!("C1-s{:0>2}-t001.json", session)));
        match disturbed_failure(&side["certificate"]) {
            Some(why) => Attempt::Waived(why),
            None => Attempt::Checked(session),
        }
    });
    let stem = |t: u32| d.join(format!("C1-s{session:0>2}-t{t:03}"));
    let c = json_of(&stem(1).with_extension("json"))["certificate"].clone();
    assert_eq!(c["version"], 1);
    assert_eq!(c["certified"], true);
    assert_eq!(c["status"], "passed", "{c:#}");
    assert_eq!(c["taken"], "before the session");
    assert!(c["at"].as_str().unwrap().ends_with('Z'), "{c}");
    assert_eq!(
        (c["sample_rate"].as_u64(), c["period"].as_u64()),
        (Some(48_000), Some(256))
    );
    assert_eq!(c["not_tested"], serde_json::json!([]), "{c:#}");
    let a = &c["audio_loop"];
    assert_eq!(a["status"], "passed");
    assert_eq!(a["frames"], 256, "a loop inside JACK is one period: {a}");
    assert_eq!(a["expected_frames"], 256);
    assert_eq!(c["loop_latency_frames"], 256);
    assert!(
        a["path"].as_str().unwrap().contains("a loop inside JACK"),
        "{a}"
    );
    let m = &c["midi_stamping"];
    assert_eq!(m["status"], "passed");
    assert_eq!(
        (m["probes"].as_u64(), m["returned"].as_u64()),
        (Some(16), Some(16))
    );
    assert_eq!(m["loop_frames"], 256, "{m}");
    assert_eq!(m["frame_error_max"], 0, "{m}");
    assert!(m["stamp_error_max_us"].as_f64().unwrap() <= m["tolerance_us"].as_f64().unwrap());
    let f = &c["feedback_delay"];
    assert_eq!(f["status"], "passed", "{f}");
    assert_eq!(f["delays_ms"], serde_json::json!([30.0]));
    assert_eq!(
        (f["scheduled"].as_u64(), f["emitted"].as_u64()),
        (Some(16), Some(16))
    );
    assert_eq!(
        (f["late"].as_u64(), f["early"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(f["output"], "MIDI");
    // The same certificate in every trial of the session.
    assert_eq!(json_of(&stem(2).with_extension("json"))["certificate"], c);
    // The CSV: the column names, then one row per check, then the events.
    let csv = std::fs::read_to_string(stem(1).with_extension("csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "kind,index,intended_us,actual_us,channel,note,velocity,on"
    );
    assert_eq!(lines[1], "certificate,1,5333,5333,,,,1", "{csv}");
    assert!(lines[2].starts_with("certificate,2,5333,"), "{csv}");
    assert!(lines[2].ends_with(",,,,1"), "{csv}");
    assert!(lines[3].starts_with("certificate,3,30000,"), "{csv}");
    assert!(!lines[4].starts_with("certificate"), "{csv}");
    let side = json_of(&stem(1).with_extension("json"));
    let events = firmtime_tap::data::read_csv(&csv).unwrap();
    assert_eq!(side["events"].as_u64().unwrap() as usize, events.len());
    assert_eq!(
        events.len(),
        lines.len() - 4,
        "the certificate's rows are no events"
    );
    // The .abs header.
    let out = firmtime(&[
        "tap",
        "export-ftap",
        stem(1).with_extension("csv").to_str().unwrap(),
    ]);
    assert_ok(&out);
    let abs = std::fs::read_to_string(stem(1).with_extension("abs")).unwrap();
    assert!(
        abs.contains("\n# timing certificate (before the session at "),
        "{abs}"
    );
    assert!(
        abs.contains("\n#   audio loop: passed: 256 frames (5.333 ms) (expected 256) through a loop inside JACK"),
        "{abs}"
    );
    assert!(
        abs.contains("\n#   MIDI stamping: passed: 16 of 16 probes back 256 frames"),
        "{abs}"
    );
    assert!(
        abs.contains("\n#   feedback delay: passed: 16 of 16 scheduled at 30.000 ms"),
        "{abs}"
    );
    // tap analyze: once for the two trials of the session, beside the table.
    let csvs: Vec<String> = (1..=2)
        .map(|t| stem(t).with_extension("csv").to_str().unwrap().to_string())
        .collect();
    let mut args = vec!["tap", "analyze"];
    args.extend(csvs.iter().map(String::as_str));
    let out = firmtime(&args);
    let stdout = text(&out.stdout);
    let head = format!(
        "C1-s{session:0>2}-t001 … C1-s{session:0>2}-t002 (2 trials): timing certificate (before the session at "
    );
    assert_eq!(stdout.matches(&head).count(), 1, "{stdout}");
    assert!(
        stdout.contains("\n  audio loop: passed: 256 frames (5.333 ms) (expected 256)"),
        "{stdout}"
    );
    args.extend(["--json", "-"]);
    let out = firmtime(&args);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for t in v["trials"].as_array().unwrap() {
        assert_eq!(t["certificate"], c);
        assert!(
            t["certificate_note"]
                .as_str()
                .unwrap()
                .starts_with("timing certificate passed: audio loop passed (5.333 ms)"),
            "{t}"
        );
    }
}

/// Without a loop to measure (a server this session did not start, no
/// --certify-loop) the audio loop is not tested and the certificate says
/// why, in the sidecar (`status`, `why`, `not_tested`) and on stderr; the
/// CSV has rows only for what was tested.
#[test]
fn a_session_without_a_loop_says_what_could_not_be_tested_and_why() {
    let _g = serial();
    let Some(srv) = server() else { return };
    let d = tmpdir("noloop");
    let exp = d.join("daf.toml");
    std::fs::write(&exp, DAF).unwrap();
    let out = run_on(&srv, &exp, &d, "1", &[]);
    assert_ok(&out);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "firmtime:   audio loop: not tested — no loop to measure: name one with --certify-loop"
        ),
        "{stderr}"
    );
    let c = json_of(&d.join("C1-s01-t001.json"))["certificate"].clone();
    assert_eq!(c["audio_loop"]["status"], "not_tested");
    assert!(c["audio_loop"]["frames"].is_null());
    assert!(c["loop_latency_frames"].is_null());
    let not_tested = c["not_tested"].as_array().unwrap();
    assert_eq!(not_tested.len(), 1, "{c:#}");
    assert!(
        not_tested[0]
            .as_str()
            .unwrap()
            .starts_with("audio loop: no loop to measure: name one with --certify-loop"),
        "{c:#}"
    );
    assert_ne!(c["midi_stamping"]["status"], "not_tested", "{c:#}");
    let csv = std::fs::read_to_string(d.join("C1-s01-t001.csv")).unwrap();
    let rows: Vec<&str> = csv
        .lines()
        .filter(|l| l.starts_with("certificate,"))
        .collect();
    assert_eq!(rows.len(), 2, "{csv}");
    assert!(
        rows[0].starts_with("certificate,2,") && rows[1].starts_with("certificate,3,"),
        "{csv}"
    );
}

/// The loopback backend has neither audio nor a frame clock: the
/// certificate says so for both, and tests the feedback delay.
/// `tap certify --json -` prints the same certificate as JSON.
#[test]
fn on_the_loopback_backend_the_certificate_names_what_it_lacks() {
    let _g = serial();
    let d = tmpdir("loopback");
    let exp = d.join("daf.toml");
    std::fs::write(&exp, DAF).unwrap();
    let out = firmtime(&[
        "tap",
        "certify",
        exp.to_str().unwrap(),
        "--backend",
        "loopback",
        rt_flag(),
        "--json",
        "-",
    ]);
    assert_ok(&out);
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["taken"], "by tap certify");
    assert_eq!(c["status"], "passed", "{c:#}");
    assert_eq!(
        c["not_tested"],
        serde_json::json!([
            "audio loop: the loopback backend has no audio path (audio loops are measured through JACK)",
            "MIDI stamping: the loopback backend has no frame clock (its input is stamped in-process)"
        ])
    );
    assert_eq!(c["midi_stamping"]["returned"], 16, "the probes came back");
    let f = &c["feedback_delay"];
    assert_eq!(
        (
            f["status"].as_str(),
            f["scheduled"].as_u64(),
            f["emitted"].as_u64()
        ),
        (Some("passed"), Some(16), Some(16))
    );
    let out = firmtime(&[
        "tap",
        "certify",
        exp.to_str().unwrap(),
        "--backend",
        "loopback",
        rt_flag(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.starts_with("timing certificate (by tap certify at "),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  not tested: MIDI stamping: the loopback backend has no frame clock"),
        "{stdout}"
    );
}

/// `--no-certify`: every sidecar says "not certified, by request", the CSV
/// has no certificate rows, analyze says so.
#[test]
fn no_certify_is_recorded_as_not_certified_by_request() {
    let d = tmpdir("nocert");
    let exp = d.join("daf.toml");
    std::fs::write(&exp, DAF).unwrap();
    let out = firmtime(&[
        "tap",
        "run",
        exp.to_str().unwrap(),
        "--subject",
        "N1",
        "--session",
        "1",
        "--backend",
        "loopback",
        "--no-rt",
        "--no-prompt",
        "--no-certify",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let c = json_of(&d.join("N1-s01-t001.json"))["certificate"].clone();
    assert_eq!(c["certified"], false);
    assert_eq!(c["status"], "not_tested");
    assert_eq!(
        c["not_tested"],
        serde_json::json!(["everything: not certified, by request (--no-certify)"])
    );
    for k in ["audio_loop", "midi_stamping", "feedback_delay"] {
        assert_eq!(
            c[k]["why"], "not certified, by request (--no-certify)",
            "{k}"
        );
    }
    let csv = std::fs::read_to_string(d.join("N1-s01-t001.csv")).unwrap();
    assert!(!csv.contains("certificate"), "{csv}");
    let out = firmtime(&[
        "tap",
        "analyze",
        d.join("N1-s01-t001.csv").to_str().unwrap(),
    ]);
    assert!(
        text(&out.stdout).contains(
            "N1-s01-t001: timing certificate: none — not certified, by request (--no-certify)"
        ),
        "{}",
        text(&out.stdout)
    );
}

/// Files from before the certificate (issue 30) still read: `tap analyze`
/// says "no timing certificate" and analyzes them, `export-ftap` writes
/// their `.abs` without one. A CSV with certificate rows and no sidecar
/// is analyzed with the rows' figures.
#[test]
fn files_from_before_are_analyzed_and_said_to_have_no_certificate() {
    let d = tmpdir("old");
    let data = root().join("crates/tap/tests/data");
    for f in ["ftap-demo-trial.csv", "ftap-demo-trial.json"] {
        std::fs::copy(data.join(f), d.join(f)).unwrap();
    }
    let old = d.join("ftap-demo-trial.csv");
    let out = firmtime(&["tap", "analyze", old.to_str().unwrap(), "--json", "-"]);
    assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["trials"][0];
    assert!(t["certificate"].is_null());
    assert_eq!(
        t["certificate_note"],
        "no timing certificate (recorded before firmtime took one)"
    );
    assert!(!t["analysis"]["phases"].as_array().unwrap().is_empty());
    let out = firmtime(&["tap", "analyze", old.to_str().unwrap()]);
    assert!(
        text(&out.stdout)
            .contains("ftap-demo-trial: no timing certificate (recorded before firmtime took one)"),
        "{}",
        text(&out.stdout)
    );
    assert_ok(&firmtime(&["tap", "export-ftap", old.to_str().unwrap()]));
    let abs = std::fs::read_to_string(d.join("ftap-demo-trial.abs")).unwrap();
    assert!(!abs.contains("certificate"), "{abs}");
    // A CSV alone, with the certificate's rows.
    let csv = std::fs::read_to_string(&old).unwrap();
    let mut lines: Vec<&str> = csv.lines().collect();
    lines.insert(1, "certificate,1,5333,5333,,,,1");
    lines.insert(2, "certificate,3,30000,31020,,,,0");
    let lone = d.join("lone.csv");
    std::fs::write(&lone, lines.join("\n") + "\n").unwrap();
    let out = firmtime(&["tap", "analyze", lone.to_str().unwrap()]);
    assert!(
        text(&out.stdout).contains(
            "lone: timing certificate (from the CSV's rows; no sidecar): audio loop passed \
             (expected 5333 µs, measured 5333 µs), feedback delay FAILED (expected 30000 µs, \
             measured 31020 µs)"
        ),
        "{}",
        text(&out.stdout)
    );
    // A malformed certificate row is refused with its line and column.
    let bad = d.join("bad.csv");
    std::fs::write(&bad, csv.replacen('\n', "\ncertificate,1,,x,,,,1\n", 1)).unwrap();
    let out = firmtime(&["tap", "analyze", bad.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("bad.csv: line 2, column 16: actual_us is not a whole number in `certificate,1,,x,,,,1`"),
        "{err}"
    );
}

/// Through a cable of known delay (`roundtrip::Cable`, 100 frames) from
/// the audio output to an input: the audio loop measures it (one period
/// for the loop through another client, plus the cable's 100 frames), and
/// the feedback is checked on the synth's audio port.
#[test]
fn certify_through_a_cable_measures_its_delay_and_feedback_on_the_audio_port() {
    let _g = serial();
    let Some(srv) = server() else { return };
    let d = tmpdir("cable");
    let exp = d.join("daf-audio.toml");
    std::fs::write(&exp, DAF_AUDIO).unwrap();
    let cable = firmtime_jack::roundtrip::Cable::start("ft-cable", Some(srv.name()), 100)
        .expect("cable starts");
    let c = until_checked(3, |_| {
        let out = common::firmtime_on(
            &srv,
            &[
                "tap",
                "certify",
                exp.to_str().unwrap(),
                "--backend",
                "jack",
                "--jack-server",
                srv.name(),
                rt_flag(),
                "--audio-out",
                cable.in_port(),
                "--loop",
                cable.out_port(),
                "--json",
                "-",
            ],
        );
        assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let c: Value = serde_json::from_slice(&out.stdout).unwrap();
        match disturbed_failure(&c) {
            Some(why) => Attempt::Waived(why),
            None => Attempt::Checked(c),
        }
    });
    let a = &c["audio_loop"];
    assert_eq!(a["status"], "passed", "{c:#}");
    assert_eq!(a["frames"], 256 + 100, "{a}");
    assert!(
        a["expected_frames"].is_null(),
        "a cable's latency is not known beforehand"
    );
    assert_eq!(
        a["path"],
        "firmtime-tap-certify-loop:out -> ft-cable:in -> a cable -> ft-cable:out -> firmtime-tap-certify-loop:in"
    );
    let f = &c["feedback_delay"];
    assert_eq!(f["output"], "audio (the synth's port)");
    assert_eq!(
        (f["status"].as_str(), f["emitted"].as_u64()),
        (Some("passed"), Some(16)),
        "{f}"
    );
    drop(cable);
}

/// The same certificate on PipeWire's JACK (a private headless PipeWire;
/// its JACK clients run in the children, so this process loads no libjack
/// for it): the loop inside the graph and the MIDI probes take one period,
/// the feedback goes out at its time.
#[test]
fn on_pipewire_the_certificate_measures_the_same_paths() {
    let _g = serial();
    let Some(srv) =
        firmtime_jack::PipeWireServer::start_for_test(48_000, 256).map(TestServer::PipeWire)
    else {
        firmtime_rt::testing::skip(format!(
            "PipeWire not installed (Debian: {})",
            ServerKind::PipeWire.install_hint()
        ));
        return;
    };
    let d = tmpdir("pipewire");
    let exp = d.join("daf.toml");
    std::fs::write(&exp, DAF).unwrap();
    let c = until_checked(3, |_| {
        let out = common::firmtime_on(
            &srv,
            &[
                "tap",
                "certify",
                exp.to_str().unwrap(),
                "--backend",
                "jack",
                "--jack-server",
                srv.name(),
                rt_flag(),
                "--loop",
                "self",
                "--json",
                "-",
            ],
        );
        assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let c: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&out.stdout), text(&out.stderr)));
        match disturbed_failure(&c) {
            Some(why) => Attempt::Waived(why),
            None => Attempt::Checked(c),
        }
    });
    assert_eq!(c["status"], "passed", "{c:#}");
    assert_eq!(c["audio_loop"]["frames"], 256, "{c:#}");
    assert_eq!(c["midi_stamping"]["loop_frames"], 256, "{c:#}");
    assert_eq!(c["midi_stamping"]["returned"], 16, "{c:#}");
    assert_eq!(c["feedback_delay"]["emitted"], 16, "{c:#}");
}
