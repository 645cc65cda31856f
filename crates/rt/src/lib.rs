//! firmtime-rt: the real-time primitives every part of firmtime stands on.
//!
//! A 1 ms periodic loop of 5 ticks that records how late each wake-up was
//! (no root needed: without real-time scheduling the loop still runs, just
//! with more latency):
//!
//! ```
//! use firmtime_rt::{clock, eventlog::Recorder, periodic::Periodic, sleep};
//!
//! // Set up: open the sleeper and preallocate the storage.
//! let mut sleeper = sleep::open(sleep::Mechanism::ClockNanosleep)?;
//! let mut latencies = Recorder::<i64>::with_capacity(5);
//! let period_ns = 1_000_000;
//! let mut grid = Periodic::new(clock::monotonic_ns() + period_ns, period_ns);
//!
//! // The loop: wait for each deadline, record the latency. Nothing here allocates.
//! for _ in 0..5 {
//!     let tick = grid.wait(&mut *sleeper)?;
//!     assert!(latencies.push(tick.latency_ns));
//! }
//!
//! // After the loop: every deadline is either a tick or counted as missed.
//! assert_eq!((latencies.len(), latencies.overflow()), (5, 0));
//! assert_eq!(grid.next_index(), grid.ticks() + grid.missed_total());
//! let worst = latencies.as_slice().iter().max().copied().unwrap_or(0);
//! println!("5 ticks, {} missed, worst latency {worst} ns", grid.missed_total());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate sets up a thread for timed work and then gets out of its way:
//!
//! - [`sched`], [`memory`], [`dma`] and [`setup`]: scheduling policy and
//!   priority (SCHED_OTHER/BATCH/IDLE/FIFO/RR/DEADLINE), `mlockall` with stack
//!   prefault, CPU affinity, timer slack, `/dev/cpu_dma_latency` — and a report
//!   of what was actually obtained, comparable with what was asked. A refusal
//!   is an error that says why and how to fix it; a weaker setting is used only
//!   when the caller asks for it, and the downgrade is recorded.
//! - [`clock`]: every clock Linux offers plus the calibrated TSC, with resolution.
//! - [`sleep`]: every way to wait until a deadline behind one interface.
//! - [`periodic`]: absolute-deadline periodic loops that count every missed deadline.
//! - [`eventlog`]: an RT-safe event log (preallocated SPSC ring, drops counted).
//! - [`runaway`]: RLIMIT_RTTIME + SIGXCPU demotion, so a runaway loop cannot lock the machine.
//! - [`privileges`]: the user, limits and capabilities that decide what is allowed.
//! - [`system`] and [`probe`]: the machine report every output file records,
//!   and what is installed and running beside it (JACK, MIDI and RTC
//!   devices, steal time) — the facts `firmtime doctor` judges.
//! - [`units`]: durations (`500us`) and sizes (`64KiB`) as users type them.
//!
//! And the helpers every firmtime crate shares, so each exists once:
//!
//! - [`fs`]: atomic result files (temp file, fsync, rename, directory fsync).
//! - [`process`]: child processes that die with firmtime (death signal, own
//!   process group, bounded stop).
//! - [`rng`]: the one seeded pseudo-random generator (SplitMix64).
//! - [`secret`]: the one rule for key and token files (regular, small, not
//!   writable by others; a warning when others may read them).
//! - [`define_error!`]: the one definition of every crate's `Error` type;
//!   [`error_from_io!`]: its one `From<std::io::Error>` (kind `Io`);
//!   [`define_os_error!`]: the one error type that carries an OS error
//!   number (`errno`, `invalid`, `with_errno`).
//! - [`add_fields!`]: the one field-by-field sum of counter structs;
//!   [`load_counters!`]: the one snapshot of atomic counters.
//! - [`assert_rt`]: the opt-in `assert-rt` feature that checks RT paths for
//!   allocations where they run.
//!
//! # The real-time contract
//!
//! Set up first (allocate, touch, lock, set policy), then loop. Functions
//! marked **RT-safe.** never allocate, never take a lock a non-RT thread can
//! hold, never print, and make no blocking system call other than the wait
//! they exist for. Test builds check this with `assert_no_alloc`; with the
//! `assert-rt` feature, [`assert_rt::no_alloc`] checks it in running programs.
//!
//! This crate has no policy and never prints: it returns values and
//! [`Error`]s; the `firmtime` binary decides what to show.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod assert_rt;
pub mod clock;
pub mod dma;
pub mod error;
pub mod eventlog;
pub mod fs;
pub mod memory;
pub mod outliers;
pub mod periodic;
pub mod privileges;
pub mod probe;
pub mod process;
pub mod quantile;
pub mod rng;
pub mod runaway;
pub mod sched;
pub mod secret;
pub mod setup;
pub mod sleep;
pub mod system;
pub mod testing;
pub mod units;

pub use error::{Errno, Error, ErrorKind, Result};

/// Adds the counters of `$src` to those of `$dst`, field by field, for the
/// fields named: `$dst.f += $src.f` each. The one field-by-field sum of
/// counter structs (lab's load workers, net's stream counters). **RT-safe**
/// (plain additions, expanded in place).
///
/// ```
/// #[derive(Default)]
/// struct Counts { sent: u64, lost: u64, name: &'static str }
/// let mut sum = Counts::default();
/// let one = Counts { sent: 5, lost: 1, name: "one" };
/// firmtime_rt::add_fields!(sum += one; sent, lost);
/// firmtime_rt::add_fields!(sum += one; sent, lost);
/// assert_eq!((sum.sent, sum.lost, sum.name), (10, 2, ""));
/// ```
#[macro_export]
macro_rules! add_fields {
    ($dst:ident += $src:ident; $($field:ident),+ $(,)?) => {
        $( $dst.$field += $src.$field; )+
    };
}

// Unit tests run RT closures under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

/// A snapshot of atomic counters: builds `$Stats { field: $src.field.load(Relaxed), … }`
/// for the fields named (`field: atomic` reads `$src.atomic` into `field`).
/// The one snapshot of the counters RT threads bump (midi's backends and raw
/// parser, net's gate). **RT-safe** (relaxed loads, expanded in place).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// #[derive(Default)]
/// struct Counters { sent: AtomicU64, p_lost: AtomicU64 }
/// #[derive(Debug, PartialEq)]
/// struct Stats { sent: u64, lost: u64 }
/// let c = Counters::default();
/// c.sent.fetch_add(3, Ordering::Relaxed);
/// c.p_lost.fetch_add(1, Ordering::Relaxed);
/// let s = firmtime_rt::load_counters!(Stats { sent, lost: p_lost } from c);
/// assert_eq!(s, Stats { sent: 3, lost: 1 });
/// ```
#[macro_export]
macro_rules! load_counters {
    ($Stats:ident { $($field:ident $(: $atomic:ident)?),+ $(,)? } from $src:expr) => {
        $Stats { $( $field: $crate::load_counters!(@load $src, $field $(, $atomic)?), )+ }
    };
    (@load $src:expr, $field:ident) => {
        $src.$field.load(::std::sync::atomic::Ordering::Relaxed)
    };
    (@load $src:expr, $field:ident, $atomic:ident) => {
        $src.$atomic.load(::std::sync::atomic::Ordering::Relaxed)
    };
}
