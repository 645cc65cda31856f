//! [`Measurement`]: what `lab all` and the CLI's lab subcommands need to
//! know of each measurement — its name, its presets, how to run it, its
//! JSON kind and its report section — and one implementation per
//! measurement of the lab.
//!
//! `lab all` ([`crate::all`]) is a loop over these; each `firmtime lab …`
//! subcommand builds its configuration from its flags and runs the same
//! implementation through one runner.

use crate::error::{ErrorKind, Result};
use crate::measure::Progress;
use crate::{clockread, cyclic, frames, interrupts, overhead, report, suspend, tails};
use crate::{quanta, ticks};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// A first look: a few minutes, fewer samples everywhere.
    Quick,
    /// The subcommands' defaults.
    Default,
    /// The papers' sample counts (takes long: Table 6 alone is ~40 minutes).
    Full,
}

impl Preset {
    /// `quick`, `default` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Quick => "quick",
            Preset::Default => "default",
            Preset::Full => "full",
        }
    }
}

/// What a measurement does when it is not available here (no tracefs, no
/// `/proc/interrupts`, …) inside `lab all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// A failure like any other error: listed under "Measurements that failed".
    Fails,
    /// Left out silently: no file, no section.
    Omitted,
    /// A section with this heading that says `skipped:` and why.
    Skipped(&'static str),
}

/// The results `lab all` keeps for its closing "What changed since 2003"
/// section.
#[derive(Debug, Default)]
pub struct Kept {
    /// Etsion et al. Table 6.
    pub tails: Option<tails::TailsResult>,
    /// Frame pacing.
    pub frames: Option<frames::FramesResult>,
    /// Timer-interrupt overhead.
    pub interrupts: Option<interrupts::InterruptsResult>,
    /// The scheduler trace.
    pub trace: Option<quanta::TraceResult>,
    /// The idle CPUs' local timer.
    pub ticks: Option<ticks::TickRates>,
}

/// One measurement of the lab.
pub trait Measurement {
    /// Its configuration.
    type Config: Validate;
    /// What a run returns (written as the JSON envelope's `result`).
    type Output: Serialize + Partial;

    /// Its name in messages: `clock`, `sleep`, `trace overhead`, …
    fn name(&self) -> &'static str;

    /// The `kind` of its JSON envelope: `lab-clock`, `lab-sleep`, …; `lab
    /// all` writes the result to this kind without `lab-`, plus `.json`.
    fn kind(&self) -> &'static str;

    /// The configuration `lab all` runs under `preset`; `exe` is the
    /// firmtime binary, for load children.
    fn config(&self, preset: Preset, exe: &Path) -> Self::Config;

    /// Runs it, reporting progress.
    ///
    /// # Errors
    /// Those of the measurement's own `run`.
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output>;

    /// Its section of `report.md`, if it has one.
    fn section(&self, output: &Self::Output) -> Option<String>;

    /// Whether `lab all` runs it under `preset`.
    fn in_preset(&self, _preset: Preset) -> bool {
        true
    }

    /// What `lab all` makes of [`ErrorKind::Unavailable`].
    fn unavailable(&self) -> Unavailable {
        Unavailable::Fails
    }

    /// Keeps what the closing section of the report needs.
    fn keep(&self, _output: Self::Output, _kept: &mut Kept) {}

    /// The file `lab all` writes the result to: the kind without `lab-`,
    /// plus `.json`.
    fn file(&self) -> String {
        let kind = self.kind();
        format!("{}.json", kind.strip_prefix("lab-").unwrap_or(kind))
    }
}

/// A configuration that checks itself.
pub trait Validate {
    /// Checks every parameter; errors name the flag and its valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`].
    fn validate(&self) -> Result<()>;
}

/// A result that knows whether its run was interrupted.
pub trait Partial {
    /// True when the run was interrupted and the result holds only part.
    fn partial(&self) -> bool;
}

/// [`Validate`] by the type's own `validate`, [`Partial`] by its `partial` field.
macro_rules! checked {
    (configs: $($c:ty),*; results: $($r:ty),*) => {
        $(impl Validate for $c {
            fn validate(&self) -> Result<()> {
                <$c>::validate(self)
            }
        })*
        $(impl Partial for $r {
            fn partial(&self) -> bool {
                self.partial
            }
        })*
    };
}

checked! {
    configs: clockread::Config, suspend::Config, cyclic::Config, tails::Config,
        overhead::Config, frames::Config, interrupts::Config, quanta::Config,
        quanta::overhead::Config;
    results: clockread::ClockResult, suspend::SleepResult, cyclic::CyclicResult,
        tails::TailsResult, overhead::OverheadResult, frames::FramesResult,
        interrupts::InterruptsResult, quanta::TraceResult, quanta::overhead::OverheadResult
}

/// The interval of [`Ticks`]: any is valid.
impl Validate for std::time::Duration {
    fn validate(&self) -> Result<()> {
        Ok(())
    }
}

/// [`Ticks`] cannot be interrupted: it sleeps 2 s.
impl Partial for ticks::TickRates {
    fn partial(&self) -> bool {
        false
    }
}

/// The three presets of a config type that has them.
fn pick<C>(preset: Preset, quick: fn() -> C, default: fn() -> C, full: fn() -> C) -> C {
    match preset {
        Preset::Quick => quick(),
        Preset::Default => default(),
        Preset::Full => full(),
    }
}

/// Successive clock reads (Finney 2001, Table 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct Clock;

impl Measurement for Clock {
    type Config = clockread::Config;
    type Output = clockread::ClockResult;
    fn name(&self) -> &'static str {
        "clock"
    }
    fn kind(&self) -> &'static str {
        "lab-clock"
    }
    fn config(&self, preset: Preset, exe: &Path) -> Self::Config {
        let mut c = pick(
            preset,
            clockread::Config::quick,
            clockread::Config::default,
            clockread::Config::full,
        );
        c.load_exe = Some(exe.to_path_buf());
        c
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        clockread::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::clock_section(output))
    }
}

/// Achieved sleep durations (Finney 2001, "Process suspension").
#[derive(Debug, Clone, Copy, Default)]
pub struct Sleep;

impl Measurement for Sleep {
    type Config = suspend::Config;
    type Output = suspend::SleepResult;
    fn name(&self) -> &'static str {
        "sleep"
    }
    fn kind(&self) -> &'static str {
        "lab-sleep"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        pick(
            preset,
            suspend::Config::quick,
            suspend::Config::default,
            suspend::Config::full,
        )
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        suspend::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::sleep_section(output))
    }
}

/// Periodic wake-up latency (Varoquaux 2006; cyclictest). `lab all` runs it
/// under four conditions ([`crate::all`]); its report section covers them all.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cyclic;

impl Measurement for Cyclic {
    type Config = cyclic::Config;
    type Output = cyclic::CyclicResult;
    fn name(&self) -> &'static str {
        "cyclic"
    }
    fn kind(&self) -> &'static str {
        "lab-cyclic"
    }
    fn config(&self, preset: Preset, exe: &Path) -> Self::Config {
        let mut c = pick(
            preset,
            cyclic::Config::quick,
            cyclic::Config::default,
            cyclic::Config::full,
        );
        c.load_exe = Some(exe.to_path_buf());
        c
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        cyclic::run(config, progress)
    }
    fn section(&self, _output: &Self::Output) -> Option<String> {
        None
    }
}

/// Timer-signal latency tails (Etsion et al. 2003, Table 6). Its processes
/// are children of `exe`, the firmtime binary.
#[derive(Debug, Clone, Default)]
pub struct Tails {
    /// The firmtime binary the measuring processes run.
    pub exe: PathBuf,
}

impl Measurement for Tails {
    type Config = tails::Config;
    type Output = tails::TailsResult;
    fn name(&self) -> &'static str {
        "tails"
    }
    fn kind(&self) -> &'static str {
        "lab-tails"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        match preset {
            Preset::Quick => tails::Config::quick(),
            // The default preset keeps the paper's matrix but fewer alarms.
            Preset::Default => tails::Config {
                alarms: 100,
                ..tails::Config::full()
            },
            Preset::Full => tails::Config::full(),
        }
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        tails::run(config, &self.exe, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::tails_section(output))
    }
    fn keep(&self, output: Self::Output, kept: &mut Kept) {
        kept.tails = Some(output);
    }
}

/// Context switch, trap, memcpy and clock-read costs (Etsion et al. 2003, Table 2).
#[derive(Debug, Clone, Copy, Default)]
pub struct Overhead;

impl Measurement for Overhead {
    type Config = overhead::Config;
    type Output = overhead::OverheadResult;
    fn name(&self) -> &'static str {
        "overhead"
    }
    fn kind(&self) -> &'static str {
        "lab-overhead"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        match preset {
            Preset::Quick => overhead::Config::quick(),
            Preset::Default | Preset::Full => overhead::Config::full(),
        }
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        overhead::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::overhead_section(output))
    }
}

/// The idle CPUs' local timer interrupts over [`ticks::INTERVAL`]: is the
/// kernel tickless? Feeds the report's closing section only.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ticks;

impl Measurement for Ticks {
    type Config = std::time::Duration;
    type Output = ticks::TickRates;
    fn name(&self) -> &'static str {
        "ticks"
    }
    fn kind(&self) -> &'static str {
        "lab-ticks"
    }
    fn config(&self, _preset: Preset, _exe: &Path) -> Self::Config {
        ticks::INTERVAL
    }
    fn run(&self, config: &Self::Config, _progress: &mut dyn Progress) -> Result<Self::Output> {
        ticks::measure(*config)
    }
    fn section(&self, _output: &Self::Output) -> Option<String> {
        None
    }
    fn unavailable(&self) -> Unavailable {
        Unavailable::Omitted
    }
    fn keep(&self, output: Self::Output, kept: &mut Kept) {
        kept.ticks = Some(output);
    }
}

/// Frame pacing of a Xine-like player (Etsion et al. 2003, Figs 1 and 5).
#[derive(Debug, Clone, Copy, Default)]
pub struct Frames;

impl Measurement for Frames {
    type Config = frames::Config;
    type Output = frames::FramesResult;
    fn name(&self) -> &'static str {
        "frames"
    }
    fn kind(&self) -> &'static str {
        "lab-frames"
    }
    fn config(&self, preset: Preset, exe: &Path) -> Self::Config {
        // The default preset keeps frames short too: 20 cells of 30 s would dominate it.
        let mut c = match preset {
            Preset::Full => frames::Config::full(),
            Preset::Quick | Preset::Default => frames::Config::quick(),
        };
        c.load_exe = Some(exe.to_path_buf());
        c
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        frames::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::frames_section(output))
    }
    fn keep(&self, output: Self::Output, kept: &mut Kept) {
        kept.frames = Some(output);
    }
}

/// Throughput cost of extra timer interrupts (Etsion et al. 2003, Figs 2, 3 and 8).
#[derive(Debug, Clone, Copy, Default)]
pub struct Interrupts;

impl Measurement for Interrupts {
    type Config = interrupts::Config;
    type Output = interrupts::InterruptsResult;
    fn name(&self) -> &'static str {
        "interrupts"
    }
    fn kind(&self) -> &'static str {
        "lab-interrupts"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        match preset {
            Preset::Full => interrupts::Config::full(),
            Preset::Quick | Preset::Default => interrupts::Config::quick(),
        }
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        interrupts::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::interrupts_section(output))
    }
    fn keep(&self, output: Self::Output, kept: &mut Kept) {
        kept.interrupts = Some(output);
    }
}

/// A scheduler trace: effective quanta, preempted vs blocked, CPU share
/// (Etsion et al. 2003, Tables 4–5, Fig. 6). `lab all` traces the billing
/// workloads, so its section also has Table 3; not in the quick preset.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trace;

impl Measurement for Trace {
    type Config = quanta::Config;
    type Output = quanta::TraceResult;
    fn name(&self) -> &'static str {
        "trace"
    }
    fn kind(&self) -> &'static str {
        "lab-trace"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        match preset {
            Preset::Full => quanta::Config::billing_full(),
            Preset::Quick | Preset::Default => quanta::Config::billing_quick(),
        }
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        quanta::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::trace_section(output))
    }
    fn in_preset(&self, preset: Preset) -> bool {
        preset != Preset::Quick
    }
    fn unavailable(&self) -> Unavailable {
        Unavailable::Skipped("## Effective quanta and billing (Etsion et al. 2003, Tables 3–5)")
    }
    fn keep(&self, output: Self::Output, kept: &mut Kept) {
        kept.trace = Some(output);
    }
}

/// Tick-sampled CPU billing versus precise run time (Etsion et al. 2003,
/// Table 3, Fig. 4): a trace of the billing workloads. Not a step of `lab
/// all`, whose trace already covers it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Billing;

impl Measurement for Billing {
    type Config = quanta::Config;
    type Output = quanta::TraceResult;
    fn name(&self) -> &'static str {
        "billing"
    }
    fn kind(&self) -> &'static str {
        "lab-billing"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        pick(
            preset,
            quanta::Config::billing_quick,
            quanta::Config::billing,
            quanta::Config::billing_full,
        )
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        quanta::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::trace_section(output))
    }
}

/// What tracing costs the sort benchmark (klogger, Etsion et al. 2003 §2.1).
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceOverhead;

impl Measurement for TraceOverhead {
    type Config = quanta::overhead::Config;
    type Output = quanta::overhead::OverheadResult;
    fn name(&self) -> &'static str {
        "trace overhead"
    }
    fn kind(&self) -> &'static str {
        "lab-trace-overhead"
    }
    fn config(&self, preset: Preset, _exe: &Path) -> Self::Config {
        pick(
            preset,
            quanta::overhead::Config::quick,
            quanta::overhead::Config::default,
            quanta::overhead::Config::full,
        )
    }
    fn run(&self, config: &Self::Config, progress: &mut dyn Progress) -> Result<Self::Output> {
        quanta::overhead::run(config, progress)
    }
    fn section(&self, output: &Self::Output) -> Option<String> {
        Some(report::trace_overhead_section(output))
    }
    fn unavailable(&self) -> Unavailable {
        Unavailable::Skipped("## Trace overhead (klogger, Etsion et al. 2003 §2.1)")
    }
}

/// Whether `e` is "not available here".
pub(crate) fn is_unavailable(e: &crate::Error) -> bool {
    e.kind() == ErrorKind::Unavailable
}
