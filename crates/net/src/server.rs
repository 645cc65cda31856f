//! The worker daemon behind `firmtime net worker`: a TCP control port and a
//! UDP data port on the same address and port, any number of sessions.
//!
//! [`WorkerServer::start`] binds both, then runs three kinds of threads:
//! the data thread owns the [`Worker`] and serves every stream (it may run
//! under SCHED_FIFO); the accept thread is the [`gate`](mod@crate::gate), which
//! holds every unauthenticated connection within its bounds (a handshake
//! deadline and a cap with early drop, no thread per stranger); one thread
//! per authenticated connection (at most [`ServerConfig::max_connections`])
//! runs the [`control`](crate::control) protocol. Sessions are capped in
//! number and in buffer memory ([`ServerConfig::max_sessions`],
//! [`ServerConfig::max_memory`]) with or without a key. A
//! session's stream is added when its [`Setup`] is accepted and removed
//! when its connection ends — closed, broken, or silent for longer than
//! [`ServerConfig::heartbeat_timeout`]. What happens is reported as
//! [`ServerEvent`]s on a channel; the server itself never prints.
//!
//! Everything a setup carries is range-checked before use
//! ([`Setup::validate`]). The data thread never waits on a session's
//! behalf: a sleep hold is a time to send the result at
//! ([`Processor::run_held`]), a spin hold is capped
//! ([`MAX_SPIN_HOLD_NS`](crate::processor::MAX_SPIN_HOLD_NS)), and a plugin
//! runs on a runner thread of its session ([`crate::runner`]) that a
//! watchdog thread cuts off when one run overruns its budget. The data
//! thread's waits are bounded (20 ms), so [`WorkerServer::stop`] ends every
//! thread it has to wait for within [`STOP_WITHIN`].
//!
//! # RT contract
//! Control threads allocate and block; only the data thread's loop is
//! meant to be real-time (see [`Worker`]'s contract). Commands reach it
//! through a channel it polls between datagrams; it answers a stats request
//! with a copy of its counters, never reading /proc or building the report.

use crate::block::Layout;
use crate::control::{Conn, Reply, Request, Setup, WorkerReport};
use crate::discovery;
use crate::error::{Error, ErrorKind, Result};
use crate::gate::{self, GateConfig, GateCounters, GateStats, Passed};
use crate::processor::{Processor, WorkHandle};
use crate::published::{DataTotals, PeriodTimes, PeriodTimesSnapshot, Published, PUBLISH_EVERY};
use crate::remote::{ControlRefusals, PluginAllowList, PluginDescription, PluginHost};
use crate::runner::{Check, Feed, Runner};
use crate::wire::{Key, DEFAULT_MTU};
use crate::worker::{
    Answer, StreamOptions, StreamSpec, StreamStats, Worker, WorkerConfig, WorkerStats,
};
use firmtime_rt::sched::Policy;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// [`WorkerServer::stop`] waits at most this long for its threads; a thread
/// still busy then (a plugin run that never ends) is left to the process's exit.
pub const STOP_WITHIN: Duration = Duration::from_millis(500);
/// How often the watchdog looks at the plugin runners.
pub const WATCHDOG_INTERVAL: Duration = Duration::from_millis(5);

/// Settings of a [`WorkerServer`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// TCP control and UDP data address; port 0 picks a free port for both.
    pub listen: SocketAddr,
    /// Pre-shared key for control messages and data packets; `None` = unauthenticated.
    pub key: Option<Key>,
    /// Path MTU for results.
    pub mtu: usize,
    /// A session silent for this long (no ping, no request) is ended.
    pub heartbeat_timeout: Duration,
    /// Scheduling policy of the data thread (`None` = leave as is).
    pub data_policy: Option<Policy>,
    /// Directories of LADSPA plugins that authenticated masters may run
    /// (empty: none). Plugins are refused to every master when `key` is `None`.
    pub plugins: PluginAllowList,
    /// Bounds before authentication: handshake deadline, cap on strangers.
    pub gate: GateConfig,
    /// Authenticated control connections served at once (sessions, stats,
    /// describe); one more is refused with an `error`.
    pub max_connections: usize,
    /// Sessions served at once; one more `setup` is refused with an `error`.
    pub max_sessions: usize,
    /// Bytes of stream buffers all sessions together may hold (see
    /// [`session_memory`]); a `setup` that would exceed it is refused.
    pub max_memory: u64,
    /// Without a key, listen on a non-loopback address anyway (anyone who
    /// reaches the port can run sessions). Otherwise [`WorkerServer::start`]
    /// refuses that.
    pub insecure_no_key: bool,
    /// Serve only sessions whose data plane is encrypted (the master sent
    /// [`Request::Encrypt`]); a setup
    /// without it is refused with an `error` that says so. Needs `key`.
    /// Without it, the worker encrypts the sessions whose master asks.
    pub require_encrypt: bool,
}

/// Default of [`ServerConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// Default of [`ServerConfig::max_sessions`].
pub const DEFAULT_MAX_SESSIONS: usize = 64;
/// Default of [`ServerConfig::max_memory`]: 256 MiB.
pub const DEFAULT_MAX_MEMORY: u64 = 256 << 20;

/// The bytes a worker allocates for a stream of `layout`: its block set,
/// 4 reassembly slots of the input payload and the result payload (at most
/// 5 × input + 2 × result), plus 64 KiB for the rest.
pub fn session_memory(layout: &Layout) -> u64 {
    let input = layout.payload_len(crate::block::Flow::ToWorker) as u64;
    let output = layout.payload_len(crate::block::Flow::FromWorker) as u64;
    5 * input + 2 * output + (64 << 10)
}

impl ServerConfig {
    /// Defaults: no key, MTU 1500, 3 s heartbeat timeout, data thread's policy unchanged.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            key: None,
            mtu: DEFAULT_MTU,
            heartbeat_timeout: Duration::from_secs(3),
            data_policy: None,
            plugins: PluginAllowList::default(),
            gate: GateConfig::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_memory: DEFAULT_MAX_MEMORY,
            insecure_no_key: false,
            require_encrypt: false,
        }
    }

    /// Checks the bounds, and that a keyless worker listens on loopback
    /// only unless [`Self::insecure_no_key`] says otherwise.
    ///
    /// # Errors
    /// A cap is 0 or the handshake deadline is 0 or over an hour; no key on
    /// a non-loopback address without `insecure_no_key`
    /// ([`ErrorKind::PermissionDenied`], naming `--key` and `--insecure-no-key`).
    pub fn validate(&self) -> Result<()> {
        if self.key.is_none() && !self.insecure_no_key && !self.listen.ip().is_loopback() {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "refusing to listen on {} without a key: anyone who reaches that address \
                     could run sessions on this machine. Give the worker --key FILE (the same \
                     key as its masters), listen on a loopback address (127.0.0.1), or pass \
                     --insecure-no-key to accept that risk",
                    self.listen
                ),
            ));
        }
        if self.require_encrypt && self.key.is_none() {
            return Err(Error::invalid(
                "--encrypt needs --key FILE: the session keys that encrypt the data plane \
                 derive from the pre-shared key",
            ));
        }
        self.gate.startups.validate()?;
        if self.gate.login_grace.is_zero() || self.gate.login_grace > Duration::from_secs(3600) {
            return Err(Error::invalid(format!(
                "login-grace {}: use a duration from 1 ms to 1 h (default 10 s)",
                firmtime_rt::units::format_duration(self.gate.login_grace)
            )));
        }
        for (name, v) in [
            ("max-connections", self.max_connections),
            ("max-sessions", self.max_sessions),
        ] {
            if v == 0 {
                return Err(Error::invalid(format!("{name} 0: use at least 1")));
            }
        }
        if self.max_memory < 64 << 10 {
            return Err(Error::invalid(format!(
                "max-memory {} bytes: use at least 64 KiB (one small session)",
                self.max_memory
            )));
        }
        Ok(())
    }
}

/// Something the server did, for the operator's log.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// Both ports are bound.
    Listening {
        /// The address of both ports.
        addr: SocketAddr,
        /// Whether a key is in force (otherwise anyone on the network may set up sessions).
        authenticated: bool,
    },
    /// A session's stream is being served.
    SessionOpened {
        /// The master's control address.
        peer: SocketAddr,
        /// The stream id.
        stream_id: u32,
        /// Its layout.
        layout: Layout,
    },
    /// A session ended; its stream is no longer served.
    SessionClosed {
        /// The master's control address.
        peer: SocketAddr,
        /// The stream id.
        stream_id: u32,
        /// Why: "closed by the master", the I/O error, or the heartbeat timeout.
        reason: String,
    },
    /// A connection or a request was refused (bad key, bad or undecodable
    /// request, a cap reached). At most
    /// [`REFUSALS_LOGGED_PER_SECOND`] a second; a message after others were
    /// held back ends with how many (`(and N refusals before it not logged: …)`).
    Refused {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        message: String,
    },
    /// The data socket reported an error (the data thread goes on).
    DataError {
        /// The error.
        message: String,
    },
    /// Unauthenticated connections were dropped (at most one such event a
    /// second): `timed_out`, `early_dropped`, `malformed` and `abandoned`
    /// count those since the last one, `pending` is the number now.
    PreAuthDropped(GateStats),
    /// The watchdog cut a session off: its plugin run overran its budget.
    /// Its periods are dropped and the session ends at the master's next request.
    SessionCutOff {
        /// The master's control address.
        peer: SocketAddr,
        /// The stream id.
        stream_id: u32,
        /// What overran, for how long, and the budget.
        message: String,
    },
    /// A session sent control values its plugin does not accept (at most one event a second).
    ControlRefused {
        /// The master's control address.
        peer: SocketAddr,
        /// The stream id.
        stream_id: u32,
        /// The latest value refused, the port, the valid range, and the count.
        message: String,
    },
}

/// What a stream's callback runs.
enum StreamWork {
    Builtin(Processor),
    Plugin(Feed),
}

enum Command {
    Add {
        spec: StreamSpec,
        data_key: Option<Box<Key>>,
        /// The master's whole budget for a result, (window + 1) × period.
        late_after_ns: u64,
        processor: StreamWork,
        reply: Sender<Result<()>>,
    },
    Remove {
        stream_id: u32,
        peer: SocketAddr,
    },
    Stats {
        reply: Sender<DataCounters>,
    },
}

/// The data thread's counters, copied for a stats request.
#[derive(Debug, Clone, Copy, Default)]
struct DataCounters {
    worker: WorkerStats,
    /// Every session stream's counters, summed.
    streams: StreamStats,
    /// The discovery stream's counters.
    discovery: StreamStats,
    sessions: u64,
    /// Since the start, ended sessions included.
    totals: DataTotals,
}

/// A plugin session the watchdog looks after.
struct Watched {
    id: u64,
    peer: SocketAddr,
    stream_id: u32,
    runner: Runner,
    refusals: Arc<ControlRefusals>,
    cut: Arc<OnceLock<String>>,
    counted_refusals: u64,
    counted_dropped: u64,
    reported_at: Option<Instant>,
}

struct Shared {
    stop: AtomicBool,
    sessions: AtomicU64,
    key: Option<Key>,
    heartbeat_timeout: Duration,
    require_encrypt: bool,
    plugins: PluginAllowList,
    events: Mutex<Sender<ServerEvent>>,
    conns: Mutex<Vec<(u64, TcpStream)>>,
    gate: GateCounters,
    max_connections: usize,
    connections: AtomicUsize,
    max_sessions: usize,
    max_memory: u64,
    /// Sessions admitted and the buffer bytes they reserved.
    budget: Mutex<(usize, u64)>,
    /// Sends plugin results (a clone of the data socket).
    data_socket: UdpSocket,
    chunk: usize,
    data_policy: Option<Policy>,
    watched: Mutex<Vec<Watched>>,
    next_watch: AtomicU64,
    cut_off: AtomicU64,
    setups_refused: AtomicU64,
    /// Refusal lines logged this second ([`Shared::refuse`]).
    refusal_log: Mutex<RefusalLog>,
    bad_controls: AtomicU64,
    plugin_dropped: AtomicU64,
    sessions_opened: AtomicU64,
    /// The data thread's totals, refreshed every [`PUBLISH_EVERY`].
    published: Published,
    /// The worker's time per period (the data thread records).
    times: Arc<PeriodTimes>,
}

impl Shared {
    fn emit(&self, e: ServerEvent) {
        if let Ok(tx) = self.events.lock() {
            let _ = tx.send(e);
        }
    }

    /// Logs a refusal ([`ServerEvent::Refused`]: a stranger's failed MAC, a
    /// connection over the cap, an authenticated peer's refused request): at
    /// most [`REFUSALS_LOGGED_PER_SECOND`] a second, so no peer can flood the
    /// log; the rest are counted and the next line logged says how many were not.
    fn refuse(&self, peer: SocketAddr, message: String) {
        let Ok(mut l) = self.refusal_log.lock() else {
            return;
        };
        let Some(message) = l.admit(Instant::now(), message) else {
            return;
        };
        drop(l);
        self.emit(ServerEvent::Refused { peer, message });
    }
}

/// Refusal lines logged a second at most (a master may send refused
/// requests in a loop); the others are counted in the next line.
pub const REFUSALS_LOGGED_PER_SECOND: u32 = 10;

/// The budget of refusal lines ([`REFUSALS_LOGGED_PER_SECOND`]).
#[derive(Debug, Default)]
struct RefusalLog {
    since: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl RefusalLog {
    /// The line to log for `message` at `now`, or `None` (counted) when
    /// this second's lines are spent.
    fn admit(&mut self, now: Instant, message: String) -> Option<String> {
        if self
            .since
            .map_or(true, |t| now.duration_since(t) >= Duration::from_secs(1))
        {
            self.since = Some(now);
            self.logged = 0;
        }
        if self.logged >= REFUSALS_LOGGED_PER_SECOND {
            self.suppressed += 1;
            return None;
        }
        self.logged += 1;
        Some(match std::mem::take(&mut self.suppressed) {
            0 => message,
            n => format!("{message} (and {n} refusals before it not logged: over {REFUSALS_LOGGED_PER_SECOND} a second)"),
        })
    }
}

/// A running worker daemon. Dropping it stops every thread and ends every session.
pub struct WorkerServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: Receiver<ServerEvent>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn bind_pair(listen: SocketAddr) -> Result<(TcpListener, UdpSocket)> {
    let mut last = None;
    // With port 0 the TCP port is free but the same UDP port may not be: try again.
    for _ in 0..if listen.port() == 0 { 20 } else { 1 } {
        let tcp = TcpListener::bind(listen)
            .map_err(|e| Error::io(&format!("binding the TCP control port {listen}"), e))?;
        let addr = tcp
            .local_addr()
            .map_err(|e| Error::io("reading the control port's address", e))?;
        match UdpSocket::bind(addr) {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) => last = Some(Error::io(&format!("binding the UDP data port {addr}"), e)),
        }
    }
    Err(last.unwrap_or_else(|| Error::invalid("no port")))
}

impl WorkerServer {
    /// Binds the ports and starts serving.
    ///
    /// # Errors
    /// A port cannot be bound (in use, or below 1024 without
    /// CAP_NET_BIND_SERVICE); the data thread's policy was refused (the
    /// message says how to grant it); a thread cannot be spawned; the
    /// configuration is refused by [`ServerConfig::validate`].
    pub fn start(config: ServerConfig) -> Result<Self> {
        config.validate()?;
        let (tcp, udp) = bind_pair(config.listen)?;
        let addr = tcp
            .local_addr()
            .map_err(|e| Error::io("reading the control port's address", e))?;
        tcp.set_nonblocking(true)
            .map_err(|e| Error::io("making the control port non-blocking", e))?;
        let mut worker = Worker::from_socket(
            udp,
            WorkerConfig {
                key: config.key.clone(),
                mtu: config.mtu,
            },
        )?;
        let (etx, erx) = channel();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            sessions: AtomicU64::new(0),
            key: config.key.clone(),
            heartbeat_timeout: config.heartbeat_timeout,
            require_encrypt: config.require_encrypt,
            plugins: config.plugins.clone(),
            events: Mutex::new(etx),
            conns: Mutex::new(Vec::new()),
            gate: GateCounters::default(),
            max_connections: config.max_connections,
            connections: AtomicUsize::new(0),
            max_sessions: config.max_sessions,
            max_memory: config.max_memory,
            budget: Mutex::new((0, 0)),
            data_socket: worker.try_clone_socket()?,
            chunk: worker.chunk(),
            data_policy: config.data_policy,
            watched: Mutex::new(Vec::new()),
            next_watch: AtomicU64::new(0),
            cut_off: AtomicU64::new(0),
            setups_refused: AtomicU64::new(0),
            refusal_log: Mutex::new(RefusalLog::default()),
            bad_controls: AtomicU64::new(0),
            plugin_dropped: AtomicU64::new(0),
            sessions_opened: AtomicU64::new(0),
            published: Published::default(),
            times: Arc::new(PeriodTimes::default()),
        });
        worker.set_period_times(shared.times.clone());
        let sh = shared.clone();
        // Probes come from any master with any sequence number: no state between them.
        worker.add_stream_with(
            crate::worker::StreamSpec {
                stream_id: discovery::DISCOVERY_STREAM,
                layout: discovery::layout(),
                peer: None,
            },
            StreamOptions {
                data_key: None,
                stateless: true,
                late_after_ns: None,
            },
            move |b, _, _| {
                discovery::answer(b, &sh.sessions);
                Answer::Now
            },
        )?;
        let (ctx, crx) = channel::<Command>();
        let (ready_tx, ready_rx) = channel::<Result<()>>();
        let sh = shared.clone();
        let policy = config.data_policy;
        let data = std::thread::Builder::new()
            .name("ft-net-data".into())
            .spawn(move || {
                if let Some(p) = policy {
                    if let Err(e) = firmtime_rt::sched::set_current_thread(&p) {
                        let _ = ready_tx.send(Err(Error::new(
                            ErrorKind::PermissionDenied,
                            format!("the worker's data thread cannot run as {p}: {e}"),
                        )));
                        return;
                    }
                }
                let _ = ready_tx.send(Ok(()));
                data_loop(&mut worker, &crx, &sh);
            })
            .map_err(|e| Error::io("spawning the data thread", e))?;
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(Error::invalid("the data thread ended at once")));
        if let Err(e) = ready {
            let _ = data.join();
            return Err(e);
        }
        let sh = shared.clone();
        let watchdog = std::thread::Builder::new()
            .name("ft-net-watchdog".into())
            .spawn(move || {
                // One RT priority above the data thread (and the runners at its
                // policy), so that a runaway plugin cannot keep it from looking.
                if let Some(Policy::Fifo { priority } | Policy::Rr { priority }) = policy {
                    let p = Policy::Fifo {
                        priority: priority.saturating_add(1).min(99),
                    };
                    let _ = firmtime_rt::sched::set_current_thread(&p);
                }
                watchdog_loop(&sh)
            })
            .map_err(|e| Error::io("spawning the watchdog thread", e))?;
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("ft-net-accept".into())
            .spawn(move || accept_loop(&tcp, config.gate, &ctx, &sh))
            .map_err(|e| Error::io("spawning the accept thread", e))?;
        shared.emit(ServerEvent::Listening {
            addr,
            authenticated: config.key.is_some(),
        });
        Ok(Self {
            addr,
            shared,
            events: erx,
            threads: vec![data, watchdog, accept],
        })
    }

    /// The address of both ports.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What happened, in order.
    pub fn events(&self) -> &Receiver<ServerEvent> {
        &self.events
    }

    /// Sessions being served.
    pub fn sessions(&self) -> u64 {
        self.shared.sessions.load(Ordering::Relaxed)
    }

    /// What the pre-authentication gate did so far, and strangers pending now.
    pub fn gate_stats(&self) -> GateStats {
        self.shared.gate.snapshot()
    }

    /// Authenticated control connections open now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// A handle that reads this worker's counters from any thread, for as
    /// long as it lives (a metrics endpoint's). Reading never waits for the
    /// data thread: it loads what that thread published (at most
    /// [`PUBLISH_EVERY`] plus one idle wait, 20 ms, old).
    pub fn metrics(&self) -> WorkerMetrics {
        WorkerMetrics(self.shared.clone())
    }

    /// Stops every thread and ends every session, waiting at most
    /// [`STOP_WITHIN`] (a thread still busy then is left to the process's exit).
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Asks every thread to stop and ends every session, without waiting:
    /// safe to call from a thread that watches for signals. [`Self::stop`]
    /// (or dropping the server) then waits for the threads.
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Ok(conns) = self.shared.conns.lock() {
            for (_, c) in conns.iter() {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn shutdown(&mut self) {
        self.request_stop();
        let deadline = Instant::now() + STOP_WITHIN;
        for t in self.threads.drain(..) {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for WorkerServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A reader of a [`WorkerServer`]'s counters ([`WorkerServer::metrics`]).
#[derive(Clone)]
pub struct WorkerMetrics(Arc<Shared>);

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMetrics").finish_non_exhaustive()
    }
}

/// A worker's counters since it started, for a metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// The data thread's totals (as last published).
    pub data: DataTotals,
    /// Sessions set up since the start.
    pub sessions_opened: u64,
    /// `setup` requests refused.
    pub setups_refused: u64,
    /// Sessions cut off by the watchdog.
    pub cut_off: u64,
    /// Plugin periods given up because the plugin was still running or cut off.
    pub plugin_dropped: u64,
    /// The worker's time per period.
    pub times: PeriodTimesSnapshot,
    /// Datagrams the kernel dropped at the data socket (/proc/net/udp), if found.
    pub socket_drops: Option<u64>,
}

impl WorkerMetrics {
    /// The counters now: atomic loads and one read of /proc/net/udp, on the
    /// caller's thread.
    pub fn snapshot(&self) -> WorkerSnapshot {
        let sh = &*self.0;
        WorkerSnapshot {
            data: sh.published.load(),
            sessions_opened: sh.sessions_opened.load(Ordering::Relaxed),
            setups_refused: sh.setups_refused.load(Ordering::Relaxed),
            cut_off: sh.cut_off.load(Ordering::Relaxed),
            plugin_dropped: sh.plugin_dropped.load(Ordering::Relaxed),
            times: sh.times.snapshot(),
            socket_drops: sh.data_socket.local_addr().ok().and_then(udp_socket_drops),
        }
    }
}

fn data_loop(worker: &mut Worker, commands: &Receiver<Command>, sh: &Shared) {
    let mut active: Vec<(u32, SocketAddr)> = Vec::with_capacity(sh.max_sessions.min(1024));
    // Counters of ended sessions, so that the totals only grow.
    let mut retired = StreamStats::default();
    let mut published_at = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        if let Err(e) = worker.poll_once(Some(Duration::from_millis(20))) {
            sh.emit(ServerEvent::DataError {
                message: e.to_string(),
            });
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = firmtime_rt::clock::monotonic_ns();
        if now.saturating_sub(published_at) >= PUBLISH_EVERY.as_nanos() as u64 {
            published_at = now;
            firmtime_rt::assert_rt::no_alloc(|| {
                sh.published
                    .store(&counters(worker, &active, &retired).totals)
            });
        }
        while let Ok(cmd) = commands.try_recv() {
            match cmd {
                Command::Add {
                    spec,
                    data_key,
                    late_after_ns,
                    processor,
                    reply,
                } => {
                    let key = (
                        spec.stream_id,
                        spec.peer.unwrap_or(SocketAddr::from(([0; 4], 0))),
                    );
                    let options = StreamOptions {
                        data_key: data_key.map(|k| *k),
                        stateless: false,
                        late_after_ns: Some(late_after_ns),
                    };
                    let r = match processor {
                        StreamWork::Builtin(p) => {
                            worker.add_stream_with(spec, options, move |b, _, _| p.run_held(b))
                        }
                        StreamWork::Plugin(feed) => {
                            worker.add_stream_with(spec, options, move |b, seq, to| {
                                feed.offer(b, seq, to);
                                Answer::Elsewhere
                            })
                        }
                    };
                    if r.is_ok() && !active.contains(&key) {
                        active.push(key);
                    }
                    let _ = reply.send(r);
                }
                Command::Remove { stream_id, peer } => {
                    if let Some(s) = worker.take_stream(stream_id, Some(peer)) {
                        add_stream_stats(&mut retired, &s);
                    }
                    active.retain(|k| *k != (stream_id, peer));
                }
                Command::Stats { reply } => {
                    let _ = reply.send(counters(worker, &active, &retired));
                }
            }
        }
    }
}

/// Adds `s` to `sum`. **RT-safe.**
fn add_stream_stats(sum: &mut StreamStats, s: &StreamStats) {
    firmtime_rt::add_fields!(sum += s; periods, reordered, incomplete, send_errors, busy, late);
    sum.drops.merge(&s.drops);
}

/// The data thread's counters (copies only: no allocation, no /proc);
/// `retired` holds those of ended sessions. **RT-safe.**
fn counters(worker: &Worker, active: &[(u32, SocketAddr)], retired: &StreamStats) -> DataCounters {
    let mut c = DataCounters {
        worker: *worker.stats(),
        sessions: active.len() as u64,
        ..DataCounters::default()
    };
    for (id, s) in worker.streams_stats() {
        let sum = if id == discovery::DISCOVERY_STREAM {
            &mut c.discovery
        } else {
            &mut c.streams
        };
        add_stream_stats(sum, s);
    }
    let mut all = c.streams;
    add_stream_stats(&mut all, retired);
    let mut drops = c.worker.drops;
    drops.merge(&all.drops);
    drops.merge(&c.discovery.drops);
    c.totals = DataTotals {
        datagrams: c.worker.datagrams,
        periods: all.periods,
        late: all.late,
        incomplete: all.incomplete,
        busy: all.busy,
        probes: c.discovery.periods,
        recv_errors: c.worker.recv_errors,
        send_errors: all.send_errors + c.discovery.send_errors,
        drops,
        sessions: c.sessions,
    };
    c
}

/// The stats answer, built off the data thread.
fn report(c: &DataCounters, sh: &Shared) -> WorkerReport {
    // Since the worker started, ended sessions included (issue 28 item 4:
    // the drops of an ended session vanished from `dropped`); only
    // `sessions` and `periods` are about the sessions served now.
    let t = &c.totals;
    let plugin_dropped = sh.plugin_dropped.load(Ordering::Relaxed);
    let mut r = WorkerReport {
        datagrams: c.worker.datagrams,
        periods: c.streams.periods,
        sessions: c.sessions,
        kernel_rcvbuf_errors: kernel_rcvbuf_errors(),
        probes: c.discovery.periods,
        incomplete: t.incomplete,
        busy: t.busy + plugin_dropped,
        bad_controls: sh.bad_controls.load(Ordering::Relaxed),
        cut_off: sh.cut_off.load(Ordering::Relaxed),
        setups_refused: sh.setups_refused.load(Ordering::Relaxed),
        recv_errors: c.worker.recv_errors,
        send_errors: t.send_errors,
        socket_drops: sh.data_socket.local_addr().ok().and_then(udp_socket_drops),
        sessions_opened: sh.sessions_opened.load(Ordering::Relaxed),
        periods_total: c.totals.periods,
        late_total: c.totals.late,
        lost_total: t.incomplete + t.busy + plugin_dropped,
        ..WorkerReport::default()
    };
    let times = sh.times.snapshot();
    r.timed_periods = times.count();
    r.worker_time_sum_ns = times.sum_ns;
    r.set_drops(&t.drops);
    r
}

/// Brings a watched session's counts into the worker's totals; reports
/// refused control values at most once a second.
fn account(w: &mut Watched, sh: &Shared, final_flush: bool) {
    let dropped = w.runner.dropped();
    sh.plugin_dropped
        .fetch_add(dropped - w.counted_dropped, Ordering::Relaxed);
    w.counted_dropped = dropped;
    let refused = w.refusals.count();
    if refused > w.counted_refusals {
        let due = w
            .reported_at
            .map_or(true, |t| t.elapsed() >= Duration::from_secs(1));
        if due || final_flush {
            sh.bad_controls
                .fetch_add(refused - w.counted_refusals, Ordering::Relaxed);
            w.counted_refusals = refused;
            w.reported_at = Some(Instant::now());
            if let Some(text) = w.refusals.last_text() {
                sh.emit(ServerEvent::ControlRefused {
                    peer: w.peer,
                    stream_id: w.stream_id,
                    message: format!("{text} ({refused} refused in this session)"),
                });
            }
        }
    }
}

/// Looks at every plugin runner every [`WATCHDOG_INTERVAL`]; cuts off a
/// session whose run overran its budget.
fn watchdog_loop(sh: &Shared) {
    while !sh.stop.load(Ordering::Relaxed) {
        if let Ok(mut list) = sh.watched.lock() {
            for w in list.iter_mut() {
                if let Check::CutOff { cpu_ns, wall_ns } = w.runner.check() {
                    let budget = w.runner.budget_ns();
                    let message = format!(
                        "session cut off by the worker's watchdog: one run of its plugin used \
                         {:.1} ms of CPU in {:.1} ms, over its budget of {:.1} ms of CPU (twice \
                         the period, at least 10 ms, at most 500 ms; a run may last 2 s at most \
                         whatever it uses); its periods are no longer served: set the session \
                         up again",
                        cpu_ns as f64 / 1e6,
                        wall_ns as f64 / 1e6,
                        budget as f64 / 1e6
                    );
                    let _ = w.cut.set(message.clone());
                    sh.cut_off.fetch_add(1, Ordering::Relaxed);
                    sh.emit(ServerEvent::SessionCutOff {
                        peer: w.peer,
                        stream_id: w.stream_id,
                        message,
                    });
                }
                account(w, sh, false);
            }
        }
        std::thread::sleep(WATCHDOG_INTERVAL);
    }
}

/// `RcvbufErrors` of the `Udp:` lines of /proc/net/snmp (this network namespace).
pub fn kernel_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|w| w == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The `drops` column of the /proc/net/udp (IPv4) or /proc/net/udp6 line of
/// the UDP socket bound to `addr`: datagrams the kernel dropped at that one
/// socket, as its receive buffer was full.
pub fn udp_socket_drops(addr: SocketAddr) -> Option<u64> {
    let file = if addr.is_ipv4() {
        "/proc/net/udp"
    } else {
        "/proc/net/udp6"
    };
    udp_drops_in(&std::fs::read_to_string(file).ok()?, addr)
}

/// [`udp_socket_drops`] on the text of /proc/net/udp or udp6. The kernel
/// prints each address as native-endian 32-bit words of the network-order
/// bytes, in hex, then `:PORT` in hex.
fn udp_drops_in(text: &str, addr: SocketAddr) -> Option<u64> {
    let octets: Vec<u8> = match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.octets().to_vec(),
        std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let hex: String = octets
        .chunks(4)
        .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    let local = format!("{hex}:{:04X}", addr.port());
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() >= 13 && f[1].eq_ignore_ascii_case(&local))
            .then(|| f[12].parse().ok())
            .flatten()
    })
}

fn accept_loop(tcp: &TcpListener, gate: GateConfig, commands: &Sender<Command>, sh: &Arc<Shared>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    gate::run(tcp, gate, sh.key.as_ref(), &sh.stop, &sh.gate, |passed| {
        let (mut conn, first) = match passed {
            Passed::Authenticated(conn, first) => (conn, first),
            Passed::Refused { peer, message } => return sh.refuse(peer, message),
            Passed::Dropped(stats) => return sh.emit(ServerEvent::PreAuthDropped(stats)),
        };
        conns.retain(|h| !h.is_finished());
        let peer = conn.peer();
        if sh.connections.load(Ordering::Relaxed) >= sh.max_connections {
            let message = format!(
                "this worker serves at most {} control connections at once (its \
                 --max-connections) and all are in use: try again later or use another worker",
                sh.max_connections
            );
            let _ = conn.send(&Reply::Error {
                message: message.clone(),
            });
            return sh.refuse(peer, message);
        }
        let id = next_id;
        next_id += 1;
        // Kept to shut the connection down on stop; removed when the session ends.
        if let (Ok(c), Ok(mut list)) = (conn.try_clone_stream(), sh.conns.lock()) {
            list.push((id, c));
        }
        sh.connections.fetch_add(1, Ordering::Relaxed);
        let sh2 = sh.clone();
        let tx = commands.clone();
        let spawned = std::thread::Builder::new()
            .name("ft-net-session".into())
            .spawn(move || {
                session(*conn, first, &tx, &sh2);
                if let Ok(mut list) = sh2.conns.lock() {
                    list.retain(|(i, _)| *i != id);
                }
                sh2.connections.fetch_sub(1, Ordering::Relaxed);
            });
        match spawned {
            Ok(h) => conns.push(h),
            Err(_) => {
                sh.connections.fetch_sub(1, Ordering::Relaxed);
                if let Ok(mut list) = sh.conns.lock() {
                    list.retain(|(i, _)| *i != id);
                }
            }
        }
    });
    for h in conns {
        let _ = h.join();
    }
}

/// Serves an authenticated connection whose first request is `first`.
fn session(mut conn: Conn, first: Request, commands: &Sender<Command>, sh: &Shared) {
    let peer = conn.peer();
    let _ = conn.set_timeout(Some(sh.heartbeat_timeout));
    let mut stream: Option<(u32, SocketAddr, WorkHandle)> = None;
    let mut watch: Option<(u64, Arc<OnceLock<String>>)> = None;
    let mut grant: Option<Grant> = None;
    let mut first = Some(first);
    let reason = loop {
        let next = match first.take() {
            Some(r) => Ok(r),
            None => conn.recv::<Request>(),
        };
        let req = match next {
            Ok(_) if watch.as_ref().is_some_and(|(_, c)| c.get().is_some()) => {
                let message = watch
                    .as_ref()
                    .and_then(|(_, c)| c.get().cloned())
                    .unwrap_or_default();
                let _ = conn.send(&Reply::Error {
                    message: message.clone(),
                });
                break message;
            }
            Ok(r) => r,
            // Authenticated but not decodable (a newer master?): told and
            // logged; the connection goes on.
            Err(e) if e.kind() == ErrorKind::InvalidInput => {
                sh.refuse(peer, e.to_string());
                if let Err(e) = conn.send(&Reply::Error {
                    message: e.message().to_string(),
                }) {
                    break e.to_string();
                }
                continue;
            }
            Err(e) => {
                if e.kind() == ErrorKind::PermissionDenied {
                    let _ = conn.send_unauthenticated(&Reply::Error {
                        message: e.message().to_string(),
                    });
                    sh.refuse(peer, e.to_string());
                }
                break if sh.stop.load(Ordering::Relaxed) {
                    "the worker is stopping".to_string()
                } else if matches!(e.errno(), Some(libc::EAGAIN)) {
                    format!(
                        "no heartbeat for {}: the master is gone",
                        firmtime_rt::units::format_duration(sh.heartbeat_timeout)
                    )
                } else {
                    e.to_string()
                };
            }
        };
        let reply = match req {
            Request::Setup(s) if stream.is_none() => {
                // Range-checked before anything is reserved: an out-of-range
                // setup is told which field is wrong, not that memory ran out.
                match s
                    .validate()
                    .and_then(|()| encryption_agreed(&conn, sh))
                    .and_then(|()| Grant::take(&s.layout, sh))
                    .and_then(|g| setup(&s, peer, conn.data_key(), commands, sh).map(|r| (g, r)))
                {
                    Ok((g, (data_peer, handle, watched))) => {
                        grant = Some(g);
                        stream = Some((s.stream_id, data_peer, handle));
                        watch = watched;
                        sh.sessions.fetch_add(1, Ordering::Relaxed);
                        sh.sessions_opened.fetch_add(1, Ordering::Relaxed);
                        sh.emit(ServerEvent::SessionOpened {
                            peer,
                            stream_id: s.stream_id,
                            layout: s.layout.clone(),
                        });
                        Reply::Ready {
                            stream_id: s.stream_id,
                        }
                    }
                    Err(e) => {
                        sh.setups_refused.fetch_add(1, Ordering::Relaxed);
                        sh.refuse(
                            peer,
                            format!("setup of stream {} refused: {e}", s.stream_id),
                        );
                        Reply::Error {
                            message: e.message().to_string(),
                        }
                    }
                }
            }
            Request::Setup(_) => Reply::Error {
                message: "this connection already has a session: open another connection".into(),
            },
            Request::Encrypt if stream.is_some() => Reply::Error {
                message: "encrypt after setup: send it before the setup".into(),
            },
            Request::Encrypt => match conn.set_sealed() {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::Error {
                    message: e.message().to_string(),
                },
            },
            Request::SetWork { work } => match &stream {
                None => Reply::Error {
                    message: "set_work before setup: send a setup first".into(),
                },
                Some((_, _, h)) => match h.set(work) {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::Error {
                        message: e.message().to_string(),
                    },
                },
            },
            Request::Ping { n } => Reply::Pong { n },
            Request::Describe { plugin } => match find_plugin(&plugin, sh) {
                Ok(p) => Reply::Plugin(PluginDescription::from_info(p.info())),
                Err(e) => {
                    sh.refuse(peer, e.to_string());
                    Reply::Error {
                        message: e.message().to_string(),
                    }
                }
            },
            Request::Stats => {
                let (tx, rx) = channel();
                let _ = commands.send(Command::Stats { reply: tx });
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(c) => Reply::Stats(report(&c, sh)),
                    Err(_) => Reply::Error {
                        message: "the data thread did not answer".into(),
                    },
                }
            }
            Request::Close => break "closed by the master".to_string(),
        };
        if let Err(e) = conn.send(&reply) {
            break e.to_string();
        }
    };
    if let Some((id, _)) = watch {
        if let Ok(mut list) = sh.watched.lock() {
            if let Some(i) = list.iter().position(|w| w.id == id) {
                let mut w = list.swap_remove(i);
                account(&mut w, sh, true);
            }
        }
    }
    if let Some((stream_id, data_peer, _)) = stream {
        let _ = commands.send(Command::Remove {
            stream_id,
            peer: data_peer,
        });
        sh.sessions.fetch_sub(1, Ordering::Relaxed);
        sh.emit(ServerEvent::SessionClosed {
            peer,
            stream_id,
            reason,
        });
    }
    drop(grant);
}

/// A session's share of [`ServerConfig::max_sessions`] and
/// [`ServerConfig::max_memory`], given back when dropped.
struct Grant<'a> {
    sh: &'a Shared,
    bytes: u64,
}

impl<'a> Grant<'a> {
    /// Reserves a session and the buffers of `layout`, or says which cap refuses it.
    fn take(layout: &Layout, sh: &'a Shared) -> Result<Self> {
        let bytes = session_memory(layout);
        let mut b = sh
            .budget
            .lock()
            .map_err(|_| Error::invalid("the worker's session budget is poisoned"))?;
        if b.0 >= sh.max_sessions {
            return Err(Error::invalid(format!(
                "this worker serves at most {} sessions at once (its --max-sessions) and all \
                     are in use: try again later or use another worker",
                sh.max_sessions
            )));
        }
        if b.1 + bytes > sh.max_memory {
            return Err(Error::invalid(format!(
                "this session needs {} KiB of buffers and the worker has {} KiB left of its \
                     {} KiB (its --max-memory): use a smaller layout or another worker",
                bytes.div_ceil(1024),
                (sh.max_memory - b.1) / 1024,
                sh.max_memory / 1024
            )));
        }
        b.0 += 1;
        b.1 += bytes;
        Ok(Self { sh, bytes })
    }
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        if let Ok(mut b) = self.sh.budget.lock() {
            b.0 -= 1;
            b.1 -= self.bytes;
        }
    }
}

/// Finds a plugin for a master: only with a key, only in the allow-list.
fn find_plugin(spec: &str, sh: &Shared) -> Result<firmtime_ladspa::Plugin> {
    if sh.key.is_none() {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            "this worker runs without a key and serves plugins only to authenticated masters: \
             start it with --key FILE and give the master the same key",
        ));
    }
    sh.plugins.find(spec)
}

/// Refuses a plaintext session on a worker that requires encryption.
fn encryption_agreed(conn: &Conn, sh: &Shared) -> Result<()> {
    if sh.require_encrypt && !conn.sealed() {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            "this worker serves only encrypted sessions (--encrypt): set `encrypt = true` \
             (or --encrypt) on the master",
        ));
    }
    Ok(())
}

/// A session's stream: where its results go, its work handle, and (for a
/// plugin) its watchdog entry and cut-off flag.
type SetUp = (SocketAddr, WorkHandle, Option<(u64, Arc<OnceLock<String>>)>);

fn setup(
    s: &Setup,
    peer: SocketAddr,
    data_key: Option<Key>,
    commands: &Sender<Command>,
    sh: &Shared,
) -> Result<SetUp> {
    s.validate()?;
    let builtin = Processor::new(&s.layout, s.transform, s.work, s.period_ns)?;
    let handle = builtin.work_handle();
    let (processor, runner) = match &s.plugin {
        None => (StreamWork::Builtin(builtin), None),
        Some(ps) => {
            let plugin = find_plugin(&ps.plugin, sh)?;
            let host = PluginHost::new(&plugin, ps, &s.layout)?;
            let refusals = host.refusals();
            let socket = sh
                .data_socket
                .try_clone()
                .map_err(|e| Error::io("duplicating the data socket", e))?;
            let (runner, feed) = Runner::start(
                host,
                crate::block::BlockSet::from_layout(&s.layout)?,
                s.stream_id,
                socket,
                sh.chunk,
                data_key.clone().or_else(|| sh.key.clone()),
                crate::runner::budget_ns(ps.max_frames, ps.sample_rate),
                // One below the data thread: a plugin run, however long, never
                // holds the thread that serves every session (on a shared CPU,
                // an overrunning run at the same FIFO priority made every other
                // worker's periods late until the watchdog's cut).
                sh.data_policy.map(|p| match p {
                    Policy::Fifo { priority } if priority > 1 => Policy::Fifo {
                        priority: priority - 1,
                    },
                    Policy::Rr { priority } if priority > 1 => Policy::Rr {
                        priority: priority - 1,
                    },
                    p => p,
                }),
            )?;
            (StreamWork::Plugin(feed), Some((runner, refusals)))
        }
    };
    let data_peer = SocketAddr::new(peer.ip(), s.data_port);
    let (tx, rx) = channel();
    commands
        .send(Command::Add {
            spec: StreamSpec {
                stream_id: s.stream_id,
                layout: s.layout.clone(),
                peer: Some(data_peer),
            },
            data_key: data_key.map(Box::new),
            late_after_ns: (u64::from(s.window) + 1).saturating_mul(s.period_ns),
            processor,
            reply: tx,
        })
        .map_err(|_| Error::invalid("the worker's data thread has stopped"))?;
    rx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| Error::invalid("the worker's data thread did not answer within 5 s"))??;
    let watch = runner.map(|(runner, refusals)| {
        let id = sh.next_watch.fetch_add(1, Ordering::Relaxed);
        let cut = Arc::new(OnceLock::new());
        if let Ok(mut list) = sh.watched.lock() {
            list.push(Watched {
                id,
                peer,
                stream_id: s.stream_id,
                runner,
                refusals,
                cut: cut.clone(),
                counted_refusals: 0,
                counted_dropped: 0,
                reported_at: None,
            });
        }
        (id, cut)
    });
    Ok((data_peer, handle, watch))
}

#[cfg(test)]
mod tests {

    #[test]
    fn refusal_lines_are_capped_a_second_and_the_rest_counted_in_the_next() {
        let mut l = RefusalLog::default();
        let t0 = Instant::now();
        for i in 0..REFUSALS_LOGGED_PER_SECOND {
            assert_eq!(l.admit(t0, format!("r{i}")), Some(format!("r{i}")));
        }
        assert_eq!(l.admit(t0, "over".into()), None);
        assert_eq!(
            l.admit(t0 + Duration::from_millis(999), "over".into()),
            None
        );
        let next = l.admit(t0 + Duration::from_secs(1), "next".into()).unwrap();
        assert_eq!(
            next,
            format!(
                "next (and 2 refusals before it not logged: over {REFUSALS_LOGGED_PER_SECOND} a \
                 second)"
            )
        );
        assert_eq!(
            l.admit(t0 + Duration::from_secs(1), "plain".into()),
            Some("plain".into())
        );
    }
    use super::*;

    #[test]
    fn a_sockets_own_drops_are_read_from_its_proc_net_udp_line() {
        let ip4 = u32::from_ne_bytes([127, 0, 0, 1]);
        let text = format!(
            "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             \x20 12: 00000000:1E14 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 111 2 0000000000000000 5\n\
             \x20 13: {ip4:08X}:1E14 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 222 2 0000000000000000 42\n"
        );
        assert_eq!(
            udp_drops_in(&text, "127.0.0.1:7700".parse().unwrap()),
            Some(42)
        );
        assert_eq!(
            udp_drops_in(&text, "0.0.0.0:7700".parse().unwrap()),
            Some(5)
        );
        assert_eq!(udp_drops_in(&text, "127.0.0.1:7701".parse().unwrap()), None);
    }

    #[test]
    fn an_unread_socket_counts_its_overflow_and_only_its_own() {
        let full = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = full.local_addr().unwrap();
        assert_eq!(udp_socket_drops(to), Some(0));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // About 4 MB into a receive buffer of a few hundred KiB, never read.
        for _ in 0..4000 {
            tx.send_to(&[0u8; 1000], to).unwrap();
        }
        let drops = udp_socket_drops(to).unwrap();
        assert!(drops > 0, "no drops counted on the full socket");
        assert_eq!(udp_socket_drops(other.local_addr().unwrap()), Some(0));
    }
}
