//! The worker side: clockless; packets drive it.
//!
//! A [`Worker`] owns one UDP socket and serves any number of streams, each
//! keyed by stream id (and, if given, the master's address), each with its
//! own [`BlockSet`] built from the master's [`Layout`] and its own callback.
//! When a period's input is complete, the worker decodes it into the blocks,
//! calls the callback with the blocks and the sequence number, and sends the
//! blocks travelling back to the address the completing fragment came from,
//! under the same stream id and sequence number.
//!
//! [`Worker::poll_once`] handles one datagram (a step function for tests and
//! for callers with their own loop); [`Worker::run`] loops until a flag is set.
//!
//! # RT contract
//! [`Worker::bind`] and [`Worker::add_stream`] allocate. After that
//! [`Worker::poll_once`] allocates nothing itself (the callback is the
//! application's), takes no lock and blocks only in `poll` on its socket, so
//! the worker may run on an RT thread if asked.

use crate::block::{BlockSet, Flow, Layout};
use crate::error::{Error, Result};
use crate::reassembly::{Accepted, Reassembler};
use crate::wire::{
    decode, max_chunk, DropCounts, DropReason, Encoder, Key, DEFAULT_MTU, IPV4_UDP_OVERHEAD,
    IPV6_UDP_OVERHEAD, MAX_DATAGRAM,
};
use std::fmt;
use std::io::ErrorKind as IoKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Slots per stream: periods reassembled at once (window 2 keeps 3 in flight).
const WORKER_SLOTS: usize = 4;

/// Settings of a [`Worker`].
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Pre-shared key: packets without a valid MAC are dropped, replies carry one.
    pub key: Option<Key>,
    /// Path MTU for replies (default 1500).
    pub mtu: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            key: None,
            mtu: DEFAULT_MTU,
        }
    }
}

/// One stream a worker serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// The stream id the master sends.
    pub stream_id: u32,
    /// The master's block layout.
    pub layout: Layout,
    /// Accept this stream only from this address; `None` = from any address.
    pub peer: Option<SocketAddr>,
}

/// Counters of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Periods processed (callback calls).
    pub periods: u64,
    /// Periods whose first fragment arrived after a fragment of a later period.
    pub reordered: u64,
    /// Periods abandoned incomplete (a later period took their slot).
    pub incomplete: u64,
    /// Reply datagrams whose `send_to` failed.
    pub send_errors: u64,
    /// Packets dropped after they were found to belong to this stream, by reason.
    pub drops: DropCounts,
}

/// Counters of a [`Worker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Packets dropped before a stream was found (malformed, unauthenticated, foreign), by reason.
    pub drops: DropCounts,
    /// `recv` errors other than "nothing there".
    pub recv_errors: u64,
}

/// What one [`Worker::poll_once`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// Nothing arrived before the timeout.
    Idle,
    /// A datagram was dropped for this reason.
    Dropped(DropReason),
    /// A fragment was stored; its period is not complete yet.
    Partial {
        /// Stream id.
        stream_id: u32,
        /// Period.
        seq: u64,
    },
    /// A period was complete: the callback ran and the result was sent.
    Served {
        /// Stream id.
        stream_id: u32,
        /// Period.
        seq: u64,
    },
}

/// A stream's callback: the blocks (inputs decoded, outputs to fill) and the period's sequence number.
pub type Callback = Box<dyn FnMut(&mut BlockSet, u64) + Send>;

struct Stream {
    spec: StreamSpec,
    blocks: BlockSet,
    reasm: Reassembler,
    encoder: Encoder,
    callback: Callback,
    out_payload: Vec<u8>,
    highest: Option<u64>,
    stats: StreamStats,
}

/// The worker side of any number of streams. See the [module docs](self).
pub struct Worker {
    socket: UdpSocket,
    key: Option<Key>,
    chunk: usize,
    streams: Vec<Stream>,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    stats: WorkerStats,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("socket", &self.socket)
            .field("streams", &self.streams.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Binds the data socket at `addr`.
    ///
    /// # Errors
    /// An MTU too small for a fragment, or the socket cannot be bound (the
    /// message names the address; a port below 1024 needs root or
    /// CAP_NET_BIND_SERVICE).
    pub fn bind(addr: SocketAddr, config: WorkerConfig) -> Result<Self> {
        let socket =
            UdpSocket::bind(addr).map_err(|e| Error::io(&format!("binding UDP {addr}"), e))?;
        Self::from_socket(socket, config)
    }

    /// Serves on a socket bound elsewhere (e.g. by the control plane).
    ///
    /// # Errors
    /// An MTU too small for a fragment, or the socket's address cannot be read.
    pub fn from_socket(socket: UdpSocket, config: WorkerConfig) -> Result<Self> {
        let local = socket
            .local_addr()
            .map_err(|e| Error::io("reading the socket's address", e))?;
        let overhead = if local.is_ipv4() {
            IPV4_UDP_OVERHEAD
        } else {
            IPV6_UDP_OVERHEAD
        };
        let chunk = max_chunk(config.mtu, overhead, config.key.is_some())?;
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the UDP socket non-blocking", e))?;
        Ok(Self {
            socket,
            chunk,
            send_buf: vec![0; chunk + crate::wire::HEADER_LEN + crate::wire::MAC_LEN],
            recv_buf: vec![0; MAX_DATAGRAM + 1],
            key: config.key,
            streams: Vec::new(),
            stats: WorkerStats::default(),
        })
    }

    /// The socket's local address.
    ///
    /// # Errors
    /// The OS refused `getsockname`.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.socket
            .local_addr()
            .map_err(|e| Error::io("reading the socket's address", e))
    }

    /// Starts serving a stream with `callback`. A stream added again under
    /// the same id and peer replaces the old one (its state starts afresh).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if the
    /// layout is invalid or the result would need more than 65535 fragments.
    pub fn add_stream(
        &mut self,
        spec: StreamSpec,
        callback: impl FnMut(&mut BlockSet, u64) + Send + 'static,
    ) -> Result<()> {
        let blocks = BlockSet::from_layout(&spec.layout)?;
        let encoder = Encoder::new(
            spec.stream_id,
            Flow::FromWorker,
            self.chunk,
            self.key.clone(),
        )?;
        let out_len = blocks.payload_len(Flow::FromWorker);
        if encoder.fragments(out_len) > usize::from(u16::MAX) {
            return Err(Error::invalid(format!(
                "the result blocks total {out_len} bytes: more than 65535 fragments; raise the MTU"
            )));
        }
        let stream = Stream {
            reasm: Reassembler::new(
                spec.stream_id,
                Flow::ToWorker,
                blocks.payload_len(Flow::ToWorker),
                WORKER_SLOTS,
            ),
            out_payload: vec![0; out_len],
            blocks,
            encoder,
            callback: Box::new(callback),
            highest: None,
            stats: StreamStats::default(),
            spec,
        };
        self.remove_stream(stream.spec.stream_id, stream.spec.peer);
        self.streams.push(stream);
        Ok(())
    }

    /// Stops serving a stream; returns whether it existed.
    pub fn remove_stream(&mut self, stream_id: u32, peer: Option<SocketAddr>) -> bool {
        let before = self.streams.len();
        self.streams
            .retain(|s| !(s.spec.stream_id == stream_id && s.spec.peer == peer));
        self.streams.len() != before
    }

    /// The worker's counters.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// A stream's counters (the first stream with that id).
    pub fn stream_stats(&self, stream_id: u32) -> Option<&StreamStats> {
        self.streams
            .iter()
            .find(|s| s.spec.stream_id == stream_id)
            .map(|s| &s.stats)
    }

    /// Waits up to `timeout` (`None` = forever) for one datagram and handles it.
    ///
    /// # Errors
    /// A socket error other than "nothing there", an interruption or an ICMP
    /// error from an earlier reply (those are counted, not returned).
    pub fn poll_once(&mut self, timeout: Option<Duration>) -> Result<Polled> {
        let (len, from) = loop {
            match self.socket.recv_from(&mut self.recv_buf) {
                Ok(r) => break r,
                Err(e) if e.kind() == IoKind::WouldBlock => {
                    if !self.wait(timeout) {
                        return Ok(Polled::Idle);
                    }
                }
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        IoKind::ConnectionRefused | IoKind::ConnectionReset
                    ) =>
                {
                    self.stats.recv_errors += 1;
                }
                Err(e) => return Err(Error::io("receiving on the worker's UDP socket", e)),
            }
        };
        self.stats.datagrams += 1;
        Ok(self.handle(len, from))
    }

    /// Serves until `stop` is set (checked at least every 100 ms).
    ///
    /// # Errors
    /// As [`Self::poll_once`].
    pub fn run(&mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.poll_once(Some(Duration::from_millis(100)))?;
        }
        Ok(())
    }

    /// Waits for the socket to be readable; false on timeout.
    fn wait(&self, timeout: Option<Duration>) -> bool {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `pfd` is valid for the call, `tsp` is null or points to a
        // live timespec, and a null sigmask keeps the current mask.
        let r = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
        // Interrupted or ready: let the caller try `recv` again.
        r != 0
    }

    fn handle(&mut self, len: usize, from: SocketAddr) -> Polled {
        let pkt = match decode(&self.recv_buf[..len], self.key.as_ref()) {
            Ok(p) => p,
            Err(r) => {
                self.stats.drops.add(r);
                return Polled::Dropped(r);
            }
        };
        let h = pkt.header;
        let Some(stream) = self
            .streams
            .iter_mut()
            .find(|s| s.spec.stream_id == h.stream_id && s.spec.peer.map_or(true, |p| p == from))
        else {
            self.stats.drops.add(DropReason::ForeignStream);
            return Polled::Dropped(DropReason::ForeignStream);
        };
        // Older than every slot can hold: stale. Newer: always accepted.
        let min_seq = stream
            .highest
            .map_or(0, |hi| hi.saturating_sub(WORKER_SLOTS as u64 - 1));
        let before = stream.reasm.slot_of(h.seq);
        match stream.reasm.accept(&pkt, min_seq, u64::MAX) {
            Err(r) => {
                stream.stats.drops.add(r);
                Polled::Dropped(r)
            }
            Ok(acc) => {
                if before.map(|(s, _)| s) != Some(h.seq) {
                    // First fragment of this period.
                    if matches!(before, Some((_, false))) {
                        stream.stats.incomplete += 1;
                    }
                    if stream.highest.is_some_and(|hi| h.seq < hi) {
                        stream.stats.reordered += 1;
                    }
                }
                stream.highest = Some(stream.highest.map_or(h.seq, |hi| hi.max(h.seq)));
                match acc {
                    Accepted::Partial { seq } => Polled::Partial {
                        stream_id: h.stream_id,
                        seq,
                    },
                    Accepted::Complete { seq } => {
                        let payload = stream.reasm.complete(seq).unwrap_or(&[]);
                        stream.blocks.decode(Flow::ToWorker, payload);
                        (stream.callback)(&mut stream.blocks, seq);
                        stream.stats.periods += 1;
                        let n = stream
                            .blocks
                            .encode(Flow::FromWorker, &mut stream.out_payload);
                        for i in 0..stream.encoder.fragments(n) {
                            let len = stream.encoder.encode(
                                &mut self.send_buf,
                                seq,
                                &stream.out_payload[..n],
                                i,
                            );
                            if self.socket.send_to(&self.send_buf[..len], from).is_err() {
                                stream.stats.send_errors += 1;
                            }
                        }
                        Polled::Served {
                            stream_id: h.stream_id,
                            seq,
                        }
                    }
                }
            }
        }
    }
}
