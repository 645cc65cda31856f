//! What tracing costs: the sort benchmark's throughput with the trace on
//! versus off (issue 8, acceptance figure 1; klogger: 0.6–1.2 %,
//! [`super::PAPER_KLOGGER_OVERHEAD_PERCENT`]).
//!
//! One continuous run: the sorter, with the typist and player beside it (so
//! the scheduler has switches to record) and the trace drainer, all pinned to
//! one measured CPU, as on the paper's uniprocessor. The run is cut into
//! slices; between slices the instance's events are enabled or disabled
//! ([`Instance::set_events`] — disabled means the tracepoints are patched
//! out, not merely that records are discarded), and each slice starts
//! [`SETTLE_NS`] after the switch. Slices come in pairs in the order on/off,
//! off/on, on/off, … so a linear drift in the machine's speed cancels.
//!
//! Throughput per slice is sorts divided by the time those sorts took
//! (each sort timed on CLOCK_MONOTONIC; a sort that straddles a slice
//! boundary counts for neither), so it has no whole-sort quantization. The
//! figure is the median of the pairs' on/off ratios with a distribution-free
//! 95 % confidence interval ([`median_ci95`]): on a virtual machine a slice
//! that the hypervisor stole time from is an outlier, and the median ignores it.
//!
//! # RT contract
//! Not RT code. The sorter counts into preallocated atomics only.

use crate::check::{self, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::measure::{stop_requested, Cell, Progress};
use crate::workloads::{self, Control, Workload};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched;
use firmtime_rt::setup;
use firmtime_trace::tracefs::{self, Instance};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Valid `--repeats` range.
pub const PAIRS: std::ops::RangeInclusive<u32> = 1..=10_000;
/// Valid `--slice` range, ns (50 ms … 1 min).
pub const SLICE_NS: std::ops::RangeInclusive<u64> = 50_000_000..=60_000_000_000;
/// Valid `--rates` values besides 0, Hz.
pub const RATES_HZ: std::ops::RangeInclusive<u32> = 0..=100_000;
/// Priority of the extra timer thread (SCHED_FIFO), as in `lab interrupts`.
pub const TIMER_PRIORITY: u8 = 80;
/// Pause after switching the trace on or off before a slice starts, ns:
/// enabling the events patches kernel text (the write can take tens of
/// milliseconds; the pause starts when it has returned).
pub const SETTLE_NS: u64 = 20_000_000;
/// The drainer's polling interval (klogger's daemon: every few seconds).
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(100);
/// Pause between the first sort and the first slice.
pub const WARM_UP: Duration = Duration::from_millis(1000);
/// How long the first sort may take before the run gives up, ns.
pub const FIRST_SORT_LIMIT_NS: u64 = 60_000_000_000;
/// Sorts a slice should hold: a slice shorter than this many sorts (a large
/// L2, a slow machine, a debug build) is lengthened, and the result says so.
pub const MIN_SORTS_PER_SLICE: u64 = 10;
/// Events the drainer can hold at least, and at most (about 64 bytes each).
const CAPACITY: std::ops::RangeInclusive<usize> = 2_000_000..=8_000_000;

/// The drainer's store for one rate: room for this kernel's own events
/// (a few thousand per second) plus about six per extra timer wake-up, over
/// the traced half of the run, with a margin; within [`CAPACITY`]. Events
/// past it are counted (`dropped_events`), not stored.
fn capacity(config: &Config, rate: u32) -> usize {
    let traced_s = f64::from(config.pairs) * config.slice_ns as f64 / 1e9;
    let want = (3000.0 + 6.0 * f64::from(rate)) * traced_s * 1.5;
    (want as usize).clamp(*CAPACITY.start(), *CAPACITY.end())
}
/// "No slice is being measured" in the sorter's phase word.
const IDLE: u32 = u32::MAX;

/// The benchmark's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Pairs of slices per rate (`--repeats`), default 100.
    pub pairs: u32,
    /// Length of each slice, ns (`--slice`), default 100 ms: short slices
    /// keep both halves of a pair in the same state of a noisy host.
    pub slice_ns: u64,
    /// Kernel ring buffer per CPU, KiB, default 4096 (klogger: 4 MB).
    pub buffer_kb: u32,
    /// The measured CPU (`--cpu`); `None` = the last online CPU.
    pub cpu: Option<usize>,
    /// Bytes of the sorter's array (`--array-size`); `None` = half the L2.
    pub array_bytes: Option<u64>,
    /// Extra timer rates, Hz (`--rates`); 0 = none, only this kernel's own
    /// tick. Default 0, 1000 and 20000: klogger's overhead was given at 100,
    /// 1000 and 20,000 Hz clock rates.
    pub rates_hz: Vec<u32>,
    /// Record the explaining trace's events (`lab cyclic --explain`,
    /// [`firmtime_trace::explain`]) instead of `lab trace`'s (`--explain-events`).
    pub explain_events: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pairs: 100,
            slice_ns: 100_000_000,
            buffer_kb: 4096,
            cpu: None,
            array_bytes: None,
            rates_hz: vec![0, 1000, 20_000],
            explain_events: false,
        }
    }
}

impl Config {
    /// `--quick`: 30 pairs at no extra timer and at 20 kHz (about 17 s).
    pub fn quick() -> Self {
        Self {
            pairs: 30,
            rates_hz: vec![0, 20_000],
            ..Self::default()
        }
    }

    /// `--full`: 300 pairs at each default rate (about 3.7 min).
    pub fn full() -> Self {
        Self {
            pairs: 300,
            ..Self::default()
        }
    }

    /// Seconds the run takes, settling pauses and warm-ups included.
    pub fn duration_s(&self) -> f64 {
        let per_rate = f64::from(self.pairs) * 2.0 * (self.slice_ns + SETTLE_NS) as f64 / 1e9
            + WARM_UP.as_secs_f64();
        per_rate * self.rates_hz.len() as f64
    }

    /// Checks the parameters; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the flag.
    pub fn validate(&self) -> Result<()> {
        check::in_range("--repeats", self.pairs, &PAIRS)?;
        if !SLICE_NS.contains(&self.slice_ns) {
            // Whole ms, as --slice takes it.
            return Err(invalid(format!(
                "--slice {}ms is out of range: valid is 50ms to 1min",
                self.slice_ns / 1_000_000
            )));
        }
        check::in_range("--buffer-kb", self.buffer_kb, &super::BUFFER_KB)?;
        if self.rates_hz.is_empty() || self.rates_hz.iter().any(|r| !RATES_HZ.contains(r)) {
            return Err(invalid(format!(
                "--rates {}: valid are {} (no extra timer) to {} Hz, comma-separated",
                self.rates_hz
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                RATES_HZ.start(),
                RATES_HZ.end()
            )));
        }
        if let Some(b) = self.array_bytes {
            check::in_range_note("--array-size", b, &crate::interrupts::ARRAY_BYTES, " bytes")?;
        }
        check::online("--cpu", self.cpu)
    }

    /// Elements of the sorter's array: `--array-size` in `u32`s, or half the L2.
    pub fn sort_len(&self) -> usize {
        self.array_bytes
            .map_or_else(workloads::sort_len, |b| (b / 4).max(1) as usize)
    }
}

/// One measured slice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slice {
    /// True if the events were enabled.
    pub traced: bool,
    /// Start and end, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// End, CLOCK_MONOTONIC ns.
    pub end_ns: u64,
    /// Sorts that started and finished inside the slice.
    pub sorts: u64,
    /// Time those sorts took, ns.
    pub sort_ns: u64,
    /// `sorts / sort_ns`, per second (0 with no sort).
    pub per_s: f64,
    /// Trace events timestamped inside the slice (0 when not traced).
    pub events: u64,
    /// CPU time the drainer thread used during the slice, ns
    /// (`/proc/self/task/TID/schedstat`; 0 if unreadable).
    pub drainer_cpu_ns: u64,
}

/// One pair of adjacent slices.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    /// Sorts per second with tracing on.
    pub on_per_s: f64,
    /// Sorts per second with tracing off.
    pub off_per_s: f64,
    /// `on_per_s / off_per_s`.
    pub ratio: f64,
    /// True if the traced slice went first.
    pub on_first: bool,
}

/// The benchmark at one timer rate.
#[derive(Debug, Clone, Serialize)]
pub struct RateResult {
    /// Extra timer rate, Hz (0 = none: only this kernel's tick).
    pub rate_hz: u32,
    /// Length of this rate's slices, ns: `config.slice_ns`, or longer so that
    /// about [`MIN_SORTS_PER_SLICE`] sorts fit (mean sort time of the warm-up).
    pub slice_ns: u64,
    /// What the timer thread did (`None` at rate 0).
    pub timer: Option<crate::interrupts::TimerRun>,
    /// Every slice, in order.
    pub slices: Vec<Slice>,
    /// Every complete pair: a sort finished inside both of its slices.
    /// Fewer than `config.pairs` means the sorter was starved (something
    /// else held the measured CPU, e.g. at a real-time priority).
    pub pairs: Vec<Pair>,
    /// Median of the pairs' ratios.
    pub median_ratio: Option<f64>,
    /// 95 % confidence interval of that median (order statistics; 6 pairs or more).
    pub ratio_ci95: Option<[f64; 2]>,
    /// All traced sorts over all untraced sorts, each per second of sorting:
    /// the pooled throughput ratio (sensitive to stolen time, unlike the median).
    pub pooled_ratio: Option<f64>,
    /// `(1 − median_ratio) × 100`: throughput lost to tracing, percent.
    pub overhead_percent: Option<f64>,
    /// The confidence interval in percent: `[low, high]` overhead.
    pub overhead_ci95_percent: Option<[f64; 2]>,
    /// The verdict on the 95 % interval ([`judge`]): true if all of it lies
    /// within [`super::OVERHEAD_TARGET_PERCENT`], false if all of it lies
    /// above; `None` if it straddles the target or there are fewer than 6
    /// complete pairs (no interval): undecided.
    pub within_target: Option<bool>,
    /// Trace events recorded per second of traced slices (a lower bound
    /// when `dropped_events` > 0: those have no timestamp to place them).
    pub events_per_s: f64,
    /// Lost throughput per event recorded, ns of sorting time:
    /// `overhead_percent / 100 × 1 s ÷ events_per_s` (klogger: a few hundred cycles).
    pub cost_per_event_ns: Option<f64>,
    /// The drainer's CPU time as a share of the traced slices, percent
    /// (part of the overhead: it runs on the measured CPU).
    pub drainer_cpu_percent: f64,
    /// Events decoded during this rate's run.
    pub events: u64,
    /// Events that did not fit the drainer's store (the kernel recorded them).
    pub dropped_events: u64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadResult {
    /// Parameters.
    pub config: Config,
    /// Kernel, HZ, clocksource, preempt model.
    pub kernel: super::KernelLine,
    /// The measured CPU (sorter, typist, player, drainer and timer pinned to it).
    pub cpu: usize,
    /// Elements sorted per round (half the L2, or `--array-size`).
    pub sort_len: usize,
    /// Pause after each switch, ns.
    pub settle_ns: u64,
    /// One entry per rate of `config.rates_hz`, in order.
    pub rates: Vec<crate::measure::Cell<RateResult>>,
    /// The acceptance figure: true if the sort benchmark at this kernel's own
    /// clock (rate 0) lost at most [`super::OVERHEAD_TARGET_PERCENT`] (median);
    /// `None` when rate 0 was not measured or has no complete pair. The rows
    /// with an extra timer are stress cases beside klogger's clock rates.
    pub within_target: Option<bool>,
    /// Events the kernel lost (ring buffer overruns), all rates.
    pub kernel_lost_events: u64,
    /// True when interrupted.
    pub partial: bool,
}

/// Median of `v` (mean of the middle two for an even count); None when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    crate::stats::median_in_place(&mut v.to_vec())
}

/// Distribution-free 95 % confidence interval of the median of `v`: the
/// order statistics of ranks `n/2 ∓ 0.98·√n` (normal approximation of the
/// binomial); None under 6 values, where no such interval reaches 95 %.
pub fn median_ci95(v: &[f64]) -> Option<[f64; 2]> {
    let n = v.len();
    if n < 6 {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(1.0) as usize) - 1;
    let hi = ((n as f64 / 2.0 + half + 1.0).ceil() as usize).min(n) - 1;
    Some([s[lo], s[hi]])
}

/// The verdict on a 95 % interval of the on/off ratio: `Some(true)` if
/// every value in it loses at most [`super::OVERHEAD_TARGET_PERCENT`],
/// `Some(false)` if every value loses more, `None` if it straddles the
/// target or there is no interval.
pub fn judge(ratio_ci95: Option<[f64; 2]>) -> Option<bool> {
    let [lo, hi] = ratio_ci95?;
    let (least, most) = ((1.0 - hi) * 100.0, (1.0 - lo) * 100.0);
    if most <= super::OVERHEAD_TARGET_PERCENT {
        Some(true)
    } else if least > super::OVERHEAD_TARGET_PERCENT {
        Some(false)
    } else {
        None
    }
}

/// Slices `2k` and `2k + 1` as pairs (on ÷ off); an unpaired last slice is left out.
pub fn pair_up(slices: &[Slice]) -> Vec<Pair> {
    slices
        .chunks_exact(2)
        .filter_map(|c| {
            let (on, off) = match (c[0].traced, c[1].traced) {
                (true, false) => (&c[0], &c[1]),
                (false, true) => (&c[1], &c[0]),
                _ => return None,
            };
            (on.sorts > 0 && off.sorts > 0).then(|| Pair {
                on_per_s: on.per_s,
                off_per_s: off.per_s,
                ratio: on.per_s / off.per_s,
                on_first: c[0].traced,
            })
        })
        .collect()
}

/// Whether slice `i` is traced: pairs alternate on/off, off/on, …
pub fn traced(i: usize) -> bool {
    let (pair, second) = (i / 2, i % 2 == 1);
    (pair % 2 == 0) != second
}

struct Counter {
    sorts: AtomicU64,
    ns: AtomicU64,
}

/// Runs the benchmark: one continuous run per rate of `config.rates_hz`.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for bad parameters; [`ErrorKind::Unavailable`]
/// without root or tracefs; [`ErrorKind::Io`] if tracefs refuses a switch.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<OverheadResult> {
    config.validate()?;
    if !tracefs::is_root() {
        return Err(Error::new(
            ErrorKind::Unavailable,
            "the trace overhead benchmark needs root (tracefs): run it with sudo",
        ));
    }
    let online = sched::online_cpus();
    let cpu = match config.cpu {
        Some(c) => c,
        None => *online
            .last()
            .ok_or_else(|| Error::new(ErrorKind::Io, "no online CPU found in /sys"))?,
    };
    let inst = if config.explain_events {
        firmtime_trace::explain::instance(
            config.buffer_kb,
            "firmtime-cycl*",
            firmtime_trace::explain::WokenBy::OwnTimer,
        )?
    } else {
        Instance::create(&tracefs::instance_name(), config.buffer_kb)?
    };
    // The controller (this thread) stays off the measured CPU when it can,
    // and gets its own affinity back afterwards.
    let saved = sched::affinity().ok();
    let others: Vec<usize> = online.iter().copied().filter(|&c| c != cpu).collect();
    if !others.is_empty() {
        let _ = sched::set_affinity(&others);
    }
    let mut rates = Vec::new();
    let mut partial = false;
    progress.begin(
        "trace overhead",
        u64::from(config.pairs) * 2 * config.rates_hz.len() as u64,
    );
    let mut failure = None;
    for &rate in &config.rates_hz {
        if stop_requested() {
            partial = true;
            break;
        }
        match run_rate(config, &inst, &online, cpu, rate, progress) {
            Ok((r, interrupted)) => {
                rates.push(Cell::Measured(r));
                if interrupted {
                    partial = true;
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Realtime => rates.push(Cell::Skipped {
                reason: format!("the {rate} Hz timer thread: {}", e.message()),
            }),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    progress.end();
    if let Some(cpus) = saved {
        let _ = sched::set_affinity(&cpus);
    }
    let kernel_lost_events = inst.lost_events(&online);
    inst.remove();
    if let Some(e) = failure {
        return Err(e);
    }
    let within_target = rates
        .iter()
        .filter_map(Cell::measured)
        .find(|r| r.rate_hz == 0)
        .and_then(|r| r.within_target);
    Ok(OverheadResult {
        config: config.clone(),
        kernel: super::KernelLine::current(),
        cpu,
        sort_len: config.sort_len(),
        settle_ns: SETTLE_NS,
        rates,
        within_target,
        kernel_lost_events,
        partial,
    })
}

/// One rate: the workloads, the drainer and (above 0 Hz) a SCHED_FIFO timer
/// thread run throughout while the controller (this thread) switches the
/// events between slices. Returns the result and whether Ctrl-C cut it short.
fn run_rate(
    config: &Config,
    inst: &Instance,
    online: &[usize],
    cpu: usize,
    rate: u32,
    progress: &mut dyn Progress,
) -> Result<(RateResult, bool)> {
    let hz = super::KernelLine::current().config_hz.unwrap_or(250);
    let n = config.pairs as usize * 2;
    let counters: Vec<Counter> = (0..n)
        .map(|_| Counter {
            sorts: AtomicU64::new(0),
            ns: AtomicU64::new(0),
        })
        .collect();
    let phase = AtomicU32::new(IDLE);
    let all = Counter {
        sorts: AtomicU64::new(0),
        ns: AtomicU64::new(0),
    };
    let mut slice_ns = config.slice_ns;
    inst.set_events(false)?;
    let ctl = Control::default();
    let stop_drain = AtomicBool::new(false);
    let timer_done = AtomicBool::new(false);
    let started = AtomicU64::new(0);
    let tids = [AtomicI32::new(0), AtomicI32::new(0)];
    let its = [AtomicU64::new(0), AtomicU64::new(0)];
    let drainer_tid = AtomicI32::new(0);
    // Set by a thread that could not be pinned: the run would not measure one CPU.
    let unpinned = AtomicBool::new(false);
    let pin = || {
        if sched::set_affinity(&[cpu]).is_err() {
            unpinned.store(true, Ordering::SeqCst);
        }
    };
    let mut bounds: Vec<(bool, u64, u64, u64)> = Vec::with_capacity(n);
    let mut partial = false;
    let mut timer_run = None;
    let outcome = std::thread::scope(|s| -> Result<tracefs::Capture> {
        let drainer = s.spawn(|| {
            drainer_tid.store(workloads::gettid(), Ordering::SeqCst);
            pin();
            tracefs::drain(
                inst,
                online,
                capacity(config, rate),
                DRAIN_INTERVAL,
                &stop_drain,
            )
        });
        // The timer first: a refused SCHED_FIFO ends this rate before anything else starts.
        let timer = if rate > 0 {
            let (tx, rx) = std::sync::mpsc::channel();
            let timer_done = &timer_done;
            let h = s.spawn(move || -> Option<crate::interrupts::TimerRun> {
                let req = crate::interrupts::Config {
                    timer_priority: TIMER_PRIORITY,
                    ..crate::interrupts::Config::default()
                }
                .timer_request(cpu);
                match setup::apply(&req) {
                    Ok(_) => {
                        let _ = tx.send(Ok(()));
                        Some(crate::interrupts::timer_loop(rate, timer_done))
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        None
                    }
                }
            });
            let granted = rx.recv().unwrap_or_else(|_| {
                Err(firmtime_rt::Error::new(
                    firmtime_rt::ErrorKind::Io,
                    "the timer thread exited",
                ))
            });
            if let Err(e) = granted {
                stop_drain.store(true, Ordering::SeqCst);
                let _ = drainer.join();
                let _ = h.join();
                return Err(Error::new(ErrorKind::Realtime, e.to_string()));
            }
            Some(h)
        } else {
            None
        };
        for (i, w) in [Workload::Typist, Workload::Player].into_iter().enumerate() {
            let (ctl, tid, it, pin) = (&ctl, &tids[i], &its[i], &pin);
            s.spawn(move || {
                pin();
                workloads::run(w, ctl, tid, it, hz);
            });
        }
        let (ctl_ref, phase, counters, started, all) = (&ctl, &phase, &counters, &started, &all);
        let pin = &pin;
        s.spawn(move || {
            pin();
            let mut buf = vec![0u32; config.sort_len()];
            let mut seed = 1;
            while !ctl_ref.finish.load(Ordering::Relaxed) {
                let p0 = phase.load(Ordering::Acquire);
                let t0 = monotonic_ns();
                seed = workloads::sort_once(&mut buf, seed);
                let t1 = monotonic_ns();
                all.sorts.fetch_add(1, Ordering::Relaxed);
                all.ns.fetch_add(t1 - t0, Ordering::Relaxed);
                started.store(1, Ordering::Release);
                if p0 != IDLE && phase.load(Ordering::Acquire) == p0 {
                    let c = &counters[p0 as usize];
                    c.sorts.fetch_add(1, Ordering::Relaxed);
                    c.ns.fetch_add(t1 - t0, Ordering::Relaxed);
                }
            }
        });
        let waited = monotonic_ns();
        let mut result = Ok(());
        while started.load(Ordering::Acquire) == 0 {
            if stop_requested() {
                partial = true;
                break;
            }
            if monotonic_ns() - waited > FIRST_SORT_LIMIT_NS {
                result = Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "the sorter did not finish one sort in {} s on CPU {cpu}: is something \
                         at a real-time priority holding that CPU? Choose another with --cpu, \
                         or a smaller --array-size",
                        FIRST_SORT_LIMIT_NS / 1_000_000_000
                    ),
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Let the drainer fill its store and the workloads reach their rhythm.
        if result.is_ok() && !partial {
            std::thread::sleep(WARM_UP);
        }
        if unpinned.load(Ordering::SeqCst) {
            result = Err(Error::new(
                ErrorKind::Io,
                format!(
                    "could not pin the sorter, workloads and drainer to CPU {cpu} (a cpuset?): \
                     choose another with --cpu"
                ),
            ));
        }
        let mean_sort_ns =
            all.ns.load(Ordering::Relaxed) / all.sorts.load(Ordering::Relaxed).max(1);
        slice_ns = slice_ns
            .max(mean_sort_ns.saturating_mul(MIN_SORTS_PER_SLICE))
            .min(*SLICE_NS.end());
        let stat = format!(
            "/proc/self/task/{}/schedstat",
            drainer_tid.load(Ordering::SeqCst)
        );
        let drainer_cpu = || {
            std::fs::read_to_string(&stat)
                .ok()
                .and_then(|t| crate::billing::parse_schedstat(&t))
        };
        let mut on = false;
        for i in 0..n {
            if result.is_err() || partial {
                break;
            }
            if stop_requested() {
                partial = true;
                break;
            }
            let want = traced(i);
            if want != on {
                if let Err(e) = inst.set_events(want) {
                    result = Err(e.into());
                    break;
                }
                on = want;
            }
            std::thread::sleep(Duration::from_nanos(SETTLE_NS));
            let c0 = drainer_cpu();
            let t0 = monotonic_ns();
            phase.store(i as u32, Ordering::Release);
            std::thread::sleep(Duration::from_nanos(slice_ns));
            phase.store(IDLE, Ordering::Release);
            let t1 = monotonic_ns();
            let used = match (c0, drainer_cpu()) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            };
            bounds.push((want, t0, t1, used));
            progress.advance(1);
        }
        let off = inst.set_events(false);
        ctl.finish.store(true, Ordering::SeqCst);
        ctl.release.store(true, Ordering::SeqCst);
        timer_done.store(true, Ordering::SeqCst);
        stop_drain.store(true, Ordering::SeqCst);
        if let Some(h) = timer {
            timer_run = h
                .join()
                .map_err(|_| Error::new(ErrorKind::Io, "the timer thread panicked"))?;
        }
        let cap = drainer
            .join()
            .map_err(|_| Error::new(ErrorKind::Io, "the trace drainer panicked"))??;
        result?;
        off?;
        Ok(cap)
    });
    let cap = outcome?;
    let mut slices: Vec<Slice> = bounds
        .iter()
        .zip(&counters)
        .map(|(&(traced, start_ns, end_ns, drainer_cpu_ns), c)| {
            let sorts = c.sorts.load(Ordering::Relaxed);
            let sort_ns = c.ns.load(Ordering::Relaxed);
            Slice {
                traced,
                start_ns,
                end_ns,
                sorts,
                sort_ns,
                per_s: if sort_ns > 0 {
                    sorts as f64 * 1e9 / sort_ns as f64
                } else {
                    0.0
                },
                events: 0,
                drainer_cpu_ns,
            }
        })
        .collect();
    for e in &cap.events {
        // Slices are in time order: find the one holding the event, if any.
        let k = slices.partition_point(|s| s.end_ns <= e.time_ns);
        if let Some(s) = slices.get_mut(k) {
            if s.start_ns <= e.time_ns {
                s.events += 1;
            }
        }
    }
    let pairs = pair_up(&slices);
    let ratios: Vec<f64> = pairs.iter().map(|p| p.ratio).collect();
    let median_ratio = median(&ratios);
    let ratio_ci95 = median_ci95(&ratios);
    let paired = &slices[..slices.len() / 2 * 2];
    let pooled = |t: bool| {
        let (n, ns) = paired
            .iter()
            .filter(|s| s.traced == t)
            .fold((0u64, 0u64), |a, s| (a.0 + s.sorts, a.1 + s.sort_ns));
        (ns > 0).then(|| n as f64 / ns as f64)
    };
    let pooled_ratio = match (pooled(true), pooled(false)) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let traced_ns: u64 = slices
        .iter()
        .filter(|s| s.traced)
        .map(|s| s.end_ns - s.start_ns)
        .sum();
    let traced_events: u64 = slices.iter().filter(|s| s.traced).map(|s| s.events).sum();
    let drainer_ns: u64 = slices
        .iter()
        .filter(|s| s.traced)
        .map(|s| s.drainer_cpu_ns)
        .sum();
    let overhead_percent = median_ratio.map(|r| (1.0 - r) * 100.0);
    let events_per_s = if traced_ns > 0 {
        traced_events as f64 * 1e9 / traced_ns as f64
    } else {
        0.0
    };
    Ok((
        RateResult {
            rate_hz: rate,
            slice_ns,
            timer: timer_run,
            pairs,
            median_ratio,
            ratio_ci95,
            pooled_ratio,
            overhead_percent,
            overhead_ci95_percent: ratio_ci95
                .map(|[lo, hi]| [(1.0 - hi) * 100.0, (1.0 - lo) * 100.0]),
            within_target: judge(ratio_ci95),
            events_per_s,
            cost_per_event_ns: overhead_percent
                .filter(|_| events_per_s > 0.0)
                .map(|o| o / 100.0 * 1e9 / events_per_s),
            drainer_cpu_percent: if traced_ns > 0 {
                drainer_ns as f64 * 100.0 / traced_ns as f64
            } else {
                0.0
            },
            events: cap.events.len() as u64,
            dropped_events: cap.dropped,
            slices,
        },
        partial,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_grows_with_the_timer_rate_within_bounds() {
        let c = |pairs, rate| {
            capacity(
                &Config {
                    pairs,
                    ..Config::default()
                },
                rate,
            )
        };
        assert_eq!(c(100, 0), 2_000_000);
        // 300 pairs × 100 ms at 20 kHz: (3000 + 120,000) × 30 s × 1.5.
        assert_eq!(c(300, 20_000), 5_535_000);
        assert_eq!(c(10_000, 100_000), 8_000_000);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_interval_decides_met_not_met_or_undecided() {
        assert_eq!(judge(Some([0.97, 1.02])), Some(true)); // loses −2 … 3 %
        assert_eq!(judge(Some([0.951, 0.99])), Some(true)); // 1 … 4.9 %
        assert_eq!(judge(Some([0.90, 0.94])), Some(false)); // 6 … 10 %
        assert_eq!(judge(Some([0.93, 0.97])), None); // 3 … 7 %: straddles
        assert_eq!(judge(None), None);
    }

    #[test]
    fn median_interval_uses_order_statistics() {
        assert_eq!(median_ci95(&[1.0, 2.0, 3.0, 4.0, 5.0]), None);
        // n = 6: ranks 3 − 2.4 → 1 and 3 + 2.4 + 1 → 7, clamped to 6: min and max.
        assert_eq!(
            median_ci95(&[6.0, 1.0, 5.0, 2.0, 4.0, 3.0]),
            Some([1.0, 6.0])
        );
        // n = 100: ranks floor(50 − 9.8) = 40 and ceil(50 + 9.8 + 1) = 61 (1-based).
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(median_ci95(&v), Some([40.0, 61.0]));
    }

    fn slice(traced: bool, sorts: u64, sort_ns: u64) -> Slice {
        Slice {
            traced,
            start_ns: 0,
            end_ns: 0,
            sorts,
            sort_ns,
            per_s: sorts as f64 * 1e9 / sort_ns as f64,
            events: 0,
            drainer_cpu_ns: 0,
        }
    }

    #[test]
    fn order_alternates_and_pairs_divide_on_by_off() {
        let order: Vec<bool> = (0..8).map(traced).collect();
        assert_eq!(order, [true, false, false, true, true, false, false, true]);
        let s = [
            slice(true, 9, 1_000_000_000),
            slice(false, 10, 1_000_000_000),
            slice(false, 20, 1_000_000_000),
            slice(true, 19, 1_000_000_000),
            slice(true, 0, 0), // no sort finished inside: the pair is left out
            slice(false, 5, 1_000_000_000),
            slice(false, 5, 1_000_000_000), // unpaired last slice
        ];
        let p = pair_up(&s);
        assert_eq!(p.len(), 2);
        assert!(p[0].on_first && !p[1].on_first);
        assert!((p[0].ratio - 0.9).abs() < 1e-12);
        assert!((p[1].ratio - 0.95).abs() < 1e-12);
        assert_eq!(p[1].on_per_s, 19.0);
    }
}
