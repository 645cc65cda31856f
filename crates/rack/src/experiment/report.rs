//! The report of a run: `results.json`, `report.md` beside Lago's own
//! figures, and the plots `fig5.png`…`fig8.png`.

use super::plan::Placement;
use super::results::ExperimentReport;
use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::fs::write_atomic;
use std::path::Path;

/// Lago's figures as his text gives them: (figure, what, value).
pub const PAPER: &[(u8, &str, &str)] = &[
    (
        5,
        "local, 1.45 ms at 44.1 kHz",
        "89 % usable (user 91 %, sys 1 %)",
    ),
    (
        5,
        "local, ≥ 3.0 ms at 44.1 kHz",
        "≈ 96 % usable (user 97 %, sys 0 %)",
    ),
    (5, "local, 96 kHz", "a little lower than 44.1 kHz"),
    (6, "window 0, 1 remote machine", "73 % usable"),
    (6, "window 0, 2 remote machines", "27 % usable each"),
    (6, "window 0, 3 remote machines", "9 % usable each"),
    (
        7,
        "window 2, 2.18 ms at 44.1 kHz, 1–4 machines; 96 kHz 4 and 7",
        "central load grows linearly; 4 machines ≈ same at 44.1 and 96 kHz",
    ),
    (
        8,
        "window 1, 2.19 ms at 96 kHz, 7 machines",
        "96 % usable; central 45 % user, 20 % sys",
    ),
];

fn pct(x: Option<f64>) -> String {
    x.map_or("none".into(), |v| format!("{:.0} %", v * 100.0))
}

/// Writes `report.md`, `results.json` (each atomically, fsynced) and
/// `fig5.png`…`fig8.png` into `dir`.
///
/// # Errors
/// [`ErrorKind::Io`] when a file cannot be written or the plot font is missing
/// (the message says which package to install).
pub fn write_report(r: &ExperimentReport, dir: &Path) -> Result<()> {
    let io = |e: std::io::Error, p: &Path| {
        Error::new(ErrorKind::Io, format!("cannot write {}: {e}", p.display()))
    };
    // write_atomic's errors name the path already ("cannot write PATH: …").
    let named = |e: std::io::Error| Error::new(ErrorKind::Io, e.to_string());
    std::fs::create_dir_all(dir).map_err(|e| io(e, dir))?;
    let json = serde_json::to_string_pretty(r).expect("report serializes");
    let jp = dir.join("results.json");
    write_atomic(&jp, (json + "\n").as_bytes()).map_err(named)?;
    plots(r, dir)?;
    let mut md = String::new();
    md.push_str("# Lago (2004) Figures 5–8 on this machine\n\n");
    md.push_str(&format!(
        "firmtime {} · `{}` · kernel {} ({}) · clocksource {} · CPU {} · {}{}.\n\n",
        r.version,
        r.command,
        r.kernel,
        r.preempt,
        r.clocksource,
        r.cpu,
        r.conditions,
        if r.quick { " · **--quick**" } else { "" }
    ));
    md.push_str(&format!(
        "Started {} and ended {} (Unix s): {} s. Steps of {} s after {} s of idle baseline per point; ramp from {:.0} % by {:.0} %, then by {:.0} % after the first failure. A step fails when its JACK xruns or its overruns (cycles the rack measured longer than the period) exceed the idle rate's expectation plus max(1, 3√λ), or more than 0.1 % of its periods got a late remote result.\n\n",
        r.started_unix_s,
        r.ended_unix_s,
        r.ended_unix_s.saturating_sub(r.started_unix_s),
        r.timing.step_s,
        r.timing.baseline_s,
        r.timing.start * 100.0,
        r.timing.coarse * 100.0,
        r.timing.fine * 100.0
    ));
    md.push_str(
        "## The paper (Lago 2004, §7.3)\n\n| Figure | Configuration | Lago |\n|---|---|---|\n",
    );
    for (f, what, v) in PAPER {
        md.push_str(&format!("| {f} | {what} | {v} |\n"));
    }
    md.push_str("\n## This machine\n\n| Figure | Rate | Period | Placement | Idle xruns / overruns | Usable fraction | Central user | Central sys | DSP load |\n|---|---|---|---|---|---|---|---|---|\n");
    for p in &r.points {
        let last = p.steps.iter().rev().find(|s| s.passed).or(p.steps.last());
        let place = match p.spec.placement {
            Placement::Local => "local waste_time".to_string(),
            Placement::Remote { workers, window } => {
                format!("{workers} worker(s), window {window}")
            }
        };
        md.push_str(&format!(
            "| {} | {} Hz | {} frames ({:.2} ms) | {} | {} / {} in {:.1} s | {} | {} | {} | {} |\n",
            p.spec.figure,
            p.spec.rate,
            p.spec.period_frames,
            p.period_ms,
            place,
            p.baseline_xruns,
            p.baseline_overruns,
            p.baseline_s,
            if p.spec.fixed.is_some() {
                format!(
                    "fixed {}{}",
                    pct(p.spec.fixed),
                    if p.usable_fraction.is_some() {
                        ""
                    } else {
                        " (failed)"
                    }
                )
            } else {
                pct(p.usable_fraction)
            },
            last.map_or("-".into(), |s| format!("{:.1} %", s.central_user * 100.0)),
            last.map_or("-".into(), |s| format!("{:.1} %", s.central_sys * 100.0)),
            last.map_or("-".into(), |s| format!("{:.1} %", s.dsp_load)),
        ));
    }
    md.push_str("\nCentral CPU is this process (the rack's JACK client and its sessions) plus jackd, as a fraction of one CPU, during the last passing step. The workers' CPU is not central: they are separate processes, as Lago's were separate machines.\n\n");
    md.push_str("Plots: fig5.png (usable fraction vs period, local), fig6.png (usable fraction per worker vs workers, window 0), fig7.png (central CPU vs workers, window 2), fig8.png (usable fraction vs period, window 1). Raw steps: results.json.\n");
    let mp = dir.join("report.md");
    write_atomic(&mp, md.as_bytes()).map_err(named)?;
    Ok(())
}

type Series = (String, Vec<(f64, f64)>);

fn plots(r: &ExperimentReport, dir: &Path) -> Result<()> {
    use std::collections::BTreeMap;
    let font = firmtime_plot::font_path();
    firmtime_plot::use_font(&font).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    let mut figs: BTreeMap<u8, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for p in &r.points {
        let (key, x, y) = match (p.spec.figure, &p.spec.placement) {
            (5, _) => (
                format!("{} Hz", p.spec.rate),
                p.period_ms,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            (6, Placement::Remote { workers, .. }) => (
                format!("{} Hz, {:.2} ms", p.spec.rate, p.period_ms),
                *workers as f64,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            (7, Placement::Remote { workers, .. }) => {
                let s = p.steps.last();
                let u = s.map_or(0.0, |s| s.central_user * 100.0);
                let sy = s.map_or(0.0, |s| s.central_sys * 100.0);
                figs.entry(7)
                    .or_default()
                    .entry(format!("{} Hz sys", p.spec.rate))
                    .or_default()
                    .push((*workers as f64, sy));
                (format!("{} Hz user", p.spec.rate), *workers as f64, u)
            }
            (8, Placement::Remote { workers, .. }) => (
                format!("{} Hz, {workers} workers", p.spec.rate),
                p.period_ms,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            _ => continue,
        };
        figs.entry(p.spec.figure)
            .or_default()
            .entry(key)
            .or_default()
            .push((x, y));
    }
    for (fig, series) in figs {
        let (title, xl, yl) = match fig {
            5 => (
                "Fig. 5: usable fraction, local waste_time",
                "period (ms)",
                "usable (% of period)",
            ),
            6 => (
                "Fig. 6: usable fraction per worker, window 0",
                "workers",
                "usable (% of period)",
            ),
            7 => (
                "Fig. 7: central CPU, window 2, 50 % load",
                "workers",
                "central CPU (% of one CPU)",
            ),
            _ => (
                "Fig. 8: usable remote fraction, window 1",
                "period (ms)",
                "usable (% of period)",
            ),
        };
        let series: Vec<Series> = series.into_iter().collect();
        let path = dir.join(format!("fig{fig}.png"));
        line_png(&path, title, xl, yl, &series)
            .map_err(|e| Error::new(ErrorKind::Io, format!("plot {}: {e}", path.display())))?;
    }
    Ok(())
}

/// One figure: each series' points in x order, on axes from zero (y to at
/// least 100 %).
fn line_png(
    path: &Path,
    title: &str,
    xl: &str,
    yl: &str,
    series: &[Series],
) -> firmtime_plot::Result<()> {
    use firmtime_plot as plot;
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let xmax = xs.fold(0.0f64, f64::max) * 1.1 + 0.5;
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(100.0f64, f64::max)
        * 1.05;
    let sorted: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, pts)| {
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (name.as_str(), pts)
        })
        .collect();
    let lines: Vec<plot::Series<'_>> = sorted
        .iter()
        .map(|(name, pts)| plot::Series::new(name, pts))
        .collect();
    plot::chart_png_on(path, title, xl, yl, &lines, 0.0..xmax, 0.0..ymax)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::plan;
    use crate::experiment::results::sample_report;

    #[test]
    fn report_writes_json_markdown_and_one_plot_per_figure() {
        let r = sample_report(&plan(true));
        let dir = std::env::temp_dir().join(format!("firmtime-rack-report-{}", std::process::id()));
        write_report(&r, &dir).unwrap();
        let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
        assert_eq!(json, serde_json::to_string_pretty(&r).unwrap() + "\n");
        assert!(std::fs::read_to_string(dir.join("report.md"))
            .unwrap()
            .contains("| 5 | 44100 Hz |"));
        for f in 5..=8 {
            let png = std::fs::read(dir.join(format!("fig{f}.png"))).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "fig{f}.png");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
