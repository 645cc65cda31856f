//! Scheduling of the calling thread: policy, priority, nice, CPU affinity
//! and timer slack.
//!
//! Every function here acts on the **calling thread** only (Linux schedules
//! threads, not processes). Setting a policy uses `sched_setattr(2)`, so
//! SCHED_DEADLINE and the nice value of SCHED_OTHER/SCHED_BATCH are set in one
//! call; [`current_thread`] reads back what the kernel actually holds.
//!
//! A refusal is an [`Error`] that says why and how to fix it (see
//! [`crate::privileges::Privileges`] for the facts it is built from). Nothing here
//! ever falls back to a weaker policy: a measurement taken under the wrong
//! policy is a wrong measurement. [`crate::setup::apply`] does downgrades,
//! and only when asked.
//!
//! # RT contract
//!
//! Only [`demote_current_thread`] is **RT-safe** (and async-signal-safe); the
//! rest are setup-time functions that may allocate for their errors.

use crate::error::{Errno, Error, ErrorKind, Result};
use crate::units::parse_duration;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// SCHED_DEADLINE's policy number (`include/uapi/linux/sched.h`).
const SCHED_DEADLINE: u32 = 6;
/// The smallest SCHED_DEADLINE runtime the kernel accepts (`1 << DL_SCALE` ns).
pub const DEADLINE_MIN_RUNTIME_NS: u64 = 1024;

/// A scheduling policy with its parameters, as the kernel knows it.
///
/// CLI spelling ([`FromStr`]/[`Display`](fmt::Display)): `other`, `other:-20`,
/// `batch`, `batch:5`, `idle`, `fifo:80`, `rr:50`, `deadline:200us/1ms/1ms`
/// (runtime/deadline/period).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum Policy {
    /// SCHED_OTHER (CFS/EEVDF time sharing) at a nice value (-20..=19).
    Other {
        /// Nice value, -20 (most favoured) to 19.
        nice: i32,
    },
    /// SCHED_BATCH: time sharing for CPU-bound work, at a nice value (-20..=19).
    Batch {
        /// Nice value, -20 to 19.
        nice: i32,
    },
    /// SCHED_IDLE: runs only when nothing else wants the CPU.
    Idle,
    /// SCHED_FIFO real-time priority 1..=99.
    Fifo {
        /// Real-time priority, 1 (lowest) to 99.
        priority: u8,
    },
    /// SCHED_RR real-time priority 1..=99.
    Rr {
        /// Real-time priority, 1 (lowest) to 99.
        priority: u8,
    },
    /// SCHED_DEADLINE: `runtime_ns` of CPU every `period_ns`, finished within
    /// `deadline_ns` of each period's start (runtime ≤ deadline ≤ period).
    Deadline {
        /// CPU time reserved per period, in ns (at least 1024 ns).
        runtime_ns: u64,
        /// Relative deadline, in ns.
        deadline_ns: u64,
        /// Period, in ns.
        period_ns: u64,
    },
}

impl Default for Policy {
    /// SCHED_OTHER at nice 0: what every thread starts with.
    fn default() -> Self {
        Policy::Other { nice: 0 }
    }
}

impl Policy {
    /// The kernel's name of the policy: `SCHED_OTHER`, `SCHED_FIFO`, ...
    pub fn kernel_name(&self) -> &'static str {
        match self {
            Policy::Other { .. } => "SCHED_OTHER",
            Policy::Batch { .. } => "SCHED_BATCH",
            Policy::Idle => "SCHED_IDLE",
            Policy::Fifo { .. } => "SCHED_FIFO",
            Policy::Rr { .. } => "SCHED_RR",
            Policy::Deadline { .. } => "SCHED_DEADLINE",
        }
    }

    /// The real-time priority (1..=99 for FIFO/RR, 0 otherwise).
    pub fn priority(&self) -> u8 {
        match *self {
            Policy::Fifo { priority } | Policy::Rr { priority } => priority,
            _ => 0,
        }
    }

    /// The nice value this policy sets (OTHER/BATCH), if any.
    pub fn nice(&self) -> Option<i32> {
        match *self {
            Policy::Other { nice } | Policy::Batch { nice } => Some(nice),
            _ => None,
        }
    }

    /// True for SCHED_FIFO and SCHED_RR.
    pub fn is_realtime(&self) -> bool {
        matches!(self, Policy::Fifo { .. } | Policy::Rr { .. })
    }

    /// True for SCHED_FIFO, SCHED_RR and SCHED_DEADLINE: the policies whose
    /// timer slack the kernel forces to 0.
    pub fn is_rt_or_deadline(&self) -> bool {
        self.is_realtime() || matches!(self, Policy::Deadline { .. })
    }

    /// Checks the parameters are in the ranges the kernel accepts.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the valid range: priority 1-99,
    /// nice -20..19, runtime ≥ 1024 ns and runtime ≤ deadline ≤ period.
    pub fn validate(&self) -> Result<()> {
        match *self {
            Policy::Other { nice } | Policy::Batch { nice } => {
                if !(-20..=19).contains(&nice) {
                    return Err(Error::invalid(format!(
                        "nice {nice} is out of range: valid is -20..19 (-20 is the most favoured)"
                    )));
                }
            }
            Policy::Idle => {}
            Policy::Fifo { priority } | Policy::Rr { priority } => {
                if !(1..=99).contains(&priority) {
                    return Err(Error::invalid(format!(
                        "real-time priority {priority} is out of range: valid is 1-99 (99 is the highest)"
                    )));
                }
            }
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
            } => {
                if runtime_ns < DEADLINE_MIN_RUNTIME_NS {
                    return Err(Error::invalid(format!(
                        "SCHED_DEADLINE runtime {runtime_ns}ns is too small: the kernel needs at least {DEADLINE_MIN_RUNTIME_NS}ns"
                    )));
                }
                if !(runtime_ns <= deadline_ns && deadline_ns <= period_ns) {
                    return Err(Error::invalid(format!(
                        "SCHED_DEADLINE needs runtime ≤ deadline ≤ period, got {}/{}/{}",
                        exact_duration(runtime_ns),
                        exact_duration(deadline_ns),
                        exact_duration(period_ns)
                    )));
                }
                if period_ns > i64::MAX as u64 {
                    return Err(Error::invalid(
                        "SCHED_DEADLINE period is too large (the kernel limit is 2^63 ns)",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Formats nanoseconds exactly, in the largest unit that divides them, so
/// that [`Policy`]'s `Display` output parses back to the same value.
fn exact_duration(ns: u64) -> String {
    if ns != 0 && ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns != 0 && ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns != 0 && ns % 1_000 == 0 {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Policy::Other { nice: 0 } => f.write_str("other"),
            Policy::Other { nice } => write!(f, "other:{nice}"),
            Policy::Batch { nice: 0 } => f.write_str("batch"),
            Policy::Batch { nice } => write!(f, "batch:{nice}"),
            Policy::Idle => f.write_str("idle"),
            Policy::Fifo { priority } => write!(f, "fifo:{priority}"),
            Policy::Rr { priority } => write!(f, "rr:{priority}"),
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
            } => write!(
                f,
                "deadline:{}/{}/{}",
                exact_duration(runtime_ns),
                exact_duration(deadline_ns),
                exact_duration(period_ns)
            ),
        }
    }
}

const SPELLINGS: &str =
    "other, other:<nice -20..19>, batch, batch:<nice>, idle, fifo:<1-99>, rr:<1-99>, deadline:<runtime>/<deadline>/<period> (e.g. deadline:200us/1ms/1ms)";

impl FromStr for Policy {
    type Err = Error;

    /// Parses the CLI spelling; the result is validated.
    fn from_str(text: &str) -> Result<Self> {
        let t = text.trim();
        let (name, arg) = match t.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (t, None),
        };
        let nice = |arg: Option<&str>| -> Result<i32> {
            match arg {
                None => Ok(0),
                Some(a) => a.parse::<i32>().map_err(|_| {
                    Error::invalid(format!(
                        "'{text}': nice must be an integer in -20..19, got '{a}'"
                    ))
                }),
            }
        };
        let prio = |arg: Option<&str>| -> Result<u8> {
            let a = arg.ok_or_else(|| {
                Error::invalid(format!(
                    "'{text}': {name} needs a priority 1-99, e.g. {name}:80"
                ))
            })?;
            let p: i64 = a.parse().map_err(|_| {
                Error::invalid(format!(
                    "'{text}': priority must be an integer 1-99, got '{a}'"
                ))
            })?;
            u8::try_from(p)
                .ok()
                .filter(|p| (1..=99).contains(p))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "'{text}': real-time priority {p} is out of range: valid is 1-99"
                    ))
                })
        };
        let policy = match name.to_ascii_lowercase().as_str() {
            "other" | "normal" => Policy::Other { nice: nice(arg)? },
            "batch" => Policy::Batch { nice: nice(arg)? },
            "idle" if arg.is_none() => Policy::Idle,
            "fifo" => Policy::Fifo {
                priority: prio(arg)?,
            },
            "rr" => Policy::Rr {
                priority: prio(arg)?,
            },
            "deadline" => {
                let a = arg.unwrap_or("");
                let parts: Vec<&str> = a.split('/').collect();
                if parts.len() != 3 {
                    return Err(Error::invalid(format!(
                        "'{text}': deadline needs runtime/deadline/period with runtime ≤ deadline ≤ period, e.g. deadline:200us/1ms/1ms"
                    )));
                }
                let ns = |s: &str| -> Result<u64> {
                    let d = parse_duration(s)
                        .map_err(|e| Error::invalid(format!("'{text}': {}", e.message())))?;
                    u64::try_from(d.as_nanos())
                        .map_err(|_| Error::invalid(format!("'{text}': '{s}' is too large")))
                };
                Policy::Deadline {
                    runtime_ns: ns(parts[0])?,
                    deadline_ns: ns(parts[1])?,
                    period_ns: ns(parts[2])?,
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "'{text}' is not a scheduling policy: use {SPELLINGS}"
                )))
            }
        };
        policy
            .validate()
            .map_err(|e| Error::invalid(format!("'{text}': {}", e.message())))?;
        Ok(policy)
    }
}

/// `struct sched_attr` of `sched_setattr(2)`, version 0 (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_ATTR_SIZE_VER0: u32 = 48;

impl SchedAttr {
    fn from_policy(p: &Policy) -> Self {
        let mut a = SchedAttr {
            size: SCHED_ATTR_SIZE_VER0,
            ..Default::default()
        };
        match *p {
            Policy::Other { nice } => {
                a.sched_policy = libc::SCHED_OTHER as u32;
                a.sched_nice = nice;
            }
            Policy::Batch { nice } => {
                a.sched_policy = libc::SCHED_BATCH as u32;
                a.sched_nice = nice;
            }
            Policy::Idle => a.sched_policy = libc::SCHED_IDLE as u32,
            Policy::Fifo { priority } => {
                a.sched_policy = libc::SCHED_FIFO as u32;
                a.sched_priority = u32::from(priority);
            }
            Policy::Rr { priority } => {
                a.sched_policy = libc::SCHED_RR as u32;
                a.sched_priority = u32::from(priority);
            }
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
            } => {
                a.sched_policy = SCHED_DEADLINE;
                a.sched_runtime = runtime_ns;
                a.sched_deadline = deadline_ns;
                a.sched_period = period_ns;
            }
        }
        a
    }
}

/// `sched_setattr(0, attr, 0)` on the calling thread. Async-signal-safe.
fn sched_setattr(attr: &SchedAttr) -> std::result::Result<(), Errno> {
    // SAFETY: the syscall reads `size` bytes from a valid, initialised
    // #[repr(C)] struct that lives for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0 as libc::pid_t,
            attr as *const SchedAttr,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Sets the calling thread's scheduling policy, priority and nice value.
///
/// OTHER and BATCH set their nice value in the same call; FIFO and RR leave
/// the nice value as it was (it matters again if the thread is demoted).
///
/// # Errors
/// - [`ErrorKind::InvalidInput`]: parameters out of range (see [`Policy::validate`]).
/// - [`ErrorKind::RealtimeDenied`]: FIFO/RR/DEADLINE refused for lack of
///   privileges; the message names RLIMIT_RTPRIO, CAP_SYS_NICE and the fix.
/// - [`ErrorKind::RtThrottled`]: privileges are fine but
///   `kernel.sched_rt_runtime_us` or the cgroup's `cpu.rt_runtime_us` is 0.
/// - [`ErrorKind::DeadlineRefused`]: SCHED_DEADLINE admission control refused
///   the bandwidth.
/// - [`ErrorKind::PermissionDenied`]: a lower nice value was refused (RLIMIT_NICE).
///
/// On error the thread's scheduling is unchanged.
pub fn set_current_thread(policy: &Policy) -> Result<()> {
    policy.validate()?;
    sched_setattr(&SchedAttr::from_policy(policy)).map_err(|e| {
        crate::setup::diagnose_sched(policy, e.0, &crate::privileges::Privileges::read())
    })
}

/// Reads back the calling thread's policy and parameters from the kernel.
///
/// # Errors
/// [`ErrorKind::Io`] if `sched_getattr(2)` fails (it does not on Linux ≥ 3.14),
/// or if the kernel reports a policy this crate does not know.
pub fn current_thread() -> Result<Policy> {
    let mut a = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` (48) bytes into the valid,
    // owned #[repr(C)] struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0 as libc::pid_t,
            &mut a as *mut SchedAttr,
            SCHED_ATTR_SIZE_VER0 as libc::c_uint,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(Error::last_os("sched_getattr on the calling thread"));
    }
    let p = a.sched_policy;
    Ok(if p == libc::SCHED_OTHER as u32 {
        Policy::Other { nice: a.sched_nice }
    } else if p == libc::SCHED_BATCH as u32 {
        Policy::Batch { nice: a.sched_nice }
    } else if p == libc::SCHED_IDLE as u32 {
        Policy::Idle
    } else if p == libc::SCHED_FIFO as u32 {
        Policy::Fifo {
            priority: a.sched_priority as u8,
        }
    } else if p == libc::SCHED_RR as u32 {
        Policy::Rr {
            priority: a.sched_priority as u8,
        }
    } else if p == SCHED_DEADLINE {
        Policy::Deadline {
            runtime_ns: a.sched_runtime,
            deadline_ns: a.sched_deadline,
            period_ns: a.sched_period,
        }
    } else {
        return Err(Error::new(
            ErrorKind::Io,
            format!("the kernel reports unknown scheduling policy {p} for this thread"),
        ));
    })
}

/// The calling thread's kernel thread id (TID).
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The calling thread's nice value (read with `getpriority` on its TID;
/// meaningful under every policy, kept while a thread is FIFO/RR).
///
/// # Errors
/// [`ErrorKind::Io`] if `getpriority` fails.
pub fn current_nice() -> Result<i32> {
    let tid = current_tid();
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: getpriority has no memory preconditions.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    // -1 is a valid nice value: only errno tells an error apart.
    if n == -1 && Errno::last().0 != 0 {
        return Err(Error::last_os("getpriority on the calling thread"));
    }
    Ok(n)
}

/// Demotes the calling thread to SCHED_OTHER at nice 0.
///
/// If setting nice 0 is refused (the thread runs at a positive nice value and
/// RLIMIT_NICE forbids lowering it), the thread becomes SCHED_OTHER at its
/// current nice value instead.
///
/// **RT-safe.** Async-signal-safe: two system calls at most, no allocation,
/// no lock; `errno` may be changed.
///
/// # Errors
/// The [`Errno`] of the last `sched_setattr`/`sched_setscheduler` call if
/// both failed.
pub fn demote_current_thread() -> std::result::Result<(), Errno> {
    let attr = SchedAttr {
        size: SCHED_ATTR_SIZE_VER0,
        sched_policy: libc::SCHED_OTHER as u32,
        ..Default::default()
    };
    if sched_setattr(&attr).is_ok() {
        return Ok(());
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads a valid, owned sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// The largest CPU number a `cpu_set_t` can hold, plus one.
const CPU_SETSIZE: usize = libc::CPU_SETSIZE as usize;

/// Pins the calling thread to `cpus` (CPU numbers as in `/proc/cpuinfo`).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] if `cpus` is empty, names a CPU ≥ 1024, or
/// names no online CPU (the message lists the online CPUs);
/// [`ErrorKind::PermissionDenied`] / [`ErrorKind::Io`] for other refusals
/// (e.g. a cpuset cgroup that excludes them).
pub fn set_affinity(cpus: &[usize]) -> Result<()> {
    set_thread_affinity(0, cpus)
}

/// Pins thread `tid` of this process (a `gettid` number; 0: the calling
/// thread) to `cpus`, as [`set_affinity`] does the calling thread.
///
/// # Errors
/// As [`set_affinity`]; [`ErrorKind::Io`] (`ESRCH`) when the thread is gone.
pub fn set_thread_affinity(tid: i32, cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Err(Error::invalid(
            "CPU affinity needs at least one CPU (online CPUs: see /sys/devices/system/cpu/online)",
        ));
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= CPU_SETSIZE {
            return Err(Error::invalid(format!(
                "CPU {c} is out of range: this machine's CPUs are {}",
                format_cpu_list(&online_cpus())
            )));
        }
        // SAFETY: `c < CPU_SETSIZE`, so the bit is inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        return Ok(());
    }
    let errno = Errno::last().0;
    Err(match errno {
        libc::EINVAL => Error::with_errno(
            ErrorKind::InvalidInput,
            format!(
                "CPU affinity {} was refused: none of these CPUs is online and allowed; online CPUs are {} (a cpuset cgroup may restrict them further; SCHED_DEADLINE threads cannot be pinned)",
                format_cpu_list(cpus),
                format_cpu_list(&online_cpus())
            ),
            errno,
        ),
        libc::EPERM => Error::with_errno(
            ErrorKind::PermissionDenied,
            format!("CPU affinity {} was refused: not permitted", format_cpu_list(cpus)),
            errno,
        ),
        libc::EBUSY => Error::with_errno(
            ErrorKind::InvalidInput,
            "CPU affinity refused: a SCHED_DEADLINE thread must be allowed on every CPU of its root domain; set the affinity before switching to SCHED_DEADLINE, or use isolated cpusets",
            errno,
        ),
        _ => Error::with_errno(
            ErrorKind::Io,
            format!(
                "sched_setaffinity({}): {}",
                format_cpu_list(cpus),
                Errno(errno)
            ),
            errno,
        ),
    })
}

/// The CPUs the calling thread may run on, ascending.
///
/// # Errors
/// [`ErrorKind::Io`] if `sched_getaffinity` fails.
pub fn affinity() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, owned cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(Error::last_os("sched_getaffinity on the calling thread"));
    }
    Ok((0..CPU_SETSIZE)
        .filter(|&c| {
            // SAFETY: `c < CPU_SETSIZE`, so the bit is inside `set`.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect())
}

/// The CPU the calling thread runs on (`sched_getcpu`, a vDSO call on
/// x86-64 and arm64: **RT-safe**, no allocation); 0 if it fails.
#[inline]
pub fn current_cpu() -> u16 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let c = unsafe { libc::sched_getcpu() };
    u16::try_from(c).unwrap_or(0)
}

/// The online CPUs, from `/sys/devices/system/cpu/online`; if that cannot be
/// read, the CPUs of this thread's affinity mask, or `[0]` as a last resort.
pub fn online_cpus() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(&s).ok())
        .filter(|v| !v.is_empty())
        .or_else(|| affinity().ok())
        .unwrap_or_else(|| vec![0])
}

/// Parses a kernel CPU list such as `0-3,5,7-8` (as in
/// `/sys/devices/system/cpu/online` or `isolcpus=`) into ascending CPU numbers.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] quoting the input if it is malformed.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>> {
    let bad = || Error::invalid(format!("'{}' is not a CPU list such as 0-3,5", text.trim()));
    let mut out = Vec::new();
    for part in text.trim().split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if a > b || b >= CPU_SETSIZE {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                let c: usize = part.parse().map_err(|_| bad())?;
                if c >= CPU_SETSIZE {
                    return Err(bad());
                }
                out.push(c);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Formats CPU numbers as a kernel CPU list: `[0,1,2,5]` → `0-2,5`.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`) in ns.
///
/// Timer slack lets the kernel delay a sleeping thread's wake-up by up to
/// this much to merge timer interrupts (default 50 µs). `0` does **not** mean
/// "no slack": the kernel reads it as "reset to this thread's default". Ask
/// for 1 ns for the least slack. On recent kernels SCHED_FIFO/RR/DEADLINE
/// threads always have 0 slack, this call does not change that, and a
/// thread demoted back to SCHED_OTHER gets the default slack again, not the
/// value set before: read the slack back rather than assume it.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for 0 (see above) or if the kernel refuses.
pub fn set_timer_slack(ns: u64) -> Result<()> {
    if ns == 0 {
        return Err(Error::invalid(
            "timer slack 0 would reset the thread to its default slack: ask for 1ns for the least slack",
        ));
    }
    let arg = libc::c_ulong::try_from(ns)
        .map_err(|_| Error::invalid(format!("timer slack {ns}ns is too large")))?;
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, arg, 0, 0, 0) };
    if r != 0 {
        let e = Errno::last();
        return Err(Error::with_errno(
            ErrorKind::InvalidInput,
            format!("timer slack {ns}ns was refused: {e}"),
            e.0,
        ));
    }
    Ok(())
}

/// The calling thread's timer slack in ns (`PR_GET_TIMERSLACK`).
///
/// # Errors
/// [`ErrorKind::Io`] if `prctl` fails.
pub fn timer_slack() -> Result<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns the value.
    let r = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    if r < 0 {
        return Err(Error::last_os("prctl(PR_GET_TIMERSLACK)"));
    }
    Ok(r as u64)
}

/// Names the calling thread: its `comm` (at most 15 bytes, cut at a
/// character boundary), which `ps`, kernel traces and firmtime-lab's
/// explaining trace see. Threads it creates afterwards inherit the name.
///
/// # Errors
/// [`ErrorKind::Io`] if `prctl` fails.
pub fn set_current_thread_name(name: &str) -> Result<()> {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut buf = [0u8; 16];
    buf[..end].copy_from_slice(&name.as_bytes()[..end]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes
    // from `buf`, which lives across the call.
    let r = unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr(), 0, 0, 0) };
    if r < 0 {
        return Err(Error::last_os("prctl(PR_SET_NAME)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_name_is_cut_to_fifteen_bytes_and_seen_in_comm() {
        std::thread::spawn(|| {
            set_current_thread_name("ft-a-rather-long-name").unwrap();
            let comm =
                std::fs::read_to_string(format!("/proc/self/task/{}/comm", current_tid())).unwrap();
            assert_eq!(comm.trim_end(), "ft-a-rather-lon");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn sched_attr_is_the_kernel_ver0_size() {
        assert_eq!(
            std::mem::size_of::<SchedAttr>(),
            SCHED_ATTR_SIZE_VER0 as usize
        );
    }

    #[test]
    fn every_cli_spelling_parses_and_round_trips() {
        let cases = [
            ("other", Policy::Other { nice: 0 }),
            ("other:-20", Policy::Other { nice: -20 }),
            ("batch", Policy::Batch { nice: 0 }),
            ("batch:5", Policy::Batch { nice: 5 }),
            ("idle", Policy::Idle),
            ("fifo:80", Policy::Fifo { priority: 80 }),
            ("rr:50", Policy::Rr { priority: 50 }),
            (
                "deadline:200us/1ms/1ms",
                Policy::Deadline {
                    runtime_ns: 200_000,
                    deadline_ns: 1_000_000,
                    period_ns: 1_000_000,
                },
            ),
        ];
        for (text, want) in cases {
            let got: Policy = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), text);
            assert_eq!(got.to_string().parse::<Policy>().unwrap(), want);
        }
        assert_eq!(
            "FIFO:1".parse::<Policy>().unwrap(),
            Policy::Fifo { priority: 1 }
        );
    }

    #[test]
    fn odd_deadline_values_round_trip_exactly() {
        let p = Policy::Deadline {
            runtime_ns: 123_457,
            deadline_ns: 1_500_000,
            period_ns: 2_000_000_000,
        };
        assert_eq!(p.to_string(), "deadline:123457ns/1500us/2s");
        assert_eq!(p.to_string().parse::<Policy>().unwrap(), p);
    }

    #[test]
    fn parse_errors_name_the_valid_range() {
        for (bad, needle) in [
            ("fifo:0", "1-99"),
            ("fifo:100", "1-99"),
            ("rr:-3", "1-99"),
            ("fifo", "1-99"),
            ("fifo:x", "1-99"),
            ("other:-21", "-20..19"),
            ("batch:20", "-20..19"),
            ("other:x", "-20..19"),
            ("deadline:2ms/1ms/1ms", "runtime ≤ deadline ≤ period"),
            ("deadline:1ms/2ms/1ms", "runtime ≤ deadline ≤ period"),
            ("deadline:1ms/2ms", "runtime/deadline/period"),
            ("deadline:100ns/1ms/1ms", "1024ns"),
            ("deadline:1/1ms/1ms", "add a unit"),
            ("sporadic", "fifo:<1-99>"),
            ("idle:3", "fifo:<1-99>"),
        ] {
            let e = bad.parse::<Policy>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
            assert!(e.message().contains(needle), "{bad}: {e}");
            assert!(e.message().contains(&format!("'{bad}'")), "{bad}: {e}");
        }
    }

    #[test]
    fn serde_form_is_tagged_and_round_trips() {
        let p = Policy::Fifo { priority: 80 };
        let j = serde_json::to_string(&p).unwrap();
        assert_eq!(j, r#"{"policy":"fifo","priority":80}"#);
        assert_eq!(serde_json::from_str::<Policy>(&j).unwrap(), p);
        let j = serde_json::to_string(&Policy::Idle).unwrap();
        assert_eq!(j, r#"{"policy":"idle"}"#);
        assert_eq!(serde_json::from_str::<Policy>(&j).unwrap(), Policy::Idle);
    }

    #[test]
    fn cpu_lists_parse_and_format() {
        assert_eq!(
            parse_cpu_list("0-3,5,7-8\n").unwrap(),
            [0, 1, 2, 3, 5, 7, 8]
        );
        assert_eq!(parse_cpu_list("0").unwrap(), [0]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("3,1,1").unwrap(), [1, 3]);
        for bad in ["a", "3-1", "1-", "5000"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
        assert_eq!(format_cpu_list(&[5, 0, 1, 2, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpu_list(&[3]), "3");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn empty_affinity_and_zero_slack_are_rejected_before_any_syscall() {
        assert_eq!(
            set_affinity(&[]).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let e = set_timer_slack(0).unwrap_err();
        assert!(e.message().contains("1ns"), "{e}");
    }

    /// The bounds: the last CPU a `cpu_set_t` holds is the largest accepted,
    /// a range ending on it too; one above is refused, in a range or alone.
    #[test]
    fn cpu_lists_stop_at_the_last_cpu_a_cpu_set_holds() {
        let last = CPU_SETSIZE - 1;
        assert_eq!(parse_cpu_list(&last.to_string()).unwrap(), [last]);
        assert_eq!(
            parse_cpu_list(&format!("{}-{last}", last - 2)).unwrap(),
            [last - 2, last - 1, last]
        );
        for bad in [
            format!("{CPU_SETSIZE}"),
            format!("{last}-{CPU_SETSIZE}"),
            format!("0,{CPU_SETSIZE}"),
        ] {
            let e = parse_cpu_list(&bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
            assert!(e.message().contains(&bad), "{bad}: {e}");
        }
        // A one-CPU range, empty parts, spaces, duplicates, any order.
        assert_eq!(parse_cpu_list("5-5").unwrap(), [5]);
        assert!(parse_cpu_list("1,3-2x").is_err());
        assert_eq!(
            parse_cpu_list(" ,, 2 - 3 ,1,,3 ,2-4\n").unwrap(),
            [1, 2, 3, 4]
        );
    }

    /// One part of a generated CPU list.
    #[derive(Debug, Clone)]
    enum Part {
        One(usize),
        Range(usize, usize),
        Empty,
    }

    fn cpu() -> impl proptest::strategy::Strategy<Value = usize> {
        use proptest::prelude::*;
        // Mostly small CPUs (overlaps, duplicates), some around the bound.
        prop_oneof![3 => 0usize..24, 1 => CPU_SETSIZE - 3..CPU_SETSIZE + 3]
    }

    fn part() -> impl proptest::strategy::Strategy<Value = Part> {
        use proptest::prelude::*;
        prop_oneof![
            3 => cpu().prop_map(Part::One),
            3 => (cpu(), cpu()).prop_map(|(a, b)| Part::Range(a, b)),
            1 => Just(Part::Empty),
        ]
    }

    proptest::proptest! {
        /// Against the definition, by brute force: the union of the parts,
        /// ascending, each once; refused (quoting the text) when a range is
        /// reversed or any CPU is at or above CPU_SETSIZE.
        #[test]
        fn a_cpu_list_is_the_sorted_union_of_its_parts(
            parts in proptest::collection::vec(part(), 0..8),
            spaced in proptest::bool::ANY,
        ) {
            let sep = if spaced { " , " } else { "," };
            let text = parts
                .iter()
                .map(|p| match *p {
                    Part::One(c) => c.to_string(),
                    Part::Range(a, b) if spaced => format!("{a} - {b}"),
                    Part::Range(a, b) => format!("{a}-{b}"),
                    Part::Empty => String::new(),
                })
                .collect::<Vec<_>>()
                .join(sep);
            let mut want = std::collections::BTreeSet::new();
            let mut valid = true;
            for p in &parts {
                match *p {
                    Part::One(c) => {
                        valid &= c < CPU_SETSIZE;
                        want.insert(c);
                    }
                    Part::Range(a, b) => {
                        valid &= a <= b && b < CPU_SETSIZE;
                        want.extend(a..=b);
                    }
                    Part::Empty => {}
                }
            }
            match parse_cpu_list(&text) {
                Ok(cpus) => {
                    proptest::prop_assert!(valid, "{:?} accepted as {:?}", text, cpus);
                    proptest::prop_assert_eq!(cpus, want.into_iter().collect::<Vec<_>>());
                }
                Err(e) => {
                    proptest::prop_assert!(!valid, "{:?} refused: {}", text, e);
                    proptest::prop_assert!(e.message().contains(text.trim()), "{}", e);
                }
            }
        }
    }
}
