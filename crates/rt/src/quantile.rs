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
}
