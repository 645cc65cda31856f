//! What a finished session's record says: the noted wake-ups of each
//! measured thread attributed ([`explain`]) into an [`Explanation`] — the
//! outliers, their causes grouped, the coverage figures — the types the
//! JSON carries. No tracefs here; the wording is in [`super::words`].

use super::attribute::{self, Category, Cause, Machine, Timeline, Wakeup};
use super::session::{proc_task_info, CaptureSetup, CpuSteal, Recorded};
use super::words::{cause_words, with_parts};
use super::{breakdown, Note, TraceCoverage, TracedCause, WORST_SHOWN};
use crate::raw::EventKind;
use serde::{Deserialize, Serialize};

/// One measured thread, for [`explain`].
#[derive(Debug, Clone)]
pub struct Target {
    /// Thread index.
    pub thread: usize,
    /// CPU it was pinned to (for its summary line; each note carries the
    /// CPU it woke on, which is the one attributed).
    pub cpu: usize,
    /// Its thread id.
    pub tid: i32,
    /// Its period, ns.
    pub period_ns: u64,
    /// Its timer slack, ns.
    pub slack_ns: u64,
    /// Wake-ups later than this are explained, ns.
    pub threshold_ns: i64,
    /// Its noted wake-ups.
    pub notes: Vec<Note>,
    /// Wake-ups that missed a deadline and were not noted.
    pub missing_not_kept: u64,
    /// Deadlines it missed in the run.
    pub missed: u64,
}

/// One explained wake-up.
#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    /// Thread index.
    pub thread: usize,
    /// CPU.
    pub cpu: usize,
    /// Grid index of the deadline.
    pub index: u64,
    /// The deadline, CLOCK_MONOTONIC ns.
    pub deadline_ns: u64,
    /// wake − deadline, ns.
    pub latency_ns: i64,
    /// Deadlines passed while it was late.
    pub missed: u64,
    /// Why.
    pub cause: Cause,
}

/// Outliers sharing a cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseCount {
    /// The category.
    pub category: Category,
    /// The name (task comm, interrupt, softirq, …).
    pub name: String,
    /// Outliers it caused.
    pub outliers: u64,
    /// Deadlines missed in those outliers.
    pub missed: u64,
    /// The largest time charged to it in one outlier, ns.
    pub worst_ns: u64,
    /// For a task: its kernel priority (0–99 real-time, 100–139 normal),
    /// as first seen; which fix would remove it depends on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<i32>,
}

/// Threshold and counts of one thread.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ThreadExplained {
    /// Thread index.
    pub thread: usize,
    /// CPU.
    pub cpu: usize,
    /// Wake-ups later than this were explained, ns.
    pub threshold_ns: i64,
    /// Outliers explained (noted and above the threshold, missing a
    /// deadline, or among its [`WORST_SHOWN`] worst).
    pub outliers: u64,
    /// Wake-ups that missed a deadline and were not noted (not explained).
    pub not_noted: u64,
}

/// What the explaining trace found.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// Events recorded (those this kernel has).
    pub events_enabled: Vec<EventKind>,
    /// Events kept (inside the windows around late wake-ups).
    pub events: u64,
    /// Windows kept (overlapping ones merged).
    pub windows: u64,
    /// Windows dropped whole for want of room in the store, the least late
    /// first (their wake-ups are `unknown`; `--explain-max-events` raises the room).
    pub windows_evicted: u64,
    /// Late wake-ups whose window was not kept (flag ring overrun).
    pub flags_lost: u64,
    /// Events of the windows dropped for want of room.
    pub dropped: u64,
    /// Events the kernel lost.
    pub lost: u64,
    /// True once the tracefs instance was removed again.
    pub instance_removed: bool,
    /// Preemption model of the kernel.
    pub preempt_model: String,
    /// `none` on bare metal, else the hypervisor.
    pub virtualization: Option<String>,
    /// Steal time per CPU during the run.
    pub steal: Vec<CpuSteal>,
    /// Time the drainer waited, keeping off the CPUs while a measured
    /// thread was due (from shortly before its deadline until it woke), ns.
    pub drainer_held_ns: u64,
    /// How far behind the kernel the drainer fell: the oldest a page of
    /// the ring buffers was when it was read, ns. The buffers overflow (the
    /// kernel loses events, `lost`) once this exceeds what they hold.
    pub drainer_lag_max_ns: u64,
    /// Per thread.
    pub threads: Vec<ThreadExplained>,
    /// Every explained wake-up (above its thread's threshold, missing a
    /// deadline, or among its thread's [`WORST_SHOWN`] worst), latest first.
    pub outliers: Vec<Outlier>,
    /// Outliers by cause, most first.
    pub by_cause: Vec<CauseCount>,
    /// The tasks of the outliers' breakdowns grouped by process (thread
    /// group), most time first ([`breakdown::by_process`]).
    pub by_process: Vec<breakdown::ProcessCount>,
    /// Deadlines missed in the run.
    pub missed: u64,
    /// Of those, in outliers with a cause other than `unknown`.
    pub missed_explained: u64,
    /// The latest wake-ups considered for the "worst 10" figure (≤ 10).
    pub worst: u64,
    /// Of those, with a cause other than `unknown`.
    pub worst_explained: u64,
    /// Outliers left `unknown` because the kernel lost events in the span
    /// their attribution reads (cause name [`attribute::TRACE_LOST`]).
    pub unknown_lost: u64,
    /// Where the kernel lost events, per CPU in time ([`crate::loss`]).
    pub losses: Vec<crate::loss::Loss>,
    /// How the capture was set up: CPUs, buffer size, measured rate, filters.
    pub capture: CaptureSetup,
}

/// Attributes the outliers of `targets` from `rec`.
pub fn explain(rec: Recorded, targets: &[Target], machine: &Machine) -> Explanation {
    let events = rec.capture.events.len() as u64;
    let windows = rec.windows.len() as u64;
    let windows_evicted = rec.evicted.len() as u64;
    // Kernel stacks (`--kernel-stacks`) are not for the attribution: out
    // before it, onto the outliers' parts after it.
    let mut kept = rec.capture.events;
    let stacks = super::stacks::take_stacks(&mut kept);
    let tl = Timeline::with_windows(kept, rec.windows, rec.evicted)
        .with_losses(rec.losses.clone())
        .with_names(rec.names);
    let mut outliers = Vec::new();
    let mut threads = Vec::new();
    let mut missed = 0;
    for t in targets {
        missed += t.missed;
        let mut n = 0;
        for (rank, note) in t.notes.iter().enumerate() {
            // Above the threshold, a missed deadline, or among the thread's
            // 10 worst (for the "10 worst wake-ups" figure).
            if note.latency_ns <= t.threshold_ns && note.missed == 0 && rank >= WORST_SHOWN {
                continue;
            }
            n += 1;
            let w = Wakeup {
                cpu: usize::from(note.cpu),
                tid: t.tid,
                deadline_ns: note.deadline_ns,
                wake_ns: note.wake_ns,
                slack_ns: t.slack_ns,
                period_ns: t.period_ns,
            };
            outliers.push(Outlier {
                thread: t.thread,
                cpu: usize::from(note.cpu),
                index: note.index,
                deadline_ns: note.deadline_ns,
                latency_ns: note.latency_ns,
                missed: note.missed,
                cause: attribute::attribute(&tl, &w, machine),
            });
        }
        threads.push(ThreadExplained {
            thread: t.thread,
            cpu: t.cpu,
            threshold_ns: t.threshold_ns,
            outliers: n,
            not_noted: t.missing_not_kept,
        });
    }
    if let Some(mut lease) = rec.lease {
        lease.give_store(tl.into_events());
    }
    outliers.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
    let mut seen: std::collections::HashMap<i32, Option<breakdown::TaskInfo>> =
        std::collections::HashMap::new();
    for o in &mut outliers {
        breakdown::fill_tasks(&mut o.cause.breakdown, &mut |pid| {
            seen.entry(pid)
                .or_insert_with(|| proc_task_info(pid))
                .clone()
        });
    }
    let mut capture = rec.capture_setup;
    if let Some(k) = capture.kernel_stacks.as_mut() {
        k.recorded = stacks.len() as u64;
        if !stacks.is_empty() {
            let mut addrs: Vec<u64> = stacks.iter().flat_map(|s| s.addrs.clone()).collect();
            addrs.sort_unstable();
            addrs.dedup();
            let names = super::stacks::kernel_symbols(&addrs);
            k.symbolized = names.is_some();
            let tid_of = |thread: usize| targets.iter().find(|t| t.thread == thread).map(|t| t.tid);
            k.attached =
                super::stacks::attach(&mut outliers, &stacks, &tid_of, &names.unwrap_or_default());
        }
    }
    let by_process = breakdown::by_process(outliers.iter().map(|o| o.cause.breakdown.as_slice()));
    let known = |o: &&Outlier| o.cause.category != Category::Unknown;
    let missed_explained = outliers
        .iter()
        .filter(known)
        .map(|o| o.missed)
        .sum::<u64>()
        .min(missed);
    let worst = outliers.len().min(WORST_SHOWN) as u64;
    let worst_explained = outliers.iter().take(WORST_SHOWN).filter(known).count() as u64;
    let unknown_lost = outliers
        .iter()
        .filter(|o| o.cause.lost_events.is_some())
        .count() as u64;
    Explanation {
        events_enabled: rec.events_enabled,
        events,
        windows,
        windows_evicted,
        flags_lost: rec.flags_lost,
        dropped: rec.capture.dropped,
        lost: rec.lost,
        instance_removed: rec.instance_removed,
        preempt_model: machine.preempt_model.clone(),
        virtualization: machine.virtualization.clone(),
        steal: rec.steal_ns,
        drainer_held_ns: rec.drainer_held_ns,
        drainer_lag_max_ns: rec.capture.max_age_ns,
        threads,
        by_cause: by_cause(&outliers),
        by_process,
        outliers,
        missed,
        missed_explained,
        worst,
        worst_explained,
        unknown_lost,
        losses: rec.losses,
        capture,
    }
}

/// Outliers grouped by (category, name), most outliers first.
pub fn by_cause(outliers: &[Outlier]) -> Vec<CauseCount> {
    let mut v: Vec<CauseCount> = Vec::new();
    for o in outliers {
        let c = &o.cause;
        match v
            .iter_mut()
            .find(|k| k.category == c.category && k.name == c.name)
        {
            Some(k) => {
                k.outliers += 1;
                k.missed += o.missed;
                k.worst_ns = k.worst_ns.max(c.ns);
            }
            None => v.push(CauseCount {
                category: c.category,
                name: c.name.clone(),
                outliers: 1,
                missed: o.missed,
                worst_ns: c.ns,
                prio: c.parts.first().and_then(|p| p.prio),
            }),
        }
    }
    v.sort_by(|a, b| {
        b.outliers
            .cmp(&a.outliers)
            .then(b.worst_ns.cmp(&a.worst_ns))
    });
    v
}

impl Explanation {
    /// Total steal during the run, ns.
    pub fn steal_ns(&self) -> u64 {
        self.steal.iter().map(|s| s.ns).sum()
    }

    /// The cause the trace gave the noted wake-up with loop index `index`
    /// (the `index` offered to [`super::Notes::offer_on`]), for a loop that maps
    /// its late wake-ups back to what they made late; `None` when that
    /// wake-up was not among the explained ones.
    pub fn traced(&self, index: u64) -> Option<TracedCause> {
        let o = self.outliers.iter().find(|o| o.index == index)?;
        Some(TracedCause {
            category: o.cause.category.key().to_string(),
            name: o.cause.name.clone(),
            words: match o.cause.lost_events {
                Some(n) => format!("unknown (trace lost {n} events)"),
                None => cause_words(o.cause.category, &o.cause.name),
            },
            ns: o.cause.ns,
            detail: with_parts(&o.cause),
        })
    }

    /// What the trace covered, for a loop's report.
    pub fn coverage_counts(&self) -> TraceCoverage {
        TraceCoverage {
            wakeups: self.outliers.len() as u64,
            wakeups_explained: self
                .outliers
                .iter()
                .filter(|o| o.cause.category != Category::Unknown)
                .count() as u64,
            events: self.events,
            dropped: self.dropped,
            lost: self.lost,
            flags_lost: self.flags_lost,
        }
    }
}
