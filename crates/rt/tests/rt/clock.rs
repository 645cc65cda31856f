//! Clocks: reads, resolutions, the TSC.

use firmtime_rt::clock::{
    self, Clock, ClockKind, ClockRead, ClockVisitor, MonotonicClock, TscClock,
};
use firmtime_rt::ErrorKind;
use std::time::Duration;

#[test]
fn monotonic_clocks_never_go_backwards() {
    for kind in ClockKind::ALL.into_iter().filter(|k| k.is_monotonic()) {
        let c = match Clock::open(kind) {
            Ok(c) => c,
            Err(e) if kind == ClockKind::Tsc && e.kind() == ErrorKind::NotPresent => continue,
            Err(e) => panic!("{kind}: {e}"),
        };
        assert_eq!(c.kind(), kind);
        assert_no_alloc::assert_no_alloc(|| {
            let mut last = c.now_ns();
            for _ in 0..10_000 {
                let t = c.now_ns();
                assert!(t >= last, "{kind} went backwards");
                last = t;
            }
        });
    }
}

#[test]
fn every_clock_reads_and_agrees_with_its_neighbours() {
    let mono = clock::monotonic_ns();
    let real = clock::read_ns(libc::CLOCK_REALTIME);
    let gtod = clock::gettimeofday_ns();
    assert_eq!(gtod % 1_000, 0, "gettimeofday has microsecond units");
    // Wall clocks: after 2020 and within a second of each other.
    assert!(real > 1_577_836_800 * 1_000_000_000);
    assert!(gtod.abs_diff(real) < 1_000_000_000);
    // BOOTTIME counts suspend on top of MONOTONIC.
    assert!(clock::read_ns(libc::CLOCK_BOOTTIME) >= mono);
    assert!(clock::read_ns(libc::CLOCK_TAI) >= real - 1_000_000_000);
}

#[test]
fn resolution_is_ok_for_every_libc_clock() {
    for kind in ClockKind::ALL {
        match clock::resolution(kind) {
            Ok(r) => {
                assert!(r > Duration::ZERO, "{kind}");
                assert!(r <= Duration::from_millis(10), "{kind}: {r:?}");
            }
            Err(e) => {
                assert_eq!(kind, ClockKind::Tsc, "{kind}: {e}");
                assert_eq!(e.kind(), ErrorKind::NotPresent);
            }
        }
    }
    assert_eq!(
        clock::resolution(ClockKind::Gettimeofday).unwrap(),
        Duration::from_micros(1)
    );
}

#[test]
fn tsc_calibrates_where_invariant_and_tracks_monotonic() {
    let info = clock::tsc_info();
    assert!(!info.source_of_truth.is_empty());
    let tsc = match TscClock::calibrate(Duration::from_millis(50)) {
        Ok(t) => t,
        Err(e) => {
            assert!(!info.invariant, "invariant TSC failed to calibrate: {e}");
            assert_eq!(e.kind(), ErrorKind::NotPresent);
            firmtime_rt::testing::skip_device("invariant TSC", e);
            return;
        }
    };
    assert!(info.present && info.invariant);
    assert!(tsc.hz() > 1e6);
    // Ordering against CLOCK_MONOTONIC, with a generous 1 ms allowance for
    // the calibration error accumulated since calibration.
    let a = clock::monotonic_ns();
    let t = tsc.now_ns();
    let b = clock::monotonic_ns();
    assert!(t + 1_000_000 >= a && t <= b + 1_000_000, "{a} {t} {b}");
    let t0 = tsc.ticks();
    assert!(tsc.ticks() >= t0);
}

struct CountReads(u32);

impl ClockVisitor for CountReads {
    type Output = (ClockKind, bool);
    fn visit<C: ClockRead>(self, clock: &C) -> (ClockKind, bool) {
        let mut last = clock.now_ns();
        let mut ok = true;
        for _ in 0..self.0 {
            let t = clock.now_ns();
            ok &= !clock.kind().is_monotonic() || t >= last;
            last = t;
        }
        (clock.kind(), ok)
    }
}

#[test]
fn visit_runs_the_body_on_the_matching_concrete_clock() {
    for kind in ClockKind::ALL {
        let Ok(c) = Clock::open(kind) else { continue };
        assert_eq!(c.visit(CountReads(1000)), (kind, true));
    }
    assert_eq!(MonotonicClock.kind(), ClockKind::Monotonic);
    assert_eq!(std::mem::size_of::<MonotonicClock>(), 0);
}
