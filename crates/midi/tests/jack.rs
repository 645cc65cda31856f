//! JACK MIDI against a real jackd: each test starts its own private
//! `jackd -d dummy` under a unique name and stops it. Skipped, with the
//! reason printed, when `jackd` is not installed.
//!
//! This is a second integration-test binary of firmtime-midi: it needs jackd
//! and is run by `scripts/midi-jack-frames.sh` on its own. The tests are in
//! `jack_tests/`, shared with `pipewire.rs` (the same tests on PipeWire).

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::Jackd;

mod jack_tests;
