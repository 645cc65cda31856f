//! Measurement-floor acceptance for `firmtime lab clock --clock monotonic`:
//! the lab's measured loop ([`clockread::sample`]) must read the clock at
//! the rate of a minimal tight loop, within 1.10×.
//!
//! In one process, for several paired rounds (the order alternating within
//! each pair, so drift and steal hit both sides alike), it runs the lab's
//! function and a minimal `for i in 0..n { buf[i] = clock_gettime(MONOTONIC) }`
//! on the same thread, each filling its own preallocated, prefaulted
//! buffer, and compares their mean gaps ((last − first) / (n − 1)). Prints
//! each round's ratio and the median; exits 1 if the median exceeds 1.10.
//!
//! Run: `scripts/lab-clock-floor.sh` (or `cargo bench -p firmtime-lab
//! --bench clock_floor -- [reads] [rounds]`).

use firmtime_lab::clockread;
use firmtime_rt::clock::{Clock, ClockKind};
use std::sync::atomic::AtomicBool;

const LIMIT: f64 = 1.10;

/// The minimal loop: nothing but the read and the store.
#[inline(never)]
fn minimal(buf: &mut [u64]) {
    for slot in buf.iter_mut() {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into a valid, owned timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        *slot = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    }
}

#[inline(never)]
fn lab(clock: &Clock, buf: &mut [u64], stop: &AtomicBool) {
    let n = clockread::sample(clock, buf, stop);
    assert_eq!(n, buf.len(), "the lab loop read every slot");
}

fn mean_gap(buf: &[u64]) -> f64 {
    (buf[buf.len() - 1] - buf[0]) as f64 / (buf.len() - 1) as f64
}

fn main() {
    // `cargo bench` passes `--bench`; take the first two numbers given.
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let reads = nums.first().copied().unwrap_or(1_000_000).max(2);
    let rounds = nums.get(1).copied().unwrap_or(11).max(1);

    let clock = Clock::open(ClockKind::Monotonic).expect("CLOCK_MONOTONIC exists");
    let stop = AtomicBool::new(false);
    let mut a = vec![1u64; reads];
    let mut b = vec![1u64; reads];
    // Warm-up: caches, branch predictors, the vDSO page.
    lab(&clock, &mut a, &stop);
    minimal(&mut b);

    println!("clock floor: {rounds} paired rounds of {reads} CLOCK_MONOTONIC reads");
    println!(
        "{:>5} {:>14} {:>14} {:>8}",
        "round", "lab ns/read", "tight ns/read", "ratio"
    );
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if round % 2 == 0 {
            lab(&clock, &mut a, &stop);
            minimal(&mut b);
        } else {
            minimal(&mut b);
            lab(&clock, &mut a, &stop);
        }
        let (la, mb) = (mean_gap(&a), mean_gap(&b));
        let ratio = la / mb;
        ratios.push(ratio);
        println!("{round:>5} {la:>14.2} {mb:>14.2} {ratio:>8.3}");
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    let verdict = if median <= LIMIT { "PASS" } else { "FAIL" };
    println!("median ratio lab/tight = {median:.3} (limit {LIMIT:.2}): {verdict}");
    if median > LIMIT {
        std::process::exit(1);
    }
}
