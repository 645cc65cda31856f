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

use crate::cyclic;
use crate::error::{Error, ErrorKind, Result};
use crate::load::LoadSpec;
use crate::measure::{stop_requested, Envelope, Progress};
use crate::measurement::{
    self, Clock, Cyclic, Frames, Interrupts, Kept, Measurement, Overhead, Partial, Sleep, Tails,
    Ticks, Trace, TraceOverhead, Unavailable,
};
use crate::output::{self, RtTestsHeader, ThreadHist};
use crate::report::{self, CyclicRow};
use crate::stats::LatencyHistogram;
use firmtime_plot as plot;
use firmtime_rt::sched::Policy;
use firmtime_rt::system::Provenance;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::measurement::Preset;

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
    /// Explain the periodic wake-up outliers from a trace (`--explain
    /// auto|on|off`, default auto: where tracefs is usable; see
    /// [`firmtime_trace::explain`]). `on` where it cannot run is refused
    /// before anything is measured (the CLI's check); here it is run where
    /// it can, like `auto`.
    pub explain: firmtime_trace::explain::ExplainMode,
    /// Trace events kept per condition (`--explain-max-events`).
    pub explain_max_events: usize,
    /// Kernel stacks of the tasks the traced threads preempted
    /// (`--kernel-stacks`, [`firmtime_trace::explain::stacks`]).
    pub kernel_stacks: bool,
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
        // The error names `path` itself (and never the temporary file).
        firmtime_rt::fs::write_atomic(&path, text.as_bytes())
            .map_err(|e| Error::new(ErrorKind::Output, e.to_string()))?;
        self.files.push(name.to_string());
        Ok(())
    }

    fn provenance(&self) -> Provenance {
        Provenance::begin(self.command_line.to_vec())
    }
}

/// What the steps of one `lab all` run have produced so far.
struct Run<'a> {
    cfg: &'a Config,
    w: Writer<'a>,
    sections: Vec<String>,
    failures: Vec<(String, String)>,
    kept: Kept,
    cyclic: Vec<(&'static str, &'static str, cyclic::CyclicResult)>,
    /// Steps begun, and how many this preset runs ([`Progress::step`]).
    step: usize,
    steps: usize,
}

impl Run<'_> {
    /// Tells `progress` that the next step, `name`, begins.
    fn next_step(&mut self, progress: &mut dyn Progress, name: &str) {
        self.step += 1;
        progress.step(self.step, self.steps, name);
    }
}

/// One step of `lab all`, whatever its measurement's types.
trait Step {
    /// Whether the step runs under `preset`.
    fn in_preset(&self, preset: Preset) -> bool;
    /// Runs the step, writing its files and its section into `run`. A
    /// measurement's own error is a failure in `run`, not an error here.
    fn run(&self, run: &mut Run<'_>, progress: &mut dyn Progress) -> Result<()>;
    /// The measurements it runs, each a step of the progress shown.
    fn parts(&self) -> usize {
        1
    }
}

/// A measurement's name as its step is shown (`clock: clock reads`).
fn step_name(name: &str) -> String {
    let what = match name {
        "clock" => "the clocks' read cost",
        "sleep" => "sleep overshoot",
        "tails" => "timer tails (Etsion et al. Table 6)",
        "overhead" => "kernel costs (Table 2)",
        "ticks" => "the idle CPUs' timer ticks",
        "frames" => "frame pacing",
        "interrupts" => "timer-interrupt overhead",
        "trace" => "the scheduler trace",
        "trace overhead" => "what tracing costs",
        _ => return name.to_string(),
    };
    format!("{name}: {what}")
}

/// A [`Measurement`] as a step: one JSON file, its section, what it keeps.
struct Each<M>(M);

impl<M: Measurement> Step for Each<M> {
    fn in_preset(&self, preset: Preset) -> bool {
        self.0.in_preset(preset)
    }

    fn run(&self, run: &mut Run<'_>, progress: &mut dyn Progress) -> Result<()> {
        let m = &self.0;
        let c = m.config(run.cfg.preset, &run.cfg.exe);
        run.next_step(progress, &step_name(m.name()));
        let p = run.w.provenance();
        match m.run(&c, progress) {
            Ok(r) => {
                run.w.json(&m.file(), m.kind(), r.partial(), &r, p)?;
                run.sections.extend(m.section(&r));
                m.keep(r, &mut run.kept);
            }
            Err(e) if measurement::is_unavailable(&e) && m.unavailable() != Unavailable::Fails => {
                if let Unavailable::Skipped(heading) = m.unavailable() {
                    run.sections
                        .push(format!("{heading}\n\nskipped: {}\n", e.message()));
                }
            }
            Err(e) => run.failures.push((m.name().into(), e.to_string())),
        }
        Ok(())
    }
}

/// Varoquaux / cyclictest under the four [`cyclic_conditions`]: a JSON file
/// and cyclictest's histogram and rt-tests JSON each, then the plots and
/// one section for all four.
struct CyclicConditions;

impl Step for CyclicConditions {
    fn in_preset(&self, _preset: Preset) -> bool {
        true
    }

    fn parts(&self) -> usize {
        cyclic_conditions().len()
    }

    fn run(&self, run: &mut Run<'_>, progress: &mut dyn Progress) -> Result<()> {
        use firmtime_trace::explain::Decision;
        let explain = match run.cfg.explain.decide(firmtime_trace::explain::available) {
            Decision::Run => Ok(()),
            Decision::Skip(why) | Decision::Refuse(why) => Err(why),
        };
        for (slug, label, policy, load) in cyclic_conditions() {
            if stop_requested() {
                break;
            }
            run.next_step(progress, &format!("periodic wake-ups, {label}"));
            let mut c = Cyclic.config(run.cfg.preset, &run.cfg.exe);
            c.policy = policy;
            c.load = load;
            c.explain = explain.is_ok().then(|| firmtime_trace::explain::Config {
                max_events: run.cfg.explain_max_events,
                kernel_stacks: run.cfg.kernel_stacks,
                ..firmtime_trace::explain::Config::default()
            });
            let p = run.w.provenance();
            let start_time = SystemTime::now();
            match Cyclic.run(&c, progress) {
                Ok(r) => {
                    run.w.json(
                        &format!("cyclic-{slug}.json"),
                        Cyclic.kind(),
                        r.partial,
                        &r,
                        p,
                    )?;
                    write_cyclictest_files(
                        &mut run.w,
                        slug,
                        &r,
                        start_time,
                        &run.cfg.command_line,
                    )?;
                    run.cyclic.push((slug, label, r));
                }
                Err(e) => run.failures.push((format!("cyclic {slug}"), e.to_string())),
            }
        }
        if !run.cyclic.is_empty() {
            let plots = write_cyclic_plots(&mut run.w, &run.cyclic, &mut run.failures);
            let refs: Vec<(&str, &str)> = plots
                .iter()
                .map(|(f, c)| (f.as_str(), c.as_str()))
                .collect();
            let rows = cyclic_rows(&run.cyclic);
            let mut section = report::cyclic_section(&rows, &refs);
            let explained: Vec<(&str, &firmtime_trace::explain::Explanation)> = run
                .cyclic
                .iter()
                .filter_map(|(_, label, r)| Some((*label, r.explain.as_ref()?)))
                .collect();
            section.push_str(&report::explain_section(
                &explained,
                explain.as_ref().err().map(String::as_str),
            ));
            run.sections.push(section);
        }
        Ok(())
    }
}

fn cyclic_rows<'r>(results: &'r [(&str, &str, cyclic::CyclicResult)]) -> Vec<CyclicRow<'r>> {
    results
        .iter()
        .map(|(_, label, r)| CyclicRow {
            label: (*label).to_string(),
            result: r,
        })
        .collect()
}

/// The verdict of a `lab all` report directory from its recorded
/// `cyclic-*.json` files (those present, in the report's order), as `lab
/// all` gave it when it wrote them.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming the file that cannot be read or parsed.
pub fn verdict_of(dir: &Path, doctor: &crate::doctor::Report) -> Result<report::Verdict> {
    let mut conditions = Vec::new();
    for (slug, label, _, _) in cyclic_conditions() {
        let path = dir.join(format!("cyclic-{slug}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{}: {e}", path.display()),
                ))
            }
        };
        let bad =
            |m: String| Error::new(ErrorKind::InvalidInput, format!("{}: {m}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        conditions.push(report::Condition::from_json(label, &v).map_err(bad)?);
    }
    Ok(report::verdict(&conditions, doctor))
}

/// Runs every measurement of `cfg.preset` and writes the report.
///
/// The measurements run in the report's order: clock reads, sleeps, the
/// four periodic wake-up conditions, Table 6 tails, Table 2 costs, the idle
/// CPUs' ticks, frame pacing, timer-interrupt overhead, the scheduler trace
/// (not in [`Preset::Quick`]) and what the trace costs.
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
    let mut run = Run {
        cfg,
        w: Writer {
            out: &cfg.out,
            files: Vec::new(),
            command_line: &cfg.command_line,
        },
        sections: Vec::new(),
        failures: Vec::new(),
        kept: Kept::default(),
        cyclic: Vec::new(),
        step: 0,
        steps: 0,
    };
    let started = run.w.provenance();

    let doctor = crate::doctor::run();
    run.w.text(
        "doctor.json",
        &(serde_json::to_string_pretty(&doctor)
            .map_err(|e| Error::new(ErrorKind::Output, e.to_string()))?
            + "\n"),
    )?;

    let tails = Each(Tails {
        exe: cfg.exe.clone(),
    });
    let steps: [&dyn Step; 10] = [
        &Each(Clock),
        &Each(Sleep),
        &CyclicConditions,
        &tails,
        &Each(Overhead),
        &Each(Ticks),
        &Each(Frames),
        &Each(Interrupts),
        &Each(Trace),
        &Each(TraceOverhead),
    ];
    run.steps = steps
        .iter()
        .filter(|s| s.in_preset(cfg.preset))
        .map(|s| s.parts())
        .sum();
    for step in steps {
        if stop_requested() {
            break;
        }
        if step.in_preset(cfg.preset) {
            step.run(&mut run, progress)?;
        }
    }

    let Run {
        mut w,
        mut sections,
        failures,
        kept,
        cyclic,
        ..
    } = run;
    sections.push(report::since_2003_section(&report::Since2003::collect(
        &started.system,
        kept.frames.as_ref(),
        kept.interrupts.as_ref(),
        kept.ticks,
        kept.trace.as_ref(),
        kept.tails.as_ref(),
    )));

    let partial = stop_requested();
    let conditions: Vec<report::Condition> = cyclic
        .iter()
        .map(|(_, label, r)| report::Condition::of(label, r))
        .collect();
    let verdict = report::verdict(&conditions, &doctor);

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
        cfg.preset.name(),
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
    let mut draw = |name: &str, caption: &str, f: &dyn Fn(&Path) -> plot::Result<()>| {
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
            "Wake-up latency per condition as OSADL plots it: 1 µs classes, log counts, one step line per condition; x up to the largest wake-up, or to about p99.99 with the later ones counted in the legend",
            &|p| {
                plot::histogram_png_with_period(
                    p,
                    "Periodic wake-up latency (µs)",
                    &series,
                    plot::Unit::Us,
                    Some(period),
                )
            },
        );
        draw(
            "cyclic-histogram-periods.png",
            "Every wake-up against the deadline, in units of the period (Varoquaux's plot): classes of 1/100 period, log counts, a dashed line at one period; the legend counts the wake-ups later than one period",
            &|p| {
                plot::histogram_png(
                    p,
                    "Wake-up latency against the period",
                    &series,
                    plot::Unit::Periods(period),
                )
            },
        );
        draw(
            "cyclic-cdf.png",
            "Fraction of wake-ups later than each latency (1 − CDF), log–log: p99 and p99.9 are the levels 0.01 and 0.001",
            &|p| plot::tail_png(p, "Wake-up latency tail (1 − CDF)", &series, Some(period)),
        );
    }
    if !summaries.is_empty() {
        draw(
            "cyclic-comparison.png",
            "p50 / p99 / p99.9 / max per condition",
            &|p| plot::comparison_png(p, "Wake-up latency per condition", &summaries),
        );
    }
    out
}
