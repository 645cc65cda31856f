//! The audio round trip, jack_iodelay's job: a test signal played on a
//! JACK output port comes back on an input port through a loopback (a cable
//! from a sound card's output to its input, or a JACK connection), and the
//! delay between the two is measured to the frame.
//!
//! One client, `out` and `in` (like jack_iodelay's `jack_delay:out` and
//! `:in`), plays [`signal::MLS_LEN`]-frame bursts of a maximum-length
//! sequence at known frames and records its input by frame; afterwards
//! [`signal::Correlator`] finds, for each burst, the lag where it came back
//! ([`measure`]). Output and capture are both placed by JACK's frame
//! counter, so a skipped cycle (an xrun) leaves a hole rather than shifting
//! the rest; bursts near a skipped cycle or an xrun are marked *disturbed*
//! and the result is the lag most bursts agree on.
//!
//! What the number means: frames between a sample written to `out` and the
//! same sample read from `in`, counted in the two streams — the quantity
//! jack_iodelay reports as "total roundtrip latency". A connection that
//! closes a loop in JACK's graph (our own `out` to our own `in`, or through
//! other clients back to us) delivers one period later; on a sound card
//! the driver's playback and capture buffers take that place. Beside it
//! come the latencies JACK reports for the two ports (playback of `out`,
//! capture of `in`), and the difference, jack_iodelay's "extra loopback
//! latency".
//!
//! [`Cable`] is a client that copies its input to its output a fixed number
//! of frames later: a loopback cable of known delay on a dummy server, for
//! tests and demonstrations.
//!
//! # Real-time contract
//!
//! The process callbacks ([`measure`]'s probe and [`Cable`]'s) write into
//! buffers allocated and touched before activation and share only atomics
//! with the other threads: no allocation, no lock, no printing. Everything
//! else here (opening, connecting, waiting, the analysis) is setup time.

pub mod signal;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jack::{AudioIn, AudioOut, Client, Control, LatencyType, Port, PortFlags, ProcessScope};

use crate::client::{activate, connect, deactivate, open_client, port_name};
use crate::clock::FrameGaps;
use crate::error::{Error, ErrorKind};
use signal::{Correlator, Detection, MLS_LEN, MLS_ORDER};

/// How [`measure`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundTripOptions {
    /// The JACK client's name (its ports are `NAME:out` and `NAME:in`).
    pub client_name: String,
    /// The server (`None`: the default).
    pub server: Option<String>,
    /// Ports our `out` is connected to (a sound card's playback port).
    pub connect_out: Vec<String>,
    /// Ports connected to our `in` (the capture port the cable comes back to).
    pub connect_in: Vec<String>,
    /// Also connect our own `out` to our own `in` (a loop inside JACK,
    /// e.g. on a dummy server).
    pub self_loop: bool,
    /// Bursts to play (1..=100).
    pub bursts: u32,
    /// The longest round trip looked for; bursts are this much plus one
    /// burst apart.
    pub max_latency: Duration,
    /// Level of the test signal, dBFS (−60..=0).
    pub level_dbfs: f64,
    /// How long to wait for connections made by someone else (0: they must
    /// exist once our connections are made).
    pub wait_for_connections: Duration,
}

impl RoundTripOptions {
    /// Client `firmtime-roundtrip` on the default server, no connections,
    /// 8 bursts, up to 500 ms, −12 dBFS.
    pub fn new() -> Self {
        RoundTripOptions {
            client_name: "firmtime-roundtrip".into(),
            server: None,
            connect_out: Vec::new(),
            connect_in: Vec::new(),
            self_loop: false,
            bursts: 8,
            max_latency: Duration::from_millis(500),
            level_dbfs: -12.0,
            wait_for_connections: Duration::ZERO,
        }
    }

    fn check(&self) -> Result<(), Error> {
        let bad = |what: String| Err(Error::new(ErrorKind::InvalidInput, what));
        if !(1..=100).contains(&self.bursts) {
            return bad(format!("bursts: {} is out of range 1..=100", self.bursts));
        }
        if !(self.level_dbfs.is_finite() && (-60.0..=0.0).contains(&self.level_dbfs)) {
            return bad(format!(
                "level: {} dBFS is out of range -60..=0",
                self.level_dbfs
            ));
        }
        if self.max_latency.is_zero() || self.max_latency > Duration::from_secs(5) {
            return bad(format!(
                "max latency: {:?} is out of range 1 ms..=5 s",
                self.max_latency
            ));
        }
        Ok(())
    }
}

impl Default for RoundTripOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// A JACK-reported latency range of a port, frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatencyRange {
    /// Least latency, frames.
    pub min: u32,
    /// Greatest latency, frames.
    pub max: u32,
}

impl From<(u32, u32)> for LatencyRange {
    fn from((min, max): (u32, u32)) -> Self {
        LatencyRange { min, max }
    }
}

/// What happened to one burst.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Burst {
    /// Frame (from the first burst's start) it was played at.
    pub played_at: u64,
    /// Where it came back; `None`: not found.
    pub detection: Option<Detection>,
    /// A skipped cycle or an xrun fell within its window: its lag is not
    /// trusted when undisturbed bursts exist.
    pub disturbed: bool,
}

/// The measured round trip and what JACK reports beside it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RoundTrip {
    /// Our output port, `client:out`.
    pub out_port: String,
    /// Our input port, `client:in`.
    pub in_port: String,
    /// What `out` was connected to at the end of the run.
    pub out_connections: Vec<String>,
    /// What was connected to `in` at the end of the run.
    pub in_connections: Vec<String>,
    /// Sample rate, Hz.
    pub sample_rate: u32,
    /// Frames per period.
    pub period: u32,
    /// The round trip, frames: the lag most trusted bursts agree on.
    pub frames: u64,
    /// The round trip, ms.
    pub ms: f64,
    /// Mean sub-frame part of the agreeing bursts (parabolic interpolation;
    /// 0 on a digital loop), frames.
    pub sub_frame: f64,
    /// Least and greatest lag among detected bursts, frames.
    pub min_frames: u64,
    /// See `min_frames`.
    pub max_frames: u64,
    /// Bursts played.
    pub bursts: u32,
    /// Bursts that came back.
    pub detected: u32,
    /// Detected bursts at `frames`.
    pub agreeing: u32,
    /// Bursts near a skipped cycle or an xrun.
    pub disturbed: u32,
    /// Least normalized correlation among the agreeing bursts (0..1).
    pub correlation: f64,
    /// The signal came back inverted.
    pub inverted: bool,
    /// Level of what came back relative to what was played, dB (mean of
    /// the agreeing bursts).
    pub gain_db: f64,
    /// Test signal level, dBFS.
    pub level_dbfs: f64,
    /// JACK's playback latency of `out` (what lies after it: the sound
    /// card's output side as its driver reports it).
    pub playback_latency: LatencyRange,
    /// JACK's capture latency of `in` (what lies before it).
    pub capture_latency: LatencyRange,
    /// `frames − (playback max + capture max)`: what the loop adds beyond
    /// what JACK reports (jack_iodelay's "extra loopback latency").
    pub extra_frames: i64,
    /// Xruns JACK reported during the run.
    pub xruns: u64,
    /// Skipped cycles seen in the frame counter.
    pub frame_gaps: u64,
    /// Each burst.
    pub per_burst: Vec<Burst>,
}

impl RoundTrip {
    /// `frames` in ms at this rate.
    pub fn frames_to_ms(&self, frames: f64) -> f64 {
        frames * 1000.0 / f64::from(self.sample_rate.max(1))
    }
}

/// "Not started yet" in [`Shared::start`].
const NOT_STARTED: u64 = u64::MAX;
/// Where skipped cycles and xruns are remembered (more are only counted).
const EVENTS: usize = 64;

/// What the probe's callback and the measuring thread share.
#[derive(Debug)]
struct Shared {
    /// JACK frame (32-bit, in a u64) of the first burst; [`NOT_STARTED`].
    start: AtomicU64,
    /// The last burst's window has been captured.
    done: AtomicBool,
    /// Cycles run since the start.
    cycles: AtomicU64,
    xruns: AtomicU64,
    frame_gaps: AtomicU64,
    /// JACK frames of xruns (approximate: when the notification came) and
    /// skipped cycles, the first [`EVENTS`] of each.
    xrun_frames: [AtomicU32; EVENTS],
    gap_frames: [AtomicU32; EVENTS],
}

impl Shared {
    fn new() -> Self {
        Shared {
            start: AtomicU64::new(NOT_STARTED),
            done: AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            xruns: AtomicU64::new(0),
            frame_gaps: AtomicU64::new(0),
            xrun_frames: std::array::from_fn(|_| AtomicU32::new(0)),
            gap_frames: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// Records frame `f` as the `n`-th event of `slots`. **RT-safe.**
    fn note(slots: &[AtomicU32; EVENTS], n: u64, f: u32) {
        if let Some(s) = usize::try_from(n).ok().and_then(|i| slots.get(i)) {
            s.store(f, Ordering::Relaxed);
        }
    }
}

/// The probe's process callback: plays the bursts and records the input,
/// both placed by JACK's frame counter.
struct Probe {
    out: Port<AudioOut>,
    inp: Port<AudioIn>,
    /// The sequence at the played level.
    burst: Vec<f32>,
    /// Frames from one burst's start to the next.
    spacing: u32,
    bursts: u32,
    /// Input from the first burst's frame on, preallocated and touched.
    capture: Vec<f32>,
    gaps: FrameGaps,
    shared: Arc<Shared>,
}

impl Probe {
    /// **RT-safe.**
    fn cycle(&mut self, ps: &ProcessScope) {
        let f0 = ps.last_frame_time();
        let n = ps.n_frames();
        let start = self.shared.start.load(Ordering::Acquire);
        if start == NOT_STARTED {
            self.out.as_mut_slice(ps).fill(0.0);
            return;
        }
        let start = start as u32;
        if self.gaps.observe(f0, n) {
            let k = self.shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
            Shared::note(&self.shared.gap_frames, k, f0);
        }
        self.shared.cycles.fetch_add(1, Ordering::Relaxed);
        // Frames before the start wrap to huge values: outside every range.
        let rel = |i: usize| f0.wrapping_add(i as u32).wrapping_sub(start);
        let len = self.capture.len() as u32;
        // Input first: in a loop inside one client JACK may hand `in` the
        // very buffer `out` is written to, holding last cycle's output.
        for (i, &x) in self.inp.as_slice(ps).iter().enumerate() {
            let r = rel(i);
            if r < len {
                self.capture[r as usize] = x;
            }
        }
        let (burst, spacing, bursts) = (&self.burst, self.spacing, self.bursts);
        for (i, o) in self.out.as_mut_slice(ps).iter_mut().enumerate() {
            let r = rel(i);
            *o = if r < len && r / spacing < bursts {
                burst.get((r % spacing) as usize).copied().unwrap_or(0.0)
            } else {
                0.0
            };
        }
        let end = f0.wrapping_add(n).wrapping_sub(start);
        if end >= len && end < 1 << 31 {
            self.shared.done.store(true, Ordering::Release);
        }
    }
}

impl jack::ProcessHandler for Probe {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(ps));
        Control::Continue
    }
}

/// Counts xruns and notes the frame at which each was reported.
struct Notifier {
    shared: Arc<Shared>,
}

impl jack::NotificationHandler for Notifier {
    fn xrun(&mut self, client: &Client) -> Control {
        let k = self.shared.xruns.fetch_add(1, Ordering::Relaxed);
        Shared::note(&self.shared.xrun_frames, k, client.frame_time());
        Control::Continue
    }
}

/// Linear amplitude of `dbfs`.
fn amplitude(dbfs: f64) -> f64 {
    10f64.powf(dbfs / 20.0)
}

/// Measures the round trip from our `out` back to our `in` (see the
/// module docs): opens the client, connects what `options` asks for,
/// plays the bursts, and analyses what came back. `stop` is polled every
/// 20 ms; when it says yes the run ends early and what was captured is
/// analysed.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for options out of range; opening and
/// connecting errors ([`ErrorKind::ServerUnavailable`], [`ErrorKind::Port`]);
/// [`ErrorKind::Port`] when `out` or `in` is connected to nothing;
/// [`ErrorKind::Backend`] when the server runs no cycles; [`ErrorKind::NoSignal`]
/// when no burst came back. Each message names the ports and how to connect them.
pub fn measure(options: &RoundTripOptions, stop: &dyn Fn() -> bool) -> Result<RoundTrip, Error> {
    options.check()?;
    let client = open_client(&options.client_name, options.server.as_deref())?;
    let rate = client.sample_rate();
    let period = client.buffer_size();
    let reg = |e: jack::Error| Error::new(ErrorKind::Port, format!("cannot register a port: {e}"));
    let out = client
        .register_port("out", AudioOut::default())
        .map_err(reg)?;
    let inp = client
        .register_port("in", AudioIn::default())
        .map_err(reg)?;
    let (out_name, in_name) = (port_name(&out)?, port_name(&inp)?);
    let max_lag = (options.max_latency.as_secs_f64() * f64::from(rate)).ceil() as usize;
    let spacing = (max_lag + MLS_LEN) as u32;
    let total = spacing as usize * options.bursts as usize;
    let level = amplitude(options.level_dbfs);
    let reference = signal::mls(MLS_ORDER);
    let shared = Arc::new(Shared::new());
    let probe = Probe {
        out,
        inp,
        burst: reference.iter().map(|&s| s * level as f32).collect(),
        spacing,
        bursts: options.bursts,
        // vec! of zeros may map untouched pages: touch them now, not in the callback.
        capture: {
            let mut v = vec![1.0f32; total];
            v.fill(0.0);
            v
        },
        gaps: FrameGaps::default(),
        shared: Arc::clone(&shared),
    };
    let notifier = Notifier {
        shared: Arc::clone(&shared),
    };
    let active = activate(client, notifier, probe, "the round-trip client")?;
    let c = active.as_client();
    let connected = (|| {
        for p in &options.connect_out {
            connect(c, &out_name, p)?;
        }
        for p in &options.connect_in {
            connect(c, p, &in_name)?;
        }
        if options.self_loop {
            connect(c, &out_name, &in_name)?;
        }
        wait_for_connections(c, &out_name, &in_name, options.wait_for_connections, stop)
    })();
    if let Err(e) = connected {
        let _ = deactivate(active, "the round-trip client");
        return Err(e);
    }
    // Start a little ahead of now, so that every client of the loop sees
    // the first burst from its first frame on.
    let lead = (rate / 20).max(4 * period);
    let start = c.frame_time().wrapping_add(lead);
    shared.start.store(u64::from(start), Ordering::Release);
    let expected = Duration::from_secs_f64((total as f64 + f64::from(lead)) / f64::from(rate));
    let deadline = Instant::now() + expected + Duration::from_secs(3);
    while !shared.done.load(Ordering::Acquire) && !stop() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (out_connections, in_connections, playback, capture) = {
        let by_name = |n: &str| c.port_by_name(n);
        let (o, i) = (by_name(&out_name), by_name(&in_name));
        (
            o.as_ref().map(|p| p.get_connections()).unwrap_or_default(),
            i.as_ref().map(|p| p.get_connections()).unwrap_or_default(),
            o.map_or((0, 0), |p| p.get_latency_range(LatencyType::Playback)),
            i.map_or((0, 0), |p| p.get_latency_range(LatencyType::Capture)),
        )
    };
    let (_, _, probe) = deactivate(active, "the round-trip client")?;
    let cycles = shared.cycles.load(Ordering::Relaxed);
    if cycles == 0 {
        return Err(Error::new(
            ErrorKind::Backend,
            format!(
                "the JACK server ran no process cycles in {:.1} s: is it stalled (a sound card gone, \
                 a dummy server killed)?",
                (expected + Duration::from_secs(3)).as_secs_f64()
            ),
        ));
    }
    let events = |slots: &[AtomicU32; EVENTS], count: u64| -> Vec<u32> {
        slots
            .iter()
            .take(count.min(EVENTS as u64) as usize)
            .map(|a| a.load(Ordering::Relaxed).wrapping_sub(start))
            .collect()
    };
    let xruns = shared.xruns.load(Ordering::Relaxed);
    let frame_gaps = shared.frame_gaps.load(Ordering::Relaxed);
    let mut marks = events(&shared.xrun_frames, xruns);
    marks.extend(events(&shared.gap_frames, frame_gaps));
    // Events past the remembered ones disturb every burst.
    let overflow = xruns > EVENTS as u64 || frame_gaps > EVENTS as u64;
    let correlator = Correlator::new(&reference, max_lag);
    let margin = 2 * period;
    let per_burst: Vec<Burst> = (0..options.bursts)
        .map(|b| {
            let at = b * spacing;
            let window = &probe.capture[at as usize..(at + spacing) as usize];
            let disturbed = overflow
                || marks.iter().any(|&m| {
                    // Marks before the start wrapped to huge values.
                    m < (1 << 31) && m + margin >= at && m < at + spacing + margin
                });
            Burst {
                played_at: u64::from(at),
                detection: correlator.detect(window, level),
                disturbed,
            }
        })
        .collect();
    analyse(AnalysisInput {
        out_name,
        in_name,
        out_connections,
        in_connections,
        rate,
        period,
        level_dbfs: options.level_dbfs,
        playback: playback.into(),
        capture: capture.into(),
        xruns,
        frame_gaps,
        per_burst,
        bursts: options.bursts,
        max_latency: options.max_latency,
    })
}

/// Waits (at most `wait`) until `out` and `in` each have a connection.
fn wait_for_connections(
    c: &Client,
    out_name: &str,
    in_name: &str,
    wait: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + wait;
    loop {
        let count = |n: &str| {
            c.port_by_name(n)
                .and_then(|p| p.connected_count().ok())
                .unwrap_or(0)
        };
        let (o, i) = (count(out_name), count(in_name));
        if o > 0 && i > 0 {
            return Ok(());
        }
        if Instant::now() >= deadline || stop() {
            let which = match (o, i) {
                (0, 0) => format!("neither {out_name} nor {in_name} is connected to anything"),
                (0, _) => format!("{out_name} is not connected to anything"),
                _ => format!("{in_name} is not connected to anything"),
            };
            return Err(Error::new(
                ErrorKind::Port,
                format!("{which}: {}", how_to_connect(c, out_name, in_name)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What to tell a user whose loop is open: the ports to connect, with this
/// server's physical ports when it has any.
fn how_to_connect(c: &Client, out_name: &str, in_name: &str) -> String {
    let phys = |flag| c.ports(None, Some("audio"), flag | PortFlags::IS_PHYSICAL);
    let playback = phys(PortFlags::IS_INPUT);
    let capture = phys(PortFlags::IS_OUTPUT);
    let mut s = format!(
        "the test signal leaves on {out_name} and must come back on {in_name}. On a sound card, \
         cable an output to an input and connect both ends"
    );
    match (playback.first(), capture.first()) {
        (Some(p), Some(q)) => s.push_str(&format!(
            " (e.g. {out_name} -> {p}, {q} -> {in_name}; `firmtime audio roundtrip --connect-out {p} \
             --connect {q}`)"
        )),
        _ => s.push_str(" (this server has no physical audio ports)"),
    }
    s.push_str(&format!(
        "; inside JACK (a dummy server), connect {out_name} to {in_name} directly or through the \
         clients whose latency you want (`jack_connect {out_name} {in_name}`)"
    ));
    s
}

/// What [`analyse`] works from.
#[derive(Debug)]
struct AnalysisInput {
    out_name: String,
    in_name: String,
    out_connections: Vec<String>,
    in_connections: Vec<String>,
    rate: u32,
    period: u32,
    level_dbfs: f64,
    playback: LatencyRange,
    capture: LatencyRange,
    xruns: u64,
    frame_gaps: u64,
    per_burst: Vec<Burst>,
    bursts: u32,
    max_latency: Duration,
}

/// The round trip from the bursts: the lag most undisturbed bursts agree
/// on (all detected bursts when every one was disturbed).
fn analyse(a: AnalysisInput) -> Result<RoundTrip, Error> {
    let detected: Vec<(Detection, bool)> = a
        .per_burst
        .iter()
        .filter_map(|b| b.detection.map(|d| (d, b.disturbed)))
        .collect();
    let trusted: Vec<Detection> = {
        let clean: Vec<Detection> = detected
            .iter()
            .filter(|(_, dist)| !dist)
            .map(|(d, _)| *d)
            .collect();
        if clean.is_empty() {
            detected.iter().map(|(d, _)| *d).collect()
        } else {
            clean
        }
    };
    let Some((frames, _)) = signal::mode(trusted.iter().map(|d| d.frames)) else {
        return Err(Error::new(
            ErrorKind::NoSignal,
            format!(
                "none of {} test bursts played on {} came back on {} within the {:.0} ms looked \
                 for ({} connected to {}; {} connected to {}): is the loop closed, the cable in, \
                 the interface's input unmuted and its gain up?",
                a.bursts,
                a.out_name,
                a.in_name,
                a.max_latency.as_secs_f64() * 1000.0,
                a.out_name,
                list_or_nothing(&a.out_connections),
                list_or_nothing(&a.in_connections),
                a.in_name,
            ),
        ));
    };
    let agreeing: Vec<&Detection> = trusted.iter().filter(|d| d.frames == frames).collect();
    let n = agreeing.len() as f64;
    let rt = RoundTrip {
        out_port: a.out_name,
        in_port: a.in_name,
        out_connections: a.out_connections,
        in_connections: a.in_connections,
        sample_rate: a.rate,
        period: a.period,
        frames,
        ms: frames as f64 * 1000.0 / f64::from(a.rate.max(1)),
        sub_frame: agreeing.iter().map(|d| d.sub_frame).sum::<f64>() / n,
        min_frames: detected
            .iter()
            .map(|(d, _)| d.frames)
            .min()
            .unwrap_or(frames),
        max_frames: detected
            .iter()
            .map(|(d, _)| d.frames)
            .max()
            .unwrap_or(frames),
        bursts: a.bursts,
        detected: detected.len() as u32,
        agreeing: agreeing.len() as u32,
        disturbed: a.per_burst.iter().filter(|b| b.disturbed).count() as u32,
        correlation: agreeing
            .iter()
            .map(|d| d.correlation)
            .fold(f64::INFINITY, f64::min),
        inverted: agreeing.iter().filter(|d| d.inverted).count() * 2 > agreeing.len(),
        gain_db: agreeing.iter().map(|d| d.gain_db).sum::<f64>() / n,
        level_dbfs: a.level_dbfs,
        playback_latency: a.playback,
        capture_latency: a.capture,
        extra_frames: frames as i64 - i64::from(a.playback.max) - i64::from(a.capture.max),
        xruns: a.xruns,
        frame_gaps: a.frame_gaps,
        per_burst: a.per_burst,
    };
    Ok(rt)
}

fn list_or_nothing(v: &[String]) -> String {
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// State of a [`Cable`]'s callback.
struct CableProcess {
    inp: Port<AudioIn>,
    out: Port<AudioOut>,
    /// A ring of `delay` frames (empty for no delay).
    line: Vec<f32>,
    pos: usize,
}

impl jack::ProcessHandler for CableProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        firmtime_rt::assert_rt::no_alloc(|| {
            let (inp, out) = (self.inp.as_slice(ps), self.out.as_mut_slice(ps));
            if self.line.is_empty() {
                out.copy_from_slice(inp);
                return;
            }
            for (o, &i) in out.iter_mut().zip(inp) {
                *o = self.line[self.pos];
                self.line[self.pos] = i;
                self.pos = (self.pos + 1) % self.line.len();
            }
        });
        Control::Continue
    }
}

/// A JACK client `NAME` with ports `in` and `out` whose output is its
/// input `delay` frames later: a loopback cable of known delay inside
/// JACK. Its callback is **RT-safe.** Dropping it closes the client.
pub struct Cable {
    active: Option<jack::AsyncClient<crate::client::XrunNotifier<AtomicU64>, CableProcess>>,
    in_port: String,
    out_port: String,
    xruns: Arc<AtomicU64>,
}

impl std::fmt::Debug for Cable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cable")
            .field("in_port", &self.in_port)
            .field("out_port", &self.out_port)
            .finish_non_exhaustive()
    }
}

impl Cable {
    /// Opens and activates the cable `name` on `server`.
    ///
    /// # Errors
    /// As [`open_client`]; [`ErrorKind::Port`] when its ports cannot be registered.
    pub fn start(name: &str, server: Option<&str>, delay: u32) -> Result<Self, Error> {
        let client = open_client(name, server)?;
        let reg =
            |e: jack::Error| Error::new(ErrorKind::Port, format!("cannot register a port: {e}"));
        let inp = client
            .register_port("in", AudioIn::default())
            .map_err(reg)?;
        let out = client
            .register_port("out", AudioOut::default())
            .map_err(reg)?;
        let (in_port, out_port) = (port_name(&inp)?, port_name(&out)?);
        let xruns = Arc::new(AtomicU64::new(0));
        let process = CableProcess {
            inp,
            out,
            line: vec![0.0; delay as usize],
            pos: 0,
        };
        let notifier = crate::client::XrunNotifier::new(&xruns, |x| x);
        let active = activate(client, notifier, process, "the cable client")?;
        Ok(Cable {
            active: Some(active),
            in_port,
            out_port,
            xruns,
        })
    }

    /// Its input port, `name:in`.
    pub fn in_port(&self) -> &str {
        &self.in_port
    }

    /// Its output port, `name:out`.
    pub fn out_port(&self) -> &str {
        &self.out_port
    }

    /// Xruns it was told of.
    pub fn xruns(&self) -> u64 {
        let _ = &self.active;
        self.xruns.load(Ordering::Relaxed)
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        if let Some(a) = self.active.take() {
            let _ = deactivate(a, "the cable client");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burst(frames: Option<u64>, disturbed: bool) -> Burst {
        Burst {
            played_at: 0,
            detection: frames.map(|f| Detection {
                frames: f,
                sub_frame: 0.0,
                correlation: 1.0,
                inverted: false,
                gain_db: 0.0,
            }),
            disturbed,
        }
    }

    fn input(per_burst: Vec<Burst>) -> AnalysisInput {
        AnalysisInput {
            out_name: "rt:out".into(),
            in_name: "rt:in".into(),
            out_connections: vec!["system:playback_1".into()],
            in_connections: Vec::new(),
            rate: 48_000,
            period: 256,
            level_dbfs: -12.0,
            playback: LatencyRange { min: 512, max: 512 },
            capture: LatencyRange { min: 256, max: 256 },
            xruns: 1,
            frame_gaps: 1,
            bursts: per_burst.len() as u32,
            per_burst,
            max_latency: Duration::from_millis(500),
        }
    }

    #[test]
    fn disturbed_bursts_are_outvoted_by_undisturbed_ones() {
        // Two bursts near an xrun came back a period late; the rest agree.
        let rt = analyse(input(vec![
            burst(Some(1024), true),
            burst(Some(1024), true),
            burst(Some(768), false),
            burst(None, true),
        ]))
        .unwrap();
        assert_eq!(rt.frames, 768);
        assert_eq!((rt.detected, rt.agreeing, rt.disturbed), (3, 1, 3));
        assert_eq!((rt.min_frames, rt.max_frames), (768, 1024));
        assert_eq!(rt.extra_frames, 0);
        assert!((rt.ms - 16.0).abs() < 1e-12);
    }

    #[test]
    fn when_every_burst_was_disturbed_the_majority_of_them_counts() {
        let rt = analyse(input(vec![
            burst(Some(700), true),
            burst(Some(700), true),
            burst(Some(956), true),
        ]))
        .unwrap();
        assert_eq!((rt.frames, rt.agreeing), (700, 2));
        assert_eq!(rt.extra_frames, 700 - 768);
    }

    #[test]
    fn nothing_back_is_no_signal_with_both_ports_and_their_connections() {
        let e = analyse(input(vec![burst(None, false), burst(None, true)])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoSignal);
        let m = e.message();
        assert!(
            m.contains(
                "none of 2 test bursts played on rt:out came back on rt:in within the 500 ms"
            ),
            "{m}"
        );
        assert!(m.contains("rt:out connected to system:playback_1"), "{m}");
        assert!(m.contains("nothing connected to rt:in"), "{m}");
    }
}
