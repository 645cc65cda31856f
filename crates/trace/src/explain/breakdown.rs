//! The lateness of one wake-up split into parts that add up to it
//! (issue 29 item 2): what [`super::attribute`] names as the cause is the
//! largest context; this says where every nanosecond between deadline and
//! wake-up went, like rtla's `timerlat --auto-analysis` (IRQ latency versus
//! thread latency, the blocking thread) from the generic tracepoints.
//! Pure code: no I/O, tested on synthetic event sequences.
//!
//! The sweep of [`super::attribute`] cuts `[D, W]` into [`Segment`]s, each
//! with the CPU's context (a task, an interrupt handler, a softirq, idle);
//! each segment goes whole to one [`Kind`] here:
//!
//! - before the thread's timer fired (the first `local_timer_entry` after
//!   the deadline, or its `sched_wakeup`), with the thread asleep and no
//!   handler running: [`Kind::TimerDelay`] up to the thread's timer slack
//!   plus [`TIMER_DELIVERY_NS`]; beyond, on a VM the vCPU was not running
//!   ([`Kind::VcpuNotRunning`]: a silent gap, nothing recorded in the
//!   guest), on bare metal an idle CPU was waking ([`Kind::IdleExit`]) or
//!   a task held interrupts off ([`Kind::IrqsOff`]);
//! - an interrupt handler (the local timer's included) or a softirq:
//!   [`Kind::Irq`], [`Kind::Softirq`], whenever it ran;
//! - after the timer fired, another task on the CPU: [`Kind::Task`] when
//!   its priority was higher than or equal to the thread's (it was allowed
//!   to run), [`Kind::NonPreemptible`] when lower (the woken thread should
//!   have preempted it: a non-preemptible stretch of the kernel);
//! - an idle CPU after the timer fired: [`Kind::IdleExit`], on a VM only
//!   up to the CPU's deepest idle state's exit latency plus
//!   [`super::attribute::IDLE_EXIT_MARGIN_NS`], the rest
//!   [`Kind::VcpuNotRunning`] (a host stall);
//! - the thread itself, running at the deadline (its previous cycle
//!   overran): [`Kind::OwnWork`] (`page faults` when it took any in the
//!   period before the deadline);
//! - what is left is [`Kind::Remainder`], named: the thread's own return
//!   from its switch-in to its clock read, or a stretch with no traced
//!   context.
//!
//! Segments partition `[D, W]`, so the parts add up to the lateness
//! exactly ([`sum_ns`]).

use serde::Serialize;

/// Kinds of part of a late wake-up (the `kind` of a JSON `breakdown[]` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Deadline → the timer interrupt, within the thread's timer slack
    /// plus [`TIMER_DELIVERY_NS`]: the interrupt's own delivery.
    TimerDelay,
    /// An interrupt handler ran (the local timer's included).
    Irq,
    /// A softirq ran.
    Softirq,
    /// A task of higher or equal priority ran.
    Task,
    /// A task of lower priority ran after the thread's timer fired: it was
    /// not preempted (a non-preemptible stretch of the kernel).
    NonPreemptible,
    /// The timer interrupt was held off while a task ran (bare metal:
    /// interrupts off).
    IrqsOff,
    /// The idle CPU took this long to wake (bounded on a VM by its idle
    /// states' exit latency).
    IdleExit,
    /// The vCPU was not running: a silent gap with no event in the guest.
    VcpuNotRunning,
    /// RT throttling: the kernel gave the CPU to normal tasks (or idled)
    /// while real-time tasks were runnable — the fair server (Linux 6.12
    /// and later) or `sched_rt_runtime_us`. Seen as a switch from a
    /// preempted real-time task to a normal one, which the scheduler makes
    /// for no other reason; the stretch lasts until a real-time task runs
    /// again.
    RtThrottled,
    /// The thread's own work: its previous cycle overran (page faults).
    OwnWork,
    /// What is left, with what it is in the part's `name`.
    Remainder,
}

impl Kind {
    /// The kind's JSON name (`timer_delay`, `vcpu_not_running`, …).
    pub fn key(self) -> &'static str {
        match self {
            Kind::TimerDelay => "timer_delay",
            Kind::Irq => "irq",
            Kind::Softirq => "softirq",
            Kind::Task => "task",
            Kind::NonPreemptible => "non_preemptible",
            Kind::IrqsOff => "irqs_off",
            Kind::IdleExit => "idle_exit",
            Kind::VcpuNotRunning => "vcpu_not_running",
            Kind::RtThrottled => "rt_throttled",
            Kind::OwnWork => "own_work",
            Kind::Remainder => "remainder",
        }
    }

    /// Every kind.
    pub const ALL: [Kind; 11] = [
        Kind::TimerDelay,
        Kind::Irq,
        Kind::Softirq,
        Kind::Task,
        Kind::NonPreemptible,
        Kind::IrqsOff,
        Kind::IdleExit,
        Kind::VcpuNotRunning,
        Kind::RtThrottled,
        Kind::OwnWork,
        Kind::Remainder,
    ];
}

/// What a timer interrupt may take past the deadline plus the thread's
/// timer slack to arrive before the rest is put on something else, ns
/// (the interrupt's delivery; on this VM a few µs).
pub const TIMER_DELIVERY_NS: u64 = 20_000;

/// One part of a late wake-up's lateness (a JSON `breakdown[]` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    /// What it was.
    pub kind: Kind,
    /// Time, ns.
    pub ns: u64,
    /// The task's comm (thread name), the handler's or softirq's name,
    /// `page faults`, or what a remainder is.
    pub name: String,
    /// The task's pid (thread id): task, non-preemptible, irqs off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Its process (thread group) id, when known (from `/proc` while it
    /// still ran when the run was explained).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgid: Option<i32>,
    /// Its process's name (the thread group leader's comm), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Its scheduling policy: `SCHED_FIFO`, `SCHED_RR`, `SCHED_OTHER`,
    /// `SCHED_BATCH`, `SCHED_IDLE`, `SCHED_DEADLINE` when it was read from
    /// the live task and agrees with the trace's priority; else the class
    /// the trace's priority gives (`SCHED_FIFO/RR`, `SCHED_OTHER/BATCH/IDLE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Its kernel priority as `sched_switch` recorded it (0–98 real-time,
    /// 100–139 normal, -1 deadline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prio: Option<i32>,
    /// Page faults the thread took (own work).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<u64>,
    /// The task's kernel stack when it gave up the CPU to the late thread,
    /// innermost frame first (`schedule+0x27`, …): `task` and
    /// `non_preemptible` parts, with `--kernel-stacks` ([`super::stacks`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_stack: Option<Vec<String>>,
}

impl Share {
    fn new(kind: Kind, ns: u64, name: impl Into<String>) -> Share {
        Share {
            kind,
            ns,
            name: name.into(),
            pid: None,
            tgid: None,
            process: None,
            policy: None,
            prio: None,
            faults: None,
            kernel_stack: None,
        }
    }

    /// All of `ns` a remainder: `what` it is (why the trace cannot say).
    pub fn remainder(ns: u64, what: &str) -> Share {
        Share::new(Kind::Remainder, ns, what)
    }

    /// The policy class a kernel priority gives (`SCHED_FIFO/RR` below
    /// 100, `SCHED_OTHER/BATCH/IDLE` from 100, `SCHED_DEADLINE` below 0).
    pub fn policy_class(prio: i32) -> &'static str {
        if prio < 0 {
            "SCHED_DEADLINE"
        } else if prio < 100 {
            "SCHED_FIFO/RR"
        } else {
            "SCHED_OTHER/BATCH/IDLE"
        }
    }

    /// In words: `ft-hog (pid 42, SCHED_FIFO RT priority 90) 812 µs`,
    /// `softirq NET_RX 40 µs`, `timer delay 12 µs`.
    pub fn words(&self) -> String {
        let t = super::attribute::fmt_ns(self.ns);
        let who = |what: &str| {
            let mut s = format!("{what}{}", self.name);
            if let Some(pid) = self.pid {
                let mut inner = vec![format!("pid {pid}")];
                if let Some(p) = &self.process {
                    if p != &self.name {
                        inner.push(format!("process {p}"));
                    }
                }
                if let Some(prio) = self.prio {
                    // An exact policy only (a class from the priority alone
                    // says no more than the priority's words).
                    let pol = self.policy.as_deref().filter(|p| !p.contains('/'));
                    let pol = pol.unwrap_or("");
                    inner.push(
                        format!("{pol} {}", super::attribute::prio_words(prio))
                            .trim()
                            .to_string(),
                    );
                }
                s.push_str(&format!(" ({})", inner.join(", ")));
            }
            s
        };
        match self.kind {
            Kind::TimerDelay => format!("timer delay {t}"),
            Kind::Irq => format!("interrupt {} {t}", self.name),
            Kind::Softirq => format!("softirq {} {t}", self.name),
            Kind::Task => format!("{} {t}", who("task ")),
            Kind::NonPreemptible => format!("{} not preempted {t}", who("")),
            Kind::IrqsOff => format!("interrupts off in {} {t}", who("")),
            Kind::IdleExit => format!("idle exit {t}"),
            Kind::VcpuNotRunning => format!("vCPU not running {t}"),
            Kind::RtThrottled => format!("RT throttling: {} ran {t}", who("")),
            Kind::OwnWork => match self.faults {
                Some(n) if n > 0 => format!("the thread itself {t} ({n} page faults)"),
                _ => format!("the thread itself {t}"),
            },
            Kind::Remainder => format!("rest {t} ({})", self.name),
        }
    }
}

/// The parts' total, ns: the lateness they split.
pub fn sum_ns(parts: &[Share]) -> u64 {
    parts.iter().map(|p| p.ns).sum()
}

/// The `n` largest parts in words, `; `-separated: what a report shows
/// per outlier.
pub fn largest_words(parts: &[Share], n: usize) -> String {
    parts
        .iter()
        .filter(|p| p.ns > 0)
        .take(n)
        .map(Share::words)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The CPU's context during one [`Segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// An interrupt handler: its name (`local timer` for the local APIC
    /// timer).
    Irq(&'static str),
    /// A named interrupt handler (from `irq_handler_entry`): its name, its
    /// irq number.
    IrqNamed([u8; 16], i32),
    /// A softirq: its name.
    Softirq(&'static str),
    /// A task, with its kernel priority (pid 0: the idle task).
    Task(i32, i32),
    /// Nothing traced says.
    Unknown,
}

/// A stretch `[a, b)` of one CPU in one context (`idle`: in an idle state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// From, ns.
    pub a: u64,
    /// To, ns.
    pub b: u64,
    /// The context.
    pub ctx: Context,
    /// The CPU was in an idle state.
    pub idle: bool,
    /// Real-time tasks were throttled: since a switch from a preempted
    /// real-time task to a normal one (or idle), no real-time task ran.
    pub throttled: bool,
}

/// What the split needs to know besides the segments.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// The measured thread's id.
    pub tid: i32,
    /// When its timer fired (first local timer entry after the deadline,
    /// or its wake-up), ns.
    pub fired: Option<u64>,
    /// The thread was running at the deadline (its previous cycle overran).
    pub running_at_d: bool,
    /// Its kernel priority, when the trace recorded it.
    pub own_prio: Option<i32>,
    /// Its timer slack, ns.
    pub slack_ns: u64,
    /// Its page faults in the period before the deadline.
    pub faults: u64,
    /// On a virtual machine.
    pub on_vm: bool,
    /// The deepest idle state's exit latency, ns (cpuidle), when known.
    pub idle_exit_max_ns: Option<u64>,
}

fn irq_name(name: &[u8; 16], irq: i32) -> String {
    let n = name.iter().position(|&b| b == 0).unwrap_or(16);
    let s = String::from_utf8_lossy(&name[..n]).into_owned();
    if s.is_empty() {
        format!("irq {irq}")
    } else {
        s
    }
}

/// Accumulates parts, merging those of the same kind, name and pid.
struct Acc<'a> {
    parts: Vec<Share>,
    comm: &'a dyn Fn(i32) -> String,
}

impl Acc<'_> {
    fn add(&mut self, kind: Kind, ns: u64, ctx: Context, name: Option<&str>) {
        if ns == 0 {
            return;
        }
        let (name, pid, prio) = match (name, ctx) {
            (Some(n), _) => (n.to_string(), None, None),
            (None, Context::Task(p, pr)) => ((self.comm)(p), Some(p), Some(pr)),
            (None, Context::Irq(n)) | (None, Context::Softirq(n)) => (n.to_string(), None, None),
            (None, Context::IrqNamed(n, irq)) => (irq_name(&n, irq), None, None),
            (None, Context::Unknown) => ("no traced context".to_string(), None, None),
        };
        if let Some(p) = self
            .parts
            .iter_mut()
            .find(|s| s.kind == kind && s.name == name && s.pid == pid)
        {
            p.ns += ns;
            return;
        }
        let mut s = Share::new(kind, ns, name);
        s.pid = pid;
        s.prio = prio;
        s.policy = prio.map(|p| Share::policy_class(p).to_string());
        self.parts.push(s);
    }
}

/// Splits the lateness the `segments` cover into parts (see the module
/// docs), largest first; `comm` names a pid.
pub fn split(segments: &[Segment], f: &Facts, comm: &dyn Fn(i32) -> String) -> Vec<Share> {
    let mut acc = Acc {
        parts: Vec::new(),
        comm,
    };
    let mut budget = f.slack_ns.saturating_add(TIMER_DELIVERY_NS);
    for s in segments {
        if s.b <= s.a {
            continue;
        }
        let waiting_until = match f.fired {
            Some(t) if !f.running_at_d && s.a < t => Some(t.min(s.b)),
            _ => None,
        };
        let mut a = s.a;
        if let Some(until) = waiting_until {
            before_timer(&mut acc, s, until - a, &mut budget, f);
            a = until;
        }
        if s.b > a {
            after_timer(&mut acc, s, s.b - a, f);
        }
    }
    // An idle CPU on a VM is not slower to wake than its deepest idle
    // state allows: the rest of the silence is the host's.
    if let (true, Some(bound)) = (f.on_vm, f.idle_exit_max_ns) {
        let allowed = bound + super::attribute::IDLE_EXIT_MARGIN_NS;
        if let Some(i) = acc.parts.iter().position(|p| p.kind == Kind::IdleExit) {
            let idle = acc.parts[i].ns;
            if idle > allowed {
                acc.parts[i].ns = allowed;
                acc.add(
                    Kind::VcpuNotRunning,
                    idle - allowed,
                    Context::Unknown,
                    Some("vCPU not running"),
                );
            }
        }
    }
    let mut parts = acc.parts;
    for p in &mut parts {
        if p.kind == Kind::OwnWork && f.faults > 0 {
            p.faults = Some(f.faults);
        }
    }
    parts.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.kind.cmp(&b.kind)));
    parts
}

/// `ns` of segment `s` while the thread slept and its timer had not fired.
fn before_timer(acc: &mut Acc, s: &Segment, ns: u64, budget: &mut u64, f: &Facts) {
    match s.ctx {
        Context::Irq(_) | Context::IrqNamed(..) => return acc.add(Kind::Irq, ns, s.ctx, None),
        Context::Softirq(_) => return acc.add(Kind::Softirq, ns, s.ctx, None),
        _ => {}
    }
    let timer = ns.min(*budget);
    *budget -= timer;
    acc.add(Kind::TimerDelay, timer, s.ctx, Some("timer interrupt"));
    let rest = ns - timer;
    if rest == 0 {
        return;
    }
    let idle = s.idle || matches!(s.ctx, Context::Task(0, _));
    match s.ctx {
        _ if f.on_vm && (!idle || f.idle_exit_max_ns.is_none()) => {
            acc.add(Kind::VcpuNotRunning, rest, s.ctx, Some("vCPU not running"))
        }
        _ if idle => acc.add(Kind::IdleExit, rest, s.ctx, Some("idle")),
        Context::Task(p, _) if p != f.tid => acc.add(Kind::IrqsOff, rest, s.ctx, None),
        _ => acc.add(Kind::Remainder, rest, s.ctx, Some("no traced context")),
    }
}

/// `ns` of segment `s` once the timer fired (or with the thread running).
fn after_timer(acc: &mut Acc, s: &Segment, ns: u64, f: &Facts) {
    let rt_thread = f.own_prio.is_some_and(|p| (0..100).contains(&p));
    match s.ctx {
        Context::Task(p, theirs) if s.throttled && rt_thread && p != f.tid && theirs >= 100 => {
            let name = (p == 0).then_some("idle");
            acc.add(Kind::RtThrottled, ns, s.ctx, name);
        }
        Context::Irq(_) | Context::IrqNamed(..) => acc.add(Kind::Irq, ns, s.ctx, None),
        Context::Softirq(_) => acc.add(Kind::Softirq, ns, s.ctx, None),
        Context::Unknown => acc.add(Kind::Remainder, ns, s.ctx, None),
        Context::Task(p, _) if p == f.tid && f.running_at_d => {
            let what = if f.faults > 0 {
                "page faults"
            } else {
                "still running"
            };
            acc.add(Kind::OwnWork, ns, s.ctx, Some(what));
        }
        Context::Task(p, _) if p == f.tid => acc.add(
            Kind::Remainder,
            ns,
            s.ctx,
            Some("the thread's switch-in to its clock read"),
        ),
        Context::Task(0, _) => acc.add(Kind::IdleExit, ns, s.ctx, Some("idle")),
        Context::Task(..) if s.idle => acc.add(Kind::IdleExit, ns, s.ctx, Some("idle")),
        Context::Task(_, theirs) => {
            let lower =
                f.fired.is_some() && !f.running_at_d && f.own_prio.is_some_and(|own| theirs > own);
            let kind = if lower {
                Kind::NonPreemptible
            } else {
                Kind::Task
            };
            acc.add(kind, ns, s.ctx, None);
        }
    }
}

/// What the system says of a task, for [`fill_tasks`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    /// Its comm now (a pid reused by another task is not taken for it).
    pub comm: String,
    /// Its thread group id.
    pub tgid: i32,
    /// The thread group leader's comm.
    pub process: String,
    /// Its policy number (`SCHED_OTHER` 0, `SCHED_FIFO` 1, `SCHED_RR` 2,
    /// `SCHED_BATCH` 3, `SCHED_IDLE` 5, `SCHED_DEADLINE` 6).
    pub policy: u32,
}

/// The name of policy number `p`, when it agrees with kernel priority
/// `prio` (a task whose policy changed since is left to the class).
fn policy_name(p: u32, prio: i32) -> Option<&'static str> {
    let (name, fits) = match p {
        0 => ("SCHED_OTHER", prio >= 100),
        1 => ("SCHED_FIFO", (0..100).contains(&prio)),
        2 => ("SCHED_RR", (0..100).contains(&prio)),
        3 => ("SCHED_BATCH", prio >= 100),
        5 => ("SCHED_IDLE", prio >= 100),
        6 => ("SCHED_DEADLINE", prio < 0),
        _ => return None,
    };
    fits.then_some(name)
}

/// Fills in the process (tgid, its name) and the exact policy of the
/// tasks among `parts` from `info` (the session reads `/proc`), when the
/// task still has the comm the trace saw.
pub fn fill_tasks(parts: &mut [Share], info: &mut dyn FnMut(i32) -> Option<TaskInfo>) {
    for p in parts.iter_mut() {
        let Some(pid) = p.pid.filter(|&p| p > 0) else {
            continue;
        };
        let Some(i) = info(pid).filter(|i| i.comm == p.name) else {
            continue;
        };
        p.tgid = Some(i.tgid);
        p.process = Some(i.process);
        if let Some(name) = p.prio.and_then(|prio| policy_name(i.policy, prio)) {
            p.policy = Some(name.to_string());
        }
    }
}

/// Tasks of one process that made wake-ups late (`by_process[]` in the
/// JSON): the threads of one program (a compiler's workers, a runtime's
/// pool) are one cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessCount {
    /// Its name (the thread group leader's comm; a thread's name when the
    /// process was gone before the run was explained).
    pub process: String,
    /// Its thread group id (`None`: gone before the run was explained:
    /// grouped by thread).
    pub tgid: Option<i32>,
    /// Its threads seen in the breakdowns, by name.
    pub threads: Vec<String>,
    /// Outliers it had a part in.
    pub outliers: u64,
    /// Time its threads took from late wake-ups, ns, over all outliers.
    pub ns: u64,
    /// Its largest part of one outlier, ns (its threads' parts summed).
    pub worst_ns: u64,
}

/// The tasks of the breakdowns (task, non-preemptible, irqs off) grouped
/// by process, most time first.
pub fn by_process<'a>(breakdowns: impl IntoIterator<Item = &'a [Share]>) -> Vec<ProcessCount> {
    let mut v: Vec<ProcessCount> = Vec::new();
    for parts in breakdowns {
        let mut here: Vec<(usize, u64)> = Vec::new();
        for p in parts.iter().filter(|p| {
            matches!(
                p.kind,
                Kind::Task | Kind::NonPreemptible | Kind::IrqsOff | Kind::RtThrottled
            ) && p.pid.is_some()
        }) {
            let process = p.process.clone().unwrap_or_else(|| p.name.clone());
            let i = match v
                .iter()
                .position(|c| c.tgid == p.tgid && c.process == process)
            {
                Some(i) => i,
                None => {
                    v.push(ProcessCount {
                        process,
                        tgid: p.tgid,
                        threads: Vec::new(),
                        outliers: 0,
                        ns: 0,
                        worst_ns: 0,
                    });
                    v.len() - 1
                }
            };
            if !v[i].threads.contains(&p.name) {
                v[i].threads.push(p.name.clone());
            }
            v[i].ns += p.ns;
            match here.iter_mut().find(|(k, _)| *k == i) {
                Some((_, ns)) => *ns += p.ns,
                None => here.push((i, p.ns)),
            }
        }
        for (i, ns) in here {
            v[i].outliers += 1;
            v[i].worst_ns = v[i].worst_ns.max(ns);
        }
    }
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.process.cmp(&b.process)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            tid: 500,
            fired: Some(1_010_000),
            running_at_d: false,
            own_prio: Some(19),
            slack_ns: 0,
            faults: 0,
            on_vm: false,
            idle_exit_max_ns: None,
        }
    }

    fn seg(a: u64, b: u64, ctx: Context) -> Segment {
        Segment {
            a,
            b,
            ctx,
            idle: false,
            throttled: false,
        }
    }

    #[test]
    fn a_lower_priority_task_after_the_timer_is_non_preemptible_and_a_higher_one_a_task() {
        let comm = |p: i32| format!("t{p}");
        let segs = [
            seg(1_000_000, 1_010_000, Context::Task(42, 120)),
            seg(1_010_000, 1_012_000, Context::Irq("local timer")),
            seg(1_012_000, 1_500_000, Context::Task(42, 120)),
            seg(1_500_000, 1_600_000, Context::Task(43, 9)),
            seg(1_600_000, 1_603_000, Context::Task(500, 19)),
        ];
        let p = split(&segs, &facts(), &comm);
        assert_eq!(sum_ns(&p), 603_000);
        let k = |kind: Kind| p.iter().find(|s| s.kind == kind).cloned().unwrap();
        assert_eq!(k(Kind::NonPreemptible).ns, 488_000);
        assert_eq!(k(Kind::NonPreemptible).pid, Some(42));
        assert_eq!(k(Kind::Task).ns, 100_000);
        assert_eq!(k(Kind::Task).prio, Some(9));
        assert_eq!(k(Kind::Task).policy.as_deref(), Some("SCHED_FIFO/RR"));
        assert_eq!(k(Kind::TimerDelay).ns, 10_000);
        assert_eq!(k(Kind::Irq).ns, 2_000);
        assert_eq!(k(Kind::Remainder).ns, 3_000);
        assert_eq!(p[0].kind, Kind::NonPreemptible, "largest first: {p:?}");
    }

    #[test]
    fn a_timer_later_than_slack_and_delivery_is_irqs_off_on_bare_metal_and_the_vcpu_on_a_vm() {
        let comm = |p: i32| format!("t{p}");
        let segs = [
            seg(1_000_000, 1_300_000, Context::Task(42, 120)),
            seg(1_300_000, 1_302_000, Context::Irq("local timer")),
            seg(1_302_000, 1_305_000, Context::Task(500, 19)),
        ];
        let f = Facts {
            fired: Some(1_300_000),
            slack_ns: 50_000,
            ..facts()
        };
        let metal = split(&segs, &f, &comm);
        let ns = |p: &[Share], k: Kind| p.iter().filter(|s| s.kind == k).map(|s| s.ns).sum::<u64>();
        assert_eq!(ns(&metal, Kind::TimerDelay), 70_000);
        assert_eq!(ns(&metal, Kind::IrqsOff), 230_000);
        assert_eq!(sum_ns(&metal), 305_000);
        let vm = split(&segs, &Facts { on_vm: true, ..f }, &comm);
        assert_eq!(ns(&vm, Kind::VcpuNotRunning), 230_000);
        assert_eq!(ns(&vm, Kind::IrqsOff), 0);
        assert_eq!(sum_ns(&vm), 305_000);
    }

    #[test]
    fn words_name_the_task_its_process_and_policy() {
        let mut s = Share::new(Kind::Task, 812_000, "ft-hog");
        s.pid = Some(42);
        s.prio = Some(9);
        s.policy = Some("SCHED_FIFO".into());
        s.process = Some("firmtime".into());
        assert_eq!(
            s.words(),
            "task ft-hog (pid 42, process firmtime, SCHED_FIFO RT priority 90) 812 µs"
        );
        let k: Vec<&str> = Kind::ALL.iter().map(|k| k.key()).collect();
        for (i, a) in k.iter().enumerate() {
            assert!(!k[i + 1..].contains(a), "{a} twice");
        }
    }
}
