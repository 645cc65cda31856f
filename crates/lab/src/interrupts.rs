//! `lab interrupts`: what a higher timer-interrupt rate costs a CPU-bound
//! program, as Etsion, Tsafrir and Feitelson (2003) measured it (§3, Figs
//! 2, 3 and 8).
//!
//! HZ is fixed when the kernel is built, so the cost of more interrupts is
//! imposed instead: a SCHED_FIFO thread pinned to the measured CPU wakes at
//! `rate` Hz (absolute deadlines, `clock_nanosleep`) while the paper's sort
//! benchmark — an array about half the L2 cache, refilled from a seeded PRNG
//! and sorted again and again ([`SortBench`]) — runs in 1, 2, 4 or 8
//! SCHED_OTHER threads pinned to the same CPU for a fixed time per cell.
//! Throughput is numbers sorted per second.
//!
//! Every repeat runs all cells in interleaved order (for each level: no
//! extra timer, then each rate), so each rate is compared with the baseline
//! of the same repeat (paired runs), and the medians over repeats are
//! reported, so that a noisy machine (other load, time stolen by a
//! hypervisor) moves the spread more than the figure.
//!
//! The added overhead `1 − throughput/baseline` is split like the paper's
//! 9 % / 91 %: **direct** = the timer thread's own CPU time
//! (CLOCK_THREAD_CPUTIME_ID) as a share of the cell, i.e. the wake-up path;
//! **indirect** = the rest (cache and TLB refills, scheduler work the
//! sorters are charged for). The hard-interrupt handler itself is charged
//! to whichever thread it interrupts, so direct is a lower bound.
//!
//! # RT contract
//! The timer loop ([`timer_loop`]) is **RT-safe**: it sleeps to absolute
//! deadlines and counts. The sort threads are ordinary SCHED_OTHER load.

use crate::check::{self, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::frames::Machine;
use crate::measure::{run_in_thread, stop_flag, Cell, Progress};
use firmtime_rt::clock::{monotonic_ns, read_ns};
use firmtime_rt::periodic::Periodic;
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::sleep::ClockNanosleepSleeper;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

/// Etsion et al. (2003) §3, P-III 664 MHz, one sorter, 50 ms quanta: time to
/// sort the array once at 100 Hz, ns (12.675 ms).
pub const PAPER_SORT_100HZ_NS: u64 = 12_675_000;
/// The same at 10,000 Hz, ns (13.397 ms): 5.7 % more.
pub const PAPER_SORT_10KHZ_NS: u64 = 13_397_000;
/// Etsion et al. (2003) §3: share of that added overhead that is direct
/// (interrupt handling: 133 interrupts × 0.49 µs = 65 µs of 722 µs).
pub const PAPER_DIRECT_SHARE: f64 = 0.09;
/// Etsion et al. (2003) §3: share that is indirect (cache effects, scheduler): 91 %.
pub const PAPER_INDIRECT_SHARE: f64 = 0.91;
/// Etsion et al. (2003) §3: indirect share "may even reach 99%" (P-IV,
/// Athlon, shorter quanta).
pub const PAPER_INDIRECT_SHARE_MAX: f64 = 0.99;
/// Etsion et al. (2003) Table 1: P-III 664 interrupt processing without the
/// 8253 access, ns (0.49 µs).
pub const PAPER_IRQ_NS: u64 = 490;
/// Etsion et al. (2003) §7 on Fig 3: at 20,000 Hz with 6-tick quanta "the
/// additional overhead can reach 35% on contemporary architectures".
pub const PAPER_20KHZ_SHORT_QUANTA_OVERHEAD: f64 = 0.35;
/// Etsion et al. (2003) Fig 8 (8 sorters): P-III 664 at 100 Hz / 60 ms
/// quanta sorts about 2,559,000 numbers per second.
pub const PAPER_FIG8_PIII664_BASE: f64 = 2_559_000.0;
/// Etsion et al. (2003) Fig 8: P-III 1.133 GHz at 20,000 Hz / 100 µs quanta
/// sorts about 3,136,000 numbers per second.
pub const PAPER_FIG8_PIII1133_EXTREME: f64 = 3_136_000.0;
/// Etsion et al. (2003) §3: the paper's L2 cache (all but the P-II 350), bytes.
pub const PAPER_L2_BYTES: u64 = 256 * 1024;

/// Valid `--rates` range, Hz.
pub const RATE_HZ: RangeInclusive<u32> = 1..=100_000;
/// Valid `--levels` range (sort threads).
pub const LEVEL: RangeInclusive<u32> = 1..=64;
/// Valid `--duration` range, ns: 100 ms … 60 s.
pub const CELL_NS: RangeInclusive<u64> = 100_000_000..=60_000_000_000;
/// Valid `--repeats` range.
pub const REPEATS: RangeInclusive<u32> = 1..=100;
/// Valid `--array-size` range, bytes: 4 KiB … 256 MiB.
pub const ARRAY_BYTES: RangeInclusive<u64> = 4096..=256 * 1024 * 1024;
/// Where the L2 size is read.
pub const L2_PATH: &str = "/sys/devices/system/cpu/cpu0/cache/index2/size";

/// What to measure. Durations in ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Timer rates (`--rates`), default 100 Hz, 1 kHz, 5 kHz, 10 kHz, 20 kHz.
    pub rates_hz: Vec<u32>,
    /// Multiprogramming levels (`--levels`), default 1, 2, 4, 8.
    pub levels: Vec<u32>,
    /// Length of each cell (`--duration`), default 1 s.
    pub cell_ns: u64,
    /// Repeats of the whole interleaved matrix (`--repeats`), default 3.
    pub repeats: u32,
    /// The measured CPU (`--cpu`); `None` = the last online CPU.
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority of the timer thread (`--priority`), default 80.
    pub timer_priority: u8,
    /// Bytes of each sorter's array (`--array-size`); `None` = half the L2.
    pub array_bytes: Option<u64>,
    /// PRNG seed of the arrays (`--seed`), default 1.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            rates_hz: vec![100, 1000, 5000, 10_000, 20_000],
            levels: vec![1, 2, 4, 8],
            cell_ns: 1_000_000_000,
            repeats: 3,
            cpu: None,
            timer_priority: 80,
            array_bytes: None,
            seed: 1,
        }
    }
}

impl Config {
    /// `--quick`: 1 kHz and 10 kHz, levels 1 and 4, 0.5 s cells, 3 repeats (≈ 10 s).
    pub fn quick() -> Self {
        Self {
            rates_hz: vec![1000, 10_000],
            levels: vec![1, 4],
            cell_ns: 500_000_000,
            ..Self::default()
        }
    }

    /// `--full`: every rate and level, 2 s cells, 5 repeats (≈ 4 min).
    pub fn full() -> Self {
        Self {
            cell_ns: 2_000_000_000,
            repeats: 5,
            ..Self::default()
        }
    }

    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        if self.rates_hz.is_empty() {
            return Err(invalid(
                "--rates is empty: give at least one rate, 1 to 100000 Hz",
            ));
        }
        for &r in &self.rates_hz {
            check::in_range_note("--rates", r, &RATE_HZ, " Hz")?;
        }
        if self.levels.is_empty() {
            return Err(invalid(
                "--levels is empty: give at least one level, 1 to 64",
            ));
        }
        for &l in &self.levels {
            check::in_range("--levels", l, &LEVEL)?;
        }
        check::ns_in_range("--duration", self.cell_ns, &CELL_NS)?;
        check::in_range("--repeats", self.repeats, &REPEATS)?;
        check::in_range("--priority", self.timer_priority, &(1..=99))?;
        if let Some(b) = self.array_bytes {
            check::in_range_note("--array-size", b, &ARRAY_BYTES, " bytes")?;
        }
        check::online("--cpu", self.cpu)
    }

    /// The timer thread's request: SCHED_FIFO at `timer_priority`, pinned to `cpu`.
    pub fn timer_request(&self, cpu: usize) -> RtRequest {
        RtRequest {
            policy: Policy::Fifo {
                priority: self.timer_priority,
            },
            cpus: Some(vec![cpu]),
            ..RtRequest::default()
        }
    }
}

/// Parses a sysfs cache size (`2048K`, `8M`, `512`) into bytes.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1024),
        'M' | 'm' => (&t[..t.len() - 1], 1024 * 1024),
        'G' | 'g' => (&t[..t.len() - 1], 1024 * 1024 * 1024),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .map(|n| n * mult)
        .filter(|&n| n > 0)
}

/// This CPU's L2 size from [`L2_PATH`], if readable.
pub fn l2_cache_bytes() -> Option<u64> {
    parse_cache_size(&std::fs::read_to_string(L2_PATH).ok()?)
}

/// The sort benchmark of one thread: an array refilled from the seeded
/// [`Rng`](firmtime_rt::rng::Rng) and sorted (pattern-defeating quicksort, an introsort
/// like the paper's STL sort) on every iteration.
#[derive(Debug, Clone)]
pub struct SortBench {
    data: Vec<u32>,
    rng: firmtime_rt::rng::Rng,
}

impl SortBench {
    /// An array of `elements` numbers, filled once so its pages are touched.
    pub fn new(elements: usize, seed: u64) -> Self {
        let mut b = Self {
            data: vec![0; elements.max(1)],
            rng: firmtime_rt::rng::Rng::new(seed),
        };
        b.fill();
        b
    }

    fn fill(&mut self) {
        for x in &mut self.data {
            *x = (self.rng.next_u64() >> 32) as u32;
        }
    }

    /// One iteration: refill, sort. Returns the numbers sorted.
    pub fn iterate(&mut self) -> u64 {
        self.fill();
        self.data.sort_unstable();
        self.data.len() as u64
    }

    /// The array (sorted after [`SortBench::iterate`]).
    pub fn data(&self) -> &[u32] {
        &self.data
    }
}

/// What the timer thread did in one run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TimerRun {
    /// Requested rate, Hz.
    pub rate_hz: u32,
    /// Wake-ups taken.
    pub wakeups: u64,
    /// Deadlines that passed while it was late (counted, not taken).
    pub missed: u64,
    /// Its own CPU time (CLOCK_THREAD_CPUTIME_ID), ns.
    pub cpu_ns: u64,
    /// From its first deadline to its last wake-up, ns.
    pub elapsed_ns: u64,
}

impl TimerRun {
    /// Wake-ups per second achieved.
    pub fn achieved_hz(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.wakeups as f64 * 1e9 / self.elapsed_ns as f64
        }
    }

    /// CPU time per wake-up, ns.
    pub fn cpu_per_wakeup_ns(&self) -> Option<u64> {
        self.cpu_ns.checked_div(self.wakeups)
    }
}

/// Wakes every `period_ns` with `clock_nanosleep` to absolute deadlines until
/// `done` is set, and returns what it did. **RT-safe.**
pub fn timer_loop(rate_hz: u32, done: &AtomicBool) -> TimerRun {
    let period = 1_000_000_000 / u64::from(rate_hz.max(1));
    let mut sleeper = ClockNanosleepSleeper;
    let cpu0 = read_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    let mut p = Periodic::new(monotonic_ns() + period, period);
    let start = p.start_ns();
    let mut last = start;
    while !done.load(Ordering::Relaxed) {
        match p.wait(&mut sleeper) {
            Ok(t) => last = t.wake_ns,
            Err(_) => break,
        }
    }
    TimerRun {
        rate_hz,
        wakeups: p.ticks(),
        missed: p.missed_total(),
        cpu_ns: read_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu0),
        elapsed_ns: last.saturating_sub(start),
    }
}

/// One run of one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Which repeat (0-based).
    pub repeat: u32,
    /// Complete sorts over all threads.
    pub sorts: u64,
    /// Numbers sorted.
    pub sorted: u64,
    /// From the start of the cell until the last sorter finished its sort, ns.
    pub elapsed_ns: u64,
    /// `sorted / elapsed`, numbers per second.
    pub throughput: f64,
    /// The timer thread, when the cell has one.
    pub timer: Option<TimerRun>,
}

/// The figures of one cell: medians over the repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateMeasured {
    /// Each repeat, in order.
    pub runs: Vec<Run>,
    /// Median throughput, numbers per second.
    pub throughput: f64,
    /// Median over repeats of `1 − throughput/baseline` (same repeat); `None`
    /// for the baseline.
    pub overhead: Option<f64>,
    /// Median share of the CPU taken by the timer thread itself.
    pub direct: Option<f64>,
    /// Median of `overhead − direct` per repeat.
    pub indirect: Option<f64>,
    /// `direct / overhead` of the medians (the paper: 9 %); `None` when the
    /// overhead is not positive (lost in the noise).
    pub direct_share: Option<f64>,
    /// Median CPU time of the timer thread per wake-up, ns.
    pub cpu_per_wakeup_ns: Option<u64>,
    /// Median achieved wake-up rate, Hz.
    pub achieved_hz: Option<f64>,
    /// Timer deadlines missed over all repeats.
    pub missed: u64,
}

/// One cell: a multiprogramming level and a timer rate (`None` = no extra timer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateCell {
    /// Sort threads.
    pub level: u32,
    /// Timer rate, Hz; `null` for the baseline without an extra timer.
    pub rate_hz: Option<u32>,
    /// Measured, or skipped with the reason (SCHED_FIFO refused).
    pub result: Cell<RateMeasured>,
}

/// The result of `lab interrupts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterruptsResult {
    /// The configuration measured.
    pub config: Config,
    /// The kernel it was measured on.
    pub machine: Machine,
    /// The measured CPU.
    pub cpu: usize,
    /// L2 size read from sysfs, bytes (`null` if unreadable).
    pub l2_bytes: Option<u64>,
    /// Bytes of each sorter's array.
    pub array_bytes: u64,
    /// Numbers in each array (`u32`).
    pub array_elements: u64,
    /// Where the array size came from.
    pub array_source: String,
    /// The timer thread's conditions (`null` if refused).
    pub timer_conditions: Option<RtConditions>,
    /// Level-major, baseline first, then each rate.
    pub cells: Vec<RateCell>,
    /// True when interrupted (Ctrl-C): repeats are missing.
    pub partial: bool,
}

impl InterruptsResult {
    /// The measured cell at `level` and `rate_hz`, if any.
    pub fn find(&self, level: u32, rate_hz: Option<u32>) -> Option<&RateMeasured> {
        self.cells
            .iter()
            .find(|c| c.level == level && c.rate_hz == rate_hz)
            .and_then(|c| c.result.measured())
    }
}

/// Runs one cell once: `level` sorters (and a timer at `rate_hz`) on `cpu`
/// for `cell_ns`.
///
/// # Errors
/// [`ErrorKind::Realtime`] if the timer thread's SCHED_FIFO is refused;
/// [`ErrorKind::Io`] if a thread cannot start or be pinned.
pub fn run_once(
    config: &Config,
    cpu: usize,
    elements: usize,
    level: u32,
    rate_hz: Option<u32>,
    repeat: u32,
) -> Result<Run> {
    let done = AtomicBool::new(false);
    let sorts = AtomicU64::new(0);
    let barrier = Barrier::new(level as usize + usize::from(rate_hz.is_some()) + 1);
    let stop = stop_flag();
    std::thread::scope(|s| -> Result<Run> {
        let mut workers = Vec::new();
        for w in 0..level {
            let (done, sorts, barrier) = (&done, &sorts, &barrier);
            let seed = config.seed.wrapping_add(u64::from(w));
            let h = std::thread::Builder::new()
                .name(format!("firmtime-sort-{w}"))
                .spawn_scoped(s, move || -> Result<()> {
                    let pinned = sched::set_affinity(&[cpu]);
                    let mut bench = SortBench::new(elements, seed);
                    barrier.wait();
                    pinned.map_err(|e| Error::new(ErrorKind::Io, e.message().to_string()))?;
                    let mut n = 0;
                    while !done.load(Ordering::Relaxed) {
                        bench.iterate();
                        n += 1;
                    }
                    sorts.fetch_add(n, Ordering::Relaxed);
                    Ok(())
                })
                .map_err(|e| {
                    Error::new(ErrorKind::Io, format!("cannot start a sort thread: {e}"))
                })?;
            workers.push(h);
        }
        let timer = rate_hz.map(|rate| {
            let (done, barrier) = (&done, &barrier);
            let req = config.timer_request(cpu);
            std::thread::Builder::new()
                .name("firmtime-timer".into())
                .spawn_scoped(s, move || -> Result<TimerRun> {
                    let rt = setup::apply(&req);
                    barrier.wait();
                    let _rt = rt?;
                    Ok(timer_loop(rate, done))
                })
        });
        let timer = match timer {
            Some(Ok(h)) => Some(h),
            Some(Err(e)) => {
                // The barrier cannot complete without the timer: release the sorters.
                done.store(true, Ordering::SeqCst);
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("cannot start the timer thread: {e}"),
                ));
            }
            None => None,
        };
        barrier.wait();
        let t0 = monotonic_ns();
        let end = t0 + config.cell_ns;
        while monotonic_ns() < end && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(
                Duration::from_millis(10)
                    .min(Duration::from_nanos(end.saturating_sub(monotonic_ns()))),
            );
        }
        done.store(true, Ordering::SeqCst);
        for w in workers {
            w.join()
                .map_err(|_| Error::new(ErrorKind::Io, "a sort thread panicked"))??;
        }
        let elapsed_ns = monotonic_ns() - t0;
        let timer = match timer {
            Some(h) => Some(
                h.join()
                    .map_err(|_| Error::new(ErrorKind::Io, "the timer thread panicked"))??,
            ),
            None => None,
        };
        let sorts = sorts.load(Ordering::Relaxed);
        let sorted = sorts * elements as u64;
        Ok(Run {
            repeat,
            sorts,
            sorted,
            elapsed_ns,
            throughput: sorted as f64 * 1e9 / elapsed_ns.max(1) as f64,
            timer,
        })
    })
}

/// Runs the interleaved matrix (see the module docs).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; [`ErrorKind::Io`] when a
/// thread cannot start. A refused SCHED_FIFO makes the timer cells skipped.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<InterruptsResult> {
    config.validate()?;
    let cpu = match config.cpu {
        Some(c) => c,
        None => *sched::online_cpus()
            .last()
            .ok_or_else(|| Error::new(ErrorKind::Io, "no online CPU found in /sys"))?,
    };
    let l2 = l2_cache_bytes();
    let (array_bytes, array_source) = match (config.array_bytes, l2) {
        (Some(b), _) => (b, "--array-size".to_string()),
        (None, Some(l2)) => (l2 / 2, format!("half the L2 ({L2_PATH})")),
        (None, None) => (
            PAPER_L2_BYTES / 2,
            format!("half the paper's 256 KiB L2 ({L2_PATH} unreadable)"),
        ),
    };
    let elements = usize::try_from(array_bytes / 4)
        .unwrap_or(usize::MAX)
        .max(1);
    // Ask once whether SCHED_FIFO is granted, so a refusal skips the timer
    // cells with the reason instead of failing the run.
    let timer_conditions = run_in_thread(&config.timer_request(cpu), |_| ());
    let (timer_conditions, refused) = match timer_conditions {
        Ok(((), c)) => (Some(c), None),
        Err(e) if e.kind() == ErrorKind::Realtime => (None, Some(e.message().to_string())),
        Err(e) => return Err(e),
    };

    let rates: Vec<Option<u32>> = std::iter::once(None)
        .chain(config.rates_hz.iter().map(|&r| Some(r)))
        .collect();
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); config.levels.len() * rates.len()];
    let measured_rates = if refused.is_some() { 1 } else { rates.len() };
    progress.begin(
        "interrupts",
        u64::from(config.repeats) * (config.levels.len() * measured_rates) as u64,
    );
    let stop = stop_flag();
    'repeats: for rep in 0..config.repeats {
        for (li, &level) in config.levels.iter().enumerate() {
            for (ri, &rate) in rates.iter().enumerate() {
                if stop.load(Ordering::Relaxed) {
                    break 'repeats;
                }
                if rate.is_some() && refused.is_some() {
                    continue;
                }
                let r = run_once(config, cpu, elements, level, rate, rep)?;
                if stop.load(Ordering::Relaxed) {
                    break 'repeats; // a cut-short run is not comparable
                }
                runs[li * rates.len() + ri].push(r);
                progress.advance(1);
            }
        }
    }
    progress.end();

    let mut cells = Vec::with_capacity(runs.len());
    let mut complete = true;
    for (li, &level) in config.levels.iter().enumerate() {
        let base = &runs[li * rates.len()];
        for (ri, &rate) in rates.iter().enumerate() {
            let mine = &runs[li * rates.len() + ri];
            complete &=
                mine.len() == config.repeats as usize || (rate.is_some() && refused.is_some());
            let result = match (&refused, rate) {
                (Some(reason), Some(_)) => Cell::Skipped {
                    reason: format!("timer thread: {reason}"),
                },
                _ => Cell::Measured(summarize_cell(mine, base, rate.is_some())),
            };
            cells.push(RateCell {
                level,
                rate_hz: rate,
                result,
            });
        }
    }
    Ok(InterruptsResult {
        config: config.clone(),
        machine: Machine::current(),
        cpu,
        l2_bytes: l2,
        array_bytes,
        array_elements: elements as u64,
        array_source,
        timer_conditions,
        cells,
        partial: !complete || stop.load(Ordering::Relaxed),
    })
}

/// Medians of one cell's runs against the baseline runs of the same repeats.
pub fn summarize_cell(runs: &[Run], base: &[Run], has_timer: bool) -> RateMeasured {
    let mut tp: Vec<f64> = runs.iter().map(|r| r.throughput).collect();
    let (mut over, mut direct, mut indirect, mut cpw, mut hz) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut missed = 0;
    for r in runs {
        let Some(t) = &r.timer else { continue };
        missed += t.missed;
        hz.push(t.achieved_hz());
        if let Some(c) = t.cpu_per_wakeup_ns() {
            cpw.push(c as f64);
        }
        let d = t.cpu_ns as f64 / r.elapsed_ns.max(1) as f64;
        direct.push(d);
        if let Some(b) = base.iter().find(|b| b.repeat == r.repeat) {
            if b.throughput > 0.0 {
                let o = 1.0 - r.throughput / b.throughput;
                over.push(o);
                indirect.push(o - d);
            }
        }
    }
    let overhead = if has_timer {
        crate::stats::median_in_place(&mut over)
    } else {
        None
    };
    let direct = crate::stats::median_in_place(&mut direct);
    RateMeasured {
        runs: runs.to_vec(),
        throughput: crate::stats::median_in_place(&mut tp).unwrap_or(0.0),
        overhead,
        direct,
        indirect: crate::stats::median_in_place(&mut indirect),
        direct_share: match (direct, overhead) {
            (Some(d), Some(o)) if o > 0.0 => Some(d / o),
            _ => None,
        },
        cpu_per_wakeup_ns: crate::stats::median_in_place(&mut cpw).map(|c| c.round() as u64),
        achieved_hz: crate::stats::median_in_place(&mut hz),
        missed,
    }
}
