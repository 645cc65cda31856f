//! The CPU hog: continuous arithmetic, never sleeping (Finney 2001's load,
//! Etsion et al. 2003's CPU-bound processes).

use super::{Until, Work};
use std::hint::black_box;

/// Iterations between two looks at the clock and the stop flag.
const BATCH: u64 = 1 << 16;

/// Spins on a multiply-xorshift chain until done. The chain is serial on
/// purpose (each step needs the last), so it keeps one core's integer units
/// busy and cannot be vectorized; its values are never used.
pub(super) fn hog(until: &Until<'_>, seed: u32) -> Work {
    let mut x: u64 = firmtime_rt::rng::Rng::GAMMA ^ u64::from(seed);
    let mut w = Work::default();
    while !until.done() {
        for _ in 0..BATCH {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x ^= x >> 29;
        }
        x = black_box(x);
        w.iterations += BATCH;
    }
    w
}
