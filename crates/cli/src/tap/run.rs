//! `firmtime tap run` (sessions of trials) and `firmtime tap replay`.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use firmtime_jack::DummyServer;
use firmtime_midi::jack::SynthOptions;
use firmtime_midi::{MidiBackend, PortIndex};
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::system::Provenance;
use firmtime_tap::audio;
use firmtime_tap::engine::{EndReason, Engine, EngineOptions, TrialOutcome};
use firmtime_tap::late::{self, BackendTiming, LateReport};
use firmtime_tap::replay::{self, ReplaySource};
use firmtime_tap::session::{self, TrialMeta};
use firmtime_tap::{data, Experiment};
use firmtime_trace::explain::{self, LoopThread, LoopWatch};

use crate::args::{self, Outcome, UsageError};
use crate::backend;
use crate::signals::{self, Repeat};

pub(super) mod certify;

/// The MIDI backends a session can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TapBackend {
    /// JACK MIDI: frame-accurate input stamps and output placement.
    Jack,
    /// A raw byte stream (serial tty, /dev/midi*, /dev/snd/midiC*D*).
    Raw,
    /// In-process loopback (no device; outputs come back as input, which is
    /// ignored unless --input-channel is given). For tests and dry runs.
    Loopback,
}

/// Trial order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrialOrder {
    /// As listed.
    Fixed,
    /// Shuffled with --seed (recorded in every sidecar).
    Random,
}

/// How to open the backend (shared by run and replay).
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// The MIDI backend.
    #[arg(long, value_enum, default_value_t = TapBackend::Jack)]
    backend: TapBackend,
    /// JACK: the server name (default: $JACK_DEFAULT_SERVER or "default").
    #[arg(long, value_name = "NAME")]
    jack_server: Option<String>,
    /// JACK: when no server runs, start a private `jackd -d dummy` and stop it at the end.
    #[arg(long)]
    jack_dummy: bool,
    /// JACK: connect this port (`client:port`) to our input; repeatable.
    #[arg(long, value_name = "PORT")]
    connect: Vec<String>,
    /// JACK: connect our output to this port; repeatable.
    #[arg(long, value_name = "PORT")]
    connect_out: Vec<String>,
    /// JACK, audio output: connect our audio port to this port; repeatable.
    /// Default: every physical playback port (system:playback_*), none with
    /// a dummy server started by --jack-dummy. `none`: no connection.
    #[arg(long, value_name = "PORT")]
    audio_out: Vec<String>,
    /// JACK, taps from sound (`[input] source = "audio"` or `"midi+audio"`): connect this port
    /// (the capture port of the contact microphone, e.g. system:capture_1)
    /// to our audio input firmtime-tap:audio_in; repeatable (mixed). Needed
    /// for such experiments except with --jack-dummy; `none`: connect
    /// nothing (connect it yourself before the first trial).
    #[arg(long, value_name = "PORT")]
    audio_in: Vec<String>,
    /// Raw: the device path.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Raw: baud rate of a serial tty (31250 for a MIDI interface).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    baud: Option<u32>,
    /// SCHED_FIFO priority of the engine: fifo:P or P, 1 to 94 (the backend's threads
    /// get +5; --no-rt: none).
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:70", value_parser = args::fifo_priority(94))]
    priority: u8,
    /// Run without real-time scheduling and memory locking (recorded in the
    /// sidecar; the timing is then not trustworthy).
    #[arg(long)]
    no_rt: bool,
}

/// Arguments of `firmtime tap run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment files (trial types), numbered 1, 2, … in --trials.
    #[arg(required = true, value_name = "EXPERIMENT.toml")]
    experiments: Vec<PathBuf>,
    /// Subject identifier (letters, digits, - and _).
    #[arg(long)]
    subject: String,
    /// Session number.
    #[arg(long)]
    session: u32,
    /// Trials to run: experiment numbers, `NxCOUNT` repeats (`1,2,1x3`).
    /// Default: each experiment once, in the order given.
    #[arg(long, value_name = "LIST")]
    trials: Option<String>,
    /// Trial order.
    #[arg(long, value_enum, default_value_t = TrialOrder::Fixed)]
    order: TrialOrder,
    /// Seed of the trial order and the random feedback (default: from the clock; recorded).
    #[arg(long)]
    seed: Option<u64>,
    /// Where trial files go.
    #[arg(long, default_value = ".", value_name = "DIR")]
    out: PathBuf,
    /// Only note messages on this MIDI channel (1–16) are keystrokes.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16))]
    input_channel: Option<u8>,
    /// Don't prompt between trials even on a terminal.
    #[arg(long)]
    no_prompt: bool,
    /// Pin the engine's loop to this CPU (default: not pinned).
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    /// Take no timing certificate before the session (docs/TAP.md §11):
    /// every trial's sidecar then says `"certified": false`, "not certified,
    /// by request (--no-certify)".
    #[arg(long)]
    no_certify: bool,
    /// Where the timing certificate's audio loop comes back: `self` (inside
    /// JACK: the server's graph, not the sound card; the default on a dummy
    /// server started by --jack-dummy) or a capture port cabled from the
    /// audio output (default: the --measure-roundtrip port). Without one
    /// the audio loop is not tested and the certificate says why.
    #[arg(long, value_name = "self|PORT")]
    certify_loop: Option<String>,
    /// JACK, audio output: before the first trial, measure the feedback
    /// path's round trip: a test signal to the --audio-out ports, back
    /// through a loopback cable on PORT (e.g. system:capture_1). Printed,
    /// and recorded in every sidecar (backend.audio_roundtrip); see docs/AUDIO.md.
    #[arg(long, value_name = "PORT")]
    measure_roundtrip: Option<String>,
    /// Write the session's summary as JSON to PATH (`-` or a bare --json: stdout):
    /// each trial's files, counts, how it ended and its self-checks (docs/TAP.md).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    #[command(flatten)]
    explain: args::ExplainArgs,
    #[command(flatten)]
    open: BackendArgs,
}

/// Arguments of `firmtime tap replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trial CSV written by `firmtime tap run`.
    #[arg(value_name = "TRIAL.csv")]
    trial: PathBuf,
    /// Play the subject's keystrokes instead of what the subject heard.
    #[arg(long)]
    inputs: bool,
    /// Also render the notes as audio through the JACK synth (--backend
    /// jack): the trial's `[output]` sound and level, masking notes as its
    /// `[masking]` noise (read from the trial's JSON sidecar; a click without
    /// one). MIDI output goes on as well.
    #[arg(long)]
    audio: bool,
    /// Write the replay's counts as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    #[command(flatten)]
    open: BackendArgs,
}

/// An opened backend; fields drop in order (the client before its server).
struct Opened {
    backend: Box<dyn MidiBackend>,
    detail: serde_json::Value,
    /// What was opened, in words (the session's first line).
    words: String,
    /// The MIDI output port (`None`: the backend has none).
    midi_port: Option<PortIndex>,
    /// The JACK synth's port, when audio was asked for.
    audio_port: Option<PortIndex>,
    /// The JACK audio input port (taps from sound), when asked for.
    audio_input: Option<String>,
    /// What the backend needs to place an output on time.
    timing: BackendTiming,
    /// Which backend.
    kind: TapBackend,
    /// JACK: what the timing certificate needs.
    jack: Option<JackSession>,
    /// The synth the backend opened with (audio output).
    synth: Option<SynthOptions>,
    _server: Option<DummyServer>,
}

/// The JACK facts of a session the timing certificate needs.
struct JackSession {
    /// The server (`None`: the default).
    server: Option<String>,
    sample_rate: u32,
    period: u32,
    /// A dummy server was started for this session (--jack-dummy).
    dummy_started: bool,
    /// Where the audio output is connected.
    audio_connect: Vec<String>,
}

fn rt_request(o: &BackendArgs, priority: u8, mlock: bool) -> RtRequest {
    backend::rt_request(o.no_rt, priority, mlock)
}

/// Opens the backend ([`backend::open`]); `synth`: the audio the
/// experiments need (JACK only); `audio_in`: an audio input for taps from
/// sound (JACK only).
fn open(
    o: &BackendArgs,
    client: &str,
    synth: Option<SynthOptions>,
    audio_in: bool,
) -> anyhow::Result<Opened> {
    if audio_in && o.backend != TapBackend::Jack {
        return Err(UsageError(
            "taps from sound ([input] source = \"audio\" or \"midi+audio\") come in through a JACK audio input: use \
             --backend jack (with --jack-dummy to try it without a sound card)"
                .into(),
        )
        .into());
    }
    if audio_in && o.audio_in.is_empty() && !o.jack_dummy {
        return Err(UsageError(
            "[input] source = \"audio\" or \"midi+audio\": say which port carries the contact microphone with \
             --audio-in PORT (e.g. --audio-in system:capture_1; `firmtime midi ports` lists them), \
             or --audio-in none to connect it yourself"
                .into(),
        )
        .into());
    }
    if synth.is_some() && o.backend != TapBackend::Jack {
        return Err(UsageError(
            "audio output ([output] device = \"audio\", [masking] source = \"audio\" or replay --audio) is rendered \
             by the JACK backend only: use --backend jack (with --jack-dummy to try it without a \
             sound card)"
                .into(),
        )
        .into());
    }
    let mut r = backend::Request::new(match o.backend {
        TapBackend::Jack => backend::Kind::Jack,
        TapBackend::Raw => backend::Kind::Raw,
        TapBackend::Loopback => backend::Kind::Loopback,
    });
    r.device = o.device.as_deref();
    r.baud = o.baud;
    r.io_rt = rt_request(o, o.priority + 5, true);
    r.client = client;
    r.jack_server = o.jack_server.as_deref();
    r.jack_dummy = o.jack_dummy;
    r.server_realtime = !o.no_rt;
    r.connect = &o.connect;
    r.connect_out = &o.connect_out;
    r.audio = synth.map(|s| (s, o.audio_out.as_slice()));
    let mut jack = None;
    r.audio_in = audio_in.then_some(o.audio_in.as_slice());
    let opened = backend::open(&r)?;
    let mut audio_port = None;
    let mut audio_input = None;
    let timing = match &opened.facts {
        backend::Facts::Jack(j) => BackendTiming::jack(j.sample_rate, j.buffer_size),
        backend::Facts::Raw { .. } => BackendTiming::at_once("raw, written at its time"),
        _ => BackendTiming::at_once("loopback"),
    };
    let detail = match &opened.facts {
        backend::Facts::Loopback => serde_json::json!({"backend": "loopback"}),
        backend::Facts::Raw { device, info } => {
            serde_json::json!({"backend": "raw", "device": device, "baud": info.baud, "rt_io_thread": info.rt})
        }
        backend::Facts::Jack(j) => {
            jack = Some(JackSession {
                server: j.server.clone(),
                sample_rate: j.sample_rate,
                period: j.buffer_size,
                dummy_started: opened.server.is_some(),
                audio_connect: j
                    .audio
                    .as_ref()
                    .map(|a| a.connect.clone())
                    .unwrap_or_default(),
            });
            audio_port = j.audio_port;
            audio_input.clone_from(&j.audio_input);
            let audio_detail = j.audio.as_ref().map(|a| {
                serde_json::json!({
                    "sound": sound_name(a.synth.sound),
                    "level_dbfs": a.synth.level_dbfs,
                    "click_ms": a.synth.click_ms,
                    "click_hz": a.synth.click_hz,
                    "ramp_ms": a.synth.ramp_ms,
                    "voices": a.synth.voices,
                    "noise_channel": a.synth.noise_channel.map(|c| c + 1),
                    "noise": noise_name(a.synth.noise),
                    "noise_level_dbfs": a.synth.noise_level_dbfs,
                    "connect": a.connect,
                })
            });
            serde_json::json!({
                "backend": "jack",
                "server": backend::server_label(j.server.as_deref()),
                "dummy_server_started": opened.server.is_some(),
                "client": j.client,
                "inputs": j.inputs,
                "outputs": j.outputs,
                "sample_rate": j.sample_rate,
                "buffer_size": j.buffer_size,
                "jack_clock": format!("{:?}", j.jack_clock),
                "jack_library": j.jack_library,
                "audio_ports": j.audio_ports,
                "audio": audio_detail,
                "audio_input": j.audio_input.as_ref().map(|p| serde_json::json!({
                    "port": p,
                    "connect": o.audio_in.iter().filter(|c| *c != "none").collect::<Vec<_>>(),
                })),
            })
        }
        #[cfg(feature = "alsa")]
        backend::Facts::Alsa(_) => unreachable!("firmtime tap has no ALSA backend"),
    };
    let words = backend_words(&opened);
    Ok(Opened {
        backend: opened.backend,
        detail,
        words,
        midi_port: Some(0),
        audio_port,
        audio_input,
        timing,
        kind: o.backend,
        jack,
        synth,
        _server: opened.server,
    })
}

/// The synth's sound as the sidecar names it.
fn sound_name(s: firmtime_midi::jack::Sound) -> &'static str {
    match s {
        firmtime_midi::jack::Sound::Click => "click",
        firmtime_midi::jack::Sound::Tone => "tone",
    }
}

/// The masking noise's colour as the sidecar names it.
fn noise_name(n: firmtime_midi::jack::NoiseColor) -> &'static str {
    match n {
        firmtime_midi::jack::NoiseColor::White => "white",
        firmtime_midi::jack::NoiseColor::Pink => "pink",
    }
}

/// Port names for a message: `a, b`, or `none`.
fn names(ports: &[String]) -> String {
    if ports.is_empty() {
        "none".to_string()
    } else {
        ports.join(", ")
    }
}

/// What was opened, in words, for the session's first lines.
fn backend_words(opened: &backend::Opened) -> String {
    match &opened.facts {
        backend::Facts::Loopback => {
            "in-process loopback (no device: outputs come back as input)".to_string()
        }
        backend::Facts::Raw { device, info } => format!(
            "raw MIDI bytes on {}{}",
            device.display(),
            info.baud.map_or(String::new(), |b| format!(" at {b} baud"))
        ),
        backend::Facts::Jack(j) => {
            let mut s = format!(
                "JACK server \"{}\"{}: {} Hz, {} frames per period ({:.2} ms); MIDI in from {}, MIDI out to {}",
                backend::server_label(j.server.as_deref()),
                if opened.server.is_some() {
                    " (a dummy started for this session)"
                } else {
                    ""
                },
                j.sample_rate,
                j.buffer_size,
                f64::from(j.buffer_size) * 1000.0 / f64::from(j.sample_rate.max(1)),
                names(&j.inputs),
                names(&j.outputs),
            );
            if let Some(p) = &j.audio_input {
                let _ = write!(s, "; taps from sound on {p}");
            }
            if let Some(a) = &j.audio {
                let y = &a.synth;
                let _ = write!(
                    s,
                    "; audio: {} at {} dBFS{}{}, to {}",
                    match y.sound {
                        firmtime_midi::jack::Sound::Click =>
                            format!("{} ms clicks of {} Hz", y.click_ms, y.click_hz),
                        firmtime_midi::jack::Sound::Tone => "tones at each note's pitch".into(),
                    },
                    y.level_dbfs,
                    if y.voices > 0 {
                        format!(", {} voices", y.voices)
                    } else {
                        String::new()
                    },
                    match y.noise_channel {
                        Some(c) => format!(
                            ", {} masking noise at {} dBFS on MIDI channel {}",
                            noise_name(y.noise),
                            y.noise_level_dbfs,
                            c + 1
                        ),
                        None => String::new(),
                    },
                    if a.connect.is_empty() {
                        "no port (connect one yourself)".to_string()
                    } else {
                        a.connect.join(", ")
                    }
                );
            }
            s
        }
        #[cfg(feature = "alsa")]
        backend::Facts::Alsa(_) => "the ALSA sequencer".to_string(),
    }
}

/// Waits for Enter (true) or `q`/EOF/a stop signal (false), polling so
/// that SIGINT, SIGTERM and SIGHUP are seen.
fn prompt(text: &str) -> bool {
    eprint!("{text}");
    let _ = std::io::stderr().flush();
    loop {
        if signals::interrupted() {
            eprintln!();
            return false;
        }
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let n = unsafe { libc::poll(&mut pfd, 1, 200) };
        if n > 0 {
            let mut line = String::new();
            return match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => false,
                Ok(_) => !line.trim().eq_ignore_ascii_case("q"),
            };
        }
    }
}

/// The engine thread's name, which the explaining trace follows.
const ENGINE_COMM: &str = "ft-tap-engine";
/// Its name while the backend opens: the threads libjack starts then
/// inherit it, so that a trace tells them from the engine.
const OPENING_COMM: &str = "ft-tap-jack";

/// Runs `firmtime tap run`: the session runs on a thread of its own, named
/// so that the explaining trace can follow the engine's loop.
pub fn run(a: RunArgs) -> anyhow::Result<Outcome> {
    std::thread::Builder::new()
        .name(OPENING_COMM.into())
        .spawn(move || session(a))
        .context("starting the engine's thread")?
        .join()
        .map_err(|_| anyhow::anyhow!("the engine's thread panicked"))?
}

/// Starts the explaining trace of one trial when the session explains:
/// `explain` is set by the first trial (`--explain`/`--no-explain`, or
/// whether the trace can run here), later trials reuse the answer.
fn start_watch(a: &RunArgs, explain: &mut Option<bool>) -> anyhow::Result<Option<LoopWatch>> {
    let w = match *explain {
        None => a.explain.start(ENGINE_COMM)?,
        Some(false) => None,
        Some(true) => {
            match LoopWatch::start(&firmtime_trace::explain::Config::default(), ENGINE_COMM) {
                Ok(w) => Some(w),
                Err(e) => {
                    eprintln!("this trial's late outputs are not traced: {e}");
                    None
                }
            }
        }
    };
    explain.get_or_insert(w.is_some());
    Ok(w)
}

/// The causes of a trial's late outputs, the engine's late wake-ups named
/// by the trace `watch` when it ran.
fn late_report(
    engine: &mut Engine,
    outcome: &TrialOutcome,
    timing: &BackendTiming,
    watch: Option<(LoopWatch, LoopThread)>,
) -> LateReport {
    let notes = engine.take_notes();
    let lates = engine.late_outputs();
    let dropped = (outcome.backend.xruns, outcome.backend.frame_gaps);
    let Some((w, thread)) = watch else {
        return late::report(&lates, timing, dropped, None);
    };
    let wakes = late::engine_wakes(&lates, timing).map(|(_, l)| l);
    match args::explain_loop(w, thread, &notes, wakes) {
        Some(e) => LateReport {
            trace: Some(e.coverage_counts()),
            ..late::report(&lates, timing, dropped, Some(&|pass| e.traced(pass)))
        },
        None => late::report(&lates, timing, dropped, None),
    }
}

/// Reads and checks the experiment files `paths` (`tap run`, `tap
/// certify`): each one's path, text and experiment, in order; an error
/// names the file.
fn read_experiments(paths: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, String, Experiment)>> {
    let mut exps = Vec::new();
    for p in paths {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        let e =
            Experiment::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        audio::synth_options(&e).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        exps.push((p.clone(), text, e));
    }
    Ok(exps)
}

/// The session of `firmtime tap run`, on the engine's thread.
fn session(a: RunArgs) -> anyhow::Result<Outcome> {
    session::check_subject(&a.subject).map_err(|e| UsageError(e.to_string()))?;
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let mut summary = Vec::new();
    let pin = a.cpu.map(args::pin_to).transpose()?;
    let exps = read_experiments(&a.experiments)?;
    let mut list = match &a.trials {
        Some(s) => {
            session::parse_trial_list(s, exps.len()).map_err(|e| UsageError(e.to_string()))?
        }
        None => (0..exps.len()).collect(),
    };
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if a.order == TrialOrder::Random {
        session::shuffle(&mut list, seed);
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let existing = session::existing_trial_files(&a.out, &a.subject, a.session);
    if !existing.is_empty() {
        bail!(
            "{} already holds {} file(s) of subject {} session {} (e.g. {}): choose another --session or --out; trial files are never overwritten",
            a.out.display(),
            existing.len(),
            a.subject,
            a.session,
            existing[0].display()
        );
    }
    let synth = audio::session_synth(exps.iter().map(|(_, _, e)| e))?;
    let audio_in = exps.iter().any(|(_, _, e)| e.input.source.has_audio());
    let mut opened = open(&a.open, "firmtime-tap", synth, audio_in)?;
    if let Some(port) = &a.measure_roundtrip {
        opened.detail["audio_roundtrip"] = crate::audio::measure_feedback(&opened.detail, port)?;
    }
    firmtime_rt::sched::set_current_thread_name(ENGINE_COMM)
        .context("naming the engine's thread")?;
    for (path, _, e) in &exps {
        for w in late::delay_warnings(e, &opened.timing) {
            eprintln!("firmtime: {}: {w}", path.display());
        }
    }
    // One engine per experiment, allocated before any trial runs.
    let mut engines = Vec::new();
    for (_, _, e) in &exps {
        let mut o = EngineOptions::for_experiment(e, seed);
        audio::route(&mut o, e, opened.midi_port, opened.audio_port)?;
        o.input_channels = match (a.input_channel, a.open.backend) {
            (Some(c), _) => 1 << (c - 1),
            (None, TapBackend::Loopback) => 0,
            (None, _) => u16::MAX,
        };
        engines.push(Engine::new(e, o)?);
    }
    // Started before this thread takes real-time priority and its CPU,
    // which the drawing thread would inherit.
    let status = super::status::StatusLine::start();
    let mut request = rt_request(&a.open, a.open.priority, true);
    request.cpus = pin;
    let rt = setup::apply(&request)
        .context("real-time setup of the engine thread (or run with --no-rt)")?;
    let thread = LoopThread {
        tid: firmtime_rt::sched::current_tid(),
        period_ns: firmtime_tap::engine::DEFAULT_PAUSE_NS,
        slack_ns: firmtime_rt::sched::timer_slack().unwrap_or(50_000),
        threshold_ns: 0,
        missed: 0,
    };
    let mut explain = None;
    let mut engine_causes = Vec::new();
    let _runaway = if a.open.no_rt {
        None
    } else {
        Some(
            firmtime_rt::runaway::install(Duration::from_secs(2))
                .context("installing runaway protection (RLIMIT_RTTIME)")?,
        )
    };
    let rt_conditions: RtConditions = rt.conditions.clone();
    signals::catch(Repeat::Caught)?;
    // Taken before the session is announced: the announcement means the
    // first trial is about to start (a stop signal meanwhile stops the
    // session before it).
    let certificate = if a.no_certify {
        firmtime_tap::certificate::Certificate::not_taken(
            "not certified, by request (--no-certify)",
            certify::backend_label(&opened),
        )
    } else {
        let refs: Vec<&Experiment> = exps.iter().map(|(_, _, e)| e).collect();
        let loop_ = a.certify_loop.as_deref().or(a.measure_roundtrip.as_deref());
        certify::take(&opened, &refs, loop_, "before the session", seed)?
    };
    certify::print(&certificate);
    let interactive = !a.no_prompt && std::io::stdin().is_terminal();
    let n = list.len();
    let mut failed = false;
    eprintln!(
        "firmtime: session {} of subject {}: {n} trial(s) {}, seed {seed}",
        a.session,
        a.subject,
        match a.order {
            TrialOrder::Fixed => "in the order given",
            TrialOrder::Random => "in random order",
        },
    );
    eprintln!("firmtime: backend: {}", opened.words);
    for (i, &x) in list.iter().enumerate() {
        let trial = i as u32 + 1;
        let (path, text, e) = &exps[x];
        if signals::interrupted() {
            // Stopped between trials: the next one is not started.
            eprintln!(
                "firmtime: session stopped before trial {trial} by {}",
                signals::describe()
            );
            break;
        }
        if interactive
            && !prompt(&format!(
                "trial {trial}/{n} ({}): press Enter to start, q to stop the session: ",
                if e.name.is_empty() {
                    "unnamed"
                } else {
                    &e.name
                }
            ))
        {
            match signals::received() {
                Some(_) => eprintln!(
                    "firmtime: session stopped before trial {trial} by {}",
                    signals::describe()
                ),
                None => eprintln!("firmtime: session stopped before trial {trial}"),
            }
            break;
        }
        let mut provenance = Provenance::begin(std::env::args().collect());
        provenance.rt =
            Some(serde_json::json!({"engine": rt_conditions, "backend": opened.detail}));
        let engine = &mut engines[x];
        engine.set_seed(session::trial_seed(seed, trial));
        let watch = start_watch(&a, &mut explain)?;
        if let Some(w) = &watch {
            engine.set_notes(w.notes(engine.options().pause_ns));
        }
        status.show(trial, n as u32, &e.name, e.end, engine.live());
        let outcome = engine.run(opened.backend.as_mut(), signals::flag());
        status.clear();
        let outcome = outcome.map_err(|e| anyhow::anyhow!("trial {trial}: {e}"))?;
        provenance.finish();
        let late = late_report(engine, &outcome, &opened.timing, watch.map(|w| (w, thread)));
        let meta = TrialMeta {
            subject: a.subject.clone(),
            session: a.session,
            trial,
            experiment_file: path.display().to_string(),
            experiment_toml: text.clone(),
            seed,
            rt: Some(rt_conditions.clone()),
            stopped_by: signals::received().map(str::to_string),
            input_loss_detail: outcome
                .input_loss
                .and_then(|_| opened.backend.describe_input_loss()),
            audio_input_port: opened.audio_input.clone().unwrap_or_default(),
        };
        let stem = session::trial_stem(&a.out, &a.subject, a.session, trial);
        let side = session::write_trial_certified(
            &stem,
            engine,
            &outcome,
            late,
            &meta,
            provenance,
            Some(&certificate),
        )?;
        let c = &side.self_checks;
        eprintln!(
            "trial {trial}/{n}: {} keystrokes, {} beats, ended {}; loop mean {:.3} ms max {:.3} ms; late {} (> {} µs), xruns {} (frame gaps {}), input overruns {}, unreported {} → {}",
            outcome.keystrokes,
            outcome.beats,
            match outcome.reason {
                EndReason::Condition => "by its end condition".to_string(),
                EndReason::Trigger(id) => format!("by trigger {id}"),
                EndReason::Interrupted => format!("by {} (incomplete)", signals::describe()),
                EndReason::Disconnected => "by disconnection (incomplete)".to_string(),
                EndReason::InputLost => "by the loss of its input (incomplete)".to_string(),
            },
            c.output_interval_mean_us / 1000.0,
            c.output_interval_max_us as f64 / 1000.0,
            c.late_outputs,
            c.late_threshold_us,
            c.xruns,
            c.frame_gaps,
            c.input_overruns,
            outcome.unreported,
            stem.with_extension("csv").display()
        );
        if c.late_outputs > 0 {
            eprintln!("  {}", c.late_summary());
        }
        if c.input_malformed + c.outputs_refused > 0 {
            eprintln!(
                "firmtime: trial {trial}: {} malformed input event(s) (taps may be missing), \
                 {} output(s) refused by the backend (never went out, not in the data)",
                c.input_malformed, c.outputs_refused
            );
        }
        if let Some(t) = &side.audio_input {
            eprintln!(
                "firmtime: trial {trial}: taps from sound on {}: {} tap(s); noise floor {:.1} dBFS; \
                 {} onset(s) before the start dropped, {} audio frame(s) dropped, {} detector restart(s)",
                t.port, t.taps, t.floor_dbfs, t.before_start, t.frames_dropped, t.restarts
            );
        }
        if let Some(p) = &side.pairing {
            eprintln!(
                "firmtime: trial {trial}: MIDI paired with sound: {}",
                p.words()
            );
        }
        if c.input_before_start > 0 {
            eprintln!(
                "firmtime: trial {trial}: {} input event(s) stamped before the trial's start dropped \
                 (a keyboard already playing when the trial started): not trial data, no feedback, \
                 no keystroke count",
                c.input_before_start
            );
        }
        if c.input_after_end > 0 {
            eprintln!(
                "firmtime: trial {trial}: {} input event(s) stamped after the trial's end dropped \
                 (taps after the last counted keystroke or the duration): not trial data, no \
                 feedback",
                c.input_after_end
            );
        }
        if let Some(l) = &side.input_lost {
            eprintln!(
                "firmtime: trial {trial}: INPUT LOST at {:.3} s ({}): {}; the trial ended there, kept and flagged incomplete",
                l.at_us as f64 / 1e6,
                l.cause,
                l.words
            );
        }
        summary.push(serde_json::json!({
            "trial": trial,
            "experiment_file": path,
            "csv": stem.with_extension("csv"),
            "sidecar": stem.with_extension("json"),
            "keystrokes": outcome.keystrokes,
            "beats": outcome.beats,
            "ended": end_word(outcome.reason),
            "incomplete": outcome.incomplete(),
            "input_lost": side.input_lost,
            "unreported": outcome.unreported,
            "self_checks": c,
        }));
        engine_causes.extend(traced_engine_causes(&c.late_causes));
        if outcome.incomplete() {
            failed = matches!(
                outcome.reason,
                EndReason::Disconnected | EndReason::InputLost
            );
            eprintln!(
                "firmtime: session stopped after trial {trial} by {} (kept, flagged incomplete)",
                match outcome.reason {
                    EndReason::Interrupted => signals::describe(),
                    EndReason::InputLost => "the loss of its input",
                    _ => "a disconnection",
                }
            );
            break;
        }
    }
    print_advice(&engine_causes);
    if let Some(p) = &a.json {
        args::write_json(
            p,
            &serde_json::json!({
                "subject": a.subject,
                "session": a.session,
                "seed": seed,
                "out": a.out,
                "certificate": certificate,
                "trials": summary,
            }),
        )?;
    }
    Ok(if failed { Outcome::Failed } else { Outcome::Ok })
}

/// How a trial ended, as the JSON summary's `ended`.
fn end_word(r: EndReason) -> String {
    match r {
        EndReason::Condition => "condition".into(),
        EndReason::Trigger(id) => format!("trigger {id}"),
        EndReason::Interrupted => "interrupted".into(),
        EndReason::Disconnected => "disconnected".into(),
        EndReason::InputLost => "input lost".into(),
    }
}

/// The engine-side late outputs the trace named, as the explaining trace's
/// cause counts (for ranking doctor's advice).
fn traced_engine_causes(causes: &[late::LateCause]) -> Vec<explain::CauseCount> {
    causes
        .iter()
        .filter(|c| c.side == late::Side::Engine)
        .filter_map(|c| {
            let category = explain::Category::from_key(&c.category)?;
            (category != explain::Category::Unknown).then(|| explain::CauseCount {
                category,
                name: c.name.clone(),
                outliers: c.outputs,
                missed: 0,
                worst_ns: c.worst_ns,
                prio: None,
            })
        })
        .collect()
}

/// After a session whose engine was made late by named causes: doctor's
/// advice that addresses them, most late outputs first.
fn print_advice(causes: &[explain::CauseCount]) {
    if causes.is_empty() {
        return;
    }
    let causes = explain::advice::merge(&[causes]);
    let doctor = firmtime_lab::doctor::run_with(Duration::from_millis(250));
    let lines: Vec<String> = explain::advice::lines(
        &doctor.fixes(),
        &causes,
        "the late outputs the engine caused",
    )
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(l, _)| l)
    .collect();
    if !lines.is_empty() {
        eprintln!("firmtime: what to change (firmtime doctor), for the engine's late wake-ups:");
        for l in lines.iter().take(3) {
            eprintln!("  - {l}");
        }
    }
}

/// The experiment a trial ran, from its JSON sidecar (`None`, with a note,
/// when there is no sidecar).
fn replay_experiment(trial: &std::path::Path) -> anyhow::Result<Option<Experiment>> {
    let side = trial.with_extension("json");
    let text = match std::fs::read_to_string(&side) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "firmtime: note: no sidecar {}: replaying audio as clicks at -6 dBFS without masking noise",
                side.display()
            );
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", side.display())),
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", side.display()))?;
    let toml = v["experiment_toml"].as_str().with_context(|| {
        format!(
            "{} has no experiment_toml: is it a trial sidecar written by `firmtime tap run`?",
            side.display()
        )
    })?;
    let e = Experiment::from_toml(toml)
        .map_err(|e| anyhow::anyhow!("the experiment recorded in {}: {e}", side.display()))?;
    Ok(Some(e))
}

/// Runs `firmtime tap replay`.
pub fn replay(a: ReplayArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let text = std::fs::read_to_string(&a.trial)
        .with_context(|| format!("cannot read {}", a.trial.display()))?;
    let events =
        data::read_csv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.trial.display()))?;
    let source = if a.inputs {
        ReplaySource::Inputs
    } else {
        ReplaySource::Outputs
    };
    let items = replay::plan(&events, source);
    if items.is_empty() {
        bail!(
            "{} has no {} to play",
            a.trial.display(),
            if a.inputs {
                "keystrokes"
            } else {
                "output notes"
            }
        );
    }
    let synth = if a.audio {
        Some(audio::replay_synth(replay_experiment(&a.trial)?.as_ref()))
    } else {
        None
    };
    let mut opened = open(&a.open, "firmtime-replay", synth, false)?;
    let ports: Vec<PortIndex> = opened
        .midi_port
        .into_iter()
        .chain(opened.audio_port)
        .collect();
    if a.audio && opened.audio_port.is_none() {
        bail!("the backend opened without its audio port; cannot replay through audio");
    }
    let _rt = setup::apply(&rt_request(&a.open, a.open.priority, true))
        .context("real-time setup (or run with --no-rt)")?;
    signals::catch(Repeat::Caught)?;
    eprintln!(
        "firmtime: replaying {} notes over {:.1} s to {}",
        items.len(),
        items.last().map_or(0, |i| i.at_us) as f64 / 1e6,
        if opened.audio_port.is_some() {
            "MIDI and audio"
        } else {
            "MIDI"
        }
    );
    let r = replay::play(
        &items,
        opened.backend.as_mut(),
        &ports,
        200_000_000,
        signals::flag(),
    );
    let per_port = ports.len().max(1) as u64;
    let redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    println!(
        "replayed {} of {} notes{}: {} reported sent, {} refused, {} late (> 1 ms), max lateness {:.3} ms{}",
        r.sent / per_port,
        items.len(),
        if ports.len() > 1 {
            " (each to MIDI and audio)"
        } else {
            ""
        },
        r.reported,
        r.failed,
        r.late,
        r.max_late_ns as f64 / 1e6,
        if r.interrupted { " (interrupted)" } else { "" }
    );
    drop(redirect);
    if let Some(p) = &a.json {
        args::write_json(
            p,
            &serde_json::json!({
                "trial": a.trial,
                "source": if a.inputs { "inputs" } else { "outputs" },
                "notes": items.len(),
                "played": r.sent / per_port,
                "ports": ports.len(),
                "reported_sent": r.reported,
                "refused": r.failed,
                "late_over_1ms": r.late,
                "max_late_ns": r.max_late_ns,
                "interrupted": r.interrupted,
            }),
        )?;
    }
    Ok(if r.failed > 0 || r.reported < r.sent {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}
