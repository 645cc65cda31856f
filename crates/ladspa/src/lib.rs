//! firmtime-ladspa: a LADSPA host.
//!
//! - [`allowed`]: loading for someone else (a worker): only checked files
//!   in allowed directories, only the library asked for, the scan cached.
//! - [`host`]: the search path (`LADSPA_PATH`), scanning directories, and
//!   resolving `LABEL`, `ID` or `FILE:LABEL` to a plugin.
//! - [`plugin`]: loaded [`Library`]s, owned descriptions ([`PluginInfo`],
//!   [`PortInfo`], [`Hints`] with defaults computed as `ladspa.h` says),
//!   and [`Instance`]s that own their port buffers.
//! - [`chain`]: plugins run in series, outputs feeding inputs.
//! - [`mod@apply`]: a chain over a WAV file, bit-identical to `applyplugin`.
//! - [`ffi`]: the raw LADSPA 1.1 ABI, also used by the plugins firmtime builds.
//! - [`export`]: the other side, for plugins written in Rust: one trait
//!   ([`export::ExportedPlugin`]) and one macro ([`export_plugin!`]) give a
//!   library its checked, panic-proof C entry points.
//! - [`lv2`]: the same plugins as LV2 (`lv2_descriptor`, one
//!   [`export_lv2!`] per library), and [`bundle`]: the Turtle files of an
//!   LV2 bundle, written from the LADSPA descriptors.
//!
//! Every pointer a plugin hands over is checked before use: descriptors
//! with NULL labels, names, port arrays or required functions are skipped
//! with a reason, and optional functions are called only when present.
//! The library stays loaded while any [`Plugin`] or [`Instance`] made from
//! it lives (each holds an `Arc` of it).
//!
//! # Real-time contract
//! Loading, describing, instantiating and building a [`Chain`] allocate and
//! run off the RT path. After that [`Instance::run`], [`Instance::run_adding`],
//! [`Instance::set_control`], the buffer accessors and [`Chain::process`]
//! never allocate, lock, print or block — beyond what the plugin's own
//! run() does (plugins flagged `hard_rt_capable` promise not to). Tests
//! check this under `assert_no_alloc`.
//!
//! # Example
//! ```no_run
//! use firmtime_ladspa::{Scan, Stage, Chain};
//!
//! let scan = Scan::search_path();
//! let amp = scan.find("amp_mono")?;                  // label, ID, or FILE:LABEL
//! let controls = amp.info().resolve_controls(&[0.5], 48_000.0, true)?;
//! let mut chain = Chain::new(&[Stage { plugin: amp, controls }], 48_000, 256)?;
//! chain.input_mut(0)[..4].copy_from_slice(&[1.0, -1.0, 0.5, 0.0]);
//! chain.process(4).unwrap();                       // RT-safe
//! assert_eq!(&chain.output(0)[..4], &[0.5, -0.5, 0.25, 0.0]);
//! # Ok::<(), firmtime_ladspa::Error>(())
//! ```

#![deny(missing_docs)]

pub mod allowed;
pub mod apply;
pub mod bundle;
pub mod chain;
pub mod error;
pub mod export;
pub mod ffi;
pub mod host;
pub mod lv2;
pub mod plugin;

pub use allowed::AllowedDirs;
pub use apply::{apply, wav_sample_rate, ApplyOptions, ApplyReport, OutputFormat};
pub use chain::{Chain, Stage};
pub use error::{shown, Error, ErrorKind, Result};
pub use host::{search_path, Scan};
pub use plugin::{
    DefaultHint, Direction, Hints, Instance, Library, Plugin, PluginInfo, PortInfo, PortKind,
    Properties, RunError,
};

#[cfg(test)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
