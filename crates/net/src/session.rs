//! The master's side of the control plane: set up a stream on a remote
//! worker, keep it alive by heartbeat, and set it up again when the worker
//! comes back after going away.
//!
//! [`connect`] builds the [`Master`] (the RT handle) and a [`Link`] (the
//! controller): the link's thread pings the worker every
//! [`SessionConfig::heartbeat`]; a ping unanswered within
//! [`SessionConfig::timeout`], or a broken connection, marks the worker
//! lost. From then on [`Master::process`] keeps running on its late policy
//! (it never waits past its deadline), while the link retries the
//! connection every [`SessionConfig::retry`]; once the worker answers, it
//! sets up the same stream again (same stream id, same master data port)
//! and results flow again, without touching the [`Master`].
//!
//! With a hot standby ([`SessionConfig::standby`]) the same stream is set
//! up on a second worker, with a link of its own ([`Link::standby`]); the
//! [`Master`] sends every period to both and serves from the standby when
//! the worker misses a deadline or is gone (its link's flag is one of the
//! signs it reads), so a lost worker costs no block.
//!
//! # RT contract
//! Only the [`Master`] belongs on the RT thread. The [`Link`] owns a
//! thread that allocates and blocks on TCP; its methods are not RT-safe.

use crate::block::BlockSet;
use crate::control::{refused, Conn, Reply, Request, Setup, WorkerReport};
use crate::error::{Error, Result};
use crate::master::{KeyCell, LatePolicy, Master, MasterConfig, WaitMode};
use crate::processor::{Transform, Work};
use crate::remote::PluginSetup;
use crate::wire::{Key, DEFAULT_MTU};
use firmtime_rt::clock::{gettimeofday_ns, monotonic_ns};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Settings of a remote stream.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The worker's address (TCP control and UDP data).
    pub worker: SocketAddr,
    /// Pre-shared key; `None` = unauthenticated.
    pub key: Option<Key>,
    /// 0, 1 or 2 periods.
    pub window: u8,
    /// The period in ns (the unit of the work fraction).
    pub period_ns: u64,
    /// What the worker computes.
    pub transform: Transform,
    /// How long it holds each block.
    pub work: Work,
    /// How the master waits for results.
    pub wait: WaitMode,
    /// Late policy (`None` = the layout's default).
    pub late_policy: Option<LatePolicy>,
    /// Path MTU.
    pub mtu: usize,
    /// Ping interval.
    pub heartbeat: Duration,
    /// Connect and answer timeout: a worker silent this long is lost.
    pub timeout: Duration,
    /// Interval between reconnection attempts.
    pub retry: Duration,
    /// Run this plugin on the worker instead of `transform` (see [`crate::remote`]).
    pub plugin: Option<PluginSetup>,
    /// Encrypt the data plane (ChaCha20-Poly1305, [`Key::sealed_session`]);
    /// needs `key`. Agreed with the worker before the setup
    /// ([`Conn::request_encryption`]): a worker that cannot is an error.
    pub encrypt: bool,
    /// A hot standby worker (`standby = "host:port"`): [`connect`] sets the
    /// same stream up there too (same plugin, layout, work), the master
    /// sends every period to both, and serves from the standby when the
    /// worker misses a deadline or is gone (see [`Master`], "Hot standby").
    pub standby: Option<SocketAddr>,
}

impl SessionConfig {
    /// Defaults: no key, window 1, copy without work, poll wait, default
    /// late policy, MTU 1500, ping every 100 ms, 500 ms timeout, retry every 100 ms.
    pub fn new(worker: SocketAddr, period_ns: u64) -> Self {
        Self {
            worker,
            key: None,
            window: 1,
            period_ns,
            transform: Transform::Copy,
            work: Work::default(),
            wait: WaitMode::Poll,
            late_policy: None,
            mtu: DEFAULT_MTU,
            heartbeat: Duration::from_millis(100),
            timeout: Duration::from_millis(500),
            retry: Duration::from_millis(100),
            plugin: None,
            encrypt: false,
            standby: None,
        }
    }
}

/// A change of a link's state, with both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEvent {
    /// Lost or back.
    pub kind: LinkEventKind,
    /// CLOCK_MONOTONIC ns.
    pub monotonic_ns: u64,
    /// CLOCK_REALTIME ns (to compare with other processes' logs).
    pub realtime_ns: u64,
}

/// What happened to a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEventKind {
    /// The worker stopped answering or the connection broke.
    Lost,
    /// The stream is set up again.
    Reconnected,
}

/// A snapshot of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStatus {
    /// Whether the worker answers now.
    pub connected: bool,
    /// Times the worker was lost.
    pub losses: u64,
    /// Times the stream was set up again.
    pub reconnects: u64,
    /// The latest error, if any (why it was lost, why a retry failed).
    pub last_error: Option<String>,
}

struct Shared {
    stop: AtomicBool,
    connected: Arc<AtomicBool>,
    losses: AtomicU64,
    reconnects: AtomicU64,
    work: Mutex<(u64, Work)>,
    work_acked: AtomicU64,
    last_error: Mutex<Option<String>>,
    events: Mutex<Vec<LinkEvent>>,
    stats_request: AtomicBool,
    stats: Mutex<Option<WorkerReport>>,
}

/// The controller of a remote stream: heartbeat, reconnection, work changes.
/// Dropping it closes the session (the worker stops serving the stream).
pub struct Link {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    worker: SocketAddr,
    stream_id: u32,
    /// The standby's link (its own connection, heartbeat and reconnection).
    standby: Option<Box<Link>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("worker", &self.worker)
            .field("stream_id", &self.stream_id)
            .field("status", &self.status())
            .field("standby", &self.standby)
            .finish()
    }
}

fn random_stream_id() -> Result<u32> {
    let n = crate::control::nonce()?;
    let id = u32::from_le_bytes([n[0], n[1], n[2], n[3]]);
    Ok(if id == crate::discovery::DISCOVERY_STREAM {
        1
    } else {
        id
    })
}

/// Runs setup on a fresh connection.
fn open(cfg: &SessionConfig, setup: &Setup) -> Result<Conn> {
    let mut c = Conn::connect(cfg.worker, cfg.key.clone(), cfg.timeout)?;
    if cfg.encrypt {
        c.request_encryption()?;
    }
    c.send(&Request::Setup(setup.clone()))?;
    match c.recv::<Reply>()? {
        Reply::Ready { stream_id } if stream_id == setup.stream_id => Ok(c),
        Reply::Error { message } => Err(refused(cfg.worker, &message)),
        other => Err(Error::invalid(format!(
            "the worker at {} answered setup with {other}",
            cfg.worker
        ))),
    }
}

/// Sets up a stream of `blocks` on the worker and returns its RT handle and
/// its controller. The stream id is random; the worker accepts the stream
/// only from this master's data socket.
///
/// # Errors
/// The worker cannot be reached (the message names it), refuses the key
/// ([`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)) or
/// the setup (window, layout), or [`Master::new`] fails.
pub fn connect(cfg: SessionConfig, blocks: BlockSet) -> Result<(Master, Link)> {
    if cfg.encrypt && cfg.key.is_none() {
        return Err(Error::invalid(
            "encryption (encrypt = true / --encrypt) needs a key: give the master and the worker \
             the same --key FILE",
        ));
    }
    let stream_id = random_stream_id()?;
    let standby_id = match cfg.standby {
        Some(_) => Some(loop {
            let id = random_stream_id()?;
            if id != stream_id {
                break id;
            }
        }),
        None => None,
    };
    let mut mc = MasterConfig::new(cfg.worker, stream_id);
    mc.window = cfg.window;
    mc.key = cfg.key.clone();
    mc.wait = cfg.wait;
    mc.late_policy = cfg.late_policy;
    mc.mtu = cfg.mtu;
    mc.standby = cfg.standby;
    mc.standby_stream_id = standby_id;
    let layout = blocks.layout().clone();
    let mut master = Master::new(mc, blocks)?;
    let setup = Setup {
        stream_id,
        data_port: master.local_addr()?.port(),
        layout,
        window: cfg.window,
        period_ns: cfg.period_ns,
        transform: cfg.transform,
        work: cfg.work,
        plugin: cfg.plugin.clone(),
    };
    cfg.work.validate()?;
    let conn = open(&cfg, &setup)?;
    // The standby runs the same stream (same plugin, layout and work) for
    // the master's second socket.
    let standby = match (cfg.standby, standby_id, master.standby_local_addr()?) {
        (Some(addr), Some(id), Some(local)) => {
            let mut scfg = cfg.clone();
            scfg.worker = addr;
            scfg.standby = None;
            let ssetup = Setup {
                stream_id: id,
                data_port: local.port(),
                ..setup.clone()
            };
            let sconn = open(&scfg, &ssetup)
                .map_err(|e| Error::new(e.kind(), format!("the standby: {}", e.message())))?;
            let (keys, link) = spawn_link(scfg, ssetup, sconn, None)?;
            master.follow_standby_key(keys);
            Some(Box::new(link))
        }
        _ => None,
    };
    let standby_alive = standby.as_ref().map(|l| l.shared.connected.clone());
    let (keys, link) = spawn_link(cfg, setup, conn, standby)?;
    master.follow_key(keys);
    if link.standby.is_some() {
        master.follow_liveness(Some(link.shared.connected.clone()), standby_alive);
    }
    Ok((master, link))
}

/// Starts the link thread of a session set up on `conn`; returns the cell
/// of its data keys (for the master) and the link.
fn spawn_link(
    cfg: SessionConfig,
    setup: Setup,
    conn: Conn,
    standby: Option<Box<Link>>,
) -> Result<(Arc<KeyCell>, Link)> {
    // The session's packets are keyed by this connection's nonces.
    let keys = Arc::new(KeyCell::default());
    keys.set(conn.data_key());
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        connected: Arc::new(AtomicBool::new(true)),
        losses: AtomicU64::new(0),
        reconnects: AtomicU64::new(0),
        work: Mutex::new((0, cfg.work)),
        work_acked: AtomicU64::new(0),
        last_error: Mutex::new(None),
        events: Mutex::new(Vec::new()),
        stats_request: AtomicBool::new(false),
        stats: Mutex::new(None),
    });
    let sh = shared.clone();
    let worker = cfg.worker;
    let stream_id = setup.stream_id;
    let k = keys.clone();
    let thread = std::thread::Builder::new()
        .name("ft-net-link".into())
        .spawn(move || link_loop(cfg, setup, conn, &k, &sh))
        .map_err(|e| Error::io("spawning the link thread", e))?;
    Ok((
        keys,
        Link {
            shared,
            thread: Some(thread),
            worker,
            stream_id,
            standby,
        },
    ))
}

fn event(sh: &Shared, kind: LinkEventKind) {
    if let Ok(mut ev) = sh.events.lock() {
        ev.push(LinkEvent {
            kind,
            monotonic_ns: monotonic_ns(),
            realtime_ns: gettimeofday_ns(),
        });
    }
}

fn set_error(sh: &Shared, e: &Error) {
    if let Ok(mut l) = sh.last_error.lock() {
        *l = Some(e.to_string());
    }
}

/// One exchange on a live connection: the pending work change, a stats
/// request, or a ping.
fn exchange(c: &mut Conn, sh: &Shared, sent_gen: &mut u64, ping: &mut u64) -> Result<()> {
    let (gen, work) = sh.work.lock().map(|g| *g).unwrap_or((0, Work::default()));
    let peer = c.peer();
    if gen != *sent_gen {
        c.send(&Request::SetWork { work })?;
        match c.recv::<Reply>()? {
            Reply::Ok => {}
            Reply::Error { message } => return Err(refused(peer, &message)),
            other => return Err(Error::invalid(format!("unexpected reply {other}"))),
        }
        *sent_gen = gen;
        sh.work_acked.store(gen, Ordering::Release);
    }
    if sh.stats_request.swap(false, Ordering::AcqRel) {
        c.send(&Request::Stats)?;
        if let Reply::Stats(r) = c.recv::<Reply>()? {
            if let Ok(mut s) = sh.stats.lock() {
                *s = Some(r);
            }
        }
    }
    *ping += 1;
    c.send(&Request::Ping { n: *ping })?;
    match c.recv::<Reply>()? {
        Reply::Pong { n } if n == *ping => Ok(()),
        other => Err(Error::invalid(format!(
            "the worker at {peer} answered a ping with {other}"
        ))),
    }
}

fn link_loop(cfg: SessionConfig, mut setup: Setup, conn: Conn, keys: &KeyCell, sh: &Shared) {
    let mut conn = Some(conn);
    let mut sent_gen = 0u64;
    let mut ping = 0u64;
    while !sh.stop.load(Ordering::Acquire) {
        match conn.as_mut() {
            Some(c) => {
                if let Err(e) = exchange(c, sh, &mut sent_gen, &mut ping) {
                    conn = None;
                    sh.connected.store(false, Ordering::Release);
                    sh.losses.fetch_add(1, Ordering::Relaxed);
                    set_error(sh, &e);
                    event(sh, LinkEventKind::Lost);
                    continue;
                }
                std::thread::park_timeout(cfg.heartbeat);
            }
            None => {
                let (gen, work) = sh.work.lock().map(|g| *g).unwrap_or((0, setup.work));
                setup.work = work;
                match open(&cfg, &setup) {
                    Ok(c) => {
                        keys.set(c.data_key());
                        conn = Some(c);
                        sent_gen = gen;
                        sh.work_acked.store(gen, Ordering::Release);
                        sh.connected.store(true, Ordering::Release);
                        sh.reconnects.fetch_add(1, Ordering::Relaxed);
                        event(sh, LinkEventKind::Reconnected);
                    }
                    Err(e) => {
                        set_error(sh, &e);
                        std::thread::park_timeout(cfg.retry);
                    }
                }
            }
        }
    }
    if let Some(mut c) = conn {
        let _ = c.send(&Request::Close);
    }
}

impl Link {
    /// Whether the worker answers now. **RT-safe** (one atomic load), so an
    /// RT loop can skip waiting on a worker known to be away.
    pub fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire)
    }

    /// The worker's address.
    pub fn worker(&self) -> SocketAddr {
        self.worker
    }

    /// The stream id.
    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// Whether the worker answers, and how often it was lost and regained.
    pub fn status(&self) -> LinkStatus {
        LinkStatus {
            connected: self.shared.connected.load(Ordering::Acquire),
            losses: self.shared.losses.load(Ordering::Relaxed),
            reconnects: self.shared.reconnects.load(Ordering::Relaxed),
            last_error: self.shared.last_error.lock().ok().and_then(|l| l.clone()),
        }
    }

    /// Every loss and reconnection so far, in order.
    pub fn events(&self) -> Vec<LinkEvent> {
        self.shared
            .events
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// The standby's link, if the session has a standby
    /// ([`SessionConfig::standby`]): its status, events and counters.
    pub fn standby(&self) -> Option<&Link> {
        self.standby.as_deref()
    }

    /// Changes the worker's hold and waits until the worker confirms it
    /// (or, if the worker is away, until `timeout`; it then takes the new
    /// work when it comes back). With a standby both are asked; one
    /// confirmation is enough (the other takes the work when it comes back).
    ///
    /// # Errors
    /// An invalid work; no confirmation within `timeout`.
    pub fn set_work(&self, work: Work, timeout: Duration) -> Result<()> {
        work.validate()?;
        let end = monotonic_ns() + timeout.as_nanos() as u64;
        let gen = self.request_work(work)?;
        let standby = match &self.standby {
            Some(s) => Some((s, s.request_work(work)?)),
            None => None,
        };
        loop {
            if self.shared.work_acked.load(Ordering::Acquire) >= gen
                || standby.is_some_and(|(s, g)| s.shared.work_acked.load(Ordering::Acquire) >= g)
            {
                return Ok(());
            }
            if monotonic_ns() >= end {
                return Err(Error::new(
                    crate::ErrorKind::Io,
                    format!(
                        "the worker at {} did not confirm the new work within {}: {}",
                        self.worker,
                        firmtime_rt::units::format_duration(timeout),
                        self.status()
                            .last_error
                            .unwrap_or_else(|| "no answer".into())
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Hands `work` to the link thread; returns its generation.
    fn request_work(&self, work: Work) -> Result<u64> {
        let gen = {
            let mut g = self
                .shared
                .work
                .lock()
                .map_err(|_| Error::invalid("the link thread panicked"))?;
            g.0 += 1;
            g.1 = work;
            g.0
        };
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        Ok(gen)
    }

    /// Asks the worker for its counters over this session's connection.
    ///
    /// # Errors
    /// No answer within `timeout` (the worker is away or silent).
    pub fn worker_stats(&self, timeout: Duration) -> Result<WorkerReport> {
        if let Ok(mut s) = self.shared.stats.lock() {
            *s = None;
        }
        self.shared.stats_request.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        let end = monotonic_ns() + timeout.as_nanos() as u64;
        loop {
            if let Some(r) = self.shared.stats.lock().ok().and_then(|mut s| s.take()) {
                return Ok(r);
            }
            if monotonic_ns() >= end {
                return Err(Error::new(
                    crate::ErrorKind::Io,
                    format!(
                        "the worker at {} sent no counters within {}",
                        self.worker,
                        firmtime_rt::units::format_duration(timeout)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Ends the session: the worker stops serving the stream.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(mut s) = self.standby.take() {
            s.shutdown();
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shutdown();
    }
}
