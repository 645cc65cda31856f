//! The one percentile definition every firmtime figure uses: the nearest
//! rank (the smallest sample with at least a fraction `q` of the samples at
//! or below it; Hyndman & Fan's definition 1, what cyclictest's and
//! OSADL's histograms imply). `lab`'s histograms, `net bench`'s round
//! trips and every report's p50/p99/p99.9 agree on it.

/// 1-based nearest rank of quantile `q` (0.0..=1.0, clamped; NaN as 0)
/// among `n` samples (`n > 0`).
pub fn nearest_rank(q: f64, n: u64) -> u64 {
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    // Products like 0.29 * 100 land a hair above the integer; trim that
    // float noise so ranks of exact fractions are exact.
    let x = q * n as f64;
    let r = (x - x * 1e-15).ceil();
    (r as u64).clamp(1, n)
}

/// The sample at quantile `q` of `sorted` (ascending), by nearest rank;
/// `None` when empty.
pub fn of_sorted<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len() as u64;
    (n > 0).then(|| sorted[(nearest_rank(q, n) - 1) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nearest_rank_of_exact_fractions_is_exact() {
        assert_eq!(nearest_rank(0.5, 100), 50);
        assert_eq!(nearest_rank(0.29, 100), 29);
        assert_eq!(nearest_rank(0.999, 100), 100);
        assert_eq!(nearest_rank(0.999, 1000), 999);
        assert_eq!(nearest_rank(0.0, 10), 1);
        assert_eq!(nearest_rank(1.0, 10), 10);
        assert_eq!(nearest_rank(f64::NAN, 10), 1);
    }

    #[test]
    fn of_sorted_takes_the_nearest_rank() {
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!(of_sorted(&v, 0.5), Some(100));
        assert_eq!(of_sorted(&v, 0.99), Some(198));
        assert_eq!(of_sorted(&v, 0.999), Some(200));
        assert_eq!(of_sorted(&[7u64], 0.99), Some(7));
        assert_eq!(of_sorted::<u64>(&[], 0.5), None);
        // The rounding rule net bench used before ((n − 1)·q rounded) gave
        // 101 for p50 of 1..=200 and 198 for p99: one definition now.
    }

    /// q·n with a fraction below one half rounds up, not to the nearest:
    /// the rank must hold at least a fraction q of the samples.
    #[test]
    fn nearest_rank_rounds_a_fraction_below_one_half_up() {
        // 0.25 · 5 = 1.25: one sample is 20 %, below a quarter; two are 40 %.
        assert_eq!(nearest_rank(0.25, 5), 2);
        // 0.1 · 101 = 10.1.
        assert_eq!(nearest_rank(0.1, 101), 11);
        assert_eq!(of_sorted(&[10, 20, 30, 40, 50], 0.25), Some(20));
        // A product a hair above a whole number is that number: 0.07 · 100
        // is 7.000000000000001 in floats, 7/25 · 25 is 7.000000000000001.
        assert_eq!(nearest_rank(0.07, 100), 7);
        assert_eq!(nearest_rank(7.0 / 25.0, 25), 7);
    }

    /// The smallest rank `r` in 1..=n with r/n ≥ k/d, in integers.
    fn brute_rank(k: u64, d: u64, n: u64) -> u64 {
        (1..=n).find(|r| r * d >= k * n).unwrap()
    }

    /// q = k/d for k in 0..=d: an exact fraction, its float a hair off.
    fn fraction() -> impl Strategy<Value = (u64, u64)> {
        (1u64..=1000).prop_flat_map(|d| (0..=d, Just(d)))
    }

    proptest! {
        /// The module's definition, by brute force: the smallest rank with
        /// at least a fraction q of the samples at or below it.
        /// Half the cases have n a multiple of d, so that q·n is a whole
        /// number which the float product may overshoot (0.07 · 100 =
        /// 7.000000000000001).
        #[test]
        fn nearest_rank_is_the_smallest_rank_holding_a_fraction_q(
            (k, d) in fraction(),
            n in 1u64..3000,
            multiple in proptest::option::of(1u64..4),
        ) {
            let n = multiple.map_or(n, |m| m * d);
            prop_assert_eq!(nearest_rank(k as f64 / d as f64, n), brute_rank(k, d, n));
        }

        /// The smallest sample with at least a fraction q of the samples at
        /// or below it (duplicates included), by brute force.
        #[test]
        fn of_sorted_is_the_smallest_sample_with_a_fraction_q_at_or_below(
            mut v in proptest::collection::vec(0i32..20, 1..60),
            (k, d) in fraction(),
        ) {
            v.sort_unstable();
            let n = v.len() as u64;
            let brute = v
                .iter()
                .copied()
                .filter(|&s| v.iter().filter(|&&x| x <= s).count() as u64 * d >= k * n)
                .min();
            prop_assert_eq!(of_sorted(&v, k as f64 / d as f64), brute);
        }

        /// Any q, NaN and out-of-range included: a rank in 1..=n, not
        /// decreasing as q grows.
        #[test]
        fn nearest_rank_is_in_range_and_monotone(
            q1 in proptest::num::f64::ANY,
            q2 in proptest::num::f64::ANY,
            n in 1u64..1_000_000,
        ) {
            let (r1, r2) = (nearest_rank(q1, n), nearest_rank(q2, n));
            prop_assert!((1..=n).contains(&r1) && (1..=n).contains(&r2));
            if !q1.is_nan() && !q2.is_nan() && q1 <= q2 {
                prop_assert!(r1 <= r2, "q {} -> {}, q {} -> {}", q1, r1, q2, r2);
            }
        }
    }
}
