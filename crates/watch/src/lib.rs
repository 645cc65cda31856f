//! firmtime-watch: the long-running monitor behind `firmtime watch`.
//!
//! A periodic real-time thread per chosen CPU measures wake-up latency for
//! weeks; every interval the writer stores the interval's histogram,
//! misses, worst wake-ups with their causes (the explaining trace of
//! `lab cyclic --explain`), steal and the machine's state in one SQLite
//! file ([`store`]). [`report`] looks back over it; [`metrics`] serves it
//! to Prometheus.
//!
//! # RT contract
//! Only [`interval::WatchLoop::run`] runs at a deadline: it records into
//! buffers allocated before the loop and swaps them through SPSC rings
//! (rtrb); no allocation, lock or print. Everything else (database,
//! trace attribution, HTTP) runs on ordinary threads.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod change;
pub mod error;
pub mod hist;
pub mod interval;
pub mod lock;
pub mod metrics;
pub mod report;
pub mod run;
pub mod state;
pub mod store;
pub mod unit;

pub use error::{Error, ErrorKind, Result};

// Unit tests run RT code under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
