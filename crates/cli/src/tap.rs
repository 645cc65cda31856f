//! `firmtime tap`: experiment files (check, import from FTAP), running
//! sessions of trials through a MIDI backend (`run`), replaying a trial
//! (`replay`) and analysis of recorded trials.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use firmtime_plot::{chart_png, Mark, Series};
use firmtime_tap::analysis::{self, AnalysisConfig, Phase, TrialAnalysis};
use firmtime_tap::certificate::Recorded;
use firmtime_tap::{data, ftap, ftap_out, Experiment};

mod run;
mod status;

use crate::args::{self, Outcome, UsageError};
use run::{ReplayArgs, RunArgs};

/// Arguments of `firmtime tap`.
#[derive(Debug, Args)]
pub struct TapArgs {
    #[command(subcommand)]
    command: TapCommand,
}

#[derive(Debug, Subcommand)]
enum TapCommand {
    /// Convert an FTAP parameter file into a firmtime experiment file (TOML).
    ///
    /// Unknown keywords and unparseable TRIGGER lines are errors with their
    /// line number. Remarks (e.g. a missing END_EXP) go to stderr.
    ImportFtap(ImportArgs),
    /// Write recorded trials in FTAP's output form (`TRIAL.abs`) for FTAP
    /// analysis scripts.
    ///
    /// One `#` header (parameters as FTAP keywords, self-checks, the timing
    /// certificate, how the trial ended) and one row per MIDI event: `ms type on chan note vel
    /// seq sched_ms`, type K keystroke, F feedback, M metronome, T trigger,
    /// J masking. Needs each trial's JSON sidecar beside its CSV. Which
    /// parts follow FTAP's documentation and which are firmtime's choice:
    /// docs/TAP.md §9.
    ExportFtap(ExportFtapArgs),
    /// Validate an experiment file and print what the trial will do.
    ///
    /// Errors name the line and column. Exit status 1 if the file is invalid.
    Check(CheckArgs),
    /// Run a session: trials of one or more experiment files for a subject.
    ///
    /// Each trial is written when it ends (CSV + JSON sidecar, atomically):
    /// a crash or `kill -9` loses only the running trial; SIGINT (Ctrl-C),
    /// SIGTERM (systemd, `timeout`) and SIGHUP (a closing terminal) each end
    /// the running trial, keep it flagged incomplete (the sidecar's
    /// `stopped_by` names the signal), and stop the session.
    ///
    /// Each late output gets a cause in the trial's self-checks and on a
    /// line after the trial's: the setup (a feedback delay under the
    /// backend's minimum, an output due at once), the engine woken late
    /// (named, where tracefs is usable — root —: a task, an interrupt, the
    /// VM…) or the backend side (a late JACK cycle). See docs/TAP.md §5.
    ///
    /// Input stamped before a trial's start (a keyboard already playing
    /// while the prompt waits) is dropped, not trial data: no row, no
    /// feedback, no keystroke count; it is counted in the sidecar's
    /// `self_checks.input_before_start` and said after the trial.
    ///
    /// An input that goes away during a trial (a JACK port disconnected,
    /// the client feeding it gone, the server shut down, a raw device's
    /// error or end of file) ends the trial at that moment: kept, flagged
    /// incomplete, the cause and time in the sidecar's `input_lost`, an
    /// `INPUT LOST` line on stderr; the session stops with exit status 1.
    ///
    /// Before the session a timing certificate is taken (as `tap certify`:
    /// the audio loop, MIDI stamping against the frame clock, the feedback
    /// delay as scheduled against as emitted), printed, and recorded in
    /// every trial's sidecar (`certificate`), CSV (`certificate` rows) and
    /// `.abs` header; `--no-certify` records "not certified, by request".
    /// A failed check is a warning: the session goes on.
    ///
    /// On a terminal a status line is redrawn during each trial (trial n/N,
    /// elapsed and time left, taps heard, beats, late outputs, xruns, input
    /// dropped before the start, INPUT LOST); piped, only the lines before
    /// and after each trial.
    Run(RunArgs),
    /// Play a recorded trial back through a MIDI backend (FTAP's playftap).
    Replay(ReplayArgs),
    /// Take the timing certificate of a session (what `tap run` takes before
    /// each session) and print it: a self-test of the paths the experiments use.
    ///
    /// Three checks, each passed, FAILED or not tested (with the reason):
    /// the audio loop (a test signal out and back in, `audio roundtrip`:
    /// inside JACK with --loop self, through a cable with --loop
    /// CAPTURE_PORT), MIDI stamping against the backend's frame clock
    /// (probe notes through a MIDI loop inside JACK: their input frames and
    /// time stamps against the frames they went out at), and the feedback
    /// delay as scheduled against as emitted (each returned probe answered
    /// as a keystroke, with the experiments' delays, on their output: MIDI
    /// or the audio synth). The checks run on clients of their own beside
    /// the session's (`firmtime-tap-certify`, `firmtime-tap-certify-loop`),
    /// never on its ports, and play no sound to the subject.
    ///
    /// `tap run` records the certificate in every trial's sidecar
    /// (`certificate`), as `certificate` rows at the top of its CSV and in
    /// the `.abs` header; `tap analyze` prints it beside the results.
    /// Format: docs/TAP.md §11. Exit status 1 when a check FAILED.
    Certify(run::certify::CertifyArgs),
    /// Analyze trial CSVs: inter-tap intervals, asynchronies, missing and
    /// double taps, drift, Wing–Kristofferson clock and motor variance.
    ///
    /// After the table, each trial's timing certificate (`tap certify`,
    /// docs/TAP.md §11), once for trials that share one (a session's): from
    /// its sidecar, else the CSV's `certificate` rows; a trial recorded
    /// before firmtime took certificates says "no timing certificate".
    ///
    /// A trial whose JSON sidecar (beside its CSV) flags a self-check gets
    /// one line on stderr first: interrupted, lost taps, xruns, late outputs
    /// with their causes.
    ///
    /// A trial whose figures are no result gets a `FLAG trial: …` line on
    /// stderr (and `flags` in --json): its input was lost (the sidecar's
    /// `input_lost`), it has taps before its start (negative times, in files
    /// recorded before firmtime dropped them: left out), it has no tap at
    /// all, its synchronization phase has no
    /// tap while two or more beats sounded, or its continuation phase has
    /// no tap although the trial went on two inter-beat intervals or more
    /// after the metronome. Everything is still analyzed and written.
    ///
    /// Exit status: 0 nothing flagged; 1 a trial was flagged; 2 a file
    /// could not be read or an option is wrong.
    Analyze(AnalyzeArgs),
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// The FTAP parameter file.
    file: PathBuf,
    /// Where to write the experiment file (`-` or absent: stdout).
    #[arg(short, long, value_name = "OUT.toml")]
    out: Option<PathBuf>,
    /// Write the experiment and the import's notes as JSON to PATH (`-` or a bare --json: stdout); the TOML then goes
    /// to stderr unless --out names a file.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ExportFtapArgs {
    /// Trial CSV files written by `firmtime tap run` (each with its `.json` sidecar).
    #[arg(required = true, value_name = "TRIAL.csv")]
    trials: Vec<PathBuf>,
    /// Write `TRIAL.abs` into DIR (default: beside each CSV).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the list of files written as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The experiment file.
    experiment: PathBuf,
    /// Write the verdict and the experiment as read as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct AnalyzeArgs {
    /// Trial CSV files written by `firmtime tap run`.
    #[arg(required = true, value_name = "TRIAL.csv")]
    trials: Vec<PathBuf>,
    /// Write summary.csv, summary.png (mean ITI ± sd per phase per trial) and,
    /// per trial, TRIAL-taps.csv, TRIAL-iti.png (intervals by phase) and
    /// TRIAL-asynchrony.png (tap − beat) into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Taps closer than this to the previous one are double taps, 0s to 10s [default: 50ms].
    #[arg(long, value_name = "D", value_parser = args::duration_upto(std::time::Duration::from_secs(10), "10s"),
          conflicts_with = "debounce_ms")]
    debounce: Option<std::time::Duration>,
    /// The older spelling of --debounce: milliseconds as a bare number (0–10000).
    #[arg(long, value_name = "MS", hide = true, value_parser = args::float_in(0.0, 10_000.0, " ms"))]
    debounce_ms: Option<f64>,
    /// A continuation interval above this multiple of the beat interval is a
    /// gap (missing taps): 1–100.
    #[arg(long, default_value_t = 1.5, value_name = "X", value_parser = args::float_in(1.0, 100.0, ""))]
    gap_factor: f64,
    /// Write every trial's analysis (phases, taps, Wing–Kristofferson) as JSON to PATH (`-` or a bare --json: stdout); see docs/TAP.md.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// Runs `firmtime tap …`.
pub fn run(a: TapArgs) -> anyhow::Result<Outcome> {
    match a.command {
        TapCommand::ImportFtap(a) => import(a),
        TapCommand::ExportFtap(a) => export_ftap(a),
        TapCommand::Check(a) => check(a),
        TapCommand::Analyze(a) => analyze(a),
        TapCommand::Run(a) => run::run(a),
        TapCommand::Replay(a) => run::replay(a),
        TapCommand::Certify(a) => run::certify::certify(a),
    }
}

fn export_ftap(a: ExportFtapArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    // Every trial is converted before any file is written: one bad trial
    // leaves no half-done set behind.
    let mut done = Vec::with_capacity(a.trials.len());
    for csv in &a.trials {
        let text = ftap_out::export_trial(csv).map_err(|e| anyhow::anyhow!("{e}"))?;
        done.push((ftap_out::output_path(csv, a.out.as_deref()), text));
    }
    let mut written = Vec::with_capacity(done.len());
    for ((path, text), csv) in done.into_iter().zip(&a.trials) {
        data::write_atomic(&path, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("firmtime: wrote {}", path.display());
        written.push(serde_json::json!({"trial": csv, "abs": path}));
    }
    if let Some(p) = &a.json {
        args::write_json(p, &serde_json::json!({ "written": written }))?;
    }
    Ok(Outcome::Ok)
}

fn import(a: ImportArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("cannot read {}", a.file.display()))?;
    let name = a
        .file
        .file_stem()
        .map_or_else(|| "ftap".into(), |s| s.to_string_lossy().into_owned());
    let imp =
        ftap::import(&text, &name).map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
    for n in &imp.notes {
        eprintln!("firmtime: note: {n}");
    }
    let toml = format!(
        "# Imported from {} by firmtime tap import-ftap (see docs/TAP.md).\n{}",
        a.file.display(),
        imp.experiment.to_toml()?
    );
    let written = match &a.out {
        Some(p) if p.as_os_str() != "-" => {
            data::write_atomic(p, toml.as_bytes())?;
            eprintln!("firmtime: wrote {}", p.display());
            Some(p.clone())
        }
        _ => {
            // With the JSON on stdout, the TOML goes to stderr.
            let _redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
            print!("{toml}");
            None
        }
    };
    if let Some(p) = &a.json {
        args::write_json(
            p,
            &serde_json::json!({
                "source": a.file,
                "written": written,
                "notes": imp.notes,
                "experiment": imp.experiment,
            }),
        )?;
    }
    Ok(Outcome::Ok)
}

fn check(a: CheckArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    let (outcome, experiment, error) = match Experiment::load(&a.experiment) {
        Ok(e) => {
            print!("{}", e.summary());
            println!(
                "{}: {}",
                a.experiment.display(),
                crate::colour::paint("ok", crate::colour::Hue::Green, crate::colour::stdout())
            );
            (Outcome::Ok, Some(e), None)
        }
        Err(e) if e.kind() == firmtime_tap::ErrorKind::Io => bail!("{e}"),
        Err(e) => {
            eprintln!("{}: {e}", a.experiment.display());
            (Outcome::Failed, None, Some(e.to_string()))
        }
    };
    drop(redirect);
    if let Some(p) = &a.json {
        args::write_json(
            p,
            &serde_json::json!({
                "file": a.experiment,
                "valid": experiment.is_some(),
                "error": error,
                "experiment": experiment,
            }),
        )?;
    }
    Ok(outcome)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.1}", x / 1000.0))
}

/// The sidecar beside a trial's CSV, when there is a readable one.
fn sidecar_of(csv: &Path) -> Option<data::Sidecar> {
    let text = std::fs::read_to_string(csv.with_extension("json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// What the sidecar says is wrong with the trial, in one line
/// (`self-checks: …`); `None` when every self-check is clean.
fn self_check_note(side: &data::Sidecar) -> Option<String> {
    let c = &side.self_checks;
    let mut parts = Vec::new();
    if side.incomplete {
        parts.push(match &side.input_lost {
            Some(l) => format!("incomplete (input lost: {})", l.cause),
            None => "incomplete (interrupted)".to_string(),
        });
    }
    if c.input_overruns + c.events_dropped > 0 {
        parts.push(format!(
            "{} input overruns and {} events dropped: taps may be missing",
            c.input_overruns, c.events_dropped
        ));
    }
    if c.input_malformed > 0 {
        parts.push(format!(
            "{} malformed input events: taps may be missing",
            c.input_malformed
        ));
    }
    if c.outputs_refused + c.outputs_unreported > 0 {
        parts.push(format!(
            "{} outputs refused by the backend and {} unreported: not in the data",
            c.outputs_refused, c.outputs_unreported
        ));
    }
    if c.input_before_start > 0 {
        parts.push(format!(
            "{} input events before the trial's start dropped (not trial data)",
            c.input_before_start
        ));
    }
    if c.input_after_end > 0 {
        parts.push(format!(
            "{} input events after the trial's end dropped (not trial data)",
            c.input_after_end
        ));
    }
    if c.xruns + c.frame_gaps > 0 {
        parts.push(format!(
            "{} xruns, {} dropped cycles",
            c.xruns, c.frame_gaps
        ));
    }
    if c.late_outputs > 0 {
        parts.push(c.late_summary());
    }
    (!parts.is_empty()).then(|| format!("self-checks: {}", parts.join("; ")))
}

/// The timing certificates beside the results (stdout, after the table):
/// one block per run of trials with the same certificate (a session's).
fn print_certificates(results: &[(String, TrialAnalysis)], certs: &[Recorded]) {
    let mut i = 0;
    while i < certs.len() {
        let mut j = i + 1;
        while j < certs.len() && certs[j] == certs[i] {
            j += 1;
        }
        let names = if j - i == 1 {
            results[i].0.clone()
        } else {
            format!("{} … {} ({} trials)", results[i].0, results[j - 1].0, j - i)
        };
        match &certs[i] {
            Recorded::Sidecar(c) => {
                let lines = c.lines();
                println!("{names}: {}", lines[0]);
                for l in &lines[1..] {
                    println!("{l}");
                }
            }
            other => println!("{names}: {}", other.summary()),
        }
        i = j;
    }
}

/// The `FLAG` lines of one trial: its input lost (from its sidecar), its
/// phases with no input where input was expected.
fn trial_flags(side: Option<&data::Sidecar>, r: &TrialAnalysis) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(l) = side.and_then(|s| s.input_lost.as_ref()) {
        flags.push(format!(
            "input lost at {:.3} s ({}): {}; the trial ended there",
            l.at_us as f64 / 1e6,
            l.cause,
            l.words
        ));
    }
    for f in &r.flags {
        flags.push(match f.phase {
            Some(p) => format!("{} phase: {}", p.as_str(), f.message),
            None => f.message.clone(),
        });
    }
    flags
}

fn analyze(a: AnalyzeArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let debounce_us = match (a.debounce, a.debounce_ms) {
        (Some(d), _) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        (None, Some(ms)) => (ms * 1000.0).round() as i64,
        (None, None) => 50_000,
    };
    if !(a.gap_factor > 1.0 && a.gap_factor.is_finite()) {
        return Err(UsageError(format!(
            "--gap-factor must be more than 1, got {}",
            a.gap_factor
        ))
        .into());
    }
    let cfg = AnalysisConfig {
        debounce_us,
        gap_factor: a.gap_factor,
    };
    let redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    let mut notes = Vec::new();
    let mut flags: Vec<Vec<String>> = Vec::new();
    let mut results = Vec::new();
    let mut certificates = Vec::new();
    for path in &a.trials {
        // A file that cannot be read is exit 2 (TAP.md), not 1 ("flagged").
        let text = std::fs::read_to_string(path)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
        let (events, cert_rows) = data::read_csv_certified(&text)
            .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
        let side = sidecar_of(path);
        certificates.push(
            match (side.as_ref().and_then(|s| s.certificate.clone()), cert_rows) {
                (Some(c), _) => Recorded::Sidecar(Box::new(c)),
                (None, rows) if !rows.is_empty() => Recorded::Rows(rows),
                (None, _) => Recorded::None,
            },
        );
        let note = side.as_ref().and_then(self_check_note);
        if let Some(note) = &note {
            eprintln!("{}: {note}", trial_name(path));
        }
        notes.push(note);
        let r = analysis::analyze(&events, &cfg);
        flags.push(trial_flags(side.as_ref(), &r));
        results.push((trial_name(path), r));
    }
    let mut table = crate::table::new(
        &[
            "trial", "phase", "taps", "dbl", "miss", "ITI ms", "sd ms", "async ms", "sd ms",
            "drift ms", "clock sd", "motor sd",
        ],
        &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    );
    for (name, r) in &results {
        for p in &r.phases {
            let (c, m) = match p.wk {
                Some(w) if w.model_holds => (
                    format!("{:.1}", w.clock_var.sqrt() / 1000.0),
                    format!("{:.1}", w.motor_var.sqrt() / 1000.0),
                ),
                Some(_) => ("(model)".into(), "(model)".into()),
                None => ("-".into(), "-".into()),
            };
            table.add_row([
                name.clone(),
                p.phase.as_str().to_string(),
                p.taps.to_string(),
                p.double_taps.to_string(),
                p.missing.to_string(),
                fmt_ms(p.iti_mean_us),
                fmt_ms(p.iti_sd_us),
                fmt_ms(p.async_mean_us),
                fmt_ms(p.async_sd_us),
                p.drift_us_per_iti
                    .map_or("-".into(), |d| format!("{:.3}", d / 1000.0)),
                c,
                m,
            ]);
        }
    }
    print!("{}", crate::table::render(&table));
    print_certificates(&results, &certificates);
    // After the table, where they are seen last: figures that are no result.
    for ((name, _), fl) in results.iter().zip(&flags) {
        for f in fl {
            eprintln!("FLAG {name}: {f}");
        }
    }
    if results.iter().any(|(_, r)| {
        r.phases
            .iter()
            .any(|p| p.wk.is_some_and(|w| !w.model_holds))
    }) {
        eprintln!("firmtime: note: (model) = lag-1 autocovariance outside [−var/2, 0]; the Wing–Kristofferson variances are not meaningful there (see summary.csv for the raw figures)");
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        data::write_atomic(
            &dir.join("summary.csv"),
            analysis::summary_csv(&results).as_bytes(),
        )?;
        for (name, r) in &results {
            data::write_atomic(
                &dir.join(format!("{name}-taps.csv")),
                analysis::taps_csv(r).as_bytes(),
            )?;
        }
        let pngs = write_plots(dir, &results)?;
        eprintln!(
            "firmtime: wrote {}/summary.csv, {} per-trial tap files and {pngs} plots (PNG)",
            dir.display(),
            results.len()
        );
    }
    drop(redirect);
    if let Some(p) = &a.json {
        let trials: Vec<_> = results
            .iter()
            .zip(&a.trials)
            .zip(&notes)
            .zip(&flags)
            .zip(&certificates)
            .map(|(((((name, r), file), note), fl), cert)| {
                serde_json::json!({
                    "trial": name,
                    "file": file,
                    "self_check_note": note,
                    "flags": fl,
                    "certificate": match cert {
                        Recorded::Sidecar(c) => serde_json::to_value(c).unwrap_or_default(),
                        _ => serde_json::Value::Null,
                    },
                    "certificate_note": cert.summary(),
                    "analysis": r,
                })
            })
            .collect();
        args::write_json(
            p,
            &serde_json::json!({
                "config": {"debounce_us": cfg.debounce_us, "gap_factor": cfg.gap_factor},
                "trials": trials,
            }),
        )?;
    }
    let flagged = flags.iter().filter(|f| !f.is_empty()).count();
    if flagged > 0 {
        eprintln!(
            "firmtime: {flagged} of {} trial(s) flagged (FLAG lines above): their figures are no result; exit status 1",
            results.len()
        );
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

const SYNC_COLOR: (u8, u8, u8) = (31, 119, 180);
const CONT_COLOR: (u8, u8, u8) = (255, 127, 14);
const GAP_COLOR: (u8, u8, u8) = (214, 39, 40);

fn series<'a>(
    name: &'a str,
    points: &'a [(f64, f64)],
    mark: Mark,
    color: (u8, u8, u8),
) -> Series<'a> {
    Series {
        mark,
        color: Some(color),
        ..Series::new(name, points)
    }
}

/// Writes `<trial>-iti.png`, `<trial>-asynchrony.png` (when the trial has
/// asynchronies) and `summary.png` into `dir`; returns how many were written.
fn write_plots(dir: &Path, results: &[(String, TrialAnalysis)]) -> anyhow::Result<usize> {
    let ms = |us: i64| us as f64 / 1000.0;
    let mut written = 0;
    for (name, r) in results {
        let pick = |phase: Phase, gap: bool| -> Vec<(f64, f64)> {
            r.taps
                .iter()
                .filter(|t| t.phase == phase && t.gap == gap)
                .filter_map(|t| t.iti_us.map(|i| (f64::from(t.number), ms(i))))
                .collect()
        };
        let sync = pick(Phase::Synchronization, false);
        let cont = pick(Phase::Continuation, false);
        let gaps = pick(Phase::Continuation, true);
        let mut s = Vec::new();
        if !sync.is_empty() {
            s.push(series(
                "synchronization",
                &sync,
                Mark::LinePoints,
                SYNC_COLOR,
            ));
        }
        if !cont.is_empty() {
            s.push(series("continuation", &cont, Mark::LinePoints, CONT_COLOR));
        }
        if !gaps.is_empty() {
            s.push(series("gap (left out)", &gaps, Mark::Points, GAP_COLOR));
        }
        if s.is_empty() {
            eprintln!("firmtime: note: {name} has fewer than 2 taps: no ITI plot");
        } else {
            let p = dir.join(format!("{name}-iti.png"));
            chart_png(
                &p,
                &format!("{name}: inter-tap intervals"),
                "tap number",
                "inter-tap interval (ms)",
                &s,
            )
            .with_context(|| format!("plotting {}", p.display()))?;
            written += 1;
        }

        let asy: Vec<(f64, f64)> = r
            .taps
            .iter()
            .filter_map(|t| t.asynchrony_us.map(|a| (f64::from(t.number), ms(a))))
            .collect();
        if asy.is_empty() {
            eprintln!(
                "firmtime: note: {name} has no taps matched to metronome beats: no asynchrony plot"
            );
        } else {
            let (lo, hi) = asy
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                    (l.min(p.0), h.max(p.0))
                });
            let zero = [(lo, 0.0), (hi, 0.0)];
            let p = dir.join(format!("{name}-asynchrony.png"));
            chart_png(
                &p,
                &format!("{name}: asynchrony to the metronome (tap − beat)"),
                "tap number",
                "asynchrony (ms; negative = tap early)",
                &[
                    series("tap − beat", &asy, Mark::LinePoints, SYNC_COLOR),
                    series("beat", &zero, Mark::Line, (0, 0, 0)),
                ],
            )
            .with_context(|| format!("plotting {}", p.display()))?;
            written += 1;
        }
    }

    // Summary: mean ITI ± sd per phase, trials numbered in the order given.
    let per_phase = |k: usize, dx: f64| -> (Vec<(f64, f64)>, Vec<f64>) {
        results
            .iter()
            .enumerate()
            .filter_map(|(i, (_, r))| {
                let p = &r.phases[k];
                Some((
                    (i as f64 + 1.0 + dx, p.iti_mean_us? / 1000.0),
                    p.iti_sd_us? / 1000.0,
                ))
            })
            .unzip()
    };
    let (sp, ss) = per_phase(0, -0.08);
    let (cp, cs) = per_phase(1, 0.08);
    let mut s = Vec::new();
    if !sp.is_empty() {
        s.push(Series {
            spread: &ss,
            ..series("synchronization (mean ± sd)", &sp, Mark::Points, SYNC_COLOR)
        });
    }
    if !cp.is_empty() {
        s.push(Series {
            spread: &cs,
            ..series("continuation (mean ± sd)", &cp, Mark::Points, CONT_COLOR)
        });
    }
    if s.is_empty() {
        eprintln!("firmtime: note: no trial has 2 or more kept intervals: no summary plot");
    } else {
        let p = dir.join("summary.png");
        let names: Vec<String> = results
            .iter()
            .enumerate()
            .map(|(i, (n, _))| format!("{} = {n}", i + 1))
            .collect();
        let mut title = String::from("mean inter-tap interval per trial");
        if results.len() <= 4 {
            title = format!("{title} ({})", names.join(", "));
        }
        chart_png(
            &p,
            &title,
            "trial (in the order given; see summary.csv)",
            "inter-tap interval (ms)",
            &s,
        )
        .with_context(|| format!("plotting {}", p.display()))?;
        written += 1;
    }
    Ok(written)
}

fn trial_name(p: &Path) -> String {
    p.file_stem()
        .map_or_else(|| "trial".into(), |s| s.to_string_lossy().into_owned())
}
