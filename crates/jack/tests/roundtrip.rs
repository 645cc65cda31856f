//! The audio round trip ([`firmtime_jack::roundtrip`]) through loops on a
//! dummy jackd the tests start: the measured frames must be what JACK's
//! graph implies, to the frame. Skipped, with the reason printed, when
//! `jackd` is not installed.
//!
//! What the graph implies (jackd2): a connection that closes a loop — our
//! own `out` to our own `in`, or `out` through other clients back to `in` —
//! delivers one period later (the other clients run after us in the same
//! cycle, so their output reaches us in the next one). A [`Cable`] of N
//! frames in the loop adds exactly N.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use firmtime_jack::roundtrip::{measure, Cable, RoundTrip, RoundTripOptions};
use firmtime_jack::{program_on_path, DummyServer, ErrorKind};
use firmtime_rt::testing::{until_checked, Attempt};

/// One server at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// With `--features assert-rt`, an allocation inside a process callback
// (the probe's or a cable's) aborts this test binary.
#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

const RATE: u32 = 48_000;
const PERIOD: u32 = 256;

fn server() -> Option<DummyServer> {
    let s = DummyServer::start_for_test(RATE, PERIOD);
    if s.is_none() {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
    }
    s
}

fn options(srv: &DummyServer) -> RoundTripOptions {
    RoundTripOptions {
        server: Some(srv.name().to_string()),
        bursts: 6,
        max_latency: Duration::from_millis(100),
        ..RoundTripOptions::new()
    }
}

/// The checks every successful measurement passes, whatever the loop. The
/// exact level checks need a run without xruns or frame gaps: a run with
/// some is waived (the caller's `until_checked` logs it and runs again).
fn check(rt: &RoundTrip, expected: u64) -> Attempt<()> {
    let why = format!(
        "{} xruns, {} frame gaps, bursts {:?}",
        rt.xruns, rt.frame_gaps, rt.per_burst
    );
    assert_eq!(rt.frames, expected, "{why}");
    assert_eq!(rt.sample_rate, RATE);
    assert_eq!(rt.period, PERIOD);
    assert!((rt.ms - expected as f64 * 1000.0 / f64::from(RATE)).abs() < 1e-9);
    // A digital loop returns an exact copy at the played level (unless an
    // xrun of the dummy server cut into a burst).
    let exact = rt.xruns + rt.frame_gaps == 0;
    if exact {
        assert!(rt.sub_frame.abs() < 1e-6, "{why}");
        assert!((rt.correlation - 1.0).abs() < 1e-6, "{why}");
        assert!(rt.gain_db.abs() < 1e-3, "{why}");
    }
    assert!(!rt.inverted);
    assert_eq!(rt.bursts, 6);
    assert_eq!(rt.per_burst.len(), 6);
    // Every undisturbed burst came back at the same lag; a disturbed one
    // (an xrun of the dummy server nearby) may differ or be missing.
    for b in rt.per_burst.iter().filter(|b| !b.disturbed) {
        assert_eq!(b.detection.map(|d| d.frames), Some(expected), "{why}");
    }
    assert!(rt.agreeing >= 1 && rt.agreeing <= rt.detected, "{why}");
    assert_eq!(
        rt.extra_frames,
        expected as i64 - i64::from(rt.playback_latency.max) - i64::from(rt.capture_latency.max)
    );
    println!(
        "round trip {} frames ({:.3} ms), {} of {} bursts agree, {} xruns, {} disturbed",
        rt.frames, rt.ms, rt.agreeing, rt.bursts, rt.xruns, rt.disturbed
    );
    if exact {
        Attempt::Checked(())
    } else {
        Attempt::Waived(format!(
            "{why}: the copy's level and phase cannot be checked exactly"
        ))
    }
}

#[test]
fn own_out_to_own_in_arrives_one_period_later() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let mut o = options(&srv);
    o.self_loop = true;
    let rt = until_checked(3, |_| {
        let rt = measure(&o, &|| false).unwrap();
        match check(&rt, u64::from(PERIOD)) {
            Attempt::Checked(()) => Attempt::Checked(rt),
            Attempt::Waived(why) => Attempt::Waived(why),
        }
    });
    assert_eq!(
        rt.out_connections,
        vec!["firmtime-roundtrip:in".to_string()]
    );
    assert_eq!(
        rt.in_connections,
        vec!["firmtime-roundtrip:out".to_string()]
    );
    // Nothing but our own ports in the loop: JACK reports no latency.
    assert_eq!((rt.playback_latency.max, rt.capture_latency.max), (0, 0));
    assert_eq!(rt.extra_frames, i64::from(PERIOD));
}

#[test]
fn a_cable_of_n_frames_adds_exactly_n() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    // 0: through another client in the same cycle; 100 and 1000: within
    // and beyond one period.
    for delay in [0u32, 100, 1000] {
        let cable = Cable::start("ft-cable", Some(srv.name()), delay).unwrap();
        let mut o = options(&srv);
        o.connect_out = vec![cable.in_port().to_string()];
        o.connect_in = vec![cable.out_port().to_string()];
        let rt = until_checked(3, |_| {
            let rt = measure(&o, &|| false).unwrap();
            match check(&rt, u64::from(PERIOD + delay)) {
                Attempt::Checked(()) => Attempt::Checked(rt),
                Attempt::Waived(why) => Attempt::Waived(why),
            }
        });
        assert_eq!(rt.out_connections, vec!["ft-cable:in".to_string()]);
        assert_eq!(rt.in_connections, vec!["ft-cable:out".to_string()]);
        drop(cable);
    }
}

#[test]
fn an_open_loop_names_the_ports_and_how_to_connect_them() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let e = measure(&options(&srv), &|| false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Port, "{e}");
    let m = e.message();
    assert!(
        m.contains("neither firmtime-roundtrip:out nor firmtime-roundtrip:in is connected"),
        "{m}"
    );
    // The dummy server's physical ports are offered as the example.
    assert!(m.contains("--connect-out system:playback_1"), "{m}");
    assert!(m.contains("--connect system:capture_1"), "{m}");
    assert!(
        m.contains("jack_connect firmtime-roundtrip:out firmtime-roundtrip:in"),
        "{m}"
    );
}

/// Regression: with one side connected, the message said "firmtime-roundtrip:in
/// is connected to anything" (the "not" was missing).
#[test]
fn a_loop_open_on_one_side_names_that_side_as_not_connected() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let mut o = options(&srv);
    o.connect_out = vec!["system:playback_1".into()];
    let e = measure(&o, &|| false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Port, "{e}");
    let m = e.message();
    assert!(
        m.contains("firmtime-roundtrip:in is not connected to anything: "),
        "{m}"
    );
    assert!(!m.contains("firmtime-roundtrip:out is"), "{m}");
}

#[test]
fn a_loop_that_brings_nothing_back_is_no_signal_naming_the_ports() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    // Out goes to the dummy's playback port, in listens to its capture
    // port: connected, but the dummy driver does not loop them.
    let mut o = options(&srv);
    o.connect_out = vec!["system:playback_1".into()];
    o.connect_in = vec!["system:capture_1".into()];
    o.bursts = 2;
    let e = measure(&o, &|| false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSignal, "{e}");
    let m = e.message();
    assert!(m.contains("none of 2 test bursts"), "{m}");
    assert!(
        m.contains("firmtime-roundtrip:out connected to system:playback_1"),
        "{m}"
    );
    assert!(
        m.contains("system:capture_1 connected to firmtime-roundtrip:in"),
        "{m}"
    );
}

#[test]
fn options_out_of_range_are_refused_with_the_range() {
    let mut o = RoundTripOptions::new();
    o.bursts = 0;
    let e = measure(&o, &|| false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("1..=100"), "{e}");
    let mut o = RoundTripOptions::new();
    o.level_dbfs = f64::NAN;
    assert!(measure(&o, &|| false)
        .unwrap_err()
        .message()
        .contains("-60..=0"));
}

/// The frames jack_iodelay prints last for the loop through `cable`
/// (its client is `jack_delay`), after about 3 s of measuring.
fn jack_iodelay_frames(srv: &DummyServer, cable: &Cable) -> Option<f64> {
    let child = Command::new("stdbuf")
        .args(["-oL", "jack_iodelay"])
        .env("JACK_DEFAULT_SERVER", srv.name())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let pid = child.id();
    let connect = |a: &str, b: &str| {
        for _ in 0..50 {
            let ok = Command::new("jack_connect")
                .args([a, b])
                .env("JACK_DEFAULT_SERVER", srv.name())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    };
    let connected =
        connect("jack_delay:out", cable.in_port()) && connect(cable.out_port(), "jack_delay:in");
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill on the child we spawned (not yet reaped) has no memory effects.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = child.wait_with_output().ok()?;
    assert!(connected, "could not connect jack_delay's ports");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .rfind(|l| l.contains("total roundtrip latency"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

#[test]
fn the_round_trip_equals_jack_iodelays_on_the_same_loop() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !program_on_path("jack_iodelay") || !program_on_path("stdbuf") {
        return firmtime_rt::testing::skip("jack_iodelay not installed (Debian: jackd2)");
    }
    let Some(srv) = server() else { return };
    let delay = 333;
    let cable = Cable::start("ft-cable", Some(srv.name()), delay).unwrap();
    let theirs = jack_iodelay_frames(&srv, &cable).expect("jack_iodelay printed a round trip");
    let mut o = options(&srv);
    o.connect_out = vec![cable.in_port().to_string()];
    o.connect_in = vec![cable.out_port().to_string()];
    let ours = until_checked(3, |_| {
        let ours = measure(&o, &|| false).unwrap();
        match check(&ours, u64::from(PERIOD + delay)) {
            Attempt::Checked(()) => Attempt::Checked(ours),
            Attempt::Waived(why) => Attempt::Waived(why),
        }
    });
    println!(
        "jack_iodelay {theirs:.3} frames, firmtime {} frames",
        ours.frames
    );
    // jack_iodelay's phase method is fractional: within a frame of ours.
    assert!(
        (theirs - ours.frames as f64).abs() < 1.0,
        "{theirs} vs {}",
        ours.frames
    );
}

/// A client that copies `in` to `out` in the same cycle, except that in its
/// `stall_at`-th cycle it spins for `stall` first: the dummy server's
/// cycle overruns, an xrun.
struct Staller {
    inp: jack::Port<jack::AudioIn>,
    out: jack::Port<jack::AudioOut>,
    cycle: u64,
    stall_at: u64,
    stall: Duration,
}

impl jack::ProcessHandler for Staller {
    fn process(&mut self, _: &jack::Client, ps: &jack::ProcessScope) -> jack::Control {
        firmtime_rt::assert_rt::no_alloc(|| {
            self.cycle += 1;
            if self.cycle == self.stall_at {
                let t = std::time::Instant::now();
                while t.elapsed() < self.stall {
                    std::hint::spin_loop();
                }
            }
            self.out
                .as_mut_slice(ps)
                .copy_from_slice(self.inp.as_slice(ps));
        });
        jack::Control::Continue
    }
}

#[test]
fn an_xrun_in_the_loop_is_counted_and_outvoted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server() else { return };
    let client = firmtime_jack::open_client("ft-stall", Some(srv.name())).unwrap();
    let inp = client
        .register_port("in", jack::AudioIn::default())
        .unwrap();
    let out = client
        .register_port("out", jack::AudioOut::default())
        .unwrap();
    // About 0.6 s after it starts: within the measurement's six bursts of
    // 100 ms + 4095 frames (1.1 s), which begin about 0.1 s after it.
    let stall_at = u64::from(RATE) * 6 / 10 / u64::from(PERIOD);
    let active = firmtime_jack::activate(
        client,
        (),
        Staller {
            inp,
            out,
            cycle: 0,
            stall_at,
            stall: Duration::from_millis(30),
        },
        "the stalling client",
    )
    .unwrap();
    let mut o = options(&srv);
    o.connect_out = vec!["ft-stall:in".into()];
    o.connect_in = vec!["ft-stall:out".into()];
    let rt = measure(&o, &|| false).unwrap();
    drop(active);
    println!(
        "xruns {}, frame gaps {}, disturbed {}, bursts {:?}",
        rt.xruns, rt.frame_gaps, rt.disturbed, rt.per_burst
    );
    assert!(
        rt.xruns + rt.frame_gaps >= 1,
        "the stall made no xrun: {rt:?}"
    );
    assert!(rt.disturbed >= 1, "{rt:?}");
    assert_eq!(rt.frames, u64::from(PERIOD), "{rt:?}");
}
