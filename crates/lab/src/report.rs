//! `report.md`: each paper's table beside this machine's numbers, and a
//! plain-language verdict.
//!
//! Pure rendering: every function takes results and returns Markdown text.

use crate::clockread::ClockResult;
use crate::measure::Cell;
use crate::overhead::{OverheadResult, ETSION_TABLE2};
use crate::stats::Summary;
use crate::tails::TailsResult;
use std::fmt::Write as _;

/// A Markdown table from a header and rows of cells.
pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", head.iter().map(|_| "---|").collect::<String>());
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// Nanoseconds as microseconds with a precision that suits the size:
/// `0.062`, `12.4`, `1,234`. `—` for a missing value.
pub fn us(ns: Option<i64>) -> String {
    match ns {
        None => "—".into(),
        Some(ns) => us_f(ns as f64),
    }
}

/// Like [`us`] for a fractional number of nanoseconds.
pub fn us_f(ns: f64) -> String {
    let u = ns / 1000.0;
    let a = u.abs();
    if a >= 1000.0 {
        thousands(u.round() as i64)
    } else if a >= 100.0 {
        format!("{u:.0}")
    } else if a >= 10.0 {
        format!("{u:.1}")
    } else if a >= 1.0 {
        format!("{u:.2}")
    } else {
        format!("{u:.3}")
    }
}

/// An integer with thousands separators: `840,019`.
pub fn thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// "skipped: reason" for a skipped cell, for tables.
fn skipped(reason: &str) -> String {
    format!("skipped: {}", reason.replace('|', "/"))
}

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
                Cell::Skipped { reason } => {
                    row.extend([skipped(reason), String::new(), String::new(), String::new()])
                }
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

/// Etsion et al. (2003) Table 2 beside this machine's basic costs.
pub fn overhead_section(r: &OverheadResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Basic costs (Etsion et al. 2003, Table 2)\n\n\
         Medians over repetitions; cycles from the calibrated TSC where it is invariant.\n"
    );
    let cost = |c: &Cell<crate::overhead::Cost>| match c {
        Cell::Measured(c) => {
            let cyc = c
                .cycles
                .as_ref()
                .map_or(String::new(), |y| format!(" ({:.0} cycles)", y.median));
            format!("{}{cyc}", us_f(c.ns.median))
        }
        Cell::Skipped { reason } => skipped(reason),
    };
    let cs = |c: &Cell<crate::overhead::ContextSwitch>| match c {
        Cell::Measured(c) => cost(&Cell::Measured(c.cost.clone())),
        Cell::Skipped { reason } => skipped(reason),
    };
    let mut rows = vec![
        vec![
            "context switch, same CPU".into(),
            cs(&r.context_switch_same_cpu),
        ],
        vec![
            "context switch, across CPUs".into(),
            cs(&r.context_switch_cross_cpu),
        ],
        vec!["trap (getpid)".into(), cost(&r.trap_getpid)],
        vec![
            "memcpy bandwidth".into(),
            match &r.memcpy {
                Cell::Measured(b) => format!("{:.0} MB/s", b.mb_per_s.median),
                Cell::Skipped { reason } => skipped(reason),
            },
        ],
    ];
    for c in &r.clock_reads {
        rows.push(vec![format!("read `{}`", c.clock.name()), cost(&c.result)]);
    }
    s.push_str(&table(&["This machine", "µs per operation"], &rows));
    s.push('\n');
    let paper: Vec<Vec<String>> = ETSION_TABLE2
        .iter()
        .map(|p| {
            vec![
                format!("{} ({} MHz)", p.processor, p.mhz),
                format!(
                    "{} ({} cycles)",
                    us(Some(p.context_switch_ns as i64)),
                    p.context_switch_cycles
                ),
                format!("{} ({} cycles)", us(Some(p.trap_ns as i64)), p.trap_cycles),
                format!("{} MB/s", p.memcpy_mb_per_s),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Paper (Linux 2.4)",
            "context switch µs",
            "trap µs",
            "memcpy",
        ],
        &paper,
    ));
    s
}

/// Etsion et al. (2003) Table 6 beside this machine's timer-signal latency tails.
pub fn tails_section(r: &TailsResult) -> String {
    let mut s = String::new();
    let k = &r.kernel;
    let _ = writeln!(
        s,
        "## Timer-signal delivery tails (Etsion et al. 2003, Table 6)\n\n\
         SCHED_RR processes setting alarms (BLK: no compute, N%: compute N % of \
         the time till the next alarm, CONT: compute continuously), all pinned to \
         CPU {}. This kernel: CONFIG_HZ {}, high-resolution timers {}, RR timeslice \
         {} ms. The paper's kernels had no high-resolution timers: alarms expired \
         on ticks, so its 100 Hz column is bounded below by 10 ms steps.\n",
        r.cpu,
        k.config_hz.map_or("unknown".into(), |h| h.to_string()),
        match k.high_res_timers {
            Some(true) => "active",
            Some(false) => "inactive",
            None => "unknown",
        },
        k.rr_timeslice_ms.map_or("?".into(), |t| t.to_string()),
    );
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            let mut row = vec![c.spec.type_label(), c.spec.number_label()];
            match &c.result {
                Cell::Measured(m) => {
                    let sm: &Summary = &m.summary;
                    row.extend([
                        us(sm.p90_ns),
                        us(sm.p95_ns),
                        us(sm.p99_ns),
                        us(sm.p99_9_ns),
                        us(sm.max_ns),
                    ]);
                }
                Cell::Skipped { reason } => {
                    row.push(skipped(reason));
                    row.extend((0..4).map(|_| String::new()));
                }
            }
            match &c.paper {
                Some(p) => row.extend([
                    format!(
                        "{} / {} / {}",
                        thousands(p.hz100.p90_us as i64),
                        thousands(p.hz100.p99_us as i64),
                        thousands(p.hz100.max_us as i64)
                    ),
                    format!(
                        "{} / {} / {}",
                        thousands(p.hz20000.p90_us as i64),
                        thousands(p.hz20000.p99_us as i64),
                        thousands(p.hz20000.max_us as i64)
                    ),
                ]),
                None => row.extend(["—".into(), "—".into()]),
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Type",
            "Number",
            "0.9",
            "0.95",
            "0.99",
            "0.999",
            "max",
            "paper @100Hz 0.9/0.99/max",
            "paper @20kHz 0.9/0.99/max",
        ],
        &rows,
    ));
    s.push_str("\nAll figures in µs.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_the_papers() {
        assert_eq!(thousands(840019), "840,019");
        assert_eq!(thousands(-1234), "-1,234");
        assert_eq!(thousands(12), "12");
        assert_eq!(us(Some(1_290)), "1.29");
        assert_eq!(us(Some(62)), "0.062");
        assert_eq!(us(Some(72_400)), "72.4");
        assert_eq!(us(Some(840_019_000)), "840,019");
        assert_eq!(us(None), "—");
    }

    #[test]
    fn tables_have_a_separator_per_column() {
        let t = table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
