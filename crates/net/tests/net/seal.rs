//! Encrypted ("sealed") data plane: master and worker exchange under a
//! session's sealed key without allocating, an eavesdropper between them
//! finds a 1 kHz tone in the clear payloads and none in the sealed ones,
//! and the control plane agrees on encryption or fails with a clear error.

use crate::common::*;
use firmtime_net::control::{Conn, Reply, Request, Setup};
use firmtime_net::wire::{FLAG_MAC, FLAG_RESULT, FLAG_SEALED, HEADER_LEN, MAC_LEN};
use firmtime_net::*;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SHARED: [u8; 32] = *b"0123456789abcdef0123456789abcdef";

/// A session's sealed key, as both ends derive it from a handshake's nonces.
fn sealed_key() -> Key {
    let w = control::nonce().unwrap();
    let m = control::nonce().unwrap();
    Key::new(&SHARED).unwrap().sealed_session(&w, &m)
}

/// A worker that serves the test stream under `data_key`, polled under
/// `assert_no_alloc` until `stop`.
fn worker_thread(
    data_key: Option<Key>,
    stream: u32,
    layout: &Layout,
    stop: Arc<AtomicBool>,
    callback: impl FnMut(&mut BlockSet, u64) + Send + 'static,
) -> (SocketAddr, std::thread::JoinHandle<WorkerStats>) {
    let wc = WorkerConfig {
        key: data_key.as_ref().map(|_| Key::new(&SHARED).unwrap()),
        ..WorkerConfig::default()
    };
    let mut worker = Worker::bind(localhost(), wc).unwrap();
    let options = StreamOptions {
        data_key,
        ..StreamOptions::default()
    };
    let mut callback = callback;
    worker
        .add_stream_with(spec(stream, layout), options, move |b, seq, _| {
            callback(b, seq);
            Answer::Now
        })
        .unwrap();
    let addr = worker.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            assert_no_alloc::assert_no_alloc(|| {
                worker.poll_once(Some(Duration::from_millis(20))).unwrap();
            });
        }
        *worker.stats()
    });
    (addr, t)
}

/// Master and worker under one sealed key: every period is delivered bit
/// for bit (fragmented both ways), and neither side allocates (the master's
/// `process` and the worker's `poll_once` run under `assert_no_alloc`; with
/// the `assert-rt` feature `process` checks itself as well).
#[test]
fn a_sealed_exchange_delivers_every_period_without_allocating() {
    let key = sealed_key();
    let (set, ids) = blocks();
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, worker) = worker_thread(Some(key.clone()), 21, set.layout(), stop.clone(), callback);
    let mut cfg = MasterConfig::new(addr, 21);
    cfg.window = 0;
    cfg.key = Some(key);
    let mut m = Master::new(cfg, set).unwrap();
    for n in 0..200 {
        fill(m.blocks_mut(), &ids, n);
        let r = process(&mut m, Deadline::After(ARRIVE_NS));
        assert_eq!(r.outcome, Outcome::Delivered, "period {n}: {r:?}");
        assert_result_of(m.blocks(), &ids, n);
    }
    stop.store(true, Ordering::Relaxed);
    let ws = worker.join().unwrap();
    assert_eq!(m.stats().drops.total(), 0, "{:?}", m.stats().drops);
    assert_eq!(ws.drops.total(), 0, "{:?}", ws.drops);
}

/// A master whose key is sealed and a worker whose is not (or the other
/// way round) never exchange a period: every packet is refused as
/// `bad_mac`, none is read as samples.
#[test]
fn sealed_and_mac_only_ends_refuse_each_other() {
    let sealed = sealed_key();
    let mac = Key::new(&SHARED).unwrap().session(&[1; 32], &[2; 32]);
    for (master_key, worker_key) in [(sealed.clone(), mac.clone()), (mac, sealed)] {
        let (set, ids) = blocks();
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, worker) =
            worker_thread(Some(worker_key), 22, set.layout(), stop.clone(), callback);
        let mut cfg = MasterConfig::new(addr, 22);
        cfg.window = 0;
        cfg.key = Some(master_key);
        let mut m = Master::new(cfg, set).unwrap();
        for n in 0..5 {
            fill(m.blocks_mut(), &ids, n);
            let r = process(&mut m, Deadline::After(50_000_000));
            assert_eq!(r.outcome, Outcome::Late, "period {n}: {r:?}");
        }
        stop.store(true, Ordering::Relaxed);
        let ws = worker.join().unwrap();
        // 2 fragments a period (2,800 bytes at MTU 1500), all refused.
        assert_eq!(ws.drops.get(DropReason::BadMac), 10, "{:?}", ws.drops);
        assert_eq!(ws.drops.total(), 10);
    }
}

const RATE: f64 = 48_000.0;
const TONE_HZ: f64 = 1_000.0;
const FRAMES: usize = 64;
/// 192 periods of 64 frames: 12 288 samples, 256 whole cycles of 1 kHz.
const PERIODS: u64 = 192;

/// What an eavesdropper between master and worker gets: every datagram,
/// both ways, exactly as sent.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Vec<u8>>>,
}

impl Relay {
    /// Forwards what comes from the master to `worker`, and the worker's
    /// answers back to the master, keeping a copy of each datagram.
    fn start(worker: SocketAddr) -> Relay {
        let sock = UdpSocket::bind(localhost()).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut master = None;
            let mut buf = vec![0u8; 65_536];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                seen.push(buf[..n].to_vec());
                let to = if from == worker {
                    match master {
                        Some(m) => m,
                        None => continue,
                    }
                } else {
                    master = Some(from);
                    worker
                };
                sock.send_to(&buf[..n], to).unwrap();
            }
            seen
        });
        Relay { addr, stop, thread }
    }

    fn finish(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// A 1 kHz tone (its result comes back as it went) through the relay;
/// returns the captured datagrams.
fn capture_tone(key: Option<Key>) -> Vec<Vec<u8>> {
    let mut set = BlockSet::new();
    let input = set.add::<f32>(Direction::ToWorker, FRAMES).unwrap();
    let output = set.add::<f32>(Direction::FromWorker, FRAMES).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (worker_addr, worker) =
        worker_thread(key.clone(), 23, set.layout(), stop.clone(), move |b, _| {
            let (i, o) = (b.id::<f32>(0).unwrap(), b.id::<f32>(1).unwrap());
            let mut tmp = [0f32; FRAMES];
            tmp.copy_from_slice(b.get(i));
            b.get_mut(o).copy_from_slice(&tmp);
        });
    let relay = Relay::start(worker_addr);
    let mut cfg = MasterConfig::new(relay.addr, 23);
    cfg.window = 0;
    cfg.key = key;
    let mut m = Master::new(cfg, set).unwrap();
    for n in 0..PERIODS {
        for (j, x) in m.blocks_mut().get_mut(input).iter_mut().enumerate() {
            let t = (n as usize * FRAMES + j) as f64 / RATE;
            *x = (0.5 * (2.0 * std::f64::consts::PI * TONE_HZ * t).sin()) as f32;
        }
        let r = process(&mut m, Deadline::After(ARRIVE_NS));
        assert_eq!(r.outcome, Outcome::Delivered, "period {n}: {r:?}");
        // The worker's copy came back: the tone went both ways.
        assert_eq!(m.blocks().get(output), m.blocks().get(input));
    }
    let seen = relay.finish();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    seen
}

/// The payload bytes of the datagrams going `result`-ward, in sequence
/// order (the header is clear: an eavesdropper can order them), read as
/// little-endian f32 samples; values that are not finite count as 0.
fn payload_samples(seen: &[Vec<u8>], result: bool) -> Vec<f64> {
    let mut d: Vec<&Vec<u8>> = seen
        .iter()
        .filter(|d| (d[5] & FLAG_RESULT != 0) == result)
        .collect();
    d.sort_by_key(|d| u64::from_le_bytes(d[16..24].try_into().unwrap()));
    d.iter()
        .flat_map(|d| {
            let tail = if d[5] & FLAG_MAC != 0 { MAC_LEN } else { 0 };
            d[HEADER_LEN..d.len() - tail].chunks_exact(4).map(|b| {
                let x = f32::from_le_bytes(b.try_into().unwrap());
                if x.is_finite() {
                    f64::from(x)
                } else {
                    0.0
                }
            })
        })
        .collect()
}

/// Power of DFT bin `k` of `x`.
fn bin_power(x: &[f64], k: usize) -> f64 {
    let w = 2.0 * std::f64::consts::PI * k as f64 / x.len() as f64;
    let (mut re, mut im) = (0.0, 0.0);
    for (n, &v) in x.iter().enumerate() {
        re += v * (w * n as f64).cos();
        im -= v * (w * n as f64).sin();
    }
    re * re + im * im
}

/// The 1 kHz bin's power over the median power of 64 other bins spread
/// over the band (none a harmonic of 1 kHz): about 1 for noise, huge for
/// the tone.
fn tone_peak(x: &[f64]) -> f64 {
    let tone_bin = (TONE_HZ * x.len() as f64 / RATE).round() as usize;
    let mut others: Vec<f64> = (0..64)
        .map(|i| 37 + i * 89)
        .filter(|k| k % tone_bin != 0 && *k < x.len() / 2)
        .map(|k| bin_power(x, k))
        .collect();
    others.sort_by(f64::total_cmp);
    bin_power(x, tone_bin) / others[others.len() / 2].max(f64::MIN_POSITIVE)
}

/// Issue 32 item 3: a 1 kHz tone crosses an intercepting relay. Captured in
/// the clear (no key, and MAC-only: a MAC authenticates, it does not hide)
/// the payloads show the tone's spectral peak both ways; sealed, neither
/// way does, and every datagram carries the sealed flag.
#[test]
fn a_1khz_tone_shows_in_the_clear_capture_and_not_in_the_sealed_one() {
    let samples = PERIODS as usize * FRAMES;
    let mac = Key::new(&SHARED).unwrap().session(&[1; 32], &[2; 32]);
    for (what, key) in [("no key", None), ("MAC only", Some(mac))] {
        let seen = capture_tone(key);
        for result in [false, true] {
            let x = payload_samples(&seen, result);
            assert_eq!(x.len(), samples, "{what}");
            let peak = tone_peak(&x);
            assert!(peak > 1e6, "{what}, result {result}: peak ratio {peak:.3e}");
        }
    }
    let seen = capture_tone(Some(sealed_key()));
    assert_eq!(seen.len(), 2 * PERIODS as usize);
    assert!(seen
        .iter()
        .all(|d| d[5] & (FLAG_SEALED | FLAG_MAC) == FLAG_SEALED | FLAG_MAC));
    for result in [false, true] {
        let x = payload_samples(&seen, result);
        assert_eq!(x.len(), samples);
        let peak = tone_peak(&x);
        // Noise: the bin is exponentially distributed around the median
        // (ratio above 30 with probability about 1e-9).
        assert!(peak < 30.0, "sealed, result {result}: peak ratio {peak:.3}");
    }
}

fn server(require_encrypt: bool) -> WorkerServer {
    let mut sc = ServerConfig::new(localhost());
    sc.key = Some(Key::new(&SHARED).unwrap());
    sc.require_encrypt = require_encrypt;
    sc.data_policy = Some(firmtime_rt::sched::Policy::Other { nice: 0 });
    WorkerServer::start(sc).unwrap()
}

fn tone_set() -> (BlockSet, BlockId<f32>, BlockId<f32>) {
    let mut set = BlockSet::new();
    let i = set.add::<f32>(Direction::ToWorker, FRAMES).unwrap();
    let o = set.add::<f32>(Direction::FromWorker, FRAMES).unwrap();
    (set, i, o)
}

fn session_config(srv: &WorkerServer, key: bool, encrypt: bool) -> SessionConfig {
    let mut cfg = SessionConfig::new(srv.local_addr(), 1_333_333);
    cfg.key = key.then(|| Key::new(&SHARED).unwrap());
    cfg.encrypt = encrypt;
    cfg.window = 0;
    cfg.timeout = Duration::from_secs(2);
    cfg
}

/// A session asked to encrypt, on a worker that requires it, delivers its
/// periods (copy); the same worker refuses a plaintext session with an
/// error naming `encrypt`, and a master without a key cannot encrypt.
#[test]
fn encryption_is_agreed_on_the_control_plane_or_refused_clearly() {
    let srv = server(true);
    let (set, i, o) = tone_set();
    let (mut m, link) = connect(session_config(&srv, true, true), set).unwrap();
    for n in 0..50 {
        m.blocks_mut().get_mut(i).fill(n as f32);
        let r = process(&mut m, Deadline::After(ARRIVE_NS));
        assert_eq!(r.outcome, Outcome::Delivered, "period {n}: {r:?}");
        assert!(m.blocks().get(o).iter().all(|&y| y == n as f32));
    }
    drop(link);
    let (set, ..) = tone_set();
    let e = connect(session_config(&srv, true, false), set).unwrap_err();
    assert!(
        e.message().contains("only encrypted sessions") && e.message().contains("encrypt = true"),
        "{e}"
    );
    let (set, ..) = tone_set();
    let e = connect(session_config(&srv, false, true), set).unwrap_err();
    assert!(e.message().contains("needs a key"), "{e}");
    // Without --encrypt the worker serves both: plaintext still works as before.
    let srv = server(false);
    for encrypt in [false, true] {
        let (set, i, o) = tone_set();
        let (mut m, _link) = connect(session_config(&srv, true, encrypt), set).unwrap();
        for n in 0..20 {
            m.blocks_mut().get_mut(i).fill(n as f32 + 0.5);
            let r = process(&mut m, Deadline::After(ARRIVE_NS));
            assert_eq!(
                r.outcome,
                Outcome::Delivered,
                "encrypt {encrypt}, {n}: {r:?}"
            );
            assert!(m.blocks().get(o).iter().all(|&y| y == n as f32 + 0.5));
        }
    }
    let mut sc = ServerConfig::new(localhost());
    sc.require_encrypt = true;
    let e = WorkerServer::start(sc).unwrap_err();
    assert!(e.message().contains("--encrypt needs --key"), "{e}");
}

/// On the wire of a real session: after `encrypt` the worker answers a
/// sealed input with a sealed result under the session's key (flags 0x07),
/// and ignores the same input MAC'd under the session's plain key.
/// `encrypt` after the setup is refused.
#[test]
fn an_encrypted_session_answers_sealed_and_only_sealed() {
    let srv = server(false);
    let mut c = Conn::connect(
        srv.local_addr(),
        Some(Key::new(&SHARED).unwrap()),
        Duration::from_secs(2),
    )
    .unwrap();
    let plain_key = c.data_key().unwrap();
    assert!(!plain_key.is_sealed());
    c.request_encryption().unwrap();
    let key = c.data_key().unwrap();
    assert!(key.is_sealed() && c.sealed());
    let udp = UdpSocket::bind(localhost()).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (set, ..) = tone_set();
    c.send(&Request::Setup(Setup {
        stream_id: 31,
        data_port: udp.local_addr().unwrap().port(),
        layout: set.layout().clone(),
        window: 0,
        period_ns: 1_333_333,
        transform: Transform::Copy,
        work: Work::default(),
        plugin: None,
    }))
    .unwrap();
    assert_eq!(c.recv::<Reply>().unwrap(), Reply::Ready { stream_id: 31 });
    c.send(&Request::Encrypt).unwrap();
    match c.recv::<Reply>().unwrap() {
        Reply::Error { message } => assert!(message.contains("before the setup"), "{message}"),
        other => panic!("encrypt after setup: {other}"),
    }
    let input: Vec<u8> = (0..FRAMES as u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let send = |k: &Key, seq| {
        let enc = Encoder::new(31, Flow::ToWorker, 1400, Some(k.clone())).unwrap();
        let mut d = vec![0u8; enc.max_datagram()];
        let n = enc.encode(&mut d, seq, &input, 0);
        udp.send_to(&d[..n], srv.local_addr()).unwrap();
    };
    send(&key, 0);
    let mut buf = vec![0u8; 2048];
    let n = udp.recv(&mut buf).unwrap();
    assert_eq!(buf[5], FLAG_RESULT | FLAG_MAC | FLAG_SEALED);
    assert_ne!(
        &buf[HEADER_LEN..n - MAC_LEN],
        &input[..],
        "the result is not in clear"
    );
    let pkt = decode_in_place(&mut buf[..n], Some(&key)).unwrap();
    assert_eq!((pkt.header.seq, pkt.payload), (0, &input[..]));
    // The session's plain key: refused by the worker, no answer.
    send(&plain_key, 1);
    assert!(udp.recv(&mut buf).is_err(), "a MAC'd input was answered");
    send(&key, 2);
    let n = udp.recv(&mut buf).unwrap();
    let pkt = decode_in_place(&mut buf[..n], Some(&key)).unwrap();
    assert_eq!(pkt.header.seq, 2);
}
