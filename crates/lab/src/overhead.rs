//! `firmtime lab overhead`: the basic costs of Etsion, Tsafrir and
//! Feitelson (2003), Table 2, on this machine — context switch, trap,
//! memory-copy bandwidth — plus the cost of reading each clock.
//!
//! - **Context switch**: two processes exchange a byte through two pipes;
//!   one round trip is two switches, so the figure is elapsed / (2 ×
//!   round trips). Measured with both processes pinned to one CPU (every
//!   hand-over is a real switch) and pinned to two different CPUs (the
//!   cost of a cross-CPU wake-up, which is what a multi-core machine
//!   mostly does).
//! - **Trap**: `syscall(SYS_getpid)`, a real system call (glibc no longer
//!   caches getpid, but calling the syscall directly makes sure).
//! - **memcpy bandwidth**: copying a buffer larger than the caches
//!   ([`Config::memcpy_bytes`], 64 MiB by default), in MB/s (10^6 bytes).
//! - **Clock reads**: ns per read of every clock, back to back
//!   ([`crate::clockread::sample`]).
//!
//! Each figure is measured [`Config::repetitions`] times and reported as
//! median, min, p90 and max of the per-repetition values ([`Spread`]):
//! a noisy machine (other load, time stolen by a hypervisor) shows in the
//! spread, not in a single number. Where the
//! TSC is invariant, costs are also given in cycles (ns × calibrated TSC Hz).
//!
//! # RT contract
//! None: this is a throughput measurement. The measured loops do not
//! allocate or print, but they make system calls by design.

use crate::check;
use crate::clockread;
use crate::error::{Error, ErrorKind, Result};
use crate::measure::{self, Cell, Priority, Progress};
use firmtime_rt::clock::{self, Clock, ClockKind, TscClock};
use firmtime_rt::sched;
use firmtime_rt::setup::RtConditions;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::ops::RangeInclusive;
use std::time::Duration;

/// One processor of Etsion et al. (2003), Table 2 ("Other overheads on
/// different processor generations", average ± standard deviation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperRow {
    /// The paper's processor label (P-90 … PIV-2.4, A1.467 = Athlon XP1700+).
    pub processor: &'static str,
    /// Clock rate, MHz.
    pub mhz: u32,
    /// Context switch, cycles (average).
    pub context_switch_cycles: u32,
    /// Context switch, cycles (standard deviation).
    pub context_switch_cycles_sd: u32,
    /// Context switch, ns.
    pub context_switch_ns: u32,
    /// memcpy ("cache") bandwidth, MB/s (average).
    pub memcpy_mb_per_s: u32,
    /// memcpy bandwidth, MB/s (standard deviation).
    pub memcpy_mb_per_s_sd: u32,
    /// Trap (getpid), cycles (average).
    pub trap_cycles: u32,
    /// Trap, cycles (standard deviation).
    pub trap_cycles_sd: u32,
    /// Trap, ns.
    pub trap_ns: u32,
}

const fn p(
    processor: &'static str,
    mhz: u32,
    cs: (u32, u32, u32),
    bw: (u32, u32),
    trap: (u32, u32, u32),
) -> PaperRow {
    PaperRow {
        processor,
        mhz,
        context_switch_cycles: cs.0,
        context_switch_cycles_sd: cs.1,
        context_switch_ns: cs.2,
        memcpy_mb_per_s: bw.0,
        memcpy_mb_per_s_sd: bw.1,
        trap_cycles: trap.0,
        trap_cycles_sd: trap.1,
        trap_ns: trap.2,
    }
}

/// Etsion, Tsafrir and Feitelson (2003), "Effects of clock resolution on
/// the scheduling of interactive and soft real-time processes", Table 2:
/// Pentium generations from 90 MHz to 2.4 GHz and an Athlon XP1700+ at
/// 1.467 GHz, Linux 2.4. The paper gives µs; these are the same figures in ns.
pub const ETSION_TABLE2: [PaperRow; 7] = [
    p("P-90", 90, (1871, 656, 20_750), (28, 1), (153, 24, 1_700)),
    p(
        "PP-200",
        200,
        (1530, 389, 7_690),
        (705, 26),
        (379, 75, 1_910),
    ),
    p(
        "PII-350",
        350,
        (1327, 331, 3_800),
        (1314, 29),
        (343, 68, 980),
    ),
    p(
        "PIII-664",
        664,
        (1317, 424, 1_980),
        (2512, 32),
        (348, 163, 520),
    ),
    p(
        "PIII-1.133",
        1133,
        (1330, 441, 1_180),
        (4286, 82),
        (364, 278, 320),
    ),
    p(
        "PIV-2.4",
        2400,
        (3792, 857, 1_590),
        (3016, 47),
        (1712, 32, 720),
    ),
    p("A1.467", 1467, (1436, 477, 980), (3962, 63), (274, 20, 190)),
];

/// What `firmtime lab overhead` measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Repetitions of each figure (`--repeats`), in [`Config::REPETITIONS`].
    pub repetitions: u32,
    /// Pipe round trips per repetition (`--round-trips`), in [`Config::COUNT`].
    pub round_trips: u32,
    /// getpid calls per repetition (`--traps`), in [`Config::COUNT`].
    pub traps: u32,
    /// Bytes copied per memcpy repetition (`--memcpy-size`), in [`Config::MEMCPY`].
    pub memcpy_bytes: u64,
    /// Reads per clock per repetition (`--clock-reads`), in [`Config::COUNT`].
    pub clock_reads: u32,
    /// The scheduling condition of the measuring thread (`--priority`).
    pub priority: Priority,
}

impl Default for Config {
    fn default() -> Self {
        Self::full()
    }
}

impl Config {
    /// Valid `--repeats`.
    pub const REPETITIONS: RangeInclusive<u32> = 1..=1000;
    /// Valid `--round-trips`, `--traps` and `--clock-reads`.
    pub const COUNT: RangeInclusive<u32> = 1..=100_000_000;
    /// Valid `--memcpy-size` (4 KiB to 4 GiB).
    pub const MEMCPY: RangeInclusive<u64> = 4 << 10..=4 << 30;

    /// Full run: 11 repetitions, 20,000 round trips, 1,000,000 traps and
    /// clock reads, 64 MiB copies.
    pub fn full() -> Self {
        Self {
            repetitions: 11,
            round_trips: 20_000,
            traps: 1_000_000,
            memcpy_bytes: 64 << 20,
            clock_reads: 1_000_000,
            priority: Priority::User,
        }
    }

    /// A first look (a few seconds): 5 repetitions, fewer operations.
    pub fn quick() -> Self {
        Self {
            repetitions: 5,
            round_trips: 5_000,
            traps: 200_000,
            memcpy_bytes: 64 << 20,
            clock_reads: 200_000,
            priority: Priority::User,
        }
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the flag and its valid range.
    pub fn validate(&self) -> Result<()> {
        check::in_range("--repeats", self.repetitions, &Self::REPETITIONS)?;
        check::in_range("--round-trips", self.round_trips, &Self::COUNT)?;
        check::in_range("--traps", self.traps, &Self::COUNT)?;
        check::in_range("--clock-reads", self.clock_reads, &Self::COUNT)?;
        check::in_range("--memcpy-size", self.memcpy_bytes, &Self::MEMCPY)?;
        // Gaps need two reads.
        check::in_range("--clock-reads", self.clock_reads, &(2..=*Self::COUNT.end()))?;
        if let Priority::Fifo(p) = self.priority {
            let show = |p| format!("fifo:{p}");
            check::in_range_as("--priority", p, &(1..=99), show)?;
        }
        Ok(())
    }
}

/// A figure over repetitions: median, min, p90 (nearest rank) and max of
/// the per-repetition values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Repetitions the figure is made of.
    pub reps: u32,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest repetition.
    pub min: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// Largest repetition.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n);
        Some(Spread {
            reps: n as u32,
            median,
            min: v[0],
            p90: v[rank - 1],
            max: v[n - 1],
        })
    }

    /// Every value multiplied by `k` (ns → cycles).
    pub fn scaled(&self, k: f64) -> Spread {
        Spread {
            reps: self.reps,
            median: self.median * k,
            min: self.min * k,
            p90: self.p90 * k,
            max: self.max * k,
        }
    }
}

/// The cost of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Operations per repetition.
    pub operations: u64,
    /// Nanoseconds per operation (a quotient, hence fractional).
    pub ns: Spread,
    /// Cycles per operation (ns × TSC Hz), where the TSC is invariant.
    pub cycles: Option<Spread>,
}

/// A context-switch figure with the CPUs the two processes were pinned to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSwitch {
    /// CPU of the measuring process.
    pub parent_cpu: usize,
    /// CPU of the echoing child process.
    pub child_cpu: usize,
    /// Cost per switch (round trip / 2).
    #[serde(flatten)]
    pub cost: Cost,
}

/// memcpy bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Bytes copied per repetition.
    pub bytes: u64,
    /// MB/s (10^6 bytes per second) per repetition.
    pub mb_per_s: Spread,
}

/// The read cost of one clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockCost {
    /// Which clock.
    pub clock: ClockKind,
    /// Its cost per read, or why it is not available.
    pub result: Cell<Cost>,
}

/// The result of `firmtime lab overhead`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadResult {
    /// The conditions the measuring thread obtained.
    pub conditions: RtConditions,
    /// Calibrated TSC frequency; `None` without an invariant TSC.
    pub tsc_hz: Option<f64>,
    /// Why there are no cycle figures, when there are none.
    pub cycles_unavailable: Option<String>,
    /// Both processes pinned to one CPU.
    pub context_switch_same_cpu: Cell<ContextSwitch>,
    /// The two processes pinned to two different CPUs.
    pub context_switch_cross_cpu: Cell<ContextSwitch>,
    /// `syscall(SYS_getpid)`.
    pub trap_getpid: Cell<Cost>,
    /// Copying a buffer larger than the caches.
    pub memcpy: Cell<Bandwidth>,
    /// Read cost of every clock, in [`ClockKind::ALL`] order.
    pub clock_reads: Vec<ClockCost>,
    /// True when Ctrl-C interrupted the run (figures not measured are
    /// skipped with reason "interrupted").
    pub partial: bool,
}

fn interrupted<T>() -> Cell<T> {
    Cell::Skipped {
        reason: "interrupted: not measured (Ctrl-C)".to_string(),
    }
}

/// Runs `reps` repetitions of `f` (which returns ns per operation),
/// stopping early on Ctrl-C. Returns the values measured.
fn repeat(reps: u32, mut f: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    let mut v = Vec::with_capacity(reps as usize);
    for _ in 0..reps {
        if measure::stop_requested() {
            break;
        }
        v.push(f()?);
    }
    Ok(v)
}

fn cost(ops: u64, values: &[f64], tsc_hz: Option<f64>) -> Option<Cost> {
    let ns = Spread::of(values)?;
    Some(Cost {
        operations: ops,
        ns,
        cycles: tsc_hz.map(|hz| ns.scaled(hz / 1e9)),
    })
}

/// ns per `syscall(SYS_getpid)`, one repetition of `n` calls.
fn trap_once(n: u32) -> f64 {
    let t0 = clock::monotonic_ns();
    for _ in 0..n {
        // SAFETY: getpid takes no arguments and cannot fail.
        black_box(unsafe { libc::syscall(libc::SYS_getpid) });
    }
    let t1 = clock::monotonic_ns();
    (t1 - t0) as f64 / f64::from(n)
}

/// ns per read of `clock`, one repetition filling `buf`.
fn clock_once(clock: &Clock, buf: &mut [u64]) -> f64 {
    let never = std::sync::atomic::AtomicBool::new(false);
    let t0 = clock::monotonic_ns();
    let n = clockread::sample(clock, buf, &never);
    let t1 = clock::monotonic_ns();
    black_box(&buf[..n]);
    (t1 - t0) as f64 / n as f64
}

/// MB/s of one copy of `src` into `dst`.
fn memcpy_once(src: &[u8], dst: &mut [u8]) -> f64 {
    let t0 = clock::monotonic_ns();
    dst.copy_from_slice(black_box(src));
    black_box(&dst[..]);
    let t1 = clock::monotonic_ns();
    src.len() as f64 * 1e3 / (t1 - t0).max(1) as f64
}

/// Two pipe file descriptors, closed on drop.
struct Pipe {
    r: libc::c_int,
    w: libc::c_int,
}

impl Pipe {
    fn new() -> Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io_error("pipe2"));
        }
        Ok(Pipe {
            r: fds[0],
            w: fds[1],
        })
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        for fd in [self.r, self.w] {
            if fd >= 0 {
                // SAFETY: the fd was opened by pipe2 and is owned by this Pipe.
                unsafe { libc::close(fd) };
            }
        }
    }
}

fn io_error(what: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("{what} failed: {}", std::io::Error::last_os_error()),
    )
}

fn close(fd: &mut libc::c_int) {
    if *fd >= 0 {
        // SAFETY: the fd is owned by the caller's Pipe and closed only once
        // (it is set to -1 afterwards).
        unsafe { libc::close(*fd) };
        *fd = -1;
    }
}

/// Writes one byte and reads one back.
fn round_trip(w: libc::c_int, r: libc::c_int) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: `b` is a valid 1-byte buffer for both calls.
    unsafe {
        libc::write(w, b.as_ptr().cast(), 1) == 1 && libc::read(r, b.as_mut_ptr().cast(), 1) == 1
    }
}

/// The echoing child: after fork, only async-signal-safe system calls, no
/// allocation, and `_exit`.
fn child_echo(cpu_set: &libc::cpu_set_t, r: libc::c_int, w: libc::c_int) -> ! {
    let mut b = [0u8; 1];
    // Dies with the measuring thread; without it, EOF on the pipe still ends it.
    let _ = firmtime_rt::process::set_death_signal(libc::SIGKILL);
    // SAFETY: plain system calls on fds and memory this process owns; the
    // child never returns into Rust code of the parent's threads.
    unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpu_set);
        while libc::read(r, b.as_mut_ptr().cast(), 1) == 1 {
            if libc::write(w, b.as_ptr().cast(), 1) != 1 {
                break;
            }
        }
        libc::_exit(0)
    }
}

/// Context-switch cost with the measuring thread pinned to `parent_cpu`
/// and a forked echo process pinned to `child_cpu`: ns per switch for each
/// repetition. Restores the calling thread's affinity.
fn context_switch(
    parent_cpu: usize,
    child_cpu: usize,
    reps: u32,
    round_trips: u32,
) -> Result<Vec<f64>> {
    let before = sched::affinity()?;
    sched::set_affinity(&[parent_cpu])?;
    let r = context_switch_pinned(child_cpu, reps, round_trips);
    let restored = sched::set_affinity(&before);
    let v = r?;
    restored?;
    Ok(v)
}

fn context_switch_pinned(child_cpu: usize, reps: u32, round_trips: u32) -> Result<Vec<f64>> {
    let mut to_child = Pipe::new()?;
    let mut to_parent = Pipe::new()?;
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: callers pass a CPU from the affinity mask, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(child_cpu, &mut set) };
    // SAFETY: the child runs only `child_echo` (system calls and _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io_error("fork for the context-switch partner"));
    }
    if pid == 0 {
        child_echo(&set, to_child.r, to_parent.w);
    }
    close(&mut to_child.r);
    close(&mut to_parent.w);
    let (w, r) = (to_child.w, to_parent.r);
    let mut failed = false;
    // Warm up: the child has started and both sides are on their CPUs.
    for _ in 0..round_trips.min(1000) {
        failed |= !round_trip(w, r);
    }
    let out = repeat(reps, || {
        let t0 = clock::monotonic_ns();
        for _ in 0..round_trips {
            if !round_trip(w, r) {
                return Err(io_error("pipe round trip with the partner process"));
            }
        }
        let t1 = clock::monotonic_ns();
        Ok((t1 - t0) as f64 / (2.0 * f64::from(round_trips)))
    });
    // EOF ends the child; SIGKILL makes sure, then reap it.
    close(&mut to_child.w);
    let mut status = 0;
    // SAFETY: `pid` is our child; waitpid writes into a valid int.
    let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if reaped == 0 {
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: as above; kill of our own unreaped child is harmless.
        unsafe {
            if libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }
    if failed {
        return Err(io_error("pipe round trip with the partner process"));
    }
    out
}

fn switch_cell(
    cpus: Option<(usize, usize)>,
    cfg: &Config,
    tsc_hz: Option<f64>,
    why_not: &str,
) -> Result<Cell<ContextSwitch>> {
    let Some((a, b)) = cpus else {
        return Ok(Cell::Skipped {
            reason: why_not.to_string(),
        });
    };
    if measure::stop_requested() {
        return Ok(interrupted());
    }
    let v = context_switch(a, b, cfg.repetitions, cfg.round_trips)?;
    Ok(match cost(u64::from(cfg.round_trips) * 2, &v, tsc_hz) {
        Some(c) => Cell::Measured(ContextSwitch {
            parent_cpu: a,
            child_cpu: b,
            cost: c,
        }),
        None => interrupted(),
    })
}

/// Measures every figure.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] from [`Config::validate`];
/// [`ErrorKind::Realtime`] if `priority` is refused;
/// [`ErrorKind::Io`] if a pipe, fork or pinning fails.
pub fn run(cfg: &Config, progress: &mut dyn Progress) -> Result<OverheadResult> {
    cfg.validate()?;
    let (tsc_hz, cycles_unavailable) = match TscClock::calibrate(Clock::TSC_CALIBRATION) {
        Ok(t) => (Some(t.hz()), None),
        Err(e) => (None, Some(e.message().to_string())),
    };
    // Buffers are allocated and touched before the measured thread starts.
    let mut src = vec![0u8; cfg.memcpy_bytes as usize];
    src.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8);
    let mut dst = vec![1u8; cfg.memcpy_bytes as usize];
    let mut reads = vec![1u64; cfg.clock_reads as usize];
    let clocks: Vec<(ClockKind, Result<Clock>)> = ClockKind::ALL
        .iter()
        .map(|&k| (k, Clock::open(k).map_err(Error::from)))
        .collect();

    progress.begin("lab overhead", 4 + clocks.len() as u64);
    let mut conds = None;
    let r = run_figures(
        cfg, tsc_hz, &src, &mut dst, &mut reads, &clocks, &mut conds, progress,
    );
    progress.end();
    let (same, cross, trap, memcpy, clock_reads) = r?;
    Ok(OverheadResult {
        conditions: conds.expect("at least one figure ran"),
        tsc_hz,
        cycles_unavailable,
        context_switch_same_cpu: same,
        context_switch_cross_cpu: cross,
        trap_getpid: trap,
        memcpy,
        clock_reads,
        partial: measure::stop_requested(),
    })
}

/// Runs `f` on a measuring thread set up for `cfg.priority`; keeps the
/// conditions of the first such thread (every figure asks the same).
fn in_thread<R: Send>(
    cfg: &Config,
    conds: &mut Option<RtConditions>,
    f: impl FnOnce() -> Result<R> + Send,
) -> Result<R> {
    let (r, c) = measure::run_in_thread(&cfg.priority.request(), |_| f())?;
    conds.get_or_insert(c);
    r
}

type Figures = (
    Cell<ContextSwitch>,
    Cell<ContextSwitch>,
    Cell<Cost>,
    Cell<Bandwidth>,
    Vec<ClockCost>,
);

#[allow(clippy::too_many_arguments)]
fn run_figures(
    cfg: &Config,
    tsc_hz: Option<f64>,
    src: &[u8],
    dst: &mut [u8],
    reads: &mut [u64],
    clocks: &[(ClockKind, Result<Clock>)],
    conds: &mut Option<RtConditions>,
    progress: &mut dyn Progress,
) -> Result<Figures> {
    let allowed = sched::affinity()?;
    let same = in_thread(cfg, conds, || {
        switch_cell(
            allowed.first().map(|&c| (c, c)),
            cfg,
            tsc_hz,
            "no CPU in this thread's affinity mask",
        )
    })?;
    progress.advance(1);
    let why_not = format!(
        "not available: needs two CPUs, this process may only run on CPU {}",
        sched::format_cpu_list(&allowed)
    );
    let cross = in_thread(cfg, conds, || {
        switch_cell(
            (allowed.len() >= 2).then(|| (allowed[0], allowed[1])),
            cfg,
            tsc_hz,
            &why_not,
        )
    })?;
    progress.advance(1);

    let v = in_thread(cfg, conds, || {
        repeat(cfg.repetitions, || Ok(trap_once(cfg.traps)))
    })?;
    let trap = cost(cfg.traps.into(), &v, tsc_hz).map_or_else(interrupted, Cell::Measured);
    progress.advance(1);

    let v = in_thread(cfg, conds, || {
        repeat(cfg.repetitions, || Ok(memcpy_once(src, dst)))
    })?;
    let memcpy = Spread::of(&v).map_or_else(interrupted, |s| {
        Cell::Measured(Bandwidth {
            bytes: cfg.memcpy_bytes,
            mb_per_s: s,
        })
    });
    progress.advance(1);

    let mut clock_reads = Vec::with_capacity(clocks.len());
    for (kind, opened) in clocks {
        let result = match opened {
            Err(e) => Cell::Skipped {
                reason: e.message().to_string(),
            },
            Ok(c) => {
                let v = in_thread(cfg, conds, || {
                    repeat(cfg.repetitions, || Ok(clock_once(c, reads)))
                })?;
                cost(reads.len() as u64, &v, tsc_hz).map_or_else(interrupted, Cell::Measured)
            }
        };
        clock_reads.push(ClockCost {
            clock: *kind,
            result,
        });
        progress.advance(1);
    }
    Ok((same, cross, trap, memcpy, clock_reads))
}
