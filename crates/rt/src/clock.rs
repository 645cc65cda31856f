//! Clocks: every clock Linux offers, `gettimeofday`, and the calibrated TSC.
//!
//! [`monotonic_ns`] (CLOCK_MONOTONIC in nanoseconds) is the time base of the
//! whole project: deadlines, wake times and event timestamps are all in it.
//! The other clocks exist so that `firmtime lab clock` can measure and
//! compare them, each with its resolution ([`resolution`]).
//!
//! Reading a clock is the hot path of that measurement, so the read
//! functions are `#[inline]`, make one vDSO call (or one `rdtsc`) and carry
//! no branch beyond the clock kind. For the tightest loop, [`ClockRead`] is
//! implemented by zero-sized types ([`MonotonicClock`], …) and by
//! [`TscClock`], so a caller can monomorphize its loop per clock;
//! [`Clock::visit`] dispatches once to such a generic body.
//!
//! # RT contract
//! Every `now_ns`/`read_ns`/`ticks` function is **RT-safe**: no allocation,
//! no lock, no system call beyond the vDSO clock read (which falls back to a
//! real system call only when the kernel's clocksource cannot be read from
//! user space). Setup functions ([`TscClock::calibrate`], [`tsc_info`],
//! [`resolution`], [`Clock::open`]) allocate, read files and sleep.
//!
//! ```
//! use firmtime_rt::clock::{self, ClockKind};
//! let a = clock::monotonic_ns();
//! let b = clock::monotonic_ns();
//! assert!(b >= a);
//! assert!(clock::resolution(ClockKind::Monotonic).is_ok());
//! ```

use crate::error::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One of the clocks firmtime can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockKind {
    /// CLOCK_MONOTONIC: NTP-slewed, never steps; the project's time base.
    Monotonic,
    /// CLOCK_MONOTONIC_RAW: the raw hardware clock, not slewed by NTP.
    MonotonicRaw,
    /// CLOCK_REALTIME: wall-clock time since the Unix epoch; may step.
    Realtime,
    /// CLOCK_BOOTTIME: like MONOTONIC but counts time spent suspended.
    Boottime,
    /// CLOCK_TAI: International Atomic Time (REALTIME plus the kernel's TAI
    /// offset, which is 0 unless an NTP daemon has set it).
    Tai,
    /// `gettimeofday(2)`: wall-clock time in microseconds (Finney 2001's clock).
    Gettimeofday,
    /// The CPU's time-stamp counter, calibrated against CLOCK_MONOTONIC;
    /// offered only where the TSC is invariant.
    Tsc,
}

impl ClockKind {
    /// Every clock kind, in the order reports list them.
    pub const ALL: [ClockKind; 7] = [
        ClockKind::Monotonic,
        ClockKind::MonotonicRaw,
        ClockKind::Realtime,
        ClockKind::Boottime,
        ClockKind::Tai,
        ClockKind::Gettimeofday,
        ClockKind::Tsc,
    ];

    /// The name users type and reports print: `monotonic`, `monotonic-raw`,
    /// `realtime`, `boottime`, `tai`, `gettimeofday`, `tsc`.
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Monotonic => "monotonic",
            ClockKind::MonotonicRaw => "monotonic-raw",
            ClockKind::Realtime => "realtime",
            ClockKind::Boottime => "boottime",
            ClockKind::Tai => "tai",
            ClockKind::Gettimeofday => "gettimeofday",
            ClockKind::Tsc => "tsc",
        }
    }

    /// The `clockid_t` for `clock_gettime(2)`, or `None` for
    /// [`ClockKind::Gettimeofday`] and [`ClockKind::Tsc`].
    pub fn clockid(self) -> Option<libc::clockid_t> {
        match self {
            ClockKind::Monotonic => Some(libc::CLOCK_MONOTONIC),
            ClockKind::MonotonicRaw => Some(libc::CLOCK_MONOTONIC_RAW),
            ClockKind::Realtime => Some(libc::CLOCK_REALTIME),
            ClockKind::Boottime => Some(libc::CLOCK_BOOTTIME),
            ClockKind::Tai => Some(libc::CLOCK_TAI),
            ClockKind::Gettimeofday | ClockKind::Tsc => None,
        }
    }

    /// True for clocks that never go backwards (MONOTONIC, MONOTONIC_RAW,
    /// BOOTTIME and the TSC); wall clocks may step.
    pub fn is_monotonic(self) -> bool {
        matches!(
            self,
            ClockKind::Monotonic | ClockKind::MonotonicRaw | ClockKind::Boottime | ClockKind::Tsc
        )
    }
}

impl fmt::Display for ClockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ClockKind {
    type Err = Error;

    /// Parses a clock name as printed by [`ClockKind::name`].
    fn from_str(s: &str) -> Result<Self> {
        ClockKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ClockKind::ALL.iter().map(|k| k.name()).collect();
                Error::invalid(format!(
                    "unknown clock '{s}': valid clocks are {}",
                    names.join(", ")
                ))
            })
    }
}

/// Reads a libc clock in nanoseconds. **RT-safe.**
///
/// A clock the kernel does not know reads as 0 (every clock in
/// [`ClockKind::clockid`] exists on Linux ≥ 3.10).
#[inline]
pub fn read_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid, owned timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: the time base of firmtime. **RT-safe.**
#[inline]
pub fn monotonic_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC)
}

/// A time in nanoseconds as a `libc::timespec` (seconds and nanoseconds),
/// for the system calls that take one: an absolute deadline on a clock
/// (`clock_nanosleep(TIMER_ABSTIME)`, `timer_settime`, `FUTEX_WAIT_BITSET`)
/// or a relative duration (`nanosleep`). **RT-safe.**
///
/// ```
/// let ts = firmtime_rt::clock::timespec(2_500_000_001);
/// assert_eq!((ts.tv_sec, ts.tv_nsec), (2, 500_000_001));
/// ```
#[inline]
pub const fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// `gettimeofday(2)` in nanoseconds since the epoch (a multiple of 1000). **RT-safe.**
#[inline]
pub fn gettimeofday_ns() -> u64 {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: gettimeofday writes into a valid, owned timeval; a null timezone is allowed.
    unsafe { libc::gettimeofday(&mut tv, std::ptr::null_mut()) };
    tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000
}

/// The resolution of a clock.
///
/// libc clocks: `clock_getres(2)`. [`ClockKind::Gettimeofday`]: 1 µs, the
/// unit of its `struct timeval`. [`ClockKind::Tsc`]: one tick of the
/// calibrated frequency (a 20 ms calibration is run), rounded up to 1 ns,
/// the unit of [`TscClock::now_ns`].
///
/// # Errors
/// [`ErrorKind::Io`] if `clock_getres` fails; for the TSC, the errors of
/// [`TscClock::calibrate`] ([`ErrorKind::NotPresent`] without an invariant TSC).
pub fn resolution(kind: ClockKind) -> Result<Duration> {
    match kind {
        ClockKind::Gettimeofday => Ok(Duration::from_micros(1)),
        ClockKind::Tsc => Ok(TscClock::calibrate(Duration::from_millis(20))?.resolution()),
        _ => {
            let id = kind.clockid().unwrap_or(libc::CLOCK_MONOTONIC);
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_getres writes into a valid, owned timespec.
            if unsafe { libc::clock_getres(id, &mut ts) } != 0 {
                return Err(Error::last_os(&format!(
                    "clock_getres({}) failed",
                    kind.name()
                )));
            }
            Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
        }
    }
}

/// A clock that can be read in a tight loop.
///
/// Implemented by zero-sized types for the libc clocks and `gettimeofday`,
/// and by [`TscClock`], so a generic measurement loop is monomorphized per
/// clock with no dynamic dispatch.
pub trait ClockRead {
    /// The current time in nanoseconds. **RT-safe.**
    fn now_ns(&self) -> u64;
    /// Which clock this is.
    fn kind(&self) -> ClockKind;
}

macro_rules! libc_clock {
    ($(#[$doc:meta])* $name:ident, $id:expr, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name;

        impl ClockRead for $name {
            #[inline]
            fn now_ns(&self) -> u64 {
                read_ns($id)
            }
            #[inline]
            fn kind(&self) -> ClockKind {
                $kind
            }
        }
    };
}

libc_clock!(
    /// CLOCK_MONOTONIC as a zero-sized [`ClockRead`].
    MonotonicClock,
    libc::CLOCK_MONOTONIC,
    ClockKind::Monotonic
);
libc_clock!(
    /// CLOCK_MONOTONIC_RAW as a zero-sized [`ClockRead`].
    MonotonicRawClock,
    libc::CLOCK_MONOTONIC_RAW,
    ClockKind::MonotonicRaw
);
libc_clock!(
    /// CLOCK_REALTIME as a zero-sized [`ClockRead`].
    RealtimeClock,
    libc::CLOCK_REALTIME,
    ClockKind::Realtime
);
libc_clock!(
    /// CLOCK_BOOTTIME as a zero-sized [`ClockRead`].
    BoottimeClock,
    libc::CLOCK_BOOTTIME,
    ClockKind::Boottime
);
libc_clock!(
    /// CLOCK_TAI as a zero-sized [`ClockRead`].
    TaiClock,
    libc::CLOCK_TAI,
    ClockKind::Tai
);

/// `gettimeofday(2)` as a zero-sized [`ClockRead`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GettimeofdayClock;

impl ClockRead for GettimeofdayClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        gettimeofday_ns()
    }
    #[inline]
    fn kind(&self) -> ClockKind {
        ClockKind::Gettimeofday
    }
}

/// A generic body run by [`Clock::visit`] with the concrete clock type.
pub trait ClockVisitor {
    /// What the body returns.
    type Output;
    /// Runs the body with a concrete, monomorphizable clock.
    fn visit<C: ClockRead>(self, clock: &C) -> Self::Output;
}

/// Any clock as one value, chosen at run time.
///
/// [`Clock::now_ns`] is a `match` on the kind plus the read. For the
/// tightest loop use [`Clock::visit`], which matches once and runs a
/// generic body on the concrete clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// A `clock_gettime(2)` clock.
    Libc {
        /// Which clock.
        kind: ClockKind,
        /// Its `clockid_t`.
        id: libc::clockid_t,
    },
    /// `gettimeofday(2)`.
    Gettimeofday,
    /// The calibrated TSC.
    Tsc(TscClock),
}

impl Clock {
    /// Calibration time [`Clock::open`] spends on the TSC.
    pub const TSC_CALIBRATION: Duration = Duration::from_millis(100);

    /// Prepares a clock for reading; the TSC is calibrated for
    /// [`Clock::TSC_CALIBRATION`].
    ///
    /// # Errors
    /// For [`ClockKind::Tsc`], the errors of [`TscClock::calibrate`].
    pub fn open(kind: ClockKind) -> Result<Clock> {
        Ok(match kind {
            ClockKind::Gettimeofday => Clock::Gettimeofday,
            ClockKind::Tsc => Clock::Tsc(TscClock::calibrate(Self::TSC_CALIBRATION)?),
            _ => Clock::Libc {
                kind,
                id: kind.clockid().unwrap_or(libc::CLOCK_MONOTONIC),
            },
        })
    }

    /// The current time of this clock in nanoseconds. **RT-safe.**
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::Libc { id, .. } => read_ns(*id),
            Clock::Gettimeofday => gettimeofday_ns(),
            Clock::Tsc(t) => t.now_ns(),
        }
    }

    /// Which clock this is.
    pub fn kind(&self) -> ClockKind {
        match self {
            Clock::Libc { kind, .. } => *kind,
            Clock::Gettimeofday => ClockKind::Gettimeofday,
            Clock::Tsc(_) => ClockKind::Tsc,
        }
    }

    /// Runs `visitor` with the concrete clock type, so its loop is
    /// monomorphized (zero-sized clocks for libc clocks).
    pub fn visit<V: ClockVisitor>(&self, visitor: V) -> V::Output {
        match self {
            Clock::Libc { kind, id } => match kind {
                ClockKind::Monotonic => visitor.visit(&MonotonicClock),
                ClockKind::MonotonicRaw => visitor.visit(&MonotonicRawClock),
                ClockKind::Realtime => visitor.visit(&RealtimeClock),
                ClockKind::Boottime => visitor.visit(&BoottimeClock),
                ClockKind::Tai => visitor.visit(&TaiClock),
                // Not produced by `open`; kept correct for hand-built values.
                ClockKind::Gettimeofday | ClockKind::Tsc => visitor.visit(&LibcClock {
                    kind: *kind,
                    id: *id,
                }),
            },
            Clock::Gettimeofday => visitor.visit(&GettimeofdayClock),
            Clock::Tsc(t) => visitor.visit(t),
        }
    }
}

impl ClockRead for Clock {
    #[inline]
    fn now_ns(&self) -> u64 {
        Clock::now_ns(self)
    }
    #[inline]
    fn kind(&self) -> ClockKind {
        Clock::kind(self)
    }
}

/// Any `clockid_t` as a [`ClockRead`] (for clocks without a zero-sized type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LibcClock {
    kind: ClockKind,
    id: libc::clockid_t,
}

impl ClockRead for LibcClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        read_ns(self.id)
    }
    fn kind(&self) -> ClockKind {
        self.kind
    }
}

/// What this machine's TSC offers, from `cpuid` and `/proc/cpuinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TscInfo {
    /// The CPU has a TSC (`cpuid` leaf 1 EDX bit 4).
    pub present: bool,
    /// The TSC runs at a constant rate in every P-, C- and T-state
    /// (`cpuid` 0x8000_0007 EDX bit 8, or both `constant_tsc` and
    /// `nonstop_tsc` in `/proc/cpuinfo`). Only then is it offered as a clock.
    pub invariant: bool,
    /// `/proc/cpuinfo` lists `constant_tsc` (rate independent of frequency scaling).
    pub constant: bool,
    /// `/proc/cpuinfo` lists `nonstop_tsc` (keeps counting in deep C-states).
    pub nonstop: bool,
    /// Where the verdict came from, e.g.
    /// `cpuid 0x80000007 EDX[8]=1; /proc/cpuinfo: constant_tsc nonstop_tsc`.
    pub source_of_truth: String,
}

#[cfg(target_arch = "x86_64")]
fn cpuid_tsc() -> (bool, Option<bool>) {
    // SAFETY: cpuid is available on every x86_64 CPU (it is unsafe only on
    // older toolchains).
    #[allow(unused_unsafe)]
    let leaf0 = unsafe { core::arch::x86_64::__cpuid(0) };
    let present = if leaf0.eax >= 1 {
        // SAFETY: as above; leaf 1 exists (max basic leaf >= 1).
        #[allow(unused_unsafe)]
        let l1 = unsafe { core::arch::x86_64::__cpuid(1) };
        l1.edx & (1 << 4) != 0
    } else {
        false
    };
    // SAFETY: as above; leaf 0x8000_0000 reports the highest extended leaf.
    #[allow(unused_unsafe)]
    let ext = unsafe { core::arch::x86_64::__cpuid(0x8000_0000) };
    let invariant = if ext.eax >= 0x8000_0007 {
        // SAFETY: as above; the extended leaf exists.
        #[allow(unused_unsafe)]
        let l = unsafe { core::arch::x86_64::__cpuid(0x8000_0007) };
        Some(l.edx & (1 << 8) != 0)
    } else {
        None
    };
    (present, invariant)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_tsc() -> (bool, Option<bool>) {
    (false, None)
}

/// Reads the TSC facts of this machine: `cpuid`, cross-checked with the
/// flags the kernel derived in `/proc/cpuinfo` (hypervisors sometimes hide
/// the cpuid bit while the kernel knows better, or the reverse).
///
/// On architectures other than x86_64 the TSC is reported as not present.
pub fn tsc_info() -> TscInfo {
    let (present_cpuid, inv_cpuid) = cpuid_tsc();
    let flags = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("flags"))
                .map(|l| l.split_once(':').map_or("", |(_, f)| f).to_string())
        })
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    let (constant, nonstop, tsc_flag) = (has("constant_tsc"), has("nonstop_tsc"), has("tsc"));
    let present = cfg!(target_arch = "x86_64") && (present_cpuid || tsc_flag);
    let invariant = present && (inv_cpuid == Some(true) || (constant && nonstop));
    let mut src = match inv_cpuid {
        Some(b) => format!("cpuid 0x80000007 EDX[8]={}", u8::from(b)),
        None if cfg!(target_arch = "x86_64") => "cpuid 0x80000007 not available".to_string(),
        None => "not x86_64: no TSC".to_string(),
    };
    let listed: Vec<&str> = ["tsc", "constant_tsc", "nonstop_tsc"]
        .into_iter()
        .filter(|f| has(f))
        .collect();
    src.push_str("; /proc/cpuinfo: ");
    if flags.is_empty() {
        src.push_str("unreadable");
    } else if listed.is_empty() {
        src.push_str("no tsc flags");
    } else {
        src.push_str(&listed.join(" "));
    }
    TscInfo {
        present,
        invariant,
        constant,
        nonstop,
        source_of_truth: src,
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects; a TscClock exists only where the
    // TSC is present (checked in `calibrate`).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    // Never called: `TscClock::calibrate` refuses on non-x86_64.
    0
}

/// Fixed-point shift of [`TscClock`]'s ticks → ns multiplier.
const TSC_SHIFT: u32 = 32;

/// The invariant TSC, calibrated against CLOCK_MONOTONIC.
///
/// [`TscClock::now_ns`] is on the CLOCK_MONOTONIC time line at the moment
/// of calibration (same origin), then runs at the calibrated rate; it drifts
/// from CLOCK_MONOTONIC by the calibration error (and by NTP slew), so
/// recalibrate for long runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TscClock {
    base_ticks: u64,
    base_ns: u64,
    /// ns per tick << TSC_SHIFT.
    mult: u64,
    hz: f64,
}

impl TscClock {
    /// Calibrates the TSC against CLOCK_MONOTONIC over `duration` (at least
    /// 1 ms; 100 ms gives a frequency good to a few ppm on an idle machine).
    ///
    /// Each end point pairs one `rdtsc` with the mid-point of the tightest of
    /// several bracketing CLOCK_MONOTONIC reads, so a preemption in between
    /// does not skew the result.
    ///
    /// # Errors
    /// [`ErrorKind::NotPresent`] "TSC is not invariant on this CPU" (or not
    /// present at all) — its rate could change with frequency scaling or
    /// stop in deep C-states, so it is not offered as a clock.
    /// [`ErrorKind::InvalidInput`] if `duration` is below 1 ms.
    /// [`ErrorKind::Io`] if the measured frequency is implausible.
    pub fn calibrate(duration: Duration) -> Result<TscClock> {
        let info = tsc_info();
        if !info.present {
            return Err(Error::new(
                ErrorKind::NotPresent,
                format!(
                    "not present: this CPU has no TSC ({}); use another clock",
                    info.source_of_truth
                ),
            ));
        }
        if !info.invariant {
            return Err(Error::new(
                ErrorKind::NotPresent,
                format!(
                    "TSC is not invariant on this CPU ({}): its rate may change with \
                     frequency scaling or stop in idle states; use monotonic instead",
                    info.source_of_truth
                ),
            ));
        }
        if duration < Duration::from_millis(1) {
            return Err(Error::invalid(format!(
                "TSC calibration time {} is too short: use at least 1ms",
                crate::units::format_duration(duration)
            )));
        }
        let (t0, n0) = paired_read();
        std::thread::sleep(duration);
        let (t1, n1) = paired_read();
        let (dt, dn) = (t1.wrapping_sub(t0), n1.saturating_sub(n0));
        if dt == 0 || dn == 0 {
            return Err(Error::new(
                ErrorKind::Io,
                "TSC calibration failed: the TSC or CLOCK_MONOTONIC did not advance",
            ));
        }
        let hz = dt as f64 * 1e9 / dn as f64;
        // Plausible TSC rates: 1 MHz .. 100 GHz.
        if !(1e6..1e11).contains(&hz) {
            return Err(Error::new(
                ErrorKind::Io,
                format!("TSC calibration gave an implausible {hz:.0} Hz; use monotonic instead"),
            ));
        }
        let mult = ((dn as u128) << TSC_SHIFT) / dt as u128;
        Ok(TscClock {
            base_ticks: t1,
            base_ns: n1,
            mult: mult as u64,
            hz,
        })
    }

    /// Raw TSC ticks (`rdtsc`). **RT-safe.**
    #[inline]
    pub fn ticks(&self) -> u64 {
        rdtsc()
    }

    /// Converts a tick count read from this TSC to CLOCK_MONOTONIC-based
    /// nanoseconds. **RT-safe.**
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        let d = ticks.wrapping_sub(self.base_ticks) as i64;
        if d >= 0 {
            self.base_ns + ((d as u128 * self.mult as u128) >> TSC_SHIFT) as u64
        } else {
            self.base_ns.saturating_sub(
                ((d.unsigned_abs() as u128 * self.mult as u128) >> TSC_SHIFT) as u64,
            )
        }
    }

    /// The current time in nanoseconds on the CLOCK_MONOTONIC time line:
    /// one `rdtsc` and a fixed-point multiply-shift. **RT-safe.**
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.ticks_to_ns(rdtsc())
    }

    /// The calibrated TSC frequency in Hz.
    pub fn hz(&self) -> f64 {
        self.hz
    }

    /// One tick, rounded up to 1 ns (the unit of [`TscClock::now_ns`]).
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(((1e9 / self.hz).ceil() as u64).max(1))
    }
}

impl ClockRead for TscClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        TscClock::now_ns(self)
    }
    #[inline]
    fn kind(&self) -> ClockKind {
        ClockKind::Tsc
    }
}

/// One `rdtsc` paired with CLOCK_MONOTONIC: of several tries, the one whose
/// bracketing monotonic reads are closest, at their mid-point.
fn paired_read() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..16 {
        let a = monotonic_ns();
        let t = rdtsc();
        let b = monotonic_ns();
        let gap = b.saturating_sub(a);
        if gap < best.2 {
            best = (t, a + gap / 2, gap);
        }
    }
    (best.0, best.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for k in ClockKind::ALL {
            assert_eq!(k.name().parse::<ClockKind>().unwrap(), k);
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.name())
            );
            assert_eq!(k.to_string(), k.name());
        }
    }

    #[test]
    fn unknown_clock_lists_valid_names() {
        let e = "sundial".parse::<ClockKind>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        for k in ClockKind::ALL {
            assert!(e.message().contains(k.name()), "{e}");
        }
        assert!(e.message().contains("'sundial'"), "{e}");
    }

    #[test]
    fn clockids_only_for_libc_clocks() {
        assert_eq!(ClockKind::Monotonic.clockid(), Some(libc::CLOCK_MONOTONIC));
        assert_eq!(ClockKind::Tai.clockid(), Some(libc::CLOCK_TAI));
        assert_eq!(ClockKind::Gettimeofday.clockid(), None);
        assert_eq!(ClockKind::Tsc.clockid(), None);
    }

    #[test]
    fn ticks_to_ns_fixed_point_is_exact_for_a_synthetic_rate() {
        // 2 GHz: mult = 0.5 ns/tick << 32.
        let c = TscClock {
            base_ticks: 1_000,
            base_ns: 5_000_000,
            mult: 1 << 31,
            hz: 2e9,
        };
        assert_eq!(c.ticks_to_ns(1_000), 5_000_000);
        assert_eq!(c.ticks_to_ns(3_000), 5_001_000);
        assert_eq!(c.ticks_to_ns(0), 4_999_500);
        assert_eq!(c.resolution(), Duration::from_nanos(1));
    }
}
