//! firmtime-rack: a JACK host for chains of LADSPA plugins, each stage local
//! or remote (Lago's middleware), and the waste_time experiments of
//! Lago (2004) §7.
//!
//! - [`mod@file`]: the TOML rack file, with `FILE:LINE:COL` errors.
//! - [`engine`]: the chain over plain buffers ([`Engine`], RT side) and its
//!   controller ([`RackControl`]: control changes, per-stage counters).
//! - [`host`]: the JACK client ([`RackHost`]): ports, xrun counting, DSP load.
//! - [`experiment`]: Figures 5–8 on JACK's dummy backend: the ramp's step
//!   logic (pure), the runner, and the report.
//!
//! # Real-time contract
//! Building a rack allocates, loads plugins and sets up sessions. After
//! that the process callback ([`Engine::process`]) never allocates, locks
//! or prints; a remote stage waits for its result no longer than the
//! rack's deadline. Tests check this with `assert_no_alloc`; the opt-in
//! feature `assert-rt` checks every engine cycle where it runs (an
//! allocation aborts, in debug builds whose global allocator is
//! `assert_no_alloc::AllocDisabler`, as in this crate's tests).
//!
//! # Example
//! ```no_run
//! use firmtime_rack::{build, RackFile};
//! use firmtime_ladspa::Scan;
//!
//! let file = RackFile::parse("[[stage]]\nplugin = \"amp_mono\"\ncontrols = { Gain = 0.5 }\n", "inline")?;
//! let (mut engine, mut control) = build(&file, &Scan::search_path(), 48_000, 64)?;
//! engine.input_mut(0).fill(1.0);
//! engine.process(64, firmtime_rt::clock::monotonic_ns()); // RT-safe
//! assert_eq!(engine.output(0)[0], 0.5);
//! control.apply_line("stage1.Gain = 2")?;                 // applied next cycle
//! # Ok::<(), firmtime_rack::Error>(())
//! ```

#![deny(missing_docs)]

pub mod engine;
pub mod error;
pub mod experiment;
pub mod file;
pub mod host;

pub use engine::{
    build, ControlChange, Engine, EngineCounters, EngineCounts, RackControl, RackStats,
    StageCounts, StageInfo, StageStats,
};
pub use error::{Error, ErrorKind, Result};
pub use file::{Pos, RackFile, RemoteSpec, StageKind, StageSpec};
pub use host::{HostOptions, RackCounts, RackHost, RackMetrics};

/// The most audio channels a stage may have.
pub const MAX_CHANNELS: usize = 16;

#[cfg(test)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
