//! Fuzzes the control-plane parser: what a worker does with the lines a
//! peer sends before and after authentication.
//!
//! Run from crates/net: `cargo +nightly fuzz run control corpus/control seeds/control`
//! (new inputs go to corpus/, not committed; seeds/ holds the committed seed
//! corpus). What is checked: see src/control.rs, which the stable corpus
//! replay (crates/net/tests/net/fuzz_corpus.rs) runs too.

#![no_main]

#[path = "../src/control.rs"]
mod control;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    control::check(data);
});
