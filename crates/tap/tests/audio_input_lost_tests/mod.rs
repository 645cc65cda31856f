//! Taps from sound (`[input] source = "audio"`) whose audio input goes
//! away mid-trial (issue 30): the trial must end there, incomplete, with
//! `input_lost`, as a MIDI keyboard's loss does (issue 28). One body for
//! both servers: `tests/audio_input_lost.rs` runs it on jackd2's dummy
//! driver, `tests/audio_input_lost_pipewire.rs` on a headless PipeWire
//! (`crate::SERVER`). Each test starts its own private server (SKIP
//! without it); a player client of the tests
//! (`firmtime_midi::jack::AudioPlayer`) plays tap sounds in pink noise
//! into the engine's audio input.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firmtime_jack::{ServerKind, TestServer};
use firmtime_midi::jack::{AudioInOptions, AudioPlayer, JackBackend, JackOptions, PlayerOptions};
use firmtime_midi::{LossCause, MidiBackend};
use firmtime_tap::data::{self, EventKind};
use firmtime_tap::engine::{EndReason, Engine, EngineOptions, TrialOutcome};
use firmtime_tap::late::{self, BackendTiming};
use firmtime_tap::onset::synthetic::{track, Noise, TrackSpec};
use firmtime_tap::session::{self, TrialMeta};
use firmtime_tap::Experiment;

static SERIAL: Mutex<()> = Mutex::new(());

const RATE: u32 = 48_000;
const PERIOD: u32 = 256;

fn server() -> Option<TestServer> {
    let kind: ServerKind = crate::SERVER;
    let srv = TestServer::start_for_test(kind, RATE, PERIOD);
    if srv.is_none() {
        firmtime_rt::testing::skip(format!(
            "{} not installed (Debian: {})",
            kind.label(),
            kind.install_hint()
        ));
    }
    srv
}

/// A 20-s audio-tap trial (it is meant to be cut short).
const AUDIO_SYNC: &str =
    "[input]\nsource = \"audio\"\n[feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n\
                          [end]\nduration_ms = 20000\n";

/// The engine's backend with an audio input, and a player playing 20 s of
/// taps in pink noise into it (connected before the trial starts).
fn engine_and_player(srv: &TestServer, player_name: &str) -> (JackBackend, AudioPlayer) {
    let mut jo = JackOptions::new("ft-engine");
    jo.server_name = Some(srv.name().to_string());
    jo.audio_in = Some(AudioInOptions::default());
    let backend = JackBackend::open(jo).expect("engine client opens");
    let t = track(&TrackSpec {
        seed: 7,
        taps: 60,
        lead_ms: 300.0,
        interval_ms: (200.0, 300.0),
        snr_db: Some(20.0),
        noise: Noise::Pink,
        ..TrackSpec::default()
    });
    let mut po = PlayerOptions::new(player_name);
    po.server_name = Some(srv.name().to_string());
    po.connect_to = vec![backend.audio_input_port_name().unwrap().to_string()];
    let player = AudioPlayer::start(po, t.samples).expect("player starts");
    let t0 = Instant::now();
    while player.played() < u64::from(RATE) / 2 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(player.played() >= u64::from(RATE) / 2, "the player plays");
    (backend, player)
}

/// Runs the trial until it ends, or stops it after `limit` (then it did
/// not see the loss: the test fails on its reason).
fn run_engine(engine: &mut Engine, backend: &mut JackBackend, limit: Duration) -> TrialOutcome {
    let (stop, done) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            let t0 = Instant::now();
            while !done.load(Ordering::Relaxed) && t0.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let outcome = engine.run(backend, &stop).expect("trial runs");
        done.store(true, Ordering::Relaxed);
        outcome
    })
}

/// The trial ended at the loss (`cause`, after `after_ns`), incomplete, and
/// its files say so: the sidecar's `input_lost` with the cause, time and
/// the ports, the CSV's `end` row index 1.
fn assert_lost(
    engine: &Engine,
    outcome: &TrialOutcome,
    cause: LossCause,
    after_ns: u64,
    detail: Option<String>,
    words: &str,
) {
    assert_eq!(outcome.reason, EndReason::InputLost, "{outcome:?}");
    assert!(outcome.incomplete());
    let loss = outcome.input_loss.expect("the loss is recorded");
    assert_eq!(loss.cause, cause, "{loss:?} {detail:?}");
    assert!(
        loss.t_ns >= after_ns,
        "lost at {} before {after_ns}",
        loss.t_ns
    );
    assert_eq!(outcome.end_ns, loss.t_ns, "the trial ends at the loss");
    let detail = detail.expect("the backend names the ports");
    assert!(detail.contains(words), "{detail}");
    let dir = firmtime_rt::testing::ScratchDir::new(&format!("tap-audio-lost-{}", cause.key()));
    let stem = session::trial_stem(&dir, "A1", 1, 1);
    let meta = TrialMeta {
        subject: "A1".into(),
        session: 1,
        trial: 1,
        experiment_file: "audio.toml".into(),
        experiment_toml: AUDIO_SYNC.into(),
        seed: 5,
        rt: None,
        stopped_by: None,
        input_loss_detail: Some(detail.clone()),
        audio_input_port: "ft-engine:audio_in".into(),
    };
    let prov = firmtime_rt::system::Provenance::begin(vec!["test".into()]);
    let timing = BackendTiming::jack(RATE, PERIOD);
    let causes = late::report(&engine.late_outputs(), &timing, (0, 0), None);
    session::write_trial(&stem, engine, outcome, causes, &meta, prov).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(json["incomplete"], true);
    assert_eq!(json["input_lost"]["cause"], cause.key(), "{json:#}");
    assert!(
        json["input_lost"]["words"]
            .as_str()
            .unwrap()
            .contains(&detail),
        "{json:#}"
    );
    assert!(json["audio_input"].is_object(), "{json:#}");
    let rows =
        data::read_csv(&std::fs::read_to_string(stem.with_extension("csv")).unwrap()).unwrap();
    let end = rows.last().unwrap();
    assert_eq!(
        (end.kind, end.index),
        (EventKind::End, 1),
        "flagged incomplete"
    );
}

/// Regression (issue 30): the audio input's port disconnected mid-trial
/// went unnoticed — the trial ran to its end condition, "complete", with
/// no taps after the cut. A patchbay client disconnects the player from
/// the engine's audio input 1.5 s into the trial: the trial ends there,
/// incomplete, `port_disconnected`, the ports named.
#[test]
fn an_audio_input_disconnected_mid_trial_ends_it_incomplete_port_disconnected() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let e = Experiment::from_toml(AUDIO_SYNC).unwrap();
    let (mut backend, player) = engine_and_player(&srv, "ft-surface");
    let mut engine = Engine::new(&e, EngineOptions::for_experiment(&e, 5)).unwrap();
    let name = srv.name().to_string();
    let patchbay = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let c = firmtime_jack::open_client("ft-patchbay", Some(&name)).expect("patchbay client");
        let t = firmtime_rt::clock::monotonic_ns();
        c.disconnect_ports_by_name("ft-surface:out", "ft-engine:audio_in")
            .expect("disconnects the player");
        t
    });
    let outcome = run_engine(&mut engine, &mut backend, Duration::from_secs(25));
    let cut_ns = patchbay.join().unwrap();
    let detail = backend.describe_input_loss();
    drop(player);
    drop(backend);
    assert_lost(
        &engine,
        &outcome,
        LossCause::PortDisconnected,
        cut_ns,
        detail,
        "ft-surface:out no longer feeds ft-engine:audio_in (disconnected)",
    );
}

/// Regression (issue 30): the client feeding the audio input (here the
/// player; in a lab, a JACK client between the sound card and firmtime)
/// closed mid-trial went unnoticed. The player is closed 1.5 s into the
/// trial: the trial ends there, incomplete, `client_gone`.
#[test]
fn the_client_feeding_the_audio_input_gone_mid_trial_ends_it_incomplete_client_gone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let e = Experiment::from_toml(AUDIO_SYNC).unwrap();
    let (mut backend, player) = engine_and_player(&srv, "ft-surface2");
    let mut engine = Engine::new(&e, EngineOptions::for_experiment(&e, 5)).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let t = firmtime_rt::clock::monotonic_ns();
        drop(player);
        t
    });
    let outcome = run_engine(&mut engine, &mut backend, Duration::from_secs(25));
    let closed_ns = closer.join().unwrap();
    let detail = backend.describe_input_loss();
    drop(backend);
    assert_lost(
        &engine,
        &outcome,
        LossCause::ClientGone,
        closed_ns,
        detail,
        "ft-surface2:out no longer feeds ft-engine:audio_in (its client went away)",
    );
}

/// The server killed mid-trial of taps from sound ends the trial
/// incomplete with the server's loss (`server_shutdown` on jackd, which
/// tells its clients; `server_stopped` on PipeWire, which does not), as
/// for MIDI. The jackd has a fixed name of its own (a killed jackd's
/// registry slot is freed only when a server of the same name starts
/// again; see `killable_server` in engine_tests).
#[test]
fn the_server_killed_mid_trial_of_taps_from_sound_ends_it_incomplete() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let srv = if crate::SERVER == ServerKind::Jackd {
        if !firmtime_jack::program_on_path("jackd") {
            return firmtime_rt::testing::skip("jackd not installed (Debian: jackd2)");
        }
        let mut o = firmtime_jack::DummyOptions::for_test(RATE, PERIOD);
        // SAFETY: getuid cannot fail and has no side effects.
        o.name = format!("firmtime-audio-killed-by-test-{}", unsafe {
            libc::getuid()
        });
        TestServer::Jackd(firmtime_jack::DummyServer::start(o).expect("dummy jackd starts"))
    } else {
        let Some(srv) = server() else { return };
        srv
    };
    let e = Experiment::from_toml(AUDIO_SYNC).unwrap();
    let (mut backend, player) = engine_and_player(&srv, "ft-surface3");
    let mut engine = Engine::new(&e, EngineOptions::for_experiment(&e, 5)).unwrap();
    let pid = srv.pid().expect("the server's pid") as libc::pid_t;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        let t = firmtime_rt::clock::monotonic_ns();
        // SAFETY: kill(2) on the private server this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        t
    });
    let outcome = run_engine(&mut engine, &mut backend, Duration::from_secs(25));
    let killed_ns = killer.join().unwrap();
    assert_eq!(outcome.reason, EndReason::Disconnected, "{outcome:?}");
    assert!(outcome.incomplete());
    let loss = outcome.input_loss.expect("the loss is recorded");
    let want = match srv.kind() {
        ServerKind::Jackd => LossCause::ServerShutdown,
        ServerKind::PipeWire => LossCause::ServerStopped,
    };
    assert_eq!(loss.cause, want, "{loss:?}");
    let period_ns = u64::from(PERIOD) * 1_000_000_000 / u64::from(RATE);
    assert!(
        loss.t_ns + period_ns >= killed_ns,
        "{loss:?} before {killed_ns}"
    );
    let end = engine.data_events().last().copied().unwrap();
    assert_eq!(
        (end.kind, end.index),
        (EventKind::End, 1),
        "flagged incomplete"
    );
    drop(player);
    drop(backend);
    drop(srv);
}
