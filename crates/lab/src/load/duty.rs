//! The duty-cycle load: busy a fixed share of each period, asleep the rest
//! (Etsion et al. 2003's "N %" processes). Periods follow absolute
//! CLOCK_MONOTONIC deadlines, so they do not drift.

use super::{monotonic_ns, Until, Work};
use std::hint::black_box;
use std::time::Duration;

/// Busy for `percent` % of every `period`, sleeping until the next period start.
pub(super) fn worker(until: &Until<'_>, percent: u8, period: Duration, seed: u32) -> Work {
    let period_ns = super::ns(period);
    let busy_ns = period_ns * u64::from(percent) / 100;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ u64::from(seed);
    let mut w = Work::default();
    let mut next = monotonic_ns();
    while !until.done() {
        let start = monotonic_ns();
        let busy_end = start + busy_ns;
        w.periods += 1;
        loop {
            for _ in 0..256 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                x ^= x >> 31;
            }
            x = black_box(x);
            w.iterations += 256;
            if monotonic_ns() >= busy_end || until.done() {
                break;
            }
        }
        w.busy_ns += monotonic_ns() - start;
        next += period_ns;
        let now = monotonic_ns();
        if now > next {
            // Not scheduled in time: skip to the next period boundary.
            let behind = (now - next) / period_ns + 1;
            if busy_ns < period_ns {
                w.missed_periods += behind;
            }
            next += behind * period_ns;
        }
        if busy_ns < period_ns {
            until.sleep_until(next);
        }
    }
    w
}
