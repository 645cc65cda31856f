//! firmtime-tap: tapping and music experiments after FTAP (Finney 2001).
//!
//! - [`experiment`]: the TOML experiment file → [`Experiment`], with errors
//!   at line and column; [`params`]: the `Copy` parameter block the engine
//!   runs on and the [`Setting`]s triggers apply.
//! - [`ftap`]: import of FTAP parameter files; [`ftap_out`]: a trial
//!   written in FTAP's output form (`.abs`) for FTAP analysis scripts.
//! - [`data`]: the trial CSV (every event) and JSON sidecar, written atomically.
//! - [`engine`]: the trial loop over a MIDI backend (feedback, metronome,
//!   triggers, end, FTAP's scheduling diagnostic); [`session`]: trial
//!   lists, seeded order, trial files; [`replay`]: play a trial back.
//! - [`audio`]: what the JACK synth renders for audio output and masking.
//! - [`late`]: why an output was late, seen from the engine (the causes in
//!   each trial's self-checks).
//! - [`onset`]: tap onsets from an audio input (a contact microphone):
//!   the causal detector and synthetic test signals.
//! - [`pairing`]: MIDI keystrokes paired with their sound (`midi+audio`).
//! - [`certificate`]: the timing certificate of a session (a self-test of
//!   the audio loop, MIDI stamping and the feedback delay) kept with every trial.
//! - [`analysis`]: inter-tap intervals, asynchronies, missing/double taps,
//!   drift and the Wing–Kristofferson decomposition.
//!
//! # Real-time contract
//!
//! Parsing, importing, writing files and analysis allocate and run before or
//! after a trial. The parameter types are `Copy` with fixed capacity, and
//! their methods marked **RT-safe.** ([`Params::apply`], [`Delay::sample_us`],
//! [`Pitch::apply`], [`Metronome::beat`], [`TriggerAt::reached`], …) never
//! allocate, lock, block or print; test builds check them with
//! `assert_no_alloc`. [`engine::Engine::run`] and [`replay::play`] are
//! **RT-safe.** the same way: their memory is allocated before the trial.
//!
//! # Example
//!
//! ```
//! use firmtime_tap::Experiment;
//! let e = Experiment::from_toml(r#"
//! name = "DAF 200 ms"
//! [feedback]
//! delay = { mode = "fixed", ms = 200 }
//! [end]
//! keystrokes = 40
//! "#).unwrap();
//! assert_eq!(e.params().feedback[0].delay.sample_us(0, &mut firmtime_tap::Rng::new(1)), 200_000);
//! ```
#![deny(missing_docs)]

pub mod analysis;
pub mod audio;
pub mod certificate;
pub mod data;
pub mod engine;
pub mod error;
pub mod experiment;
pub mod ftap;
pub mod ftap_out;
pub mod late;
pub mod live;
pub mod onset;
pub mod pairing;
pub mod params;
pub mod replay;
pub mod session;

pub use error::{Error, ErrorKind, Result};
pub use experiment::{Experiment, Input, InputSource, TrialEnd, Trigger, TriggerAt};
/// The seeded RNG of feedback randomization ([`Delay::sample_us`], [`Pitch::apply`]): firmtime-rt's.
pub use firmtime_rt::rng::Rng;
pub use params::{Delay, Feedback, Metronome, Params, Pitch, Setting};

#[cfg(test)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
