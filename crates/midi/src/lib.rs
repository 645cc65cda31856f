//! firmtime-midi: MIDI 1.0 with timestamps you can trust — a pure byte
//! parser and encoder, and real-time backends behind one trait.
//!
//! # The pure core (no I/O)
//!
//! - [`Parser`]: a byte-stream parser for a serial port, a raw MIDI device or
//!   a pty. Each byte goes in with its arrival time; each completed message
//!   comes out as an [`Event`] stamped with the time of its *first* byte (its
//!   status byte, or its first data byte under running status), so a message
//!   that took 960 µs to cross a 31.25 kbaud wire is dated when it began.
//!   Real-time bytes (0xF8..=0xFF) complete at once with their own time, even
//!   inside another message. SysEx payloads go into a buffer of fixed
//!   capacity; overflow, truncation and garbage are counted in
//!   [`ParserStats`], never panicked on, and the next status byte resynchronizes.
//! - [`parse_message`]: one complete message, as a JACK MIDI event holds it.
//! - [`MidiMessage::encode`], [`Encoder`] (optional running status) and
//!   [`encode_sysex`]: bytes for an output stream.
//!
//! Channels are 0..=15 throughout (MIDI channel 1 is 0).
//!
//! # Backends (I/O)
//!
//! Every backend implements [`MidiBackend`]: timestamped input
//! (`CLOCK_MONOTONIC` ns), output now or at a time, and a report of when each
//! output actually went out.
//!
//! - [`jack`]: JACK MIDI, frame-accurate ([`jack::JackBackend`]); plus a
//!   simulated tapper, a relay client for the loop test, and a synth and
//!   onset recorder for audio. Opening clients, the cycle-time clock and
//!   the private dummy server are firmtime-jack's ([`firmtime_jack`]).
//! - [`raw`]: any byte-stream fd — serial tty, `/dev/midi*`,
//!   `/dev/snd/midiC*D*`, a pty — polled by a real-time thread.
//! - `alsa` (cargo feature `alsa`, on by default): the ALSA sequencer with
//!   kernel real-time queue timestamps and output scheduled on the queue.
//! - [`loopback`]: in-process, for tests; [`pty`]: a pty peer paced like a cable.
//!
//! On top of them: [`looptest`] (FTAP's loop benchmark) and [`diag`]
//! (FTAP's scheduling diagnostic). Setup errors are one [`Error`] type for
//! every backend; the real-time path returns the small `Copy` [`BackendError`].
//!
//! # Real-time contract
//!
//! [`Parser::new`] allocates and touches the SysEx buffer; a backend's `open`
//! allocates its rings and queues, locks memory and starts its real-time
//! side. After that, every function marked **RT-safe.** — all parsing and
//! encoding, every [`MidiBackend`] method, a JACK process callback, a raw or
//! ALSA I/O thread's loop, [`looptest::LoopTest::run`] — never allocates,
//! never locks a lock a non-RT thread holds, never prints, and blocks only on
//! the wait it exists for; the parser does a bounded amount of work per byte
//! whatever the input. Test builds check this with `assert_no_alloc`.
//!
//! # Example
//!
//! ```
//! use firmtime_midi::{Encoder, MidiMessage, Parser};
//!
//! // A keyboard sends two notes with running status; a clock byte lands mid-message.
//! let stream = [0x90, 60, 100, 62, 0xF8, 90];
//! let mut parser = Parser::new(256);
//! let mut events = Vec::new();
//! for (i, &byte) in stream.iter().enumerate() {
//!     let t_ns = i as u64 * 320_000; // one byte every 320 µs
//!     for ev in parser.push(byte, t_ns) {
//!         events.push(ev);
//!     }
//! }
//! let notes: Vec<_> = events
//!     .iter()
//!     .filter_map(|ev| match ev.msg {
//!         MidiMessage::NoteOn { note, .. } => Some((note, ev.t_ns)),
//!         _ => None,
//!     })
//!     .collect();
//! assert_eq!(notes, [(60, 0), (62, 960_000)]);
//! assert_eq!(parser.stats().messages, 3); // two notes and the clock
//!
//! // Encode them back with running status: the second status byte is saved,
//! // and the clock byte, now between messages, does not cancel running status.
//! let mut enc = Encoder::new(true);
//! let mut wire = Vec::new();
//! for ev in &events {
//!     let mut out = [0; 3];
//!     let n = enc.encode_running(&ev.msg, &mut out);
//!     wire.extend_from_slice(&out[..n]);
//! }
//! assert_eq!(wire, [0x90, 60, 100, 0xF8, 62, 90]);
//! ```

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alsa")]
pub mod alsa;
pub mod backend;
pub mod diag;
mod encode;
pub mod error;
pub mod jack;
pub mod loopback;
pub mod looptest;
mod message;
mod parser;
pub mod pty;
pub mod raw;

pub use backend::{
    BackendError, BackendKind, BackendStats, InputEvent, InputLoss, LossCause, MidiBackend,
    OutputEvent, PortIndex, SentEvent,
};
pub use encode::{encode_sysex, EncodeError, Encoder};
pub use error::{Error, ErrorKind, Result};
pub use message::{parse_message, MidiMessage, ParseError};
pub use parser::{Event, Events, Parser, ParserStats};

// Test builds abort on any allocation inside `assert_no_alloc(|| ...)`.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static A: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
