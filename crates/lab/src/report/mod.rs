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
mod since2003;
mod trace;
mod varoquaux;

pub use etsion::{
    frames_section, frames_target, interrupts_section, overhead_section, tails_section,
};
pub use finney::{clock_section, sleep_section};
pub use since2003::{
    since_2003_section, FramesFigures, InterruptFigures, Since2003, TailsFigures, TraceFigures,
};
pub use trace::{trace_overhead_section, trace_section};
pub use varoquaux::{cyclic_section, CyclicRow};

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

/// The plain-language answer to "can this machine do millisecond timing?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// One-line answer.
    pub headline: String,
    /// Supporting sentences, each with its figure.
    pub findings: Vec<String>,
    /// What to change, from the doctor's warnings and failures.
    pub advice: Vec<String>,
}

impl Verdict {
    /// Markdown for the top of the report.
    pub fn markdown(&self) -> String {
        let mut s = format!("## Verdict\n\n**{}**\n\n", self.headline);
        for f in &self.findings {
            let _ = writeln!(s, "- {f}");
        }
        if !self.advice.is_empty() {
            s.push_str("\nWhat to change:\n\n");
            for a in &self.advice {
                let _ = writeln!(s, "- {a}");
            }
        }
        s
    }
}

/// Judges the best real-time condition and the best non-real-time one of
/// the periodic wake-up runs against a millisecond: 99.9 % of wake-ups
/// within 1 ms of the deadline, and no missed deadline.
pub fn verdict(
    rt: Option<&CyclicRow<'_>>,
    other: Option<&CyclicRow<'_>>,
    doctor: &crate::doctor::Report,
) -> Verdict {
    const MS: i64 = 1_000_000;
    let mut findings = Vec::new();
    let ok = |r: &CyclicRow<'_>| {
        let c = &r.result.combined;
        c.samples > 0 && c.p99_9_ns.is_some_and(|p| p < MS)
    };
    let describe = |r: &CyclicRow<'_>| {
        let c = &r.result.combined;
        let causes = r
            .result
            .explain
            .as_ref()
            .map_or(String::new(), |e| format!(" Why: {}.", e.summary()));
        format!(
            "{}: 99 % of {} wake-ups within {} µs and 99.9 % within {} µs of the deadline; \
             worst {} µs; {} deadlines missed.{causes}",
            r.label,
            thousands(c.samples as i64),
            us(c.p99_ns),
            us(c.p99_9_ns),
            us(c.max_ns),
            thousands(c.missed as i64)
        )
    };
    if let Some(r) = rt {
        findings.push(describe(r));
    }
    if let Some(r) = other {
        findings.push(describe(r));
    }
    let headline = match (rt, other) {
        (Some(r), _) if ok(r) => {
            let worst = r.result.combined.max_ns.unwrap_or(0);
            if worst < MS && r.result.combined.missed == 0 {
                format!(
                    "Yes: millisecond timing works on this machine under {} — every wake-up in this run was within a millisecond.",
                    r.label
                )
            } else {
                format!(
                    "Yes, with rare exceptions: under {} 99.9 % of wake-ups were within a millisecond, but the worst was {:.2} ms — check for them in your data (self-checks) rather than assume they never happen.",
                    r.label,
                    worst as f64 / 1e6
                )
            }
        }
        (Some(r), _) => format!(
            "Not reliably: even under {} more than 0.1 % of wake-ups were a millisecond late or worse.",
            r.label
        ),
        (None, _) => "Undetermined: no real-time condition could be measured (see the skipped reasons).".into(),
    };
    // Ranked by the outliers each fix addresses, when the runs were explained.
    let explained: Vec<&[crate::explain::CauseCount]> = [rt, other]
        .into_iter()
        .flatten()
        .filter_map(|r| r.result.explain.as_ref().map(|e| e.by_cause.as_slice()))
        .collect();
    let causes = crate::explain::advice::merge(&explained);
    let advice = crate::explain::advice::lines(doctor, &causes, "this run's explained outliers")
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    Verdict {
        headline,
        findings,
        advice,
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

    fn cyclic_with(p99_9_ns: i64, max_ns: i64, missed: u64) -> crate::cyclic::CyclicResult {
        let mut samples: Vec<i64> = vec![10_000; 999];
        samples.push(p99_9_ns);
        let mut combined = crate::stats::summarize(&samples, missed);
        combined.p99_9_ns = Some(p99_9_ns);
        combined.max_ns = Some(max_ns);
        crate::cyclic::CyclicResult {
            config: crate::cyclic::Config::default(),
            threads: Vec::new(),
            combined,
            combined_histogram_us: Vec::new(),
            runaway: None,
            demoted: false,
            load: Vec::new(),
            partial: false,
            explain: None,
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
        let clean = cyclic_with(400_000, 900_000, 0);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &clean,
        };
        let v = verdict(Some(&row), None, &doctor());
        assert!(v.headline.starts_with("Yes: "), "{}", v.headline);
        assert_eq!(v.findings.len(), 1);
        assert_eq!(v.advice, ["b (v): do b", "c (v): do c"]);
    }

    #[test]
    fn verdict_names_rare_exceptions_and_failures() {
        let spiky = cyclic_with(400_000, 2_950_000, 3);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &spiky,
        };
        let v = verdict(Some(&row), None, &doctor());
        assert!(
            v.headline.starts_with("Yes, with rare exceptions"),
            "{}",
            v.headline
        );
        assert!(v.headline.contains("2.95 ms"), "{}", v.headline);

        let late = cyclic_with(1_500_000, 3_000_000, 9);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &late,
        };
        assert!(verdict(Some(&row), None, &doctor())
            .headline
            .starts_with("Not reliably"));
        assert!(verdict(None, None, &doctor())
            .headline
            .starts_with("Undetermined"));
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
