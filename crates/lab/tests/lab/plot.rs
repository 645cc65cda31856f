//! Plots: each function writes a real PNG of the documented size; a
//! missing or invalid font gives an actionable error.

use std::path::Path;

use firmtime_rt::testing::ScratchDir as TempDir;

use firmtime_lab::stats::{summarize, LatencyHistogram, Summary};
use firmtime_plot::{
    axis_number, cdf_png, comparison_png, histogram_png, histogram_png_with_period, tail_png,
    use_font, ErrorKind, Unit, SIZE,
};

/// Checks the PNG signature and the IHDR chunk's width and height.
fn assert_png(path: &Path) {
    let b = std::fs::read(path).unwrap();
    assert!(
        b.len() > 1000,
        "{} is only {} bytes",
        path.display(),
        b.len()
    );
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&b[12..16], b"IHDR");
    let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
    assert_eq!((w, h), SIZE);
}

fn hist(samples: impl IntoIterator<Item = i64>) -> LatencyHistogram {
    let mut h = LatencyHistogram::new();
    for s in samples {
        h.record(s);
    }
    h
}

fn conditions() -> (LatencyHistogram, LatencyHistogram) {
    let idle = hist((0..5_000).map(|i| 3_000 + (i * 37 % 9_000)));
    let loaded = hist((0..5_000).map(|i| -2_000 + (i * 7_919 % 400_000)));
    (idle, loaded)
}

#[test]
fn histogram_png_in_us_and_in_periods() {
    let dir = TempDir::new("hist");
    let (idle, loaded) = conditions();
    let series = [("idle", &idle), ("loaded", &loaded)];
    let us = dir.0.join("hist-us.png");
    histogram_png(&us, "latency", &series, Unit::Us).unwrap();
    assert_png(&us);
    let per = dir.0.join("hist-periods.png");
    histogram_png(&per, "latency / period", &series, Unit::Periods(1_000_000)).unwrap();
    assert_png(&per);
}

#[test]
fn cdf_png_one_line_per_condition() {
    let dir = TempDir::new("cdf");
    let (idle, loaded) = conditions();
    let p = dir.0.join("cdf.png");
    cdf_png(&p, "CDF", &[("idle", &idle), ("loaded", &loaded)]).unwrap();
    assert_png(&p);
    // A single value still gives a plot.
    let one = hist([42_000]);
    let q = dir.0.join("cdf-one.png");
    cdf_png(&q, "one sample", &[("one", &one)]).unwrap();
    assert_png(&q);
}

#[test]
fn tail_png_and_a_marked_period_draw_log_log_and_step_lines() {
    let dir = TempDir::new("tail");
    let (idle, loaded) = conditions();
    let p = dir.0.join("tail.png");
    tail_png(
        &p,
        "tail",
        &[("idle", &idle), ("loaded", &loaded)],
        Some(1_000_000),
    )
    .unwrap();
    assert_png(&p);
    let one = hist([42_000]);
    let q = dir.0.join("tail-one.png");
    tail_png(&q, "one sample", &[("one", &one)], None).unwrap();
    assert_png(&q);
    let h = dir.0.join("hist-period.png");
    histogram_png_with_period(&h, "h", &[("loaded", &loaded)], Unit::Us, Some(1_000_000)).unwrap();
    assert_png(&h);
}

#[test]
fn axis_numbers_read_as_people_write_them() {
    assert_eq!(axis_number(10_000.0), "10,000");
    assert_eq!(axis_number(1_000_000.0), "1,000,000");
    assert_eq!(axis_number(250.0), "250");
    assert_eq!(axis_number(2.5), "2.5");
    assert_eq!(axis_number(0.05), "0.05");
    assert_eq!(axis_number(0.001), "0.001");
    assert_eq!(axis_number(-1500.0), "-1,500");
}

#[test]
fn comparison_png_skips_empty_conditions() {
    let dir = TempDir::new("cmp");
    let a = summarize(&[10_000, 20_000, 900_000], 0);
    let b = summarize(&[-500, 3_000, 8_000], 1);
    let none = Summary::empty(4);
    let p = dir.0.join("cmp.png");
    comparison_png(
        &p,
        "per condition",
        &[("idle", &a), ("cpu load", &b), ("empty", &none)],
    )
    .unwrap();
    assert_png(&p);
}

#[test]
fn nothing_to_plot_is_an_error_and_writes_no_file() {
    let dir = TempDir::new("empty");
    let empty = LatencyHistogram::new();
    let p = dir.0.join("x.png");
    let e = histogram_png(&p, "t", &[("e", &empty)], Unit::Us).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        cdf_png::<LatencyHistogram>(&p, "t", &[])
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    let none = Summary::empty(0);
    assert_eq!(
        comparison_png(&p, "t", &[("e", &none)]).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let h = hist([1]);
    let e = histogram_png(&p, "t", &[("h", &h)], Unit::Periods(0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(!p.exists());
}

#[test]
fn unwritable_path_is_an_output_error() {
    let h = hist([1_000, 2_000]);
    let p = Path::new("/nonexistent-firmtime-dir/x.png");
    let e = histogram_png(p, "t", &[("h", &h)], Unit::Us).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Output);
    assert!(
        e.message().contains("/nonexistent-firmtime-dir/x.png"),
        "{e}"
    );
}

#[test]
fn missing_font_says_what_to_install() {
    let e = use_font(Path::new("/nonexistent/DejaVuSans.ttf")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.message().contains("fonts-dejavu-core"), "{e}");
    assert!(e.message().contains("FIRMTIME_FONT"), "{e}");
    assert!(e.message().contains("/nonexistent/DejaVuSans.ttf"), "{e}");

    // A file that is not a font is refused too.
    let dir = TempDir::new("font");
    let bad = dir.0.join("bad.ttf");
    std::fs::write(&bad, b"not a font").unwrap();
    let e = use_font(&bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.message().contains("not a usable TrueType font"), "{e}");
}

/// `lab all`'s µs histogram ran linearly from 0 to the one 9 ms wake-up
/// (bins ~45 µs wide), squeezing every condition against x = 0, and its
/// periods plot repeated it at a 1 ms period. Now the µs plot is in 1 µs
/// classes up to about p99.99 with the outlier counted beyond, and the
/// periods plot spans every wake-up and the deadline; each of `lab all`'s
/// four plots is a PNG.
#[test]
fn lab_all_plots_show_the_body_in_microseconds_and_every_wake_up_against_the_period() {
    let idle = hist((0..100_000).map(|i| 4_000 + (i * 37 % 20_000)));
    let mut loaded = hist((0..100_000).map(|i| 6_000 + (i * 7_919 % 60_000)));
    loaded.record(9_000_000);
    let series = [("idle", &idle), ("stress", &loaded)];
    let hists = [&idle, &loaded];
    let us = firmtime_plot::axis::us_axis(&hists).unwrap();
    assert_eq!(us.class_ns, 1_000);
    assert_eq!(us.start_ns, 0);
    assert!(
        us.end_ns >= 66_000 && us.end_ns < 100_000,
        "the axis ends near p99.99, not at 9 ms: {us:?}"
    );
    let beyond = firmtime_plot::axis::classes(&loaded, &us);
    assert_eq!(beyond.beyond, 1);
    assert_eq!(beyond.counts.iter().map(|c| c.1).sum::<u64>(), 100_000);
    assert_eq!(firmtime_plot::axis::classes(&idle, &us).beyond, 0);
    let per = firmtime_plot::axis::periods_axis(&hists, 1_000_000).unwrap();
    assert!(per.end_ns > 9_000_000, "{per:?}");
    assert_eq!(firmtime_plot::axis::classes(&loaded, &per).beyond, 0);
    assert_ne!(us, per, "the two plots differ");

    let dir = TempDir::new("all");
    let summaries = [("idle", idle.summary(0)), ("stress", loaded.summary(8))];
    let levels: Vec<(&str, &Summary)> = summaries.iter().map(|(n, s)| (*n, s)).collect();
    let files = [
        "cyclic-histogram-us.png",
        "cyclic-histogram-periods.png",
        "cyclic-cdf.png",
        "cyclic-comparison.png",
    ];
    let p = |f: &str| dir.0.join(f);
    histogram_png_with_period(&p(files[0]), "us", &series, Unit::Us, Some(1_000_000)).unwrap();
    histogram_png(&p(files[1]), "periods", &series, Unit::Periods(1_000_000)).unwrap();
    tail_png(&p(files[2]), "tail", &series, Some(1_000_000)).unwrap();
    comparison_png(&p(files[3]), "cmp", &levels).unwrap();
    for f in files {
        assert_png(&p(f));
    }
}
