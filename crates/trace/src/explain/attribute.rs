//! Attribution: what a CPU did between a missed deadline and the late
//! wake-up, from the trace events of that CPU. Pure code: no I/O, tested
//! on synthetic event sequences.
//!
//! For one late wake-up of thread `tid` on CPU `c` (deadline `D`, wake
//! `W`, both CLOCK_MONOTONIC like the trace's `mono` clock) the events of
//! `c` are swept from the last `sched_switch` before `D` to `W`, keeping the
//! CPU's context: the task on it (from `sched_switch`), an interrupt handler
//! (`irq_handler_entry/exit`, `local_timer_entry/exit`), a softirq
//! (`softirq_entry/exit`), or idle. Every nanosecond of `[D, W]` is charged
//! to one context ([`Part`]). While the thread was still asleep and its
//! timer interrupt had not arrived yet (before the first
//! `local_timer_entry` or its `sched_wakeup`), the time is *timer delivery*:
//! up to the thread's timer slack it is [`Category::Slack`]; beyond, on a
//! virtual machine with nothing but the interrupted context on the CPU, the
//! vCPU was not running ([`Category::Vm`]); on bare metal an idle CPU was
//! waking ([`Category::IdleExit`]) or interrupts were off
//! ([`Category::IrqsOff`]). The largest part is the cause.

use super::breakdown::{self, Context, Facts, Segment, Share};
use crate::raw::{softirq_name, switch_prios, Event, EventKind, IDLE_EXIT};
use serde::Serialize;
use std::collections::HashMap;

/// What made a wake-up late.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The timer interrupt came late and nothing ran in the guest: the
    /// hypervisor was not running the vCPU (steal time, host preemption).
    Vm,
    /// An interrupt handler ran on the CPU.
    Irq,
    /// A softirq (NET_RX, TIMER, RCU, …) ran on the CPU.
    Softirq,
    /// Another task ran on the CPU.
    Task,
    /// The measured thread itself was running (page faults, an overrun).
    #[serde(rename = "self")]
    SelfThread,
    /// The CPU was idle and took this long to wake.
    IdleExit,
    /// Interrupts were off while another context ran (bare metal).
    IrqsOff,
    /// The thread's timer slack: the kernel may fire its timer this late.
    Slack,
    /// No traced event explains it (counted, never hidden).
    Unknown,
}

impl Category {
    /// The category's name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Category::Vm => "vm",
            Category::Irq => "irq",
            Category::Softirq => "softirq",
            Category::Task => "task",
            Category::SelfThread => "self",
            Category::IdleExit => "idle exit",
            Category::IrqsOff => "irqs off",
            Category::Slack => "slack",
            Category::Unknown => "unknown",
        }
    }

    /// The category's key in JSON (its serde name: `idle_exit`, `irqs_off`).
    pub fn key(self) -> &'static str {
        match self {
            Category::IdleExit => "idle_exit",
            Category::IrqsOff => "irqs_off",
            c => c.name(),
        }
    }

    /// Every category.
    pub const ALL: [Category; 9] = [
        Category::Vm,
        Category::Irq,
        Category::Softirq,
        Category::Task,
        Category::SelfThread,
        Category::IdleExit,
        Category::IrqsOff,
        Category::Slack,
        Category::Unknown,
    ];

    /// The category whose [`Category::key`] is `key`.
    pub fn from_key(key: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.key() == key)
    }

    /// In plain words.
    pub fn words(self) -> &'static str {
        match self {
            Category::Vm => "the VM was not running",
            Category::Irq => "an interrupt handler ran",
            Category::Softirq => "a softirq ran",
            Category::Task => "another task ran",
            Category::SelfThread => "the thread itself was busy",
            Category::IdleExit => "the idle CPU was slow to wake",
            Category::IrqsOff => "interrupts were off",
            Category::Slack => "timer slack",
            Category::Unknown => "no traced event explains it",
        }
    }
}

/// One context's share of a late wake-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Part {
    /// What it was.
    pub category: Category,
    /// The task's comm, the interrupt's or softirq's name, `page faults`, …
    pub name: String,
    /// The task's pid (task, irqs off).
    pub pid: Option<i32>,
    /// The task's kernel priority (0–99 real-time, 100–139 normal; task).
    pub prio: Option<i32>,
    /// Time charged, ns.
    pub ns: u64,
}

/// The thread a late wake-up belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wakeup {
    /// CPU the thread was pinned to.
    pub cpu: usize,
    /// Its thread id.
    pub tid: i32,
    /// The deadline, CLOCK_MONOTONIC ns.
    pub deadline_ns: u64,
    /// When it woke, CLOCK_MONOTONIC ns.
    pub wake_ns: u64,
    /// Its timer slack, ns.
    pub slack_ns: u64,
    /// Its period, ns (page faults are counted from one period before the deadline).
    pub period_ns: u64,
}

/// The machine, for the words of a cause.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Machine {
    /// True on a virtual machine.
    pub on_vm: bool,
    /// Preemption model (`none`, `voluntary`, `full`, `rt`, …).
    pub preempt_model: String,
    /// `none` on bare metal, else the hypervisor; `None` when unknown.
    pub virtualization: Option<String>,
    /// The exit latency of the deepest enabled idle state of its CPUs
    /// (cpuidle sysfs), ns; `None` when unknown. On a VM an idle CPU slower
    /// to wake than this plus [`IDLE_EXIT_MARGIN_NS`] was not running: the
    /// rest is a host stall ([`Category::Vm`]), not "idle exit".
    pub idle_exit_max_ns: Option<u64>,
}

/// What an idle CPU may take beyond its idle state's exit latency to run
/// a woken thread (the wake-up path: interrupt, scheduler, switch), ns.
pub const IDLE_EXIT_MARGIN_NS: u64 = 20_000;

/// The cause of one late wake-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// The largest part's category ([`Category::Unknown`] without one).
    pub category: Category,
    /// The largest part's name.
    pub name: String,
    /// Time charged to it, ns.
    pub ns: u64,
    /// One sentence, with figures.
    pub detail: String,
    /// Every context, largest first.
    pub parts: Vec<Part>,
    /// The lateness split into parts that add up to it exactly, largest
    /// first ([`super::breakdown`]): timer delay, interrupts, softirqs,
    /// tasks (with pid, process, policy, priority), a non-preemptible
    /// stretch, idle exit, the vCPU not running, the thread's own work,
    /// and the remainder, named. A wake-up without a cause has one
    /// remainder part saying why.
    pub breakdown: Vec<Share>,
    /// Deadline → the thread's timer fired (the first local timer
    /// interrupt after the deadline, or its wake-up), ns: rtla's "IRQ
    /// latency"; the rest of the lateness is the thread's. Absent when the
    /// trace shows no timer interrupt in the span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_fired_ns: Option<u64>,
    /// Events the kernel lost on this wake-up's CPU in the span its
    /// attribution reads (then the cause is [`Category::Unknown`], named
    /// [`TRACE_LOST`]: a hole in the trace looks like "nothing ran", so no
    /// cause is guessed). Absent when the span's trace is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_events: Option<u64>,
}

/// The name of an [`Category::Unknown`] cause whose span the kernel lost
/// events in ([`Cause::lost_events`]).
pub const TRACE_LOST: &str = "trace lost events";

/// The trace, sorted per CPU, with the comms it saw.
#[derive(Debug)]
pub struct Timeline {
    events: Vec<Event>,
    comms: HashMap<i32, [u8; 16]>,
    /// Names of tasks no record names, resolved by the session
    /// ([`Timeline::with_names`]).
    names: HashMap<i32, String>,
    prios: HashMap<i32, i32>,
    /// The spans the trace covers (`None`: all of it).
    windows: Option<Vec<super::Window>>,
    /// Windows dropped whole for want of room.
    evicted: Vec<super::Window>,
    /// Where the kernel lost events ([`crate::loss`]).
    losses: Vec<crate::loss::Loss>,
}

impl Timeline {
    /// Sorts `events` (a trace that covers its whole span) by CPU then
    /// time and collects comms and priorities.
    pub fn new(events: Vec<Event>) -> Timeline {
        Self::with_windows(events, None, Vec::new())
    }

    /// Like [`Timeline::new`] for a trace kept only inside `windows`
    /// (`None`: all of it); `evicted` are the windows dropped for want of room.
    pub fn with_windows(
        mut events: Vec<Event>,
        windows: impl Into<Option<Vec<super::Window>>>,
        evicted: Vec<super::Window>,
    ) -> Timeline {
        events.sort_by_key(|e| (e.cpu, e.time_ns));
        let mut comms = HashMap::new();
        let mut prios = HashMap::new();
        for e in &events {
            match e.kind {
                EventKind::Switch => {
                    comms.insert(e.prev_pid, e.comm);
                    let (p, n) = switch_prios(e.arg);
                    prios.insert(e.prev_pid, p);
                    prios.insert(e.next_pid, n);
                }
                EventKind::Wakeup | EventKind::WakeupNew => {
                    comms.insert(e.prev_pid, e.comm);
                }
                _ => {}
            }
        }
        Timeline {
            events,
            comms,
            names: HashMap::new(),
            prios,
            windows: windows.into(),
            evicted,
            losses: Vec::new(),
        }
    }

    /// The same timeline, knowing where the kernel lost events: a wake-up
    /// whose span overlaps a loss on its CPU is not attributed
    /// ([`Cause::lost_events`]).
    pub fn with_losses(mut self, losses: Vec<crate::loss::Loss>) -> Timeline {
        self.losses = losses;
        self
    }

    /// The same timeline, knowing the names of tasks that no record names
    /// ([`unnamed_pids`]; the session reads them from `/proc` while they
    /// run: [`super::session::resolve_names`]). Without one a task is
    /// `pid N`.
    pub fn with_names(mut self, names: HashMap<i32, String>) -> Timeline {
        self.names = names;
        self
    }

    /// The first instant of the kept span of `cpu` that holds `[a, b]`:
    /// `Ok(0)` for a whole trace; `Err(why)` when it is not covered.
    fn span(&self, cpu: usize, a: u64, b: u64) -> std::result::Result<u64, String> {
        let holds =
            |w: &&super::Window| usize::from(w.cpu) == cpu && w.start_ns <= a && w.end_ns >= b;
        if self.evicted.iter().any(|w| holds(&w)) {
            return Err(format!(
                "its window on CPU {cpu} was dropped for want of room in the trace store (later \
                 wake-ups kept first)"
            ));
        }
        match &self.windows {
            None => Ok(0),
            Some(ws) => ws.iter().find(holds).map(|w| w.start_ns).ok_or_else(|| {
                format!(
                    "the trace does not cover this wake-up on CPU {cpu} (its window was not kept)"
                )
            }),
        }
    }

    /// Events of `cpu`, in time order.
    pub fn cpu(&self, cpu: usize) -> &[Event] {
        let c = cpu as u16;
        let a = self.events.partition_point(|e| e.cpu < c);
        let b = self.events.partition_point(|e| e.cpu <= c);
        &self.events[a..b]
    }

    /// The events back (sorted by CPU then time), for their store to be
    /// reused ([`super::Lease::give_store`]).
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }

    /// Events in the timeline.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True without events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The comm of `pid` as the trace saw it (`swapper` for 0).
    pub fn comm(&self, pid: i32) -> String {
        if pid == 0 {
            return "idle".into();
        }
        match self.comms.get(&pid) {
            Some(c) => {
                let n = c.iter().position(|&b| b == 0).unwrap_or(16);
                String::from_utf8_lossy(&c[..n]).into_owned()
            }
            None => self
                .names
                .get(&pid)
                .cloned()
                .unwrap_or_else(|| format!("pid {pid}")),
        }
    }
}

/// The tasks `events` show on a CPU (`common_pid`, a switch's next task)
/// that no record names (a switch names its previous task, a wake-up the
/// woken one), ascending: their names must come from elsewhere
/// ([`Timeline::with_names`]).
pub fn unnamed_pids(events: &[Event]) -> Vec<i32> {
    let mut named = std::collections::HashSet::new();
    let mut seen = std::collections::BTreeSet::new();
    for e in events {
        match e.kind {
            EventKind::Switch => {
                named.insert(e.prev_pid);
                seen.insert(e.next_pid);
            }
            EventKind::Wakeup | EventKind::WakeupNew => {
                named.insert(e.prev_pid);
            }
            _ => {}
        }
        seen.insert(e.pid);
    }
    seen.into_iter()
        .filter(|p| *p != 0 && !named.contains(p))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ctx {
    Irq([u8; 16], i32),
    LocalTimer,
    Softirq(i32),
    Task(i32, i32),
    Unknown,
}

/// Kernel priority in words: `RT priority 90`, `nice 0`, `SCHED_DEADLINE`.
pub fn prio_words(prio: i32) -> String {
    if prio < 0 {
        "SCHED_DEADLINE".into()
    } else if prio < 100 {
        format!("RT priority {}", 99 - prio)
    } else {
        format!("nice {}", prio - 120)
    }
}

/// A duration in words: `812 µs`, `2.1 ms`.
pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{} µs", ns / 1000)
    }
}

/// Attributes one late wake-up (see the module docs).
pub fn attribute(tl: &Timeline, w: &Wakeup, m: &Machine) -> Cause {
    let ev = tl.cpu(w.cpu);
    let (d, wk) = (w.deadline_ns, w.wake_ns.max(w.deadline_ns));
    let unknown = |detail: String| Cause {
        category: Category::Unknown,
        name: String::new(),
        ns: wk - d,
        breakdown: rest_only(wk - d, "not in the trace"),
        detail,
        parts: Vec::new(),
        lost_events: None,
        timer_fired_ns: None,
    };
    let from = match tl.span(w.cpu, d, wk) {
        Ok(f) => f,
        Err(why) => return unknown(why),
    };
    // A kept window holds [D, W] by construction; a whole trace must span it.
    let covered = tl.windows.is_some()
        || (ev.first().is_some_and(|e| e.time_ns <= d)
            && ev.last().is_some_and(|e| e.time_ns >= wk));
    if !covered {
        return unknown(format!(
            "the trace does not cover this wake-up on CPU {} (store full or events lost)",
            w.cpu
        ));
    }
    let lo = ev.partition_point(|e| e.time_ns < from);
    let at_d = ev.partition_point(|e| e.time_ns < d).max(lo);
    // From the last switch before the deadline; without one in the kept
    // span, from its first event, whose common_pid is the task on the CPU.
    let (start, first_task) = match ev[lo..at_d]
        .iter()
        .rposition(|e| e.kind == EventKind::Switch)
    {
        Some(i) => (lo + i, None),
        None => match ev.get(lo) {
            Some(e) => (lo, Some(e.pid)),
            None => return unknown(format!("no event on CPU {} in the kept span", w.cpu)),
        },
    };
    // The span the attribution reads: from the switch it starts at (and
    // the page faults of the period before the deadline) to the wake-up.
    // Events lost in it may be what made the wake-up late: no guess.
    let read_from = ev[start]
        .time_ns
        .min(from.max(d.saturating_sub(w.period_ns)));
    let (lost, holes) = crate::loss::lost_in(&tl.losses, w.cpu, read_from, wk);
    if holes > 0 {
        // A page full to its end has no room for the count: the CPU's
        // count from `stats` is then shared among such holes (an estimate).
        let estimated = tl
            .losses
            .iter()
            .any(|l| l.overlaps(w.cpu, read_from, wk) && !l.counted);
        let n = match (lost, estimated) {
            (0, _) => "events (count not recorded)".to_string(),
            (n, true) => format!("about {n} events"),
            (n, false) => format!("{n} events"),
        };
        return Cause {
            category: Category::Unknown,
            name: TRACE_LOST.into(),
            ns: wk - d,
            detail: format!(
                "the kernel lost {n} on CPU {} between the deadline's context and the wake-up \
                 (ring buffer overrun): no cause is given rather than a guess",
                w.cpu
            ),
            parts: Vec::new(),
            lost_events: Some(lost),
            breakdown: rest_only(wk - d, TRACE_LOST),
            timer_fired_ns: None,
        };
    }
    let end = ev.partition_point(|e| e.time_ns <= wk);
    let window = &ev[at_d..end];
    // The thread's timer: its wake-up (on any CPU's record, usually this one)
    // or the first local timer interrupt after the deadline.
    let woken = window
        .iter()
        .find(|e| matches!(e.kind, EventKind::Wakeup) && e.prev_pid == w.tid)
        .map(|e| e.time_ns);
    let timer = window
        .iter()
        .find(|e| e.kind == EventKind::LocalTimer)
        .map(|e| e.time_ns);
    let fired = match (woken, timer) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let faults = ev[ev.partition_point(|e| e.time_ns < d.saturating_sub(w.period_ns))..end]
        .iter()
        .filter(|e| e.kind == EventKind::PageFault && e.pid == w.tid)
        .count();

    let mut task = match first_task {
        Some(p) => Ctx::Task(p, tl.prios.get(&p).copied().unwrap_or(120)),
        None => Ctx::Unknown,
    };
    let mut running_at_d = matches!(task, Ctx::Task(p, _) if p == w.tid);
    // The thread switched out runnable (preempted) before the deadline had
    // not gone to sleep: still in its previous cycle at the deadline.
    let mut preempted = false;
    let mut stack: Vec<Ctx> = Vec::with_capacity(4);
    let mut idle = false;
    let mut own_prio = None;
    let mut acc: HashMap<(Category, Ctx), u64> = HashMap::new();
    let mut slack_left = w.slack_ns;
    let mut idle_mark = 0u64;
    let mut segments: Vec<Segment> = Vec::new();
    // Real-time tasks throttled (see `breakdown::Kind::RtThrottled`).
    let mut throttled = false;
    let mut t = d;
    for (i, e) in ev[start..end].iter().enumerate() {
        let now = e.time_ns.clamp(d, wk);
        let mut segment_now = false;
        if now > t {
            let ctx = stack.last().copied().unwrap_or(task);
            charge(
                &mut acc,
                ctx,
                idle,
                t,
                now,
                w,
                m,
                fired,
                &mut slack_left,
                running_at_d,
            );
            segments.push(segment(t, now, ctx, idle, throttled));
            segment_now = true;
            t = now;
        }
        // A task seen on the CPU while the sweep believed it idle was
        // switched in from idle without a record: the idle time charged
        // since the last record was that task's.
        let seen = match e.kind {
            EventKind::Switch => e.prev_pid,
            _ => e.pid,
        };
        if matches!(task, Ctx::Task(0, _)) && seen != 0 && seen != w.tid {
            let key = (Category::IdleExit, Ctx::Unknown);
            let now_idle = acc.get(&key).copied().unwrap_or(0);
            let moved = now_idle.saturating_sub(idle_mark);
            if moved > 0 {
                acc.insert(key, idle_mark);
                let prio = tl.prios.get(&seen).copied().unwrap_or(120);
                *acc.entry((Category::Task, Ctx::Task(seen, prio)))
                    .or_default() += moved;
            }
            // The same for the breakdown: the stretch since the last
            // record was that task's.
            if let Some(s) = segments.last_mut().filter(|_| segment_now) {
                if matches!(s.ctx, Context::Task(0, _)) {
                    let prio = tl.prios.get(&seen).copied().unwrap_or(120);
                    (s.ctx, s.idle) = (Context::Task(seen, prio), false);
                }
            }
        }
        match e.kind {
            EventKind::Switch => {
                let (prev_prio, next_prio) = switch_prios(e.arg);
                if next_prio < 100 {
                    throttled = false;
                } else if (0..100).contains(&prev_prio) && e.preempted() {
                    throttled = true;
                }
                task = Ctx::Task(e.next_pid, next_prio);
                idle = e.next_pid == 0;
                if e.next_pid == w.tid {
                    own_prio = Some(next_prio);
                }
                stack.clear();
            }
            EventKind::IrqEntry => stack.push(Ctx::Irq(e.comm, e.prev_pid)),
            EventKind::LocalTimer => stack.push(Ctx::LocalTimer),
            EventKind::SoftirqEntry => stack.push(Ctx::Softirq(e.prev_pid)),
            EventKind::IrqExit | EventKind::LocalTimerExit | EventKind::SoftirqExit => {
                stack.pop();
            }
            EventKind::CpuIdle => idle = e.arg != IDLE_EXIT,
            _ => {}
        }
        // Every record names the task on the CPU (common_pid; for an
        // interrupt, the task it interrupted). Some kernels record nothing
        // from a CPU's idle task (this development VM's CPU 1: no cpu_idle,
        // no switch out of idle), so a task switched in from idle first
        // shows up here.
        if e.kind != EventKind::Switch && !matches!(task, Ctx::Task(p, _) if p == e.pid) {
            task = Ctx::Task(e.pid, tl.prios.get(&e.pid).copied().unwrap_or(120));
            idle = e.pid == 0 && idle;
        }
        if start + i < at_d {
            if e.kind == EventKind::Switch && e.prev_pid == w.tid {
                preempted = e.preempted();
            }
            running_at_d = preempted || matches!(task, Ctx::Task(p, _) if p == w.tid);
        }
        idle_mark = acc
            .get(&(Category::IdleExit, Ctx::Unknown))
            .copied()
            .unwrap_or(0);
    }
    if wk > t {
        let ctx = stack.last().copied().unwrap_or(task);
        segments.push(segment(t, wk, ctx, idle, throttled));
        charge(
            &mut acc,
            ctx,
            idle,
            t,
            wk,
            w,
            m,
            fired,
            &mut slack_left,
            running_at_d,
        );
    }

    // Issue 29: on a VM, an idle CPU cannot be slower to wake than its own
    // deepest idle state allows (haltpoll: 1 µs); longer, with no guest
    // event, the host was not running the vCPU — even when steal shows 0
    // (it counts in 10 ms steps).
    let mut host_stall_ns = 0;
    if let (true, Some(bound)) = (m.on_vm, m.idle_exit_max_ns) {
        let allowed = bound + IDLE_EXIT_MARGIN_NS;
        let key = (Category::IdleExit, Ctx::Unknown);
        if let Some(&idle) = acc.get(&key) {
            if idle > allowed {
                acc.insert(key, allowed);
                host_stall_ns = idle - allowed;
                *acc.entry((Category::Vm, Ctx::Unknown)).or_default() += host_stall_ns;
            }
        }
    }
    // The scheduler chose a normal task (or idle) over the woken real-time
    // thread: only throttling does that (a non-preemptible stretch delays
    // the choice, never makes it). Then the whole stretch after the timer
    // was throttled, from before that switch too: the switch that began it
    // can lie before the kept span.
    let own_rt = own_prio
        .or_else(|| tl.prios.get(&w.tid).copied())
        .is_some_and(|p| (0..100).contains(&p));
    let chose_normal = own_rt
        && !running_at_d
        && fired.is_some_and(|f| wk.saturating_sub(f) >= THROTTLED_MIN_NS)
        && fired.is_some_and(|f| {
            ev[start..end]
                .iter()
                .filter(|e| e.kind == EventKind::Switch && e.time_ns >= f)
                .take_while(|e| e.next_pid != w.tid)
                .any(|e| e.prev_pid != w.tid && switch_prios(e.arg).1 >= 100)
        });
    if chose_normal {
        let f = fired.unwrap_or(d);
        for s in segments.iter_mut().filter(|s| s.b > f) {
            s.throttled = true;
        }
    }
    let facts = Facts {
        tid: w.tid,
        fired,
        running_at_d,
        own_prio: own_prio.or_else(|| tl.prios.get(&w.tid).copied()),
        slack_ns: w.slack_ns,
        faults: faults as u64,
        on_vm: m.on_vm,
        idle_exit_max_ns: m.idle_exit_max_ns,
    };
    let shares = breakdown::split(&segments, &facts, &|p| tl.comm(p));
    let mut parts: Vec<Part> = acc
        .into_iter()
        .map(|((cat, ctx), ns)| part(tl, cat, ctx, ns, faults))
        .collect();
    parts.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
    let Some(top) = parts.first().cloned() else {
        return unknown("no traced context between the deadline and the wake-up".into());
    };
    let detail = if top.category == Category::Vm && host_stall_ns * 2 >= top.ns {
        format!(
            "CPU {} stayed idle {} after the thread's timer fired with no event in the guest, \
             longer than its deepest idle state takes to exit ({}): the hypervisor was not \
             running this vCPU (a host stall; steal time counts in 10 ms steps and may show 0)",
            w.cpu,
            fmt_ns(top.ns),
            fmt_ns(m.idle_exit_max_ns.unwrap_or(0))
        )
    } else {
        words(
            tl,
            &top,
            w,
            m,
            own_prio,
            faults,
            fired.map(|f| f.saturating_sub(d)),
        )
    };
    // RT throttling: the stretch is the kernel's, whichever normal tasks
    // (or idle) it ran, one cause with the knob that sets it.
    let throttled_ns: u64 = shares
        .iter()
        .filter(|s| s.kind == breakdown::Kind::RtThrottled)
        .map(|s| s.ns)
        .sum();
    let (category, name, ns, detail) = if shares
        .first()
        .is_some_and(|s| s.kind == breakdown::Kind::RtThrottled)
    {
        let who: Vec<String> = shares
            .iter()
            .filter(|s| s.kind == breakdown::Kind::RtThrottled)
            .map(|s| s.name.clone())
            .collect();
        (
            Category::Task,
            RT_THROTTLING.to_string(),
            throttled_ns,
            throttling_words(w.cpu, throttled_ns, &who),
        )
    } else {
        (top.category, top.name.clone(), top.ns, detail)
    };
    Cause {
        category,
        name,
        ns,
        detail,
        parts,
        lost_events: None,
        breakdown: shares,
        timer_fired_ns: fired.map(|f| f.saturating_sub(d)),
    }
}

/// The least time from the thread's timer to its wake-up for a switch to
/// a normal task in between to count as throttling, ns. The timer is
/// taken to have fired at the first local timer interrupt after the
/// deadline; a sleeper whose timer expires a little later (a relative
/// sleep that drifted) wakes within microseconds of it, a throttled one
/// waits for the rest of the reserve (tens of ms).
pub const THROTTLED_MIN_NS: u64 = 1_000_000;

/// The name of a [`Category::Task`] cause that was RT throttling
/// ([`breakdown::Kind::RtThrottled`] the largest part).
pub const RT_THROTTLING: &str = "RT throttling";

/// RT throttling in words, with the knobs that set it.
pub fn throttling_words(cpu: usize, ns: u64, who: &[String]) -> String {
    format!(
        "RT throttling: the kernel held real-time tasks off CPU {cpu} for {} and ran {} at \
         normal priority (it reserves part of each second for normal tasks: since Linux 6.12 \
         the fair server, /sys/kernel/debug/sched/fair_server/cpu{cpu}/runtime, default 50 ms \
         of each 1 s, which sched_rt_runtime_us = -1 does not turn off; before 6.12 \
         /proc/sys/kernel/sched_rt_runtime_us, default 950000 of 1000000 µs): keep the \
         real-time load of this CPU under 95 % or lower the reserve",
        fmt_ns(ns),
        who.join(", ")
    )
}

/// A breakdown that is all remainder: `what` (the trace does not say).
fn rest_only(ns: u64, what: &str) -> Vec<Share> {
    vec![Share::remainder(ns, what)]
}

/// The breakdown's view of a context.
fn segment(a: u64, b: u64, ctx: Ctx, idle: bool, throttled: bool) -> Segment {
    let ctx = match ctx {
        Ctx::Irq(name, irq) => Context::IrqNamed(name, irq),
        Ctx::LocalTimer => Context::Irq("local timer"),
        Ctx::Softirq(v) => Context::Softirq(softirq_name(v)),
        Ctx::Task(p, pr) => Context::Task(p, pr),
        Ctx::Unknown => Context::Unknown,
    };
    Segment {
        a,
        b,
        ctx,
        idle,
        throttled,
    }
}

#[allow(clippy::too_many_arguments)]
fn charge(
    acc: &mut HashMap<(Category, Ctx), u64>,
    ctx: Ctx,
    idle: bool,
    a: u64,
    b: u64,
    w: &Wakeup,
    m: &Machine,
    fired: Option<u64>,
    slack_left: &mut u64,
    running_at_d: bool,
) {
    let mut add = |cat: Category, ctx: Ctx, ns: u64| {
        if ns > 0 {
            *acc.entry((cat, ctx)).or_default() += ns;
        }
    };
    // Before the timer fired, with the thread asleep: timer delivery.
    let waiting = !running_at_d && fired.is_some_and(|f| a < f);
    let in_plain = matches!(ctx, Ctx::Task(..) | Ctx::Unknown);
    if waiting && in_plain {
        let f = fired.unwrap_or(b).min(b);
        let late = f - a;
        let s = late.min(*slack_left);
        *slack_left -= s;
        add(Category::Slack, Ctx::Unknown, s);
        let rest = late - s;
        let cat = if m.on_vm {
            Category::Vm
        } else if idle || matches!(ctx, Ctx::Task(0, _)) {
            Category::IdleExit
        } else {
            Category::IrqsOff
        };
        let ctx_kept = if cat == Category::IdleExit {
            Ctx::Unknown
        } else {
            ctx
        };
        add(cat, ctx_kept, rest);
        if b > f {
            charge_plain(&mut add, ctx, idle, b - f, w);
        }
        return;
    }
    match ctx {
        Ctx::Irq(..) | Ctx::LocalTimer => add(Category::Irq, ctx, b - a),
        Ctx::Softirq(_) => add(Category::Softirq, ctx, b - a),
        _ => charge_plain(&mut add, ctx, idle, b - a, w),
    }
}

fn charge_plain(
    add: &mut dyn FnMut(Category, Ctx, u64),
    ctx: Ctx,
    idle: bool,
    ns: u64,
    w: &Wakeup,
) {
    match ctx {
        Ctx::Task(p, _) if p == w.tid => add(Category::SelfThread, Ctx::Unknown, ns),
        Ctx::Task(0, _) => add(Category::IdleExit, Ctx::Unknown, ns),
        Ctx::Task(..) if idle => add(Category::IdleExit, Ctx::Unknown, ns),
        Ctx::Task(..) => add(Category::Task, ctx, ns),
        _ => add(Category::Unknown, Ctx::Unknown, ns),
    }
}

fn part(tl: &Timeline, cat: Category, ctx: Ctx, ns: u64, faults: usize) -> Part {
    let (name, pid, prio) = match (cat, ctx) {
        (Category::SelfThread, _) if faults > 0 => ("page faults".to_string(), None, None),
        (Category::SelfThread, _) => ("still running".to_string(), None, None),
        (Category::Vm, Ctx::Task(p, _)) if p != 0 => {
            ("vCPU not running".to_string(), Some(p), None)
        }
        (Category::Vm, _) => ("vCPU not running".to_string(), None, None),
        (_, Ctx::Task(p, pr)) => (tl.comm(p), Some(p), Some(pr)),
        (_, Ctx::Irq(name, irq)) => {
            let n = name.iter().position(|&b| b == 0).unwrap_or(16);
            let s = String::from_utf8_lossy(&name[..n]).into_owned();
            (
                if s.is_empty() {
                    format!("irq {irq}")
                } else {
                    s
                },
                None,
                None,
            )
        }
        (_, Ctx::LocalTimer) => ("local timer".to_string(), None, None),
        (_, Ctx::Softirq(v)) => (softirq_name(v).to_string(), None, None),
        (Category::IdleExit, _) => ("idle".to_string(), None, None),
        (Category::Slack, _) => ("timer slack".to_string(), None, None),
        _ => (String::new(), None, None),
    };
    Part {
        category: cat,
        name,
        pid,
        prio,
        ns,
    }
}

fn words(
    tl: &Timeline,
    p: &Part,
    w: &Wakeup,
    m: &Machine,
    own_prio: Option<i32>,
    faults: usize,
    timer_late: Option<u64>,
) -> String {
    let x = fmt_ns(p.ns);
    let c = w.cpu;
    match p.category {
        Category::Vm => format!(
            "the timer interrupt came {} after the deadline with no event in the guest on CPU {c} ({}): \
             the hypervisor was not running this vCPU (host preemption, steal time)",
            fmt_ns(timer_late.unwrap_or(p.ns)),
            match p.pid {
                Some(pid) => format!("{} was on it", tl.comm(pid)),
                None => "it was idle".to_string(),
            }
        ),
        Category::IdleExit => format!("CPU {c} was idle and took {x} to wake (idle-state exit)"),
        Category::IrqsOff => format!(
            "the timer interrupt came {x} late while {} ran on CPU {c} with interrupts off",
            p.name
        ),
        Category::Irq => format!("interrupt handler {} ran {x} on CPU {c}", p.name),
        Category::Softirq => format!("softirq {} ran {x} on CPU {c}", p.name),
        Category::Task => {
            let theirs = p.prio.unwrap_or(120);
            let why = match own_prio {
                Some(o) if theirs < o => "at a higher priority".to_string(),
                Some(o) if theirs == o => "at the same priority".to_string(),
                _ => format!(
                    "and was not preempted (preempt model {}: a non-preemptible kernel section{})",
                    if m.preempt_model.is_empty() { "unknown" } else { &m.preempt_model },
                    if m.on_vm { ", or the VM was not running" } else { "" }
                ),
            };
            format!(
                "{} (pid {}, {}) ran {x} on CPU {c} {why}",
                p.name,
                p.pid.unwrap_or(0),
                prio_words(theirs)
            )
        }
        Category::SelfThread if faults > 0 => {
            format!("the thread itself ran {x} past its deadline, taking {faults} page faults (memory not locked)")
        }
        Category::SelfThread => {
            format!("the thread itself was still running {x} past its deadline (its previous cycle overran)")
        }
        Category::Slack => format!("the thread's timer slack let the kernel fire its timer {x} late"),
        Category::Unknown => format!("no traced event explains {x} on CPU {c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, pid: i32, prev_pid: i32, next_pid: i32, comm: &str) -> Event {
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        Event {
            kind,
            pid,
            prev_pid,
            next_pid,
            comm: c,
            ..Event::ZERO
        }
    }

    #[test]
    fn attribution_names_tasks_from_the_trace_and_the_session_never_from_proc() {
        // This process's pid has a /proc/PID/comm: the timeline used to read
        // it; now a task no record names is `pid N` unless the session
        // passed its name in.
        let me = std::process::id() as i32;
        let events = vec![
            ev(EventKind::Switch, 5, 5, me, "named"),
            ev(EventKind::Wakeup, 0, 6, 1, "woken"),
            ev(EventKind::LocalTimer, 7, 0, 0, ""),
        ];
        assert_eq!(unnamed_pids(&events), vec![7, me]);
        let tl = Timeline::new(events.clone());
        assert_eq!(tl.comm(5), "named");
        assert_eq!(tl.comm(6), "woken");
        assert_eq!(tl.comm(me), format!("pid {me}"));
        assert_eq!(tl.comm(0), "idle");
        let names = HashMap::from([(me, "resolved".to_string())]);
        let tl = Timeline::new(events).with_names(names);
        assert_eq!(tl.comm(me), "resolved");
        assert_eq!(tl.comm(7), "pid 7");
    }
}
