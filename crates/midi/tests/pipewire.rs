//! JACK MIDI against PipeWire's JACK: the tests of `jack.rs` (in
//! `jack_tests/`), each starting its own private headless PipeWire (timer
//! driver, no devices, no session manager) and stopping it. This process
//! uses PipeWire's libjack (a process can load only one libjack, hence a
//! binary of its own). Skipped, with the reason printed, when pipewire or
//! pipewire-jack is not installed; `scripts/pipewire-vs-jackd.sh` runs it
//! beside `jack.rs`.

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::PipeWire;

mod jack_tests;
