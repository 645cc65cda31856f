//! The plain-language answer at the top of the report: can this machine do
//! millisecond timing, under which settings, and what that means for an
//! experiment.
//!
//! It accounts for every periodic wake-up condition measured: the headline
//! is judged on the real-time ones (every one of them, idle and under
//! stress), names each real-time condition that missed a deadline or woke
//! a millisecond late with its main cause, and one finding per condition
//! gives the figures. "What to change" credits each explained outlier once,
//! to the fix that would remove it, and says what is left over.

use super::{thousands, us};
use crate::stats::Summary;
use firmtime_trace::explain::{self, advice, Category, CauseCount};
use std::fmt::Write as _;

/// One periodic wake-up condition, as the verdict reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// `SCHED_FIFO 80, stress`.
    pub label: String,
    /// True for a real-time policy (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE).
    pub realtime: bool,
    /// The combined figures of its threads.
    pub summary: Summary,
    /// Its explained outliers by cause (empty when not explained).
    pub causes: Vec<CauseCount>,
    /// Outliers explained.
    pub outliers: u64,
    /// Steal time during the run, ns.
    pub steal_ns: u64,
}

impl Condition {
    /// From a measured result.
    pub fn of(label: &str, r: &crate::cyclic::CyclicResult) -> Condition {
        Condition {
            label: label.to_string(),
            realtime: r.config.policy.is_rt_or_deadline(),
            summary: r.combined,
            causes: r
                .explain
                .as_ref()
                .map_or_else(Vec::new, |e| e.by_cause.clone()),
            outliers: r.explain.as_ref().map_or(0, |e| e.outliers.len() as u64),
            steal_ns: r.explain.as_ref().map_or(0, explain::Explanation::steal_ns),
        }
    }

    /// From a recorded `cyclic-*.json` envelope (docs/LAB-FORMATS.md).
    ///
    /// # Errors
    /// A message naming the missing or malformed field.
    pub fn from_json(label: &str, v: &serde_json::Value) -> Result<Condition, String> {
        let r = &v["result"];
        let summary: Summary = serde_json::from_value(r["combined"].clone())
            .map_err(|e| format!("result.combined: {e}"))?;
        let policy = r["config"]["policy"]["policy"].as_str().unwrap_or("");
        let e = &r["explain"];
        let causes: Vec<CauseCount> = if e.is_null() {
            Vec::new()
        } else {
            serde_json::from_value(e["by_cause"].clone())
                .map_err(|e| format!("result.explain.by_cause: {e}"))?
        };
        let steal_ns = e["steal"]
            .as_array()
            .map_or(0, |a| a.iter().filter_map(|s| s["ns"].as_u64()).sum());
        Ok(Condition {
            label: label.to_string(),
            realtime: matches!(policy, "fifo" | "rr" | "deadline"),
            summary,
            causes,
            outliers: e["outliers"].as_array().map_or(0, |a| a.len() as u64),
            steal_ns,
        })
    }

    /// Whether 99.9 % of its wake-ups were within a millisecond.
    fn mostly_within(&self) -> bool {
        self.summary.samples > 0 && self.summary.p99_9_ns.is_some_and(|p| p < MS)
    }

    /// Whether every wake-up was within a millisecond and none missed.
    fn clean(&self) -> bool {
        self.summary.samples > 0
            && self.summary.missed == 0
            && self.summary.max_ns.is_some_and(|m| m < MS)
    }

    /// Its main cause in words: the cause of most missed deadlines, `20 of
    /// them: the hypervisor (the VM was not running)`, or without a missed
    /// deadline the cause of most outliers, `mostly task kdamond.0: 9 of 20
    /// outliers`.
    fn main_cause(&self) -> Option<String> {
        let top = self.causes.iter().max_by_key(|c| (c.missed, c.outliers))?;
        if self.summary.missed > 0 && top.missed > 0 {
            let n = top.missed.min(self.summary.missed);
            return Some(if n == self.summary.missed && n > 1 {
                format!("all of them: {}", cause_phrase(top))
            } else if n == 1 && self.summary.missed == 1 {
                format!("cause: {}", cause_phrase(top))
            } else {
                format!("{n} of them: {}", cause_phrase(top))
            });
        }
        Some(format!(
            "mostly {}: {} of {} outliers",
            cause_phrase(top),
            top.outliers,
            self.outliers
        ))
    }

    /// `SCHED_FIFO 80, idle missed 27 deadlines (worst 6.6 ms; mostly …)`.
    fn misses(&self) -> String {
        let s = &self.summary;
        let what = if s.missed > 0 {
            format!(
                "missed {} deadline{}",
                thousands(s.missed as i64),
                if s.missed == 1 { "" } else { "s" }
            )
        } else {
            "woke a millisecond late or worse".to_string()
        };
        let worst = s.max_ns.unwrap_or(0) as f64 / 1e6;
        match self.main_cause() {
            Some(c) => format!("{} {what} (worst {worst:.2} ms; {c})", self.label),
            None => format!("{} {what} (worst {worst:.2} ms)", self.label),
        }
    }

    fn finding(&self) -> String {
        let c = &self.summary;
        let causes = if self.outliers > 0 || !self.causes.is_empty() {
            format!(
                " Why: {}.",
                explain::summary(&self.causes, self.outliers, self.steal_ns)
            )
        } else {
            String::new()
        };
        format!(
            "{}: 99 % of {} wake-ups within {} µs and 99.9 % within {} µs of the deadline; \
             worst {} µs; {} deadlines missed.{causes}",
            self.label,
            thousands(c.samples as i64),
            us(c.p99_ns),
            us(c.p99_9_ns),
            us(c.max_ns),
            thousands(c.missed as i64)
        )
    }
}

const MS: i64 = 1_000_000;

/// A cause as the verdict says it: the hypervisor in plain words.
fn cause_phrase(c: &CauseCount) -> String {
    match c.category {
        Category::Vm => "the hypervisor (the VM was not running)".into(),
        cat => explain::cause_words(cat, &c.name),
    }
}

/// What a run answers about its bar, and so the exit status of `lab all`
/// and `lab cyclic` (as `watch check`'s: docs/LAB-FORMATS.md, "Exit status").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// It meets the bar (the verdict's "Yes" and "Yes, with rare exceptions").
    Meets,
    /// It does not (the verdict's "Not reliably").
    Misses,
    /// Nothing could be judged (the verdict's "Undetermined": no real-time
    /// condition measured; a run with no wake-up).
    Unmeasured,
}

impl Answer {
    /// The exit status: 0 meets the bar, 1 does not, 2 could not measure.
    pub fn code(self) -> u8 {
        match self {
            Answer::Meets => 0,
            Answer::Misses => 1,
            Answer::Unmeasured => 2,
        }
    }

    /// The answer of a run part of which could not be measured (interrupted,
    /// a measurement or a thread failed) when `incomplete`: a miss in what was
    /// measured stands, a pass does not (what is missing might miss).
    pub fn unless_incomplete(self, incomplete: bool) -> Answer {
        match self {
            Answer::Meets if incomplete => Answer::Unmeasured,
            a => a,
        }
    }
}

/// The bar of one periodic wake-up run (`lab cyclic --max-latency
/// --max-missed`, as `watch check`'s): each limit applies when given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bar {
    /// The latest a wake-up may be, ns: the run misses when its worst was later.
    pub max_latency_ns: Option<i64>,
    /// The most deadlines it may miss.
    pub max_missed: Option<u64>,
}

impl Bar {
    /// `summary` against the bar: [`Answer::Unmeasured`] without a wake-up
    /// or a missed deadline, [`Answer::Misses`] when the worst wake-up was
    /// later than `max_latency_ns` or more than `max_missed` deadlines were
    /// missed, else [`Answer::Meets`] (always, without a limit).
    pub fn judge(&self, summary: &Summary) -> Answer {
        if summary.samples == 0 && summary.missed == 0 {
            return Answer::Unmeasured;
        }
        // Without a wake-up, the missed deadlines were later than any limit.
        let late = self
            .max_latency_ns
            .is_some_and(|m| summary.max_ns.map_or(summary.missed > 0, |w| w > m));
        if late || self.max_missed.is_some_and(|m| summary.missed > m) {
            Answer::Misses
        } else {
            Answer::Meets
        }
    }
}

/// The plain-language answer to "can this machine do millisecond timing?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What the headline answers about the millisecond bar (99.9 % of the
    /// wake-ups of every real-time run within a millisecond).
    pub answer: Answer,
    /// One-line answer.
    pub headline: String,
    /// Supporting sentences, each with its figure: one per condition, then
    /// what it means for an experiment.
    pub findings: Vec<String>,
    /// What to change: the fixes credited with this run's outliers (each
    /// outlier once), then what is left over.
    pub advice: Vec<String>,
    /// The rest of doctor's advice (no outlier of this run points to it).
    pub other_advice: Vec<String>,
}

impl Verdict {
    /// Markdown for the top of the report.
    pub fn markdown(&self) -> String {
        let mut s = format!("## Verdict\n\n**{}**\n\n", self.headline);
        for f in &self.findings {
            let _ = writeln!(s, "- {f}");
        }
        if !self.advice.is_empty() {
            s.push_str("\nWhat to change (each explained outlier counted once, for the fix that would remove it):\n\n");
            for a in &self.advice {
                let _ = writeln!(s, "- {a}");
            }
        }
        if !self.other_advice.is_empty() {
            s.push_str(
                "\nAlso from `firmtime doctor` (nothing in this run's late wake-ups points to these):\n\n",
            );
            for a in &self.other_advice {
                let _ = writeln!(s, "- {a}");
            }
        }
        s
    }
}

/// Judges the real-time conditions of the periodic wake-up runs against a
/// millisecond (99.9 % of wake-ups within 1 ms of the deadline; every one
/// within it, no missed deadline, for a plain "Yes"), with a finding for
/// every condition in `conditions` (the report's table order).
pub fn verdict(conditions: &[Condition], doctor: &crate::doctor::Report) -> Verdict {
    let rt: Vec<&Condition> = conditions.iter().filter(|c| c.realtime).collect();
    let other: Vec<&Condition> = conditions.iter().filter(|c| !c.realtime).collect();
    let policy = rt
        .first()
        .map(|c| c.label.split(',').next().unwrap_or(&c.label).to_string());
    let unclean: Vec<&Condition> = rt.iter().copied().filter(|c| !c.clean()).collect();
    let late: Vec<&Condition> = rt.iter().copied().filter(|c| !c.mostly_within()).collect();
    let listed = |v: &[&Condition]| v.iter().map(|c| c.misses()).collect::<Vec<_>>().join("; ");
    let answer = match policy {
        None => Answer::Unmeasured,
        Some(_) if !late.is_empty() => Answer::Misses,
        Some(_) => Answer::Meets,
    };
    let headline = match policy.as_deref() {
        None => "Undetermined: no real-time condition could be measured (see the skipped reasons).".to_string(),
        Some(p) if !late.is_empty() => {
            let besides: Vec<&Condition> = unclean
                .iter()
                .copied()
                .filter(|c| late.iter().all(|l| l.label != c.label))
                .collect();
            format!(
                "Not reliably: even under {p} more than 0.1 % of wake-ups were a millisecond late or worse — {}{}.",
                listed(&late),
                if besides.is_empty() {
                    String::new()
                } else {
                    format!("; besides, {}", listed(&besides))
                }
            )
        }
        Some(p) if unclean.is_empty() => format!(
            "Yes: millisecond timing works on this machine under {p} — every wake-up of every real-time run ({}) was within a millisecond.",
            rt.iter()
                .map(|c| c.label.split_once(", ").map_or(c.label.as_str(), |(_, load)| load))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Some(p) => format!(
            "Yes, with rare exceptions: under {p} 99.9 % of wake-ups were within a millisecond in every run, but {} — check for them in your data (self-checks) rather than assume they never happen.",
            listed(&unclean)
        ),
    };
    let mut findings: Vec<String> = conditions.iter().map(Condition::finding).collect();
    findings.extend(meaning(&rt, &other, &unclean, &late));

    // Outliers of a normal thread delayed by other tasks: running it
    // real-time removes them; the rest go to doctor's fixes.
    let mut realtime_fix = 0;
    let mut causes: Vec<CauseCount> = Vec::new();
    for c in conditions {
        for k in &c.causes {
            if !c.realtime && k.category == Category::Task {
                realtime_fix += k.outliers;
            } else {
                causes = advice::merge(&[&causes, std::slice::from_ref(k)]);
            }
        }
    }
    let what = "this run's explained outliers";
    let mut advice = Vec::new();
    if realtime_fix > 0 {
        advice.push(format!(
            "Run the timing-critical thread real-time (SCHED_FIFO, memory locked: `--policy fifo:80`, \
             what `firmtime tap run` does): other tasks delayed the normal (SCHED_OTHER) thread — \
             would remove {realtime_fix} of {what}"
        ));
    }
    let mut other_advice = Vec::new();
    let fixes = doctor.fixes();
    for (line, n) in advice::lines(&fixes, &causes, what) {
        if n > 0 {
            advice.push(line);
        } else {
            other_advice.push(line);
        }
    }
    advice.extend(advice::left_over_line(&fixes, &causes, what));
    Verdict {
        answer,
        headline,
        findings,
        advice,
        other_advice,
    }
}

/// What the figures mean for an experiment, in one sentence.
fn meaning(
    rt: &[&Condition],
    other: &[&Condition],
    unclean: &[&Condition],
    late: &[&Condition],
) -> Option<String> {
    let worst_rt = rt.iter().filter_map(|c| c.summary.max_ns).max()?;
    let other_missed: u64 = other.iter().map(|c| c.summary.missed).sum();
    let normal = if other_missed > 0 {
        format!(
            " A normal (SCHED_OTHER) thread missed {} deadlines here: run experiments real-time, as `firmtime tap run` does.",
            thousands(other_missed as i64)
        )
    } else {
        String::new()
    };
    let vm_bound = unclean.iter().chain(late).all(|c| {
        c.causes
            .iter()
            .max_by_key(|k| (k.missed, k.outliers))
            .is_some_and(|k| k.category == Category::Vm)
    });
    let origin = if unclean.is_empty() && late.is_empty() {
        String::new()
    } else if vm_bound {
        " They come from the hypervisor, not from this system's settings: only bare metal or pinned vCPUs remove them.".to_string()
    } else {
        " See What to change for the fixes that would remove them.".to_string()
    };
    let samples: u64 = rt.iter().map(|c| c.summary.samples).sum();
    let bad: u64 = unclean.iter().map(|c| c.summary.missed).sum();
    Some(if !late.is_empty() {
        format!(
            "For an experiment: even real-time, this machine cannot promise millisecond timing (worst {:.2} ms).{origin}{normal}",
            worst_rt as f64 / 1e6
        )
    } else if unclean.is_empty() {
        format!("For an experiment: run it real-time and millisecond timing holds here; keep the self-checks, which count any exception.{normal}")
    } else {
        format!(
            "For an experiment: real-time, expect about {} missed deadline{} per 10,000 wake-ups, up to {:.2} ms late; keep the self-checks and flag or exclude the trials they name.{origin}{normal}",
            if samples > 0 {
                format!("{:.1}", bad as f64 * 10_000.0 / samples as f64)
            } else {
                "0".into()
            },
            if bad == 1 { "" } else { "s" },
            worst_rt as f64 / 1e6
        )
    })
}
