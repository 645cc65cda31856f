//! The worker: one timer-setting process (`firmtime lab tails-worker`),
//! its config, report and seeded alarm delays.

use super::alarm::{alarm_loop, AlarmHandler, AlarmTimer, LoopEnd, LoopParams};
use super::{ALARMS, MAX_DELAY_NS, MIN_DELAY_NS, MS, PRIORITY};
use crate::check;
use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::rng::Rng;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::sleep::clock_nanosleep_abs;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};

/// What one worker process does (`firmtime lab tails-worker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// 0 = BLK, 1..=99 = N%, 100 = CONT.
    pub compute_percent: u8,
    /// Alarms to request.
    pub alarms: u32,
    /// Longest delay in ns (shortest: [`MIN_DELAY_NS`]).
    pub max_delay_ns: u64,
    /// PRNG seed of the delays.
    pub seed: u64,
    /// SCHED_RR priority.
    pub priority: u8,
    /// CPU to pin to, if any.
    pub cpu: Option<usize>,
    /// CLOCK_MONOTONIC time (ns) to start the first alarm at, so that all
    /// workers of a cell start together; 0 = now.
    pub start_at_ns: u64,
    /// CLOCK_MONOTONIC time (ns) after which the worker stops (timed out).
    pub deadline_ns: u64,
}

impl WorkerConfig {
    /// The hidden subcommand's arguments for this config (after
    /// `lab tails-worker`).
    pub fn to_cli_args(&self) -> Vec<String> {
        let mut a = vec![
            "--compute-percent".into(),
            self.compute_percent.to_string(),
            "--alarms".into(),
            self.alarms.to_string(),
            "--max-delay-ns".into(),
            self.max_delay_ns.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--priority".into(),
            self.priority.to_string(),
            "--start-at-ns".into(),
            self.start_at_ns.to_string(),
            "--deadline-ns".into(),
            self.deadline_ns.to_string(),
        ];
        if let Some(c) = self.cpu {
            a.push("--cpu".into());
            a.push(c.to_string());
        }
        a
    }

    fn validate(&self) -> Result<()> {
        check::in_range("--alarms", self.alarms, &ALARMS)?;
        check::in_range("--priority", self.priority, &PRIORITY)?;
        check::in_range("--compute-percent", self.compute_percent, &(0..=100))?;
        check::in_range("--max-delay-ns", self.max_delay_ns, &MAX_DELAY_NS)
    }
}

/// What a worker measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Delivery latencies in ns, one per delivered alarm, in order.
    pub latencies_ns: Vec<i64>,
    /// True if the deadline came before the last alarm.
    pub timed_out: bool,
    /// True if SIGINT/SIGTERM stopped it.
    pub interrupted: bool,
    /// Soft RLIMIT_RTTIME in µs after raising it (`None` = unlimited).
    pub rttime_limit_us: Option<u64>,
    /// The conditions obtained (SCHED_RR, priority, CPU, memory lock).
    pub conditions: RtConditions,
}

/// What a worker writes on stdout, as JSON (`{"status": "done", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum WorkerOutput {
    /// It ran (possibly stopped early: see the flags).
    Done(Box<WorkerReport>),
    /// SCHED_RR or the memory lock was refused; the reason says how to fix it.
    Refused {
        /// Why, and how to grant it.
        reason: String,
    },
    /// Any other failure.
    Failed {
        /// What went wrong.
        message: String,
    },
}

impl WorkerOutput {
    /// Sorts a worker's result into the three outcomes.
    pub fn from_result(r: Result<WorkerReport>) -> Self {
        match r {
            Ok(rep) => WorkerOutput::Done(Box::new(rep)),
            Err(e) if matches!(e.kind(), ErrorKind::Realtime | ErrorKind::Unavailable) => {
                WorkerOutput::Refused {
                    reason: e.message().to_string(),
                }
            }
            Err(e) => WorkerOutput::Failed {
                message: e.message().to_string(),
            },
        }
    }
}

/// Runs one worker in this process: SCHED_RR at `priority`, memory locked,
/// pinned to `cpu`; raises RLIMIT_RTTIME's soft limit to the hard limit (a
/// CONT worker never blocks); waits until `start_at_ns`; then requests
/// `alarms` alarms and measures each one's delivery latency.
///
/// Installs a SIGALRM handler and blocks nothing else: meant for a process of
/// its own (the hidden `firmtime lab tails-worker`). The stop flag of
/// [`crate::load::stop_flag`] ends it early (`interrupted`).
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] for out-of-range values.
/// - [`ErrorKind::Realtime`] if SCHED_RR or mlockall is refused (the message
///   says which privilege is missing and how to grant it).
/// - [`ErrorKind::Io`] if the timer or the signal handler cannot be set up.
pub fn run_worker(cfg: &WorkerConfig) -> Result<WorkerReport> {
    cfg.validate()?;
    let rttime_limit_us = raise_rttime_limit();
    let mut out = vec![0i64; cfg.alarms as usize];
    let handler = AlarmHandler::install()?;
    let timer = AlarmTimer::new()?;
    let req = RtRequest {
        policy: Policy::Rr {
            priority: cfg.priority,
        },
        mlock: true,
        prefault_stack: 64 * 1024,
        cpus: cfg.cpu.map(|c| vec![c]),
        ..RtRequest::default()
    };
    let rt = setup::apply(&req)?;
    // Touch the sample store after mlockall so no page fault hits the loop.
    out.iter_mut().for_each(|x| *x = 0);
    let stop = crate::measure::stop_flag();
    sleep_until(cfg.start_at_ns, stop);
    let params = LoopParams {
        compute_percent: cfg.compute_percent,
        max_delay_ns: cfg.max_delay_ns,
        seed: cfg.seed,
        deadline_ns: cfg.deadline_ns,
    };
    let (n, end) = alarm_loop(&timer, &handler, &params, stop, &mut out)
        .map_err(|e| Error::new(ErrorKind::Io, format!("timer_settime failed: {e}")))?;
    let conditions = rt.conditions.clone();
    drop(rt);
    drop(timer);
    drop(handler);
    out.truncate(n);
    Ok(WorkerReport {
        latencies_ns: out,
        timed_out: end == LoopEnd::Deadline,
        interrupted: end == LoopEnd::Stopped,
        rttime_limit_us,
        conditions,
    })
}

/// Raises RLIMIT_RTTIME's soft limit to the hard limit; returns the soft
/// limit now in force in µs, `None` if unlimited.
fn raise_rttime_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit owned by this frame.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut lim) } != 0 {
        return None;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit; raising soft up to hard needs no privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &lim) };
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// How often [`sleep_until`] looks at the stop flag.
const STOP_POLL_NS: u64 = 20 * MS;

/// Sleeps until CLOCK_MONOTONIC `t_ns` (or the stop flag), in slices of
/// [`STOP_POLL_NS`] so that a stop request is seen while waiting.
fn sleep_until(t_ns: u64, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = firmtime_rt::clock::monotonic_ns();
        if now >= t_ns || clock_nanosleep_abs(t_ns.min(now + STOP_POLL_NS)).is_err() {
            break;
        }
    }
}

/// The alarm delays of a worker: uniform in [`MIN_DELAY_NS`]..=`max_delay_ns`,
/// reproducible from `seed` (SplitMix64, [`Rng`]). **RT-safe.**
#[derive(Debug, Clone)]
pub struct Delays {
    rng: Rng,
    max_ns: u64,
}

impl Delays {
    /// The stream for `seed`.
    pub fn new(seed: u64, max_delay_ns: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            max_ns: max_delay_ns.max(MIN_DELAY_NS),
        }
    }
}

impl Iterator for Delays {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let span = self.max_ns - MIN_DELAY_NS + 1;
        Some(MIN_DELAY_NS + self.rng.next_u64() % span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tails::MS;

    // The delays and worker seeds of the splitmix64 copy tails had before
    // firmtime_rt::rng::Rng: a seeded run must repeat across versions.
    #[test]
    fn seeded_delays_and_worker_seeds_keep_their_values() {
        let d: Vec<u64> = Delays::new(2003, 1000 * MS).take(4).collect();
        assert_eq!(d, [459_473_228, 584_712_842, 607_626_747, 260_071_974]);
        use crate::tails::worker_seed;
        assert_eq!(worker_seed(2003, 1, 2), 10_904_520_792_330_275_255);
        assert_eq!(worker_seed(7, 0, 0), 7_191_089_600_892_374_487);
        assert_eq!(worker_seed(2003, 3, 5), 5_423_465_957_214_484_348);
    }

    #[test]
    fn delays_are_uniform_in_range_and_reproducible() {
        let a: Vec<u64> = Delays::new(42, 10 * MS).take(2000).collect();
        let b: Vec<u64> = Delays::new(42, 10 * MS).take(2000).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|d| (MIN_DELAY_NS..=10 * MS).contains(d)));
        let low = a.iter().filter(|&&d| d < 5 * MS + MS / 2).count();
        assert!(
            (800..1200).contains(&low),
            "about half below the middle: {low}"
        );
        let c: Vec<u64> = Delays::new(43, 10 * MS).take(10).collect();
        assert_ne!(a[..10], c[..]);
    }
}
