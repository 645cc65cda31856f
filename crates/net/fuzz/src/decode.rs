//! The body of the `decode` fuzz target (fuzz_targets/decode.rs), kept in a
//! file of its own so that the stable corpus replay
//! (crates/net/tests/net/fuzz_corpus.rs, part of `./test.sh`) compiles and
//! runs exactly the code the fuzzer runs: both include it by `#[path]`.
//!
//! The first input byte picks the key (none or a fixed one), the flow and
//! the receiver's payload length; the rest is split into datagrams at
//! 0xFF 0xFE markers. Checked for every input: no panic; every accepted
//! packet satisfies the header invariants (index < count, fragment inside
//! the total, MAC flag matches the key); the reassembler never completes a
//! period without every fragment, and a completed payload has the layout's
//! length.

use firmtime_net::wire::fragment_span;
use firmtime_net::{decode, Accepted, Flow, Key, Reassembler};

/// The key of inputs whose first byte is odd.
pub const KEY: &[u8; 32] = b"firmtime-net fuzz key, 32 bytes.";
/// What separates datagrams in an input.
pub const SEPARATOR: [u8; 2] = [0xFF, 0xFE];

/// What one input exercised (the replay asserts that its corpus reaches
/// each path; the fuzzer ignores it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Datagrams that decoded.
    pub decoded: u64,
    /// Of those, fragments the reassembler took.
    pub accepted: u64,
    /// Periods it completed.
    pub completed: u64,
}

/// The payload length a receiver expects for selector byte `sel`.
pub fn total_of(sel: u8) -> usize {
    usize::from(sel >> 1) * 13
}

/// The flow a receiver serves for selector byte `sel`.
pub fn flow_of(sel: u8) -> Flow {
    if sel & 0x80 != 0 {
        Flow::FromWorker
    } else {
        Flow::ToWorker
    }
}

/// Runs one fuzz input through the checks above; panics when one fails.
pub fn check(data: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let Some((&sel, rest)) = data.split_first() else {
        return seen;
    };
    let key = (sel & 1 == 1).then(|| Key::new(KEY).unwrap());
    let total = total_of(sel);
    let mut re = Reassembler::new(0, flow_of(sel), total, 3);
    let mut fragments_seen = 0usize;
    let mut start = 0;
    let mut datagrams = Vec::new();
    for i in 0..rest.len() {
        if rest[i..].starts_with(&SEPARATOR) {
            datagrams.push(&rest[start..i]);
            start = i + 2;
        }
    }
    datagrams.push(&rest[start.min(rest.len())..]);
    for d in datagrams {
        let Ok(pkt) = decode(d, key.as_ref()) else {
            continue;
        };
        seen.decoded += 1;
        let h = pkt.header;
        assert_eq!(h.mac, key.is_some());
        assert!(h.frag_index < h.frag_count);
        assert_eq!(pkt.payload.len(), usize::from(h.frag_len));
        assert_eq!(
            fragment_span(
                h.total_len as usize,
                usize::from(h.frag_count),
                usize::from(h.frag_index)
            ),
            Some((h.frag_offset as usize, usize::from(h.frag_len)))
        );
        match re.accept(&pkt, 0, u64::MAX) {
            Ok(Accepted::Partial { .. }) => {
                seen.accepted += 1;
                fragments_seen += 1;
            }
            Ok(Accepted::Complete { seq }) => {
                seen.accepted += 1;
                seen.completed += 1;
                fragments_seen += 1;
                assert!(fragments_seen >= usize::from(h.frag_count));
                assert_eq!(re.complete(seq).map(<[u8]>::len), Some(total));
            }
            Err(_) => {}
        }
    }
    seen
}
