//! The trial engine end to end through a private `jackd -d dummy` (tests
//! in `engine_tests/`, shared with `pipewire.rs`, which runs them on
//! PipeWire's JACK). Without jackd the tests print SKIP.

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::Jackd;

mod engine_tests;
