//! Statistics of latency samples: an RT-safe histogram and the summary every
//! measurement reports.
//!
//! All values are integer nanoseconds and may be negative (a clock stepping
//! back, a relative sleep waking before its nominal deadline), hence `i64`.
//!
//! # RT contract
//!
//! [`LatencyHistogram::new`] allocates everything up front (two
//! [`hdrhistogram`] count arrays with fixed bounds, auto-resize off). After
//! that, [`LatencyHistogram::record`] and [`LatencyHistogram::reset`] never
//! allocate, lock, print or block. Everything else here (summaries,
//! quantiles, merging, [`summarize`]) runs after the measured loop.
//!
//! # Definitions
//!
//! - Percentiles use the *nearest rank*: `pX` is the sample at 1-based rank
//!   `max(1, ceil(X/100 · n))` of the sorted samples. For samples `1..=100`,
//!   p50 is 50, p99 is 99, p99.9 is 100.
//! - `mean_ns` is the exact mean rounded to the nearest nanosecond
//!   (ties away from zero); `sd_ns` is the sample standard deviation (n − 1
//!   denominator, 0 for one sample), rounded to the nearest nanosecond.
//! - Min, max, mean and sd are exact, never taken from histogram buckets.
//!   Histogram percentiles are within the histogram's precision (3
//!   significant decimal digits: relative error below 0.1 %) and are
//!   clamped to the exact min and max.
//!
//! # Example
//!
//! ```
//! use firmtime_lab::stats::LatencyHistogram;
//!
//! let mut h = LatencyHistogram::new();
//! for ns in [12_000, 15_000, -3_000, 40_000] {
//!     h.record(ns); // RT-safe: no allocation
//! }
//! let s = h.summary(1);
//! assert_eq!(s.samples, 4);
//! assert_eq!(s.min_ns, Some(-3_000));
//! assert_eq!(s.max_ns, Some(40_000));
//! assert_eq!(s.missed, 1);
//! ```

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// Largest magnitude the default [`LatencyHistogram`] tracks in its buckets:
/// 100 s. Larger samples are counted in their extreme bucket (and in
/// [`LatencyHistogram::clamped`]); min, max, mean and sd stay exact.
pub const DEFAULT_MAX_NS: u64 = 100_000_000_000;

/// Significant decimal digits kept by the histogram buckets.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The summary every measurement reports, in integer nanoseconds.
///
/// Serialized as a flat object with the field names below (`p99_9_ns` is
/// the 99.9th percentile). When there are no samples (`samples == 0`) every
/// statistic is `None` (JSON `null`), so an empty run can never be mistaken
/// for data; `missed` is still meaningful then (every period may have been
/// missed). When `samples > 0` every statistic is `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest sample.
    pub min_ns: Option<i64>,
    /// Exact mean, rounded to the nearest nanosecond.
    pub mean_ns: Option<i64>,
    /// Sample standard deviation (n − 1), rounded to the nearest nanosecond.
    pub sd_ns: Option<i64>,
    /// Median (nearest rank).
    pub p50_ns: Option<i64>,
    /// 90th percentile (nearest rank).
    pub p90_ns: Option<i64>,
    /// 95th percentile (nearest rank).
    pub p95_ns: Option<i64>,
    /// 99th percentile (nearest rank).
    pub p99_ns: Option<i64>,
    /// 99.9th percentile (nearest rank).
    pub p99_9_ns: Option<i64>,
    /// Largest sample.
    pub max_ns: Option<i64>,
    /// Missed deadlines (periods), counted by the caller.
    pub missed: u64,
}

impl Summary {
    /// The summary of no samples: `samples == 0`, every statistic `None`.
    pub fn empty(missed: u64) -> Self {
        Self {
            samples: 0,
            min_ns: None,
            mean_ns: None,
            sd_ns: None,
            p50_ns: None,
            p90_ns: None,
            p95_ns: None,
            p99_ns: None,
            p99_9_ns: None,
            max_ns: None,
            missed,
        }
    }

    /// True when there were no samples (all statistics are `None`).
    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }
}

/// Quantiles reported in a [`Summary`], in field order.
const SUMMARY_QUANTILES: [f64; 5] = [0.50, 0.90, 0.95, 0.99, 0.999];

/// Every quantile here is the nearest rank ([`firmtime_rt::quantile`]).
use firmtime_rt::quantile::nearest_rank;

/// Exact moments kept beside the buckets: count, sum, sum of squares, min
/// and max. Integer accumulators make them exact and merge-associative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Moments {
    count: u64,
    sum: i128,
    /// Saturates only for absurd inputs (more than 2^126 ns² in total).
    sumsq: u128,
    min: i64,
    max: i64,
}

impl Moments {
    const fn new() -> Self {
        Self {
            count: 0,
            sum: 0,
            sumsq: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    #[inline]
    fn record(&mut self, ns: i64) {
        self.count += 1;
        self.sum += i128::from(ns);
        let m = u128::from(ns.unsigned_abs());
        self.sumsq = self.sumsq.saturating_add(m * m);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    fn merge(&mut self, o: &Self) {
        self.count += o.count;
        self.sum += o.sum;
        self.sumsq = self.sumsq.saturating_add(o.sumsq);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// Mean rounded to nearest, ties away from zero.
    fn mean(&self) -> i64 {
        let n = i128::from(self.count);
        let half = n / 2;
        let r = if self.sum >= 0 {
            (self.sum + half) / n
        } else {
            (self.sum - half) / n
        };
        r as i64
    }

    /// Sample standard deviation, rounded to nearest.
    fn sd(&self) -> i64 {
        if self.count < 2 {
            return 0;
        }
        let n = self.count;
        // Exact: var = (n·Σx² − (Σx)²) / (n(n−1)), in integers when it fits.
        let exact = (|| {
            let a = self.sumsq.checked_mul(u128::from(n))?;
            let s = self.sum.unsigned_abs();
            let b = s.checked_mul(s)?;
            let num = a.checked_sub(b)?;
            let den = u128::from(n).checked_mul(u128::from(n - 1))?;
            Some(num as f64 / den as f64)
        })();
        let var = match exact {
            Some(v) if self.sumsq != u128::MAX => v,
            _ => {
                let nf = n as f64;
                let mean = self.sum as f64 / nf;
                ((self.sumsq as f64 - mean * mean * nf) / (nf - 1.0)).max(0.0)
            }
        };
        var.sqrt().round() as i64
    }
}

/// A latency histogram: counts in buckets with 3 significant digits, plus
/// exact min, max, mean and sd kept on the side.
///
/// Negative samples go to a second histogram of magnitudes, so values on
/// both sides of zero keep the same relative precision.
///
/// Allocates once, in [`new`](Self::new) (about 0.5 MB for the default
/// 100 s range); [`record`](Self::record) is **RT-safe**.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    pos: Histogram<u64>,
    neg: Histogram<u64>,
    moments: Moments,
    clamped: u64,
    max_ns: u64,
}

/// One non-empty bucket of a [`LatencyHistogram`], from
/// [`LatencyHistogram::buckets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Smallest value the bucket holds, in ns.
    pub low_ns: i64,
    /// Largest value the bucket holds, in ns (equal to `low_ns` below 2048 ns).
    pub high_ns: i64,
    /// Samples in the bucket.
    pub count: u64,
}

impl Bucket {
    /// Midpoint of the bucket, in ns: the value used to rebin and plot it.
    pub fn mid_ns(&self) -> i64 {
        self.low_ns + (self.high_ns - self.low_ns) / 2
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// A histogram tracking magnitudes up to [`DEFAULT_MAX_NS`] (100 s) with
    /// [`SIGNIFICANT_DIGITS`] significant digits. Allocates all its memory.
    /// Never panics: the default bounds are valid.
    pub fn new() -> Self {
        Self::with_max_ns(DEFAULT_MAX_NS).expect("default bounds are valid")
    }

    /// A histogram tracking magnitudes up to `max_ns`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if `max_ns` is below 2 ns or above
    /// 2^62 ns.
    pub fn with_max_ns(max_ns: u64) -> Result<Self> {
        let mk = || {
            Histogram::<u64>::new_with_bounds(1, max_ns, SIGNIFICANT_DIGITS).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "histogram range of {max_ns} ns is not usable ({e}); \
                         choose a maximum between 2 ns and 2^62 ns"
                    ),
                )
            })
        };
        if max_ns > 1 << 62 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("histogram range of {max_ns} ns is too large; choose at most 2^62 ns"),
            ));
        }
        Ok(Self {
            pos: mk()?,
            neg: mk()?,
            moments: Moments::new(),
            clamped: 0,
            max_ns,
        })
    }

    /// Largest magnitude the buckets track, in ns.
    pub fn max_trackable_ns(&self) -> u64 {
        self.max_ns
    }

    /// Records one sample, in ns.
    ///
    /// Samples beyond ± [`max_trackable_ns`](Self::max_trackable_ns) are
    /// counted in the extreme bucket and in [`clamped`](Self::clamped);
    /// min, max, mean and sd still use the exact value.
    ///
    /// **RT-safe.** Never allocates, locks or blocks.
    #[inline]
    pub fn record(&mut self, ns: i64) {
        self.moments.record(ns);
        let m = ns.unsigned_abs();
        if m > self.max_ns {
            self.clamped += 1;
        }
        let h = if ns < 0 { &mut self.neg } else { &mut self.pos };
        h.saturating_record(m.min(self.max_ns));
    }

    /// Forgets all samples, keeping the memory.
    ///
    /// **RT-safe.** Never allocates, locks or blocks.
    pub fn reset(&mut self) {
        self.pos.reset();
        self.neg.reset();
        self.moments = Moments::new();
        self.clamped = 0;
    }

    /// Number of samples recorded.
    pub fn len(&self) -> u64 {
        self.moments.count
    }

    /// True when no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.moments.count == 0
    }

    /// Samples whose magnitude exceeded the tracked range.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Exact smallest sample, `None` when empty.
    pub fn min(&self) -> Option<i64> {
        (!self.is_empty()).then_some(self.moments.min)
    }

    /// Exact largest sample, `None` when empty.
    pub fn max(&self) -> Option<i64> {
        (!self.is_empty()).then_some(self.moments.max)
    }

    /// Exact mean rounded to the nearest ns, `None` when empty.
    pub fn mean(&self) -> Option<i64> {
        (!self.is_empty()).then(|| self.moments.mean())
    }

    /// Sample standard deviation rounded to the nearest ns, `None` when empty.
    pub fn sd(&self) -> Option<i64> {
        (!self.is_empty()).then(|| self.moments.sd())
    }

    /// The value at quantile `q` (0.0..=1.0, clamped), nearest rank, within
    /// the bucket precision and clamped to the exact min and max; `None`
    /// when empty. A value is reported as the top of its bucket, except the
    /// first and last ranks, which are the exact min and max.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        Some(self.value_at_rank(nearest_rank(q, n)))
    }

    /// Value at 1-based rank `r` in the sorted samples (`1 <= r <= len`).
    fn value_at_rank(&self, r: u64) -> i64 {
        // The extremes are known exactly.
        if r <= 1 {
            return self.moments.min;
        }
        if r >= self.len() {
            return self.moments.max;
        }
        let nneg = self.neg.len();
        let v = if r <= nneg {
            // Negatives sorted ascending are magnitudes descending: rank r
            // is the (nneg - r + 1)-th smallest magnitude.
            let k = nneg - r + 1;
            let m = rank_in(&self.neg, k);
            -(self.neg.lowest_equivalent(m) as i128)
        } else {
            let m = rank_in(&self.pos, r - nneg);
            self.pos.highest_equivalent(m) as i128
        };
        (v.clamp(i128::from(self.moments.min), i128::from(self.moments.max))) as i64
    }

    /// The summary of the recorded samples; `missed` is passed through.
    /// An empty histogram gives [`Summary::empty`].
    pub fn summary(&self, missed: u64) -> Summary {
        if self.is_empty() {
            return Summary::empty(missed);
        }
        let q = SUMMARY_QUANTILES.map(|q| self.quantile(q));
        Summary {
            samples: self.len(),
            min_ns: self.min(),
            mean_ns: self.mean(),
            sd_ns: self.sd(),
            p50_ns: q[0],
            p90_ns: q[1],
            p95_ns: q[2],
            p99_ns: q[3],
            p99_9_ns: q[4],
            max_ns: self.max(),
            missed,
        }
    }

    /// Non-empty buckets in ascending order of value.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        let neg: Vec<Bucket> = self
            .neg
            .iter_recorded()
            .map(|v| {
                let m = v.value_iterated_to();
                Bucket {
                    low_ns: -(self.neg.highest_equivalent(m).min(i64::MAX as u64) as i64),
                    high_ns: -(self.neg.lowest_equivalent(m) as i64),
                    count: v.count_at_value(),
                }
            })
            .collect();
        let pos = self.pos.iter_recorded().map(|v| {
            let m = v.value_iterated_to();
            Bucket {
                low_ns: self.pos.lowest_equivalent(m) as i64,
                high_ns: self.pos.highest_equivalent(m).min(i64::MAX as u64) as i64,
                count: v.count_at_value(),
            }
        });
        neg.into_iter().rev().chain(pos)
    }

    /// Counts in linear bins of `width_ns`: `(bin_start_ns, count)` for every
    /// non-empty bin, ascending. Each bucket goes to the bin of its
    /// midpoint. Used for µs and per-period histograms.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if `width_ns` is not positive.
    pub fn rebin(&self, width_ns: i64) -> Result<Vec<(i64, u64)>> {
        if width_ns <= 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("histogram bin width must be positive, got {width_ns} ns"),
            ));
        }
        let mut out: Vec<(i64, u64)> = Vec::new();
        for b in self.buckets() {
            let start = b.mid_ns().div_euclid(width_ns) * width_ns;
            match out.last_mut() {
                Some((s, c)) if *s == start => *c += b.count,
                _ => out.push((start, b.count)),
            }
        }
        Ok(out)
    }

    /// Adds all samples of `other` to `self`, as if they had been recorded
    /// here.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if the two histograms track different
    /// ranges (`self` is then unchanged).
    pub fn merge(&mut self, other: &LatencyHistogram) -> Result<()> {
        if other.max_ns != self.max_ns {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "cannot merge histograms with different ranges ({} ns and {} ns); \
                     create both with the same maximum",
                    self.max_ns, other.max_ns
                ),
            ));
        }
        let err = |e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("merging histograms failed: {e}"),
            )
        };
        self.pos.add(&other.pos).map_err(err)?;
        self.neg.add(&other.neg).map_err(err)?;
        self.moments.merge(&other.moments);
        self.clamped += other.clamped;
        Ok(())
    }
}

/// Value (as recorded, any equivalent) at 1-based rank `k` of `h`.
fn rank_in(h: &Histogram<u64>, k: u64) -> u64 {
    let mut seen = 0;
    let mut last = 0;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        last = v.value_iterated_to();
        if seen >= k {
            return last;
        }
    }
    last
}

/// Exact summary of `samples` (sorts a copy); `missed` is passed through.
/// An empty slice gives [`Summary::empty`]. Uses the same definitions as
/// [`LatencyHistogram::summary`], without bucket rounding.
pub fn summarize(samples: &[i64], missed: u64) -> Summary {
    if samples.is_empty() {
        return Summary::empty(missed);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let mut m = Moments::new();
    for &s in samples {
        m.record(s);
    }
    let n = sorted.len() as u64;
    let q = SUMMARY_QUANTILES.map(|q| Some(sorted[(nearest_rank(q, n) - 1) as usize]));
    Summary {
        samples: n,
        min_ns: Some(m.min),
        mean_ns: Some(m.mean()),
        sd_ns: Some(m.sd()),
        p50_ns: q[0],
        p90_ns: q[1],
        p95_ns: q[2],
        p99_ns: q[3],
        p99_9_ns: q[4],
        max_ns: Some(m.max),
        missed,
    }
}

/// Exact quantile `q` (0.0..=1.0) of `samples` by nearest rank; `None` when
/// empty. Sorts a copy.
pub fn quantile(samples: &[i64], q: f64) -> Option<i64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    Some(sorted[(nearest_rank(q, sorted.len() as u64) - 1) as usize])
}

/// Successive differences of `timestamps` (ns): clears `out` and pushes
/// `timestamps[i+1] − timestamps[i]` for each pair. A clock going back gives
/// a negative gap (the difference wraps to `i64` as two's complement).
///
/// **RT-safe** when `out.capacity() >= timestamps.len() - 1`: it then never
/// allocates.
pub fn gaps(timestamps: &[u64], out: &mut Vec<i64>) {
    out.clear();
    for w in timestamps.windows(2) {
        out.push(w[1].wrapping_sub(w[0]) as i64);
    }
}

/// The smallest positive gap (Finney's clock granularity), `None` when no
/// gap is positive.
pub fn smallest_positive_gap(gaps: &[i64]) -> Option<i64> {
    gaps.iter().copied().filter(|&g| g > 0).min()
}

/// Median of `v` (mean of the middle two for an even count), sorting `v`
/// in place; `None` when empty.
pub fn median_in_place(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_mean_rounds_half_away_from_zero() {
        let mut m = Moments::new();
        m.record(1);
        m.record(2);
        assert_eq!(m.mean(), 2);
        let mut m = Moments::new();
        m.record(-1);
        m.record(-2);
        assert_eq!(m.mean(), -2);
    }

    #[test]
    fn record_does_not_allocate() {
        let mut h = LatencyHistogram::new();
        assert_no_alloc::assert_no_alloc(|| {
            for i in -1000..1000i64 {
                h.record(i * 7919);
            }
            h.record(i64::MAX);
            h.record(i64::MIN);
            h.reset();
            h.record(5);
        });
        assert_eq!(h.len(), 1);
    }
}
