//! What `lab tails` returns: per cell, per process, and the kernel settings
//! that explain the numbers.

use super::{CellSpec, Config, PaperRow, MS};
use crate::measure::Cell;
use crate::stats::Summary;
use firmtime_rt::setup::RtConditions;
use firmtime_rt::system::SystemInfo;
use serde::{Deserialize, Serialize};

/// The kernel settings that explain the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelTiming {
    /// CONFIG_HZ, if the kernel config is readable (the paper: 100 and 20,000).
    pub config_hz: Option<u32>,
    /// Whether high-resolution timers are active (the paper's kernel had none:
    /// alarms expired only on ticks).
    pub high_res_timers: Option<bool>,
    /// `kernel.sched_rr_timeslice_ms` (the paper: 60 ms and 100 µs quanta).
    pub rr_timeslice_ms: Option<u64>,
    /// `kernel.sched_rt_runtime_us` (RT throttling; -1 = off).
    pub rt_runtime_us: Option<i64>,
    /// `kernel.sched_rt_period_us`.
    pub rt_period_us: Option<i64>,
}

impl KernelTiming {
    /// Reads them from this kernel.
    pub fn current() -> Self {
        let info = SystemInfo::collect();
        Self {
            config_hz: info.config_hz,
            high_res_timers: info.high_res_timers,
            rr_timeslice_ms: read_sysctl("sched_rr_timeslice_ms").and_then(|v| v.try_into().ok()),
            rt_runtime_us: read_sysctl("sched_rt_runtime_us"),
            rt_period_us: read_sysctl("sched_rt_period_us"),
        }
    }
}

fn read_sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(super) fn rr_timeslice_ns() -> Option<u64> {
    read_sysctl("sched_rr_timeslice_ms").and_then(|ms| u64::try_from(ms).ok().map(|m| m * MS))
}

/// What one timer-setting process measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessResult {
    /// Its process id (reaped).
    pub pid: u32,
    /// Alarms delivered and measured.
    pub delivered: u32,
    /// True if it hit its deadline before all its alarms.
    pub timed_out: bool,
    /// True if it was stopped (Ctrl-C) before all its alarms.
    pub interrupted: bool,
    /// Its soft RLIMIT_RTTIME in µs after raising it (`None` = unlimited).
    pub rttime_limit_us: Option<u64>,
    /// Delivery latencies in ns, in the order of the alarms.
    pub latencies_ns: Vec<i64>,
}

/// A measured cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellMeasurement {
    /// All processes' latencies together; `missed` = alarms requested but not
    /// delivered (timed out or interrupted).
    pub summary: Summary,
    /// Alarms requested in total (`procs × alarms`).
    pub requested: u64,
    /// Fraction of alarms delivered within one tick (1/CONFIG_HZ), the
    /// quantity the paper reads off Figure 7; `None` if CONFIG_HZ is unknown.
    pub within_one_tick: Option<f64>,
    /// The conditions the first process obtained (all ask the same).
    pub conditions: RtConditions,
    /// Each timer-setting process.
    pub processes: Vec<ProcessResult>,
    /// True if a process timed out or was stopped.
    pub partial: bool,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellResult {
    /// What ran.
    #[serde(flatten)]
    pub spec: CellSpec,
    /// `BLK 2`, `4% 1+2CPU`.
    pub label: String,
    /// The paper's row for this cell, if Table 6 has one.
    pub paper: Option<PaperRow>,
    /// Measured, or skipped with the reason (SCHED_RR refused).
    pub result: Cell<CellMeasurement>,
}

/// The result of `lab tails`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TailsResult {
    /// The configuration that ran (seed included).
    pub config: Config,
    /// The CPU the workers were pinned to.
    pub cpu: usize,
    /// This kernel's tick rate, high-resolution timers, RR quantum, throttling.
    pub kernel: KernelTiming,
    /// One per cell, in order; cells not reached after Ctrl-C are absent.
    pub cells: Vec<CellResult>,
    /// True if interrupted (Ctrl-C) or a process timed out.
    pub partial: bool,
}
