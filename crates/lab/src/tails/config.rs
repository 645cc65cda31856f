//! What to measure: the cells of the table and their bounds.

use super::paper::PaperRow;
use super::results::rr_timeslice_ns;
use super::{
    ALARMS, DEFAULT_PRIORITY, DEFAULT_SEED, EXTRA_CPU, MAX_DELAY_NS, MIN_DELAY_NS, MS,
    PAPER_ALARMS, PAPER_MAX_DELAY_NS, PAPER_TABLE6, PERCENTS, PRIORITY, PROCS, QUICK_ALARMS,
    QUICK_MAX_DELAY_NS,
};
use crate::check::{self, invalid};
use crate::error::Result;
use firmtime_rt::sched;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming `--percents` if a share is outside
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
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming `--alarms`, `--max-delay`,
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
