//! Fuzzes the wire decoder and the reassembler.
//!
//! Run from crates/net: `cargo +nightly fuzz run decode corpus/decode seeds/decode`
//! (new inputs go to corpus/, not committed; seeds/ holds the committed seed
//! corpus). What is checked: see src/decode.rs, which the stable corpus
//! replay (crates/net/tests/net/fuzz_corpus.rs) runs too.

#![no_main]

#[path = "../src/decode.rs"]
mod decode;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    decode::check(data);
});
