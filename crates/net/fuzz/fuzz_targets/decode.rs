//! Fuzzes the wire decoder and the reassembler.
//!
//! Run from crates/net: `cargo +nightly fuzz run decode`. The first input
//! byte picks the key (none or a fixed one) and the receiver's payload
//! length; the rest is split into datagrams at 0xFF 0xFE markers. Checked
//! for every input: no panic; every accepted packet satisfies the header
//! invariants (index < count, fragment inside the total, MAC flag matches
//! the key); the reassembler never completes a period without every
//! fragment, and a completed payload has the layout's length.

#![no_main]

use firmtime_net::wire::fragment_span;
use firmtime_net::{decode, Accepted, Flow, Key, Reassembler};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let key = (sel & 1 == 1).then(|| Key::new(b"firmtime-net fuzz key, 32 bytes.").unwrap());
    let total = usize::from(sel >> 1) * 13;
    let flow = if sel & 0x80 != 0 { Flow::FromWorker } else { Flow::ToWorker };
    let mut re = Reassembler::new(0, flow, total, 3);
    let mut fragments_seen = 0usize;
    let mut start = 0;
    let mut datagrams = Vec::new();
    for i in 0..rest.len() {
        if rest[i..].starts_with(&[0xFF, 0xFE]) {
            datagrams.push(&rest[start..i]);
            start = i + 2;
        }
    }
    datagrams.push(&rest[start.min(rest.len())..]);
    for d in datagrams {
        let Ok(pkt) = decode(d, key.as_ref()) else {
            continue;
        };
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
            Ok(Accepted::Partial { .. }) => fragments_seen += 1,
            Ok(Accepted::Complete { seq }) => {
                fragments_seen += 1;
                assert!(fragments_seen >= usize::from(h.frag_count));
                assert_eq!(re.complete(seq).map(<[u8]>::len), Some(total));
            }
            Err(_) => {}
        }
    }
});
