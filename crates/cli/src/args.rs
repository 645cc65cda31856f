//! Argument conventions shared by every subcommand: durations and sizes with
//! units, `--json PATH` (`-` or a bare `--json`: stdout), usage errors that exit with status 2, and the
//! [`Outcome`] a subcommand reports back to `main`.

use firmtime_rt::sched::Policy;
use firmtime_rt::units;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// What a subcommand reports back to `main`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything ran and every check passed (warnings allowed).
    Ok,
    /// Ran to the end, but a check failed or the run did not meet its target.
    Failed,
    /// Could not measure what it was to judge (exit status 2, as `watch
    /// check`'s "no data").
    Unmeasured,
}

/// A usage error found after clap parsed the arguments (a flag's value out of
/// range in combination with another, for instance). `main` exits 2 on it.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Checks, before anything is measured, that the file `path` given to
/// `flag` can be written: `-` (stdout) always can; otherwise its directory
/// must exist and take a new file, and `path` must not be a directory. A
/// long run then never measures for an hour to fail at the end.
///
/// # Errors
/// A [`UsageError`] naming the flag, the path and what is wrong.
pub fn check_output_file(flag: &str, path: &Path) -> Result<(), UsageError> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    let bad = |why: String| {
        UsageError(format!(
            "{flag} {}: {why} (checked before measuring: nothing was measured)",
            path.display()
        ))
    };
    if path.file_name().is_none() {
        return Err(bad("needs a file name".into()));
    }
    // What write_atomic will do there: a device, FIFO or descriptor is
    // written into (not opened here: that would hand a FIFO's reader an end
    // of file), a link or special file is refused.
    match firmtime_rt::fs::check_output(path) {
        Ok(firmtime_rt::fs::OutputKind::File) => {}
        Ok(_) => return Ok(()),
        Err(e) => {
            return Err(UsageError(format!(
                "{flag}: {e} (checked before measuring: nothing was measured)"
            )))
        }
    }
    if path.is_dir() {
        return Err(bad("is a directory; give a file name".into()));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!("directory {} does not exist", dir.display())));
    }
    probe_dir(&dir).map_err(|e| bad(format!("cannot write into {}: {e}", dir.display())))?;
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| bad(format!("cannot be overwritten: {e}")))?;
    }
    Ok(())
}

/// Checks, before anything is measured, that the directory `path` given to
/// `flag` exists or can be created, and takes new files (it is created).
///
/// # Errors
/// A [`UsageError`] naming the flag, the path and what is wrong.
pub fn check_output_dir(flag: &str, path: &Path) -> Result<(), UsageError> {
    let bad = |why: String| {
        UsageError(format!(
            "{flag} {}: {why} (checked before measuring: nothing was measured)",
            path.display()
        ))
    };
    if path.exists() && !path.is_dir() {
        return Err(bad("exists and is not a directory".into()));
    }
    std::fs::create_dir_all(path).map_err(|e| bad(format!("cannot be created: {e}")))?;
    probe_dir(path).map_err(|e| bad(format!("cannot write into it: {e}")))
}

/// Creates and removes a file in `dir`.
fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".firmtime-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// clap value parser for durations with units (`500us`, `1ms`, `10s`).
pub fn duration(text: &str) -> Result<Duration, String> {
    units::parse_duration(text).map_err(|e| e.to_string())
}

/// clap value parser for a finite number in `lo..=hi` (`unit` follows the
/// bounds in the message, e.g. `" s"`): NaN, infinities and values out of
/// range are refused with the valid range, which clap prefixes with the flag.
pub fn float_in(
    lo: f64,
    hi: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let v: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("not a number; give {lo} to {hi}{unit}"))?;
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("out of range; give {lo} to {hi}{unit}"))
        }
    }
}

/// As [`float_in`], for a value that must be above `lo` (not equal to it).
pub fn float_above(
    lo: f64,
    hi: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let range = || format!("give more than {lo}, up to {hi}{unit}");
        match float_in(lo, hi, unit)(text) {
            Ok(v) if v > lo => Ok(v),
            Ok(_) => Err(format!("out of range; {}", range())),
            Err(e) if e.starts_with("not a number") => Err(format!("not a number; {}", range())),
            Err(_) => Err(format!("out of range; {}", range())),
        }
    }
}

/// clap value parser of `--dma-latency`: a duration, or a bare number of
/// microseconds; whole microseconds up to u32::MAX.
pub fn dma_latency(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let us = match t.parse::<u64>() {
        Ok(us) => us,
        Err(_) => {
            let d = duration(t)?;
            if d.subsec_nanos() % 1000 != 0 {
                return Err(format!("{t}: give whole microseconds, e.g. 0us or 10us"));
            }
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
        }
    };
    u32::try_from(us).map_err(|_| format!("{t}: give 0us to {}us", u32::MAX))
}

/// clap value parser for a duration with units of 0 to `max` (`max_text` in
/// the messages); a bare number is refused (its unit would be a guess).
pub fn duration_upto(
    max: Duration,
    max_text: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let range = || format!("give 0s to {max_text}, e.g. 50ms");
        match duration(text.trim()) {
            Ok(d) if d <= max => Ok(d),
            Ok(_) => Err(format!("out of range; {}", range())),
            Err(e) => Err(format!("{e}; {}", range())),
        }
    }
}

/// clap value parser for a duration of 0 to `max` (`max_text` in the
/// messages) that takes units (`1s`, `500ms`) and, for the flags that took
/// bare seconds before (`rack --status-every 1`, `ladspa apply --decay 2`),
/// a bare number of seconds too. Every refusal gives the valid range.
pub fn duration_or_secs_upto(
    max: Duration,
    max_text: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let t = text.trim();
        let range = || format!("give 0s to {max_text}, e.g. 2s or 500ms");
        let d = match t.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Duration::try_from_secs_f64(s).ok(),
            Ok(_) => None,
            Err(_) => Some(duration(t).map_err(|e| format!("{e}; {}", range()))?),
        };
        match d {
            Some(d) if d <= max => Ok(d),
            _ => Err(format!("out of range; {}", range())),
        }
    }
}

/// clap value parser for `--priority` where the command's thread can take any
/// policy: `fifo:P`, `rr:P`, `other`, `other:NICE` (see [`Policy`]), and a bare
/// `P` meaning `fifo:P`, the form the MIDI and lab commands took.
pub fn priority(text: &str) -> Result<Policy, String> {
    let t = text.trim();
    if let Ok(p) = t.parse::<i64>() {
        return fifo_number(p);
    }
    t.parse::<Policy>().map_err(|e| e.to_string())
}

fn fifo_number(p: i64) -> Result<Policy, String> {
    u8::try_from(p)
        .ok()
        .filter(|p| (1..=99).contains(p))
        .map(|priority| Policy::Fifo { priority })
        .ok_or_else(|| format!("real-time priority {p} is out of range: give 1-99 or fifo:P"))
}

/// clap value parser for `--priority` of a command whose thread always runs
/// SCHED_FIFO (`lab sleep`, `lab clock`, `lab interrupts`, `midi`, `tap`):
/// `fifo:P` or a bare `P`, 1 to `max`; another policy is refused with why.
pub fn fifo_priority(
    max: u8,
) -> impl Fn(&str) -> Result<u8, String> + Clone + Send + Sync + 'static {
    move |text| fixed_policy_priority(text, "fifo", max)
}

/// As [`fifo_priority`], for a command whose threads run SCHED_RR (`lab tails`).
pub fn rr_priority(text: &str) -> Result<u8, String> {
    fixed_policy_priority(text, "rr", 99)
}

fn fixed_policy_priority(text: &str, policy: &str, max: u8) -> Result<u8, String> {
    let t = text.trim();
    let number = match t.split_once(':') {
        Some((name, n)) if name.trim().eq_ignore_ascii_case(policy) => n.trim(),
        Some(_) => {
            return Err(format!(
                "{t}: this command's thread runs SCHED_{}; give {policy}:P or P, 1 to {max}",
                policy.to_ascii_uppercase()
            ))
        }
        None => t,
    };
    let bad = || format!("{t}: give {policy}:P or P, a priority 1 to {max}");
    let p: u8 = number.parse().map_err(|_| bad())?;
    if (1..=max).contains(&p) {
        Ok(p)
    } else {
        Err(bad())
    }
}

/// The sample rates the binary accepts, Hz (JACK's and ALSA's range).
pub const SAMPLE_RATES: std::ops::RangeInclusive<i64> = 1000..=768_000;
/// The period sizes the binary accepts, frames (jackd's `-p` range).
pub const PERIOD_FRAMES: std::ops::RangeInclusive<i64> = 16..=8192;

/// A duration flag in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// clap value parser for sizes with units (`64KiB`, `4MiB`, `4096`).
pub fn size(text: &str) -> Result<u64, String> {
    units::parse_size(text).map_err(|e| e.to_string())
}

/// True when a `--json` destination is stdout (`-`, which a bare `--json` means).
pub fn is_stdout(path: Option<&Path>) -> bool {
    path.is_some_and(|p| p.as_os_str() == "-")
}

/// While alive, what the process prints to stdout goes to stderr instead, so
/// that a `--json` document on stdout is the only thing there. Dropping it
/// flushes and puts stdout back.
#[derive(Debug)]
pub struct StdoutToStderr {
    saved: libc::c_int,
}

impl StdoutToStderr {
    /// Points fd 1 at stderr, keeping a copy of the old fd 1.
    ///
    /// # Errors
    /// When `dup`/`dup2` fail (out of file descriptors).
    pub fn begin() -> std::io::Result<Self> {
        use std::io::Write;
        std::io::stdout().flush()?;
        // SAFETY: dup of fd 1, which this process owns for its whole life.
        let saved = unsafe { libc::dup(1) };
        if saved < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are open; dup2 replaces fd 1 atomically.
        if unsafe { libc::dup2(2, 1) } < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: `saved` is ours, from the dup above.
            unsafe { libc::close(saved) };
            return Err(e);
        }
        Ok(Self { saved })
    }

    /// [`StdoutToStderr::begin`] when `json` goes to stdout, else nothing.
    ///
    /// # Errors
    /// As [`StdoutToStderr::begin`].
    pub fn when_json_on_stdout(json: Option<&Path>) -> std::io::Result<Option<Self>> {
        is_stdout(json).then(Self::begin).transpose()
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: `saved` is the copy of the original fd 1 taken in begin;
        // restoring it and closing the copy touches no other descriptor.
        unsafe {
            libc::dup2(self.saved, 1);
            libc::close(self.saved);
        }
    }
}

/// Writes `value` as pretty JSON to `path` atomically
/// ([`firmtime_rt::fs::write_atomic`]: temp file, fsync, rename, directory fsync),
/// or to stdout when `path` is `-`.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let text = serde_json::to_string_pretty(value)? + "\n";
    if path.as_os_str() == "-" {
        if let Err(e) = std::io::stdout().write_all(text.as_bytes()) {
            crate::output::stdout_failed(&e);
        }
        return Ok(());
    }
    path.file_name().context("--json needs a file name")?;
    firmtime_rt::fs::write_atomic(path, text.as_bytes())?;
    Ok(())
}

/// `--policy` as typed where a `--priority` flag may supply the priority:
/// a complete [`Policy`], or `fifo` / `rr` without one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PolicyArg {
    /// A complete policy (`fifo:80`, `other`, `deadline:…`).
    Full(Policy),
    /// `fifo` with its priority left to `--priority`.
    Fifo,
    /// `rr` with its priority left to `--priority`.
    Rr,
}

impl FromStr for PolicyArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "fifo" => Ok(Self::Fifo),
            "rr" => Ok(Self::Rr),
            t => t
                .parse::<Policy>()
                .map(Self::Full)
                .map_err(|e| e.to_string()),
        }
    }
}

impl PolicyArg {
    /// The policy to request: `priority` (from `--priority`) supplies the
    /// priority of a bare `fifo`/`rr` and overrides that of `fifo:P`/`rr:P`.
    ///
    /// # Errors
    /// A bare `fifo`/`rr` without `--priority`, or `--priority` with a policy
    /// that has no priority.
    pub fn resolve(self, priority: Option<u8>) -> Result<Policy, UsageError> {
        match (self, priority) {
            (Self::Full(Policy::Fifo { .. }) | Self::Fifo, Some(p)) => {
                Ok(Policy::Fifo { priority: p })
            }
            (Self::Full(Policy::Rr { .. }) | Self::Rr, Some(p)) => Ok(Policy::Rr { priority: p }),
            (Self::Full(policy), None) => Ok(policy),
            (Self::Fifo, None) => Err(UsageError(
                "--policy fifo needs a priority 1-99: --policy fifo:80, or --priority 80".into(),
            )),
            (Self::Rr, None) => Err(UsageError(
                "--policy rr needs a priority 1-99: --policy rr:80, or --priority 80".into(),
            )),
            (Self::Full(other), Some(_)) => Err(UsageError(format!(
                "--priority applies to fifo and rr policies, not --policy {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_takes_a_policy_or_a_bare_number_meaning_fifo() {
        assert_eq!(priority("80"), Ok(Policy::Fifo { priority: 80 }));
        assert_eq!(priority("fifo:70"), Ok(Policy::Fifo { priority: 70 }));
        assert_eq!(priority("rr:50"), Ok(Policy::Rr { priority: 50 }));
        assert_eq!(priority("other"), Ok(Policy::Other { nice: 0 }));
        assert!(priority("0").unwrap_err().contains("1-99"));
        assert!(priority("100").unwrap_err().contains("1-99"));
        assert!(priority("sometimes").is_err());
    }

    #[test]
    fn a_fixed_policy_priority_takes_p_or_policy_p_and_names_the_policy() {
        let fifo = fifo_priority(99);
        assert_eq!(fifo("80"), Ok(80));
        assert_eq!(fifo("fifo:80"), Ok(80));
        assert_eq!(fifo(" FIFO:7 "), Ok(7));
        assert!(fifo("rr:80").unwrap_err().contains("SCHED_FIFO"));
        assert!(fifo("other").unwrap_err().contains("fifo:P"));
        assert!(fifo("0").is_err());
        assert!(fifo_priority(94)("95").unwrap_err().contains("1 to 94"));
        assert_eq!(rr_priority("rr:50"), Ok(50));
        assert!(rr_priority("fifo:50").unwrap_err().contains("SCHED_RR"));
    }

    #[test]
    fn durations_take_units_and_bare_seconds_where_they_did() {
        let p = duration_or_secs_upto(Duration::from_secs(60), "60s");
        assert_eq!(p("1"), Ok(Duration::from_secs(1)));
        assert_eq!(p("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(p("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert_eq!(p("1min"), Ok(Duration::from_secs(60)));
        for bad in ["-1", "nan", "inf", "61", "2min", "soon", "1e400"] {
            assert!(p(bad).unwrap_err().contains("give 0s to 60s"), "{bad}");
        }
        let q = duration_upto(Duration::from_secs(10), "10s");
        assert_eq!(q("50ms"), Ok(Duration::from_millis(50)));
        assert!(q("50").unwrap_err().contains("add a unit"), "a bare number");
        assert!(q("11s").unwrap_err().contains("give 0s to 10s"));
    }

    #[test]
    fn float_flags_refuse_nan_infinities_and_out_of_range_with_the_range() {
        let p = float_in(0.0, 60.0, " s");
        assert_eq!(p("1.5"), Ok(1.5));
        assert_eq!(p("0"), Ok(0.0));
        for bad in ["nan", "NaN", "inf", "-inf", "1e9", "-0.1", "60.01"] {
            assert_eq!(p(bad), Err("out of range; give 0 to 60 s".into()), "{bad}");
        }
        assert_eq!(p("x"), Err("not a number; give 0 to 60 s".into()));
        let q = float_above(0.0, 4.0, "");
        assert_eq!(q("0.05"), Ok(0.05));
        assert!(q("0").unwrap_err().contains("more than 0"));
        assert!(q("nan").is_err());
    }

    #[test]
    fn priority_completes_a_bare_fifo_or_rr_and_overrides_a_given_one() {
        let fifo: PolicyArg = "fifo".parse().unwrap();
        assert_eq!(
            fifo.resolve(Some(80)).unwrap(),
            Policy::Fifo { priority: 80 }
        );
        let rr: PolicyArg = " rr ".parse().unwrap();
        assert_eq!(rr.resolve(Some(7)).unwrap(), Policy::Rr { priority: 7 });
        let given: PolicyArg = "fifo:50".parse().unwrap();
        assert_eq!(given.resolve(None).unwrap(), Policy::Fifo { priority: 50 });
        assert_eq!(
            given.resolve(Some(90)).unwrap(),
            Policy::Fifo { priority: 90 }
        );
        let other: PolicyArg = "other".parse().unwrap();
        assert_eq!(other.resolve(None).unwrap(), Policy::Other { nice: 0 });
    }

    #[test]
    fn missing_or_misplaced_priority_is_a_usage_error_naming_the_flags() {
        let e = "fifo"
            .parse::<PolicyArg>()
            .unwrap()
            .resolve(None)
            .unwrap_err();
        assert!(e.0.contains("--policy fifo:80, or --priority 80"), "{e}");
        let e = "other"
            .parse::<PolicyArg>()
            .unwrap()
            .resolve(Some(5))
            .unwrap_err();
        assert!(e.0.contains("not --policy other"), "{e}");
        assert!("fifo:0".parse::<PolicyArg>().is_err());
        assert!("sometimes".parse::<PolicyArg>().is_err());
    }
}

/// `--explain [auto|on|off]` of every command that explains its late
/// wake-ups (`lab cyclic`, `lab all`, `tap run`, `net bench`): the default
/// is the command's ([`ExplainArgs::mode`]: off in `lab cyclic`, auto
/// elsewhere, where the explaining trace can run: root, tracefs), a bare
/// `--explain` is on (fails when it cannot run), the old `--no-explain` a
/// hidden spelling of `--explain off` (one mode type,
/// [`firmtime_trace::explain::ExplainMode`], in every command:
/// docs/VOCABULARY.md).
#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// Trace the wake-ups to name the cause of each late one: auto (where tracefs is usable,
    /// i.e. as root; elsewhere says why not), on (fail when it cannot run), off (late items
    /// are still classified from their timestamps, but a late wake-up gets no named cause); a
    /// bare --explain is on [default: off for lab cyclic, auto elsewhere]. While measuring it
    /// traces scheduler, interrupt, softirq, idle and page-fault events (tracefs) and names
    /// what made each outlier late, its lateness split into parts that add up to it (timer
    /// delay, interrupts, tasks with pid and priority, a non-preemptible stretch, RT
    /// throttling, idle exit, the vCPU, the thread itself: the three largest printed, all in
    /// the JSON's `breakdown`). Only the measured CPUs are recorded, the ring buffers hold 2 s
    /// of the event rate measured in a 200 ms probe at the start, and a wake-up whose span the
    /// kernel lost events in is "unknown (trace lost N events)", never guessed
    /// (FIRMTIME_EXPLAIN_UNFILTERED=1: every CPU and a fixed 4 MiB, as before).
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        default_missing_value = "on",
        overrides_with = "no_explain"
    )]
    pub explain: Option<firmtime_trace::explain::ExplainMode>,
    /// Old spelling of --explain off.
    #[arg(long, hide = true, overrides_with = "explain")]
    pub no_explain: bool,
}

impl ExplainArgs {
    /// The mode asked for; the command's `default` without either flag.
    pub fn mode(
        &self,
        default: firmtime_trace::explain::ExplainMode,
    ) -> firmtime_trace::explain::ExplainMode {
        if self.no_explain {
            firmtime_trace::explain::ExplainMode::Off
        } else {
            self.explain.unwrap_or(default)
        }
    }

    /// Whether the explaining trace runs in mode `mode`: `Ok(true)`, or
    /// `Ok(false)` (off, or `auto` where it cannot run: said on stderr
    /// then), or an error naming `--explain on` and why it cannot run.
    ///
    /// # Errors
    /// With `--explain on`, when the trace cannot run (names the reason).
    pub fn runs(mode: firmtime_trace::explain::ExplainMode) -> Result<bool, UsageError> {
        use firmtime_trace::explain::{available, Decision, ExplainMode};
        match mode.decide(available) {
            Decision::Run => Ok(true),
            Decision::Skip(why) => {
                if mode == ExplainMode::Auto {
                    eprintln!(
                        "late wake-ups are not explained: {why} (--explain off silences this)"
                    );
                }
                Ok(false)
            }
            Decision::Refuse(why) => Err(UsageError(format!("--explain on: {why}"))),
        }
    }

    /// Starts the explaining trace (auto by default) for threads whose comm
    /// matches `traced_comm`, or says why not: `Ok(None)` when off, or (the
    /// reason printed to stderr) in `auto` where it cannot run.
    ///
    /// # Errors
    /// With `--explain on`, when the trace cannot run (names the reason).
    pub fn start(
        &self,
        traced_comm: &str,
    ) -> anyhow::Result<Option<firmtime_trace::explain::LoopWatch>> {
        use firmtime_trace::explain::ExplainMode;
        let mode = self.mode(ExplainMode::Auto);
        if !Self::runs(mode).map_err(|UsageError(why)| anyhow::anyhow!(why))? {
            return Ok(None);
        }
        let config = firmtime_trace::explain::Config::default();
        match firmtime_trace::explain::LoopWatch::start(&config, traced_comm) {
            Ok(w) => Ok(Some(w)),
            Err(e) if mode == ExplainMode::On => Err(anyhow::anyhow!("--explain on: {e}")),
            Err(e) => {
                eprintln!("late wake-ups are not explained: {e}");
                Ok(None)
            }
        }
    }
}

/// Stops the explaining trace `w` of one loop thread and attributes its
/// noted wake-ups: every one whose latency is in `late_wakes` (the
/// wake-ups that made something late) and the worst few. A trace that
/// fails gives `None`, said on stderr: what it would have named stays
/// "not traced".
pub fn explain_loop(
    w: firmtime_trace::explain::LoopWatch,
    thread: firmtime_trace::explain::LoopThread,
    notes: &firmtime_rt::outliers::Notes,
    late_wakes: impl Iterator<Item = i64>,
) -> Option<firmtime_trace::explain::Explanation> {
    let threshold_ns = late_wakes.min().map_or(i64::MAX, |l| l - 1);
    match w.finish(
        firmtime_trace::explain::LoopThread {
            threshold_ns,
            ..thread
        },
        notes,
    ) {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!("late wake-ups not explained: the trace failed: {e}");
            None
        }
    }
}

/// `--cpu LIST` (e.g. `0,2-3`; `lab cyclic`, `watch`): the CPUs, or a
/// usage error naming the flag, what is wrong and the online CPUs.
///
/// # Errors
/// `text` is not a CPU list.
pub fn cpu_list(text: &str) -> Result<Vec<usize>, UsageError> {
    cpu_list_for("--cpu", text)
}

/// [`cpu_list`] for the flag `flag` (named in the error).
pub fn cpu_list_for(flag: &str, text: &str) -> Result<Vec<usize>, UsageError> {
    firmtime_rt::sched::parse_cpu_list(text).map_err(|e| {
        UsageError(format!(
            "{flag} {text}: {} (valid: online CPUs {})",
            e.message(),
            firmtime_rt::sched::format_cpu_list(&firmtime_rt::sched::online_cpus())
        ))
    })
}

/// `--cpu N`: the CPU list that pins a loop to `N`, or a usage error
/// naming the online CPUs.
///
/// # Errors
/// `N` is not an online CPU.
pub fn pin_to(cpu: usize) -> Result<Vec<usize>, UsageError> {
    let online = firmtime_rt::sched::online_cpus();
    if online.contains(&cpu) {
        Ok(vec![cpu])
    } else {
        Err(UsageError(format!(
            "--cpu {cpu}: not an online CPU; online CPUs are {}",
            firmtime_rt::sched::format_cpu_list(&online)
        )))
    }
}
