//! `lab frames`: frame pacing, as Etsion, Tsafrir and Feitelson (2003)
//! measured it with the Xine MPEG player (§1.2 Fig 1, §5 Fig 5).
//!
//! A player loop shows frame `k` at `start + k/fps` following Xine's two
//! rules ([`xine_decide`]): never show a frame early, and drop a frame that
//! is late by more than half a frame. It waits with one sleep mechanism of
//! [`firmtime_rt::sleep`], under one policy and one load, for every cell of
//! the sleeper × policy × load matrix, and reports desired vs achieved frame
//! rate, the pattern of drops (count, longest run) and the display lateness.
//!
//! Beside the measurement stands the paper's analytical model for a timer
//! that expires only on ticks ([`tick_prediction`]): with alarms every `A`
//! (the alarm period rounded up to whole ticks of `1/HZ`) and a random shift
//! `s` between the first tick and the first frame, frame `k` (due at `k·T`)
//! is shown iff `(s − k·T) mod A ≤ T/2`. Today's kernels have
//! high-resolution timers, so sleeps are not bounded by the tick: the model
//! describes a tick-based timer (the paper's kernel, or Xine's 4 ms alarms),
//! not what this machine's sleepers do.
//!
//! # RT contract
//! The per-frame storage is allocated before the loop; [`play`] is
//! **RT-safe**: it sleeps, reads CLOCK_MONOTONIC and pushes within capacity.

use crate::check::{self, fmt_ns, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::load::{ChildOutcome, LoadSet, LoadSpec};
use crate::measure::{run_in_thread, stop_flag, Cell, Progress};
use crate::stats::{summarize, Summary};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{RtConditions, RtRequest};
use firmtime_rt::sleep::{self, Mechanism, Sleeper};
use firmtime_rt::system::{CpuTimes, SystemInfo};
use firmtime_rt::Errno;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Etsion et al. (2003) §1.2, Fig 1: the desired frame rate that Xine
/// missed on a 100 Hz kernel ("60 frames/sec is mandated by the MPEG standard").
pub const PAPER_FPS: f64 = 60.0;
/// Etsion et al. (2003) §2.2: Xine's displayer "keeps track of time using
/// alarms with a resolution of 4 ms", ns.
pub const PAPER_ALARM_NS: u64 = 4_000_000;
/// Etsion et al. (2003) §1.2, Fig 1: the clip was 500 frames long.
pub const PAPER_FRAMES: u64 = 500;
/// Etsion et al. (2003) §5: at 60 fps on a 100 Hz kernel "a third of the
/// frames are skipped, leading to the observed frame rate of about 40 frames
/// per second".
pub const PAPER_100HZ_FPS: f64 = 40.0;
/// Etsion et al. (2003) §5: the chance, over a random initial shift, of
/// entering that pattern at 100 Hz ("a 50% chance").
pub const PAPER_100HZ_DROP_CHANCE: f64 = 0.5;
/// Etsion et al. (2003) §1.2, Fig 1: at 1000 Hz every desired rate was achieved.
pub const PAPER_1000HZ_FPS: f64 = 60.0;
/// The paper's two kernels (Fig 1): 100 Hz and 1000 Hz.
pub const PAPER_HZ: [u32; 2] = [100, 1000];

/// Valid `--fps` range.
pub const FPS: RangeInclusive<f64> = 1.0..=1000.0;
/// Valid `--duration` range (per cell), ns: 100 ms … 1 h.
pub const DURATION_NS: RangeInclusive<u64> = 100_000_000..=3_600_000_000_000;
/// Valid `--alarm` range (the modelled tick-based alarm period), ns: 1 µs … 1 s.
pub const ALARM_NS: RangeInclusive<u64> = 1_000..=1_000_000_000;
/// Start shifts evaluated by [`tick_prediction`] (evenly spaced midpoints).
pub const PREDICTION_SHIFTS: u32 = 1000;
/// Frames of a drop pattern listed in the result ([`Playback::first_drops`]).
pub const LISTED_DROPS: usize = 32;

/// The kernel a table was measured on: every table states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// `uname -r`.
    pub kernel_release: String,
    /// Preemption model (`none`, `voluntary`, `full`, `lazy`, `rt`, `unknown`).
    pub preempt_model: String,
    /// CONFIG_HZ, when the kernel config is readable.
    pub config_hz: Option<u32>,
    /// High-resolution timers active.
    pub high_res_timers: Option<bool>,
    /// Tick mode: `periodic`, `idle`, `full`.
    pub nohz: Option<String>,
    /// Current clocksource.
    pub clocksource: Option<String>,
}

impl Machine {
    /// Reads this machine ([`SystemInfo::collect`]; not RT-safe).
    pub fn current() -> Self {
        Self::from_info(&SystemInfo::collect())
    }

    /// Picks the fields out of a collected [`SystemInfo`].
    pub fn from_info(i: &SystemInfo) -> Self {
        Self {
            kernel_release: i.kernel_release.clone(),
            preempt_model: i.preempt_model.name().to_string(),
            config_hz: i.config_hz,
            high_res_timers: i.high_res_timers,
            nohz: i.nohz.clone(),
            clocksource: i.clocksource.clone(),
        }
    }

    /// One line for the top of a table: kernel, HZ, clocksource, preempt model.
    pub fn line(&self) -> String {
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".into());
        format!(
            "kernel {}, HZ={}, clocksource {}, preempt {}, high-resolution timers {}, NO_HZ {}",
            self.kernel_release,
            self.config_hz
                .map_or_else(|| "unknown".into(), |h| h.to_string()),
            opt(&self.clocksource),
            self.preempt_model,
            match self.high_res_timers {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            },
            opt(&self.nohz),
        )
    }
}

/// What to measure. Durations in ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Desired frame rate (`--fps`), default 60.
    pub fps: f64,
    /// Length of each cell (`--duration`), default 30 s.
    pub duration_ns: u64,
    /// Sleep mechanisms (`--sleeper`), default clock_nanosleep, nanosleep,
    /// timerfd, poll, hybrid.
    pub sleepers: Vec<Mechanism>,
    /// Policies of the player thread (`--policy`), default other, fifo:80.
    pub policies: Vec<Policy>,
    /// Loads (`--load`; `None` = no load), default none and cpu:2.
    pub loads: Vec<Option<LoadSpec>>,
    /// The tick-based alarm period the model assumes (`--alarm`), default
    /// Xine's 4 ms.
    pub alarm_ns: u64,
    /// The firmtime binary that runs the load children (`None` = this executable).
    #[serde(skip)]
    pub load_exe: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            fps: PAPER_FPS,
            duration_ns: 30_000_000_000,
            sleepers: vec![
                Mechanism::ClockNanosleep,
                Mechanism::Nanosleep,
                Mechanism::Timerfd,
                Mechanism::Poll,
                Mechanism::Hybrid {
                    margin_ns: sleep::DEFAULT_HYBRID_MARGIN_NS,
                },
            ],
            policies: vec![Policy::Other { nice: 0 }, Policy::Fifo { priority: 80 }],
            loads: vec![None, Some(LoadSpec::Cpu { hogs: 2 })],
            alarm_ns: PAPER_ALARM_NS,
            load_exe: None,
        }
    }
}

impl Config {
    /// `--quick`: 5 s per cell; clock_nanosleep and poll, other and fifo:80,
    /// under cpu:2 only (4 cells, 20 s).
    pub fn quick() -> Self {
        Self {
            duration_ns: 5_000_000_000,
            sleepers: vec![Mechanism::ClockNanosleep, Mechanism::Poll],
            loads: vec![Some(LoadSpec::Cpu { hogs: 2 })],
            ..Self::default()
        }
    }

    /// `--full`: the whole default matrix, 30 s per cell (20 cells, 10 min).
    pub fn full() -> Self {
        Self::default()
    }

    /// Frames per cell: `duration × fps`, at least 1.
    pub fn frames(&self) -> u64 {
        ((self.duration_ns as f64 * self.fps / 1e9).floor() as u64).max(1)
    }

    /// Number of cells: sleepers × policies × loads.
    pub fn cells(&self) -> usize {
        self.sleepers.len() * self.policies.len() * self.loads.len()
    }

    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        // NaN and infinity are outside FPS too.
        check::in_range("--fps", self.fps, &FPS)?;
        check::ns_in_range("--duration", self.duration_ns, &DURATION_NS)?;
        check::ns_in_range("--alarm", self.alarm_ns, &ALARM_NS)?;
        if self.sleepers.is_empty() {
            return Err(invalid(
                "--sleeper is empty: give at least one (e.g. clock_nanosleep)",
            ));
        }
        if self.policies.is_empty() {
            return Err(invalid(
                "--policy is empty: give at least one (e.g. other or fifo:80)",
            ));
        }
        if self.loads.is_empty() {
            return Err(invalid(
                "--load is empty: give at least one (none or e.g. cpu:2)",
            ));
        }
        let per_load =
            self.duration_ns as u128 * (self.sleepers.len() * self.policies.len()) as u128;
        if per_load > 23 * 3_600_000_000_000 {
            return Err(invalid(format!(
                "--duration {} × {} sleepers × {} policies is too long: a load may run at most 23h",
                fmt_ns(self.duration_ns),
                self.sleepers.len(),
                self.policies.len()
            )));
        }
        for p in &self.policies {
            p.validate()
                .map_err(|e| invalid(format!("--policy {p}: {}", e.message())))?;
        }
        for l in self.loads.iter().flatten() {
            l.validate()
                .map_err(|e| invalid(format!("--load {l}: {}", e.message())))?;
        }
        Ok(())
    }

    /// The request of the player thread under `policy`: RT policies lock memory.
    pub fn request(policy: Policy) -> RtRequest {
        let mlock = policy.is_rt_or_deadline();
        RtRequest {
            policy,
            mlock,
            prefault_stack: if mlock { 256 * 1024 } else { 0 },
            ..RtRequest::default()
        }
    }
}

/// What the player does with the frame it looks at, at time `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Too early: never show a frame ahead of its time; sleep until it is due.
    Wait,
    /// Due and late by at most half a frame: show it.
    Show {
        /// `now − due`, ns.
        lateness_ns: u64,
    },
    /// Late by more than half a frame: drop it.
    Drop {
        /// `now − due`, ns.
        lateness_ns: u64,
    },
}

/// Xine's rules as a pure function: a frame due at `due_ns` looked at when
/// the clock reads `now_ns` waits if early, is shown if late by at most
/// `half_frame_ns`, and is dropped if later. **RT-safe.**
#[inline]
pub fn xine_decide(now_ns: u64, due_ns: u64, half_frame_ns: u64) -> Decision {
    if now_ns < due_ns {
        Decision::Wait
    } else if now_ns - due_ns <= half_frame_ns {
        Decision::Show {
            lateness_ns: now_ns - due_ns,
        }
    } else {
        Decision::Drop {
            lateness_ns: now_ns - due_ns,
        }
    }
}

/// Half a frame at `fps`, rounded down: for whole-ns lateness `l`,
/// `l > T/2` exactly when `l > floor(T/2)`.
pub fn half_frame_ns(fps: f64) -> u64 {
    (1e9 / fps / 2.0).floor() as u64
}

/// When frame `k` is due, ns after the first frame: `round(k·10⁹/fps)`
/// (no drift accumulates). **RT-safe.**
#[inline]
pub fn due_offset_ns(k: u64, fps: f64) -> u64 {
    (k as f64 * 1e9 / fps).round() as u64
}

/// The per-frame storage of one cell, allocated before the loop.
#[derive(Debug, Clone)]
pub struct FrameLog {
    /// Lateness of every frame looked at (shown or dropped), ns.
    pub lateness_ns: Vec<u64>,
    /// Whether each frame was shown.
    pub shown: Vec<bool>,
}

impl FrameLog {
    /// Room for `frames` frames.
    pub fn with_capacity(frames: u64) -> Self {
        let n = usize::try_from(frames).unwrap_or(usize::MAX);
        Self {
            lateness_ns: Vec::with_capacity(n),
            shown: Vec::with_capacity(n),
        }
    }

    /// Empties the log, keeping its capacity. **RT-safe.**
    pub fn clear(&mut self) {
        self.lateness_ns.clear();
        self.shown.clear();
    }

    /// Records one frame; ignored when full. **RT-safe.**
    #[inline]
    pub fn push(&mut self, d: Decision) {
        if self.shown.len() == self.shown.capacity() {
            return;
        }
        match d {
            Decision::Show { lateness_ns } => {
                self.lateness_ns.push(lateness_ns);
                self.shown.push(true);
            }
            Decision::Drop { lateness_ns } => {
                self.lateness_ns.push(lateness_ns);
                self.shown.push(false);
            }
            Decision::Wait => {}
        }
    }

    /// Frames recorded.
    pub fn len(&self) -> usize {
        self.shown.len()
    }

    /// True when no frame was recorded.
    pub fn is_empty(&self) -> bool {
        self.shown.is_empty()
    }
}

/// Why [`play`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayEnd {
    /// Every frame was shown or dropped.
    Done,
    /// The stop flag was set (Ctrl-C); the frames so far are kept.
    Stopped,
    /// The sleeper failed with this error.
    Failed(Errno),
}

/// Plays `frames` frames at `fps`, the first due at `start_ns`, waiting with
/// `sleeper` and deciding each frame with [`xine_decide`]; records into
/// `log` (which must have room for `frames`). **RT-safe.**
pub fn play<S: Sleeper + ?Sized>(
    sleeper: &mut S,
    start_ns: u64,
    fps: f64,
    frames: u64,
    log: &mut FrameLog,
    stop: &AtomicBool,
) -> PlayEnd {
    let half = half_frame_ns(fps);
    for k in 0..frames {
        if stop.load(Ordering::Relaxed) {
            return PlayEnd::Stopped;
        }
        let due = start_ns + due_offset_ns(k, fps);
        let mut now = monotonic_ns();
        loop {
            match xine_decide(now, due, half) {
                Decision::Wait => match sleeper.sleep_until(due) {
                    Ok(w) => now = w.max(monotonic_ns()),
                    Err(e) => return PlayEnd::Failed(e),
                },
                d => {
                    log.push(d);
                    break;
                }
            }
        }
    }
    PlayEnd::Done
}

/// Runs of consecutive `false` in `shown`: (number of runs, longest run).
pub fn drop_runs(shown: &[bool]) -> (u64, u64) {
    let (mut runs, mut longest, mut cur) = (0u64, 0u64, 0u64);
    for &s in shown {
        if s {
            cur = 0;
        } else {
            if cur == 0 {
                runs += 1;
            }
            cur += 1;
            longest = longest.max(cur);
        }
    }
    (runs, longest)
}

/// One bin of the display-lateness histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatenessBin {
    /// `0-10us`, `10-100us`, `100us-1ms`, `1ms-4ms`, `4ms-half`, `dropped`.
    pub label: String,
    /// Lower edge, ns (inclusive).
    pub low_ns: u64,
    /// Upper edge, ns (exclusive; the half-frame bin includes half a frame;
    /// `None` for `dropped`).
    pub high_ns: Option<u64>,
    /// Frames in the bin.
    pub count: u64,
}

/// The lateness histogram of a cell: shown frames in decade bins up to half a
/// frame, then the dropped frames. Edges above half a frame are cut at it.
pub fn lateness_histogram(log: &FrameLog, half_ns: u64) -> Vec<LatenessBin> {
    let edges: [(&str, u64); 5] = [
        ("0-10us", 0),
        ("10-100us", 10_000),
        ("100us-1ms", 100_000),
        ("1ms-4ms", 1_000_000),
        ("4ms-half", 4_000_000),
    ];
    let mut bins: Vec<LatenessBin> = edges
        .iter()
        .enumerate()
        .filter(|(_, (_, low))| *low <= half_ns)
        .map(|(i, (label, low))| LatenessBin {
            label: (*label).to_string(),
            low_ns: *low,
            high_ns: Some(edges.get(i + 1).map_or(half_ns, |e| e.1.min(half_ns))),
            count: 0,
        })
        .collect();
    let last = bins.len() - 1;
    for (&l, &shown) in log.lateness_ns.iter().zip(&log.shown) {
        if !shown {
            continue;
        }
        let i = bins
            .iter()
            .position(|b| b.high_ns.is_some_and(|h| l < h))
            .unwrap_or(last);
        bins[i].count += 1;
    }
    bins.push(LatenessBin {
        label: "dropped".into(),
        low_ns: half_ns + 1,
        high_ns: None,
        count: log.shown.iter().filter(|s| !**s).count() as u64,
    });
    bins
}

/// What one cell measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Playback {
    /// Frames in the cell (`duration × fps`).
    pub frames: u64,
    /// Frames looked at (shown + dropped; fewer than `frames` if interrupted).
    pub played: u64,
    /// Frames shown.
    pub shown: u64,
    /// Frames dropped (late by more than half a frame).
    pub dropped: u64,
    /// The desired frame rate.
    pub desired_fps: f64,
    /// `shown / played × desired_fps`.
    pub achieved_fps: f64,
    /// Runs of consecutive drops.
    pub drop_runs: u64,
    /// The longest run of consecutive drops.
    pub longest_drop_run: u64,
    /// Indices of the first dropped frames (at most [`LISTED_DROPS`]).
    pub first_drops: Vec<u64>,
    /// Display lateness of the shown frames, ns.
    pub lateness: Summary,
    /// Lateness of every frame looked at, dropped ones included, ns.
    pub lateness_all: Summary,
    /// Shown frames by lateness, then dropped frames.
    pub lateness_histogram: Vec<LatenessBin>,
    /// CPU time the sleeper spent busy-waiting, ns (`hybrid`, `spin`).
    pub spin_ns: u64,
    /// The sleeper's error, if it failed mid-cell (frames before it are kept).
    pub error: Option<String>,
    /// The conditions the player thread obtained.
    pub conditions: RtConditions,
    /// Share of all CPUs' time the hypervisor stole during the cell,
    /// percent (`/proc/stat`; 0 on bare metal, `null` when unreadable). A
    /// stolen stretch longer than half a frame drops frames whatever the
    /// policy: the guest's CPU was not running.
    pub steal_percent: Option<f64>,
}

impl Playback {
    /// Summarizes `log` (after [`play`]).
    pub fn from_log(
        log: &FrameLog,
        frames: u64,
        fps: f64,
        spin_ns: u64,
        error: Option<String>,
        conditions: RtConditions,
    ) -> Self {
        let played = log.len() as u64;
        let shown = log.shown.iter().filter(|s| **s).count() as u64;
        let (runs, longest) = drop_runs(&log.shown);
        let as_i64 = |l: u64| i64::try_from(l).unwrap_or(i64::MAX);
        let shown_l: Vec<i64> = log
            .lateness_ns
            .iter()
            .zip(&log.shown)
            .filter(|(_, s)| **s)
            .map(|(l, _)| as_i64(*l))
            .collect();
        let all_l: Vec<i64> = log.lateness_ns.iter().map(|l| as_i64(*l)).collect();
        Self {
            frames,
            played,
            shown,
            dropped: played - shown,
            desired_fps: fps,
            achieved_fps: if played == 0 {
                0.0
            } else {
                shown as f64 / played as f64 * fps
            },
            drop_runs: runs,
            longest_drop_run: longest,
            first_drops: log
                .shown
                .iter()
                .enumerate()
                .filter(|(_, s)| !**s)
                .map(|(i, _)| i as u64)
                .take(LISTED_DROPS)
                .collect(),
            lateness: summarize(&shown_l, played - shown),
            lateness_all: summarize(&all_l, 0),
            lateness_histogram: lateness_histogram(log, half_frame_ns(fps)),
            spin_ns,
            error,
            conditions,
            steal_percent: None,
        }
    }
}

/// The paper's model for a timer that expires only on ticks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TickPrediction {
    /// The kernel tick rate modelled.
    pub hz: u32,
    /// The requested alarm period, ns (Xine: 4 ms).
    pub alarm_ns: u64,
    /// The alarm period rounded up to whole ticks: alarms fire every this, ns.
    pub granularity_ns: u64,
    /// The desired frame rate.
    pub fps: f64,
    /// Frames after which the pattern repeats (capped at 100 000).
    pub cycle_frames: u64,
    /// Start shifts evaluated (evenly spaced over one alarm period).
    pub shifts: u32,
    /// Share of start shifts that lead to dropped frames (the paper: 50 % at 100 Hz).
    pub share_of_shifts_dropping: f64,
    /// Frame rate averaged over start shifts.
    pub mean_fps: f64,
    /// Frame rate at the worst start shift (the paper: 40 fps at 100 Hz).
    pub worst_fps: f64,
    /// The worst start shift (first alarm after the first frame's due time), ns.
    pub worst_shift_ns: u64,
    /// Frames of one cycle dropped at the worst shift (at most [`LISTED_DROPS`]).
    pub worst_dropped_in_cycle: Vec<u64>,
    /// Largest display lateness of a shown frame over all shifts, ns.
    pub max_lateness_ns: u64,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Frames of one cycle dropped when the alarms fire at `shift_ns + j·granularity_ns`
/// (Fig 5): each frame is looked at on the first alarm at or after its due
/// time and decided by [`xine_decide`]. Returns the dropped frame indices
/// and the largest lateness of a shown frame.
pub fn tick_pattern(fps: f64, granularity_ns: u64, shift_ns: u64, frames: u64) -> (Vec<u64>, u64) {
    let half = half_frame_ns(fps);
    let a = granularity_ns.max(1);
    // Work on a time axis shifted by whole alarm periods so nothing is negative.
    let base = a * (shift_ns / a + 1);
    let mut dropped = Vec::new();
    let mut max_late = 0;
    for k in 0..frames {
        let due = base + due_offset_ns(k, fps);
        let off = shift_ns % a;
        // First alarm at or after `due`: alarms are at off + j·a.
        let wake = if due <= off {
            off
        } else {
            off + (due - off).div_ceil(a) * a
        };
        match xine_decide(wake, due, half) {
            Decision::Drop { .. } => dropped.push(k),
            Decision::Show { lateness_ns } => max_late = max_late.max(lateness_ns),
            Decision::Wait => unreachable!("the wake-up is never before the due time"),
        }
    }
    (dropped, max_late)
}

/// The paper's analytical prediction (§5, Fig 5) for `fps` with alarms of
/// `alarm_ns` on a kernel ticking at `hz` whose timers expire only on ticks.
///
/// Alarms fire every `A = ceil(alarm/tick)·tick`; frame `k` is shown iff
/// `(s − k·T) mod A ≤ T/2` for the start shift `s`. Shifts are evaluated at
/// [`PREDICTION_SHIFTS`] evenly spaced midpoints over `[0, A)`, each over one
/// cycle of the pattern (`lcm(T, A)/T` frames).
///
/// # Panics
/// If `hz` is 0 or `fps` is not positive.
pub fn tick_prediction(fps: f64, hz: u32, alarm_ns: u64) -> TickPrediction {
    assert!(hz > 0 && fps > 0.0, "hz and fps must be positive");
    let tick = 1_000_000_000 / u64::from(hz);
    let granularity_ns = alarm_ns.div_ceil(tick).max(1) * tick;
    // In units of ns·fps the frame period is 10⁹ and the alarm period A·fps.
    let cycle_frames = if fps.fract() == 0.0 {
        let t = 1_000_000_000u128;
        let a = u128::from(granularity_ns) * fps as u128;
        let l = t / gcd(t, a) * a;
        u64::try_from(l / t).unwrap_or(u64::MAX).clamp(1, 100_000)
    } else {
        1000
    };
    let shifts = PREDICTION_SHIFTS;
    let (mut dropping, mut sum_fps, mut worst) = (0u32, 0.0, (f64::INFINITY, 0u64, Vec::new()));
    let mut max_lateness_ns = 0;
    for i in 0..shifts {
        let s = (2 * u64::from(i) + 1) * granularity_ns / (2 * u64::from(shifts));
        let (dropped, late) = tick_pattern(fps, granularity_ns, s, cycle_frames);
        max_lateness_ns = max_lateness_ns.max(late);
        let f = fps * (cycle_frames - dropped.len() as u64) as f64 / cycle_frames as f64;
        sum_fps += f;
        if !dropped.is_empty() {
            dropping += 1;
        }
        if f < worst.0 {
            worst = (f, s, dropped);
        }
    }
    worst.2.truncate(LISTED_DROPS);
    TickPrediction {
        hz,
        alarm_ns,
        granularity_ns,
        fps,
        cycle_frames,
        shifts,
        share_of_shifts_dropping: f64::from(dropping) / f64::from(shifts),
        mean_fps: sum_fps / f64::from(shifts),
        worst_fps: worst.0,
        worst_shift_ns: worst.1,
        worst_dropped_in_cycle: worst.2,
        max_lateness_ns,
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameCell {
    /// How the player waited.
    pub sleeper: Mechanism,
    /// The player thread's policy.
    pub policy: Policy,
    /// The load during the cell (`null` = none).
    pub load: Option<LoadSpec>,
    /// Measured, or skipped with the reason (policy refused, sleeper missing).
    pub result: Cell<Playback>,
}

/// The result of `lab frames`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FramesResult {
    /// The configuration measured.
    pub config: Config,
    /// The kernel it was measured on.
    pub machine: Machine,
    /// The model at this kernel's HZ (`None` when CONFIG_HZ is unknown).
    pub prediction: Option<TickPrediction>,
    /// The model at the paper's 100 Hz and 1000 Hz.
    pub paper_predictions: Vec<TickPrediction>,
    /// Cells in load-major, then policy, then sleeper order; cells not
    /// reached after Ctrl-C are absent.
    pub cells: Vec<FrameCell>,
    /// Load children and how they ended.
    pub load: Vec<ChildOutcome>,
    /// True when interrupted (Ctrl-C): frames or cells are missing.
    pub partial: bool,
}

/// Issue 8's frame-pacing target: a 60 fps player under SCHED_FIFO, waiting
/// with clock_nanosleep beside 2 CPU hogs, shows at least this many frames a
/// second over [`TARGET_DURATION_NS`].
pub const TARGET_FPS: f64 = 59.9;
/// The run length that target is judged over, ns (30 s).
pub const TARGET_DURATION_NS: u64 = 30_000_000_000;

/// The target's cell in a result, and whether the run was long enough to judge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetCell<'a> {
    /// The SCHED_FIFO priority the cell ran at.
    pub priority: u8,
    /// What it measured.
    pub playback: &'a Playback,
    /// `Some(met)` when the run was at 60 fps, [`TARGET_DURATION_NS`] or
    /// longer, and complete; `None` when it cannot be judged.
    pub met: Option<bool>,
}

impl FramesResult {
    /// The cell issue 8's target is about (60 fps, SCHED_FIFO at any
    /// priority, clock_nanosleep, `cpu:2`), if it was measured.
    pub fn target_cell(&self) -> Option<TargetCell<'_>> {
        self.cells.iter().find_map(|c| {
            let priority = match c.policy {
                Policy::Fifo { priority } => priority,
                _ => return None,
            };
            if c.sleeper != Mechanism::ClockNanosleep || c.load != Some(LoadSpec::Cpu { hogs: 2 }) {
                return None;
            }
            let playback = c.result.measured()?;
            let judged = self.config.fps == PAPER_FPS
                && self.config.duration_ns >= TARGET_DURATION_NS
                && playback.played == playback.frames;
            Some(TargetCell {
                priority,
                playback,
                met: judged.then_some(playback.achieved_fps >= TARGET_FPS),
            })
        })
    }

    /// The measured cell for `sleeper`, `policy`, `load`, if any.
    pub fn find(
        &self,
        sleeper: Mechanism,
        policy: Policy,
        load: Option<&LoadSpec>,
    ) -> Option<&Playback> {
        self.cells
            .iter()
            .find(|c| c.sleeper == sleeper && c.policy == policy && c.load.as_ref() == load)
            .and_then(|c| c.result.measured())
    }
}

/// Runs the matrix (see the module docs). A refused policy or a missing
/// sleeper is a skipped cell.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; [`ErrorKind::Load`] if a
/// load child cannot start; other errors of the player thread.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<FramesResult> {
    config.validate()?;
    let machine = Machine::current();
    let stop = stop_flag();
    let frames = config.frames();
    let per_load = (config.sleepers.len() * config.policies.len()) as u64;
    let mut result = FramesResult {
        config: config.clone(),
        prediction: machine
            .config_hz
            .map(|hz| tick_prediction(config.fps, hz, config.alarm_ns)),
        paper_predictions: PAPER_HZ
            .iter()
            .map(|&hz| tick_prediction(config.fps, hz, config.alarm_ns))
            .collect(),
        machine,
        cells: Vec::with_capacity(config.cells()),
        load: Vec::new(),
        partial: false,
    };
    progress.begin("frames", config.cells() as u64);
    'loads: for load in &config.loads {
        let mut set = match load {
            Some(spec) => {
                let exe = match &config.load_exe {
                    Some(p) => p.clone(),
                    None => std::env::current_exe()?,
                };
                let d = Duration::from_nanos(config.duration_ns * per_load)
                    + Duration::from_secs(10 + 2 * per_load);
                Some(LoadSet::spawn(&exe, std::slice::from_ref(spec), d)?)
            }
            None => None,
        };
        for &policy in &config.policies {
            for &sleeper in &config.sleepers {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(s) = set.as_mut() {
                    if let Err(e) = s.check() {
                        result.load.extend(s.stop());
                        return Err(e);
                    }
                }
                let cell = Cell::from_result(run_cell(config, sleeper, policy, frames))?;
                result.cells.push(FrameCell {
                    sleeper,
                    policy,
                    load: load.clone(),
                    result: cell,
                });
                progress.advance(1);
            }
        }
        if let Some(s) = set.as_mut() {
            result.load.extend(s.stop());
        }
        if stop.load(Ordering::Relaxed) {
            break 'loads;
        }
    }
    progress.end();
    let short = result.cells.len() < config.cells()
        || result
            .cells
            .iter()
            .filter_map(|c| c.result.measured())
            .any(|p| p.played < p.frames && p.error.is_none());
    result.partial = short || stop.load(Ordering::Relaxed);
    Ok(result)
}

fn run_cell(config: &Config, mech: Mechanism, policy: Policy, frames: u64) -> Result<Playback> {
    let req = Config::request(policy);
    let fps = config.fps;
    let cpu_before = CpuTimes::now().ok();
    let (r, _) = run_in_thread(&req, |cond| -> Result<Playback> {
        let mut sleeper = sleep::open(mech)
            .map_err(|e| Error::new(ErrorKind::Unavailable, format!("{mech}: {}", e.message())))?;
        let mut log = FrameLog::with_capacity(frames);
        // Start one frame from now, as a player starts after its first decode.
        let start = monotonic_ns() + due_offset_ns(1, fps);
        let end = play(&mut *sleeper, start, fps, frames, &mut log, stop_flag());
        let error = match end {
            PlayEnd::Failed(e) => Some(format!("{mech} failed: {e}")),
            _ => None,
        };
        Ok(Playback::from_log(
            &log,
            frames,
            fps,
            sleeper.spin_ns(),
            error,
            cond.clone(),
        ))
    })
    .map_err(|e| {
        if e.kind() == ErrorKind::Realtime {
            Error::new(
                ErrorKind::Realtime,
                format!("--policy {policy}: {}", e.message()),
            )
        } else {
            e
        }
    })?;
    let mut p = r?;
    p.steal_percent = cpu_before
        .zip(CpuTimes::now().ok())
        .and_then(|(a, b)| b.steal_percent_since(&a));
    Ok(p)
}
