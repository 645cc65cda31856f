//! Real-time setup of the calling thread, and the report of what was obtained.
//!
//! [`apply`] takes an [`RtRequest`] (policy, memory locking, CPUs, timer
//! slack, DMA latency), applies it to the calling thread and returns
//! [`RtConditions`]: what was asked, what the kernel actually holds (read back,
//! not copied from the request), and every downgrade. Every firmtime output
//! file embeds these conditions.
//!
//! Nothing is weakened silently. With `allow_downgrade: false` any refusal
//! is an [`Error`] and the thread is put back as it was. With
//! `allow_downgrade: true` a refused real-time policy becomes SCHED_OTHER at
//! the strongest nice value obtainable, a refused `mlockall` leaves memory
//! unlocked, a refused DMA latency request is not held — each recorded as a
//! [`Downgrade`] with the reason.
//!
//! Refusals are explained by pure functions ([`diagnose_sched`],
//! [`diagnose_mlock`]) over the facts in [`Privileges`], so the messages are
//! unit-tested without changing the machine.
//!
//! # RT contract
//!
//! Setup-time only: call before the loop, on the thread that will run it.

use crate::dma::DmaLatencyGuard;
use crate::error::{Error, ErrorKind, Result};
use crate::memory;
use crate::privileges::{describe_limits, Limit, Privileges};
use crate::sched::{self, Policy};
use serde::{Deserialize, Serialize};

/// How to grant real-time scheduling, quoted in every refusal.
const RT_FIX: &str = "Fix one of: run as root; `sudo setcap cap_sys_nice+ep <path to firmtime>`; or add `@audio - rtprio 95` to /etc/security/limits.d/audio.conf, `sudo adduser $USER audio` and log in again (see docs/RT-SETUP.md)";
/// How to grant memory locking.
const MEMLOCK_FIX: &str = "Fix one of: run as root; `sudo setcap cap_ipc_lock+ep <path to firmtime>`; or add `@audio - memlock unlimited` to /etc/security/limits.d/audio.conf, `sudo adduser $USER audio` and log in again (see docs/RT-SETUP.md)";

/// Explains why the kernel refused `policy` with `errno`, from the facts in
/// `p`. Pure: no I/O.
pub fn diagnose_sched(policy: &Policy, errno: i32, p: &Privileges) -> Error {
    let what = match policy {
        Policy::Fifo { .. } | Policy::Rr { .. } => {
            format!(
                "{} priority {} was refused",
                policy.kernel_name(),
                policy.priority()
            )
        }
        _ => format!("{} ({policy}) was refused", policy.kernel_name()),
    };
    let throttled = || -> Option<Error> {
        if p.sched_rt_runtime_us == Some(0) {
            return Some(Error::with_errno(
                ErrorKind::RtThrottled,
                format!("{what}: kernel.sched_rt_runtime_us is 0, so real-time threads get no CPU time at all. Fix: `sudo sysctl -w kernel.sched_rt_runtime_us=950000` (and set it in /etc/sysctl.d/ to keep it)"),
                errno,
            ));
        }
        if p.cgroup_rt_runtime_us == Some(0) {
            let path = p.cgroup_cpu_path.as_deref().unwrap_or("?");
            return Some(Error::with_errno(
                ErrorKind::RtThrottled,
                format!("{what}: this thread's cpu cgroup '{path}' has cpu.rt_runtime_us = 0 (RT group scheduling), so no real-time thread may run in it. Fix: run from a cgroup with RT runtime (e.g. `echo $$ > /sys/fs/cgroup/cpu/tasks` as root), or give this cgroup a budget: `echo 950000 > /sys/fs/cgroup/cpu{path}/cpu.rt_runtime_us` (its parents need one first)"),
                errno,
            ));
        }
        None
    };
    match (policy, errno) {
        (Policy::Fifo { priority } | Policy::Rr { priority }, libc::EPERM) => {
            if !p.may_realtime(*priority) {
                let lim = describe_limits(p.rtprio_soft, p.rtprio_hard, "");
                let detail = if p.rtprio_soft == Limit::Value(0) {
                    format!("RLIMIT_RTPRIO is 0 (hard {}) and the process lacks CAP_SYS_NICE", p.rtprio_hard)
                } else if p.rtprio_hard.at_least(u64::from(*priority)) {
                    format!("RLIMIT_RTPRIO is {lim}, below the requested {priority}, and the process lacks CAP_SYS_NICE; `ulimit -r {priority}` raises it up to the hard limit")
                } else {
                    format!("RLIMIT_RTPRIO is {lim}, below the requested {priority}, and the process lacks CAP_SYS_NICE; ask for priority ≤ {} or raise the limit", p.rtprio_soft.or_max())
                };
                return Error::with_errno(ErrorKind::RealtimeDenied, format!("{what}: {detail}. {RT_FIX}"), errno);
            }
            throttled().unwrap_or_else(|| Error::with_errno(
                ErrorKind::RealtimeDenied,
                format!("{what} although privileges look sufficient (CAP_SYS_NICE {}, RLIMIT_RTPRIO {}): a security module, seccomp filter or container runtime may forbid it. {RT_FIX}", yes_no(p.has_sys_nice()), describe_limits(p.rtprio_soft, p.rtprio_hard, "")),
                errno,
            ))
        }
        (Policy::Deadline { .. }, libc::EBUSY) => {
            let share = match (p.sched_rt_runtime_us, p.sched_rt_period_us) {
                (Some(r), Some(q)) if r >= 0 && q > 0 => format!("{}%", r * 100 / q),
                (Some(-1), _) => "100%".to_string(),
                _ => "kernel.sched_rt_runtime_us/sched_rt_period_us".to_string(),
            };
            Error::with_errno(
                ErrorKind::DeadlineRefused,
                format!("{what}: admission control refused it, because the SCHED_DEADLINE bandwidth of all tasks plus runtime/period would exceed {share} of the CPUs. Fix: ask for a smaller runtime or a longer period, or stop other SCHED_DEADLINE tasks"),
                errno,
            )
        }
        (Policy::Deadline { .. }, libc::EPERM) => {
            if !p.has_sys_nice() {
                return Error::with_errno(
                    ErrorKind::RealtimeDenied,
                    format!("{what}: SCHED_DEADLINE needs CAP_SYS_NICE (RLIMIT_RTPRIO does not grant it). Fix: run as root or `sudo setcap cap_sys_nice+ep <path to firmtime>` (see docs/RT-SETUP.md)"),
                    errno,
                );
            }
            throttled().unwrap_or_else(|| Error::with_errno(
                ErrorKind::DeadlineRefused,
                format!("{what}: a SCHED_DEADLINE thread must be allowed to run on every CPU of its root domain. Fix: do not restrict its CPU affinity (or use an exclusive cpuset for it)"),
                errno,
            ))
        }
        (Policy::Other { nice } | Policy::Batch { nice }, libc::EPERM) => Error::with_errno(
            ErrorKind::PermissionDenied,
            format!("{what}: nice {nice} is below what RLIMIT_NICE {} allows without CAP_SYS_NICE (lowest allowed: {}). Fix: add `@audio - nice -20` to /etc/security/limits.d/audio.conf and log in again, or run as root", describe_limits(p.nice_soft, p.nice_hard, ""), p.strongest_nice(19)),
            errno,
        ),
        (Policy::Idle, libc::EPERM) => Error::with_errno(
            ErrorKind::PermissionDenied,
            format!("{what}: leaving or entering SCHED_IDLE was not permitted (RLIMIT_NICE {})", describe_limits(p.nice_soft, p.nice_hard, "")),
            errno,
        ),
        (_, libc::EINVAL) => Error::with_errno(
            ErrorKind::InvalidInput,
            format!("{what}: the kernel rejected the parameters as invalid (for SCHED_DEADLINE the period must lie within kernel.sched_deadline_period_min_us..max_us, by default 100us..4s)"),
            errno,
        ),
        _ => Error::with_errno(
            ErrorKind::Io,
            format!("{what}: {}", crate::error::Errno(errno)),
            errno,
        ),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Explains why `mlockall` failed with `errno`, from the facts in `p`.
/// Pure: no I/O.
pub fn diagnose_mlock(errno: i32, p: &Privileges) -> Error {
    let lim = describe_limits(p.memlock_soft, p.memlock_hard, " bytes");
    let msg = if p.has_ipc_lock() {
        format!("mlockall(MCL_CURRENT|MCL_FUTURE) failed ({}) although the process has CAP_IPC_LOCK: the machine is short of memory that can be locked; free memory or lock less (VmSize {} bytes)", crate::error::Errno(errno), p.vm_size_bytes.map_or("?".into(), |v| v.to_string()))
    } else if errno == libc::EPERM || p.memlock_soft == Limit::Value(0) {
        format!("mlockall(MCL_CURRENT|MCL_FUTURE) was refused: RLIMIT_MEMLOCK is {lim} and the process lacks CAP_IPC_LOCK. {MEMLOCK_FIX}")
    } else {
        format!(
            "mlockall(MCL_CURRENT|MCL_FUTURE) was refused: the process maps {} bytes but RLIMIT_MEMLOCK is {lim}, and the process lacks CAP_IPC_LOCK. {MEMLOCK_FIX}",
            p.vm_size_bytes.map_or("more".into(), |v| v.to_string())
        )
    };
    Error::with_errno(ErrorKind::MemlockDenied, msg, errno)
}

/// What to set up for a real-time thread. The default asks for nothing:
/// SCHED_OTHER at nice 0, no locking, no pinning, no DMA latency request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RtRequest {
    /// Scheduling policy for the calling thread.
    pub policy: Policy,
    /// Lock all memory (`mlockall(MCL_CURRENT|MCL_FUTURE)`).
    pub mlock: bool,
    /// Bytes of stack to touch after locking (0 = none).
    pub prefault_stack: usize,
    /// CPUs to pin the calling thread to (`None` = leave as is).
    pub cpus: Option<Vec<usize>>,
    /// Timer slack in ns (`None` = leave as is; ≥ 1).
    pub timer_slack_ns: Option<u64>,
    /// Hold `/dev/cpu_dma_latency` at this many µs (`None` = don't touch it).
    pub dma_latency_us: Option<u32>,
    /// Accept weaker settings when refused, recording each as a [`Downgrade`].
    pub allow_downgrade: bool,
}

/// What the kernel actually holds for a thread, read back after applying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Obtained {
    /// The policy and its parameters (from `sched_getattr`).
    pub policy: Policy,
    /// Real-time priority (0 unless FIFO/RR).
    pub priority: u8,
    /// Nice value (from `getpriority` on the TID; kept while FIFO/RR).
    pub nice: i32,
    /// Whether the process has memory locked (`VmLck` > 0); `None` if unknown.
    pub memory_locked: Option<bool>,
    /// Locked memory in KiB (`VmLck`), if known.
    pub locked_kib: Option<u64>,
    /// CPUs the thread may run on.
    pub cpus: Vec<usize>,
    /// Timer slack in ns (recent kernels force 0 for FIFO/RR/DEADLINE threads).
    pub timer_slack_ns: u64,
    /// The DMA latency limit in force while the guard is held (µs), read
    /// back from the device; `None` if no request is held.
    pub dma_latency_us: Option<i32>,
    /// Kernel thread id the conditions belong to.
    pub tid: i32,
}

/// One setting that was weaker than asked, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Downgrade {
    /// Which setting: `policy`, `mlock` or `dma_latency`.
    pub what: String,
    /// What was asked, e.g. `fifo:80`.
    pub asked: String,
    /// What was used instead, e.g. `other:-20`.
    pub got: String,
    /// The refusal's message.
    pub reason: String,
}

/// The RT conditions of a run: asked, obtained, and every downgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtConditions {
    /// What was asked.
    pub requested: RtRequest,
    /// What the kernel holds.
    pub obtained: Obtained,
    /// Settings that were weakened (only with `allow_downgrade`).
    pub downgrades: Vec<Downgrade>,
}

impl RtConditions {
    /// True if everything asked for was obtained and nothing was downgraded.
    pub fn matches_request(&self) -> bool {
        self.mismatches().is_empty()
    }

    /// Each difference between request and obtained, as a sentence.
    ///
    /// Timer slack counts as obtained when equal, or 0 under FIFO/RR/DEADLINE
    /// (the kernel forces that); the DMA latency when the limit in force is
    /// at or below the request (the kernel applies the strictest request).
    pub fn mismatches(&self) -> Vec<String> {
        let (r, o) = (&self.requested, &self.obtained);
        let mut v: Vec<String> = self
            .downgrades
            .iter()
            .map(|d| format!("{} downgraded from {} to {}", d.what, d.asked, d.got))
            .collect();
        if o.policy != r.policy {
            v.push(format!("policy asked {} but got {}", r.policy, o.policy));
        }
        if r.mlock && o.memory_locked != Some(true) {
            v.push("memory lock asked but memory is not locked".into());
        }
        if let Some(cpus) = &r.cpus {
            let mut want = cpus.clone();
            want.sort_unstable();
            want.dedup();
            if want != o.cpus {
                v.push(format!(
                    "CPUs asked {} but got {}",
                    sched::format_cpu_list(&want),
                    sched::format_cpu_list(&o.cpus)
                ));
            }
        }
        if let Some(ns) = r.timer_slack_ns {
            let forced_zero = o.policy.is_rt_or_deadline() && o.timer_slack_ns == 0;
            if o.timer_slack_ns != ns && !forced_zero {
                v.push(format!(
                    "timer slack asked {ns}ns but got {}ns",
                    o.timer_slack_ns
                ));
            }
        }
        if let Some(us) = r.dma_latency_us {
            match o.dma_latency_us {
                Some(got) if got >= 0 && got as u64 <= u64::from(us) => {}
                Some(got) => v.push(format!("DMA latency asked {us}us but {got}us is in force")),
                None => v.push(format!("DMA latency {us}us asked but not held")),
            }
        }
        v
    }
}

/// The result of [`apply`]: the conditions, and the DMA latency guard to
/// keep alive for as long as the conditions should hold.
#[derive(Debug)]
pub struct RtSetup {
    /// What was asked and obtained.
    pub conditions: RtConditions,
    /// The DMA latency request; dropping it releases the request.
    pub guard: Option<DmaLatencyGuard>,
}

/// Reads the calling thread's conditions without changing anything.
/// `dma_latency_us` is `None` (only a held guard knows its value).
///
/// # Errors
/// [`ErrorKind::Io`] if the scheduler, affinity or timer slack cannot be read.
pub fn observe() -> Result<Obtained> {
    let policy = sched::current_thread()?;
    Ok(Obtained {
        priority: policy.priority(),
        policy,
        nice: sched::current_nice()?,
        memory_locked: memory::is_locked(),
        locked_kib: memory::locked_kib(),
        cpus: sched::affinity()?,
        timer_slack_ns: sched::timer_slack()?,
        dma_latency_us: None,
        tid: sched::current_tid(),
    })
}

/// The thread's state before [`apply`], to put back on failure.
struct Before {
    policy: Policy,
    cpus: Vec<usize>,
    slack: u64,
    locked: bool,
}

/// Applies `req` to the calling thread and reports what was obtained.
///
/// Order: validate everything, lock memory and prefault the stack, pin CPUs,
/// set timer slack, set the policy, take the DMA latency guard, read back.
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] for out-of-range values (nothing is changed).
/// - With `allow_downgrade: false`, any refusal: [`ErrorKind::RealtimeDenied`],
///   [`ErrorKind::RtThrottled`], [`ErrorKind::DeadlineRefused`],
///   [`ErrorKind::MemlockDenied`], [`ErrorKind::PermissionDenied`],
///   [`ErrorKind::NotPresent`]. The thread's policy, affinity and timer slack
///   are then restored and memory unlocked if this call locked it.
/// - With `allow_downgrade: true`, refusals of the policy, memory lock and
///   DMA latency become [`Downgrade`]s; other errors are still returned.
pub fn apply(req: &RtRequest) -> Result<RtSetup> {
    req.policy.validate()?;
    if let Some(cpus) = &req.cpus {
        let online = sched::online_cpus();
        if cpus.is_empty() || cpus.iter().any(|c| !online.contains(c)) {
            return Err(Error::invalid(format!(
                "CPUs '{}' are not all online: online CPUs are {}",
                sched::format_cpu_list(cpus),
                sched::format_cpu_list(&online)
            )));
        }
    }
    if req.timer_slack_ns == Some(0) {
        return Err(Error::invalid(
            "timer slack 0 would reset the thread to its default slack: ask for 1ns for the least slack",
        ));
    }
    if let Some(us) = req.dma_latency_us {
        if i32::try_from(us).is_err() {
            return Err(Error::invalid(format!(
                "DMA latency {us}us is out of range: valid is 0 to {}us",
                i32::MAX
            )));
        }
    }
    let before = Before {
        policy: sched::current_thread()?,
        cpus: sched::affinity()?,
        slack: sched::timer_slack()?,
        locked: memory::is_locked() == Some(true),
    };
    let mut downgrades = Vec::new();
    let mut locked_here = false;
    match apply_steps(req, &before, &mut downgrades, &mut locked_here) {
        Ok(guard) => {
            let mut obtained = observe()?;
            obtained.dma_latency_us = match &guard {
                Some(g) => Some(g.effective_us()?),
                None => None,
            };
            Ok(RtSetup {
                conditions: RtConditions {
                    requested: req.clone(),
                    obtained,
                    downgrades,
                },
                guard,
            })
        }
        Err(e) => {
            // Best effort: put the thread back as it was.
            let _ = sched::set_current_thread(&before.policy);
            let _ = sched::set_affinity(&before.cpus);
            if before.slack > 0 {
                let _ = sched::set_timer_slack(before.slack);
            }
            if locked_here && !before.locked {
                let _ = memory::unlock_all();
            }
            Err(e)
        }
    }
}

fn apply_steps(
    req: &RtRequest,
    before: &Before,
    downgrades: &mut Vec<Downgrade>,
    locked_here: &mut bool,
) -> Result<Option<DmaLatencyGuard>> {
    if req.mlock {
        match memory::lock_all(req.prefault_stack) {
            Ok(()) => *locked_here = true,
            Err(e) if req.allow_downgrade && e.kind() == ErrorKind::MemlockDenied => {
                memory::prefault_stack(req.prefault_stack)?;
                downgrades.push(Downgrade {
                    what: "mlock".into(),
                    asked: "locked".into(),
                    got: "unlocked".into(),
                    reason: e.message().to_string(),
                });
            }
            Err(e) => return Err(e),
        }
    } else {
        memory::prefault_stack(req.prefault_stack)?;
    }
    if let Some(cpus) = &req.cpus {
        sched::set_affinity(cpus)?;
    }
    if let Some(ns) = req.timer_slack_ns {
        sched::set_timer_slack(ns)?;
    }
    match sched::set_current_thread(&req.policy) {
        Ok(()) => {}
        Err(e)
            if req.allow_downgrade
                && matches!(
                    e.kind(),
                    ErrorKind::RealtimeDenied
                        | ErrorKind::RtThrottled
                        | ErrorKind::DeadlineRefused
                        | ErrorKind::PermissionDenied
                ) =>
        {
            let current_nice = sched::current_nice()?;
            let best = Privileges::read().strongest_nice(current_nice);
            let best = req.policy.nice().map_or(best, |n| best.max(n));
            let mut fallback = match req.policy {
                Policy::Batch { .. } => Policy::Batch { nice: best },
                _ => Policy::Other { nice: best },
            };
            if sched::set_current_thread(&fallback).is_err() {
                // Raising nice is always allowed, so the current value is.
                fallback = Policy::Other {
                    nice: current_nice.max(before.policy.nice().unwrap_or(current_nice)),
                };
                sched::set_current_thread(&fallback)?;
            }
            downgrades.push(Downgrade {
                what: "policy".into(),
                asked: req.policy.to_string(),
                got: fallback.to_string(),
                reason: e.message().to_string(),
            });
        }
        Err(e) => return Err(e),
    }
    match req.dma_latency_us {
        None => Ok(None),
        Some(us) => match DmaLatencyGuard::hold(us) {
            Ok(g) => Ok(Some(g)),
            Err(e)
                if req.allow_downgrade
                    && matches!(
                        e.kind(),
                        ErrorKind::NotPresent | ErrorKind::PermissionDenied
                    ) =>
            {
                downgrades.push(Downgrade {
                    what: "dma_latency".into(),
                    asked: format!("{us}us"),
                    got: "not held".into(),
                    reason: e.message().to_string(),
                });
                Ok(None)
            }
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unprivileged() -> Privileges {
        Privileges {
            euid: 1000,
            rtprio_soft: Limit::Value(0),
            rtprio_hard: Limit::Value(0),
            memlock_soft: Limit::Value(8 << 20),
            memlock_hard: Limit::Value(8 << 20),
            rttime_soft: Limit::Unlimited,
            rttime_hard: Limit::Unlimited,
            nice_soft: Limit::Value(0),
            nice_hard: Limit::Value(0),
            cap_eff: Some("0000000000000000".into()),
            cap_sys_nice: Some(false),
            cap_ipc_lock: Some(false),
            sched_rt_runtime_us: Some(950_000),
            sched_rt_period_us: Some(1_000_000),
            cgroup_cpu_path: None,
            cgroup_rt_runtime_us: None,
            vm_size_bytes: Some(100 << 20),
        }
    }

    fn root() -> Privileges {
        Privileges {
            euid: 0,
            cap_eff: Some("000001ffffffffff".into()),
            cap_sys_nice: Some(true),
            cap_ipc_lock: Some(true),
            rtprio_soft: Limit::Unlimited,
            rtprio_hard: Limit::Unlimited,
            ..unprivileged()
        }
    }

    const FIFO80: Policy = Policy::Fifo { priority: 80 };
    const DL: Policy = Policy::Deadline {
        runtime_ns: 200_000,
        deadline_ns: 1_000_000,
        period_ns: 1_000_000,
    };

    #[test]
    fn eperm_without_rtprio_names_the_limit_the_capability_and_the_fix() {
        let e = diagnose_sched(&FIFO80, libc::EPERM, &unprivileged());
        assert_eq!(e.kind(), ErrorKind::RealtimeDenied);
        for needle in [
            "SCHED_FIFO priority 80",
            "RLIMIT_RTPRIO is 0",
            "CAP_SYS_NICE",
            "@audio - rtprio 95",
            "setcap cap_sys_nice+ep",
            "root",
        ] {
            assert!(e.message().contains(needle), "{needle}: {e}");
        }
        assert_eq!(e.errno(), Some(libc::EPERM));
    }

    #[test]
    fn eperm_with_low_rtprio_says_how_far_it_goes() {
        let p = Privileges {
            rtprio_soft: Limit::Value(50),
            rtprio_hard: Limit::Value(50),
            ..unprivileged()
        };
        let e = diagnose_sched(&FIFO80, libc::EPERM, &p);
        assert_eq!(e.kind(), ErrorKind::RealtimeDenied);
        assert!(e.message().contains("priority ≤ 50"), "{e}");
        let p = Privileges {
            rtprio_soft: Limit::Value(50),
            rtprio_hard: Limit::Value(99),
            ..unprivileged()
        };
        let e = diagnose_sched(&FIFO80, libc::EPERM, &p);
        assert!(e.message().contains("ulimit -r 80"), "{e}");
    }

    #[test]
    fn eperm_with_privileges_and_no_rt_runtime_is_throttled() {
        let p = Privileges {
            sched_rt_runtime_us: Some(0),
            ..root()
        };
        let e = diagnose_sched(&FIFO80, libc::EPERM, &p);
        assert_eq!(e.kind(), ErrorKind::RtThrottled);
        assert!(
            e.message().contains("kernel.sched_rt_runtime_us is 0"),
            "{e}"
        );
        let p = Privileges {
            cgroup_cpu_path: Some("/user.slice".into()),
            cgroup_rt_runtime_us: Some(0),
            ..root()
        };
        let e = diagnose_sched(&Policy::Rr { priority: 10 }, libc::EPERM, &p);
        assert_eq!(e.kind(), ErrorKind::RtThrottled);
        assert!(e.message().contains("'/user.slice'"), "{e}");
        assert!(e.message().contains("cpu.rt_runtime_us = 0"), "{e}");
    }

    #[test]
    fn eperm_with_everything_fine_is_still_explained() {
        let e = diagnose_sched(&FIFO80, libc::EPERM, &root());
        assert_eq!(e.kind(), ErrorKind::RealtimeDenied);
        assert!(e.message().contains("seccomp"), "{e}");
    }

    #[test]
    fn deadline_refusals() {
        let e = diagnose_sched(&DL, libc::EBUSY, &root());
        assert_eq!(e.kind(), ErrorKind::DeadlineRefused);
        assert!(e.message().contains("95%"), "{e}");
        assert!(e.message().contains("admission"), "{e}");
        let e = diagnose_sched(&DL, libc::EPERM, &unprivileged());
        assert_eq!(e.kind(), ErrorKind::RealtimeDenied);
        assert!(e.message().contains("CAP_SYS_NICE"), "{e}");
        let e = diagnose_sched(&DL, libc::EPERM, &root());
        assert_eq!(e.kind(), ErrorKind::DeadlineRefused);
        assert!(e.message().contains("affinity"), "{e}");
    }

    #[test]
    fn nice_refusal_names_rlimit_nice() {
        let e = diagnose_sched(&Policy::Other { nice: -10 }, libc::EPERM, &unprivileged());
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.message().contains("RLIMIT_NICE"), "{e}");
        assert!(e.message().contains("nice -20"), "{e}");
    }

    #[test]
    fn mlock_refusals_give_the_limit_and_the_fix() {
        let e = diagnose_mlock(libc::ENOMEM, &unprivileged());
        assert_eq!(e.kind(), ErrorKind::MemlockDenied);
        for needle in [
            "RLIMIT_MEMLOCK is 8388608 bytes",
            "CAP_IPC_LOCK",
            "@audio - memlock unlimited",
        ] {
            assert!(e.message().contains(needle), "{needle}: {e}");
        }
        let p = Privileges {
            memlock_soft: Limit::Value(0),
            memlock_hard: Limit::Value(0),
            ..unprivileged()
        };
        let e = diagnose_mlock(libc::EPERM, &p);
        assert!(e.message().contains("RLIMIT_MEMLOCK is 0 bytes"), "{e}");
        let e = diagnose_mlock(libc::ENOMEM, &root());
        assert!(e.message().contains("short of memory"), "{e}");
    }

    #[test]
    fn strongest_nice_follows_rlimit_nice() {
        let mut p = unprivileged();
        assert_eq!(p.strongest_nice(0), 0);
        assert_eq!(p.strongest_nice(5), 5);
        p.nice_soft = Limit::Value(40);
        assert_eq!(p.strongest_nice(0), -20);
        p.nice_soft = Limit::Value(30);
        assert_eq!(p.strongest_nice(0), -10);
        assert_eq!(root().strongest_nice(0), -20);
        assert!(root().may_realtime(99));
        assert!(!unprivileged().may_realtime(1));
    }

    #[test]
    fn default_request_asks_for_nothing() {
        let r = RtRequest::default();
        assert_eq!(r.policy, Policy::Other { nice: 0 });
        assert!(!r.mlock && !r.allow_downgrade);
        assert_eq!(
            (r.cpus, r.timer_slack_ns, r.dma_latency_us, r.prefault_stack),
            (None, None, None, 0)
        );
        let r: RtRequest = serde_json::from_str(r#"{"mlock":true}"#).unwrap();
        assert!(r.mlock);
    }

    fn conditions() -> RtConditions {
        RtConditions {
            requested: RtRequest {
                policy: FIFO80,
                mlock: true,
                cpus: Some(vec![1, 0]),
                timer_slack_ns: Some(1),
                dma_latency_us: Some(10),
                ..Default::default()
            },
            obtained: Obtained {
                policy: FIFO80,
                priority: 80,
                nice: 0,
                memory_locked: Some(true),
                locked_kib: Some(1000),
                cpus: vec![0, 1],
                timer_slack_ns: 0,
                dma_latency_us: Some(0),
                tid: 1,
            },
            downgrades: vec![],
        }
    }

    #[test]
    fn matches_request_compares_each_setting() {
        let c = conditions();
        assert!(c.matches_request(), "{:?}", c.mismatches());
        let mut d = c.clone();
        d.obtained.policy = Policy::Other { nice: -20 };
        d.downgrades.push(Downgrade {
            what: "policy".into(),
            asked: "fifo:80".into(),
            got: "other:-20".into(),
            reason: "no".into(),
        });
        let m = d.mismatches();
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m[0].contains("policy downgraded from fifo:80 to other:-20"));
        let mut d = c.clone();
        d.obtained.memory_locked = Some(false);
        d.obtained.cpus = vec![0];
        d.obtained.dma_latency_us = Some(100);
        assert_eq!(d.mismatches().len(), 3, "{:?}", d.mismatches());
    }

    #[test]
    fn conditions_round_trip_through_json() {
        let c = conditions();
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<RtConditions>(&j).unwrap(), c);
        let p = root();
        let j = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Privileges>(&j).unwrap(), p);
    }
}
