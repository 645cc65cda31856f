//! The control plane over loopback: setup, bit-exact exchange against the
//! same processor run locally, keys, reconnection, discovery and counters.

use crate::common::{localhost, ARRIVE_NS};
use firmtime_net::control::{query_stats, Conn, Reply, Request};
use firmtime_net::*;
use std::time::Duration;

const PERIOD: u64 = 2_000_000;

fn key(b: u8) -> Key {
    Key::new(&[b; 32]).unwrap()
}

fn server(key: Option<Key>, at: std::net::SocketAddr) -> WorkerServer {
    let mut c = ServerConfig::new(at);
    c.key = key;
    WorkerServer::start(c).unwrap()
}

struct Stream {
    set: BlockSet,
    input: BlockId<i32>,
    wave: BlockId<f64>,
    out: BlockId<i32>,
    both: BlockId<f32>,
}

fn stream() -> Stream {
    let mut set = BlockSet::new();
    let input = set.add::<i32>(Direction::ToWorker, 500).unwrap();
    let wave = set.add::<f64>(Direction::ToWorker, 300).unwrap();
    let out = set.add::<i32>(Direction::FromWorker, 500).unwrap();
    let both = set.add::<f32>(Direction::Both, 64).unwrap();
    Stream {
        set,
        input,
        wave,
        out,
        both,
    }
}

fn fill(b: &mut BlockSet, s: &Stream, n: u64) {
    for (i, v) in b.get_mut(s.input).iter_mut().enumerate() {
        *v = (n as i32).wrapping_mul(104_729) ^ (i as i32 * 31);
    }
    for (i, v) in b.get_mut(s.wave).iter_mut().enumerate() {
        *v = (n as f64 * 0.1 + i as f64).sin();
    }
    for (i, v) in b.get_mut(s.both).iter_mut().enumerate() {
        *v = n as f32 * 1.5 - i as f32;
    }
}

fn session(worker: std::net::SocketAddr, key: Option<Key>, window: u8) -> SessionConfig {
    let mut c = SessionConfig::new(worker, PERIOD);
    c.key = key;
    c.window = window;
    c.transform = Transform::Negate;
    c
}

#[test]
fn remote_output_is_bit_exact_against_the_local_processor_delayed_by_the_window() {
    for (window, k) in [(0u8, None), (1, Some(key(7))), (2, None)] {
        let srv = server(k.clone(), localhost());
        let s = stream();
        let layout = s.set.layout().clone();
        let (mut m, link) =
            connect(session(srv.local_addr(), k, window), s.set.clone_layout()).unwrap();
        assert!(link.status().connected);
        // The same processing, run here on the same inputs.
        let local = Processor::new(&layout, Transform::Negate, Work::default(), PERIOD).unwrap();
        let mut expect = BlockSet::from_layout(&layout).unwrap();
        for n in 0..40u64 {
            fill(m.blocks_mut(), &s, n);
            let r = m.process(Deadline::After(ARRIVE_NS));
            if n < u64::from(window) {
                assert_eq!(r.outcome, Outcome::Priming);
                continue;
            }
            assert_eq!(r.outcome, Outcome::Delivered, "window {window} period {n}");
            fill(&mut expect, &s, n - u64::from(window));
            local.transform(&mut expect);
            let bits = |b: &BlockSet| {
                (
                    b.get(s.out).to_vec(),
                    b.get(s.both)
                        .iter()
                        .map(|x| x.to_bits())
                        .collect::<Vec<_>>(),
                )
            };
            assert_eq!(
                bits(m.blocks()),
                bits(&expect),
                "window {window} period {n}"
            );
        }
        assert_eq!(m.stats().late, 0);
        link.close();
    }
}

/// A `BlockSet` with the same layout (the test keeps the ids).
trait CloneLayout {
    fn clone_layout(&self) -> BlockSet;
}
impl CloneLayout for BlockSet {
    fn clone_layout(&self) -> BlockSet {
        BlockSet::from_layout(self.layout()).unwrap()
    }
}

#[test]
fn wrong_key_missing_key_and_unexpected_key_are_refused_with_clear_errors() {
    let srv = server(Some(key(1)), localhost());
    let s = stream();
    let e = connect(
        session(srv.local_addr(), Some(key(2)), 1),
        s.set.clone_layout(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.message().contains("authentication failed"), "{e}");
    assert!(e.message().contains("--key"), "{e}");
    let e = connect(session(srv.local_addr(), None, 1), s.set.clone_layout()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.message().contains("requires a key"), "{e}");
    let open = server(None, localhost());
    let e = connect(
        session(open.local_addr(), Some(key(1)), 1),
        s.set.clone_layout(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.message().contains("runs without a key"), "{e}");
    assert_eq!(srv.sessions(), 0);
}

#[test]
fn a_restarted_worker_gets_the_stream_again_while_the_master_runs_on_its_policy() {
    let srv = server(None, localhost());
    let addr = srv.local_addr();
    let s = stream();
    let mut cfg = session(addr, None, 1);
    cfg.transform = Transform::Copy;
    let (mut m, link) = connect(cfg, s.set.clone_layout()).unwrap();
    let mut n = 0u64;
    let mut run = |m: &mut Master, periods: u64, deadline: u64| {
        let mut outcomes = Vec::new();
        for _ in 0..periods {
            fill(m.blocks_mut(), &s, n);
            let r = m.process(Deadline::After(deadline));
            // Dry policy or a copy: the first output is always a copy of an input.
            outcomes.push(r.outcome);
            n += 1;
        }
        outcomes
    };
    assert!(run(&mut m, 10, ARRIVE_NS)[1..]
        .iter()
        .all(|o| *o == Outcome::Delivered));
    srv.stop();
    // Worker away: process() keeps returning within its deadline, late.
    let mut waited = 0;
    while link.status().connected {
        run(&mut m, 1, PERIOD);
        waited += 1;
        assert!(waited < 5_000, "the loss was never detected");
    }
    let away = run(&mut m, 20, PERIOD);
    // Nothing can be delivered from a stopped worker; every period falls back
    // (late, or priming again if the link re-primes the stream) — but the
    // first, whose result the worker may have sent just before it stopped
    // (still queued in the master's socket when the loss was seen).
    assert!(
        away[1..].iter().all(|o| *o != Outcome::Delivered),
        "{away:?}"
    );
    let srv = server(None, addr);
    let mut waited = 0;
    while link.status().reconnects == 0 {
        run(&mut m, 1, PERIOD);
        waited += 1;
        assert!(waited < 5_000, "never reconnected: {:?}", link.status());
    }
    // Results flow again (the first one or two may still be late).
    let back = run(&mut m, 30, ARRIVE_NS);
    assert!(
        back[5..].iter().all(|o| *o == Outcome::Delivered),
        "{back:?}"
    );
    let st = link.status();
    assert_eq!((st.losses, st.reconnects), (1, 1));
    let kinds: Vec<_> = link.events().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            session::LinkEventKind::Lost,
            session::LinkEventKind::Reconnected
        ]
    );
    assert_eq!(srv.sessions(), 1);
    link.close();
}

#[test]
fn discovery_finds_a_worker_by_unicast_and_counts_its_sessions() {
    let srv = server(Some(key(3)), localhost());
    let s = stream();
    let (_m, link) = connect(
        session(srv.local_addr(), Some(key(3)), 1),
        s.set.clone_layout(),
    )
    .unwrap();
    let found = discovery::discover(
        &[srv.local_addr()],
        Some(key(3)),
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].addr, srv.local_addr());
    assert_eq!(found[0].sessions, 1);
    // Without the key the worker drops the probe.
    let none = discovery::discover(&[srv.local_addr()], None, Duration::from_millis(200)).unwrap();
    assert!(none.is_empty());
    drop(link);
}

#[test]
fn stats_count_foreign_datagrams_and_set_work_is_confirmed() {
    let srv = server(None, localhost());
    let s = stream();
    let (_m, link) = connect(session(srv.local_addr(), None, 1), s.set.clone_layout()).unwrap();
    let junk = std::net::UdpSocket::bind(localhost()).unwrap();
    for i in 0..500u32 {
        junk.send_to(&i.to_le_bytes(), srv.local_addr()).unwrap();
        // Paced: a burst would overflow the socket buffer (counted by the kernel, not here).
        if i % 25 == 24 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let w = Work {
        fraction: 0.25,
        mode: WorkMode::Sleep,
    };
    link.set_work(w, Duration::from_secs(2)).unwrap();
    let mut r = query_stats(srv.local_addr(), None, Duration::from_secs(2)).unwrap();
    for _ in 0..100 {
        if r.dropped >= 500 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        r = link.worker_stats(Duration::from_secs(2)).unwrap();
    }
    assert_eq!(r.dropped, 500, "{r:?}");
    assert_eq!(r.drops.get("truncated"), Some(&500));
    assert_eq!(r.sessions, 1);
    let bad = link
        .set_work(
            Work {
                fraction: 9.0,
                mode: WorkMode::Spin,
            },
            Duration::from_secs(1),
        )
        .unwrap_err();
    assert!(bad.message().contains("out of range"), "{bad}");
}

#[test]
fn a_session_cannot_set_up_the_discovery_stream() {
    let srv = server(None, localhost());
    let mut c = Conn::connect(srv.local_addr(), None, Duration::from_secs(2)).unwrap();
    c.send(&Request::Setup(control::Setup {
        stream_id: discovery::DISCOVERY_STREAM,
        data_port: 9,
        layout: discovery::layout(),
        window: 1,
        period_ns: PERIOD,
        transform: Transform::Copy,
        work: Work::default(),
        plugin: None,
    }))
    .unwrap();
    match c.recv::<Reply>().unwrap() {
        Reply::Error { message } => assert!(message.contains("reserved"), "{message}"),
        other => panic!("{other:?}"),
    }
}
