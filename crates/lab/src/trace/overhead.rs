//! What tracing costs: the sort benchmark's throughput with the trace on
//! versus off, in paired, interleaved runs (issue 8, acceptance figure 1;
//! klogger: 0.6–1.2 %, [`super::PAPER_KLOGGER_OVERHEAD_PERCENT`]).
//!
//! Each run starts the sorter with the typist and player beside it (so the
//! scheduler has switches to record) for `run_ns`; throughput is sorts per
//! second of the sorter thread. Pairs alternate their order (on/off, then
//! off/on) so drift in the machine's speed cancels; the figure is the median
//! of the pairs' on/off ratios.
//!
//! # RT contract
//! Not RT code.

use super::tracefs::{self, Instance};
use crate::error::{Error, ErrorKind, Result};
use crate::measure::{stop_requested, Progress};
use crate::workloads::{self, Control, Workload};
use firmtime_rt::clock::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// Valid `--pairs` range.
pub const PAIRS: std::ops::RangeInclusive<u32> = 1..=1000;
/// Valid `--run` range, ns (100 ms … 10 min).
pub const RUN_NS: std::ops::RangeInclusive<u64> = 100_000_000..=600_000_000_000;

/// The benchmark's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Pairs of runs (`--pairs`), default 7.
    pub pairs: u32,
    /// Length of each run, ns (`--run`), default 2 s.
    pub run_ns: u64,
    /// Kernel ring buffer per CPU, KiB, default 4096.
    pub buffer_kb: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pairs: 7,
            run_ns: 2_000_000_000,
            buffer_kb: 4096,
        }
    }
}

impl Config {
    /// `--quick`: 5 pairs of 1 s (about 10 s).
    pub fn quick() -> Self {
        Self {
            pairs: 5,
            run_ns: 1_000_000_000,
            ..Self::default()
        }
    }

    /// `--full`: 15 pairs of 3 s (about 90 s).
    pub fn full() -> Self {
        Self {
            pairs: 15,
            run_ns: 3_000_000_000,
            ..Self::default()
        }
    }

    /// Checks the parameters; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the flag.
    pub fn validate(&self) -> Result<()> {
        if !PAIRS.contains(&self.pairs) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "--pairs {} is out of range: valid is {} to {}",
                    self.pairs,
                    PAIRS.start(),
                    PAIRS.end()
                ),
            ));
        }
        if !RUN_NS.contains(&self.run_ns) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "--run {}ms is out of range: valid is 100ms to 10min",
                    self.run_ns / 1_000_000
                ),
            ));
        }
        if !super::BUFFER_KB.contains(&self.buffer_kb) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "--buffer-kb {} is out of range: valid is {} to {}",
                    self.buffer_kb,
                    super::BUFFER_KB.start(),
                    super::BUFFER_KB.end()
                ),
            ));
        }
        Ok(())
    }
}

/// One pair of runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    /// Sorts per second with tracing on.
    pub on_per_s: f64,
    /// Sorts per second with tracing off.
    pub off_per_s: f64,
    /// `on_per_s / off_per_s`.
    pub ratio: f64,
    /// True if the traced run went first.
    pub on_first: bool,
    /// Events decoded in the traced run.
    pub events: u64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadResult {
    /// Parameters.
    pub config: Config,
    /// Kernel, HZ, clocksource, preempt model.
    pub kernel: super::KernelLine,
    /// Elements sorted per round (half the L2 cache).
    pub sort_len: usize,
    /// Every pair.
    pub pairs: Vec<Pair>,
    /// Median of the pairs' ratios.
    pub median_ratio: Option<f64>,
    /// `(1 − median_ratio) × 100`: throughput lost to tracing, percent.
    pub overhead_percent: Option<f64>,
    /// True if `overhead_percent` ≤ [`super::OVERHEAD_TARGET_PERCENT`].
    pub within_target: Option<bool>,
    /// True when interrupted.
    pub partial: bool,
}

/// Median of `v` (mean of the middle two for an even count); None when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Runs the benchmark.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for bad parameters; [`ErrorKind::Unavailable`]
/// without root or tracefs.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<OverheadResult> {
    config.validate()?;
    if !tracefs::is_root() {
        return Err(Error::new(
            ErrorKind::Unavailable,
            "the trace overhead benchmark needs root (tracefs): run it with sudo",
        ));
    }
    let hz = super::KernelLine::current().config_hz.unwrap_or(250);
    let cpus = firmtime_rt::sched::online_cpus();
    let mut pairs = Vec::new();
    progress.begin("trace overhead", u64::from(config.pairs) * 2);
    let mut partial = false;
    for i in 0..config.pairs {
        let on_first = i % 2 == 0;
        let mut on = (0.0, 0);
        let mut off = 0.0;
        for traced in [on_first, !on_first] {
            if stop_requested() {
                partial = true;
                break;
            }
            // Each run starts after the same idle pause: on this VM the second of two
            // back-to-back CPU-bound runs is systematically slower (the host throttles a
            // busy vCPU), which otherwise biases every pair by its order.
            std::thread::sleep(Duration::from_nanos(config.run_ns));
            if traced {
                on = traced_run(config, hz, &cpus)?;
            } else {
                off = one_run(config.run_ns, hz);
            }
            progress.advance(1);
        }
        if partial {
            break;
        }
        pairs.push(Pair {
            on_per_s: on.0,
            off_per_s: off,
            ratio: if off > 0.0 { on.0 / off } else { 0.0 },
            on_first,
            events: on.1,
        });
    }
    progress.end();
    let ratios: Vec<f64> = pairs.iter().map(|p| p.ratio).collect();
    let median_ratio = median(&ratios);
    let overhead_percent = median_ratio.map(|r| (1.0 - r) * 100.0);
    Ok(OverheadResult {
        config: config.clone(),
        kernel: super::KernelLine::current(),
        sort_len: workloads::sort_len(),
        pairs,
        median_ratio,
        overhead_percent,
        within_target: overhead_percent.map(|p| p <= super::OVERHEAD_TARGET_PERCENT),
        partial,
    })
}

fn traced_run(config: &Config, hz: u32, cpus: &[usize]) -> Result<(f64, u64)> {
    let inst = Instance::create(&tracefs::instance_name(), config.buffer_kb)?;
    let stop = AtomicBool::new(false);
    let capacity = 2_000_000;
    let r = std::thread::scope(|s| -> Result<(f64, u64)> {
        let drainer =
            s.spawn(|| tracefs::drain(&inst, cpus, capacity, Duration::from_millis(50), &stop));
        inst.set_on(true)?;
        let per_s = one_run(config.run_ns, hz);
        inst.set_on(false)?;
        stop.store(true, Ordering::SeqCst);
        let cap = drainer
            .join()
            .map_err(|_| Error::new(ErrorKind::Io, "the trace drainer panicked"))??;
        Ok((per_s, cap.events.len() as u64))
    });
    inst.remove();
    r
}

/// One run: sorter + typist + player for `run_ns`; returns sorts per second.
fn one_run(run_ns: u64, hz: u32) -> f64 {
    let ctl = Control::default();
    let ws = [Workload::Sorter, Workload::Typist, Workload::Player];
    let tids: Vec<AtomicI32> = ws.iter().map(|_| AtomicI32::new(0)).collect();
    let its: Vec<AtomicU64> = ws.iter().map(|_| AtomicU64::new(0)).collect();
    let mut elapsed = 0;
    let mut sorts = 0;
    std::thread::scope(|s| {
        for (i, w) in ws.iter().enumerate() {
            let (ctl, tid, it) = (&ctl, &tids[i], &its[i]);
            let w = *w;
            s.spawn(move || workloads::run(w, ctl, tid, it, hz));
        }
        // Count from the first sort onward, not from thread start.
        while its[0].load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (n0, t0) = (its[0].load(Ordering::Relaxed), monotonic_ns());
        std::thread::sleep(Duration::from_nanos(run_ns));
        let (n1, t1) = (its[0].load(Ordering::Relaxed), monotonic_ns());
        elapsed = t1 - t0;
        ctl.finish.store(true, Ordering::SeqCst);
        ctl.release.store(true, Ordering::SeqCst);
        sorts = n1 - n0;
    });
    sorts as f64 * 1e9 / elapsed.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
