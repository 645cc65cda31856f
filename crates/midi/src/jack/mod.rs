//! JACK MIDI: frame-accurate input timestamps and output placed at its exact frame.
//!
//! [`JackBackend`] is a JACK client with MIDI input and output ports. Its
//! process callback (the real-time side) does, every cycle:
//!
//! - **input**: each event's frame offset in the cycle becomes an absolute
//!   frame (the cycle's first frame plus the offset) and a CLOCK_MONOTONIC
//!   time through the cycle's times from `jack_get_cycle_times` (see
//!   [`CycleTimes`](firmtime_jack::CycleTimes)). Events are never stamped
//!   with the time the callback happens to run (midir's JACK backend does,
//!   and loses the offset).
//! - **output**: each [`OutputEvent`](crate::OutputEvent) with `at_ns`
//!   becomes an absolute frame; it is written at its exact offset in the
//!   cycle that contains that frame. Events for later cycles wait in a
//!   preallocated, time-ordered queue; events whose frame has already passed
//!   go out at offset 0 of the current cycle and count as late. Each event
//!   that went out is reported as a [`SentEvent`](crate::SentEvent) with its
//!   frame and that frame's time.
//!
//! Server xruns are counted (xrun callback), never treated as failures.
//!
//! # Clocks
//!
//! Cycle times come from firmtime-jack's cycle-time clock
//! ([`firmtime_jack::clock`]): JACK's microseconds are mapped to
//! CLOCK_MONOTONIC through an offset measured when the client opens (shared
//! by every client of the process, so two clients of one server give one
//! frame the same nanoseconds; see [`JackBackend::clock_offset_ns`] and
//! [`JackBackend::jack_clock`]), and times within a cycle are interpolated
//! in integer nanoseconds so that frame → ns → frame round-trips exactly.
//!
//! Works with jackd2 (tested with its dummy driver, see
//! [`firmtime_jack::DummyServer`]) and with PipeWire's JACK, which
//! implements the same API; libjack is loaded at run time, so a machine
//! without JACK builds and gets a clear error at `open`.
//!
//! # Layout
//!
//! - `backend`: [`JackOptions`] and [`JackBackend`], the engine side;
//! - `process`: the process callback and its JACK-free core;
//! - [`audio_in`]: the optional audio input port (taps from sound), its
//!   samples in blocks to the engine side; [`player`]: a client that
//!   plays a prepared signal (tap sounds) into it from a known frame;
//! - [`audio`], [`relay`], [`tapper`]: the synth and onset recorder, the
//!   loop-test relay, the simulated tapper (each its own client or part).
//!
//! # Real-time contract
//!
//! Everything the process callback touches is allocated in `open`: SPSC rings
//! (rtrb) to and from the engine side, the pending-output queue and the
//! port list. In the callback: no allocation, no locks, no printing; a full
//! ring or queue drops the event and counts it. The engine side
//! ([`MidiBackend`](crate::MidiBackend) methods) is **RT-safe.** as well;
//! [`MidiBackend::wait`](crate::MidiBackend::wait) blocks on a futex the
//! callback wakes. With the `assert-rt` feature every process callback runs
//! under `firmtime_rt::assert_rt::no_alloc`.

pub mod audio;
pub mod audio_in;
mod backend;
pub mod player;
mod process;
pub mod relay;
mod sim;
pub mod tapper;

pub use audio::{
    AudioOptions, AudioStats, NoiseColor, OnsetRecorder, RecorderOptions, RecorderReport, Sound,
    Synth, SynthOptions,
};
pub use audio_in::{AudioBlock, AudioInOptions, AUDIO_BLOCK};
pub use backend::{JackBackend, JackOptions, STALL_NS};
pub use player::{AudioPlayer, PlayerOptions, PlayerReport};
pub use relay::{HopSummary, LoopHops, Relay, RelayOptions, RelayReport};
pub use tapper::{Tap, TapRecord, Tapper, TapperOptions};

pub(crate) use process::MidiSink;

/// The most MIDI ports of one direction a [`JackBackend`] opens.
pub const MAX_PORTS: usize = 16;
