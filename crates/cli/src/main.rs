//! The `firmtime` binary: parses arguments into typed configs, calls the
//! libraries, renders what comes back. The only crate that prints or exits.
//!
//! Exit codes: 0 success, 1 a failed check or run, 2 a usage error.

// Output that never panics (a closed pipe ends the program quietly): these
// shadow std's macros in every module below.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::print(format_args!($($arg)*))
    };
}
macro_rules! println {
    () => {
        $crate::output::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::output::eprint(format_args!($($arg)*))
    };
}
macro_rules! eprintln {
    () => {
        $crate::output::eprint(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::eprint(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod args;
mod audio;
mod backend;
mod colour;
mod doctor;
mod exposition;
mod lab;
mod ladspa;
mod load;
mod midi;
mod net;
mod netexp;
mod output;
mod progress;
mod rack;
mod signals;
mod table;
mod tap;
mod watch;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

// With the `assert-rt` feature, an allocation on a real-time path (code
// wrapped in `firmtime_rt::assert_rt::no_alloc`) aborts the program.
#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

/// Re-exported for the subcommands' `use crate::Outcome`.
pub use args::Outcome;

/// firmtime: millisecond-true timing on stock Linux.
///
/// Measures what this machine's clocks, sleeps and timers really do, runs
/// timed MIDI experiments, and spreads audio block processing over a LAN.
/// Human tables go to stdout, diagnostics to stderr; every command that
/// prints a result takes `--json PATH` for machine-readable output. Status
/// words are coloured on a terminal only (not in a pipe; NO_COLOR turns it
/// off). Every command spells a flag alike: docs/VOCABULARY.md. Exit status: 0 ok, 1 a failed check or run,
/// 2 a usage error. A reader closing stdout (`| head`) ends the program
/// quietly with status 0. Long runs stop alike on SIGINT (Ctrl-C), SIGTERM
/// and SIGHUP, and keep what they gathered.
#[derive(Debug, Parser)]
#[command(name = "firmtime", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check whether this machine is set up for real-time work.
    ///
    /// Each item is pass / warn / fail / unknown with a one-line fix.
    /// Exit status 1 when any item fails.
    Doctor(doctor::DoctorArgs),
    /// Generate a bounded load: CPU hogs, duty cycle, disk, memory, network, or Varoquaux's stress mix.
    ///
    /// Runs until --duration is over or SIGINT, SIGTERM or SIGHUP arrives, then prints
    /// what was done and exits 0. Lab commands start these as child processes.
    Load(load::LoadArgs),
    /// Measure what this machine's clocks, sleeps and timers really do (the papers' tables).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// MIDI: list ports, monitor timed input, run FTAP's loop test.
    Midi(midi::MidiArgs),
    /// Audio: the round-trip latency of an audio path through a loopback (like jack_iodelay).
    Audio(audio::AudioArgs),
    /// LADSPA plugins: list, describe, apply a chain to a WAV file (like applyplugin).
    Ladspa(ladspa::LadspaArgs),
    /// Tapping experiments (FTAP): run sessions of trials, replay a trial,
    /// check experiment files, import FTAP parameter files, analyze trials.
    Tap(tap::TapArgs),
    /// Spread block processing over workers on a LAN (Lago's middleware): worker, bench, discover, stats.
    #[command(subcommand)]
    Net(net::NetCommand),
    /// Run a chain of LADSPA plugins, each local or remote, as a JACK client (a rack file).
    ///
    /// Counts xruns, reports DSP load and per-stage time; `stage.port = value`
    /// on stdin changes a control while it runs.
    Rack(rack::RackArgs),
    /// Watch this machine for weeks: periodic RT wake-ups per CPU, each interval stored in SQLite (report, check, install, Prometheus).
    Watch(watch::WatchArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own exit codes: 0 for --help/--version, 2 for usage errors.
            e.exit();
        }
    };
    let result = match cli.command {
        Command::Doctor(a) => doctor::run(a),
        Command::Load(a) => load::run(a),
        Command::Lab(c) => lab::run(c),
        Command::Midi(a) => midi::run(a),
        Command::Audio(a) => audio::run(a),
        Command::Ladspa(a) => ladspa::run(a),
        Command::Tap(a) => tap::run(a),
        Command::Net(c) => net::run(c),
        Command::Rack(a) => rack::run(a),
        Command::Watch(a) => watch::run(a),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Ok(Outcome::Unmeasured) => ExitCode::from(2),
        Err(e) => {
            eprintln!("firmtime: error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(if e.is::<args::UsageError>() { 2 } else { 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own checks of every command's definition (duplicate names or
    /// aliases, bad defaults, conflicts naming unknown flags).
    #[test]
    fn every_command_definition_passes_claps_checks() {
        Cli::command().debug_assert();
    }

    /// Old spellings (docs/VOCABULARY.md) parse into the new flags.
    #[test]
    fn old_spellings_parse_in_process() {
        for line in [
            "firmtime lab cyclic --cpus 0-1 --priority 70",
            "firmtime lab clock --fifo-priority 70 --calls 1000",
            "firmtime lab sleep --mechanisms nanosleep --intervals 1ms",
            "firmtime lab frames --sleepers poll --policies other",
            "firmtime lab overhead --reps 3",
            "firmtime lab interrupts --cell 1s",
            "firmtime lab trace --overhead --pairs 3",
            "firmtime rack x.toml --server s --connect-in a,b --period 64 --status-every 1",
            "firmtime tap analyze x.csv --debounce-ms 20",
            "firmtime net bench --workers 127.0.0.1:1 --wait spin --priority 80",
            "firmtime ladspa apply -s 2 in.wav out.wav amp",
        ] {
            if let Err(e) = Cli::try_parse_from(line.split(' ')) {
                panic!("{line}: {e}");
            }
        }
    }
}
