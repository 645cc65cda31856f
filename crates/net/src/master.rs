//! The master side of a stream: sends each period's input blocks to a
//! worker and delivers the worker's results `window` periods later.
//!
//! A [`Master`] owns a UDP socket connected to the worker's data address, a
//! [`BlockSet`] and preallocated send and receive buffers. Each period the
//! application fills its input blocks and calls [`Master::process`], which
//!
//! 1. encodes the blocks travelling to the worker as period `n` and sends
//!    them (fragmented to the MTU);
//! 2. waits — spinning or in `ppoll`, see [`WaitMode`] — until the result of
//!    period `n − window` is complete or the deadline passes;
//! 3. copies the result into the blocks travelling back, or, if it is late,
//!    applies the [`LatePolicy`]. A result that completes after its deadline
//!    is discarded and counted ([`DropReason::AfterDeadline`]); it is never
//!    delivered in a later period.
//!
//! For `window ≥ 1` the first `window` periods have no result yet: they
//! follow the late policy and are counted as priming, not as late.
//!
//! # RT contract
//! [`Master::new`] allocates everything. After that [`Master::process`] is
//! **RT-safe**: no allocation, no lock; its only system calls are `send` and
//! `recv` on a non-blocking socket, the vDSO clock read and, in
//! [`WaitMode::Poll`], `ppoll` bounded by the deadline. It never blocks
//! past the deadline, whatever the network does.

use crate::block::{BlockSet, Flow, Layout};
use crate::error::{Error, Result};
use crate::reassembly::{Accepted, Reassembler};
use crate::wire::{
    decode_in_place, max_chunk, DropCounts, DropReason, Encoder, Key, DEFAULT_MTU,
    IPV4_UDP_OVERHEAD, IPV6_UDP_OVERHEAD, MAX_DATAGRAM,
};
use firmtime_rt::clock::monotonic_ns;
use std::io::ErrorKind as IoKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How [`Master::process`] waits for a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Busy-wait on non-blocking `recv` (Lago's choice): lowest wake-up
    /// latency, one CPU at 100 % while waiting.
    Spin,
    /// Sleep in `ppoll` until a datagram arrives or the deadline passes.
    #[default]
    Poll,
}

/// What the blocks travelling back hold in a period without a result
/// (late, or priming).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatePolicy {
    /// Pass the input through: the k-th output-only block gets a copy of the
    /// k-th input-only block of the same type and length (zeros if there is
    /// none); `Both` blocks keep their input.
    Dry,
    /// Zeros in every block travelling back (including `Both` blocks).
    Zeros,
    /// The last result delivered (zeros before the first one).
    RepeatLast,
}

impl LatePolicy {
    /// The default for a layout: [`LatePolicy::Dry`] where every output-only
    /// block has a matching input block (see [`LatePolicy::Dry`]), else
    /// [`LatePolicy::Zeros`].
    pub fn default_for(layout: &Layout) -> Self {
        if layout.dry_pairs().iter().all(|(_, src)| src.is_some()) {
            LatePolicy::Dry
        } else {
            LatePolicy::Zeros
        }
    }
}

/// When, in this period, [`Master::process`] stops waiting for the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// An absolute CLOCK_MONOTONIC time in nanoseconds
    /// ([`firmtime_rt::clock::monotonic_ns`]).
    At(u64),
    /// Nanoseconds after the call started.
    After(u64),
}

/// Settings of a [`Master`].
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// The worker's data address (UDP).
    pub worker: SocketAddr,
    /// Local address to bind; default: the unspecified address of the
    /// worker's family, any port.
    pub bind: Option<SocketAddr>,
    /// Stream id carried by every packet; the worker serves streams by id.
    pub stream_id: u32,
    /// Periods between sending an input and delivering its result: 0, 1 or 2.
    pub window: u8,
    /// Path MTU in bytes; fragments fill it (default 1500).
    pub mtu: usize,
    /// Pre-shared key: every packet carries an HMAC, and unauthenticated packets are dropped.
    pub key: Option<Key>,
    /// How to wait for results.
    pub wait: WaitMode,
    /// Late policy; `None` = [`LatePolicy::default_for`] the layout.
    pub late_policy: Option<LatePolicy>,
    /// Round-trip samples kept (a ring: the newest overwrite the oldest).
    pub rtt_capacity: usize,
}

impl MasterConfig {
    /// Defaults: window 1, MTU 1500, no key, [`WaitMode::Poll`], default
    /// late policy, 65,536 round-trip samples.
    pub fn new(worker: SocketAddr, stream_id: u32) -> Self {
        Self {
            worker,
            bind: None,
            stream_id,
            window: 1,
            mtu: DEFAULT_MTU,
            key: None,
            wait: WaitMode::Poll,
            late_policy: None,
            rtt_capacity: 1 << 16,
        }
    }
}

/// What happened to the output of one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The result of `result_seq` arrived in time and is in the blocks.
    Delivered,
    /// It did not: the late policy filled the blocks.
    Late,
    /// One of the first `window` periods: no result can exist yet; the late policy filled the blocks.
    Priming,
}

/// The result of one [`Master::process`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodReport {
    /// Sequence number of the input sent this period.
    pub seq: u64,
    /// Sequence number whose result was due (`seq − window`); `None` while priming.
    pub result_seq: Option<u64>,
    /// Delivered, late or priming.
    pub outcome: Outcome,
    /// Round trip of the delivered result: from sending its input to its last fragment's arrival.
    pub rtt_ns: Option<u64>,
}

/// Counters of a [`Master`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MasterStats {
    /// `process` calls.
    pub periods: u64,
    /// Results delivered in time.
    pub delivered: u64,
    /// Results not complete by their deadline (priming periods excluded).
    pub late: u64,
    /// The first `window` periods, which have no result.
    pub priming: u64,
    /// Late periods of which not one fragment arrived, before or after the
    /// deadline, by the time their sequence number was retired (window + 2
    /// periods later).
    pub lost: u64,
    /// Periods whose first fragment arrived after a fragment of a later period.
    pub reordered: u64,
    /// Datagrams whose `send` failed (e.g. the worker's port is closed).
    pub send_errors: u64,
    /// `recv` errors other than "nothing there" (e.g. ICMP port unreachable).
    pub recv_errors: u64,
    /// Packets dropped, by reason.
    pub drops: DropCounts,
    /// Round-trip samples taken (may exceed the ring's capacity).
    pub rtt_samples: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct SeqMeta {
    seq: u64,
    valid: bool,
    sent_ns: u64,
    done_ns: u64,
    late: bool,
    any_fragment: bool,
    seen: bool,
}

/// Packets handled after the deadline before giving up on a result (bounds
/// the time a flood can hold `process` past its deadline).
const DRAIN_AFTER_DEADLINE: u32 = 256;

/// The master side of one remote stream. See the [module docs](self).
#[derive(Debug)]
pub struct Master {
    socket: UdpSocket,
    blocks: BlockSet,
    encoder: Encoder,
    key: Option<Key>,
    reasm: Reassembler,
    window: u64,
    wait: WaitMode,
    policy: LatePolicy,
    dry: Vec<(usize, Option<usize>)>,
    send_payload: Vec<u8>,
    datagram: Vec<u8>,
    recv_buf: Vec<u8>,
    last_good: Vec<u8>,
    meta: Vec<SeqMeta>,
    next_seq: u64,
    next_due: u64,
    max_seen: Option<u64>,
    stats: MasterStats,
    rtt: Vec<u64>,
    rtt_head: usize,
    worker: SocketAddr,
    key_cell: Option<(Arc<KeyCell>, u64)>,
}

/// A data key handed to a running [`Master`] by another thread: the link
/// that set the session up again puts the new session's key here
/// ([`Key::session`]); the master takes it at the start of its next period.
#[derive(Debug, Default)]
pub struct KeyCell {
    gen: AtomicU64,
    key: Mutex<Option<Key>>,
}

impl KeyCell {
    /// Hands `key` to the master(s) following this cell. Not RT-safe (locks).
    pub fn set(&self, key: Option<Key>) {
        if let Ok(mut k) = self.key.lock() {
            *k = key;
        }
        self.gen.fetch_add(1, Ordering::Release);
    }
}

impl Master {
    /// Binds a socket, connects it to `config.worker` and preallocates every
    /// buffer for `blocks`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// window above 2, an MTU too small for a fragment, or a payload needing
    /// more than 65535 fragments; an I/O error if the socket cannot be bound
    /// or connected.
    pub fn new(config: MasterConfig, blocks: BlockSet) -> Result<Self> {
        if config.window > 2 {
            return Err(Error::invalid(format!(
                "window {} is not supported: use 0, 1 or 2 (Lago: each of send, process and \
                 receive must fit in one period)",
                config.window
            )));
        }
        let overhead = if config.worker.is_ipv4() {
            IPV4_UDP_OVERHEAD
        } else {
            IPV6_UDP_OVERHEAD
        };
        let chunk = max_chunk(config.mtu, overhead, config.key.is_some())?;
        let to_len = blocks.payload_len(Flow::ToWorker);
        let from_len = blocks.payload_len(Flow::FromWorker);
        let encoder = Encoder::new(config.stream_id, Flow::ToWorker, chunk, config.key.clone())?;
        if encoder.fragments(to_len) > usize::from(u16::MAX) {
            return Err(Error::invalid(format!(
                "the input blocks total {to_len} bytes: more than 65535 fragments of {chunk} bytes; \
                 raise the MTU or send smaller blocks"
            )));
        }
        let bind = config.bind.unwrap_or_else(|| {
            if config.worker.is_ipv4() {
                SocketAddr::from(([0, 0, 0, 0], 0))
            } else {
                SocketAddr::from(([0u16; 8], 0))
            }
        });
        let socket =
            UdpSocket::bind(bind).map_err(|e| Error::io(&format!("binding UDP {bind}"), e))?;
        socket
            .connect(config.worker)
            .map_err(|e| Error::io(&format!("connecting UDP to {}", config.worker), e))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the UDP socket non-blocking", e))?;
        let slots = usize::from(config.window) + 2;
        let policy = config
            .late_policy
            .unwrap_or_else(|| LatePolicy::default_for(blocks.layout()));
        Ok(Self {
            dry: blocks.layout().dry_pairs(),
            reasm: Reassembler::new(config.stream_id, Flow::FromWorker, from_len, slots),
            send_payload: vec![0; to_len],
            datagram: vec![0; encoder.max_datagram()],
            recv_buf: vec![0; MAX_DATAGRAM + 1],
            last_good: vec![0; from_len],
            meta: vec![SeqMeta::default(); slots],
            rtt: vec![0; config.rtt_capacity],
            rtt_head: 0,
            socket,
            blocks,
            encoder,
            key: config.key,
            window: u64::from(config.window),
            wait: config.wait,
            policy,
            next_seq: 0,
            next_due: 0,
            max_seen: None,
            stats: MasterStats::default(),
            worker: config.worker,
            key_cell: None,
        })
    }

    /// The blocks: fill the inputs before [`Self::process`], read the outputs after.
    pub fn blocks(&self) -> &BlockSet {
        &self.blocks
    }

    /// The blocks, writable. **RT-safe.**
    pub fn blocks_mut(&mut self) -> &mut BlockSet {
        &mut self.blocks
    }

    /// The counters. **RT-safe.**
    pub fn stats(&self) -> &MasterStats {
        &self.stats
    }

    /// The late policy in force.
    pub fn late_policy(&self) -> LatePolicy {
        self.policy
    }

    /// The window (0, 1 or 2).
    pub fn window(&self) -> u8 {
        self.window as u8
    }

    /// The local address of the data socket.
    ///
    /// # Errors
    /// The OS refused `getsockname`.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.socket
            .local_addr()
            .map_err(|e| Error::io("reading the socket's address", e))
    }

    /// The worker's data address.
    pub fn worker(&self) -> SocketAddr {
        self.worker
    }

    /// Points the stream at another worker address (reconnection by the
    /// control plane). Not RT-safe: call it off the RT thread, between periods.
    ///
    /// # Errors
    /// The OS refused `connect`.
    pub fn set_worker(&mut self, worker: SocketAddr) -> Result<()> {
        self.socket
            .connect(worker)
            .map_err(|e| Error::io(&format!("connecting UDP to {worker}"), e))?;
        self.worker = worker;
        Ok(())
    }

    /// The round-trip samples kept, oldest first, in nanoseconds.
    pub fn rtt_samples(&self) -> impl Iterator<Item = u64> + '_ {
        let cap = self.rtt.len();
        let n = (self.stats.rtt_samples as usize).min(cap);
        let start = if n < cap { 0 } else { self.rtt_head };
        (0..n).map(move |i| self.rtt[(start + i) % cap])
    }

    /// Forgets the kept round-trip samples (the counter stays).
    pub fn clear_rtt(&mut self) {
        self.rtt_head = 0;
        self.stats.rtt_samples = 0;
    }

    /// One period: send the inputs as period `n`, deliver the result of
    /// `n − window` into the output blocks or apply the late policy. Waits
    /// at most until `deadline` (plus the handling of at most a few hundred
    /// datagrams already queued). **RT-safe.**
    ///
    /// With the `assert-rt` feature, runs under
    /// [`firmtime_rt::assert_rt::no_alloc`]: an allocation here aborts the
    /// program (when its global allocator checks).
    pub fn process(&mut self, deadline: Deadline) -> PeriodReport {
        firmtime_rt::assert_rt::no_alloc(|| self.process_period(deadline))
    }

    /// Takes the data key from `cell` whenever it changes (checked at the
    /// start of each period, without waiting: a contended cell is read the
    /// period after).
    pub fn follow_key(&mut self, cell: Arc<KeyCell>) {
        self.key_cell = Some((cell, u64::MAX));
        self.take_key();
    }

    /// **RT-safe**: an atomic load, and on a change a `try_lock` and a key copy.
    fn take_key(&mut self) {
        let Some((cell, seen)) = &mut self.key_cell else {
            return;
        };
        let gen = cell.gen.load(Ordering::Acquire);
        if gen == *seen {
            return;
        }
        if let Ok(k) = cell.key.try_lock() {
            self.key.clone_from(&k);
            self.encoder.set_key(k.clone());
            *seen = gen;
        }
    }

    fn process_period(&mut self, deadline: Deadline) -> PeriodReport {
        self.take_key();
        let start = monotonic_ns();
        let deadline = match deadline {
            Deadline::At(t) => t,
            Deadline::After(d) => start.saturating_add(d),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.periods += 1;
        self.retire(seq, start);
        self.send(seq);

        let Some(due) = seq.checked_sub(self.window) else {
            // Priming: nothing can be due; take in what is queued and fill the outputs.
            self.receive(seq, None, deadline);
            self.stats.priming += 1;
            self.apply_policy();
            return PeriodReport {
                seq,
                result_seq: None,
                outcome: Outcome::Priming,
                rtt_ns: None,
            };
        };
        self.receive(seq, Some(due), deadline);
        self.next_due = due + 1;
        let slots = self.meta.len() as u64;
        let m = &mut self.meta[(due % slots) as usize];
        if let Some(payload) = self.reasm.complete(due) {
            self.last_good.copy_from_slice(payload);
            self.blocks.decode(Flow::FromWorker, &self.last_good);
            self.stats.delivered += 1;
            let rtt = m.done_ns.saturating_sub(m.sent_ns);
            if !self.rtt.is_empty() {
                self.rtt[self.rtt_head] = rtt;
                self.rtt_head = (self.rtt_head + 1) % self.rtt.len();
            }
            self.stats.rtt_samples += 1;
            PeriodReport {
                seq,
                result_seq: Some(due),
                outcome: Outcome::Delivered,
                rtt_ns: Some(rtt),
            }
        } else {
            m.late = true;
            m.any_fragment = self.reasm.has_any(due);
            self.stats.late += 1;
            self.apply_policy();
            PeriodReport {
                seq,
                result_seq: Some(due),
                outcome: Outcome::Late,
                rtt_ns: None,
            }
        }
    }

    /// Retires the sequence number whose slot `seq` takes over, counting it lost if nothing of it came.
    fn retire(&mut self, seq: u64, now: u64) {
        let slots = self.meta.len() as u64;
        let m = &mut self.meta[(seq % slots) as usize];
        if m.valid && m.late && !m.any_fragment {
            self.stats.lost += 1;
        }
        *m = SeqMeta {
            seq,
            valid: true,
            sent_ns: now,
            ..SeqMeta::default()
        };
    }

    fn send(&mut self, seq: u64) {
        let n = self.blocks.encode(Flow::ToWorker, &mut self.send_payload);
        for i in 0..self.encoder.fragments(n) {
            let len = self
                .encoder
                .encode(&mut self.datagram, seq, &self.send_payload[..n], i);
            // 0: a sealing encoder refused the nonce (see `Encoder::encode`).
            if len == 0 || self.socket.send(&self.datagram[..len]).is_err() {
                self.stats.send_errors += 1;
            }
        }
    }

    /// Takes in datagrams until `due` is complete or the deadline passes
    /// (with `due == None`, only what is already queued).
    fn receive(&mut self, sent: u64, due: Option<u64>, deadline: u64) {
        let mut after_deadline = 0u32;
        loop {
            if let Some(d) = due {
                if self.reasm.complete(d).is_some() {
                    return;
                }
            }
            match self.socket.recv(&mut self.recv_buf) {
                Ok(len) => {
                    self.handle(len, sent);
                    if monotonic_ns() >= deadline {
                        after_deadline += 1;
                        if after_deadline >= DRAIN_AFTER_DEADLINE {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => {
                    let Some(_) = due else { return };
                    let now = monotonic_ns();
                    if now >= deadline {
                        return;
                    }
                    match self.wait {
                        WaitMode::Spin => std::hint::spin_loop(),
                        WaitMode::Poll => self.poll(deadline - now),
                    }
                }
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(_) => {
                    // ICMP port unreachable and the like: counted, and the period goes on.
                    self.stats.recv_errors += 1;
                    if monotonic_ns() >= deadline {
                        return;
                    }
                }
            }
        }
    }

    fn poll(&self, timeout_ns: u64) {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` and `ts` are valid for the call; a null sigmask means
        // "keep the current mask". The result is ignored: the caller's loop
        // re-reads the socket and the clock either way.
        unsafe {
            libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
        }
    }

    fn handle(&mut self, len: usize, sent: u64) {
        let pkt = match decode_in_place(&mut self.recv_buf[..len], self.key.as_ref()) {
            Ok(p) => p,
            Err(r) => return self.stats.drops.add(r),
        };
        if let Err(r) = self.reasm.check(&pkt) {
            return self.stats.drops.add(r);
        }
        let s = pkt.header.seq;
        let slots = self.meta.len() as u64;
        if s < self.next_due {
            let m = &mut self.meta[(s % slots) as usize];
            let reason = if !(m.valid && m.seq == s) {
                DropReason::Stale
            } else if m.late {
                m.any_fragment = true;
                DropReason::AfterDeadline
            } else {
                DropReason::Duplicate
            };
            return self.stats.drops.add(reason);
        }
        match self.reasm.accept(&pkt, self.next_due, sent) {
            Ok(acc) => {
                let m = &mut self.meta[(s % slots) as usize];
                if !m.seen {
                    m.seen = true;
                    if self.max_seen.is_some_and(|mx| s < mx) {
                        self.stats.reordered += 1;
                    }
                }
                self.max_seen = Some(self.max_seen.map_or(s, |mx| mx.max(s)));
                if let Accepted::Complete { .. } = acc {
                    m.done_ns = monotonic_ns();
                }
            }
            Err(r) => self.stats.drops.add(r),
        }
    }

    fn apply_policy(&mut self) {
        match self.policy {
            LatePolicy::Dry => {
                for &(dst, src) in &self.dry {
                    match src {
                        Some(src) => self.blocks.copy_block(src, dst),
                        None => self.blocks.zero_block(dst),
                    }
                }
            }
            LatePolicy::Zeros => self.blocks.zero(Flow::FromWorker),
            LatePolicy::RepeatLast => self.blocks.decode(Flow::FromWorker, &self.last_good),
        }
    }
}
