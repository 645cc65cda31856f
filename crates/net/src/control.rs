//! The control protocol: session setup, heartbeats and queries over TCP, on
//! the same address and port as the worker's UDP data plane.
//!
//! A connection is line-based. Both sides first send a greeting line in
//! clear text:
//!
//! ```text
//! master → worker:  firmtime-net-ctl 2 <master nonce, 64 hex digits>
//! worker → master:  firmtime-net-ctl 2 <worker nonce, 64 hex digits> key|nokey
//! ```
//!
//! Every following line is `<mac> <json>`: the JSON of a [`Request`]
//! (master → worker) or a [`Reply`] (worker → master), and `mac` the
//! HMAC-SHA256 (32 hex digits, truncated to 16 bytes) of
//! `"firmtime-net-ctl/1" ‖ sender ('m' or 'w') ‖ worker nonce ‖ master nonce ‖
//! message number (u64 LE, per direction, from 0) ‖ json` under the
//! pre-shared key, or `-` when no key is set. Both nonces are fresh per
//! connection, so a recorded message cannot be replayed into another
//! connection, and a numbered one not within it. A worker with a key
//! answers a message with a missing or wrong MAC by an [`Reply::Error`]
//! (itself without a MAC, since the master's key is not to be trusted) and
//! closes the connection.
//!
//! A master's first message is a [`Request::Ping`] (sent by
//! [`Conn::connect`]): a worker with a key treats the connection as a
//! stranger's until that short first line's MAC is verified, and bounds
//! everything before it (see [`gate`](crate::gate)). A worker that drops a
//! stranger before authentication may say why in one clear-text line,
//! `firmtime-net-ctl 2 refused <reason>`, in place of its greeting or of
//! the first reply.
//!
//! One connection is one session (at most one [`Request::Setup`]); the
//! stream lives while the connection does. Its data packets are keyed by
//! both nonces ([`Conn::data_key`]), so a packet of one session is refused
//! by every other. A master that wants the data plane encrypted sends
//! [`Request::Encrypt`] before its setup ([`Conn::request_encryption`]);
//! the worker's `ok` agrees, and both ends then key the session's packets
//! with [`Key::sealed_session`]. A worker of an earlier version cannot
//! decode that request and answers with an error, which the master reports:
//! never a silent fallback to plaintext. A worker range-checks each request before acting on it
//! ([`parse_request`], [`Setup::validate`]). See docs/NET.md.
//!
//! # RT contract
//! None of this runs on the RT path: it allocates, blocks on TCP and uses
//! threads.

use crate::block::Layout;
use crate::error::{Error, ErrorKind, Result};
use crate::processor::{Transform, Work};
use crate::remote::{PluginDescription, PluginSetup};
use crate::wire::{DropCounts, Key, MAC_LEN};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Chain, Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Protocol version spoken in the greeting (2: the data packets of a session
/// are keyed by [`Conn::data_key`], derived from this handshake's nonces).
pub const PROTOCOL: u32 = 2;
/// First word of a greeting.
pub const GREETING: &str = "firmtime-net-ctl";
/// Longest line accepted (a layout of thousands of blocks fits).
pub const MAX_LINE: usize = 1 << 20;
/// Longest greeting line a worker reads from a stranger (a master's is 84 bytes).
pub const MAX_GREETING: usize = 256;
/// Longest first message a worker reads before it is authenticated (a
/// master's first message, a ping, is about 60 bytes).
pub const MAX_FIRST_LINE: usize = 4096;
/// Second word of the clear-text line with which a worker drops a stranger.
pub const REFUSED: &str = "refused";

/// What a master asks of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Start serving a stream for this connection's lifetime.
    Setup(Setup),
    /// Change the stream's work hold.
    SetWork {
        /// The new hold.
        work: Work,
    },
    /// Heartbeat; answered by [`Reply::Pong`] with the same number.
    Ping {
        /// Echoed back.
        n: u64,
    },
    /// The worker's counters; answered by [`Reply::Stats`].
    Stats,
    /// Describe a plugin the worker can run; answered by [`Reply::Plugin`].
    /// Only for authenticated masters, only plugins in the worker's
    /// allow-listed directories.
    Describe {
        /// Label, unique ID or `LIBRARY:LABEL`.
        plugin: String,
    },
    /// End the session (the stream is removed).
    Close,
    /// Encrypt this session's data packets ([`Key::sealed_session`]); sent
    /// before [`Request::Setup`], answered by [`Reply::Ok`]. Only on an
    /// authenticated connection (the keys derive from the pre-shared key).
    Encrypt,
}

/// Everything a worker needs to serve a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// The stream id the master's packets carry.
    pub stream_id: u32,
    /// The UDP port of the master's data socket; with the connection's
    /// source address it is the only peer the stream accepts.
    pub data_port: u16,
    /// The block layout.
    pub layout: Layout,
    /// The master's window (0, 1 or 2), for the worker's information.
    pub window: u8,
    /// The period in ns: the unit of the work fraction.
    pub period_ns: u64,
    /// What the worker computes.
    pub transform: Transform,
    /// How long it holds each block.
    pub work: Work,
    /// Run this LADSPA plugin instead of `transform` (and without `work`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginSetup>,
}

impl Setup {
    /// Range-checks every field that came off the network, as a worker does
    /// before acting on a setup. Each refusal names the field and its range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for stream id 0 (discovery's), data port
    /// 0, a window above 2, a period outside
    /// [`MIN_PERIOD_NS`](crate::processor::MIN_PERIOD_NS)..=[`MAX_PERIOD_NS`](crate::processor::MAX_PERIOD_NS),
    /// a work out of range for the period ([`Work::validate_for`]), an
    /// invalid layout, or a plugin's sample rate or frames out of range.
    pub fn validate(&self) -> Result<()> {
        use crate::processor::{MAX_PERIOD_NS, MIN_PERIOD_NS};
        use crate::remote::{MAX_FRAMES, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};
        if self.stream_id == crate::discovery::DISCOVERY_STREAM {
            return Err(Error::invalid(
                "setup: stream_id 0 is reserved for discovery: pick another (1 to 4294967295)",
            ));
        }
        if self.data_port == 0 {
            return Err(Error::invalid(
                "setup: data_port 0: send the master's UDP port (1 to 65535)",
            ));
        }
        if self.window > 2 {
            return Err(Error::invalid(format!(
                "setup: window {} is not supported: use 0, 1 or 2",
                self.window
            )));
        }
        if !(MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&self.period_ns) {
            return Err(Error::invalid(format!(
                "setup: period_ns {} is out of range: give {MIN_PERIOD_NS} to {MAX_PERIOD_NS} \
                 (1 µs to 1 s)",
                self.period_ns
            )));
        }
        self.work.validate_for(self.period_ns)?;
        self.layout
            .validate()
            .map_err(|e| Error::invalid(format!("setup: layout: {}", e.message())))?;
        if let Some(p) = &self.plugin {
            if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&p.sample_rate) {
                return Err(Error::invalid(format!(
                    "setup: plugin.sample_rate {} is out of range: give {MIN_SAMPLE_RATE} to \
                     {MAX_SAMPLE_RATE} Hz",
                    p.sample_rate
                )));
            }
            if !(1..=MAX_FRAMES).contains(&p.max_frames) {
                return Err(Error::invalid(format!(
                    "setup: plugin.max_frames {} is out of range: give 1 to {MAX_FRAMES}",
                    p.max_frames
                )));
            }
        }
        Ok(())
    }
}

/// What a worker answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The stream is served.
    Ready {
        /// The stream id, as set up.
        stream_id: u32,
    },
    /// A [`Request::SetWork`] is in force.
    Ok,
    /// Answer to [`Request::Ping`].
    Pong {
        /// The ping's number.
        n: u64,
    },
    /// The worker's counters.
    Stats(WorkerReport),
    /// Answer to [`Request::Describe`].
    Plugin(PluginDescription),
    /// The request was refused; the message says why and what to do.
    Error {
        /// Why.
        message: String,
    },
}

impl std::fmt::Display for Reply {
    /// The reply as the docs name it (`ready`, `pong`, `stats`…; an error
    /// with its message), for messages about an unexpected answer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Ready { stream_id } => write!(f, "`ready` (stream {stream_id})"),
            Reply::Ok => f.write_str("`ok`"),
            Reply::Pong { n } => write!(f, "`pong` {n}"),
            Reply::Stats(_) => f.write_str("`stats`"),
            Reply::Plugin(p) => write!(f, "`plugin` ({})", p.label),
            Reply::Error { message } => write!(f, "`error`: {message}"),
        }
    }
}

/// A worker's counters, as [`Request::Stats`] returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Datagrams received on the data port.
    pub datagrams: u64,
    /// Datagrams dropped, by reason name (only reasons with drops), since
    /// the worker started, ended sessions included.
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Sum of `drops`.
    pub dropped: u64,
    /// Periods processed by the sessions served now (`periods_total`:
    /// since the worker started).
    pub periods: u64,
    /// Sessions (streams) being served.
    pub sessions: u64,
    /// UDP datagrams the kernel dropped for want of receive-buffer space in
    /// the worker's whole network namespace (the host's, or its container's):
    /// `RcvbufErrors` of /proc/net/snmp, every UDP socket of every process
    /// together, not this worker's alone (see `socket_drops`); if readable.
    pub kernel_rcvbuf_errors: Option<u64>,
    /// Datagrams the kernel dropped at this worker's own data socket (its
    /// receive buffer was full): the `drops` column of /proc/net/udp (udp6)
    /// on the socket's line; `None` where not found (or from an older worker).
    #[serde(default)]
    pub socket_drops: Option<u64>,
    /// Discovery probes answered.
    #[serde(default)]
    pub probes: u64,
    /// Periods abandoned incomplete (a later period took their slot), since
    /// the worker started.
    #[serde(default)]
    pub incomplete: u64,
    /// Complete periods given up because their session was still busy (a
    /// held result, a plugin still running) or had been cut off, since the
    /// worker started.
    #[serde(default)]
    pub busy: u64,
    /// Control values refused (not finite, or outside the port's bounds).
    #[serde(default)]
    pub bad_controls: u64,
    /// Sessions cut off by the watchdog (a plugin run over its budget).
    #[serde(default)]
    pub cut_off: u64,
    /// `setup` requests refused (a value out of range, a cap reached, an
    /// unknown or refused plugin), over every connection.
    #[serde(default)]
    pub setups_refused: u64,
    /// `recv` errors on the data socket (e.g. ICMP port unreachable).
    #[serde(default)]
    pub recv_errors: u64,
    /// Result datagrams whose `send` failed, since the worker started.
    #[serde(default)]
    pub send_errors: u64,
    /// Sessions set up since the worker started.
    #[serde(default)]
    pub sessions_opened: u64,
    /// Session periods processed since the worker started, ended sessions
    /// included (`periods` counts the sessions served now).
    #[serde(default)]
    pub periods_total: u64,
    /// Session periods answered more than the master's whole budget,
    /// (window + 1) × period, after their last fragment arrived, since the
    /// worker started: late at the master whatever the network did.
    #[serde(default)]
    pub late_total: u64,
    /// Session periods the worker received in part or whole but never
    /// answered (abandoned incomplete, or given up while busy), since the
    /// worker started.
    #[serde(default)]
    pub lost_total: u64,
    /// Results whose worker time was measured (built-in work; see
    /// `firmtime_net::published::PeriodTimes`), and the sum of those times, ns.
    #[serde(default)]
    pub timed_periods: u64,
    /// Sum of the measured worker times, ns.
    #[serde(default)]
    pub worker_time_sum_ns: u64,
}

/// One figure of a [`WorkerReport`] as `firmtime net stats` words it: the
/// report's JSON key (`drops.bad_mac` for a drop reason), the words, the
/// value (`None`: not readable on that worker) and what the words add.
/// Both renderings walk the same rows ([`WorkerReport::rows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRow {
    /// The JSON key; a `drops` entry is `drops.REASON`.
    pub key: String,
    /// The words (unique in a report).
    pub label: String,
    /// The value; `None` where the worker could not read it.
    pub value: Option<u64>,
    /// Shown after the value (what the figure covers); may be empty.
    pub note: &'static str,
    /// A part of the row above it (the drops by reason under their sum).
    pub part: bool,
}

impl WorkerReport {
    /// Every figure of the report, in the order `net stats` prints them:
    /// one row per JSON field, one per drop reason under `dropped`. A unit
    /// test checks that the rows and the JSON hold the same keys and values.
    pub fn rows(&self) -> Vec<ReportRow> {
        let row = |key: &str, label: &str, value: u64| ReportRow {
            key: key.to_string(),
            label: label.to_string(),
            value: Some(value),
            note: "",
            part: false,
        };
        let mut rows = vec![
            row("sessions", "sessions served now", self.sessions),
            row(
                "periods",
                "periods processed by the sessions served now",
                self.periods,
            ),
            row(
                "sessions_opened",
                "sessions opened since the worker started",
                self.sessions_opened,
            ),
            row(
                "periods_total",
                "periods processed since the worker started",
                self.periods_total,
            ),
            row(
                "late_total",
                "periods answered after the master's whole budget",
                self.late_total,
            ),
            row(
                "lost_total",
                "periods received but never answered",
                self.lost_total,
            ),
            row("incomplete", "abandoned incomplete", self.incomplete),
            row("busy", "given up, session busy or cut off", self.busy),
            row(
                "timed_periods",
                "periods timed (built-in work)",
                self.timed_periods,
            ),
            row(
                "worker_time_sum_ns",
                "worker time of the timed periods, ns",
                self.worker_time_sum_ns,
            ),
            row("datagrams", "datagrams received", self.datagrams),
            row("dropped", "dropped by the worker", self.dropped),
        ];
        rows[6].part = true;
        rows[7].part = true;
        rows.extend(self.drops.iter().map(|(reason, &n)| ReportRow {
            part: true,
            ..row(&format!("drops.{reason}"), reason, n)
        }));
        rows.extend([
            row("probes", "discovery probes answered", self.probes),
            row(
                "setups_refused",
                "setups refused (out of range, over a cap)",
                self.setups_refused,
            ),
            row("bad_controls", "control values refused", self.bad_controls),
            row("cut_off", "sessions cut off by the watchdog", self.cut_off),
            row(
                "recv_errors",
                "receive errors on the data socket",
                self.recv_errors,
            ),
            row(
                "send_errors",
                "results that could not be sent",
                self.send_errors,
            ),
            ReportRow {
                value: self.socket_drops,
                note: "(its receive buffer was full)",
                ..row(
                    "socket_drops",
                    "dropped by the kernel at this worker's socket",
                    0,
                )
            },
            ReportRow {
                value: self.kernel_rcvbuf_errors,
                note: "(RcvbufErrors: every UDP socket of the host or container, not this \
                       worker's alone)",
                ..row(
                    "kernel_rcvbuf_errors",
                    "dropped by the kernel in its network namespace",
                    0,
                )
            },
        ]);
        rows
    }

    /// Fills `drops` and `dropped` from counters.
    pub fn set_drops(&mut self, d: &DropCounts) {
        self.drops = d
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.name().to_string(), n))
            .collect();
        self.dropped = d.total();
    }
}

/// Which end of a connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that connects and sends [`Request`]s.
    Master,
    /// The side that listens and sends [`Reply`]s.
    Worker,
}

impl Role {
    fn byte(self) -> u8 {
        match self {
            Role::Master => b'm',
            Role::Worker => b'w',
        }
    }
}

/// One authenticated control connection.
#[derive(Debug)]
pub struct Conn {
    /// Bytes a worker's gate read ahead of the first message, then the socket.
    reader: BufReader<Chain<Cursor<Vec<u8>>, TcpStream>>,
    writer: TcpStream,
    key: Option<Key>,
    role: Role,
    worker_nonce: [u8; 32],
    master_nonce: [u8; 32],
    sent: u64,
    received: u64,
    peer: SocketAddr,
    peer_has_key: bool,
    sealed: bool,
}

/// 32 random bytes from the kernel.
///
/// # Errors
/// `getrandom` failed.
pub fn nonce() -> Result<[u8; 32]> {
    let mut n = [0u8; 32];
    let mut got = 0;
    while got < n.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `n`.
        let r = unsafe { libc::getrandom(n[got..].as_mut_ptr().cast(), n.len() - got, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("reading random bytes (getrandom)", e));
        }
        got += r as usize;
    }
    Ok(n)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    // Hex digits only: from_str_radix alone would take "+a" as 0x0a.
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// An authenticated message that does not decode: [`ErrorKind::InvalidInput`]
/// naming the peer and what serde found (capped: a line is up to 64 KiB).
fn undecodable(peer: SocketAddr, e: &serde_json::Error) -> Error {
    let mut what = e.to_string();
    if what.len() > 200 {
        let mut end = 200;
        while !what.is_char_boundary(end) {
            end -= 1;
        }
        what.truncate(end);
        what.push('…');
    }
    Error::invalid(format!(
        "{peer} sent an authenticated control message that cannot be decoded ({what}): is it \
         a firmtime of the same version (control protocol {PROTOCOL})?"
    ))
}

fn protocol_error(peer: SocketAddr, what: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{peer} does not speak the firmtime control protocol {PROTOCOL} ({what}); \
             is it a `firmtime net worker` of the same version?"
        ),
    )
}

impl Conn {
    /// Connects to a worker's control port and exchanges greetings.
    ///
    /// # Errors
    /// The connection failed or timed out (the message names the address
    /// and suggests checking that the worker runs); the peer is not a
    /// firmtime worker; the worker runs without a key while `key` is set.
    pub fn connect(addr: SocketAddr, key: Option<Key>, timeout: Duration) -> Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| {
            Error::io(
                &format!(
                    "connecting to the worker's control port {addr} (is `firmtime net worker \
                     --listen {addr}` running and the TCP port open?)"
                ),
                e,
            )
        })?;
        let _ = stream.set_nodelay(true);
        let mut conn = Self::wrap(stream, key, Role::Master, addr)?;
        conn.set_timeout(Some(timeout))?;
        conn.master_nonce = nonce()?;
        let greet = format!("{GREETING} {PROTOCOL} {}\n", hex(&conn.master_nonce));
        conn.write_raw(greet.as_bytes())?;
        let line = conn.read_line()?;
        if let Some(why) = refusal(&line) {
            return Err(refused(addr, why));
        }
        let Some((nonce, has_key)) = parse_worker_greeting(&line) else {
            return Err(protocol_error(addr, "bad greeting"));
        };
        conn.peer_has_key = has_key;
        conn.worker_nonce = nonce;
        if conn.key.is_some() && !conn.peer_has_key {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "the worker at {addr} runs without a key but this master has one: start the \
                     worker with --key FILE (the same key) or drop the key here"
                ),
            ));
        }
        // A short first message, so that the worker authenticates this
        // connection before it gives it more than a stranger's bounds.
        conn.send(&Request::Ping { n: 0 })?;
        let line = conn.read_line()?;
        if let Some(why) = refusal(&line) {
            return Err(refused(addr, why));
        }
        match conn.decode::<Reply>(&line)? {
            Reply::Pong { n: 0 } => Ok(conn),
            Reply::Error { message } => Err(refused(addr, &message)),
            other => Err(protocol_error(
                addr,
                &format!("unexpected answer to the first ping: {other}"),
            )),
        }
    }

    /// Wraps a master's connection whose greetings a worker's gate has
    /// exchanged: `read_ahead` holds what the master sent after its
    /// greeting (its first message, perhaps more).
    ///
    /// # Errors
    /// The socket cannot be duplicated.
    pub fn from_greeted(
        stream: TcpStream,
        key: Option<Key>,
        peer: SocketAddr,
        nonces: Nonces,
        read_ahead: Vec<u8>,
    ) -> Result<Self> {
        let _ = stream.set_nodelay(true);
        let mut conn = Self::wrap_with(stream, key, Role::Worker, peer, read_ahead)?;
        conn.worker_nonce = nonces.worker;
        conn.master_nonce = nonces.master;
        Ok(conn)
    }

    /// Accepts a master's connection (worker side) and exchanges greetings.
    ///
    /// # Errors
    /// The peer sent no valid greeting within `timeout`, or the socket failed.
    pub fn accept(stream: TcpStream, key: Option<Key>, timeout: Duration) -> Result<Self> {
        let peer = stream
            .peer_addr()
            .map_err(|e| Error::io("reading the master's address", e))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Self::wrap(stream, key, Role::Worker, peer)?;
        conn.set_timeout(Some(timeout))?;
        let line = conn.read_line()?;
        let Some(master) = parse_master_greeting(&line) else {
            return Err(protocol_error(peer, "bad greeting"));
        };
        conn.master_nonce = master;
        conn.worker_nonce = nonce_or_zero();
        let greet = worker_greeting(&conn.worker_nonce, conn.key.is_some());
        conn.write_raw(greet.as_bytes())?;
        Ok(conn)
    }

    fn wrap(stream: TcpStream, key: Option<Key>, role: Role, peer: SocketAddr) -> Result<Self> {
        Self::wrap_with(stream, key, role, peer, Vec::new())
    }

    fn wrap_with(
        stream: TcpStream,
        key: Option<Key>,
        role: Role,
        peer: SocketAddr,
        read_ahead: Vec<u8>,
    ) -> Result<Self> {
        let writer = stream
            .try_clone()
            .map_err(|e| Error::io("duplicating the control socket", e))?;
        Ok(Self {
            reader: BufReader::new(Cursor::new(read_ahead).chain(stream)),
            writer,
            key,
            role,
            worker_nonce: [0; 32],
            master_nonce: [0; 32],
            sent: 0,
            received: 0,
            peer,
            peer_has_key: false,
            sealed: false,
        })
    }

    /// Another handle on the socket (to shut the connection down from another thread).
    ///
    /// # Errors
    /// The socket cannot be duplicated.
    pub fn try_clone_stream(&self) -> Result<TcpStream> {
        self.writer
            .try_clone()
            .map_err(|e| Error::io("duplicating the control socket", e))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The key of this session's data packets: the pre-shared key bound to
    /// both nonces of this connection ([`Key::session`]), or, once
    /// encryption is agreed ([`Self::set_sealed`]), the session's sealed
    /// key ([`Key::sealed_session`]); `None` without a key.
    pub fn data_key(&self) -> Option<Key> {
        self.key.as_ref().map(|k| {
            if self.sealed {
                k.sealed_session(&self.worker_nonce, &self.master_nonce)
            } else {
                k.session(&self.worker_nonce, &self.master_nonce)
            }
        })
    }

    /// Whether this session's data packets are encrypted ([`Self::set_sealed`]).
    pub fn sealed(&self) -> bool {
        self.sealed
    }

    /// Marks encryption as agreed (the worker, on [`Request::Encrypt`]):
    /// [`Self::data_key`] is then the sealed key.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] on a connection without a key: the
    /// encryption keys derive from it.
    pub fn set_sealed(&mut self) -> Result<()> {
        if self.key.is_none() {
            return Err(Error::invalid(
                "encryption needs a key: start the worker and the master with the same --key FILE",
            ));
        }
        self.sealed = true;
        Ok(())
    }

    /// Asks the worker to encrypt this session's data packets (master side,
    /// before [`Request::Setup`]) and, once it agrees, keys them so
    /// ([`Self::data_key`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] without a key on this side;
    /// [`ErrorKind::PermissionDenied`] when the worker refuses or does not
    /// know the request (a firmtime of an earlier version): the message
    /// names the worker and says what to do. Never falls back to plaintext.
    pub fn request_encryption(&mut self) -> Result<()> {
        if self.key.is_none() {
            return Err(Error::invalid(
                "encryption (encrypt = true / --encrypt) needs a key: give the master and the \
                 worker the same --key FILE",
            ));
        }
        self.send(&Request::Encrypt)?;
        let peer = self.peer;
        match self.recv::<Reply>()? {
            Reply::Ok => {
                self.sealed = true;
                Ok(())
            }
            Reply::Error { message } => Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "the worker at {peer} refused to encrypt the session ({message}); is it a \
                     firmtime that supports `--encrypt` (control protocol {PROTOCOL} with \
                     encryption)?"
                ),
            )),
            other => Err(Error::invalid(format!(
                "the worker at {peer} answered the encryption request with {other}"
            ))),
        }
    }

    /// Whether messages are authenticated (a key is set on this side).
    pub fn authenticated(&self) -> bool {
        self.key.is_some()
    }

    /// Sets the read timeout (`None` = wait forever).
    ///
    /// # Errors
    /// The OS refused the socket option.
    pub fn set_timeout(&mut self, t: Option<Duration>) -> Result<()> {
        self.writer
            .set_read_timeout(t)
            .and_then(|_| self.writer.set_write_timeout(t))
            .map_err(|e| Error::io("setting the control socket's timeout", e))
    }

    fn mac_input(&self, from: Role, n: u64, json: &[u8]) -> Vec<u8> {
        mac_input(from, &self.worker_nonce, &self.master_nonce, n, json)
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.write_all(bytes).map_err(|e| {
            Error::io(
                &format!("writing to the control connection {}", self.peer),
                e,
            )
        })
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        let n = Read::by_ref(&mut self.reader)
            .take(MAX_LINE as u64)
            .read_line(&mut line)
            .map_err(|e| {
                Error::io(
                    &format!("reading from the control connection {}", self.peer),
                    e,
                )
            })?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{} closed the control connection", self.peer),
            ));
        }
        if !line.ends_with('\n') {
            return Err(protocol_error(self.peer, "line too long or cut"));
        }
        line.pop();
        Ok(line)
    }

    /// Sends a message, with a MAC if a key is set.
    ///
    /// # Errors
    /// The connection failed.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let json = serde_json::to_vec(msg).map_err(|e| Error::invalid(format!("encoding: {e}")))?;
        self.send_json(&json, true)
    }

    /// Sends a message without a MAC (a worker's refusal of a master whose key failed).
    ///
    /// # Errors
    /// The connection failed.
    pub fn send_unauthenticated<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let json = serde_json::to_vec(msg).map_err(|e| Error::invalid(format!("encoding: {e}")))?;
        self.send_json(&json, false)
    }

    fn send_json(&mut self, json: &[u8], mac: bool) -> Result<()> {
        let tag = match (&self.key, mac) {
            (Some(k), true) => hex(&k.tag(&self.mac_input(self.role, self.sent, json))),
            _ => "-".to_string(),
        };
        self.sent += 1;
        let mut line = Vec::with_capacity(tag.len() + json.len() + 2);
        line.extend_from_slice(tag.as_bytes());
        line.push(b' ');
        line.extend_from_slice(json);
        line.push(b'\n');
        self.write_raw(&line)
    }

    /// Receives a message and checks its MAC.
    ///
    /// # Errors
    /// The connection failed or timed out; the message is not valid JSON of
    /// `T`; its MAC is missing or wrong ([`ErrorKind::PermissionDenied`],
    /// saying the keys differ). A worker's unauthenticated
    /// [`Reply::Error`] is returned as `Ok` so that the master can report it.
    pub fn recv<T: for<'de> Deserialize<'de>>(&mut self) -> Result<T> {
        let line = self.read_line()?;
        self.decode(&line)
    }

    fn decode<T: for<'de> Deserialize<'de>>(&mut self, line: &str) -> Result<T> {
        let Some((tag, json)) = split_message(line) else {
            return Err(protocol_error(self.peer, "a line without a MAC field"));
        };
        let from = match self.role {
            Role::Master => Role::Worker,
            Role::Worker => Role::Master,
        };
        let n = self.received;
        self.received += 1;
        let ok = message_mac_ok(
            self.key.as_ref(),
            tag,
            &self.mac_input(from, n, json.as_bytes()),
        );
        let decoded = serde_json::from_str::<T>(json);
        if ok {
            // Authenticated, so the peer is one of ours (another version?):
            // it is told, not dropped as a stranger.
            return decoded.map_err(|e| undecodable(self.peer, &e));
        }
        let msg: T =
            decoded.map_err(|e| protocol_error(self.peer, &format!("undecodable message: {e}")))?;
        // A refusal from the worker is shown whatever its MAC: it only ends the session.
        if self.role == Role::Master && json.contains("\"type\":\"error\"") {
            return Ok(msg);
        }
        if self.role == Role::Worker && tag == "-" {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "this worker requires a key and the master at {} sent none: give the \
                     master the worker's key (--key FILE)",
                    self.peer
                ),
            ));
        }
        Err(auth_error(self.role, self.peer))
    }
}

/// The nonces of a connection's greetings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonces {
    /// The worker's.
    pub worker: [u8; 32],
    /// The master's.
    pub master: [u8; 32],
}

/// The bytes a control message's MAC covers: `"firmtime-net-ctl/1" ‖ sender
/// ‖ worker nonce ‖ master nonce ‖ n (u64 LE) ‖ json`.
pub fn mac_input(
    from: Role,
    worker_nonce: &[u8; 32],
    master_nonce: &[u8; 32],
    n: u64,
    json: &[u8],
) -> Vec<u8> {
    let mut d = Vec::with_capacity(18 + 1 + 64 + 8 + json.len());
    d.extend_from_slice(b"firmtime-net-ctl/1");
    d.push(from.byte());
    d.extend_from_slice(worker_nonce);
    d.extend_from_slice(master_nonce);
    d.extend_from_slice(&n.to_le_bytes());
    d.extend_from_slice(json);
    d
}

/// Parses a master's greeting `firmtime-net-ctl <PROTOCOL> <64 hex>` into
/// its nonce. Pure; never panics.
pub fn parse_master_greeting(line: &str) -> Option<[u8; 32]> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [g, v, n] if *g == GREETING && *v == PROTOCOL.to_string() => nonce_of(n),
        _ => None,
    }
}

/// Parses a worker's greeting `firmtime-net-ctl <PROTOCOL> <64 hex> key|nokey`
/// into its nonce and whether it has a key. Pure; never panics.
pub fn parse_worker_greeting(line: &str) -> Option<([u8; 32], bool)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [g, v, n, k] if *g == GREETING && *v == PROTOCOL.to_string() => {
            Some((nonce_of(n)?, *k == "key"))
        }
        _ => None,
    }
}

/// A worker's greeting line, newline included.
pub fn worker_greeting(worker_nonce: &[u8; 32], keyed: bool) -> String {
    format!(
        "{GREETING} {PROTOCOL} {} {}\n",
        hex(worker_nonce),
        if keyed { "key" } else { "nokey" }
    )
}

/// The clear-text line with which a worker drops a stranger, newline included.
pub fn refusal_line(why: &str) -> String {
    format!("{GREETING} {PROTOCOL} {REFUSED} {why}\n")
}

/// The reason of a worker's refusal line, or `None` if `line` is not one.
pub fn refusal(line: &str) -> Option<&str> {
    line.strip_prefix(GREETING)?
        .strip_prefix(' ')?
        .strip_prefix(PROTOCOL.to_string().as_str())?
        .strip_prefix(' ')?
        .strip_prefix(REFUSED)?
        .strip_prefix(' ')
}

/// A fresh worker nonce.
pub fn worker_nonce() -> [u8; 32] {
    nonce_or_zero()
}

fn nonce_of(text: &str) -> Option<[u8; 32]> {
    let b = unhex(text).filter(|b| b.len() == 32)?;
    let mut n = [0u8; 32];
    n.copy_from_slice(&b);
    Some(n)
}

/// Splits a message line (without its newline) into the MAC field and the JSON.
pub fn split_message(line: &str) -> Option<(&str, &str)> {
    line.split_once(' ')
}

/// Whether a message's MAC field is right for `input` (see [`mac_input`]);
/// always true without a key. Compared in constant time.
pub fn message_mac_ok(key: Option<&Key>, tag: &str, input: &[u8]) -> bool {
    match key {
        None => true,
        Some(k) => unhex(tag).is_some_and(|t| t.len() == MAC_LEN && k.verify(input, &t)),
    }
}

/// Parses and range-checks a request's JSON, as a worker does before acting
/// on it. Pure; never panics, whatever the bytes.
///
/// # Errors
/// Undecodable JSON, or a [`Setup`] out of range ([`Setup::validate`]).
pub fn parse_request(json: &str) -> Result<Request> {
    let r: Request = serde_json::from_str(json)
        .map_err(|e| Error::invalid(format!("undecodable request: {e}")))?;
    match &r {
        Request::Setup(s) => s.validate()?,
        Request::SetWork { work } => work.validate()?,
        _ => {}
    }
    Ok(r)
}

fn nonce_or_zero() -> [u8; 32] {
    // A failing getrandom would be extraordinary; the time still makes the nonce fresh.
    nonce().unwrap_or_else(|_| {
        let mut n = [0u8; 32];
        n[..8].copy_from_slice(&firmtime_rt::clock::monotonic_ns().to_le_bytes());
        n[8..16].copy_from_slice(&firmtime_rt::clock::gettimeofday_ns().to_le_bytes());
        n
    })
}

/// The error for a message whose MAC failed.
pub fn auth_error(role: Role, peer: SocketAddr) -> Error {
    let msg = match role {
        Role::Worker => format!(
            "authentication failed: the master at {peer} sent a message without a valid MAC; \
             its key differs from this worker's (give both the same --key FILE)"
        ),
        Role::Master => format!(
            "authentication failed: the worker at {peer} answered without a valid MAC; its key \
             differs from this master's (give both the same --key FILE)"
        ),
    };
    Error::new(ErrorKind::PermissionDenied, msg)
}

/// Turns a worker's [`Reply::Error`] into an [`Error`] naming the worker.
pub fn refused(peer: SocketAddr, message: &str) -> Error {
    let kind = if message.starts_with("authentication failed") || message.contains("requires a key")
    {
        ErrorKind::PermissionDenied
    } else {
        ErrorKind::InvalidInput
    };
    Error::new(kind, format!("the worker at {peer} refused: {message}"))
}

/// Asks a worker for its counters (a connection of its own).
///
/// # Errors
/// As [`Conn::connect`]; the worker refused.
pub fn query_stats(addr: SocketAddr, key: Option<Key>, timeout: Duration) -> Result<WorkerReport> {
    let mut c = Conn::connect(addr, key, timeout)?;
    c.send(&Request::Stats)?;
    match c.recv::<Reply>()? {
        Reply::Stats(r) => {
            let _ = c.send(&Request::Close);
            Ok(r)
        }
        Reply::Error { message } => Err(refused(addr, &message)),
        other => Err(protocol_error(addr, &format!("unexpected reply {other}"))),
    }
}

#[cfg(test)]
mod tests {

    /// Every JSON field of a report is one row of `net stats`' words, with
    /// the same value, and every row is a JSON field: one source for both.
    #[test]
    fn the_words_rows_are_exactly_the_json_fields() {
        // Each field a different value, so a row showing another field's fails.
        let r = WorkerReport {
            datagrams: 1,
            drops: [("bad_mac".to_string(), 2), ("stale".to_string(), 3)]
                .into_iter()
                .collect(),
            dropped: 5,
            periods: 6,
            sessions: 7,
            kernel_rcvbuf_errors: Some(8),
            socket_drops: None,
            probes: 9,
            incomplete: 10,
            busy: 11,
            bad_controls: 12,
            cut_off: 13,
            setups_refused: 14,
            recv_errors: 15,
            send_errors: 16,
            sessions_opened: 17,
            periods_total: 18,
            late_total: 19,
            lost_total: 21,
            timed_periods: 22,
            worker_time_sum_ns: 23,
        };
        let mut json = std::collections::BTreeMap::new();
        let v = serde_json::to_value(&r).unwrap();
        for (k, v) in v.as_object().unwrap() {
            match v {
                serde_json::Value::Object(m) => {
                    for (reason, n) in m {
                        json.insert(format!("{k}.{reason}"), n.as_u64());
                    }
                }
                v => {
                    assert!(v.is_u64() || v.is_null(), "{k}: {v}");
                    json.insert(k.clone(), v.as_u64());
                }
            }
        }
        let rows = r.rows();
        let words: std::collections::BTreeMap<String, Option<u64>> =
            rows.iter().map(|w| (w.key.clone(), w.value)).collect();
        assert_eq!(words.len(), rows.len(), "a key shown twice");
        assert_eq!(words, json);
        let labels: std::collections::BTreeSet<&str> =
            rows.iter().map(|w| w.label.as_str()).collect();
        assert_eq!(labels.len(), rows.len(), "a label shown twice");
    }
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_odd_text() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(unhex("0001abff").unwrap(), b);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
        assert!(unhex("+a").is_none(), "a sign is not a hex digit");
    }

    #[test]
    fn requests_have_stable_json() {
        let j = serde_json::to_string(&Request::Ping { n: 3 }).unwrap();
        assert_eq!(j, r#"{"type":"ping","n":3}"#);
        let j = serde_json::to_string(&Reply::Error {
            message: "x".into(),
        })
        .unwrap();
        assert_eq!(j, r#"{"type":"error","message":"x"}"#);
        let back: Request = serde_json::from_str(r#"{"type":"stats"}"#).unwrap();
        assert_eq!(back, Request::Stats);
    }

    fn setup_json() -> String {
        serde_json::to_string(&Request::Setup(Setup {
            stream_id: 7,
            data_port: 9000,
            layout: crate::discovery::layout(),
            window: 1,
            period_ns: 1_000_000,
            transform: crate::processor::Transform::Copy,
            work: Work {
                fraction: 0.5,
                mode: crate::processor::WorkMode::Sleep,
            },
            plugin: None,
        }))
        .unwrap()
    }

    /// Every prefix of a valid greeting and request, random bytes and
    /// random mutations go through the parsers without a panic; only the
    /// whole lines are accepted.
    #[test]
    fn the_control_parser_survives_random_and_truncated_input() {
        let greeting = format!("{GREETING} {PROTOCOL} {}", hex(&[0xab; 32]));
        let worker = format!("{greeting} key");
        let setup = setup_json();
        assert!(parse_master_greeting(&greeting).is_some());
        assert_eq!(parse_worker_greeting(&worker), Some(([0xab; 32], true)));
        assert!(parse_request(&setup).is_ok());
        for cut in 0..greeting.len() {
            assert!(parse_master_greeting(&greeting[..cut]).is_none(), "{cut}");
        }
        for cut in 0..worker.len() {
            let _ = parse_worker_greeting(&worker[..cut]);
        }
        for cut in 0..setup.len() {
            assert!(parse_request(&setup[..cut]).is_err(), "{}", &setup[..cut]);
        }
        let key = Key::new(&[3u8; 32]).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let mut bytes = if i % 2 == 0 {
                setup.clone().into_bytes()
            } else {
                (0..next() % 200).map(|_| next() as u8).collect()
            };
            for _ in 0..1 + next() % 4 {
                if !bytes.is_empty() {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] = next() as u8;
                }
            }
            let line = String::from_utf8_lossy(&bytes);
            let _ = parse_master_greeting(&line);
            let _ = parse_worker_greeting(&line);
            if let Some((tag, json)) = split_message(&line) {
                let input = mac_input(Role::Master, &[1; 32], &[2; 32], i, json.as_bytes());
                assert!(!message_mac_ok(Some(&key), tag, &input));
                assert!(message_mac_ok(None, tag, &input));
            }
            if let Ok(Request::Setup(s)) = parse_request(&line) {
                s.validate().unwrap();
            }
        }
    }

    #[test]
    fn a_setup_is_refused_naming_each_field_out_of_range() {
        let ok: Setup = match parse_request(&setup_json()).unwrap() {
            Request::Setup(s) => s,
            _ => unreachable!(),
        };
        let refused = |f: &dyn Fn(&mut Setup)| {
            let mut s = ok.clone();
            f(&mut s);
            s.validate().unwrap_err().message().to_string()
        };
        assert!(refused(&|s| s.period_ns = u64::MAX).contains("period_ns 18446744073709551615"));
        assert!(refused(&|s| s.period_ns = 999).contains("give 1000 to 1000000000"));
        assert!(refused(&|s| s.work.fraction = f64::NAN).contains("work fraction NaN"));
        assert!(refused(&|s| s.work.fraction = f64::INFINITY).contains("work fraction inf"));
        assert!(refused(&|s| s.work.fraction = 1e30).contains("give 0 to 4"));
        assert!(refused(&|s| {
            s.period_ns = 100_000_000;
            s.work.fraction = 0.6;
            s.work.mode = crate::processor::WorkMode::Spin;
        })
        .contains("spin hold of 60000000 ns"));
        assert!(refused(&|s| s.stream_id = 0).contains("stream_id 0"));
        assert!(refused(&|s| s.data_port = 0).contains("data_port 0"));
        assert!(refused(&|s| s.window = 3).contains("window 3"));
        assert!(refused(&|s| s.layout.blocks[0].len = u32::MAX).contains("setup: layout:"));
        assert!(refused(&|s| {
            s.plugin = Some(PluginSetup {
                plugin: "amp".into(),
                sample_rate: 48_000,
                max_frames: 0,
                ports: Vec::new(),
            })
        })
        .contains("plugin.max_frames 0 is out of range: give 1 to 65536"));
    }

    #[test]
    fn greeting_and_refusal_parsers_accept_only_their_exact_form() {
        let n = [0xabu8; 32];
        let g = format!("{GREETING} {PROTOCOL} {}", hex(&n));
        assert_eq!(parse_master_greeting(&g), Some(n));
        let w = worker_greeting(&n, true);
        assert_eq!(w, format!("{g} key\n"));
        for bad in [
            format!("{GREETING} {} {}", PROTOCOL + 1, hex(&n)),
            format!("{GREETING} {PROTOCOL} {}", hex(&n[..31])),
            format!("{GREETING} {PROTOCOL} {} x", hex(&n)),
            format!("{GREETING} {PROTOCOL} {}zz", &hex(&n)[2..]),
            format!("{GREETING} {PROTOCOL} {}é", &hex(&n)[1..]),
            String::new(),
        ] {
            assert_eq!(parse_master_greeting(&bad), None, "{bad:?}");
        }
        let r = refusal_line("too many");
        assert_eq!(refusal(r.trim_end()), Some("too many"));
        assert_eq!(refusal(&g), None);
        assert_eq!(refusal(&format!("{GREETING} {PROTOCOL} refusedx")), None);
        // Random and mutated lines: never a panic, never a false accept.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..100_000 {
            let mut b = if i % 2 == 0 {
                g.clone().into_bytes()
            } else {
                Vec::new()
            };
            for _ in 0..(next() % 8) {
                let at = (next() as usize) % (b.len() + 1);
                b.insert(at, next() as u8);
            }
            if !b.is_empty() && i % 3 == 0 {
                let at = (next() as usize) % b.len();
                b.remove(at);
            }
            let line = String::from_utf8_lossy(&b);
            if let Some(got) = parse_master_greeting(&line) {
                assert_eq!(line.split_whitespace().count(), 3, "{line:?}");
                assert!(line.to_lowercase().contains(&hex(&got)), "{line:?}");
            }
            let _ = refusal(&line);
        }
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
