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
//! A callback added with [`Worker::add_stream_with`] says when its result
//! goes out ([`Answer`]): at once, at a later time (a sleep hold: the
//! worker keeps serving other streams meanwhile and sends the result when
//! the hold is over, so no stream's hold ever puts the worker to sleep), or
//! not at all because another thread answers (a plugin run watched by a
//! watchdog). Such a stream may also carry its own data key
//! ([`StreamOptions::data_key`]: the session's, see [`Key::session`]).
//!
//! # RT contract
//! [`Worker::bind`] and [`Worker::add_stream`] allocate. After that
//! [`Worker::poll_once`] allocates nothing itself (the callback is the
//! application's), takes no lock and blocks only in `poll` on its socket, so
//! the worker may run on an RT thread if asked.

use crate::block::{BlockSet, Flow, Layout};
use crate::error::{Error, Result};
use crate::published::PeriodTimes;
use crate::reassembly::{Accepted, Reassembler};
use crate::wire::{
    decode_in_place, max_chunk, DropCounts, DropReason, Encoder, Key, DEFAULT_MTU, HEADER_LEN,
    IPV4_UDP_OVERHEAD, IPV6_UDP_OVERHEAD, MAX_DATAGRAM,
};
use firmtime_rt::clock::monotonic_ns;
use std::fmt;
use std::io::ErrorKind as IoKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// Complete periods given up because the stream was still busy with
    /// earlier ones (a held result with a full queue behind it).
    pub busy: u64,
    /// Packets dropped after they were found to belong to this stream, by reason.
    pub drops: DropCounts,
    /// Periods answered more than [`StreamOptions::late_after_ns`] after
    /// their last fragment arrived (0 without it).
    pub late: u64,
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
    /// A period was complete and its result goes out later: held
    /// ([`Answer::At`]), queued behind a held one, or answered by another
    /// thread ([`Answer::Elsewhere`]).
    Held {
        /// Stream id.
        stream_id: u32,
        /// Period.
        seq: u64,
    },
}

/// When a stream's result goes out (the return of an [`Worker::add_stream_with`] callback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Send the result blocks now.
    Now,
    /// Send the result blocks (as they are now) when CLOCK_MONOTONIC reaches
    /// this many ns. The worker serves other streams meanwhile; this
    /// stream's later periods wait, up to the slots it has.
    At(u64),
    /// Send nothing: the callback handed the period to someone who answers
    /// it (or drops it) on their own.
    Elsewhere,
}

/// Options of a stream added with [`Worker::add_stream_with`].
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// The key of this stream's packets, both ways (a session's
    /// [`Key::session`]); `None` = the worker's key.
    pub data_key: Option<Key>,
    /// Keep no sequence state between periods: every period is served,
    /// whatever its number (discovery probes come from many masters).
    pub stateless: bool,
    /// Time this stream's periods: a result sent more than this many ns
    /// after its period's last fragment arrived counts as late
    /// ([`StreamStats::late`]), and each sent result's time goes into the
    /// worker's [`PeriodTimes`] (if it has them). `None`: neither (results
    /// answered elsewhere, [`Answer::Elsewhere`], are never timed here).
    pub late_after_ns: Option<u64>,
}

/// A result waiting for its hold to end.
#[derive(Debug, Clone, Copy)]
struct Pending {
    seq: u64,
    at: u64,
    to: SocketAddr,
    len: usize,
    /// When the period's last fragment arrived (CLOCK_MONOTONIC ns).
    t_in: u64,
}

/// A stream's callback: the blocks (inputs decoded, outputs to fill) and the period's sequence number.
pub type Callback = Box<dyn FnMut(&mut BlockSet, u64) + Send>;

/// A stream's callback with its answer: blocks, sequence number, the
/// address the result goes to.
pub type AnswerCallback = Box<dyn FnMut(&mut BlockSet, u64, SocketAddr) -> Answer + Send>;

struct Stream {
    spec: StreamSpec,
    blocks: BlockSet,
    reasm: Reassembler,
    encoder: Encoder,
    key: Option<Key>,
    stateless: bool,
    callback: AnswerCallback,
    out_payload: Vec<u8>,
    highest: Option<u64>,
    pending: Option<Pending>,
    queue: [Option<(u64, SocketAddr, u64)>; WORKER_SLOTS],
    stats: StreamStats,
    late_after_ns: Option<u64>,
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
    times: Option<Arc<PeriodTimes>>,
    /// When the datagram being handled arrived (CLOCK_MONOTONIC ns).
    t_in: u64,
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
            times: None,
            t_in: 0,
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
        mut callback: impl FnMut(&mut BlockSet, u64) + Send + 'static,
    ) -> Result<()> {
        self.add_stream_with(spec, StreamOptions::default(), move |b, seq, _| {
            callback(b, seq);
            Answer::Now
        })
    }

    /// As [`Self::add_stream`], with options and a callback that says when
    /// its result goes out ([`Answer`]).
    ///
    /// # Errors
    /// As [`Self::add_stream`]; a data key given to a worker without a key
    /// (or none to one with a key).
    pub fn add_stream_with(
        &mut self,
        spec: StreamSpec,
        options: StreamOptions,
        callback: impl FnMut(&mut BlockSet, u64, SocketAddr) -> Answer + Send + 'static,
    ) -> Result<()> {
        if options.data_key.is_some() && self.key.is_none() {
            return Err(Error::invalid(
                "a stream's data key needs a worker with a key (the MAC flag would differ)",
            ));
        }
        let key = options.data_key.or_else(|| self.key.clone());
        let blocks = BlockSet::from_layout(&spec.layout)?;
        let encoder = Encoder::new(spec.stream_id, Flow::FromWorker, self.chunk, key.clone())?;
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
            key,
            stateless: options.stateless,
            callback: Box::new(callback),
            highest: None,
            pending: None,
            queue: [None; WORKER_SLOTS],
            stats: StreamStats::default(),
            late_after_ns: options.late_after_ns,
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

    /// Stops serving a stream and returns its counters (`None` if it did not exist).
    pub fn take_stream(&mut self, stream_id: u32, peer: Option<SocketAddr>) -> Option<StreamStats> {
        let i = self
            .streams
            .iter()
            .position(|s| s.spec.stream_id == stream_id && s.spec.peer == peer)?;
        let stats = self.streams[i].stats;
        self.remove_stream(stream_id, peer);
        Some(stats)
    }

    /// Records the time of every result sent by a stream with
    /// [`StreamOptions::late_after_ns`] into `times` (preallocated atomics,
    /// read by any thread).
    pub fn set_period_times(&mut self, times: Arc<PeriodTimes>) {
        self.times = Some(times);
    }

    /// The worker's counters.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// A socket sending from the worker's data port (for a thread that
    /// answers periods handed to it, [`Answer::Elsewhere`]).
    ///
    /// # Errors
    /// The OS refused to duplicate the socket.
    pub fn try_clone_socket(&self) -> Result<UdpSocket> {
        self.socket
            .try_clone()
            .map_err(|e| Error::io("duplicating the worker's UDP socket", e))
    }

    /// Largest result fragment, in payload bytes (for an [`Encoder`] of the same size).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Counters of every stream, in the order they were added (the id with each).
    pub fn streams_stats(&self) -> impl Iterator<Item = (u32, &StreamStats)> + '_ {
        self.streams.iter().map(|s| (s.spec.stream_id, &s.stats))
    }

    /// A stream's counters (the first stream with that id).
    pub fn stream_stats(&self, stream_id: u32) -> Option<&StreamStats> {
        self.streams
            .iter()
            .find(|s| s.spec.stream_id == stream_id)
            .map(|s| &s.stats)
    }

    /// Waits up to `timeout` (`None` = forever) for one datagram and handles
    /// it. Held results whose time has come are sent first; the wait ends
    /// early (as [`Polled::Idle`]) when the next one is due.
    ///
    /// # Errors
    /// A socket error other than "nothing there", an interruption or an ICMP
    /// error from an earlier reply (those are counted, not returned).
    pub fn poll_once(&mut self, timeout: Option<Duration>) -> Result<Polled> {
        self.flush_due();
        let (len, from) = loop {
            match self.socket.recv_from(&mut self.recv_buf) {
                Ok(r) => break r,
                Err(e) if e.kind() == IoKind::WouldBlock => {
                    let wait = match (timeout, self.next_due()) {
                        (t, None) => t,
                        (None, Some(d)) => Some(d),
                        (Some(t), Some(d)) => Some(t.min(d)),
                    };
                    if !self.wait(wait) {
                        self.flush_due();
                        return Ok(Polled::Idle);
                    }
                    self.flush_due();
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
        self.t_in = monotonic_ns();
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

    /// Time until the earliest held result is due (zero if one is late).
    fn next_due(&self) -> Option<Duration> {
        let at = self
            .streams
            .iter()
            .filter_map(|s| s.pending.map(|p| p.at))
            .min()?;
        Some(Duration::from_nanos(at.saturating_sub(monotonic_ns())))
    }

    /// Sends every held result whose time has come, then serves the
    /// periods queued behind it. **RT-safe** (the callbacks are the application's).
    fn flush_due(&mut self) {
        let now = monotonic_ns();
        let out = Out {
            socket: &self.socket,
            times: self.times.as_deref(),
        };
        for stream in &mut self.streams {
            loop {
                match stream.pending {
                    Some(p) if p.at <= now => {
                        stream.pending = None;
                        send_result(&out, &mut self.send_buf, stream, p.seq, p.len, p.to, p.t_in);
                    }
                    Some(_) => break,
                    None => {}
                }
                // The earliest queued period; its payload may have been recycled meanwhile.
                let Some((seq, to, t_in)) = stream
                    .queue
                    .iter_mut()
                    .filter(|q| q.is_some())
                    .min_by_key(|q| q.map_or(u64::MAX, |(seq, _, _)| seq))
                    .and_then(Option::take)
                else {
                    break;
                };
                if stream.reasm.complete(seq).is_some() {
                    serve(&out, &mut self.send_buf, stream, seq, to, t_in);
                } else {
                    stream.stats.busy += 1;
                }
            }
        }
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
        // A stream's packets carry its own data key: find it by the (not yet
        // authenticated) stream id and peer; the MAC decides.
        let buf = &mut self.recv_buf[..len];
        let key = if buf.len() >= HEADER_LEN {
            let id = u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]);
            self.streams
                .iter()
                .find(|s| s.spec.stream_id == id && s.spec.peer.map_or(true, |p| p == from))
                .map_or(self.key.as_ref(), |s| s.key.as_ref())
        } else {
            self.key.as_ref()
        };
        let pkt = match decode_in_place(buf, key) {
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
                        if stream.pending.is_some() {
                            // Wait behind the held result; a full queue gives up its oldest.
                            let slot = match stream.queue.iter().position(Option::is_none) {
                                Some(i) => i,
                                None => {
                                    stream.stats.busy += 1;
                                    (0..WORKER_SLOTS)
                                        .min_by_key(|&i| stream.queue[i].map_or(0, |(s, _, _)| s))
                                        .unwrap_or(0)
                                }
                            };
                            stream.queue[slot] = Some((seq, from, self.t_in));
                            return Polled::Held {
                                stream_id: h.stream_id,
                                seq,
                            };
                        }
                        let out = Out {
                            socket: &self.socket,
                            times: self.times.as_deref(),
                        };
                        match serve(&out, &mut self.send_buf, stream, seq, from, self.t_in) {
                            Answer::Now => Polled::Served {
                                stream_id: h.stream_id,
                                seq,
                            },
                            _ => Polled::Held {
                                stream_id: h.stream_id,
                                seq,
                            },
                        }
                    }
                }
            }
        }
    }
}

/// Where results go: the socket, and the histogram of the worker's times.
struct Out<'a> {
    socket: &'a UdpSocket,
    times: Option<&'a PeriodTimes>,
}

/// Runs a stream's callback on complete period `seq` (whose last fragment
/// arrived at `t_in`) and sends or holds its result as the callback
/// answers. **RT-safe** (the callback is the application's).
fn serve(
    out: &Out<'_>,
    send_buf: &mut [u8],
    stream: &mut Stream,
    seq: u64,
    to: SocketAddr,
    t_in: u64,
) -> Answer {
    let payload = stream.reasm.complete(seq).unwrap_or(&[]);
    stream.blocks.decode(Flow::ToWorker, payload);
    let answer = (stream.callback)(&mut stream.blocks, seq, to);
    stream.stats.periods += 1;
    if stream.stateless {
        // Nothing carries over: the next period may have any number.
        stream.reasm.reset();
        stream.highest = None;
    }
    match answer {
        Answer::Elsewhere => {}
        Answer::Now | Answer::At(_) => {
            let len = stream
                .blocks
                .encode(Flow::FromWorker, &mut stream.out_payload);
            match answer {
                Answer::At(at) if at > monotonic_ns() => {
                    stream.pending = Some(Pending {
                        seq,
                        at,
                        to,
                        len,
                        t_in,
                    });
                }
                _ => send_result(out, send_buf, stream, seq, len, to, t_in),
            }
        }
    }
    answer
}

/// Sends the first `len` bytes of the stream's result payload as period
/// `seq`; times it from `t_in` if the stream is timed. **RT-safe.**
fn send_result(
    out: &Out<'_>,
    send_buf: &mut [u8],
    stream: &mut Stream,
    seq: u64,
    len: usize,
    to: SocketAddr,
    t_in: u64,
) {
    for i in 0..stream.encoder.fragments(len) {
        let n = stream
            .encoder
            .encode(send_buf, seq, &stream.out_payload[..len], i);
        // 0: a sealing encoder refused the nonce (see `Encoder::encode`).
        if n == 0 || out.socket.send_to(&send_buf[..n], to).is_err() {
            stream.stats.send_errors += 1;
        }
    }
    if let Some(limit) = stream.late_after_ns {
        let took = monotonic_ns().saturating_sub(t_in);
        if took > limit {
            stream.stats.late += 1;
        }
        if let Some(t) = out.times {
            t.record(took);
        }
    }
}
