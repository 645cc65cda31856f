//! Taps from sound whose audio input goes away mid-trial, through
//! PipeWire's JACK: the tests of `audio_input_lost.rs` (in
//! `audio_input_lost_tests/`), each starting its own private headless
//! PipeWire; this process uses PipeWire's libjack (one libjack per
//! process, hence a binary of its own). Without pipewire or pipewire-jack
//! the tests print SKIP.

use firmtime_jack::ServerKind;

/// The server every test of this binary starts.
const SERVER: ServerKind = ServerKind::PipeWire;

mod audio_input_lost_tests;
