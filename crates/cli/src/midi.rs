//! `firmtime midi`: list ports, monitor input with timestamps, run FTAP's loop test.
//!
//! Every backend is opened through [`open_backend`], which calls the
//! opener shared with `firmtime tap` ([`backend::open`]): adding one is a
//! [`BackendChoice`] variant and one match arm there.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use firmtime_jack::DummyServer;
use firmtime_midi::jack::{self, LoopHops};
use firmtime_midi::looptest::{LoopConfig, LoopResult, LoopTest};
use firmtime_midi::pty::{PacedLoopback, PacedOptions, PacedStats, PtyPair};
use firmtime_midi::raw::{self, WIRE_BYTE_NS};
use firmtime_midi::{
    BackendError, BackendKind, BackendStats, InputEvent, MidiBackend, MidiMessage, OutputEvent,
    SentEvent,
};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::system::Provenance;
use serde::Serialize;

use crate::args::{self, Outcome, UsageError};
use crate::backend;
use crate::signals::{self, Repeat};

/// Arguments of `firmtime midi`.
#[derive(Debug, Args)]
pub struct MidiArgs {
    #[command(subcommand)]
    command: MidiCommand,
}

#[derive(Debug, Subcommand)]
enum MidiCommand {
    /// List the MIDI ports each backend sees.
    ///
    /// Exit status 1 when JACK is listed (asked for, or by default with
    /// libjack installed) and no server answers; the other listings still print.
    Ports(PortsArgs),
    /// Print incoming MIDI with µs timestamps relative to the start (like
    /// aseqdump, but timed).
    Monitor(MonitorArgs),
    /// FTAP's loop benchmark: MIDI out connected back to MIDI in; one Note On
    /// and one Note Off cycle through it; reports the interval between
    /// received events beside the MIDI wire limit (0.96 ms per 3-byte message).
    Loop(LoopArgs),
}

/// The MIDI backends the CLI can open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// A raw byte stream: serial tty, /dev/midi*, /dev/snd/midiC*D*, a pty.
    Raw,
    /// JACK MIDI (jackd2 or PipeWire's JACK): frame-accurate timestamps.
    Jack,
    /// The ALSA sequencer: kernel real-time queue timestamps (needs /dev/snd/seq).
    Alsa,
}

/// Which JACK server to use; shared by `ports`, `monitor` and `loop`.
#[derive(Debug, Args)]
struct JackArgs {
    /// JACK: the server name (default: $JACK_DEFAULT_SERVER or "default").
    #[arg(long, value_name = "NAME")]
    jack_server: Option<String>,
    /// JACK: when no server runs, start `jackd -d dummy` as a child under a
    /// private name (or --jack-server NAME) and stop it on exit.
    #[arg(long)]
    jack_dummy: bool,
}

/// How to open a backend; shared by `monitor` and `loop`.
#[derive(Debug, Args)]
struct OpenArgs {
    /// Which backend to use.
    #[arg(long, value_enum, default_value_t = BackendChoice::Raw)]
    backend: BackendChoice,
    #[command(flatten)]
    jack: JackArgs,
    /// JACK / ALSA: connect this port to our input (JACK `client:port`,
    /// ALSA `client:port` numbers or names); repeatable.
    #[arg(long, value_name = "PORT")]
    connect: Vec<String>,
    /// JACK / ALSA: connect our output to this port; repeatable (ALSA loop:
    /// the port cabled back to --connect).
    #[arg(long, value_name = "PORT")]
    connect_out: Vec<String>,
    /// The device (raw: a path such as /dev/snd/midiC1D0 or /dev/ttyUSB0).
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Raw: set this baud rate on a serial tty (31250 for a MIDI serial interface).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    baud: Option<u32>,
    /// SCHED_FIFO priority of the MIDI threads: fifo:P or P, 1 to 99 (--no-rt: none).
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:80", value_parser = args::fifo_priority(99))]
    priority: u8,
    /// Run the MIDI threads at SCHED_OTHER without memory locking (recorded
    /// in the output; timing is then not real-time).
    #[arg(long)]
    no_rt: bool,
}

/// Arguments of `firmtime midi ports`.
#[derive(Debug, Args)]
struct PortsArgs {
    /// Only this backend (default: every backend).
    #[arg(long, value_enum)]
    backend: Option<BackendChoice>,
    #[command(flatten)]
    jack: JackArgs,
    /// Write the port list as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// Arguments of `firmtime midi monitor`.
#[derive(Debug, Args)]
struct MonitorArgs {
    #[command(flatten)]
    open: OpenArgs,
    /// Stop after this long (`10s`, `2min`); default: until Ctrl-C or the device goes away.
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Write every event as JSON to PATH (`-` or a bare --json: stdout); see docs/MIDI.md.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// Arguments of `firmtime midi loop`.
#[derive(Debug, Args)]
struct LoopArgs {
    #[command(flatten)]
    open: OpenArgs,
    /// Raw: run against a pty whose far end echoes every byte paced like a
    /// 31.25 kbaud cable (320 µs per byte), started here; needs no hardware.
    #[arg(long, conflicts_with = "device")]
    pty_loopback: bool,
    /// Stop after this many events received (2..=10000000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
    events: u64,
    /// Give up after this long.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = args::duration)]
    timeout: Duration,
    /// Write the result as JSON to PATH (`-` or a bare --json: stdout); see docs/MIDI.md.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// Runs `firmtime midi …`.
pub fn run(a: MidiArgs) -> anyhow::Result<Outcome> {
    match a.command {
        MidiCommand::Ports(p) => ports(p),
        MidiCommand::Monitor(m) => monitor(m),
        MidiCommand::Loop(l) => run_loop(l),
    }
}

// ---------------------------------------------------------------- opening

/// An opened backend and what to record about it. Fields drop in order:
/// the backend closes before a dummy JACK server it used is stopped.
struct Opened {
    backend: Box<dyn MidiBackend>,
    /// The backend's I/O thread's RT conditions, where it has its own thread.
    rt: Option<RtConditions>,
    /// Extra facts for the output (device, baud, server, …).
    detail: serde_json::Value,
    /// JACK: the loop test's relay client, if one was started.
    relay: Option<jack::Relay>,
    /// JACK: the dummy server started for this run, stopped when dropped.
    server: Option<DummyServer>,
}

fn rt_request(o: &OpenArgs, priority: u8) -> RtRequest {
    backend::rt_request(o.no_rt, priority, true)
}

/// What the backend is opened for: the loop test adds a JACK relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Monitor,
    Loop,
}

/// Opens the backend chosen on the command line ([`backend::open`]) and
/// describes it for the output.
fn open_backend(o: &OpenArgs, device: Option<PathBuf>, purpose: Purpose) -> anyhow::Result<Opened> {
    let kind = match o.backend {
        BackendChoice::Raw => backend::Kind::Raw,
        BackendChoice::Jack => backend::Kind::Jack,
        BackendChoice::Alsa => backend::Kind::Alsa,
    };
    if kind == backend::Kind::Alsa
        && cfg!(feature = "alsa")
        && purpose == Purpose::Loop
        && (o.connect.is_empty() || o.connect_out.is_empty())
    {
        return Err(UsageError(
            "--backend alsa loop needs --connect-out PORT and --connect PORT: the port our \
             output goes to and the port that brings it back (see `firmtime midi ports`)"
                .into(),
        )
        .into());
    }
    let mut r = backend::Request::new(kind);
    r.device = device.as_deref();
    r.baud = o.baud;
    r.io_rt = rt_request(o, o.priority);
    r.client = match purpose {
        Purpose::Monitor => "firmtime-monitor",
        Purpose::Loop => "firmtime-loop",
    };
    r.jack_server = o.jack.jack_server.as_deref();
    r.jack_dummy = o.jack.jack_dummy;
    r.server_realtime = !o.no_rt;
    r.connect = &o.connect;
    r.connect_out = &o.connect_out;
    r.relay = purpose == Purpose::Loop && o.connect.is_empty() && o.connect_out.is_empty();
    let opened = backend::open(&r)?;
    let detail = detail(o, &opened);
    Ok(Opened {
        rt: opened.facts.io_rt(),
        detail,
        backend: opened.backend,
        relay: opened.relay,
        server: opened.server,
    })
}

/// The `detail` of the output: what was opened, per backend.
fn detail(o: &OpenArgs, opened: &backend::Opened) -> serde_json::Value {
    match &opened.facts {
        backend::Facts::Raw { device, info } => serde_json::json!({
            "device": device,
            "is_tty": info.is_tty,
            "baud": info.baud,
        }),
        backend::Facts::Jack(j) => serde_json::json!({
            "server": backend::server_label(j.server.as_deref()),
            "dummy_server_started": opened.server.is_some(),
            "client": j.client,
            "inputs": j.inputs,
            "outputs": j.outputs,
            "relay": opened.relay.as_ref().map(|r| serde_json::json!({"in": r.input_name(), "out": r.output_name()})),
            "connect": o.connect,
            "connect_out": o.connect_out,
            "sample_rate": j.sample_rate,
            "buffer_size": j.buffer_size,
            "jack_clock": format!("{:?}", j.jack_clock),
            "clock_offset_ns": j.clock_offset_ns,
            "jack_library": j.jack_library,
        }),
        #[cfg(feature = "alsa")]
        backend::Facts::Alsa(info) => serde_json::json!({
            "client": info.client,
            "input_port": info.input_port,
            "output_port": info.output_port,
            "queue": info.queue,
            "connect": o.connect,
            "connect_out": o.connect_out,
        }),
        backend::Facts::Loopback => serde_json::json!({"backend": "loopback"}),
    }
}

/// The JACK server to use (see [`backend::jack_server`]).
fn jack_server(
    j: &JackArgs,
    realtime: bool,
) -> anyhow::Result<(Option<String>, Option<DummyServer>)> {
    backend::jack_server(j.jack_server.as_deref(), j.jack_dummy, realtime)
}

// ---------------------------------------------------------------- ports

#[derive(Serialize)]
struct PortsOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<Vec<raw::RawPort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jack: Option<JackPortsOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alsa: Option<AlsaPortsOut>,
}

#[derive(Serialize)]
struct JackPortsOut {
    server: String,
    dummy_server_started: bool,
    /// The reason no ports could be listed (no server, no libjack), or null.
    error: Option<String>,
    /// libjack is not installed (then a listing of every backend does not fail).
    #[serde(skip)]
    not_installed: bool,
    ports: Vec<firmtime_jack::JackPort>,
}

#[derive(Serialize)]
struct AlsaPortsOut {
    error: Option<String>,
    ports: Vec<serde_json::Value>,
}

fn jack_ports(j: &JackArgs) -> anyhow::Result<JackPortsOut> {
    let (server_name, server) = jack_server(j, false)?;
    let listed = firmtime_jack::list_ports(server_name.as_deref());
    let out = JackPortsOut {
        server: backend::server_label(server_name.as_deref()),
        dummy_server_started: server.is_some(),
        error: listed.as_ref().err().map(|e| e.to_string()),
        not_installed: listed
            .as_ref()
            .is_err_and(|e| e.kind() == firmtime_jack::ErrorKind::NotInstalled),
        ports: listed.unwrap_or_default(),
    };
    drop(server);
    Ok(out)
}

#[cfg(feature = "alsa")]
fn alsa_ports() -> AlsaPortsOut {
    match firmtime_midi::alsa::list_ports() {
        Ok(ports) => AlsaPortsOut {
            error: None,
            ports: ports
                .into_iter()
                .map(|p| serde_json::to_value(p).unwrap_or_default())
                .collect(),
        },
        Err(e) => AlsaPortsOut {
            error: Some(e.to_string()),
            ports: Vec::new(),
        },
    }
}

#[cfg(not(feature = "alsa"))]
fn alsa_ports() -> AlsaPortsOut {
    AlsaPortsOut {
        error: Some("built without the `alsa` feature".into()),
        ports: Vec::new(),
    }
}

fn ports(a: PortsArgs) -> anyhow::Result<Outcome> {
    let want = |b: BackendChoice| a.backend.map_or(true, |x| x == b);
    let out = PortsOut {
        raw: want(BackendChoice::Raw).then(raw::list_ports),
        jack: if want(BackendChoice::Jack) {
            Some(jack_ports(&a.jack)?)
        } else {
            None
        },
        alsa: want(BackendChoice::Alsa).then(alsa_ports),
    };
    let to_stdout = args::is_stdout(a.json.as_deref());
    if !to_stdout {
        if let Some(rawp) = &out.raw {
            println!("raw (--backend raw --device PATH):");
            if rawp.is_empty() {
                println!("  (none: no /dev/snd/midiC*D*, /dev/midi*, /dev/ttyS*, /dev/ttyUSB*, /dev/ttyACM*)");
            }
            for p in rawp {
                let kind = match p.kind {
                    raw::RawPortKind::AlsaRawMidi => "ALSA raw MIDI",
                    raw::RawPortKind::OssMidi => "OSS raw MIDI",
                    raw::RawPortKind::Serial => "serial port (MIDI interfaces need --baud 31250)",
                };
                println!("  {:<22} {kind}", p.path.display());
            }
            println!("  any pty or pipe also works; `firmtime midi loop --pty-loopback` makes one");
        }
        if let Some(j) = &out.jack {
            println!(
                "jack (--backend jack --connect PORT), server \"{}\"{}:",
                j.server,
                if j.dummy_server_started {
                    " (dummy, started for this listing)"
                } else {
                    ""
                }
            );
            if let Some(e) = &j.error {
                println!("  (none: {e})");
            } else if j.ports.is_empty() {
                println!("  (no MIDI ports)");
            }
            for p in &j.ports {
                let dir = match (p.is_output, p.is_input) {
                    (true, _) => "output (connect with --connect)",
                    (_, true) => "input (connect with --connect-out)",
                    _ => "",
                };
                let phys = if p.is_physical { ", physical" } else { "" };
                println!("  {:<32} {dir}{phys}", p.name);
            }
        }
        if let Some(al) = &out.alsa {
            println!("alsa (--backend alsa --connect CLIENT:PORT):");
            if let Some(e) = &al.error {
                println!("  (none: {e})");
            } else if al.ports.is_empty() {
                println!("  (no sequencer ports)");
            }
            for p in &al.ports {
                println!(
                    "  {:>3}:{:<3} {:<24} {}",
                    p["client"],
                    p["port"],
                    p["client_name"].as_str().unwrap_or(""),
                    p["port_name"].as_str().unwrap_or("")
                );
            }
        }
    }
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    // JACK was asked for (or listed by default, libjack being installed)
    // and its server did not answer: the listing is not what was asked.
    if let Some(j) = out.jack.as_ref().filter(|j| j.error.is_some()) {
        if a.backend == Some(BackendChoice::Jack) || !j.not_installed {
            if to_stdout {
                eprintln!(
                    "firmtime: error: no JACK ports listed: {}",
                    j.error.as_deref().unwrap_or_default()
                );
            } else {
                eprintln!(
                    "firmtime: error: no JACK ports listed from server \"{}\" (why: above)",
                    j.server
                );
            }
            return Ok(Outcome::Failed);
        }
    }
    Ok(Outcome::Ok)
}

// ---------------------------------------------------------------- shared output pieces

#[derive(Serialize)]
struct StatsOut {
    received: u64,
    sent: u64,
    input_dropped: u64,
    output_dropped: u64,
    late_outputs: u64,
    malformed: u64,
    xruns: u64,
    frame_gaps: u64,
}

impl From<BackendStats> for StatsOut {
    fn from(s: BackendStats) -> Self {
        Self {
            received: s.received,
            sent: s.sent,
            input_dropped: s.input_dropped,
            output_dropped: s.output_dropped,
            late_outputs: s.late_outputs,
            malformed: s.malformed,
            xruns: s.xruns,
            frame_gaps: s.frame_gaps,
        }
    }
}

fn message_bytes(msg: &MidiMessage) -> Vec<u8> {
    let mut b = [0u8; 3];
    let n = msg.encode(&mut b);
    if n == 0 {
        vec![0xF0]
    } else {
        b[..n].to_vec()
    }
}

fn describe(msg: &MidiMessage) -> String {
    use MidiMessage as M;
    match *msg {
        M::NoteOn {
            channel,
            note,
            velocity,
        } => format!(
            "Note on    ch {:>2} note {note:>3} vel {velocity:>3}",
            channel + 1
        ),
        M::NoteOff {
            channel,
            note,
            velocity,
        } => format!(
            "Note off   ch {:>2} note {note:>3} vel {velocity:>3}",
            channel + 1
        ),
        M::ControlChange {
            channel,
            controller,
            value,
        } => format!(
            "Control    ch {:>2} ctrl {controller:>3} val {value:>3}",
            channel + 1
        ),
        M::SysEx { len, truncated } => {
            format!(
                "SysEx      {len} bytes{}",
                if truncated { " (truncated)" } else { "" }
            )
        }
        M::PolyPressure {
            channel,
            note,
            pressure,
        } => format!(
            "Poly press ch {:>2} note {note:>3} val {pressure:>3}",
            channel + 1
        ),
        M::ProgramChange { channel, program } => {
            format!("Program    ch {:>2} prog {program:>3}", channel + 1)
        }
        M::ChannelPressure { channel, pressure } => {
            format!("Ch press   ch {:>2} val {pressure:>3}", channel + 1)
        }
        M::PitchBend { channel, value } => format!(
            "Pitch bend ch {:>2} val {:>+5}",
            channel + 1,
            i32::from(value) - 8192
        ),
        M::MtcQuarterFrame(b) => format!("MTC quarter frame {b:#04x}"),
        M::SongPosition(p) => format!("Song position {p}"),
        M::SongSelect(s) => format!("Song select {s}"),
        M::TuneRequest => "Tune request".into(),
        M::Clock => "Clock".into(),
        M::Start => "Start".into(),
        M::Continue => "Continue".into(),
        M::Stop => "Stop".into(),
        M::ActiveSensing => "Active sensing".into(),
        M::Reset => "System reset".into(),
    }
}

/// Puts the calling (engine) thread at real time too, unless --no-rt.
fn engine_rt(o: &OpenArgs) -> anyhow::Result<RtConditions> {
    let req = if o.no_rt {
        RtRequest::default()
    } else {
        RtRequest {
            policy: Policy::Fifo {
                priority: o.priority.saturating_sub(5).max(1),
            },
            ..RtRequest::default()
        }
    };
    let s = setup::apply(&req).context("real-time setup of the engine thread")?;
    Ok(s.conditions)
}

// ---------------------------------------------------------------- monitor

#[derive(Serialize)]
struct MonitorEvent {
    t_ns: u64,
    t_rel_ns: u64,
    frame: Option<u64>,
    port: u16,
    bytes: Vec<u8>,
    message: String,
}

#[derive(Serialize)]
struct MonitorOut {
    provenance: Provenance,
    backend: BackendChoice,
    detail: serde_json::Value,
    rt_io_thread: Option<RtConditions>,
    rt_engine_thread: RtConditions,
    start_ns: u64,
    end_reason: &'static str,
    /// The input's source went away during the run (a JACK port
    /// disconnected, its client gone, the server or device gone).
    input_lost: Option<MonitorLoss>,
    events: Vec<MonitorEvent>,
    stats: StatsOut,
}

/// The loss of the monitor's input source during its run.
#[derive(Serialize)]
struct MonitorLoss {
    /// `port_disconnected`, `client_gone`, `server_shutdown`, `server_stopped`,
    /// `device_closed`, `device_error`, `disconnected`.
    cause: &'static str,
    /// When the latest loss was seen, ns since the start.
    t_rel_ns: u64,
    /// In words, with the ports concerned.
    words: String,
    /// Losses during the run.
    losses: u32,
    /// A source was connected again after the latest loss.
    restored: bool,
}

fn monitor(a: MonitorArgs) -> anyhow::Result<Outcome> {
    let mut provenance = Provenance::begin(std::env::args().collect());
    let mut opened = open_backend(&a.open, a.open.device.clone(), Purpose::Monitor)?;
    let engine = engine_rt(&a.open)?;
    signals::catch(Repeat::Caught)?;
    let to_stdout = args::is_stdout(a.json.as_deref());
    let start = monotonic_ns();
    let losses0 = opened.backend.input_loss().map_or(0, |l| l.count);
    let end = a.duration.map(|d| start + d.as_nanos() as u64);
    if !to_stdout {
        eprintln!(
            "monitoring ({}); Ctrl-C to stop",
            a.duration.map_or("until Ctrl-C".to_string(), |d| format!(
                "for {}",
                firmtime_rt::units::format_duration(d)
            ))
        );
        println!("{:>14}  {:<9} message", "time (µs)", "bytes");
    }
    let mut events: Vec<MonitorEvent> = Vec::new();
    let end_reason = loop {
        if signals::interrupted() {
            break "interrupted";
        }
        let now = monotonic_ns();
        if end.is_some_and(|e| now >= e) {
            break "duration";
        }
        let mut batch = Vec::new();
        match opened.backend.poll_input(&mut |ev| batch.push(ev)) {
            Ok(_) => {}
            Err(BackendError::Disconnected) => break "disconnected",
            Err(e) => return Err(e).context("reading MIDI input"),
        }
        for ev in batch {
            let rel = ev.t_ns.saturating_sub(start);
            let bytes = message_bytes(&ev.msg);
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let text = describe(&ev.msg);
            if !to_stdout {
                println!("{:>14.1}  {:<9} {text}", rel as f64 / 1e3, hex.join(" "));
            }
            events.push(MonitorEvent {
                t_ns: ev.t_ns,
                t_rel_ns: rel,
                frame: ev.frame,
                port: ev.port,
                bytes,
                message: text,
            });
        }
        let deadline = end.unwrap_or(u64::MAX).min(monotonic_ns() + 100_000_000);
        let _ = opened.backend.wait(deadline);
    };
    provenance.finish();
    let stats = opened.backend.stats();
    if !to_stdout {
        eprintln!(
            "{} events; malformed {}, input dropped {}; ended: {end_reason}",
            events.len(),
            stats.malformed,
            stats.input_dropped
        );
    }
    let input_lost = opened
        .backend
        .input_loss()
        .filter(|l| l.count > losses0)
        .map(|l| MonitorLoss {
            cause: l.cause.key(),
            t_rel_ns: l.t_ns.saturating_sub(start),
            words: match opened.backend.describe_input_loss() {
                Some(d) => format!("{}: {d}", l.cause.words()),
                None => l.cause.words(),
            },
            losses: l.count - losses0,
            restored: !l.ongoing,
        });
    if let Some(l) = &input_lost {
        eprintln!(
            "firmtime: INPUT LOST at {:.3} s ({}): {}{}",
            l.t_rel_ns as f64 / 1e9,
            l.cause,
            l.words,
            if l.restored {
                "; connected again later: events in between are missing"
            } else {
                ""
            }
        );
    }
    let lost = input_lost.is_some();
    let out = MonitorOut {
        provenance,
        backend: a.open.backend,
        detail: opened.detail,
        rt_io_thread: opened.rt,
        rt_engine_thread: engine,
        start_ns: start,
        end_reason,
        input_lost,
        events,
        stats: stats.into(),
    };
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    Ok(if end_reason == "disconnected" {
        eprintln!("firmtime: the MIDI device went away; everything received before is kept");
        Outcome::Failed
    } else if lost {
        eprintln!(
            "firmtime: the MIDI input lost its source during the run; everything received is kept"
        );
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

// ---------------------------------------------------------------- loop

#[derive(Serialize)]
struct LoopOut {
    provenance: Provenance,
    backend: BackendChoice,
    detail: serde_json::Value,
    pty_loopback: bool,
    #[serde(flatten)]
    result: LoopResult,
    events_requested: u64,
    backend_stats: StatsOut,
    loopback: Option<LoopbackOut>,
    rt_io_thread: Option<RtConditions>,
    rt_engine_thread: RtConditions,
    rt_loopback_thread: Option<RtConditions>,
    /// Ctrl-C ended the run early.
    interrupted: bool,
    /// JACK through a relay: frames per hop.
    hops: Option<LoopHops>,
    /// JACK: what the relay client did.
    relay: Option<RelayOut>,
    /// JACK: the intervals in frames (the wire ratio means nothing there).
    jack_intervals: Option<JackIntervals>,
}

/// The loop's intervals over JACK in frames at the server's rate: a JACK
/// loop is paced by its periods, not by a 31.25 kbaud wire, so these
/// replace the ratio to the wire limit in the human output.
#[derive(Serialize)]
struct JackIntervals {
    sample_rate: u32,
    period: u32,
    mean_interval_frames: f64,
    sd_interval_frames: f64,
    min_interval_frames: f64,
    max_interval_frames: f64,
    /// Mean interval in periods.
    mean_interval_periods: f64,
}

impl JackIntervals {
    /// From the JACK backend's `detail` (sample_rate, buffer_size); `None`
    /// for other backends.
    fn of(r: &LoopResult, detail: &serde_json::Value) -> Option<Self> {
        let get = |k: &str| detail.get(k)?.as_u64().and_then(|v| u32::try_from(v).ok());
        let (rate, period) = (get("sample_rate")?, get("buffer_size")?);
        let f = |ns: f64| ns * f64::from(rate) / 1e9;
        Some(JackIntervals {
            sample_rate: rate,
            period,
            mean_interval_frames: f(r.mean_interval_ns),
            sd_interval_frames: f(r.sd_interval_ns),
            min_interval_frames: f(r.min_interval_ns as f64),
            max_interval_frames: f(r.max_interval_ns as f64),
            mean_interval_periods: f(r.mean_interval_ns) / f64::from(period.max(1)),
        })
    }
}

#[derive(Serialize)]
struct RelayOut {
    forwarded: u64,
    dropped: u64,
    xruns: u64,
    frame_gaps: u64,
}

/// Wraps the backend under test: records the frames of what went out and
/// came in (JACK), and ends the run on Ctrl-C (as a disconnect). Its
/// storage is allocated up front; past it, frames are not recorded.
struct Recorder<'a> {
    inner: &'a mut dyn MidiBackend,
    sent: Vec<u64>,
    received: Vec<u64>,
}

impl<'a> Recorder<'a> {
    fn new(inner: &'a mut dyn MidiBackend, capacity: usize) -> Self {
        Self {
            inner,
            sent: Vec::with_capacity(capacity),
            received: Vec::with_capacity(capacity),
        }
    }

    /// Records the frames of outputs that went out. **RT-safe.**
    fn drain_sent(&mut self) {
        let sent = &mut self.sent;
        self.inner.poll_sent(&mut |ev| push_frame(sent, ev.frame));
    }
}

fn push_frame(v: &mut Vec<u64>, frame: Option<u64>) {
    if let Some(f) = frame {
        if v.len() < v.capacity() {
            v.push(f);
        }
    }
}

impl MidiBackend for Recorder<'_> {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        if signals::interrupted() {
            return Err(BackendError::Disconnected);
        }
        let received = &mut self.received;
        self.inner.poll_input(&mut |ev| {
            push_frame(received, ev.frame);
            f(ev);
        })
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        self.drain_sent();
        if signals::interrupted() {
            return Err(BackendError::Disconnected);
        }
        // Wake at least every 100 ms to notice Ctrl-C.
        self.inner
            .wait(deadline_ns.min(monotonic_ns().saturating_add(100_000_000)))
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        self.inner.send(ev)
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        let sent = &mut self.sent;
        self.inner.poll_sent(&mut |ev| {
            push_frame(sent, ev.frame);
            f(ev);
        })
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }

    fn input_loss(&self) -> Option<firmtime_midi::InputLoss> {
        self.inner.input_loss()
    }

    fn describe_input_loss(&self) -> Option<String> {
        self.inner.describe_input_loss()
    }
}

fn render_hops(h: &LoopHops, rate: Option<u32>) -> String {
    let ms = |frames: f64| match rate {
        Some(r) if r > 0 => format!(" = {:.3} ms", frames * 1000.0 / f64::from(r)),
        _ => String::new(),
    };
    let one = |name: &str, s: &Option<jack::HopSummary>| match s {
        Some(s) => format!(
            "{name:<16} mean {:.2} frames{}, min {}, max {} ({} events)\n",
            s.mean,
            ms(s.mean),
            s.min,
            s.max,
            s.count
        ),
        None => format!("{name:<16} (not measured)\n"),
    };
    format!(
        "frames per hop (JACK, through the relay client):\n{}{}{}{}",
        one("  out -> relay", &h.out_to_relay),
        one("  relay -> in", &h.relay_to_in),
        one("  in -> out", &h.turnaround),
        one("  round trip", &h.round_trip),
    )
}

#[derive(Serialize)]
struct LoopbackOut {
    byte_ns: u64,
    bytes_in: u64,
    bytes_out: u64,
    overruns: u64,
}

impl LoopbackOut {
    fn new(s: PacedStats) -> Self {
        Self {
            byte_ns: WIRE_BYTE_NS,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
            overruns: s.overruns,
        }
    }
}

fn run_loop(a: LoopArgs) -> anyhow::Result<Outcome> {
    let mut provenance = Provenance::begin(std::env::args().collect());
    if a.pty_loopback && a.open.backend != BackendChoice::Raw {
        return Err(UsageError("--pty-loopback needs --backend raw".into()).into());
    }
    if a.open.backend == BackendChoice::Raw && !a.pty_loopback && a.open.device.is_none() {
        return Err(UsageError(
            "give --device PATH (out cabled back to in) or --pty-loopback".into(),
        )
        .into());
    }
    let _runaway = firmtime_rt::runaway::install(Duration::from_secs(2))
        .context("installing runaway protection for the real-time threads")?;
    let mut pty_parts = None;
    let device = if a.pty_loopback {
        let pty = PtyPair::open()?;
        let looper = PacedLoopback::start(
            pty.master,
            PacedOptions {
                rt: rt_request(&a.open, a.open.priority),
                ..PacedOptions::default()
            },
        )?;
        let path = pty.slave_path.clone();
        pty_parts = Some((looper, pty.slave));
        Some(path)
    } else {
        a.open.device.clone()
    };
    let mut opened = open_backend(&a.open, device, Purpose::Loop)?;
    // The pair's own slave fd is no longer needed once the backend holds one.
    let looper = pty_parts.map(|(l, slave)| {
        drop(slave);
        l
    });
    let engine = engine_rt(&a.open)?;
    let timeout_ns = args::nanos(a.timeout);
    let mut test = LoopTest::new(LoopConfig {
        events: a.events,
        timeout_ns,
        ..LoopConfig::default()
    })?;
    let to_stdout = args::is_stdout(a.json.as_deref());
    if !to_stdout {
        eprintln!(
            "loop test: {} events through {}…",
            a.events,
            if a.pty_loopback {
                "a pty paced like a 31.25 kbaud cable".to_string()
            } else if a.open.backend == BackendChoice::Jack {
                format!(
                    "JACK (server \"{}\")",
                    opened.detail["server"].as_str().unwrap_or("default")
                )
            } else if a.open.backend == BackendChoice::Alsa {
                "the ALSA sequencer".to_string()
            } else {
                opened.detail["device"]
                    .as_str()
                    .unwrap_or("the device")
                    .to_string()
            }
        );
    }
    let loop_rt = looper.as_ref().map(|l| l.conditions().clone());
    signals::catch(Repeat::Caught)?;
    let cap = usize::try_from(a.events)
        .unwrap_or(usize::MAX)
        .saturating_add(4096);
    let mut rec = Recorder::new(opened.backend.as_mut(), cap);
    let r = test.run(&mut rec);
    rec.drain_sent();
    let (sent_frames, received_frames) = (rec.sent, rec.received);
    let interrupted = signals::interrupted();
    let stats = opened.backend.stats();
    drop(opened.backend);
    let relay = match opened.relay.take() {
        Some(relay) => Some(relay.finish()?),
        None => None,
    };
    // The dummy server (if any) is no longer needed.
    drop(opened.server.take());
    // Hops pair events by order. After an xrun JACK may skip or repeat a
    // cycle's port buffers (the relay then forwards an event twice), so the
    // pairing no longer holds: no hops rather than wrong ones.
    // PipeWire drops cycles without an xrun callback: frame gaps count them.
    let xruns =
        stats.xruns + stats.frame_gaps + relay.as_ref().map_or(0, |rr| rr.xruns + rr.frame_gaps);
    let hops = relay
        .as_ref()
        .filter(|_| xruns == 0)
        .map(|rr| LoopHops::compute(&sent_frames, &rr.frames, &received_frames, 2));
    let loop_stats = looper.map(PacedLoopback::stop);
    provenance.finish();
    let jack_intervals = if a.open.backend == BackendChoice::Jack {
        JackIntervals::of(&r, &opened.detail)
    } else {
        None
    };
    if !to_stdout && relay.is_some() {
        match &hops {
            Some(h) => print!(
                "{}",
                render_hops(h, jack_intervals.as_ref().map(|j| j.sample_rate))
            ),
            None => println!(
                "frames per hop: not computed: {xruns} xruns or frame gaps (JACK skips or repeats a cycle's \
                 buffers then, so events can no longer be paired by order)"
            ),
        }
    }
    if !to_stdout {
        print!("{}", render_loop(&r, a.events, jack_intervals.as_ref()));
    }
    let failed = r.events_received < a.events || r.lost > 0 || r.disconnected || interrupted;
    let out = LoopOut {
        provenance,
        backend: a.open.backend,
        detail: opened.detail,
        pty_loopback: a.pty_loopback,
        result: r,
        events_requested: a.events,
        backend_stats: stats.into(),
        loopback: loop_stats.map(LoopbackOut::new),
        rt_io_thread: opened.rt,
        rt_engine_thread: engine,
        rt_loopback_thread: loop_rt,
        interrupted,
        hops,
        relay: relay.map(|rr| RelayOut {
            forwarded: rr.forwarded,
            dropped: rr.dropped,
            xruns: rr.xruns,
            frame_gaps: rr.frame_gaps,
        }),
        jack_intervals,
    };
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    if failed {
        if interrupted {
            eprintln!(
                "firmtime: loop test interrupted after {} events (results above are kept)",
                r.events_received
            );
            return Ok(Outcome::Failed);
        }
        if r.disconnected {
            bail!(
                "the MIDI device went away after {} events (results above are kept)",
                r.events_received
            );
        }
        eprintln!(
            "firmtime: loop test incomplete: {} of {} events received, {} lost{}",
            r.events_received,
            a.events,
            r.lost,
            if r.timed_out { ", timed out" } else { "" }
        );
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

/// The loop's result; over JACK (`jack`) in frames and ms, elsewhere
/// beside the MIDI wire limit.
fn render_loop(r: &LoopResult, asked: u64, jack: Option<&JackIntervals>) -> String {
    let ms = |ns: f64| ns / 1e6;
    let interval = match jack {
        Some(j) => format!(
            "mean interval    {:.4} ms = {:.1} frames ({:.2} periods of {} at {} Hz)\n\
             sd               {:.4} ms = {:.1} frames\n\
             min / max        {:.4} / {:.4} ms = {:.1} / {:.1} frames\n\
             events/s         {:.1}\n",
            ms(r.mean_interval_ns),
            j.mean_interval_frames,
            j.mean_interval_periods,
            j.period,
            j.sample_rate,
            ms(r.sd_interval_ns),
            j.sd_interval_frames,
            ms(r.min_interval_ns as f64),
            ms(r.max_interval_ns as f64),
            j.min_interval_frames,
            j.max_interval_frames,
            r.events_per_second,
        ),
        None => format!(
            "mean interval    {:.4} ms   wire limit {:.3} ms ({}-byte messages at 31.25 kbaud), ratio {:.4}\n\
             sd               {:.4} ms\n\
             min / max        {:.4} / {:.4} ms\n\
             events/s         {:.1}   (wire: {:.1})\n",
            ms(r.mean_interval_ns),
            ms(r.wire_limit_ns as f64),
            r.wire_bytes_per_message,
            r.ratio_to_wire,
            ms(r.sd_interval_ns),
            ms(r.min_interval_ns as f64),
            ms(r.max_interval_ns as f64),
            r.events_per_second,
            1e9 / r.wire_limit_ns as f64,
        ),
    };
    format!(
        "events received  {} of {asked}\n{interval}lost             {}   (sent {}, refused {})\n",
        r.events_received, r.lost, r.sent, r.send_refused,
    )
}
