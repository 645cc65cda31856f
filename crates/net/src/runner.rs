//! A worker's plugin instance on a thread of its own, under a watchdog.
//!
//! A plugin is foreign code: one `run()` may take far longer than its period
//! (a control value it was not built for, a bug, a hostile library) and
//! nothing can interrupt it. So a worker never runs a plugin on its shared
//! data thread. The data thread hands each complete period to the session's
//! runner thread ([`Feed::offer`], never waiting; up to 4 periods queue
//! there) and goes on serving the
//! other streams; the runner runs the plugin and sends the result itself.
//! [`Runner::check`], called by the worker's watchdog thread, cuts a session
//! off when one run has used more CPU time than its budget
//! ([`budget_ns`]: twice the period, at least [`MIN_BUDGET_NS`], at most
//! [`MAX_BUDGET_NS`]), or lasted longer than [`MAX_RUN_WALL_NS`] whatever
//! it used (a plugin blocked in a call). CPU time, not wall time, so that a
//! runner kept off the CPU by a loaded machine is not taken for a runaway.
//! The session's periods are dropped from then on, the
//! runner thread is demoted to `SCHED_IDLE` (it cannot be killed; if the run
//! ever ends, the thread ends too) and the worker reports it.
//!
//! # RT contract
//! [`Feed::offer`] is **RT-safe**: no allocation (buffers circulate between
//! the two threads), no waiting (a bounded channel's `try_send`). The
//! runner thread runs the plugin under the policy it is given (the worker
//! gives one real-time priority below its data thread's, so that the data
//! thread, which serves every session, preempts any plugin run); the rest
//! is control plane.

use crate::block::{BlockSet, Flow};
use crate::error::{Error, Result};
use crate::remote::PluginHost;
use crate::wire::{Encoder, Key, MAC_LEN};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sched::Policy;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// Shortest run budget (10 ms), whatever the period.
pub const MIN_BUDGET_NS: u64 = 10_000_000;
/// Longest run budget (500 ms of CPU), whatever the period: the hard cap.
pub const MAX_BUDGET_NS: u64 = 500_000_000;
/// Longest one run may last in wall time (2 s), whatever CPU it used.
pub const MAX_RUN_WALL_NS: u64 = 2_000_000_000;

/// Periods a runner holds at once (one running, the rest queued): a
/// master's window of 2 keeps at most 3 in flight.
const QUEUE: usize = 4;

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const CUT: u8 = 2;

/// The run budget of a plugin stream: twice its period (`max_frames` at
/// `sample_rate`), clamped to [`MIN_BUDGET_NS`]..=[`MAX_BUDGET_NS`].
pub fn budget_ns(max_frames: u32, sample_rate: u32) -> u64 {
    let period = u64::from(max_frames) * 1_000_000_000 / u64::from(sample_rate.max(1));
    period.saturating_mul(2).clamp(MIN_BUDGET_NS, MAX_BUDGET_NS)
}

struct Job {
    seq: u64,
    to: SocketAddr,
    input: Vec<u8>,
}

/// State shared by the data thread, the runner thread and the watchdog.
#[derive(Debug)]
struct Shared {
    state: AtomicU8,
    started_ns: AtomicU64,
    /// The runner thread's CPU time at the start of the current run.
    started_cpu_ns: AtomicU64,
    /// The runner thread's CPU clock (`pthread_getcpuclockid`); 0 = unknown.
    cpu_clock: AtomicI32,
    budget_ns: u64,
    tid: AtomicI32,
    stop: AtomicBool,
    /// Periods dropped: the runner was still busy, or the session was cut off.
    dropped: AtomicU64,
    /// How long the run that was cut off had lasted when the watchdog saw it.
    cut_after_ns: AtomicU64,
}

/// The data thread's end: hands periods to the runner.
pub struct Feed {
    shared: Arc<Shared>,
    jobs: SyncSender<Job>,
    free: Receiver<Vec<u8>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").finish_non_exhaustive()
    }
}

impl Feed {
    /// Hands period `seq` (its inputs in `blocks`) to the runner, whose
    /// result goes to `to`; drops it (counted) if the runner is still busy
    /// or the session was cut off. **RT-safe.**
    pub fn offer(&self, blocks: &BlockSet, seq: u64, to: SocketAddr) {
        if self.shared.state.load(Ordering::Acquire) == CUT {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok(mut input) = self.free.try_recv() else {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        blocks.encode(Flow::ToWorker, &mut input);
        if self.jobs.try_send(Job { seq, to, input }).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The watchdog's end of a runner; dropping it ends the runner thread
/// (after its current run, if any).
#[derive(Debug)]
pub struct Runner {
    shared: Arc<Shared>,
}

/// What [`Runner::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Within budget (or idle).
    Ok,
    /// This check cut the session off.
    CutOff {
        /// CPU time the run had used, ns.
        cpu_ns: u64,
        /// Wall time it had lasted, ns.
        wall_ns: u64,
    },
    /// Cut off earlier.
    WasCut,
}

impl Runner {
    /// Starts a runner thread for `host` with blocks of `blocks`' layout; it
    /// answers on `socket` with fragments of `chunk` bytes under `key`.
    ///
    /// # Errors
    /// The encoder refuses the chunk size; the thread cannot be spawned.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        mut host: PluginHost,
        mut blocks: BlockSet,
        stream_id: u32,
        socket: UdpSocket,
        chunk: usize,
        key: Option<Key>,
        budget_ns: u64,
        policy: Option<Policy>,
    ) -> Result<(Runner, Feed)> {
        let encoder = Encoder::new(stream_id, Flow::FromWorker, chunk, key)?;
        let in_len = blocks.payload_len(Flow::ToWorker);
        let out_len = blocks.payload_len(Flow::FromWorker);
        let shared = Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            started_ns: AtomicU64::new(0),
            started_cpu_ns: AtomicU64::new(0),
            cpu_clock: AtomicI32::new(0),
            budget_ns,
            tid: AtomicI32::new(0),
            stop: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            cut_after_ns: AtomicU64::new(0),
        });
        let (jobs_tx, jobs_rx) = sync_channel::<Job>(QUEUE);
        let (free_tx, free_rx) = sync_channel::<Vec<u8>>(QUEUE);
        for _ in 0..QUEUE {
            let _ = free_tx.send(vec![0u8; in_len]);
        }
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("ft-net-plugin".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                sh.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
                let mut clock: libc::clockid_t = 0;
                // SAFETY: `clock` is a valid out-pointer; pthread_self is this live thread.
                if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
                    sh.cpu_clock.store(clock, Ordering::Relaxed);
                }
                if let Some(p) = policy {
                    // Refused only if the data thread's own policy was; it runs as it can.
                    let _ = firmtime_rt::sched::set_current_thread(&p);
                }
                let mut out = vec![0u8; out_len];
                let mut datagram = vec![0u8; chunk + crate::wire::HEADER_LEN + MAC_LEN];
                while !sh.stop.load(Ordering::Relaxed) {
                    let job = match jobs_rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(j) => j,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    };
                    sh.started_ns.store(monotonic_ns(), Ordering::Relaxed);
                    sh.started_cpu_ns
                        .store(cpu_ns_of(libc::CLOCK_THREAD_CPUTIME_ID), Ordering::Relaxed);
                    if sh
                        .state
                        .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        break; // cut off
                    }
                    blocks.decode(Flow::ToWorker, &job.input);
                    // The input buffer is free again: the next period may queue behind this run.
                    if free_tx.send(job.input).is_err() {
                        break;
                    }
                    host.run(&mut blocks);
                    if sh
                        .state
                        .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        break; // cut off while it ran: its result is not sent
                    }
                    let n = blocks.encode(Flow::FromWorker, &mut out);
                    for i in 0..encoder.fragments(n) {
                        let len = encoder.encode(&mut datagram, job.seq, &out[..n], i);
                        // 0: a sealing encoder refused the nonce.
                        if len > 0 {
                            let _ = socket.send_to(&datagram[..len], job.to);
                        }
                    }
                }
            })
            .map_err(|e| Error::io("spawning a plugin runner thread", e))?;
        Ok((
            Runner {
                shared: shared.clone(),
            },
            Feed {
                shared,
                jobs: jobs_tx,
                free: free_rx,
            },
        ))
    }

    /// The watchdog's check: cuts the session off if the current run has
    /// lasted longer than the budget, and demotes the runner thread.
    pub fn check(&self) -> Check {
        let sh = &self.shared;
        match sh.state.load(Ordering::Acquire) {
            CUT => return Check::WasCut,
            RUNNING => {}
            _ => return Check::Ok,
        }
        let wall_ns = monotonic_ns().saturating_sub(sh.started_ns.load(Ordering::Relaxed));
        let clock = sh.cpu_clock.load(Ordering::Relaxed);
        let cpu_ns = if clock == 0 {
            wall_ns // no CPU clock: wall time is the best bound there is
        } else {
            cpu_ns_of(clock).saturating_sub(sh.started_cpu_ns.load(Ordering::Relaxed))
        };
        if cpu_ns <= sh.budget_ns && wall_ns <= MAX_RUN_WALL_NS {
            return Check::Ok;
        }
        if sh
            .state
            .compare_exchange(RUNNING, CUT, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // The run ended just now.
            return Check::Ok;
        }
        sh.cut_after_ns.store(wall_ns, Ordering::Relaxed);
        let tid = sh.tid.load(Ordering::Relaxed);
        if tid > 0 {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid sched_param for the call; a tid that
            // has exited only makes the call fail.
            let _ = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) };
        }
        Check::CutOff { cpu_ns, wall_ns }
    }

    /// The budget of one run, in ns.
    pub fn budget_ns(&self) -> u64 {
        self.shared.budget_ns
    }

    /// Periods dropped (runner busy, or cut off).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

/// A clock's time in ns (0 if it cannot be read, e.g. a thread that ended).
fn cpu_ns_of(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_twice_the_period_within_its_bounds() {
        // 256 frames at 48 kHz: 5.33 ms period, 10.67 ms budget.
        assert_eq!(budget_ns(256, 48_000), 10_666_666);
        assert_eq!(budget_ns(16, 48_000), MIN_BUDGET_NS);
        assert_eq!(budget_ns(65_536, 1_000), MAX_BUDGET_NS);
        assert_eq!(budget_ns(u32::MAX, 0), MAX_BUDGET_NS);
    }
}
