//! Every plot writes a real PNG of the documented size, drawn on the axes
//! the pure functions of `firmtime_plot::axis` chose.

use std::path::Path;

use firmtime_plot::{
    axis, chart_png_log_y, histogram_png, histogram_png_with_period, Bucket, Counts, ErrorKind,
    Series, Unit, SIZE,
};

fn scratch(name: &str) -> firmtime_rt::testing::ScratchDir {
    firmtime_rt::testing::ScratchDir::new(&format!("plot-it-{name}"))
}

/// Checks the PNG signature and the IHDR chunk's width and height.
fn assert_png(path: &Path) {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() > 1000, "{} is {} bytes", path.display(), b.len());
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&b[12..16], b"IHDR");
    let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
    assert_eq!((w, h), SIZE);
}

/// watch's stored histogram: 1 µs buckets `(edge − 1 µs, edge]` and one
/// 50 ms wake-up in a 100 µs bucket.
fn watch_like() -> Counts {
    let mut b: Vec<Bucket> = (1..80)
        .map(|us| Bucket {
            low_ns: (us - 1) * 1000 + 1,
            high_ns: us * 1000,
            count: 10_000 / (us as u64),
        })
        .collect();
    b.push(Bucket {
        low_ns: 49_900_001,
        high_ns: 50_000_000,
        count: 1,
    });
    Counts::new(b).with_extremes(None, Some(49_950_000))
}

#[test]
fn a_watch_histogram_is_drawn_in_one_microsecond_classes_with_its_spike_counted_beyond() {
    let h = watch_like();
    let ax = axis::us_axis(&[&h]).unwrap();
    assert_eq!(ax.class_ns, 1_000);
    assert!(ax.end_ns < 1_000_000, "{ax:?}");
    let c = axis::classes(&h, &ax);
    assert_eq!(c.beyond, 1);
    assert_eq!(c.counts.len(), 79);
    let d = scratch("watch");
    let p = d.join("histogram.png");
    histogram_png(&p, "Histogram of the period", &[("all CPUs", &h)], Unit::Us).unwrap();
    assert_png(&p);
}

#[test]
fn the_periods_histogram_and_the_marked_period_are_drawn() {
    let h = watch_like();
    let d = scratch("periods");
    let p = d.join("periods.png");
    histogram_png(&p, "periods", &[("a", &h)], Unit::Periods(10_000_000)).unwrap();
    assert_png(&p);
    let q = d.join("us.png");
    histogram_png_with_period(&q, "us", &[("a", &h)], Unit::Us, Some(50_000)).unwrap();
    assert_png(&q);
}

#[test]
fn a_log_y_chart_is_drawn_and_needs_a_positive_value() {
    let d = scratch("logy");
    let max: Vec<(f64, f64)> = (0..100)
        .map(|i| {
            (
                i as f64,
                if i == 50 {
                    50_000.0
                } else {
                    40.0 + (i % 7) as f64
                },
            )
        })
        .collect();
    let low: Vec<(f64, f64)> = (0..100).map(|i| (i as f64, 0.0)).collect();
    let p = d.join("over-time.png");
    chart_png_log_y(
        &p,
        "t",
        "minutes",
        "latency (µs, log)",
        &[Series::new("max", &max), Series::new("p99.9", &low)],
    )
    .unwrap();
    assert_png(&p);
    let q = d.join("none.png");
    let e = chart_png_log_y(&q, "t", "x", "y", &[Series::new("zero", &low)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("no point has a positive value"), "{e}");
    assert!(!q.exists());
}
