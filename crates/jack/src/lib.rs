//! firmtime-jack: JACK for every firmtime client — opening clients, ports
//! and connections, the cycle-time clock, and private test servers (a dummy
//! jackd, a headless PipeWire).
//!
//! - [`client`]: [`open_client`] (never starts a server; one open at a time
//!   in the process), [`list_ports`], [`playback_ports`],
//!   [`server_running`], [`connect`], [`activate`]/[`deactivate`] with
//!   errors that say what to do, and [`XrunNotifier`], the notification
//!   handler that only counts xruns.
//! - [`clock`]: a cycle's times as absolute frames and CLOCK_MONOTONIC
//!   nanoseconds ([`CycleTimes`], [`read_cycle_times`]), JACK's 32-bit frame
//!   counter extended to 64 bits ([`FrameExtender`]), and which clock JACK's
//!   microseconds are on ([`jack_clock_offset`], [`JackClock`]), and dropped
//!   cycles seen in the frame counter ([`FrameGaps`]).
//! - [`roundtrip`]: the audio round trip through a loopback, jack_iodelay's
//!   job ([`roundtrip::measure`]), and [`roundtrip::Cable`], a client of
//!   known delay that stands in for a cable on a dummy server.
//! - [`server`]: a private `jackd -d dummy` ([`DummyServer`]) for tests and
//!   for `--jack-dummy`, so nothing depends on (or touches) a user's server.
//! - [`pipewire`]: a private headless PipeWire ([`PipeWireServer`]) and
//!   [`use_pipewire_libjack`], which makes this process use PipeWire's libjack.
//! - [`test_server`]: either private server behind one type ([`TestServer`],
//!   [`ServerKind`]), so a test body runs against both.
//!
//! libjack is loaded at run time, so a machine without JACK builds and gets
//! a clear [`Error`] ([`ErrorKind::NotInstalled`]) when a client opens. Works
//! with jackd2 and with PipeWire's JACK, which implements the same API; a
//! process uses the libjack it loads first (PipeWire's under `pw-jack`).
//! PipeWire never calls the xrun callback: [`FrameGaps`] sees its dropped
//! cycles (and jackd's) in the frame counter instead.
//!
//! Users: firmtime-midi (the JACK MIDI backend, tapper, relay, synth and
//! recorder), firmtime-rack (the rack host) and the `firmtime` binary.
//!
//! # Real-time contract
//!
//! Everything here runs at setup time (it allocates, locks the open lock,
//! forks jackd, talks to the server) except what is marked **RT-safe.**:
//! [`read_cycle_times`], the [`CycleTimes`] conversions,
//! [`FrameExtender::extend`], [`FrameGaps::observe`] and [`XrunNotifier`]'s xrun callback, which a
//! process callback may call every cycle, and the process callbacks of
//! [`roundtrip`] (preallocated buffers and atomics only): no allocation, no lock, no
//! printing. Callers measure the clock offset ([`jack_clock_offset`]) when
//! their client opens, never in the callback.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod client;
pub mod clock;
pub mod error;
pub mod pipewire;
pub mod roundtrip;
pub mod server;
pub mod test_server;

pub use client::{
    activate, connect, deactivate, list_ports, open_client, playback_ports, port_name, port_names,
    server_running, JackPort, XrunNotifier,
};
pub use clock::{
    jack_clock_offset, read_cycle_times, CycleTimes, FrameExtender, FrameGaps, JackClock,
};
pub use error::{Error, ErrorKind, Result};
pub use pipewire::{libjack_version, pipewire_jack_dir, use_pipewire_libjack, PipeWireServer};
pub use server::{program_on_path, shm_entries_of, DummyOptions, DummyServer};
pub use test_server::{ServerKind, TestServer};
