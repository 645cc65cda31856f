//! Lago (2004) §7, Figures 5–8, on JACK's dummy backend.
//!
//! Each *point* (a sample rate, a period size, a placement of the
//! `waste_time` load: a local plugin or N remote workers at a window)
//! starts a private `jackd -R -d dummy` server, runs a rack on it, and
//! first measures the machine's sporadic xruns with the rack at zero
//! load (Lago's "ignored sporadic xruns"). Then it raises the load step by
//! step ([`Search`]: coarse steps, then fine steps after the first
//! failure) and keeps the largest fraction of the period whose step
//! [`passes`]: its xruns do not exceed what the baseline rate predicts
//! (plus three standard deviations of a Poisson count, at least one),
//! nor do its overruns (cycles the rack itself measured longer than the
//! period: JACK's dummy driver catches up after a late cycle instead of
//! always reporting an xrun), and at most 0.1 % of its periods got a late
//! remote result.
//!
//! Figure 7 is not a ramp: one step at a fixed load, measuring the CPU
//! time of the central machine (this process plus jackd) per second.
//!
//! Remote workers are `firmtime net worker` processes the caller starts
//! (on loopback); the built-in work holds each block by *sleeping*, which
//! emulates separate machines on one host (spinning workers would compete
//! with the central machine for the same cores).
//!
//! Not for the RT path: everything here allocates, forks and sleeps; the
//! rack's process callback is the RT part ([`crate::host`]).
//!
//! The module by concern: `ramp` (when a step passes; the ramp, pure),
//! `plan` (the points and their rack files), `run` (running the points),
//! `results` (the JSON record), `report` (report.md and the plots).

mod plan;
mod ramp;
mod report;
mod results;
mod run;

pub use plan::{plan, rack_for, Placement, PointSpec, Timing};
pub use ramp::{allowed_xruns, passes, Search, LATE_TOLERANCE};
pub use report::{write_report, PAPER};
pub use results::{ExperimentReport, PointResult, StepResult};
pub use run::{run, run_point, waste_log_path, Setup, WASTE_LOG_ENV};
