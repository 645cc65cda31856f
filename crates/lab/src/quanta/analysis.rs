//! Effective quanta from a scheduler trace: pure computation, no I/O.
//!
//! An effective quantum (Etsion et al. 2003, §4 and §6) runs from the
//! `sched_switch` that puts a task on a CPU to the `sched_switch` that takes
//! it off; it ended by preemption when the task was still runnable
//! (`prev_state` R) and by blocking otherwise. Ticks are counted per
//! quantum: a tick interrupt (`hrtimer_expire_entry` of the tick handler) on
//! the quantum's CPU while its task runs; without a known tick handler, the
//! multiples of the tick length on CLOCK_MONOTONIC inside the quantum.
//!
//! Quanta cut by the start or end of the trace are not counted (their
//! length is unknown); they are counted as `truncated`.
//!
//! # RT contract
//! Runs after the trace, on the collected events; allocates freely.

use firmtime_trace::raw::{Event, EventKind};
use std::collections::HashMap;

/// How ticks are recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickSource {
    /// `hrtimer_expire_entry` events whose callback is this address (the
    /// kernel's tick handler, from /proc/kallsyms): ticks actually taken.
    Handler(u64),
    /// No handler address: ticks assumed at multiples of this period (ns).
    Grid(u64),
}

/// One effective quantum of a traced task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantum {
    /// The task (thread id).
    pub tid: i32,
    /// CPU it ran on.
    pub cpu: u16,
    /// Scheduled in, trace ns.
    pub start_ns: u64,
    /// Scheduled out − scheduled in, ns.
    pub duration_ns: u64,
    /// Ticks taken while it ran.
    pub ticks: u32,
    /// Switched out while runnable (preempted), rather than blocked.
    pub preempted: bool,
}

/// Which application each traced task belongs to.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    apps: usize,
    by_tid: HashMap<i32, usize>,
    follow_forks: bool,
}

impl Targets {
    /// `apps` applications; with `follow_forks`, tasks forked (or cloned as
    /// threads) by a task of an application join it.
    pub fn new(apps: usize, follow_forks: bool) -> Targets {
        Targets {
            apps,
            by_tid: HashMap::new(),
            follow_forks,
        }
    }

    /// Adds task `tid` to application `app`.
    pub fn add(&mut self, tid: i32, app: usize) {
        if app < self.apps && tid > 0 {
            self.by_tid.insert(tid, app);
        }
    }

    /// The application of `tid`.
    pub fn app_of(&self, tid: i32) -> Option<usize> {
        self.by_tid.get(&tid).copied()
    }

    /// Number of applications.
    pub fn len(&self) -> usize {
        self.apps
    }

    /// True with no applications.
    pub fn is_empty(&self) -> bool {
        self.apps == 0
    }
}

/// What [`analyze`] found.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Quanta of each application, in switch-out order.
    pub quanta: Vec<Vec<Quantum>>,
    /// Quanta of each application cut by the trace's start or end.
    pub truncated: Vec<u64>,
    /// Every task id seen per application.
    pub tids: Vec<Vec<i32>>,
    /// Time in the idle task (pid 0), summed over CPUs, ns.
    pub idle_ns: u64,
    /// Time in tasks of no application, ns.
    pub other_ns: u64,
    /// Time covered by complete quanta of anything (apps + idle + other), ns.
    pub covered_ns: u64,
    /// Tick interrupts seen (any task), when ticks come from the handler.
    pub ticks_seen: u64,
    /// First and last event time, ns.
    pub span_ns: (u64, u64),
}

#[derive(Clone, Copy)]
struct Running {
    tid: i32,
    start: u64,
    ticks: u32,
}

/// Computes the effective quanta of every application in `events` (sorted
/// by time; ties keep their order). `targets` grows by forks when asked to.
pub fn analyze(events: &[Event], targets: &mut Targets, ticks: TickSource) -> Analysis {
    let n = targets.len();
    let mut a = Analysis {
        quanta: vec![Vec::new(); n],
        truncated: vec![0; n],
        tids: vec![Vec::new(); n],
        ..Analysis::default()
    };
    if let (Some(f), Some(l)) = (events.first(), events.last()) {
        a.span_ns = (f.time_ns, l.time_ns);
    }
    let mut cpus: Vec<Option<Running>> = Vec::new();
    let mut seen: Vec<std::collections::HashSet<i32>> = vec![Default::default(); n];
    for e in events {
        let c = usize::from(e.cpu);
        if cpus.len() <= c {
            cpus.resize(c + 1, None);
        }
        match e.kind {
            EventKind::Fork if targets.follow_forks => {
                if let Some(app) = targets.app_of(e.prev_pid) {
                    targets.add(e.next_pid, app);
                }
            }
            EventKind::HrtimerExpire => {
                if let TickSource::Handler(f) = ticks {
                    if e.arg == f {
                        a.ticks_seen += 1;
                        if let Some(r) = cpus[c].as_mut() {
                            if r.tid == e.pid {
                                r.ticks += 1;
                            }
                        }
                    }
                }
            }
            EventKind::Switch => {
                match cpus[c] {
                    Some(r) if r.tid == e.prev_pid => {
                        let d = e.time_ns.saturating_sub(r.start);
                        let t = match ticks {
                            TickSource::Handler(_) => r.ticks,
                            TickSource::Grid(p) => {
                                let p = p.max(1);
                                (e.time_ns / p - r.start / p) as u32
                            }
                        };
                        a.covered_ns += d;
                        if r.tid == 0 {
                            a.idle_ns += d;
                        } else if let Some(app) = targets.app_of(r.tid) {
                            a.quanta[app].push(Quantum {
                                tid: r.tid,
                                cpu: e.cpu,
                                start_ns: r.start,
                                duration_ns: d,
                                ticks: t,
                                preempted: e.preempted(),
                            });
                            if seen[app].insert(r.tid) {
                                a.tids[app].push(r.tid);
                            }
                        } else {
                            a.other_ns += d;
                        }
                    }
                    _ => {
                        // The first switch seen on this CPU (or events lost
                        // in between): the quantum's start is unknown.
                        if let Some(app) = targets.app_of(e.prev_pid) {
                            a.truncated[app] += 1;
                        }
                    }
                }
                cpus[c] = Some(Running {
                    tid: e.next_pid,
                    start: e.time_ns,
                    ticks: 0,
                });
            }
            _ => {}
        }
    }
    for r in cpus.into_iter().flatten() {
        if let Some(app) = targets.app_of(r.tid) {
            a.truncated[app] += 1;
        }
    }
    a
}
