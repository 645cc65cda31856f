//! Finney (2001): Table 1 (successive clock reads) and "Process suspension"
//! (sleeping until a deadline).

use super::{skipped, skipped_cells, table, thousands, us};
use crate::clockread::ClockResult;
use crate::measure::Cell;
use std::fmt::Write as _;

/// Finney (2001) Table 1 beside this machine's gaps between successive clock reads.
pub fn clock_section(r: &ClockResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Successive clock reads (Finney 2001, Table 1)\n\n\
         {} reads of `{}` per condition; gaps between successive reads in µs. \
         The paper: 350 MHz Pentium II, Linux 2.2.12, `gettimeofday`, load = 3 \
         processes doing arithmetic. Here the load is {} CPU hogs.\n",
        thousands(r.calls as i64),
        r.clock.name(),
        r.hogs
    );
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            let paper = |f: fn(&crate::clockread::PaperRow) -> i64| {
                c.paper.as_ref().map_or("—".into(), |p| us(Some(f(p))))
            };
            let mut row = vec![
                c.label.clone(),
                paper(|p| p.mean_ns),
                paper(|p| p.max_ns),
                paper(|p| p.sd_ns),
            ];
            match &c.result {
                Cell::Measured(m) => row.extend([
                    us(m.summary.mean_ns),
                    us(m.summary.max_ns),
                    us(m.summary.sd_ns),
                    us(m.summary.p99_9_ns),
                ]),
                Cell::Skipped { reason } => row.extend(skipped_cells(reason, 3)),
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Condition",
            "paper mean",
            "paper max",
            "paper sd",
            "mean",
            "max",
            "sd",
            "p99.9",
        ],
        &rows,
    ));
    s
}

/// Finney (2001) "Process suspension" beside this machine: overshoot of each
/// sleep mechanism at each interval, per condition.
pub fn sleep_section(r: &crate::suspend::SleepResult) -> String {
    use crate::suspend::{PAPER_NANOSLEEP_NORMAL_MIN_NS, PAPER_RTC_MIN_NS, PAPER_SETITIMER_MIN_NS};
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Sleeping until a deadline (Finney 2001, \"Process suspension\")\n\n\
         Overshoot = wake time − deadline, median / 99th percentile in µs, {} samples \
         per cell. Default timer slack of a normal thread here: {}. The paper (Linux 2.2, \
         HZ=100): `setitimer` no finer than {} ms, `nanosleep` {}–20 ms for normal \
         processes, `/dev/rtc` down to {} ms.\n",
        r.config.samples,
        r.default_timer_slack_ns
            .map_or("unknown".into(), |n| format!("{} µs", us(Some(n as i64)))),
        PAPER_SETITIMER_MIN_NS / 1_000_000,
        PAPER_NANOSLEEP_NORMAL_MIN_NS / 1_000_000,
        PAPER_RTC_MIN_NS as f64 / 1e6,
    );
    let intervals = &r.config.intervals_ns;
    let mut head: Vec<String> = vec!["Mechanism".into()];
    head.extend(
        intervals
            .iter()
            .map(|i| firmtime_rt::units::format_ns(*i as f64)),
    );
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    for (label, cond) in &r.conditions {
        match cond {
            Cell::Skipped { reason } => {
                let _ = writeln!(s, "### {label}\n\n{}\n", skipped(reason));
            }
            Cell::Measured(c) => {
                let _ = writeln!(
                    s,
                    "### {label} (policy {}, timer slack {})\n",
                    c.conditions.obtained.policy,
                    firmtime_rt::units::format_ns(c.timer_slack_ns as f64)
                );
                let mut rows: Vec<Vec<String>> = Vec::new();
                let mut last_skip: Option<&str> = None;
                for cell in &c.cells {
                    let name = cell.mechanism.to_string();
                    if rows.last().map(|r| &r[0]) != Some(&name) {
                        rows.push(vec![name]);
                        last_skip = None;
                    }
                    // A mechanism skipped for one reason says it once, not per interval.
                    let v = match &cell.cell {
                        Cell::Measured(m) => {
                            format!("{} / {}", us(m.overshoot.p50_ns), us(m.overshoot.p99_ns))
                        }
                        Cell::Skipped { reason } if last_skip == Some(reason.as_str()) => {
                            "″".into()
                        }
                        Cell::Skipped { reason } => {
                            last_skip = Some(reason.as_str());
                            skipped(reason)
                        }
                    };
                    if let Some(row) = rows.last_mut() {
                        row.push(v);
                    }
                }
                s.push_str(&table(&head_ref, &rows));
                s.push('\n');
            }
        }
    }
    s
}
