//! Several streams per worker, foreign and malformed packets, worker-side reassembly.

use crate::common::*;
use firmtime_net::wire::{MAGIC, VERSION};
use firmtime_net::*;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Two masters (two streams, two layouts) share one worker while junk arrives.
#[test]
fn two_streams_one_worker_with_junk() {
    let (set_a, ids) = blocks();
    let mut set_b = BlockSet::new();
    let bin = set_b.add::<u8>(Direction::ToWorker, 5000).unwrap();
    let bout = set_b.add::<f64>(Direction::FromWorker, 3).unwrap();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    worker
        .add_stream(spec(10, set_a.layout()), callback)
        .unwrap();
    worker
        .add_stream(spec(11, set_b.layout()), move |b, seq| {
            let sum: u64 = b.get(bin).iter().map(|&x| u64::from(x)).sum();
            b.get_mut(bout)
                .copy_from_slice(&[sum as f64, seq as f64, -1.5]);
        })
        .unwrap();
    let addr = worker.local_addr().unwrap();
    let mut ma = Master::new(MasterConfig::new(addr, 10), set_a).unwrap();
    let mut mb = Master::new(MasterConfig::new(addr, 11), set_b).unwrap();
    let junk = UdpSocket::bind(localhost()).unwrap();
    let stop = AtomicBool::new(false);
    const JUNK_PER_PERIOD: usize = 50;
    const PERIODS: u64 = 10;
    std::thread::scope(|s| {
        let w = s.spawn(|| worker.run(&stop));
        let mut rng = firmtime_rt::rng::Rng::new(99);
        // One more period than junk rounds: its wait proves the last junk was handled.
        for n in 0..=PERIODS {
            for j in (0..JUNK_PER_PERIOD).filter(|_| n < PERIODS) {
                let mut d = [0u8; 80];
                for b in d.iter_mut() {
                    *b = (rng.next_u64() >> 56) as u8;
                }
                if j % 2 == 0 {
                    // Header-shaped junk: gets past magic and version.
                    d[..4].copy_from_slice(&MAGIC);
                    d[4] = VERSION;
                    d[5] = 0;
                }
                junk.send_to(&d[..1 + j], addr).unwrap();
            }
            fill(ma.blocks_mut(), &ids, n);
            mb.blocks_mut().get_mut(bin).fill(n as u8);
            let ra = process(&mut ma, Deadline::After(ARRIVE_NS));
            let rb = process(&mut mb, Deadline::After(ARRIVE_NS));
            if n >= 1 {
                assert_eq!(
                    (ra.outcome, rb.outcome),
                    (Outcome::Delivered, Outcome::Delivered)
                );
                assert_result_of(ma.blocks(), &ids, n - 1);
                let expect = [5000.0 * (n - 1) as f64, (n - 1) as f64, -1.5];
                assert_eq!(mb.blocks().get(bout), &expect);
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap().unwrap();
    });
    let junk_total = JUNK_PER_PERIOD as u64 * PERIODS;
    let ws = worker.stats();
    let stream_drops = worker.stream_stats(10).unwrap().drops.total()
        + worker.stream_stats(11).unwrap().drops.total();
    assert_eq!(
        ws.drops.total() + stream_drops,
        junk_total,
        "{:?}",
        ws.drops
    );
    assert!(worker.stream_stats(10).unwrap().periods >= PERIODS);
    assert!(worker.stream_stats(11).unwrap().periods >= PERIODS);
    assert_eq!(ma.stats().drops.total() + mb.stats().drops.total(), 0);
}

/// Fragments sent to a worker in reverse order, duplicated, with foreign and
/// wrong-peer packets in between: one callback per period, every drop counted.
#[test]
fn worker_reassembles_any_order_and_counts_drops() {
    let mut set = BlockSet::new();
    let x = set.add::<i32>(Direction::Both, 1000).unwrap();
    let master = UdpSocket::bind(localhost()).unwrap();
    master
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut worker = Worker::bind(localhost(), WorkerConfig::default()).unwrap();
    let mut stream = spec(2, set.layout());
    stream.peer = Some(master.local_addr().unwrap());
    worker
        .add_stream(stream, move |b, seq| {
            for v in b.get_mut(x) {
                *v = v.wrapping_add(seq as i32);
            }
        })
        .unwrap();
    let waddr = worker.local_addr().unwrap();
    let enc = Encoder::new(2, Flow::ToWorker, 1000, None).unwrap();
    let mut payload = vec![0u8; 4000];
    let mut d = vec![0u8; enc.max_datagram()];
    let stranger = UdpSocket::bind(localhost()).unwrap();
    // The worker's step allocates nothing (its callback here neither).
    let poll = |w: &mut Worker| {
        assert_no_alloc::assert_no_alloc(|| w.poll_once(Some(Duration::from_secs(5)))).unwrap()
    };
    for seq in [3u64, 2, 4] {
        set.get_mut(x).fill(seq as i32 * 100);
        set.encode(Flow::ToWorker, &mut payload);
        let frags = enc.fragments(payload.len());
        assert_eq!(frags, 4);
        for i in (0..frags).rev() {
            let len = enc.encode(&mut d, seq, &payload, i);
            master.send_to(&d[..len], waddr).unwrap();
            if i == 2 {
                master.send_to(&d[..len], waddr).unwrap(); // duplicate
                stranger.send_to(&d[..len], waddr).unwrap(); // right stream, wrong peer
            }
        }
        // 4 fragments + 1 duplicate + 1 stranger.
        let polled: Vec<Polled> = (0..6).map(|_| poll(&mut worker)).collect();
        assert_eq!(polled[0], Polled::Partial { stream_id: 2, seq });
        assert_eq!(polled[2], Polled::Dropped(DropReason::Duplicate));
        assert_eq!(polled[3], Polled::Dropped(DropReason::ForeignStream));
        assert_eq!(polled[5], Polled::Served { stream_id: 2, seq });
        let mut got = vec![0u8; 4000];
        let mut re = Reassembler::new(2, Flow::FromWorker, 4000, 2);
        loop {
            let (n, _) = master.recv_from(&mut got).unwrap();
            let pkt = decode(&got[..n], None).unwrap();
            if let Accepted::Complete { .. } = re.accept(&pkt, seq, seq).unwrap() {
                break;
            }
        }
        let mut back = BlockSet::from_layout(set.layout()).unwrap();
        back.decode(Flow::FromWorker, re.complete(seq).unwrap());
        assert!(back.get(x).iter().all(|&v| v == seq as i32 * 101));
    }
    // A period older than every slot is stale.
    let len = enc.encode(&mut d, 4 - 4, &payload, 0);
    master.send_to(&d[..len], waddr).unwrap();
    assert_eq!(poll(&mut worker), Polled::Dropped(DropReason::Stale));
    let st = worker.stream_stats(2).unwrap();
    assert_eq!(st.periods, 3);
    assert_eq!(st.reordered, 1, "period 2 began after period 3");
    assert_eq!(st.drops.get(DropReason::Duplicate), 3);
    assert_eq!(st.drops.get(DropReason::Stale), 1);
    assert_eq!(worker.stats().drops.get(DropReason::ForeignStream), 3);
    assert_eq!(
        worker.poll_once(Some(Duration::from_millis(1))).unwrap(),
        Polled::Idle
    );
}

/// A held result (a sleep hold) leaves the worker serving other streams;
/// periods that complete meanwhile are served in order after it, each with
/// its own hold; nothing allocates. A stream with its own data key refuses
/// packets under the worker's key.
#[test]
fn held_results_go_out_in_order_while_other_streams_are_served() {
    const HOLD_NS: u64 = 60_000_000;
    let key = Key::new(&[5u8; 32]).unwrap();
    let session = key.session(&[1; 32], &[2; 32]);
    let mut set = BlockSet::new();
    let x = set.add::<i32>(Direction::Both, 4).unwrap();
    let mut worker = Worker::bind(
        localhost(),
        WorkerConfig {
            key: Some(key.clone()),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let options = StreamOptions {
        data_key: Some(session.clone()),
        stateless: false,
        late_after_ns: None,
    };
    worker
        .add_stream_with(spec(1, set.layout()), options, move |b, seq, _| {
            b.get_mut(x)[0] = seq as i32;
            Answer::At(firmtime_rt::clock::monotonic_ns() + HOLD_NS)
        })
        .unwrap();
    worker
        .add_stream(spec(2, set.layout()), move |b, seq| {
            b.get_mut(x)[0] = -(seq as i32)
        })
        .unwrap();
    let waddr = worker.local_addr().unwrap();
    let master = UdpSocket::bind(localhost()).unwrap();
    master
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let send = |stream: u32, k: &Key, seq: u64| {
        let enc = Encoder::new(stream, Flow::ToWorker, 1000, Some(k.clone())).unwrap();
        let mut d = vec![0u8; enc.max_datagram()];
        let len = enc.encode(&mut d, seq, &[0u8; 16], 0);
        master.send_to(&d[..len], waddr).unwrap();
    };
    let poll = |w: &mut Worker| {
        assert_no_alloc::assert_no_alloc(|| w.poll_once(Some(Duration::from_millis(5)))).unwrap()
    };
    let t0 = std::time::Instant::now();
    send(1, &key, 0); // the worker's key: not this stream's
    send(1, &session, 0);
    send(1, &session, 1);
    send(2, &key, 7);
    assert_eq!(poll(&mut worker), Polled::Dropped(DropReason::BadMac));
    assert_eq!(
        poll(&mut worker),
        Polled::Held {
            stream_id: 1,
            seq: 0
        }
    );
    assert_eq!(
        poll(&mut worker),
        Polled::Held {
            stream_id: 1,
            seq: 1
        }
    );
    assert_eq!(
        poll(&mut worker),
        Polled::Served {
            stream_id: 2,
            seq: 7
        }
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 200];
    while got.len() < 3 {
        poll(&mut worker);
        let Ok((n, _)) = master.recv_from(&mut buf) else {
            continue;
        };
        let (stream, k) = match u32::from_le_bytes(buf[12..16].try_into().unwrap()) {
            1 => (1, &session),
            s => (s, &key),
        };
        let pkt = decode(&buf[..n], Some(k)).unwrap();
        let v = i32::from_le_bytes(pkt.payload[..4].try_into().unwrap());
        got.push((stream, pkt.header.seq, v, t0.elapsed()));
        master.set_nonblocking(true).unwrap();
    }
    assert_eq!(
        got.iter().map(|g| (g.0, g.1, g.2)).collect::<Vec<_>>(),
        [(2, 7, -7), (1, 0, 0), (1, 1, 1)]
    );
    // Serial holds: the second result a hold after the first.
    assert!(got[1].3 >= Duration::from_nanos(HOLD_NS), "{got:?}");
    assert!(got[2].3 >= Duration::from_nanos(2 * HOLD_NS), "{got:?}");
    assert_eq!(worker.stream_stats(1).unwrap().periods, 2);
}
