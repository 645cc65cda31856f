//! Argument conventions shared by every subcommand: durations and sizes with
//! units, `--json PATH`, usage errors that exit with status 2, and the
//! [`Outcome`] a subcommand reports back to `main`.

use firmtime_rt::units;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// What a subcommand reports back to `main`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything ran and every check passed (warnings allowed).
    Ok,
    /// Ran to the end, but a check failed or the run did not meet its target.
    Failed,
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

/// clap value parser for durations with units (`500us`, `1ms`, `10s`).
pub fn duration(text: &str) -> Result<Duration, String> {
    units::parse_duration(text).map_err(|e| e.to_string())
}

/// A duration flag in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// clap value parser for sizes with units (`64KiB`, `4MiB`, `4096`).
pub fn size(text: &str) -> Result<u64, String> {
    units::parse_size(text).map_err(|e| e.to_string())
}

/// Writes `value` as pretty JSON to `path` atomically
/// ([`firmtime_rt::fs::write_atomic`]: temp file, fsync, rename, directory fsync),
/// or to stdout when `path` is `-`.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let text = serde_json::to_string_pretty(value)? + "\n";
    if path.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(());
    }
    path.file_name().context("--json needs a file name")?;
    firmtime_rt::fs::write_atomic(path, text.as_bytes())?;
    Ok(())
}
