//! CPU billing: what tick sampling charges a process versus what it really
//! ran — Etsion, Tsafrir & Feitelson (2003) §4, Table 3 and Figure 4.
//!
//! The precise run time of a process is the sum of its effective quanta in
//! the scheduler trace (`crate::quanta`). Tick sampling charges a whole
//! tick to whichever task is running when the tick interrupt fires; the
//! trace sees those interrupts (the tick's `hrtimer_expire_entry`, recorded
//! with the interrupted task's pid), so the ticks each quantum was charged
//! are counted, not guessed. From them:
//! - **billing ratio** = ticks charged × tick length / precise run time;
//! - **missed quanta** = the share of quanta that no tick charged at all.
//!
//! Beside them, what the kernel reports today: `/proc/PID/stat`
//! utime+stime (USER_HZ ticks) and `/proc/PID/schedstat` (ns). On a kernel
//! built with CONFIG_TICK_CPU_ACCOUNTING the per-tick samples are still
//! what decides the user/system split, but `cputime_adjust()` scales
//! utime+stime so their sum equals the precise `sum_exec_runtime`: the
//! total is right, the split is sampled. [`KernelAccounting`] reads which
//! scheme this kernel was built with and says so.
//!
//! # RT contract
//! Pure arithmetic and `/proc` reads after the run; nothing here is RT code.

use crate::error::{Error, ErrorKind, Result};
use serde::Serialize;

/// A paper figure at 100 Hz and 1000 Hz.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperPair {
    /// At 100 Hz.
    pub hz100: f64,
    /// At 1000 Hz.
    pub hz1000: f64,
}

/// One row of the paper's Table 3.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperBilling {
    /// Application, as the paper names it.
    pub application: &'static str,
    /// Billing ratio (billed / consumed).
    pub billing_ratio: PaperPair,
    /// Quanta not billed at all, percent.
    pub missed_percent: PaperPair,
}

/// Etsion, Tsafrir & Feitelson (2003), Table 3 "Scheduler billing success
/// rate" (Linux 2.4.8, Pentium III 664 MHz). The X server row is measured
/// while running Xine.
pub const PAPER_TABLE3: [PaperBilling; 6] = [
    PaperBilling {
        application: "Emacs",
        billing_ratio: PaperPair {
            hz100: 1.0746,
            hz1000: 0.9468,
        },
        missed_percent: PaperPair {
            hz100: 95.96,
            hz1000: 73.42,
        },
    },
    PaperBilling {
        application: "Xine",
        billing_ratio: PaperPair {
            hz100: 1.2750,
            hz1000: 1.0249,
        },
        missed_percent: PaperPair {
            hz100: 89.46,
            hz1000: 74.81,
        },
    },
    PaperBilling {
        application: "Quake",
        billing_ratio: PaperPair {
            hz100: 1.0310,
            hz1000: 1.0337,
        },
        missed_percent: PaperPair {
            hz100: 54.17,
            hz1000: 23.23,
        },
    },
    PaperBilling {
        application: "X Server",
        billing_ratio: PaperPair {
            hz100: 0.0202,
            hz1000: 0.9319,
        },
        missed_percent: PaperPair {
            hz100: 99.43,
            hz1000: 64.05,
        },
    },
    PaperBilling {
        application: "CPU-bound",
        billing_ratio: PaperPair {
            hz100: 1.0071,
            hz1000: 1.0043,
        },
        missed_percent: PaperPair {
            hz100: 7.86,
            hz1000: 7.83,
        },
    },
    PaperBilling {
        application: "CPU+Quake",
        billing_ratio: PaperPair {
            hz100: 1.0333,
            hz1000: 1.0390,
        },
        missed_percent: PaperPair {
            hz100: 26.71,
            hz1000: 2.36,
        },
    },
];

/// The paper's Table 3 row for `application` (`Emacs`, `Xine`, `X Server`, …).
pub fn paper_row(application: &str) -> Option<&'static PaperBilling> {
    PAPER_TABLE3.iter().find(|r| r.application == application)
}

/// One effective quantum as billing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QuantumBill {
    /// From scheduled in to scheduled out, ns.
    pub duration_ns: u64,
    /// Tick interrupts that fired while it ran (each charged a whole tick).
    pub ticks: u32,
}

/// Accounting the kernel reports for a process, as a difference over the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ProcAccounting {
    /// utime from `/proc/PID/stat` (or rusage), USER_HZ ticks.
    pub utime_ticks: u64,
    /// stime, USER_HZ ticks.
    pub stime_ticks: u64,
    /// `sum_exec_runtime` from `/proc/PID/schedstat`, ns, when present.
    pub schedstat_ns: Option<u64>,
}

impl ProcAccounting {
    /// `self − earlier`, field by field (saturating).
    pub fn since(&self, earlier: &ProcAccounting) -> ProcAccounting {
        ProcAccounting {
            utime_ticks: self.utime_ticks.saturating_sub(earlier.utime_ticks),
            stime_ticks: self.stime_ticks.saturating_sub(earlier.stime_ticks),
            schedstat_ns: match (self.schedstat_ns, earlier.schedstat_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                (Some(a), None) => Some(a),
                _ => None,
            },
        }
    }

    /// Reads `/proc/<task>/stat` and `/proc/<task>/schedstat`, where `task`
    /// is `PID`, `self/task/TID` or `PID/task/TID`.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the stat file cannot be read or parsed (the
    /// task exited).
    pub fn read(task: &str) -> Result<ProcAccounting> {
        let stat = std::fs::read_to_string(format!("/proc/{task}/stat"))
            .map_err(|e| Error::new(ErrorKind::Io, format!("/proc/{task}/stat: {e}")))?;
        let (utime_ticks, stime_ticks) = parse_stat_times(&stat).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("/proc/{task}/stat: unexpected format"),
            )
        })?;
        let schedstat_ns = std::fs::read_to_string(format!("/proc/{task}/schedstat"))
            .ok()
            .and_then(|s| parse_schedstat(&s));
        Ok(ProcAccounting {
            utime_ticks,
            stime_ticks,
            schedstat_ns,
        })
    }
}

/// utime and stime (fields 14 and 15) of a `/proc/PID/stat` line. The
/// command name in parentheses may hold spaces and parentheses, so fields
/// are counted from the last `)`.
pub fn parse_stat_times(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After ")": state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15)
    let utime = f.nth(11)?.parse().ok()?;
    let stime = f.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The first field of `/proc/PID/schedstat`: time on CPU, ns.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// USER_HZ: the unit of utime/stime in `/proc` (`sysconf(_SC_CLK_TCK)`).
pub fn user_hz() -> u64 {
    firmtime_rt::system::user_hz()
}

/// Table 3 for one process, plus what `/proc` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BillingRow {
    /// Precise run time: the sum of the effective quanta in the trace, ns.
    pub runtime_ns: u64,
    /// Effective quanta.
    pub quanta: u64,
    /// Tick interrupts that charged this process.
    pub ticks: u64,
    /// Length of one tick, ns (1/CONFIG_HZ).
    pub tick_ns: u64,
    /// `ticks × tick_ns`: what tick sampling charged.
    pub billed_ns: u64,
    /// `billed_ns / runtime_ns` (the paper's billing ratio); None with no run time.
    pub billing_ratio: Option<f64>,
    /// Quanta charged no tick at all.
    pub missed_quanta: u64,
    /// `100 × missed_quanta / quanta` (the paper's "missed quanta"); None with no quanta.
    pub missed_percent: Option<f64>,
    /// What `/proc` reported over the run, when readable.
    pub proc: Option<ProcBilling>,
}

/// What `/proc` reported for the process over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProcBilling {
    /// The raw differences read.
    pub accounting: ProcAccounting,
    /// USER_HZ used to convert ticks to ns.
    pub user_hz: u64,
    /// (utime + stime) in ns.
    pub stat_ns: u64,
    /// `stat_ns / runtime_ns`: near 1 when the kernel scales utime+stime to
    /// the precise run time (cputime_adjust), whatever the tick sampling saw.
    pub stat_ratio: Option<f64>,
    /// `schedstat_ns / runtime_ns`.
    pub schedstat_ratio: Option<f64>,
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

impl BillingRow {
    /// Computes the row from the process's quanta, the tick length and,
    /// optionally, what `/proc` reported over the same run.
    pub fn compute(
        quanta: &[QuantumBill],
        tick_ns: u64,
        proc: Option<(ProcAccounting, u64)>,
    ) -> BillingRow {
        let runtime_ns: u64 = quanta.iter().map(|q| q.duration_ns).sum();
        let ticks: u64 = quanta.iter().map(|q| u64::from(q.ticks)).sum();
        let missed_quanta = quanta.iter().filter(|q| q.ticks == 0).count() as u64;
        let n = quanta.len() as u64;
        let billed_ns = ticks * tick_ns;
        BillingRow {
            runtime_ns,
            quanta: n,
            ticks,
            tick_ns,
            billed_ns,
            billing_ratio: ratio(billed_ns, runtime_ns),
            missed_quanta,
            missed_percent: (n > 0).then(|| 100.0 * missed_quanta as f64 / n as f64),
            proc: proc.map(|(acc, user_hz)| {
                let user_hz = user_hz.max(1);
                let stat_ns = (acc.utime_ticks + acc.stime_ticks) * (1_000_000_000 / user_hz);
                ProcBilling {
                    accounting: acc,
                    user_hz,
                    stat_ns,
                    stat_ratio: ratio(stat_ns, runtime_ns),
                    schedstat_ratio: acc.schedstat_ns.and_then(|s| ratio(s, runtime_ns)),
                }
            }),
        }
    }
}

/// One bin of the paper's Figure 4: quanta of a length band and the ticks they were charged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fig4Bin {
    /// Lower edge of the band, in ticks (bands are 1/10 tick wide).
    pub quantum_ticks: f64,
    /// Quanta in the band.
    pub quanta: u64,
    /// Mean ticks charged to them (the optimum is the band's own length).
    pub mean_billed_ticks: f64,
    /// Quanta in the band charged no tick.
    pub unbilled: u64,
}

/// Figure 4's data: quanta binned by length (tenths of a tick, up to
/// `max_ticks`; longer quanta fall in the last band) with the ticks charged.
pub fn fig4(quanta: &[QuantumBill], tick_ns: u64, max_ticks: u32) -> Vec<Fig4Bin> {
    let bands = (max_ticks.max(1) * 10) as usize;
    let mut n = vec![0u64; bands];
    let mut billed = vec![0u64; bands];
    let mut unbilled = vec![0u64; bands];
    for q in quanta {
        let b = ((q.duration_ns * 10) / tick_ns.max(1)).min(bands as u64 - 1) as usize;
        n[b] += 1;
        billed[b] += u64::from(q.ticks);
        if q.ticks == 0 {
            unbilled[b] += 1;
        }
    }
    (0..bands)
        .filter(|&b| n[b] > 0)
        .map(|b| Fig4Bin {
            quantum_ticks: b as f64 / 10.0,
            quanta: n[b],
            mean_billed_ticks: billed[b] as f64 / n[b] as f64,
            unbilled: unbilled[b],
        })
        .collect()
}

/// Which CPU-time accounting this kernel was built with, and what that means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelAccounting {
    /// CONFIG_HZ (tick rate), if the kernel config is readable.
    pub config_hz: Option<u32>,
    /// USER_HZ, the unit of `/proc` utime/stime.
    pub user_hz: u64,
    /// CONFIG_TICK_CPU_ACCOUNTING=y.
    pub tick_cpu_accounting: Option<bool>,
    /// CONFIG_VIRT_CPU_ACCOUNTING_GEN=y (precise, at kernel entry/exit; nohz_full).
    pub virt_cpu_accounting_gen: Option<bool>,
    /// CONFIG_IRQ_TIME_ACCOUNTING=y (irq time kept out of tasks' time).
    pub irq_time_accounting: Option<bool>,
    /// Where the config was read from, if anywhere.
    pub config_source: Option<String>,
    /// What this kernel bills and why, in plain words.
    pub explanation: String,
}

impl KernelAccounting {
    /// Reads the running kernel's config (`/proc/config.gz` or `/boot/config-*`).
    pub fn current() -> KernelAccounting {
        let release = firmtime_rt::system::SystemInfo::collect().kernel_release;
        match firmtime_rt::system::read_kernel_config(&release) {
            Some((src, cfg)) => {
                let yes = |k: &str| Some(cfg.get(k).is_some_and(|v| v == "y"));
                Self::from_flags(
                    firmtime_rt::system::config_hz(&cfg),
                    user_hz(),
                    yes("CONFIG_TICK_CPU_ACCOUNTING"),
                    yes("CONFIG_VIRT_CPU_ACCOUNTING_GEN"),
                    yes("CONFIG_IRQ_TIME_ACCOUNTING"),
                    Some(src),
                )
            }
            None => Self::from_flags(None, user_hz(), None, None, None, None),
        }
    }

    /// Builds the explanation from the config flags.
    pub fn from_flags(
        config_hz: Option<u32>,
        user_hz: u64,
        tick: Option<bool>,
        virt_gen: Option<bool>,
        irq_time: Option<bool>,
        config_source: Option<String>,
    ) -> KernelAccounting {
        let hz = config_hz
            .map(|h| format!("{h} Hz"))
            .unwrap_or_else(|| "CONFIG_HZ (unknown)".into());
        let scheme = match (tick, virt_gen) {
            (_, Some(true)) => format!(
                "CONFIG_VIRT_CPU_ACCOUNTING_GEN: user/system time is measured at kernel entry and \
                 exit on nohz_full CPUs (elsewhere it is still sampled by the {hz} tick)"
            ),
            (Some(true), _) => format!(
                "CONFIG_TICK_CPU_ACCOUNTING: every tick ({hz}) charges a whole tick to the task \
                 it interrupts, as user or system time — the sampling the paper measured"
            ),
            _ => "the kernel config is not readable, so the accounting scheme is unknown".into(),
        };
        let irq = match irq_time {
            Some(true) => " IRQ_TIME_ACCOUNTING keeps interrupt time out of tasks' time.",
            Some(false) => {
                " Without IRQ_TIME_ACCOUNTING, interrupt time is charged to the interrupted task."
            }
            None => "",
        };
        let explanation = format!(
            "This kernel bills with {scheme}. The scheduler itself no longer uses those samples: \
             CFS/EEVDF charges sum_exec_runtime, read from the clock at every switch (the \
             precise run time in /proc/PID/schedstat). /proc/PID/stat and getrusage report \
             utime+stime scaled by cputime_adjust() so that their sum equals sum_exec_runtime: \
             the total is precise, only the user/system split comes from the tick samples. The \
             tick-sampled billing below is what the samples alone charge.{irq}"
        );
        KernelAccounting {
            config_hz,
            user_hz,
            tick_cpu_accounting: tick,
            virt_cpu_accounting_gen: virt_gen,
            irq_time_accounting: irq_time,
            config_source,
            explanation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_skip_a_comm_with_spaces_and_parens() {
        let s = "42 (a b) c)) S 1 42 42 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 10 0 0";
        assert_eq!(parse_stat_times(s), Some((17, 5)));
        assert_eq!(parse_schedstat("123456 789 3\n"), Some(123_456));
    }
}
