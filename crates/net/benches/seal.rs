//! What sealing costs per datagram, beside the MAC'd path: encode + decode
//! of one 64-frame f32 period (256 bytes, one fragment) under a MAC key and
//! under a sealed key, in ns, and the round trip's four seal/open steps as
//! a fraction of a 64-frame period at 48 kHz (1.333 ms).
//!
//! `cargo bench -p firmtime-net --bench seal` (release build). The end-to-end
//! figure (net bench with and without `--encrypt`, alternating) is
//! scripts/net-encrypt-cost.sh.

use firmtime_net::wire::{decode, decode_in_place, max_chunk, Encoder, Key, IPV4_UDP_OVERHEAD};
use firmtime_net::Flow;
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: u64 = 200_000;
const PERIOD_NS: f64 = 64.0 / 48_000.0 * 1e9;

/// Median ns of one encode + decode over 7 runs of `ROUNDS`.
fn time(key: &Key) -> f64 {
    let chunk = max_chunk(1500, IPV4_UDP_OVERHEAD, true).expect("MTU 1500");
    let payload: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    let mut runs = Vec::new();
    let mut seq = 0u64;
    for _ in 0..7 {
        let enc = Encoder::new(1, Flow::ToWorker, chunk, Some(key.clone())).expect("encoder");
        let mut buf = vec![0u8; enc.max_datagram()];
        let t = Instant::now();
        for _ in 0..ROUNDS {
            let n = enc.encode(&mut buf, seq, &payload, 0);
            let ok = if key.is_sealed() {
                decode_in_place(&mut buf[..n], Some(key)).is_ok()
            } else {
                decode(&buf[..n], Some(key)).is_ok()
            };
            assert!(ok);
            black_box(&buf);
            seq += 1;
        }
        runs.push(t.elapsed().as_nanos() as f64 / ROUNDS as f64);
    }
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn main() {
    let shared = Key::new(b"seal bench key, 32 bytes long!!!").expect("key");
    let mac = shared.session(&[1; 32], &[2; 32]);
    let sealed = shared.sealed_session(&[1; 32], &[2; 32]);
    let m = time(&mac);
    let s = time(&sealed);
    // A round trip: the master seals, the worker opens and seals, the master opens.
    let pct = |ns: f64| 2.0 * ns / PERIOD_NS * 100.0;
    println!("one 256-byte datagram, encode + decode (median of 7 × {ROUNDS}):");
    println!(
        "  MAC (HMAC-SHA256)      {m:8.0} ns   round trip {:.3} % of a 64-frame period",
        pct(m)
    );
    println!(
        "  sealed (ChaCha20-Poly1305) {s:4.0} ns   round trip {:.3} % of a 64-frame period",
        pct(s)
    );
    println!(
        "  sealed / MAC {:.2}; sealing's extra cost per round trip {:.3} % of the period (target ≤ 2 %)",
        s / m,
        pct(s - m)
    );
}
