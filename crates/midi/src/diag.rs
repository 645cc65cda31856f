//! FTAP's scheduling diagnostic: the time between successive calls of the
//! output routine.
//!
//! FTAP needs its input and output routines to run at least once a
//! millisecond; as they run in one loop it times the output routine. Call
//! [`SchedDiag::tick`] each time the output routine runs; at the end of a run
//! [`SchedDiag::report`] gives the mean and maximum interval, how many
//! intervals exceeded 1 ms, and a verdict (Finney 2001: mean 0.49 ms, maximum
//! 1 ms on 1270 of 1320 trials, occasional single 2–3 ms gaps).
//!
//! # RT contract
//!
//! [`SchedDiag::new`] allocates the optional sample buffer. [`SchedDiag::tick`]
//! and [`SchedDiag::reset`] are **RT-safe.**: a few arithmetic operations and
//! at most one store into the preallocated buffer (samples beyond its
//! capacity are counted in the summary but not kept).

use serde::Serialize;

/// FTAP's criterion: the output routine runs at least once a millisecond.
pub const DEFAULT_LIMIT_NS: u64 = 1_000_000;

/// The diagnostic's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every interval was within the limit.
    Pass,
    /// The mean was within the limit but some intervals were not.
    Warn,
    /// The mean interval exceeded the limit (or nothing was measured).
    Fail,
}

/// What [`SchedDiag::report`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DiagReport {
    /// Calls of [`SchedDiag::tick`].
    pub calls: u64,
    /// Intervals measured (calls − 1).
    pub intervals: u64,
    /// Mean interval, ns.
    pub mean_ns: f64,
    /// Longest interval, ns.
    pub max_ns: u64,
    /// Intervals longer than the limit.
    pub over_limit: u64,
    /// The limit, ns (1 ms by default).
    pub limit_ns: u64,
    /// Pass, warn or fail against the limit.
    pub verdict: Verdict,
}

/// Interval statistics between successive calls of an output routine.
#[derive(Debug, Clone)]
pub struct SchedDiag {
    limit_ns: u64,
    last_ns: Option<u64>,
    calls: u64,
    sum_ns: u128,
    max_ns: u64,
    over: u64,
    samples: Vec<u64>,
}

impl SchedDiag {
    /// A diagnostic against `limit_ns` (use [`DEFAULT_LIMIT_NS`]) keeping up
    /// to `sample_capacity` intervals for a histogram (0 keeps none).
    pub fn new(limit_ns: u64, sample_capacity: usize) -> Self {
        Self {
            limit_ns,
            last_ns: None,
            calls: 0,
            sum_ns: 0,
            max_ns: 0,
            over: 0,
            samples: Vec::with_capacity(sample_capacity),
        }
    }

    /// Records a call of the output routine at `now_ns` (CLOCK_MONOTONIC).
    /// A time earlier than the previous one counts as a 0 interval.
    ///
    /// **RT-safe.**
    #[inline]
    pub fn tick(&mut self, now_ns: u64) {
        self.calls += 1;
        if let Some(last) = self.last_ns {
            let d = now_ns.saturating_sub(last);
            self.sum_ns += u128::from(d);
            self.max_ns = self.max_ns.max(d);
            if d > self.limit_ns {
                self.over += 1;
            }
            if self.samples.len() < self.samples.capacity() {
                self.samples.push(d);
            }
        }
        self.last_ns = Some(now_ns);
    }

    /// Starts a new run; keeps the sample buffer's memory.
    ///
    /// **RT-safe.**
    pub fn reset(&mut self) {
        self.last_ns = None;
        self.calls = 0;
        self.sum_ns = 0;
        self.max_ns = 0;
        self.over = 0;
        self.samples.clear();
    }

    /// The intervals kept (the first `sample_capacity` of the run), ns.
    pub fn samples(&self) -> &[u64] {
        &self.samples
    }

    /// The summary of the run so far.
    ///
    /// **RT-safe.**
    pub fn report(&self) -> DiagReport {
        let intervals = self.calls.saturating_sub(1);
        let mean_ns = if intervals == 0 {
            0.0
        } else {
            self.sum_ns as f64 / intervals as f64
        };
        let verdict = if intervals == 0 || mean_ns > self.limit_ns as f64 {
            Verdict::Fail
        } else if self.max_ns > self.limit_ns {
            Verdict::Warn
        } else {
            Verdict::Pass
        };
        DiagReport {
            calls: self.calls,
            intervals,
            mean_ns,
            max_ns: self.max_ns,
            over_limit: self.over,
            limit_ns: self.limit_ns,
            verdict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_max_and_verdict_from_known_ticks() {
        let mut d = SchedDiag::new(DEFAULT_LIMIT_NS, 8);
        assert_no_alloc::assert_no_alloc(|| {
            for t in [0, 500_000, 1_000_000, 1_490_000] {
                d.tick(t);
            }
        });
        let r = d.report();
        assert_eq!(r.calls, 4);
        assert_eq!(r.intervals, 3);
        assert_eq!(r.max_ns, 500_000);
        assert!((r.mean_ns - 496_666.666).abs() < 1.0);
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(d.samples(), [500_000, 500_000, 490_000]);

        d.tick(3_490_000); // one 2 ms gap, as FTAP saw on 35 trials
        let r = d.report();
        assert_eq!(r.over_limit, 1);
        assert_eq!(r.verdict, Verdict::Warn);
    }

    #[test]
    fn slow_loop_fails_and_reset_starts_over() {
        let mut d = SchedDiag::new(DEFAULT_LIMIT_NS, 2);
        for i in 0..5 {
            d.tick(i * 2_000_000);
        }
        assert_eq!(d.report().verdict, Verdict::Fail);
        assert_eq!(d.samples().len(), 2, "samples beyond capacity are not kept");
        assert_eq!(d.report().intervals, 4);
        d.reset();
        assert_eq!(d.report().calls, 0);
        assert_eq!(d.report().verdict, Verdict::Fail, "nothing measured");
    }
}
