//! The timing certificate (docs/TAP.md §11): `firmtime tap certify`, and
//! before each session of `firmtime tap run` unless `--no-certify`.
//!
//! The checks run beside the session's backend, never through its ports
//! (a connection made and removed on them would be an input loss): the
//! audio loop is `audio roundtrip`'s measurement on the session's server
//! (inside JACK through a copying client, or through the cable named);
//! MIDI stamping and the feedback delay run on a second instance of the
//! session's backend (`firmtime-tap-certify`, same server, period and
//! synth) whose MIDI output is connected to its own input.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use firmtime_jack::roundtrip::{self, RoundTripOptions};
use firmtime_midi::jack::{AudioOptions, JackBackend, JackOptions};
use firmtime_midi::loopback::{Loopback, LoopbackOptions};
use firmtime_midi::MidiBackend;
use firmtime_rt::setup;
use firmtime_tap::certificate::{
    self, AudioLoopCheck, Certificate, FeedbackDelayCheck, FrameClock, MidiStampingCheck,
    ProbePlan, Status,
};
use firmtime_tap::experiment::Device;
use firmtime_tap::Experiment;

use super::{open, rt_request, BackendArgs, Opened, TapBackend};
use crate::args::{self, Outcome};
use crate::signals::{self, Repeat};

/// Arguments of `firmtime tap certify`.
#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// Experiment files of the session to certify (their feedback delays,
    /// audio output and input decide what is tested).
    #[arg(required = true, value_name = "EXPERIMENT.toml")]
    experiments: Vec<PathBuf>,
    /// Where the audio loop's test signal comes back: `self` (a loop
    /// inside JACK through a client that copies its input to its output:
    /// the server's graph, not the sound card; the default on a dummy
    /// server started by --jack-dummy) or a capture port cabled from the
    /// audio output (e.g. system:capture_1). Without it, and on other
    /// servers, the audio loop is not tested (the certificate says why).
    #[arg(long = "loop", value_name = "self|PORT")]
    loop_: Option<String>,
    /// Write the certificate as JSON to PATH (`-` or a bare --json: stdout); docs/TAP.md §11.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    #[command(flatten)]
    open: BackendArgs,
}

/// Probes of the MIDI and feedback checks.
const PROBES: u32 = 16;
/// Time between probes.
const SPACING: Duration = Duration::from_millis(25);
/// Runs of a check disturbed by xruns or dropped cycles that failed, at most.
const ATTEMPTS: u32 = 3;

/// The words of a backend up to its first `;` (what it is, not its connections).
pub(super) fn backend_label(opened: &Opened) -> String {
    opened
        .words
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Takes the certificate of a session of `experiments` on `opened`
/// (`taken`: `before the session` or `by tap certify`); `loop_`: as
/// `--certify-loop`/`--loop`. Prints nothing.
///
/// # Errors
/// Only when a check's client cannot be opened at all for a reason other
/// than the check (the checks' own failures are in the certificate).
pub(super) fn take(
    opened: &Opened,
    experiments: &[&Experiment],
    loop_: Option<&str>,
    taken: &str,
    seed: u64,
) -> anyhow::Result<Certificate> {
    let at = Some(firmtime_rt::system::rfc3339_utc(
        std::time::SystemTime::now(),
    ));
    let clock = opened.jack.as_ref().map(|j| FrameClock {
        sample_rate: j.sample_rate,
        period: j.period,
    });
    let audio_loop = audio_loop(opened, loop_);
    let (midi, feedback) = probes(opened, experiments, seed)?;
    Ok(Certificate::new(
        taken,
        at,
        backend_label(opened),
        clock,
        audio_loop,
        midi,
        feedback,
    ))
}

/// The audio loop: `audio roundtrip` on the session's server.
fn audio_loop(opened: &Opened, loop_: Option<&str>) -> AudioLoopCheck {
    let Some(j) = &opened.jack else {
        return AudioLoopCheck::not_tested(format!(
            "the {} backend has no audio path (audio loops are measured through JACK)",
            match opened.kind {
                TapBackend::Raw => "raw MIDI",
                _ => "loopback",
            }
        ));
    };
    let (self_loop, capture) = match loop_ {
        Some("self") => (true, None),
        Some(port) => (false, Some(port.to_string())),
        None if j.dummy_started => (true, None),
        None => return AudioLoopCheck::not_tested(
            "no loop to measure: name one with --certify-loop (tap certify: --loop): a capture \
                 port cabled from the audio output, or `self` for a loop inside JACK (the \
                 server's graph, not the sound card)",
        ),
    };
    let playback = if self_loop {
        Vec::new()
    } else if !j.audio_connect.is_empty() {
        j.audio_connect.clone()
    } else {
        firmtime_jack::playback_ports(j.server.as_deref()).unwrap_or_default()
    };
    if !self_loop && playback.is_empty() {
        return AudioLoopCheck::not_tested(
            "no playback port to send the test signal to (the audio output is connected to \
             nothing and the server has no physical playback port): give --audio-out PORT",
        );
    }
    // Inside JACK the loop goes through a client of its own that copies
    // its input to its output (no delay): PipeWire's JACK delivers nothing
    // on a connection from a client's output to its own input, jackd one
    // period later either way.
    let cable = if self_loop {
        match roundtrip::Cable::start("firmtime-tap-certify-cable", j.server.as_deref(), 0) {
            Ok(c) => Some(c),
            Err(e) => {
                return AudioLoopCheck::not_tested(format!(
                    "the loop inside JACK needs a client of its own, which could not open: {e}"
                ))
            }
        }
    } else {
        None
    };
    let options = RoundTripOptions {
        client_name: "firmtime-tap-certify-loop".into(),
        server: j.server.clone(),
        connect_out: match &cable {
            Some(c) => vec![c.in_port().to_string()],
            None => playback.clone(),
        },
        connect_in: match &cable {
            Some(c) => vec![c.out_port().to_string()],
            None => capture.iter().cloned().collect(),
        },
        self_loop: false,
        bursts: 4,
        // Our own connections: seen at once, or after the server's next
        // graph change on a loaded machine.
        wait_for_connections: Duration::from_secs(2),
        max_latency: if self_loop {
            Duration::from_millis(50)
        } else {
            Duration::from_millis(500)
        },
        ..RoundTripOptions::new()
    };
    let path = if self_loop {
        "a loop inside JACK, firmtime-tap-certify-loop:out -> firmtime-tap-certify-cable (a copy, \
         no delay) -> firmtime-tap-certify-loop:in (the server's graph, no sound card)"
            .to_string()
    } else {
        format!(
            "firmtime-tap-certify-loop:out -> {} -> a cable -> {} -> firmtime-tap-certify-loop:in",
            playback.join(", "),
            capture.as_deref().unwrap_or("?")
        )
    };
    let expected = self_loop.then_some(u64::from(j.period));
    let mut attempts = 0;
    loop {
        attempts += 1;
        let check = AudioLoopCheck {
            attempts,
            ..measure_loop(&options, &path, expected)
        };
        let disturbed = check.xruns.unwrap_or(0) + check.frame_gaps.unwrap_or(0) > 0;
        if check.status == Status::Passed || !disturbed || attempts >= ATTEMPTS {
            drop(cable);
            return check;
        }
    }
}

/// One measurement of the audio loop.
fn measure_loop(options: &RoundTripOptions, path: &str, expected: Option<u64>) -> AudioLoopCheck {
    let path = path.to_string();
    match roundtrip::measure(options, &signals::interrupted) {
        Ok(rt) => {
            let mut why = Vec::new();
            // Bursts near an xrun or a dropped cycle are not trusted when
            // others are (roundtrip::measure): most of the rest must agree.
            let trusted = match rt.bursts - rt.disturbed {
                0 => rt.bursts,
                n => n,
            };
            if rt.agreeing * 2 <= trusted {
                why.push(format!(
                    "only {} of {trusted} bursts agree on the loop's latency",
                    rt.agreeing
                ));
            }
            if rt.xruns + rt.frame_gaps > 0 && !why.is_empty() {
                why.push(format!(
                    "{} xruns and {} dropped cycles during the measurement",
                    rt.xruns, rt.frame_gaps
                ));
            }
            if let Some(e) = expected.filter(|&e| e != rt.frames) {
                why.push(format!(
                    "{} frames where a loop inside JACK takes one period, {e}",
                    rt.frames
                ));
            }
            AudioLoopCheck {
                status: if why.is_empty() {
                    Status::Passed
                } else {
                    Status::Failed
                },
                why: (!why.is_empty()).then(|| why.join("; ")),
                path: Some(path),
                frames: Some(rt.frames),
                ms: Some(rt.ms),
                expected_frames: expected,
                bursts: Some(rt.bursts),
                agreeing: Some(rt.agreeing),
                disturbed: Some(rt.disturbed),
                playback_latency_frames: Some(rt.playback_latency.max),
                capture_latency_frames: Some(rt.capture_latency.max),
                extra_frames: Some(rt.extra_frames),
                xruns: Some(rt.xruns),
                frame_gaps: Some(rt.frame_gaps),
                attempts: 1,
            }
        }
        Err(e) => AudioLoopCheck {
            status: Status::Failed,
            path: Some(path),
            expected_frames: expected,
            ..AudioLoopCheck::not_tested(format!("the measurement failed: {e}"))
        },
    }
}

/// MIDI stamping and the feedback delay: probes through a MIDI loop.
fn probes(
    opened: &Opened,
    experiments: &[&Experiment],
    seed: u64,
) -> anyhow::Result<(MidiStampingCheck, FeedbackDelayCheck)> {
    // The trial's late threshold: what its self-checks call late.
    let late_ns = firmtime_tap::engine::EngineOptions::default().late_threshold_us * 1000;
    let mut plan = ProbePlan {
        probe_port: 0,
        probes: PROBES,
        spacing_ns: SPACING.as_nanos() as u64,
        feedback: Vec::new(),
        clock: None,
        no_clock_why: String::new(),
        path: String::new(),
        feedback_output: String::new(),
        tolerance_ns: late_ns,
        stamp_tolerance_ns: late_ns,
        minimum_delay_ns: opened.timing.min_feedback_ns,
    };
    let feedback_words = |e: &[&Experiment]| {
        let audio = e.iter().any(|e| e.output.device == Device::Audio);
        let midi = e.iter().any(|e| e.output.device == Device::Midi);
        match (midi, audio) {
            (true, true) => "MIDI and audio (the synth's port)",
            (false, true) => "audio (the synth's port)",
            _ => "MIDI",
        }
        .to_string()
    };
    let r = match (opened.kind, &opened.jack) {
        (TapBackend::Jack, Some(j)) => {
            let mut jo = JackOptions::new("firmtime-tap-certify");
            jo.server_name = j.server.clone();
            jo.audio = opened.synth.map(AudioOptions::new);
            let mut b = JackBackend::open(jo)
                .context("opening the timing certificate's JACK client (or --no-certify)")?;
            let (out, inp) = (
                b.output_port_names()[0].clone(),
                b.input_port_names()[0].clone(),
            );
            b.connect(&out, &inp)
                .context("connecting the certificate's MIDI loop")?;
            let clock = FrameClock {
                sample_rate: b.sample_rate(),
                period: b.buffer_size(),
            };
            let audio_port = b.audio_port();
            plan.feedback = certificate::feedback_plans(experiments, PROBES, seed, &|e| match (
                e.output.device,
                audio_port,
            ) {
                (Device::Audio, Some(p)) => p,
                _ => 0,
            });
            plan.clock = Some(clock);
            plan.path = format!(
                "a MIDI loop inside JACK, {out} -> {inp} (the server's graph and the backend's \
                 frame bookkeeping; a keyboard's or pad's own latency is not in it)"
            );
            plan.feedback_output = feedback_words(experiments);
            certificate::probe_attempts(&mut b, &plan, ATTEMPTS)
                .map_err(|e| anyhow::anyhow!("{e}"))?
        }
        (TapBackend::Loopback, _) => {
            let mut b = Loopback::new(LoopbackOptions {
                byte_ns: None,
                capacity: 1 << 12,
            });
            plan.feedback = certificate::feedback_plans(experiments, PROBES, seed, &|_| 0);
            plan.no_clock_why =
                "the loopback backend has no frame clock (its input is stamped in-process)".into();
            plan.path = "the in-process loopback".into();
            plan.feedback_output = "MIDI (in-process loopback)".into();
            certificate::probe_attempts(&mut b as &mut dyn MidiBackend, &plan, ATTEMPTS)
                .map_err(|e| anyhow::anyhow!("{e}"))?
        }
        _ => {
            return Ok((
                MidiStampingCheck::not_tested(
                    "a raw MIDI device has no loop back to its input that firmtime can close, \
                     and no frame clock: its input is stamped on arrival by the backend's I/O \
                     thread",
                ),
                FeedbackDelayCheck::not_tested(
                    "not on a raw device: the certificate plays no test notes to the subject's \
                     sound module",
                ),
            ))
        }
    };
    Ok((r.midi, r.feedback))
}

/// The certificate on stderr (before a session).
pub(super) fn print(c: &Certificate) {
    for l in c.lines() {
        eprintln!("firmtime: {l}");
    }
    if c.status == Status::Failed {
        eprintln!(
            "firmtime: warning: the timing certificate FAILED (above); the session goes on and \
             every trial's files record it"
        );
    }
}

/// Runs `firmtime tap certify`.
pub fn certify(a: CertifyArgs) -> anyhow::Result<Outcome> {
    std::thread::Builder::new()
        .name("ft-tap-certify".into())
        .spawn(move || certify_on_thread(a))
        .context("starting the certificate's thread")?
        .join()
        .map_err(|_| anyhow::anyhow!("the certificate's thread panicked"))?
}

fn certify_on_thread(a: CertifyArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let exps: Vec<Experiment> = super::read_experiments(&a.experiments)?
        .into_iter()
        .map(|(_, _, e)| e)
        .collect();
    let synth = firmtime_tap::audio::session_synth(exps.iter())?;
    let audio_in = exps.iter().any(|e| e.input.source.has_audio());
    let opened = open(&a.open, "firmtime-tap", synth, audio_in)?;
    let _rt = setup::apply(&rt_request(&a.open, a.open.priority, true))
        .context("real-time setup (or run with --no-rt)")?;
    signals::catch(Repeat::Caught)?;
    let refs: Vec<&Experiment> = exps.iter().collect();
    let c = take(&opened, &refs, a.loop_.as_deref(), "by tap certify", 1)?;
    let redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    for l in c.lines() {
        println!("{l}");
    }
    for n in &c.not_tested {
        println!("  not tested: {n}");
    }
    drop(redirect);
    if let Some(p) = &a.json {
        args::write_json(p, &serde_json::to_value(&c)?)?;
    }
    Ok(if c.status == Status::Failed {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}
