//! firmtime-net: Lago's block-exchange middleware for distributed real-time
//! audio processing over UDP.
//!
//! The central machine runs one [`Master`] per remote stream. The
//! application registers preallocated, typed blocks (`u8`, `i16`, `i32`,
//! `f32`, `f64`) with a [`Direction`] in a [`BlockSet`]; each period it fills
//! the inputs and calls [`Master::process`], which sends them and delivers
//! the results of the period `window` periods earlier (0, 1 or 2: Lago's
//! sliding window). A [`Worker`] on the remote machine is clockless: a
//! complete period's input drives its callback, and the result goes back.
//!
//! - [`sample`]: native types and their little-endian encoding.
//! - [`block`]: blocks, handles and the serializable [`Layout`].
//! - [`wire`]: the packet format (docs/WIRE.md), pure encode/decode, MACs,
//!   sealing (ChaCha20-Poly1305 encryption of a session's packets), drop reasons.
//! - [`reassembly`]: fragments into per-period slots, any arrival order.
//! - [`master`] and [`worker`]: the two ends of the data plane; a master
//!   may mirror every period to a hot standby worker and serve from it
//!   when its worker misses a deadline or dies ([`Master`], "Hot standby").
//!
//! The control plane runs off the RT path: [`control`] (the TCP protocol),
//! [`gate`] (the bounds a stranger meets before authenticating),
//! [`server`] (the worker daemon), [`session`] (set up a remote stream,
//! heartbeat, reconnect), [`discovery`] (find workers on the LAN),
//! [`processor`] (the worker's built-in transform and work hold), [`remote`]
//! (real LADSPA plugins run by a worker for a master) and
//! [`bench`](mod@bench) (the periodic driver of `firmtime net bench`).
//!
//! # Real-time contract
//! Constructors allocate everything. After that [`Master::process`] never
//! allocates, never locks, never prints, and waits no longer than the
//! deadline it is given: a missing result is counted late and the
//! [`LatePolicy`] fills the outputs. Test builds check this with
//! `assert_no_alloc`; with the `assert-rt` feature, every call of
//! [`Master::process`] runs under [`firmtime_rt::assert_rt::no_alloc`], so a
//! program (or test binary) whose global allocator is `AllocDisabler` aborts
//! on an allocation there.
//!
//! # Example
//! ```
//! use firmtime_net::*;
//! use std::net::SocketAddr;
//!
//! // The worker doubles every sample.
//! let mut worker = Worker::bind("127.0.0.1:0".parse().unwrap(), WorkerConfig::default())?;
//! let mut blocks = BlockSet::new();
//! let input = blocks.add::<f32>(Direction::ToWorker, 64)?;
//! let output = blocks.add::<f32>(Direction::FromWorker, 64)?;
//! let spec = StreamSpec { stream_id: 7, layout: blocks.layout().clone(), peer: None };
//! worker.add_stream(spec, move |b, _seq| {
//!     let x: Vec<f32> = b.get(input).to_vec();
//!     for (o, x) in b.get_mut(output).iter_mut().zip(x) {
//!         *o = 2.0 * x;
//!     }
//! })?;
//!
//! let mut cfg = MasterConfig::new(worker.local_addr()?, 7);
//! cfg.window = 0;
//! let mut master = Master::new(cfg, blocks)?;
//! master.blocks_mut().get_mut(input).fill(0.25);
//! // Send period 0 (a real worker runs on its own thread or machine).
//! let started = std::thread::scope(|s| {
//!     let w = s.spawn(|| worker.poll_once(Some(std::time::Duration::from_secs(5))));
//!     let report = master.process(Deadline::After(5_000_000_000));
//!     w.join().unwrap().map(|_| report)
//! })?;
//! assert_eq!(started.outcome, Outcome::Delivered);
//! assert!(master.blocks().get(output).iter().all(|&y| y == 0.5));
//! # Ok::<(), firmtime_net::Error>(())
//! ```

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bench;
pub mod block;
pub mod control;
pub mod discovery;
pub mod error;
pub mod gate;
pub mod late;
pub mod master;
pub mod processor;
pub mod published;
pub mod reassembly;
pub mod remote;
pub mod runner;
pub mod sample;
pub mod server;
pub mod session;
pub mod wire;
pub mod worker;

pub use block::{BlockId, BlockSet, BlockSpec, Direction, Flow, Layout};
pub use error::{Error, ErrorKind, Result};
pub use gate::{GateConfig, GateStats, Startups};
pub use master::{
    Deadline, LatePolicy, Master, MasterConfig, MasterStats, Outcome, PathStats, PeriodReport,
    WaitMode,
};
pub use processor::{Processor, Transform, Work, WorkMode};
pub use reassembly::{Accepted, Reassembler};
pub use sample::{Sample, SampleType};
pub use server::{ServerConfig, ServerEvent, WorkerServer};
pub use session::{connect, Link, LinkStatus, SessionConfig};
pub use wire::{decode, decode_in_place, DropCounts, DropReason, Encoder, Header, Key, Packet};
pub use worker::{
    Answer, Polled, StreamOptions, StreamSpec, StreamStats, Worker, WorkerConfig, WorkerStats,
};

// Unit tests run RT code under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
