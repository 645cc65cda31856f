//! Fixes ranked by what actually made this run's wake-ups late.
//!
//! The fixes are what the caller's doctor flags on this machine (in
//! firmtime, `firmtime doctor`'s warnings and failures with a fix, as
//! [`Fix`]: the check's id and its line). Each cause is credited once, to
//! the first fix in its list that is flagged: the fix that
//! would remove it (the VM not running → bare metal or pinned vCPUs;
//! another task or an interrupt on the CPU → isolated CPUs, then the
//! preemption model; RCU callbacks → rcu_nocbs; the thread's own page
//! faults → the memlock limit; …). A cause with no flagged fix is left
//! over, and said so. A check's weight is the number of outliers credited
//! to it; the advice keeps doctor's order among checks of equal weight.
//! Pure code.

use super::{Category, CauseCount};

/// A fix the machine's doctor flags: the id of its check (`isolcpus`,
/// `preempt_model`, …; [`checks_for`] names them) and the line that says
/// what to do (`Isolated CPUs (isolcpus) (none …): boot with …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    /// The check's id.
    pub id: String,
    /// What to do, in one line.
    pub line: String,
}

/// The doctor check ids whose fixes would remove outliers of cause `c`,
/// the most direct first. A task of normal priority that held off a
/// real-time thread was not preempted: the preemption model first; a
/// real-time one (or one of unknown priority): isolated CPUs first.
pub fn checks_for(c: &CauseCount) -> &'static [&'static str] {
    let name = c.name.as_str();
    match c.category {
        Category::Vm => &["virtualization", "steal_time"],
        Category::Task if name == super::attribute::RT_THROTTLING => &["sched_rt_runtime"],
        Category::Task if c.prio.is_some_and(|p| p >= 100) => {
            &["preempt_model", "isolcpus", "sched_rt_runtime"]
        }
        Category::Task => &["isolcpus", "preempt_model", "sched_rt_runtime"],
        Category::Irq if name == "local timer" => &["nohz_full", "isolcpus"],
        Category::Irq => &["isolcpus"],
        Category::Softirq if name == "RCU" => &["rcu_nocbs", "isolcpus"],
        Category::Softirq => &["isolcpus", "rcu_nocbs"],
        Category::SelfThread => &["memlock_limit", "rtprio_limit"],
        Category::IdleExit => &["idle_states", "cpu_governor"],
        Category::IrqsOff => &["preempt_model"],
        Category::Slack => &["timer_slack", "rtprio_limit"],
        Category::Unknown => &[],
    }
}

/// The fix of `checks` each cause is credited to (by index), `None`
/// when none of its fixes is among them.
fn credit(checks: &[Fix], c: &CauseCount) -> Option<usize> {
    checks_for(c)
        .iter()
        .find_map(|id| checks.iter().position(|k| k.id == *id))
}

/// `checks` (the flagged fixes) ordered by the outliers credited to them,
/// most first, each with that count (0 for fixes no outlier of this run
/// points to); the fixes' order is kept among equal counts. Each outlier is
/// credited to one fix at most.
pub fn rank<'a>(checks: &'a [Fix], causes: &[CauseCount]) -> Vec<(&'a Fix, u64)> {
    let mut v: Vec<(&Fix, u64)> = checks.iter().map(|c| (c, 0)).collect();
    for c in causes {
        if let Some(i) = credit(checks, c) {
            v[i].1 += c.outliers;
        }
    }
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v
}

/// The causes no flagged fix would remove (unknown ones, or causes whose
/// fixes doctor found already in place).
pub fn left_over<'a>(fixes: &[Fix], causes: &'a [CauseCount]) -> Vec<&'a CauseCount> {
    causes
        .iter()
        .filter(|c| credit(fixes, c).is_none())
        .collect()
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

/// The flagged fixes as lines ranked by `causes` (as [`rank`]): `{line} —
/// would remove N of {what}`, with the count N credited to each line's fix
/// (the suffix only when N > 0; each outlier counted once over all lines).
pub fn lines(fixes: &[Fix], causes: &[CauseCount], what: &str) -> Vec<(String, u64)> {
    rank(fixes, causes)
        .into_iter()
        .map(|(c, n)| {
            let why = if n > 0 {
                format!(" — would remove {n} of {what}")
            } else {
                String::new()
            };
            (format!("{}{why}", c.line), n)
        })
        .collect()
}

/// The line for the outliers of `causes` no line of [`lines`] removes, if
/// any: `Left over: 7 of {what} have no fix on this list: the VM was not
/// running (5; doctor finds nothing to change for it), …`.
pub fn left_over_line(fixes: &[Fix], causes: &[CauseCount], what: &str) -> Option<String> {
    let left = left_over(fixes, causes);
    let n: u64 = left.iter().map(|c| c.outliers).sum();
    if n == 0 {
        return None;
    }
    let names: Vec<String> = left
        .iter()
        .take(super::SUMMARY_CAUSES)
        .map(|c| {
            format!(
                "{} ({})",
                super::cause_words(c.category, &c.name),
                c.outliers
            )
        })
        .collect();
    Some(format!(
        "Left over: {n} of {what} {} no fix on this list: {}{}",
        if n == 1 { "has" } else { "have" },
        names.join(", "),
        if left.len() > super::SUMMARY_CAUSES {
            ", …"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_rank_the_fixes_by_the_outliers_they_address_and_say_how_many() {
        let check = |id: &str, fix: &str| Fix {
            id: id.into(),
            line: format!("{id} (v): {fix}"),
        };
        // As doctor flags them (preempt_model passed: not among them).
        let doctor = [
            check("cpu_governor", "set performance"),
            check("memlock_limit", "raise memlock"),
            check("isolcpus", "isolate a CPU"),
        ];
        let cause = |category, outliers| CauseCount {
            category,
            name: String::new(),
            outliers,
            missed: 0,
            worst_ns: 0,
            prio: None,
        };
        let causes = [cause(Category::SelfThread, 2), cause(Category::Task, 5)];
        let l = lines(&doctor, &causes, "the late outputs");
        assert_eq!(
            l,
            [
                (
                    "isolcpus (v): isolate a CPU — would remove 5 of the late outputs".to_string(),
                    5
                ),
                (
                    "memlock_limit (v): raise memlock — would remove 2 of the late outputs".into(),
                    2
                ),
                ("cpu_governor (v): set performance".into(), 0),
            ]
        );
    }

    #[test]
    fn each_outlier_is_credited_once_and_the_rest_is_left_over() {
        let check = |id: &str| Fix {
            id: id.into(),
            line: format!("{id} (v): fix {id}"),
        };
        let doctor = [
            check("preempt_model"),
            check("isolcpus"),
            check("nohz_full"),
        ];
        let cause = |category, name: &str, outliers| CauseCount {
            category,
            name: name.into(),
            outliers,
            missed: 0,
            worst_ns: 0,
            prio: None,
        };
        let normal = CauseCount {
            prio: Some(120),
            ..cause(Category::Task, "disk", 4)
        };
        let causes = [
            normal,
            cause(Category::Task, "stress", 47),
            cause(Category::Irq, "local timer", 3),
            cause(Category::Vm, "", 5),
            cause(Category::Unknown, "", 1),
        ];
        let l = lines(&doctor, &causes, "the outliers");
        let counts: Vec<u64> = l.iter().map(|(_, n)| *n).collect();
        // A task of unknown priority: isolated CPUs (not also the
        // preemption model); one of normal priority that was not preempted:
        // the preemption model; the local timer: nohz_full; nothing twice.
        assert_eq!(counts, [47, 4, 3]);
        assert!(l[0].0.starts_with("isolcpus"), "{l:?}");
        assert!(l[1].0.starts_with("preempt_model"), "{l:?}");
        assert!(l[2].0.starts_with("nohz_full"), "{l:?}");
        assert_eq!(counts.iter().sum::<u64>(), 54);
        assert_eq!(
            left_over_line(&doctor, &causes, "the outliers").as_deref(),
            Some(
                "Left over: 6 of the outliers have no fix on this list: \
                 the VM was not running (5), no traced event explains it (1)"
            )
        );
    }
}
