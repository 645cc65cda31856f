//! `lab cyclic`: periodic wake-up latency, as Varoquaux's realfeel (2006)
//! and rt-tests' cyclictest measure it.
//!
//! One measuring thread per selected CPU, pinned to it and set up with the
//! requested policy and memory locking, wakes at absolute deadlines
//! `start + k·interval` ([`firmtime_rt::periodic`]) with the chosen sleeper.
//! Latency is wake time − deadline. Deadlines that pass while a thread is
//! still late are counted as missed, never skipped silently; after a full
//! run `ticks + missed == duration / interval` for every thread.
//!
//! Each thread records into a [`LatencyHistogram`] (exact min/max/mean/sd,
//! 3-digit percentiles) and a cyclictest [`ThreadHist`] (1 µs buckets, for
//! `--histogram` and `--rt-tests-json`). With `hybrid` (Varoquaux's "ask for
//! the interrupt in advance, then busy-wait") the CPU time spent spinning
//! is reported as a share of the run.
//!
//! # RT contract
//! Everything is allocated and touched before the loop; [`ThreadLoop::run`]
//! is **RT-safe**: it waits, records into preallocated histograms and
//! stores atomics ([`LiveThread`]) that a non-RT monitor reads for the
//! status line. It never allocates, locks or prints. With `--explain` it
//! also offers each wake-up to its preallocated worst-wake-up notes, which
//! flag the trace windows to keep ([`firmtime_trace::explain`]; atomics only).

use crate::check::{self, fmt_ns, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::load::{ChildOutcome, LoadSet, LoadSpec};
use crate::measure::{stop_flag, Cell, Progress};
use crate::output::{StatusLine, ThreadHist};
use crate::stats::{LatencyHistogram, Summary};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::periodic::Periodic;
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::sleep::{self, Mechanism, Sleeper};
use firmtime_rt::Errno;
use firmtime_rt::{memory, runaway};
use firmtime_trace::explain::{self, Explanation, Notes};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Varoquaux (2006), "Interpretation of the results": the RTC period of
/// his realfeel runs (1 kHz), in ns.
pub const PAPER_PERIOD_NS: u64 = 1_000_000;
/// Varoquaux (2006): "an interrupt request takes in average 0.5ms to get
/// through to the program it targets" (stock Linux 2.6.18, under stress).
pub const PAPER_MEAN_LATENCY_NS: i64 = 500_000;
/// Varoquaux (2006): "a jitter that can go up to half a period at 1kHz".
pub const PAPER_JITTER_NS: i64 = 500_000;
/// Varoquaux (2006): the RT_PREEMPT patch "has been measured to drop the
/// interrupt latency to 50 microseconds".
pub const PAPER_RT_PREEMPT_LATENCY_NS: i64 = 50_000;

/// Valid `--period` range, ns (10 µs … 1 s).
pub const INTERVAL_NS: std::ops::RangeInclusive<u64> = 10_000..=1_000_000_000;
/// Valid `--duration` range, ns (10 ms … 24 h).
pub const DURATION_NS: std::ops::RangeInclusive<u64> = 10_000_000..=86_400_000_000_000;
/// Valid `--histogram-buckets` range (1 µs each).
pub const BUCKETS: std::ops::RangeInclusive<usize> = 1..=100_000;

/// What to measure. Durations in ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Period of the wake-ups (`--period`; `--interval` its old spelling), default 1 ms.
    pub interval_ns: u64,
    /// Length of the run (`--duration`), default 10 s.
    pub duration_ns: u64,
    /// Scheduling policy of the measuring threads (`--policy`), default `fifo:80`.
    pub policy: Policy,
    /// CPUs to measure on, one pinned thread each (`--cpu`); `None` = all online.
    pub cpus: Option<Vec<usize>>,
    /// Lock all memory (`--mlock`), default on.
    pub mlock: bool,
    /// How to wait (`--sleeper`, `--margin` for `hybrid`), default `clock_nanosleep`.
    pub sleeper: Mechanism,
    /// Load generators run during the measurement (`--load`), default none.
    pub load: Vec<LoadSpec>,
    /// cyclictest histogram size in 1 µs buckets (`--histogram-buckets`), default 1000.
    pub histogram_buckets: usize,
    /// Hold `/dev/cpu_dma_latency` at this many µs while measuring
    /// (`--dma-latency`; cyclictest holds 0 by default), default none.
    pub dma_latency_us: Option<u32>,
    /// RLIMIT_RTTIME budget before a spinning RT thread is demoted, default 1 s.
    pub runaway_limit_ns: u64,
    /// Timer slack of the measuring threads (`--timer-slack`), default: leave as is.
    pub timer_slack_ns: Option<u64>,
    /// Accept weaker settings when refused, recording each downgrade
    /// (`--allow-downgrade`), default off: a refusal is an error.
    pub allow_downgrade: bool,
    /// Explain the worst wake-ups from a trace (`--explain`), default off
    /// (see [`firmtime_trace::explain`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<explain::Config>,
    /// The firmtime binary that runs the load children (`None` = this
    /// executable).
    #[serde(skip)]
    pub load_exe: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            interval_ns: 1_000_000,
            duration_ns: 10_000_000_000,
            policy: Policy::Fifo { priority: 80 },
            cpus: None,
            mlock: true,
            sleeper: Mechanism::ClockNanosleep,
            load: Vec::new(),
            histogram_buckets: 1000,
            dma_latency_us: None,
            runaway_limit_ns: 1_000_000_000,
            timer_slack_ns: None,
            allow_downgrade: false,
            explain: None,
            load_exe: None,
        }
    }
}

impl Config {
    /// `--quick`: 5 s instead of 10 s.
    pub fn quick() -> Self {
        Self {
            duration_ns: 5_000_000_000,
            ..Self::default()
        }
    }

    /// `--full`: one minute.
    pub fn full() -> Self {
        Self {
            duration_ns: 60_000_000_000,
            ..Self::default()
        }
    }

    /// Number of deadlines in the run: `duration / interval`.
    pub fn deadlines(&self) -> u64 {
        self.duration_ns / self.interval_ns.max(1)
    }

    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        check::ns_in_range("--period", self.interval_ns, &INTERVAL_NS)?;
        if !DURATION_NS.contains(&self.duration_ns) || self.duration_ns < self.interval_ns {
            let note = format!(" and at least one --period ({})", fmt_ns(self.interval_ns));
            let d = self.duration_ns;
            return Err(check::out_of_range(
                "--duration",
                d,
                &DURATION_NS,
                fmt_ns,
                &note,
            ));
        }
        self.policy
            .validate()
            .map_err(|e| invalid(format!("--policy {}: {}", self.policy, e.message())))?;
        check::in_range_note(
            "--histogram-buckets",
            self.histogram_buckets,
            &BUCKETS,
            " (1 µs each)",
        )?;
        if let Mechanism::Hybrid { margin_ns } = self.sleeper {
            if margin_ns == 0 || margin_ns >= self.interval_ns {
                return Err(invalid(format!(
                    "--margin {} is out of range: valid is 1ns to less than --period ({})",
                    fmt_ns(margin_ns),
                    fmt_ns(self.interval_ns)
                )));
            }
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(invalid(format!(
                    "--cpu is empty: valid are online CPUs {}",
                    sched::format_cpu_list(&sched::online_cpus())
                )));
            }
            check::online("--cpu: CPU", cpus.iter().copied())?;
        }
        if self.runaway_limit_ns < 1_000_000 {
            return Err(invalid(format!(
                "runaway limit {} is too short: valid is at least 1ms",
                fmt_ns(self.runaway_limit_ns)
            )));
        }
        if let Some(e) = &self.explain {
            e.validate()?;
        }
        for l in &self.load {
            l.validate()
                .map_err(|e| invalid(format!("--load {}: {}", l, e.message())))?;
        }
        Ok(())
    }

    /// The CPUs that get a measuring thread: `cpus`, or every online CPU.
    pub fn selected_cpus(&self) -> Vec<usize> {
        let mut v = self.cpus.clone().unwrap_or_else(sched::online_cpus);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The request each measuring thread applies (pinned to `cpu`).
    pub fn request(&self, cpu: usize) -> RtRequest {
        RtRequest {
            policy: self.policy,
            mlock: self.mlock,
            prefault_stack: if self.mlock { 256 * 1024 } else { 0 },
            cpus: Some(vec![cpu]),
            dma_latency_us: self.dma_latency_us,
            timer_slack_ns: self.timer_slack_ns,
            allow_downgrade: self.allow_downgrade,
        }
    }
}

/// Live statistics of one measuring thread: stored by the RT loop (atomics
/// only), read by a non-RT monitor for the cyclictest status line.
#[derive(Debug)]
pub struct LiveThread {
    cycles: AtomicU64,
    act_ns: AtomicI64,
    min_ns: AtomicI64,
    max_ns: AtomicI64,
    sum_ns: AtomicI64,
    tid: AtomicI32,
    prio: AtomicI32,
}

impl Default for LiveThread {
    fn default() -> Self {
        Self {
            cycles: AtomicU64::new(0),
            act_ns: AtomicI64::new(0),
            min_ns: AtomicI64::new(i64::MAX),
            max_ns: AtomicI64::new(i64::MIN),
            sum_ns: AtomicI64::new(0),
            tid: AtomicI32::new(0),
            prio: AtomicI32::new(0),
        }
    }
}

impl LiveThread {
    /// Stores one latency. **RT-safe** (relaxed atomic stores by the single
    /// writer).
    #[inline]
    pub fn store(&self, latency_ns: i64) {
        let r = Ordering::Relaxed;
        self.act_ns.store(latency_ns, r);
        if latency_ns < self.min_ns.load(r) {
            self.min_ns.store(latency_ns, r);
        }
        if latency_ns > self.max_ns.load(r) {
            self.max_ns.store(latency_ns, r);
        }
        self.sum_ns
            .store(self.sum_ns.load(r).saturating_add(latency_ns), r);
        self.cycles
            .store(self.cycles.load(r) + 1, Ordering::Release);
    }

    /// Cycles stored so far.
    pub fn cycles(&self) -> u64 {
        self.cycles.load(Ordering::Acquire)
    }

    /// cyclictest's status line for thread `thread` at `interval_ns`
    /// (values in µs, truncated as cyclictest does). Values may be a cycle
    /// apart from each other: they are read while the loop runs.
    pub fn status_line(&self, thread: usize, interval_ns: u64) -> StatusLine {
        let r = Ordering::Relaxed;
        let cycles = self.cycles();
        let (min, max) = if cycles == 0 {
            (0, 0)
        } else {
            (self.min_ns.load(r) / 1000, self.max_ns.load(r) / 1000)
        };
        StatusLine {
            thread,
            tid: self.tid.load(r),
            prio: self.prio.load(r),
            interval_us: interval_ns / 1000,
            cycles,
            min_us: min,
            act_us: self.act_ns.load(r) / 1000,
            avg_us: self.sum_ns.load(r) / cycles.max(1) as i64 / 1000,
            max_us: max,
        }
    }
}

/// Why [`ThreadLoop::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// Every deadline was either a tick or counted as missed.
    Done,
    /// The stop flag was set (Ctrl-C); what was measured is kept.
    Stopped,
    /// The sleeper failed with this error.
    Failed(Errno),
}

/// The preallocated storage of one measuring thread and its RT loop.
#[derive(Debug, Clone)]
pub struct ThreadLoop {
    /// Latency of every tick, ns.
    pub latency: LatencyHistogram,
    /// The same latencies in cyclictest's 1 µs buckets.
    pub cyclictest: ThreadHist,
    /// The worst wake-ups, for `--explain` (notes nothing unless given a capacity).
    pub notes: Notes,
}

impl ThreadLoop {
    /// Allocates both histograms (`buckets` 1 µs buckets for cyclictest's).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] if `buckets` is 0.
    pub fn new(buckets: usize) -> Result<Self> {
        Ok(Self {
            latency: LatencyHistogram::new(),
            cyclictest: ThreadHist::new(buckets)?,
            notes: Notes::default(),
        })
    }

    /// Waits for the deadlines of `periodic` with `sleeper` until deadline
    /// index `deadlines` is reached (ticks + missed == deadlines) or `stop`
    /// is set, recording each latency here and in `live`. **RT-safe.**
    pub fn run<S: Sleeper + ?Sized>(
        &mut self,
        sleeper: &mut S,
        periodic: &mut Periodic,
        deadlines: u64,
        live: &LiveThread,
        stop: &AtomicBool,
    ) -> LoopEnd {
        while periodic.next_index() < deadlines {
            if stop.load(Ordering::Relaxed) {
                return LoopEnd::Stopped;
            }
            self.notes.sleeping_until(periodic.next_deadline_ns());
            match periodic.wait(sleeper) {
                Ok(tick) => {
                    self.latency.record(tick.latency_ns);
                    self.cyclictest.record_ns(tick.latency_ns);
                    self.notes.offer(&tick);
                    live.store(tick.latency_ns);
                }
                Err(e) => return LoopEnd::Failed(e),
            }
        }
        LoopEnd::Done
    }
}

/// Deadlines of the run's first `deadlines` that `periodic` counted as
/// missed: a last late wake-up may pass deadlines beyond the run's end,
/// which are not part of the run. **RT-safe.**
pub fn missed_within(periodic: &Periodic, deadlines: u64) -> u64 {
    periodic
        .missed_total()
        .min(deadlines.saturating_sub(periodic.ticks()))
}

/// One bin of a linear histogram: samples with `low_ns <= latency < low_ns + width`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bin {
    /// Lower edge, ns.
    pub low_ns: i64,
    /// The lower edge in units of the period (Varoquaux's axis).
    pub low_periods: f64,
    /// Samples in the bin.
    pub count: u64,
}

/// What one measuring thread measured.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadResult {
    /// Thread index (cyclictest's `T:`).
    pub thread: usize,
    /// The CPU it was pinned to.
    pub cpu: usize,
    /// Latency summary; `summary.missed` = deadlines missed.
    pub summary: Summary,
    /// Wake-ups measured.
    pub ticks: u64,
    /// Deadlines that passed while the thread was late (not measured, counted).
    pub missed: u64,
    /// Deadlines in the run (`ticks + missed` unless interrupted).
    pub deadlines: u64,
    /// Samples beyond the histogram's range (still exact in min/max/mean).
    pub clamped: u64,
    /// From the first deadline to the last wake-up, ns.
    pub elapsed_ns: u64,
    /// CPU time the sleeper spent spinning, ns (`spin`, `hybrid`; else 0).
    pub spin_ns: u64,
    /// `spin_ns / elapsed_ns`: the share of a CPU burnt busy-waiting.
    pub spin_fraction: f64,
    /// True if runaway protection demoted the thread to SCHED_OTHER (its
    /// latencies after that were not measured under the requested policy).
    pub demoted: bool,
    /// The sleeper's error, if it failed mid-run (the ticks before it are kept).
    pub error: Option<String>,
    /// Linear histogram in 1 µs bins.
    pub histogram_us: Vec<Bin>,
    /// Linear histogram in bins of 1/100 of the period (Varoquaux's plot).
    pub histogram_periods: Vec<Bin>,
    /// The conditions this thread obtained.
    pub conditions: RtConditions,
    /// Latencies, for plots (not serialized).
    #[serde(skip)]
    pub latency: LatencyHistogram,
    /// cyclictest histogram, for `--histogram`/`--rt-tests-json` (not serialized).
    #[serde(skip)]
    pub cyclictest: ThreadHist,
    /// The worst wake-ups noted for `--explain` (not serialized).
    #[serde(skip)]
    pub notes: Notes,
}

/// Runaway protection in force during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Runaway {
    /// RLIMIT_RTTIME soft limit, ns.
    pub limit_ns: u64,
    /// Threads demoted by the SIGXCPU handler during the run.
    pub demotions: u64,
}

/// The result of `lab cyclic`.
#[derive(Debug, Clone, Serialize)]
pub struct CyclicResult {
    /// The configuration measured.
    pub config: Config,
    /// One cell per selected CPU; skipped when the sleeper is not available there.
    pub threads: Vec<Cell<ThreadResult>>,
    /// All measured threads together (`missed` summed).
    pub combined: Summary,
    /// Combined linear histogram in 1 µs bins.
    pub combined_histogram_us: Vec<Bin>,
    /// Runaway protection, when installed (RT policy with a spinning sleeper).
    pub runaway: Option<Runaway>,
    /// True if any thread was demoted: the run is not fully under the requested policy.
    pub demoted: bool,
    /// The load children and how they ended.
    pub load: Vec<ChildOutcome>,
    /// True when interrupted (Ctrl-C): fewer deadlines than asked.
    pub partial: bool,
    /// Why the worst wake-ups were late (`--explain`; see [`firmtime_trace::explain`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explanation>,
}

impl CyclicResult {
    /// The measured threads, in order.
    pub fn measured(&self) -> impl Iterator<Item = &ThreadResult> {
        self.threads.iter().filter_map(Cell::measured)
    }
}

fn bins(h: &LatencyHistogram, width_ns: i64, period_ns: u64) -> Vec<Bin> {
    h.rebin(width_ns.max(1))
        .unwrap_or_default()
        .into_iter()
        .map(|(low_ns, count)| Bin {
            low_ns,
            low_periods: low_ns as f64 / period_ns as f64,
            count,
        })
        .collect()
}

/// Runs the measurement (see the module docs).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; [`ErrorKind::Realtime`]
/// if a thread's conditions are refused (never a silent downgrade);
/// [`ErrorKind::Load`] if a load child cannot start.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<CyclicResult> {
    run_with_status(config, progress, &mut |_| {})
}

/// Like [`run`], and calls `status` about ten times a second from the
/// calling (non-RT) thread with one cyclictest status line per thread.
///
/// # Errors
/// As [`run`].
pub fn run_with_status(
    config: &Config,
    progress: &mut dyn Progress,
    status: &mut dyn FnMut(&[StatusLine]),
) -> Result<CyclicResult> {
    config.validate()?;
    let cpus = config.selected_cpus();
    let deadlines = config.deadlines();
    let stop = stop_flag();

    let mut load = if config.load.is_empty() {
        None
    } else {
        let exe = match &config.load_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe()?,
        };
        let d = Duration::from_nanos(config.duration_ns) + Duration::from_secs(5);
        Some(LoadSet::spawn(&exe, &config.load, d)?)
    };

    let guard = if config.policy.is_rt_or_deadline() && config.sleeper.spins() {
        Some(runaway::install(Duration::from_nanos(
            config.runaway_limit_ns,
        ))?)
    } else {
        None
    };

    let session = match &config.explain {
        // The cyclic threads wake only by their own timer: the fewer
        // records on their wake-up path (see `WokenBy`).
        // Only the measured CPUs' events, and ring buffers sized from the
        // event rate measured with the load already running (issue 29:
        // lossless by design). `FIRMTIME_EXPLAIN_UNFILTERED=1` records as
        // before, for comparison (scripts/lab-explain-loss.sh).
        Some(e) => Some(explain::Session::start(
            &explain::Config {
                woken_by: explain::WokenBy::OwnTimer,
                cpus: Some(cpus.clone()),
                size_from_rate: true,
                unfiltered: e.unfiltered || explain_unfiltered_env(),
                ..e.clone()
            },
            "firmtime-cycl*",
        )?),
        None => None,
    };
    let flags = session.as_ref().map(explain::Session::flags);
    let lives: Vec<LiveThread> = cpus.iter().map(|_| LiveThread::default()).collect();
    let line = StartLine::new(cpus.len());
    progress.begin("cyclic", config.duration_ns / 1_000_000);
    let outcomes: Vec<Result<Cell<ThreadResult>>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(cpus.len());
        for (i, (&cpu, live)) in cpus.iter().zip(&lives).enumerate() {
            let h = std::thread::Builder::new()
                .name(format!("firmtime-cyclic-{cpu}"))
                .spawn_scoped(s, {
                    let (flags, line) = (flags.clone(), &line);
                    move || measure_thread(config, i, cpu, deadlines, live, flags, line)
                })
                .map_err(|e| {
                    Error::new(ErrorKind::Io, format!("cannot start measuring thread: {e}"))
                });
            handles.push(h);
        }
        let t0 = monotonic_ns();
        let mut shown = 0;
        let mut followed = session.is_none();
        while handles
            .iter()
            .any(|h| h.as_ref().is_ok_and(|h| !h.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(100));
            if !followed {
                // The measured threads' page faults by thread id once all
                // are known (until then by name: no gap). A refused filter
                // leaves the name's, a superset.
                let tids: Vec<i32> = lives
                    .iter()
                    .map(|l| l.tid.load(Ordering::Relaxed))
                    .collect();
                if tids.iter().all(|&t| t > 0) {
                    if let Some(s) = &session {
                        let _ = s.follow(&tids);
                    }
                    followed = true;
                }
            }
            let lines: Vec<StatusLine> = lives
                .iter()
                .enumerate()
                .map(|(i, l)| l.status_line(i, config.interval_ns))
                .collect();
            status(&lines);
            let ms = (monotonic_ns() - t0) / 1_000_000;
            let ms = ms.min(config.duration_ns / 1_000_000);
            progress.advance(ms - shown);
            shown = ms;
            if let Some(l) = load.as_mut() {
                if let Err(e) = l.check() {
                    stop.store(true, Ordering::SeqCst);
                    return vec![Err(e)];
                }
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h?.join().unwrap_or_else(|_| {
                    Err(Error::new(ErrorKind::Io, "a measuring thread panicked"))
                })
            })
            .collect()
    });
    progress.end();
    let recorded = session.map(explain::Session::finish).transpose();
    if config.mlock {
        let _ = memory::unlock_all();
    }
    let load = load.as_mut().map(LoadSet::stop).unwrap_or_default();
    let runaway = guard.as_ref().map(|g| Runaway {
        limit_ns: config.runaway_limit_ns,
        demotions: g.demotions(),
    });
    drop(guard);

    let threads = outcomes.into_iter().collect::<Result<Vec<_>>>()?;
    let recorded = recorded?;
    let mut combined_hist = LatencyHistogram::new();
    let mut missed = 0;
    let mut partial = false;
    let mut demoted = false;
    for t in threads.iter().filter_map(Cell::measured) {
        combined_hist.merge(&t.latency)?;
        missed += t.missed;
        partial |= t.ticks + t.missed < t.deadlines;
        demoted |= t.demoted;
    }
    let explain = recorded.map(|rec| explain_threads(config, &threads, rec));
    Ok(CyclicResult {
        explain,
        config: config.clone(),
        combined: combined_hist.summary(missed),
        combined_histogram_us: bins(&combined_hist, 1000, config.interval_ns),
        threads,
        runaway,
        demoted,
        load,
        partial: partial || stop.load(Ordering::Relaxed),
    })
}

/// How many wake-ups a thread notes for `--explain` in a run of
/// `deadlines`: its `worst` (`--explain-worst`), and at least a quarter of
/// the run (at most [`explain::WORST`]'s end), so that every wake-up that
/// missed a deadline can be explained: a SCHED_OTHER thread under the
/// stress load misses with about one wake-up in ten, and with 256 notes
/// lost 135–262 missing wake-ups per 5 s run to `not_noted` (issue 29: 69 %
/// of misses explained with nothing lost). ~48 bytes a note, allocated
/// before the loop.
pub fn notes_kept(deadlines: u64, worst: usize) -> usize {
    let quarter = usize::try_from(deadlines / 4).unwrap_or(usize::MAX);
    worst.max(quarter.min(*explain::WORST.end()))
}

/// `FIRMTIME_EXPLAIN_UNFILTERED=1`: record the explaining trace as before
/// issue 29 (every CPU, the fixed buffer), for a before/after comparison.
pub const EXPLAIN_UNFILTERED_ENV: &str = "FIRMTIME_EXPLAIN_UNFILTERED";

fn explain_unfiltered_env() -> bool {
    std::env::var(EXPLAIN_UNFILTERED_ENV).is_ok_and(|v| v == "1")
}

/// Where the measuring threads wait for one another before their first
/// deadline: one thread's set-up (it starts unpinned, locks memory,
/// allocates its histogram) must not fall into another's measurement.
struct StartLine {
    arrived: AtomicUsize,
    threads: usize,
}

impl StartLine {
    fn new(threads: usize) -> StartLine {
        StartLine {
            arrived: AtomicUsize::new(0),
            threads,
        }
    }

    /// A thread's place on the line: it arrives when it calls
    /// [`Arrival::wait`] or, failing before that, when it is dropped, so
    /// the others never wait for a thread that has given up.
    fn arrival(&self) -> Arrival<'_> {
        Arrival {
            line: self,
            arrived: false,
        }
    }
}

struct Arrival<'a> {
    line: &'a StartLine,
    arrived: bool,
}

impl Arrival<'_> {
    /// Arrives, then waits (sleeping 100 µs at a time, at most 2 s) until
    /// every thread has arrived.
    fn wait(&mut self) {
        if !self.arrived {
            self.arrived = true;
            self.line.arrived.fetch_add(1, Ordering::SeqCst);
        }
        let give_up = monotonic_ns() + 2_000_000_000;
        while self.line.arrived.load(Ordering::SeqCst) < self.line.threads
            && monotonic_ns() < give_up
        {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if !self.arrived {
            self.line.arrived.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// One measuring thread: set up, open the sleeper here (some are
/// thread-bound), wait for the others at the start line, run the RT loop,
/// read back what happened.
fn measure_thread(
    config: &Config,
    thread: usize,
    cpu: usize,
    deadlines: u64,
    live: &LiveThread,
    flags: Option<std::sync::Arc<explain::Flags>>,
    line: &StartLine,
) -> Result<Cell<ThreadResult>> {
    let mut arrival = line.arrival();
    let rt = setup::apply(&config.request(cpu))?;
    let mut sleeper = match sleep::open(config.sleeper) {
        Ok(s) => s,
        Err(e) => {
            return Ok(Cell::Skipped {
                reason: format!("{} on CPU {cpu}: {}", config.sleeper, e.message()),
            })
        }
    };
    live.tid
        .store(rt.conditions.obtained.tid, Ordering::Relaxed);
    live.prio.store(
        i32::from(rt.conditions.obtained.priority),
        Ordering::Relaxed,
    );
    let mut lp = ThreadLoop::new(config.histogram_buckets)?;
    if let (Some(e), Some(f)) = (&config.explain, flags) {
        let back = explain::lookback_ns(config.interval_ns);
        let top = explain::flag_top(deadlines, e.worst);
        lp.notes = Notes::flagging(notes_kept(deadlines, e.worst), f, cpu, back)
            .flag_only(top, e.above_ns);
    }
    lp.cyclictest.cpu = cpu as i32;
    arrival.wait();
    let interval = config.interval_ns;
    let mut periodic = Periodic::try_new(monotonic_ns() + interval, interval)?;
    let start = periodic.start_ns();
    let end = lp.run(&mut *sleeper, &mut periodic, deadlines, live, stop_flag());
    let last_wake = monotonic_ns();
    lp.notes.done();
    let spin_ns = sleeper.spin_ns();
    drop(sleeper);
    let demoted = config.policy.is_rt_or_deadline()
        && sched::current_thread().is_ok_and(|p| p != config.policy);
    let elapsed_ns = last_wake.saturating_sub(start);
    let period = i64::try_from(interval).unwrap_or(i64::MAX);
    let missed = missed_within(&periodic, deadlines);
    Ok(Cell::Measured(ThreadResult {
        thread,
        cpu,
        summary: lp.latency.summary(missed),
        ticks: periodic.ticks(),
        missed,
        deadlines,
        clamped: lp.latency.clamped(),
        elapsed_ns,
        spin_ns,
        spin_fraction: if elapsed_ns == 0 {
            0.0
        } else {
            spin_ns as f64 / elapsed_ns as f64
        },
        demoted,
        error: match end {
            LoopEnd::Failed(e) => Some(format!("{} failed: {e}", config.sleeper)),
            _ => None,
        },
        histogram_us: bins(&lp.latency, 1000, interval),
        histogram_periods: bins(&lp.latency, period / 100, interval),
        conditions: rt.conditions.clone(),
        latency: lp.latency,
        cyclictest: lp.cyclictest,
        notes: lp.notes,
    }))
}

/// Attributes the measured threads' outliers: those above `--explain-above`
/// (or the thread's p99.9) and those that missed a deadline.
fn explain_threads(
    config: &Config,
    threads: &[Cell<ThreadResult>],
    rec: explain::Recorded,
) -> Explanation {
    let above = config.explain.as_ref().and_then(|e| e.above_ns);
    let targets: Vec<explain::Target> = threads
        .iter()
        .filter_map(Cell::measured)
        .map(|t| explain::Target {
            thread: t.thread,
            cpu: t.cpu,
            tid: t.conditions.obtained.tid,
            period_ns: config.interval_ns,
            slack_ns: t.conditions.obtained.timer_slack_ns,
            threshold_ns: above.map_or_else(
                || t.summary.p99_9_ns.unwrap_or(0),
                |a| i64::try_from(a).unwrap_or(i64::MAX),
            ),
            notes: t.notes.sorted(),
            missing_not_kept: t.notes.missing_not_kept(),
            missed: t.missed,
        })
        .collect();
    explain::explain(rec, &targets, &explain::this_machine())
}
