//! What changed, not only what happened: change points in a period's daily
//! p99.9 and miss rate, and what changed with them (a new top cause, the
//! machine's state, a new process).
//!
//! The test is binary segmentation with a two-sample (Welch) t statistic:
//! for each day `k` with at least [`MIN_DAYS`] days on either side, the
//! up to [`WINDOW_DAYS`] days before `k` are compared with the up to
//! [`WINDOW_DAYS`] days from `k` on (p99.9 as log10 of ns; the miss rate as
//! log10 of the rate plus 10⁻⁶); the day with the largest |t| is a change
//! point when |t| ≥ [`T_MIN`] and the means differ by at least a factor of
//! [`FACTOR_MIN`]; then both sides are searched again. Each day's variance
//! is floored at [`SPREAD_FLOOR`] (in log10 units), so that a flat series
//! does not make a tiny shift significant. The series step is a UTC day:
//! the coarsest roll-up, so a change is found at the same day whatever
//! resolution its rows have.

use crate::report::{fmt_ns, utc};
use crate::store::MachineState;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Days the windows take at most on either side of a candidate.
pub const WINDOW_DAYS: usize = 7;
/// Days a window needs at least.
pub const MIN_DAYS: usize = 3;
/// The smallest |t| that is a change.
pub const T_MIN: f64 = 6.0;
/// The smallest ratio of the means (after/before or before/after) that is a change.
pub const FACTOR_MIN: f64 = 1.5;
/// The floor of a window's standard deviation, log10 units (about ±12 %).
pub const SPREAD_FLOOR: f64 = 0.05;
/// The series step, ns (a UTC day).
pub const STEP_NS: u64 = crate::store::DAY_NS;

/// One UTC day of a period, all CPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Day {
    /// Its start, Unix ns.
    pub start_unix_ns: i64,
    /// Wake-ups.
    pub count: u64,
    /// Missed deadlines.
    pub missed: u64,
    /// p99.9 of the day's histogram, ns.
    pub p999_ns: Option<i64>,
    /// Kept wake-ups by cause `(category, name)`.
    pub causes: BTreeMap<(String, String), u64>,
}

/// A point where the distribution shifted, and what changed with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePoint {
    /// The first day after the change (its start, Unix ns).
    pub at_unix_ns: i64,
    /// `p99.9` or `miss rate`.
    pub metric: String,
    /// Geometric mean over the days before: ns for p99.9, a fraction for
    /// the miss rate.
    pub before: f64,
    /// The same over the days from the change on.
    pub after: f64,
    /// |t| of the two-sample test.
    pub score: f64,
    /// The series step, ns (a day).
    pub step_ns: u64,
    /// Causes whose wake-ups a day rose at least fourfold (or appeared) and
    /// are among the three most frequent after, in words.
    pub new_causes: Vec<String>,
    /// What of the machine's state changed within a step of it (`kernel A
    /// → B`, `cmdline …`).
    pub state_changes: Vec<String>,
    /// Tasks that made wake-ups late after it and never before it.
    pub new_processes: Vec<String>,
}

impl ChangePoint {
    /// One line: when, what moved, and what changed with it.
    pub fn line(&self) -> String {
        let f = |v: f64| match self.metric.as_str() {
            "p99.9" => fmt_ns(v.round() as i64),
            _ => format!("{:.4} %", v * 100.0),
        };
        let mut with: Vec<String> = Vec::new();
        with.extend(self.new_causes.iter().map(|c| format!("new top cause {c}")));
        with.extend(self.state_changes.iter().cloned());
        with.extend(
            self.new_processes
                .iter()
                .map(|p| format!("new process {p}")),
        );
        format!(
            "from {} ({} per day): {} → {} (|t| {:.1}){}",
            utc(self.at_unix_ns),
            self.metric,
            f(self.before),
            f(self.after),
            self.score,
            if with.is_empty() {
                "; nothing else changed that the database records".to_string()
            } else {
                format!("; with it: {}", with.join("; "))
            }
        )
    }
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = if x.len() > 1 {
        x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, v.max(SPREAD_FLOOR * SPREAD_FLOOR))
}

/// (t, mean before, mean after) comparing the windows around `k`.
fn welch(x: &[f64], lo: usize, hi: usize, k: usize) -> (f64, f64, f64) {
    let b = &x[k.saturating_sub(WINDOW_DAYS).max(lo)..k];
    let a = &x[k..(k + WINDOW_DAYS).min(hi)];
    let (mb, vb) = mean_var(b);
    let (ma, va) = mean_var(a);
    let t = (ma - mb) / (vb / b.len() as f64 + va / a.len() as f64).sqrt();
    (t, mb, ma)
}

/// Change points of `x` (log10 units) in `lo..hi`, by binary segmentation.
fn segment(x: &[f64], lo: usize, hi: usize, out: &mut Vec<(usize, f64, f64, f64)>) {
    if hi < lo + 2 * MIN_DAYS {
        return;
    }
    let best = (lo + MIN_DAYS..=hi - MIN_DAYS)
        .map(|k| (k, welch(x, lo, hi, k)))
        .max_by(|a, b| a.1 .0.abs().total_cmp(&b.1 .0.abs()));
    let Some((k, (t, mb, ma))) = best else {
        return;
    };
    if t.abs() < T_MIN || (ma - mb).abs() < FACTOR_MIN.log10() {
        return;
    }
    out.push((k, t.abs(), mb, ma));
    segment(x, lo, k, out);
    segment(x, k, hi, out);
}

/// The change points of `days` (oldest first, days without wake-ups left
/// out), each with what changed with it, oldest first.
pub fn find(days: &[Day], states: &[(i64, MachineState)]) -> Vec<ChangePoint> {
    let days: Vec<&Day> = days.iter().filter(|d| d.count > 0).collect();
    let mut out = Vec::new();
    let p999: Vec<f64> = days
        .iter()
        .map(|d| (d.p999_ns.unwrap_or(0).max(1) as f64).log10())
        .collect();
    let rate = |d: &Day| d.missed as f64 / (d.count + d.missed) as f64;
    let miss: Vec<f64> = days.iter().map(|d| (rate(d) + 1e-6).log10()).collect();
    for (metric, x) in [("p99.9", &p999), ("miss rate", &miss)] {
        let mut found = Vec::new();
        segment(x, 0, x.len(), &mut found);
        for (k, score, mb, ma) in found {
            let back = |m: f64| match metric {
                "p99.9" => 10f64.powf(m),
                _ => (10f64.powf(m) - 1e-6).max(0.0),
            };
            let before = &days[k.saturating_sub(WINDOW_DAYS)..k];
            let after = &days[k..(k + WINDOW_DAYS).min(days.len())];
            out.push(ChangePoint {
                at_unix_ns: days[k].start_unix_ns,
                metric: metric.to_string(),
                before: back(mb),
                after: back(ma),
                score,
                step_ns: STEP_NS,
                new_causes: new_causes(before, after),
                state_changes: state_changes(states, days[k].start_unix_ns),
                new_processes: new_processes(before, after),
            });
        }
    }
    out.sort_by(|a, b| {
        a.at_unix_ns
            .cmp(&b.at_unix_ns)
            .then(a.metric.cmp(&b.metric))
    });
    out
}

fn per_day(days: &[&Day]) -> BTreeMap<(String, String), f64> {
    let mut m: BTreeMap<(String, String), f64> = BTreeMap::new();
    for d in days {
        for (k, &n) in &d.causes {
            *m.entry(k.clone()).or_default() += n as f64 / days.len() as f64;
        }
    }
    m
}

fn cause_words(k: &(String, String)) -> String {
    firmtime_trace::explain::Category::from_key(&k.0).map_or_else(
        || "no trace (cause unknown)".to_string(),
        |c| firmtime_trace::explain::cause_words(c, &k.1),
    )
}

fn new_causes(before: &[&Day], after: &[&Day]) -> Vec<String> {
    let (b, a) = (per_day(before), per_day(after));
    let mut top: Vec<(&(String, String), &f64)> = a.iter().collect();
    top.sort_by(|x, y| y.1.total_cmp(x.1).then(x.0.cmp(y.0)));
    top.iter()
        .take(3)
        .filter(|(k, &n)| n >= 4.0 * b.get(*k).copied().unwrap_or(0.0) && n >= 1.0)
        .map(|(k, &n)| {
            format!(
                "{} ({:.0} a day, before {:.0})",
                cause_words(k),
                n,
                b.get(*k).copied().unwrap_or(0.0)
            )
        })
        .collect()
}

fn new_processes(before: &[&Day], after: &[&Day]) -> Vec<String> {
    let names = |ds: &[&Day]| -> BTreeSet<String> {
        ds.iter()
            .flat_map(|d| d.causes.keys())
            .filter(|(c, _)| c == "task")
            .map(|(_, n)| n.clone())
            .collect()
    };
    let b = names(before);
    names(after)
        .into_iter()
        .filter(|n| !b.contains(n))
        .collect()
}

/// What of the state changed in the step before `at` or the step from it.
fn state_changes(states: &[(i64, MachineState)], at: i64) -> Vec<String> {
    let step = STEP_NS as i64;
    let mut out = Vec::new();
    for w in states.windows(2) {
        let ((_, old), (seen, new)) = (&w[0], &w[1]);
        if *seen < at - step || *seen >= at + step {
            continue;
        }
        let mut diff = |what: &str, a: &str, b: &str| {
            if a != b {
                out.push(format!("{what} {a} → {b}"));
            }
        };
        diff("kernel", &old.kernel_release, &new.kernel_release);
        diff("cmdline", &old.kernel_cmdline, &new.kernel_cmdline);
        diff("preempt", &old.preempt_model, &new.preempt_model);
        diff("governors", &old.governors, &new.governors);
        diff("clocksource", &old.clocksource, &new.clocksource);
        diff("virtualization", &old.virtualization, &new.virtualization);
        diff("tuned", &old.tuned_profile, &new.tuned_profile);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(i: i64, p999_us: i64) -> Day {
        Day {
            start_unix_ns: i * STEP_NS as i64,
            count: 8_640_000,
            missed: 0,
            p999_ns: Some(p999_us * 1000),
            causes: BTreeMap::new(),
        }
    }

    #[test]
    fn a_step_is_found_at_its_day_and_noise_is_not() {
        // ±10 % noise around 40 µs, then 200 µs from day 14.
        let noise = [0.95, 1.05, 1.0, 0.9, 1.1, 1.02, 0.98];
        let days: Vec<Day> = (0..28)
            .map(|i| {
                let base = if i < 14 { 40.0 } else { 200.0 };
                day(i, (base * noise[i as usize % 7]) as i64)
            })
            .collect();
        let c = find(&days, &[]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            (c[0].at_unix_ns, c[0].metric.as_str()),
            (14 * STEP_NS as i64, "p99.9")
        );
        assert!(
            c[0].before > 35_000.0 && c[0].before < 45_000.0,
            "{}",
            c[0].before
        );
        let flat: Vec<Day> = (0..28)
            .map(|i| day(i, (40.0 * noise[i as usize % 7]) as i64))
            .collect();
        assert_eq!(find(&flat, &[]), vec![]);
        // Too few days on one side: nothing to say.
        assert_eq!(find(&days[12..16], &[]), vec![]);
    }
}
