//! The `parse` fuzz target's corpus, replayed on stable in every test run.
//!
//! The fuzz crate (crates/midi/fuzz) is outside the workspace and needs
//! nightly to fuzz; its target's body lives in crates/midi/fuzz/src/parse.rs,
//! included here by `#[path]`, so this test compiles and runs exactly the
//! code the fuzzer runs, over every stored input: the committed seeds
//! (crates/midi/fuzz/seeds/parse, written from [`seeds`]) and, when present,
//! the local corpus a fuzzing run left in crates/midi/fuzz/corpus/parse.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/parse.rs"]
mod parse;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Every file of the seed corpus and of the local corpus (if any), by path.
fn stored_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    firmtime_rt::testing::fuzz_inputs(&fuzz_dir(), target)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The seed corpus: valid streams (the parser fixtures, single messages) and
/// invalid ones (truncated, overflowing SysEx, every byte value), each behind
/// the byte that picks the SysEx capacity.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let with_cap = |cap: u8, bytes: &[u8]| [&[cap][..], bytes].concat();
    let mut out = vec![
        ("empty".to_string(), vec![]),
        ("capacity-only".to_string(), vec![32]),
        ("note-on".to_string(), with_cap(32, &[0x90, 0x3C, 0x64])),
        ("program-change".to_string(), with_cap(0, &[0xC5, 0x07])),
        ("truncated-note-on".to_string(), with_cap(32, &[0x90, 0x3C])),
        (
            "sysex-whole".to_string(),
            with_cap(8, &[0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7]),
        ),
        (
            "sysex-overflow".to_string(),
            with_cap(4, &[0xF0, 1, 2, 3, 4, 5, 6, 0xF7, 0x80, 0x3C, 0x40]),
        ),
        (
            "realtime-only".to_string(),
            with_cap(0, &[0xF8, 0xFA, 0xFB, 0xFC, 0xFE, 0xFF]),
        ),
        (
            "every-byte".to_string(),
            with_cap(63, &(0..=255).collect::<Vec<u8>>()),
        ),
    ];
    for name in [
        "running_status.bin",
        "realtime_interleaved.bin",
        "sysex.bin",
        "garbage.bin",
        "tapping_session.bin",
    ] {
        let stem = name.trim_end_matches(".bin").replace('_', "-");
        out.push((format!("fixture-{stem}"), with_cap(32, &fixture(name))));
    }
    out
}

/// Runs `check` on `data`, naming `path` when it panics.
fn replay<T>(path: &Path, data: &[u8], check: impl Fn(&[u8]) -> T) -> T {
    firmtime_rt::testing::fuzz_replay("parse", path, data, check)
}

#[test]
fn every_stored_input_of_the_parse_fuzz_target_passes_its_checks() {
    let inputs = stored_inputs("parse");
    assert!(
        inputs.len() >= seeds().len(),
        "{} stored inputs, fewer than the {} seeds",
        inputs.len(),
        seeds().len()
    );
    let mut total = parse::Seen::default();
    for (path, data) in &inputs {
        let seen = replay(path, data, parse::check);
        total.events += seen.events;
        total.sysex += seen.sysex;
        total.whole_message |= seen.whole_message;
    }
    // The corpus reaches the parser's events, its SysEx path and the
    // whole-event path (`parse_message` accepting the stream).
    assert!(
        total.events > 0 && total.sysex > 0 && total.whole_message,
        "{total:?}"
    );
}

/// The committed seeds are exactly what [`seeds`] makes (so they follow the
/// fixtures); `FIRMTIME_WRITE_SEEDS=1` writes them first.
#[test]
fn the_parse_seed_corpus_holds_every_generated_seed() {
    let dir = fuzz_dir().join("seeds/parse");
    if std::env::var_os("FIRMTIME_WRITE_SEEDS").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in seeds() {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
    for (name, data) in seeds() {
        let path = dir.join(&name);
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (FIRMTIME_WRITE_SEEDS=1 writes it)", path.display())
        });
        assert_eq!(
            stored,
            data,
            "{} differs from its seed (FIRMTIME_WRITE_SEEDS=1 rewrites it)",
            path.display()
        );
    }
}
