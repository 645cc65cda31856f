//! A master and a worker exchange blocks bit-exactly at windows 0, 1 and 2.

use crate::common::*;
use firmtime_net::*;
use std::sync::atomic::{AtomicBool, Ordering};

fn exchange(window: u8, key: Option<Key>, mtu: usize, wait: WaitMode) {
    let (set, ids) = blocks();
    let wcfg = WorkerConfig {
        key: key.clone(),
        mtu,
    };
    let mut worker = Worker::bind(localhost(), wcfg).unwrap();
    worker.add_stream(spec(3, set.layout()), callback).unwrap();
    let mut cfg = MasterConfig::new(worker.local_addr().unwrap(), 3);
    cfg.window = window;
    cfg.key = key;
    cfg.mtu = mtu;
    cfg.wait = wait;
    let mut m = Master::new(cfg, set).unwrap();
    assert_eq!(m.late_policy(), LatePolicy::Dry);
    let stop = AtomicBool::new(false);
    const PERIODS: u64 = 30;
    std::thread::scope(|s| {
        let w = s.spawn(|| worker.run(&stop));
        for n in 0..PERIODS {
            fill(m.blocks_mut(), &ids, n);
            let r = process(&mut m, Deadline::After(ARRIVE_NS));
            assert_eq!(r.seq, n);
            if n < u64::from(window) {
                // Priming, Dry: the f32 output is the input; `both` keeps its input.
                assert_eq!(r.outcome, Outcome::Priming);
                assert_eq!(r.result_seq, None);
                let b = m.blocks();
                assert_eq!(b.get(ids.output), b.get(ids.input));
                assert!(b
                    .get(ids.both)
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == both_in(n, i)));
            } else {
                assert_eq!(r.outcome, Outcome::Delivered, "period {n}: {r:?}");
                assert_eq!(r.result_seq, Some(n - u64::from(window)));
                assert!(r.rtt_ns.is_some());
                assert_result_of(m.blocks(), &ids, n - u64::from(window));
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap().unwrap();
    });
    let st = *m.stats();
    assert_eq!(st.periods, PERIODS);
    assert_eq!(st.priming, u64::from(window));
    assert_eq!(st.delivered, PERIODS - u64::from(window));
    assert_eq!((st.late, st.lost, st.reordered), (0, 0, 0));
    assert_eq!(st.drops.total(), 0, "{:?}", st.drops);
    assert_eq!(st.rtt_samples, st.delivered);
    assert_eq!(m.rtt_samples().count() as u64, st.delivered);
    let ws = worker.stream_stats(3).unwrap();
    // The last `window` inputs may still be in flight when the worker stops.
    assert!(
        (PERIODS - u64::from(window)..=PERIODS).contains(&ws.periods),
        "{ws:?}"
    );
    assert_eq!(ws.drops.total() + worker.stats().drops.total(), 0);
}

#[test]
fn window_0_is_bit_exact() {
    exchange(0, None, 1500, WaitMode::Poll);
}

#[test]
fn window_1_is_bit_exact_and_primes_one_period() {
    exchange(1, None, 1500, WaitMode::Poll);
}

#[test]
fn window_2_is_bit_exact_and_primes_two_periods() {
    exchange(2, None, 1500, WaitMode::Poll);
}

#[test]
fn keyed_small_mtu_spinning_is_bit_exact() {
    let key = Key::new(b"a pre-shared key of 32 bytes....").unwrap();
    exchange(1, Some(key), 576, WaitMode::Spin);
}

#[test]
fn window_above_2_is_refused_with_reason() {
    let (set, _) = blocks();
    let mut cfg = MasterConfig::new(localhost(), 1);
    cfg.window = 3;
    let e = Master::new(cfg, set).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("use 0, 1 or 2"), "{e}");
}

/// With `assert-rt` the check is inside `Master::process` itself: called
/// here directly, with no `assert_no_alloc` of the test's own, through
/// priming, delivered and late periods (an allocation would abort).
#[cfg(feature = "assert-rt")]
#[test]
fn assert_rt_checks_process_where_it_runs() {
    assert_eq!(firmtime_rt::assert_rt::ENABLED, cfg!(debug_assertions));
    let (set, ids) = blocks();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    worker.add_stream(spec(5, set.layout()), callback).unwrap();
    let mut cfg = MasterConfig::new(worker.local_addr().unwrap(), 5);
    cfg.window = 1;
    let mut m = Master::new(cfg, set).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| worker.run(&stop));
        for n in 0..5 {
            fill(m.blocks_mut(), &ids, n);
            let r = m.process(Deadline::After(ARRIVE_NS));
            let want = if n == 0 {
                Outcome::Priming
            } else {
                Outcome::Delivered
            };
            assert_eq!(r.outcome, want, "period {n}: {r:?}");
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap().unwrap();
    });
    let peer = silent_peer();
    m.set_worker(peer.local_addr().unwrap()).unwrap();
    // The first period may still deliver the old worker's answer to the
    // block in flight (window 1), depending on whether it replied before it
    // stopped; the silent peer never answers, so the next one is late.
    let mut r = m.process(Deadline::After(1_000_000));
    if r.outcome == Outcome::Delivered {
        r = m.process(Deadline::After(1_000_000));
    }
    assert_eq!(r.outcome, Outcome::Late, "{r:?}");
}

/// The worker times each result of a timed stream (last input fragment in,
/// last result fragment out) into preallocated atomics and counts those
/// over the stream's budget as late; every `poll_once` runs under
/// `assert_no_alloc`, so recording cannot allocate.
#[test]
fn a_timed_stream_records_each_results_time_without_allocating() {
    use firmtime_net::published::{bucket_of, PeriodTimes};
    use std::sync::Arc;
    const HOLD_NS: u64 = 2_000_000;
    const PERIODS: u64 = 20;
    let (set, ids) = blocks();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    let times = Arc::new(PeriodTimes::default());
    worker.set_period_times(times.clone());
    let options = StreamOptions {
        late_after_ns: Some(HOLD_NS / 2),
        ..StreamOptions::default()
    };
    worker
        .add_stream_with(spec(4, set.layout()), options, |b, seq, _| {
            callback(b, seq);
            Answer::At(firmtime_rt::clock::monotonic_ns() + HOLD_NS)
        })
        .unwrap();
    let mut cfg = MasterConfig::new(worker.local_addr().unwrap(), 4);
    cfg.window = 1;
    let mut m = Master::new(cfg, set).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                assert_no_alloc::assert_no_alloc(|| {
                    worker.poll_once(Some(std::time::Duration::from_millis(10)))
                })
                .unwrap();
            }
        });
        for n in 0..PERIODS {
            fill(m.blocks_mut(), &ids, n);
            process(&mut m, Deadline::After(ARRIVE_NS));
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
    });
    let delivered = m.stats().delivered;
    assert_eq!(delivered, PERIODS - 1, "{:?}", m.stats());
    let ws = *worker.stream_stats(4).unwrap();
    let t = times.snapshot();
    // Each result sent was timed, and each was held past the budget.
    assert!(
        t.count() >= delivered && t.count() <= ws.periods,
        "{t:?} {ws:?}"
    );
    assert_eq!(ws.late, t.count(), "{t:?} {ws:?}");
    assert!(t.sum_ns >= t.count() * HOLD_NS, "{t:?}");
    let below: u64 = t.counts[..=bucket_of(HOLD_NS)].iter().sum();
    assert_eq!(below, 0, "a held result timed under its hold: {t:?}");
}

/// A stream without `late_after_ns` (discovery, a plugin's) is neither
/// timed nor counted late.
#[test]
fn an_untimed_stream_records_nothing() {
    use firmtime_net::published::PeriodTimes;
    use std::sync::Arc;
    let (set, ids) = blocks();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    let times = Arc::new(PeriodTimes::default());
    worker.set_period_times(times.clone());
    worker.add_stream(spec(6, set.layout()), callback).unwrap();
    let mut m = Master::new(MasterConfig::new(worker.local_addr().unwrap(), 6), set).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| worker.run(&stop));
        for n in 0..5 {
            fill(m.blocks_mut(), &ids, n);
            process(&mut m, Deadline::After(ARRIVE_NS));
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap().unwrap();
    });
    // The last input may still be in flight when the worker stops.
    let served = worker.stream_stats(6).unwrap().periods;
    assert!(served >= m.stats().delivered && served > 0, "{served}");
    assert_eq!(times.snapshot().count(), 0);
    assert_eq!(worker.stream_stats(6).unwrap().late, 0);
}
