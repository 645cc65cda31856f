//! The calling process's real-time privileges: user, resource limits,
//! capabilities, RT throttling and cgroup budget.
//!
//! One [`Privileges`] serves both users: `firmtime doctor` records it in the
//! system block ([`crate::system::SystemInfo::privileges`]) and checks it, and
//! [`crate::setup`] explains a refused policy or `mlockall` from it
//! ([`crate::setup::diagnose_sched`], [`crate::setup::diagnose_mlock`]).
//!
//! Honesty rule: a fact that cannot be read is `None` (JSON `null`), never
//! guessed. The parsers are pure functions over the text of the files they
//! read, so they are unit-tested without the machine.
//!
//! # RT contract
//!
//! Nothing here is RT-safe: [`Privileges::read`] reads files and allocates.
//! Read before the loop, or after a refusal during setup.

use serde::{Deserialize, Serialize};

/// Lets a process lock memory regardless of RLIMIT_MEMLOCK (`linux/capability.h`).
pub const CAP_IPC_LOCK: u32 = 14;
/// Lets a process use real-time scheduling regardless of RLIMIT_RTPRIO.
pub const CAP_SYS_NICE: u32 = 23;
/// Lets a process raise its hard resource limits.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// A resource limit: a number, or `unlimited` (RLIM_INFINITY).
///
/// Serialized as a JSON number, or as the string `"unlimited"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// A finite limit.
    Value(u64),
    /// RLIM_INFINITY.
    Unlimited,
}

impl Limit {
    /// Converts a raw `rlim_t`, mapping RLIM_INFINITY to [`Limit::Unlimited`].
    pub fn from_raw(v: libc::rlim_t) -> Self {
        if v == libc::RLIM_INFINITY {
            Self::Unlimited
        } else {
            Self::Value(v)
        }
    }

    /// Reads the (soft, hard) limits of `resource` for the calling process.
    /// `(Value(0), Value(0))` if the kernel does not know the resource.
    pub fn read(resource: libc::__rlimit_resource_t) -> (Limit, Limit) {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid, owned struct.
        if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
            // Only EINVAL/EFAULT are possible; report no allowance rather than guess one.
            return (Limit::Value(0), Limit::Value(0));
        }
        (Limit::from_raw(lim.rlim_cur), Limit::from_raw(lim.rlim_max))
    }

    /// True when the limit is unlimited or at least `n`.
    pub fn at_least(self, n: u64) -> bool {
        match self {
            Self::Unlimited => true,
            Self::Value(v) => v >= n,
        }
    }

    /// The limit as a number, with unlimited as `u64::MAX`.
    pub fn or_max(self) -> u64 {
        match self {
            Self::Unlimited => u64::MAX,
            Self::Value(v) => v,
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(v) => write!(f, "{v}"),
            Self::Unlimited => f.write_str("unlimited"),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Value(v) => s.serialize_u64(*v),
            Self::Unlimited => s.serialize_str("unlimited"),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(v) => Ok(Self::Value(v)),
            Raw::S(s) if s == "unlimited" => Ok(Self::Unlimited),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "expected a number or \"unlimited\", got \"{s}\""
            ))),
        }
    }
}

/// `soft (hard H)` with `unit` after each number, for messages:
/// `8388608 bytes (hard unlimited)`.
pub fn describe_limits(soft: Limit, hard: Limit, unit: &str) -> String {
    let f = |l: Limit| match l {
        Limit::Unlimited => "unlimited".to_string(),
        Limit::Value(v) => format!("{v}{unit}"),
    };
    format!("{} (hard {})", f(soft), f(hard))
}

/// The facts that decide whether real-time scheduling and memory locking are
/// allowed to the calling process. Read with [`Privileges::read`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Privileges {
    /// Effective user id (0 = root).
    pub euid: u32,
    /// RLIMIT_RTPRIO soft limit: the highest SCHED_FIFO/RR priority allowed without CAP_SYS_NICE.
    pub rtprio_soft: Limit,
    /// RLIMIT_RTPRIO hard limit (the soft limit may be raised to it).
    pub rtprio_hard: Limit,
    /// RLIMIT_MEMLOCK soft limit in bytes.
    pub memlock_soft: Limit,
    /// RLIMIT_MEMLOCK hard limit in bytes.
    pub memlock_hard: Limit,
    /// RLIMIT_RTTIME soft limit in µs of RT CPU time without a blocking call.
    pub rttime_soft: Limit,
    /// RLIMIT_RTTIME hard limit in µs.
    pub rttime_hard: Limit,
    /// RLIMIT_NICE soft limit: the lowest nice allowed without CAP_SYS_NICE is `20 - soft`.
    pub nice_soft: Limit,
    /// RLIMIT_NICE hard limit.
    pub nice_hard: Limit,
    /// Effective capability set as in /proc/self/status (`CapEff`, hex), if readable.
    pub cap_eff: Option<String>,
    /// CAP_SYS_NICE is effective: any policy, priority and nice (None: CapEff unreadable).
    pub cap_sys_nice: Option<bool>,
    /// CAP_IPC_LOCK is effective: lock any amount of memory (None: CapEff unreadable).
    pub cap_ipc_lock: Option<bool>,
    /// `kernel.sched_rt_runtime_us` (-1 = RT throttling off), if readable.
    pub sched_rt_runtime_us: Option<i64>,
    /// `kernel.sched_rt_period_us`, if readable.
    pub sched_rt_period_us: Option<i64>,
    /// The calling thread's cgroup v1 `cpu` controller path, if there is one.
    pub cgroup_cpu_path: Option<String>,
    /// `cpu.rt_runtime_us` of that cgroup (CONFIG_RT_GROUP_SCHED), if present.
    pub cgroup_rt_runtime_us: Option<i64>,
    /// Virtual memory size of the process in bytes (what `mlockall` must lock), if readable.
    pub vm_size_bytes: Option<u64>,
}

impl Privileges {
    /// Reads the facts for the calling thread. Never fails: what cannot be
    /// read is `None`.
    pub fn read() -> Privileges {
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let cap = status.as_deref().and_then(parse_cap_eff);
        let sysctl = |name: &str| -> Option<i64> {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let cgroup = std::fs::read_to_string("/proc/thread-self/cgroup")
            .ok()
            .and_then(|s| cgroup_v1_cpu_path(&s));
        let cgroup_rt_runtime_us = cgroup.as_ref().and_then(|(ctrl, path)| {
            [ctrl.as_str(), "cpu", "cpu,cpuacct"].iter().find_map(|c| {
                let p = format!(
                    "/sys/fs/cgroup/{c}{}/cpu.rt_runtime_us",
                    path.trim_end_matches('/')
                );
                std::fs::read_to_string(p).ok()?.trim().parse().ok()
            })
        });
        let (rtprio_soft, rtprio_hard) = Limit::read(libc::RLIMIT_RTPRIO);
        let (memlock_soft, memlock_hard) = Limit::read(libc::RLIMIT_MEMLOCK);
        let (rttime_soft, rttime_hard) = Limit::read(libc::RLIMIT_RTTIME);
        let (nice_soft, nice_hard) = Limit::read(libc::RLIMIT_NICE);
        Privileges {
            // SAFETY: geteuid has no preconditions and cannot fail.
            euid: unsafe { libc::geteuid() },
            rtprio_soft,
            rtprio_hard,
            memlock_soft,
            memlock_hard,
            rttime_soft,
            rttime_hard,
            nice_soft,
            nice_hard,
            cap_eff: cap.map(|c| format!("{c:016x}")),
            cap_sys_nice: cap.map(|c| has_cap(c, CAP_SYS_NICE)),
            cap_ipc_lock: cap.map(|c| has_cap(c, CAP_IPC_LOCK)),
            sched_rt_runtime_us: sysctl("sched_rt_runtime_us"),
            sched_rt_period_us: sysctl("sched_rt_period_us"),
            cgroup_cpu_path: cgroup.map(|(_, p)| p),
            cgroup_rt_runtime_us,
            vm_size_bytes: status
                .as_deref()
                .and_then(|s| crate::memory::status_kib(s, "VmSize"))
                .map(|k| k * 1024),
        }
    }

    /// CAP_SYS_NICE is known to be effective (unknown counts as absent).
    pub fn has_sys_nice(&self) -> bool {
        self.cap_sys_nice == Some(true)
    }

    /// CAP_IPC_LOCK is known to be effective (unknown counts as absent).
    pub fn has_ipc_lock(&self) -> bool {
        self.cap_ipc_lock == Some(true)
    }

    /// True if FIFO/RR at `priority` is allowed by capability or RLIMIT_RTPRIO.
    pub fn may_realtime(&self, priority: u8) -> bool {
        self.has_sys_nice() || self.rtprio_soft.at_least(u64::from(priority))
    }

    /// The lowest (strongest) nice value this process may set: -20 with
    /// CAP_SYS_NICE, else `20 - RLIMIT_NICE` (clamped to -20..=19), but never
    /// above `current` (raising nice is always allowed).
    pub fn strongest_nice(&self, current: i32) -> i32 {
        let by_limit = if self.has_sys_nice() {
            -20
        } else {
            let lim = self.nice_soft.or_max().min(40) as i32;
            (20 - lim).clamp(-20, 19)
        };
        by_limit.min(current)
    }
}

/// The effective capability bits (`CapEff:`) of a `/proc/<pid>/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// True when capability number `cap` is set in the mask `caps`.
pub fn has_cap(caps: u64, cap: u32) -> bool {
    cap < 64 && caps & (1u64 << cap) != 0
}

/// The cgroup v1 `cpu` controller line of a `/proc/<pid>/cgroup` text, as
/// (controller list, path), e.g. `("cpu,cpuacct", "/user.slice")`.
pub fn cgroup_v1_cpu_path(cgroup: &str) -> Option<(String, String)> {
    cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
        ctrls
            .split(',')
            .any(|c| c == "cpu")
            .then(|| (ctrls.to_string(), path.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities() {
        let status = "Name:\tcat\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n";
        let c = parse_cap_eff(status).unwrap();
        assert!(has_cap(c, CAP_SYS_NICE));
        assert!(has_cap(c, CAP_IPC_LOCK));
        assert!(!has_cap(c, CAP_SYS_RESOURCE));
        assert_eq!(parse_cap_eff("CapEff:\t0000000000800000\n"), Some(1 << 23));
        assert_eq!(parse_cap_eff("Name:\tcat\n"), None);
        assert!(!has_cap(u64::MAX, 64));
    }

    #[test]
    fn cgroup_cpu_controller() {
        let cg = "5:devices:/\n4:cpu,cpuacct:/user.slice\n0::/x\n";
        assert_eq!(
            cgroup_v1_cpu_path(cg),
            Some(("cpu,cpuacct".into(), "/user.slice".into()))
        );
        assert_eq!(cgroup_v1_cpu_path("4:cpuset:/\n0::/\n"), None);
    }

    #[test]
    fn limit_json() {
        let v = serde_json::to_string(&[Limit::Value(95), Limit::Unlimited]).unwrap();
        assert_eq!(v, r#"[95,"unlimited"]"#);
        let back: Vec<Limit> = serde_json::from_str(&v).unwrap();
        assert_eq!(back, [Limit::Value(95), Limit::Unlimited]);
        assert!(serde_json::from_str::<Limit>("\"lots\"").is_err());
        assert!(Limit::Unlimited.at_least(1 << 40));
        assert!(!Limit::Value(0).at_least(1));
        assert_eq!(Limit::Unlimited.or_max(), u64::MAX);
        assert_eq!(Limit::from_raw(libc::RLIM_INFINITY), Limit::Unlimited);
        assert_eq!(
            describe_limits(Limit::Value(8), Limit::Unlimited, " bytes"),
            "8 bytes (hard unlimited)"
        );
    }

    #[test]
    fn unknown_capabilities_count_as_absent() {
        let p = Privileges {
            euid: 1000,
            rtprio_soft: Limit::Value(0),
            rtprio_hard: Limit::Value(0),
            memlock_soft: Limit::Value(0),
            memlock_hard: Limit::Value(0),
            rttime_soft: Limit::Unlimited,
            rttime_hard: Limit::Unlimited,
            nice_soft: Limit::Value(0),
            nice_hard: Limit::Value(0),
            cap_eff: None,
            cap_sys_nice: None,
            cap_ipc_lock: None,
            sched_rt_runtime_us: None,
            sched_rt_period_us: None,
            cgroup_cpu_path: None,
            cgroup_rt_runtime_us: None,
            vm_size_bytes: None,
        };
        assert!(!p.has_sys_nice() && !p.has_ipc_lock());
        assert!(!p.may_realtime(1));
        assert_eq!(p.strongest_nice(0), 0);
        let j = serde_json::to_value(&p).unwrap();
        assert_eq!(j["rtprio_soft"], 0);
        assert_eq!(j["rttime_soft"], "unlimited");
        assert!(j["cap_sys_nice"].is_null());
        assert_eq!(serde_json::from_value::<Privileges>(j).unwrap(), p);
    }
}
