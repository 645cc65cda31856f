//! firmtime-plot: the PNG plots of firmtime's reports, one concern shared
//! by `lab`, `tap`, `rack` and `watch`: log-scale latency histograms (in µs
//! or, as in Varoquaux (2006), in units of the period), CDFs and tails per
//! condition, a per-condition comparison of p50/p99/max, and line/point
//! charts.
//!
//! Latency plots take any distribution that implements [`Latencies`]
//! (firmtime-lab implements it for its `LatencyHistogram`; [`Counts`] holds
//! plain bucket counts such as watch's) and per-condition levels that
//! implement [`Levels`].
//!
//! Text is drawn with a TrueType font registered from disk: the file named
//! by the `FIRMTIME_FONT` environment variable, else [`DEFAULT_FONT`]
//! (Debian package `fonts-dejavu-core`). If the font cannot be read, the
//! plot functions return an [`ErrorKind::Unavailable`] error saying what to
//! install; they never fall back silently.
//!
//! # RT contract
//!
//! None of this runs on the RT path: plotting allocates and writes files.

#![deny(missing_docs)]

pub mod axis;
mod error;

pub use error::{Error, ErrorKind, Result};

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::coord::ranged1d::AsRangedCoord;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle, Palette, Palette99};

/// One bucket of a latency distribution: `count` samples between
/// `low_ns` and `high_ns` (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Smallest value the bucket holds, in ns.
    pub low_ns: i64,
    /// Largest value the bucket holds, in ns.
    pub high_ns: i64,
    /// Samples in the bucket.
    pub count: u64,
}

/// A latency distribution the histogram, CDF and tail plots can draw:
/// bucket counts plus the exact extremes.
pub trait Latencies {
    /// Number of samples.
    fn count(&self) -> u64;
    /// Exact smallest sample, ns; `None` when empty.
    fn min_ns(&self) -> Option<i64>;
    /// Exact largest sample, ns; `None` when empty.
    fn max_ns(&self) -> Option<i64>;
    /// Non-empty buckets in ascending order of value.
    fn latency_buckets(&self) -> Vec<Bucket>;
}

/// Plain bucket counts with their extremes: a [`Latencies`] for data that
/// is already binned (watch's stored histogram, tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    buckets: Vec<Bucket>,
    min_ns: Option<i64>,
    max_ns: Option<i64>,
}

impl Counts {
    /// The distribution of `buckets` (empty ones are left out; sorted by
    /// `low_ns`). Its extremes are the lowest `low_ns` and the highest
    /// `high_ns` of a non-empty bucket until [`with_extremes`](Self::with_extremes)
    /// gives the exact ones.
    pub fn new(buckets: impl IntoIterator<Item = Bucket>) -> Self {
        let mut buckets: Vec<Bucket> = buckets.into_iter().filter(|b| b.count > 0).collect();
        buckets.sort_by_key(|b| (b.low_ns, b.high_ns));
        let min_ns = buckets.iter().map(|b| b.low_ns).min();
        let max_ns = buckets.iter().map(|b| b.high_ns).max();
        Self {
            buckets,
            min_ns,
            max_ns,
        }
    }

    /// The same counts with the exact smallest and largest sample (each
    /// kept as it was when `None`, or when there are no samples).
    pub fn with_extremes(mut self, min_ns: Option<i64>, max_ns: Option<i64>) -> Self {
        if !self.buckets.is_empty() {
            self.min_ns = min_ns.or(self.min_ns);
            self.max_ns = max_ns.or(self.max_ns);
        }
        self
    }
}

impl Latencies for Counts {
    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.count).sum()
    }
    fn min_ns(&self) -> Option<i64> {
        self.min_ns
    }
    fn max_ns(&self) -> Option<i64> {
        self.max_ns
    }
    fn latency_buckets(&self) -> Vec<Bucket> {
        self.buckets.clone()
    }
}

/// Per-condition levels [`comparison_png`] draws (all `None`: a condition
/// without samples).
pub trait Levels {
    /// Median, ns.
    fn p50_ns(&self) -> Option<i64>;
    /// 99th percentile, ns.
    fn p99_ns(&self) -> Option<i64>;
    /// 99.9th percentile, ns.
    fn p99_9_ns(&self) -> Option<i64>;
    /// Largest sample, ns.
    fn max_ns(&self) -> Option<i64>;
}

/// The font used when `FIRMTIME_FONT` is not set (package `fonts-dejavu-core`).
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Environment variable naming a TrueType font file to use instead of
/// [`DEFAULT_FONT`].
pub const FONT_ENV: &str = "FIRMTIME_FONT";

/// Size of every plot, in pixels.
pub const SIZE: (u32, u32) = (1000, 600);

const FAMILY: &str = "sans-serif";

/// The font file in use: `$FIRMTIME_FONT` if set and non-empty, else
/// [`DEFAULT_FONT`].
pub fn font_path() -> PathBuf {
    match std::env::var_os(FONT_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_FONT),
    }
}

/// The font registered so far (each registration leaks the file's bytes
/// once, as plotters needs them for the whole process).
static REGISTERED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Reads the TrueType font at `path` and makes it the plots' font.
/// Registering the same path again does nothing.
///
/// # Errors
///
/// [`ErrorKind::Unavailable`] if the file cannot be read or is not a
/// TrueType/OpenType font; the message says which package to install and
/// how to point `FIRMTIME_FONT` at another font. The previous font, if
/// any, stays registered.
pub fn use_font(path: &Path) -> Result<()> {
    let mut reg = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
    if reg.as_deref() == Some(path) {
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|e| {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "cannot read the plot font {}: {e}; install it with \
                 `apt install fonts-dejavu-core` (or run scripts/setup.sh), or set \
                 {FONT_ENV} to a TrueType font file",
                path.display()
            ),
        )
    })?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FAMILY, FontStyle::Normal, bytes).map_err(|_| {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "{} is not a usable TrueType font; install `fonts-dejavu-core` or set \
                 {FONT_ENV} to a TrueType font file",
                path.display()
            ),
        )
    })?;
    *reg = Some(path.to_owned());
    Ok(())
}

/// Registers [`font_path`] unless a font is already registered.
fn ensure_font() -> Result<()> {
    let have = REGISTERED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some();
    if have {
        Ok(())
    } else {
        use_font(&font_path())
    }
}

/// Unit of the latency axis of [`histogram_png`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds.
    Us,
    /// Multiples of the period (Varoquaux's plot); the period in ns.
    Periods(u64),
}

impl Unit {
    fn ns(self) -> f64 {
        match self {
            Unit::Us => 1000.0,
            Unit::Periods(p) => p as f64,
        }
    }

    fn label(self) -> String {
        match self {
            Unit::Us => "latency (µs)".to_owned(),
            Unit::Periods(p) => format!(
                "latency (periods of {})",
                firmtime_rt::units::format_ns(p as f64)
            ),
        }
    }
}

fn draw_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Output,
        format!(
            "cannot write the plot {}: {e}; check that its directory exists and is writable",
            path.display()
        ),
    )
}

fn nothing_to_plot(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("nothing to plot in {what}: every series is empty"),
    )
}

/// The smallest and largest sample over all series; nothing to plot when
/// every series is empty.
fn latency_range<H: Latencies + ?Sized>(path: &Path, series: &[(&str, &H)]) -> Result<(i64, i64)> {
    let lo = series.iter().filter_map(|(_, h)| h.min_ns()).min();
    let hi = series.iter().filter_map(|(_, h)| h.max_ns()).max();
    match (lo, hi) {
        (Some(lo), Some(hi)) => Ok((lo, hi)),
        _ => Err(nothing_to_plot(path.display().to_string().as_str())),
    }
}

type Canvas<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type Chart<'a, CT> = ChartContext<'a, BitMapBackend<'a>, CT>;

/// Draws a plot for `path` with `draw` on a white canvas of [`SIZE`], then
/// puts it at `path` as every result file is put
/// ([`firmtime_rt::fs::write_atomic_via`]): a regular file replaced
/// atomically, a device or FIFO written into, a symbolic link refused. The
/// canvas writes a temporary file; errors name `path`.
fn drawn(path: &Path, draw: impl FnOnce(Canvas<'_>) -> Result<()>) -> Result<()> {
    let mut failed = None;
    firmtime_rt::fs::write_atomic_via(path, |tmp| {
        let root = BitMapBackend::new(tmp, SIZE).into_drawing_area();
        let drew = root
            .fill(&WHITE)
            .map_err(|e| draw_err(path, e))
            .and_then(|()| draw(root));
        drew.map_err(|e| {
            let io = std::io::Error::other(e.message().to_string());
            failed = Some(e);
            io
        })
    })
    .map_err(|e| {
        failed
            .take()
            .unwrap_or_else(|| Error::new(ErrorKind::Output, e.to_string()))
    })
}

/// The frame every plot shares: caption, margin and label areas, over the
/// given axis ranges.
fn chart<'a, X: AsRangedCoord, Y: AsRangedCoord>(
    root: &Canvas<'a>,
    path: &Path,
    title: &str,
    y_label_area: u32,
    x: X,
    y: Y,
) -> Result<Chart<'a, Cartesian2d<X::CoordDescType, Y::CoordDescType>>> {
    ChartBuilder::on(root)
        .caption(title, (FAMILY, 26))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(y_label_area)
        .build_cartesian_2d(x, y)
        .map_err(|e| draw_err(path, e))
}

/// Draws the legend at `position` and writes the file.
fn finish<'a, CT: CoordTranslate>(
    root: &Canvas<'a>,
    chart: &mut Chart<'a, CT>,
    path: &Path,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_err(path, e))?;
    root.present().map_err(|e| draw_err(path, e))
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::COLORS[i % Palette99::COLORS.len()];
    RGBColor(r, g, b)
}

/// An axis value as people write it: `10,000`, `250`, `2.5`, `0.05`
/// (never `10000.0`).
pub fn axis_number(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    let a = v.abs();
    if a >= 1.0 && (v - v.round()).abs() < 1e-6 * a.max(1.0) {
        let digits = (v.round().abs() as u64).to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return if v < 0.0 { format!("-{out}") } else { out };
    }
    if v == 0.0 {
        return "0".into();
    }
    // Two significant digits below 1: 0.5, 0.05, 0.0001.
    let decimals = ((-a.log10()).ceil() as usize + 1).min(12);
    let s = format!("{v:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Marks one period at `x` with a dashed vertical line from `y0` to `y1`
/// (log-spaced dashes) and a legend entry `label`, when `x` lies in
/// `(x0, x1)`.
fn mark_period<'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut Chart<'a, CT>,
    path: &Path,
    x: f64,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    label: &str,
) -> Result<()> {
    if x <= x0 || x >= x1 {
        return Ok(());
    }
    let gray = RGBColor(90, 90, 90);
    let n = 30;
    let at = |k: i32| y0 * (y1 / y0).powf(f64::from(k) / f64::from(n));
    let dashes = (0..n)
        .step_by(2)
        .map(|i| PathElement::new([(x, at(i)), (x, at(i + 1))], gray.stroke_width(1)));
    chart
        .draw_series(dashes)
        .map_err(|e| draw_err(path, e))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], gray.stroke_width(1)));
    Ok(())
}

/// Writes the latency histogram of each series as a step line (as
/// cyclictest/OSADL latency plots draw them, one colour per condition, no
/// fill, so every curve stays visible) with a logarithmic count axis
/// ([`axis::count_axis`]). Empty series are left out of the plot but kept
/// in the legend.
///
/// With [`Unit::Us`], OSADL's plot: classes of 1 µs over the interesting
/// range ([`axis::us_axis`]: up to the largest sample, or up to about
/// p99.99 when the largest lies far beyond; a series with samples beyond
/// the axis says in its legend entry how many and its largest). With
/// [`Unit::Periods`], Varoquaux's: every sample, in classes of 1/100 of
/// the period ([`axis::periods_axis`]), against a dashed line at one
/// period (a later wake-up missed its next deadline); each legend entry
/// says how many were later. [`histogram_png_with_period`] marks the period
/// on the µs plot too, when it lies in the range.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] if every series is empty or the period is 0;
/// [`ErrorKind::Unavailable`] if the font is missing (see the module docs);
/// [`ErrorKind::Output`] if the file cannot be written.
pub fn histogram_png<H: Latencies + ?Sized>(
    path: &Path,
    title: &str,
    series: &[(&str, &H)],
    unit: Unit,
) -> Result<()> {
    histogram_png_with_period(path, title, series, unit, None)
}

/// [`histogram_png`] with the period (ns) marked when given.
///
/// # Errors
///
/// As [`histogram_png`].
pub fn histogram_png_with_period<H: Latencies + ?Sized>(
    path: &Path,
    title: &str,
    series: &[(&str, &H)],
    unit: Unit,
    period_ns: Option<u64>,
) -> Result<()> {
    if unit == Unit::Periods(0) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the period for a per-period histogram must be positive",
        ));
    }
    latency_range(path, series)?;
    let hists: Vec<&H> = series.iter().map(|(_, h)| *h).collect();
    let (ax, mark) = match unit {
        Unit::Us => (axis::us_axis(&hists), period_ns),
        Unit::Periods(p) => (axis::periods_axis(&hists, p), Some(p)),
    };
    let ax = ax.ok_or_else(|| nothing_to_plot(path.display().to_string().as_str()))?;
    ensure_font()?;
    let mut binned = Vec::with_capacity(series.len());
    let mut labels = Vec::with_capacity(series.len());
    let mut max_count = 1u64;
    for (name, h) in series {
        let c = axis::classes(*h, &ax);
        max_count = max_count.max(c.counts.iter().map(|b| b.1).max().unwrap_or(0));
        labels.push(match unit {
            Unit::Us if c.beyond > 0 => format!(
                "{name}: {} beyond {} µs (max {} µs)",
                axis_number(c.beyond as f64),
                axis_number(ax.end_ns as f64 / 1000.0),
                axis_number((h.max_ns().unwrap_or(0) as f64 / 1000.0).round()),
            ),
            Unit::Us => (*name).to_owned(),
            Unit::Periods(p) => format!(
                "{name}: {} later than one period",
                axis_number(axis::later_than(*h, p.min(i64::MAX as u64) as i64) as f64)
            ),
        });
        binned.push(c.counts);
    }
    let u = unit.ns();
    let x0 = ax.start_ns as f64 / u;
    let x1 = ax.end_ns as f64 / u;
    let wu = ax.class_ns as f64 / u;
    let x_label = format!(
        "{}, classes of {}",
        unit.label(),
        match unit {
            Unit::Us => format!("{} µs", axis_number(wu)),
            Unit::Periods(_) => format!("{} period", axis_number(wu)),
        }
    );
    let (floor, y1) = axis::count_axis(max_count);

    drawn(path, |root| {
        let y = (floor..y1).log_scale();
        let mut chart = chart(&root, path, title, 70, x0..x1, y)?;
        chart
            .configure_mesh()
            .x_desc(x_label.as_str())
            .y_desc("wake-ups per class (log)")
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| {
                if *v < 1.0 {
                    String::new()
                } else {
                    axis_number(*v)
                }
            })
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(|e| draw_err(path, e))?;
        if let Some(p) = mark {
            mark_period(
                &mut chart,
                path,
                p as f64 / u,
                (x0, x1),
                (floor, y1),
                "one period: a later wake-up missed a deadline",
            )?;
        }
        for (i, (label, bins)) in labels.iter().zip(&binned).enumerate() {
            let c = color(i);
            // A step outline over each run of non-empty classes: up from
            // the floor at its left edge, across each class, down at its
            // right edge.
            let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
            let mut last_end: Option<f64> = None;
            for &(start, count) in bins {
                if count == 0 {
                    continue;
                }
                let x = start as f64 / u;
                let y = count as f64;
                match (last_end, runs.last_mut()) {
                    (Some(e), Some(run)) if (e - x).abs() < wu * 1e-6 => {
                        run.push((x, y));
                        run.push((x + wu, y));
                    }
                    _ => {
                        if let (Some(e), Some(run)) = (last_end, runs.last_mut()) {
                            run.push((e, floor));
                        }
                        runs.push(vec![(x, floor), (x, y), (x + wu, y)]);
                    }
                }
                last_end = Some(x + wu);
            }
            if let (Some(e), Some(run)) = (last_end, runs.last_mut()) {
                run.push((e, floor));
            }
            chart
                .draw_series(
                    runs.into_iter()
                        .map(move |run| PathElement::new(run, c.stroke_width(2))),
                )
                .map_err(|e| draw_err(path, e))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(3)));
        }
        finish(&root, &mut chart, path, SeriesLabelPosition::UpperRight)
    })
}

/// Where bucket `b` of `h` steps on a distribution plot ([`cdf_png`],
/// [`tail_png`]): its upper edge, kept within the series' own minimum and
/// maximum, µs.
fn step_us<H: Latencies + ?Sized>(h: &H, b: &Bucket) -> f64 {
    b.high_ns
        .clamp(h.min_ns().unwrap_or(0), h.max_ns().unwrap_or(0)) as f64
        / 1000.0
}

/// Draws one series' steps `pts` as a line 2 px wide in `c`, with its
/// legend entry `name` (a stroke `legend_width` px wide).
fn distribution_line<'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut Chart<'a, CT>,
    path: &Path,
    pts: Vec<(f64, f64)>,
    name: &str,
    c: RGBColor,
    legend_width: u32,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(pts, c.stroke_width(2)))
        .map_err(|e| draw_err(path, e))?
        .label(name)
        .legend(move |(x, y)| {
            PathElement::new([(x, y), (x + 16, y)], c.stroke_width(legend_width))
        });
    Ok(())
}

/// Writes the cumulative distribution of each series: fraction of samples
/// at or below a latency (µs), one line per condition (`lab trace`'s
/// effective quanta, Etsion et al. Fig. 6). For wake-up latencies, whose
/// interesting part is the tail, [`tail_png`] reads better.
///
/// # Errors
///
/// As [`histogram_png`].
pub fn cdf_png<H: Latencies + ?Sized>(
    path: &Path,
    title: &str,
    series: &[(&str, &H)],
) -> Result<()> {
    let (lo, hi) = latency_range(path, series)?;
    ensure_font()?;
    let (mut x0, mut x1) = (lo as f64 / 1000.0, hi as f64 / 1000.0);
    if x1 - x0 < 1e-3 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    drawn(path, |root| {
        let mut chart = chart(&root, path, title, 60, x0..x1, 0f64..1.0)?;
        chart
            .configure_mesh()
            .x_desc("latency (µs)")
            .y_desc("fraction of samples ≤ latency")
            .x_label_formatter(&|v| axis_number(*v))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(|e| draw_err(path, e))?;
        for (i, (name, h)) in series.iter().enumerate() {
            let c = color(i);
            let n = h.count().max(1) as f64;
            let mut seen = 0u64;
            let mut pts = Vec::new();
            if let Some(min) = h.min_ns() {
                pts.push((min as f64 / 1000.0, 0.0));
            }
            for b in h.latency_buckets() {
                // Steps: flat to the bucket, then up by its count.
                let x = step_us(*h, &b);
                pts.push((x, seen as f64 / n));
                seen += b.count;
                pts.push((x, seen as f64 / n));
            }
            distribution_line(&mut chart, path, pts, name, c, 2)?;
        }
        finish(&root, &mut chart, path, SeriesLabelPosition::LowerRight)
    })
}

/// Writes the tail of each series' distribution on log–log axes: the
/// fraction of wake-ups later than each latency (1 − CDF; µs), one line per
/// condition, down to a single wake-up. Where a CDF's linear axis crams
/// every curve into its left edge, this shows the median at the top left
/// and each condition's p99, p99.9 and worst as the levels 10⁻², 10⁻³ and
/// its last step. A dashed line marks one period (ns) when given and in
/// range.
///
/// # Errors
///
/// As [`histogram_png`].
pub fn tail_png<H: Latencies + ?Sized>(
    path: &Path,
    title: &str,
    series: &[(&str, &H)],
    period_ns: Option<u64>,
) -> Result<()> {
    let (lo, hi) = latency_range(path, series)?;
    ensure_font()?;
    let x0 = (lo as f64 / 1000.0).max(0.1) * 0.8;
    let x1 = (hi as f64 / 1000.0).max(x0 * 2.0) * 1.25;
    let n_max = series
        .iter()
        .map(|(_, h)| h.count())
        .max()
        .unwrap_or(1)
        .max(1);
    let y0 = 0.5 / n_max as f64;
    drawn(path, |root| {
        let mut chart = chart(
            &root,
            path,
            title,
            70,
            (x0..x1).log_scale(),
            (y0..1.5f64).log_scale(),
        )?;
        chart
            .configure_mesh()
            .x_desc("latency (µs, log)")
            .y_desc("fraction of wake-ups later (log)")
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| {
                if *v > 1.0 {
                    String::new()
                } else {
                    axis_number(*v)
                }
            })
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(|e| draw_err(path, e))?;
        if let Some(p) = period_ns {
            mark_period(
                &mut chart,
                path,
                p as f64 / 1000.0,
                (x0, x1),
                (y0, 1.5),
                "one period",
            )?;
        }
        for (i, (name, h)) in series.iter().enumerate() {
            let c = color(i);
            let n = h.count().max(1) as f64;
            let mut later = h.count();
            let mut pts = Vec::new();
            if let Some(min) = h.min_ns() {
                pts.push(((min as f64 / 1000.0).max(x0), 1.0));
            }
            for b in h.latency_buckets() {
                // Steps: flat to the bucket's upper edge, then down by its count.
                let x = step_us(*h, &b);
                let x = x.max(x0);
                pts.push((x, later as f64 / n));
                later = later.saturating_sub(b.count);
                if later == 0 {
                    pts.push((x, y0));
                    break;
                }
                pts.push((x, later as f64 / n));
            }
            distribution_line(&mut chart, path, pts, name, c, 3)?;
        }
        finish(&root, &mut chart, path, SeriesLabelPosition::UpperRight)
    })
}

/// Writes a per-condition dot plot of p50, p99, p99.9 and max (µs,
/// logarithmic axis), one column per condition. Values at or below 1 ns
/// are drawn at 1 ns (0.001 µs). Conditions without samples are shown as
/// empty columns.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] if `rows` is empty or no row has samples;
/// otherwise as [`histogram_png`].
pub fn comparison_png<L: Levels + ?Sized>(
    path: &Path,
    title: &str,
    rows: &[(&str, &L)],
) -> Result<()> {
    let ymax = rows
        .iter()
        .filter_map(|(_, s)| s.max_ns())
        .max()
        .ok_or_else(|| nothing_to_plot(path.display().to_string().as_str()))?;
    ensure_font()?;
    const FLOOR_US: f64 = 0.001;
    let us = |v: Option<i64>| v.map(|ns| (ns as f64 / 1000.0).max(FLOOR_US));
    let ymin = rows
        .iter()
        .filter_map(|(_, s)| us(s.p50_ns()))
        .fold(f64::INFINITY, f64::min);
    let y0 = (ymin / 2.0).max(FLOOR_US / 2.0);
    let y1 = (ymax as f64 / 1000.0).max(FLOOR_US) * 2.0;
    let names: Vec<String> = rows
        .iter()
        .map(|(n, s)| {
            if s.max_ns().is_none() {
                format!("{n} (no samples)")
            } else {
                (*n).to_owned()
            }
        })
        .collect();

    drawn(path, |root| {
        // One label per condition, under its column's centre: drawn here, as
        // a segmented axis would add an empty tick after the last column.
        let n = rows.len();
        let mut chart = chart(
            &root,
            path,
            title,
            70,
            -0.5f64..n as f64 - 0.5,
            (y0..y1).log_scale(),
        )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|v| axis_number(*v))
            .y_desc("latency (µs, log)")
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(|e| draw_err(path, e))?;
        let label_style =
            TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, name) in names.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64, y0));
            root.draw(&Text::new(name.clone(), (px, py + 8), label_style.clone()))
                .map_err(|e| draw_err(path, e))?;
        }
        type Pick<L> = fn(&L) -> Option<i64>;
        let stats: [(&str, Pick<L>); 4] = [
            ("p50", |s| s.p50_ns()),
            ("p99", |s| s.p99_ns()),
            ("p99.9", |s| s.p99_9_ns()),
            ("max", |s| s.max_ns()),
        ];
        // Fixed, distinguishable colours: p50 blue, p99 orange, p99.9 purple, max red.
        let colors = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(148, 103, 189),
            RGBColor(214, 39, 40),
        ];
        for (k, (label, pick)) in stats.iter().enumerate() {
            let c = colors[k];
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, (_, s))| us(pick(s)).map(|y| (i as f64, y)))
                .collect();
            chart
                .draw_series(
                    pts.into_iter()
                        .map(move |p| EmptyElement::at(p) + Circle::new((0, 0), 6, c.filled())),
                )
                .map_err(|e| draw_err(path, e))?
                .label(*label)
                .legend(move |(x, y)| Circle::new((x + 6, y), 5, c.filled()));
        }
        finish(&root, &mut chart, path, SeriesLabelPosition::UpperLeft)
    })
}

/// How [`chart_png`] draws one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mark {
    /// Points joined by a line, in the order given.
    #[default]
    LinePoints,
    /// Points only.
    Points,
    /// A line only (e.g. a reference level).
    Line,
}

/// One series of [`chart_png`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// `(x, y)` points; non-finite ones are left out.
    pub points: &'a [(f64, f64)],
    /// Error bars: `y ± spread[i]` at `points[i]` (empty: none).
    pub spread: &'a [f64],
    /// How to draw it.
    pub mark: Mark,
    /// Colour as `(r, g, b)`; `None`: the palette's colour for its index.
    pub color: Option<(u8, u8, u8)>,
}

impl<'a> Series<'a> {
    /// Points joined by a line, palette colour, no error bars.
    pub fn new(name: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self {
            name,
            points,
            spread: &[],
            mark: Mark::LinePoints,
            color: None,
        }
    }
}

/// Writes a line/point plot of `(x, y)` series on linear axes, one colour
/// per series (points joined in the order given), with a legend. The axes
/// span every finite point (and error bar) with a 5 % margin. When every x
/// is within 0.2 of a whole number (tap or trial numbers, possibly nudged
/// apart), the x axis is labelled with whole numbers only and spans half a
/// unit beyond the first and last.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] if no series has a finite point;
/// [`ErrorKind::Unavailable`] if the font is missing (see the module docs);
/// [`ErrorKind::Output`] if the file cannot be written.
pub fn series_png(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, &[(f64, f64)])],
) -> Result<()> {
    let s: Vec<Series<'_>> = series.iter().map(|(n, p)| Series::new(n, p)).collect();
    chart_png(path, title, x_label, y_label, &s)
}

/// A fixed, distinguishable palette (blue, orange, green, red, purple, …).
const SERIES_COLORS: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
];

/// The axis span of `lo..hi` with a 5 % margin (±1 around a single value).
fn padded(lo: f64, hi: f64) -> std::ops::Range<f64> {
    if hi - lo < 1e-9 * lo.abs().max(1.0) {
        return (lo - 1.0)..(hi + 1.0);
    }
    let m = (hi - lo) * 0.05;
    (lo - m)..(hi + m)
}

/// Like [`series_png`], with a [`Mark`], colour and optional error bars per
/// series ([`Series`]).
///
/// # Errors
///
/// As [`series_png`], and [`ErrorKind::InvalidInput`] if a series has error
/// bars but not one per point.
pub fn chart_png(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
) -> Result<()> {
    draw_chart(path, title, x_label, y_label, series, None)
}

/// Like [`chart_png`] on fixed axis spans `x` and `y` (e.g. from zero)
/// instead of spans fitted to the points. The x axis gets whole-number
/// ticks only when every x is a whole number.
///
/// # Errors
///
/// As [`chart_png`].
pub fn chart_png_on(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<()> {
    draw_chart(path, title, x_label, y_label, series, Some((x, y)))
}

/// Like [`chart_png`] with a logarithmic y axis spanning whole decades
/// around the points' positive values ([`axis::log_axis`]); a value at or
/// below zero is drawn at the bottom of the axis. For latencies over time,
/// where one spike of 50 ms on a linear axis flattens every other interval
/// into its floor.
///
/// # Errors
///
/// As [`chart_png`], and [`ErrorKind::InvalidInput`] if no point has a
/// positive y.
pub fn chart_png_log_y(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
) -> Result<()> {
    let (y0, y1) = axis::log_axis(
        series
            .iter()
            .flat_map(|s| s.points.iter().filter(|p| p.0.is_finite()).map(|p| p.1)),
    )
    .ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "nothing to plot on a log axis in {}: no point has a positive value",
                path.display()
            ),
        )
    })?;
    let clamped: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| s.points.iter().map(|&(x, y)| (x, y.max(y0))).collect())
        .collect();
    let spreads: Vec<Vec<f64>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .zip(s.spread)
                .map(|(&(_, y), &e)| e.abs().min((y - y0).max(0.0)))
                .collect()
        })
        .collect();
    let logged: Vec<Series<'_>> = series
        .iter()
        .zip(clamped.iter().zip(&spreads))
        .map(|(s, (pts, sp))| Series {
            points: pts,
            spread: if s.spread.is_empty() { &[] } else { sp },
            ..*s
        })
        .collect();
    draw_chart_y(path, title, x_label, y_label, &logged, None, Some((y0, y1)))
}

/// [`chart_png`] with the axis spans fitted to the points (`axes: None`) or given.
fn draw_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    axes: Option<(std::ops::Range<f64>, std::ops::Range<f64>)>,
) -> Result<()> {
    draw_chart_y(path, title, x_label, y_label, series, axes, None)
}

/// [`draw_chart`], on a logarithmic y axis over `log_y` when given.
fn draw_chart_y(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    axes: Option<(std::ops::Range<f64>, std::ops::Range<f64>)>,
    log_y: Option<(f64, f64)>,
) -> Result<()> {
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for s in series {
        if !s.spread.is_empty() && s.spread.len() != s.points.len() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "series {:?} of {} has {} points but {} error bars; give one per point or none",
                    s.name,
                    path.display(),
                    s.points.len(),
                    s.spread.len()
                ),
            ));
        }
        for (i, &(x, y)) in s.points.iter().enumerate() {
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            let e = s
                .spread
                .get(i)
                .copied()
                .filter(|e| e.is_finite())
                .unwrap_or(0.0)
                .abs();
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y - e);
            y1 = y1.max(y + e);
        }
    }
    if x0 > x1 {
        return Err(nothing_to_plot(path.display().to_string().as_str()));
    }
    // Counts on x (tap or trial numbers, maybe nudged apart; on given
    // spans, whole numbers only): whole-number ticks.
    let nudge = if axes.is_some() { 1e-9 } else { 0.2 };
    let counts = series.iter().all(|s| {
        s.points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .all(|(x, _)| (x - x.round()).abs() <= nudge)
    });
    ensure_font()?;
    let (xr, yr) = match axes {
        Some(given) => given,
        None if counts => ((x0.round() - 0.5)..(x1.round() + 0.5), padded(y0, y1)),
        None => (padded(x0, x1), padded(y0, y1)),
    };
    let whole = |v: &f64| {
        if (v - v.round()).abs() < 1e-6 {
            format!("{v:.0}")
        } else {
            String::new()
        }
    };
    let x_ticks = ((x1.round() - x0.round()) as usize + 1).clamp(2, 12);
    let cap = (xr.end - xr.start) * 0.006;
    drawn(path, |root| {
        if let Some((y0, y1)) = log_y {
            let mut chart = chart(&root, path, title, 70, xr, (y0..y1).log_scale())?;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(x_label)
                .y_desc(y_label)
                .y_label_formatter(&|v| axis_number(*v))
                .label_style((FAMILY, 14))
                .axis_desc_style((FAMILY, 16));
            if counts {
                mesh.x_labels(x_ticks).x_label_formatter(&whole);
            }
            mesh.draw().map_err(|e| draw_err(path, e))?;
            draw_lines(&mut chart, path, series, cap)?;
            finish(&root, &mut chart, path, SeriesLabelPosition::UpperRight)
        } else {
            let mut chart = chart(&root, path, title, 70, xr, yr)?;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(x_label)
                .y_desc(y_label)
                .label_style((FAMILY, 14))
                .axis_desc_style((FAMILY, 16));
            if counts {
                mesh.x_labels(x_ticks).x_label_formatter(&whole);
            }
            mesh.draw().map_err(|e| draw_err(path, e))?;
            draw_lines(&mut chart, path, series, cap)?;
            finish(&root, &mut chart, path, SeriesLabelPosition::UpperRight)
        }
    })
}

/// Draws `series` (lines, points, error bars with caps `cap` wide) on
/// `chart`, each with its legend entry.
fn draw_lines<'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut Chart<'a, CT>,
    path: &Path,
    series: &[Series<'_>],
    cap: f64,
) -> Result<()> {
    for (i, s) in series.iter().enumerate() {
        let (r, g, b) = s.color.unwrap_or(SERIES_COLORS[i % SERIES_COLORS.len()]);
        let c = RGBColor(r, g, b);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let bars: Vec<(f64, f64, f64)> = s
            .points
            .iter()
            .zip(s.spread)
            .filter(|((x, y), e)| x.is_finite() && y.is_finite() && e.is_finite())
            .map(|(&(x, y), &e)| (x, y - e.abs(), y + e.abs()))
            .collect();
        // Bars with caps (plotters' ErrorBar needs a feature we don't build).
        chart
            .draw_series(bars.into_iter().flat_map(|(x, lo, hi)| {
                [
                    PathElement::new([(x, lo), (x, hi)], c.stroke_width(2)),
                    PathElement::new([(x - cap, lo), (x + cap, lo)], c.stroke_width(2)),
                    PathElement::new([(x - cap, hi), (x + cap, hi)], c.stroke_width(2)),
                ]
            }))
            .map_err(|e| draw_err(path, e))?;
        if s.mark != Mark::Points {
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| draw_err(path, e))?;
        }
        let anno = if s.mark == Mark::Line {
            chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
        } else {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
        }
        .map_err(|e| draw_err(path, e))?;
        let mark = s.mark;
        anno.label(s.name).legend(move |(x, y)| {
            let line = PathElement::new(
                [(x, y), (x + 16, y)],
                if mark == Mark::Points {
                    TRANSPARENT.stroke_width(0)
                } else {
                    c.stroke_width(2)
                },
            );
            let dot = Circle::new(
                (x + 8, y),
                if mark == Mark::Line { 0 } else { 4 },
                c.filled(),
            );
            EmptyElement::at((0, 0)) + line + dot
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_size(path: &Path) -> (u32, u32) {
        let b = std::fs::read(path).unwrap();
        assert!(b.len() > 1000, "{} bytes", b.len());
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&b[12..16], b"IHDR");
        (
            u32::from_be_bytes(b[16..20].try_into().unwrap()),
            u32::from_be_bytes(b[20..24].try_into().unwrap()),
        )
    }

    fn tmp(name: &str) -> firmtime_rt::testing::ScratchDir {
        firmtime_rt::testing::ScratchDir::new(&format!("plot-{name}"))
    }

    #[test]
    fn series_png_writes_a_png_of_the_documented_size() {
        let d = tmp("series");
        let a: Vec<(f64, f64)> = (1..20)
            .map(|i| (i as f64, 500.0 + (i % 3) as f64))
            .collect();
        let b = [(20.0, 510.0), (21.0, f64::NAN), (22.0, 490.0)];
        let p = d.join("s.png");
        series_png(&p, "ITI", "tap", "ms", &[("sync", &a), ("cont", &b)]).unwrap();
        assert_eq!(png_size(&p), SIZE);
        let p2 = d.join("c.png");
        let mut s = Series::new("mean ± sd", &b);
        s.spread = &[5.0, 1.0, 7.0];
        s.mark = Mark::Points;
        let mut zero = Series::new("zero", &[(0.0, 0.0), (30.0, 0.0)]);
        zero.mark = Mark::Line;
        zero.color = Some((0, 0, 0));
        chart_png(&p2, "c", "x", "y", &[s, zero]).unwrap();
        assert_eq!(png_size(&p2), SIZE);
        let p3 = d.join("on.png");
        chart_png_on(
            &p3,
            "o",
            "x",
            "y",
            &[Series::new("a", &a)],
            0.0..25.0,
            0.0..600.0,
        )
        .unwrap();
        assert_eq!(png_size(&p3), SIZE);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The PNG encoder wrote through a link at the plot's path, and into
    /// whatever file was there; a plot is now put as every result file is.
    #[test]
    fn a_plot_goes_into_a_fifo_and_never_through_a_link() {
        let d = tmp("special");
        let a: Vec<(f64, f64)> = (1..20).map(|i| (i as f64, i as f64)).collect();
        let fifo = d.join("fifo.png");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is NUL-terminated and outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(&reader).map_err(|e| e.to_string()));
        });
        series_png(&fifo, "t", "x", "y", &[("a", &a)]).unwrap();
        let b = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the reader finished")
            .unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(
            &std::fs::symlink_metadata(&fifo).unwrap().file_type()
        ));

        let target = d.join("precious.txt");
        std::fs::write(&target, b"keep me").unwrap();
        let link = d.join("link.png");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = series_png(&link, "t", "x", "y", &[("a", &a)]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Output);
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let mut names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["fifo.png", "link.png", "precious.txt"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn series_png_refuses_empty_series_and_mismatched_error_bars() {
        let d = tmp("bad");
        let p = d.join("x.png");
        let e =
            series_png(&p, "t", "x", "y", &[("a", &[]), ("b", &[(f64::NAN, 1.0)])]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("nothing to plot"), "{e}");
        let mut s = Series::new("a", &[(1.0, 1.0), (2.0, 2.0)]);
        s.spread = &[1.0];
        let e = chart_png(&p, "t", "x", "y", &[s]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("2 points but 1 error bars"), "{e}");
        assert!(!p.exists(), "nothing written on error");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
