//! Why the worst wake-ups were late: the explaining trace of `lab cyclic
//! --explain`, `lab all`, `tap run`, `net bench` and `watch`.
//!
//! Like rtla's `timerlat --auto-analysis`, for a user-space periodic thread.
//! While a run measures, a private tracefs instance (firmtime-trace's tracer,
//! [`crate::tracefs`]) records on the measured CPUs `sched_switch`,
//! `local_timer_entry/exit`, `irq_handler_entry/exit`, `softirq_entry/exit`,
//! `power:cpu_idle`, and the measured threads' own `sched_wakeup` and
//! `page_fault_user` (filtered in the kernel by thread name, then id); a
//! drainer thread copies the binary ring buffers and keeps the events
//! inside windows around the late wake-ups the measured threads flag
//! ([`window`]), in storage allocated before the run ([`Config::max_events`];
//! reusable from session to session: [`pool`]). Each measured thread notes
//! its worst wake-ups — index, deadline, wake time, missed deadlines — into
//! a preallocated heap ([`Notes`], **RT-safe**, no allocation, no syscall).
//! After the run, every noted wake-up above the threshold (`--explain-above`,
//! or the thread's p99.9 over the run) and every one that missed a deadline
//! is attributed from the trace of its CPU between deadline and wake
//! ([`attribute`], its lateness split into parts by [`breakdown`]).
//!
//! Bounded and honest: what the store could not hold (`dropped`), what the
//! kernel lost (`lost`) and wake-ups beyond the noted ones (`not_noted`)
//! are counted, and a wake-up the trace does not cover is
//! [`Category::Unknown`], never hidden. What the kernel lost is located in
//! time ([`crate::loss`]): a wake-up whose span lost events is `unknown`
//! ([`attribute::TRACE_LOST`]), never guessed.
//!
//! Lossless by design where it can be ([`Config::cpus`],
//! [`Config::size_from_rate`]): only the measured CPUs' events are written
//! (`tracing_cpumask`), the measured threads' page faults and wake-ups are
//! filtered in the kernel, and the ring buffers hold two seconds of the
//! event rate measured at the start.
//!
//! Where the I/O is: [`session`] (tracefs, the drainer thread, and what
//! `/proc` and sysfs say of the tasks and the machine, read once per
//! session); [`gate`] (when the drainer may read: off the CPUs while a
//! measured thread is due). Pure code, no I/O: [`window`], [`attribute`]
//! (names of tasks no record names come in from the session:
//! [`Timeline::with_names`]), [`breakdown`], [`advice`] and [`words`]
//! (every sentence a report prints). [`outcome`] turns a finished
//! session's record into an [`Explanation`]; its one look at the world is
//! the process (thread group, policy) of each task in a breakdown, read
//! from `/proc` after attribution ([`proc_task_info`]).

pub mod advice;
pub mod attribute;
pub mod breakdown;
pub mod gate;
pub mod mode;
pub mod outcome;
pub mod pool;
pub mod rotation;
pub mod session;
pub mod stacks;
pub mod window;
pub mod words;

pub use attribute::{Category, Cause, Machine, Part, Timeline, Wakeup};
pub use breakdown::{Kind, Share};
pub use mode::{Decision, ExplainMode};
pub use outcome::{by_cause, explain, CauseCount, Explanation, Outlier, Target, ThreadExplained};
pub use pool::{Lease, Pool};
pub use rotation::Rotation;
pub use session::{
    available, idle_exit_max_ns, instance, instance_on, proc_task_info, this_machine, CaptureSetup,
    CpuSteal, LoopThread, LoopWatch, Recorded, Session,
};
pub use stacks::KernelStacks;
pub use window::{Keeper, Storage};
pub use words::{
    cause_words, process_words, stacks_words, summary, with_parts, PARTS_SHOWN, SUMMARY_CAUSES,
};

use crate::error::Result;
use crate::raw::{EventKind, EXPLAIN_EVENTS};
use serde::{Deserialize, Serialize};

/// Valid `--explain-worst` range (wake-ups noted per thread).
pub const WORST: std::ops::RangeInclusive<usize> = 1..=100_000;

/// The RT side (what the measured threads touch: no allocation, no
/// syscall) lives in `firmtime_rt::outliers`; this is its one path here.
pub use firmtime_rt::outliers::{
    lookback_ns, Flags, Note, Notes, TraceCoverage, TracedCause, Window, LANES,
};

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
    /// Undecided events the drainer holds over all CPUs while it waits to
    /// know whether a late wake-up needs them, default 400,000 (~26 MB);
    /// at least 32,768 per CPU (300 ms at ~100,000 events/s). Events pushed
    /// out of a full queue are a hole in that CPU's trace, treated as a
    /// loss (a window over it is "unknown (trace lost N events)").
    /// `watch`, which holds two sessions at an interval's boundary, asks
    /// for the least.
    pub pending_events: usize,
    /// Windows (late wake-ups, overlapping ones merged) a session holds,
    /// default 65,536 (~5 MB reserved); more are counted as flags lost.
    /// `watch`, whose threads note their worst few per interval, asks for
    /// fewer.
    pub max_windows: usize,
    /// How often the drainer empties the ring buffers, ns, default 20 ms.
    pub drain_interval_ns: u64,
    /// With a value above `drain_interval_ns`, the drainer paces itself
    /// ([`crate::tracefs::Pace`]): it waits up to this long between passes while
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
    /// ([`crate::tracefs::buffer_kb_for_rate`]; `buffer_kb` is then the least).
    /// Default off (`watch` starts a session per interval); `lab cyclic`
    /// and `lab all` turn it on.
    pub size_from_rate: bool,
    /// Record as before issue 29, for comparison: every CPU, the fixed
    /// `buffer_kb`, no probe (`FIRMTIME_EXPLAIN_UNFILTERED=1` in the lab
    /// commands). Losses are still located and refused either way.
    pub unfiltered: bool,
    /// Record the kernel stack of the task a measured thread was switched
    /// in from (`--kernel-stacks`; a `stacktrace` trigger on
    /// `sched_switch`, [`stacks`]): shown on the outliers' `task` and
    /// `non_preemptible` parts. Off by default: it unwinds a stack on the
    /// thread's wake-up path whenever it preempts a task.
    pub kernel_stacks: bool,
    /// The CPUs the drainer (the thread that reads and decodes the ring
    /// buffers) may run on; `None`: the traced CPUs. `watch` puts it with
    /// its other housekeeping threads (`--housekeeping-cpu`).
    pub drainer_cpus: Option<Vec<usize>>,
}

/// [`Config::pending_events`]'s default (~26 MB).
pub const PENDING_EVENTS: usize = 400_000;

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
            pending_events: PENDING_EVENTS,
            max_windows: window::MAX_WINDOWS,
            drain_interval_ns: 20_000_000,
            drain_interval_max_ns: 20_000_000,
            woken_by: WokenBy::Anything,
            cpus: None,
            size_from_rate: false,
            unfiltered: false,
            kernel_stacks: false,
            drainer_cpus: None,
        }
    }
}

impl Config {
    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidInput`] naming the offending flag.
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
