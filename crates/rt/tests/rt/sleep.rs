//! Sleep mechanisms: every one opens (rtc only where a device exists),
//! wakes at or after its deadline, and sleeps without allocating.

use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sleep::{self, Mechanism, RtcSleeper, Sleeper};
use firmtime_rt::{Errno, ErrorKind};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// ITIMER_REAL is process-wide: tests that open a setitimer sleeper take turns.
static ITIMER: Mutex<()> = Mutex::new(());

fn itimer_lock() -> MutexGuard<'static, ()> {
    ITIMER.lock().unwrap_or_else(|e| e.into_inner())
}

fn rtc_exists() -> bool {
    RtcSleeper::DEVICES.iter().any(|p| Path::new(p).exists())
}

/// Sleeps to a deadline 1.5 ms ahead `n` times under assert_no_alloc and
/// returns (deadline, wake) pairs.
fn sleep_n(s: &mut dyn Sleeper, n: usize) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0); n];
    assert_no_alloc::assert_no_alloc(|| {
        for slot in out.iter_mut() {
            let deadline = monotonic_ns() + 1_500_000;
            let wake = s.sleep_until(deadline).expect("sleep_until failed");
            *slot = (deadline, wake);
        }
    });
    out
}

#[test]
fn every_mechanism_wakes_at_or_after_its_deadline() {
    let _g = itimer_lock();
    for m in Mechanism::ALL {
        if m == Mechanism::Rtc && !rtc_exists() {
            // Its refusal is checked by rtc_is_not_present_without_a_device.
            firmtime_rt::testing::skip_device("/dev/rtc", "the rtc sleeper cannot be opened");
            continue;
        }
        let mut s = sleep::open(m).unwrap_or_else(|e| panic!("{m}: open failed: {e}"));
        assert_eq!(s.mechanism(), m);
        for (deadline, wake) in sleep_n(&mut *s, 3) {
            assert!(wake >= deadline, "{m}: woke {} ns early", deadline - wake);
        }
        if m == Mechanism::Spin {
            assert!(s.spin_ns() > 0, "{m}: spun but reported no spin time");
        } else if !m.spins() {
            assert_eq!(s.spin_ns(), 0, "{m}");
        }
    }
}

#[test]
fn past_deadline_returns_at_once_with_now() {
    let _g = itimer_lock();
    for m in Mechanism::ALL {
        if m == Mechanism::Rtc && !rtc_exists() {
            firmtime_rt::testing::skip_device("/dev/rtc", "the rtc sleeper cannot be opened");
            continue;
        }
        let mut s = sleep::open(m).unwrap();
        for deadline in [0, monotonic_ns()] {
            let before = monotonic_ns();
            let wake = s.sleep_until(deadline).unwrap();
            assert!(wake >= before && wake >= deadline, "{m}");
        }
    }
}

#[test]
fn rtc_is_not_present_without_a_device() {
    let absent = !Path::new("/dev/rtc").exists() && !Path::new("/dev/rtc0").exists();
    if !absent {
        firmtime_rt::testing::skip_device("RTC-free machine", "this machine has an RTC");
        return;
    }
    let e = sleep::open(Mechanism::Rtc)
        .err()
        .expect("rtc opened without a device");
    assert_eq!(e.kind(), ErrorKind::NotPresent);
    assert!(e.message().contains("/dev/rtc does not exist"), "{e}");
}

#[test]
fn rtc_open_of_a_missing_path_is_not_present() {
    let e = RtcSleeper::open(Path::new("/nonexistent/rtc9"), 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotPresent, "{e}");
}

#[test]
fn second_setitimer_sleeper_is_refused_until_the_first_is_dropped() {
    let _g = itimer_lock();
    let first = sleep::open(Mechanism::Setitimer).unwrap();
    let e = sleep::open(Mechanism::Setitimer)
        .err()
        .expect("two ITIMER_REAL sleepers");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("process-wide"), "{e}");
    drop(first);
    let mut again = sleep::open(Mechanism::Setitimer).unwrap();
    let d = monotonic_ns() + 1_000_000;
    assert!(again.sleep_until(d).unwrap() >= d);
}

#[test]
fn thread_bound_sleepers_refuse_other_threads() {
    let _g = itimer_lock();
    for m in [Mechanism::Setitimer, Mechanism::PosixTimer] {
        assert!(m.is_thread_bound());
        let mut s = sleep::open(m).unwrap();
        let r = std::thread::scope(|sc| {
            sc.spawn(|| s.sleep_until(monotonic_ns() + 1_000_000))
                .join()
                .unwrap()
        });
        assert_eq!(r, Err(Errno(libc::EPERM)), "{m}");
        // Still usable on its own thread.
        let d = monotonic_ns() + 1_000_000;
        assert!(s.sleep_until(d).unwrap() >= d, "{m}");
    }
}

#[test]
fn sleepers_on_several_threads_each_wake_after_their_deadlines() {
    let _g = itimer_lock();
    // Two POSIX-timer sleepers in one thread use different signals; one more
    // on another thread, plus setitimer in parallel (SIGALRM forwarded).
    let handles: Vec<_> = [
        Mechanism::PosixTimer,
        Mechanism::Setitimer,
        Mechanism::Timerfd,
    ]
    .into_iter()
    .map(|m| {
        std::thread::spawn(move || {
            let mut a = sleep::open(m).unwrap();
            let mut b = sleep::open(Mechanism::PosixTimer).unwrap();
            for _ in 0..5 {
                for s in [&mut a, &mut b] {
                    let d = monotonic_ns() + 1_000_000;
                    let w = s.sleep_until(d).unwrap();
                    assert!(w >= d, "{m}");
                }
            }
        })
    })
    .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn hybrid_reports_spin_time_within_the_sleep() {
    // A margin longer than the sleep: the whole wait is spun, so spin time
    // is positive (unless preempted past the deadline before spinning, hence
    // the retries) and never more than the time elapsed.
    let mut s = sleep::open(Mechanism::Hybrid {
        margin_ns: 10_000_000,
    })
    .unwrap();
    let start = monotonic_ns();
    for _ in 0..100 {
        let d = monotonic_ns() + 500_000;
        assert!(s.sleep_until(d).unwrap() >= d);
        if s.spin_ns() > 0 {
            break;
        }
    }
    assert!(s.spin_ns() > 0);
    assert!(s.spin_ns() <= monotonic_ns() - start);
    // A margin shorter than the sleep: spin time stays within the elapsed time.
    let mut h = sleep::open(Mechanism::Hybrid { margin_ns: 200_000 }).unwrap();
    let start = monotonic_ns();
    let d = start + 2_000_000;
    let w = h.sleep_until(d).unwrap();
    assert!(w >= d);
    assert!(h.spin_ns() <= w - start);
}
