//! Periodic loops with real sleepers: on the grid, every deadline accounted for.

use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::periodic::{Periodic, Tick};
use firmtime_rt::sleep::{self, Mechanism, Sleeper};

const PERIOD: u64 = 1_000_000;

#[test]
fn ticks_stay_on_the_grid_and_account_for_every_deadline() {
    for m in [
        Mechanism::ClockNanosleep,
        Mechanism::Timerfd,
        Mechanism::PosixTimer,
    ] {
        let mut s = sleep::open(m).unwrap();
        let start = monotonic_ns() + PERIOD;
        let mut p = Periodic::new(start, PERIOD);
        let mut ticks = [Tick {
            index: 0,
            deadline_ns: 0,
            wake_ns: 0,
            latency_ns: 0,
            missed: 0,
        }; 20];
        assert_no_alloc::assert_no_alloc(|| {
            for t in ticks.iter_mut() {
                *t = p.wait(&mut *s).unwrap();
            }
        });
        let mut expected_index = 0;
        for t in ticks {
            assert_eq!(t.index, expected_index, "{m}");
            assert_eq!(t.deadline_ns, start + t.index * PERIOD, "{m}: off the grid");
            assert!(t.wake_ns >= t.deadline_ns, "{m}: woke early");
            assert_eq!(t.latency_ns, (t.wake_ns - t.deadline_ns) as i64);
            let passed = (t.index + 1..)
                .take_while(|&j| start + j * PERIOD < t.wake_ns)
                .count() as u64;
            assert_eq!(t.missed, passed, "{m}");
            expected_index = t.index + 1 + t.missed;
        }
        assert_eq!(p.ticks(), 20);
        assert_eq!(p.next_index(), p.ticks() + p.missed_total());
        assert_eq!(
            p.missed_total(),
            ticks.iter().map(|t| t.missed).sum::<u64>()
        );
    }
}

#[test]
fn an_overrun_is_counted_as_missed_not_replayed() {
    let mut s = sleep::open(Mechanism::ClockNanosleep).unwrap();
    let start = monotonic_ns() + PERIOD;
    let mut p = Periodic::new(start, PERIOD);
    let first = p.wait(&mut *s).unwrap();
    // Work until 2.5 periods past the next deadline: that deadline passes
    // while we work (it becomes a late tick); the two after it pass too
    // (missed). Based on the next deadline, not the first, because the first
    // wake-up may itself have been late on a loaded or virtualized machine.
    let next_index = p.next_index();
    assert_eq!(next_index, 1 + first.missed);
    let busy_until = p.next_deadline_ns() + 2 * PERIOD + PERIOD / 2;
    while monotonic_ns() < busy_until {
        std::hint::spin_loop();
    }
    // Through the Box itself (Sleeper is implemented for Box<dyn Sleeper>).
    let late = p.wait(&mut s).unwrap();
    assert_eq!(late.index, next_index);
    assert!(late.wake_ns >= busy_until);
    assert!(late.missed >= 2, "{late:?}");
    let passed = (late.index + 1..)
        .take_while(|&j| start + j * PERIOD < late.wake_ns)
        .count() as u64;
    assert_eq!(late.missed, passed);
    // The next wait resumes on the grid at the first future deadline: one
    // wake-up, not a burst.
    let next = p.wait(&mut *s).unwrap();
    assert_eq!(next.index, late.index + 1 + late.missed);
    assert!(next.deadline_ns >= late.wake_ns);
    assert_eq!(p.missed_total(), first.missed + late.missed + next.missed);
}

#[test]
fn a_concrete_sleeper_drives_the_loop_statically_and_reports_its_spin() {
    let mut s = sleep::HybridSleeper::new(200_000);
    let mut p = Periodic::new(monotonic_ns() + PERIOD, PERIOD);
    let mut last = None;
    assert_no_alloc::assert_no_alloc(|| {
        for _ in 0..10 {
            last = Some(p.wait(&mut s).unwrap());
        }
    });
    let last = last.unwrap();
    assert!(last.wake_ns >= last.deadline_ns);
    assert_eq!(p.ticks(), 10);
    assert_eq!(p.next_index(), 10 + p.missed_total());
    assert!(s.spin_ns() <= last.wake_ns - p.start_ns() + PERIOD);
}
