//! Statistics: exact known values, negatives, empty input, histogram
//! against exact, merge, RT safety.

use firmtime_lab::stats::{
    gaps, quantile, smallest_positive_gap, summarize, LatencyHistogram, Summary,
};
use firmtime_lab::ErrorKind;

/// Deterministic pseudo-random samples (64-bit LCG), spread over ±10 ms
/// with a few multi-second outliers.
fn spread(n: usize, seed: u64) -> Vec<i64> {
    let mut x = seed;
    (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((x >> 33) % 20_000_001) as i64 - 10_000_000;
            if i % 997 == 0 {
                v * 700
            } else {
                v
            }
        })
        .collect()
}

fn hist_of(samples: &[i64]) -> LatencyHistogram {
    let mut h = LatencyHistogram::new();
    for &s in samples {
        h.record(s);
    }
    h
}

#[test]
fn one_to_hundred_has_known_statistics() {
    let samples: Vec<i64> = (1..=100).collect();
    let s = summarize(&samples, 2);
    assert_eq!(s.samples, 100);
    assert_eq!(s.min_ns, Some(1));
    assert_eq!(s.max_ns, Some(100));
    // Mean 50.5 rounds half away from zero.
    assert_eq!(s.mean_ns, Some(51));
    // Sample variance n(n+1)/12 = 841.67, sd 29.01.
    assert_eq!(s.sd_ns, Some(29));
    assert_eq!(s.p50_ns, Some(50));
    assert_eq!(s.p90_ns, Some(90));
    assert_eq!(s.p95_ns, Some(95));
    assert_eq!(s.p99_ns, Some(99));
    assert_eq!(s.p99_9_ns, Some(100));
    assert_eq!(s.missed, 2);
    // Below 2048 ns the buckets are exact, so the histogram agrees exactly.
    assert_eq!(hist_of(&samples).summary(2), s);
}

#[test]
fn sd_of_constant_and_single_samples_is_zero() {
    assert_eq!(summarize(&[7; 10], 0).sd_ns, Some(0));
    assert_eq!(summarize(&[-7], 0).sd_ns, Some(0));
    assert_eq!(hist_of(&[-7]).summary(0).sd_ns, Some(0));
    // Two samples 0 and 10: sample sd = sqrt(50) = 7.07.
    assert_eq!(summarize(&[0, 10], 0).sd_ns, Some(7));
}

#[test]
fn negative_samples_keep_their_sign_and_order() {
    let samples: Vec<i64> = (-50..50).collect();
    let s = summarize(&samples, 0);
    assert_eq!(s.min_ns, Some(-50));
    assert_eq!(s.max_ns, Some(49));
    assert_eq!(s.p50_ns, Some(-1));
    assert_eq!(s.p90_ns, Some(39));
    assert_eq!(s.mean_ns, Some(-1)); // -0.5, away from zero
    assert_eq!(hist_of(&samples).summary(0), s);

    let h = hist_of(&[-3_000_000, -20, 5, -20]);
    let b: Vec<_> = h.buckets().collect();
    assert!(b.windows(2).all(|w| w[0].high_ns < w[1].low_ns), "{b:?}");
    assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 4);
    assert_eq!(b[1].low_ns, -20);
    assert_eq!(b[1].count, 2);
    assert_eq!(h.quantile(0.0), Some(-3_000_000));
    assert_eq!(h.quantile(0.5), Some(-20));
    assert_eq!(h.quantile(1.0), Some(5));
}

#[test]
fn empty_input_is_not_data() {
    let s = summarize(&[], 3);
    assert_eq!(s, Summary::empty(3));
    assert!(s.is_empty());
    assert_eq!(LatencyHistogram::new().summary(3), s);
    assert_eq!(LatencyHistogram::new().quantile(0.5), None);
    assert_eq!(quantile(&[], 0.5), None);

    let v = serde_json::to_value(s).unwrap();
    assert_eq!(v["samples"], 0);
    assert_eq!(v["missed"], 3);
    for k in [
        "min_ns", "mean_ns", "sd_ns", "p50_ns", "p90_ns", "p95_ns", "p99_ns", "p99_9_ns", "max_ns",
    ] {
        assert!(v[k].is_null(), "{k} must be null for no samples: {v}");
    }
}

#[test]
fn summary_serializes_integer_ns_and_round_trips() {
    let s = summarize(&[1_000, 2_000, 3_000], 1);
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("\"p99_9_ns\":3000"), "{text}");
    assert!(text.contains("\"mean_ns\":2000"), "{text}");
    let back: Summary = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
}

#[test]
fn histogram_matches_exact_within_precision() {
    let samples = spread(50_000, 42);
    let exact = summarize(&samples, 0);
    let h = hist_of(&samples);
    let approx = h.summary(0);
    // Exact side statistics are exact.
    assert_eq!(approx.samples, exact.samples);
    assert_eq!(approx.min_ns, exact.min_ns);
    assert_eq!(approx.max_ns, exact.max_ns);
    assert_eq!(approx.mean_ns, exact.mean_ns);
    assert_eq!(approx.sd_ns, exact.sd_ns);
    let close = |a: Option<i64>, e: Option<i64>| {
        let (a, e) = (a.unwrap(), e.unwrap());
        assert!(
            (a - e).abs() <= e.abs() / 1000 + 1,
            "histogram {a} vs exact {e}"
        );
    };
    close(approx.p50_ns, exact.p50_ns);
    close(approx.p90_ns, exact.p90_ns);
    close(approx.p95_ns, exact.p95_ns);
    close(approx.p99_ns, exact.p99_ns);
    close(approx.p99_9_ns, exact.p99_9_ns);
    for q in [0.0, 0.001, 0.1, 0.25, 0.333, 0.75, 0.9999, 1.0] {
        close(h.quantile(q), quantile(&samples, q));
    }
}

#[test]
fn merge_equals_recording_everything_into_one() {
    let a = spread(10_000, 1);
    let b = spread(7_000, 2);
    let mut ha = hist_of(&a);
    let hb = hist_of(&b);
    ha.merge(&hb).unwrap();
    let all: Vec<i64> = a.iter().chain(&b).copied().collect();
    let hall = hist_of(&all);
    assert_eq!(ha.summary(4), hall.summary(4));
    assert_eq!(
        ha.buckets().collect::<Vec<_>>(),
        hall.buckets().collect::<Vec<_>>()
    );
    assert_eq!(ha.len(), 17_000);
}

#[test]
fn merge_of_different_ranges_is_refused() {
    let mut a = LatencyHistogram::new();
    let b = LatencyHistogram::with_max_ns(1_000_000).unwrap();
    let e = a.merge(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("same maximum"), "{e}");
    assert_eq!(
        LatencyHistogram::with_max_ns(1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn out_of_range_samples_are_clamped_but_stay_exact() {
    let mut h = LatencyHistogram::with_max_ns(1_000_000).unwrap();
    h.record(5_000_000);
    h.record(-7_000_000);
    h.record(10);
    assert_eq!(h.clamped(), 2);
    assert_eq!(h.max(), Some(5_000_000));
    assert_eq!(h.min(), Some(-7_000_000));
    assert_eq!(h.mean(), Some(-666_663));
}

#[test]
fn record_and_reset_do_not_allocate() {
    let mut h = LatencyHistogram::new();
    let samples = spread(5_000, 9);
    assert_no_alloc::assert_no_alloc(|| {
        for &s in &samples {
            h.record(s);
        }
        h.record(i64::MIN);
        h.record(i64::MAX);
    });
    assert_eq!(h.len(), 5_002);
    assert_eq!(h.clamped(), 2);
    assert_no_alloc::assert_no_alloc(|| h.reset());
    assert!(h.is_empty());
    assert_eq!(h.summary(0), Summary::empty(0));
}

#[test]
fn rebin_counts_every_sample_once() {
    let h = hist_of(&(0..10_000).collect::<Vec<_>>());
    let bins = h.rebin(1_000).unwrap();
    assert_eq!(bins.len(), 10);
    for (i, &(start, count)) in bins.iter().enumerate() {
        assert_eq!(start, i as i64 * 1_000);
        assert_eq!(count, 1_000, "bin at {start}");
    }
    let neg = hist_of(&[-1, -1000, -1001]).rebin(1_000).unwrap();
    assert_eq!(neg, vec![(-2_000, 1), (-1_000, 2)]);
    assert_eq!(h.rebin(0).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn gaps_are_successive_differences() {
    let ts = [10u64, 15, 15, 30, 25];
    let mut out = Vec::with_capacity(ts.len());
    assert_no_alloc::assert_no_alloc(|| gaps(&ts, &mut out));
    assert_eq!(out, vec![5, 0, 15, -5]);
    assert_eq!(smallest_positive_gap(&out), Some(5));
    assert_eq!(smallest_positive_gap(&[0, -3]), None);
    gaps(&[42], &mut out);
    assert!(out.is_empty());
    let s = summarize(&[5, 0, 15, -5], 0);
    assert_eq!((s.mean_ns, s.max_ns), (Some(4), Some(15)));
}
