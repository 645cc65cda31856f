//! Event log: exact counts, order preserved across threads, drops counted.

use firmtime_rt::eventlog::{event_log, Recorder};

#[test]
fn full_log_drops_and_counts_then_accepts_again_after_a_drain() {
    let (mut w, mut r) = event_log::<u32>(4);
    assert_eq!(w.capacity(), 4);
    let mut accepted = 0;
    assert_no_alloc::assert_no_alloc(|| {
        for i in 0..10 {
            accepted += u32::from(w.push(i));
        }
    });
    assert_eq!(accepted, 4);
    assert_eq!((w.pushed(), w.dropped()), (4, 6));
    let mut got = Vec::new();
    assert_eq!(r.drain(|e| got.push(e)), 4);
    assert_eq!(got, [0, 1, 2, 3]);
    assert!(w.push(100));
    got.clear();
    r.drain(|e| got.push(e));
    assert_eq!(got, [100]);
    assert_eq!((r.pushed(), r.dropped(), r.drained()), (5, 6, 5));
}

#[test]
fn events_cross_threads_in_order_and_every_one_is_drained_or_counted_dropped() {
    const N: u64 = 200_000;
    let (mut w, mut r) = event_log::<(u64, u64)>(256);
    let writer = std::thread::spawn(move || {
        assert_no_alloc::assert_no_alloc(|| {
            for i in 0..N {
                w.push((i, i.wrapping_mul(31)));
            }
        });
        (w.pushed(), w.dropped())
    });
    let mut got: Vec<u64> = Vec::with_capacity(N as usize);
    let mut bad_payload = 0;
    loop {
        let done = r.is_abandoned();
        r.drain(|(i, p)| {
            bad_payload += u64::from(p != i.wrapping_mul(31));
            got.push(i);
        });
        if done {
            break;
        }
        std::thread::yield_now();
    }
    r.drain(|(i, _)| got.push(i));
    let (pushed, dropped) = writer.join().unwrap();
    assert_eq!(bad_payload, 0);
    assert!(got.windows(2).all(|w| w[0] < w[1]), "order not preserved");
    assert_eq!(pushed + dropped, N);
    assert_eq!(got.len() as u64, pushed);
    assert_eq!(
        (r.pushed(), r.dropped(), r.drained()),
        (pushed, dropped, pushed)
    );
}

#[test]
fn recorder_keeps_samples_in_order_without_allocating() {
    let mut rec = Recorder::<(u64, i64)>::with_capacity(1_000);
    assert_no_alloc::assert_no_alloc(|| {
        for i in 0..1_200u64 {
            rec.push((i, -(i as i64)));
        }
    });
    assert_eq!(rec.len(), 1_000);
    assert_eq!(rec.overflow(), 200);
    assert!(rec
        .as_slice()
        .iter()
        .enumerate()
        .all(|(k, &(i, n))| i == k as u64 && n == -(k as i64)));
}
