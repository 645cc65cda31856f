//! The worker against a hostile peer (issue 20 items 2 and 5): a client
//! written from docs/NET.md and docs/WIRE.md alone — its own greeting,
//! HMACs, data keys and datagrams, not the crate's encoder — sends what a
//! legitimate master never would, and each attack must be refused or
//! contained while the worker keeps serving everyone else.

use crate::common::localhost;
use firmtime_net::control::query_stats;
use firmtime_net::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(super) const KEY: [u8; 32] = *b"hostile-peer test key, 32 bytes!";

pub(super) fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(t: &str) -> Vec<u8> {
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        .collect()
}

pub(super) fn random32() -> [u8; 32] {
    let mut n = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut n).unwrap();
    n
}

/// A control connection as docs/NET.md describes it.
pub(super) struct Ctl {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    key: Vec<u8>,
    worker_nonce: Vec<u8>,
    master_nonce: [u8; 32],
    sent: u64,
}

impl Ctl {
    pub(super) fn connect(addr: SocketAddr, key: &[u8]) -> Self {
        let writer = TcpStream::connect(addr).unwrap();
        writer
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut reader = BufReader::new(writer.try_clone().unwrap());
        let master_nonce = random32();
        let mut c = Self {
            reader: BufReader::new(writer.try_clone().unwrap()),
            writer,
            key: key.to_vec(),
            worker_nonce: Vec::new(),
            master_nonce,
            sent: 0,
        };
        c.writer
            .write_all(format!("firmtime-net-ctl 2 {}\n", hex(&master_nonce)).as_bytes())
            .unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&words[..2], &["firmtime-net-ctl", "2"], "{line}");
        assert_eq!(words[3], "key");
        c.worker_nonce = unhex(words[2]);
        c.reader = reader;
        c
    }

    pub(super) fn send(&mut self, msg: &Value) {
        let json = msg.to_string();
        let tag = hmac(
            &self.key,
            &[
                b"firmtime-net-ctl/1",
                b"m",
                &self.worker_nonce,
                &self.master_nonce,
                &self.sent.to_le_bytes(),
                json.as_bytes(),
            ],
        );
        self.sent += 1;
        let line = format!("{} {json}\n", hex(&tag[..16]));
        self.writer.write_all(line.as_bytes()).unwrap();
    }

    pub(super) fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let Some((_, json)) = line.trim_end().split_once(' ') else {
            panic!("a line with a MAC field, got {line:?}");
        };
        serde_json::from_str(json).unwrap()
    }

    pub(super) fn ask(&mut self, msg: &Value) -> Value {
        self.send(msg);
        self.recv()
    }

    /// HMAC-SHA256(key, "firmtime-net-data/2" ‖ worker nonce ‖ master nonce).
    pub(super) fn data_key(&self) -> [u8; 32] {
        hmac(
            &self.key,
            &[
                b"firmtime-net-data/2",
                &self.worker_nonce,
                &self.master_nonce,
            ],
        )
    }
}

/// One period's datagrams per docs/WIRE.md (version 2, MAC flag set).
pub(super) fn datagrams(data_key: &[u8], stream_id: u32, seq: u64, payload: &[u8]) -> Vec<Vec<u8>> {
    let max_chunk = 1500 - 28 - 32 - 16;
    let total = payload.len();
    let count = total.div_ceil(max_chunk).max(1);
    let chunk = total.div_ceil(count);
    (0..count)
        .map(|i| {
            let off = i * chunk;
            let len = chunk.min(total - off);
            let mut d = Vec::new();
            d.extend_from_slice(b"FTNB");
            d.push(2);
            d.push(0x02);
            d.extend_from_slice(&(i as u16).to_le_bytes());
            d.extend_from_slice(&(count as u16).to_le_bytes());
            d.extend_from_slice(&(len as u16).to_le_bytes());
            d.extend_from_slice(&stream_id.to_le_bytes());
            d.extend_from_slice(&seq.to_le_bytes());
            d.extend_from_slice(&(total as u32).to_le_bytes());
            d.extend_from_slice(&(off as u32).to_le_bytes());
            d.extend_from_slice(&payload[off..off + len]);
            let tag = hmac(data_key, &[&d]);
            d.extend_from_slice(&tag[..16]);
            d
        })
        .collect()
}

/// Receives one period's result (every fragment), checking each MAC under
/// `data_key`; `None` if nothing arrives within `wait`.
pub(super) fn result(sock: &UdpSocket, data_key: &[u8], wait: Duration) -> Option<(u64, Vec<u8>)> {
    let end = Instant::now() + wait;
    let mut buf = vec![0u8; 65_536];
    let mut payload = Vec::new();
    let mut got = 0;
    loop {
        let left = end.checked_duration_since(Instant::now())?;
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let Ok(n) = sock.recv(&mut buf) else {
            return None;
        };
        let d = &buf[..n];
        assert_eq!(&d[..4], b"FTNB");
        assert_eq!(d[4], 2, "version");
        assert_eq!(d[5], 0x03, "result with a MAC");
        let count = u16::from_le_bytes([d[8], d[9]]) as usize;
        let len = u16::from_le_bytes([d[10], d[11]]) as usize;
        let seq = u64::from_le_bytes(d[16..24].try_into().unwrap());
        let total = u32::from_le_bytes(d[24..28].try_into().unwrap()) as usize;
        let off = u32::from_le_bytes(d[28..32].try_into().unwrap()) as usize;
        let tag = hmac(data_key, &[&d[..32 + len]]);
        assert_eq!(
            &d[32 + len..],
            &tag[..16],
            "result MAC under the session key"
        );
        payload.resize(total, 0);
        payload[off..off + len].copy_from_slice(&d[32..32 + len]);
        got += 1;
        if got == count {
            return Some((seq, payload));
        }
    }
}

pub(super) fn server(plugin_dirs: &[PathBuf]) -> WorkerServer {
    let mut c = ServerConfig::new(localhost());
    c.key = Some(Key::new(&KEY).unwrap());
    c.plugins = remote::PluginAllowList::new(plugin_dirs).unwrap();
    WorkerServer::start(c).unwrap()
}

pub(super) fn stats(addr: SocketAddr) -> control::WorkerReport {
    query_stats(addr, Some(Key::new(&KEY).unwrap()), Duration::from_secs(2)).unwrap()
}

pub(super) fn f32s(block: &[f32]) -> Vec<u8> {
    block.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A copy stream: 16 f32 in, 16 f32 out.
pub(super) fn copy_setup(stream_id: u32, data_port: u16, period_ns: Value, work: Value) -> Value {
    json!({
        "type": "setup", "stream_id": stream_id, "data_port": data_port,
        "layout": {"blocks": [
            {"type": "f32", "dir": "to-worker", "len": 16},
            {"type": "f32", "dir": "from-worker", "len": 16}
        ]},
        "window": 1, "period_ns": period_ns, "transform": "copy", "work": work
    })
}

pub(super) fn error_of(reply: &Value) -> &str {
    assert_eq!(reply["type"], "error", "{reply}");
    reply["message"].as_str().unwrap()
}

pub(super) fn wait_event(
    srv: &WorkerServer,
    within: Duration,
    f: impl Fn(&ServerEvent) -> bool,
) -> Option<ServerEvent> {
    let end = Instant::now() + within;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if let Ok(e) = srv.events().recv_timeout(left) {
            if f(&e) {
                return Some(e);
            }
        }
    }
    None
}

/// Regression: `period_ns` = 2^64−1 with a 100 % sleep hold put the shared
/// data thread to sleep for good; every out-of-range setup field is now
/// refused with its name and range, and the worker keeps answering.
#[test]
fn setups_out_of_range_are_refused_naming_the_field_and_the_range() {
    let srv = server(&[]);
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let sleep_all = json!({"fraction": 1.0, "mode": "sleep"});
    let m = c.ask(&copy_setup(5, 9, json!(u64::MAX), sleep_all.clone()));
    let m = error_of(&m);
    assert!(
        m.contains("period_ns 18446744073709551615") && m.contains("1000 to 1000000000"),
        "{m}"
    );
    let m = c.ask(&copy_setup(5, 9, json!(0), sleep_all.clone()));
    assert!(error_of(&m).contains("period_ns 0 is out of range"), "{m}");
    let m = c.ask(&copy_setup(
        5,
        9,
        json!(1_000_000),
        json!({"fraction": 1e30, "mode": "sleep"}),
    ));
    assert!(
        error_of(&m)
            .contains("work fraction 1000000000000000000000000000000 is out of range: give 0 to 4"),
        "{m}"
    );
    let m = c.ask(&copy_setup(
        5,
        9,
        json!(1_000_000_000),
        json!({"fraction": 4.0, "mode": "spin"}),
    ));
    assert!(
        error_of(&m).contains("spin hold of 4000000000 ns")
            && error_of(&m).contains("cap of 50000000 ns"),
        "{m}"
    );
    let mut s = copy_setup(5, 9, json!(1_000_000), sleep_all.clone());
    s["window"] = json!(7);
    assert!(error_of(&c.ask(&s)).contains("window 7"));
    let mut s = copy_setup(5, 9, json!(1_000_000), sleep_all.clone());
    s["layout"]["blocks"][0]["len"] = json!(u32::MAX);
    assert!(error_of(&c.ask(&s)).contains("setup: layout:"));
    let mut s = copy_setup(5, 9, json!(1_000_000), sleep_all);
    s["plugin"] = json!({"plugin": "amp", "sample_rate": 0, "max_frames": 64, "ports": []});
    let m = c.ask(&s);
    assert!(
        error_of(&m).contains("plugin.sample_rate 0 is out of range: give 1000 to 768000 Hz"),
        "{m}"
    );
    // Nothing was set up, the data thread answers, and set_work is refused likewise.
    let m = c.ask(&json!({"type": "set_work", "work": {"fraction": -1.0, "mode": "spin"}}));
    assert!(error_of(&m).contains("before setup"), "{m}");
    let r = stats(srv.local_addr());
    assert_eq!(r.sessions, 0);
    let found = discovery::discover(
        &[srv.local_addr()],
        Some(Key::new(&KEY).unwrap()),
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(found.len(), 1);
}

/// Regression: a sleep hold slept on the shared data thread. A session
/// holding each block for 4 s (period 1 s, work 4, sleep) must not delay
/// another session, discovery or stats.
#[test]
fn a_long_sleep_hold_does_not_stall_other_sessions() {
    let srv = server(&[]);
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let udp = UdpSocket::bind(localhost()).unwrap();
    let r = c.ask(&copy_setup(
        11,
        udp.local_addr().unwrap().port(),
        json!(1_000_000_000u64),
        json!({"fraction": 4.0, "mode": "sleep"}),
    ));
    assert_eq!(r["type"], "ready", "{r}");
    let dk = c.data_key();
    let input: Vec<f32> = (0..16).map(|i| i as f32 * 0.5).collect();
    for d in datagrams(&dk, 11, 0, &f32s(&input)) {
        udp.send_to(&d, srv.local_addr()).unwrap();
    }
    let held_at = Instant::now();
    // A legitimate session through the crate, 1 ms periods, while the block is held.
    let mut cfg = SessionConfig::new(srv.local_addr(), 1_000_000);
    cfg.key = Some(Key::new(&KEY).unwrap());
    let mut set = BlockSet::new();
    let i = set.add::<f32>(Direction::ToWorker, 16).unwrap();
    let o = set.add::<f32>(Direction::FromWorker, 16).unwrap();
    let (mut m, _link) = connect(cfg, set).unwrap();
    let (mut delivered, mut late) = (0, 0);
    for n in 0..500u64 {
        m.blocks_mut().get_mut(i).fill(n as f32);
        let rep = m.process(Deadline::After(1_000_000));
        match rep.outcome {
            Outcome::Delivered => {
                delivered += 1;
                assert_eq!(m.blocks().get(o)[0], (n - 1) as f32);
            }
            Outcome::Late => late += 1,
            _ => {}
        }
        if n % 100 == 0 {
            // The heartbeat that keeps the held session alive.
            assert_eq!(c.ask(&json!({"type": "ping", "n": n}))["type"], "pong");
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    assert!(
        held_at.elapsed() < Duration::from_secs(4),
        "the legitimate run outlasted the hold"
    );
    // Generous: this VM stalls; without the fix every period after the hold began was late.
    assert!(delivered >= 400, "delivered {delivered}, late {late}");
    println!("during a 4 s hold of another session: {delivered} of 499 delivered, {late} late");
    // The held result still comes, after its hold, under the session's key.
    let mut held = None;
    for n in 0..6 {
        assert_eq!(
            c.ask(&json!({"type": "ping", "n": 1000 + n}))["type"],
            "pong"
        );
        held = result(&udp, &dk, Duration::from_secs(1));
        if held.is_some() {
            break;
        }
    }
    let (seq, payload) = held.expect("the held result");
    assert_eq!(seq, 0);
    assert_eq!(payload, f32s(&input));
    assert!(
        held_at.elapsed() >= Duration::from_millis(3_900),
        "{:?}",
        held_at.elapsed()
    );
}

/// Regression: a data packet of an old session was accepted by a new
/// session with the same stream id and port. The data key now binds both
/// nonces of the control handshake.
#[test]
fn a_data_packet_of_an_earlier_session_is_refused_by_a_later_one() {
    let srv = server(&[]);
    let udp = UdpSocket::bind(localhost()).unwrap();
    let port = udp.local_addr().unwrap().port();
    let setup = copy_setup(
        77,
        port,
        json!(1_000_000),
        json!({"fraction": 0.0, "mode": "none"}),
    );
    let input: Vec<f32> = (0..16).map(|i| i as f32 - 3.0).collect();
    let mut c1 = Ctl::connect(srv.local_addr(), &KEY);
    assert_eq!(c1.ask(&setup)["type"], "ready");
    let k1 = c1.data_key();
    let captured = datagrams(&k1, 77, 5, &f32s(&input));
    for d in &captured {
        udp.send_to(d, srv.local_addr()).unwrap();
    }
    let (seq, payload) = result(&udp, &k1, Duration::from_secs(2)).expect("session 1 served it");
    assert_eq!((seq, payload), (5, f32s(&input)));
    // Replayed within session 1: a duplicate.
    for d in &captured {
        udp.send_to(d, srv.local_addr()).unwrap();
    }
    assert!(result(&udp, &k1, Duration::from_millis(200)).is_none());
    c1.send(&json!({"type": "close"}));
    drop(c1);
    let mut c2 = Ctl::connect(srv.local_addr(), &KEY);
    let mut stats_before = stats(srv.local_addr());
    for _ in 0..50 {
        if stats_before.sessions == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        stats_before = stats(srv.local_addr());
    }
    assert_eq!(c2.ask(&setup)["type"], "ready");
    let k2 = c2.data_key();
    assert_ne!(k1, k2);
    for d in &captured {
        udp.send_to(d, srv.local_addr()).unwrap();
    }
    assert!(
        result(&udp, &k2, Duration::from_millis(300)).is_none(),
        "session 2 answered session 1's packet"
    );
    let after = stats(srv.local_addr());
    let mac = |r: &control::WorkerReport| r.drops.get("bad_mac").copied().unwrap_or(0);
    assert_eq!(
        mac(&after) - mac(&stats_before),
        captured.len() as u64,
        "{after:?}"
    );
    // The same period under session 2's key is served.
    for d in datagrams(&k2, 77, 5, &f32s(&input)) {
        udp.send_to(&d, srv.local_addr()).unwrap();
    }
    let (seq, payload) = result(&udp, &k2, Duration::from_secs(2)).expect("session 2 served");
    assert_eq!((seq, payload), (5, f32s(&input)));
}

/// Regression: a probe with seq 2^64−1 made every later probe stale until
/// restart, and those drops were missing from `stats`.
#[test]
fn a_probe_with_the_largest_seq_does_not_poison_discovery() {
    let srv = server(&[]);
    let probe_sock = UdpSocket::bind(localhost()).unwrap();
    let probe: Vec<u8> = (0..16).collect();
    for d in datagrams(&KEY, 0, u64::MAX, &probe) {
        probe_sock.send_to(&d, srv.local_addr()).unwrap();
    }
    let (seq, answer) = result(&probe_sock, &KEY, Duration::from_secs(2)).expect("answered");
    assert_eq!(seq, u64::MAX);
    assert_eq!(&answer[..4], b"FTWK");
    assert_eq!(&answer[4..20], &probe[..]);
    // Then a probe with a bad MAC and one of the wrong length: dropped and counted.
    let mut bad = datagrams(&KEY, 0, 3, &probe).remove(0);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    probe_sock.send_to(&bad, srv.local_addr()).unwrap();
    for d in datagrams(&KEY, 0, 4, &[1, 2, 3]) {
        probe_sock.send_to(&d, srv.local_addr()).unwrap();
    }
    // An ordinary probe (seq = the wall clock in ns) is still answered.
    let found = discovery::discover(
        &[srv.local_addr()],
        Some(Key::new(&KEY).unwrap()),
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(found.len(), 1, "discovery poisoned");
    let r = stats(srv.local_addr());
    assert_eq!(r.probes, 2, "{r:?}");
    assert_eq!(r.drops.get("bad_mac"), Some(&1), "{r:?}");
    assert_eq!(r.drops.get("layout_mismatch"), Some(&1), "{r:?}");
    assert_eq!(r.dropped, 2);
}

// ---- plugins: control values and the watchdog

pub(super) fn amp_setup(stream_id: u32, data_port: u16) -> Value {
    json!({
        "type": "setup", "stream_id": stream_id, "data_port": data_port,
        "layout": {"blocks": [
            {"type": "f32", "dir": "to-worker", "len": 64},
            {"type": "i32", "dir": "to-worker", "len": 1},
            {"type": "f32", "dir": "to-worker", "len": 1},
            {"type": "f32", "dir": "from-worker", "len": 64},
            {"type": "i32", "dir": "from-worker", "len": 1}
        ]},
        "window": 1, "period_ns": 1_333_333, "transform": "copy",
        "work": {"fraction": 0.0, "mode": "none"},
        "plugin": {"plugin": "amp", "sample_rate": 48000, "max_frames": 64, "ports": [
            {"name": "Amps gain (dB)", "input": true, "audio": false, "hint": 0, "lower": 0.0, "upper": 0.0},
            {"name": "Input", "input": true, "audio": true, "hint": 0, "lower": 0.0, "upper": 0.0},
            {"name": "Output", "input": false, "audio": true, "hint": 0, "lower": 0.0, "upper": 0.0}
        ]}
    })
}

pub(super) fn amp_period(gain_db: f32, input: &[f32]) -> Vec<u8> {
    let mut p = f32s(input);
    p.extend_from_slice(&64i32.to_le_bytes());
    p.extend_from_slice(&gain_db.to_le_bytes());
    p
}

pub(super) const LADSPA: &str = "/usr/lib/ladspa";

/// Regression: control values NaN and 1e30 went straight to the plugin.
/// swh `amp` (1181): gain −70 to 70 dB. A refused value is counted and
/// reported with the port's name and range; the port keeps its last value.
#[test]
fn nan_and_huge_control_values_are_refused_and_the_last_value_kept() {
    if !Path::new(LADSPA).join("amp_1181.so").exists() {
        return firmtime_rt::testing::skip("swh-plugins (amp_1181.so) is not installed");
    }
    let srv = server(&[PathBuf::from(LADSPA)]);
    let udp = UdpSocket::bind(localhost()).unwrap();
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let r = c.ask(&amp_setup(9, udp.local_addr().unwrap().port()));
    assert_eq!(r["type"], "ready", "{r}");
    let dk = c.data_key();
    let input: Vec<f32> = (0..64).map(|i| (i as f32 * 0.1).sin() * 0.25).collect();
    let gain_of = |seq: u64, db: f32| -> f32 {
        for d in datagrams(&dk, 9, seq, &amp_period(db, &input)) {
            udp.send_to(&d, srv.local_addr()).unwrap();
        }
        let Some((s, out)) = result(&udp, &dk, Duration::from_secs(2)) else {
            let ev: Vec<_> = srv.events().try_iter().collect();
            panic!("no result for {seq}: {:?} {ev:?}", stats(srv.local_addr()));
        };
        assert_eq!(s, seq);
        let y = f32::from_le_bytes(out[4 * 10..4 * 11].try_into().unwrap());
        assert_eq!(i32::from_le_bytes(out[256..260].try_into().unwrap()), 64);
        y / input[10]
    };
    let six = 10f32.powf(6.0 / 20.0);
    assert!((gain_of(0, 6.0) - six).abs() < 1e-3);
    for (seq, bad) in [(1, f32::NAN), (2, 1e30), (3, f32::INFINITY), (4, -71.0)] {
        let g = gain_of(seq, bad);
        assert!((g - six).abs() < 1e-3, "{bad} dB was applied: gain {g}");
    }
    assert!((gain_of(5, 0.0) - 1.0).abs() < 1e-3);
    let e = wait_event(&srv, Duration::from_secs(3), |e| {
        matches!(e, ServerEvent::ControlRefused { .. })
    })
    .expect("a ControlRefused event");
    let ServerEvent::ControlRefused {
        stream_id, message, ..
    } = e
    else {
        unreachable!()
    };
    assert_eq!(stream_id, 9);
    assert!(
        message.contains("'Amps gain (dB)'") && message.contains("from -70 to 70"),
        "{message}"
    );
    let mut r = stats(srv.local_addr());
    for _ in 0..100 {
        if r.bad_controls == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        r = stats(srv.local_addr());
    }
    assert_eq!(r.bad_controls, 4, "{r:?}");
}

/// This process's waste_time logs: the plugin writes one per instance, at
/// its cleanup, to `waste_time-<pid>-<N>.csv` in the temp directory (its
/// default: the worker runs in this process, whose environment a test must
/// not change while others run).
pub(super) fn waste_time_logs(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("waste_time-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".csv"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the waste_time logs this process's worker sessions wrote (at
/// exit: a session's instance is cleaned up, and its log written, when the
/// worker lets it go, which may be after its test ended).
extern "C" fn remove_waste_time_logs() {
    for p in waste_time_logs(std::process::id()) {
        let _ = std::fs::remove_file(p);
    }
}

/// Builds the repo's waste_time plugin once and copies it into a plugin
/// directory of its own (the allow-list refuses a symlink out of it); the
/// logs its instances write are removed when this process exits.
pub(super) fn waste_time_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // SAFETY: registers a plain function with no preconditions.
        unsafe { libc::atexit(remove_waste_time_logs) };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "building firmtime-plugin-waste-time");
        // tests/…/deps/net-HASH → the profile directory.
        let exe = std::env::current_exe().unwrap();
        let lib = exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("libfirmtime_waste_time.so");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-waste-time");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&lib, dir.join("libfirmtime_waste_time.so")).unwrap();
        dir
    })
    .clone()
}

/// waste_time at 8 kHz with 8192-frame periods and start fraction 1: one
/// run spins 1.024 s, over the 500 ms budget cap.
pub(super) fn waste_setup(stream_id: u32, data_port: u16) -> Value {
    let port = |name: &str, input: bool, audio: bool| json!({"name": name, "input": input, "audio": audio, "hint": 0, "lower": 0.0, "upper": 0.0});
    json!({
        "type": "setup", "stream_id": stream_id, "data_port": data_port,
        "layout": {"blocks": [
            {"type": "f32", "dir": "to-worker", "len": 8192},
            {"type": "i32", "dir": "to-worker", "len": 1},
            {"type": "f32", "dir": "to-worker", "len": 3},
            {"type": "f32", "dir": "from-worker", "len": 8192},
            {"type": "i32", "dir": "from-worker", "len": 1},
            {"type": "f32", "dir": "from-worker", "len": 1}
        ]},
        "window": 1, "period_ns": 1_000_000_000u64, "transform": "copy",
        "work": {"fraction": 0.0, "mode": "none"},
        "plugin": {"plugin": "waste_time", "sample_rate": 8000, "max_frames": 8192, "ports": [
            port("Input", true, true), port("Output", false, true),
            port("start", true, false), port("step", true, false),
            port("interval", true, false), port("fraction", false, false)
        ]}
    })
}

/// Sends one overrunning period of waste_time (stream `id`) and returns when it was sent.
pub(super) fn overrun(c: &mut Ctl, udp: &UdpSocket, worker: SocketAddr, id: u32) -> Instant {
    let r = c.ask(&waste_setup(id, udp.local_addr().unwrap().port()));
    assert_eq!(r["type"], "ready", "{r}");
    overrun_again(c, udp, worker, id, 0)
}

/// Sends period `seq` of an overrunning waste_time stream set up by [`overrun`].
pub(super) fn overrun_again(
    c: &Ctl,
    udp: &UdpSocket,
    worker: SocketAddr,
    id: u32,
    seq: u64,
) -> Instant {
    let mut p = f32s(&vec![0.5; 8192]);
    p.extend_from_slice(&8192i32.to_le_bytes());
    for v in [1.0f32, 0.0, 0.0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    let sent = Instant::now();
    for d in datagrams(&c.data_key(), id, seq, &p) {
        udp.send_to(&d, worker).unwrap();
    }
    sent
}

/// A plugin run that overruns its budget is cut off and reported; another
/// session keeps its deadlines meanwhile; the cut session is told why.
#[test]
fn an_overrunning_plugin_is_cut_off_while_another_session_keeps_its_deadlines() {
    let srv = server(&[waste_time_dir()]);
    let mut cfg = SessionConfig::new(srv.local_addr(), 1_000_000);
    cfg.key = Some(Key::new(&KEY).unwrap());
    let mut set = BlockSet::new();
    let i = set.add::<f32>(Direction::ToWorker, 16).unwrap();
    let o = set.add::<f32>(Direction::FromWorker, 16).unwrap();
    let (mut m, _link) = connect(cfg, set).unwrap();
    let udp = UdpSocket::bind(localhost()).unwrap();
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let sent = overrun(&mut c, &udp, srv.local_addr(), 21);
    let (mut delivered, mut late, mut periods) = (0u64, 0u64, 0u64);
    let mut cut = None;
    while sent.elapsed() < Duration::from_millis(1_500) {
        m.blocks_mut().get_mut(i).fill(periods as f32);
        let rep = m.process(Deadline::After(1_000_000));
        match rep.outcome {
            Outcome::Delivered => {
                delivered += 1;
                assert_eq!(m.blocks().get(o)[0], (periods - 1) as f32);
            }
            Outcome::Late => late += 1,
            _ => {}
        }
        periods += 1;
        if cut.is_none() {
            if let Ok(ServerEvent::SessionCutOff {
                stream_id, message, ..
            }) = srv.events().try_recv()
            {
                cut = Some((sent.elapsed(), stream_id, message));
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let cut = cut.or_else(|| {
        wait_event(&srv, Duration::from_secs(1), |e| {
            matches!(e, ServerEvent::SessionCutOff { .. })
        })
        .map(|e| match e {
            ServerEvent::SessionCutOff {
                stream_id, message, ..
            } => (sent.elapsed(), stream_id, message),
            _ => unreachable!(),
        })
    });
    let (after, stream_id, message) = cut.expect("a SessionCutOff event");
    assert_eq!(stream_id, 21);
    assert!(message.contains("over its budget of 500.0 ms"), "{message}");
    let used = message
        .split_once("used ")
        .and_then(|(_, m)| m.split_once(", over"))
        .map_or("?", |(u, _)| u);
    println!(
        "overrun cut off {:.0} ms after the period was sent (budget 500 ms of CPU; the run had \
         used {used}); the other session: {delivered} of {periods} delivered, {late} late",
        after.as_secs_f64() * 1e3
    );
    // Generous bounds for this VM; without runner threads every period during the run was late.
    assert!(late * 10 <= periods, "late {late} of {periods}");
    // No result of the cut run, and the cut session's next request is refused with the reason.
    assert!(result(&udp, &c.data_key(), Duration::from_millis(800)).is_none());
    let r = c.ask(&json!({"type": "ping", "n": 1}));
    assert!(
        error_of(&r).contains("cut off by the worker's watchdog"),
        "{r}"
    );
    let s = stats(srv.local_addr());
    assert_eq!(s.cut_off, 1, "{s:?}");
}

/// `(policy, rt_priority)` of every thread of this process named `name`
/// (fields 41 and 40 of /proc/self/task/TID/stat).
fn sched_of(name: &str) -> Vec<(u32, u32)> {
    let mut found = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis start at field 3.
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .collect();
        found.push((rest[41 - 3].parse().unwrap(), rest[40 - 3].parse().unwrap()));
    }
    found
}

/// Regression: a plugin's runner ran at the data thread's own FIFO priority,
/// so on a shared CPU an overrunning run held the data thread (and, with
/// several workers on one machine, theirs) until the watchdog's cut: 4
/// workers under the soak's attacks went from 95 % usable to none
/// (scripts/net-attack-bench.sh). It now runs one priority below.
#[test]
fn a_plugin_runner_runs_one_priority_below_the_data_thread() {
    if !Path::new(LADSPA).join("amp_1181.so").exists() {
        return firmtime_rt::testing::skip("swh-plugins (amp_1181.so) is not installed");
    }
    let mut c = ServerConfig::new(localhost());
    c.key = Some(Key::new(&KEY).unwrap());
    c.plugins = remote::PluginAllowList::new(&[PathBuf::from(LADSPA)]).unwrap();
    c.data_policy = Some(firmtime_rt::sched::Policy::Fifo { priority: 70 });
    let srv = match WorkerServer::start(c) {
        Ok(s) => s,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            return firmtime_rt::testing::skip(format!("SCHED_FIFO is refused here: {e}"));
        }
        Err(e) => panic!("{e}"),
    };
    let udp = UdpSocket::bind(localhost()).unwrap();
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let r = c.ask(&amp_setup(9, udp.local_addr().unwrap().port()));
    assert_eq!(r["type"], "ready", "{r}");
    let fifo = libc::SCHED_FIFO as u32;
    // Only this test gives a worker a real-time data thread.
    let data: Vec<_> = sched_of("ft-net-data")
        .into_iter()
        .filter(|s| s.0 == fifo)
        .collect();
    let runners: Vec<_> = sched_of("ft-net-plugin")
        .into_iter()
        .filter(|s| s.0 == fifo)
        .collect();
    assert_eq!(data, [(fifo, 70)]);
    assert_eq!(runners, [(fifo, 69)]);
    // And it runs: a period through amp at 0 dB comes back unchanged.
    let input: Vec<f32> = (0..64).map(|i| i as f32 / 128.0).collect();
    for d in datagrams(&c.data_key(), 9, 0, &amp_period(0.0, &input)) {
        udp.send_to(&d, srv.local_addr()).unwrap();
    }
    let (_, out) = result(&udp, &c.data_key(), Duration::from_secs(2)).expect("amp's result");
    assert_eq!(out[..256], f32s(&input)[..]);
}

/// Regression (issue 28 item 6): an authenticated control message that
/// cannot be decoded closed the connection with no reply and no log line,
/// and a refused setup without a plugin was counted but not logged. Each is
/// now answered with an error and logged (a `Refused` event, the worker's
/// stderr line), and the connection goes on.
#[test]
fn undecodable_messages_and_refused_setups_are_answered_and_logged() {
    let srv = server(&[]);
    let refused = |what: &str| {
        let what = what.to_string();
        wait_event(
            &srv,
            Duration::from_secs(5),
            move |e| matches!(e, ServerEvent::Refused { message, .. } if message.contains(&what)),
        )
    };
    // As the first message (the gate's) and in the middle of a connection.
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    let m = c.ask(&json!({"type": "no_such_request"}));
    assert!(
        error_of(&m).contains("authenticated control message that cannot be decoded"),
        "{m}"
    );
    let Some(ServerEvent::Refused { message, .. }) = refused("cannot be decoded") else {
        panic!("no log line for the undecodable first message");
    };
    assert!(message.contains("no_such_request"), "{message}");
    let mut c = Ctl::connect(srv.local_addr(), &KEY);
    assert_eq!(c.ask(&json!({"type": "ping", "n": 1}))["type"], "pong");
    let m = c.ask(&json!({"type": "ping", "n": "one"}));
    assert!(error_of(&m).contains("cannot be decoded"), "{m}");
    assert!(
        refused("cannot be decoded").is_some(),
        "no log line mid-connection"
    );
    // The connection goes on.
    assert_eq!(c.ask(&json!({"type": "ping", "n": 2}))["n"], 2);
    // A setup without a plugin, refused: answered, counted and logged.
    let before = stats(srv.local_addr()).setups_refused;
    let m = c.ask(&copy_setup(
        5,
        9,
        json!(0),
        json!({"fraction": 0.0, "mode": "none"}),
    ));
    assert!(error_of(&m).contains("period_ns 0 is out of range"), "{m}");
    let Some(ServerEvent::Refused { message, .. }) = refused("setup of stream 5 refused") else {
        panic!("no log line for the refused setup");
    };
    assert!(message.contains("period_ns 0 is out of range"), "{message}");
    assert_eq!(stats(srv.local_addr()).setups_refused, before + 1);
}
