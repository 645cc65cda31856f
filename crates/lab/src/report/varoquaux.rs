//! Varoquaux (2006) and cyclictest: periodic wake-up latency.

use super::{table, thousands, us};
use std::fmt::Write as _;

/// One condition of the periodic wake-up measurement, for the report.
#[derive(Debug)]
pub struct CyclicRow<'a> {
    /// Short name, e.g. `SCHED_FIFO, stress`.
    pub label: String,
    /// The measurement.
    pub result: &'a crate::cyclic::CyclicResult,
}

/// Varoquaux (2006) and cyclictest beside this machine: periodic wake-up
/// latency per condition.
pub fn cyclic_section(rows: &[CyclicRow<'_>], plots: &[(&str, &str)]) -> String {
    use crate::cyclic::{PAPER_MEAN_LATENCY_NS, PAPER_RT_PREEMPT_LATENCY_NS};
    let mut s = String::new();
    let interval = rows
        .first()
        .map_or(1_000_000, |r| r.result.config.interval_ns);
    let _ = writeln!(
        s,
        "## Periodic wake-ups (Varoquaux 2006; cyclictest)\n\n\
         A thread per CPU wakes every {} on absolute deadlines; latency = wake − \
         deadline in µs. Deadlines that passed while a thread was late are counted as \
         missed, never skipped. Varoquaux (Linux 2.6.18, RTC interrupts at 1 kHz, \
         his stress script) saw about {} ms mean latency and jitter up to half a \
         period; PREEMPT_RT was reported at {} µs.\n",
        firmtime_rt::units::format_ns(interval as f64),
        PAPER_MEAN_LATENCY_NS as f64 / 1e6,
        PAPER_RT_PREEMPT_LATENCY_NS / 1000,
    );
    let t: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let c = &r.result.combined;
            vec![
                r.label.clone(),
                thousands(c.samples as i64),
                us(c.p50_ns),
                us(c.p99_ns),
                us(c.p99_9_ns),
                us(c.max_ns),
                thousands(c.missed as i64),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Condition",
            "wake-ups",
            "p50",
            "p99",
            "p99.9",
            "max",
            "missed",
        ],
        &t,
    ));
    s.push('\n');
    for (file, caption) in plots {
        let _ = writeln!(s, "![{caption}]({file})\n");
    }
    s
}
