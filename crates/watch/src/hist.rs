//! The latency histogram of one interval: fixed log-linear buckets, a flat
//! array allocated once, so recording is an index and an add.
//!
//! Buckets are upper-inclusive (`(previous edge, edge]`), so that counts up
//! to an edge are exactly Prometheus's `le` buckets: 1 µs wide up to 1 ms,
//! 10 µs up to 10 ms, 100 µs up to 100 ms, 1 ms up to 1 s, then one bucket
//! for anything later. A percentile is the upper edge of the bucket holding
//! the nearest-rank sample ([`firmtime_rt::quantile::nearest_rank`]), capped
//! at the exact maximum: at most one bucket width above the exact value.
//!
//! # RT contract
//! [`Hist::record`] is **RT-safe**: no allocation, no syscall.

use serde::{Deserialize, Serialize};

/// Number of buckets (see the module docs).
pub const BUCKETS: usize = 3702;
/// The overflow bucket's edge (latencies above 1 s).
pub const OVERFLOW_EDGE: i64 = i64::MAX;

/// Index of the bucket holding `ns`. **RT-safe.**
#[inline]
pub fn index(ns: i64) -> usize {
    #[inline]
    fn ceil_div(a: i64, b: i64) -> usize {
        ((a + b - 1) / b) as usize
    }
    if ns <= 0 {
        0
    } else if ns <= 1_000_000 {
        ceil_div(ns, 1_000)
    } else if ns <= 10_000_000 {
        1000 + ceil_div(ns - 1_000_000, 10_000)
    } else if ns <= 100_000_000 {
        1900 + ceil_div(ns - 10_000_000, 100_000)
    } else if ns <= 1_000_000_000 {
        2800 + ceil_div(ns - 100_000_000, 1_000_000)
    } else {
        BUCKETS - 1
    }
}

/// Upper edge of bucket `i`, ns ([`OVERFLOW_EDGE`] for the last).
pub fn edge(i: usize) -> i64 {
    let i = i as i64;
    match i {
        0 => 0,
        1..=1000 => i * 1_000,
        1001..=1900 => 1_000_000 + (i - 1000) * 10_000,
        1901..=2800 => 10_000_000 + (i - 1900) * 100_000,
        2801..=3700 => 100_000_000 + (i - 2800) * 1_000_000,
        _ => OVERFLOW_EDGE,
    }
}

/// Bucket counts of one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    counts: Vec<u64>,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

/// Non-empty buckets as `(upper edge ns, count)`, ascending: what the
/// database stores (JSON `[[edge, count], …]`).
pub type Sparse = Vec<(i64, u64)>;

impl Hist {
    /// All buckets zero (allocates and touches them).
    pub fn new() -> Hist {
        Hist {
            counts: vec![0; BUCKETS],
        }
    }

    /// Counts one latency. **RT-safe.**
    #[inline]
    pub fn record(&mut self, latency_ns: i64) {
        let i = index(latency_ns);
        self.counts[i] += 1;
    }

    /// Sets every bucket to zero (no allocation).
    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
    }

    /// Samples counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The non-empty buckets.
    pub fn sparse(&self) -> Sparse {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (edge(i), c))
            .collect()
    }

    /// Adds a sparse histogram read back from the database; edges that are
    /// not one of ours go to the bucket that holds them.
    pub fn add_sparse(&mut self, s: &[(i64, u64)]) {
        for &(e, c) in s {
            self.counts[index(e)] += c;
        }
    }

    /// Adds another histogram.
    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    /// The count of bucket `i`.
    pub fn count(&self, i: usize) -> u64 {
        self.counts[i]
    }

    /// Samples at or below `le_ns`: exact when `le_ns` is a bucket edge;
    /// otherwise those at or below the largest edge under it (a lower
    /// bound), none below the first edge (0 ns).
    pub fn at_or_below(&self, le_ns: i64) -> u64 {
        let last = index(le_ns);
        let n: u64 = self.counts[..=last].iter().sum();
        if edge(last) == le_ns {
            n
        } else {
            // `le_ns` inside a bucket: that bucket's samples may lie above it.
            n - self.counts[last]
        }
    }

    /// Nearest-rank quantile `q`: the upper edge of the bucket holding it,
    /// capped at `max_ns`; `None` when empty.
    pub fn quantile(&self, q: f64, max_ns: i64) -> Option<i64> {
        let n = self.total();
        if n == 0 {
            return None;
        }
        let rank = firmtime_rt::quantile::nearest_rank(q, n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(edge(i).min(max_ns));
            }
        }
        Some(max_ns)
    }
}

/// A sparse histogram as stored: JSON `[[edge_ns, count], …]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored(pub Sparse);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edges_and_indices_agree() {
        for i in 0..BUCKETS - 1 {
            let e = edge(i);
            assert_eq!(index(e), i, "edge {e} of bucket {i}");
            assert_eq!(index(e + 1), i + 1, "just above edge {e}");
        }
        assert_eq!(index(-5), 0);
        assert_eq!(index(1_000_000_001), BUCKETS - 1);
        assert_eq!(edge(BUCKETS - 1), OVERFLOW_EDGE);
        assert!((1..BUCKETS).all(|i| edge(i) > edge(i - 1)), "ascending");
    }

    #[test]
    fn quantile_is_the_bucket_of_the_nearest_rank() {
        let mut h = Hist::new();
        for us in 1..=1000 {
            h.record(us * 1000 - 300); // 0.7 µs, 1.7 µs, … 999.7 µs
        }
        assert_eq!(h.total(), 1000);
        // p99: the 990th sample, 989.7 µs, in bucket (989, 990] µs.
        assert_eq!(h.quantile(0.99, 999_700), Some(990_000));
        // p99.9: the 999th, 998.7 µs.
        assert_eq!(h.quantile(0.999, 999_700), Some(999_000));
        // The top bucket's edge is capped at the exact max.
        assert_eq!(h.quantile(1.0, 999_700), Some(999_700));
        assert_eq!(Hist::new().quantile(0.5, 0), None);
    }

    #[test]
    fn sparse_round_trips_and_counts_below_edges() {
        let mut h = Hist::new();
        for ns in [5_000, 5_000, 12_345, 2_500_000, 50_000_000, 3_000_000_000] {
            h.record(ns);
        }
        let s = h.sparse();
        assert_eq!(
            s,
            vec![
                (5_000, 2),
                (13_000, 1),
                (2_500_000, 1),
                (50_000_000, 1),
                (OVERFLOW_EDGE, 1)
            ]
        );
        let mut back = Hist::new();
        back.add_sparse(&s);
        assert_eq!(back, h);
        assert_eq!(h.at_or_below(10_000), 2);
        assert_eq!(h.at_or_below(20_000), 3);
        assert_eq!(h.at_or_below(100_000_000), 5);
        h.clear();
        assert_eq!(h.total(), 0);
    }

    /// A bound inside a bucket counts only the buckets wholly at or below
    /// it: that bucket's samples may lie above the bound.
    #[test]
    fn at_or_below_inside_a_bucket_counts_only_the_buckets_below_it() {
        let mut h = Hist::new();
        for ns in [5_000, 12_345, 12_900, 2_500_000] {
            h.record(ns);
        }
        // 12_500 is inside (12 µs, 13 µs], which holds 12_345 and 12_900.
        assert_eq!(h.at_or_below(12_500), 1);
        assert_eq!(h.at_or_below(13_000), 3);
        // Inside (2.49 ms, 2.5 ms], a 10 µs bucket.
        assert_eq!(h.at_or_below(2_495_000), 3);
        assert_eq!(h.at_or_below(2_500_000), 4);
    }

    /// Bucket 0 holds every latency at or below 0 ns: a negative bound is
    /// inside it, and its samples may lie above the bound. It counted them
    /// all (3 here, where only one is at or below -1 µs).
    #[test]
    fn at_or_below_a_negative_bound_counts_no_sample_above_it() {
        let mut h = Hist::new();
        for ns in [-5_000, 0, 0, 700] {
            h.record(ns);
        }
        assert_eq!(h.at_or_below(-1_000), 0);
        assert_eq!(h.at_or_below(0), 3);
        assert_eq!(h.at_or_below(1_000), 4);
    }

    /// The largest bucket edge at or below `le_ns`, by scanning every edge.
    fn edge_at_or_below(le_ns: i64) -> Option<i64> {
        (0..BUCKETS).map(edge).filter(|&e| e <= le_ns).max()
    }

    /// Latencies around the edges where the bucket width changes.
    fn latency() -> impl Strategy<Value = i64> {
        prop_oneof![
            -3_000i64..3_000,
            0i64..1_100_000,
            990_000i64..1_030_000,
            9_950_000i64..10_300_000,
            99_500_000i64..103_000_000,
            995_000_000i64..1_010_000_000,
            Just(i64::MAX),
        ]
    }

    proptest! {
        /// Against the definition, by brute force over the recorded values:
        /// the samples at or below the largest bucket edge at or below the
        /// bound (exact when the bound is an edge; none when no edge is).
        #[test]
        fn at_or_below_counts_the_samples_up_to_the_edge_under_the_bound(
            values in proptest::collection::vec(latency(), 0..40),
            bound in latency(),
            pick in proptest::option::of(proptest::sample::Index::arbitrary()),
            nudge in -1_500i64..1_500,
        ) {
            let mut h = Hist::new();
            for &v in &values {
                h.record(v);
            }
            // Half the bounds lie near a recorded value, often in its bucket.
            let bound = match pick {
                Some(i) if !values.is_empty() => values[i.index(values.len())].saturating_add(nudge),
                _ => bound,
            };
            let want = edge_at_or_below(bound)
                .map_or(0, |e| values.iter().filter(|&&v| v <= e).count() as u64);
            prop_assert_eq!(h.at_or_below(bound), want, "bound {}", bound);
            let exact = values.iter().filter(|&&v| v <= bound).count() as u64;
            prop_assert!(want <= exact);
        }

        /// Against the module's definition: the upper edge of the bucket
        /// holding the nearest-rank sample of the recorded values, capped at
        /// their maximum; never below that sample, at most one bucket above.
        #[test]
        fn quantile_is_the_edge_of_the_nearest_rank_sample_capped_at_the_max(
            mut values in proptest::collection::vec(latency(), 1..40),
            q in 0.0f64..=1.0,
        ) {
            let mut h = Hist::new();
            for &v in &values {
                h.record(v);
            }
            values.sort_unstable();
            let max = *values.last().unwrap();
            let sample = firmtime_rt::quantile::of_sorted(&values, q).unwrap();
            let got = h.quantile(q, max).unwrap();
            prop_assert_eq!(got, edge(index(sample)).min(max));
            prop_assert!(got >= sample);
        }
    }
}
