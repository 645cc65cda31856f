//! The trial engine end to end through PipeWire's JACK: the tests of
//! `engine.rs` (in `engine_tests/`), each starting its own private headless
//! PipeWire and stopping it; this process uses PipeWire's libjack (one
//! libjack per process, hence a binary of its own). Without pipewire or
//! pipewire-jack the tests print SKIP.

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::PipeWire;

mod engine_tests;
