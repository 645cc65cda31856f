//! Doctor's advice ranked by what actually made this run's wake-ups late.
//!
//! Each cause category maps to the doctor checks whose fix addresses it
//! (the VM not running → virtualization, steal time; another task or an
//! interrupt on the CPU → isolcpus, nohz_full, rcu_nocbs, preemption model;
//! the thread's own page faults → memlock; …). A check's weight is the number
//! of outliers whose cause it addresses; the advice keeps doctor's order
//! among checks of equal weight. Pure code.

use super::{Category, CauseCount};
use crate::doctor::Check;

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
