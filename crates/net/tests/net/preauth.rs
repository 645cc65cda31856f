//! Hostile peers against a worker's control port: slow handshakes, too many
//! strangers, long first lines, bad MACs, and the caps on connections,
//! sessions and memory. The hostile client is written from docs/NET.md
//! (greeting and MAC bytes), not from the crate's encoder.

use crate::common::{localhost, ARRIVE_NS};
use firmtime_net::*;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{BufRead, BufReader, ErrorKind as IoKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5a; 32];

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(t: &str) -> Vec<u8> {
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        .collect()
}

/// A master written from docs/NET.md: greeting, then `<mac> <json>` lines.
pub(super) struct Raw {
    pub(super) w: TcpStream,
    r: BufReader<TcpStream>,
    key: Option<Vec<u8>>,
    worker_nonce: Vec<u8>,
    master_nonce: [u8; 32],
    sent: u64,
}

impl Raw {
    pub(super) fn greet(addr: SocketAddr, key: Option<&[u8]>) -> Raw {
        let w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        let master_nonce = [0x33u8; 32];
        (&w).write_all(format!("firmtime-net-ctl 2 {}\n", hex(&master_nonce)).as_bytes())
            .unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4, "greeting {line:?}");
        assert_eq!(&words[..2], ["firmtime-net-ctl", "2"]);
        Raw {
            w,
            r,
            key: key.map(<[u8]>::to_vec),
            worker_nonce: unhex(words[2]),
            master_nonce,
            sent: 0,
        }
    }

    pub(super) fn send(&mut self, json: &str) {
        let tag = match &self.key {
            None => "-".to_string(),
            Some(k) => {
                let mut m = Hmac::<Sha256>::new_from_slice(k).unwrap();
                m.update(b"firmtime-net-ctl/1");
                m.update(b"m");
                m.update(&self.worker_nonce);
                m.update(&self.master_nonce);
                m.update(&self.sent.to_le_bytes());
                m.update(json.as_bytes());
                hex(&m.finalize().into_bytes()[..16])
            }
        };
        self.sent += 1;
        (&self.w)
            .write_all(format!("{tag} {json}\n").as_bytes())
            .unwrap();
    }

    /// The next line's JSON (the MAC field is not checked here).
    pub(super) fn recv(&mut self) -> String {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let (_, json) = line.trim_end().split_once(' ').unwrap();
        json.to_string()
    }
}

/// The gate's counters once `done` holds of them (or after 5 s): the
/// client sees its connection closed before the server's thread has counted
/// it, so a read right after the EOF races that thread.
fn settled(
    srv: &WorkerServer,
    done: impl Fn(&firmtime_net::GateStats) -> bool,
) -> firmtime_net::GateStats {
    let t = Instant::now();
    loop {
        let g = srv.gate_stats();
        if done(&g) || t.elapsed() > Duration::from_secs(5) {
            return g;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn server(f: impl FnOnce(&mut ServerConfig)) -> WorkerServer {
    let mut c = ServerConfig::new(localhost());
    c.key = Some(Key::new(&KEY).unwrap());
    f(&mut c);
    WorkerServer::start(c).unwrap()
}

/// Reads until EOF (or `limit`); returns what came and when the EOF did.
fn read_to_eof(s: &mut TcpStream, limit: Duration) -> (String, Option<Instant>) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into(), Some(Instant::now())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&got).into(), Some(Instant::now())),
        }
    }
    (String::from_utf8_lossy(&got).into(), None)
}

/// Sends `bytes` one at a time, `every` apart, until the worker closes.
fn trickle(s: &mut TcpStream, bytes: &[u8], every: Duration, limit: Duration) -> (usize, Instant) {
    s.set_read_timeout(Some(every)).unwrap();
    let end = Instant::now() + limit;
    let mut sent = 0;
    let mut b = [0u8; 512];
    while Instant::now() < end {
        if sent < bytes.len() && s.write_all(&bytes[sent..sent + 1]).is_ok() {
            sent += 1;
        }
        match s.read(&mut b) {
            Ok(0) => return (sent, Instant::now()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {}
            Err(_) => return (sent, Instant::now()),
        }
    }
    panic!("the worker never closed a connection trickling a byte every {every:?}");
}

#[test]
fn a_slow_loris_is_dropped_at_the_handshake_deadline_however_often_it_sends() {
    let grace = Duration::from_millis(1500);
    let srv = server(|c| c.gate.login_grace = grace);
    // One byte every 200 ms: a per-read timeout would never fire.
    let greeting = format!("firmtime-net-ctl 2 {}\n", hex(&[1; 32]));
    let t0 = Instant::now();
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    let (sent, closed) = trickle(
        &mut s,
        greeting.as_bytes(),
        Duration::from_millis(200),
        Duration::from_secs(30),
    );
    let held = closed - t0;
    assert!(sent >= 4 && sent < greeting.len(), "sent {sent} bytes");
    assert!(
        held >= grace - Duration::from_millis(50),
        "dropped after {held:?}"
    );
    // Generous: the VM may stall, but not for the old "forever".
    assert!(
        held < grace + Duration::from_secs(5),
        "dropped after {held:?}"
    );
    // A stranger that greeted fast but trickles its first message is dropped too.
    let t0 = Instant::now();
    let mut raw = Raw::greet(srv.local_addr(), Some(&KEY));
    let (_, closed) = trickle(
        &mut raw.w,
        b"0123456789abcdef0123456789abcdef {\"type\":\"ping\",\"n\":0}\n",
        Duration::from_millis(200),
        Duration::from_secs(30),
    );
    let held = closed - t0;
    assert!(held >= grace - Duration::from_millis(50), "{held:?}");
    assert!(held < grace + Duration::from_secs(5), "{held:?}");
    let g = settled(&srv, |g| g.pending == 0 && g.timed_out >= 2);
    assert_eq!(
        (g.timed_out, g.authenticated, g.pending),
        (2, 0, 0),
        "{g:?}"
    );
}

#[test]
fn a_stranger_dropped_at_the_deadline_is_told_why_and_a_master_still_gets_in() {
    let srv = server(|c| c.gate.login_grace = Duration::from_millis(300));
    let mut silent = TcpStream::connect(srv.local_addr()).unwrap();
    let (said, eof) = read_to_eof(&mut silent, Duration::from_secs(10));
    assert!(eof.is_some());
    assert!(
        said.starts_with("firmtime-net-ctl 2 refused no authenticated first message within 300ms"),
        "{said:?}"
    );
    assert!(said.contains("--login-grace"), "{said:?}");
    let mut m = Raw::greet(srv.local_addr(), Some(&KEY));
    m.send(r#"{"type":"ping","n":0}"#);
    assert_eq!(m.recv(), r#"{"type":"pong","n":0}"#);
    // Authenticated: no longer under the handshake deadline.
    std::thread::sleep(Duration::from_millis(600));
    m.send(r#"{"type":"ping","n":7}"#);
    assert_eq!(m.recv(), r#"{"type":"pong","n":7}"#);
    assert_eq!(srv.connections(), 1);
}

#[test]
fn the_unauthenticated_cap_drops_the_oldest_strangers_and_never_holds_more_than_full() {
    let startups: Startups = "4:50:8".parse().unwrap();
    let srv = server(|c| c.gate.startups = startups);
    let mut held: Vec<TcpStream> = Vec::new();
    let mut most = 0;
    for _ in 0..40 {
        held.push(TcpStream::connect(srv.local_addr()).unwrap());
        most = most.max(srv.gate_stats().pending);
    }
    let t = Instant::now();
    while srv.gate_stats().accepted < 40 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let g = srv.gate_stats();
    assert_eq!(g.accepted, 40, "{g:?}");
    assert!(
        most <= 8 && g.pending <= 8 && g.pending >= 4,
        "{g:?}, most {most}"
    );
    assert_eq!(g.early_dropped, 40 - g.pending, "{g:?}");
    // The first (oldest) were dropped with a reason; the last 4 are still pending.
    let (said, eof) = read_to_eof(&mut held[0], Duration::from_secs(5));
    assert!(eof.is_some(), "the oldest stranger is still held");
    assert!(
        said.contains("refused too many unauthenticated connections")
            && said.contains("--max-startups 4:50:8"),
        "{said:?}"
    );
    for s in &mut held[36..] {
        let (said, eof) = read_to_eof(s, Duration::from_millis(100));
        assert!(eof.is_none() && said.is_empty(), "{said:?}");
    }
    // A master gets in while they are held (it drops one more of them).
    let mut m = Raw::greet(srv.local_addr(), Some(&KEY));
    m.send(r#"{"type":"stats"}"#);
    assert!(m.recv().starts_with(r#"{"type":"stats""#));
}

#[test]
fn many_slow_strangers_held_cost_no_thread_and_a_keyed_master_runs_a_session() {
    let srv = server(|c| c.gate.login_grace = Duration::from_secs(30));
    let mut held: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(srv.local_addr()).unwrap())
        .collect();
    for s in &mut held {
        let _ = s.write_all(b"f");
    }
    let t = Instant::now();
    while srv.gate_stats().accepted < 300 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let g = srv.gate_stats();
    assert_eq!(g.accepted, 300, "{g:?}");
    assert!(g.pending <= 100, "{g:?}");
    // Session threads exist only for authenticated connections.
    assert_eq!((srv.connections(), g.authenticated), (0, 0), "{g:?}");
    // The crate's master: connect, setup, 20 delivered periods.
    let mut set = BlockSet::new();
    let input = set.add::<f32>(Direction::ToWorker, 64).unwrap();
    let output = set.add::<f32>(Direction::FromWorker, 64).unwrap();
    let mut cfg = SessionConfig::new(srv.local_addr(), 2_000_000);
    cfg.key = Some(Key::new(&KEY).unwrap());
    cfg.window = 0;
    let (mut m, _link) = connect(cfg, set).unwrap();
    for n in 0..20 {
        m.blocks_mut().get_mut(input).fill(n as f32);
        let r = m.process(Deadline::After(ARRIVE_NS));
        assert_eq!(r.outcome, Outcome::Delivered, "period {n}");
        assert!(m.blocks().get(output).iter().all(|&y| y == n as f32));
    }
    assert_eq!(srv.sessions(), 1);
    drop(held);
}

#[test]
fn a_bad_mac_or_an_overlong_first_line_is_refused_before_any_thread() {
    let srv = server(|_| {});
    let mut m = Raw::greet(srv.local_addr(), Some(&[0x77; 32]));
    m.send(r#"{"type":"ping","n":0}"#);
    let reply = m.recv();
    assert!(
        reply.contains("authentication failed") && reply.contains("--key"),
        "{reply}"
    );
    let mut m = Raw::greet(srv.local_addr(), None);
    m.send(r#"{"type":"ping","n":0}"#);
    assert!(m.recv().contains("requires a key"));
    let mut m = Raw::greet(srv.local_addr(), Some(&KEY));
    m.w.write_all(&vec![b'a'; 5000]).unwrap();
    let (said, eof) = read_to_eof(&mut m.w, Duration::from_secs(5));
    assert!(eof.is_some());
    assert!(
        said.contains("refused a first message longer than 4096 bytes"),
        "{said:?}"
    );
    let mut junk = TcpStream::connect(srv.local_addr()).unwrap();
    junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let (said, eof) = read_to_eof(&mut junk, Duration::from_secs(5));
    assert!(eof.is_some());
    assert!(
        said.contains("refused not a firmtime-net-ctl 2 greeting"),
        "{said:?}"
    );
    let g = settled(&srv, |g| {
        g.pending == 0 && g.refused >= 2 && g.malformed >= 2
    });
    assert_eq!(
        (g.refused, g.malformed, g.authenticated),
        (2, 2, 0),
        "{g:?}"
    );
    assert_eq!(srv.connections(), 0);
}

fn setup_json(stream_id: u32, floats: usize) -> String {
    format!(
        r#"{{"type":"setup","stream_id":{stream_id},"data_port":9,"layout":{{"blocks":[{{"type":"f32","dir":"to-worker","len":{floats}}},{{"type":"f32","dir":"from-worker","len":{floats}}}]}},"window":1,"period_ns":1000000,"transform":"copy","work":{{"fraction":0.0,"mode":"none"}}}}"#
    )
}

#[test]
fn sessions_and_memory_are_capped_without_a_key_with_an_error_naming_the_flag() {
    let mut c = ServerConfig::new(localhost());
    c.max_sessions = 2;
    c.max_memory = 1 << 20;
    let srv = WorkerServer::start(c).unwrap();
    let mut a = Raw::greet(srv.local_addr(), None);
    a.send(&setup_json(1, 64));
    assert_eq!(a.recv(), r#"{"type":"ready","stream_id":1}"#);
    let mut b = Raw::greet(srv.local_addr(), None);
    b.send(&setup_json(2, 64));
    assert_eq!(b.recv(), r#"{"type":"ready","stream_id":2}"#);
    let mut third = Raw::greet(srv.local_addr(), None);
    third.send(&setup_json(3, 64));
    let e = third.recv();
    assert!(
        e.contains(r#""type":"error""#)
            && e.contains("at most 2 sessions")
            && e.contains("--max-sessions"),
        "{e}"
    );
    // One ends: its place (and memory) is given back.
    b.send(r#"{"type":"close"}"#);
    let t = Instant::now();
    while srv.sessions() > 1 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // 40,000 floats each way: 5 × 160 KB + 2 × 160 KB > 1 MiB.
    third.send(&setup_json(4, 40_000));
    let e = third.recv();
    assert!(
        e.contains("KiB of buffers") && e.contains("--max-memory") && e.contains("1024 KiB"),
        "{e}"
    );
    third.send(&setup_json(5, 64));
    assert_eq!(third.recv(), r#"{"type":"ready","stream_id":5}"#);
    assert_eq!(srv.sessions(), 2);
}

#[test]
fn authenticated_connections_are_capped_with_an_error_naming_the_flag() {
    let srv = server(|c| c.max_connections = 2);
    let k = || Some(Key::new(&KEY).unwrap());
    let t = Duration::from_secs(5);
    let a = control::Conn::connect(srv.local_addr(), k(), t).unwrap();
    let b = control::Conn::connect(srv.local_addr(), k(), t).unwrap();
    let e = control::Conn::connect(srv.local_addr(), k(), t).unwrap_err();
    assert!(
        e.message().contains("at most 2 control connections")
            && e.message().contains("--max-connections"),
        "{e}"
    );
    drop((a, b));
    let t0 = Instant::now();
    while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    control::query_stats(srv.local_addr(), k(), t).unwrap();
}

#[test]
fn a_keyless_worker_refuses_a_non_loopback_address_unless_told_it_is_insecure() {
    let mut c = ServerConfig::new("0.0.0.0:0".parse().unwrap());
    let e = WorkerServer::start(c.clone()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    assert!(
        e.message().contains("--key FILE") && e.message().contains("--insecure-no-key"),
        "{e}"
    );
    c.insecure_no_key = true;
    WorkerServer::start(c.clone()).unwrap().stop();
    c.insecure_no_key = false;
    c.key = Some(Key::new(&KEY).unwrap());
    WorkerServer::start(c).unwrap().stop();
}

/// A small deterministic generator for hostile bytes.
pub(super) struct XorShift(pub(super) u64);

impl XorShift {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What stranger `i` sends: nothing, a greeting, part of one, or a greeting
/// and a MAC field, then up to 6,000 random bytes, maybe a newline.
pub(super) fn stranger_bytes(i: u64, rng: &mut XorShift) -> Vec<u8> {
    let greeting = format!("firmtime-net-ctl 2 {}\n", hex(&[9; 32]));
    let mut b: Vec<u8> = match i % 4 {
        0 => Vec::new(),
        1 => greeting.clone().into_bytes(),
        2 => greeting.as_bytes()[..(rng.next() % 80) as usize].to_vec(),
        _ => format!("{greeting}- ").into_bytes(),
    };
    let n = rng.next() % 6000;
    b.extend((0..n).map(|_| rng.next() as u8));
    if rng.next() % 2 == 0 {
        b.push(b'\n');
    }
    b
}

#[test]
fn random_bytes_from_many_strangers_leave_the_gate_serving_and_accounted() {
    let srv = server(|c| c.gate.login_grace = Duration::from_secs(2));
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for i in 0..200u64 {
        let mut s = TcpStream::connect(srv.local_addr()).unwrap();
        let _ = s.write_all(&stranger_bytes(i, &mut rng));
    }
    // Every stranger has left the gate one way or another.
    let t = Instant::now();
    let done = |g: GateStats| {
        g.accepted == 200
            && g.pending == 0
            && g.timed_out
                + g.early_dropped
                + g.malformed
                + g.refused
                + g.abandoned
                + g.authenticated
                == 200
    };
    while !done(srv.gate_stats()) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let g = srv.gate_stats();
    assert!(done(g), "{g:?}");
    assert_eq!(g.authenticated, 0, "{g:?}");
    let mut m = Raw::greet(srv.local_addr(), Some(&KEY));
    m.send(r#"{"type":"ping","n":0}"#);
    assert_eq!(m.recv(), r#"{"type":"pong","n":0}"#);
}
