//! Doctor's advice ranked by what actually made this run's wake-ups late.
//!
//! Each cause category maps to the doctor checks whose fix addresses it
//! (the VM not running → virtualization, steal time; another task or an
//! interrupt on the CPU → isolcpus, nohz_full, rcu_nocbs, preemption model;
//! the thread's own page faults → memlock; …). A check's weight is the number
//! of outliers whose cause it addresses; the advice keeps doctor's order
//! among checks of equal weight. Pure code.

use super::{Category, CauseCount};
use crate::doctor::{Check, Report, Status};

/// The doctor check ids whose fixes address outliers of `cat`.
pub fn checks_for(cat: Category) -> &'static [&'static str] {
    match cat {
        Category::Vm => &["virtualization", "steal_time"],
        Category::Task => &["isolcpus", "preempt_model", "sched_rt_runtime", "nohz_full"],
        Category::Irq => &["isolcpus", "nohz_full"],
        Category::Softirq => &["isolcpus", "rcu_nocbs", "nohz_full"],
        Category::SelfThread => &["memlock_limit", "rtprio_limit"],
        Category::IdleExit => &["idle_states", "cpu_governor"],
        Category::IrqsOff => &["preempt_model"],
        Category::Slack => &["timer_slack", "rtprio_limit"],
        Category::Unknown => &[],
    }
}

/// `checks` (the advice: warnings and failures with a fix) ordered by the
/// outliers their fixes address, most first, each with that count (0 for
/// checks no outlier of this run points to).
pub fn rank<'a>(checks: &[&'a Check], causes: &[CauseCount]) -> Vec<(&'a Check, u64)> {
    let mut v: Vec<(&Check, u64)> = checks
        .iter()
        .map(|c| {
            let n = causes
                .iter()
                .filter(|k| checks_for(k.category).contains(&c.id.as_str()))
                .map(|k| k.outliers)
                .sum();
            (*c, n)
        })
        .collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v
}

/// Merges the cause counts of several runs (same category and name summed).
pub fn merge(runs: &[&[CauseCount]]) -> Vec<CauseCount> {
    let mut v: Vec<CauseCount> = Vec::new();
    for r in runs {
        for c in r.iter() {
            match v
                .iter_mut()
                .find(|k| k.category == c.category && k.name == c.name)
            {
                Some(k) => {
                    k.outliers += c.outliers;
                    k.missed += c.missed;
                    k.worst_ns = k.worst_ns.max(c.worst_ns);
                }
                None => v.push(c.clone()),
            }
        }
    }
    v.sort_by_key(|k| std::cmp::Reverse(k.outliers));
    v
}

/// Doctor's advice (warnings and failures with a fix) as lines ranked by
/// `causes` (as [`rank`]): `title (value): fix — addresses N of {what}`,
/// with the count N each line's fix addresses (the suffix only when N > 0).
pub fn lines(doctor: &Report, causes: &[CauseCount], what: &str) -> Vec<(String, u64)> {
    let checks: Vec<&Check> = doctor
        .checks
        .iter()
        .filter(|c| matches!(c.status, Status::Fail | Status::Warn) && !c.fix.is_empty())
        .collect();
    rank(&checks, causes)
        .into_iter()
        .map(|(c, n)| {
            let why = if n > 0 {
                format!(" — addresses {n} of {what}")
            } else {
                String::new()
            };
            (format!("{} ({}): {}{why}", c.title, c.value, c.fix), n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_rank_the_fixes_by_the_outliers_they_address_and_say_how_many() {
        let check = |id: &str, status: Status, fix: &str| Check {
            id: id.into(),
            title: id.into(),
            status,
            value: "v".into(),
            fix: fix.into(),
        };
        let doctor = Report {
            checks: vec![
                check("cpu_governor", Status::Warn, "set performance"),
                check("memlock_limit", Status::Warn, "raise memlock"),
                check("isolcpus", Status::Warn, "isolate a CPU"),
                check("preempt_model", Status::Pass, ""),
            ],
            system: firmtime_rt::system::SystemInfo::collect(),
        };
        let cause = |category, outliers| CauseCount {
            category,
            name: String::new(),
            outliers,
            missed: 0,
            worst_ns: 0,
        };
        let causes = [cause(Category::SelfThread, 2), cause(Category::Task, 5)];
        let l = lines(&doctor, &causes, "the late outputs");
        assert_eq!(
            l,
            [
                (
                    "isolcpus (v): isolate a CPU — addresses 5 of the late outputs".to_string(),
                    5
                ),
                (
                    "memlock_limit (v): raise memlock — addresses 2 of the late outputs".into(),
                    2
                ),
                ("cpu_governor (v): set performance".into(), 0),
            ]
        );
    }
}
