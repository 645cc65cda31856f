//! Runs `firmtime audio roundtrip`, `tap run --measure-roundtrip` and
//! `midi loop` over JACK against dummy jackd servers: the round trip in
//! frames must be what the loop implies (one period for a loop inside
//! JACK, plus the frames of a [`Cable`] in it).

mod common;

use common::{assert_exit, assert_ok, assert_usage_errors, firmtime, jack_installed, TestDir};
use firmtime_jack::roundtrip::Cable;
use firmtime_jack::DummyServer;

/// The tests that open a [`Cable`] (a JACK client inside this test process)
/// take turns: two libjack clients opened and closed at once in one
/// process, on two servers, crashed this binary once (SIGSEGV right after
/// libjack's "JackMessageBuffer::SetInitCallback : callback could not be
/// executed"), in a clean-clone `.ci/run`.
static IN_PROCESS_JACK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `--jack-server NAME` and the cable's ends as `--connect-out`/`--connect`.
fn through<'a>(srv: &'a DummyServer, cable: &'a Cable) -> Vec<&'a str> {
    vec![
        "--jack-server",
        srv.name(),
        "--connect-out",
        cable.in_port(),
        "--connect",
        cable.out_port(),
    ]
}

#[test]
fn roundtrip_on_a_dummy_server_it_starts_is_one_period_in_text_and_json() {
    if !jack_installed("roundtrip --jack-dummy") {
        return;
    }
    let d = TestDir::new("audio-rt-dummy");
    let json = d.0.join("rt.json");
    let out = firmtime(&[
        "audio",
        "roundtrip",
        "--jack-dummy",
        "--bursts",
        "3",
        "--max-latency",
        "50ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = assert_ok(&out);
    // The dummy server firmtime starts runs 256 frames per period at 48 kHz.
    assert!(
        text.contains("round trip        256 frames   5.333 ms   ("),
        "{text}"
    );
    assert!(text.contains(" of 3 bursts agree"), "{text}");
    assert!(text.contains("48000 Hz, 256 frames per period"), "{text}");
    assert!(
        text.contains("JACK reports      playback 0..0 + capture 0..0 = 0 frames"),
        "{text}"
    );
    assert!(
        common::text(&out.stderr).contains("no ports given: measuring a direct JACK connection")
    );
    let v = common::take_json(&json);
    assert_eq!(v["frames"], 256);
    assert_eq!(v["period"], 256);
    assert_eq!(v["sample_rate"], 48_000);
    assert_eq!(v["self_loop"], true);
    assert_eq!(v["dummy_server_started"], true);
    assert_eq!(v["extra_frames"], 256);
    assert_eq!(v["per_burst"].as_array().unwrap().len(), 3);
    assert_eq!(v["out_connections"][0], "firmtime-roundtrip:in");
    assert!(v["provenance"]["command_line"].is_array());
}

#[test]
fn roundtrip_through_a_cable_adds_its_frames_and_an_open_loop_names_the_ports() {
    if !jack_installed("roundtrip through a cable") {
        return;
    }
    let _turn = IN_PROCESS_JACK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = DummyServer::start_for_test(48_000, 128) else {
        return;
    };
    let cable = Cable::start("ft-cable", Some(srv.name()), 500).unwrap();
    let mut args = vec![
        "audio",
        "roundtrip",
        "--bursts",
        "3",
        "--max-latency",
        "50ms",
    ];
    args.extend(through(&srv, &cable));
    args.extend(["--json", "-"]);
    let out = firmtime(&args);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // A loop through another client: one period (128) plus the cable's 500.
    assert_eq!(v["frames"], 628, "{v}");
    assert_eq!(v["self_loop"], false);
    assert_eq!(v["dummy_server_started"], false);
    assert_eq!(v["in_connections"][0], "ft-cable:out");
    // With JSON on stdout the text goes to stderr.
    assert!(common::text(&out.stderr).contains("round trip        628 frames   13.083 ms"));
    drop(cable);

    let out = firmtime(&["audio", "roundtrip", "--jack-server", srv.name()]);
    assert_exit(
        &out,
        1,
        &[
            "neither firmtime-roundtrip:out nor firmtime-roundtrip:in is connected",
            "--connect-out system:playback_1 --connect system:capture_1",
        ],
    );
    // Connected, but the dummy driver does not loop playback to capture.
    let out = firmtime(&[
        "audio",
        "roundtrip",
        "--jack-server",
        srv.name(),
        "--bursts",
        "1",
        "--max-latency",
        "20ms",
        "--connect-out",
        "system:playback_1",
        "--connect",
        "system:capture_1",
    ]);
    assert_exit(
        &out,
        1,
        &[
            "none of 1 test bursts played on firmtime-roundtrip:out came back on firmtime-roundtrip:in",
            "system:capture_1 connected to firmtime-roundtrip:in",
        ],
    );
}

#[test]
fn roundtrip_flags_out_of_range_are_usage_errors_with_the_range() {
    assert_usage_errors(
        "audio roundtrip",
        &[
            ("--bursts 0", &["--bursts", "1..=100"]),
            ("--max-latency 10s", &["--max-latency", "1ms..=5s"]),
            ("--level-dbfs 3", &["--level-dbfs", "-60 to 0 dBFS"]),
        ],
    );
}

#[test]
fn tap_run_measures_the_feedback_paths_round_trip_and_records_it() {
    if !jack_installed("tap run --measure-roundtrip") {
        return;
    }
    let _turn = IN_PROCESS_JACK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = DummyServer::start_for_test(48_000, 256) else {
        return;
    };
    let d = TestDir::new("audio-tap-rt");
    let exp = d.0.join("click.toml");
    std::fs::write(
        &exp,
        "name = \"click\"\n[output]\ndevice = \"audio\"\n[metronome]\nmspb = 100\n[end]\nbeats = 3\n",
    )
    .unwrap();
    // The cable stands for the interface: the feedback's audio goes into it
    // (--audio-out) and comes back out of it (--measure-roundtrip).
    let cable = Cable::start("ft-cable", Some(srv.name()), 300).unwrap();
    let (e, o) = (exp.to_str().unwrap(), d.0.to_str().unwrap());
    let base = [
        "tap",
        "run",
        e,
        "--subject",
        "K9",
        "--trials",
        "1",
        "--out",
        o,
        "--backend",
        "jack",
        "--jack-server",
        srv.name(),
        "--no-rt",
    ];
    let mut args = base.to_vec();
    args.extend([
        "--session",
        "1",
        "--audio-out",
        cable.in_port(),
        "--measure-roundtrip",
        cable.out_port(),
    ]);
    let out = firmtime(&args);
    assert_ok(&out);
    let err = common::text(&out.stderr);
    assert!(
        err.contains(
            "audio feedback path: round trip 556 frames (11.583 ms) through ft-cable:in and back on ft-cable:out"
        ),
        "{err}"
    );
    let side = std::fs::read_to_string(d.0.join("K9-s01-t001.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&side).unwrap();
    let rt = find(&v, "audio_roundtrip").unwrap_or_else(|| panic!("no audio_roundtrip in {side}"));
    assert_eq!(rt["frames"], 556);
    assert_eq!(rt["capture_port"], "ft-cable:out");
    assert_eq!(rt["playback_ports"][0], "ft-cable:in");

    // Without audio output there is no feedback path to measure.
    std::fs::write(&exp, "name = \"midi\"\n[end]\nbeats = 3\n").unwrap();
    let mut args = base.to_vec();
    args.extend(["--session", "2", "--measure-roundtrip", cable.out_port()]);
    assert_exit(
        &firmtime(&args),
        2,
        &["--measure-roundtrip measures the audio feedback path"],
    );
}

/// The first value under `key` anywhere in `v`.
fn find<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => {
            m.get(key).or_else(|| m.values().find_map(|x| find(x, key)))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

#[test]
fn midi_loop_over_jack_reports_frames_and_ms_not_a_wire_ratio() {
    if !jack_installed("midi loop over JACK") {
        return;
    }
    // The dummy server's xruns lose circulating events (exit 1) or leave
    // the hops unpaired ("not computed"). Such a run is waived (WAIVED) and
    // repeated; a test waived in every run fails. Real-time (as root), as
    // a user measuring would run it: with --no-rt the server had xruns in
    // most runs while the machine built (3 of 5 runs waived 3 times).
    firmtime_rt::testing::until_checked(3, |_| {
        use firmtime_rt::testing::Attempt;
        let out = firmtime(&[
            "midi",
            "loop",
            "--backend",
            "jack",
            "--jack-dummy",
            "--events",
            "100",
            "--timeout",
            "15s",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        let unpaired = text.contains("frames per hop: not computed: ");
        if out.status.code() != Some(0) {
            // Only a server that missed cycles may lose events: exit 1,
            // saying so.
            assert!(unpaired, "loop failed without xruns: {text}\n{err}");
            assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
            assert!(err.contains("loop test incomplete"), "{err}");
            return Attempt::Waived(format!("exit 1 after xruns: {}", err.trim()));
        }
        assert!(!text.contains("ratio"), "{text}");
        assert!(!text.contains("wire limit"), "{text}");
        assert!(text.contains("periods of 256 at 48000 Hz"), "{text}");
        if unpaired {
            return Attempt::Waived("xruns: frames per hop not computed".into());
        }
        // The relay's hops, in frames and ms: one period back to us.
        assert!(
            text.contains("relay -> in    mean 256.00 frames = 5.333 ms"),
            "{text}"
        );
        Attempt::Checked(())
    });
    let out = firmtime(&[
        "midi",
        "loop",
        "--backend",
        "jack",
        "--jack-dummy",
        "--events",
        "100",
        "--timeout",
        "15s",
        "--json",
        "-",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let j = &v["jack_intervals"];
    assert_eq!(j["sample_rate"], 48_000);
    assert_eq!(j["period"], 256);
    let ns = v["mean_interval_ns"].as_f64().unwrap();
    let frames = j["mean_interval_frames"].as_f64().unwrap();
    assert!((frames - ns * 48_000.0 / 1e9).abs() < 1e-6, "{v}");
    // The wire fields stay in the JSON for scripts that read them.
    assert!(v["ratio_to_wire"].is_number());
}
