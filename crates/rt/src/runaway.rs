//! Runaway protection: RLIMIT_RTTIME plus a SIGXCPU handler that demotes
//! the offending thread to SCHED_OTHER.
//!
//! A SCHED_FIFO thread that never blocks owns its CPU; one on every CPU owns
//! the machine (only `kernel.sched_rt_runtime_us` throttling, 5% by default,
//! is left for everything else). [`install`] sets RLIMIT_RTTIME: once a
//! real-time thread has run for `limit` of CPU time without blocking, the
//! kernel sends SIGXCPU, and the handler installed here demotes the thread
//! it runs on to SCHED_OTHER (nice 0) and counts it ([`demotions`]).
//!
//! # Which thread gets the signal
//!
//! The kernel checks RLIMIT_RTTIME per thread from the scheduler tick of the
//! offending thread and sends SIGXCPU *process-directed*
//! (`send_signal_locked(.., PIDTYPE_TGID)` in `kernel/time/posix-cpu-timers.c`).
//! Delivery of a process-directed signal prefers the current thread if it
//! does not block the signal — and the current thread at that tick is the
//! offender. So the handler runs on the runaway thread, as long as that
//! thread does not block SIGXCPU (don't). If it lands elsewhere (the offender
//! is already in the handler), the handler finds a non-RT thread and does
//! nothing; the offender is signalled again at its next tick.
//!
//! After each SIGXCPU the kernel raises the process's soft limit by one
//! second; the handler puts it back, so every RT thread keeps the same budget.
//! With CAP_SYS_RESOURCE the hard limit is set to `limit + 1 s` (or kept if
//! lower): a thread that cannot be demoted is then killed by the kernel
//! (SIGKILL) instead of locking up the machine
//! ([`RunawayGuard::kill_backstop`]). Without CAP_SYS_RESOURCE — even root
//! may lack it in a container — a lowered hard limit could never be raised
//! again, so the hard limit is left as it is and only the demotion protects.
//!
//! The counter includes demotions for RLIMIT_CPU's SIGXCPU too (the kernel
//! sends both the same way); only threads found at SCHED_FIFO/SCHED_RR are
//! demoted and counted.
//!
//! # RT contract
//!
//! The handler is async-signal-safe: system calls and atomics only, `errno`
//! saved and restored. [`demotions`] is **RT-safe**.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Threads demoted by the handler since the process started.
static DEMOTIONS: AtomicU64 = AtomicU64::new(0);
/// The soft limit in µs the handler restores; 0 when no guard is installed.
static SOFT_US: AtomicU64 = AtomicU64::new(0);
/// Handlers currently running (so `Drop` can wait them out).
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// Whether a guard exists (there can be only one per process).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// `SCHED_RESET_ON_FORK`, or-ed into `sched_getscheduler`'s result.
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;

/// The shortest limit accepted (RLIMIT_RTTIME is checked once per tick).
pub const MIN_LIMIT: Duration = Duration::from_millis(1);
/// How far above the soft limit the hard (SIGKILL) limit is set.
pub const HARD_MARGIN: Duration = Duration::from_secs(1);

/// Threads demoted by the SIGXCPU handler since the process started.
///
/// **RT-safe.**
pub fn demotions() -> u64 {
    DEMOTIONS.load(Ordering::SeqCst)
}

/// While alive, RT threads that run `limit` without blocking are demoted.
/// Dropping it restores the previous RLIMIT_RTTIME and SIGXCPU action.
#[derive(Debug)]
pub struct RunawayGuard {
    limit: Duration,
    kill_backstop: bool,
    old_limit: libc::rlimit,
    old_action: libc::sigaction,
    base: u64,
}

/// Installs runaway protection for the whole process: RLIMIT_RTTIME soft
/// limit `limit`, the demoting SIGXCPU handler and, with CAP_SYS_RESOURCE,
/// a hard (SIGKILL) limit of `limit + 1 s`. See the module docs.
///
/// # Errors
/// - [`crate::ErrorKind::InvalidInput`] if `limit` is under 1 ms, a guard is
///   already installed, or the current hard RLIMIT_RTTIME is below `limit`.
/// - [`crate::ErrorKind::Io`] if `sigaction` or `setrlimit` fails (then nothing
///   is left changed).
pub fn install(limit: Duration) -> Result<RunawayGuard> {
    if limit < MIN_LIMIT {
        return Err(Error::invalid(format!(
            "runaway limit {} is too short: RLIMIT_RTTIME is checked once per scheduler tick; use at least 1ms",
            crate::units::format_duration(limit)
        )));
    }
    let soft = u64::try_from(limit.as_micros())
        .map_err(|_| Error::invalid("runaway limit is too large"))?;
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Err(Error::invalid(
            "runaway protection is already installed in this process: drop the existing RunawayGuard first",
        ));
    }
    match install_inner(limit, soft) {
        Ok(g) => Ok(g),
        Err(e) => {
            INSTALLED.store(false, Ordering::SeqCst);
            Err(e)
        }
    }
}

fn install_inner(limit: Duration, soft: u64) -> Result<RunawayGuard> {
    let mut old_limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid, owned struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut old_limit) } != 0 {
        return Err(Error::last_os("getrlimit(RLIMIT_RTTIME)"));
    }
    if old_limit.rlim_max != libc::RLIM_INFINITY && old_limit.rlim_max < soft {
        return Err(Error::invalid(format!(
            "runaway limit {}us is above the hard RLIMIT_RTTIME of {}us, which only root can raise: ask for less",
            soft, old_limit.rlim_max
        )));
    }
    let wanted_hard = soft.saturating_add(HARD_MARGIN.as_micros() as u64);
    let can_restore = has_cap_sys_resource();
    let new_limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: if !can_restore {
            old_limit.rlim_max
        } else if old_limit.rlim_max == libc::RLIM_INFINITY {
            wanted_hard
        } else {
            old_limit.rlim_max.min(wanted_hard)
        },
    };

    // SAFETY: sigaction is plain data; zeroed is a valid starting value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigxcpu as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: sa_mask is a valid, owned sigset_t.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: sigaction is plain data; it is filled in by sigaction below.
    let mut old_action: libc::sigaction = unsafe { std::mem::zeroed() };
    SOFT_US.store(soft, Ordering::SeqCst);
    // SAFETY: both pointers are valid; the handler is async-signal-safe.
    if unsafe { libc::sigaction(libc::SIGXCPU, &action, &mut old_action) } != 0 {
        SOFT_US.store(0, Ordering::SeqCst);
        return Err(Error::last_os("sigaction(SIGXCPU)"));
    }
    // SAFETY: setrlimit reads a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &new_limit) } != 0 {
        let e = Error::last_os("setrlimit(RLIMIT_RTTIME)");
        SOFT_US.store(0, Ordering::SeqCst);
        // SAFETY: restores the action saved above.
        unsafe { libc::sigaction(libc::SIGXCPU, &old_action, std::ptr::null_mut()) };
        return Err(e);
    }
    Ok(RunawayGuard {
        limit,
        kill_backstop: new_limit.rlim_max != libc::RLIM_INFINITY,
        old_limit,
        old_action,
        base: demotions(),
    })
}

impl RunawayGuard {
    /// The RT CPU time a thread may use without blocking before demotion.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// True if a hard RLIMIT_RTTIME is in force: a thread the handler cannot
    /// demote is killed by the kernel (the whole process with it).
    pub fn kill_backstop(&self) -> bool {
        self.kill_backstop
    }

    /// Threads demoted since this guard was installed. **RT-safe.**
    pub fn demotions(&self) -> u64 {
        demotions() - self.base
    }
}

impl Drop for RunawayGuard {
    fn drop(&mut self) {
        // Stop handlers from re-arming the soft limit, and wait out any that
        // already decided to (SeqCst pairs with the handler's entry).
        SOFT_US.store(0, Ordering::SeqCst);
        while IN_HANDLER.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: setrlimit reads a valid struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &self.old_limit) } != 0 {
            // Raising the hard limit back needs CAP_SYS_RESOURCE: keep the
            // hard limit we set and restore only the soft one.
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes into a valid, owned struct.
            unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut cur) };
            cur.rlim_cur = self.old_limit.rlim_cur.min(cur.rlim_max);
            // SAFETY: setrlimit reads a valid struct.
            unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &cur) };
        }
        // SAFETY: restores the action saved at install; the pointer is valid.
        unsafe { libc::sigaction(libc::SIGXCPU, &self.old_action, std::ptr::null_mut()) };
        INSTALLED.store(false, Ordering::SeqCst);
    }
}

/// CAP_SYS_RESOURCE (24) is in the effective set: a lowered hard limit can be raised back.
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| crate::privileges::parse_cap_eff(&s))
        .is_some_and(|c| crate::privileges::has_cap(c, crate::privileges::CAP_SYS_RESOURCE))
}

/// The SIGXCPU handler: demotes the current thread if it is FIFO/RR, counts
/// it, and puts RLIMIT_RTTIME's soft limit back. Async-signal-safe.
extern "C" fn on_sigxcpu(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: sched_getscheduler is a plain system call.
    let policy = unsafe { libc::sched_getscheduler(0) } & !SCHED_RESET_ON_FORK;
    if (policy == libc::SCHED_FIFO || policy == libc::SCHED_RR)
        && crate::sched::demote_current_thread().is_ok()
    {
        DEMOTIONS.fetch_add(1, Ordering::SeqCst);
    }
    let soft = SOFT_US.load(Ordering::SeqCst);
    if soft != 0 {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit are plain system calls on a valid struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_RTTIME, &mut cur) == 0 && cur.rlim_cur != soft {
                cur.rlim_cur = soft.min(cur.rlim_max);
                libc::setrlimit(libc::RLIMIT_RTTIME, &cur);
            }
        }
    }
    // SAFETY: as above; restores the interrupted code's errno.
    unsafe { *libc::__errno_location() = errno };
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn rttime() -> libc::rlimit {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid, owned struct.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut l) }, 0);
        l
    }

    fn handler() -> usize {
        // SAFETY: sigaction is plain data; filled by sigaction.
        let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only queries; `a` is valid.
        let r = unsafe { libc::sigaction(libc::SIGXCPU, std::ptr::null(), &mut a) };
        assert_eq!(r, 0);
        a.sa_sigaction
    }

    // The only unit test that touches the process-wide limit and handler.
    #[test]
    fn install_sets_limit_and_handler_and_drop_restores_them() {
        let (before_limit, before_handler) = (rttime(), handler());
        assert_eq!(
            install(Duration::from_micros(10)).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let g = install(Duration::from_millis(250)).unwrap();
        assert_eq!(g.limit(), Duration::from_millis(250));
        let l = rttime();
        assert_eq!(l.rlim_cur, 250_000);
        assert!(l.rlim_max >= l.rlim_cur);
        assert_eq!(g.kill_backstop(), l.rlim_max != libc::RLIM_INFINITY);
        if has_cap_sys_resource() && before_limit.rlim_max == libc::RLIM_INFINITY {
            assert_eq!(l.rlim_max, 1_250_000);
        }
        assert_eq!(handler(), on_sigxcpu as *const () as usize);
        let e = install(Duration::from_millis(250)).unwrap_err();
        assert!(e.message().contains("already installed"), "{e}");
        assert_eq!(g.demotions(), 0);
        drop(g);
        let after = rttime();
        assert_eq!(
            (after.rlim_cur, after.rlim_max),
            (before_limit.rlim_cur, before_limit.rlim_max)
        );
        assert_eq!(handler(), before_handler);
        // A second install after drop works.
        drop(install(Duration::from_secs(1)).unwrap());
    }
}
