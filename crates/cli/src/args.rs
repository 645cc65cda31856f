//! Argument conventions shared by every subcommand: durations and sizes with
//! units, `--json PATH`, and usage errors that exit with status 2.

use firmtime_rt::units;
use std::fmt;
use std::path::Path;
use std::time::Duration;

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
#[allow(dead_code)]
pub fn duration(text: &str) -> Result<Duration, String> {
    units::parse_duration(text).map_err(|e| e.to_string())
}

/// clap value parser for sizes with units (`64KiB`, `4MiB`, `4096`).
#[allow(dead_code)]
pub fn size(text: &str) -> Result<u64, String> {
    units::parse_size(text).map_err(|e| e.to_string())
}

/// Writes `value` as pretty JSON to `path` atomically (temp file, fsync, rename),
/// or to stdout when `path` is `-`.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let text = serde_json::to_string_pretty(value)? + "\n";
    if path.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().context("--json needs a file name")?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Real-time flags shared by every command that runs a timed loop. The names
/// are the ones docs/RT-SETUP.md explains.
#[derive(Debug, Clone, clap::Args)]
pub struct RtArgs {
    /// Scheduling policy of the timed thread: `other`, `other:-20` (nice), `batch`, `idle`,
    /// `fifo:80`, `rr:50` (priority 1-99), `deadline:RUNTIME/DEADLINE/PERIOD`.
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<firmtime_rt::sched::Policy>,
    /// Lock all memory (mlockall) before the loop starts.
    #[arg(long)]
    pub mlock: bool,
    /// Bytes of stack to touch after locking, so the loop takes no page faults.
    #[arg(long, value_name = "SIZE", value_parser = size, default_value = "256KiB")]
    pub prefault_stack: u64,
    /// CPUs to pin the timed thread to, e.g. `1` or `0,2-3`.
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    pub cpus: Option<Vec<usize>>,
    /// Timer slack of the timed thread (PR_SET_TIMERSLACK), e.g. `1ns`; default: leave as is.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timer_slack: Option<Duration>,
    /// Hold /dev/cpu_dma_latency at this many µs while running (0 = no deep idle states).
    #[arg(long, value_name = "US")]
    pub dma_latency: Option<u32>,
    /// Accept weaker settings when the kernel refuses, recording each downgrade in the
    /// output. Without it a refusal is an error: a measurement under the wrong policy is wrong.
    #[arg(long)]
    pub allow_downgrade: bool,
}

impl RtArgs {
    /// The request these flags describe, with `default_policy` when `--policy` is absent.
    #[allow(dead_code)] // used by the commands with timed loops as they land
    pub fn request(
        &self,
        default_policy: firmtime_rt::sched::Policy,
    ) -> firmtime_rt::setup::RtRequest {
        firmtime_rt::setup::RtRequest {
            policy: self.policy.unwrap_or(default_policy),
            mlock: self.mlock,
            prefault_stack: if self.mlock {
                self.prefault_stack as usize
            } else {
                0
            },
            cpus: self.cpus.clone(),
            timer_slack_ns: self.timer_slack.map(|d| d.as_nanos().max(1) as u64),
            dma_latency_us: self.dma_latency,
            allow_downgrade: self.allow_downgrade,
        }
    }
}

/// clap value parser for CPU lists (`1`, `0,2-3`).
pub fn cpu_list(text: &str) -> Result<Vec<usize>, String> {
    firmtime_rt::sched::parse_cpu_list(text).map_err(|e| e.to_string())
}
