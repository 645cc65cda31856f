//! Every way Linux offers to wait until a deadline, behind one interface.
//!
//! A [`Sleeper`] answers one question: "sleep until this CLOCK_MONOTONIC
//! deadline; when did you wake?" The mechanisms are those the papers
//! compare (Finney 2001 "Process suspension"; Varoquaux 2006's "ask in
//! advance, then busy-wait") plus their modern successors:
//!
//! | [`Mechanism`] | how it waits |
//! |---|---|
//! | `nanosleep` | relative `nanosleep(2)`, remaining time recomputed from now |
//! | `clock_nanosleep` | `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` |
//! | `timerfd` | `timerfd_settime(TFD_TIMER_ABSTIME)` + `read(2)` |
//! | `setitimer` | `setitimer(ITIMER_REAL)` (µs, relative) + blocked SIGALRM + `sigwaitinfo` |
//! | `posix-timer` | `timer_create(CLOCK_MONOTONIC, SIGEV_THREAD_ID)` + `TIMER_ABSTIME` + `sigwaitinfo` |
//! | `poll`, `epoll`, `select` | the timeout of `poll`/`epoll_wait` (ms) or `select` (µs) |
//! | `spin` | reads CLOCK_MONOTONIC until the deadline |
//! | `hybrid` | `clock_nanosleep` to deadline − margin, then spins |
//! | `rtc` | `/dev/rtc` periodic interrupts, one `read(2)` per interrupt |
//!
//! Every sleeper returns a wake time at or after the deadline: relative and
//! coarse mechanisms (nanosleep, setitimer, poll, epoll, select, rtc) repeat
//! their wait until CLOCK_MONOTONIC has passed it. A deadline already in the
//! past returns at once (one clock read, no wait). `poll`, `epoll` and
//! `select` deliberately use the plain calls the papers' era had (ms and µs
//! timeouts, rounded up), not `ppoll`/`epoll_pwait2` (ns).
//!
//! [`open`] does all setup — allocation, file descriptors, signal masks,
//! `timer_create`. A mechanism this machine lacks is an
//! [`ErrorKind::NotPresent`] error, never a silent substitute.
//!
//! # RT contract
//! [`Sleeper::sleep_until`] is **RT-safe**: it never allocates, locks or
//! prints; it makes only the waiting system call(s) and clock reads, and
//! retries `EINTR`. Its errors are the `Copy` [`Errno`].
//!
//! # Thread binding
//! `setitimer` and `posix-timer` sleepers wait for a signal blocked in the
//! thread that opened them, so they must be opened on the thread that will
//! sleep (see [`Mechanism::is_thread_bound`]); `sleep_until` from any other
//! thread returns `Errno(EPERM)`.
//!
//! ```
//! use firmtime_rt::{clock, sleep};
//! let mut s = sleep::open(sleep::Mechanism::ClockNanosleep).unwrap();
//! let deadline = clock::monotonic_ns() + 1_000_000;
//! let woke = s.sleep_until(deadline).unwrap();
//! assert!(woke >= deadline);
//! ```

use crate::clock::{monotonic_ns, timespec};
use crate::error::{Errno, Error, ErrorKind, Result};
use crate::units::{format_duration, parse_duration};
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

/// Default spin margin of [`Mechanism::Hybrid`] parsed from plain `hybrid`.
pub const DEFAULT_HYBRID_MARGIN_NS: u64 = 100_000;

/// Interrupt rate [`Mechanism::Rtc`] programs: 8192 Hz, the fastest
/// `/dev/rtc` rate (0.12 ms, as in Finney 2001). Above
/// `/proc/sys/dev/rtc/max-user-freq` it needs root or CAP_SYS_RESOURCE.
pub const RTC_DEFAULT_HZ: u32 = 8192;

/// A way to wait until a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// Relative `nanosleep(2)`; the remaining time is recomputed from now.
    Nanosleep,
    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`.
    ClockNanosleep,
    /// A CLOCK_MONOTONIC timerfd armed with an absolute time, then `read(2)`.
    Timerfd,
    /// `setitimer(ITIMER_REAL)` and a blocked SIGALRM taken by `sigwaitinfo`.
    /// Process-wide: one such sleeper per process at a time. Thread-bound.
    Setitimer,
    /// A POSIX timer on CLOCK_MONOTONIC signalling the opening thread, armed
    /// with `TIMER_ABSTIME`, taken by `sigwaitinfo`. Thread-bound.
    PosixTimer,
    /// The millisecond timeout of `poll(2)` with no descriptors.
    Poll,
    /// The millisecond timeout of `epoll_wait(2)` on an empty epoll set.
    Epoll,
    /// The microsecond timeout of `select(2)` with no descriptors.
    Select,
    /// Busy-wait on CLOCK_MONOTONIC.
    Spin,
    /// `clock_nanosleep` to `deadline − margin_ns`, then busy-wait.
    Hybrid {
        /// How long before the deadline to stop sleeping and start spinning.
        margin_ns: u64,
    },
    /// `/dev/rtc` periodic interrupts at [`RTC_DEFAULT_HZ`]; wakes at the first
    /// interrupt at or after the deadline.
    Rtc,
}

impl Mechanism {
    /// Every mechanism (hybrid with [`DEFAULT_HYBRID_MARGIN_NS`]).
    pub const ALL: [Mechanism; 11] = [
        Mechanism::Nanosleep,
        Mechanism::ClockNanosleep,
        Mechanism::Timerfd,
        Mechanism::Setitimer,
        Mechanism::PosixTimer,
        Mechanism::Poll,
        Mechanism::Epoll,
        Mechanism::Select,
        Mechanism::Spin,
        Mechanism::Hybrid {
            margin_ns: DEFAULT_HYBRID_MARGIN_NS,
        },
        Mechanism::Rtc,
    ];

    /// The name users type: `nanosleep`, `clock_nanosleep`, `timerfd`,
    /// `setitimer`, `posix-timer`, `poll`, `epoll`, `select`, `spin`,
    /// `hybrid`, `rtc`. ([`fmt::Display`] adds the hybrid margin: `hybrid:100us`.)
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Nanosleep => "nanosleep",
            Mechanism::ClockNanosleep => "clock_nanosleep",
            Mechanism::Timerfd => "timerfd",
            Mechanism::Setitimer => "setitimer",
            Mechanism::PosixTimer => "posix-timer",
            Mechanism::Poll => "poll",
            Mechanism::Epoll => "epoll",
            Mechanism::Select => "select",
            Mechanism::Spin => "spin",
            Mechanism::Hybrid { .. } => "hybrid",
            Mechanism::Rtc => "rtc",
        }
    }

    /// True when the sleeper must be opened on, and used from, one thread
    /// (`setitimer`, `posix-timer`: they wait for a signal blocked there).
    pub fn is_thread_bound(self) -> bool {
        matches!(self, Mechanism::Setitimer | Mechanism::PosixTimer)
    }

    /// True when the mechanism burns CPU while waiting (`spin`, `hybrid`);
    /// [`Sleeper::spin_ns`] reports how much.
    pub fn spins(self) -> bool {
        matches!(self, Mechanism::Spin | Mechanism::Hybrid { .. })
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mechanism::Hybrid { margin_ns } => write!(
                f,
                "hybrid:{}",
                format_duration(Duration::from_nanos(*margin_ns))
            ),
            m => f.write_str(m.name()),
        }
    }
}

impl FromStr for Mechanism {
    type Err = Error;

    /// Parses a name from [`Mechanism::name`]; `hybrid:<duration>` (e.g.
    /// `hybrid:200us`) sets the hybrid margin.
    fn from_str(s: &str) -> Result<Self> {
        if let Some(margin) = s.strip_prefix("hybrid:") {
            let d = parse_duration(margin).map_err(|e| {
                Error::invalid(format!("'{s}': bad hybrid margin: {}", e.message()))
            })?;
            return Ok(Mechanism::Hybrid {
                margin_ns: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            });
        }
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
                Error::invalid(format!(
                    "unknown sleep mechanism '{s}': valid are {} (and hybrid:<margin>, e.g. hybrid:200us)",
                    names.join(", ")
                ))
            })
    }
}

impl serde::Serialize for Mechanism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Mechanism {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Waits until a CLOCK_MONOTONIC deadline.
pub trait Sleeper: Send {
    /// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` and returns the
    /// CLOCK_MONOTONIC time read on waking, which is never before the
    /// deadline. A deadline in the past returns at once. **RT-safe.**
    ///
    /// # Errors
    /// The `errno` of a failed system call (`EINTR` is retried, never
    /// returned); `EPERM` for a thread-bound sleeper called from a thread
    /// other than the one that opened it.
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno>;

    /// Which mechanism this is.
    fn mechanism(&self) -> Mechanism;

    /// Total nanoseconds spent busy-waiting since open (`spin` and
    /// `hybrid`; 0 for the others).
    fn spin_ns(&self) -> u64 {
        0
    }
}

impl<S: Sleeper + ?Sized> Sleeper for Box<S> {
    #[inline]
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        (**self).sleep_until(deadline_ns)
    }
    fn mechanism(&self) -> Mechanism {
        (**self).mechanism()
    }
    fn spin_ns(&self) -> u64 {
        (**self).spin_ns()
    }
}

/// Opens a sleeper for `mechanism`, doing all its setup.
///
/// Thread-bound mechanisms ([`Mechanism::is_thread_bound`]) must be opened
/// on the thread that will call `sleep_until`.
///
/// # Errors
/// - [`ErrorKind::NotPresent`] for `rtc` when neither `/dev/rtc` nor
///   `/dev/rtc0` exists.
/// - [`ErrorKind::InvalidInput`] for a second `setitimer` sleeper while one
///   is open (ITIMER_REAL is process-wide), or when SIGALRM already has a
///   handler that is not firmtime's.
/// - [`ErrorKind::PermissionDenied`] for `rtc` when the device or its rate is refused.
/// - [`ErrorKind::Io`] when a setup system call fails.
pub fn open(mechanism: Mechanism) -> Result<Box<dyn Sleeper>> {
    Ok(match mechanism {
        Mechanism::Nanosleep => Box::new(NanosleepSleeper),
        Mechanism::ClockNanosleep => Box::new(ClockNanosleepSleeper),
        Mechanism::Timerfd => Box::new(TimerfdSleeper::open()?),
        Mechanism::Setitimer => Box::new(SetitimerSleeper::open()?),
        Mechanism::PosixTimer => Box::new(PosixTimerSleeper::open()?),
        Mechanism::Poll => Box::new(PollSleeper),
        Mechanism::Epoll => Box::new(EpollSleeper::open()?),
        Mechanism::Select => Box::new(SelectSleeper),
        Mechanism::Spin => Box::new(SpinSleeper::default()),
        Mechanism::Hybrid { margin_ns } => Box::new(HybridSleeper::new(margin_ns)),
        Mechanism::Rtc => Box::new(RtcSleeper::open_default()?),
    })
}

// ---------------------------------------------------------------------------
// Small helpers (all RT-safe).

#[inline]
fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Sleeps until `deadline_ns` on CLOCK_MONOTONIC with
/// `clock_nanosleep(TIMER_ABSTIME)`, retrying EINTR: the plain absolute
/// sleep for code that needs no [`Sleeper`] object. **RT-safe.**
///
/// # Errors
/// The `clock_nanosleep` error number (never EINTR).
#[inline]
pub fn clock_nanosleep_abs(deadline_ns: u64) -> Result<(), Errno> {
    let ts = timespec(deadline_ns);
    loop {
        // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(Errno(e)),
        }
    }
}

/// Fails with the current errno unless it is EINTR.
#[inline]
fn retry_eintr() -> Result<(), Errno> {
    let e = Errno::last();
    if e.0 == libc::EINTR {
        Ok(())
    } else {
        Err(e)
    }
}

fn sigset_of(signo: libc::c_int) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, owned sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
    }
    set
}

/// Blocks `signo` in the calling thread; returns whether it was blocked before.
fn block_in_thread(signo: libc::c_int) -> Result<bool> {
    let set = sigset_of(signo);
    // SAFETY: sigset_t is plain data, filled in by pthread_sigmask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to valid, owned sigset_t values.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    if rc != 0 {
        return Err(Error::with_errno(
            ErrorKind::Io,
            format!("pthread_sigmask(SIG_BLOCK, signal {signo}) failed: error {rc}"),
            rc,
        ));
    }
    // SAFETY: `old` was filled in by pthread_sigmask.
    Ok(unsafe { libc::sigismember(&old, signo) } == 1)
}

fn unblock_in_thread(signo: libc::c_int) {
    let set = sigset_of(signo);
    // SAFETY: `set` is valid; a null old-set pointer is allowed.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
}

/// Takes every pending instance of `signo` (thread and process queues) without waiting.
fn drain_signal(signo: libc::c_int) {
    let set = sigset_of(signo);
    let zero = timespec(0);
    // SAFETY: `set` and `zero` are valid; a null siginfo is allowed.
    while unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } == signo {}
}

/// `sigwaitinfo` for one blocked signal, retrying EINTR.
#[inline]
fn wait_signal(set: &libc::sigset_t) -> Result<(), Errno> {
    loop {
        // SAFETY: `set` is a valid sigset_t; a null siginfo is allowed.
        if unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) } >= 0 {
            return Ok(());
        }
        retry_eintr()?;
    }
}

/// Until `deadline_ns` has passed: `wait(remaining_ns)` with one relative
/// timeout call that returns whether it succeeded (errno set when not);
/// EINTR retries, any other error ends the wait.
#[inline]
fn wait_relative(deadline_ns: u64, mut wait: impl FnMut(u64) -> bool) -> Result<u64, Errno> {
    loop {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return Ok(now);
        }
        if !wait(deadline_ns - now) {
            retry_eintr()?;
        }
    }
}

/// A `sigset_t` with a `Debug` that does not dump the raw bits.
#[derive(Clone, Copy)]
struct SigSet(libc::sigset_t);

impl fmt::Debug for SigSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigSet")
    }
}

/// One signal blocked in the thread that opened a signal-driven sleeper
/// (setitimer, POSIX timer) and taken there with `sigwaitinfo`: the part the
/// two mechanisms share. Only the arming of the timer differs.
#[derive(Debug)]
struct SignalWait {
    signo: libc::c_int,
    owner_tid: libc::pid_t,
    was_blocked: bool,
    set: SigSet,
}

impl SignalWait {
    /// Blocks `signo` in the calling thread and takes any instance already pending.
    fn block(signo: libc::c_int) -> Result<Self> {
        let was_blocked = block_in_thread(signo)?;
        drain_signal(signo);
        Ok(Self {
            signo,
            owner_tid: gettid(),
            was_blocked,
            set: SigSet(sigset_of(signo)),
        })
    }

    /// Until `deadline_ns` has passed: `arm(now)` the timer, then wait for the
    /// signal. EPERM when called from a thread other than the owner.
    #[inline]
    fn sleep_until(
        &self,
        deadline_ns: u64,
        mut arm: impl FnMut(u64) -> Result<(), Errno>,
    ) -> Result<u64, Errno> {
        if gettid() != self.owner_tid {
            return Err(Errno(libc::EPERM));
        }
        loop {
            let now = monotonic_ns();
            if now >= deadline_ns {
                return Ok(now);
            }
            arm(now)?;
            wait_signal(&self.set.0)?;
        }
    }

    /// On the owning thread: takes what is pending and restores the mask.
    /// Call after the timer is disarmed, so no signal can follow.
    fn release(&self) {
        if gettid() == self.owner_tid {
            drain_signal(self.signo);
            if !self.was_blocked {
                unblock_in_thread(self.signo);
            }
        }
    }
}

/// `us` microseconds as a timeval.
fn timeval_us(us: u64) -> libc::timeval {
    libc::timeval {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_usec: (us % 1_000_000) as libc::suseconds_t,
    }
}

// ---------------------------------------------------------------------------
// nanosleep, clock_nanosleep

/// Relative `nanosleep(2)`, with the remaining time recomputed from
/// CLOCK_MONOTONIC before each call.
#[derive(Debug, Default)]
pub struct NanosleepSleeper;

impl Sleeper for NanosleepSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        wait_relative(deadline_ns, |remaining| {
            let ts = timespec(remaining);
            // SAFETY: `ts` is a valid timespec; a null remainder is allowed.
            unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) == 0 }
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Nanosleep
    }
}

/// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`.
#[derive(Debug, Default)]
pub struct ClockNanosleepSleeper;

impl Sleeper for ClockNanosleepSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return Ok(now);
        }
        clock_nanosleep_abs(deadline_ns)?;
        Ok(monotonic_ns())
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::ClockNanosleep
    }
}

// ---------------------------------------------------------------------------
// timerfd

/// A CLOCK_MONOTONIC timerfd armed with `TFD_TIMER_ABSTIME`, then `read(2)`.
#[derive(Debug)]
pub struct TimerfdSleeper {
    fd: OwnedFd,
}

impl TimerfdSleeper {
    /// Creates the timerfd.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if `timerfd_create` fails (e.g. out of file descriptors).
    pub fn open() -> Result<Self> {
        // SAFETY: plain system call with constant arguments.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("timerfd_create(CLOCK_MONOTONIC) failed"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }
}

impl Sleeper for TimerfdSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let now = monotonic_ns();
        // Also guards deadline 0, which would disarm the timer.
        if now >= deadline_ns {
            return Ok(now);
        }
        let spec = libc::itimerspec {
            it_interval: timespec(0),
            it_value: timespec(deadline_ns),
        };
        // SAFETY: valid fd and itimerspec; a null old value is allowed.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(Errno::last());
        }
        let mut expirations: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into an owned u64, as timerfd requires.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut expirations as *mut u64).cast(),
                    8,
                )
            };
            if n == 8 {
                return Ok(monotonic_ns());
            }
            if n < 0 {
                retry_eintr()?;
            } else {
                return Err(Errno(libc::EIO));
            }
        }
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Timerfd
    }
}

// ---------------------------------------------------------------------------
// setitimer

/// Set while a [`SetitimerSleeper`] exists: ITIMER_REAL is process-wide.
static ITIMER_CLAIMED: AtomicBool = AtomicBool::new(false);
/// Thread id of the open [`SetitimerSleeper`], 0 when none.
static ALARM_TID: AtomicI32 = AtomicI32::new(0);

/// SIGALRM handler: ITIMER_REAL's signal is process-directed, so the kernel
/// may deliver it to any thread that does not block it; forward it to the
/// sleeping thread, which blocks it and waits in `sigwaitinfo`.
extern "C" fn forward_alarm(_sig: libc::c_int) {
    let tid = ALARM_TID.load(Ordering::Acquire);
    if tid > 0 {
        // SAFETY: errno is thread-local and readable in a handler; we restore
        // it so the interrupted code does not see our syscall's errno.
        unsafe {
            let saved = *libc::__errno_location();
            libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGALRM);
            *libc::__errno_location() = saved;
        }
    }
}

/// `setitimer(ITIMER_REAL)` (relative, microseconds, rounded up) and a
/// SIGALRM blocked in the opening thread, taken with `sigwaitinfo`.
///
/// ITIMER_REAL is process-wide, so only one `SetitimerSleeper` may exist at a
/// time. Its SIGALRM is process-directed: other threads that do not block
/// SIGALRM may receive it, so `open` installs a handler (with SA_RESTART)
/// that forwards it to the sleeping thread with `tgkill`. The handler stays
/// installed for the life of the process (it does nothing when no sleeper is
/// open); `open` refuses if SIGALRM already has another handler.
///
/// Thread-bound: open it on the thread that sleeps.
#[derive(Debug)]
pub struct SetitimerSleeper {
    wait: SignalWait,
}

impl SetitimerSleeper {
    /// Claims ITIMER_REAL, installs the forwarding handler and blocks SIGALRM
    /// in the calling thread.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] if another `SetitimerSleeper` is open or
    /// SIGALRM has a handler that is not firmtime's; [`ErrorKind::Io`] if a
    /// signal call fails.
    pub fn open() -> Result<Self> {
        if ITIMER_CLAIMED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::invalid(
                "setitimer: ITIMER_REAL is process-wide and another setitimer sleeper is \
                 already open in this process; drop it first (only one at a time)",
            ));
        }
        match Self::setup() {
            Ok(s) => Ok(s),
            Err(e) => {
                ITIMER_CLAIMED.store(false, Ordering::Release);
                Err(e)
            }
        }
    }

    fn setup() -> Result<Self> {
        // SAFETY: sigaction is plain data, filled in by the query below.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying (null new action) into an owned struct.
        if unsafe { libc::sigaction(libc::SIGALRM, std::ptr::null(), &mut old) } != 0 {
            return Err(Error::last_os("sigaction(SIGALRM) query failed"));
        }
        let ours = forward_alarm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        if old.sa_sigaction != ours {
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                return Err(Error::invalid(
                    "setitimer: SIGALRM already has a handler in this process; the setitimer \
                     sleeper needs SIGALRM for itself — choose another mechanism",
                ));
            }
            // SAFETY: sigaction is plain data; every field is set below.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = ours;
            act.sa_flags = libc::SA_RESTART;
            // SAFETY: `act.sa_mask` is a valid sigset_t inside an owned struct.
            unsafe { libc::sigemptyset(&mut act.sa_mask) };
            // SAFETY: installs an async-signal-safe handler from a valid struct.
            if unsafe { libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut()) } != 0 {
                return Err(Error::last_os("sigaction(SIGALRM) install failed"));
            }
        }
        let wait = SignalWait::block(libc::SIGALRM)?;
        ALARM_TID.store(wait.owner_tid, Ordering::Release);
        Ok(Self { wait })
    }

    fn arm(usec: u64) -> Result<(), Errno> {
        let it = libc::itimerval {
            it_interval: timeval_us(0),
            it_value: timeval_us(usec),
        };
        // SAFETY: valid itimerval; a null old value is allowed.
        if unsafe { libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()) } != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }
}

impl Sleeper for SetitimerSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        // Round up: 0 would disarm the timer.
        self.wait.sleep_until(deadline_ns, |now| {
            Self::arm((deadline_ns - now).div_ceil(1_000).max(1))
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Setitimer
    }
}

impl Drop for SetitimerSleeper {
    fn drop(&mut self) {
        let _ = Self::arm(0);
        ALARM_TID.store(0, Ordering::Release);
        self.wait.release();
        ITIMER_CLAIMED.store(false, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------
// POSIX timer

/// Real-time signals handed out to POSIX-timer sleepers: `SIGRTMAX - k` for
/// bit k set (from the top, away from the SIGRTMIN+n that applications use).
static RT_SIGNALS_IN_USE: AtomicU32 = AtomicU32::new(0);
const RT_SIGNAL_SLOTS: u32 = 8;

fn claim_rt_signal() -> Result<u32> {
    let mut cur = RT_SIGNALS_IN_USE.load(Ordering::Acquire);
    loop {
        let free = (0..RT_SIGNAL_SLOTS)
            .find(|k| cur & (1 << k) == 0)
            .ok_or_else(|| {
                Error::invalid(format!(
                "posix-timer: all {RT_SIGNAL_SLOTS} real-time signals for POSIX-timer sleepers \
                 are in use; drop one first"
            ))
            })?;
        match RT_SIGNALS_IN_USE.compare_exchange(
            cur,
            cur | (1 << free),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(free),
            Err(now) => cur = now,
        }
    }
}

fn release_rt_signal(slot: u32) {
    RT_SIGNALS_IN_USE.fetch_and(!(1 << slot), Ordering::AcqRel);
}

/// A POSIX timer on CLOCK_MONOTONIC (`timer_create` with `SIGEV_THREAD_ID`)
/// that signals the opening thread with a real-time signal blocked there;
/// armed with `TIMER_ABSTIME` and taken with `sigwaitinfo`.
///
/// The signal is `SIGRTMAX - k`, k < 8, one per open sleeper. Thread-bound:
/// open it on the thread that sleeps. Dropping it on that thread deletes the
/// timer, drains any pending signal and restores the signal mask.
#[derive(Debug)]
pub struct PosixTimerSleeper {
    timer: libc::timer_t,
    slot: u32,
    wait: SignalWait,
}

// SAFETY: `timer_t` is an opaque kernel timer id (a pointer-sized integer in
// glibc), valid from any thread of the process; nothing is dereferenced.
unsafe impl Send for PosixTimerSleeper {}

impl PosixTimerSleeper {
    /// Claims a real-time signal, blocks it in the calling thread and
    /// creates the timer.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when 8 POSIX-timer sleepers are already
    /// open; [`ErrorKind::Io`] if `timer_create` or the signal mask fails.
    pub fn open() -> Result<Self> {
        let slot = claim_rt_signal()?;
        let signo = libc::SIGRTMAX() - slot as libc::c_int;
        let wait = match SignalWait::block(signo) {
            Ok(w) => w,
            Err(e) => {
                release_rt_signal(slot);
                return Err(e);
            }
        };
        // SAFETY: sigevent is plain data (with private padding); the fields
        // used by SIGEV_THREAD_ID are set below.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_notify_thread_id = wait.owner_tid;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid sigevent and an owned out-pointer for the id.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) } != 0 {
            let e = Error::last_os("timer_create(CLOCK_MONOTONIC, SIGEV_THREAD_ID) failed");
            wait.release();
            release_rt_signal(slot);
            return Err(e);
        }
        Ok(Self { timer, slot, wait })
    }

    /// The real-time signal this sleeper's timer sends.
    pub fn signal(&self) -> libc::c_int {
        self.wait.signo
    }
}

impl Sleeper for PosixTimerSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let timer = self.timer;
        self.wait.sleep_until(deadline_ns, |_| {
            let spec = libc::itimerspec {
                it_interval: timespec(0),
                it_value: timespec(deadline_ns),
            };
            // SAFETY: `timer` is our live timer; valid itimerspec; null old value allowed.
            let rc = unsafe {
                libc::timer_settime(timer, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(Errno::last());
            }
            Ok(())
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::PosixTimer
    }
}

impl Drop for PosixTimerSleeper {
    fn drop(&mut self) {
        // SAFETY: `timer` is our live timer, deleted exactly once.
        unsafe { libc::timer_delete(self.timer) };
        self.wait.release();
        release_rt_signal(self.slot);
    }
}

// ---------------------------------------------------------------------------
// poll, epoll, select

/// Rounds a remaining time up to whole milliseconds for poll/epoll_wait.
#[inline]
fn timeout_ms(remaining_ns: u64) -> libc::c_int {
    remaining_ns
        .div_ceil(1_000_000)
        .min(libc::c_int::MAX as u64) as libc::c_int
}

/// The timeout of `poll(2)` with no descriptors (milliseconds, rounded up),
/// repeated until the deadline has passed.
#[derive(Debug, Default)]
pub struct PollSleeper;

impl Sleeper for PollSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        wait_relative(deadline_ns, |remaining| {
            // SAFETY: no descriptors: a null array with nfds 0 is allowed.
            unsafe { libc::poll(std::ptr::null_mut(), 0, timeout_ms(remaining)) >= 0 }
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Poll
    }
}

/// The timeout of `epoll_wait(2)` on an empty epoll set (milliseconds,
/// rounded up), repeated until the deadline has passed.
#[derive(Debug)]
pub struct EpollSleeper {
    fd: OwnedFd,
}

impl EpollSleeper {
    /// Creates the (empty) epoll instance.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if `epoll_create1` fails.
    pub fn open() -> Result<Self> {
        // SAFETY: plain system call with a constant flag.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("epoll_create1 failed"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }
}

impl Sleeper for EpollSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let fd = self.fd.as_raw_fd();
        wait_relative(deadline_ns, |remaining| {
            // SAFETY: valid epoll fd and room for exactly one event.
            unsafe { libc::epoll_wait(fd, &mut ev, 1, timeout_ms(remaining)) >= 0 }
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Epoll
    }
}

/// The timeout of `select(2)` with no descriptors (microseconds, rounded
/// up), repeated until the deadline has passed.
#[derive(Debug, Default)]
pub struct SelectSleeper;

impl Sleeper for SelectSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        wait_relative(deadline_ns, |remaining| {
            let mut tv = timeval_us(remaining.div_ceil(1_000));
            let null = std::ptr::null_mut();
            // SAFETY: no descriptor sets (null is allowed); `tv` is valid and owned.
            unsafe { libc::select(0, null, null, null, &mut tv) >= 0 }
        })
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Select
    }
}

// ---------------------------------------------------------------------------
// spin, hybrid

/// Spins on CLOCK_MONOTONIC until `deadline_ns`; returns the wake time.
#[inline]
fn spin_until(deadline_ns: u64) -> u64 {
    loop {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// Busy-waits on CLOCK_MONOTONIC; never yields the CPU.
#[derive(Debug, Default)]
pub struct SpinSleeper {
    spin_ns: u64,
}

impl Sleeper for SpinSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let start = monotonic_ns();
        let wake = spin_until(deadline_ns);
        self.spin_ns += wake - start;
        Ok(wake)
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Spin
    }
    fn spin_ns(&self) -> u64 {
        self.spin_ns
    }
}

/// Varoquaux's hybrid: `clock_nanosleep` (absolute) until `deadline −
/// margin`, then spin on CLOCK_MONOTONIC; the spin time is accumulated in
/// [`Sleeper::spin_ns`].
#[derive(Debug)]
pub struct HybridSleeper {
    margin_ns: u64,
    spin_ns: u64,
}

impl HybridSleeper {
    /// A hybrid sleeper that starts spinning `margin_ns` before each deadline.
    pub fn new(margin_ns: u64) -> Self {
        Self {
            margin_ns,
            spin_ns: 0,
        }
    }
}

impl Sleeper for HybridSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return Ok(now);
        }
        if deadline_ns - now > self.margin_ns {
            clock_nanosleep_abs(deadline_ns - self.margin_ns)?;
        }
        let start = monotonic_ns();
        let wake = spin_until(deadline_ns);
        self.spin_ns += wake - start;
        Ok(wake)
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Hybrid {
            margin_ns: self.margin_ns,
        }
    }
    fn spin_ns(&self) -> u64 {
        self.spin_ns
    }
}

// ---------------------------------------------------------------------------
// /dev/rtc

/// The generic Linux `_IOC` encoding (x86, arm, riscv; not mips/powerpc/sparc).
const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}
/// `RTC_PIE_ON`: `_IO('p', 0x05)`.
const RTC_PIE_ON: u64 = ioc(0, b'p', 0x05, 0);
/// `RTC_PIE_OFF`: `_IO('p', 0x06)`.
const RTC_PIE_OFF: u64 = ioc(0, b'p', 0x06, 0);
/// `RTC_IRQP_SET`: `_IOW('p', 0x0c, unsigned long)`.
const RTC_IRQP_SET: u64 = ioc(1, b'p', 0x0c, std::mem::size_of::<libc::c_ulong>());

/// `/dev/rtc` periodic interrupts: the device is programmed at a power-of-2
/// rate (`RTC_IRQP_SET`, `RTC_PIE_ON`) and each blocking `read(2)` returns at
/// the next interrupt; `sleep_until` reads until the deadline has passed, so
/// it wakes at the first interrupt at or after the deadline.
#[derive(Debug)]
pub struct RtcSleeper {
    fd: OwnedFd,
    hz: u32,
}

impl RtcSleeper {
    /// The RTC devices tried by [`RtcSleeper::open_default`], in order.
    pub const DEVICES: [&'static str; 2] = ["/dev/rtc", "/dev/rtc0"];

    /// Opens the first of [`RtcSleeper::DEVICES`] that exists at [`RTC_DEFAULT_HZ`].
    ///
    /// # Errors
    /// [`ErrorKind::NotPresent`] when neither device exists; otherwise as
    /// [`RtcSleeper::open`].
    pub fn open_default() -> Result<Self> {
        match Self::DEVICES.iter().find(|p| Path::new(p).exists()) {
            Some(p) => Self::open(Path::new(p), RTC_DEFAULT_HZ),
            None => Err(Error::new(
                ErrorKind::NotPresent,
                "not present: /dev/rtc does not exist (nor /dev/rtc0): this machine has no \
                 RTC device; choose another sleep mechanism",
            )),
        }
    }

    /// Opens `path` and starts periodic interrupts at `hz`.
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidInput`] unless `hz` is a power of 2 in 2..=8192.
    /// - [`ErrorKind::NotPresent`] if `path` does not exist.
    /// - [`ErrorKind::PermissionDenied`] if the device or the rate is refused
    ///   (rates above `/proc/sys/dev/rtc/max-user-freq` need root or
    ///   CAP_SYS_RESOURCE).
    /// - [`ErrorKind::Io`] otherwise (e.g. `EBUSY`: another process has the RTC
    ///   open; or the RTC cannot do periodic interrupts).
    pub fn open(path: &Path, hz: u32) -> Result<Self> {
        if !(2..=8192).contains(&hz) || !hz.is_power_of_two() {
            return Err(Error::invalid(format!(
                "RTC rate {hz} Hz is invalid: use a power of 2 from 2 to 8192"
            )));
        }
        let shown = path.display();
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid(format!("RTC path {shown} contains a NUL byte")))?;
        // SAFETY: `c` is a valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = Errno::last();
            return Err(match e.0 {
                libc::ENOENT | libc::ENODEV | libc::ENXIO => Error::with_errno(
                    ErrorKind::NotPresent,
                    format!("not present: {shown} does not exist; choose another sleep mechanism"),
                    e.0,
                ),
                libc::EACCES | libc::EPERM => Error::with_errno(
                    ErrorKind::PermissionDenied,
                    format!("cannot open {shown}: {e}; run as root or add read permission"),
                    e.0,
                ),
                libc::EBUSY => Error::with_errno(
                    ErrorKind::Io,
                    format!("{shown} is busy: another process has the RTC open; stop it first"),
                    e.0,
                ),
                _ => Error::with_errno(ErrorKind::Io, format!("cannot open {shown}: {e}"), e.0),
            });
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: RTC_IRQP_SET takes the rate by value as an unsigned long.
        if unsafe { libc::ioctl(fd.as_raw_fd(), RTC_IRQP_SET as _, hz as libc::c_ulong) } != 0 {
            let e = Errno::last();
            let kind = if matches!(e.0, libc::EACCES | libc::EPERM) {
                ErrorKind::PermissionDenied
            } else {
                ErrorKind::Io
            };
            return Err(Error::with_errno(
                kind,
                format!(
                    "{shown}: RTC_IRQP_SET {hz} Hz refused: {e}; rates above \
                     /proc/sys/dev/rtc/max-user-freq need root or CAP_SYS_RESOURCE"
                ),
                e.0,
            ));
        }
        // SAFETY: RTC_PIE_ON takes no argument.
        if unsafe { libc::ioctl(fd.as_raw_fd(), RTC_PIE_ON as _, 0) } != 0 {
            let e = Errno::last();
            return Err(Error::with_errno(
                ErrorKind::Io,
                format!("{shown}: RTC_PIE_ON failed: {e}; this RTC cannot do periodic interrupts"),
                e.0,
            ));
        }
        Ok(Self { fd, hz })
    }

    /// The programmed interrupt rate in Hz.
    pub fn hz(&self) -> u32 {
        self.hz
    }
}

impl Sleeper for RtcSleeper {
    fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
        let mut data: libc::c_ulong = 0;
        loop {
            let now = monotonic_ns();
            if now >= deadline_ns {
                return Ok(now);
            }
            // SAFETY: reads one unsigned long (interrupt count and status)
            // into an owned value, as /dev/rtc requires.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut data as *mut libc::c_ulong).cast(),
                    std::mem::size_of::<libc::c_ulong>(),
                )
            };
            if n < 0 {
                retry_eintr()?;
            }
        }
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::Rtc
    }
}

impl Drop for RtcSleeper {
    fn drop(&mut self) {
        // SAFETY: RTC_PIE_OFF takes no argument; the fd is still open.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), RTC_PIE_OFF as _, 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>().unwrap(), m);
            assert_eq!(m.to_string().parse::<Mechanism>().unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<Mechanism>(&json).unwrap(), m);
        }
        assert_eq!(Mechanism::ALL.len(), 11);
    }

    #[test]
    fn hybrid_margin_parses_and_prints() {
        let m: Mechanism = "hybrid:250us".parse().unwrap();
        assert_eq!(m, Mechanism::Hybrid { margin_ns: 250_000 });
        assert_eq!(m.to_string(), "hybrid:250us");
        assert_eq!(m.name(), "hybrid");
        let e = "hybrid:fast".parse::<Mechanism>().unwrap_err();
        assert!(e.message().contains("bad hybrid margin"), "{e}");
    }

    #[test]
    fn unknown_mechanism_lists_valid_names() {
        let e = "usleep".parse::<Mechanism>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        for m in Mechanism::ALL {
            assert!(e.message().contains(m.name()), "{e}");
        }
    }

    #[test]
    fn rtc_ioctl_numbers_match_linux_headers() {
        // From <linux/rtc.h> on x86_64.
        assert_eq!(RTC_PIE_ON, 0x7005);
        assert_eq!(RTC_PIE_OFF, 0x7006);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(RTC_IRQP_SET, 0x4008_700c);
    }

    #[test]
    fn timeouts_round_up() {
        assert_eq!(timeout_ms(1), 1);
        assert_eq!(timeout_ms(1_000_000), 1);
        assert_eq!(timeout_ms(1_000_001), 2);
        assert_eq!(timeout_ms(u64::MAX), libc::c_int::MAX);
    }

    #[test]
    fn rtc_rate_must_be_a_power_of_two() {
        for hz in [0, 1, 3, 1000, 16384] {
            let e = RtcSleeper::open(Path::new("/dev/rtc"), hz).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{hz}: {e}");
        }
    }
}
