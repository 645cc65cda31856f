//! firmtime-lab: the timing lab.
//!
//! Reproduces and extends the measurements of Finney (2001), Etsion, Tsafrir
//! and Feitelson (2003) and Varoquaux (2006) so that any user can validate
//! their own machine. Each measurement takes a typed config and returns a
//! typed result; this crate never prints. Samples go into preallocated
//! storage during the measured loop and are summarized afterwards
//! ([`stats`]); results are written in the formats other tools already read
//! ([`output`]) and plotted ([`plot`]). Load comes from bounded child
//! processes ([`load`]).

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod all;
pub mod billing;
mod check;
pub mod clockread;
pub mod cyclic;
pub mod doctor;
pub mod error;
pub mod frames;
pub mod interrupts;
pub mod load;
pub mod measure;
pub mod measurement;
pub mod output;
pub mod overhead;
pub mod plot;
pub mod quanta;
pub mod report;
pub mod stats;
pub mod suspend;
pub mod tails;
pub mod ticks;
pub mod workloads;

pub use error::{Error, ErrorKind, Result};

// Unit tests run RT closures under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
