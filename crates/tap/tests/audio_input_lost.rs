//! Taps from sound whose audio input goes away mid-trial, through a private
//! `jackd -d dummy` (tests in `audio_input_lost_tests/`, shared with
//! `audio_input_lost_pipewire.rs`). Without jackd the tests print SKIP.

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::Jackd;

mod audio_input_lost_tests;
