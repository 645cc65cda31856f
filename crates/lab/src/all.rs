//! `firmtime lab all`: every measurement in one go, and the report.
//!
//! Runs the lab's measurements in turn — clock reads (Finney Table 1),
//! sleeps (Finney's process suspension), periodic wake-ups under four
//! conditions (Varoquaux; cyclictest), timer-signal tails (Etsion et al.
//! Table 6), basic costs (Etsion et al. Table 2), the idle CPUs' timer
//! interrupts, frame pacing (Etsion et al. Figs 1 and 5), timer-interrupt
//! overhead (Figs 2, 3, 8), outside `--quick` a scheduler trace of the
//! paper's workloads (Tables 3–5), and what that trace costs (klogger) —
//! followed by a summary of what changed since 2003 — and writes into one
//! directory: `report.md` (each paper's table beside this machine's numbers
//! and a plain-language verdict), one JSON envelope per measurement, PNG
//! plots, and cyclictest-format histograms. Ctrl-C stops the running
//! measurement; everything measured so far is written and the report is
//! flagged partial.

use crate::error::{Error, ErrorKind, Result};
use crate::load::LoadSpec;
use crate::measure::{stop_requested, Envelope, Progress};
use crate::output::{self, RtTestsHeader, ThreadHist};
use crate::report::{self, CyclicRow};
use crate::stats::LatencyHistogram;
use crate::{clockread, cyclic, frames, interrupts, overhead, plot, suspend, tails, ticks};
use firmtime_rt::sched::Policy;
use firmtime_rt::system::Provenance;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// A first look: under 3 minutes on 2 cores, fewer samples everywhere.
    Quick,
    /// The subcommands' defaults.
    Default,
    /// The papers' sample counts (takes long: Table 6 alone is ~40 minutes).
    Full,
}

/// What `lab all` runs and where it writes.
#[derive(Debug, Clone)]
pub struct Config {
    /// Sample counts.
    pub preset: Preset,
    /// Output directory (created if missing).
    pub out: PathBuf,
    /// The firmtime binary, for load children and tails workers.
    pub exe: PathBuf,
    /// The command line, recorded in every file.
    pub command_line: Vec<String>,
}

/// What `lab all` produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Files written, relative to the output directory.
    pub files: Vec<String>,
    /// The verdict at the top of the report.
    pub verdict: report::Verdict,
    /// True when interrupted: later measurements are missing.
    pub partial: bool,
    /// Measurements that failed with an error (name, message); the others ran.
    pub failures: Vec<(String, String)>,
}

/// The four periodic wake-up conditions: real-time or not, idle or under
/// Varoquaux's stress mix.
fn cyclic_conditions() -> [(&'static str, &'static str, Policy, Vec<LoadSpec>); 4] {
    [
        (
            "fifo-idle",
            "SCHED_FIFO 80, idle",
            Policy::Fifo { priority: 80 },
            vec![],
        ),
        (
            "fifo-stress",
            "SCHED_FIFO 80, stress",
            Policy::Fifo { priority: 80 },
            vec![LoadSpec::Stress],
        ),
        (
            "other-idle",
            "SCHED_OTHER, idle",
            Policy::Other { nice: 0 },
            vec![],
        ),
        (
            "other-stress",
            "SCHED_OTHER, stress",
            Policy::Other { nice: 0 },
            vec![LoadSpec::Stress],
        ),
    ]
}

struct Writer<'a> {
    out: &'a Path,
    files: Vec<String>,
    command_line: &'a [String],
}

impl Writer<'_> {
    fn json<T: Serialize>(
        &mut self,
        name: &str,
        kind: &str,
        partial: bool,
        v: &T,
        p: Provenance,
    ) -> Result<()> {
        let env = Envelope::new(kind, p, partial, v);
        let text = serde_json::to_string_pretty(&env)
            .map_err(|e| Error::new(ErrorKind::Output, format!("{name}: {e}")))?;
        self.text(name, &(text + "\n"))
    }

    fn text(&mut self, name: &str, text: &str) -> Result<()> {
        let path = self.out.join(name);
        let tmp = self.out.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Output,
                    format!("cannot write {}: {e}", path.display()),
                )
            })?;
        self.files.push(name.to_string());
        Ok(())
    }

    fn provenance(&self) -> Provenance {
        Provenance::begin(self.command_line.to_vec())
    }
}

/// Runs every measurement of `cfg.preset` and writes the report.
///
/// A measurement that fails with an error is recorded in
/// [`Outcome::failures`] and in the report; the others still run.
///
/// # Errors
/// [`ErrorKind::Output`] when the output directory cannot be created or a
/// file cannot be written.
pub fn run(cfg: &Config, progress: &mut dyn Progress) -> Result<Outcome> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot create {}: {e}", cfg.out.display()),
        )
    })?;
    let mut w = Writer {
        out: &cfg.out,
        files: Vec::new(),
        command_line: &cfg.command_line,
    };
    let started = w.provenance();
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut sections: Vec<String> = Vec::new();

    let doctor = crate::doctor::run();
    w.text(
        "doctor.json",
        &(serde_json::to_string_pretty(&doctor)
            .map_err(|e| Error::new(ErrorKind::Output, e.to_string()))?
            + "\n"),
    )?;

    let quick = cfg.preset == Preset::Quick;
    let full = cfg.preset == Preset::Full;

    // Finney Table 1.
    if !stop_requested() {
        let mut c = if full {
            clockread::Config::full()
        } else if quick {
            clockread::Config::quick()
        } else {
            clockread::Config::default()
        };
        c.load_exe = Some(cfg.exe.clone());
        let p = w.provenance();
        match clockread::run(&c, progress) {
            Ok(r) => {
                w.json("clock.json", "lab-clock", r.partial, &r, p)?;
                sections.push(report::clock_section(&r));
            }
            Err(e) => failures.push(("clock".into(), e.to_string())),
        }
    }

    // Finney's process suspension.
    if !stop_requested() {
        let c = if full {
            suspend::Config::full()
        } else if quick {
            suspend::Config::quick()
        } else {
            suspend::Config::default()
        };
        let p = w.provenance();
        match suspend::run(&c, progress) {
            Ok(r) => {
                w.json("sleep.json", "lab-sleep", r.partial, &r, p)?;
                sections.push(report::sleep_section(&r));
            }
            Err(e) => failures.push(("sleep".into(), e.to_string())),
        }
    }

    // Varoquaux / cyclictest, four conditions.
    let mut cyclic_results: Vec<(&str, &str, cyclic::CyclicResult)> = Vec::new();
    for (slug, label, policy, load) in cyclic_conditions() {
        if stop_requested() {
            break;
        }
        let mut c = if full {
            cyclic::Config::full()
        } else if quick {
            cyclic::Config::quick()
        } else {
            cyclic::Config::default()
        };
        c.policy = policy;
        c.load = load;
        c.load_exe = Some(cfg.exe.clone());
        let p = w.provenance();
        let start_time = SystemTime::now();
        match cyclic::run(&c, progress) {
            Ok(r) => {
                w.json(
                    &format!("cyclic-{slug}.json"),
                    "lab-cyclic",
                    r.partial,
                    &r,
                    p,
                )?;
                write_cyclictest_files(&mut w, slug, &r, start_time, &cfg.command_line)?;
                cyclic_results.push((slug, label, r));
            }
            Err(e) => failures.push((format!("cyclic {slug}"), e.to_string())),
        }
    }
    let rows: Vec<CyclicRow<'_>> = cyclic_results
        .iter()
        .map(|(_, label, r)| CyclicRow {
            label: (*label).to_string(),
            result: r,
        })
        .collect();
    if !rows.is_empty() {
        let plots = write_cyclic_plots(&mut w, &cyclic_results, &mut failures);
        let refs: Vec<(&str, &str)> = plots
            .iter()
            .map(|(f, c)| (f.as_str(), c.as_str()))
            .collect();
        sections.push(report::cyclic_section(&rows, &refs));
    }

    // The Etsion et al. results "What changed since 2003" draws on.
    let mut tails_result = None;
    let mut frames_result = None;
    let mut interrupts_result = None;
    let mut trace_result = None;
    let mut ticks_result = None;

    // Etsion et al. Table 6.
    if !stop_requested() {
        let c = if quick {
            tails::Config::quick()
        } else {
            tails::Config::full()
        };
        // The default preset keeps the paper's matrix but fewer alarms.
        let c = if cfg.preset == Preset::Default {
            tails::Config { alarms: 100, ..c }
        } else {
            c
        };
        let p = w.provenance();
        match tails::run(&c, &cfg.exe, progress) {
            Ok(r) => {
                w.json("tails.json", "lab-tails", r.partial, &r, p)?;
                sections.push(report::tails_section(&r));
                tails_result = Some(r);
            }
            Err(e) => failures.push(("tails".into(), e.to_string())),
        }
    }

    // Etsion et al. Table 2.
    if !stop_requested() {
        let c = if quick {
            overhead::Config::quick()
        } else {
            overhead::Config::full()
        };
        let p = w.provenance();
        match overhead::run(&c, progress) {
            Ok(r) => {
                w.json("overhead.json", "lab-overhead", r.partial, &r, p)?;
                sections.push(report::overhead_section(&r));
            }
            Err(e) => failures.push(("overhead".into(), e.to_string())),
        }
    }

    // Tickless idle: the local timer while nothing of the lab runs.
    if !stop_requested() {
        match ticks::measure(ticks::INTERVAL) {
            Ok(t) => {
                let p = w.provenance();
                w.json("ticks.json", "lab-ticks", false, &t, p)?;
                ticks_result = Some(t);
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => {}
            Err(e) => failures.push(("ticks".into(), e.to_string())),
        }
    }

    // Etsion et al. Figs 1 and 5: frame pacing.
    if !stop_requested() {
        // The default preset keeps frames short too: 20 cells of 30 s would dominate it.
        let mut c = if full {
            frames::Config::full()
        } else {
            frames::Config::quick()
        };
        c.load_exe = Some(cfg.exe.clone());
        let p = w.provenance();
        match frames::run(&c, progress) {
            Ok(r) => {
                w.json("frames.json", "lab-frames", r.partial, &r, p)?;
                sections.push(report::frames_section(&r));
                frames_result = Some(r);
            }
            Err(e) => failures.push(("frames".into(), e.to_string())),
        }
    }

    // Etsion et al. Figs 2, 3 and 8: timer-interrupt overhead.
    if !stop_requested() {
        let c = if full {
            interrupts::Config::full()
        } else {
            interrupts::Config::quick()
        };
        let p = w.provenance();
        match interrupts::run(&c, progress) {
            Ok(r) => {
                w.json("interrupts.json", "lab-interrupts", r.partial, &r, p)?;
                sections.push(report::interrupts_section(&r));
                interrupts_result = Some(r);
            }
            Err(e) => failures.push(("interrupts".into(), e.to_string())),
        }
    }

    // Etsion et al. Tables 3-5: a scheduler trace of the paper's workloads (not in --quick).
    if !quick && !stop_requested() {
        let c = if full {
            crate::billing::full()
        } else {
            crate::billing::quick()
        };
        let p = w.provenance();
        match crate::trace::run(&c, progress) {
            Ok(r) => {
                w.json("trace.json", "lab-trace", r.partial, &r, p)?;
                sections.push(report::trace_section(&r));
                trace_result = Some(r);
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => sections.push(format!(
                "## Effective quanta and billing (Etsion et al. 2003, Tables 3–5)\n\nskipped: {}\n",
                e.message()
            )),
            Err(e) => failures.push(("trace".into(), e.to_string())),
        }
    }

    // Issue 8, acceptance figure 1: what the trace costs (every preset).
    if !stop_requested() {
        let c = if full {
            crate::trace::overhead::Config::full()
        } else if quick {
            crate::trace::overhead::Config::quick()
        } else {
            crate::trace::overhead::Config::default()
        };
        let p = w.provenance();
        match crate::trace::overhead::run(&c, progress) {
            Ok(r) => {
                w.json(
                    "trace-overhead.json",
                    "lab-trace-overhead",
                    r.partial,
                    &r,
                    p,
                )?;
                sections.push(report::trace_overhead_section(&r));
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => sections.push(format!(
                "## Trace overhead (klogger, Etsion et al. 2003 §2.1)\n\nskipped: {}\n",
                e.message()
            )),
            Err(e) => failures.push(("trace overhead".into(), e.to_string())),
        }
    }

    sections.push(report::since_2003_section(&report::Since2003::collect(
        &started.system,
        frames_result.as_ref(),
        interrupts_result.as_ref(),
        ticks_result,
        trace_result.as_ref(),
        tails_result.as_ref(),
    )));

    let partial = stop_requested();
    let rt_row = rows
        .iter()
        .find(|r| r.label.contains("FIFO") && r.label.contains("stress"))
        .or_else(|| rows.iter().find(|r| r.label.contains("FIFO")));
    let other_row = rows
        .iter()
        .find(|r| r.label.contains("OTHER") && r.label.contains("stress"))
        .or_else(|| rows.iter().find(|r| r.label.contains("OTHER")));
    let verdict = report::verdict(rt_row, other_row, &doctor);

    let mut md = String::new();
    let mut ended = started.clone();
    ended.finish();
    let sys = &started.system;
    let _ = writeln!(
        md,
        "# firmtime lab report\n\n\
         {}Machine: {} — Linux {} ({}), preempt model {}, CONFIG_HZ {}, high-resolution timers {}, \
         clocksource {}, {} CPUs ({}), virtualization {}.\n\n\
         Preset `{}`; started {}, ended {}; firmtime {}. Command: `{}`.\n",
        if partial {
            "**PARTIAL: interrupted before every measurement ran.**\n\n"
        } else {
            ""
        },
        sys.hostname.as_deref().unwrap_or("unknown host"),
        sys.kernel_release,
        sys.arch,
        sys.preempt_model.name(),
        sys.config_hz.map_or("unknown".into(), |h| h.to_string()),
        match sys.high_res_timers {
            Some(true) => "active",
            Some(false) => "inactive",
            None => "unknown",
        },
        sys.clocksource.as_deref().unwrap_or("unknown"),
        sys.cpus_online,
        sys.cpu_model.as_deref().unwrap_or("unknown model"),
        sys.virtualization.as_deref().unwrap_or("none detected"),
        match cfg.preset {
            Preset::Quick => "quick",
            Preset::Default => "default",
            Preset::Full => "full",
        },
        started.started_utc,
        ended.ended_utc.as_deref().unwrap_or("?"),
        started.firmtime_version,
        cfg.command_line.join(" "),
    );
    md.push_str(&verdict.markdown());
    md.push('\n');
    if !failures.is_empty() {
        md.push_str("## Measurements that failed\n\n");
        for (name, msg) in &failures {
            let _ = writeln!(md, "- `{name}`: {msg}");
        }
        md.push('\n');
    }
    for s in &sections {
        md.push_str(s);
        md.push('\n');
    }
    md.push_str("## Files\n\n");
    for f in &w.files {
        let _ = writeln!(md, "- [`{f}`]({f})");
    }
    md.push_str(
        "\nJSON formats: docs/LAB-FORMATS.md; how each figure is taken: docs/METHODOLOGY.md.\n",
    );
    w.text("report.md", &md)?;

    Ok(Outcome {
        files: w.files,
        verdict,
        partial,
        failures,
    })
}

fn write_cyclictest_files(
    w: &mut Writer<'_>,
    slug: &str,
    r: &cyclic::CyclicResult,
    start_time: SystemTime,
    command_line: &[String],
) -> Result<()> {
    let hists: Vec<ThreadHist> = r.measured().map(|t| t.cyclictest.clone()).collect();
    if hists.is_empty() {
        return Ok(());
    }
    let mut text = Vec::new();
    output::write_cyclictest_histogram(&mut text, &hists, false)?;
    w.text(
        &format!("cyclic-{slug}.hist"),
        &String::from_utf8_lossy(&text),
    )?;
    let header = RtTestsHeader {
        cmdline: command_line.join(" "),
        version: env!("CARGO_PKG_VERSION").to_string(),
        start_time: output::rt_tests_timestamp(start_time),
        end_time: output::rt_tests_timestamp(SystemTime::now()),
        return_code: i32::from(r.partial),
        sysinfo: firmtime_rt::system::SystemInfo::collect(),
    };
    let mut json = Vec::new();
    output::write_rt_tests_json(&mut json, &header, &hists)?;
    w.text(
        &format!("cyclic-{slug}.rt-tests.json"),
        &String::from_utf8_lossy(&json),
    )
}

/// Writes the cyclic plots; returns (file, caption) of each written. A plot
/// that cannot be drawn (no font) is a recorded failure, not a lost run.
fn write_cyclic_plots(
    w: &mut Writer<'_>,
    results: &[(&str, &str, cyclic::CyclicResult)],
    failures: &mut Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut merged: Vec<(&str, LatencyHistogram)> = Vec::new();
    for (_, label, r) in results {
        let mut h = LatencyHistogram::new();
        for t in r.measured() {
            if let Err(e) = h.merge(&t.latency) {
                failures.push((format!("plot {label}"), e.to_string()));
            }
        }
        if !h.is_empty() {
            merged.push((label, h));
        }
    }
    let series: Vec<(&str, &LatencyHistogram)> = merged.iter().map(|(l, h)| (*l, h)).collect();
    let summaries: Vec<(&str, &crate::stats::Summary)> =
        results.iter().map(|(_, l, r)| (*l, &r.combined)).collect();
    let period = results
        .first()
        .map_or(1_000_000, |(_, _, r)| r.config.interval_ns);
    let mut out = Vec::new();
    let mut draw = |name: &str, caption: &str, f: &dyn Fn(&Path) -> Result<()>| {
        let path = w.out.join(name);
        match f(&path) {
            Ok(()) => {
                w.files.push(name.to_string());
                out.push((name.to_string(), caption.to_string()));
            }
            Err(e) => failures.push((format!("plot {name}"), e.to_string())),
        }
    };
    if !series.is_empty() {
        draw(
            "cyclic-histogram-us.png",
            "Wake-up latency per condition, µs, log counts",
            &|p| plot::histogram_png(p, "Periodic wake-up latency (µs)", &series, plot::Unit::Us),
        );
        draw(
            "cyclic-histogram-periods.png",
            "Wake-up latency in units of the period (Varoquaux's plot)",
            &|p| {
                plot::histogram_png(
                    p,
                    "Wake-up latency in periods",
                    &series,
                    plot::Unit::Periods(period),
                )
            },
        );
        draw(
            "cyclic-cdf.png",
            "Cumulative distribution per condition",
            &|p| plot::cdf_png(p, "Wake-up latency CDF", &series),
        );
    }
    if !summaries.is_empty() {
        draw(
            "cyclic-comparison.png",
            "p50 / p99 / max per condition",
            &|p| plot::comparison_png(p, "Wake-up latency per condition", &summaries),
        );
    }
    out
}
