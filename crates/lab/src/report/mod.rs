//! `report.md`: each paper's table beside this machine's numbers, and a
//! plain-language verdict.
//!
//! Pure rendering: every function takes results and returns Markdown text.
//! One file per paper: `finney.rs` (Finney 2001), `varoquaux.rs` (Varoquaux
//! 2006 and cyclictest), `etsion.rs` and `trace.rs` (Etsion et al. 2003), and
//! `since2003.rs` (what changed since then). This module holds the verdict
//! and the table and number helpers they share; every section is
//! re-exported here (`report::clock_section`, …).

mod etsion;
mod finney;
mod quanta;
mod since2003;
mod varoquaux;
mod verdict;

pub use etsion::{
    frames_section, frames_target, interrupts_section, overhead_section, tails_section,
};
pub use finney::{clock_section, sleep_section};
pub use quanta::{trace_overhead_section, trace_section};
pub use since2003::{
    since_2003_section, FramesFigures, InterruptFigures, Since2003, TailsFigures, TraceFigures,
};
pub use varoquaux::{cyclic_section, CyclicRow};
pub use verdict::{verdict, Answer, Bar, Condition, Verdict};

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

/// A skipped measurement's cells in a table row: the reason, then `blanks`
/// empty cells for the other columns a measurement would fill.
fn skipped_cells(reason: &str, blanks: usize) -> impl Iterator<Item = String> {
    std::iter::once(skipped(reason)).chain((0..blanks).map(|_| String::new()))
}

use firmtime_trace::explain::Explanation;

/// The report's "Why the outliers were late" part: per condition the
/// coverage, the summary by cause and the five latest wake-ups with their
/// cause; or, when nothing was explained, why not.
pub fn explain_section(runs: &[(&str, &Explanation)], not_explained: Option<&str>) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("\n### Why the outliers were late\n\n");
    if runs.is_empty() {
        let _ = writeln!(
            s,
            "Not explained: {}.",
            not_explained.unwrap_or("no run was traced")
        );
        return s;
    }
    s.push_str(
        "Each run was traced (tracefs: scheduler, interrupts, softirqs, idle states, the \
         thread's page faults); each wake-up above the thread's p99.9, each that missed a \
         deadline and each thread's 10 worst were attributed to what ran on its CPU between \
         deadline and wake-up (`explain` in the JSON, docs/LAB-FORMATS.md).\n\n",
    );
    for (label, e) in runs {
        let _ = writeln!(
            s,
            "- **{label}**: {}; {}. {}.",
            e.summary(),
            e.coverage(),
            e.events_line("--explain-max-events")
        );
        let processes = e.process_line();
        if !processes.is_empty() {
            let _ = writeln!(s, "  Tasks by process: {processes}.");
        }
        if let Some(stacks) = e.stacks_line() {
            let _ = writeln!(s, "  {stacks}.");
        }
    }
    let mut rows = Vec::new();
    for (label, e) in runs {
        for o in e.outliers.iter().take(5) {
            rows.push(vec![
                (*label).to_string(),
                o.cpu.to_string(),
                us(Some(o.latency_ns)),
                o.missed.to_string(),
                o.cause.category.name().to_string(),
                o.cause.detail.replace('|', "/"),
                parts_and_stack(&o.cause.breakdown).replace('|', "/"),
            ]);
        }
    }
    s.push('\n');
    s.push_str(&table(
        &[
            "Condition",
            "CPU",
            "latency µs",
            "missed",
            "cause",
            "what",
            "largest parts",
        ],
        &rows,
    ));
    s
}

/// The largest parts of a breakdown, and with `--kernel-stacks` the top
/// frames of the largest part's kernel stack.
fn parts_and_stack(parts: &[firmtime_trace::explain::Share]) -> String {
    let words = firmtime_trace::explain::breakdown::largest_words(
        parts,
        firmtime_trace::explain::PARTS_SHOWN,
    );
    match firmtime_trace::explain::stacks::largest_stack_words(parts) {
        Some(st) => format!("{words}; {st}"),
        None => words,
    }
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

    fn condition(
        label: &str,
        realtime: bool,
        p99_9_ns: i64,
        max_ns: i64,
        missed: u64,
    ) -> Condition {
        let mut samples: Vec<i64> = vec![10_000; 999];
        samples.push(p99_9_ns);
        let mut summary = crate::stats::summarize(&samples, missed);
        summary.p99_9_ns = Some(p99_9_ns);
        summary.max_ns = Some(max_ns);
        Condition {
            label: label.into(),
            realtime,
            summary,
            causes: Vec::new(),
            outliers: 0,
            steal_ns: 0,
        }
    }

    fn doctor() -> crate::doctor::Report {
        use crate::doctor::{Check, Status};
        let check = |id: &str, status: Status, fix: &str| Check {
            id: id.into(),
            title: id.into(),
            status,
            value: "v".into(),
            fix: fix.into(),
        };
        crate::doctor::Report {
            checks: vec![
                check("a", Status::Pass, ""),
                check("b", Status::Warn, "do b"),
                check("c", Status::Fail, "do c"),
                check("d", Status::Unknown, ""),
            ],
            system: firmtime_rt::system::SystemInfo::collect(),
        }
    }

    #[test]
    fn verdict_says_yes_only_when_every_wakeup_was_within_a_millisecond() {
        let clean = condition("SCHED_FIFO, stress", true, 400_000, 900_000, 0);
        let v = verdict(&[clean], &doctor());
        assert!(v.headline.starts_with("Yes: "), "{}", v.headline);
        // The condition, then what it means for an experiment.
        assert_eq!(v.findings.len(), 2);
        assert!(v.advice.is_empty(), "{:?}", v.advice);
        assert_eq!(v.other_advice, ["b (v): do b", "c (v): do c"]);
    }

    #[test]
    fn verdict_names_rare_exceptions_and_failures() {
        let spiky = condition("SCHED_FIFO, stress", true, 400_000, 2_950_000, 3);
        let v = verdict(&[spiky], &doctor());
        assert!(
            v.headline.starts_with("Yes, with rare exceptions"),
            "{}",
            v.headline
        );
        assert!(v.headline.contains("2.95 ms"), "{}", v.headline);

        let late = condition("SCHED_FIFO, stress", true, 1_500_000, 3_000_000, 9);
        assert!(verdict(&[late], &doctor())
            .headline
            .starts_with("Not reliably"));
        let other = condition("SCHED_OTHER, stress", false, 400_000, 900_000, 0);
        assert!(verdict(&[other], &doctor())
            .headline
            .starts_with("Undetermined"));
    }

    /// `lab all` exited 0 whatever its verdict: the answer behind each
    /// headline sets the exit status (0 meets the bar, 1 not, 2 unmeasured).
    #[test]
    fn verdict_answer_follows_the_headline() {
        let cases = [
            (
                condition("SCHED_FIFO, stress", true, 400_000, 900_000, 0),
                "Yes: ",
                Answer::Meets,
                0,
            ),
            (
                condition("SCHED_FIFO, stress", true, 400_000, 2_950_000, 3),
                "Yes, with rare exceptions",
                Answer::Meets,
                0,
            ),
            (
                condition("SCHED_FIFO, stress", true, 1_500_000, 3_000_000, 9),
                "Not reliably",
                Answer::Misses,
                1,
            ),
            (
                condition("SCHED_OTHER, stress", false, 1_500_000, 3_000_000, 9),
                "Undetermined",
                Answer::Unmeasured,
                2,
            ),
        ];
        for (c, start, answer, code) in cases {
            let v = verdict(&[c], &doctor());
            assert!(v.headline.starts_with(start), "{}", v.headline);
            assert_eq!(v.answer, answer, "{}", v.headline);
            assert_eq!(v.answer.code(), code);
        }
        // One real-time condition late is enough for "Not reliably".
        let v = verdict(
            &[
                condition("SCHED_FIFO 80, idle", true, 60_000, 900_000, 0),
                condition("SCHED_FIFO 80, stress", true, 1_000_000, 3_000_000, 0),
            ],
            &doctor(),
        );
        assert_eq!(v.answer, Answer::Misses, "{}", v.headline);
    }

    #[test]
    fn an_incomplete_run_passes_nothing_but_keeps_a_miss() {
        for incomplete in [false, true] {
            assert_eq!(Answer::Misses.unless_incomplete(incomplete), Answer::Misses);
            assert_eq!(
                Answer::Unmeasured.unless_incomplete(incomplete),
                Answer::Unmeasured
            );
        }
        assert_eq!(Answer::Meets.unless_incomplete(false), Answer::Meets);
        assert_eq!(Answer::Meets.unless_incomplete(true), Answer::Unmeasured);
    }

    #[test]
    fn bar_judges_the_worst_wakeup_and_the_missed_deadlines() {
        let s = condition("x", true, 400_000, 2_950_000, 3).summary;
        let bar = |lat: Option<i64>, missed: Option<u64>| Bar {
            max_latency_ns: lat,
            max_missed: missed,
        };
        assert_eq!(Bar::default().judge(&s), Answer::Meets);
        assert_eq!(bar(Some(2_950_000), None).judge(&s), Answer::Meets);
        assert_eq!(bar(Some(2_949_999), None).judge(&s), Answer::Misses);
        assert_eq!(bar(None, Some(3)).judge(&s), Answer::Meets);
        assert_eq!(bar(None, Some(2)).judge(&s), Answer::Misses);
        assert_eq!(bar(Some(3_000_000), Some(2)).judge(&s), Answer::Misses);
        let none = crate::stats::Summary::empty(0);
        assert_eq!(bar(Some(1), Some(0)).judge(&none), Answer::Unmeasured);
        assert_eq!(Bar::default().judge(&none), Answer::Unmeasured);
        // Every deadline missed: measured, and a miss under either limit.
        let all_missed = crate::stats::Summary::empty(5);
        assert_eq!(bar(None, Some(4)).judge(&all_missed), Answer::Misses);
        assert_eq!(bar(Some(1_000), None).judge(&all_missed), Answer::Misses);
        assert_eq!(Bar::default().judge(&all_missed), Answer::Meets);
    }

    #[test]
    fn verdict_names_an_idle_run_that_missed_even_when_stress_was_clean() {
        let idle = condition("SCHED_FIFO 80, idle", true, 60_000, 6_600_000, 27);
        let stress = condition("SCHED_FIFO 80, stress", true, 400_000, 900_000, 0);
        let v = verdict(&[idle, stress], &doctor());
        assert!(
            v.headline.starts_with("Yes, with rare exceptions")
                && v.headline
                    .contains("SCHED_FIFO 80, idle missed 27 deadlines (worst 6.60 ms)"),
            "{}",
            v.headline
        );
        assert_eq!(v.findings.len(), 3);
    }

    #[test]
    fn a_skipped_cell_fills_its_row_with_the_reason_then_blanks() {
        let row: Vec<String> = skipped_cells("no /dev/rtc | not root", 2).collect();
        assert_eq!(row, ["skipped: no /dev/rtc / not root", "", ""]);
    }

    #[test]
    fn tables_have_a_separator_per_column() {
        let t = table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
