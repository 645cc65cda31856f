//! The cycle-time clock: JACK frames and microseconds as absolute frames
//! and CLOCK_MONOTONIC nanoseconds.
//!
//! JACK's cycle times are in microseconds of `jack_get_time()`. Which clock
//! that is depends on the JACK build: jackd2 1.9.x on Linux uses
//! CLOCK_MONOTONIC_RAW, PipeWire's JACK uses CLOCK_MONOTONIC. So
//! [`jack_clock_offset`] does not assume: it reads `jack_get_time()` between
//! two readings of each clock and picks the one that agrees within 1 ms
//! ([`JackClock`]). For CLOCK_MONOTONIC the offset is 0; for
//! CLOCK_MONOTONIC_RAW it is CLOCK_MONOTONIC − CLOCK_MONOTONIC_RAW, measured
//! to tens of ns; otherwise the offset measured against JACK's clock itself.
//! The offset is shared by every client of the process (and re-measured at
//! an open more than a minute after the last measurement), so two clients of
//! one server give one frame the same nanoseconds.
//!
//! Times within a cycle ([`CycleTimes`]) are interpolated linearly between
//! the cycle's start and the next cycle's start, as `jack_frames_to_time`
//! does, but in integer nanoseconds so that frame → ns → frame round-trips
//! exactly. JACK's 32-bit frame counter is extended to 64 bits
//! ([`FrameExtender`]).

use std::sync::Mutex;

use jack::{Client, ProcessScope};

/// The times of one JACK process cycle, in absolute frames and
/// CLOCK_MONOTONIC nanoseconds.
///
/// `frame` is JACK's 32-bit frame counter extended to 64 bits (it wraps
/// after about a day at 48 kHz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleTimes {
    /// Absolute frame of the cycle's first frame.
    pub frame: u64,
    /// Frames in this cycle.
    pub n_frames: u32,
    /// Time of the cycle's first frame, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Time of the next cycle's first frame, CLOCK_MONOTONIC ns (> `start_ns`).
    pub next_ns: u64,
}

impl CycleTimes {
    fn span(&self) -> (i128, i128) {
        let d = (self.next_ns as i128 - self.start_ns as i128).max(1);
        (d, i128::from(self.n_frames.max(1)))
    }

    /// The time of absolute frame `frame` (it may lie outside the cycle:
    /// extrapolated at this cycle's rate), rounded down to a nanosecond.
    ///
    /// **RT-safe.**
    pub fn frame_to_ns(&self, frame: u64) -> u64 {
        let (d, n) = self.span();
        let k = frame as i128 - self.frame as i128;
        let t = self.start_ns as i128 + (k * d).div_euclid(n);
        t.clamp(0, u64::MAX as i128) as u64
    }

    /// The first absolute frame whose time ([`CycleTimes::frame_to_ns`]) is
    /// not before `ns`, so output is never early and
    /// `ns_to_frame(frame_to_ns(f)) == f`.
    ///
    /// **RT-safe.**
    pub fn ns_to_frame(&self, ns: u64) -> u64 {
        let (d, n) = self.span();
        let dt = ns as i128 - self.start_ns as i128;
        // ceil(dt * n / d), for either sign.
        let k = -((-dt * n).div_euclid(d));
        (self.frame as i128 + k).clamp(0, u64::MAX as i128) as u64
    }

    /// One past the last frame of the cycle.
    ///
    /// **RT-safe.**
    pub fn end_frame(&self) -> u64 {
        self.frame + u64::from(self.n_frames)
    }
}

/// Extends JACK's wrapping 32-bit frame counter to 64 bits.
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameExtender {
    last: Option<u32>,
    high: u64,
}

impl FrameExtender {
    /// The 64-bit frame of the 32-bit `frame`. `frame` must be the next
    /// cycle's start (frames only go forward). **RT-safe.**
    pub fn extend(&mut self, frame: u32) -> u64 {
        if let Some(last) = self.last {
            if frame < last {
                self.high += 1 << 32;
            }
        }
        self.last = Some(frame);
        self.high | u64::from(frame)
    }
}

/// Detects dropped cycles from the frame counter: a cycle that does not
/// start where the previous one ended (jackd after an xrun; PipeWire, which
/// skips cycles without ever calling the xrun callback). Feed it every
/// cycle's first frame and length, e.g. from [`CycleTimes`] or
/// `ProcessScope::last_frame_time`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameGaps {
    expected: Option<u32>,
}

impl FrameGaps {
    /// True when the cycle starting at `frame` (JACK's 32-bit counter, so it
    /// wraps) does not follow the previous cycle seen. **RT-safe.**
    pub fn observe(&mut self, frame: u32, n_frames: u32) -> bool {
        let gap = self.expected.is_some_and(|e| e != frame);
        self.expected = Some(frame.wrapping_add(n_frames));
        gap
    }

    /// [`FrameGaps::observe`] for a cycle's [`CycleTimes`]. **RT-safe.**
    pub fn observe_cycle(&mut self, cycle: &CycleTimes) -> bool {
        // The low 32 bits are JACK's own counter.
        self.observe(cycle.frame as u32, cycle.n_frames)
    }
}

/// Reads this cycle's times from JACK and converts them to absolute frames
/// (through `ext`, one per client) and CLOCK_MONOTONIC ns (adding
/// `clock_offset_ns`, from [`jack_clock_offset`]). Call it once at the start
/// of each process callback. **RT-safe.**
pub fn read_cycle_times(
    ps: &ProcessScope,
    ext: &mut FrameExtender,
    clock_offset_ns: i64,
) -> CycleTimes {
    let n_frames = ps.n_frames();
    let to_ns = |us: u64| (i128::from(us) * 1000 + i128::from(clock_offset_ns)).max(0) as u64;
    match ps.cycle_times() {
        Ok(ct) => {
            let start_ns = to_ns(ct.current_usecs);
            let next_ns = to_ns(ct.next_usecs).max(start_ns + 1);
            CycleTimes {
                frame: ext.extend(ct.current_frames),
                n_frames,
                start_ns,
                next_ns,
            }
        }
        Err(_) => {
            // Old libjack without jack_get_cycle_times: fall back to the frame
            // clock and the current time (less exact, never seen with jackd2).
            let frame = ext.extend(ps.last_frame_time());
            // SAFETY: jack_get_time takes no arguments and only reads the clock.
            let now_us = unsafe { jack_sys::jack_get_time() };
            let start_ns = to_ns(now_us);
            CycleTimes {
                frame,
                n_frames,
                start_ns,
                next_ns: start_ns + u64::from(n_frames.max(1)) * 20_833,
            }
        }
    }
}

/// The clock behind `jack_get_time()`, as [`jack_clock_offset`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JackClock {
    /// CLOCK_MONOTONIC itself: no conversion (PipeWire's JACK, older jackd2).
    Monotonic,
    /// CLOCK_MONOTONIC_RAW (jackd2 1.9.x on Linux): converted
    /// with the measured CLOCK_MONOTONIC − CLOCK_MONOTONIC_RAW offset.
    MonotonicRaw,
    /// Neither: converted with an offset measured against `jack_get_time()`
    /// itself (µs resolution).
    Other,
}

/// Best (narrowest-window) measurement of `a() − b()` in ns over a few tries,
/// reading `b` between two readings of `a`.
fn sandwich(a: impl Fn() -> i128, b: impl Fn() -> i128) -> i128 {
    let mut best: Option<(i128, i128)> = None;
    for _ in 0..7 {
        let t0 = a();
        let x = b();
        let t1 = a();
        let width = t1 - t0;
        let off = t0 + width / 2 - x;
        match best {
            Some((w, _)) if w <= width => {}
            _ => best = Some((width, off)),
        }
    }
    best.map_or(0, |(_, o)| o)
}

/// The process-wide JACK → CLOCK_MONOTONIC offset, shared by every client of
/// this process so that clients in one server convert a frame to the very
/// same nanosecond: (offset ns, measured at CLOCK_MONOTONIC ns, clock).
static CLOCK_MAP: Mutex<Option<(i64, u64, JackClock)>> = Mutex::new(None);

/// How long a measured offset is reused before [`jack_clock_offset`] measures
/// again. CLOCK_MONOTONIC is slewed by NTP against CLOCK_MONOTONIC_RAW by at
/// most 500 ppm (typically a few ppm), so within this time the offset moves
/// by far less than a frame.
const CLOCK_MAP_REUSE_NS: u64 = 60_000_000_000;

/// The offset to add to `jack_get_time()` × 1000 to get CLOCK_MONOTONIC ns,
/// and which clock JACK uses. Called when a client opens (never from the
/// callback); within a minute of the last measurement every
/// client of the process gets the same value.
pub fn jack_clock_offset(client: &Client) -> (i64, JackClock) {
    let now = firmtime_rt::clock::monotonic_ns();
    let mut map = CLOCK_MAP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((off, at, clock)) = *map {
        if now.saturating_sub(at) < CLOCK_MAP_REUSE_NS {
            return (off, clock);
        }
    }
    let mono = || i128::from(firmtime_rt::clock::monotonic_ns());
    let raw = || i128::from(firmtime_rt::clock::read_ns(libc::CLOCK_MONOTONIC_RAW));
    let jack = || i128::from(client.time()) * 1000;
    let vs_mono = sandwich(mono, jack);
    let vs_raw = sandwich(raw, jack);
    // jack_get_time() truncates to µs: within 1 ms means "this clock".
    let (off, clock) = if vs_mono.abs() < 1_000_000 {
        (0, JackClock::Monotonic)
    } else if vs_raw.abs() < 1_000_000 {
        // Both are vDSO reads in ns: this offset is exact to tens of ns.
        (sandwich(mono, raw) as i64, JackClock::MonotonicRaw)
    } else {
        (vs_mono as i64, JackClock::Other)
    };
    *map = Some((off, now, clock));
    (off, clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_ns_round_trip_is_exact() {
        // 48 kHz, 256 frames: 5_333_333 ns per cycle; the fourth cycle of a run.
        let c = CycleTimes {
            frame: 10_768,
            n_frames: 256,
            start_ns: 1_015_999_999,
            next_ns: 1_021_333_332,
        };
        for f in (c.frame - 1000)..(c.frame + 2000) {
            assert_eq!(c.ns_to_frame(c.frame_to_ns(f)), f, "frame {f}");
        }
        assert_eq!(c.frame_to_ns(c.frame), c.start_ns);
        assert_eq!(c.frame_to_ns(c.end_frame()), c.next_ns);
        // One ns after a frame's time belongs to the next frame: never early.
        assert_eq!(c.ns_to_frame(c.start_ns + 1), c.frame + 1);
        assert_eq!(c.ns_to_frame(0), 0);
    }

    #[test]
    fn a_cycle_that_does_not_follow_the_last_is_a_gap() {
        let mut g = FrameGaps::default();
        assert!(
            !g.observe(1000, 256),
            "the first cycle has nothing before it"
        );
        assert!(!g.observe(1256, 256));
        assert!(g.observe(2024, 256), "three periods skipped");
        assert!(!g.observe(2280, 128), "a new period size is fine");
        assert!(!g.observe(2408, 256));
        let mut w = FrameGaps::default();
        assert!(!w.observe(u32::MAX - 127, 256));
        assert!(!w.observe(128, 256), "the counter wraps");
    }

    #[test]
    fn frame_counter_wrap_extends_to_64_bits() {
        let mut e = FrameExtender::default();
        assert_eq!(e.extend(u32::MAX - 255), u64::from(u32::MAX - 255));
        assert_eq!(e.extend(0), 1 << 32);
        assert_eq!(e.extend(256), (1 << 32) + 256);
    }
}
