//! Runs `firmtime tap …`: check, import-ftap, export-ftap, analyze; exit codes and files.

mod common;

use common::{assert_exit, assert_ok, firmtime, EXE};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh scratch directory for one test, removed on drop (also when the
/// test fails).
fn tmpdir(name: &str) -> common::TestDir {
    common::TestDir::new(&format!("cli-tap-{name}"))
}

/// `firmtime tap check` refuses (exit 1) a file in `dir` holding `toml`,
/// saying `message`.
fn assert_check_refuses(dir: &Path, toml: &str, message: &str) {
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, toml).unwrap();
    assert_exit(
        &firmtime(&["tap", "check", bad.to_str().unwrap()]),
        1,
        &[message],
    );
}

#[test]
fn check_accepts_every_example_and_rejects_a_bad_file_with_line_and_column() {
    for f in std::fs::read_dir(root().join("examples")).unwrap() {
        let p = f.unwrap().path();
        // examples/rack-*.toml are `firmtime rack` files, not experiments.
        let rack = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("rack-"));
        if p.extension().is_some_and(|x| x == "toml") && !rack {
            let out = firmtime(&["tap", "check", p.to_str().unwrap()]);
            assert!(assert_ok(&out).contains(": ok"), "{}", p.display());
        }
    }
    let d = tmpdir("check");
    assert_check_refuses(
        &d,
        "[feedback]\nchannel = 0\n[end]\nbeats = 4\n",
        "line 2, column 11: a MIDI channel must be 1–16, got 0",
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
    assert_ok(&out);
    let out = firmtime(&["tap", "check", out_file.to_str().unwrap()]);
    let text = assert_ok(&out);
    assert!(
        text.contains("trigger 5 at keystroke 60: the trial ends"),
        "{text}"
    );

    let bad = root().join("crates/tap/tests/data/unknown-keyword.ftap");
    let out = firmtime(&["tap", "import-ftap", bad.to_str().unwrap()]);
    assert_exit(
        &out,
        1,
        &["line 4, column 1: unknown FTAP keyword `FEED_DELAY`"],
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// `firmtime tap analyze` of the tap crate's small trial, with `flags`.
fn analyze_small_trial(flags: &[&str]) -> Output {
    let trial = root().join("crates/tap/tests/data/trial-small.csv");
    let mut args = vec!["tap", "analyze", trial.to_str().unwrap()];
    args.extend_from_slice(flags);
    firmtime(&args)
}

#[test]
fn analyze_writes_summary_and_tap_files() {
    let d = tmpdir("analyze");
    let out = analyze_small_trial(&["--out", d.to_str().unwrap()]);
    assert_ok(&out);
    let sum = std::fs::read_to_string(d.join("summary.csv")).unwrap();
    assert_eq!(sum.lines().count(), 3);
    assert!(sum
        .lines()
        .nth(2)
        .unwrap()
        .starts_with("trial-small,continuation,3,0,1,2,505000.000,"));
    let taps = std::fs::read_to_string(d.join("trial-small-taps.csv")).unwrap();
    assert_eq!(taps.lines().count(), 6);

    let out = analyze_small_trial(&["--gap-factor", "0.5"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn analyze_says_what_a_trials_self_checks_flag() {
    let d = tmpdir("analyze-checks");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    assert_ok(&firmtime(&run_args(e, o, "1", "1x2")));
    // Trial 2's sidecar as a trial with late outputs and xruns would have it.
    let side = d.join("K9-s01-t002.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    let sc = &mut v["self_checks"];
    sc["late_outputs"] = 3.into();
    sc["xruns"] = 1.into();
    sc["late_explained"] = 3.into();
    sc["late_causes"] = serde_json::json!([{
        "side": "setup", "category": "delay_too_short", "name": "",
        "cause": "feedback delay shorter than the backend's minimum",
        "outputs": 3, "worst_ns": 5_330_000, "detail": "…"
    }]);
    std::fs::write(&side, v.to_string()).unwrap();
    let t1 = d.join("K9-s01-t001.csv");
    let t2 = d.join("K9-s01-t002.csv");
    let out = firmtime(&["tap", "analyze", t1.to_str().unwrap(), t2.to_str().unwrap()]);
    // Metronome-only trials have no taps: flagged, exit status 1.
    let stderr = assert_exit(
        &out,
        1,
        &[
            "FLAG K9-s01-t001: no taps at all",
            "FLAG K9-s01-t002: no taps at all",
            "2 of 2 trial(s) flagged",
        ],
    );
    assert!(
        !stderr.contains("K9-s01-t001: self-checks"),
        "trial 1's self-checks are clean: {stderr}"
    );
    assert!(
        stderr.contains(
            "K9-s01-t002: self-checks: 1 xruns, 0 dropped cycles; late 3 (> 1000 µs): 3 \
             feedback delay shorter than the backend's minimum (worst 5.33 ms); 3 of 3 have a cause"
        ),
        "{stderr}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// A synchronization–continuation trial whose keyboard went silent when
/// the metronome stopped: 12 beats at 500 ms, a tap on each, then nothing
/// until the 60-s end.
fn silent_continuation_csv() -> String {
    let mut csv = format!("{}\n", firmtime_tap::data::CSV_HEADER);
    for k in 0..12i64 {
        let b = k * 500_000;
        csv.push_str(&format!("metronome,{},{b},{b},10,76,100,1\n", k + 1));
        csv.push_str(&format!("input,{},,{},1,60,80,1\n", k + 1, b + 10_000));
    }
    csv.push_str("end,0,60000000,60000000,,,,\n");
    csv
}

/// Regression: a file `tap analyze` cannot read or parse exited 1 — the
/// status of "trials flagged" — where TAP.md and --help say 2.
#[test]
fn analyze_exits_2_naming_a_file_it_cannot_read_or_parse() {
    let d = tmpdir("analyze-bad-file");
    let bad = d.join("bad.csv");
    std::fs::write(&bad, "this is not,a tap file\n1,2\n").unwrap();
    let run = firmtime(&["tap", "analyze", bad.to_str().unwrap()]);
    assert_exit(&run, 2, &["bad.csv"]);
    let missing = d.join("missing.csv");
    let run = firmtime(&["tap", "analyze", missing.to_str().unwrap()]);
    assert_exit(&run, 2, &["cannot read", "missing.csv"]);
}

/// Regression (issue 28, item 2): `tap analyze` reported the continuation
/// phase of a trial whose keyboard was gone as "0 taps, 0 missing" and
/// exited 0. It says FLAG (the phase and why), still writes every file,
/// and exits 1; a trial whose sidecar records the loss of its input is
/// flagged with the cause and time.
#[test]
fn analyze_flags_a_phase_with_no_input_where_input_was_expected_and_exits_1() {
    let d = tmpdir("analyze-flags");
    let silent = d.join("silent.csv");
    std::fs::write(&silent, silent_continuation_csv()).unwrap();
    let out = d.join("out");
    let run = firmtime(&[
        "tap",
        "analyze",
        silent.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
        d.join("a.json").to_str().unwrap(),
    ]);
    let err = assert_exit(
        &run,
        1,
        &[
            "FLAG silent: continuation phase: no taps in the 54.250 s the trial went on after the metronome (5.750–60.000 s)",
            "1 of 1 trial(s) flagged",
        ],
    );
    assert!(!err.contains("synchronization phase:"), "{err}");
    // Data collected is kept: the figures are written, flagged.
    let sum = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert!(sum.contains("silent,synchronization,12,"), "{sum}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a.json")).unwrap()).unwrap();
    let flags = &v["trials"][0]["flags"];
    assert_eq!(flags.as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!(
        v["trials"][0]["analysis"]["flags"][0]["phase"], "continuation",
        "{v:#}"
    );
    // A trial whose input was lost, as `tap run` records it.
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    assert_ok(&firmtime(&run_args(e, o, "1", "1")));
    let side = d.join("K9-s01-t001.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    v["incomplete"] = true.into();
    v["input_lost"] = serde_json::json!({
        "cause": "client_gone", "at_us": 6_012_345,
        "words": "the client feeding the input went away: tapper:out no longer feeds firmtime-tap:in (its client went away)"
    });
    std::fs::write(&side, v.to_string()).unwrap();
    let t = d.join("K9-s01-t001.csv");
    assert_exit(
        &firmtime(&["tap", "analyze", t.to_str().unwrap()]),
        1,
        &[
            "K9-s01-t001: self-checks: incomplete (input lost: client_gone)",
            "FLAG K9-s01-t001: input lost at 6.012 s (client_gone): the client feeding the input went away: \
             tapper:out no longer feeds firmtime-tap:in (its client went away); the trial ended there",
        ],
    );
    std::fs::remove_dir_all(&d).unwrap();
}

const SHORT_TRIAL: &str = "name = \"short\"\n[metronome]\nmspb = 50\n[end]\nduration_ms = 300\n";

fn run_args<'a>(exp: &'a str, out: &'a str, session: &'a str, trials: &'a str) -> Vec<&'a str> {
    vec![
        "tap",
        "run",
        exp,
        "--subject",
        "K9",
        "--session",
        session,
        "--trials",
        trials,
        "--backend",
        "loopback",
        "--out",
        out,
    ]
}

#[test]
fn run_refuses_a_cpu_that_is_not_online_before_opening_anything() {
    let d = tmpdir("run-cpu");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let mut a = run_args(exp.to_str().unwrap(), d.to_str().unwrap(), "1", "1");
    a.extend(["--cpu", "4096"]);
    common::assert_usage_error(&a, &["--cpu 4096: not an online CPU; online CPUs are "]);
    assert!(!d.join("K9-s01-t001.csv").exists(), "no trial run");
}

#[test]
fn run_writes_each_trial_and_refuses_to_overwrite_a_session() {
    let d = tmpdir("run");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    let mut a = run_args(e, o, "1", "1x3");
    a.extend(["--order", "random", "--seed", "7"]);
    let out = firmtime(&a);
    assert_ok(&out);
    for t in 1..=3 {
        let stem = d.join(format!("K9-s01-t{t:03}"));
        let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
        let rows = firmtime_tap::data::read_csv(&csv).unwrap();
        // 300 ms at 50 ms per beat from 100 ms: beats at 100, 150, 200, 250 ms.
        let beats = rows
            .iter()
            .filter(|r| r.kind == firmtime_tap::data::EventKind::Metronome && r.note.unwrap().on)
            .count();
        assert_eq!(beats, 4, "trial {t}");
        let side: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
                .unwrap();
        assert_eq!(side["trial"], t);
        assert_eq!(side["seed"], 7);
        assert_eq!(side["incomplete"], false);
        assert_eq!(side["events"].as_u64().unwrap() as usize, rows.len());
    }
    // The same session again would overwrite: refused, nothing written.
    let out = firmtime(&run_args(e, o, "1", "1"));
    assert_exit(&out, 1, &["never overwritten"]);
    let out = firmtime(&run_args(e, o, "2", "3"));
    assert_eq!(out.status.code(), Some(2), "no experiment 3: usage error");
    std::fs::remove_dir_all(&d).unwrap();
}

/// kill -9 mid-session: every finished trial is whole and parseable, no
/// partial trial file exists; only hidden temp files may be left.
#[test]
fn kill_9_mid_session_loses_only_the_running_trial() {
    let d = tmpdir("kill9");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    let mut child = Command::new(EXE)
        .args(run_args(e, o, "1", "1x20"))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until a few trials are written, then kill mid-session.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let n = firmtime_tap::session::existing_trial_files(&d, "K9", 1).len();
        if n >= 6 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(150));
    common::kill(child.id(), libc::SIGKILL);
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed before the session ended");
    let mut csvs = 0;
    for entry in std::fs::read_dir(&d).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == "short.toml" || firmtime_tap::session::is_temp_file(&name) {
            continue;
        }
        let p = d.join(&name);
        if let Some(stem) = name.strip_suffix(".csv") {
            let rows = firmtime_tap::data::read_csv(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                rows.iter()
                    .any(|r| r.kind == firmtime_tap::data::EventKind::End),
                "{name} is whole"
            );
            csvs += 1;
            // A sidecar, if written, is whole and counts the rows.
            if let Ok(j) = std::fs::read_to_string(d.join(format!("{stem}.json"))) {
                let side: serde_json::Value = serde_json::from_str(&j).unwrap();
                assert_eq!(side["events"].as_u64().unwrap() as usize, rows.len());
            }
        } else if let Some(stem) = name.strip_suffix(".json") {
            assert!(d.join(format!("{stem}.csv")).exists(), "{name} has its CSV");
        } else {
            panic!("unexpected file {name}");
        }
    }
    assert!(
        (3..20).contains(&csvs),
        "{csvs} trials finished before the kill"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

fn jackd_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("jackd").is_file()))
}

#[test]
fn run_renders_audio_output_through_a_dummy_jack_server_and_refuses_other_backends() {
    let d = tmpdir("audio");
    let exp = d.join("audio.toml");
    std::fs::write(
        &exp,
        "name = \"audio\"\n[output]\ndevice = \"audio\"\nsound = \"tone\"\n\
         [metronome]\nmspb = 200\nchannel = 10\n[masking]\nsource = \"audio\"\n[end]\nbeats = 4\n",
    )
    .unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    let mut args = run_args(e, o, "1", "1");
    args.retain(|a| *a != "loopback" && *a != "--backend");
    args.extend(["--backend", "loopback"]);
    let out = firmtime(&args);
    assert_exit(&out, 2, &["JACK backend only"]);
    if !jackd_installed() {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return;
    }
    let mut args = run_args(e, o, "2", "1");
    args.retain(|a| *a != "loopback" && *a != "--backend");
    args.extend(["--backend", "jack", "--jack-dummy"]);
    let out = firmtime(&args);
    assert_ok(&out);
    let stem = d.join("K9-s02-t001");
    let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
    let beats = csv
        .lines()
        .filter(|l| l.starts_with("metronome,") && l.ends_with(",1"))
        .count();
    assert_eq!(beats, 4, "{csv}");
    assert!(csv.lines().any(|l| l.starts_with("masking,0,")), "{csv}");
    let side = std::fs::read_to_string(stem.with_extension("json")).unwrap();
    assert!(side.contains("firmtime-tap:audio"), "{side}");
    assert!(side.contains("\"sound\": \"tone\"") || side.contains("\"sound\":\"tone\""));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Checks the PNG signature and returns the IHDR chunk's width and height.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        b.len() > 1000,
        "{} is only {} bytes",
        path.display(),
        b.len()
    );
    assert_eq!(
        &b[..8],
        b"\x89PNG\r\n\x1a\n",
        "{}: PNG signature",
        path.display()
    );
    assert_eq!(&b[12..16], b"IHDR", "{}", path.display());
    (
        u32::from_be_bytes(b[16..20].try_into().unwrap()),
        u32::from_be_bytes(b[20..24].try_into().unwrap()),
    )
}

#[test]
fn analyze_writes_iti_asynchrony_and_summary_plots() {
    let d = tmpdir("plots");
    let out = analyze_small_trial(&["--out", d.to_str().unwrap()]);
    assert_exit(&out, 0, &["3 plots (PNG)"]);
    for f in [
        "trial-small-iti.png",
        "trial-small-asynchrony.png",
        "summary.png",
    ] {
        assert_eq!(png_size(&d.join(f)), firmtime_plot::SIZE, "{f}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn check_shows_pink_masking_noise_and_rejects_an_unknown_colour_with_line_and_column() {
    let d = tmpdir("noise");
    let pink = d.join("pink.toml");
    std::fs::write(
        &pink,
        "[masking]\nsource = \"audio\"\nnoise = \"pink\"\n[end]\nbeats = 4\n",
    )
    .unwrap();
    let out = firmtime(&["tap", "check", pink.to_str().unwrap()]);
    let text = assert_ok(&out);
    assert!(
        text.contains("masking: pink noise rendered as audio at -20 dBFS"),
        "{text}"
    );
    assert_check_refuses(
        &d,
        "[masking]\nsource = \"audio\"\nnoise = \"brown\"\n[end]\nbeats = 4\n",
        "line 3, column 9: unknown variant `brown`, expected `white` or `pink`",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn replay_through_audio_on_a_dummy_jack_server_plays_every_note() {
    let d = tmpdir("replay-audio");
    let exp = d.join("short.toml");
    std::fs::write(&exp, format!("{SHORT_TRIAL}[masking]\nnoise = \"pink\"\n")).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    // Recorded on loopback with MIDI masking; replay --audio renders its
    // masking note as the sidecar experiment's pink noise.
    let out = firmtime(&run_args(e, o, "1", "1"));
    assert_ok(&out);
    let trial = d.join("K9-s01-t001.csv");
    let rows = firmtime_tap::data::read_csv(&std::fs::read_to_string(&trial).unwrap()).unwrap();
    let notes =
        firmtime_tap::replay::plan(&rows, firmtime_tap::replay::ReplaySource::Outputs).len();
    assert_eq!(notes, 10, "4 beats on and off, masking on and off");
    let t = trial.to_str().unwrap();
    let out = firmtime(&["tap", "replay", t, "--backend", "loopback", "--audio"]);
    assert_eq!(out.status.code(), Some(2), "audio needs JACK: usage error");
    if !jackd_installed() {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return;
    }
    let out = firmtime(&[
        "tap",
        "replay",
        t,
        "--backend",
        "jack",
        "--jack-dummy",
        "--audio",
    ]);
    let text = assert_ok(&out);
    assert!(
        text.contains(&format!(
            "replayed {notes} of {notes} notes (each to MIDI and audio): {} reported sent, 0 refused",
            2 * notes
        )),
        "{text}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// A long metronome-only trial (a minute): a stop signal ends it.
const LONG_TRIAL: &str =
    "name = \"long\"\n[metronome]\nmspb = 20\nlength_ms = 5\n[end]\nduration_ms = 60000\n";

/// Regression (issue 20, item 7): `tap run` handled only SIGINT; SIGTERM
/// (systemd, `timeout`) and SIGHUP (a closing terminal) lost the running
/// trial without a message. Each of the three, sent mid-trial on a private
/// dummy jackd, ends the session with status 0, keeps the partial trial
/// flagged incomplete with the signal named (stderr and the sidecar's
/// `stopped_by`), and the trial's end row is its last row (beats already
/// handed to JACK came after it).
#[test]
fn each_stop_signal_keeps_the_running_trial_flagged_and_named() {
    use firmtime_jack::{ServerKind, TestServer};
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let Some(srv) = TestServer::start_for_test(ServerKind::Jackd, 48_000, 256) else {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return;
    };
    let d = tmpdir("signals");
    let exp = d.join("long.toml");
    std::fs::write(&exp, LONG_TRIAL).unwrap();
    let signals = [
        (libc::SIGINT, "SIGINT", "SIGINT (Ctrl-C)"),
        (libc::SIGTERM, "SIGTERM", "SIGTERM"),
        (libc::SIGHUP, "SIGHUP", "SIGHUP"),
    ];
    for (session, (sig, name, said)) in (1..).zip(signals) {
        let session = session.to_string();
        let mut child = srv
            .client_env(&mut Command::new(EXE))
            .args([
                "tap",
                "run",
                exp.to_str().unwrap(),
                "--subject",
                "SG",
                "--session",
                &session,
                "--trials",
                "1x2",
                "--no-prompt",
                "--no-rt",
                "--out",
                d.to_str().unwrap(),
                "--backend",
                "jack",
                "--jack-server",
                srv.name(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The session line comes once the handlers are in place; the
        // trial then runs (a minute long) until the signal.
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut log = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("tap run ended early: {log}");
            }
            log.push_str(&line);
            if line.starts_with("firmtime: session ") {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert_eq!(common::kill(child.id(), sig), 0);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        log.push_str(&rest);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{name}: {log}");
        assert!(
            log.contains(&format!("ended by {said} (incomplete)")),
            "{name}: {log}"
        );
        assert!(
            log.contains(&format!("session stopped after trial 1 by {said}")),
            "{name}: {log}"
        );
        let stem = d.join(format!("SG-s{session:0>2}-t001"));
        let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
        let rows = firmtime_tap::data::read_csv(&csv).unwrap();
        let end = rows.last().unwrap();
        assert_eq!(
            (end.kind, end.index),
            (firmtime_tap::data::EventKind::End, 1),
            "{name}: the end row is the last, flagged interrupted"
        );
        let beats = rows
            .iter()
            .filter(|r| r.kind == firmtime_tap::data::EventKind::Metronome)
            .count();
        assert!(beats >= 2, "{name}: the partial trial has its beats: {csv}");
        let side: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
                .unwrap();
        assert_eq!(side["incomplete"], true, "{name}");
        assert_eq!(side["stopped_by"], name);
        assert_eq!(side["events"].as_u64().unwrap() as usize, rows.len());
        // The session stopped: trial 2 never started.
        assert!(!d.join(format!("SG-s{session:0>2}-t002.csv")).exists());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A trial run through the loopback backend, written in FTAP's output form
/// beside its CSV and into `--out`: one row per CSV event but the `end`
/// row, in order, times in whole ms (docs/TAP.md §9).
#[test]
fn export_ftap_writes_abs_files_for_a_trial_just_run() {
    let d = tmpdir("export-ftap");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    assert_ok(&firmtime(&run_args(e, o, "1", "1x2")));
    let t1 = d.join("K9-s01-t001.csv");
    let t2 = d.join("K9-s01-t002.csv");
    let run = firmtime(&[
        "tap",
        "export-ftap",
        t1.to_str().unwrap(),
        t2.to_str().unwrap(),
    ]);
    assert_ok(&run);
    // Like import-ftap, what was written is said on stderr.
    let out = common::text(&run.stderr);
    for t in [&t1, &t2] {
        let abs = t.with_extension("abs");
        assert!(
            out.contains(&format!("firmtime: wrote {}", abs.display())),
            "{out}"
        );
        let text = std::fs::read_to_string(&abs).unwrap();
        let events = firmtime_tap::data::read_csv(&std::fs::read_to_string(t).unwrap()).unwrap();
        let rows = firmtime_tap::ftap_out::parse_rows(&text).unwrap();
        assert_eq!(rows.len() + 1, events.len(), "{text}");
        for (r, ev) in rows.iter().zip(&events) {
            assert_eq!(r.ms, ev.actual_us.div_euclid(1000));
            assert_eq!(r.kind, 'M', "SHORT_TRIAL has only the metronome: {text}");
        }
        // 4 beats, each on and off; the parameters name the 50-ms metronome.
        assert_eq!(rows.iter().filter(|r| r.on == 1).count(), 4, "{text}");
        assert!(text.contains("\n# MSPB 50\n"), "{text}");
        assert!(text.contains("\n# TRIGGER 1 T 300 END_EXP 0\n"), "{text}");
        assert!(
            text.contains("\n# ms type on chan note vel seq sched_ms\n"),
            "{text}"
        );
    }
    // --out DIR: the same file there.
    let o2 = d.join("ftap");
    assert_ok(&firmtime(&[
        "tap",
        "export-ftap",
        t1.to_str().unwrap(),
        "--out",
        o2.to_str().unwrap(),
    ]));
    assert_eq!(
        std::fs::read_to_string(o2.join("K9-s01-t001.abs")).unwrap(),
        std::fs::read_to_string(t1.with_extension("abs")).unwrap()
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Without its sidecar a trial cannot be exported (the header comes from
/// it): exit 1, the missing file named, and nothing written — not even for
/// the good trial given with it.
#[test]
fn export_ftap_without_the_sidecar_names_the_missing_file() {
    let d = tmpdir("export-ftap-nosidecar");
    let exp = d.join("short.toml");
    std::fs::write(&exp, SHORT_TRIAL).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    assert_ok(&firmtime(&run_args(e, o, "1", "1x2")));
    let t1 = d.join("K9-s01-t001.csv");
    let t2 = d.join("K9-s01-t002.csv");
    std::fs::remove_file(t2.with_extension("json")).unwrap();
    let err = assert_exit(
        &firmtime(&[
            "tap",
            "export-ftap",
            t1.to_str().unwrap(),
            t2.to_str().unwrap(),
        ]),
        1,
        &[&format!(
            "cannot read {}, the sidecar of {}",
            t2.with_extension("json").display(),
            t2.display()
        )],
    );
    assert!(!err.contains("{ "), "no debug form: {err}");
    assert!(!t1.with_extension("abs").exists(), "nothing written");
    assert!(!t2.with_extension("abs").exists(), "nothing written");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `jack_midiseq NAME` on `srv`, a tap every 0.1 s (4800 frames) held 25
/// ms, once its port is registered; killed and reaped on drop.
struct Keyboard(std::process::Child);

impl Keyboard {
    fn start(srv: &firmtime_jack::TestServer, name: &str) -> Keyboard {
        use std::process::Stdio;
        let k = Keyboard(
            srv.client_env(&mut Command::new("jack_midiseq"))
                .args([name, "4800", "0", "60", "1200"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let port = format!("{name}:out");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !firmtime_jack::list_ports(Some(srv.name()))
            .is_ok_and(|ps| ps.iter().any(|p| p.name == port))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{port} never appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        k
    }
}

impl Drop for Keyboard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private jackd and jack_midiseq, or `None` (skipped, said why).
fn server_and_keyboard() -> Option<(firmtime_jack::TestServer, Keyboard)> {
    use firmtime_jack::{ServerKind, TestServer};
    if !firmtime_jack::program_on_path("jack_midiseq") {
        firmtime_rt::testing::skip("jack_midiseq not installed (Debian: apt-get install jackd2)");
        return None;
    }
    let Some(srv) = TestServer::start_for_test(ServerKind::Jackd, 48_000, 256) else {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return None;
    };
    let kb = Keyboard::start(&srv, "tapper");
    Some((srv, kb))
}

/// Runs `attempt` on a fresh server and keyboard ([`server_and_keyboard`])
/// up to `attempts` times, until one checks (`None`); one that returns why
/// it could not check (`Some`) is WAIVED and repeated, and the test fails
/// when every attempt was. Without jackd or jack_midiseq the test is
/// skipped (logged by [`server_and_keyboard`]).
fn on_fresh_keyboards(
    attempts: usize,
    mut attempt: impl FnMut(&firmtime_jack::TestServer, Keyboard, usize) -> Option<String>,
) {
    use firmtime_rt::testing::{until_checked, Attempt};
    until_checked(attempts, |n| {
        let Some((srv, kb)) = server_and_keyboard() else {
            return Attempt::Checked(());
        };
        match attempt(&srv, kb, n) {
            Some(why) => Attempt::Waived(why),
            None => Attempt::Checked(()),
        }
    });
}

/// Reads `err` line by line into `log` until a line starting with `prefix`:
/// true, or false when `tap run` ended first.
#[must_use]
fn read_until(err: &mut impl std::io::BufRead, log: &mut String, prefix: &str) -> bool {
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            return false;
        }
        log.push_str(&line);
        if line.starts_with(prefix) {
            return true;
        }
    }
}

/// Why an attempt could not check, when `tap run`'s output `log` says the
/// keyboard's port was gone when it connected: [`Keyboard::start`] saw the
/// port, but on a loaded machine the dummy jackd drops a jack_midiseq that
/// misses its cycles ("client = tapper was not finished" in its log, then
/// "Unknown source port"). The run checked nothing of the product then.
/// `None` for any other output (the caller fails the test).
fn keyboard_dropped_before_the_trial(log: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains("cannot connect JACK port \"tapper:out\""))
        .map(|l| {
            format!(
                "the server dropped the keyboard (jack_midiseq, missed cycles) before tap run \
                 connected it: {l}"
            )
        })
}

const KEYSTROKE_TRIAL: &str = "name = \"keys\"\n[feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n\
    [end]\nkeystrokes = 6\n[[trigger]]\nkeystroke = 3\nset.feedback.delay = { mode = \"fixed\", ms = 60 }\n";

/// Regression (issue 28, item 1): with a keyboard already playing
/// (`jack_midiseq … --connect tapper:out`) and Enter pressed later at the
/// prompt, the CSV held the waiting time's inputs with negative times, their
/// feedback burst out at the start, and the keystroke trigger fired early.
/// The prompt is answered on a pseudo-terminal 0.6 s after it appears.
#[test]
fn run_drops_what_a_keyboard_played_before_enter_and_says_so() {
    // An attempt whose keyboard the loaded server dropped is waived and
    // repeated with a fresh server and keyboard.
    on_fresh_keyboards(3, keyboard_played_before_enter);
}

/// One attempt of [`run_drops_what_a_keyboard_played_before_enter_and_says_so`]:
/// `None` when it checked, why not when the server dropped the keyboard.
fn keyboard_played_before_enter(
    srv: &firmtime_jack::TestServer,
    _kb: Keyboard,
    attempt: usize,
) -> Option<String> {
    use std::io::{BufReader, Write as _};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::Stdio;
    let d = tmpdir(&format!("before-start-{attempt}"));
    let exp = d.join("keys.toml");
    std::fs::write(&exp, KEYSTROKE_TRIAL).unwrap();
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the two valid ints; the other
    // arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = srv
        .client_env(&mut Command::new(EXE))
        .args([
            "tap",
            "run",
            exp.to_str().unwrap(),
            "--subject",
            "KB",
            "--session",
            "1",
            "--no-rt",
            "--out",
            d.to_str().unwrap(),
            "--backend",
            "jack",
            "--jack-server",
            srv.name(),
            "--connect",
            "tapper:out",
        ])
        .stdin(Stdio::from(slave))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    if !read_until(&mut err, &mut log, "firmtime: backend:") {
        let _ = child.wait();
        let why = keyboard_dropped_before_the_trial(&log);
        assert!(
            why.is_some(),
            "tap run ended before its backend line: {log}"
        );
        return why;
    }
    // The prompt has no newline: wait for the backend line, then for input to queue.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut tty = std::fs::File::from(master);
    tty.write_all(b"\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    log.push_str(&rest);
    let status = child.wait().unwrap();
    drop(tty);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("press Enter to start"),
        "the prompt ran: {log}"
    );
    let stem = d.join("KB-s01-t001");
    let side: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    let dropped = side["self_checks"]["input_before_start"].as_u64().unwrap();
    assert!(dropped > 0, "the keyboard played before Enter: {side:#}");
    assert!(
        log.contains(&format!(
            "trial 1: {dropped} input event(s) stamped before the trial's start dropped"
        )),
        "{log}"
    );
    assert_eq!(side["incomplete"], false);
    let rows =
        firmtime_tap::data::read_csv(&std::fs::read_to_string(stem.with_extension("csv")).unwrap())
            .unwrap();
    use firmtime_tap::data::EventKind;
    assert!(
        rows.iter()
            .all(|r| r.actual_us >= 0 && !matches!(r.intended_us, Some(t) if t < 0)),
        "no row before the start: {rows:?}"
    );
    let presses: Vec<&firmtime_tap::data::Event> = rows
        .iter()
        .filter(|r| r.kind == EventKind::Input && r.note.unwrap().on)
        .collect();
    assert_eq!(
        presses.iter().map(|r| r.index).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    // Feedback 30 ms after keystrokes 1–3, 60 ms after 4–6 (the trigger at 3).
    let fb: Vec<(u32, i64)> = rows
        .iter()
        .filter(|r| r.kind == EventKind::Feedback && r.note.unwrap().on)
        .map(|r| {
            (
                r.index,
                r.intended_us.unwrap() - presses[r.index as usize - 1].actual_us,
            )
        })
        .collect();
    assert_eq!(
        fb,
        [
            (1, 30_000),
            (2, 30_000),
            (3, 30_000),
            (4, 60_000),
            (5, 60_000),
            (6, 60_000)
        ]
    );
    let trig: Vec<i64> = rows
        .iter()
        .filter(|r| r.kind == EventKind::Trigger)
        .map(|r| r.intended_us.unwrap())
        .collect();
    assert_eq!(trig, [presses[2].actual_us], "the trigger at keystroke 3");
    None
}

/// Regression (issue 28, item 2): the MIDI source killed mid-trial gave
/// "ended by its end condition", `incomplete: false`, exit 0. `tap run`
/// ends the trial at the loss, keeps it flagged incomplete with the cause
/// and time, says INPUT LOST, stops the session with exit status 1; `tap
/// analyze` flags it.
#[test]
fn run_ends_a_trial_whose_keyboard_is_killed_incomplete_and_exits_1() {
    // A dummy jackd among many on a loaded machine can run no cycle for a
    // second (xruns): the trial then ends rightly as server_stopped before
    // the keyboard is killed, and the client_gone asserted below cannot
    // come. Such a trial is waived with its xruns; another checks.
    on_fresh_keyboards(4, trial_whose_keyboard_is_killed);
}

/// One attempt of [`run_ends_a_trial_whose_keyboard_is_killed_incomplete_and_exits_1`]:
/// `None` when it checked, why not when the server stopped first or
/// dropped the keyboard before the trial.
fn trial_whose_keyboard_is_killed(
    srv: &firmtime_jack::TestServer,
    kb: Keyboard,
    attempt: usize,
) -> Option<String> {
    use std::io::BufReader;
    use std::process::Stdio;
    let d = tmpdir(&format!("input-lost-{attempt}"));
    let exp = d.join("long.toml");
    std::fs::write(
        &exp,
        "name = \"long\"\n[feedback]\n[metronome]\nmspb = 500\n[end]\nduration_ms = 60000\n",
    )
    .unwrap();
    let mut child = srv
        .client_env(&mut Command::new(EXE))
        .args([
            "tap",
            "run",
            exp.to_str().unwrap(),
            "--subject",
            "KL",
            "--session",
            "1",
            "--trials",
            "1x2",
            "--no-prompt",
            "--no-rt",
            "--out",
            d.to_str().unwrap(),
            "--backend",
            "jack",
            "--jack-server",
            srv.name(),
            "--connect",
            "tapper:out",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    if !read_until(&mut err, &mut log, "firmtime: backend:") {
        let _ = child.wait();
        let why = keyboard_dropped_before_the_trial(&log);
        assert!(
            why.is_some(),
            "tap run ended before its backend line: {log}"
        );
        return why;
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(kb);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    log.push_str(&rest);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{log}");
    let stem = d.join("KL-s01-t001");
    let side: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(side["incomplete"], true);
    let lost = &side["input_lost"];
    let xruns = side["self_checks"]["xruns"].as_u64().unwrap();
    if lost["cause"] == "server_stopped" && xruns > 0 {
        eprintln!("{log}");
        return Some(format!(
            "the trial's server stopped ({xruns} xruns) before its keyboard was killed"
        ));
    }
    for said in [
        "ended by the loss of its input (incomplete)",
        "INPUT LOST at ",
        "(client_gone): the client feeding the input went away: tapper:out no longer feeds firmtime-tap:in (its client went away)",
        "session stopped after trial 1 by the loss of its input",
    ] {
        assert!(log.contains(said), "`{said}` missing: {log}");
    }
    assert_eq!(lost["cause"], "client_gone", "{side:#}");
    let at_us = lost["at_us"].as_i64().unwrap();
    assert!(at_us > 0, "{lost}");
    let rows =
        firmtime_tap::data::read_csv(&std::fs::read_to_string(stem.with_extension("csv")).unwrap())
            .unwrap();
    let end = rows.last().unwrap();
    assert_eq!(
        (end.kind, end.index, end.intended_us),
        (firmtime_tap::data::EventKind::End, 1, Some(at_us)),
        "the trial ended at the loss"
    );
    assert!(!d.join("KL-s01-t002.csv").exists(), "the session stopped");
    let t = stem.with_extension("csv");
    assert_exit(
        &firmtime(&["tap", "analyze", t.to_str().unwrap()]),
        1,
        &["FLAG KL-s01-t001: input lost at", "(client_gone)"],
    );
    std::fs::remove_dir_all(&d).unwrap();
    None
}

/// On a terminal, the live line of a trial whose keyboard is killed ends as
/// `INPUT LOST (…) | trial 1/1 …`, left on the screen (the loss ends the
/// trial before the next redraw would show it).
#[test]
fn the_live_line_says_input_lost_on_a_terminal() {
    // An attempt whose keyboard the loaded server dropped before the trial
    // is waived and repeated with a fresh server and keyboard.
    on_fresh_keyboards(3, live_line_of_a_killed_keyboard);
}

/// One attempt of [`the_live_line_says_input_lost_on_a_terminal`]: `None`
/// when it checked, why not when the server dropped the keyboard first.
fn live_line_of_a_killed_keyboard(
    srv: &firmtime_jack::TestServer,
    kb: Keyboard,
    attempt: usize,
) -> Option<String> {
    use std::io::Read as _;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::Stdio;
    let d = tmpdir(&format!("live-lost-{attempt}"));
    let exp = d.join("long.toml");
    std::fs::write(
        &exp,
        "name = \"long\"\n[feedback]\n[end]\nduration_ms = 60000\n",
    )
    .unwrap();
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the two valid ints; the other
    // arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = srv
        .client_env(&mut Command::new(EXE))
        .args([
            "tap",
            "run",
            exp.to_str().unwrap(),
            "--subject",
            "LV",
            "--session",
            "1",
            "--no-prompt",
            "--no-rt",
            "--out",
            d.to_str().unwrap(),
            "--backend",
            "jack",
            "--jack-server",
            srv.name(),
            "--connect",
            "tapper:out",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut tty = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // Read until the child's end closes the terminal (EIO).
        while let Ok(n @ 1..) = tty.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    std::thread::sleep(std::time::Duration::from_millis(2000));
    drop(kb);
    let status = child.wait().unwrap();
    let screen = reader.join().unwrap();
    if let Some(why) = keyboard_dropped_before_the_trial(&screen) {
        return Some(why);
    }
    assert_eq!(status.code(), Some(1), "{screen}");
    assert!(
        screen.contains("INPUT LOST (the client feeding the input went away) | trial 1/1 "),
        "{screen}"
    );
    None
}

/// Issue 30: an experiment with taps from sound is checked (its detector
/// settings with their key and range), refused by backends without a JACK
/// audio input and without a port to listen to, and runs on a dummy JACK
/// server with the audio CSV columns and the sidecar's `audio_input`.
#[test]
fn taps_from_sound_are_checked_refused_without_jack_and_run_on_a_dummy_server() {
    let d = tmpdir("audio-in");
    assert_check_refuses(
        &d,
        "[input]\nsource = \"audio\"\nrefractory_ms = 1\n[end]\nkeystrokes = 3\n",
        "line 1, column 1: input.refractory_ms must be 5–2000 ms, got 1",
    );
    assert_check_refuses(
        &d,
        "[input]\nsource = \"piezo\"\n[end]\nkeystrokes = 3\n",
        "line 2, column 10: input.source must be \"midi\", \"audio\" or \"midi+audio\", got \"piezo\"",
    );
    let exp = d.join("mic.toml");
    std::fs::write(
        &exp,
        "name = \"mic\"\n[input]\nsource = \"audio\"\nthreshold_db = 15\n\
         [feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n[end]\nduration_ms = 600\n",
    )
    .unwrap();
    let out = firmtime(&["tap", "check", exp.to_str().unwrap()]);
    assert!(
        assert_ok(&out).contains("input: taps detected in sound from an audio input (onset 15 dB"),
        "{out:?}"
    );
    let (e, o) = (exp.to_str().unwrap(), d.to_str().unwrap());
    let out = firmtime(&run_args(e, o, "1", "1"));
    assert_exit(&out, 2, &["JACK audio input", "--backend jack"]);
    let mut args = run_args(e, o, "2", "1");
    args.retain(|a| *a != "loopback" && *a != "--backend");
    args.extend(["--backend", "jack", "--jack-server", "ft-no-such-server"]);
    assert_exit(&firmtime(&args), 2, &["--audio-in PORT"]);
    if !jackd_installed() {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return;
    }
    let mut args = run_args(e, o, "3", "1");
    args.retain(|a| *a != "loopback" && *a != "--backend");
    args.extend(["--backend", "jack", "--jack-dummy"]);
    let out = firmtime(&args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_ok(&out);
    assert!(
        err.contains("taps from sound on firmtime-tap:audio_in: 0 tap(s)"),
        "{err}"
    );
    let stem = d.join("K9-s03-t001");
    let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
    assert_eq!(
        csv.lines().next(),
        Some("kind,index,intended_us,actual_us,channel,note,velocity,on,source,onset_frame,peak_dbfs,confidence_db,pad_delay_us,flag")
    );
    assert!(csv.lines().last().unwrap().starts_with("end,0,"), "{csv}");
    let side: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    let a = &side["audio_input"];
    assert_eq!(a["port"], "firmtime-tap:audio_in", "{side}");
    assert_eq!(a["taps"], 0);
    assert_eq!(a["threshold_db"], 15.0);
    assert_eq!(a["refractory_ms"], 60.0);
    assert_eq!(a["detector"]["highpass_hz"], 1000.0);
}
