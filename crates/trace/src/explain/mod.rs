//! Why the worst wake-ups were late: the explaining trace of `lab cyclic
//! --explain` (and of `lab all`, where tracefs is usable).
//!
//! Like rtla's `timerlat --auto-analysis`, for a user-space periodic thread.
//! While a run measures, a private tracefs instance (firmtime-trace's tracer,
//! [`crate::tracefs`]) records on every CPU `sched_switch`,
//! `local_timer_entry/exit`, `irq_handler_entry/exit`, `softirq_entry/exit`,
//! `power:cpu_idle`, and the measured threads' own `sched_wakeup` and
//! `page_fault_user` (filtered by thread name); a
//! drainer thread copies the binary ring buffers into a store preallocated
//! before the run ([`Config::max_events`]). Each measured thread notes its
//! worst wake-ups — index, deadline, wake time, missed deadlines — into a
//! preallocated heap ([`Notes`], **RT-safe**, no allocation, no syscall).
//! After the run, every noted wake-up above the threshold (`--explain-above`,
//! or the thread's p99.9 over the run) and every one that missed a deadline
//! is attributed from the trace of its CPU between deadline and wake
//! ([`attribute`]).
//!
//! Bounded and honest: the whole run is recorded, not a window around each
//! outlier, so the store bounds the run length that can be explained; what
//! the store could not hold (`dropped`), what the kernel lost (`lost`) and
//! wake-ups beyond the noted ones (`not_noted`) are counted, and a wake-up
//! the trace does not cover is [`Category::Unknown`], never hidden. What the
//! kernel lost is located in time ([`crate::loss`]): a wake-up whose span
//! lost events is `unknown` ([`attribute::TRACE_LOST`]), never guessed.
//!
//! Lossless by design where it can be ([`Config::cpus`],
//! [`Config::size_from_rate`]): only the measured CPUs' events are written
//! (`tracing_cpumask`), the measured threads' page faults and wake-ups are
//! filtered in the kernel, and the ring buffers hold two seconds of the
//! event rate measured at the start.

pub mod advice;
pub mod attribute;
pub mod breakdown;
pub mod pool;
pub mod window;

pub use attribute::{Category, Cause, Machine, Part, Timeline, Wakeup};
pub use breakdown::{Kind, Share};
pub use pool::{Lease, Pool};
pub use window::{Flags, Keeper, Storage, Window};

use crate::error::{Error, ErrorKind, Result};
use crate::raw::{EventKind, EXPLAIN_EVENTS};
use crate::tracefs::{self, Capture, Instance};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Valid `--explain-worst` range (wake-ups noted per thread).
pub const WORST: std::ops::RangeInclusive<usize> = 1..=100_000;

/// Slots of the flag ring.
const FLAG_SLOTS: usize = 8192;
/// Undecided events the drainer holds over all CPUs (~26 MB), at least
/// [`PENDING_PER_CPU_MIN`] per CPU.
const PENDING_EVENTS: usize = 400_000;
/// Undecided events held per CPU at the least (300 ms at ~100,000 events/s).
const PENDING_PER_CPU_MIN: usize = 32_768;
/// How long the drainer holds undecided events: a wake-up later than this
/// minus its lookback cannot be explained (it is `unknown`, counted).
const KEEP_NS: u64 = 300_000_000;

/// The drainer stops reading this long before a measured thread's
/// announced deadline (longer than it takes to read and decode a page)…
const CLEAR_BEFORE_NS: u64 = 500_000;
/// …and first looks again this long after it: past most wake-ups (the
/// median under SCHED_OTHER and the stress load is ~75 µs, p99 ~220 µs),
/// so that its own timer does not fire while the thread is waking…
const CLEAR_AFTER_NS: u64 = 200_000;
/// …then, while the thread has not yet woken and announced its next
/// deadline, sleeps this long and twice as long each time it is still
/// late…
const CLEAR_STEP_NS: u64 = 50_000;
/// …but never more than this in a row (a thread stalled for good must not
/// let the ring buffers overflow)…
const CLEAR_MAX_NS: u64 = 20_000_000;
/// …and, while the buffers have a backlog (the page just read was full:
/// the kernel has moved on to later pages), it does not wait for a thread
/// already this late, while still keeping clear of the deadlines to come.
/// A thread late again and again (SCHED_OTHER under the stress load) would
/// otherwise let it read one page per wait, and the kernel drop millions of
/// events; reading past every deadline instead (a fixed read slice after
/// each long wait) put it in the way of the threads that were on time.
/// A thread this late has already missed its deadline by something else,
/// which stays its larger cause.
const LATE_READ_NS: u64 = 2_000_000;
/// A page read this long after its first event was written means the
/// drainer is falling behind: it then reads without waiting for anyone
/// until it catches up. The default 4 MiB per CPU hold about 300 ms of the
/// stress load's events, so this leaves two thirds of the buffer spare.
const URGENT_AGE_NS: u64 = 100_000_000;

/// Keeps the drainer off the CPUs while a measured thread is due: from
/// [`CLEAR_BEFORE_NS`] before the earliest deadline announced in `flags`
/// until the thread has woken for it (see [`Flags::next_due`]); `backlog`
/// is [`tracefs::drain_with`]'s word on how far behind it is: with more
/// pages waiting, deadlines more than [`LATE_READ_NS`] past are not waited
/// for; with pages older than [`URGENT_AGE_NS`], none is. Returns the time
/// spent waiting, ns.
fn keep_clear(flags: &Flags, stop: &AtomicBool, backlog: tracefs::Backlog) -> u64 {
    let t0 = firmtime_rt::clock::monotonic_ns();
    let (mut step, mut last_due) = (CLEAR_STEP_NS, 0);
    loop {
        let now = firmtime_rt::clock::monotonic_ns();
        if stop.load(Ordering::Relaxed) {
            return now - t0;
        }
        let due = waited_since(now, backlog).and_then(|oldest| flags.next_due_since(oldest));
        let Some(until) = clear_until(now, t0, due, &mut step, &mut last_due) else {
            return now - t0;
        };
        if firmtime_rt::sleep::clock_nanosleep_abs(until).is_err() {
            return now - t0;
        }
    }
}

/// The oldest deadline the drainer still waits for at `now`, given how far
/// behind it is: any (0) without a backlog; none (`None`) once its pages
/// are [`URGENT_AGE_NS`] old; else those less than [`LATE_READ_NS`] past.
fn waited_since(now: u64, backlog: tracefs::Backlog) -> Option<u64> {
    if backlog.age_ns >= URGENT_AGE_NS {
        None
    } else if backlog.full {
        Some(now.saturating_sub(LATE_READ_NS))
    } else {
        Some(0)
    }
}

/// Whether the drainer, waiting since `t0`, waits on at `now` for the
/// earliest deadline it still waits for (`due`), and until when; `step` is
/// the next wait past a deadline (doubled here, and back to
/// [`CLEAR_STEP_NS`] when `due` is not `last_due`: the steps of one late
/// thread must not make the drainer sleep through the next thread's
/// deadline and wake-up). `None`: read now.
fn clear_until(
    now: u64,
    t0: u64,
    due: Option<u64>,
    step: &mut u64,
    last_due: &mut u64,
) -> Option<u64> {
    let due = due?;
    if due != *last_due {
        (*step, *last_due) = (CLEAR_STEP_NS, due);
    }
    if now.saturating_sub(t0) >= CLEAR_MAX_NS || now + CLEAR_BEFORE_NS < due {
        return None;
    }
    let until = if now < due {
        due + CLEAR_AFTER_NS
    } else {
        let u = now + *step;
        *step = (*step * 2).min(CLEAR_MAX_NS);
        u
    };
    Some(until.min(t0 + CLEAR_MAX_NS))
}

pub use firmtime_rt::outliers::{lookback_ns, Note, Notes, TraceCoverage, TracedCause, LANES};

/// The worst wake-ups of each thread always explained, whatever the threshold.
pub const WORST_SHOWN: usize = 10;

/// How many of a thread's latest wake-ups so far get a trace window
/// ([`Notes::flag_only`]) in a run of `wakeups`: its [`WORST_SHOWN`] worst
/// plus those that can lie above its p99.9 (a thousandth of the run), at
/// most the `worst` noted. Missed deadlines and wake-ups above an explicit
/// `--explain-above` are flagged besides.
pub fn flag_top(wakeups: u64, worst: usize) -> usize {
    let above_p999 = usize::try_from(wakeups / 1000).unwrap_or(usize::MAX);
    (WORST_SHOWN + above_p999 + 1).min(worst.max(1))
}

/// How to explain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Explain wake-ups later than this, ns (`--explain-above`); `None` =
    /// the thread's p99.9 over the run. Missed deadlines are always explained.
    pub above_ns: Option<u64>,
    /// Worst wake-ups noted per thread (`--explain-worst`), default 256.
    pub worst: usize,
    /// Kernel ring buffer per CPU, KiB, default 4096.
    pub buffer_kb: u32,
    /// Events kept around late wake-ups (`--explain-max-events`), default
    /// 1,000,000 (~64 MB); when full, the least late windows go first.
    pub max_events: usize,
    /// How often the drainer empties the ring buffers, ns, default 20 ms.
    pub drain_interval_ns: u64,
    /// With a value above `drain_interval_ns`, the drainer paces itself
    /// ([`tracefs::Pace`]): it waits up to this long between passes while
    /// the ring buffers stay near empty. Default 20 ms (a fixed interval);
    /// `watch` uses 1 s.
    pub drain_interval_max_ns: u64,
    /// What wakes the measured threads, which decides the events recorded
    /// on their own wake-up path (default: anything).
    pub woken_by: WokenBy,
    /// The CPUs the measured threads run on: only their events are
    /// recorded (the instance's `tracing_cpumask`) and drained. `None`
    /// (default): every online CPU (a loop that is not pinned).
    pub cpus: Option<Vec<usize>>,
    /// Size the ring buffers from the event rate measured in a
    /// [`RATE_PROBE_MS`] probe at the start, with the filters in place
    /// ([`tracefs::buffer_kb_for_rate`]; `buffer_kb` is then the least).
    /// Default off (`watch` starts a session per interval); `lab cyclic`
    /// and `lab all` turn it on.
    pub size_from_rate: bool,
    /// Record as before issue 29, for comparison: every CPU, the fixed
    /// `buffer_kb`, no probe (`FIRMTIME_EXPLAIN_UNFILTERED=1` in the lab
    /// commands). Losses are still located and refused either way.
    pub unfiltered: bool,
}

/// How long [`Config::size_from_rate`] records to measure the event rate, ms.
pub const RATE_PROBE_MS: u64 = 200;

/// What wakes the measured threads.
///
/// Every record the kernel writes on a measured thread's wake-up path
/// delays that wake-up (~0.4 µs each on the development VM). A thread
/// woken from idle by its timer passes five: `cpu_idle` (exit),
/// `local_timer_entry`, its `sched_wakeup`, `local_timer_exit` and the
/// `sched_switch` to it. For a thread woken only by its own timer the
/// wake-up and idle records add nothing the attribution needs (the first
/// local timer interrupt after the deadline is when the timer fired; the
/// switch to the idle task says the CPU idled), so they are left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WokenBy {
    /// Anything: another thread, a socket, JACK (`tap run`, `net bench`).
    /// All events, the measured threads' `sched_wakeup` and `cpu_idle`
    /// included.
    #[default]
    Anything,
    /// Only their own timer (`lab cyclic`, `watch`): no `sched_wakeup`,
    /// no `cpu_idle`; three records on the wake-up path instead of five.
    OwnTimer,
}

impl WokenBy {
    /// The events recorded for threads woken this way.
    pub fn events(self) -> Vec<(&'static str, EventKind)> {
        EXPLAIN_EVENTS
            .iter()
            .copied()
            .filter(|(_, k)| {
                self == WokenBy::Anything || !matches!(k, EventKind::Wakeup | EventKind::CpuIdle)
            })
            .collect()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            above_ns: None,
            worst: 256,
            buffer_kb: 4096,
            max_events: 1_000_000,
            drain_interval_ns: 20_000_000,
            drain_interval_max_ns: 20_000_000,
            woken_by: WokenBy::Anything,
            cpus: None,
            size_from_rate: false,
            unfiltered: false,
        }
    }
}

impl Config {
    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        crate::in_range("--explain-worst", self.worst, &WORST, "")?;
        crate::in_range(
            "explain buffer",
            self.buffer_kb,
            &crate::BUFFER_KB,
            " (KiB per CPU)",
        )?;
        crate::in_range(
            "--explain-max-events",
            self.max_events,
            &crate::MAX_EVENTS,
            "",
        )?;
        Ok(())
    }
}

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
        let inst = instance_on(config.buffer_kb, traced_comm, config.woken_by, masked)?;
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
        let (cap, pace) = (
            config.max_events,
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
            .spawn(move || {
                // A thread inherits its creator's policy and CPUs: started
                // from a pinned real-time loop (tap run's engine), the
                // drainer would compete with that loop on its CPU.
                let _ =
                    firmtime_rt::sched::set_current_thread(&firmtime_rt::sched::Policy::Other {
                        nice: 0,
                    });
                let _ = firmtime_rt::sched::set_affinity(&c2);
                let per_cpu = (PENDING_EVENTS / c2.len().max(1)).max(PENDING_PER_CPU_MIN);
                let mut k = Keeper::reusing(per_cpu, cap, KEEP_NS, storage);
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
            pool: pool.cloned(),
        };
        if let Some(i) = &s.inst {
            i.set_on(true)?;
        }
        Ok(s)
    }

    /// Narrows the kernel-side filters from the measured threads' name to
    /// their ids once they are known: `common_pid == a || common_pid == b`
    /// on `page_fault_user`, `pid == a || …` on `sched_wakeup` (another
    /// process's threads of the same name — a second run on the same
    /// machine — are then left out too). The kernel swaps a filter whole,
    /// so the name's filter holds until the ids' does: nothing of the
    /// measured threads is missed. Nothing changes with
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
        let (store, windows, evicted, storage) = keeper.into_parts();
        capture.events = store;
        let lease = self.pool.take().map(|p| Lease::new(p, storage));
        let inst = self.inst.take();
        let mut losses = std::mem::take(&mut capture.losses);
        let (lost, events_enabled, instance_removed) = match inst {
            Some(a) => {
                // The page flags and the stats count the same events: the
                // larger of the two per CPU, never their sum.
                let lost = crate::loss::reconcile(&mut losses, &a.lost_per_cpu(&self.cpus));
                self.setup.filters = filters_of(&a);
                let ev = a.events.clone();
                let removed = Arc::try_unwrap(a).map(Instance::remove).unwrap_or(false);
                (lost, ev, removed)
            }
            None => (crate::loss::reconcile(&mut losses, &[]), Vec::new(), true),
        };
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
/// ([`Outlier::index`], the loop's own count) back to what was late.
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
    /// deadline and the [`WORST_SHOWN`] worst), ns.
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

/// Attributes the outliers of `targets` from `rec`.
pub fn explain(rec: Recorded, targets: &[Target], machine: &Machine) -> Explanation {
    let events = rec.capture.events.len() as u64;
    let windows = rec.windows.len() as u64;
    let windows_evicted = rec.evicted.len() as u64;
    let tl = Timeline::with_windows(rec.capture.events, rec.windows, rec.evicted)
        .with_losses(rec.losses.clone());
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
        capture: rec.capture_setup,
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

    /// The cause the trace gave the noted wake-up with loop index `index`
    /// (the `index` offered to [`Notes::offer_on`]), for a loop that maps
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
pub fn with_parts(c: &Cause) -> String {
    if c.breakdown.len() < 2 {
        return c.detail.clone();
    }
    format!(
        "{} (parts: {})",
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

#[cfg(test)]
mod tests {
    use super::*;
    use tracefs::Backlog;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    #[test]
    fn the_drainer_waits_for_late_threads_only_while_it_is_not_behind() {
        let now = 1_000 * MS;
        let none = Backlog::default();
        let full = Backlog {
            full: true,
            age_ns: 5 * MS,
        };
        let urgent = Backlog {
            full: true,
            age_ns: URGENT_AGE_NS,
        };
        let flags = Flags::new(8);
        let (late, soon) = (flags.lane().unwrap(), flags.lane().unwrap());
        flags.due(late, now - 3 * MS); // woken 3 ms late: not yet
        flags.due(soon, now + 300 * US); // due in 300 µs
        let due = |b| waited_since(now, b).and_then(|o| flags.next_due_since(o));
        // Caught up: it waits for the late thread.
        assert_eq!(due(none), Some(now - 3 * MS));
        // A backlog: not for a thread 3 ms late, still for the one due.
        assert_eq!(due(full), Some(now + 300 * US));
        // Falling behind: for no one.
        assert_eq!(due(urgent), None);
        // A thread only 1 ms late is still waited for with a backlog.
        flags.due(late, now - MS);
        assert_eq!(due(full), Some(now - MS));
    }

    #[test]
    fn a_wait_ends_past_the_deadline_steps_while_late_and_never_exceeds_its_cap() {
        let t0 = 1_000 * MS;
        let (mut step, mut last) = (CLEAR_STEP_NS, 0);
        // Nothing announced, or the deadline far enough ahead: read now.
        assert_eq!(clear_until(t0, t0, None, &mut step, &mut last), None);
        assert_eq!(
            clear_until(t0, t0, Some(t0 + MS), &mut step, &mut last),
            None
        );
        // Due within 500 µs: wait until 200 µs past it.
        assert_eq!(
            clear_until(t0, t0, Some(t0 + 400 * US), &mut step, &mut last),
            Some(t0 + 600 * US)
        );
        // Past it and the thread not woken: 50 µs, then 100, 200 µs.
        let due = Some(t0);
        let now = t0 + 600 * US;
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 50 * US)
        );
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 100 * US)
        );
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 200 * US)
        );
        // Another thread's deadline, just passed: its steps start again.
        let other = Some(now - 10 * US);
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 50 * US)
        );
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 100 * US)
        );
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 200 * US)
        );
        // Never past t0 + 20 ms, and after 20 ms of waiting it reads.
        let now = t0 + 19 * MS + 900 * US; // the next step (400 µs) would pass 20 ms
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(t0 + CLEAR_MAX_NS)
        );
        assert_eq!(
            clear_until(t0 + CLEAR_MAX_NS, t0, other, &mut step, &mut last),
            None
        );
    }
}
