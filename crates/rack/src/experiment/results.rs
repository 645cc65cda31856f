//! The record of a run, as written to `results.json`: steps, points and
//! the whole experiment. The field names are the JSON keys.

use super::plan::{PointSpec, Timing};
use serde::Serialize;

/// One counted step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepResult {
    /// Fraction of the period per stage.
    pub fraction: f64,
    /// Counted seconds.
    pub seconds: f64,
    /// Periods (process cycles).
    pub periods: u64,
    /// JACK xruns.
    pub xruns: u64,
    /// Cycles the rack measured longer than the period.
    pub overruns: u64,
    /// Overruns the baseline allowed.
    pub allowed_overruns: u64,
    /// Late remote results (all stages).
    pub late: u64,
    /// Xruns the baseline allowed.
    pub allowed_xruns: u64,
    /// Passed.
    pub passed: bool,
    /// Central user CPU (this process + jackd), fraction of one CPU.
    pub central_user: f64,
    /// Central system CPU, fraction of one CPU.
    pub central_sys: f64,
    /// JACK's DSP load at the end of the step, percent.
    pub dsp_load: f32,
}

/// A point's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointResult {
    /// What was run.
    pub spec: PointSpec,
    /// Period, ms.
    pub period_ms: f64,
    /// Idle xruns measured first.
    pub baseline_xruns: u64,
    /// Idle overruns measured first.
    pub baseline_overruns: u64,
    /// Over this many seconds.
    pub baseline_s: f64,
    /// Largest passing fraction (`None`: even the first step failed).
    pub usable_fraction: Option<f64>,
    /// Every step.
    pub steps: Vec<StepResult>,
    /// The file name of the `waste_time` plugin's log of this point, in
    /// the output directory (local points); `None` (JSON `null`) for a
    /// remote point.
    pub waste_time_log: Option<String>,
}

/// The whole experiment's record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// firmtime version.
    pub version: String,
    /// The command line.
    pub command: String,
    /// `uname -r`.
    pub kernel: String,
    /// Preemption model from `uname -v` (`PREEMPT_DYNAMIC`, `PREEMPT_RT`, …).
    pub preempt: String,
    /// Current clocksource.
    pub clocksource: String,
    /// CPU model.
    pub cpu: String,
    /// RT conditions: jackd -R (SCHED_FIFO) on a dummy backend; workers on loopback.
    pub conditions: String,
    /// `--quick`.
    pub quick: bool,
    /// Step lengths and ramp.
    pub timing: Timing,
    /// Start, Unix seconds.
    pub started_unix_s: u64,
    /// End, Unix seconds.
    pub ended_unix_s: u64,
    /// Every point, in plan order.
    pub points: Vec<PointResult>,
}

/// A report of one point per spec, every point with one passing step at
/// 90 % (for tests).
#[cfg(test)]
pub(crate) fn sample_report(specs: &[PointSpec]) -> ExperimentReport {
    ExperimentReport {
        version: "0".into(),
        command: "c".into(),
        kernel: "k".into(),
        preempt: "p".into(),
        clocksource: "tsc".into(),
        cpu: "cpu".into(),
        conditions: "x".into(),
        quick: true,
        timing: Timing::quick(),
        started_unix_s: 1,
        ended_unix_s: 2,
        points: specs
            .iter()
            .map(|spec| PointResult {
                spec: spec.clone(),
                period_ms: spec.period_ms(),
                baseline_xruns: 0,
                baseline_overruns: 0,
                baseline_s: 1.0,
                usable_fraction: Some(0.9),
                steps: vec![StepResult {
                    fraction: 0.9,
                    seconds: 1.0,
                    periods: 689,
                    xruns: 0,
                    overruns: 0,
                    allowed_overruns: 1,
                    late: 0,
                    allowed_xruns: 1,
                    passed: true,
                    central_user: 0.9,
                    central_sys: 0.01,
                    dsp_load: 90.0,
                }],
                waste_time_log: None,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::plan::plan;
    #[test]
    fn json_keys_are_stable() {
        let r = sample_report(&plan(true)[..1]);
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "version",
            "command",
            "kernel",
            "preempt",
            "clocksource",
            "cpu",
            "conditions",
            "quick",
            "timing",
            "started_unix_s",
            "ended_unix_s",
            "points",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        let p = &v["points"][0];
        for k in [
            "spec",
            "period_ms",
            "baseline_xruns",
            "baseline_overruns",
            "baseline_s",
            "usable_fraction",
            "steps",
            "waste_time_log",
        ] {
            assert!(p.get(k).is_some(), "missing point.{k}");
        }
        assert_eq!(p["spec"]["placement"]["kind"], "local");
        for k in [
            "fraction",
            "seconds",
            "periods",
            "xruns",
            "overruns",
            "allowed_overruns",
            "late",
            "allowed_xruns",
            "passed",
            "central_user",
            "central_sys",
            "dsp_load",
        ] {
            assert!(p["steps"][0].get(k).is_some(), "missing step.{k}");
        }
    }
}
