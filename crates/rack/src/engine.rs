//! The rack's processing core: a chain of stages over plain buffers, and
//! its non-RT controller.
//!
//! [`build`] turns a [`RackFile`] into an [`Engine`] (the RT side: owns the
//! plugin instances, the masters of remote stages and every buffer) and a
//! [`RackControl`] (the controller: changes control values, reads the
//! per-stage counters, owns the remote sessions' links). Control changes
//! travel to the engine through an SPSC ring (rtrb) and are applied at the
//! start of the next cycle.
//!
//! # Real-time contract
//! [`build`] allocates, loads plugins and sets up sessions. After that
//! [`Engine::process`], [`Engine::input_mut`] and [`Engine::output`] never
//! allocate, lock, print or block — beyond each plugin's own run() and a
//! remote stage's wait for its result, which ends at the deadline (a late
//! result is counted and the middleware's late policy, dry pass-through,
//! fills the output). A remote stage checks its session's
//! [`Link::connected`] (one atomic load) and, while the worker is away,
//! passes audio through without waiting. Tests run them under
//! `assert_no_alloc`; with the `assert-rt` feature every cycle runs under
//! it wherever it runs (the JACK process callback included).

use crate::error::{Error, ErrorKind, Result};
use crate::file::{RackFile, RemoteSpec, StageKind, StageSpec};
use crate::MAX_CHANNELS;
use firmtime_ladspa::ffi::LADSPA_PortRangeHint;
use firmtime_ladspa::{Direction as PortDir, Hints, Instance, PortKind, Scan};
use firmtime_net::remote::{describe, PluginBlocks, PluginSetup, MAX_FRAMES};
use firmtime_net::{
    connect, BlockId, BlockSet, Deadline, Direction, Key, LatePolicy, Link, Master, Outcome,
    SessionConfig, Transform, Work, WorkMode,
};
use firmtime_rt::clock::monotonic_ns;
use rtrb::{Consumer, Producer, RingBuffer};
use serde::Serialize;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Control changes that fit in the ring between controller and engine.
const CONTROL_RING: usize = 256;

/// How long build() waits for a worker to answer (describe, setup), and
/// the session's heartbeat timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One control change for the engine: a stage's control port and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControlChange {
    /// Stage index.
    pub stage: u16,
    /// Port index of the plugin.
    pub port: u16,
    /// New value.
    pub value: f32,
}

#[derive(Debug, Default)]
struct StageCounters {
    runs: AtomicU64,
    time_sum_ns: AtomicU64,
    time_max_ns: AtomicU64,
    late: AtomicU64,
    away: AtomicU64,
    /// The session master's [`MasterStats`](firmtime_net::MasterStats)
    /// `from_standby` and `takeovers`, stored after every exchange.
    from_standby: AtomicU64,
    takeovers: AtomicU64,
}

/// Counters the engine writes and the controller reads (relaxed atomics).
#[derive(Debug, Default)]
struct Counters {
    stages: Vec<StageCounters>,
    cycles: AtomicU64,
    oversize: AtomicU64,
    overruns: AtomicU64,
    controls_applied: AtomicU64,
}

enum Stage {
    Local {
        instance: Instance,
        audio_in: Vec<usize>,
        audio_out: Vec<usize>,
    },
    Remote {
        master: Box<Master>,
        ins: Vec<BlockId<f32>>,
        outs: Vec<BlockId<f32>>,
        /// `Some` for a real plugin hosted by the worker.
        plugin: Option<RemotePlugin>,
        /// The session's controller: [`Link::connected`] is RT-safe (one
        /// atomic load), so the stage passes audio through without waiting
        /// while the worker is away. Shared with [`RackControl`] (a work
        /// stage's `fraction`); the session ends when both have dropped it.
        link: Arc<Link>,
    },
}

/// The plugin part of a remote plugin stage, on the RT side.
struct RemotePlugin {
    ids: PluginBlocks,
    /// Current control input values, in `ids.control_in_ports` order.
    values: Vec<f32>,
}

impl Stage {
    fn channels(&self) -> (usize, usize) {
        match self {
            Stage::Local {
                audio_in,
                audio_out,
                ..
            } => (audio_in.len(), audio_out.len()),
            Stage::Remote { ins, outs, .. } => (ins.len(), outs.len()),
        }
    }
}

/// The RT side of a rack: stages, buffers, counters.
pub struct Engine {
    stages: Vec<Stage>,
    bufs: Vec<Vec<f32>>,
    in_channels: usize,
    out_channels: usize,
    block_size: usize,
    period_ns: u64,
    deadline_ns: u64,
    controls: Consumer<ControlChange>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("stages", &self.stages.len())
            .field("in_channels", &self.in_channels)
            .field("out_channels", &self.out_channels)
            .field("block_size", &self.block_size)
            .finish()
    }
}

impl Engine {
    /// Audio channels the first stage takes.
    pub fn input_channels(&self) -> usize {
        self.in_channels
    }

    /// Audio channels the last stage gives.
    pub fn output_channels(&self) -> usize {
        self.out_channels
    }

    /// The largest block [`Engine::process`] runs.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Input channel `ch` (`block_size` samples), to fill before
    /// [`Engine::process`]. **RT-safe.**
    ///
    /// # Panics
    /// When `ch >= input_channels()`.
    pub fn input_mut(&mut self, ch: usize) -> &mut [f32] {
        assert!(ch < self.in_channels, "input channel {ch} out of range");
        &mut self.bufs[ch]
    }

    /// Output channel `ch` after [`Engine::process`]. **RT-safe.**
    ///
    /// # Panics
    /// When `ch >= output_channels()`.
    pub fn output(&self, ch: usize) -> &[f32] {
        assert!(ch < self.out_channels, "output channel {ch} out of range");
        &self.bufs[ch]
    }

    /// Applies pending control changes, then runs every stage on `frames`
    /// frames of the input buffers, leaving the result in the output
    /// buffers. `cycle_start_ns` (CLOCK_MONOTONIC) is when the period began:
    /// remote stages wait for results until `deadline × period` after it.
    /// A block larger than [`Engine::block_size`] is not run: the outputs
    /// are silenced and the block counted. **RT-safe.**
    ///
    /// With the `assert-rt` feature the cycle runs under `assert_no_alloc`
    /// ([`firmtime_rt::assert_rt::no_alloc`]): an allocation in it aborts.
    pub fn process(&mut self, frames: usize, cycle_start_ns: u64) {
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(frames, cycle_start_ns));
    }

    /// The body of [`Engine::process`]. **RT-safe.**
    fn cycle(&mut self, frames: usize, cycle_start_ns: u64) {
        let counters = &*self.counters;
        counters.cycles.fetch_add(1, Ordering::Relaxed);
        while let Ok(c) = self.controls.pop() {
            let port = usize::from(c.port);
            let applied = match self.stages.get_mut(usize::from(c.stage)) {
                Some(Stage::Local { instance, .. }) => instance.set_control(port, c.value).is_ok(),
                Some(Stage::Remote {
                    plugin: Some(p), ..
                }) => match p.ids.control_in_ports.iter().position(|&x| x == port) {
                    Some(k) => {
                        p.values[k] = c.value;
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if applied {
                counters.controls_applied.fetch_add(1, Ordering::Relaxed);
            }
        }
        if frames > self.block_size {
            counters.oversize.fetch_add(1, Ordering::Relaxed);
            for b in &mut self.bufs {
                b.fill(0.0);
            }
            return;
        }
        let deadline = Deadline::At(cycle_start_ns + self.deadline_ns);
        let bufs = &mut self.bufs;
        for (k, stage) in self.stages.iter_mut().enumerate() {
            let t0 = monotonic_ns();
            let mut late = false;
            let mut away = false;
            match stage {
                Stage::Local {
                    instance,
                    audio_in,
                    audio_out,
                } => {
                    for (c, &port) in audio_in.iter().enumerate() {
                        let dst = instance.audio_mut(port).expect("audio port");
                        dst[..frames].copy_from_slice(&bufs[c][..frames]);
                    }
                    // frames <= block_size was checked above, so run() cannot refuse.
                    let _ = instance.run(frames);
                    for (c, &port) in audio_out.iter().enumerate() {
                        let src = instance.audio(port).expect("audio port");
                        bufs[c][..frames].copy_from_slice(&src[..frames]);
                    }
                }
                Stage::Remote {
                    master,
                    ins,
                    outs,
                    plugin,
                    link,
                } => {
                    // With a hot standby the stage is away only when both
                    // workers are (one atomic load each).
                    if !link.connected() && !link.standby().is_some_and(Link::connected) {
                        // The worker is known to be away: dry without waiting
                        // (a work stage waited until the deadline every cycle).
                        late = true;
                        away = true;
                        for b in bufs.iter_mut().take(outs.len()).skip(ins.len()) {
                            b[..frames].fill(0.0);
                        }
                    } else {
                        for (c, &id) in ins.iter().enumerate() {
                            let dst = master.blocks_mut().get_mut(id);
                            dst[..frames].copy_from_slice(&bufs[c][..frames]);
                            dst[frames..].fill(0.0);
                        }
                        if let Some(p) = plugin.as_ref() {
                            let b = master.blocks_mut();
                            if let Some(f) = p.ids.frames_in {
                                b.get_mut(f)[0] = frames as i32;
                            }
                            if let Some(cb) = p.ids.control_in {
                                b.get_mut(cb).copy_from_slice(&p.values);
                            }
                        }
                        let report = master.process(deadline);
                        late = report.outcome == Outcome::Late;
                        if master.standby().is_some() {
                            let st = master.stats();
                            let sc = &counters.stages[k];
                            sc.from_standby.store(st.from_standby, Ordering::Relaxed);
                            sc.takeovers.store(st.takeovers, Ordering::Relaxed);
                        }
                        let b = master.blocks();
                        // A delivered plugin result says how many frames it holds.
                        let done = match (
                            report.outcome,
                            plugin.as_ref().and_then(|p| p.ids.frames_out),
                        ) {
                            (Outcome::Delivered, Some(f)) => {
                                (b.get(f)[0].max(0) as usize).min(frames)
                            }
                            _ => frames,
                        };
                        for (c, &id) in outs.iter().enumerate() {
                            bufs[c][..done].copy_from_slice(&b.get(id)[..done]);
                            bufs[c][done..frames].fill(0.0);
                        }
                    }
                }
            }
            let dt = monotonic_ns().saturating_sub(t0);
            let sc = &counters.stages[k];
            sc.runs.fetch_add(1, Ordering::Relaxed);
            sc.time_sum_ns.fetch_add(dt, Ordering::Relaxed);
            sc.time_max_ns.fetch_max(dt, Ordering::Relaxed);
            if late {
                sc.late.fetch_add(1, Ordering::Relaxed);
            }
            if away {
                sc.away.fetch_add(1, Ordering::Relaxed);
            }
        }
        if monotonic_ns().saturating_sub(cycle_start_ns) > self.period_ns {
            counters.overruns.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a stage is, for reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageInfo {
    /// Its name in the rack file.
    pub name: String,
    /// `local LABEL`, `remote LABEL @ HOST:PORT w=N` or `remote work @ …`.
    pub description: String,
    /// Control inputs: name, port index and current value.
    pub controls: Vec<(String, usize, f32)>,
    /// Frames a remote stage delays its audio by: window × block size
    /// (0 for a local stage).
    pub latency_frames: u64,
    /// A remote stage's hot standby, `HOST:PORT` (`None` without one).
    pub standby: Option<String>,
}

/// One stage's counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageStats {
    /// Its name.
    pub name: String,
    /// Cycles it ran.
    pub runs: u64,
    /// Mean time in the stage per cycle, ns (a remote stage: sending plus
    /// waiting for the result).
    pub mean_ns: u64,
    /// Longest time in the stage, ns.
    pub max_ns: u64,
    /// Cycles whose remote result was late or whose worker was away (dry
    /// pass-through instead).
    pub late: u64,
    /// Of `late`, the cycles whose worker was known to be away (the
    /// session's heartbeat noticed): passed through dry without waiting.
    pub away: u64,
    /// Frames the stage delays its audio by (window × block size; 0 local).
    pub latency_frames: u64,
    /// The stage's hot standby, `HOST:PORT`; `null` without one.
    pub standby: Option<String>,
    /// With a hot standby (`standby = "HOST:PORT"`): cycles delivered with
    /// the standby's result (counted as delivered, not in `late`); 0 without.
    pub from_standby: u64,
    /// With a hot standby: times the stage switched the worker it serves
    /// from (to the standby when the worker missed a deadline or died, and
    /// back); 0 without.
    pub takeovers: u64,
}

/// Counters of a whole rack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RackStats {
    /// Process cycles.
    pub cycles: u64,
    /// Cycles larger than the block size, silenced.
    pub oversize: u64,
    /// Cycles whose processing took longer than the period (from
    /// `cycle_start_ns` to the end of the last stage).
    pub overruns: u64,
    /// Control changes the engine applied.
    pub controls_applied: u64,
    /// Control changes dropped because the ring was full.
    pub controls_dropped: u64,
    /// Per stage, in chain order.
    pub stages: Vec<StageStats>,
}

/// Reads an engine's counters from any thread ([`RackControl::counters`]).
#[derive(Debug, Clone)]
pub struct EngineCounters {
    counters: Arc<Counters>,
    stages: Vec<(String, bool)>,
}

/// One stage's counters, for a metrics endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageCounts {
    /// Its name in the rack file.
    pub name: String,
    /// Whether it runs on a worker.
    pub remote: bool,
    /// Cycles it ran.
    pub runs: u64,
    /// Cycles whose remote result was late or whose worker was away.
    pub late: u64,
    /// Time in the stage over every cycle, ns.
    pub time_sum_ns: u64,
}

/// The engine's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCounts {
    /// Process cycles.
    pub cycles: u64,
    /// Cycles larger than the block size, silenced.
    pub oversize: u64,
    /// Cycles whose processing took longer than the period.
    pub overruns: u64,
    /// Control changes applied.
    pub controls_applied: u64,
    /// Per stage, in chain order.
    pub stages: Vec<StageCounts>,
}

impl EngineCounters {
    /// The counters now.
    pub fn snapshot(&self) -> EngineCounts {
        let c = &*self.counters;
        let r = Ordering::Relaxed;
        EngineCounts {
            cycles: c.cycles.load(r),
            oversize: c.oversize.load(r),
            overruns: c.overruns.load(r),
            controls_applied: c.controls_applied.load(r),
            stages: self
                .stages
                .iter()
                .zip(&c.stages)
                .map(|((name, remote), s)| StageCounts {
                    name: name.clone(),
                    remote: *remote,
                    runs: s.runs.load(r),
                    late: s.late.load(r),
                    time_sum_ns: s.time_sum_ns.load(r),
                })
                .collect(),
        }
    }
}

/// The controller of a rack: the non-RT side.
pub struct RackControl {
    infos: Vec<StageInfo>,
    work: Vec<Option<Work>>,
    links: Vec<Option<Arc<Link>>>,
    producer: Producer<ControlChange>,
    counters: Arc<Counters>,
    dropped: u64,
    warnings: Vec<String>,
}

impl std::fmt::Debug for RackControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RackControl")
            .field("stages", &self.infos)
            .finish()
    }
}

impl RackControl {
    /// The stages, in chain order.
    pub fn stages(&self) -> &[StageInfo] {
        &self.infos
    }

    /// What the caller should show from the build: a key file the group or
    /// the world may read (`FILE:LINE:COL: key file … is readable by …`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Sets `port` (a control input's name, or its port index) of `stage`
    /// to `value`. A local plugin gets it at the start of the next cycle; a
    /// remote work stage's only control, `fraction`, goes to the worker
    /// over the control connection (this call waits for its answer).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an unknown stage or port (the message
    /// lists the valid ones), a NaN or an infinity, or a full control ring;
    /// [`ErrorKind::Remote`] when the worker refuses.
    pub fn set(&mut self, stage: &str, port: &str, value: f32) -> Result<()> {
        let Some(k) = self.infos.iter().position(|s| s.name == stage) else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "no stage {stage:?}; the stages are: {}",
                    self.infos
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if !value.is_finite() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{stage}.{port}: {value} is not a control value (give a finite number)"),
            ));
        }
        let info = &mut self.infos[k];
        let Some(c) = info
            .controls
            .iter_mut()
            .find(|(n, idx, _)| n == port || idx.to_string() == port)
        else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "stage {stage:?} has no control {port:?}; its controls are: {}",
                    if info.controls.is_empty() {
                        "none".to_string()
                    } else {
                        info.controls
                            .iter()
                            .map(|(n, i, _)| format!("\"{n}\" (port {i})"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            ));
        };
        if let (Some(work), Some(link)) = (self.work[k].as_mut(), self.links[k].as_ref()) {
            let w = Work {
                fraction: f64::from(value),
                mode: work.mode,
            };
            w.validate()?;
            link.set_work(w, Duration::from_secs(2))?;
            *work = w;
            c.2 = value;
            return Ok(());
        }
        let change = ControlChange {
            stage: k as u16,
            port: c.1 as u16,
            value,
        };
        if self.producer.push(change).is_err() {
            self.dropped += 1;
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the control ring is full (the JACK cycle is not running?): try again",
            ));
        }
        c.2 = value;
        Ok(())
    }

    /// Applies a terminal line `stage.port = value` (the port name may
    /// contain spaces) and returns the stage, port and value.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a line not of that form, a value that
    /// is not a number; else as [`RackControl::set`].
    pub fn apply_line(&mut self, line: &str) -> Result<(String, String, f32)> {
        let usage = || {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "cannot read {}: write stage.port = value, e.g. gain.Gain = 0.5",
                    shown(line)
                ),
            )
        };
        let (lhs, rhs) = line.rsplit_once('=').ok_or_else(usage)?;
        let (stage, port) = lhs.trim().split_once('.').ok_or_else(usage)?;
        let value: f32 = rhs.trim().parse().map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{} is not a number", shown(rhs.trim())),
            )
        })?;
        let (stage, port) = (stage.trim().to_string(), port.trim().to_string());
        self.set(&stage, &port, value)?;
        Ok((stage, port, value))
    }

    /// The counters so far.
    pub fn stats(&self) -> RackStats {
        let c = &*self.counters;
        RackStats {
            cycles: c.cycles.load(Ordering::Relaxed),
            oversize: c.oversize.load(Ordering::Relaxed),
            overruns: c.overruns.load(Ordering::Relaxed),
            controls_applied: c.controls_applied.load(Ordering::Relaxed),
            controls_dropped: self.dropped,
            stages: self
                .infos
                .iter()
                .zip(&c.stages)
                .map(|(i, s)| {
                    let runs = s.runs.load(Ordering::Relaxed);
                    StageStats {
                        name: i.name.clone(),
                        runs,
                        mean_ns: s.time_sum_ns.load(Ordering::Relaxed) / runs.max(1),
                        max_ns: s.time_max_ns.load(Ordering::Relaxed),
                        late: s.late.load(Ordering::Relaxed),
                        away: s.away.load(Ordering::Relaxed),
                        latency_frames: i.latency_frames,
                        standby: i.standby.clone(),
                        from_standby: s.from_standby.load(Ordering::Relaxed),
                        takeovers: s.takeovers.load(Ordering::Relaxed),
                    }
                })
                .collect(),
        }
    }

    /// A reader of the engine's counters for another thread (a metrics
    /// endpoint's): relaxed atomic loads, never waiting for the engine.
    pub fn counters(&self) -> EngineCounters {
        EngineCounters {
            counters: Arc::clone(&self.counters),
            stages: self
                .infos
                .iter()
                .map(|i| (i.name.clone(), i.description.starts_with("remote")))
                .collect(),
        }
    }

    /// Closes the sessions of the remote work stages whose engine is gone;
    /// a session the engine still holds (every remote plugin stage's, a work
    /// stage's while the engine runs) closes when the engine is dropped.
    pub fn close(mut self) {
        for l in self.links.iter_mut().filter_map(Option::take) {
            if let Ok(l) = Arc::try_unwrap(l) {
                l.close();
            }
        }
    }
}

fn resolve_worker(spec: &str, at: &str) -> Result<SocketAddr> {
    spec.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Remote,
                format!("{at}: cannot resolve worker address {spec:?}: give HOST:PORT"),
            )
        })
}

/// The stage's hot standby address, if it names one.
fn resolve_standby(r: &RemoteSpec, at: &str) -> Result<Option<SocketAddr>> {
    match &r.standby {
        None => Ok(None),
        Some(s) => s
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Remote,
                    format!("{at}: cannot resolve standby address {s:?}: give HOST:PORT"),
                )
            }),
    }
}

/// A session error in words: one the standby caused (`connect` starts
/// those with "the standby") names the standby first, the others `what`.
fn standby_err(what: &str, standby: Option<SocketAddr>, e: &firmtime_net::Error) -> String {
    match standby {
        Some(s) if e.message().starts_with("the standby") => format!(
            "standby {s} (for {what}) cannot serve: {e}; the standby must be reachable, with \
             the same key and plugin, when the rack starts"
        ),
        _ => format!("{what}: {e}"),
    }
}

/// The control inputs `ports` (name, port index, hints) with their
/// defaults, then the values `spec` sets, each checked against its range.
fn resolve_controls(
    at: &str,
    label: &str,
    ports: &[(String, usize, Hints)],
    spec: &StageSpec,
    sample_rate: u32,
) -> Result<Vec<(String, usize, f32)>> {
    let rate = sample_rate as f32;
    let mut controls: Vec<(String, usize, f32)> = ports
        .iter()
        .map(|(name, index, h)| {
            let v = h.default_value(rate).or(h.bounds(rate).0).unwrap_or(0.0);
            (name.clone(), *index, v)
        })
        .collect();
    for (name, value) in &spec.controls {
        let Some(k) = controls
            .iter()
            .position(|(n, i, _)| n == name || i.to_string() == *name)
        else {
            return Err(Error::new(
                ErrorKind::Plugin,
                format!(
                    "{at}: plugin {label} has no control input {name:?}; its controls: {}",
                    controls
                        .iter()
                        .map(|(n, i, _)| format!("\"{n}\" (port {i})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let (lo, hi) = ports[k].2.bounds(rate);
        if lo.is_some_and(|lo| *value < lo) || hi.is_some_and(|hi| *value > hi) {
            let f = |v: Option<f32>| v.map_or("...".to_string(), |v| format!("{v}"));
            return Err(Error::new(
                ErrorKind::Plugin,
                format!(
                    "{at}: plugin {label}: control \"{}\" = {value} is outside its range {} to {}",
                    ports[k].0,
                    f(lo),
                    f(hi)
                ),
            ));
        }
        controls[k].2 = *value;
    }
    Ok(controls)
}

/// `text` quoted for a message, its first 64 characters only (a command
/// line may be anything, of any length): `"abc…" (500000 bytes)`.
fn shown(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?} ({} bytes)", format!("{}…", &text[..end]), text.len()),
    }
}

/// The stage's key (the one rule for secrets: `firmtime_rt::secret`); a
/// key file others may read adds its warning to `warnings`.
fn key_of(r: &RemoteSpec, at: &str, warnings: &mut Vec<String>) -> Result<Option<Key>> {
    match &r.key_file {
        None => Ok(None),
        Some(p) => {
            let (key, warning) = Key::from_file(p)
                .map_err(|e| Error::new(ErrorKind::Remote, format!("{at}: {e}")))?;
            if let Some(w) = warning {
                let w = format!("{at}: {w}");
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
            Ok(Some(key))
        }
    }
}

/// Builds a rack at `sample_rate` with `block_size`-frame buffers: finds
/// each local plugin in `scan`, instantiates, sets and activates it, and
/// sets up each remote stage's session. A remote plugin stage asks its
/// worker to describe the plugin (its ports and hints check the stage's
/// controls), then sets up a stream whose worker instantiates the plugin
/// at `sample_rate` for blocks of `block_size`.
///
/// # Errors
/// [`ErrorKind::Plugin`] for a plugin not found, an unknown control name, a
/// value out of range, or channel counts that do not chain (each message
/// starts `FILE:LINE:COL`); [`ErrorKind::Remote`] when a worker cannot be
/// reached or refuses (wrong key, window, a plugin it does not have or
/// may not load: the message is the worker's);
/// [`ErrorKind::InvalidInput`] for more than [`MAX_CHANNELS`] channels or
/// a zero rate or block size.
pub fn build(
    file: &RackFile,
    scan: &Scan,
    sample_rate: u32,
    block_size: usize,
) -> Result<(Engine, RackControl)> {
    if sample_rate == 0 || block_size == 0 {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "sample rate and block size must be non-zero",
        ));
    }
    let period_ns = block_size as u64 * 1_000_000_000 / u64::from(sample_rate);
    let mut stages = Vec::with_capacity(file.stages.len());
    let mut infos = Vec::with_capacity(file.stages.len());
    let mut works = Vec::with_capacity(file.stages.len());
    let mut links = Vec::with_capacity(file.stages.len());
    let mut prev_out: Option<usize> = None;
    let mut max_ch = 1;
    let mut warnings = Vec::new();
    let mut in_channels = 0;
    for (k, spec) in file.stages.iter().enumerate() {
        let at = file.where_stage(k);
        let (stage, info, work, link) = match (&spec.kind, &spec.remote) {
            (StageKind::Plugin(label), None) => {
                let plugin = scan
                    .find(label)
                    .map_err(|e| Error::new(ErrorKind::Plugin, format!("{at}: {}", e.message())))?;
                let pinfo = plugin.info().clone();
                let ports = |kind, dir| -> Vec<usize> {
                    pinfo.ports_of(kind, dir).iter().map(|p| p.index).collect()
                };
                let audio_in = ports(PortKind::Audio, PortDir::Input);
                let audio_out = ports(PortKind::Audio, PortDir::Output);
                let ports: Vec<(String, usize, Hints)> = pinfo
                    .ports
                    .iter()
                    .filter(|p| p.is_control_input())
                    .map(|p| (p.name.clone(), p.index, p.hints))
                    .collect();
                let controls = resolve_controls(&at, &pinfo.label, &ports, spec, sample_rate)?;
                let mut instance = plugin.instantiate(sample_rate, block_size)?;
                for (_, port, v) in &controls {
                    instance
                        .set_control(*port, *v)
                        .map_err(|e| Error::new(ErrorKind::Plugin, format!("{at}: {e}")))?;
                }
                instance.activate();
                let info = StageInfo {
                    name: spec.name.clone(),
                    description: format!("local {}", pinfo.label),
                    controls,
                    latency_frames: 0,
                    standby: None,
                };
                (
                    Stage::Local {
                        instance,
                        audio_in,
                        audio_out,
                    },
                    info,
                    None,
                    None,
                )
            }
            (StageKind::Plugin(label), Some(r)) => {
                let worker = resolve_worker(&r.worker, &at)?;
                let standby = resolve_standby(r, &at)?;
                let key = key_of(r, &at, &mut warnings)?;
                let remote_err = |e: firmtime_net::Error| {
                    let what = format!("plugin {label} on worker {worker}");
                    Error::new(
                        ErrorKind::Remote,
                        format!(
                            "{at}: stage {:?}: {}",
                            spec.name,
                            standby_err(&what, standby, &e)
                        ),
                    )
                };
                let max_frames = u32::try_from(block_size)
                    .ok()
                    .filter(|&n| n <= MAX_FRAMES)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{at}: a block of {block_size} frames is more than a remote \
                                 plugin takes ({MAX_FRAMES})"
                            ),
                        )
                    })?;
                let desc =
                    describe(worker, key.clone(), label, CONNECT_TIMEOUT).map_err(remote_err)?;
                let ports: Vec<(String, usize, Hints)> = desc
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.input && !p.audio)
                    .map(|(i, p)| {
                        let h = Hints::from_raw(LADSPA_PortRangeHint {
                            HintDescriptor: p.hint,
                            LowerBound: p.lower,
                            UpperBound: p.upper,
                        });
                        (p.name.clone(), i, h)
                    })
                    .collect();
                let controls = resolve_controls(&at, &desc.label, &ports, spec, sample_rate)?;
                let (blocks, ids) = desc.blocks(max_frames);
                let mut sc = SessionConfig::new(worker, period_ns.max(1));
                sc.key = key;
                sc.window = r.window;
                sc.encrypt = r.encrypt;
                sc.standby = standby;
                sc.late_policy = Some(LatePolicy::Dry);
                sc.timeout = CONNECT_TIMEOUT;
                sc.plugin = Some(PluginSetup {
                    plugin: label.clone(),
                    sample_rate,
                    max_frames,
                    ports: desc.ports.clone(),
                });
                let (master, link) = connect(sc, blocks).map_err(remote_err)?;
                let link = Arc::new(link);
                let values = ids
                    .control_in_ports
                    .iter()
                    .map(|p| controls.iter().find(|c| c.1 == *p).map_or(0.0, |c| c.2))
                    .collect();
                let info = StageInfo {
                    name: spec.name.clone(),
                    description: format!(
                        "remote {} @ {}{} window {}",
                        desc.label,
                        worker,
                        standby.map_or(String::new(), |s| format!(" (standby {s})")),
                        r.window
                    ),
                    controls,
                    latency_frames: u64::from(r.window) * block_size as u64,
                    standby: standby.map(|s| s.to_string()),
                };
                (
                    Stage::Remote {
                        master: Box::new(master),
                        ins: ids.audio_in.iter().map(|&(_, id)| id).collect(),
                        outs: ids.audio_out.iter().map(|&(_, id)| id).collect(),
                        plugin: Some(RemotePlugin { ids, values }),
                        link,
                    },
                    info,
                    None,
                    None,
                )
            }
            (StageKind::Work { .. }, None) => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{at}: a work stage needs remote = {{ worker = \"HOST:PORT\" }}"),
                ))
            }
            (StageKind::Work { work, channels }, Some(r)) => {
                let ch = channels.or(prev_out).unwrap_or(1);
                let worker = resolve_worker(&r.worker, &at)?;
                let standby = resolve_standby(r, &at)?;
                let key = key_of(r, &at, &mut warnings)?;
                let mut blocks = BlockSet::new();
                let mut ins = Vec::with_capacity(ch);
                let mut outs = Vec::with_capacity(ch);
                for _ in 0..ch {
                    ins.push(blocks.add::<f32>(Direction::ToWorker, block_size)?);
                }
                for _ in 0..ch {
                    outs.push(blocks.add::<f32>(Direction::FromWorker, block_size)?);
                }
                let mut sc = SessionConfig::new(worker, period_ns);
                sc.key = key;
                sc.window = r.window;
                sc.encrypt = r.encrypt;
                sc.standby = standby;
                sc.transform = Transform::Copy;
                sc.work = *work;
                sc.late_policy = Some(LatePolicy::Dry);
                let (master, link) = connect(sc, blocks).map_err(|e| {
                    let what = format!("work on worker {worker}");
                    let msg = match standby {
                        Some(_) => standby_err(&what, standby, &e),
                        None => e.to_string(),
                    };
                    Error::new(
                        ErrorKind::Remote,
                        format!("{at}: stage {:?}: {msg}", spec.name),
                    )
                })?;
                let link = Arc::new(link);
                let info = StageInfo {
                    name: spec.name.clone(),
                    description: format!(
                        "remote work ({}) @ {}{} window {}",
                        match work.mode {
                            WorkMode::Spin => "spin",
                            WorkMode::Sleep => "sleep",
                            WorkMode::None => "none",
                        },
                        worker,
                        standby.map_or(String::new(), |s| format!(" (standby {s})")),
                        r.window
                    ),
                    controls: vec![("fraction".into(), 0, work.fraction as f32)],
                    latency_frames: u64::from(r.window) * block_size as u64,
                    standby: standby.map(|s| s.to_string()),
                };
                (
                    Stage::Remote {
                        master: Box::new(master),
                        ins,
                        outs,
                        plugin: None,
                        link: Arc::clone(&link),
                    },
                    info,
                    Some(*work),
                    Some(link),
                )
            }
        };
        let (i, o) = stage.channels();
        if i > MAX_CHANNELS || o > MAX_CHANNELS {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{at}: stage {:?} has more than {MAX_CHANNELS} channels",
                    spec.name
                ),
            ));
        }
        match prev_out {
            None => in_channels = i,
            Some(p) if p != i => {
                return Err(Error::new(
                    ErrorKind::Plugin,
                    format!(
                        "{at}: stage {:?} takes {i} audio input(s) but the stage before gives {p}; \
                         chain stages whose channel counts match",
                        spec.name
                    ),
                ))
            }
            Some(_) => {}
        }
        if o == 0 {
            return Err(Error::new(
                ErrorKind::Plugin,
                format!("{at}: stage {:?} has no audio outputs", spec.name),
            ));
        }
        prev_out = Some(o);
        max_ch = max_ch.max(i).max(o);
        stages.push(stage);
        infos.push(info);
        works.push(work);
        links.push(link);
    }
    let (producer, consumer) = RingBuffer::new(CONTROL_RING);
    let counters = Arc::new(Counters {
        stages: (0..stages.len())
            .map(|_| StageCounters::default())
            .collect(),
        ..Counters::default()
    });
    let engine = Engine {
        stages,
        bufs: (0..max_ch).map(|_| vec![0.0; block_size]).collect(),
        in_channels,
        out_channels: prev_out.unwrap_or(0),
        block_size,
        period_ns,
        deadline_ns: (period_ns as f64 * file.deadline) as u64,
        controls: consumer,
        counters: Arc::clone(&counters),
    };
    let control = RackControl {
        infos,
        work: works,
        links,
        producer,
        counters,
        dropped: 0,
        warnings,
    };
    Ok((engine, control))
}

#[cfg(test)]
mod tests {
    use super::shown;

    /// Regression (a sibling of issue 28 item 6's 500 KB label): a command
    /// line was echoed in full in its error line.
    #[test]
    fn a_long_command_is_shown_cut_with_its_length() {
        assert_eq!(shown("gain.Gain"), "\"gain.Gain\"");
        let long = "x".repeat(500_000);
        let s = shown(&long);
        assert_eq!(s, format!("\"{}…\" (500000 bytes)", "x".repeat(64)));
        // Cut at a character, not a byte.
        let s = shown(&"é".repeat(100));
        assert!(s.starts_with(&format!("\"{}…\"", "é".repeat(64))), "{s}");
        assert!(s.ends_with("(200 bytes)"), "{s}");
    }
}
