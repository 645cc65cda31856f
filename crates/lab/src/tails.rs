//! `lab tails`: latency tails of timer-signal delivery under SCHED_RR
//! contention — Etsion, Tsafrir and Feitelson (2003), §7 and Table 6.
//!
//! K processes in SCHED_RR each request `alarms` alarms with delays uniform
//! in 1 ms..`max_delay` (seeded PRNG), and record the *delivery latency*:
//! the time from the alarm's expiry to the moment the process runs again.
//! Process types, as in the paper:
//!
//! - **BLK** (`compute_percent = 0`): set an alarm, block until it arrives.
//! - **N%** (`1..=99`): compute (spin) for N % of the time till the alarm,
//!   then block.
//! - **CONT** (`100`): compute continuously; the alarm interrupts it.
//!
//! Optionally `extra_cpu` SCHED_OTHER CPU hogs (`firmtime load cpu`) run
//! beside them (the paper's "1+2CPU" rows).
//!
//! # How latency is measured
//!
//! Each worker is a child process of the firmtime binary
//! (`firmtime lab tails-worker …`, hidden). It arms a POSIX timer
//! (`timer_create(CLOCK_MONOTONIC)`, `SIGEV_THREAD_ID` → SIGALRM to its own
//! thread) at an *absolute* expiry `T`, and a SIGALRM handler reads
//! `CLOCK_MONOTONIC` and stores it in an atomic. A handler runs when the
//! kernel returns to user mode in the signalled thread — that is, when the
//! process has got a CPU after the signal — so `handler time − T` is exactly
//! the paper's "alarm should expire → process is assigned a CPU", for a
//! blocked process (woken from `sigsuspend`) and for a computing one
//! (preempted, or waiting in the RR queue) alike. One mechanism for all three
//! types keeps them comparable.
//!
//! All workers (and the extra hogs) are pinned to one CPU (the last online
//! one unless [`Config::cpu`] says otherwise): the paper measured a
//! uniprocessor, and on a multi-core machine K processes spread over K cores
//! would never contend. The parent stays unpinned.
//!
//! # Bounds and the runaway guard
//!
//! CONT workers never block, so RLIMIT_RTTIME (the runaway guard of
//! `firmtime_rt::runaway`) would fire on them: workers raise the soft limit
//! to the hard limit and install no guard. They are bounded instead by a
//! deadline of their own (checked while spinning), a parent watchdog that
//! SIGKILLs them shortly after it, `PR_SET_PDEATHSIG`, and the kernel's RT
//! throttling (`sched_rt_runtime_us`, 95 % by default), which leaves the
//! pinned CPU's remaining time and every other CPU to the rest of the system.
//!
//! # RT contract
//!
//! The worker's measured loop allocates nothing, takes no lock and prints
//! nothing: latencies go into a slice allocated and locked before the loop;
//! the only system calls are `timer_settime`, `clock_gettime`,
//! `pthread_sigmask` and `sigsuspend`. The signal handler is
//! async-signal-safe (`clock_gettime` and an atomic store, `errno` kept).

use crate::check::{self, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::load::{self, LoadSet, LoadSpec};
use crate::measure::{stop_requested, Cell, Progress};
use crate::stats::{summarize, Summary};
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::system::SystemInfo;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::ops::RangeInclusive;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// The shortest alarm delay, as in the paper (1 ms).
pub const MIN_DELAY_NS: u64 = MS;
/// Valid `--alarms` (alarms per process).
pub const ALARMS: RangeInclusive<u32> = 1..=100_000;
/// Valid `--max-delay` in ns: 2 ms to 10 s.
pub const MAX_DELAY_NS: RangeInclusive<u64> = 2 * MS..=10_000 * MS;
/// Valid `--priority` (SCHED_RR).
pub const PRIORITY: RangeInclusive<u8> = 1..=99;
/// Valid `--procs` values (timer-setting processes per cell).
pub const PROCS: RangeInclusive<u32> = 1..=64;
/// Valid `--percents` values (compute share of the N% type).
pub const PERCENTS: RangeInclusive<u8> = 1..=99;
/// Valid `--extra-cpu` values (SCHED_OTHER hogs beside the workers).
pub const EXTRA_CPU: RangeInclusive<u32> = 0..=64;
/// The paper's alarms per process.
pub const PAPER_ALARMS: u32 = 500;
/// The paper's longest delay (1000 ms).
pub const PAPER_MAX_DELAY_NS: u64 = 1000 * MS;
/// Alarms per process with `--quick`.
pub const QUICK_ALARMS: u32 = 100;
/// Longest delay with `--quick` (50 ms instead of the paper's 1000 ms).
pub const QUICK_MAX_DELAY_NS: u64 = 50 * MS;
/// Default SCHED_RR priority of the workers.
pub const DEFAULT_PRIORITY: u8 = 50;
/// Default PRNG seed.
pub const DEFAULT_SEED: u64 = 2003;

/// How long after a worker's own deadline the parent kills it.
const WATCHDOG_GRACE: Duration = Duration::from_secs(3);

/// One cell of the table: K processes of one type, plus optional hogs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellSpec {
    /// Share of the time till the next alarm each process computes:
    /// 0 = BLK, 1..=99 = N%, 100 = CONT.
    pub compute_percent: u8,
    /// Timer-setting SCHED_RR processes.
    pub procs: u32,
    /// Extra CPU-bound SCHED_OTHER processes that set no timers.
    pub extra_cpu: u32,
}

impl CellSpec {
    /// A BLK cell of `procs` processes.
    pub const fn blk(procs: u32) -> Self {
        Self {
            compute_percent: 0,
            procs,
            extra_cpu: 0,
        }
    }

    /// A CONT cell of `procs` processes.
    pub const fn cont(procs: u32) -> Self {
        Self {
            compute_percent: 100,
            procs,
            extra_cpu: 0,
        }
    }

    /// An N% cell of `procs` processes with `extra_cpu` hogs.
    pub const fn percent(percent: u8, procs: u32, extra_cpu: u32) -> Self {
        Self {
            compute_percent: percent,
            procs,
            extra_cpu,
        }
    }

    /// The paper's "Type" column: `BLK`, `4%`, `CONT`.
    pub fn type_label(&self) -> String {
        match self.compute_percent {
            0 => "BLK".into(),
            100 => "CONT".into(),
            n => format!("{n}%"),
        }
    }

    /// The paper's "Number" column: `2`, or `1+2CPU` with extra hogs.
    pub fn number_label(&self) -> String {
        if self.extra_cpu == 0 {
            self.procs.to_string()
        } else {
            format!("{}+{}CPU", self.procs, self.extra_cpu)
        }
    }

    /// `BLK 2`, `4% 1+2CPU`.
    pub fn label(&self) -> String {
        format!("{} {}", self.type_label(), self.number_label())
    }

    /// The paper's Table 6 row for this cell, if it has one.
    pub fn paper(&self) -> Option<&'static PaperRow> {
        PAPER_TABLE6.iter().find(|r| r.cell == *self)
    }
}

/// Percentiles from the paper, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaperTails {
    /// 0.9 quantile.
    pub p90_us: u64,
    /// 0.95 quantile.
    pub p95_us: u64,
    /// 0.99 quantile.
    pub p99_us: u64,
    /// Maximum.
    pub max_us: u64,
}

/// One row of the paper's Table 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaperRow {
    /// The cell the row stands for.
    pub cell: CellSpec,
    /// Linux 2.4 at 100 Hz, 60 ms quantum.
    pub hz100: PaperTails,
    /// Linux 2.4 at 20,000 Hz, 100 µs quantum.
    pub hz20000: PaperTails,
}

const fn tails(p90_us: u64, p95_us: u64, p99_us: u64, max_us: u64) -> PaperTails {
    PaperTails {
        p90_us,
        p95_us,
        p99_us,
        max_us,
    }
}

/// Etsion, Tsafrir and Feitelson (2003), "Effects of clock resolution on the
/// scheduling of interactive and soft real-time processes", SIGMETRICS,
/// Table 6: tails of the latency to deliver timer signals, in µs, on a
/// Pentium (uniprocessor) Linux 2.4 at 100 Hz (60 ms quantum) and at
/// 20,000 Hz (100 µs quantum). The paper has no 0.999 column.
pub const PAPER_TABLE6: [PaperRow; 10] = [
    PaperRow {
        cell: CellSpec::blk(2),
        hz100: tails(5, 8, 11, 40),
        hz20000: tails(13, 14, 21, 23),
    },
    PaperRow {
        cell: CellSpec::blk(8),
        hz100: tails(5, 12, 22, 420),
        hz20000: tails(7, 9, 13, 25),
    },
    PaperRow {
        cell: CellSpec::cont(2),
        hz100: tails(50_003, 60_003, 60_004, 160_006),
        hz20000: tails(102, 103, 18_468, 60_448),
    },
    PaperRow {
        cell: CellSpec::cont(8),
        hz100: tails(370_014, 400_014, 420_015, 740_025),
        hz20000: tails(656, 706, 15_096, 68_139),
    },
    PaperRow {
        cell: CellSpec::percent(2, 2, 0),
        hz100: tails(6, 9, 9_193, 19_153),
        hz20000: tails(13, 15, 23, 837),
    },
    PaperRow {
        cell: CellSpec::percent(2, 8, 0),
        hz100: tails(2_910, 8_419, 17_940, 32_944),
        hz20000: tails(12, 52, 53, 1_809),
    },
    PaperRow {
        cell: CellSpec::percent(8, 2, 0),
        hz100: tails(9, 12_431, 39_512, 60_003),
        hz20000: tails(14, 19, 53, 3_797),
    },
    PaperRow {
        cell: CellSpec::percent(8, 8, 0),
        hz100: tails(40_003, 60_005, 130_006, 294_291),
        hz20000: tails(53, 53, 54, 37_328),
    },
    PaperRow {
        cell: CellSpec::percent(4, 1, 2),
        hz100: tails(50_003, 50_003, 50_004, 50_005),
        hz20000: tails(55, 56, 200, 256),
    },
    PaperRow {
        cell: CellSpec::percent(4, 1, 8),
        hz100: tails(50_003, 50_003, 170_014, 280_010),
        hz20000: tails(56, 57, 59, 856),
    },
];

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The cells, in table order.
    pub cells: Vec<CellSpec>,
    /// Alarms each process requests (`--alarms`).
    pub alarms: u32,
    /// Longest alarm delay in ns (`--max-delay`); delays are uniform in
    /// [`MIN_DELAY_NS`]..=this.
    pub max_delay_ns: u64,
    /// SCHED_RR priority of the timer-setting processes (`--priority`).
    pub priority: u8,
    /// PRNG seed (`--seed`); each process derives its own stream from it.
    pub seed: u64,
    /// The CPU every worker and hog is pinned to (`--cpu`); `None` = the
    /// last online CPU.
    pub cpu: Option<usize>,
}

impl Default for Config {
    /// The paper's setup: [`Config::full`].
    fn default() -> Self {
        Self::full()
    }
}

impl Config {
    /// The rows of Table 6 with the paper's 500 alarms of 1..1000 ms per
    /// process (about 4–8 minutes per cell).
    pub fn full() -> Self {
        Self {
            cells: PAPER_TABLE6.iter().map(|r| r.cell).collect(),
            alarms: PAPER_ALARMS,
            max_delay_ns: PAPER_MAX_DELAY_NS,
            priority: DEFAULT_PRIORITY,
            seed: DEFAULT_SEED,
            cpu: None,
        }
    }

    /// A reduced matrix within the 40 s budget: BLK 2, CONT 2, 4% 2 and
    /// 4% 1+2CPU, [`QUICK_ALARMS`] alarms of 1..[`QUICK_MAX_DELAY_NS`] each.
    pub fn quick() -> Self {
        Self {
            cells: vec![
                CellSpec::blk(2),
                CellSpec::cont(2),
                CellSpec::percent(4, 2, 0),
                CellSpec::percent(4, 1, 2),
            ],
            alarms: QUICK_ALARMS,
            max_delay_ns: QUICK_MAX_DELAY_NS,
            ..Self::full()
        }
    }

    /// The paper's full matrix for the given lists: BLK × `procs`,
    /// CONT × `procs`, each of `percents` × `procs`, then each of `percents`
    /// with one process plus each of `extra_cpu` hogs (the "1+2CPU" rows;
    /// zeros in `extra_cpu` are ignored). `blk` / `cont` / `percent` select types.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming `--percents` if a share is outside
    /// 1..=99 (0 is BLK and 100 is CONT: ask for those with `--types`).
    pub fn matrix(
        procs: &[u32],
        percents: &[u8],
        extra_cpu: &[u32],
        blk: bool,
        cont: bool,
        percent: bool,
    ) -> Result<Vec<CellSpec>> {
        if percent {
            for &n in percents {
                check::in_range("--percents", n, &PERCENTS)?;
            }
        }
        let mut cells = Vec::new();
        if blk {
            cells.extend(procs.iter().map(|&k| CellSpec::blk(k)));
        }
        if cont {
            cells.extend(procs.iter().map(|&k| CellSpec::cont(k)));
        }
        if percent {
            for &n in percents {
                cells.extend(procs.iter().map(|&k| CellSpec::percent(n, k, 0)));
            }
            for &e in extra_cpu.iter().filter(|&&e| e > 0) {
                cells.extend(percents.iter().map(|&n| CellSpec::percent(n, 1, e)));
            }
        }
        Ok(cells)
    }

    /// Checks every value; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming `--alarms`, `--max-delay`,
    /// `--priority`, `--procs`, `--percents`, `--extra-cpu` or `--cpu`.
    pub fn validate(&self) -> Result<()> {
        check::in_range("--alarms", self.alarms, &ALARMS)?;
        if !MAX_DELAY_NS.contains(&self.max_delay_ns) {
            let ms = |ns| firmtime_rt::units::format_ns(ns as f64);
            let note = " (delays are uniform from 1ms to it)";
            let e = check::out_of_range("--max-delay", self.max_delay_ns, &MAX_DELAY_NS, ms, note);
            return Err(e);
        }
        check::in_range("--priority", self.priority, &PRIORITY)?;
        if self.cells.is_empty() {
            return Err(invalid(
                "no cells to measure: give at least one value to --procs and one type to --types",
            ));
        }
        for c in &self.cells {
            check::in_range("--procs", c.procs, &PROCS)?;
            check::in_range("--extra-cpu", c.extra_cpu, &EXTRA_CPU)?;
            if !matches!(c.compute_percent, 0 | 100) {
                check::in_range("--percents", c.compute_percent, &PERCENTS)?;
            }
            if c.compute_percent > 100 {
                return Err(invalid(format!(
                    "compute share {}% is out of range: valid is 0 (BLK) to 100 (CONT)",
                    c.compute_percent
                )));
            }
        }
        if let Some(cpu) = self.cpu {
            let online = sched::online_cpus();
            if !online.contains(&cpu) {
                return Err(invalid(format!(
                    "--cpu {cpu} is not an online CPU: online CPUs are {}",
                    sched::format_cpu_list(&online)
                )));
            }
        }
        Ok(())
    }

    /// The longest a cell can take: every alarm at the longest delay plus a
    /// full RR timeslice of every process, plus start-up.
    pub fn cell_bound(&self, cell: &CellSpec) -> Duration {
        let slice = rr_timeslice_ns().unwrap_or(100 * MS);
        let per_alarm = self.max_delay_ns + u64::from(cell.procs) * slice;
        Duration::from_nanos(u64::from(self.alarms) * per_alarm + 2_000 * MS)
    }

    /// The sum of [`Config::cell_bound`] over all cells.
    pub fn time_bound(&self) -> Duration {
        self.cells.iter().map(|c| self.cell_bound(c)).sum()
    }

    /// What most runs take: alarms × mean delay per cell.
    pub fn expected_duration(&self) -> Duration {
        let mean = (MIN_DELAY_NS + self.max_delay_ns) / 2;
        Duration::from_nanos(self.cells.len() as u64 * u64::from(self.alarms) * mean)
    }
}

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

fn rr_timeslice_ns() -> Option<u64> {
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

/// Runs every cell of `cfg`, starting workers and hogs from `exe` (the
/// firmtime binary: `std::env::current_exe()`).
///
/// Ctrl-C ([`stop_requested`]) stops the running cell's workers (they report
/// what they measured) and skips the remaining cells; the result is then
/// `partial`. SCHED_RR refused → every cell is skipped with the reason.
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] from [`Config::validate`].
/// - [`ErrorKind::Load`] if a worker or hog cannot be started, or a worker
///   fails or reports nothing readable.
pub fn run(cfg: &Config, exe: &Path, progress: &mut dyn Progress) -> Result<TailsResult> {
    cfg.validate()?;
    let cpu = match cfg.cpu {
        Some(c) => c,
        None => *sched::online_cpus()
            .last()
            .ok_or_else(|| Error::new(ErrorKind::Io, "no online CPU found in /sys"))?,
    };
    let mut result = TailsResult {
        config: cfg.clone(),
        cpu,
        kernel: KernelTiming::current(),
        cells: Vec::with_capacity(cfg.cells.len()),
        partial: false,
    };
    let tick_ns = result
        .kernel
        .config_hz
        .map(|hz| 1_000_000_000 / i64::from(hz));
    progress.begin("lab tails", cfg.cells.len() as u64);
    for (i, spec) in cfg.cells.iter().enumerate() {
        if stop_requested() {
            result.partial = true;
            break;
        }
        let r = run_cell(cfg, spec, i, cpu, exe, tick_ns);
        let cell = Cell::from_result(r)?;
        if let Cell::Measured(m) = &cell {
            result.partial |= m.partial;
        }
        result.cells.push(CellResult {
            spec: *spec,
            label: spec.label(),
            paper: spec.paper().copied(),
            result: cell,
        });
        progress.advance(1);
    }
    progress.end();
    result.partial |= stop_requested();
    Ok(result)
}

fn run_cell(
    cfg: &Config,
    spec: &CellSpec,
    index: usize,
    cpu: usize,
    exe: &Path,
    tick_ns: Option<i64>,
) -> Result<CellMeasurement> {
    let bound = cfg.cell_bound(spec);
    let hogs = if spec.extra_cpu > 0 {
        Some(spawn_pinned_hogs(
            exe,
            spec.extra_cpu,
            cpu,
            bound + WATCHDOG_GRACE * 2,
        )?)
    } else {
        None
    };
    let start_at_ns =
        firmtime_rt::clock::monotonic_ns() + 200 * MS + u64::from(spec.procs) * 30 * MS;
    let deadline_ns = start_at_ns + bound.as_nanos() as u64;
    let mut workers = Vec::with_capacity(spec.procs as usize);
    for w in 0..spec.procs {
        let wc = WorkerConfig {
            compute_percent: spec.compute_percent,
            alarms: cfg.alarms,
            max_delay_ns: cfg.max_delay_ns,
            seed: worker_seed(cfg.seed, index as u64, u64::from(w)),
            priority: cfg.priority,
            cpu: Some(cpu),
            start_at_ns,
            deadline_ns,
        };
        // On error, dropping `workers` kills and reaps those started.
        workers.push(WorkerChild::spawn(exe, &wc)?);
    }
    let outputs = supervise(&mut workers, deadline_ns);
    drop(hogs);
    let mut processes = Vec::with_capacity(outputs.len());
    let mut conditions = None;
    for (pid, out) in outputs {
        match out {
            Ok(WorkerOutput::Done(r)) => {
                let r = *r;
                conditions.get_or_insert(r.conditions);
                processes.push(ProcessResult {
                    pid,
                    delivered: r.latencies_ns.len() as u32,
                    timed_out: r.timed_out,
                    interrupted: r.interrupted,
                    rttime_limit_us: r.rttime_limit_us,
                    latencies_ns: r.latencies_ns,
                });
            }
            Ok(WorkerOutput::Refused { reason }) => {
                return Err(Error::new(ErrorKind::Realtime, reason));
            }
            Ok(WorkerOutput::Failed { message }) => {
                return Err(Error::new(
                    ErrorKind::Load,
                    format!("tails worker (pid {pid}) failed: {message}"),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    let conditions = conditions.ok_or_else(|| Error::new(ErrorKind::Load, "no worker reported"))?;
    let all: Vec<i64> = processes
        .iter()
        .flat_map(|p| p.latencies_ns.iter().copied())
        .collect();
    let requested = u64::from(spec.procs) * u64::from(cfg.alarms);
    let missed = requested - all.len() as u64;
    let within_one_tick = match tick_ns {
        Some(t) if !all.is_empty() => {
            Some(all.iter().filter(|&&l| l < t).count() as f64 / all.len() as f64)
        }
        _ => None,
    };
    let partial = processes.iter().any(|p| p.timed_out || p.interrupted);
    Ok(CellMeasurement {
        summary: summarize(&all, missed),
        requested,
        within_one_tick,
        conditions,
        processes,
        partial,
    })
}

/// Starts `hogs` SCHED_OTHER CPU hogs pinned to `cpu` (children inherit the
/// spawning thread's affinity, which is restored afterwards).
fn spawn_pinned_hogs(exe: &Path, hogs: u32, cpu: usize, duration: Duration) -> Result<LoadSet> {
    let before = sched::affinity()?;
    sched::set_affinity(&[cpu])?;
    let set = LoadSet::spawn(exe, &[LoadSpec::Cpu { hogs }], duration);
    sched::set_affinity(&before)?;
    set
}

/// A distinct, reproducible seed per cell and process.
pub fn worker_seed(seed: u64, cell: u64, worker: u64) -> u64 {
    let mut s = seed ^ cell.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ worker.rotate_left(32);
    splitmix64(&mut s)
}

struct WorkerChild {
    child: Child,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl WorkerChild {
    fn spawn(exe: &Path, wc: &WorkerConfig) -> Result<Self> {
        let mut cmd = load::child_command(exe);
        cmd.args(["lab", "tails-worker"]).args(wc.to_cli_args());
        let mut child = cmd.spawn().map_err(|e| {
            Error::new(
                ErrorKind::Load,
                format!(
                    "cannot start tails worker ({} lab tails-worker): {e}",
                    exe.display()
                ),
            )
        })?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        Ok(Self {
            child,
            reader: Some(reader),
        })
    }

    fn signal(&self, sig: libc::c_int) {
        // The child leads its own process group and is not reaped yet, so
        // the id cannot have been reused.
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), sig) };
    }
}

impl Drop for WorkerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGKILL);
        }
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Waits for every worker to finish; on Ctrl-C asks them to stop (SIGTERM:
/// they report what they have); kills any still running after the deadline
/// plus a grace. Returns each worker's pid and parsed report.
fn supervise(workers: &mut [WorkerChild], deadline_ns: u64) -> Vec<(u32, Result<WorkerOutput>)> {
    let mut kill_at = deadline_ns + WATCHDOG_GRACE.as_nanos() as u64;
    let mut termed = false;
    loop {
        let running = workers
            .iter_mut()
            .map(|w| matches!(w.child.try_wait(), Ok(None)))
            .filter(|&r| r)
            .count();
        if running == 0 {
            break;
        }
        let now = firmtime_rt::clock::monotonic_ns();
        if stop_requested() && !termed {
            termed = true;
            workers.iter().for_each(|w| w.signal(libc::SIGTERM));
            kill_at = kill_at.min(now + WATCHDOG_GRACE.as_nanos() as u64);
        }
        if now >= kill_at {
            workers.iter_mut().for_each(|w| {
                if let Ok(None) = w.child.try_wait() {
                    w.signal(libc::SIGKILL);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    workers
        .iter_mut()
        .map(|w| {
            let pid = w.child.id();
            let status = w.child.wait();
            let text = w
                .reader
                .take()
                .and_then(|r| r.join().ok())
                .unwrap_or_default();
            let parsed = serde_json::from_str::<WorkerOutput>(&text).map_err(|e| {
                let how = match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                Error::new(
                    ErrorKind::Load,
                    format!(
                        "tails worker (pid {pid}) reported nothing readable ({how}; {e}); its error message, if any, is on stderr above"
                    ),
                )
            });
            (pid, parsed)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The worker: one timer-setting process.

/// What one worker process does (`firmtime lab tails-worker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// 0 = BLK, 1..=99 = N%, 100 = CONT.
    pub compute_percent: u8,
    /// Alarms to request.
    pub alarms: u32,
    /// Longest delay in ns (shortest: [`MIN_DELAY_NS`]).
    pub max_delay_ns: u64,
    /// PRNG seed of the delays.
    pub seed: u64,
    /// SCHED_RR priority.
    pub priority: u8,
    /// CPU to pin to, if any.
    pub cpu: Option<usize>,
    /// CLOCK_MONOTONIC time (ns) to start the first alarm at, so that all
    /// workers of a cell start together; 0 = now.
    pub start_at_ns: u64,
    /// CLOCK_MONOTONIC time (ns) after which the worker stops (timed out).
    pub deadline_ns: u64,
}

impl WorkerConfig {
    /// The hidden subcommand's arguments for this config (after
    /// `lab tails-worker`).
    pub fn to_cli_args(&self) -> Vec<String> {
        let mut a = vec![
            "--compute-percent".into(),
            self.compute_percent.to_string(),
            "--alarms".into(),
            self.alarms.to_string(),
            "--max-delay-ns".into(),
            self.max_delay_ns.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--priority".into(),
            self.priority.to_string(),
            "--start-at-ns".into(),
            self.start_at_ns.to_string(),
            "--deadline-ns".into(),
            self.deadline_ns.to_string(),
        ];
        if let Some(c) = self.cpu {
            a.push("--cpu".into());
            a.push(c.to_string());
        }
        a
    }

    fn validate(&self) -> Result<()> {
        check::in_range("--alarms", self.alarms, &ALARMS)?;
        check::in_range("--priority", self.priority, &PRIORITY)?;
        check::in_range("--compute-percent", self.compute_percent, &(0..=100))?;
        check::in_range("--max-delay-ns", self.max_delay_ns, &MAX_DELAY_NS)
    }
}

/// What a worker measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Delivery latencies in ns, one per delivered alarm, in order.
    pub latencies_ns: Vec<i64>,
    /// True if the deadline came before the last alarm.
    pub timed_out: bool,
    /// True if SIGINT/SIGTERM stopped it.
    pub interrupted: bool,
    /// Soft RLIMIT_RTTIME in µs after raising it (`None` = unlimited).
    pub rttime_limit_us: Option<u64>,
    /// The conditions obtained (SCHED_RR, priority, CPU, memory lock).
    pub conditions: RtConditions,
}

/// What a worker writes on stdout, as JSON (`{"status": "done", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum WorkerOutput {
    /// It ran (possibly stopped early: see the flags).
    Done(Box<WorkerReport>),
    /// SCHED_RR or the memory lock was refused; the reason says how to fix it.
    Refused {
        /// Why, and how to grant it.
        reason: String,
    },
    /// Any other failure.
    Failed {
        /// What went wrong.
        message: String,
    },
}

impl WorkerOutput {
    /// Sorts a worker's result into the three outcomes.
    pub fn from_result(r: Result<WorkerReport>) -> Self {
        match r {
            Ok(rep) => WorkerOutput::Done(Box::new(rep)),
            Err(e) if matches!(e.kind(), ErrorKind::Realtime | ErrorKind::Unavailable) => {
                WorkerOutput::Refused {
                    reason: e.message().to_string(),
                }
            }
            Err(e) => WorkerOutput::Failed {
                message: e.message().to_string(),
            },
        }
    }
}

/// Runs one worker in this process: SCHED_RR at `priority`, memory locked,
/// pinned to `cpu`; raises RLIMIT_RTTIME's soft limit to the hard limit (a
/// CONT worker never blocks); waits until `start_at_ns`; then requests
/// `alarms` alarms and measures each one's delivery latency.
///
/// Installs a SIGALRM handler and blocks nothing else: meant for a process of
/// its own (the hidden `firmtime lab tails-worker`). The stop flag of
/// [`crate::load::install_stop_signals`] ends it early (`interrupted`).
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] for out-of-range values.
/// - [`ErrorKind::Realtime`] if SCHED_RR or mlockall is refused (the message
///   says which privilege is missing and how to grant it).
/// - [`ErrorKind::Io`] if the timer or the signal handler cannot be set up.
pub fn run_worker(cfg: &WorkerConfig) -> Result<WorkerReport> {
    cfg.validate()?;
    let rttime_limit_us = raise_rttime_limit();
    let mut out = vec![0i64; cfg.alarms as usize];
    let handler = AlarmHandler::install()?;
    let timer = AlarmTimer::new()?;
    let req = RtRequest {
        policy: Policy::Rr {
            priority: cfg.priority,
        },
        mlock: true,
        prefault_stack: 64 * 1024,
        cpus: cfg.cpu.map(|c| vec![c]),
        ..RtRequest::default()
    };
    let rt = setup::apply(&req)?;
    // Touch the sample store after mlockall so no page fault hits the loop.
    out.iter_mut().for_each(|x| *x = 0);
    let stop = crate::measure::stop_flag();
    sleep_until(cfg.start_at_ns, stop);
    let params = LoopParams {
        compute_percent: cfg.compute_percent,
        max_delay_ns: cfg.max_delay_ns,
        seed: cfg.seed,
        deadline_ns: cfg.deadline_ns,
    };
    let (n, end) = alarm_loop(&timer, &handler, &params, stop, &mut out)
        .map_err(|e| Error::new(ErrorKind::Io, format!("timer_settime failed: {e}")))?;
    let conditions = rt.conditions.clone();
    drop(rt);
    drop(timer);
    drop(handler);
    out.truncate(n);
    Ok(WorkerReport {
        latencies_ns: out,
        timed_out: end == LoopEnd::Deadline,
        interrupted: end == LoopEnd::Stopped,
        rttime_limit_us,
        conditions,
    })
}

/// Raises RLIMIT_RTTIME's soft limit to the hard limit; returns the soft
/// limit now in force in µs, `None` if unlimited.
fn raise_rttime_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit owned by this frame.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut lim) } != 0 {
        return None;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit; raising soft up to hard needs no privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &lim) };
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Sleeps until CLOCK_MONOTONIC `t_ns` (or the stop flag).
fn sleep_until(t_ns: u64, stop: &AtomicBool) {
    let ts = libc::timespec {
        tv_sec: (t_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (t_ns % 1_000_000_000) as libc::c_long,
    };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            break;
        }
    }
}

/// splitmix64 (Steele, Lea, Flood 2014): small, fast, and good enough for
/// uniform delays; the same seed always gives the same delays.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The alarm delays of a worker: uniform in [`MIN_DELAY_NS`]..=`max_delay_ns`,
/// reproducible from `seed`. **RT-safe.**
#[derive(Debug, Clone)]
pub struct Delays {
    state: u64,
    max_ns: u64,
}

impl Delays {
    /// The stream for `seed`.
    pub fn new(seed: u64, max_delay_ns: u64) -> Self {
        Self {
            state: seed,
            max_ns: max_delay_ns.max(MIN_DELAY_NS),
        }
    }
}

impl Iterator for Delays {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let span = self.max_ns - MIN_DELAY_NS + 1;
        Some(MIN_DELAY_NS + splitmix64(&mut self.state) % span)
    }
}

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
struct AlarmHandler {
    old: libc::sigaction,
}

impl AlarmHandler {
    fn install() -> Result<Self> {
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
struct AlarmTimer {
    id: libc::timer_t,
}

impl AlarmTimer {
    fn new() -> Result<Self> {
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
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (t_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (t_ns % 1_000_000_000) as libc::c_long,
            },
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

struct LoopParams {
    compute_percent: u8,
    max_delay_ns: u64,
    seed: u64,
    deadline_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoopEnd {
    Done,
    Deadline,
    Stopped,
}

/// The measured loop. Fills `out` with one latency per alarm and returns how
/// many and why it ended. **RT-safe**: no allocation, no lock, no printing.
fn alarm_loop(
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

    #[test]
    fn delays_are_uniform_in_range_and_reproducible() {
        let a: Vec<u64> = Delays::new(42, 10 * MS).take(2000).collect();
        let b: Vec<u64> = Delays::new(42, 10 * MS).take(2000).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|d| (MIN_DELAY_NS..=10 * MS).contains(d)));
        let low = a.iter().filter(|&&d| d < 5 * MS + MS / 2).count();
        assert!(
            (800..1200).contains(&low),
            "about half below the middle: {low}"
        );
        let c: Vec<u64> = Delays::new(43, 10 * MS).take(10).collect();
        assert_ne!(a[..10], c[..]);
    }
}
