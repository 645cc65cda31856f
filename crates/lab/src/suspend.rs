//! `lab sleep`: Finney's (2001) "Process suspension" — how long each sleep
//! mechanism really sleeps.
//!
//! For every mechanism of [`firmtime_rt::sleep`] and every interval, each
//! sample sleeps to the absolute deadline `now + interval` (relative
//! mechanisms recompute the remaining time themselves) and records the
//! achieved duration (wake − start) and the overshoot (wake − deadline).
//! Three conditions: SCHED_OTHER with the timer slack in force (50 µs by
//! default), SCHED_OTHER with 1 ns slack, and SCHED_FIFO (where kernel 6.x
//! forces slack 0). A mechanism this machine lacks (no `/dev/rtc`) is a
//! skipped cell with the reason, and a refused SCHED_FIFO a skipped
//! condition — never zeros.
//!
//! Between samples the thread pauses [`PAUSE_NS`] (as FTAP's 0.49 ms pause
//! did), so a spinning sleeper under SCHED_FIFO never runs long enough for
//! runaway protection, and samples do not ride on the previous wake-up.
//!
//! # RT contract
//! Sample storage is allocated (with capacity for every sample) before the
//! loop; [`measure_cell`] is **RT-safe**: it only sleeps, reads the clock
//! and pushes within capacity.

use crate::check::{self, fmt_ns, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::measure::{run_in_thread, stop_flag, Cell, Progress};
use crate::stats::{summarize, Summary};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{RtConditions, RtRequest};
use firmtime_rt::sleep::{self, Mechanism, Sleeper};
use firmtime_rt::Errno;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Finney (2001), "Process suspension": setitimer's minimum interval at the
/// default HZ=100 was "an unacceptable 10 msec".
pub const PAPER_SETITIMER_MIN_NS: u64 = 10_000_000;
/// Finney (2001): nanosleep/usleep at normal priority: "on the order of 10
/// or 20 msec" at best (lower bound).
pub const PAPER_NANOSLEEP_NORMAL_MIN_NS: u64 = 10_000_000;
/// Finney (2001): the same, upper bound (20 ms).
pub const PAPER_NANOSLEEP_NORMAL_MAX_NS: u64 = 20_000_000;
/// Finney (2001): under SCHED_FIFO nanosleep busy-waited accurately "from
/// 2 ms down as low as 5 microseconds"; above 2 ms it was back to 20 ms.
pub const PAPER_NANOSLEEP_FIFO_BUSY_MAX_NS: u64 = 2_000_000;
/// Finney (2001): the SCHED_FIFO busy-wait's smallest accurate pause, 5 µs.
pub const PAPER_NANOSLEEP_FIFO_MIN_NS: u64 = 5_000;
/// Finney (2001): `/dev/rtc` reads "as little as .12 milliseconds (the
/// period of an 8192 Hz clock)", accurately.
pub const PAPER_RTC_MIN_NS: u64 = 122_070;

/// Pause between samples (FTAP paused 0.49 ms; Finney 2001).
pub const PAUSE_NS: u64 = 500_000;
/// Valid interval range, ns (1 µs … 1 s).
pub const INTERVAL_NS: std::ops::RangeInclusive<u64> = 1_000..=1_000_000_000;
/// Valid `--samples` range.
pub const SAMPLES: std::ops::RangeInclusive<u64> = 1..=1_000_000;

/// What to measure. Durations in ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Mechanisms (`--sleeper`), default all of [`Mechanism::ALL`].
    pub mechanisms: Vec<Mechanism>,
    /// Requested intervals (`--interval`), default 50 µs … 20 ms.
    pub intervals_ns: Vec<u64>,
    /// Samples per cell (`--samples`), default 100.
    pub samples: u64,
    /// SCHED_FIFO priority of the real-time condition (`--priority`), default 80.
    pub fifo_priority: u8,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mechanisms: Mechanism::ALL.to_vec(),
            intervals_ns: vec![
                50_000, 100_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000,
            ],
            samples: 100,
            fifo_priority: 80,
        }
    }
}

impl Config {
    /// `--quick`: 100 µs, 1 ms and 10 ms, 30 samples each.
    pub fn quick() -> Self {
        Self {
            intervals_ns: vec![100_000, 1_000_000, 10_000_000],
            samples: 30,
            ..Self::default()
        }
    }

    /// `--full`: every default interval, 1000 samples each.
    pub fn full() -> Self {
        Self {
            samples: 1000,
            ..Self::default()
        }
    }

    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        if self.intervals_ns.is_empty() {
            return Err(invalid(format!(
                "--interval is empty: give at least one interval from {} to {}",
                fmt_ns(*INTERVAL_NS.start()),
                fmt_ns(*INTERVAL_NS.end())
            )));
        }
        for &i in &self.intervals_ns {
            check::ns_in_range("--interval", i, &INTERVAL_NS)?;
        }
        if self.mechanisms.is_empty() {
            return Err(invalid(
                "--sleeper is empty: give at least one (e.g. clock_nanosleep)",
            ));
        }
        check::in_range("--samples", self.samples, &SAMPLES)?;
        check::in_range("--priority", self.fifo_priority, &(1..=99))
    }

    /// The three conditions: `other` (slack as is), `other-slack-1ns`, `fifo`.
    pub fn conditions(&self) -> [(&'static str, RtRequest); 3] {
        let other = RtRequest::default();
        [
            ("other", other.clone()),
            (
                "other-slack-1ns",
                RtRequest {
                    timer_slack_ns: Some(1),
                    ..other
                },
            ),
            (
                "fifo",
                RtRequest {
                    policy: Policy::Fifo {
                        priority: self.fifo_priority,
                    },
                    mlock: true,
                    prefault_stack: 256 * 1024,
                    ..RtRequest::default()
                },
            ),
        ]
    }
}

/// What one mechanism × interval cell measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// Achieved durations (wake − start), ns.
    pub achieved: Summary,
    /// Overshoot (wake − deadline), ns.
    pub overshoot: Summary,
    /// The sleeper's error, if it failed mid-cell (the samples before it are kept).
    pub error: Option<String>,
}

/// One mechanism × interval cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepCell {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The requested interval, ns.
    pub interval_ns: u64,
    /// Measured, or skipped with the reason.
    pub cell: Cell<Measured>,
}

/// One condition (policy × timer slack) and its cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    /// `other`, `other-slack-1ns` or `fifo`.
    pub label: String,
    /// Timer slack in force while measuring, ns (read back from the kernel).
    pub timer_slack_ns: u64,
    /// What was asked and obtained.
    pub conditions: RtConditions,
    /// Cells in mechanism-major order.
    pub cells: Vec<SleepCell>,
}

/// The result of `lab sleep`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepResult {
    /// The configuration measured.
    pub config: Config,
    /// Timer slack of a normal thread of this process before any change, ns.
    pub default_timer_slack_ns: Option<u64>,
    /// The conditions, in order; skipped if refused (e.g. no RT privileges).
    pub conditions: Vec<(String, Cell<Condition>)>,
    /// True when interrupted (Ctrl-C): later cells are missing.
    pub partial: bool,
}

/// Sleeps `samples` times to `now + interval` with `sleeper`, pushing the
/// achieved duration and overshoot of each into `achieved` and `overshoot`
/// (pushes stay within their capacity), pausing [`PAUSE_NS`] between
/// samples. Stops early when `stop` is set. **RT-safe** as long as both
/// vectors have capacity for `samples` more values.
///
/// # Errors
/// The sleeper's [`Errno`]; the samples before it are kept.
pub fn measure_cell<S: Sleeper + ?Sized>(
    sleeper: &mut S,
    interval_ns: u64,
    samples: u64,
    achieved: &mut Vec<i64>,
    overshoot: &mut Vec<i64>,
    stop: &AtomicBool,
) -> Result<(), Errno> {
    let mut pause = sleep::ClockNanosleepSleeper;
    for _ in 0..samples {
        if stop.load(Ordering::Relaxed) || achieved.len() == achieved.capacity() {
            break;
        }
        let start = monotonic_ns();
        let deadline = start + interval_ns;
        let woke = sleeper.sleep_until(deadline)?;
        achieved.push(woke as i64 - start as i64);
        overshoot.push(woke as i64 - deadline as i64);
        pause.sleep_until(monotonic_ns() + PAUSE_NS)?;
    }
    Ok(())
}

/// Runs the measurement (see the module docs).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; other errors of the
/// measuring thread (a refused condition becomes a skipped condition).
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<SleepResult> {
    config.validate()?;
    let stop = stop_flag();
    let default_timer_slack_ns = sched::timer_slack().ok();
    let mut out = Vec::new();
    let per_condition = (config.mechanisms.len() * config.intervals_ns.len()) as u64;
    progress.begin("sleep", per_condition * 3);
    for (label, req) in config.conditions() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // The measuring thread counts finished cells; this thread shows them.
        let done = AtomicU64::new(0);
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| {
                run_in_thread(&req, |cond| measure_condition(config, label, cond, &done))
            });
            let mut shown = 0;
            while !h.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
                let d = done.load(Ordering::Relaxed);
                progress.advance(d - shown);
                shown = d;
            }
            let r = h.join().unwrap_or_else(|_| {
                Err(Error::new(ErrorKind::Io, "the measuring thread panicked"))
            });
            progress.advance(per_condition - shown.min(per_condition));
            r
        });
        let cell = Cell::from_result(r.and_then(|(c, _)| c))?;
        out.push((label.to_string(), cell));
    }
    progress.end();
    let complete = out.len() == 3
        && out.iter().all(|(_, c)| {
            c.measured().map_or(true, |c| {
                c.cells.len() as u64 == per_condition
                    && c.cells.iter().all(|s| match &s.cell {
                        Cell::Measured(m) => {
                            m.achieved.samples == config.samples || m.error.is_some()
                        }
                        Cell::Skipped { .. } => true,
                    })
            })
        });
    Ok(SleepResult {
        config: config.clone(),
        default_timer_slack_ns,
        conditions: out,
        partial: !complete || stop.load(Ordering::Relaxed),
    })
}

fn measure_condition(
    config: &Config,
    label: &str,
    cond: &RtConditions,
    done: &AtomicU64,
) -> Result<Condition> {
    let stop = stop_flag();
    let n = usize::try_from(config.samples).unwrap_or(usize::MAX);
    let mut achieved = Vec::with_capacity(n);
    let mut overshoot = Vec::with_capacity(n);
    let mut cells = Vec::new();
    'outer: for &m in &config.mechanisms {
        // Thread-bound mechanisms must be opened on this thread.
        let mut sleeper = match sleep::open(m) {
            Ok(s) => Some(s),
            Err(e) => {
                for &i in &config.intervals_ns {
                    cells.push(SleepCell {
                        mechanism: m,
                        interval_ns: i,
                        cell: Cell::Skipped {
                            reason: format!("{m}: {}", e.message()),
                        },
                    });
                }
                done.fetch_add(config.intervals_ns.len() as u64, Ordering::Relaxed);
                None
            }
        };
        let Some(s) = sleeper.as_mut() else { continue };
        for &interval in &config.intervals_ns {
            if stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            achieved.clear();
            overshoot.clear();
            let r = measure_cell(
                &mut **s,
                interval,
                config.samples,
                &mut achieved,
                &mut overshoot,
                stop,
            );
            cells.push(SleepCell {
                mechanism: m,
                interval_ns: interval,
                cell: Cell::Measured(Measured {
                    achieved: summarize(&achieved, 0),
                    overshoot: summarize(&overshoot, 0),
                    error: r.err().map(|e| format!("{m} failed: {e}")),
                }),
            });
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(Condition {
        label: label.to_string(),
        timer_slack_ns: sched::timer_slack()?,
        conditions: cond.clone(),
        cells,
    })
}
