//! The measured loop: a POSIX timer at an absolute expiry, a SIGALRM
//! handler that records when the process ran again, and the loop that
//! arms, computes and blocks. **RT-safe** once set up.

use super::worker::Delays;
use super::MIN_DELAY_NS;
use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::clock::timespec;
use firmtime_rt::sched;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// CLOCK_MONOTONIC when the handler ran; 0 = not yet.
static FIRED_NS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_alarm(_sig: libc::c_int) {
    // SAFETY: __errno_location returns this thread's errno; saved and restored.
    let errno = unsafe { *libc::__errno_location() };
    let now = firmtime_rt::clock::monotonic_ns();
    let _ = FIRED_NS.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The SIGALRM handler, installed for the guard's lifetime.
pub(super) struct AlarmHandler {
    old: libc::sigaction,
}

impl AlarmHandler {
    pub(super) fn install() -> Result<Self> {
        // SAFETY: all-zero sigaction is valid; fields are set below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = 0;
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: all-zero sigaction is a valid out-parameter.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid; the handler is async-signal-safe.
        if unsafe { libc::sigaction(libc::SIGALRM, &sa, &mut old) } != 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot install the SIGALRM handler: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(Self { old })
    }
}

impl Drop for AlarmHandler {
    fn drop(&mut self) {
        // SAFETY: `self.old` is the action sigaction returned.
        unsafe { libc::sigaction(libc::SIGALRM, &self.old, std::ptr::null_mut()) };
    }
}

/// A POSIX timer on CLOCK_MONOTONIC that sends SIGALRM to the thread that
/// created it.
pub(super) struct AlarmTimer {
    id: libc::timer_t,
}

impl AlarmTimer {
    pub(super) fn new() -> Result<Self> {
        // SAFETY: all-zero sigevent is valid; fields are set below.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGALRM;
        sev.sigev_notify_thread_id = sched::current_tid();
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `id` are valid for the call.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) } != 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "timer_create(CLOCK_MONOTONIC) failed: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(Self { id })
    }

    /// Arms the timer to expire once at CLOCK_MONOTONIC `t_ns` (0 disarms).
    /// **RT-safe.**
    fn arm_at(&self, t_ns: u64) -> std::result::Result<(), firmtime_rt::Errno> {
        let its = libc::itimerspec {
            it_interval: timespec(0),
            it_value: timespec(t_ns),
        };
        // SAFETY: `its` is valid; the old-value pointer may be null.
        let rc = unsafe {
            libc::timer_settime(self.id, libc::TIMER_ABSTIME, &its, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(firmtime_rt::Errno::last());
        }
        Ok(())
    }
}

impl Drop for AlarmTimer {
    fn drop(&mut self) {
        // SAFETY: `self.id` came from timer_create and is deleted once.
        unsafe { libc::timer_delete(self.id) };
    }
}

pub(super) struct LoopParams {
    pub(super) compute_percent: u8,
    pub(super) max_delay_ns: u64,
    pub(super) seed: u64,
    pub(super) deadline_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LoopEnd {
    Done,
    Deadline,
    Stopped,
}

/// The measured loop. Fills `out` with one latency per alarm and returns how
/// many and why it ended. **RT-safe**: no allocation, no lock, no printing.
pub(super) fn alarm_loop(
    timer: &AlarmTimer,
    _handler: &AlarmHandler,
    p: &LoopParams,
    stop: &AtomicBool,
    out: &mut [i64],
) -> std::result::Result<(usize, LoopEnd), firmtime_rt::Errno> {
    use firmtime_rt::clock::monotonic_ns as now;
    // SAFETY: all-zero sigset_t values are valid and initialized below.
    let (mut alrm, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: `alrm` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut alrm);
        libc::sigaddset(&mut alrm, libc::SIGALRM);
    }
    // SAFETY: both sets are valid; this reads the current mask.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &alrm, &mut old) };
    let mut wait_mask = old;
    // SAFETY: `wait_mask` is a valid sigset_t.
    unsafe { libc::sigdelset(&mut wait_mask, libc::SIGALRM) };
    let mut delays = Delays::new(p.seed, p.max_delay_ns);
    let mut n = 0;
    let mut end = LoopEnd::Done;
    while n < out.len() {
        if stop.load(Ordering::Relaxed) {
            end = LoopEnd::Stopped;
            break;
        }
        let armed = now();
        if armed >= p.deadline_ns {
            end = LoopEnd::Deadline;
            break;
        }
        let d = delays.next().unwrap_or(MIN_DELAY_NS);
        let expiry = armed + d;
        FIRED_NS.store(0, Ordering::SeqCst);
        timer.arm_at(expiry)?;
        // Compute: N % of the time till the alarm, or until it arrives (CONT).
        if p.compute_percent >= 100 {
            let mut spins = 0u32;
            while FIRED_NS.load(Ordering::SeqCst) == 0 {
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 {
                    if stop.load(Ordering::Relaxed) {
                        end = LoopEnd::Stopped;
                        break;
                    }
                    if now() >= p.deadline_ns {
                        end = LoopEnd::Deadline;
                        break;
                    }
                }
                std::hint::spin_loop();
            }
        } else if p.compute_percent > 0 {
            let until = armed + d * u64::from(p.compute_percent) / 100;
            while FIRED_NS.load(Ordering::SeqCst) == 0 && now() < until {
                std::hint::spin_loop();
            }
        }
        if end != LoopEnd::Done {
            break;
        }
        // Block until the alarm: block SIGALRM, check, then sigsuspend
        // unblocks and waits atomically, so the signal cannot slip between.
        // SAFETY: `alrm` is a valid set; the old mask is not needed.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &alrm, std::ptr::null_mut()) };
        while FIRED_NS.load(Ordering::SeqCst) == 0 && !stop.load(Ordering::Relaxed) {
            // SAFETY: `wait_mask` is a valid sigset_t; sigsuspend always returns -1/EINTR.
            unsafe { libc::sigsuspend(&wait_mask) };
        }
        // SAFETY: `alrm` is a valid set.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &alrm, std::ptr::null_mut()) };
        let fired = FIRED_NS.load(Ordering::SeqCst);
        if fired == 0 {
            end = LoopEnd::Stopped;
            break;
        }
        out[n] = fired as i64 - expiry as i64;
        n += 1;
    }
    let _ = timer.arm_at(0);
    // SAFETY: `old` is the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    Ok((n, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tails::MS;
    use std::sync::atomic::AtomicBool;

    fn run_loop(percent: u8, alarms: usize) -> (Vec<i64>, usize, LoopEnd) {
        let mut out = vec![0i64; alarms];
        let handler = AlarmHandler::install().unwrap();
        let timer = AlarmTimer::new().unwrap();
        let stop = AtomicBool::new(false);
        let p = LoopParams {
            compute_percent: percent,
            max_delay_ns: 3 * MS,
            seed: 7,
            deadline_ns: firmtime_rt::clock::monotonic_ns() + 60_000 * MS,
        };
        let (n, end) = assert_no_alloc::assert_no_alloc(|| {
            alarm_loop(&timer, &handler, &p, &stop, &mut out).unwrap()
        });
        (out, n, end)
    }

    // One test runs all three types: the handler and FIRED_NS are process-wide.
    #[test]
    fn alarm_loop_measures_every_alarm_without_allocating() {
        for percent in [0u8, 50, 100] {
            let (out, n, end) = run_loop(percent, 8);
            assert_eq!(n, 8, "type {percent}%: every alarm delivered");
            assert_eq!(end, LoopEnd::Done);
            assert!(
                out.iter().all(|&l| l >= 0),
                "type {percent}%: the handler never runs before the expiry: {out:?}"
            );
        }
    }
}
