//! Every sentence the explaining trace gives a report: the cause summary,
//! coverage, capture and process lines, a cause in words, its largest
//! parts.

use super::attribute::{self, Category, Cause};
use super::breakdown;
use super::outcome::{CauseCount, Explanation};
use super::stacks;
use crate::raw::EXPLAIN_EVENTS;
use crate::tracefs;

impl Explanation {
    /// The cause summary in one line: `7 of 14 outliers: the VM was not
    /// running (worst 2.1 ms); 5: softirq NET_RX (worst 0.8 ms); …`
    /// ([`summary`]), and when the kernel lost events how many outliers
    /// that left without a cause ([`Explanation::lost_words`]).
    pub fn summary(&self) -> String {
        let s = summary(&self.by_cause, self.outliers.len() as u64, self.steal_ns());
        format!("{s}{}", self.lost_words())
    }

    /// `9 of 10 deadline misses and 10 of the 10 worst wake-ups have a
    /// cause` (a wake-up whose span lost events has none; [`Explanation::summary`]
    /// says how many).
    pub fn coverage(&self) -> String {
        format!(
            "{} of {} deadline misses and {} of the {} worst wake-ups have a cause",
            self.missed_explained, self.missed, self.worst_explained, self.worst
        )
    }

    /// How the trace recorded, in one line: `recorded CPUs 0, 1 (the
    /// measured ones); ring buffer 25,391 KiB per CPU (2 s of 13.0 MB/s
    /// measured at the start)`.
    pub fn capture_line(&self) -> String {
        let c = &self.capture;
        let cpus: Vec<String> = c.cpus.iter().map(usize::to_string).collect();
        let which = if c.filtered {
            "the measured ones"
        } else {
            "every CPU, unfiltered"
        };
        let buffer = if c.rate_bytes_per_s > 0 {
            format!(
                "ring buffer {} KiB per CPU ({} s of {:.1} MB/s measured at the start)",
                c.buffer_kb,
                tracefs::BUFFER_HORIZON_S,
                c.rate_bytes_per_s as f64 / 1e6
            )
        } else {
            format!("ring buffer {} KiB per CPU", c.buffer_kb)
        };
        format!("recorded CPUs {} ({which}); {buffer}", cpus.join(", "))
    }

    /// What `--kernel-stacks` did, in one line; `None` when it was not
    /// asked for. `kernel stacks: 12 recorded, 9 on outliers' task parts
    /// (trigger `stacktrace:unlimited if …`, removed at the end)`, or
    /// `kernel stacks: none — this kernel offers no `stacktrace` trigger …`.
    pub fn stacks_line(&self) -> Option<String> {
        self.capture.kernel_stacks.as_ref().map(stacks_words)
    }

    /// The processes whose threads made wake-ups late, in one line (the
    /// [`SUMMARY_CAUSES`] that took the most time; empty without any):
    /// `rustc (pid 4242; threads opt cgu.00, opt cgu.01): 12 outliers, 3.1
    /// ms in all, up to 812 µs in one; …`.
    pub fn process_line(&self) -> String {
        process_words(&self.by_process)
    }

    /// What the kernel's losses did to the causes, for the end of a line
    /// (empty when nothing was lost).
    pub fn lost_words(&self) -> String {
        if self.lost == 0 && self.losses.is_empty() {
            return String::new();
        }
        if self.unknown_lost == 0 {
            return format!(
                "; the trace lost {} events, none in the spans of these wake-ups",
                self.lost
            );
        }
        format!(
            "; {} of {} outliers unknown because the trace lost events in their spans ({} events \
             lost in all)",
            self.unknown_lost,
            self.outliers.len(),
            self.lost
        )
    }

    /// Which events were recorded, in one line.
    ///
    /// When windows were dropped for want of room it names the setting that
    /// makes more (`store_flag`, the flag of the command that prints it:
    /// `--explain-max-events` for `lab cyclic` and `lab all`).
    pub fn events_line(&self, store_flag: &str) -> String {
        let names: Vec<&str> = EXPLAIN_EVENTS
            .iter()
            .filter(|(_, k)| self.events_enabled.contains(k))
            .map(|(p, _)| p.rsplit('/').next().unwrap_or(p))
            .collect();
        let evicted = if self.windows_evicted > 0 {
            format!(
                "; {} windows of the least late wake-ups dropped for want of room (raise {store_flag})",
                self.windows_evicted
            )
        } else {
            String::new()
        };
        format!(
            "kept {} events in {} windows around late wake-ups ({}), {} dropped, {} lost{evicted}",
            self.events,
            self.windows,
            names.join(", "),
            self.dropped,
            self.lost
        )
    }
}

/// [`Explanation::stacks_line`] of what `--kernel-stacks` did.
pub fn stacks_words(k: &stacks::KernelStacks) -> String {
    if let Some(why) = &k.unavailable {
        return format!("kernel stacks: none — {why}");
    }
    let removed = if k.trigger_removed {
        "removed at the end"
    } else {
        "NOT removed: check the instance's events/sched/sched_switch/trigger"
    };
    let names = if k.recorded > 0 && !k.symbolized {
        "; addresses not named (/proc/kallsyms hidden: kptr_restrict)"
    } else {
        ""
    };
    format!(
        "kernel stacks: {} recorded, {} on outliers' task or non-preemptible parts \
         (trigger `{}`, {removed}){names}",
        k.recorded,
        k.attached,
        k.trigger.as_deref().unwrap_or("?"),
    )
}

/// [`Explanation::process_line`] of `by_process`.
pub fn process_words(by_process: &[breakdown::ProcessCount]) -> String {
    by_process
        .iter()
        .take(SUMMARY_CAUSES)
        .map(|p| {
            let id = p.tgid.map_or_else(String::new, |t| format!("pid {t}; "));
            let threads = if p.threads.len() == 1 && p.threads[0] == p.process {
                String::new()
            } else {
                format!(
                    "{id}thread{} {}",
                    if p.threads.len() == 1 { "" } else { "s" },
                    p.threads.join(", ")
                )
            };
            let inner = if threads.is_empty() {
                id.trim_end_matches("; ").to_string()
            } else {
                threads
            };
            let inner = if inner.is_empty() {
                String::new()
            } else {
                format!(" ({inner})")
            };
            format!(
                "{}{inner}: {} outlier{}, {} in all, up to {} in one",
                p.process,
                p.outliers,
                if p.outliers == 1 { "" } else { "s" },
                attribute::fmt_ns(p.ns),
                attribute::fmt_ns(p.worst_ns)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Parts of a breakdown shown per outlier in a report.
pub const PARTS_SHOWN: usize = 3;

/// A cause's sentence followed by its largest parts (at most
/// [`PARTS_SHOWN`]) when the lateness has more than one: `ft-hog … ran
/// 2.9 ms … (parts: task ft-hog (pid 42, …) 2.9 ms; interrupt local timer
/// 3 µs; timer delay 2 µs)`.
///
/// With `--kernel-stacks`, the top frames of the largest part's kernel
/// stack follow (`…; kernel stack of ft-hog (pid 42): schedule+0x27 ←
/// do_nanosleep+0x5e ← …`; [`stacks::largest_stack_words`]).
pub fn with_parts(c: &Cause) -> String {
    let stack = stacks::largest_stack_words(&c.breakdown)
        .map(|w| format!("; {w}"))
        .unwrap_or_default();
    if c.breakdown.len() < 2 {
        return format!("{}{stack}", c.detail);
    }
    format!(
        "{} (parts: {}){stack}",
        c.detail,
        breakdown::largest_words(&c.breakdown, PARTS_SHOWN)
    )
}

/// Causes shown by name in a summary line; the rest are counted together.
pub const SUMMARY_CAUSES: usize = 6;

/// The cause summary of `n` outliers in one line, the [`SUMMARY_CAUSES`]
/// commonest by name and the rest counted: `7 of 14 outliers: the VM was
/// not running (up to 2.1 ms, steal this run 20 ms); 5: softirq NET_RX (up
/// to 812 µs); 2 more: 2 other causes (up to 1.0 ms)`.
pub fn summary(by_cause: &[CauseCount], n: u64, steal_ns: u64) -> String {
    if n == 0 {
        return "no outliers to explain".into();
    }
    let mut parts = Vec::new();
    for (i, c) in by_cause.iter().take(SUMMARY_CAUSES).enumerate() {
        let count = if i == 0 {
            format!("{} of {n} outliers", c.outliers)
        } else {
            c.outliers.to_string()
        };
        let what = cause_words(c.category, &c.name);
        let extra = if c.category == Category::Vm && steal_ns > 0 {
            format!(", steal this run {}", attribute::fmt_ns(steal_ns))
        } else {
            String::new()
        };
        parts.push(format!(
            "{count}: {what} (up to {}{extra})",
            attribute::fmt_ns(c.worst_ns)
        ));
    }
    let rest = &by_cause[by_cause.len().min(SUMMARY_CAUSES)..];
    if !rest.is_empty() {
        let outliers: u64 = rest.iter().map(|c| c.outliers).sum();
        let worst = rest.iter().map(|c| c.worst_ns).max().unwrap_or(0);
        parts.push(format!(
            "{outliers} more: {} other cause{} (up to {}; all in the JSON's by_cause)",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" },
            attribute::fmt_ns(worst)
        ));
    }
    parts.join("; ")
}

/// A cause in words: `the VM was not running`, `task stress (pid 42)`, …
pub fn cause_words(cat: Category, name: &str) -> String {
    match cat {
        Category::Unknown if name == attribute::TRACE_LOST => {
            "unknown (trace lost events)".to_string()
        }
        Category::Task if name == attribute::RT_THROTTLING => {
            "RT throttling (normal tasks got the CPU's reserve)".to_string()
        }
        Category::Task => format!("task {name}"),
        Category::Irq => format!("interrupt {name}"),
        Category::Softirq => format!("softirq {name}"),
        Category::SelfThread => format!("the thread itself ({name})"),
        Category::IrqsOff => format!("interrupts off in {name}"),
        c => c.words().to_string(),
    }
}
