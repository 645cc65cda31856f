//! The axis choices of the latency plots, as pure functions: which range
//! of latencies a histogram shows, in which classes, what falls beyond it,
//! and the span of a logarithmic axis.
//!
//! The µs histogram follows OSADL's latency plots: classes of 1 µs, counts
//! on a logarithmic axis, and the x axis limited to the interesting range
//! ([`us_axis`]). The histogram in units of the period shows every
//! wake-up against the deadline instead ([`periods_axis`]).

use crate::{Bucket, Latencies};

/// The class width of the µs histogram, ns (OSADL's and cyclictest's
/// `-h` resolution).
pub const CLASS_NS: i64 = 1_000;

/// Most classes across a histogram's axis: about one per pixel column of
/// [`SIZE`](crate::SIZE). Wider ranges get wider classes (2, 5, 10, 20 …
/// µs).
pub const MAX_CLASSES: i64 = 1_000;

/// The quantile whose value ends the µs histogram's range when the
/// largest sample lies far beyond it (see [`us_axis`]).
pub const RANGE_QUANTILE: f64 = 0.9999;

/// The x axis of a latency histogram: classes of `class_ns` from
/// `start_ns` to `end_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistAxis {
    /// Start of the first class, ns (a multiple of `class_ns`).
    pub start_ns: i64,
    /// End of the last class, ns (a multiple of `class_ns`); a sample at or
    /// above it is beyond the axis.
    pub end_ns: i64,
    /// Class width, ns.
    pub class_ns: i64,
}

/// One series sorted into the classes of a [`HistAxis`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    /// `(class start ns, count)` of every non-empty class, ascending.
    pub counts: Vec<(i64, u64)>,
    /// Samples beyond the axis (at or above its end, or below its start).
    pub beyond: u64,
}

/// The smallest "round" width at least `ns`: 1, 2 or 5 times a power of
/// ten times `unit` (ns).
pub fn round_up_width(ns: i64, unit: i64) -> i64 {
    let unit = unit.max(1);
    let mut decade = unit;
    loop {
        for m in [1, 2, 5] {
            let w = decade.saturating_mul(m);
            if w >= ns || w == i64::MAX {
                return w;
            }
        }
        decade = decade.saturating_mul(10);
    }
}

/// Where a bucket's samples are counted: its midpoint, moved into the
/// exact range `[min, max]` of the distribution (a bucket wider than the
/// samples in it must not put them past the largest one).
fn position(b: &Bucket, min: i64, max: i64) -> i64 {
    let mid = b.low_ns + (b.high_ns - b.low_ns) / 2;
    mid.clamp(min, max.max(min))
}

/// The value at quantile `q` (nearest rank): the upper edge of the bucket
/// holding that rank, no larger than the exact maximum; `None` when empty.
pub fn quantile<H: Latencies + ?Sized>(h: &H, q: f64) -> Option<i64> {
    let n = h.count();
    let max = h.max_ns()?;
    if n == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0u64;
    for b in h.latency_buckets() {
        seen += b.count;
        if seen >= rank {
            return Some(b.high_ns.min(max));
        }
    }
    Some(max)
}

/// The axis of the µs histogram of `series`, OSADL's way:
///
/// - classes of [`CLASS_NS`] (1 µs), wider only when the range would need
///   more than [`MAX_CLASSES`] of them or the data's own buckets are wider
///   there (then the next round width: 2, 5, 10 … µs);
/// - the range starts at 0 (at the smallest sample when that is negative,
///   or beyond half the range);
/// - it ends just past the largest sample when that is at most twice the
///   largest [`RANGE_QUANTILE`] (p99.99) of any series, else at 1.25 times
///   that p99.99: the samples beyond are counted ([`classes`]) and the plot
///   says how many and how late the worst was, instead of squeezing every
///   distribution against 0 to show one outlier.
///
/// `None` when every series is empty.
pub fn us_axis<H: Latencies + ?Sized>(series: &[&H]) -> Option<HistAxis> {
    let lo = series.iter().filter_map(|h| h.min_ns()).min()?;
    let hi = series.iter().filter_map(|h| h.max_ns()).max()?;
    let q = series
        .iter()
        .filter_map(|h| quantile(*h, RANGE_QUANTILE))
        .max()
        .unwrap_or(hi);
    let q = q.max(lo);
    let end = if hi as i128 <= 2 * q.max(0) as i128 {
        hi.saturating_add(1)
    } else {
        q.saturating_add(q / 4).saturating_add(1)
    };
    let start = if lo < 0 {
        lo
    } else if lo <= end / 2 {
        0
    } else {
        lo - (end - lo) / 10
    };
    let span = (end as i128 - start as i128).max(1);
    let mut width = CLASS_NS.max(i64::try_from(span / MAX_CLASSES as i128).unwrap_or(i64::MAX));
    // The data's own buckets within the range: a class narrower than
    // them would leave every other class empty.
    for h in series {
        let (Some(min), Some(max)) = (h.min_ns(), h.max_ns()) else {
            continue;
        };
        for b in h.latency_buckets() {
            let at = position(&b, min, max);
            if at >= start && at < end {
                width = width.max((b.high_ns - b.low_ns).saturating_add(1));
            }
        }
    }
    Some(fit(start, end, width, CLASS_NS))
}

/// The axis of the histogram in units of the period `period_ns`
/// (Varoquaux's plot): every sample is on it, and so is the deadline one
/// period after the wake-up was due, so the plot shows how close to
/// missing it the wake-ups come (the µs histogram shows the body of the
/// distribution, this one the whole of it against the period). Classes of
/// 1/100 of the period, wider (2, 5, 10 … hundredths) when the range would
/// need more than [`MAX_CLASSES`]. `None` when every series is empty or
/// the period is 0.
pub fn periods_axis<H: Latencies + ?Sized>(series: &[&H], period_ns: u64) -> Option<HistAxis> {
    if period_ns == 0 {
        return None;
    }
    let lo = series.iter().filter_map(|h| h.min_ns()).min()?;
    let hi = series.iter().filter_map(|h| h.max_ns()).max()?;
    let period = i64::try_from(period_ns).unwrap_or(i64::MAX);
    let unit = (period / 100).max(1);
    let start = lo.min(0);
    let end = hi.saturating_add(1).max(period.saturating_add(period / 10));
    let span = (end as i128 - start as i128).max(1);
    let need = i64::try_from(span / MAX_CLASSES as i128).unwrap_or(i64::MAX);
    Some(fit(start, end, need, unit))
}

/// `start..end` in whole classes of the smallest round width (of `unit`)
/// at least `width` that needs at most [`MAX_CLASSES`] of them.
fn fit(start: i64, end: i64, width: i64, unit: i64) -> HistAxis {
    let mut class_ns = round_up_width(width.max(unit), unit);
    loop {
        let a = snap(start, end, class_ns);
        if (a.end_ns as i128 - a.start_ns as i128) / class_ns as i128 <= MAX_CLASSES as i128
            || class_ns == i64::MAX
        {
            return a;
        }
        class_ns = round_up_width(class_ns.saturating_add(1), unit);
    }
}

/// `start..end` widened to whole classes.
fn snap(start: i64, end: i64, class_ns: i64) -> HistAxis {
    let s = start.div_euclid(class_ns).saturating_mul(class_ns);
    let e = end
        .saturating_sub(1)
        .div_euclid(class_ns)
        .saturating_add(1)
        .saturating_mul(class_ns);
    HistAxis {
        start_ns: s,
        end_ns: e.max(s.saturating_add(class_ns)),
        class_ns,
    }
}

/// The counts of `h` in the classes of `axis`: each bucket counted in the
/// class of its midpoint (within the exact min and max), samples outside
/// the axis counted in [`Classes::beyond`].
pub fn classes<H: Latencies + ?Sized>(h: &H, axis: &HistAxis) -> Classes {
    let mut out = Classes {
        counts: Vec::new(),
        beyond: 0,
    };
    let (Some(min), Some(max)) = (h.min_ns(), h.max_ns()) else {
        return out;
    };
    for b in h.latency_buckets() {
        let at = position(&b, min, max);
        if at < axis.start_ns || at >= axis.end_ns {
            out.beyond += b.count;
            continue;
        }
        let start = axis.start_ns + (at - axis.start_ns) / axis.class_ns * axis.class_ns;
        match out.counts.last_mut() {
            Some((s, c)) if *s == start => *c += b.count,
            _ => out.counts.push((start, b.count)),
        }
    }
    out
}

/// Samples of `h` later than `ns` (by bucket midpoint, as [`classes`]
/// counts them).
pub fn later_than<H: Latencies + ?Sized>(h: &H, ns: i64) -> u64 {
    let (Some(min), Some(max)) = (h.min_ns(), h.max_ns()) else {
        return 0;
    };
    h.latency_buckets()
        .iter()
        .filter(|b| position(b, min, max) > ns)
        .map(|b| b.count)
        .sum()
}

/// The logarithmic count axis for a largest class count of `max_count`:
/// from 0.5 (so that a class of one shows) to the power of ten at or above
/// twice the largest count (room for the legend above the peak).
pub fn count_axis(max_count: u64) -> (f64, f64) {
    let top = (max_count.max(1) as f64 * 2.0).log10().ceil();
    (0.5, 10f64.powi(top as i32))
}

/// A logarithmic axis spanning the finite positive `values`: from the
/// power of ten at or below the smallest to the power of ten at or above
/// the largest (at least one decade). `None` when there is no such value.
pub fn log_axis(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        if v.is_finite() && v > 0.0 {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if lo > hi {
        return None;
    }
    let a = 10f64.powi(lo.log10().floor() as i32);
    let mut b = 10f64.powi(hi.log10().ceil() as i32);
    if b <= a {
        b = a * 10.0;
    }
    Some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Counts;

    fn one_us(samples: &[i64]) -> Counts {
        // 1 ns buckets: the exact samples.
        let mut v: Vec<i64> = samples.to_vec();
        v.sort_unstable();
        let mut buckets: Vec<Bucket> = Vec::new();
        for s in v {
            match buckets.last_mut() {
                Some(b) if b.low_ns == s => b.count += 1,
                _ => buckets.push(Bucket {
                    low_ns: s,
                    high_ns: s,
                    count: 1,
                }),
            }
        }
        Counts::new(buckets)
    }

    #[test]
    fn round_widths_are_one_two_five_per_decade() {
        assert_eq!(round_up_width(1, 1_000), 1_000);
        assert_eq!(round_up_width(1_000, 1_000), 1_000);
        assert_eq!(round_up_width(1_001, 1_000), 2_000);
        assert_eq!(round_up_width(2_500, 1_000), 5_000);
        assert_eq!(round_up_width(9_000, 1_000), 10_000);
        assert_eq!(round_up_width(11_000, 1_000), 20_000);
        assert_eq!(round_up_width(30, 10), 50);
    }

    #[test]
    fn count_and_log_axes_span_whole_decades_around_the_data() {
        assert_eq!(count_axis(0), (0.5, 10.0));
        assert_eq!(count_axis(1), (0.5, 10.0));
        assert_eq!(count_axis(900), (0.5, 10_000.0));
        assert_eq!(count_axis(4_000), (0.5, 10_000.0));
        assert_eq!(count_axis(5_000), (0.5, 10_000.0));
        assert_eq!(count_axis(5_001), (0.5, 100_000.0));
        assert_eq!(log_axis([12.0, 50_000.0]), Some((10.0, 100_000.0)));
        assert_eq!(log_axis([0.0, -3.0, f64::NAN, 40.0]), Some((10.0, 100.0)));
        assert_eq!(log_axis([100.0]), Some((100.0, 1000.0)));
        assert_eq!(log_axis([0.0, f64::INFINITY]), None);
    }

    /// The distribution of a quiet machine: everything within 100 µs.
    #[test]
    fn a_tail_that_fits_is_shown_whole_in_one_microsecond_classes() {
        let s: Vec<i64> = (0..10_000).map(|i| 5_000 + (i * 37 % 60_000)).collect();
        let h = one_us(&s);
        let a = us_axis(&[&h]).unwrap();
        assert_eq!(a.class_ns, 1_000);
        assert_eq!(a.start_ns, 0);
        let max = *s.iter().max().unwrap();
        assert!(a.end_ns > max && a.end_ns <= max + 1_000, "{a:?}");
        let c = classes(&h, &a);
        assert_eq!(c.beyond, 0);
        assert_eq!(c.counts.iter().map(|c| c.1).sum::<u64>(), 10_000);
        // Each class holds exactly the samples in its microsecond.
        for &(start, n) in &c.counts {
            let want = s
                .iter()
                .filter(|&&v| v >= start && v < start + 1_000)
                .count();
            assert_eq!(n as usize, want, "class at {start}");
        }
    }

    /// `lab all` under load: one 9 ms wake-up among 100,000 near 20 µs
    /// made the axis run linearly to 9 ms; now it ends near p99.99 and the
    /// outlier is counted beyond it.
    #[test]
    fn one_far_outlier_is_counted_beyond_the_axis_not_drawn_to_scale() {
        let mut s: Vec<i64> = (0..100_000).map(|i| 10_000 + (i * 7 % 30_000)).collect();
        s.push(9_000_000);
        let h = one_us(&s);
        let p9999 = quantile(&h, RANGE_QUANTILE).unwrap();
        assert!(p9999 < 40_000, "{p9999}");
        let a = us_axis(&[&h]).unwrap();
        assert_eq!(a.class_ns, 1_000);
        assert_eq!(a.start_ns, 0);
        assert!(
            a.end_ns >= p9999 && a.end_ns <= p9999 * 5 / 4 + 1_000,
            "{a:?}"
        );
        let c = classes(&h, &a);
        assert_eq!(c.beyond, 1);
        assert_eq!(c.counts.iter().map(|c| c.1).sum::<u64>(), 100_000);
        assert_eq!(later_than(&h, a.end_ns), 1);
    }

    #[test]
    fn wide_ranges_and_coarse_buckets_get_round_wider_classes() {
        // Spread over 5 ms: 5,000 classes of 1 µs would be 5 per pixel.
        let s: Vec<i64> = (0..50_000).map(|i| i * 100).collect();
        let a = us_axis(&[&one_us(&s)]).unwrap();
        assert_eq!(a.class_ns, 5_000);
        // watch's buckets are 10 µs wide between 1 and 10 ms: classes of
        // 1 or 2 µs would leave most classes empty.
        let w = Counts::new([
            Bucket {
                low_ns: 999_001,
                high_ns: 1_000_000,
                count: 10,
            },
            Bucket {
                low_ns: 1_000_001,
                high_ns: 1_010_000,
                count: 3,
            },
        ]);
        let a = us_axis(&[&w]).unwrap();
        assert_eq!(a.class_ns, 10_000, "{a:?}");
        assert_eq!(classes(&w, &a).beyond, 0);
    }

    #[test]
    fn negative_samples_start_the_axis_below_zero() {
        let h = one_us(&[-2_500, 1_000, 3_000]);
        let a = us_axis(&[&h]).unwrap();
        assert_eq!(a.start_ns, -3_000);
        assert_eq!(classes(&h, &a).beyond, 0);
    }

    #[test]
    fn the_periods_axis_shows_every_sample_and_the_deadline() {
        let h = one_us(&[20_000, 30_000, 2_500_000]);
        let a = periods_axis(&[&h], 1_000_000).unwrap();
        assert_eq!(a.class_ns, 10_000, "1/100 of the period");
        assert_eq!(a.start_ns, 0);
        assert!(a.end_ns > 2_500_000);
        assert_eq!(classes(&h, &a).beyond, 0);
        assert_eq!(later_than(&h, 1_000_000), 1);
        // A quiet run still reaches past one period.
        let q = one_us(&[20_000, 30_000]);
        let a = periods_axis(&[&q], 1_000_000).unwrap();
        assert!(a.end_ns >= 1_100_000, "{a:?}");
        // A long tail: wider round classes, never more than MAX_CLASSES.
        let l = one_us(&[0, 50_000_000]);
        let a = periods_axis(&[&l], 1_000_000).unwrap();
        assert_eq!(a.class_ns, 100_000, "{a:?}");
        assert!((a.end_ns - a.start_ns) / a.class_ns <= MAX_CLASSES);
        assert_eq!(periods_axis(&[&l], 0), None);
    }

    #[test]
    fn empty_series_have_no_axis_and_nothing_beyond() {
        let e = Counts::default();
        assert_eq!(us_axis(&[&e]), None);
        assert_eq!(periods_axis(&[&e], 1_000), None);
        let h = one_us(&[1_000]);
        let a = us_axis(&[&e, &h]).unwrap();
        assert_eq!(
            classes(&e, &a),
            Classes {
                counts: vec![],
                beyond: 0
            }
        );
        assert_eq!(quantile(&e, 0.5), None);
    }

    #[test]
    fn quantiles_are_nearest_rank_upper_edges_capped_at_the_max() {
        let h = Counts::new([
            Bucket {
                low_ns: 0,
                high_ns: 999,
                count: 99,
            },
            Bucket {
                low_ns: 1_000,
                high_ns: 1_999,
                count: 1,
            },
        ])
        .with_extremes(Some(3), Some(1_200));
        assert_eq!(quantile(&h, 0.5), Some(999));
        assert_eq!(quantile(&h, 0.99), Some(999));
        assert_eq!(quantile(&h, 0.995), Some(1_200));
        assert_eq!(quantile(&h, 1.0), Some(1_200));
    }
}
