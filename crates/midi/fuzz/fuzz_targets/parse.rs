//! Fuzzes the MIDI byte-stream parser and `parse_message`.
//!
//! Run from crates/midi: `cargo +nightly fuzz run parse corpus/parse seeds/parse`
//! (new inputs go to corpus/, not committed; seeds/ holds the committed seed
//! corpus). What is checked: see src/parse.rs, which the stable corpus replay
//! (crates/midi/tests/midi/fuzz_corpus.rs) runs too.

#![no_main]

#[path = "../src/parse.rs"]
mod parse;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    parse::check(data);
});
