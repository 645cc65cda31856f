//! A hot standby (issue 32 item 2): the master sends every period to both
//! workers and serves from the standby when the primary misses a deadline
//! or is gone. Real data planes on loopback; the SIGKILL of a real worker
//! process is crates/cli/tests/net_standby.rs.

use crate::common::*;
use firmtime_net::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PERIODS: u64 = 60;
const HOLD_AT: u64 = 20;

fn with_standby(primary: std::net::SocketAddr, standby: std::net::SocketAddr) -> MasterConfig {
    let mut cfg = MasterConfig::new(primary, 10);
    cfg.standby = Some(standby);
    cfg.standby_stream_id = Some(11);
    cfg
}

/// The primary holds one period far past its deadline: that period is the
/// standby's, and so is every later one; every output is exact.
#[test]
fn a_primary_that_misses_a_deadline_is_replaced_by_the_standby_exactly() {
    let (set, ids) = blocks();
    let mut primary = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    primary
        .add_stream(spec(10, set.layout()), |b, seq| {
            if seq == HOLD_AT {
                std::thread::sleep(Duration::from_millis(1500));
            }
            callback(b, seq);
        })
        .unwrap();
    let mut standby = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    standby
        .add_stream(spec(11, set.layout()), callback)
        .unwrap();
    let cfg = with_standby(primary.local_addr().unwrap(), standby.local_addr().unwrap());
    let mut m = Master::new(cfg, set).unwrap();
    assert_eq!(m.standby(), Some(standby.local_addr().unwrap()));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let wp = s.spawn(|| primary.run(&stop));
        let ws = s.spawn(|| standby.run(&stop));
        for n in 0..PERIODS {
            fill(m.blocks_mut(), &ids, n);
            let r = process(&mut m, Deadline::After(500_000_000));
            if n == 0 {
                assert_eq!(r.outcome, Outcome::Priming);
                continue;
            }
            assert_eq!(r.outcome, Outcome::Delivered, "period {n}: {r:?}");
            assert_result_of(m.blocks(), &ids, n - 1);
            // Period n delivers n − 1: the held one (HOLD_AT) and every later one from the standby.
            assert_eq!(r.from_standby, n > HOLD_AT, "period {n}");
            assert_eq!(m.serving_standby(), n > HOLD_AT, "period {n}");
        }
        stop.store(true, Ordering::Relaxed);
        wp.join().unwrap().unwrap();
        ws.join().unwrap().unwrap();
    });
    let st = m.stats();
    assert_eq!(st.takeovers, 1, "{st:?}");
    assert_eq!(st.from_standby, PERIODS - 1 - HOLD_AT, "{st:?}");
    assert_eq!(st.delivered, PERIODS - 1);
    assert_eq!(st.late, 0);
    // While the primary served, a standby result that came after its slot
    // was reused is stale; nothing else is dropped.
    let d = st.standby.drops;
    assert_eq!(d.total(), d.get(DropReason::Stale), "{st:?}");
    assert!(st.standby.ready >= PERIODS - 1 - HOLD_AT, "{st:?}");
}

/// A standby that never answers costs nothing: the primary serves every
/// period, the standby's silence is counted on its side only.
#[test]
fn a_silent_standby_leaves_the_primary_serving_and_is_counted_lost() {
    let (set, ids) = blocks();
    let mut primary = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    primary
        .add_stream(spec(10, set.layout()), callback)
        .unwrap();
    let silent = silent_peer();
    let cfg = with_standby(primary.local_addr().unwrap(), silent.local_addr().unwrap());
    let mut m = Master::new(cfg, set).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let wp = s.spawn(|| primary.run(&stop));
        for n in 0..PERIODS {
            fill(m.blocks_mut(), &ids, n);
            let r = process(&mut m, Deadline::After(ARRIVE_NS));
            if n > 0 {
                assert_eq!((r.outcome, r.from_standby), (Outcome::Delivered, false));
                assert_result_of(m.blocks(), &ids, n - 1);
            }
        }
        stop.store(true, Ordering::Relaxed);
        wp.join().unwrap().unwrap();
    });
    let st = m.stats();
    assert_eq!(
        (st.takeovers, st.from_standby, st.late),
        (0, 0, 0),
        "{st:?}"
    );
    assert_eq!((st.lost, st.drops.total()), (0, 0), "{st:?}");
    // A period is retired 3 periods (window + 2) after it was sent: every
    // one sent but the last 3, each decided with the primary's result.
    assert_eq!(st.standby.lost, PERIODS - 3, "{st:?}");
    assert_eq!(st.standby.ready, 0);
}

/// A primary whose port is closed (its process died: ICMP port
/// unreachable) is not waited for: the standby's result is taken as soon
/// as it is there, long before the deadline.
#[test]
fn a_primary_whose_port_is_closed_is_not_waited_for() {
    let (set, ids) = blocks();
    let closed = silent_peer().local_addr().unwrap(); // the socket is dropped: nothing listens
    let mut standby = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    standby
        .add_stream(spec(11, set.layout()), callback)
        .unwrap();
    let mut m = Master::new(with_standby(closed, standby.local_addr().unwrap()), set).unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Duration::from_secs(60);
    std::thread::scope(|s| {
        let ws = s.spawn(|| standby.run(&stop));
        for n in 0..5 {
            fill(m.blocks_mut(), &ids, n);
            let t = Instant::now();
            let r = process(&mut m, Deadline::After(deadline.as_nanos() as u64));
            // Waiting out the deadline would take a minute.
            assert!(
                t.elapsed() < deadline / 3,
                "period {n} waited {:?}",
                t.elapsed()
            );
            if n > 0 {
                assert_eq!((r.outcome, r.from_standby), (Outcome::Delivered, true));
                assert_result_of(m.blocks(), &ids, n - 1);
            }
        }
        stop.store(true, Ordering::Relaxed);
        ws.join().unwrap().unwrap();
    });
    let st = m.stats();
    assert_eq!((st.takeovers, st.from_standby), (1, 4), "{st:?}");
    assert!(st.send_errors + st.recv_errors > 0, "{st:?}");
}
