//! Etsion et al. (2003) from a scheduler trace: Tables 3–5 (effective
//! quanta and tick billing) and the trace's own overhead (klogger, §2.1).

use super::{skipped_cells, table, thousands, us};
use crate::measure::Cell;
use std::fmt::Write as _;

/// Etsion et al. (2003) Tables 3–5 beside this machine: effective quanta and
/// tick billing of the paper's workloads, from a scheduler trace.
pub fn trace_section(r: &crate::quanta::TraceResult) -> String {
    let mut s = String::new();
    let k = &r.kernel;
    let _ = writeln!(
        s,
        "## Effective quanta and billing (Etsion et al. 2003, Tables 3–5)\n\n\
         sched_switch events traced for {} on kernel {}, HZ {}, clocksource {}, preempt {}. \
         Billing = tick-sampled CPU time ÷ traced run time; missed = quanta during which no \
         tick fell. {}\n",
        firmtime_rt::units::format_ns(r.duration_ns as f64),
        k.release,
        k.config_hz.map_or("unknown".into(), |h| h.to_string()),
        k.clocksource.as_deref().unwrap_or("unknown"),
        k.preempt_model,
        r.accounting.explanation,
    );
    let pair = |p: Option<&crate::billing::PaperPair>| {
        p.map_or("—".into(), |p| format!("{} / {}", p.hz100, p.hz1000))
    };
    let rows: Vec<Vec<String>> = r
        .apps
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                a.paper_application.clone().unwrap_or_default(),
                format!("{:.0}", a.quanta_per_s),
                pair(a.paper.table4.as_ref().map(|p| &p.quanta_per_s)),
                us(a.quantum.p50_ns),
                format!("{:.1} %", a.cpu_share * 100.0),
                a.billing
                    .billing_ratio
                    .map_or("—".into(), |b| format!("{b:.2}")),
                pair(a.paper.table3.as_ref().map(|p| &p.billing_ratio)),
                a.billing
                    .missed_percent
                    .map_or("—".into(), |m| format!("{m:.0} %")),
                pair(a.paper.table3.as_ref().map(|p| &p.missed_percent)),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Workload",
            "paper's application",
            "quanta/s",
            "paper 100 / 1000 Hz",
            "median quantum µs",
            "CPU share",
            "billing",
            "paper 100 / 1000 Hz",
            "missed",
            "paper 100 / 1000 Hz",
        ],
        &rows,
    ));
    s
}

/// The trace-overhead section (issue 8, acceptance figure 1): the sort
/// benchmark's throughput with the trace on versus off at each timer rate,
/// beside klogger's. `firmtime lab trace --overhead` prints the same text.
pub fn trace_overhead_section(r: &crate::quanta::overhead::OverheadResult) -> String {
    use crate::quanta::{OVERHEAD_TARGET_PERCENT, PAPER_KLOGGER_OVERHEAD_PERCENT};
    let mut s = String::new();
    let pct = |v: f64| format!("{v:.2} %");
    let _ = writeln!(
        s,
        "## Trace overhead (klogger, Etsion et al. 2003 §2.1)\n\n\
         Measured on {}. The sort benchmark ({} u32, {}) with the typist \
         and player beside it, the trace drainer and, per row, a SCHED_FIFO timer \
         thread waking at the extra rate, all pinned to CPU {}; {} pairs of {} slices \
         per row. Between slices the trace's events are enabled or disabled \
         (tracepoints patched out), in the order on/off, off/on, … Throughput = sorts \
         ÷ the time they took; lost = 1 − the median of the pairs' on/off ratios, \
         with its 95 % confidence interval. klogger's figures were for whole-kernel \
         clock rates of 100, 1000 and 20,000 Hz; here the kernel keeps its HZ and the \
         timer thread adds the interrupts.\n",
        r.kernel.describe(),
        thousands(r.sort_len as i64),
        if r.config.array_bytes.is_some() {
            "--array-size"
        } else {
            "half the L2"
        },
        r.cpu,
        r.config.pairs,
        firmtime_rt::units::format_ns(r.config.slice_ns as f64),
    );
    let rows: Vec<Vec<String>> = r
        .config
        .rates_hz
        .iter()
        .zip(&r.rates)
        .map(|(&hz, cell)| {
            let rate = if hz == 0 {
                "none (tick only)".to_string()
            } else {
                format!("{} Hz", thousands(i64::from(hz)))
            };
            // Tick only is compared with klogger at the paper's default clock, 100 Hz.
            let paper_hz = if hz == 0 { 100 } else { hz };
            let paper = PAPER_KLOGGER_OVERHEAD_PERCENT
                .iter()
                .find(|(h, _)| *h == paper_hz)
                .map_or("—".into(), |(h, p)| {
                    format!("{p} % at {} Hz", thousands(i64::from(*h)))
                });
            let mut row = vec![rate];
            match cell {
                Cell::Measured(m) => {
                    let ratios: Vec<f64> = m.pairs.iter().map(|p| p.ratio).collect();
                    let lo = ratios.iter().copied().reduce(f64::min);
                    let hi = ratios.iter().copied().reduce(f64::max);
                    row.extend([
                        format!("{} / {}", m.pairs.len(), r.config.pairs),
                        m.timer
                            .as_ref()
                            .map_or("—".into(), |t| format!("{:.0}", t.achieved_hz())),
                        format!(
                            "{}{}",
                            if m.dropped_events > 0 { "≥ " } else { "" },
                            thousands(m.events_per_s.round() as i64)
                        ),
                        match (m.cost_per_event_ns, m.overhead_ci95_percent) {
                            (Some(c), Some([lo, _])) if lo > 0.0 => {
                                format!("{}{c:.0}", if m.dropped_events > 0 { "≤ " } else { "" })
                            }
                            (Some(_), Some(_)) => "within noise".into(),
                            _ => "—".into(),
                        },
                        format!("{:.2} %", m.drainer_cpu_percent),
                        m.overhead_percent.map_or("—".into(), pct),
                        m.overhead_ci95_percent
                            .map_or("— (< 6 pairs)".into(), |[a, b]| {
                                format!("{} to {}", pct(a), pct(b))
                            }),
                        m.pooled_ratio
                            .map_or("—".into(), |p| pct((1.0 - p) * 100.0)),
                        match (lo, hi) {
                            (Some(lo), Some(hi)) => format!("{lo:.3}–{hi:.3}"),
                            _ => "—".into(),
                        },
                    ]);
                }
                Cell::Skipped { reason } => row.extend(skipped_cells(reason, 8)),
            }
            row.push(paper);
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Extra timer",
            "pairs",
            "wake-ups/s",
            "events/s",
            "ns lost per event",
            "drainer CPU",
            "throughput lost",
            "95 % interval",
            "pooled",
            "pair ratios",
            "klogger (paper)",
        ],
        &rows,
    ));
    for m in r.rates.iter().filter_map(Cell::measured) {
        if m.slice_ns > r.config.slice_ns {
            let _ = writeln!(
                s,
                "\nAt {} the slices were lengthened to {} so that about {} sorts fit in each.",
                if m.rate_hz == 0 {
                    "no extra timer".to_string()
                } else {
                    format!("{} Hz", thousands(i64::from(m.rate_hz)))
                },
                firmtime_rt::units::format_ns(m.slice_ns as f64),
                crate::quanta::overhead::MIN_SORTS_PER_SLICE
            );
        }
    }
    let dropped: u64 = r
        .rates
        .iter()
        .filter_map(|c| c.measured().map(|m| m.dropped_events))
        .sum();
    let _ = writeln!(
        s,
        "\nEvents the kernel lost: {}; decoded but not stored (store full): {}{}.",
        thousands(r.kernel_lost_events as i64),
        thousands(dropped as i64),
        if dropped > 0 {
            " — the kernel still recorded them (their cost is in the throughput), but \
             unstored events cannot be placed in slices, so events/s is a lower bound (≥) \
             and the cost per event an upper bound (≤)"
        } else {
            ""
        }
    );
    let base = r
        .rates
        .iter()
        .filter_map(Cell::measured)
        .find(|m| m.rate_hz == 0);
    let verdict = match base.and_then(|m| m.overhead_percent.map(|o| (o, m.overhead_ci95_percent)))
    {
        None => "the target is judged without an extra timer (rate 0), which has no \
                 complete pair here: nothing to judge."
            .to_string(),
        Some((_, None)) if base.is_some_and(|m| m.pairs.len() as u32 == r.config.pairs) => {
            format!(
                "nothing to judge: {} pairs were asked for (`--repeats`); an interval needs 6 or more.",
                r.config.pairs
            )
        }
        Some((_, None)) => format!(
            "nothing to judge: without an extra timer only {} of {} pairs were complete (a \
             pair counts when a sort finished inside both of its slices), too few for an \
             interval. The sorter got too little CPU: is something else running at a \
             real-time priority or loading CPU {}? Run again on a quiet machine, or with \
             a longer `--slice`.",
            base.map_or(0, |m| m.pairs.len()),
            r.config.pairs,
            r.cpu
        ),
        Some((o, Some([lo, hi]))) => match base.and_then(|m| m.within_target) {
            Some(true) => format!(
                "target met: the sort benchmark lost {} of its throughput to tracing{}, and \
                 the whole 95 % interval ({} to {}) lies within {OVERHEAD_TARGET_PERCENT} %.",
                pct(o),
                if o < 0.0 {
                    " (below zero: tracing cannot speed sorting up, so this is the noise)"
                } else {
                    ""
                },
                pct(lo),
                pct(hi)
            ),
            Some(false) => format!(
                "target NOT met: the sort benchmark lost {} of its throughput to tracing, and \
                 the whole 95 % interval ({} to {}) lies above {OVERHEAD_TARGET_PERCENT} %.",
                pct(o),
                pct(lo),
                pct(hi)
            ),
            None => format!(
                "undecided: the sort benchmark lost {} of its throughput to tracing, but the \
                 95 % interval ({} to {}) straddles {OVERHEAD_TARGET_PERCENT} %: run more \
                 pairs (`--repeats`), on a quieter machine.",
                pct(o),
                pct(lo),
                pct(hi)
            ),
        },
    };
    let stress: Vec<String> = r
        .rates
        .iter()
        .filter_map(Cell::measured)
        .filter(|m| m.rate_hz > 0)
        .filter_map(|m| {
            m.overhead_percent
                .map(|o| format!("{} at {} Hz", pct(o), thousands(i64::from(m.rate_hz))))
        })
        .collect();
    let verdict = if stress.is_empty() {
        verdict
    } else {
        format!(
            "{verdict} With an extra timer: {} lost. Each of its interrupts wakes a \
             thread, so it records about five events (interrupt, hrtimer, wake-up, two \
             switches) where klogger's faster clock woke no one: compare the events per \
             second and the cost per event, not the percentages, with the paper.",
            stress.join(", ")
        )
    };
    let _ = writeln!(s, "\n**Verdict:** {verdict}");
    s
}
