//! Periodic loops on an absolute grid that count every missed deadline.
//!
//! Deadline k is always `start + k·period` (CLOCK_MONOTONIC ns): computed,
//! never accumulated, so the loop does not drift. When a wake-up comes so
//! late that later deadlines have already passed, those deadlines are
//! counted — in the [`Tick`] that saw them pass and in
//! [`Periodic::missed_total`] — and the loop resumes on the same grid at the
//! first deadline not yet passed. It neither skips them silently (as
//! cyclictest does) nor fires a burst of catch-up wake-ups (as
//! jitterdebugger does).
//!
//! Every deadline of the grid is accounted for exactly once: either it is
//! a tick (with its latency, however large) or it is counted as missed, so
//! after any number of ticks `next_index() == ticks() + missed_total()`.
//!
//! The arithmetic is in [`Periodic::on_wake`], which takes a wake time and
//! does no I/O, so it is tested with synthetic wake times.
//!
//! # RT contract
//! [`Periodic::wait`] and [`Periodic::on_wake`] are **RT-safe**: integer
//! arithmetic plus the sleeper's own RT-safe wait.
//!
//! ```
//! use firmtime_rt::{clock, periodic::Periodic, sleep};
//! let mut sleeper = sleep::open(sleep::Mechanism::ClockNanosleep).unwrap();
//! let period = 1_000_000; // 1 ms
//! let mut p = Periodic::new(clock::monotonic_ns() + period, period);
//! for _ in 0..3 {
//!     let tick = p.wait(&mut *sleeper).unwrap();
//!     assert!(tick.latency_ns >= 0);
//! }
//! assert_eq!(p.next_index(), p.ticks() + p.missed_total());
//! ```

use crate::error::{Errno, Error, Result};
use crate::sleep::Sleeper;
use serde::Serialize;

/// One wake-up of a periodic loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tick {
    /// Grid index k of this deadline (`deadline_ns == start + k·period`).
    /// Indices of missed deadlines are skipped.
    pub index: u64,
    /// The deadline slept to, CLOCK_MONOTONIC ns.
    pub deadline_ns: u64,
    /// When the sleeper woke, CLOCK_MONOTONIC ns.
    pub wake_ns: u64,
    /// `wake_ns − deadline_ns` (negative only if a sleeper woke early, which
    /// firmtime's sleepers never do).
    pub latency_ns: i64,
    /// Deadlines after this one that had already passed at `wake_ns`; the
    /// next tick is at index `index + 1 + missed`.
    pub missed: u64,
}

/// A periodic schedule with absolute deadlines `start + k·period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Periodic {
    start_ns: u64,
    period_ns: u64,
    next: u64,
    ticks: u64,
    missed_total: u64,
}

impl Periodic {
    /// A schedule whose first deadline (index 0) is `start_ns` and whose
    /// deadlines follow every `period_ns`.
    ///
    /// # Panics
    /// If `period_ns` is 0 (use [`Periodic::try_new`] for user input).
    pub fn new(start_ns: u64, period_ns: u64) -> Self {
        match Self::try_new(start_ns, period_ns) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`Periodic::new`], for periods that come from users.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidInput`] if `period_ns` is 0.
    pub fn try_new(start_ns: u64, period_ns: u64) -> Result<Self> {
        if period_ns == 0 {
            return Err(Error::invalid(
                "the period of a periodic loop must be greater than 0",
            ));
        }
        Ok(Self {
            start_ns,
            period_ns,
            next: 0,
            ticks: 0,
            missed_total: 0,
        })
    }

    /// The deadline of grid index `index`: `start + index·period`
    /// (saturating at `u64::MAX`). **RT-safe.**
    #[inline]
    pub fn deadline(&self, index: u64) -> u64 {
        let d = self.start_ns as u128 + index as u128 * self.period_ns as u128;
        d.min(u64::MAX as u128) as u64
    }

    /// Index of the next deadline [`Periodic::wait`] will sleep to.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// The next deadline [`Periodic::wait`] will sleep to.
    pub fn next_deadline_ns(&self) -> u64 {
        self.deadline(self.next)
    }

    /// The first deadline, CLOCK_MONOTONIC ns.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// The period in ns.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Ticks delivered so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Deadlines missed so far (passed before the loop could wait for them).
    pub fn missed_total(&self) -> u64 {
        self.missed_total
    }

    /// Sleeps until the next deadline with `sleeper` and accounts the
    /// wake-up as [`Periodic::on_wake`] does. **RT-safe.**
    ///
    /// # Errors
    /// The sleeper's [`Errno`]; the schedule is then unchanged.
    ///
    /// Generic so that a concrete sleeper is called statically; a
    /// `&mut dyn Sleeper` or a `Box<dyn Sleeper>` works as well.
    #[inline]
    pub fn wait<S: Sleeper + ?Sized>(&mut self, sleeper: &mut S) -> Result<Tick, Errno> {
        let wake = sleeper.sleep_until(self.next_deadline_ns())?;
        Ok(self.on_wake(wake))
    }

    /// Accounts a wake-up at `wake_ns` for the current deadline: returns its
    /// [`Tick`], counts the later deadlines that `wake_ns` has already
    /// passed (a deadline equal to `wake_ns` has not passed), and moves to
    /// the first one that has not. Pure arithmetic. **RT-safe.**
    pub fn on_wake(&mut self, wake_ns: u64) -> Tick {
        let index = self.next;
        let deadline_ns = self.deadline(index);
        // Smallest j > index with deadline(j) >= wake.
        let next = if wake_ns <= self.deadline(index + 1) {
            index + 1
        } else {
            let since = (wake_ns - self.start_ns) as u128;
            let j = since.div_ceil(self.period_ns as u128);
            (j.min(u64::MAX as u128) as u64).max(index + 1)
        };
        let missed = next - index - 1;
        self.next = next;
        self.ticks += 1;
        self.missed_total += missed;
        Tick {
            index,
            deadline_ns,
            wake_ns,
            latency_ns: (wake_ns as i128 - deadline_ns as i128)
                .clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            missed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_time_wakes_miss_nothing_and_stay_on_the_grid() {
        let mut p = Periodic::new(1_000, 100);
        for k in 0..10 {
            let t = p.on_wake(1_000 + k * 100 + 7);
            assert_eq!(
                t,
                Tick {
                    index: k,
                    deadline_ns: 1_000 + k * 100,
                    wake_ns: 1_000 + k * 100 + 7,
                    latency_ns: 7,
                    missed: 0,
                }
            );
        }
        assert_eq!(p.next_deadline_ns(), 2_000);
        assert_eq!(p.missed_total(), 0);
    }

    #[test]
    fn late_wake_counts_each_passed_deadline_and_resumes_on_the_grid() {
        let mut p = Periodic::new(1_000, 100);
        // Deadline 0 at 1000; woke at 1350: deadlines 1100, 1200, 1300 passed.
        let t = p.on_wake(1_350);
        assert_eq!((t.index, t.latency_ns, t.missed), (0, 350, 3));
        assert_eq!(p.next_index(), 4);
        assert_eq!(p.next_deadline_ns(), 1_400);
        // Next wake on time: nothing more missed.
        let t = p.on_wake(1_401);
        assert_eq!((t.index, t.deadline_ns, t.missed), (4, 1_400, 0));
        assert_eq!(p.missed_total(), 3);
        assert_eq!(p.next_index(), p.ticks() + p.missed_total());
    }

    #[test]
    fn a_deadline_equal_to_the_wake_time_is_not_missed() {
        let mut p = Periodic::new(0, 100);
        let t = p.on_wake(200);
        assert_eq!(t.missed, 1, "deadline 100 passed, 200 is now");
        assert_eq!(p.next_deadline_ns(), 200);
        let mut p = Periodic::new(0, 100);
        assert_eq!(p.on_wake(100).missed, 0);
        assert_eq!(p.next_index(), 1);
        assert_eq!(p.on_wake(201).missed, 1);
        assert_eq!(p.next_index(), 3);
    }

    #[test]
    fn a_tick_late_by_less_than_a_period_misses_nothing() {
        let mut p = Periodic::new(0, 100);
        assert_eq!(p.on_wake(99).missed, 0);
        assert_eq!(p.on_wake(199).missed, 0);
        assert_eq!(p.next_index(), 2);
    }

    #[test]
    fn early_wake_gives_negative_latency_and_no_skip() {
        let mut p = Periodic::new(1_000, 100);
        let t = p.on_wake(990);
        assert_eq!((t.latency_ns, t.missed), (-10, 0));
        assert_eq!(p.next_index(), 1);
    }

    #[test]
    fn accounting_invariant_holds_over_a_random_walk() {
        // Deterministic pseudo-random lateness, some of it several periods.
        let mut p = Periodic::new(5_000, 250);
        let mut rng = crate::rng::Rng::new(1);
        let mut last_index = None;
        for _ in 0..10_000 {
            let x = rng.next_u64();
            let late = if x % 10 == 0 { x % 2_000 } else { x % 200 };
            let d = p.next_deadline_ns();
            let t = p.on_wake(d + late);
            assert_eq!(t.deadline_ns, 5_000 + t.index * 250, "on the grid");
            // Exactly the deadlines strictly before the wake, after this one.
            let passed = (t.index + 1..)
                .take_while(|&j| p.deadline(j) < t.wake_ns)
                .count();
            assert_eq!(t.missed, passed as u64);
            if let Some(prev) = last_index {
                assert!(t.index > prev);
            }
            last_index = Some(t.index);
            assert_eq!(p.next_index(), t.index + 1 + t.missed);
        }
        assert_eq!(p.ticks(), 10_000);
        assert_eq!(p.next_index(), p.ticks() + p.missed_total());
        assert!(p.missed_total() > 0);
    }

    #[test]
    fn arithmetic_does_not_allocate() {
        let mut p = Periodic::new(0, 1_000);
        assert_no_alloc::assert_no_alloc(|| {
            for k in 0..1_000 {
                p.on_wake(k * 1_500);
            }
        });
        assert_eq!(p.ticks(), 1_000);
    }

    #[test]
    fn zero_period_is_refused() {
        let e = Periodic::try_new(0, 0).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(e.message().contains("greater than 0"));
    }

    #[test]
    fn huge_values_saturate_instead_of_wrapping() {
        let mut p = Periodic::new(u64::MAX - 10, 100);
        assert_eq!(p.deadline(5), u64::MAX);
        let t = p.on_wake(u64::MAX);
        assert_eq!(t.latency_ns, 10);
        assert_eq!(t.missed, 0);
    }
}
