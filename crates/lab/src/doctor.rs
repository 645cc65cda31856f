//! The checks behind `firmtime doctor`: is this machine set up for
//! real-time work?
//!
//! [`run`] collects a [`SystemInfo`], samples steal time, looks for JACK and
//! MIDI/RTC devices (the facts come from `firmtime_rt::system` and
//! `firmtime_rt::probe`), and turns each item into a [`Check`]: pass, warn,
//! fail or unknown, with the value found and a one-line fix. Each rule is a
//! pure function of its inputs (`check_*`), unit-tested without the machine.
//! The policy lives here, in the crate that judges, because `lab all`'s
//! report lists the doctor's advice beside its verdict.
//!
//! Status rules, in short: **fail** only when ms-accurate real-time work is
//! impossible for this user (real-time scheduling denied, no high-resolution
//! timers, `sched_rt_runtime_us` = 0); **warn** for what hurts (no isolated
//! CPUs, a frequency-scaling governor, deep idle states, SMT, virtualization,
//! steal time above 1 %, a non-preemptible kernel…); **unknown** when the
//! item cannot be read — never guessed. docs/DOCTOR.md lists every rule.
//!
//! # RT contract
//!
//! Not RT-safe: reads files, allocates and sleeps (~0.4 s to sample steal
//! time). Run before any real-time work, never from a real-time loop.

use firmtime_rt::privileges::Limit;
use firmtime_rt::probe::{self, find_on_path};
use firmtime_rt::system::{cmdline_param, IdleState, PreemptModel, SystemInfo};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

pub use firmtime_rt::probe::JackEvidence;

/// How long [`run`] samples /proc/stat for steal time.
pub const STEAL_SAMPLE: Duration = Duration::from_millis(400);

/// Steal time above this share of CPU time (percent) is a warning.
pub const STEAL_WARN_PERCENT: f64 = 1.0;

/// Idle states with an exit latency above this (µs) are "deep".
pub const DEEP_IDLE_US: u64 = 20;

/// RLIMIT_MEMLOCK below this (bytes) is a warning: `mlockall` of a
/// firmtime process (code, heap, preallocated buffers) needs tens of MiB.
pub const MEMLOCK_WARN_BYTES: u64 = 64 << 20;

/// Timer slack above this (ns) is a warning (50 µs is the kernel default).
pub const TIMER_SLACK_WARN_NS: u64 = 50_000;

/// The verdict on one item.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Set up for real-time work.
    Pass,
    /// Works, but hurts timing; the fix says how to do better.
    Warn,
    /// Makes ms-accurate real-time work impossible for this user.
    Fail,
    /// Could not be read; the fix says how to make it readable.
    Unknown,
}

impl Status {
    /// The lowercase name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "fail",
            Self::Unknown => "unknown",
        }
    }
}

/// One checked item.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Stable snake-case id (`preempt_model`, `rtprio_limit`…).
    pub id: String,
    /// Short human title.
    pub title: String,
    /// The verdict.
    pub status: Status,
    /// What was found, in words.
    pub value: String,
    /// One line saying how to fix it; empty when the status is pass.
    pub fix: String,
}

impl Check {
    fn new(id: &str, title: &str, status: Status, value: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            status,
            value: value.into(),
            fix: String::new(),
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        if self.status != Status::Pass {
            self.fix = fix.into();
        }
        self
    }
}

/// The result of `firmtime doctor`: every check and the system block.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Report {
    /// The checks, in a fixed order.
    pub checks: Vec<Check>,
    /// The machine, as recorded in every output file.
    pub system: SystemInfo,
}

impl Report {
    /// How many checks have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// True when any check failed.
    pub fn any_failed(&self) -> bool {
        self.count(Status::Fail) > 0
    }

    /// The advice: each warning and failure that has a fix, as the
    /// explaining trace credits its causes to ([`firmtime_trace::explain::advice`]),
    /// its line `title (value): fix`.
    pub fn fixes(&self) -> Vec<firmtime_trace::explain::advice::Fix> {
        self.checks
            .iter()
            .filter(|c| matches!(c.status, Status::Fail | Status::Warn) && !c.fix.is_empty())
            .map(|c| firmtime_trace::explain::advice::Fix {
                id: c.id.clone(),
                line: format!("{} ({}): {}", c.title, c.value, c.fix),
            })
            .collect()
    }
}

/// Runs every check, sampling steal time over [`STEAL_SAMPLE`].
pub fn run() -> Report {
    run_with(STEAL_SAMPLE)
}

/// Runs every check, sampling steal time over `steal_sample`.
pub fn run_with(steal_sample: Duration) -> Report {
    run_with_jack(steal_sample, None)
}

/// Runs every check, sampling steal time over `steal_sample`;
/// `jack_accepts_clients` is whether a JACK client could connect to the
/// default server just now (None: not tried). Without it a leftover
/// /dev/shm entry cannot be told from a live server.
pub fn run_with_jack(steal_sample: Duration, jack_accepts_clients: Option<bool>) -> Report {
    let steal = probe::steal_percent_over(steal_sample);
    let sys = SystemInfo::collect();
    let p = &sys.privileges;
    let cmdline = sys.kernel_cmdline.as_deref();
    let param = |name: &str| cmdline.map(|c| cmdline_param(c, name).map(str::to_string));
    let config = firmtime_rt::system::read_kernel_config(&sys.kernel_release).map(|(_, c)| c);
    let config_enabled = |key: &str| {
        config
            .as_ref()
            .map(|c| c.get(key).is_some_and(|v| v == "y"))
    };

    let checks = vec![
        check_preempt(sys.preempt_model, sys.preempt_dynamic, &sys.preempt_source),
        check_config_hz(sys.config_hz, sys.high_res_timers),
        check_nohz(sys.nohz.as_deref()),
        check_high_res_timers(
            sys.high_res_timers,
            sys.sources.get("high_res_timers").map(String::as_str),
        ),
        check_clocksource(sys.clocksource.as_deref(), &sys.clocksources_available),
        check_tsc_invariant(&sys.arch, sys.constant_tsc, sys.nonstop_tsc),
        check_rtprio(p.euid, p.cap_sys_nice, p.rtprio_soft, p.rtprio_hard),
        check_memlock(p.euid, p.cap_ipc_lock, p.memlock_soft, p.memlock_hard),
        check_capabilities(p.euid, p.cap_eff.as_deref(), p.cap_sys_nice, p.cap_ipc_lock),
        check_rt_runtime(p.sched_rt_runtime_us, p.sched_rt_period_us),
        check_governor(sys.cpu_governors.as_deref()),
        check_idle_states(sys.idle_driver.as_deref(), &sys.idle_states),
        check_smt(sys.smt_active),
        check_isolcpus(
            param("isolcpus"),
            sys.isolated_cpus.as_deref(),
            sys.cpus_online,
        ),
        check_nohz_full(
            param("nohz_full"),
            probe::nohz_full_cpus(),
            config_enabled("CONFIG_NO_HZ_FULL"),
        ),
        check_rcu_nocbs(param("rcu_nocbs"), config_enabled("CONFIG_RCU_NOCB_CPU")),
        check_timer_slack(sys.timer_slack_ns),
        check_virtualization(sys.virtualization.as_deref()),
        check_steal(steal, steal_sample),
        check_jack_installed(find_on_path("jackd").as_deref()),
        check_jack_running(&JackEvidence {
            accepts_clients: jack_accepts_clients,
            ..JackEvidence::read()
        }),
        check_dev_rtc(&probe::rtc_devices()),
        check_dev_snd_seq(probe::snd_seq_present()),
        check_dev_midi(&probe::midi_devices()),
    ];
    Report {
        checks,
        system: sys,
    }
}

/// Preempt model: RT, full and lazy pass; none and voluntary warn; unknown is unknown.
pub fn check_preempt(model: PreemptModel, dynamic: Option<bool>, source: &str) -> Check {
    let (id, title) = ("preempt_model", "Kernel preemption model");
    let value = format!("{} ({source})", model.name());
    let boot_fix = "boot with preempt=full on the kernel command line (PREEMPT_DYNAMIC kernel), \
                    or switch at run time: echo full > /sys/kernel/debug/sched/preempt";
    let kernel_fix = "install a fully preemptible or PREEMPT_RT kernel \
                      (Debian: apt install linux-image-rt-amd64)";
    match model {
        PreemptModel::Rt | PreemptModel::Full | PreemptModel::Lazy => {
            Check::new(id, title, Status::Pass, value)
        }
        PreemptModel::None | PreemptModel::Voluntary => {
            let fix = if dynamic == Some(true) {
                boot_fix
            } else {
                kernel_fix
            };
            Check::new(
                id,
                title,
                Status::Warn,
                format!("{value}: long system calls delay wakeups"),
            )
            .fix(fix)
        }
        PreemptModel::Unknown => {
            let fix = if dynamic == Some(true) {
                "rerun as root (reads the boot mode from the kernel log), or mount -t debugfs none /sys/kernel/debug as root; booting with preempt=full also fixes the mode"
            } else {
                "enable CONFIG_IKCONFIG_PROC or install /boot/config-$(uname -r) so the model can be read"
            };
            Check::new(id, title, Status::Unknown, value).fix(fix)
        }
    }
}

/// CONFIG_HZ: with high-resolution timers active, HZ does not limit sleeps (pass);
/// without them HZ below 1000 is a warning; unknown HZ is unknown.
pub fn check_config_hz(hz: Option<u32>, hres: Option<bool>) -> Check {
    let (id, title) = ("config_hz", "Scheduler tick (CONFIG_HZ)");
    match (hz, hres) {
        (None, _) => Check::new(id, title, Status::Unknown, "no kernel config").fix(
            "enable CONFIG_IKCONFIG_PROC or install /boot/config-$(uname -r) (USER_HZ=100 from sysconf is a different number)",
        ),
        (Some(hz), Some(true)) => Check::new(
            id,
            title,
            Status::Pass,
            format!("{hz} Hz (high-resolution timers active: sleeps do not round to ticks)"),
        ),
        (Some(hz), _) if hz >= 1000 => Check::new(id, title, Status::Pass, format!("{hz} Hz")),
        (Some(hz), _) => Check::new(
            id,
            title,
            Status::Warn,
            format!(
                "{hz} Hz without confirmed high-resolution timers: sleeps may round up to {} ms ticks",
                1000 / hz.max(1)
            ),
        )
        .fix("use a kernel with CONFIG_HIGH_RES_TIMERS=y (and not highres=off), or CONFIG_HZ_1000"),
    }
}

/// NO_HZ mode: every mode works for RT (pass); unknown when no kernel config.
pub fn check_nohz(mode: Option<&str>) -> Check {
    let (id, title) = ("nohz", "Tick mode (NO_HZ)");
    match mode {
        Some("full") => Check::new(
            id,
            title,
            Status::Pass,
            "full (CONFIG_NO_HZ_FULL: tickless CPUs possible with nohz_full=)",
        ),
        Some("idle") => Check::new(
            id,
            title,
            Status::Pass,
            "idle (CONFIG_NO_HZ_IDLE: tick stops on idle CPUs)",
        ),
        Some(m) => Check::new(id, title, Status::Pass, format!("{m} (tick always on)")),
        None => Check::new(id, title, Status::Unknown, "no kernel config")
            .fix("enable CONFIG_IKCONFIG_PROC or install /boot/config-$(uname -r)"),
    }
}

/// High-resolution timers: active → pass; off → fail; unreadable → unknown.
pub fn check_high_res_timers(hres: Option<bool>, source: Option<&str>) -> Check {
    let (id, title) = ("high_res_timers", "High-resolution timers");
    let src = source.map(|s| format!(" ({s})")).unwrap_or_default();
    match hres {
        Some(true) => Check::new(id, title, Status::Pass, format!("active{src}")),
        Some(false) => Check::new(
            id,
            title,
            Status::Fail,
            format!("not active{src}: every sleep and timer rounds up to the next tick"),
        )
        .fix("remove highres=off from the kernel command line, or use a kernel with CONFIG_HIGH_RES_TIMERS=y"),
        None => Check::new(id, title, Status::Unknown, "unreadable")
            .fix("run firmtime doctor as root (/proc/timer_list is root-only), or provide the kernel config"),
    }
}

/// Clocksource: tsc, arch_sys_counter and paravirtual clocks pass; hpet,
/// acpi_pm, jiffies and other slow-to-read sources warn.
pub fn check_clocksource(current: Option<&str>, available: &[String]) -> Check {
    let (id, title) = ("clocksource", "Clocksource");
    let Some(cs) = current else {
        return Check::new(id, title, Status::Unknown, "unreadable")
            .fix("mount sysfs: /sys/devices/system/clocksource/clocksource0/current_clocksource");
    };
    let avail = if available.is_empty() {
        String::new()
    } else {
        format!(" (available: {})", available.join(" "))
    };
    let fast = [
        "tsc",
        "arch_sys_counter",
        "kvm-clock",
        "hyperv_clocksource_tsc_page",
        "xen",
        "timebase",
        "riscv_clocksource",
    ];
    if fast.contains(&cs) {
        Check::new(id, title, Status::Pass, format!("{cs}{avail}"))
    } else {
        let fix = if available.iter().any(|a| a == "tsc") {
            "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource (or boot with clocksource=tsc)"
        } else {
            "this clocksource is slow to read and may lack vDSO support; check dmesg for why the TSC was rejected"
        };
        Check::new(
            id,
            title,
            Status::Warn,
            format!("{cs}{avail}: slow to read, clock_gettime may cost µs"),
        )
        .fix(fix)
    }
}

/// TSC invariance (x86): constant_tsc and nonstop_tsc → pass; missing → warn;
/// not x86 → pass (no TSC to worry about); flags unreadable → unknown.
pub fn check_tsc_invariant(arch: &str, constant: Option<bool>, nonstop: Option<bool>) -> Check {
    let (id, title) = ("tsc_invariant", "Invariant TSC");
    let x86 = arch == "x86_64" || (arch.starts_with('i') && arch.ends_with("86"));
    if !x86 {
        return Check::new(id, title, Status::Pass, format!("not x86 ({arch}): no TSC"));
    }
    match (constant, nonstop) {
        (Some(true), Some(true)) => {
            Check::new(id, title, Status::Pass, "constant_tsc nonstop_tsc")
        }
        (Some(c), Some(n)) => Check::new(
            id,
            title,
            Status::Warn,
            format!("constant_tsc {}, nonstop_tsc {}: TSC rate may change with frequency or stop in idle", yes(c), yes(n)),
        )
        .fix("do not use the TSC clock for measurements on this CPU; use CLOCK_MONOTONIC"),
        _ => Check::new(id, title, Status::Unknown, "/proc/cpuinfo flags unreadable")
            .fix("mount /proc"),
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

const LIMITS_FIX: &str = "add '@audio - rtprio 95' and '@audio - memlock unlimited' to \
     /etc/security/limits.d/audio.conf, run 'usermod -aG audio $USER', and log in again";

/// Real-time priority: root, CAP_SYS_NICE or RLIMIT_RTPRIO > 0 → pass;
/// soft 0 but hard > 0 → warn; otherwise fail.
pub fn check_rtprio(euid: u32, cap_sys_nice: Option<bool>, soft: Limit, hard: Limit) -> Check {
    let (id, title) = ("rtprio_limit", "Real-time priority allowed");
    let limits = format!("RLIMIT_RTPRIO soft {soft}, hard {hard}");
    if euid == 0 {
        return Check::new(id, title, Status::Pass, format!("root ({limits})"));
    }
    if cap_sys_nice == Some(true) {
        return Check::new(id, title, Status::Pass, format!("CAP_SYS_NICE ({limits})"));
    }
    if soft.at_least(1) {
        return Check::new(
            id,
            title,
            Status::Pass,
            format!("up to priority {soft} ({limits})"),
        );
    }
    if hard.at_least(1) {
        return Check::new(
            id,
            title,
            Status::Warn,
            format!("{limits}: the soft limit must be raised before SCHED_FIFO is allowed"),
        )
        .fix(format!("run 'ulimit -r {hard}' in the shell first, or set the soft limit in limits.conf: {LIMITS_FIX}"));
    }
    let nice = match cap_sys_nice {
        Some(false) => "no CAP_SYS_NICE",
        _ => "CAP_SYS_NICE unknown",
    };
    Check::new(
        id,
        title,
        Status::Fail,
        format!("not root, {nice}, {limits}: SCHED_FIFO/RR will be refused"),
    )
    .fix(LIMITS_FIX)
}

/// Memory locking: root, CAP_IPC_LOCK or RLIMIT_MEMLOCK ≥ 64 MiB (or unlimited) → pass;
/// smaller → warn (page faults in the loop; real-time scheduling still works).
pub fn check_memlock(euid: u32, cap_ipc_lock: Option<bool>, soft: Limit, hard: Limit) -> Check {
    let (id, title) = ("memlock_limit", "Memory locking allowed");
    let mib = |l: Limit| match l {
        Limit::Unlimited => "unlimited".to_string(),
        Limit::Value(v) if v >= 1 << 20 => format!("{} MiB", v >> 20),
        Limit::Value(v) => format!("{} KiB", v >> 10),
    };
    let limits = format!("RLIMIT_MEMLOCK soft {}, hard {}", mib(soft), mib(hard));
    if euid == 0 {
        return Check::new(id, title, Status::Pass, format!("root ({limits})"));
    }
    if cap_ipc_lock == Some(true) {
        return Check::new(id, title, Status::Pass, format!("CAP_IPC_LOCK ({limits})"));
    }
    if soft.at_least(MEMLOCK_WARN_BYTES) {
        return Check::new(id, title, Status::Pass, limits);
    }
    Check::new(
        id,
        title,
        Status::Warn,
        format!("{limits}: mlockall of a firmtime process needs tens of MiB; unlocked pages can fault in the loop"),
    )
    .fix(LIMITS_FIX)
}

/// Capabilities: informational (the rtprio and memlock checks already count
/// them) → pass when readable, unknown otherwise.
pub fn check_capabilities(
    euid: u32,
    cap_eff: Option<&str>,
    sys_nice: Option<bool>,
    ipc_lock: Option<bool>,
) -> Check {
    let (id, title) = ("capabilities", "Capabilities");
    match (cap_eff, sys_nice, ipc_lock) {
        (Some(hex), Some(n), Some(l)) => Check::new(
            id,
            title,
            Status::Pass,
            format!(
                "CAP_SYS_NICE {}, CAP_IPC_LOCK {} (CapEff {hex}{})",
                yes(n),
                yes(l),
                if euid == 0 { ", root" } else { "" }
            ),
        ),
        _ => Check::new(
            id,
            title,
            Status::Unknown,
            "CapEff unreadable in /proc/self/status",
        )
        .fix("mount /proc"),
    }
}

/// `kernel.sched_rt_runtime_us` / period: 0 → fail; -1 → warn (no throttling);
/// less than half the period → warn; else pass.
pub fn check_rt_runtime(runtime: Option<i64>, period: Option<i64>) -> Check {
    let (id, title) = ("sched_rt_runtime", "RT throttling (sched_rt_runtime_us)");
    let fix = "sysctl -w kernel.sched_rt_runtime_us=950000 (persist in /etc/sysctl.d/)";
    match (runtime, period) {
        (Some(r), Some(p)) if r < 0 => Check::new(
            id,
            title,
            Status::Warn,
            format!("unlimited ({r}/{p} us): a runaway RT task can lock the machine"),
        )
        .fix(format!(
            "{fix}; firmtime's own runaway guard still limits its threads"
        )),
        (Some(0), Some(p)) => Check::new(
            id,
            title,
            Status::Fail,
            format!("0/{p} us: real-time tasks get no CPU time at all"),
        )
        .fix(fix),
        (Some(r), Some(p)) if p > 0 && r * 2 < p => Check::new(
            id,
            title,
            Status::Warn,
            format!(
                "{r}/{p} us: RT tasks are throttled after {}% of each period",
                r * 100 / p
            ),
        )
        .fix(fix),
        (Some(r), Some(p)) => Check::new(id, title, Status::Pass, format!("{r}/{p} us")),
        _ => Check::new(id, title, Status::Unknown, "unreadable")
            .fix("mount /proc (/proc/sys/kernel/sched_rt_runtime_us)"),
    }
}

/// CPU frequency governor: performance everywhere (or no cpufreq driver) → pass; else warn.
pub fn check_governor(governors: Option<&[String]>) -> Check {
    let (id, title) = ("cpu_governor", "CPU frequency governor");
    match governors {
        None => Check::new(
            id,
            title,
            Status::Pass,
            "no cpufreq driver: the kernel does not scale the frequency",
        ),
        Some(g) if g.iter().all(|x| x == "performance") => {
            Check::new(id, title, Status::Pass, "performance")
        }
        Some(g) => Check::new(
            id,
            title,
            Status::Warn,
            format!("{}: frequency changes slow wakeups and skew cycle counts", g.join(", ")),
        )
        .fix("cpupower frequency-set -g performance (or echo performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)"),
    }
}

/// Idle states: none, or none enabled deeper than [`DEEP_IDLE_US`] → pass; else warn.
pub fn check_idle_states(driver: Option<&str>, states: &[IdleState]) -> Check {
    let (id, title) = ("idle_states", "CPU idle states");
    let drv = driver.unwrap_or("unknown");
    if states.is_empty() {
        return Check::new(
            id,
            title,
            Status::Pass,
            format!("no cpuidle states (driver {drv})"),
        );
    }
    let list: Vec<String> = states
        .iter()
        .map(|s| {
            format!(
                "{} {}us{}",
                s.name,
                s.latency_us,
                if s.disabled { " (disabled)" } else { "" }
            )
        })
        .collect();
    let deep = states
        .iter()
        .filter(|s| !s.disabled && s.latency_us > DEEP_IDLE_US)
        .map(|s| s.latency_us)
        .max();
    let value = format!("driver {drv}: {}", list.join(", "));
    match deep {
        None => Check::new(id, title, Status::Pass, value),
        Some(lat) => Check::new(
            id,
            title,
            Status::Warn,
            format!("{value}: waking from the deepest costs up to {lat} us"),
        )
        .fix("hold /dev/cpu_dma_latency at 0 while measuring (needs root), or boot with intel_idle.max_cstate=1 processor.max_cstate=1"),
    }
}

/// SMT: off → pass; on → warn; unreadable → unknown.
pub fn check_smt(active: Option<bool>) -> Check {
    let (id, title) = ("smt", "Simultaneous multithreading");
    match active {
        Some(false) => Check::new(id, title, Status::Pass, "inactive"),
        Some(true) => Check::new(
            id,
            title,
            Status::Warn,
            "active: a busy sibling thread slows the RT thread sharing its core",
        )
        .fix("echo off > /sys/devices/system/cpu/smt/control (or boot with nosmt), or isolate both siblings of the RT core"),
        None => Check::new(id, title, Status::Unknown, "/sys/devices/system/cpu/smt/active unreadable")
            .fix("needs a kernel with CONFIG_HOTPLUG_SMT; see lscpu 'Thread(s) per core'"),
    }
}

const ISOLATION_FIX: &str = "boot with isolcpus=N nohz_full=N rcu_nocbs=N for a CPU N \
     other than 0, and pin the RT thread to it (see docs/RT-SETUP.md)";

/// isolcpus: from the kernel command line (outer None: cmdline unreadable) or
/// `/sys/devices/system/cpu/isolated`. Isolated CPUs → pass; none → warn.
pub fn check_isolcpus(param: Option<Option<String>>, isolated: Option<&str>, cpus: usize) -> Check {
    let (id, title) = ("isolcpus", "Isolated CPUs (isolcpus)");
    let isolated = isolated.filter(|s| !s.is_empty());
    match (param, isolated) {
        (_, Some(list)) => Check::new(id, title, Status::Pass, format!("CPUs {list} isolated")),
        (Some(Some(v)), None) => Check::new(
            id,
            title,
            Status::Pass,
            format!("isolcpus={v} on the kernel command line"),
        ),
        (Some(None), None) => Check::new(
            id,
            title,
            Status::Warn,
            format!("none of {cpus} CPUs isolated: other tasks and interrupts share the RT CPU"),
        )
        .fix(ISOLATION_FIX),
        (None, None) => {
            Check::new(id, title, Status::Unknown, "/proc/cmdline unreadable").fix("mount /proc")
        }
    }
}

/// nohz_full: set → pass; unset → warn (noting when the kernel lacks CONFIG_NO_HZ_FULL).
pub fn check_nohz_full(
    param: Option<Option<String>>,
    sysfs: Option<String>,
    config_enabled: Option<bool>,
) -> Check {
    let (id, title) = ("nohz_full", "Tickless CPUs (nohz_full)");
    let sysfs = sysfs.filter(|s| !s.is_empty() && s != "(null)");
    match (param, sysfs) {
        (_, Some(list)) => Check::new(id, title, Status::Pass, format!("CPUs {list} tickless")),
        (Some(Some(v)), None) => Check::new(
            id,
            title,
            Status::Pass,
            format!("nohz_full={v} on the kernel command line"),
        ),
        (Some(None), None) => {
            let (value, fix) = if config_enabled == Some(false) {
                (
                    "not set (this kernel lacks CONFIG_NO_HZ_FULL)",
                    "use a kernel with CONFIG_NO_HZ_FULL=y, then boot with nohz_full=N (see docs/RT-SETUP.md)",
                )
            } else {
                (
                    "not set: the tick interrupts the RT CPU every jiffy",
                    ISOLATION_FIX,
                )
            };
            Check::new(id, title, Status::Warn, value).fix(fix)
        }
        (None, None) => {
            Check::new(id, title, Status::Unknown, "/proc/cmdline unreadable").fix("mount /proc")
        }
    }
}

/// rcu_nocbs: set → pass; unset → warn.
pub fn check_rcu_nocbs(param: Option<Option<String>>, config_enabled: Option<bool>) -> Check {
    let (id, title) = ("rcu_nocbs", "RCU callback offload (rcu_nocbs)");
    match param {
        Some(Some(v)) => Check::new(id, title, Status::Pass, format!("rcu_nocbs={v}")),
        Some(None) => {
            let (value, fix) = if config_enabled == Some(false) {
                (
                    "not set (this kernel lacks CONFIG_RCU_NOCB_CPU)",
                    "use a kernel with CONFIG_RCU_NOCB_CPU=y, then boot with rcu_nocbs=N",
                )
            } else {
                (
                    "not set: RCU callbacks run on every CPU, the RT one included",
                    ISOLATION_FIX,
                )
            };
            Check::new(id, title, Status::Warn, value).fix(fix)
        }
        None => {
            Check::new(id, title, Status::Unknown, "/proc/cmdline unreadable").fix("mount /proc")
        }
    }
}

/// Default timer slack: ≤ 50 µs → pass (RT threads ignore it anyway); more → warn.
pub fn check_timer_slack(slack_ns: Option<u64>) -> Check {
    let (id, title) = ("timer_slack", "Default timer slack");
    match slack_ns {
        Some(ns) if ns <= TIMER_SLACK_WARN_NS => Check::new(
            id,
            title,
            Status::Pass,
            format!("{ns} ns (ignored for SCHED_FIFO/RR threads)"),
        ),
        Some(ns) => Check::new(
            id,
            title,
            Status::Warn,
            format!("{ns} ns: SCHED_OTHER sleeps may end this late"),
        )
        .fix("check TimerSlackNSec= in the systemd unit or what the parent process set (prctl PR_SET_TIMERSLACK)"),
        None => Check::new(id, title, Status::Unknown, "prctl(PR_GET_TIMERSLACK) failed")
            .fix("needs Linux 2.6.28 or later"),
    }
}

/// Virtualization: bare metal → pass; a hypervisor → warn; unknown → unknown.
pub fn check_virtualization(virt: Option<&str>) -> Check {
    let (id, title) = ("virtualization", "Virtualization");
    match virt {
        Some("none") => Check::new(id, title, Status::Pass, "bare metal"),
        Some(h) => Check::new(
            id,
            title,
            Status::Warn,
            format!("virtual machine ({h}): the host can deschedule this VM for milliseconds"),
        )
        .fix("for final measurements use bare metal, or pin and isolate the vCPUs on the host"),
        None => Check::new(id, title, Status::Unknown, "cannot tell").fix(
            "systemd-detect-virt may tell; firmtime found no hypervisor flag or /sys/hypervisor",
        ),
    }
}

/// Steal time over the sample: ≤ 1 % → pass; more → warn; unreadable → unknown.
pub fn check_steal(percent: Option<f64>, over: Duration) -> Check {
    let (id, title) = ("steal_time", "Steal time");
    let ms = over.as_millis();
    match percent {
        Some(p) if p <= STEAL_WARN_PERCENT => {
            Check::new(id, title, Status::Pass, format!("{p:.1}% over {ms} ms"))
        }
        Some(p) => Check::new(
            id,
            title,
            Status::Warn,
            format!("{p:.1}% over {ms} ms: the hypervisor is running other guests on these CPUs"),
        )
        .fix("use a host with dedicated (pinned) vCPUs, or bare metal"),
        None => Check::new(
            id,
            title,
            Status::Unknown,
            "/proc/stat unreadable or no ticks elapsed",
        )
        .fix("mount /proc"),
    }
}

/// JACK installed: `jackd` on PATH → pass; else warn.
pub fn check_jack_installed(jackd: Option<&Path>) -> Check {
    let (id, title) = ("jack_installed", "JACK installed");
    match jackd {
        Some(p) => Check::new(id, title, Status::Pass, p.display().to_string()),
        None => Check::new(
            id,
            title,
            Status::Warn,
            "jackd not on PATH: the JACK MIDI backend is unavailable",
        )
        .fix("apt install jackd2 (only needed for the JACK backend)"),
    }
}

/// JACK running: a live jackd/jackdbus process, or a server that accepted a
/// client → pass; a PipeWire process → pass unless a client could not
/// connect (then pipewire-jack is not in use → warn); /dev/shm entries with
/// no live server → warn (left over by a server that exited); else warn.
pub fn check_jack_running(e: &JackEvidence) -> Check {
    let (id, title) = ("jack_running", "JACK server running");
    let start_fix = "jackd -R -d alsa (or -d dummy to test without a sound card); only needed for the JACK backend";
    let jack = e
        .processes
        .iter()
        .find(|(_, n)| n == "jackd" || n == "jackdbus");
    if let Some((pid, name)) = jack {
        return Check::new(id, title, Status::Pass, format!("{name} (pid {pid})"));
    }
    let pipewire = e.processes.iter().find(|(_, n)| n == "pipewire");
    if e.accepts_clients == Some(true) {
        let value = match pipewire {
            Some((pid, _)) => format!("pipewire (pid {pid}) accepts JACK clients"),
            None => "a JACK server accepts clients (its process is not visible here)".to_string(),
        };
        return Check::new(id, title, Status::Pass, value);
    }
    if let Some((pid, _)) = pipewire {
        if e.accepts_clients == Some(false) {
            return Check::new(
                id,
                title,
                Status::Warn,
                format!("pipewire (pid {pid}) runs, but a JACK client could not connect to it"),
            )
            .fix("apt install pipewire-jack and run firmtime under pw-jack (or start jackd); only needed for the JACK backend");
        }
        return Check::new(
            id,
            title,
            Status::Pass,
            format!("pipewire (pid {pid}): JACK clients run through pipewire-jack if installed"),
        );
    }
    if let Some(s) = e.shm.first() {
        let value = if e.accepts_clients == Some(false) {
            format!("no live server: /dev/shm/{s} is left over from a JACK server that exited")
        } else {
            format!(
                "no jackd process: /dev/shm/{s} is probably left over from a server that exited"
            )
        };
        return Check::new(id, title, Status::Warn, value).fix(format!(
            "{start_fix}; the leftovers can be removed (rm /dev/shm/jack-* /dev/shm/jack_*) while no JACK process runs"
        ));
    }
    Check::new(
        id,
        title,
        Status::Warn,
        "no jackd, jackdbus or pipewire process",
    )
    .fix(start_fix)
}

/// /dev/rtc: present → pass; absent → warn (only the `rtc` sleep mechanism needs it).
pub fn check_dev_rtc(found: &[String]) -> Check {
    let (id, title) = ("dev_rtc", "Real-time clock device");
    if found.is_empty() {
        Check::new(
            id,
            title,
            Status::Warn,
            "no /dev/rtc: the rtc sleep mechanism is unavailable (all others work)",
        )
        .fix("modprobe rtc_cmos on a PC; virtual machines often have no RTC device")
    } else {
        Check::new(id, title, Status::Pass, found.join(", "))
    }
}

/// /dev/snd/seq: present → pass; absent → warn.
pub fn check_dev_snd_seq(present: bool) -> Check {
    let (id, title) = ("dev_snd_seq", "ALSA sequencer device");
    if present {
        Check::new(id, title, Status::Pass, "/dev/snd/seq")
    } else {
        Check::new(
            id,
            title,
            Status::Warn,
            "no /dev/snd/seq: the ALSA sequencer backend is unavailable",
        )
        .fix("modprobe snd-seq (needs a kernel with ALSA; containers and VMs often have none)")
    }
}

/// Raw MIDI devices (`/dev/midi*`, `/dev/snd/midiC*D*`): any → pass; none → warn.
pub fn check_dev_midi(found: &[String]) -> Check {
    let (id, title) = ("dev_midi", "Raw MIDI devices");
    if found.is_empty() {
        Check::new(
            id,
            title,
            Status::Warn,
            "no /dev/midi* or /dev/snd/midiC*D*",
        )
        .fix("connect a MIDI interface (USB: modprobe snd-usb-audio); the raw backend also reads serial ports and ptys")
    } else {
        Check::new(id, title, Status::Pass, found.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rt_runtime_rules() {
        let c = check_rt_runtime(Some(950_000), Some(1_000_000));
        assert_eq!(
            (c.status, c.value.as_str()),
            (Status::Pass, "950000/1000000 us")
        );
        assert!(c.fix.is_empty());
        let c = check_rt_runtime(Some(-1), Some(1_000_000));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.starts_with("unlimited"), "{}", c.value);
        assert!(c.value.contains("a runaway RT task can lock the machine"));
        assert!(c.fix.contains("sched_rt_runtime_us=950000"));
        let c = check_rt_runtime(Some(0), Some(1_000_000));
        assert_eq!(c.status, Status::Fail);
        assert!(!c.fix.is_empty());
        assert_eq!(
            check_rt_runtime(Some(100_000), Some(1_000_000)).status,
            Status::Warn
        );
        assert_eq!(
            check_rt_runtime(None, Some(1_000_000)).status,
            Status::Unknown
        );
    }

    #[test]
    fn rtprio_rules() {
        let z = Limit::Value(0);
        let c = check_rtprio(1000, Some(false), z, z);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("limits.d"), "{}", c.fix);
        assert!(c.value.contains("no CAP_SYS_NICE"));
        assert_eq!(check_rtprio(0, Some(false), z, z).status, Status::Pass);
        assert_eq!(check_rtprio(1000, Some(true), z, z).status, Status::Pass);
        let c = check_rtprio(1000, Some(false), Limit::Value(95), Limit::Value(95));
        assert_eq!(c.status, Status::Pass);
        assert!(c.value.starts_with("up to priority 95"));
        let c = check_rtprio(1000, Some(false), z, Limit::Value(50));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.contains("ulimit -r 50"));
        assert_eq!(check_rtprio(1000, None, z, z).status, Status::Fail);
    }

    #[test]
    fn memlock_rules() {
        let small = Limit::Value(8 << 20);
        let c = check_memlock(1000, Some(false), small, small);
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("soft 8 MiB"), "{}", c.value);
        assert_eq!(
            check_memlock(0, Some(false), small, small).status,
            Status::Pass
        );
        assert_eq!(
            check_memlock(1000, Some(true), small, small).status,
            Status::Pass
        );
        let c = check_memlock(1000, Some(false), Limit::Unlimited, Limit::Unlimited);
        assert_eq!(c.status, Status::Pass);
        assert!(c.value.contains("unlimited"));
        let c = check_memlock(1000, None, Limit::Value(64 << 10), small);
        assert!(c.value.contains("soft 64 KiB"), "{}", c.value);
    }

    #[test]
    fn preempt_rules() {
        assert_eq!(
            check_preempt(PreemptModel::Rt, Some(false), "cfg").status,
            Status::Pass
        );
        assert_eq!(
            check_preempt(PreemptModel::Full, Some(true), "x").status,
            Status::Pass
        );
        assert_eq!(
            check_preempt(PreemptModel::Lazy, Some(true), "x").status,
            Status::Pass
        );
        let c = check_preempt(PreemptModel::None, Some(true), "boot log");
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.starts_with("none (boot log)"));
        assert!(c.fix.contains("preempt=full"));
        let c = check_preempt(PreemptModel::Voluntary, Some(false), "kernel config");
        assert!(c.fix.contains("linux-image-rt"));
        let c = check_preempt(PreemptModel::Unknown, Some(true), "dynamic (mode unknown)");
        assert_eq!(c.status, Status::Unknown);
        assert!(c.fix.contains("debugfs"));
    }

    #[test]
    fn hz_and_hres_rules() {
        assert_eq!(check_config_hz(Some(250), Some(true)).status, Status::Pass);
        assert_eq!(check_config_hz(Some(1000), None).status, Status::Pass);
        let c = check_config_hz(Some(100), Some(false));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("10 ms"), "{}", c.value);
        let c = check_config_hz(None, Some(true));
        assert_eq!(c.status, Status::Unknown);
        assert!(c.fix.contains("USER_HZ"));
        assert_eq!(check_high_res_timers(Some(true), None).status, Status::Pass);
        assert_eq!(
            check_high_res_timers(Some(false), None).status,
            Status::Fail
        );
        assert_eq!(check_high_res_timers(None, None).status, Status::Unknown);
        assert_eq!(check_nohz(Some("idle")).status, Status::Pass);
        assert_eq!(check_nohz(None).status, Status::Unknown);
    }

    #[test]
    fn clock_rules() {
        let avail = vec!["tsc".to_string(), "hpet".to_string(), "acpi_pm".to_string()];
        let c = check_clocksource(Some("tsc"), &avail);
        assert_eq!(c.status, Status::Pass);
        assert_eq!(c.value, "tsc (available: tsc hpet acpi_pm)");
        let c = check_clocksource(Some("hpet"), &avail);
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.starts_with("echo tsc"));
        assert_eq!(check_clocksource(None, &[]).status, Status::Unknown);
        assert_eq!(
            check_tsc_invariant("x86_64", Some(true), Some(true)).status,
            Status::Pass
        );
        let c = check_tsc_invariant("x86_64", Some(true), Some(false));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("nonstop_tsc no"));
        assert_eq!(
            check_tsc_invariant("aarch64", None, None).status,
            Status::Pass
        );
        assert_eq!(
            check_tsc_invariant("x86_64", None, None).status,
            Status::Unknown
        );
    }

    #[test]
    fn cpu_rules() {
        assert_eq!(check_governor(None).status, Status::Pass);
        let perf = vec!["performance".to_string()];
        assert_eq!(check_governor(Some(&perf)).status, Status::Pass);
        let mixed = vec!["performance".to_string(), "powersave".to_string()];
        let c = check_governor(Some(&mixed));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.starts_with("performance, powersave"));
        let st = |name: &str, latency_us, disabled| IdleState {
            name: name.into(),
            latency_us,
            disabled,
        };
        assert_eq!(check_idle_states(Some("none"), &[]).status, Status::Pass);
        let shallow = [
            st("POLL", 0, false),
            st("C1", 2, false),
            st("C6", 133, true),
        ];
        assert_eq!(
            check_idle_states(Some("intel_idle"), &shallow).status,
            Status::Pass
        );
        let deep = [st("POLL", 0, false), st("C6", 133, false)];
        let c = check_idle_states(Some("intel_idle"), &deep);
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("up to 133 us"), "{}", c.value);
        assert_eq!(check_smt(Some(true)).status, Status::Warn);
        assert_eq!(check_smt(Some(false)).status, Status::Pass);
        assert_eq!(check_smt(None).status, Status::Unknown);
    }

    #[test]
    fn isolation_rules() {
        let c = check_isolcpus(Some(None), Some(""), 4);
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("none of 4 CPUs"));
        assert_eq!(
            check_isolcpus(Some(None), Some("2-3"), 4).status,
            Status::Pass
        );
        let c = check_isolcpus(Some(Some("domain,2-3".into())), None, 4);
        assert_eq!(
            (c.status, c.value.as_str()),
            (
                Status::Pass,
                "isolcpus=domain,2-3 on the kernel command line"
            )
        );
        assert_eq!(check_isolcpus(None, None, 4).status, Status::Unknown);
        let c = check_nohz_full(Some(None), None, Some(false));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("lacks CONFIG_NO_HZ_FULL"));
        assert_eq!(
            check_nohz_full(Some(None), Some("(null)".into()), None).status,
            Status::Warn
        );
        assert_eq!(
            check_nohz_full(Some(Some("3".into())), None, Some(true)).status,
            Status::Pass
        );
        assert_eq!(
            check_rcu_nocbs(Some(Some("3".into())), None).status,
            Status::Pass
        );
        assert_eq!(check_rcu_nocbs(Some(None), None).status, Status::Warn);
        assert_eq!(check_rcu_nocbs(None, None).status, Status::Unknown);
    }

    #[test]
    fn misc_rules() {
        assert_eq!(check_timer_slack(Some(50_000)).status, Status::Pass);
        assert_eq!(check_timer_slack(Some(1_000_000)).status, Status::Warn);
        assert_eq!(check_virtualization(Some("none")).status, Status::Pass);
        let c = check_virtualization(Some("kvm"));
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.contains("kvm"));
        assert_eq!(check_virtualization(None).status, Status::Unknown);
        let s = Duration::from_millis(400);
        assert_eq!(check_steal(Some(0.5), s).status, Status::Pass);
        let c = check_steal(Some(3.25), s);
        assert_eq!(c.status, Status::Warn);
        assert!(c.value.starts_with("3.2% over 400 ms") || c.value.starts_with("3.3% over 400 ms"));
        assert_eq!(check_steal(None, s).status, Status::Unknown);
    }

    #[test]
    fn device_and_jack_rules() {
        assert_eq!(check_dev_rtc(&[]).status, Status::Warn);
        assert_eq!(check_dev_rtc(&["/dev/rtc0".into()]).value, "/dev/rtc0");
        assert_eq!(check_dev_snd_seq(false).status, Status::Warn);
        assert_eq!(check_dev_snd_seq(true).status, Status::Pass);
        assert_eq!(check_dev_midi(&[]).status, Status::Warn);
        let m = ["/dev/midi1".to_string(), "/dev/snd/midiC1D0".to_string()];
        assert_eq!(check_dev_midi(&m).value, "/dev/midi1, /dev/snd/midiC1D0");
        assert_eq!(check_jack_installed(None).status, Status::Warn);
        assert_eq!(
            check_jack_installed(Some(Path::new("/usr/bin/jackd"))).value,
            "/usr/bin/jackd"
        );
        let none = JackEvidence::default();
        assert_eq!(check_jack_running(&none).status, Status::Warn);
        let pw = JackEvidence {
            processes: vec![(10, "pipewire".into()), (12, "jackd".into())],
            ..JackEvidence::default()
        };
        assert_eq!(check_jack_running(&pw).value, "jackd (pid 12)");
        // Regression: stale /dev/shm entries with no live server were reported as a running server.
        let stale = JackEvidence {
            shm: vec!["jack-shm-registry".into()],
            accepts_clients: Some(false),
            ..JackEvidence::default()
        };
        let c = check_jack_running(&stale);
        assert_eq!(c.status, Status::Warn);
        assert_eq!(
            c.value,
            "no live server: /dev/shm/jack-shm-registry is left over from a JACK server that exited"
        );
        assert!(c.fix.contains("rm /dev/shm/jack-*"), "{}", c.fix);
        let unprobed = JackEvidence {
            shm: vec!["jack_default_0_0".into()],
            ..JackEvidence::default()
        };
        assert_eq!(check_jack_running(&unprobed).status, Status::Warn);
        // A server whose process is not visible (another PID namespace) but accepts clients.
        let hidden = JackEvidence {
            shm: vec!["jack_default_0_0".into()],
            accepts_clients: Some(true),
            ..JackEvidence::default()
        };
        assert_eq!(check_jack_running(&hidden).status, Status::Pass);
        let pw_only = JackEvidence {
            processes: vec![(10, "pipewire".into())],
            ..JackEvidence::default()
        };
        assert_eq!(check_jack_running(&pw_only).status, Status::Pass);
        let pw_no_jack = JackEvidence {
            accepts_clients: Some(false),
            ..pw_only.clone()
        };
        assert_eq!(check_jack_running(&pw_no_jack).status, Status::Warn);
        let pw_jack = JackEvidence {
            accepts_clients: Some(true),
            ..pw_only
        };
        assert_eq!(
            check_jack_running(&pw_jack).value,
            "pipewire (pid 10) accepts JACK clients"
        );
    }

    #[test]
    fn pass_has_no_fix_and_others_do() {
        let checks = [
            check_rt_runtime(Some(950_000), Some(1_000_000)),
            check_rt_runtime(Some(0), Some(1_000_000)),
            check_smt(Some(true)),
            check_smt(None),
        ];
        for c in checks {
            assert_eq!(c.fix.is_empty(), c.status == Status::Pass, "{c:?}");
        }
    }

    #[test]
    fn status_json_is_lowercase() {
        let s = serde_json::to_string(&[Status::Pass, Status::Warn, Status::Fail, Status::Unknown]);
        assert_eq!(s.unwrap(), r#"["pass","warn","fail","unknown"]"#);
    }
}
