//! `firmtime lab clock`: successive clock reads under Finney's (2001)
//! priority × load conditions — the paper's Table 1 on this machine.
//!
//! For each condition, one thread set up with the condition's real-time
//! request ([`measure::run_in_thread`]) reads the chosen clock `calls` times
//! in a row into a preallocated buffer and does nothing else. Afterwards the
//! gaps between successive reads are summarized: mean, max and sd (the
//! paper's columns), the full [`Summary`], the distribution
//! ([`LatencyHistogram`] buckets), and the smallest non-zero gap (the
//! clock's effective granularity) beside `clock_getres`.
//!
//! Load cells start `hogs` CPU hogs (`firmtime load cpu:N`, Finney's "3
//! simultaneous normal-priority programs doing continuous arithmetic")
//! before the cell and stop and reap them after it.
//!
//! # RT contract
//! [`sample`] is the measured loop: **RT-safe** — it reads the clock and
//! stores, nothing else (no allocation, lock, print or system call beyond
//! the clock read), polling the stop flag only between chunks of
//! [`CHUNK`] reads. Everything else here (setup, load, statistics) runs
//! outside the measured loop and allocates.

use crate::check;
use crate::error::{Error, ErrorKind, Result};
use crate::load::{LoadSet, LoadSpec};
use crate::measure::{self, Cell, Priority, Progress};
use crate::stats::{self, LatencyHistogram, Summary};
use firmtime_rt::clock::{self, Clock, ClockKind, ClockRead, ClockVisitor};
use firmtime_rt::setup::RtConditions;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Reads between two polls of the stop flag in [`sample`].
pub const CHUNK: usize = 1 << 16;

/// How long load cells wait after starting the hogs, so they are running
/// (and have used up their start-up boost) when the measurement begins.
pub const LOAD_SETTLE: Duration = Duration::from_millis(200);

/// One row of Finney (2001), Table 1, in integer nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaperRow {
    /// Mean time between successive `gettimeofday` calls.
    pub mean_ns: i64,
    /// Maximum time between successive calls.
    pub max_ns: i64,
    /// Standard deviation of the time between calls.
    pub sd_ns: i64,
}

/// Finney (2001), "Real-time data collection in Linux", Table 1: "Times
/// between calls to gettimeofday under different priority and load
/// conditions" — 10 runs × 1,000,000 calls on a 350 MHz Pentium II, Linux
/// 2.2.12; load = 3 programs doing continuous arithmetic. Rows in the
/// paper's order: (priority label, loaded, figures). The paper gives µs;
/// these are the same figures in ns.
pub const FINNEY_TABLE1: [(&str, bool, PaperRow); 6] = [
    ("user", false, row(1_290, 246_000, 1_170)),
    ("user", true, row(5_230, 840_019_000, 1_601_000)),
    ("setpriority", false, row(1_230, 322_000, 480)),
    ("setpriority", true, row(3_110, 630_031_000, 1_079_000)),
    ("sched_fifo", false, row(1_250, 72_000, 460)),
    ("sched_fifo", true, row(1_250, 69_000, 460)),
];

const fn row(mean_ns: i64, max_ns: i64, sd_ns: i64) -> PaperRow {
    PaperRow {
        mean_ns,
        max_ns,
        sd_ns,
    }
}

/// The paper's figures for a condition, if the paper has that row.
pub fn paper_row(priority: Priority, loaded: bool) -> Option<PaperRow> {
    FINNEY_TABLE1
        .iter()
        .find(|(p, l, _)| *p == priority.label() && *l == loaded)
        .map(|(_, _, r)| *r)
}

/// What `firmtime lab clock` measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// The clock to read (`--clock`); Finney read `gettimeofday`.
    pub clock: ClockKind,
    /// Successive reads per cell (`--samples`), in [`Config::CALLS`].
    pub calls: u64,
    /// CPU hogs in the load cells (`--hogs`), in [`Config::HOGS`]; 0 runs
    /// the idle cells only.
    pub hogs: u32,
    /// SCHED_FIFO priority of the FIFO rows (`--priority`), 1..=99.
    pub fifo_priority: u8,
    /// The firmtime executable that runs `firmtime load cpu:N` for the load
    /// cells (the CLI passes `std::env::current_exe()`). Required when
    /// `hogs > 0`.
    #[serde(skip)]
    pub load_exe: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self::full()
    }
}

impl Config {
    /// Valid `--samples`.
    pub const CALLS: RangeInclusive<u64> = 2..=100_000_000;
    /// Valid `--hogs` (0 = no load cells).
    pub const HOGS: RangeInclusive<u32> = 0..=256;
    /// Finney's figure: 1,000,000 calls per run.
    pub const DEFAULT_CALLS: u64 = 1_000_000;
    /// `--quick`: 200,000 calls per cell.
    pub const QUICK_CALLS: u64 = 200_000;

    /// The paper's setup: gettimeofday, 1,000,000 calls, 3 hogs, FIFO 80.
    pub fn full() -> Self {
        Self {
            clock: ClockKind::Gettimeofday,
            calls: Self::DEFAULT_CALLS,
            hogs: LoadSpec::DEFAULT_HOGS,
            fifo_priority: 80,
            load_exe: None,
        }
    }

    /// A first look: 200,000 calls per cell.
    pub fn quick() -> Self {
        Self {
            calls: Self::QUICK_CALLS,
            ..Self::full()
        }
    }

    /// The priority conditions of the table, in the paper's order.
    pub fn priorities(&self) -> [Priority; 3] {
        [
            Priority::User,
            Priority::Setpriority,
            Priority::Fifo(self.fifo_priority),
        ]
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the flag and its valid range, or
    /// saying that load cells need `load_exe`.
    pub fn validate(&self) -> Result<()> {
        check::in_range("--samples", self.calls, &Self::CALLS)?;
        check::in_range_note("--hogs", self.hogs, &Self::HOGS, " (0 = idle cells only)")?;
        check::in_range("--priority", self.fifo_priority, &(1..=99))?;
        if self.hogs > 0 && self.load_exe.is_none() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "load cells need the firmtime executable to run `firmtime load cpu:N`; \
                 set load_exe or use --hogs 0",
            ));
        }
        Ok(())
    }
}

/// One histogram bucket of the gap distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapBucket {
    /// Smallest gap the bucket holds, ns.
    pub low_ns: i64,
    /// Largest gap the bucket holds, ns (equal to `low_ns` below 2048 ns).
    pub high_ns: i64,
    /// Gaps in the bucket.
    pub count: u64,
}

/// What one condition measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockRun {
    /// The real-time conditions the measuring thread obtained.
    pub conditions: RtConditions,
    /// Reads actually made (less than `calls` when interrupted).
    pub reads: u64,
    /// True when Ctrl-C stopped this cell early.
    pub partial: bool,
    /// Gaps between successive reads (`summary.samples` = reads − 1).
    pub summary: Summary,
    /// Smallest gap above zero: the clock's effective granularity.
    pub smallest_nonzero_gap_ns: Option<i64>,
    /// Gaps of exactly 0 (the clock did not advance between two reads).
    pub zero_gaps: u64,
    /// Gaps below 0 (the clock went back; possible for wall clocks).
    pub negative_gaps: u64,
    /// The distribution of gaps: every non-empty bucket, ascending.
    pub histogram: Vec<GapBucket>,
}

/// One row of the table: a priority condition, idle or loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockCell {
    /// `user`, `setpriority` or `sched_fifo`.
    pub priority: String,
    /// The real-time request's policy in CLI spelling (`other`,
    /// `other:-20`, `fifo:80`).
    pub policy: String,
    /// CPU hogs running during the cell (0 = no load).
    pub hogs: u32,
    /// The paper's row label, e.g. `SCHED_FIFO, load`.
    pub label: String,
    /// Finney's Table 1 figures for this row.
    pub paper: Option<PaperRow>,
    /// This machine's figures, or why they could not be measured.
    pub result: Cell<ClockRun>,
}

/// The result of `firmtime lab clock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockResult {
    /// The clock read.
    pub clock: ClockKind,
    /// Reads asked per cell.
    pub calls: u64,
    /// Hogs in the load cells.
    pub hogs: u32,
    /// `clock_getres` (1 µs for gettimeofday, one tick for the TSC); `None`
    /// when the clock is unavailable.
    pub resolution_ns: Option<u64>,
    /// Calibrated TSC frequency, for `--clock tsc`.
    pub tsc_hz: Option<f64>,
    /// Rows in the paper's order.
    pub cells: Vec<ClockCell>,
    /// True when Ctrl-C interrupted the run (remaining cells are absent).
    pub partial: bool,
}

/// Reads `clock` into `buf` back to back until `buf` is full or `stop` is
/// set (polled every [`CHUNK`] reads); returns the number of reads stored.
///
/// This is the measured loop of `firmtime lab clock`: the clock is
/// dispatched once ([`Clock::visit`]) and the loop is monomorphized for it.
///
/// **RT-safe.** Never allocates, locks, prints or blocks.
pub fn sample(clock: &Clock, buf: &mut [u64], stop: &AtomicBool) -> usize {
    clock.visit(Sampler { buf, stop })
}

struct Sampler<'a> {
    buf: &'a mut [u64],
    stop: &'a AtomicBool,
}

impl ClockVisitor for Sampler<'_> {
    type Output = usize;

    #[inline]
    fn visit<C: ClockRead>(self, clock: &C) -> usize {
        read_chunks(clock, self.buf, self.stop)
    }
}

#[inline]
fn read_chunks<C: ClockRead>(clock: &C, buf: &mut [u64], stop: &AtomicBool) -> usize {
    let mut done = 0;
    for chunk in buf.chunks_mut(CHUNK) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for slot in chunk.iter_mut() {
            *slot = clock.now_ns();
        }
        done += chunk.len();
    }
    done
}

/// Summarizes the timestamps of one cell.
///
/// Allocates (a gap vector, a sorted copy and a histogram): call after the
/// measured loop.
pub fn analyze(timestamps: &[u64], conditions: RtConditions, partial: bool) -> ClockRun {
    let mut gaps = Vec::with_capacity(timestamps.len().saturating_sub(1));
    stats::gaps(timestamps, &mut gaps);
    let mut hist = LatencyHistogram::new();
    for &g in &gaps {
        hist.record(g);
    }
    ClockRun {
        conditions,
        reads: timestamps.len() as u64,
        partial,
        summary: stats::summarize(&gaps, 0),
        smallest_nonzero_gap_ns: stats::smallest_positive_gap(&gaps),
        zero_gaps: gaps.iter().filter(|&&g| g == 0).count() as u64,
        negative_gaps: gaps.iter().filter(|&&g| g < 0).count() as u64,
        histogram: hist
            .buckets()
            .map(|b| GapBucket {
                low_ns: b.low_ns,
                high_ns: b.high_ns,
                count: b.count,
            })
            .collect(),
    }
}

/// The paper's row label: `User, no load`, `SCHED_FIFO, load`, …
pub fn row_label(priority: Priority, hogs: u32) -> String {
    format!(
        "{}, {}",
        priority.paper_name(),
        if hogs > 0 { "load" } else { "no load" }
    )
}

/// Measures one condition: `calls` reads on a thread set up for `priority`.
fn measure_cell(clock: &Clock, priority: Priority, buf: &mut [u64]) -> Result<ClockRun> {
    // Touch every page now, so page faults are not measured as gaps.
    buf.fill(1);
    let stop = measure::stop_flag();
    let (n, conditions) =
        measure::run_in_thread(&priority.request(), |_| sample(clock, buf, stop))?;
    Ok(analyze(&buf[..n], conditions, n < buf.len()))
}

/// Runs the whole table: every priority condition idle, then (if
/// `hogs > 0`) loaded.
///
/// A clock that is unavailable here (`tsc` without an invariant TSC) makes
/// every cell skipped with the reason; so does a refused real-time request
/// for its cells. Ctrl-C stops at the next chunk: the interrupted cell keeps
/// its reads (flagged partial), later cells are left out, the load children
/// are stopped and reaped, and the result is flagged partial.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] from [`Config::validate`];
/// [`ErrorKind::Load`] if the hogs cannot be started;
/// [`ErrorKind::Io`] if the measuring thread cannot be started.
pub fn run(cfg: &Config, progress: &mut dyn Progress) -> Result<ClockResult> {
    cfg.validate()?;
    let opened = Clock::open(cfg.clock).map_err(Error::from);
    let resolution_ns = match &opened {
        Ok(Clock::Tsc(t)) => Some(t.resolution().as_nanos() as u64),
        Ok(_) => clock::resolution(cfg.clock)
            .ok()
            .map(|d| d.as_nanos() as u64),
        Err(_) => None,
    };
    let tsc_hz = match &opened {
        Ok(Clock::Tsc(t)) => Some(t.hz()),
        _ => None,
    };
    let mut result = ClockResult {
        clock: cfg.clock,
        calls: cfg.calls,
        hogs: cfg.hogs,
        resolution_ns,
        tsc_hz,
        cells: Vec::new(),
        partial: false,
    };
    let loads: &[u32] = if cfg.hogs > 0 { &[0, cfg.hogs] } else { &[0] };
    let mut buf = if opened.is_ok() {
        vec![0u64; cfg.calls as usize]
    } else {
        Vec::new()
    };
    progress.begin(
        &format!("lab clock: {}", cfg.clock),
        (loads.len() * 3) as u64,
    );
    'outer: for &hogs in loads {
        let mut load = None;
        if hogs > 0 && opened.is_ok() {
            if measure::stop_requested() {
                result.partial = true;
                break;
            }
            let exe = cfg.load_exe.as_deref().expect("validated");
            let spec = LoadSpec::Cpu { hogs };
            // Bounded well beyond any cell; stopped right after the cells.
            load = Some(LoadSet::spawn(exe, &[spec], Duration::from_secs(3600))?);
            std::thread::sleep(LOAD_SETTLE);
        }
        for priority in cfg.priorities() {
            if measure::stop_requested() {
                result.partial = true;
                break 'outer;
            }
            let cell = match &opened {
                Err(e) => Cell::Skipped {
                    reason: e.message().to_string(),
                },
                Ok(clock) => Cell::from_result(measure_cell(clock, priority, &mut buf))?,
            };
            if cell.measured().is_some_and(|r| r.partial) {
                result.partial = true;
            }
            result.cells.push(ClockCell {
                priority: priority.label().to_string(),
                policy: priority.request().policy.to_string(),
                hogs,
                label: row_label(priority, hogs),
                paper: paper_row(priority, hogs > 0),
                result: cell,
            });
            progress.advance(1);
            if result.partial {
                break 'outer;
            }
        }
        if let Some(mut l) = load.take() {
            l.stop();
        }
    }
    progress.end();
    Ok(result)
}
