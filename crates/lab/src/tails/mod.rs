//! `lab tails`: latency tails of timer-signal delivery under SCHED_RR
//! contention — Etsion, Tsafrir and Feitelson (2003), §7 and Table 6.
//!
//! K processes in SCHED_RR each request `alarms` alarms with delays uniform
//! in 1 ms..`max_delay` (seeded PRNG), and record the *delivery latency*:
//! the time from the alarm's expiry to the moment the process runs again.
//! Process types, as in the paper:
//!
//! - **BLK** (`compute_percent = 0`): set an alarm, block until it arrives.
//! - **N%** (`1..=99`): compute (spin) for N % of the time till the alarm,
//!   then block.
//! - **CONT** (`100`): compute continuously; the alarm interrupts it.
//!
//! Optionally `extra_cpu` SCHED_OTHER CPU hogs (`firmtime load cpu`) run
//! beside them (the paper's "1+2CPU" rows).
//!
//! # How latency is measured
//!
//! Each worker is a child process of the firmtime binary
//! (`firmtime lab tails-worker …`, hidden). It arms a POSIX timer
//! (`timer_create(CLOCK_MONOTONIC)`, `SIGEV_THREAD_ID` → SIGALRM to its own
//! thread) at an *absolute* expiry `T`, and a SIGALRM handler reads
//! `CLOCK_MONOTONIC` and stores it in an atomic. A handler runs when the
//! kernel returns to user mode in the signalled thread — that is, when the
//! process has got a CPU after the signal — so `handler time − T` is exactly
//! the paper's "alarm should expire → process is assigned a CPU", for a
//! blocked process (woken from `sigsuspend`) and for a computing one
//! (preempted, or waiting in the RR queue) alike. One mechanism for all three
//! types keeps them comparable.
//!
//! All workers (and the extra hogs) are pinned to one CPU (the last online
//! one unless [`Config::cpu`] says otherwise): the paper measured a
//! uniprocessor, and on a multi-core machine K processes spread over K cores
//! would never contend. The parent stays unpinned.
//!
//! # Bounds and the runaway guard
//!
//! CONT workers never block, so RLIMIT_RTTIME (the runaway guard of
//! `firmtime_rt::runaway`) would fire on them: workers raise the soft limit
//! to the hard limit and install no guard. They are bounded instead by a
//! deadline of their own (checked while spinning), a parent watchdog that
//! SIGKILLs them shortly after it, `PR_SET_PDEATHSIG`, and the kernel's RT
//! throttling (`sched_rt_runtime_us`, 95 % by default), which leaves the
//! pinned CPU's remaining time and every other CPU to the rest of the system.
//!
//! # RT contract
//!
//! The worker's measured loop allocates nothing, takes no lock and prints
//! nothing: latencies go into a slice allocated and locked before the loop;
//! the only system calls are `timer_settime`, `clock_gettime`,
//! `pthread_sigmask` and `sigsuspend`. The signal handler is
//! async-signal-safe (`clock_gettime` and an atomic store, `errno` kept).

mod alarm;
mod config;
mod paper;
mod results;
mod run;
mod worker;

pub use config::{CellSpec, Config};
pub use paper::{PaperRow, PaperTails, PAPER_TABLE6};
pub use results::{CellMeasurement, CellResult, KernelTiming, ProcessResult, TailsResult};
pub use run::{run, worker_seed};
pub use worker::{run_worker, Delays, WorkerConfig, WorkerOutput, WorkerReport};

use std::ops::RangeInclusive;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// The shortest alarm delay, as in the paper (1 ms).
pub const MIN_DELAY_NS: u64 = MS;
/// Valid `--alarms` (alarms per process).
pub const ALARMS: RangeInclusive<u32> = 1..=100_000;
/// Valid `--max-delay` in ns: 2 ms to 10 s.
pub const MAX_DELAY_NS: RangeInclusive<u64> = 2 * MS..=10_000 * MS;
/// Valid `--priority` (SCHED_RR).
pub const PRIORITY: RangeInclusive<u8> = 1..=99;
/// Valid `--procs` values (timer-setting processes per cell).
pub const PROCS: RangeInclusive<u32> = 1..=64;
/// Valid `--percents` values (compute share of the N% type).
pub const PERCENTS: RangeInclusive<u8> = 1..=99;
/// Valid `--extra-cpu` values (SCHED_OTHER hogs beside the workers).
pub const EXTRA_CPU: RangeInclusive<u32> = 0..=64;
/// The paper's alarms per process.
pub const PAPER_ALARMS: u32 = 500;
/// The paper's longest delay (1000 ms).
pub const PAPER_MAX_DELAY_NS: u64 = 1000 * MS;
/// Alarms per process with `--quick`.
pub const QUICK_ALARMS: u32 = 100;
/// Longest delay with `--quick` (50 ms instead of the paper's 1000 ms).
pub const QUICK_MAX_DELAY_NS: u64 = 50 * MS;
/// Default SCHED_RR priority of the workers.
pub const DEFAULT_PRIORITY: u8 = 50;
/// Default PRNG seed.
pub const DEFAULT_SEED: u64 = 2003;

/// How long after a worker's own deadline the parent kills it.
const WATCHDOG_GRACE: Duration = Duration::from_secs(3);
