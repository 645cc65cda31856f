//! `firmtime lab …`: the papers' measurements on this machine.

use crate::args::UsageError;
use crate::Outcome;
use clap::Subcommand;
use firmtime_rt::system::Provenance;
use std::path::PathBuf;

mod all;
mod billing;
mod clock;
mod cyclic;
mod frames;
mod interrupts;
mod overhead;
mod sleep;
mod tails;
mod trace;

/// Flags every lab subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Write the result as JSON to PATH (`-` for stdout). Durations are integer nanoseconds.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// A short run with fewer samples: a first look, noisier figures.
    #[arg(long)]
    pub quick: bool,
}

impl Common {
    /// The preset these flags ask for: `quick()` with --quick, else `full()`.
    pub fn preset<C>(&self, quick: impl FnOnce() -> C, full: impl FnOnce() -> C) -> C {
        if self.quick {
            quick()
        } else {
            full()
        }
    }
}

/// Sets `slot` to the flag's value when the flag was given.
pub fn set_given<T>(slot: &mut T, flag: Option<T>) {
    if let Some(v) = flag {
        *slot = v;
    }
}

/// A list flag's values, or `preset`'s when the flag was not given.
pub fn list_or<T: Clone>(flag: &[T], preset: &[T]) -> Vec<T> {
    if flag.is_empty() {
        preset.to_vec()
    } else {
        flag.to_vec()
    }
}

/// A lab configuration the library refused, as a usage error (exit status 2).
pub fn usage(e: firmtime_lab::Error) -> UsageError {
    UsageError(e.message().to_string())
}

/// A failed lab run: refused input is a usage error (exit status 2),
/// anything else a failure (exit status 1).
pub fn run_error(e: firmtime_lab::Error) -> anyhow::Error {
    if e.kind() == firmtime_lab::ErrorKind::InvalidInput {
        usage(e).into()
    } else {
        e.into()
    }
}

/// What [`finish`] says on stderr of an interrupted run.
const PARTIAL_SO_FAR: &str =
    "firmtime: interrupted: the output holds what was measured so far (partial)";

/// What the table-printing subcommands say on stderr of an interrupted run.
pub const PARTIAL_ABOVE: &str = "firmtime: interrupted: the results above are partial";

/// Writes the JSON envelope when `--json` was given and turns an interrupted
/// run into [`Outcome::Failed`]: what every lab subcommand does last.
pub fn finish<T: serde::Serialize>(
    common: &Common,
    kind: &str,
    provenance: Provenance,
    partial: bool,
    result: &T,
) -> anyhow::Result<Outcome> {
    finish_saying(common, kind, provenance, partial, result, PARTIAL_SO_FAR)
}

/// [`finish`], saying `interrupted` on stderr when the run is partial.
pub fn finish_saying<T: serde::Serialize>(
    common: &Common,
    kind: &str,
    provenance: Provenance,
    partial: bool,
    result: &T,
    interrupted: &str,
) -> anyhow::Result<Outcome> {
    if let Some(path) = &common.json {
        let env = firmtime_lab::measure::Envelope::new(kind, provenance, partial, result);
        crate::args::write_json(path, &env)?;
    }
    if partial {
        eprintln!("{interrupted}");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

/// The lab's subcommands.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Every measurement in one go: report.md with each paper's table beside this machine's
    /// numbers and a verdict, plus JSON, PNG plots and cyclictest histograms.
    All(all::Args),
    /// Successive clock reads under Finney's priority × load conditions (Finney 2001, Table 1).
    Clock(clock::Args),
    /// Achieved sleep durations of every sleep mechanism (Finney 2001, "Process suspension").
    Sleep(sleep::Args),
    /// Periodic wake-up latency, like realfeel and cyclictest (Varoquaux 2006).
    Cyclic(cyclic::Args),
    /// Timer-signal delivery latency tails under SCHED_RR contention (Etsion et al. 2003, Table 6).
    Tails(tails::Args),
    /// One timer-setting process of `lab tails` (started by it; not for direct use).
    #[command(hide = true, name = "tails-worker")]
    TailsWorker(tails::WorkerArgs),
    /// Context switch, trap, memcpy and clock-read costs (Etsion et al. 2003, Table 2).
    Overhead(overhead::Args),
    /// Frame pacing of a Xine-like player: desired vs achieved fps, drops (Etsion et al. 2003, Figs 1 and 5).
    Frames(frames::Args),
    /// Throughput cost of extra timer interrupts on a sort benchmark (Etsion et al. 2003, Figs 2, 3 and 8).
    Interrupts(interrupts::Args),
    /// Scheduler trace: effective quanta, preempted vs blocked, CPU share (Etsion et al. 2003, Tables 4–5, Fig. 6).
    Trace(trace::Args),
    /// Tick-sampled CPU billing vs precise run time (Etsion et al. 2003, Table 3, Fig. 4).
    Billing(billing::Args),
}

/// Runs a lab subcommand. Ctrl-C stops the measurement, keeps what was
/// measured (flagged partial) and reaps every load child.
pub fn run(cmd: LabCommand) -> anyhow::Result<Outcome> {
    firmtime_lab::load::install_stop_signals()?;
    match cmd {
        LabCommand::All(a) => all::run(a),
        LabCommand::Clock(a) => clock::run(a),
        LabCommand::Sleep(a) => sleep::run(a),
        LabCommand::Cyclic(a) => cyclic::run(a),
        LabCommand::Tails(a) => tails::run(a),
        LabCommand::TailsWorker(a) => tails::run_worker(a),
        LabCommand::Overhead(a) => overhead::run(a),
        LabCommand::Frames(a) => frames::run(a),
        LabCommand::Interrupts(a) => interrupts::run(a),
        LabCommand::Trace(a) => trace::run(a),
        LabCommand::Billing(a) => billing::run(a),
    }
}
