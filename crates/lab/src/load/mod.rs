//! Load generators and the supervisor of load child processes.
//!
//! Measurements are worth most under load: Finney (2001) ran "3 simultaneous
//! normal-priority programs doing continuous arithmetic", Etsion et al.
//! (2003, §7) added CPU-bound processes, and Varoquaux (2006) pinged a host,
//! hashed random data and wrote to disk while measuring. This module holds
//! those loads:
//!
//! - [`LoadSpec`] names a generator and its parameters (`cpu:3`,
//!   `duty:50%@10ms`, `disk:64MiB`, `memory:256MiB`, `net`, `stress`).
//! - [`run_generator`] runs one in the *current* process until its duration
//!   ends or a stop flag is set, and returns a [`LoadReport`] saying what was
//!   done. This is what `firmtime load …` executes.
//! - [`LoadSet`] is the parent side: it starts `firmtime load …` children,
//!   each in its own process group, at SCHED_OTHER nice 0, killed by the
//!   kernel if the parent dies; it stops them (SIGTERM, then SIGKILL after a
//!   grace period) and reaps every one, also on drop.
//! - [`stop_flag`] is the process-wide stop flag that the `firmtime`
//!   binary's one signal owner sets on SIGINT, SIGTERM or SIGHUP, so that a
//!   stop ends a run cleanly with what was done so far.
//!
//! Every generator is bounded by its duration and leaves nothing behind: the
//! disk load's file is unlinked (and its fresh temporary directory removed)
//! right after it is opened, so not even SIGKILL can leave it on disk.
//!
//! RT contract: none of this is RT-safe. Load runs at SCHED_OTHER, allocates
//! during setup and makes blocking system calls; it exists to disturb the
//! real-time code being measured, in other processes.

mod cpu;
mod disk;
mod duty;
mod hash;
mod memory;
mod net;
mod set;
mod signal;
mod spec;

pub(crate) use set::child_command;
pub use set::{ChildOutcome, LoadSet};
pub use signal::stop_flag;
pub use spec::{format_duration, format_size, human_size, LoadSpec};

use crate::error::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use spec::check_duration;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a generator did, so callers (and tests) can tell that work happened.
///
/// Counters that do not apply to a generator are zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The generator that ran.
    pub spec: LoadSpec,
    /// The requested duration, in ns.
    pub requested_ns: u64,
    /// How long it actually ran, in ns (setup included).
    pub elapsed_ns: u64,
    /// True when the stop flag ended the run before its duration.
    pub stopped: bool,
    /// Worker threads that generated the load.
    pub threads: u32,
    /// cpu and duty: arithmetic iterations (one multiply-xorshift each).
    pub iterations: u64,
    /// duty: periods started.
    pub periods: u64,
    /// duty: periods skipped because a worker was not scheduled in time.
    pub missed_periods: u64,
    /// duty: total time spent busy, over all workers, in ns.
    pub busy_ns: u64,
    /// disk and stress: bytes written.
    pub bytes_written: u64,
    /// disk and stress: fsync calls made.
    pub fsyncs: u64,
    /// disk and stress: times writing restarted at offset 0 on reaching the size bound.
    pub rewinds: u64,
    /// disk and stress: the temporary directory the file was created in
    /// (already removed when the report is made).
    pub temp_dir: Option<PathBuf>,
    /// disk and stress: true if that directory is on tmpfs (then the "disk"
    /// writes go to RAM; set TMPDIR to a directory on a real disk).
    pub on_tmpfs: bool,
    /// stress: bytes read from /dev/urandom and hashed.
    pub bytes_hashed: u64,
    /// stress: FNV-1a 64 hash of all the bytes hashed (proof the work was done).
    pub hash: u64,
    /// memory: pages in the working set.
    pub pages: u64,
    /// memory: page writes made (the first full pass touches every page).
    pub pages_touched: u64,
    /// net and stress: UDP round trips completed.
    pub round_trips: u64,
    /// net and stress: datagrams not answered within 50 ms (then resent).
    pub lost_datagrams: u64,
}

impl LoadReport {
    fn new(spec: &LoadSpec, requested: Duration) -> Self {
        Self {
            spec: spec.clone(),
            requested_ns: ns(requested),
            elapsed_ns: 0,
            stopped: false,
            threads: 0,
            iterations: 0,
            periods: 0,
            missed_periods: 0,
            busy_ns: 0,
            bytes_written: 0,
            fsyncs: 0,
            rewinds: 0,
            temp_dir: None,
            on_tmpfs: false,
            bytes_hashed: 0,
            hash: 0,
            pages: 0,
            pages_touched: 0,
            round_trips: 0,
            lost_datagrams: 0,
        }
    }

    /// Adds the counters of one worker.
    fn absorb(&mut self, w: Work) {
        self.threads += 1;
        firmtime_rt::add_fields!(self += w;
            iterations, periods, missed_periods, busy_ns, bytes_written, fsyncs, rewinds,
            bytes_hashed, pages, pages_touched, round_trips, lost_datagrams);
        if w.temp_dir.is_some() {
            self.temp_dir = w.temp_dir;
            self.on_tmpfs = w.on_tmpfs;
        }
        if w.bytes_hashed > 0 {
            self.hash = w.hash;
        }
    }
}

/// One worker thread's counters (see [`LoadReport`] for their meaning).
#[derive(Debug, Default)]
struct Work {
    iterations: u64,
    periods: u64,
    missed_periods: u64,
    busy_ns: u64,
    bytes_written: u64,
    fsyncs: u64,
    rewinds: u64,
    temp_dir: Option<PathBuf>,
    on_tmpfs: bool,
    bytes_hashed: u64,
    hash: u64,
    pages: u64,
    pages_touched: u64,
    round_trips: u64,
    lost_datagrams: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// CLOCK_MONOTONIC in ns (the clock `clock_nanosleep` deadlines use).
use firmtime_rt::clock::monotonic_ns;

/// When workers must stop: the deadline, the caller's stop flag, or a
/// sibling worker's failure.
#[derive(Debug)]
struct Until<'a> {
    deadline_ns: u64,
    stop: &'a AtomicBool,
    abort: AtomicBool,
}

impl Until<'_> {
    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.abort.load(Ordering::Relaxed)
            || monotonic_ns() >= self.deadline_ns
    }

    /// Sleeps until `target_ns` (CLOCK_MONOTONIC, absolute) or until done,
    /// waking at least every 50 ms to look at the stop flag.
    fn sleep_until(&self, target_ns: u64) {
        const SLICE_NS: u64 = 50_000_000;
        loop {
            let now = monotonic_ns();
            if now >= target_ns || self.done() {
                return;
            }
            let t = target_ns.min(now + SLICE_NS).min(self.deadline_ns);
            // An error (none is expected for a valid deadline) only ends this slice early.
            let _ = firmtime_rt::sleep::clock_nanosleep_abs(t);
        }
    }
}

/// A worker body: runs until `until.done()`, returns its counters.
type Worker<'a> = Box<dyn FnOnce(&Until<'_>) -> Result<Work> + Send + 'a>;

/// Runs the load `spec` in the current process for `duration`, or until
/// `stop` becomes true, and reports what was done.
///
/// Worker threads are started for the generator and all joined before this
/// returns. The disk load's file and temporary directory are gone when this
/// returns, whatever the outcome.
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] when `spec` or `duration` is out of range
///   (see the constants on [`LoadSpec`]) or the memory working set exceeds
///   the memory available.
/// - [`ErrorKind::Io`] when a thread, file, socket or /dev/urandom cannot be
///   set up or used; the message says which and how to fix it. When one
///   worker fails the others stop too.
pub fn run_generator(spec: &LoadSpec, duration: Duration, stop: &AtomicBool) -> Result<LoadReport> {
    spec.validate()?;
    check_duration(duration)?;
    let start = monotonic_ns();
    let until = Until {
        deadline_ns: start + ns(duration),
        stop,
        abort: AtomicBool::new(false),
    };
    let workers: Vec<Worker<'_>> = match *spec {
        LoadSpec::Cpu { hogs } => (0..hogs)
            .map(|i| Box::new(move |u: &Until<'_>| Ok(cpu::hog(u, i))) as Worker<'_>)
            .collect(),
        LoadSpec::Duty {
            percent,
            period,
            workers,
        } => (0..workers)
            .map(|i| {
                Box::new(move |u: &Until<'_>| Ok(duty::worker(u, percent, period, i))) as Worker<'_>
            })
            .collect(),
        LoadSpec::Disk { file_size, chunk } => {
            vec![Box::new(move |u: &Until<'_>| {
                disk::writer(u, file_size, chunk)
            })]
        }
        LoadSpec::Memory { bytes } => {
            memory::check_available(bytes)?;
            vec![Box::new(move |u: &Until<'_>| memory::toucher(u, bytes))]
        }
        LoadSpec::Net { pairs } => {
            let mut v: Vec<Worker<'_>> = Vec::new();
            for _ in 0..pairs {
                let (ping, pong) = net::pair()?;
                v.push(Box::new(move |u: &Until<'_>| net::pinger(u, ping)));
                v.push(Box::new(move |u: &Until<'_>| net::ponger(u, pong)));
            }
            v
        }
        LoadSpec::Stress => {
            let (ping, pong) = net::pair()?;
            vec![
                Box::new(move |u: &Until<'_>| net::pinger(u, ping)),
                Box::new(move |u: &Until<'_>| net::ponger(u, pong)),
                Box::new(|u: &Until<'_>| hash::urandom(u)),
                Box::new(|u: &Until<'_>| {
                    disk::writer(u, LoadSpec::DEFAULT_DISK_SIZE, LoadSpec::DEFAULT_CHUNK)
                }),
            ]
        }
    };
    let mut report = LoadReport::new(spec, duration);
    let mut first_error: Option<Error> = None;
    std::thread::scope(|s| {
        let until = &until;
        let mut handles = Vec::with_capacity(workers.len());
        for (i, w) in workers.into_iter().enumerate() {
            let b = std::thread::Builder::new().name(format!("load-{}-{i}", spec.kind()));
            match b.spawn_scoped(s, move || {
                let r = w(until);
                if r.is_err() {
                    until.abort.store(true, Ordering::Relaxed);
                }
                r
            }) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    until.abort.store(true, Ordering::Relaxed);
                    first_error.get_or_insert(Error::new(
                        ErrorKind::Io,
                        format!("cannot start a {} load thread: {e}", spec.kind()),
                    ));
                    break;
                }
            }
        }
        for h in handles {
            match h.join() {
                Ok(Ok(w)) => report.absorb(w),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    let end = monotonic_ns();
    report.elapsed_ns = end - start;
    report.stopped = stop.load(Ordering::Relaxed) && end < until.deadline_ns;
    Ok(report)
}
