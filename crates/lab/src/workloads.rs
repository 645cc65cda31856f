//! The built-in applications of `lab trace` and `lab billing`, after
//! Etsion, Tsafrir & Feitelson (2003) §2.2, and the sort benchmark of §3.
//!
//! Each workload is a loop run on its own named thread (so the trace and
//! `/proc/self/task/TID` tell them apart):
//! - **typist** — an interactive editor with a user typing 8 characters per
//!   second: wakes every 125 ms and does a little work per keystroke (Emacs);
//! - **player** — a 60 frames-per-second player: wakes at each frame's
//!   absolute time and renders it (Xine's displayer);
//! - **sorter** — CPU-bound: re-initializes and sorts an array of about half
//!   the L2 cache, forever (the paper's CPU-bound process and §3's benchmark);
//! - **xserver** — tick-synchronized and bursty, like the paper's X server
//!   serving Xine: wakes just after each scheduler tick (the next multiple of
//!   1/HZ on CLOCK_MONOTONIC plus a small offset) and runs for just under a
//!   tick, so that tick sampling hardly ever sees it.
//!
//! Work is measured in the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID),
//! so a burst is as long as asked even when the thread is preempted.
//!
//! # RT contract
//! None of this is RT code: the workloads are ordinary SCHED_OTHER threads.
//! Their loops do not allocate (the sorter's array is allocated once).

use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sleep::{ClockNanosleepSleeper, Sleeper};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Typist: interval between keystrokes, ns (8 characters per second, §2.2).
pub const TYPIST_PERIOD_NS: u64 = 125_000_000;
/// Typist: CPU time spent per keystroke, ns.
pub const TYPIST_WORK_NS: u64 = 200_000;
/// Player: frame rate (§1, §5: MPEG's 60 frames per second).
pub const PLAYER_FPS: u64 = 60;
/// Player: CPU time spent rendering a frame, ns.
pub const PLAYER_WORK_NS: u64 = 3_000_000;
/// Xserver: wake this long after each tick, ns.
pub const XSERVER_OFFSET_NS: u64 = 100_000;
/// Xserver: run for this fraction of a tick (the paper: "0.8–0.9 of a tick").
pub const XSERVER_TICK_FRACTION: f64 = 0.8;

/// A built-in application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Interactive typist at 8 characters per second (the paper's Emacs).
    Typist,
    /// 60 fps player (the paper's Xine).
    Player,
    /// CPU-bound sorter (the paper's CPU-bound process).
    Sorter,
    /// Tick-synchronized bursty process (the paper's X server with Xine).
    Xserver,
}

impl Workload {
    /// `--workload all`: typist, player and sorter (§2.2's applications).
    pub const ALL: [Workload; 3] = [Workload::Typist, Workload::Player, Workload::Sorter];
    /// `lab billing`: the three plus the tick-synchronized X server case.
    pub const BILLING: [Workload; 4] = [
        Workload::Typist,
        Workload::Player,
        Workload::Sorter,
        Workload::Xserver,
    ];

    /// The flag spelling and row label: `typist`, `player`, `sorter`, `xserver`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Typist => "typist",
            Workload::Player => "player",
            Workload::Sorter => "sorter",
            Workload::Xserver => "xserver",
        }
    }

    /// The application of the paper this one stands for.
    pub fn paper_row(self) -> &'static str {
        match self {
            Workload::Typist => "Emacs",
            Workload::Player => "Xine",
            Workload::Sorter => "CPU-bound",
            Workload::Xserver => "X Server",
        }
    }

    /// The thread name (`comm`) the workload runs under.
    pub fn thread_name(self) -> &'static str {
        match self {
            Workload::Typist => "ft-typist",
            Workload::Player => "ft-player",
            Workload::Sorter => "ft-sorter",
            Workload::Xserver => "ft-xserver",
        }
    }

    /// Parses `typist`, `player`, `sorter`, `xserver`, or `all` (→ [`Workload::ALL`]).
    pub fn parse_list(s: &str) -> Option<Vec<Workload>> {
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim) {
            match part {
                "all" => v.extend_from_slice(&Workload::ALL),
                "typist" => v.push(Workload::Typist),
                "player" => v.push(Workload::Player),
                "sorter" => v.push(Workload::Sorter),
                "xserver" => v.push(Workload::Xserver),
                _ => return None,
            }
        }
        v.dedup();
        Some(v)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Start/finish handshake between the tracer and its workload threads.
///
/// The tracer sets `finish`; each workload ends its current iteration,
/// counts itself in `arrived` and parks until `release`, so the tracer can
/// stop tracing and read each thread's `/proc` accounting while the thread
/// still exists.
#[derive(Debug, Default)]
pub struct Control {
    /// Set by the tracer: finish the current iteration and park.
    pub finish: AtomicBool,
    /// Workloads parked so far.
    pub arrived: AtomicUsize,
    /// Set by the tracer: parked workloads may exit.
    pub release: AtomicBool,
}

impl Control {
    fn park(&self) {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        while !self.release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The calling thread's id (what the trace's pid fields hold).
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// The calling thread's CPU time, ns.
pub fn thread_cpu_ns() -> u64 {
    firmtime_rt::clock::read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Burns `ns` of this thread's CPU time (not wall time: a preempted burst
/// still does all its work). Returns a value so the work is not optimized out.
pub fn burn_cpu_ns(ns: u64) -> u64 {
    let end = thread_cpu_ns() + ns;
    // Any non-zero start serves the xorshift chain; its values are never used.
    let mut x: u64 = firmtime_rt::rng::Rng::GAMMA;
    loop {
        for _ in 0..256 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if thread_cpu_ns() >= end {
            return std::hint::black_box(x);
        }
    }
}

/// Elements of the sort benchmark's array: half the L2 cache of CPU 0
/// (sysfs `cache/index2/size`) in `u32`s, or 64 Ki elements (256 KiB) if unknown.
pub fn sort_len() -> usize {
    let size = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size")
        .ok()
        .and_then(|s| parse_cache_size(s.trim()));
    size.map(|b| (b / 2 / 4).max(1024)).unwrap_or(64 * 1024)
}

/// Parses sysfs cache sizes: `512K`, `2048K`, `1M`, `32768`.
pub fn parse_cache_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1024),
        b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mul)
}

/// One round of the sort benchmark: fills `buf` from the seeded
/// [`Rng`](firmtime_rt::rng::Rng) and sorts it. Returns the next seed.
pub fn sort_once(buf: &mut [u32], seed: u64) -> u64 {
    let mut rng = firmtime_rt::rng::Rng::new(seed);
    for v in buf.iter_mut() {
        *v = (rng.next_u64() >> 32) as u32;
    }
    buf.sort_unstable();
    rng.next_u64()
}

/// Runs `w` on the calling thread until `ctl.finish`, then parks (see
/// [`Control`]). Stores the thread id in `tid` first and counts iterations
/// (keystrokes, frames, sorts, bursts) in `iterations`. `hz` is the kernel's
/// tick rate (the xserver's rhythm).
pub fn run(w: Workload, ctl: &Control, tid: &AtomicI32, iterations: &AtomicU64, hz: u32) {
    tid.store(gettid(), Ordering::SeqCst);
    let mut sleeper = ClockNanosleepSleeper;
    match w {
        Workload::Typist => periodic(ctl, iterations, &mut sleeper, TYPIST_PERIOD_NS, 0, || {
            burn_cpu_ns(TYPIST_WORK_NS);
        }),
        Workload::Player => {
            let period = 1_000_000_000 / PLAYER_FPS;
            periodic(ctl, iterations, &mut sleeper, period, 0, || {
                burn_cpu_ns(PLAYER_WORK_NS);
            })
        }
        Workload::Xserver => {
            let tick = tick_ns(hz);
            let work = (tick as f64 * XSERVER_TICK_FRACTION) as u64;
            periodic(
                ctl,
                iterations,
                &mut sleeper,
                tick,
                XSERVER_OFFSET_NS,
                || {
                    burn_cpu_ns(work);
                },
            )
        }
        Workload::Sorter => {
            let mut buf = vec![0u32; sort_len()];
            let mut seed = 1;
            while !ctl.finish.load(Ordering::Relaxed) {
                seed = sort_once(&mut buf, seed);
                iterations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    ctl.park();
}

/// The kernel's tick length for `hz`, ns (the kernel's TICK_NSEC, rounded).
pub fn tick_ns(hz: u32) -> u64 {
    let hz = u64::from(hz.max(1));
    (1_000_000_000 + hz / 2) / hz
}

/// Wakes at `k·period + offset` on CLOCK_MONOTONIC (so a period of one tick
/// is aligned with the tick), runs `work`, until `ctl.finish`. A wake-up
/// that is a whole period late skips to the next boundary (the player drops
/// the frame).
fn periodic(
    ctl: &Control,
    iterations: &AtomicU64,
    sleeper: &mut ClockNanosleepSleeper,
    period: u64,
    offset: u64,
    mut work: impl FnMut(),
) {
    let mut next = (monotonic_ns() / period + 1) * period + offset;
    while !ctl.finish.load(Ordering::Relaxed) {
        if sleeper.sleep_until(next).is_err() {
            return;
        }
        work();
        iterations.fetch_add(1, Ordering::Relaxed);
        next += period;
        let now = monotonic_ns();
        if next <= now {
            next = (now / period + 1) * period + offset;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_lists_parse() {
        assert_eq!(Workload::parse_list("all").unwrap(), Workload::ALL.to_vec());
        assert_eq!(
            Workload::parse_list("sorter,xserver").unwrap(),
            vec![Workload::Sorter, Workload::Xserver]
        );
        assert!(Workload::parse_list("emacs").is_none());
    }

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("512K"), Some(512 * 1024));
        assert_eq!(parse_cache_size("1M"), Some(1024 * 1024));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn tick_length_matches_the_kernels_rounding() {
        assert_eq!(tick_ns(250), 4_000_000);
        assert_eq!(tick_ns(1000), 1_000_000);
        assert_eq!(tick_ns(300), 3_333_333);
    }

    #[test]
    fn sort_once_sorts() {
        let mut b = vec![0u32; 1000];
        let s = sort_once(&mut b, 7);
        assert!(b.windows(2).all(|w| w[0] <= w[1]));
        assert_ne!(s, 7);
    }
}
