//! The JACK MIDI tests, one body for both servers: `tests/jack.rs` runs it
//! against jackd2's dummy driver, `tests/pipewire.rs` against a headless
//! PipeWire (`crate::SERVER`). Each test starts its own private server and
//! stops it; skipped, with the reason printed, when that server is not
//! installed.
//!
//! Tests assert frames and nanoseconds exactly, never durations: the
//! server's xruns and frame gaps (dropped cycles; PipeWire never reports
//! xruns) are counted and printed, never failed on. A dropped cycle makes
//! JACK re-estimate the time of a frame, so a run that had one and missed
//! an exact check ([`Exact`]) is waived (logged WAIVED) and run again; a
//! test waived in every run fails. Order, messages and counts are asserted
//! in every run.

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firmtime_jack::{program_on_path, ServerKind, TestServer};
use firmtime_midi::jack::{JackBackend, JackOptions, Tap, Tapper, TapperOptions};
use firmtime_midi::{BackendStats, InputEvent, MidiBackend, MidiMessage, OutputEvent, SentEvent};
use firmtime_rt::testing::{until_checked, Attempt};

// With `--features assert-rt`, an allocation inside a JACK process callback
// aborts this test binary.
#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

/// One server at a time: the machine has two cores shared with other work.
static SERIAL: Mutex<()> = Mutex::new(());

/// A private server of this binary's kind (real-time when root); `None`: skip.
fn server(period: u32) -> Option<TestServer> {
    let kind: ServerKind = crate::SERVER;
    let srv = TestServer::start_for_test(kind, 48_000, period);
    if srv.is_none() {
        firmtime_rt::testing::skip(format!(
            "{} not installed (Debian: {})",
            kind.label(),
            kind.install_hint()
        ));
    }
    srv
}

/// Dropped cycles a backend saw: xruns (jackd) and frame gaps (both servers).
fn lost(s: &BackendStats) -> u64 {
    s.xruns + s.frame_gaps
}

fn backend(srv: &TestServer, name: &str) -> JackBackend {
    let mut o = JackOptions::new(name);
    o.server_name = Some(srv.name().to_string());
    JackBackend::open(o).expect("JACK client opens on the dummy server")
}

/// Drains input until `n` events arrived or 10 s passed.
fn collect(b: &mut JackBackend, n: usize) -> Vec<InputEvent> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n && Instant::now() < deadline {
        b.poll_input(&mut |ev| got.push(ev))
            .expect("server still up");
        let until = firmtime_rt::clock::monotonic_ns() + 50_000_000;
        b.wait(until).expect("server still up");
    }
    got
}

fn note_on(note: u8) -> MidiMessage {
    MidiMessage::NoteOn {
        channel: 0,
        note,
        velocity: 100,
    }
}

fn note_off(note: u8) -> MidiMessage {
    MidiMessage::NoteOff {
        channel: 0,
        note,
        velocity: 0,
    }
}

/// The exact frame and time checks of one run: asserted in a run without
/// xruns or frame gaps. In a run with some, a check that misses waives the
/// run instead ([`Exact::verdict`]: logged WAIVED), and the test's
/// [`until_checked`] runs it again; a test waived in every run fails.
struct Exact {
    xruns: u64,
    missed: Vec<String>,
}

impl Exact {
    /// The checks of a run that saw `xruns` xruns and frame gaps.
    fn new(xruns: u64) -> Self {
        Self {
            xruns,
            missed: Vec::new(),
        }
    }

    /// One exact check: `ok`, else (after xruns) a miss described by `what`.
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            return;
        }
        let what = what();
        assert!(self.xruns > 0, "{what}");
        self.missed.push(what);
    }

    /// Checked when every exact check held, else waived with the first miss.
    fn verdict(self) -> Attempt<()> {
        match self.missed.first() {
            None => Attempt::Checked(()),
            Some(first) => Attempt::Waived(format!(
                "{} exact check(s) missed after {} xruns/frame gaps; the first: {first}",
                self.missed.len(),
                self.xruns
            )),
        }
    }
}

/// The frames-per-tap figure the scripts grep for.
fn report(sender: &str, errors: &[i64]) {
    let max = errors.iter().map(|e| e.unsigned_abs()).max().unwrap_or(0);
    println!(
        "FRAMES {sender}: {} taps, max |error| = {max} frames",
        errors.len()
    );
}

#[test]
fn ports_register_and_show_in_jack_lsp() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server(256) else { return };
    let mut o = JackOptions::new("ft-ports");
    o.server_name = Some(srv.name().to_string());
    o.inputs = vec!["keys".into(), "pads".into()];
    o.outputs = vec!["synth".into()];
    let b = JackBackend::open(o).unwrap();
    assert_eq!(b.input_port_names(), ["ft-ports:keys", "ft-ports:pads"]);
    assert_eq!(b.output_port_names(), ["ft-ports:synth"]);
    assert_eq!(b.sample_rate(), 48_000);
    assert_eq!(b.buffer_size(), 256);
    println!(
        "JACK clock: {:?}, offset to CLOCK_MONOTONIC {} ns",
        b.jack_clock(),
        b.clock_offset_ns()
    );
    let lsp = srv
        .client_env(&mut Command::new("jack_lsp"))
        .args(["-s", srv.name(), "-t"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let lsp = String::from_utf8_lossy(&lsp.stdout);
    for port in ["ft-ports:keys", "ft-ports:pads", "ft-ports:synth"] {
        let i = lsp
            .find(port)
            .unwrap_or_else(|| panic!("{port} not in:\n{lsp}"));
        assert!(
            lsp[i..].lines().nth(1).unwrap().contains("midi"),
            "{port} is MIDI"
        );
    }
    // A client on a server that does not exist: a clear error, no hang.
    let mut bad = JackOptions::new("ft-nowhere");
    bad.server_name = Some(format!("{}-absent", srv.name()));
    let err = JackBackend::open(bad).unwrap_err();
    assert_eq!(err.kind(), firmtime_midi::ErrorKind::ServerUnavailable);
    let absent = format!("the JACK server \"{}-absent\"", srv.name());
    assert!(err.message().contains(&absent), "names the server: {err}");
    assert!(
        err.message().contains("no server of that name answered"),
        "{err}"
    );
}

#[test]
fn tapper_taps_recorded_with_zero_frame_error_in_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server(256) else { return };
    until_checked(3, |_| {
        let mut rec = backend(&srv, "ft-rec");
        // 60 taps at irregular offsets (not multiples of the period), Note On
        // then Note Off 50 ms later, over about 2 s; two taps share one cycle.
        let mut taps = Vec::new();
        for i in 0..30u64 {
            let on = 1000 + i * 3331 + (i % 7) * 17;
            taps.push(Tap {
                offset: on,
                msg: note_on(40 + i as u8),
            });
            taps.push(Tap {
                offset: on + 2400,
                msg: note_off(40 + i as u8),
            });
        }
        let mut o = TapperOptions::new("ft-tapper");
        o.server_name = Some(srv.name().to_string());
        o.connect_to = vec![rec.input_port_names()[0].clone()];
        o.lead_frames = 512;
        let tapper = Tapper::start(o, taps.clone()).unwrap();
        let got = collect(&mut rec, taps.len());
        let truth = tapper.finish(Duration::from_secs(10)).unwrap();
        assert!(truth.complete);
        assert_eq!(truth.dropped, 0);
        assert_eq!(truth.records.len(), taps.len());
        let xruns = lost(&rec.stats()) + truth.xruns + truth.frame_gaps;
        let mut ex = Exact::new(xruns);
        let start = truth.start_frame.unwrap();
        for (tap, r) in taps.iter().zip(&truth.records) {
            // A tap due in a cycle an xrun skipped goes out late, flagged.
            assert!(r.frame >= start + tap.offset, "tapper never early");
            assert_eq!(r.late, r.frame > start + tap.offset, "late flagged");
            ex.check(r.frame == start + tap.offset, || {
                format!(
                    "tapper placed {:?} at {} for {}",
                    tap.msg,
                    r.frame,
                    start + tap.offset
                )
            });
        }
        // An xrun can lose or repeat a cycle's buffer: then events no longer pair by order.
        ex.check(got.len() == taps.len(), || {
            format!("{} of {} taps recorded", got.len(), taps.len())
        });
        let paired = if got.len() == taps.len() {
            &got[..]
        } else {
            &[]
        };
        let mut errors = Vec::new();
        for (r, ev) in truth.records.iter().zip(paired) {
            ex.check(ev.msg == r.msg, || {
                format!("received {:?} where {:?} was sent", ev.msg, r.msg)
            });
            assert_eq!(ev.port, 0);
            errors.push(ev.frame.unwrap() as i64 - r.frame as i64);
            ex.check(ev.t_ns == r.t_ns, || {
                format!(
                    "same frame, same CLOCK_MONOTONIC ns: {} vs {}",
                    ev.t_ns, r.t_ns
                )
            });
        }
        ex.check(errors.iter().all(|&e| e == 0), || {
            format!("frame errors: {errors:?}")
        });
        let st = rec.stats();
        ex.check(st.received == taps.len() as u64, || {
            format!("the backend counted {} of {} taps", st.received, taps.len())
        });
        assert_eq!((st.input_dropped, st.malformed), (0, 0));
        report("firmtime tapper", &errors);
        println!(
            "xruns: backend {}, tapper {}; frame gaps: backend {}, tapper {}",
            st.xruns, truth.xruns, st.frame_gaps, truth.frame_gaps
        );
        ex.verdict()
    });
}

/// A jack_midiseq child, killed and reaped on drop.
struct Seq(Child);

impl Seq {
    /// Whether jack_midiseq is there to start; prints the SKIP line when not.
    fn installed() -> bool {
        let found = program_on_path("jack_midiseq");
        if !found {
            firmtime_rt::testing::skip("jack_midiseq not installed (Debian: jackd2)");
        }
        found
    }

    /// Starts `jack_midiseq name args…` on `srv` and connects its output to
    /// `rec`'s input as soon as it has registered.
    fn start(srv: &TestServer, rec: &JackBackend, name: &str, args: &[&str]) -> Seq {
        let seq = Seq(srv
            .client_env(&mut Command::new("jack_midiseq"))
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap());
        let out = format!("{name}:out");
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.connect(&out, "ft-rec:in").is_err() {
            assert!(
                Instant::now() < deadline,
                "jack_midiseq never registered {out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        seq
    }
}

impl Drop for Seq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn jack_midiseq_taps_recorded_at_exact_loop_frames() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !Seq::installed() {
        return;
    }
    let Some(srv) = server(256) else { return };
    until_checked(3, |_| {
        let mut rec = backend(&srv, "ft-rec");
        // A 4800-frame loop (0.1 s): C4 at 0 for 1000 frames, E4 at 2400 for 600.
        const LOOP: u64 = 4800;
        let pattern = [
            (0u64, 60u8, true),
            (1000, 60, false),
            (2400, 64, true),
            (3000, 64, false),
        ];
        let seq = Seq::start(
            &srv,
            &rec,
            "ft-seq",
            &["4800", "0", "60", "1000", "2400", "64", "600"],
        );
        let got = collect(&mut rec, 60);
        drop(seq);
        assert!(
            got.len() >= 60,
            "only {} events from jack_midiseq",
            got.len()
        );
        // Align on the first C4 Note On; every event after it must fall on
        // first + k·LOOP + its pattern position, in pattern order.
        let first = got
            .iter()
            .position(|e| {
                matches!(
                    e.msg,
                    MidiMessage::NoteOn {
                        note: 60,
                        velocity: 1..,
                        ..
                    }
                )
            })
            .expect("a C4 note on");
        let f0 = got[first].frame.unwrap();
        // jack_midiseq advances its loop by the frames of each cycle it runs, so
        // an xrun shifts (or, with a repeated buffer, repeats) the rest of its
        // pattern: the order and frames are exact only in a run without one.
        let xruns = lost(&rec.stats());
        let mut ex = Exact::new(xruns);
        let mut errors = Vec::new();
        for (i, ev) in got[first..].iter().enumerate() {
            let (pos, note, on) = pattern[i % 4];
            let expected = f0 + (i as u64 / 4) * LOOP + pos;
            let is_on = matches!(ev.msg, MidiMessage::NoteOn { velocity: 1.., .. });
            let n = match ev.msg {
                MidiMessage::NoteOn { note, .. } | MidiMessage::NoteOff { note, .. } => note,
                other => panic!("unexpected {other:?}"),
            };
            assert!(
                n == 60 || n == 64,
                "event {i}: note {n} is not jack_midiseq's"
            );
            ex.check((n, is_on) == (note, on), || {
                format!("event {i} ({n}, on {is_on}) breaks the pattern at ({note}, on {on})")
            });
            errors.push(ev.frame.unwrap() as i64 - expected as i64);
        }
        ex.check(errors.iter().all(|&e| e == 0), || {
            format!("frame errors: {errors:?}")
        });
        report("jack_midiseq", &errors);
        let st = rec.stats();
        println!("xruns: backend {}; frame gaps {}", st.xruns, st.frame_gaps);
        ex.verdict()
    });
}

#[test]
fn scheduled_output_arrives_at_second_client_at_intended_frame() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = server(256) else { return };
    until_checked(3, |_| {
        let mut rx = backend(&srv, "ft-rx");
        let mut o = JackOptions::new("ft-tx");
        o.server_name = Some(srv.name().to_string());
        o.inputs = vec![];
        o.connect_outputs = vec!["ft-rx:in".into()];
        let mut tx = JackBackend::open(o).unwrap();
        let ns_per_frame = 1_000_000_000u64.div_ceil(48_000);
        // 20 events 7.3 ms apart (not on frame or period boundaries), starting
        // 300 ms from now so none is late; one "now" event first.
        let t0 = firmtime_rt::clock::monotonic_ns() + 300_000_000;
        tx.send(OutputEvent {
            at_ns: None,
            port: 0,
            msg: note_on(1),
            tag: 100,
        })
        .unwrap();
        for i in 0..20u32 {
            let at = t0 + u64::from(i) * 7_300_001;
            tx.send(OutputEvent {
                at_ns: Some(at),
                port: 0,
                msg: note_on(i as u8),
                tag: i,
            })
            .unwrap();
        }
        assert_eq!(
            tx.send(OutputEvent {
                at_ns: None,
                port: 3,
                msg: note_on(1),
                tag: 0
            }),
            Err(firmtime_midi::BackendError::NoSuchPort(3))
        );
        let got = collect(&mut rx, 21);
        let mut sent: Vec<SentEvent> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while sent.len() < 21 && Instant::now() < deadline {
            tx.poll_sent(&mut |s| sent.push(s));
            std::thread::sleep(Duration::from_millis(5));
        }
        let why = format!(
            "tx {:?}, rx {:?}, {} sent reports dropped; the server said:\n{}",
            tx.stats(),
            rx.stats(),
            tx.sent_reports_dropped(),
            srv.log_tail(30)
        );
        assert_eq!(sent.len(), 21, "{why}");
        assert_eq!(sent[0].tag, 100);
        assert_eq!(sent[0].intended_ns, None);
        let xruns = lost(&tx.stats()) + lost(&rx.stats());
        let mut ex = Exact::new(xruns);
        // An xrun can lose or repeat a cycle's buffer: then events no longer pair by order.
        ex.check(got.len() == 21, || {
            format!("received {} of 21: {why}", got.len())
        });
        let paired = if got.len() == 21 { &got[..] } else { &[] };
        let mut errors = Vec::new();
        for (s, ev) in sent.iter().zip(paired) {
            ex.check(ev.msg == s.msg, || {
                format!("received {:?} where {:?} was sent", ev.msg, s.msg)
            });
            ex.check(ev.frame == s.frame, || {
                format!("received at {:?}, placed at {:?}", ev.frame, s.frame)
            });
            ex.check(ev.t_ns == s.actual_ns, || {
                format!("received at {} ns, placed at {} ns", ev.t_ns, s.actual_ns)
            });
        }
        for s in &sent {
            if let Some(intended) = s.intended_ns {
                // Placed at the first frame not before the intended time.
                assert!(s.actual_ns >= intended, "never early");
                ex.check(s.actual_ns - intended < ns_per_frame, || {
                    format!(
                        "placed {} ns after the intended time",
                        s.actual_ns - intended
                    )
                });
                errors.push(s.actual_ns - intended);
            }
        }
        let tags: Vec<u32> = sent.iter().map(|s| s.tag).collect();
        let mut want = vec![100];
        want.extend(0..20);
        assert_eq!(tags, want, "sent in time order");
        let st = tx.stats();
        assert_eq!((st.sent, st.output_dropped), (21, 0));
        ex.check(st.late_outputs == 0, || {
            format!("{} outputs late", st.late_outputs)
        });
        println!(
            "FRAMES scheduled output: {} events, placed at most {} ns after the intended time \
         ({xruns} xruns and frame gaps)",
            errors.len(),
            errors.iter().max().unwrap_or(&0)
        );
        ex.verdict()
    });
}

#[test]
fn xruns_are_counted_and_the_run_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !Seq::installed() {
        return;
    }
    let Some(srv) = server(256) else { return };
    let mut rec = backend(&srv, "ft-rec");
    let seq = Seq::start(&srv, &rec, "ft-stall", &["4800", "0", "60", "1000"]);
    assert!(!collect(&mut rec, 2).is_empty());
    // Stop the other client mid-graph: the server misses its deadline;
    // jackd reports xruns to every client, PipeWire reports none, and the
    // clients downstream get no cycles until it runs again: a frame gap.
    let pid = seq.0.id() as i32;
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let deadline = Instant::now() + Duration::from_secs(2);
    while lost(&rec.stats()) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while lost(&rec.stats()) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(seq);
    let xruns = lost(&rec.stats());
    assert!(
        xruns >= 1,
        "a stalled client causes xruns or frame gaps the backend counts ({:?})",
        rec.stats()
    );
    // The backend is still usable after the xruns.
    let before = rec.cycles();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rec.cycles() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        rec.cycles() > before,
        "process cycles continue after xruns ({xruns} xruns, {before} cycles, \
         backend stats {:?}); the server said:\n{}",
        rec.stats(),
        srv.log_tail(30)
    );
    let st = rec.stats();
    println!("xruns counted: {}, frame gaps {}", st.xruns, st.frame_gaps);
}
