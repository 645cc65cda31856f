//! `firmtime lab …`: the papers' measurements on this machine.

use crate::args::UsageError;
use crate::progress::Bars;
use crate::Outcome;
use clap::Subcommand;
use firmtime_lab::measure::{Envelope, Progress};
use firmtime_lab::measurement::{Measurement, Partial, Validate};
use firmtime_lab::ErrorKind;
use firmtime_rt::system::Provenance;
use std::path::PathBuf;

mod all;
mod billing;
mod clock;
mod cyclic;
mod frames;
mod interrupts;
mod overhead;
mod quanta;
mod sleep;
mod tails;

/// Flags every lab subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Write the result as JSON to PATH (`-` or a bare --json: stdout). Durations are integer nanoseconds.
    /// A file is replaced atomically, a device or FIFO written into, a symbolic link refused.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
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

/// What a lab subcommand says on stderr of an interrupted run by default.
pub const PARTIAL_ABOVE: &str = "firmtime: interrupted: the results above are partial";

/// What the subcommands that print after the run say instead.
pub const PARTIAL_SO_FAR: &str =
    "firmtime: interrupted: the output holds what was measured so far (partial)";

/// The one runner of the lab subcommands: provenance → config → progress →
/// run → finish (the `--json` envelope and the exit status).
pub struct Runner<'a, M> {
    common: &'a Common,
    measurement: M,
    interrupted: &'static str,
    stop_is_partial: bool,
    unavailable: Option<&'static str>,
}

/// What a [`Runner`] ran: the outcome so far and the result, if any.
pub struct Ran<R> {
    outcome: Outcome,
    result: Option<R>,
}

impl<R> Ran<R> {
    /// The outcome.
    pub fn outcome(self) -> Outcome {
        self.outcome
    }

    /// The outcome, [`Outcome::Failed`] when `failed` says so of the result.
    pub fn failed_if(self, failed: impl FnOnce(&R) -> bool) -> Outcome {
        self.then(|r, outcome| if failed(r) { Outcome::Failed } else { outcome })
    }

    /// `f`'s outcome given the result and the outcome so far; without a
    /// result (the measurement was unavailable), the outcome so far.
    pub fn then(self, f: impl FnOnce(&R, Outcome) -> Outcome) -> Outcome {
        match &self.result {
            Some(r) => f(r, self.outcome),
            None => self.outcome,
        }
    }
}

impl<'a, M: Measurement> Runner<'a, M> {
    /// A runner of `measurement` under the flags `common`; an interrupted
    /// run says [`PARTIAL_ABOVE`].
    pub fn new(common: &'a Common, measurement: M) -> Self {
        Self {
            common,
            measurement,
            interrupted: PARTIAL_ABOVE,
            stop_is_partial: false,
            unavailable: None,
        }
    }

    /// A runner whose interrupted run says [`PARTIAL_SO_FAR`], also when the
    /// stop came after the measurement.
    pub fn so_far(common: &'a Common, measurement: M) -> Self {
        Self::new(common, measurement)
            .interrupted(PARTIAL_SO_FAR)
            .stop_is_partial()
    }

    /// Says `text` on stderr when the run was interrupted.
    pub fn interrupted(mut self, text: &'static str) -> Self {
        self.interrupted = text;
        self
    }

    /// Counts a stop request seen after the run as an interrupted run too.
    pub fn stop_is_partial(mut self) -> Self {
        self.stop_is_partial = true;
        self
    }

    /// Turns "not available here" into `who: why` on stderr and a failed
    /// run instead of an error.
    pub fn unavailable_as(mut self, who: &'static str) -> Self {
        self.unavailable = Some(who);
        self
    }

    /// Runs the measurement with a progress bar; `show` prints the result.
    pub fn run(
        self,
        config: impl FnOnce() -> anyhow::Result<M::Config>,
        show: impl FnOnce(&M::Config, &M::Output) -> anyhow::Result<()>,
    ) -> anyhow::Result<Ran<M::Output>> {
        self.run_with(config, |m, c, p| m.run(c, p), show)
    }

    /// [`Runner::run`] for a subcommand that only prints the result.
    pub fn print(
        self,
        config: impl FnOnce() -> anyhow::Result<M::Config>,
        print: impl FnOnce(&M::Output),
    ) -> anyhow::Result<Outcome> {
        let shown = self.run(config, |_, r| {
            print(r);
            Ok(())
        })?;
        Ok(shown.outcome())
    }

    /// [`Runner::run`], measuring with `measure` instead of the
    /// measurement's own `run`.
    pub fn run_with(
        self,
        config: impl FnOnce() -> anyhow::Result<M::Config>,
        measure: impl FnOnce(&M, &M::Config, &mut dyn Progress) -> firmtime_lab::Result<M::Output>,
        show: impl FnOnce(&M::Config, &M::Output) -> anyhow::Result<()>,
    ) -> anyhow::Result<Ran<M::Output>> {
        let m = &self.measurement;
        let provenance = Provenance::begin(std::env::args().collect());
        let cfg = config()?;
        cfg.validate().map_err(usage)?;
        if let Some(path) = &self.common.json {
            crate::args::check_output_file("--json", path)?;
        }
        let result = match measure(m, &cfg, &mut Bars::new()) {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::Unavailable && self.unavailable.is_some() => {
                eprintln!("{}: {}", self.unavailable.unwrap_or_default(), e.message());
                return Ok(Ran {
                    outcome: Outcome::Failed,
                    result: None,
                });
            }
            Err(e) => return Err(run_error(e)),
        };
        {
            // A bare `--json` (or `--json -`) puts the JSON alone on stdout.
            let _text_to_stderr =
                crate::args::StdoutToStderr::when_json_on_stdout(self.common.json.as_deref())?;
            show(&cfg, &result)?;
        }
        let partial =
            result.partial() || (self.stop_is_partial && firmtime_lab::measure::stop_requested());
        if let Some(path) = &self.common.json {
            let env = Envelope::new(m.kind(), provenance, partial, &result);
            crate::args::write_json(path, &env)?;
        }
        let outcome = if partial {
            eprintln!("{}", self.interrupted);
            Outcome::Failed
        } else {
            Outcome::Ok
        };
        Ok(Ran {
            outcome,
            result: Some(result),
        })
    }
}

/// The lab's subcommands.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Every measurement in one go: report.md with each paper's table beside this machine's
    /// numbers and a verdict, plus JSON, PNG plots and cyclictest histograms.
    ///
    /// Progress: bars on a terminal; piped, one line per step on stderr with
    /// the time so far and an estimate of the time left, a line every 30 s
    /// within a long step, and the total at the end.
    ///
    /// Exit status: 0 the verdict is yes (with or without rare exceptions), 1 "Not
    /// reliably", 2 "Undetermined" or a measurement failed or was interrupted
    /// (--exit-zero: 0 whatever the verdict). docs/LAB-FORMATS.md, "Exit status".
    All(all::Args),
    /// Successive clock reads under Finney's priority × load conditions (Finney 2001, Table 1).
    Clock(clock::Args),
    /// Achieved sleep durations of every sleep mechanism (Finney 2001, "Process suspension").
    Sleep(sleep::Args),
    /// Periodic wake-up latency, like realfeel and cyclictest (Varoquaux 2006).
    ///
    /// Exit status: 0 measured (and met --max-latency / --max-missed when given), 1 missed
    /// them, 2 could not measure (no thread measured, a thread failed or was demoted, or
    /// interrupted). docs/LAB-FORMATS.md, "Exit status".
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
    #[command(visible_alias = "quanta")]
    Trace(quanta::Args),
    /// Tick-sampled CPU billing vs precise run time (Etsion et al. 2003, Table 3, Fig. 4).
    Billing(billing::Args),
}

/// Runs a lab subcommand. Ctrl-C stops the measurement, keeps what was
/// measured (flagged partial) and reaps every load child.
pub fn run(cmd: LabCommand) -> anyhow::Result<Outcome> {
    crate::signals::catch(crate::signals::Repeat::Ends)?;
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
        LabCommand::Trace(a) => quanta::run(a),
        LabCommand::Billing(a) => billing::run(a),
    }
}
