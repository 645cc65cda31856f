//! The kernel stack of a task that held the CPU while a measured thread
//! waited (issue 29 item 2, `--kernel-stacks`): where the blocking task
//! was when it finally gave up the CPU — `cond_resched`, a return from an
//! interrupt (`irqentry_exit`), a system call's `nanosleep`, …
//!
//! Opt-in, it costs a stack unwind on the measured thread's wake-up path.
//! The session sets a `stacktrace` trigger on the instance's
//! `sched_switch` ([`set_up`]): when a measured thread is switched in from
//! a task other than the idle one, the kernel records that task's stack
//! (it is still `current` inside the tracepoint) as an
//! `ftrace:kernel_stack` record right after the switch, decoded into
//! [`EventKind::KernelStack`] events. After the run, [`take_stacks`] pulls
//! them out of the kept events (the attribution never sees them) and
//! [`attach`] puts each on the outlier whose wake-up it preceded: on the
//! breakdown part of that task, kind `non_preemptible` or `task`
//! ([`breakdown::Share::kernel_stack`]), symbolized from `/proc/kallsyms`.
//!
//! A kernel that does not offer it (no trigger file, no `stacktrace`
//! trigger, the write refused) is said in [`KernelStacks::unavailable`],
//! never a silent absence. Pure code but for [`set_up`] (tracefs) and
//! [`kernel_symbols`] (`/proc/kallsyms`).

use super::breakdown::{self, Kind};
use super::outcome::Outlier;
use crate::raw::{Event, EventKind};
use crate::tracefs::{self, Instance};
use serde::Serialize;
use std::collections::HashMap;

/// What `--kernel-stacks` did, in the JSON's `capture.kernel_stacks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelStacks {
    /// The trigger as the kernel read it back
    /// (`stacktrace:unlimited if next_comm ~ "firmtime-cycl*" && prev_pid != 0`);
    /// `None` when it could not be set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Why there are no stacks: this kernel does not offer the trigger, or
    /// refused it (the kernel's words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The trigger was removed again before the instance was (read back).
    pub trigger_removed: bool,
    /// Stacks in the events kept around late wake-ups.
    pub recorded: u64,
    /// Of those, put on an outlier's `task` or `non_preemptible` part.
    pub attached: u64,
    /// Addresses were named from `/proc/kallsyms` (false: hidden by
    /// `kptr_restrict` or unreadable; the frames are then hex addresses).
    pub symbolized: bool,
}

/// The filter of the trigger: a switch to a thread whose comm matches the
/// glob `traced_comm`, from a task other than the idle one.
pub fn trigger_filter(traced_comm: &str) -> String {
    format!("next_comm ~ \"{traced_comm}\" && prev_pid != 0")
}

/// The filter of the trigger once the measured threads' ids are known
/// ([`super::Session::follow`]): a switch to one of `tids` from a task
/// other than the idle one (another process's threads of the same name
/// then pay no unwind).
pub fn tid_filter(tids: &[i32]) -> String {
    let any: Vec<String> = tids.iter().map(|t| format!("next_pid == {t}")).collect();
    format!("({}) && prev_pid != 0", any.join(" || "))
}

/// Sets the `stacktrace` trigger on `inst`'s `sched_switch` for switches
/// to the threads matching `traced_comm` ([`trigger_filter`]); what came
/// of it, never an error: a kernel without it gets
/// [`KernelStacks::unavailable`].
pub fn set_up(inst: &mut Instance, traced_comm: &str) -> KernelStacks {
    match inst.add_stack_trigger("sched/sched_switch", &trigger_filter(traced_comm)) {
        Ok(t) => KernelStacks {
            trigger: Some(t),
            ..KernelStacks::default()
        },
        Err(e) => KernelStacks {
            unavailable: Some(e.message().to_string()),
            trigger_removed: true,
            ..KernelStacks::default()
        },
    }
}

/// One recorded kernel stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// CPU.
    pub cpu: u16,
    /// When it was recorded (just after the switch), ns.
    pub time_ns: u64,
    /// The task whose stack it is (the one switched out).
    pub pid: i32,
    /// The task switched in (the measured thread); -1 when no switch
    /// preceded it on its CPU among the kept events.
    pub next_pid: i32,
    /// Return addresses, innermost first.
    pub addrs: Vec<u64>,
}

/// Takes the [`EventKind::KernelStack`] events out of `events` (the rest
/// keep their order) and returns them as stacks, each with the switch that
/// preceded it on its CPU.
pub fn take_stacks(events: &mut Vec<Event>) -> Vec<Stack> {
    if !events.iter().any(|e| e.kind == EventKind::KernelStack) {
        return Vec::new();
    }
    let mut stacks: Vec<Stack> = Vec::new();
    // Per CPU: the last switch (prev_pid, next_pid).
    let mut last: HashMap<u16, (i32, i32)> = HashMap::new();
    for e in events.iter() {
        match e.kind {
            EventKind::Switch => {
                last.insert(e.cpu, (e.prev_pid, e.next_pid));
            }
            EventKind::KernelStack => {
                let more = stacks.last_mut().filter(|s| {
                    e.prev_pid > 0
                        && s.cpu == e.cpu
                        && s.time_ns == e.time_ns
                        && s.pid == e.pid
                        && s.addrs.len() == e.prev_pid as usize
                });
                match more {
                    Some(s) => s.addrs.push(e.arg),
                    None => {
                        let next_pid = match last.get(&e.cpu) {
                            Some(&(prev, next)) if prev == e.pid => next,
                            _ => -1,
                        };
                        stacks.push(Stack {
                            cpu: e.cpu,
                            time_ns: e.time_ns,
                            pid: e.pid,
                            next_pid,
                            addrs: vec![e.arg],
                        });
                    }
                }
            }
            _ => {}
        }
    }
    events.retain(|e| e.kind != EventKind::KernelStack);
    stacks
}

/// Frames of the tracing machinery itself at the top of a stack
/// (`trace_event_raw_event_sched_switch`, `__traceiter_sched_switch`):
/// left out.
fn tracing_frame(name: &str) -> bool {
    [
        "trace_event_raw_event_",
        "__traceiter_",
        "perf_trace_",
        "__bpf_trace_",
        "event_triggers_",
        "trace_event_buffer_",
        "__trace_stack",
        "ftrace_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Puts each stack on the outlier its switch ended: the last stack on
/// the outlier's CPU between its deadline and its wake-up that switched
/// to its thread (`tid_of` the outlier's thread index), on the
/// `non_preemptible` part of the task whose stack it is, else its largest
/// `task` part. Addresses are named by `names` (address → `func+0x1a`;
/// those it lacks are shown in hex). Returns how many were attached.
pub fn attach(
    outliers: &mut [Outlier],
    stacks: &[Stack],
    tid_of: &dyn Fn(usize) -> Option<i32>,
    names: &HashMap<u64, String>,
) -> u64 {
    let mut attached = 0;
    for o in outliers.iter_mut() {
        let Some(tid) = tid_of(o.thread) else {
            continue;
        };
        let wake = o.deadline_ns.saturating_add_signed(o.latency_ns);
        let Some(s) = stacks
            .iter()
            .filter(|s| {
                usize::from(s.cpu) == o.cpu
                    && s.next_pid == tid
                    && s.time_ns >= o.deadline_ns
                    && s.time_ns <= wake
            })
            .max_by_key(|s| s.time_ns)
        else {
            continue;
        };
        let parts = &mut o.cause.breakdown;
        let of = |k: Kind| {
            parts
                .iter()
                .enumerate()
                .filter(|(_, p)| p.kind == k && p.pid == Some(s.pid))
                .max_by_key(|(_, p)| p.ns)
                .map(|(i, _)| i)
        };
        let Some(i) = of(Kind::NonPreemptible).or_else(|| of(Kind::Task)) else {
            continue;
        };
        parts[i].kernel_stack = Some(frames(&s.addrs, names));
        attached += 1;
    }
    attached
}

/// The frames of `addrs` in words, the tracing machinery's own left out.
pub fn frames(addrs: &[u64], names: &HashMap<u64, String>) -> Vec<String> {
    let mut v: Vec<String> = addrs
        .iter()
        .map(|a| names.get(a).cloned().unwrap_or_else(|| format!("{a:#x}")))
        .collect();
    let skip = v.iter().take_while(|n| tracing_frame(n)).count();
    v.drain(..skip);
    v
}

/// Names `addrs` from the text of `/proc/kallsyms`: `function+0x1a` (the
/// nearest text symbol at or below the address; `function+0x1a [module]`
/// in a module). Addresses below every symbol, and all of them when the
/// addresses are hidden (all zero: `kptr_restrict`), are left out.
pub fn symbolize(kallsyms: &str, addrs: &[u64]) -> HashMap<u64, String> {
    let mut syms: Vec<(u64, &str, Option<&str>)> = kallsyms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let a = u64::from_str_radix(f.next()?, 16).ok()?;
            let t = f.next()?;
            let name = f.next()?;
            let module = f
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']'));
            (a != 0 && matches!(t, "t" | "T" | "w" | "W")).then_some((a, name, module))
        })
        .collect();
    syms.sort_by_key(|s| s.0);
    addrs
        .iter()
        .filter_map(|&a| {
            let i = syms.partition_point(|s| s.0 <= a).checked_sub(1)?;
            let (base, name, module) = syms[i];
            let m = module.map(|m| format!(" [{m}]")).unwrap_or_default();
            Some((a, format!("{name}+{:#x}{m}", a - base)))
        })
        .collect()
}

/// [`symbolize`] from this machine's `/proc/kallsyms` (root sees the
/// addresses); `None` when it cannot be read or hides them.
pub fn kernel_symbols(addrs: &[u64]) -> Option<HashMap<u64, String>> {
    let text = tracefs::read_text(std::path::Path::new("/proc/kallsyms")).ok()?;
    let names = symbolize(&text, addrs);
    (!names.is_empty() || addrs.is_empty()).then_some(names)
}

/// The top `n` frames of a part's stack in one line, outermost call last:
/// `kernel stack of ft-hog (pid 42): schedule+0x27 ← do_nanosleep+0x5e ← …`
/// (the scheduler's own `__schedule` left out); `None` without a stack.
pub fn stack_words(p: &breakdown::Share, n: usize) -> Option<String> {
    let st = p.kernel_stack.as_ref()?;
    let all: Vec<&str> = st
        .iter()
        .map(String::as_str)
        .filter(|f| !f.starts_with("__schedule+"))
        .collect();
    let top = &all[..all.len().min(n)];
    let pid = p.pid.map(|x| format!(" (pid {x})")).unwrap_or_default();
    let more = if all.len() > top.len() {
        " ← …"
    } else {
        ""
    };
    Some(format!(
        "kernel stack of {}{pid}: {}{more}",
        p.name,
        top.join(" ← ")
    ))
}

/// Frames [`stack_words`] shows in a report.
pub const FRAMES_SHOWN: usize = 5;

/// The words of the stack on the largest part of `parts` that has one.
pub fn largest_stack_words(parts: &[breakdown::Share]) -> Option<String> {
    parts
        .iter()
        .filter(|p| p.kernel_stack.is_some())
        .max_by_key(|p| p.ns)
        .and_then(|p| stack_words(p, FRAMES_SHOWN))
}
