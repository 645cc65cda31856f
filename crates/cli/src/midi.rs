//! `firmtime midi`: list ports, monitor input with timestamps, run FTAP's loop test.
//!
//! Every backend is opened through [`open_backend`]: adding one is a
//! [`BackendChoice`] variant and one match arm there.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use firmtime_midi::looptest::{LoopConfig, LoopResult, LoopTest};
use firmtime_midi::pty::{PacedLoopback, PacedOptions, PacedStats, PtyPair};
use firmtime_midi::raw::{self, RawBackend, RawOptions, WIRE_BYTE_NS};
use firmtime_midi::{BackendError, BackendStats, MidiBackend, MidiMessage};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::system::Provenance;
use serde::Serialize;

use crate::args::{self, UsageError};
use crate::Outcome;

/// Arguments of `firmtime midi`.
#[derive(Debug, Args)]
pub struct MidiArgs {
    #[command(subcommand)]
    command: MidiCommand,
}

#[derive(Debug, Subcommand)]
enum MidiCommand {
    /// List the MIDI ports each backend sees.
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
}

/// How to open a backend; shared by `monitor` and `loop`.
#[derive(Debug, Args)]
struct OpenArgs {
    /// Which backend to use.
    #[arg(long, value_enum, default_value_t = BackendChoice::Raw)]
    backend: BackendChoice,
    /// The device (raw: a path such as /dev/snd/midiC1D0 or /dev/ttyUSB0).
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Raw: set this baud rate on a serial tty (31250 for a MIDI serial interface).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    baud: Option<u32>,
    /// SCHED_FIFO priority of the MIDI threads (1..=99).
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(1..=99))]
    priority: u8,
    /// Run the MIDI threads at SCHED_OTHER without memory locking (recorded
    /// in the output; timing is then not real-time).
    #[arg(long)]
    no_rt: bool,
}

/// Arguments of `firmtime midi ports`.
#[derive(Debug, Args)]
struct PortsArgs {
    /// Write the port list as JSON to PATH (`-` for stdout).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

/// Arguments of `firmtime midi monitor`.
#[derive(Debug, Args)]
struct MonitorArgs {
    #[command(flatten)]
    open: OpenArgs,
    /// Stop after this long (`10s`, `2min`); default: until Ctrl-C or the device goes away.
    #[arg(long, value_parser = args::duration)]
    duration: Option<Duration>,
    /// Write every event as JSON to PATH (`-` for stdout); see docs/MIDI.md.
    #[arg(long, value_name = "PATH")]
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
    #[arg(long, default_value = "60s", value_parser = args::duration)]
    timeout: Duration,
    /// Write the result as JSON to PATH (`-` for stdout); see docs/MIDI.md.
    #[arg(long, value_name = "PATH")]
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

/// An opened backend and what to record about it.
struct Opened {
    backend: Box<dyn MidiBackend>,
    /// The backend's I/O thread's RT conditions, where it has its own thread.
    rt: Option<RtConditions>,
    /// Extra facts for the output (device, baud, …).
    detail: serde_json::Value,
}

fn rt_request(o: &OpenArgs, priority: u8) -> RtRequest {
    if o.no_rt {
        RtRequest::default()
    } else {
        RtRequest {
            policy: Policy::Fifo { priority },
            mlock: true,
            prefault_stack: 256 * 1024,
            ..RtRequest::default()
        }
    }
}

/// Opens the backend chosen on the command line. One arm per backend.
fn open_backend(o: &OpenArgs, device: Option<PathBuf>) -> anyhow::Result<Opened> {
    match o.backend {
        BackendChoice::Raw => open_raw(o, device),
    }
}

fn open_raw(o: &OpenArgs, device: Option<PathBuf>) -> anyhow::Result<Opened> {
    let Some(path) = device else {
        return Err(UsageError(
            "--backend raw needs --device PATH (see `firmtime midi ports`)".into(),
        )
        .into());
    };
    let b = RawBackend::open(
        &path,
        RawOptions {
            baud: o.baud,
            rt: rt_request(o, o.priority),
            ..RawOptions::default()
        },
    )?;
    let info = b.info().clone();
    Ok(Opened {
        rt: Some(info.rt),
        detail: serde_json::json!({
            "device": path,
            "is_tty": info.is_tty,
            "baud": info.baud,
        }),
        backend: Box::new(b),
    })
}

// ---------------------------------------------------------------- ports

#[derive(Serialize)]
struct PortsOut {
    raw: Vec<raw::RawPort>,
}

fn ports(a: PortsArgs) -> anyhow::Result<Outcome> {
    let out = PortsOut {
        raw: raw::list_ports(),
    };
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !to_stdout {
        println!("raw (--backend raw --device PATH):");
        if out.raw.is_empty() {
            println!("  (none: no /dev/snd/midiC*D*, /dev/midi*, /dev/ttyS*, /dev/ttyUSB*, /dev/ttyACM*)");
        }
        for p in &out.raw {
            let kind = match p.kind {
                raw::RawPortKind::AlsaRawMidi => "ALSA raw MIDI",
                raw::RawPortKind::OssMidi => "OSS raw MIDI",
                raw::RawPortKind::Serial => "serial port (MIDI interfaces need --baud 31250)",
            };
            println!("  {:<22} {kind}", p.path.display());
        }
        println!("  any pty or pipe also works; `firmtime midi loop --pty-loopback` makes one");
    }
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
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
        other => format!("{other:?}"),
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Ctrl-C ends a monitor run cleanly (the JSON is still written).
fn catch_sigint() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe);
    // `sa` is fully initialised before sigaction reads it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
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
    events: Vec<MonitorEvent>,
    stats: StatsOut,
}

fn monitor(a: MonitorArgs) -> anyhow::Result<Outcome> {
    let mut provenance = Provenance::begin(std::env::args().collect());
    let mut opened = open_backend(&a.open, a.open.device.clone())?;
    let engine = engine_rt(&a.open)?;
    catch_sigint();
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let start = monotonic_ns();
    let end = a.duration.map(|d| start + d.as_nanos() as u64);
    if !to_stdout {
        eprintln!(
            "monitoring ({}); Ctrl-C to stop",
            a.duration
                .map_or("until Ctrl-C".to_string(), |d| format!("for {d:?}"))
        );
        println!("{:>14}  {:<9} message", "time (µs)", "bytes");
    }
    let mut events: Vec<MonitorEvent> = Vec::new();
    let end_reason = loop {
        if INTERRUPTED.load(Ordering::Relaxed) {
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
    let out = MonitorOut {
        provenance,
        backend: a.open.backend,
        detail: opened.detail,
        rt_io_thread: opened.rt,
        rt_engine_thread: engine,
        start_ns: start,
        end_reason,
        events,
        stats: stats.into(),
    };
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    Ok(if end_reason == "disconnected" {
        eprintln!("firmtime: the MIDI device went away; everything received before is kept");
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
    if !a.pty_loopback && a.open.device.is_none() {
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
    let mut opened = open_backend(&a.open, device)?;
    // The pair's own slave fd is no longer needed once the backend holds one.
    let looper = pty_parts.map(|(l, slave)| {
        drop(slave);
        l
    });
    let engine = engine_rt(&a.open)?;
    let timeout_ns = u64::try_from(a.timeout.as_nanos()).unwrap_or(u64::MAX);
    let mut test = LoopTest::new(LoopConfig {
        events: a.events,
        timeout_ns,
        ..LoopConfig::default()
    })?;
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !to_stdout {
        eprintln!(
            "loop test: {} events through {}…",
            a.events,
            if a.pty_loopback {
                "a pty paced like a 31.25 kbaud cable".to_string()
            } else {
                format!("{:?}", opened.detail["device"])
            }
        );
    }
    let loop_rt = looper.as_ref().map(|l| l.conditions().clone());
    let r = test.run(opened.backend.as_mut());
    let stats = opened.backend.stats();
    drop(opened.backend);
    let loop_stats = looper.map(PacedLoopback::stop);
    provenance.finish();
    if !to_stdout {
        print!("{}", render_loop(&r, a.events));
    }
    let failed = r.events_received < a.events || r.lost > 0 || r.disconnected;
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
    };
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    if failed {
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

fn render_loop(r: &LoopResult, asked: u64) -> String {
    let ms = |ns: f64| ns / 1e6;
    format!(
        "events received  {} of {asked}\n\
         mean interval    {:.4} ms   wire limit {:.3} ms ({}-byte messages at 31.25 kbaud), ratio {:.4}\n\
         sd               {:.4} ms\n\
         min / max        {:.4} / {:.4} ms\n\
         events/s         {:.1}   (wire: {:.1})\n\
         lost             {}   (sent {}, refused {})\n",
        r.events_received,
        ms(r.mean_interval_ns),
        ms(r.wire_limit_ns as f64),
        r.wire_bytes_per_message,
        r.ratio_to_wire,
        ms(r.sd_interval_ns),
        ms(r.min_interval_ns as f64),
        ms(r.max_interval_ns as f64),
        r.events_per_second,
        1e9 / r.wire_limit_ns as f64,
        r.lost,
        r.sent,
        r.send_refused,
    )
}
