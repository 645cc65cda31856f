//! Timer interrupts per CPU over an interval, from `/proc/interrupts`.
//!
//! Etsion et al. (2003) wrote for kernels whose tick fired HZ times a second
//! on every CPU, busy or idle. With NO_HZ an idle CPU stops its tick, and with
//! high-resolution timers the local timer interrupt also fires for every
//! hrtimer expiry between ticks. This counts what the local timer really did
//! while the lab waits, for the report's "what changed since 2003".
//!
//! # RT contract
//! Not RT code: reads a proc file twice around a sleep.

use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::clock::monotonic_ns;
use serde::Serialize;
use std::time::Duration;

/// How long `lab all` counts: long enough for a few ticks of a 100 Hz kernel
/// to be counted to 1 %, short enough not to matter in `--quick`.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// The local timer interrupt row of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    /// The row's label and description, e.g. `LOC (Local timer interrupts)`.
    pub name: String,
    /// CPU numbers, from the header (`CPU0 CPU1 …`).
    pub cpus: Vec<usize>,
    /// Interrupts so far, one per CPU in `cpus`.
    pub counts: Vec<u64>,
}

/// Picks the local timer row out of `/proc/interrupts` text: `LOC:` on
/// x86, the `arch_timer` row on arm64. `None` if the header or such a row
/// is missing or malformed.
pub fn parse(text: &str) -> Option<TimerRow> {
    let mut lines = text.lines();
    let cpus: Vec<usize> = lines
        .next()?
        .split_whitespace()
        .map(|c| c.strip_prefix("CPU")?.parse().ok())
        .collect::<Option<_>>()?;
    if cpus.is_empty() {
        return None;
    }
    let row = |line: &str| -> Option<TimerRow> {
        let (label, rest) = line.split_once(':')?;
        let mut fields = rest.split_whitespace();
        let counts: Vec<u64> = fields
            .by_ref()
            .take(cpus.len())
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        if counts.len() != cpus.len() {
            return None;
        }
        let desc = fields.collect::<Vec<_>>().join(" ");
        let label = label.trim();
        let local = label == "LOC" || desc.split_whitespace().any(|w| w == "arch_timer");
        local.then(|| TimerRow {
            name: format!("{label} ({desc})"),
            cpus: cpus.clone(),
            counts,
        })
    };
    lines.find_map(row)
}

/// What the local timer did on each CPU over one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickRates {
    /// The `/proc/interrupts` row counted.
    pub row: String,
    /// The interval, ns (CLOCK_MONOTONIC).
    pub duration_ns: u64,
    /// CONFIG_HZ, when the kernel config is readable: the rate a periodic
    /// tick would give.
    pub config_hz: Option<u32>,
    /// Tick mode (`periodic`, `idle`, `full`), when readable.
    pub nohz: Option<String>,
    /// One entry per CPU.
    pub cpus: Vec<CpuTicks>,
}

/// One CPU's local timer interrupts over the interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuTicks {
    /// CPU number.
    pub cpu: usize,
    /// Interrupts counted.
    pub interrupts: u64,
    /// `interrupts / duration`, per second.
    pub per_s: f64,
}

impl TickRates {
    /// Rates from two readings `duration_ns` apart (the same CPUs in both).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the CPU sets differ (a CPU went on- or offline)
    /// or a count went backwards.
    pub fn between(before: &TimerRow, after: &TimerRow, duration_ns: u64) -> Result<TickRates> {
        if before.cpus != after.cpus {
            return Err(Error::new(
                ErrorKind::Io,
                "the CPUs in /proc/interrupts changed while counting timer interrupts",
            ));
        }
        let cpus = before
            .cpus
            .iter()
            .zip(before.counts.iter().zip(&after.counts))
            .map(|(&cpu, (&a, &b))| {
                let n = b.checked_sub(a).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Io,
                        format!("CPU {cpu}'s timer interrupt count went backwards"),
                    )
                })?;
                Ok(CpuTicks {
                    cpu,
                    interrupts: n,
                    per_s: n as f64 * 1e9 / duration_ns.max(1) as f64,
                })
            })
            .collect::<Result<_>>()?;
        let sys = firmtime_rt::system::SystemInfo::collect();
        Ok(TickRates {
            row: before.name.clone(),
            duration_ns,
            config_hz: sys.config_hz,
            nohz: sys.nohz,
            cpus,
        })
    }

    /// The CPU that took the fewest interrupts.
    pub fn quietest(&self) -> Option<&CpuTicks> {
        self.cpus.iter().min_by_key(|c| c.interrupts)
    }
}

fn read() -> Result<TimerRow> {
    let text = std::fs::read_to_string("/proc/interrupts")
        .map_err(|e| Error::new(ErrorKind::Unavailable, format!("/proc/interrupts: {e}")))?;
    parse(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::Unavailable,
            "/proc/interrupts has no local timer row (LOC or arch_timer)",
        )
    })
}

/// Counts each CPU's local timer interrupts over `interval` while this
/// thread sleeps.
///
/// # Errors
/// [`ErrorKind::Unavailable`] without `/proc/interrupts` or a local timer
/// row in it; [`ErrorKind::Io`] as in [`TickRates::between`].
pub fn measure(interval: Duration) -> Result<TickRates> {
    let (before, t0) = (read()?, monotonic_ns());
    std::thread::sleep(interval);
    let (after, t1) = (read()?, monotonic_ns());
    TickRates::between(&before, &after, t1 - t0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "           CPU0       CPU1       \n  \
          0:         40          0   IO-APIC   2-edge      timer\n  \
          1:          0          9   IO-APIC   1-edge      i8042\n\
         NMI:          0          0   Non-maskable interrupts\n\
         LOC:     138288    3480966   Local timer interrupts\n\
         SPU:          0          0   Spurious interrupts\n";

    const ARM64: &str = "           CPU0       CPU1       CPU2       CPU3       \n \
         11:      51234      40321      39876      41002     GICv3  27 Level     arch_timer\n \
         14:          0          0          0          0     GICv3  33 Level     uart-pl011\n\
         IPI0:       12         13         14         15       Rescheduling interrupts\n";

    #[test]
    fn the_local_timer_row_on_x86_is_loc_not_the_legacy_timer() {
        let r = parse(X86).unwrap();
        assert_eq!(r.name, "LOC (Local timer interrupts)");
        assert_eq!(r.cpus, [0, 1]);
        assert_eq!(r.counts, [138_288, 3_480_966]);
    }

    #[test]
    fn the_local_timer_row_on_arm64_is_arch_timer() {
        let r = parse(ARM64).unwrap();
        assert_eq!(r.name, "11 (GICv3 27 Level arch_timer)");
        assert_eq!(r.cpus, [0, 1, 2, 3]);
        assert_eq!(r.counts, [51_234, 40_321, 39_876, 41_002]);
    }

    #[test]
    fn missing_or_malformed_text_gives_none() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("  CPU0 CPU1\nNMI: 0 0 Non-maskable\n"), None);
        // A count missing for CPU1.
        assert_eq!(parse("  CPU0 CPU1\nLOC: 5 Local timer interrupts\n"), None);
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let before = parse(X86).unwrap();
        let mut after = before.clone();
        after.counts = vec![138_400, 3_520_966];
        let r = TickRates::between(&before, &after, 2_000_000_000).unwrap();
        assert_eq!(r.cpus[0].interrupts, 112);
        assert_eq!(r.cpus[0].per_s, 56.0);
        assert_eq!(r.cpus[1].per_s, 20_000.0);
        assert_eq!(r.quietest().unwrap().cpu, 0);
        after.counts[1] = 1;
        let e = TickRates::between(&before, &after, 1).unwrap_err();
        assert_eq!(e.message(), "CPU 1's timer interrupt count went backwards");
        after.cpus = vec![0];
        assert!(TickRates::between(&before, &after, 1).is_err());
    }
}
