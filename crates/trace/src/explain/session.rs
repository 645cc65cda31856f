//! The explaining trace while it runs: the tracefs instance, the drainer
//! thread and its storage, and what the attribution needs to know of the
//! world, read here and passed in (the names of tasks the trace shows
//! without naming them, the machine's idle states, the processes of tasks).

use super::gate::keep_clear;
use super::outcome::{explain, Explanation, Target};
use super::{
    breakdown, lookback_ns, Config, Flags, Keeper, Lease, Machine, Notes, Pool, Window, WokenBy,
    RATE_PROBE_MS,
};
use crate::error::{Error, ErrorKind, Result};
use crate::raw::{Event, EventKind};
use crate::tracefs::{self, Capture, Instance};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Slots of the flag ring.
const FLAG_SLOTS: usize = 8192;
/// Undecided events held per CPU at the least (300 ms at ~100,000 events/s;
/// [`Config::pending_events`]).
pub const PENDING_PER_CPU_MIN: usize = 32_768;

/// Bytes a record of the explaining events takes in the ring buffer, about
/// (a `sched_switch` 72, a `local_timer_entry` 16), for a rate read while
/// a buffer is empty ([`Session::written_rate`]).
pub const MEAN_RECORD_BYTES: u64 = 64;
/// How long the drainer holds undecided events: a wake-up later than this
/// minus its lookback cannot be explained (it is `unknown`, counted).
const KEEP_NS: u64 = 300_000_000;

/// Whether the explaining trace can run here: `Err` says why not.
///
/// # Errors
/// The reason, in words a user can act on.
pub fn available() -> std::result::Result<(), String> {
    if !tracefs::is_root() {
        return Err("explaining outliers needs root (tracefs): run with sudo".into());
    }
    tracefs::ensure_mounted().map_err(|e| e.message().to_string())?;
    Ok(())
}

/// The explaining trace while it runs: a tracefs instance and its drainer.
/// Dropping it stops the drainer and removes the instance.
#[derive(Debug)]
pub struct Session {
    inst: Option<Arc<Instance>>,
    flags: Arc<Flags>,
    stop: Arc<AtomicBool>,
    drainer: Option<std::thread::JoinHandle<Result<(Capture, Keeper, u64)>>>,
    cpus: Vec<usize>,
    steal_before: Vec<u64>,
    setup: CaptureSetup,
    /// When its ring buffers began to record ([`Session::written_rate`]).
    started: std::time::Instant,
    /// Where the drainer's buffers go back ([`Session::start_pooled`]).
    pool: Option<Pool>,
}

/// What a finished session recorded.
#[derive(Debug)]
pub struct Recorded {
    /// The trace kept (events inside the windows; the page counts).
    pub capture: Capture,
    /// The windows kept (each whole).
    pub windows: Vec<Window>,
    /// The windows dropped whole for want of room (the least late first).
    pub evicted: Vec<Window>,
    /// Flags the drainer lost (ring overrun) plus windows it could not hold.
    pub flags_lost: u64,
    /// Events enabled.
    pub events_enabled: Vec<EventKind>,
    /// Events the kernel lost.
    pub lost: u64,
    /// True once the tracefs instance was removed.
    pub instance_removed: bool,
    /// Steal time per CPU during the session (/proc/stat), ns.
    pub steal_ns: Vec<CpuSteal>,
    /// Time the drainer waited, keeping off the CPUs while a measured
    /// thread was due, ns.
    pub drainer_held_ns: u64,
    /// Where the kernel lost events, per CPU in time (reconciled with the
    /// per-CPU `stats`; [`crate::loss`]). A consumer that rotates sessions
    /// (`watch`, one per interval) reads its interval's loss here
    /// ([`crate::loss::lost_between`]) or in `lost`.
    pub losses: Vec<crate::loss::Loss>,
    /// How the capture was set up (CPUs, buffer, measured rate, filters).
    pub capture_setup: CaptureSetup,
    /// Names of the tasks the kept events show without naming them
    /// ([`super::attribute::unnamed_pids`]), read from `/proc` when the
    /// session finished ([`resolve_names`]); the attribution reads no
    /// `/proc` itself.
    pub names: HashMap<i32, String>,
    /// The drainer's buffers on their way back to the session's [`Pool`]
    /// ([`Session::start_pooled`]; `None` otherwise): [`explain`] returns
    /// the store of kept events to it once they are attributed.
    pub lease: Option<Lease>,
}

/// How an explaining trace recorded: what it was limited to, and the buffer
/// it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CaptureSetup {
    /// The CPUs recorded (`tracing_cpumask`) and drained.
    pub cpus: Vec<usize>,
    /// Ring buffer per CPU, KiB.
    pub buffer_kb: u32,
    /// The busiest CPU's event bytes per second in the probe at the start
    /// (0: no probe; the buffer is the configured size).
    pub rate_bytes_per_s: u64,
    /// The filters in effect, `event: filter` (read back from tracefs).
    pub filters: Vec<String>,
    /// False when recorded as before issue 29 ([`Config::unfiltered`]).
    pub filtered: bool,
    /// With [`Config::kernel_stacks`]: the trigger, or why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_stacks: Option<super::KernelStacks>,
}

/// The filters in effect on `inst`'s events, `event: filter`, as the
/// kernel reads them back.
fn filters_of(inst: &Instance) -> Vec<String> {
    inst.event_paths()
        .iter()
        .filter_map(|p| {
            let f = inst.filter(p).ok()?;
            (f != "none").then(|| format!("{p}: {f}"))
        })
        .collect()
}

/// Steal time of one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuSteal {
    /// The CPU.
    pub cpu: usize,
    /// Time the hypervisor ran something else, ns (10 ms resolution).
    pub ns: u64,
}

/// A tracefs instance with the explaining trace's events for threads
/// `woken_by` that ([`WokenBy::events`]), tracing off:
/// `sched_wakeup` and `page_fault_user` filtered to the threads whose comm
/// matches the glob `traced_comm` (the only ones the attribution uses).
///
/// # Errors
/// As [`Instance::create_with`]; [`ErrorKind::Io`] if a filter is refused.
pub fn instance(buffer_kb: u32, traced_comm: &str, woken_by: WokenBy) -> Result<Instance> {
    instance_on(buffer_kb, traced_comm, woken_by, None)
}

/// Like [`instance`], recording only the events of `cpus` (the instance's
/// `tracing_cpumask`; `None`: every CPU).
///
/// # Errors
/// As [`instance`]; [`ErrorKind::Io`] if the CPU mask is refused.
pub fn instance_on(
    buffer_kb: u32,
    traced_comm: &str,
    woken_by: WokenBy,
    cpus: Option<&[usize]>,
) -> Result<Instance> {
    let name = format!("{}-explain", tracefs::instance_name());
    let inst = Instance::create_with(&name, buffer_kb, &woken_by.events())?;
    if let Some(c) = cpus {
        inst.set_cpumask(c)?;
    }
    let only = format!("comm ~ \"{traced_comm}\"");
    if inst.events.contains(&EventKind::PageFault) {
        inst.set_filter("exceptions/page_fault_user", &only)?;
    }
    if inst.events.contains(&EventKind::Wakeup) {
        inst.set_filter("sched/sched_wakeup", &only)?;
    }
    Ok(inst)
}

impl Session {
    /// Creates the instance (wake-ups and page faults filtered to the
    /// measured threads: those whose comm matches the glob `traced_comm`),
    /// starts the drainer and tracing.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] without root or tracefs; [`ErrorKind::Io`]
    /// if tracefs refuses a setting.
    pub fn start(config: &Config, traced_comm: &str) -> Result<Session> {
        Session::start_in(config, traced_comm, None)
    }

    /// Like [`Session::start`], the drainer's buffers (tens of MB) taken
    /// from `pool` and returned to it: by [`explain`] of the [`Recorded`]
    /// ([`Recorded::lease`]), or when the session is dropped unfinished. A
    /// consumer that starts one session per interval (`watch`) then
    /// allocates them once per overlapping session, not per interval.
    ///
    /// # Errors
    /// As [`Session::start`].
    pub fn start_pooled(config: &Config, traced_comm: &str, pool: &Pool) -> Result<Session> {
        Session::start_in(config, traced_comm, Some(pool))
    }

    fn start_in(config: &Config, traced_comm: &str, pool: Option<&Pool>) -> Result<Session> {
        config.validate()?;
        if !tracefs::is_root() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "--explain needs root: it reads scheduler and interrupt tracepoints through tracefs. \
                 Run it with sudo, or without --explain (lab all: --no-explain).",
            ));
        }
        let online = firmtime_rt::sched::online_cpus();
        let cpus = match (&config.cpus, config.unfiltered) {
            (Some(c), false) => {
                let mut c: Vec<usize> = c.iter().copied().filter(|x| online.contains(x)).collect();
                c.sort_unstable();
                c.dedup();
                if c.is_empty() {
                    online
                } else {
                    c
                }
            }
            _ => online,
        };
        let masked = (config.cpus.is_some() && !config.unfiltered).then_some(cpus.as_slice());
        let mut inst = instance_on(config.buffer_kb, traced_comm, config.woken_by, masked)?;
        let kernel_stacks = config
            .kernel_stacks
            .then(|| super::stacks::set_up(&mut inst, traced_comm));
        let mut buffer_kb = config.buffer_kb;
        let mut rate_bytes_per_s = 0;
        if config.size_from_rate && !config.unfiltered {
            rate_bytes_per_s = inst.probe_rate(&cpus, Duration::from_millis(RATE_PROBE_MS))?;
            let kb = tracefs::buffer_kb_for_rate(rate_bytes_per_s, config.buffer_kb);
            if kb != buffer_kb {
                inst.set_buffer_kb(kb)?;
                buffer_kb = kb;
            }
        }
        let filters = filters_of(&inst);
        let setup = CaptureSetup {
            cpus: cpus.clone(),
            buffer_kb,
            rate_bytes_per_s,
            filters,
            filtered: !config.unfiltered,
            kernel_stacks,
        };
        let inst = Arc::new(inst);
        let stop = Arc::new(AtomicBool::new(false));
        let flags = Arc::new(Flags::new(FLAG_SLOTS));
        let (i2, s2, c2, f2) = (
            Arc::clone(&inst),
            Arc::clone(&stop),
            cpus.clone(),
            Arc::clone(&flags),
        );
        let drainer_cpus = config.drainer_cpus.clone().unwrap_or_else(|| cpus.clone());
        let (cap, pending_events, max_windows, pace) = (
            config.max_events,
            config.pending_events,
            config.max_windows,
            tracefs::Pace {
                min: Duration::from_nanos(config.drain_interval_ns),
                max: Duration::from_nanos(config.drain_interval_max_ns),
                buffer_bytes: u64::from(buffer_kb) * 1024,
            },
        );
        let storage = pool.map(Pool::take).unwrap_or_default();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let drainer = std::thread::Builder::new()
            .name("ft-explain-drain".into())
            // Its buffers are on the heap; a process that locks its memory
            // (watch, lab) holds every page of a thread's stack.
            .stack_size(512 * 1024)
            .spawn(move || {
                // A thread inherits its creator's policy and CPUs: started
                // from a pinned real-time loop (tap run's engine), the
                // drainer would compete with that loop on its CPU.
                let _ =
                    firmtime_rt::sched::set_current_thread(&firmtime_rt::sched::Policy::Other {
                        nice: 0,
                    });
                let _ = firmtime_rt::sched::set_affinity(&drainer_cpus);
                let per_cpu = (pending_events / c2.len().max(1)).max(PENDING_PER_CPU_MIN);
                let mut k = Keeper::reusing_with(per_cpu, cap, KEEP_NS, max_windows, storage);
                k.reserve_cpus(c2.iter().max().map_or(0, |&c| c + 1));
                // Set up before anything is measured: `start` waits for it.
                let _ = ready_tx.send(());
                let kc = std::cell::RefCell::new(&mut k);
                let mut held_ns = 0u64;
                let c = tracefs::drain_with(
                    &i2,
                    &c2,
                    pace,
                    &s2,
                    &mut |e| kc.borrow_mut().take(e, &f2),
                    &mut || kc.borrow_mut().settle(&f2, false),
                    &mut |backlog| held_ns += keep_clear(&f2, &s2, backlog),
                )?;
                k.settle(&f2, true);
                Ok((c, k, held_ns))
            })
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot start the drainer: {e}")))?;
        // Its buffers allocated and touched (tens of MB) before the first
        // measured deadline, not during the first ones. A drainer that
        // failed before that drops the sender: its error comes from `finish`.
        let _ = ready_rx.recv();
        let steal_before = firmtime_rt::system::steal_ns_per_cpu(&cpus);
        let s = Session {
            inst: Some(inst),
            flags,
            stop,
            drainer: Some(drainer),
            cpus,
            steal_before,
            setup,
            started: std::time::Instant::now(),
            pool: pool.cloned(),
        };
        if let Some(i) = &s.inst {
            i.set_on(true)?;
        }
        Ok(s)
    }

    /// The busiest traced CPU's event bytes per second since this session
    /// started — read by the drainer, waiting in the ring buffer, or lost —
    /// and whether the kernel lost any: what the next session of a
    /// [`super::Rotation`] sizes its ring buffers from. A CPU whose buffer
    /// holds nothing at the moment counts [`MEAN_RECORD_BYTES`] a record.
    pub fn written_rate(&self) -> (u64, bool) {
        let Some(inst) = &self.inst else {
            return (0, false);
        };
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let (mut busiest, mut lost) = (0u64, false);
        for &c in &self.cpus {
            let s = inst.stats(c);
            let mean = s
                .bytes
                .checked_div(s.entries)
                .map_or(MEAN_RECORD_BYTES, |m| m.max(1));
            let events = s.entries + s.overrun + s.dropped + s.read;
            busiest = busiest.max(events.saturating_mul(mean));
            lost |= s.overrun + s.dropped > 0;
        }
        ((busiest as f64 / secs) as u64, lost)
    }

    /// The ring buffer of each traced CPU, KiB.
    pub fn buffer_kb(&self) -> u32 {
        self.setup.buffer_kb
    }

    /// Narrows the kernel-side filters from the measured threads' name to
    /// their ids once they are known: `common_pid == a || common_pid == b`
    /// on `page_fault_user`, `pid == a || …` on `sched_wakeup` (another
    /// process's threads of the same name — a second run on the same
    /// machine — are then left out too); with [`Config::kernel_stacks`]
    /// the `stacktrace` trigger likewise (`next_pid == a || …`; it is
    /// removed and set again: a switch in between records no stack). The
    /// kernel swaps a filter whole, so the name's filter holds until the
    /// ids' does: nothing of the measured threads is missed. Nothing changes with
    /// [`Config::unfiltered`] or without ids.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the kernel refuses a filter (the name's stays).
    pub fn follow(&self, tids: &[i32]) -> Result<()> {
        let Some(inst) = &self.inst else {
            return Ok(());
        };
        if !self.setup.filtered || tids.is_empty() {
            return Ok(());
        }
        let any = |field: &str| {
            tids.iter()
                .map(|t| format!("{field} == {t}"))
                .collect::<Vec<_>>()
                .join(" || ")
        };
        if inst.events.contains(&EventKind::PageFault) {
            inst.set_filter("exceptions/page_fault_user", &any("common_pid"))?;
        }
        if inst.events.contains(&EventKind::Wakeup) {
            inst.set_filter("sched/sched_wakeup", &any("pid"))?;
        }
        if self
            .setup
            .kernel_stacks
            .as_ref()
            .is_some_and(|k| k.trigger.is_some())
        {
            let f = super::stacks::tid_filter(tids);
            inst.replace_stack_trigger("sched/sched_switch", &f)?;
        }
        Ok(())
    }

    /// Where measured threads flag their late wake-ups
    /// ([`Notes::flagging`]); only the trace around them is kept.
    pub fn flags(&self) -> Arc<Flags> {
        Arc::clone(&self.flags)
    }

    /// Stops tracing, drains what is left and removes the instance.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the drainer failed.
    pub fn finish(mut self) -> Result<Recorded> {
        let steal_after = firmtime_rt::system::steal_ns_per_cpu(&self.cpus);
        if let Some(i) = &self.inst {
            let _ = i.set_on(false);
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = &self.drainer {
            h.thread().unpark();
        }
        let (mut capture, keeper, drainer_held_ns) = match self.drainer.take().map(|h| h.join()) {
            Some(Ok(r)) => r?,
            Some(Err(_)) => return Err(Error::new(ErrorKind::Io, "the explain drainer panicked")),
            None => (Capture::default(), Keeper::new(0, 0, 0), 0),
        };
        capture.dropped = keeper.dropped;
        let (flags_lost, windows_dropped) = (keeper.flags_lost, keeper.windows_dropped);
        let overflow = keeper.overflow_losses();
        let (store, windows, evicted, storage) = keeper.into_parts();
        capture.events = store;
        let names = resolve_names(&capture.events);
        let lease = self.pool.take().map(|p| Lease::new(p, storage));
        let inst = self.inst.take();
        let mut losses = std::mem::take(&mut capture.losses);
        let (lost, events_enabled, instance_removed) = match inst {
            Some(a) => {
                // The page flags and the stats count the same events: the
                // larger of the two per CPU, never their sum.
                let lost = crate::loss::reconcile(&mut losses, &a.lost_per_cpu(&self.cpus));
                self.setup.filters = filters_of(&a);
                if let Some(k) = self
                    .setup
                    .kernel_stacks
                    .as_mut()
                    .filter(|k| k.trigger.is_some())
                {
                    // As it ended (by thread id once `follow` narrowed it).
                    k.trigger = a.stack_trigger("sched/sched_switch").or(k.trigger.take());
                    k.trigger_removed = a.remove_triggers();
                }
                let ev = a.events.clone();
                let removed = Arc::try_unwrap(a).map(Instance::remove).unwrap_or(false);
                (lost, ev, removed)
            }
            None => (crate::loss::reconcile(&mut losses, &[]), Vec::new(), true),
        };
        // Events the drainer pushed out of a full pending queue: holes like
        // the kernel's (after reconciling, which squares the kernel's own
        // counts), counted in `lost`.
        let lost = lost + overflow.iter().map(|l| l.events).sum::<u64>();
        losses.extend(overflow);
        let steal_ns = self
            .cpus
            .iter()
            .zip(self.steal_before.iter().zip(&steal_after))
            .map(|(&cpu, (b, a))| CpuSteal {
                cpu,
                ns: a.saturating_sub(*b),
            })
            .collect();
        Ok(Recorded {
            windows,
            evicted,
            flags_lost: flags_lost + windows_dropped,
            lost,
            capture,
            events_enabled,
            instance_removed,
            steal_ns,
            drainer_held_ns,
            losses,
            capture_setup: std::mem::take(&mut self.setup),
            names,
            lease,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.drainer.take() {
            h.thread().unpark();
            if let (Ok(Ok((_, keeper, _))), Some(pool)) = (h.join(), &self.pool) {
                let (store, _, _, mut storage) = keeper.into_parts();
                storage.give_store(store);
                pool.give(storage);
            }
        }
        // Dropping the last Arc removes the instance.
        self.inst.take();
    }
}

/// The explaining trace around one loop thread that is not pinned: the tap
/// engine's loop (`tap run`) and `net bench`'s period loop. The CLI starts
/// it before the loop, the loop offers its wake-ups to [`LoopWatch::notes`]
/// with [`Notes::offer_on`] (the CPU it woke on), and [`LoopWatch::finish`]
/// attributes the noted ones. The caller maps the explained wake-ups
/// ([`super::Outlier::index`], the loop's own count) back to what was late.
#[derive(Debug)]
pub struct LoopWatch {
    session: Session,
    worst: usize,
}

/// The loop thread a [`LoopWatch`] explains.
#[derive(Debug, Clone, Copy)]
pub struct LoopThread {
    /// Its thread id ([`firmtime_rt::sched::current_tid`] on that thread).
    pub tid: i32,
    /// How often it is due to wake, ns (the tap engine: its pause; net
    /// bench: the period). Page faults are counted from one period before a deadline.
    pub period_ns: u64,
    /// Its timer slack, ns.
    pub slack_ns: u64,
    /// Noted wake-ups later than this are explained (plus any that missed a
    /// deadline and the [`super::WORST_SHOWN`] worst), ns.
    pub threshold_ns: i64,
    /// Deadlines it missed.
    pub missed: u64,
}

impl LoopWatch {
    /// Starts the explaining trace ([`Session::start`]); wake-ups and page
    /// faults are recorded for threads whose comm matches `traced_comm`.
    ///
    /// # Errors
    /// As [`Session::start`].
    pub fn start(config: &Config, traced_comm: &str) -> Result<LoopWatch> {
        Ok(LoopWatch {
            session: Session::start(config, traced_comm)?,
            worst: config.worst,
        })
    }

    /// Notes for the loop (allocated here, before the loop), flagging a
    /// window of [`lookback_ns`]`(period_ns)` before each kept wake-up.
    pub fn notes(&self, period_ns: u64) -> Notes {
        Notes::flagging(self.worst, self.session.flags(), 0, lookback_ns(period_ns))
    }

    /// Stops the trace and attributes the noted wake-ups of `thread`.
    ///
    /// # Errors
    /// As [`Session::finish`].
    pub fn finish(self, thread: LoopThread, notes: &Notes) -> Result<Explanation> {
        let rec = self.session.finish()?;
        let sorted = notes.sorted();
        let target = Target {
            thread: 0,
            cpu: sorted.first().map_or(0, |n| usize::from(n.cpu)),
            tid: thread.tid,
            period_ns: thread.period_ns,
            slack_ns: thread.slack_ns,
            threshold_ns: thread.threshold_ns,
            notes: sorted,
            missing_not_kept: notes.missing_not_kept(),
            missed: thread.missed,
        };
        Ok(explain(rec, &[target], &this_machine()))
    }
}

/// The names of the tasks `events` show without naming them
/// ([`super::attribute::unnamed_pids`]), from `/proc/PID/comm` now; a task
/// already gone is left out (the attribution calls it `pid N`).
pub fn resolve_names(events: &[Event]) -> HashMap<i32, String> {
    super::attribute::unnamed_pids(events)
        .into_iter()
        .filter_map(|pid| {
            let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            Some((pid, c.trim().to_string()))
        })
        .collect()
}

/// What `/proc` says of task `pid` now (its comm, thread group, the
/// group leader's comm, its policy); `None` once it is gone.
pub fn proc_task_info(pid: i32) -> Option<breakdown::TaskInfo> {
    let read = |p: String| std::fs::read_to_string(p).ok();
    let comm = read(format!("/proc/{pid}/comm"))?.trim().to_string();
    let status = read(format!("/proc/{pid}/status"))?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())?;
    let stat = read(format!("/proc/{pid}/stat"))?;
    // Fields after the comm's closing parenthesis start at field 3
    // (state); the policy is field 41.
    let policy = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(41 - 3))
        .and_then(|v| v.parse::<u32>().ok())?;
    let process = if tgid == pid {
        comm.clone()
    } else {
        read(format!("/proc/{tgid}/comm")).map_or_else(|| comm.clone(), |c| c.trim().to_string())
    };
    Some(breakdown::TaskInfo {
        comm,
        tgid,
        process,
        policy,
    })
}

/// The machine this runs on.
pub fn this_machine() -> Machine {
    let s = firmtime_rt::system::SystemInfo::collect();
    Machine {
        on_vm: s.virtualization.as_deref().is_some_and(|v| v != "none"),
        preempt_model: s.preempt_model.name().to_string(),
        virtualization: s.virtualization,
        idle_exit_max_ns: idle_exit_max_ns(std::path::Path::new("/sys/devices/system/cpu")),
    }
}

/// The exit latency of the deepest enabled idle state over the CPUs under
/// `cpu_dir` (`cpuN/cpuidle/stateK/latency`, µs, where `disable` is 0),
/// ns; `None` without cpuidle.
pub fn idle_exit_max_ns(cpu_dir: &std::path::Path) -> Option<u64> {
    let mut max = None;
    for cpu in std::fs::read_dir(cpu_dir).ok()?.flatten() {
        let name = cpu.file_name();
        let name = name.to_string_lossy();
        if !name
            .strip_prefix("cpu")
            .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            continue;
        }
        let Ok(states) = std::fs::read_dir(cpu.path().join("cpuidle")) else {
            continue;
        };
        for st in states.flatten() {
            let read = |f: &str| {
                std::fs::read_to_string(st.path().join(f))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
            };
            if read("disable") == Some(0) {
                if let Some(us) = read("latency") {
                    max = Some(max.unwrap_or(0).max(us * 1000));
                }
            }
        }
    }
    max
}
