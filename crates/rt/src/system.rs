//! The system report: what this machine is, read once, recorded in every
//! output file.
//!
//! [`SystemInfo::collect`] reads the kernel (release, preempt model, HZ,
//! NO_HZ mode, high-resolution timers, clocksource), the CPU (model, TSC
//! flags, SMT, frequency governor, idle states), virtualization, the kernel
//! command line, and the calling user's real-time limits and capabilities.
//! [`Provenance`] wraps it with the firmtime version, the command line and
//! start/end times: the block every output file embeds.
//!
//! Honesty rule: a field that cannot be read is `None` (JSON `null`), never
//! guessed. Where a value is derived rather than read directly, its origin is
//! recorded in [`SystemInfo::sources`].
//!
//! The parsers (`parse_*`) are pure functions over the text of the files they
//! read, so the rules are unit-tested without the machine.
//!
//! # RT contract
//!
//! Nothing here is RT-safe: collecting reads files and allocates. Collect
//! before the real-time loop starts (and [`Provenance::finish`] after it ends).

use crate::clock::monotonic_ns;
use crate::privileges::Privileges;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The kernel's preemption model.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PreemptModel {
    /// No forced preemption (CONFIG_PREEMPT_NONE, or dynamic mode `none`): server kernels.
    None,
    /// Voluntary preemption points (CONFIG_PREEMPT_VOLUNTARY, or dynamic mode `voluntary`).
    Voluntary,
    /// Fully preemptible kernel (CONFIG_PREEMPT, or dynamic mode `full`).
    Full,
    /// Lazy preemption (CONFIG_PREEMPT_LAZY, or dynamic mode `lazy`): RT tasks
    /// still preempt at once; only fair-class preemption is deferred to the tick.
    Lazy,
    /// PREEMPT_RT: the real-time kernel (CONFIG_PREEMPT_RT, `PREEMPT_RT` in
    /// `uname -v`, or `/sys/kernel/realtime` reading 1).
    Rt,
    /// Could not be determined (no kernel config, or a PREEMPT_DYNAMIC kernel
    /// whose current mode is unreadable).
    Unknown,
}

impl PreemptModel {
    /// The lowercase name used in JSON and in the kernel's own mode names.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Voluntary => "voluntary",
            Self::Full => "full",
            Self::Lazy => "lazy",
            Self::Rt => "rt",
            Self::Unknown => "unknown",
        }
    }

    fn from_mode(mode: &str) -> Option<Self> {
        match mode.trim() {
            "none" => Some(Self::None),
            "voluntary" => Some(Self::Voluntary),
            "full" => Some(Self::Full),
            "lazy" => Some(Self::Lazy),
            _ => None,
        }
    }
}

/// One CPU idle state of CPU 0 (`/sys/devices/system/cpu/cpu0/cpuidle/stateN`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct IdleState {
    /// State name (`POLL`, `C1`, `C6`…).
    pub name: String,
    /// Exit latency in µs.
    pub latency_us: u64,
    /// Disabled by the administrator (`disable` = 1).
    pub disabled: bool,
}

/// What this machine is. Every field that could not be read is `None`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SystemInfo {
    /// Version of firmtime-rt that wrote the report.
    pub firmtime_version: String,
    /// Host name.
    pub hostname: Option<String>,
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -v` (build number, flags such as `PREEMPT_DYNAMIC`, build date).
    pub kernel_version: String,
    /// `uname -m`.
    pub arch: String,
    /// Where the kernel configuration was read from (`/proc/config.gz`,
    /// `/boot/config-<release>`), or None when neither exists.
    pub kernel_config: Option<String>,
    /// The preemption model in force (see [`SystemInfo::preempt_source`]).
    pub preempt_model: PreemptModel,
    /// Whether the kernel was built with PREEMPT_DYNAMIC (mode selectable at
    /// boot or at run time). None when neither the config nor `uname -v` tells.
    pub preempt_dynamic: Option<bool>,
    /// Where `preempt_model` came from, in words (e.g. `debugfs: none
    /// voluntary (full)`, `kernel config`).
    pub preempt_source: String,
    /// CONFIG_HZ: the scheduler tick rate. None without a kernel config.
    pub config_hz: Option<u32>,
    /// Tick mode: `periodic`, `idle` (CONFIG_NO_HZ_IDLE) or `full` (CONFIG_NO_HZ_FULL).
    pub nohz: Option<String>,
    /// High-resolution timers active (from /proc/timer_list, which needs root,
    /// else from CONFIG_HIGH_RES_TIMERS — see `sources`).
    pub high_res_timers: Option<bool>,
    /// Current clocksource (`tsc`, `kvm-clock`, `hpet`…).
    pub clocksource: Option<String>,
    /// Clocksources the kernel could switch to.
    pub clocksources_available: Vec<String>,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// Number of online CPUs.
    pub cpus_online: usize,
    /// CPU flag `constant_tsc` (x86; None elsewhere or when unreadable).
    pub constant_tsc: Option<bool>,
    /// CPU flag `nonstop_tsc` (x86; None elsewhere or when unreadable).
    pub nonstop_tsc: Option<bool>,
    /// Simultaneous multithreading active (`/sys/devices/system/cpu/smt/active`).
    pub smt_active: Option<bool>,
    /// `none` on bare metal, else the hypervisor (`kvm`, `vmware`, `hyperv`,
    /// `xen`, `qemu-tcg`, `virtualbox`, or `unidentified`). None when unknown.
    pub virtualization: Option<String>,
    /// Distinct cpufreq scaling governors over all CPUs; None when there is
    /// no cpufreq driver (the kernel does not scale frequency).
    pub cpu_governors: Option<Vec<String>>,
    /// cpuidle driver (`intel_idle`, `acpi_idle`, `none`…).
    pub idle_driver: Option<String>,
    /// Idle states of CPU 0 (empty when there are none).
    pub idle_states: Vec<IdleState>,
    /// The kernel command line (/proc/cmdline).
    pub kernel_cmdline: Option<String>,
    /// CPUs isolated from the scheduler (`/sys/devices/system/cpu/isolated`, list syntax).
    pub isolated_cpus: Option<String>,
    /// Timer slack of the collecting thread in ns (PR_GET_TIMERSLACK).
    pub timer_slack_ns: Option<u64>,
    /// Share of CPU time stolen by the hypervisor since boot, percent (/proc/stat).
    pub steal_since_boot_percent: Option<f64>,
    /// The caller's real-time privileges: limits, capabilities, and the RT
    /// throttling sysctls `sched_rt_runtime_us`/`sched_rt_period_us`.
    pub privileges: Privileges,
    /// Provenance of derived fields: field name → where its value came from.
    pub sources: BTreeMap<String, String>,
}

impl SystemInfo {
    /// Reads everything this machine tells about itself. Never fails: what
    /// cannot be read is `None`. Takes a few milliseconds (root reads the
    /// kernel log and /proc/timer_list).
    pub fn collect() -> Self {
        let mut sources = BTreeMap::new();
        let (release, version, arch) = uname();
        let config = read_kernel_config(&release);
        if let Some((src, _)) = &config {
            sources.insert("kernel_config".to_string(), src.clone());
        }
        let cfg = config.as_ref().map(|(_, map)| map);
        let cmdline = read("/proc/cmdline").map(|s| s.trim().to_string());

        let dynamic = match cfg {
            Some(c) => Some(config_yes(c, "CONFIG_PREEMPT_DYNAMIC")),
            None if version.contains("PREEMPT_DYNAMIC") => Some(true),
            None => None,
        };
        let (preempt_model, preempt_source) =
            preempt_model(cfg, dynamic, &version, cmdline.as_deref());

        let config_hz = cfg.and_then(config_hz);
        let nohz = cfg.and_then(config_nohz).map(str::to_string);

        let high_res_timers = match read("/proc/timer_list").and_then(|t| parse_hres_active(&t)) {
            Some(v) => {
                sources.insert(
                    "high_res_timers".into(),
                    "/proc/timer_list hres_active".into(),
                );
                Some(v)
            }
            None => match cfg {
                Some(c)
                    if c.contains_key("CONFIG_HIGH_RES_TIMERS") || c.contains_key("CONFIG_HZ") =>
                {
                    let built = config_yes(c, "CONFIG_HIGH_RES_TIMERS");
                    let off =
                        cmdline.as_deref().and_then(|l| cmdline_param(l, "highres")) == Some("off");
                    sources.insert(
                        "high_res_timers".into(),
                        if off {
                            "highres=off on the kernel command line"
                        } else {
                            "kernel config CONFIG_HIGH_RES_TIMERS and no highres=off \
                             (/proc/timer_list, root only, would confirm)"
                        }
                        .into(),
                    );
                    Some(built && !off)
                }
                _ => None,
            },
        };

        let cs = "/sys/devices/system/clocksource/clocksource0";
        let cpuinfo = read("/proc/cpuinfo");
        let flags = cpuinfo.as_deref().and_then(parse_cpu_flags);
        let is_x86 = arch == "x86_64" || arch.starts_with('i') && arch.ends_with("86");
        let tsc_flag = |f: &str| {
            if is_x86 {
                flags.as_ref().map(|fl| fl.iter().any(|x| x == f))
            } else {
                None
            }
        };
        let virtualization = detect_virtualization(flags.as_deref(), is_x86, &mut sources);

        let cpus_online = read("/sys/devices/system/cpu/online")
            .and_then(|s| crate::sched::parse_cpu_list(&s).ok())
            .map(|v| v.len())
            .unwrap_or_else(online_cpus_sysconf);

        let steal = read("/proc/stat")
            .and_then(|s| parse_proc_stat_cpu(&s))
            .and_then(|t| t.steal_percent_since(&CpuTimes::default()));

        Self {
            firmtime_version: env!("CARGO_PKG_VERSION").to_string(),
            hostname: read("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()),
            kernel_release: release,
            kernel_version: version,
            arch,
            kernel_config: config.as_ref().map(|(s, _)| s.clone()),
            preempt_model,
            preempt_dynamic: dynamic,
            preempt_source,
            config_hz,
            nohz,
            high_res_timers,
            clocksource: read(&format!("{cs}/current_clocksource")).map(|s| s.trim().to_string()),
            clocksources_available: read(&format!("{cs}/available_clocksource"))
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            cpu_model: cpuinfo.as_deref().and_then(parse_cpu_model),
            cpus_online,
            constant_tsc: tsc_flag("constant_tsc"),
            nonstop_tsc: tsc_flag("nonstop_tsc"),
            smt_active: read("/sys/devices/system/cpu/smt/active").and_then(|s| match s.trim() {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            }),
            virtualization,
            cpu_governors: read_governors(),
            idle_driver: read("/sys/devices/system/cpu/cpuidle/current_driver")
                .map(|s| s.trim().to_string()),
            idle_states: read_idle_states(),
            kernel_cmdline: cmdline,
            isolated_cpus: read("/sys/devices/system/cpu/isolated").map(|s| s.trim().to_string()),
            timer_slack_ns: timer_slack(),
            steal_since_boot_percent: steal,
            privileges: Privileges::read(),
            sources,
        }
    }
}

/// Reads a small text file; None when it is missing or unreadable.
fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn uname() -> (String, String, String) {
    // SAFETY: utsname is plain old data; all-zero bytes are a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into a valid, owned struct; it cannot fail with a valid pointer.
    let ok = unsafe { libc::uname(&mut u) } == 0;
    let field = |f: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    if ok {
        (field(&u.release), field(&u.version), field(&u.machine))
    } else {
        let r = |p: &str| read(p).map(|s| s.trim().to_string()).unwrap_or_default();
        (
            r("/proc/sys/kernel/osrelease"),
            r("/proc/sys/kernel/version"),
            std::env::consts::ARCH.to_string(),
        )
    }
}

fn online_cpus_sysconf() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

fn timer_slack() -> Option<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments and only reads thread state.
    let r = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    (r >= 0).then_some(r as u64)
}

/// Reads the kernel configuration from `/proc/config.gz` (gzip) or
/// `/boot/config-<release>`. Returns where it came from and the parsed map.
pub fn read_kernel_config(release: &str) -> Option<(String, BTreeMap<String, String>)> {
    use std::io::Read;
    if let Ok(f) = std::fs::File::open("/proc/config.gz") {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .is_ok()
        {
            return Some(("/proc/config.gz".into(), parse_kernel_config(&text)));
        }
    }
    let boot = format!("/boot/config-{release}");
    read(&boot).map(|t| (boot, parse_kernel_config(&t)))
}

/// Parses kernel config text: `CONFIG_X=value` lines, and `# CONFIG_X is not
/// set` lines (stored as `n`). Quotes around string values are removed.
pub fn parse_kernel_config(text: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(name) = rest.strip_suffix(" is not set") {
                if name.starts_with("CONFIG_") {
                    map.insert(name.to_string(), "n".to_string());
                }
            }
        } else if let Some((k, v)) = line.split_once('=') {
            if k.starts_with("CONFIG_") {
                map.insert(k.to_string(), v.trim_matches('"').to_string());
            }
        }
    }
    map
}

fn config_yes(cfg: &BTreeMap<String, String>, key: &str) -> bool {
    cfg.get(key).is_some_and(|v| v == "y")
}

/// CONFIG_HZ from a parsed kernel config.
pub fn config_hz(cfg: &BTreeMap<String, String>) -> Option<u32> {
    cfg.get("CONFIG_HZ").and_then(|v| v.parse().ok())
}

/// Tick mode from a parsed kernel config: `full`, `idle` or `periodic`.
/// None when the config has no NO_HZ lines at all.
pub fn config_nohz(cfg: &BTreeMap<String, String>) -> Option<&'static str> {
    if config_yes(cfg, "CONFIG_NO_HZ_FULL") {
        Some("full")
    } else if config_yes(cfg, "CONFIG_NO_HZ_IDLE") || config_yes(cfg, "CONFIG_NO_HZ") {
        Some("idle")
    } else if config_yes(cfg, "CONFIG_HZ_PERIODIC")
        || cfg.contains_key("CONFIG_NO_HZ_IDLE")
        || cfg.contains_key("CONFIG_NO_HZ")
    {
        Some("periodic")
    } else {
        None
    }
}

/// The build-time preemption model from a parsed kernel config (for a
/// PREEMPT_DYNAMIC kernel this is the default boot mode).
pub fn config_preempt(cfg: &BTreeMap<String, String>) -> PreemptModel {
    if config_yes(cfg, "CONFIG_PREEMPT_RT") {
        PreemptModel::Rt
    } else if config_yes(cfg, "CONFIG_PREEMPT_LAZY") {
        PreemptModel::Lazy
    } else if config_yes(cfg, "CONFIG_PREEMPT") {
        PreemptModel::Full
    } else if config_yes(cfg, "CONFIG_PREEMPT_VOLUNTARY") {
        PreemptModel::Voluntary
    } else if config_yes(cfg, "CONFIG_PREEMPT_NONE") {
        PreemptModel::None
    } else {
        PreemptModel::Unknown
    }
}

/// Parses `/sys/kernel/debug/sched/preempt` (`none voluntary (full) lazy`):
/// the mode in parentheses is the current one.
pub fn parse_preempt_debugfs(text: &str) -> Option<PreemptModel> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('(').and_then(|w| w.strip_suffix(')')))
        .and_then(PreemptModel::from_mode)
}

/// Finds the last `Dynamic Preempt: <mode>` line the kernel logged at boot.
pub fn parse_preempt_kernel_log(log: &str) -> Option<PreemptModel> {
    log.lines()
        .filter_map(|l| l.split_once("Dynamic Preempt: ").map(|(_, m)| m))
        .next_back()
        .and_then(|m| PreemptModel::from_mode(m.split_whitespace().next().unwrap_or("")))
}

/// The value of a `name=value` kernel command-line parameter (last one wins,
/// as in the kernel). A bare `name` gives `Some("")`.
pub fn cmdline_param<'a>(cmdline: &'a str, name: &str) -> Option<&'a str> {
    // Parameters after a lone `--` go to init, not to the kernel.
    cmdline
        .split_whitespace()
        .take_while(|w| *w != "--")
        .filter_map(|w| match w.split_once('=') {
            Some((k, v)) if k == name => Some(v),
            None if w == name => Some(""),
            _ => None,
        })
        .last()
}

fn preempt_model(
    cfg: Option<&BTreeMap<String, String>>,
    dynamic: Option<bool>,
    version: &str,
    cmdline: Option<&str>,
) -> (PreemptModel, String) {
    if cfg.is_some_and(|c| config_yes(c, "CONFIG_PREEMPT_RT")) || version.contains("PREEMPT_RT") {
        return (
            PreemptModel::Rt,
            "PREEMPT_RT kernel (kernel config / uname -v)".into(),
        );
    }
    // PREEMPT_RT kernels (RT patch and mainline) create /sys/kernel/realtime
    // reading 1; older RT-patch kernels say `PREEMPT RT` in uname -v.
    if read("/sys/kernel/realtime").is_some_and(|s| s.as_bytes().first() == Some(&b'1')) {
        return (
            PreemptModel::Rt,
            "PREEMPT_RT kernel (/sys/kernel/realtime)".into(),
        );
    }
    if dynamic == Some(true) {
        let path = "/sys/kernel/debug/sched/preempt";
        if let Some(text) = read(path) {
            if let Some(m) = parse_preempt_debugfs(&text) {
                return (m, format!("debugfs: {}", text.trim()));
            }
        }
        let log = kernel_log();
        if let Some(m) = log.as_deref().and_then(parse_preempt_kernel_log) {
            return (
                m,
                "PREEMPT_DYNAMIC, boot mode from the kernel log; current mode needs debugfs".into(),
            );
        }
        if let Some(m) = cmdline
            .and_then(|c| cmdline_param(c, "preempt"))
            .and_then(PreemptModel::from_mode)
        {
            return (
                m,
                "PREEMPT_DYNAMIC, boot mode from preempt= on the command line; current mode needs debugfs"
                    .into(),
            );
        }
        let default = cfg
            .map(config_preempt)
            .filter(|m| *m != PreemptModel::Unknown)
            .map(|m| format!(", built default {}", m.name()))
            .unwrap_or_default();
        let log_note = if log.is_some() {
            "the kernel log no longer holds the boot mode"
        } else {
            "kernel log unreadable (dmesg_restrict; root can read it)"
        };
        return (
            PreemptModel::Unknown,
            format!(
                "dynamic (mode unknown): PREEMPT_DYNAMIC{default}; {path} unreadable, {log_note}"
            ),
        );
    }
    match cfg {
        Some(c) => {
            let m = config_preempt(c);
            (m, "kernel config".into())
        }
        None => (
            PreemptModel::Unknown,
            "no kernel config (/proc/config.gz or /boot/config-<release>)".into(),
        ),
    }
}

/// The kernel log (dmesg). None when it cannot be read (dmesg_restrict and no CAP_SYSLOG).
fn kernel_log() -> Option<String> {
    const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    // SAFETY: SIZE_BUFFER ignores the buffer arguments.
    let size = unsafe { libc::klogctl(SYSLOG_ACTION_SIZE_BUFFER, std::ptr::null_mut(), 0) };
    if size <= 0 {
        return None;
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: buf is valid for writes of `size` bytes; klogctl writes at most that many.
    let n = unsafe { libc::klogctl(SYSLOG_ACTION_READ_ALL, buf.as_mut_ptr().cast(), size) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Parses `/proc/timer_list`: Some(true) when every CPU has `hres_active : 1`.
pub fn parse_hres_active(text: &str) -> Option<bool> {
    let mut seen = false;
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().trim_start_matches('.') == "hres_active" {
                seen = true;
                if v.trim() != "1" {
                    return Some(false);
                }
            }
        }
    }
    seen.then_some(true)
}

/// The first `model name` (x86) or `Model`/`Hardware` (ARM) line of /proc/cpuinfo.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        for line in cpuinfo.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim() == key && !v.trim().is_empty() {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

/// The CPU flags of the first CPU in /proc/cpuinfo (`flags` on x86, `Features` on ARM).
pub fn parse_cpu_flags(cpuinfo: &str) -> Option<Vec<String>> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        matches!(k.trim(), "flags" | "Features")
            .then(|| v.split_whitespace().map(str::to_string).collect())
    })
}

/// Clock ticks per second of /proc/stat (`sysconf(_SC_CLK_TCK)`, 100 where unknown).
pub fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// Per-CPU steal from the text of /proc/stat, in USER_HZ ticks (0 for a
/// CPU not listed).
pub fn parse_steal_ticks(stat: &str, cpus: &[usize]) -> Vec<u64> {
    cpus.iter()
        .map(|c| {
            let tag = format!("cpu{c}");
            stat.lines()
                .find(|l| l.split_whitespace().next() == Some(tag.as_str()))
                .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// Per-CPU steal so far (/proc/stat), ns (USER_HZ resolution: 10 ms); 0
/// for a CPU not listed or when /proc/stat is unreadable.
pub fn steal_ns_per_cpu(cpus: &[usize]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let tick_ns = 1_000_000_000 / user_hz();
    parse_steal_ticks(&text, cpus)
        .into_iter()
        .map(|t| t * tick_ns)
        .collect()
}

/// Aggregate CPU time counters from the `cpu` line of /proc/stat, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + idle + iowait + irq + softirq + steal.
    pub total: u64,
    /// Time stolen by the hypervisor.
    pub steal: u64,
}

impl CpuTimes {
    /// Reads the `cpu` line of /proc/stat now.
    ///
    /// # Errors
    ///
    /// An [`ErrorKind::Io`](crate::ErrorKind::Io) error when /proc/stat cannot
    /// be read or has no `cpu` line.
    pub fn now() -> crate::Result<Self> {
        let text = std::fs::read_to_string("/proc/stat")?;
        parse_proc_stat_cpu(&text).ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::Io,
                "/proc/stat has no readable 'cpu' line: is /proc mounted?",
            )
        })
    }

    /// Percent of CPU time stolen between `earlier` and `self`. None when no
    /// time passed (or the counters went backwards).
    pub fn steal_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let dt = self.total.checked_sub(earlier.total)?;
        let ds = self.steal.checked_sub(earlier.steal)?;
        (dt > 0).then(|| ds as f64 * 100.0 / dt as f64)
    }
}

/// Parses the aggregate `cpu` line of /proc/stat.
pub fn parse_proc_stat_cpu(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    // guest and guest_nice (fields 9, 10) are already counted in user and nice.
    let total = v.iter().take(8).sum();
    Some(CpuTimes {
        total,
        steal: v.get(7).copied().unwrap_or(0),
    })
}

/// Maps a CPUID hypervisor vendor signature (leaf 0x40000000) to a name.
pub fn hypervisor_name(signature: &str) -> &'static str {
    match signature.trim_end_matches('\0').trim() {
        "KVMKVMKVM" => "kvm",
        "Microsoft Hv" => "hyperv",
        "VMwareVMware" => "vmware",
        "XenVMMXenVMM" => "xen",
        "TCGTCGTCGTCG" => "qemu-tcg",
        "VBoxVBoxVBox" => "virtualbox",
        "ACRNACRNACRN" => "acrn",
        "bhyve bhyve" => "bhyve",
        "QNXQVMBSQG" => "qnx",
        "Linux KVM Hv" => "kvm",
        _ => "unidentified",
    }
}

#[cfg(target_arch = "x86_64")]
fn cpuid_hypervisor() -> String {
    // SAFETY: CPUID is available on every x86_64 CPU; leaf 0x40000000 is
    // reserved for hypervisors and harmless on bare metal. (`__cpuid` is a
    // safe fn since Rust 1.87; the block keeps the 1.80 MSRV building.)
    #[allow(unused_unsafe)]
    let r = unsafe { std::arch::x86_64::__cpuid(0x4000_0000) };
    let mut sig = Vec::with_capacity(12);
    for reg in [r.ebx, r.ecx, r.edx] {
        sig.extend_from_slice(&reg.to_le_bytes());
    }
    String::from_utf8_lossy(&sig).into_owned()
}

fn detect_virtualization(
    flags: Option<&[String]>,
    is_x86: bool,
    sources: &mut BTreeMap<String, String>,
) -> Option<String> {
    if let Some(t) = read("/sys/hypervisor/type") {
        sources.insert("virtualization".into(), "/sys/hypervisor/type".into());
        return Some(t.trim().to_string());
    }
    if is_x86 {
        let flags = flags?;
        if !flags.iter().any(|f| f == "hypervisor") {
            sources.insert(
                "virtualization".into(),
                "/proc/cpuinfo: no 'hypervisor' flag".into(),
            );
            return Some("none".into());
        }
        #[cfg(target_arch = "x86_64")]
        {
            let sig = cpuid_hypervisor();
            sources.insert(
                "virtualization".into(),
                format!(
                    "CPUID 0x40000000 signature {:?}",
                    sig.trim_end_matches('\0')
                ),
            );
            return Some(hypervisor_name(&sig).to_string());
        }
        #[allow(unreachable_code)]
        return Some("unidentified".into());
    }
    if Path::new("/proc/device-tree/hypervisor").exists() {
        sources.insert(
            "virtualization".into(),
            "/proc/device-tree/hypervisor".into(),
        );
        return Some("unidentified".into());
    }
    None
}

fn read_governors() -> Option<Vec<String>> {
    let mut govs: Vec<String> = Vec::new();
    let entries = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("cpu") && name[3..].chars().all(|c| c.is_ascii_digit()))
            || name.len() == 3
        {
            continue;
        }
        if let Some(g) = read(&format!(
            "/sys/devices/system/cpu/{name}/cpufreq/scaling_governor"
        )) {
            let g = g.trim().to_string();
            if !govs.contains(&g) {
                govs.push(g);
            }
        }
    }
    govs.sort();
    (!govs.is_empty()).then_some(govs)
}

fn read_idle_states() -> Vec<IdleState> {
    let mut states = Vec::new();
    for n in 0.. {
        let dir = format!("/sys/devices/system/cpu/cpu0/cpuidle/state{n}");
        let Some(name) = read(&format!("{dir}/name")) else {
            break;
        };
        states.push(IdleState {
            name: name.trim().to_string(),
            latency_us: read(&format!("{dir}/latency"))
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0),
            disabled: read(&format!("{dir}/disable")).is_some_and(|s| s.trim() == "1"),
        });
    }
    states
}

/// What every firmtime output file embeds: who wrote it, how, on what, when.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Provenance {
    /// firmtime version.
    pub firmtime_version: String,
    /// The command line, program name first.
    pub command_line: Vec<String>,
    /// The machine.
    pub system: SystemInfo,
    /// The real-time conditions obtained (policy, priority, memory lock…),
    /// as reported by whoever set them up; None until set.
    pub rt: Option<serde_json::Value>,
    /// Start time, RFC 3339 UTC with milliseconds.
    pub started_utc: String,
    /// End time, RFC 3339 UTC; None until [`Provenance::finish`].
    pub ended_utc: Option<String>,
    /// CLOCK_MONOTONIC at start, ns (relates event timestamps to the wall clock).
    pub started_monotonic_ns: u64,
}

impl Provenance {
    /// Records the start: collects [`SystemInfo`], notes the wall and monotonic time.
    pub fn begin(command_line: Vec<String>) -> Self {
        let started_monotonic_ns = monotonic_ns();
        Self {
            firmtime_version: env!("CARGO_PKG_VERSION").to_string(),
            command_line,
            system: SystemInfo::collect(),
            rt: None,
            started_utc: rfc3339_utc(SystemTime::now()),
            ended_utc: None,
            started_monotonic_ns,
        }
    }

    /// Records the end time.
    pub fn finish(&mut self) {
        self.ended_utc = Some(rfc3339_utc(SystemTime::now()));
    }
}

/// Formats a time as RFC 3339 UTC with milliseconds: `2024-03-01T12:00:00.250Z`.
/// Times before 1970 are clamped to the epoch.
pub fn rfc3339_utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, sod) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const CONFIG: &str = "\
#
# Automatically generated file; DO NOT EDIT.
CONFIG_NO_HZ_COMMON=y
CONFIG_NO_HZ_IDLE=y
# CONFIG_NO_HZ_FULL is not set
CONFIG_NO_HZ=y
CONFIG_HIGH_RES_TIMERS=y
CONFIG_PREEMPT_NONE=y
# CONFIG_PREEMPT_VOLUNTARY is not set
# CONFIG_PREEMPT is not set
CONFIG_PREEMPT_DYNAMIC=y
CONFIG_HZ_250=y
CONFIG_HZ=250
CONFIG_LOCALVERSION=\"-fc\"
";

    #[test]
    fn kernel_config_lines() {
        let c = parse_kernel_config(CONFIG);
        assert_eq!(c["CONFIG_NO_HZ_FULL"], "n");
        assert_eq!(c["CONFIG_HZ"], "250");
        assert_eq!(c["CONFIG_LOCALVERSION"], "-fc");
        assert!(!c.contains_key("Automatically generated file; DO NOT EDIT."));
        assert_eq!(config_hz(&c), Some(250));
        assert_eq!(config_nohz(&c), Some("idle"));
        assert_eq!(config_preempt(&c), PreemptModel::None);
        assert!(config_yes(&c, "CONFIG_PREEMPT_DYNAMIC"));
    }

    #[test]
    fn preempt_from_config_variants() {
        let m = |t: &str| config_preempt(&parse_kernel_config(t));
        assert_eq!(
            m("CONFIG_PREEMPT_RT=y\nCONFIG_PREEMPT=y\n"),
            PreemptModel::Rt
        );
        assert_eq!(m("CONFIG_PREEMPT=y\n"), PreemptModel::Full);
        assert_eq!(m("CONFIG_PREEMPT_VOLUNTARY=y\n"), PreemptModel::Voluntary);
        assert_eq!(m("CONFIG_PREEMPT_LAZY=y\n"), PreemptModel::Lazy);
        assert_eq!(m("CONFIG_HZ=100\n"), PreemptModel::Unknown);
    }

    #[test]
    fn nohz_modes() {
        let n = |t: &str| config_nohz(&parse_kernel_config(t));
        assert_eq!(n("CONFIG_NO_HZ_FULL=y\nCONFIG_NO_HZ=y\n"), Some("full"));
        assert_eq!(n("CONFIG_HZ_PERIODIC=y\n"), Some("periodic"));
        assert_eq!(n("# CONFIG_NO_HZ_IDLE is not set\n"), Some("periodic"));
        assert_eq!(n("CONFIG_HZ=1000\n"), None);
    }

    #[test]
    fn preempt_debugfs_and_log() {
        assert_eq!(
            parse_preempt_debugfs("none voluntary (full)\n"),
            Some(PreemptModel::Full)
        );
        assert_eq!(
            parse_preempt_debugfs("(none) voluntary full lazy\n"),
            Some(PreemptModel::None)
        );
        assert_eq!(parse_preempt_debugfs("none voluntary full\n"), None);
        let log = "<6>[    0.1] Linux version 6.18\n<6>[    0.101313] Dynamic Preempt: voluntary\n";
        assert_eq!(parse_preempt_kernel_log(log), Some(PreemptModel::Voluntary));
        assert_eq!(parse_preempt_kernel_log("nothing here\n"), None);
    }

    #[test]
    fn cmdline_params() {
        let c = "BOOT_IMAGE=/vmlinuz isolcpus=domain,2-3 quiet nohz_full=2-3 preempt=full isolcpus=1 -- preempt=none";
        assert_eq!(cmdline_param(c, "isolcpus"), Some("1"));
        assert_eq!(cmdline_param(c, "nohz_full"), Some("2-3"));
        assert_eq!(cmdline_param(c, "preempt"), Some("full"));
        assert_eq!(cmdline_param(c, "quiet"), Some(""));
        assert_eq!(cmdline_param(c, "rcu_nocbs"), None);
    }

    #[test]
    fn timer_list_hres() {
        let on = "cpu: 0\n  .hres_active    : 1\ncpu: 1\n  .hres_active    : 1\n";
        let mixed = "cpu: 0\n  .hres_active    : 1\ncpu: 1\n  .hres_active    : 0\n";
        assert_eq!(parse_hres_active(on), Some(true));
        assert_eq!(parse_hres_active(mixed), Some(false));
        assert_eq!(parse_hres_active("Timer List Version: v0.9\n"), None);
    }

    #[test]
    fn cpuinfo_fields() {
        let x86 = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu tsc constant_tsc nonstop_tsc hypervisor\n\nprocessor\t: 1\n";
        assert_eq!(
            parse_cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        let f = parse_cpu_flags(x86).unwrap();
        assert_eq!(
            f,
            ["fpu", "tsc", "constant_tsc", "nonstop_tsc", "hypervisor"]
        );
        let arm =
            "processor\t: 0\nFeatures\t: fp asimd\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
        assert_eq!(
            parse_cpu_model(arm).as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert_eq!(parse_cpu_flags(arm).unwrap(), ["fp", "asimd"]);
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn proc_stat_steal() {
        let a = parse_proc_stat_cpu("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(
            a,
            CpuTimes {
                total: 1000,
                steal: 35
            }
        );
        let b = CpuTimes {
            total: 1200,
            steal: 45,
        };
        assert_eq!(b.steal_percent_since(&a), Some(5.0));
        assert_eq!(a.steal_percent_since(&a), None);
        assert_eq!(a.steal_percent_since(&b), None);
        // Kernels before 2.6.11 have no steal column.
        let old = parse_proc_stat_cpu("cpu 1 2 3 4 5 6 7\n").unwrap();
        assert_eq!(
            old,
            CpuTimes {
                total: 28,
                steal: 0
            }
        );
        assert_eq!(parse_proc_stat_cpu("intr 1 2\n"), None);
    }

    #[test]
    fn hypervisor_signatures() {
        assert_eq!(hypervisor_name("KVMKVMKVM\0\0\0"), "kvm");
        assert_eq!(hypervisor_name("Microsoft Hv"), "hyperv");
        assert_eq!(hypervisor_name("????????????"), "unidentified");
    }

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_millis(951_782_400_250);
        assert_eq!(rfc3339_utc(leap), "2000-02-29T00:00:00.250Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_294_399);
        assert_eq!(rfc3339_utc(t), "2024-03-01T11:59:59.000Z");
        let end = UNIX_EPOCH + Duration::from_secs(4_102_444_799);
        assert_eq!(rfc3339_utc(end), "2099-12-31T23:59:59.000Z");
    }

    #[test]
    fn preempt_model_json_is_lowercase() {
        assert_eq!(serde_json::to_string(&PreemptModel::Rt).unwrap(), "\"rt\"");
        assert_eq!(
            serde_json::to_string(&PreemptModel::Unknown).unwrap(),
            "\"unknown\""
        );
    }
}
