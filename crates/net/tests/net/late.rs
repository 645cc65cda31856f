//! Late results: the policies, discarding results after their deadline, loss and reordering.

use crate::common::*;
use firmtime_net::wire::max_chunk;
use firmtime_net::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Short: nothing will come.
const LATE_NS: u64 = 2_000_000;

fn master_to(addr: std::net::SocketAddr, window: u8, policy: Option<LatePolicy>) -> (Master, Ids) {
    let (set, ids) = blocks();
    let mut cfg = MasterConfig::new(addr, 1);
    cfg.window = window;
    cfg.late_policy = policy;
    (Master::new(cfg, set).unwrap(), ids)
}

#[test]
fn silent_worker_every_period_late_dry_passes_input() {
    let peer = silent_peer();
    let (mut m, ids) = master_to(peer.local_addr().unwrap(), 1, None);
    for n in 0..20 {
        fill(m.blocks_mut(), &ids, n);
        let r = process(&mut m, Deadline::After(LATE_NS));
        let expect = if n == 0 {
            Outcome::Priming
        } else {
            Outcome::Late
        };
        assert_eq!(r.outcome, expect);
        let b = m.blocks();
        assert_eq!(b.get(ids.output), b.get(ids.input), "period {n}");
        assert!(b
            .get(ids.both)
            .iter()
            .enumerate()
            .all(|(i, &v)| v == both_in(n, i)));
    }
    let st = m.stats();
    assert_eq!((st.priming, st.late, st.delivered), (1, 19, 0));
    // Late seqs 0..=18; seq s is retired when s + 3 is sent (s + 3 <= 19).
    assert_eq!(st.lost, 17);
    assert_eq!(st.drops.total(), 0);
}

#[test]
fn silent_worker_zeros_policy_outputs_zeros() {
    let peer = silent_peer();
    let (mut m, ids) = master_to(peer.local_addr().unwrap(), 0, Some(LatePolicy::Zeros));
    for n in 0..5 {
        fill(m.blocks_mut(), &ids, n);
        assert_eq!(
            process(&mut m, Deadline::After(LATE_NS)).outcome,
            Outcome::Late
        );
        assert!(m.blocks().get(ids.output).iter().all(|&v| v == 0.0));
        assert!(m.blocks().get(ids.both).iter().all(|&v| v == 0));
    }
    assert_eq!(m.stats().late, 5);
}

#[test]
fn no_worker_at_all_is_late_not_a_crash() {
    // A port nobody listens on: ICMP port unreachable comes back as errors, counted.
    let addr = silent_peer().local_addr().unwrap();
    let (mut m, ids) = master_to(addr, 2, Some(LatePolicy::RepeatLast));
    for n in 0..10 {
        fill(m.blocks_mut(), &ids, n);
        process(&mut m, Deadline::After(LATE_NS));
        // Nothing ever arrived: RepeatLast repeats zeros.
        assert!(m.blocks().get(ids.output).iter().all(|&v| v == 0.0));
    }
    let st = m.stats();
    assert_eq!((st.priming, st.late, st.delivered), (2, 8, 0));
}

#[test]
fn default_policy_is_zeros_when_outputs_have_no_matching_input() {
    let mut b = BlockSet::new();
    b.add::<f32>(Direction::ToWorker, 4).unwrap();
    b.add::<f64>(Direction::FromWorker, 4).unwrap();
    assert_eq!(LatePolicy::default_for(b.layout()), LatePolicy::Zeros);
    let mut b = BlockSet::new();
    b.add::<f32>(Direction::ToWorker, 4).unwrap();
    b.add::<f32>(Direction::FromWorker, 4).unwrap();
    b.add::<u8>(Direction::Both, 4).unwrap();
    assert_eq!(LatePolicy::default_for(b.layout()), LatePolicy::Dry);
}

/// The worker sleeps through period 5: that period is late, its result arrives
/// after the deadline and is discarded, never delivered in a later period;
/// RepeatLast repeats the last good result meanwhile.
#[test]
fn late_result_is_discarded_never_delivered_later() {
    let (set, ids) = blocks();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    worker
        .add_stream(spec(1, set.layout()), |b, seq| {
            if seq == 5 {
                std::thread::sleep(Duration::from_millis(400));
            }
            callback(b, seq);
        })
        .unwrap();
    let mut cfg = MasterConfig::new(worker.local_addr().unwrap(), 1);
    cfg.late_policy = Some(LatePolicy::RepeatLast);
    let mut m = Master::new(cfg, set).unwrap();
    let stop = AtomicBool::new(false);
    let mut last_good: Option<u64> = None;
    let mut late_seqs = Vec::new();
    std::thread::scope(|s| {
        let w = s.spawn(|| worker.run(&stop));
        for n in 0..40 {
            fill(m.blocks_mut(), &ids, n);
            // Until period 6 (which waits for 5), results must arrive; from then on be brief.
            let deadline = if n <= 5 { ARRIVE_NS } else { 40_000_000 };
            let r = process(&mut m, Deadline::After(deadline));
            match r.outcome {
                Outcome::Priming => assert_eq!(n, 0),
                Outcome::Delivered => {
                    let due = r.result_seq.unwrap();
                    assert_eq!(due, n - 1);
                    assert_result_of(m.blocks(), &ids, due);
                    last_good = Some(due);
                }
                Outcome::Late => {
                    late_seqs.push(r.result_seq.unwrap());
                    assert_result_of(m.blocks(), &ids, last_good.unwrap());
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap().unwrap();
    });
    assert!(late_seqs.contains(&5), "late: {late_seqs:?}");
    assert!(
        last_good.unwrap() > 5,
        "the stream recovers after the sleep"
    );
    let st = m.stats();
    assert_eq!(st.late, late_seqs.len() as u64);
    assert_eq!(st.delivered + st.late + st.priming, 40);
    assert!(
        st.drops.get(DropReason::AfterDeadline) >= 1,
        "{:?}",
        st.drops
    );
}

/// A worker that answers each pair of periods in swapped order: every result
/// is still delivered in its own period, and each swap is counted.
#[test]
fn reordered_results_are_delivered_in_order_and_counted() {
    let (set, ids) = blocks();
    let layout = set.layout().clone();
    let fake = silent_peer();
    let mut cfg = MasterConfig::new(fake.local_addr().unwrap(), 4);
    cfg.window = 2;
    let mut m = Master::new(cfg, set).unwrap();
    let master_addr = m.local_addr().unwrap();
    const PAIRS: u64 = 10;
    std::thread::scope(|s| {
        s.spawn(|| {
            let chunk = max_chunk(1500, wire::IPV4_UDP_OVERHEAD, false).unwrap();
            let mut re = Reassembler::new(4, Flow::ToWorker, layout.payload_len(Flow::ToWorker), 4);
            let out = Encoder::new(4, Flow::FromWorker, chunk, None).unwrap();
            let mut blocks = BlockSet::from_layout(&layout).unwrap();
            let mut results: Vec<Vec<u8>> = Vec::new();
            let mut buf = vec![0u8; 65536];
            let mut done = 0;
            while done < 2 * PAIRS {
                let (n, _) = fake.recv_from(&mut buf).unwrap();
                let pkt = decode(&buf[..n], None).unwrap();
                if let Ok(Accepted::Complete { seq }) = re.accept(&pkt, 0, u64::MAX) {
                    assert_eq!(seq, done);
                    blocks.decode(Flow::ToWorker, re.complete(seq).unwrap());
                    callback(&mut blocks, seq);
                    let mut payload = vec![0u8; layout.payload_len(Flow::FromWorker)];
                    blocks.encode(Flow::FromWorker, &mut payload);
                    results.push(payload);
                    done += 1;
                    if seq % 2 == 1 {
                        for s in [seq, seq - 1] {
                            let p = &results[s as usize];
                            let mut d = vec![0u8; out.max_datagram()];
                            for i in 0..out.fragments(p.len()) {
                                let len = out.encode(&mut d, s, p, i);
                                fake.send_to(&d[..len], master_addr).unwrap();
                            }
                        }
                    }
                }
            }
        });
        for n in 0..2 * PAIRS + 2 {
            fill(m.blocks_mut(), &ids, n);
            let r = process(&mut m, Deadline::After(ARRIVE_NS));
            if n >= 2 {
                assert_eq!(r.outcome, Outcome::Delivered, "period {n}");
                assert_result_of(m.blocks(), &ids, n - 2);
            }
        }
    });
    let st = m.stats();
    assert_eq!(st.delivered, 2 * PAIRS);
    assert_eq!(st.reordered, PAIRS);
    assert_eq!(st.late, 0);
}
