//! `firmtime lab all`: every measurement and the report, in one directory.

use super::Common;
use crate::args::{self, UsageError};
use crate::progress::Bars;
use crate::Outcome;
use firmtime_lab::all::{self, Preset};
use firmtime_trace::explain::{Decision, ExplainMode};
use std::path::PathBuf;

/// Arguments of `firmtime lab all`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The papers' sample counts (long: Table 6 alone takes about 40 minutes).
    #[arg(long, conflicts_with = "quick")]
    full: bool,
    /// Directory for report.md, the JSON files, plots and histograms (created if missing).
    #[arg(long, value_name = "DIR", default_value = "firmtime-report")]
    out: PathBuf,
    #[command(flatten)]
    explain: args::ExplainArgs,
    /// Trace events kept around each condition's late wake-ups (about 64 bytes each, allocated
    /// before measuring), 1000 to 50000000. When full, the windows of the least late
    /// wake-ups are dropped first, whole.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    explain_max_events: usize,
    /// Record the kernel stack of the task each traced thread was switched in from and show it
    /// on the outliers' task and non-preemptible parts (as `lab cyclic --kernel-stacks`; costs a
    /// stack unwind on the wake-up path when the thread preempts a task). A kernel without the
    /// `stacktrace` trigger is said in the report.
    #[arg(long)]
    kernel_stacks: bool,
    /// Exit 0 whatever the verdict ("Not reliably", "Undetermined"), for scripts that only
    /// want the report (./run.sh). A measurement that failed or an interrupted run still
    /// exits 2.
    #[arg(long)]
    exit_zero: bool,
}

/// The exit status of `lab all` (docs/LAB-FORMATS.md, "Exit status"): 0 the
/// verdict meets the millisecond bar ("Yes", "Yes, with rare exceptions"),
/// 1 it does not ("Not reliably", also when another measurement failed),
/// 2 it could not be judged ("Undetermined"), or it said yes but a
/// measurement failed or the run was interrupted. With `exit_zero` the
/// verdict counts as met: 0, or 2 for a failed measurement or an
/// interrupted run.
pub fn status(answer: firmtime_lab::report::Answer, incomplete: bool, exit_zero: bool) -> Outcome {
    use firmtime_lab::report::Answer;
    let answer = if exit_zero { Answer::Meets } else { answer };
    match answer.unless_incomplete(incomplete) {
        Answer::Meets => Outcome::Ok,
        Answer::Misses => Outcome::Failed,
        Answer::Unmeasured => Outcome::Unmeasured,
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let preset = match (args.common.quick, args.full) {
        (true, true) => {
            return Err(UsageError("--quick and --full exclude each other".into()).into())
        }
        (true, false) => Preset::Quick,
        (false, true) => Preset::Full,
        (false, false) => Preset::Default,
    };
    if args.kernel_stacks && args.explain.mode(ExplainMode::Auto) == ExplainMode::Off {
        return Err(UsageError(
            "--kernel-stacks records into the explaining trace: give it without --explain off \
             (--no-explain)"
                .into(),
        )
        .into());
    }
    args::check_output_dir("--out", &args.out)?;
    if let Some(p) = &args.common.json {
        args::check_output_file("--json", p)?;
    }
    firmtime_trace::explain::Config {
        max_events: args.explain_max_events,
        ..firmtime_trace::explain::Config::default()
    }
    .validate()
    .map_err(|e| UsageError(e.message().to_string()))?;
    let explain = args.explain.mode(ExplainMode::Auto);
    if explain == ExplainMode::On {
        if let Decision::Refuse(why) = explain.decide(firmtime_trace::explain::available) {
            return Err(UsageError(format!("--explain on: {why}")).into());
        }
    }
    let cfg = all::Config {
        preset,
        out: args.out.clone(),
        exe: std::env::current_exe()?,
        command_line: std::env::args().collect(),
        explain,
        explain_max_events: args.explain_max_events,
        kernel_stacks: args.kernel_stacks,
    };
    eprintln!(
        "firmtime: lab all ({}) writing into {}",
        match preset {
            Preset::Quick => "quick: under 3 minutes",
            Preset::Default => "default: roughly 12 minutes (Table 6 with 100 alarms per process)",
            Preset::Full => "full: the papers' sample counts, an hour or more",
        },
        args.out.display()
    );
    let mut bars = Bars::with_piped_lines();
    let outcome = all::run(&cfg, &mut bars)?;
    bars.finish(if outcome.partial {
        "lab all stopped"
    } else {
        "lab all done"
    });

    {
        // A bare `--json` (or `--json -`) puts the JSON alone on stdout.
        let _text_to_stderr =
            args::StdoutToStderr::when_json_on_stdout(args.common.json.as_deref())?;
        println!("{}", outcome.verdict.headline);
        for f in &outcome.verdict.findings {
            println!("  - {f}");
        }
        for (name, msg) in &outcome.failures {
            eprintln!("firmtime: {name} failed: {msg}");
        }
        println!("Report: {}", args.out.join("report.md").display());
    }
    if let Some(path) = &args.common.json {
        args::write_json(
            path,
            &serde_json::json!({
                "kind": "lab-all",
                "partial": outcome.partial,
                "out": args.out,
                "files": outcome.files,
                "verdict": {
                    "answer": outcome.verdict.answer,
                    "headline": outcome.verdict.headline,
                    "findings": outcome.verdict.findings,
                    "advice": outcome.verdict.advice,
                    "other_advice": outcome.verdict.other_advice,
                },
                "failures": outcome.failures,
            }),
        )?;
    }
    if outcome.partial {
        eprintln!("firmtime: interrupted: the report is partial");
    }
    Ok(status(
        outcome.verdict.answer,
        outcome.partial || !outcome.failures.is_empty(),
        args.exit_zero,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmtime_lab::report::Answer;

    /// `lab all` exited 0 on "Not reliably": every verdict, complete or
    /// not, with and without --exit-zero, maps to its documented status.
    #[test]
    fn exit_status_follows_the_verdict() {
        use Outcome::{Failed, Ok, Unmeasured};
        let cases = [
            // (answer, incomplete, exit_zero) → status
            (Answer::Meets, false, false, Ok),
            (Answer::Misses, false, false, Failed),
            (Answer::Unmeasured, false, false, Unmeasured),
            (Answer::Meets, true, false, Unmeasured),
            (Answer::Misses, true, false, Failed),
            (Answer::Unmeasured, true, false, Unmeasured),
            (Answer::Meets, false, true, Ok),
            (Answer::Misses, false, true, Ok),
            (Answer::Unmeasured, false, true, Ok),
            (Answer::Meets, true, true, Unmeasured),
            (Answer::Misses, true, true, Unmeasured),
            (Answer::Unmeasured, true, true, Unmeasured),
        ];
        for (answer, incomplete, exit_zero, want) in cases {
            assert_eq!(
                status(answer, incomplete, exit_zero),
                want,
                "{answer:?}, incomplete {incomplete}, --exit-zero {exit_zero}"
            );
        }
    }
}
