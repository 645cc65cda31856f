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
//! With a hot standby ([`MasterConfig::standby`]) every period goes to two
//! workers and the master serves from the second when the first misses a
//! deadline or is gone ([`Master`], "Hot standby").
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// A hot standby's data address: every period goes to it too (mirrored),
    /// and its result is used when the worker's misses the deadline or the
    /// worker is known gone (see [`Master`], "Hot standby"). `None`: no standby.
    pub standby: Option<SocketAddr>,
    /// The stream id of the standby's stream (`None`: `stream_id`).
    pub standby_stream_id: Option<u32>,
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
            standby: None,
            standby_stream_id: None,
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
    /// The delivered result is the standby's (see [`Master`], "Hot
    /// standby"); always `false` without a standby.
    pub from_standby: bool,
}

/// Counters of one worker's side of a [`Master`]: the primary's are the
/// fields of the same names in [`MasterStats`], the standby's are
/// [`MasterStats::standby`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Periods this worker had not answered when the period was decided of
    /// which not one fragment arrived, before or after, by the time their
    /// sequence number was retired (window + 2 periods later).
    pub lost: u64,
    /// Periods whose first fragment arrived after a fragment of a later period.
    pub reordered: u64,
    /// Datagrams whose `send` failed (e.g. the worker's port is closed).
    pub send_errors: u64,
    /// `recv` errors other than "nothing there" (e.g. ICMP port unreachable).
    pub recv_errors: u64,
    /// Packets dropped, by reason.
    pub drops: DropCounts,
    /// Periods whose result from this worker was complete when the period
    /// was decided (used or not).
    pub ready: u64,
}

/// Counters of a [`Master`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MasterStats {
    /// `process` calls.
    pub periods: u64,
    /// Results delivered in time (the worker's or, with a standby, the standby's).
    pub delivered: u64,
    /// Results not complete by their deadline (priming periods excluded):
    /// with a standby, from neither worker — the blocks the late policy
    /// substituted.
    pub late: u64,
    /// The first `window` periods, which have no result.
    pub priming: u64,
    /// Late periods of which not one fragment arrived, before or after the
    /// deadline, by the time their sequence number was retired (window + 2
    /// periods later). With a standby: the primary worker's ([`PathStats::lost`]).
    pub lost: u64,
    /// Periods whose first fragment arrived after a fragment of a later
    /// period (the primary worker's).
    pub reordered: u64,
    /// Datagrams whose `send` failed (e.g. the worker's port is closed;
    /// the primary worker's).
    pub send_errors: u64,
    /// `recv` errors other than "nothing there" (e.g. ICMP port
    /// unreachable; the primary worker's).
    pub recv_errors: u64,
    /// Packets dropped, by reason (the primary worker's).
    pub drops: DropCounts,
    /// Round-trip samples taken (may exceed the ring's capacity).
    pub rtt_samples: u64,
    /// Periods delivered with the standby's result (counted in `delivered` too).
    pub from_standby: u64,
    /// Times the master switched the worker it waits for first (to the
    /// standby when the primary missed a deadline or was gone, and back).
    pub takeovers: u64,
    /// The standby's side (all zero without a standby).
    pub standby: PathStats,
}

#[derive(Debug, Clone, Copy, Default)]
struct SeqMeta {
    seq: u64,
    valid: bool,
    sent_ns: u64,
    done_ns: u64,
    late: bool,
    /// Decided with the other worker's result before this one's came.
    spare: bool,
    any_fragment: bool,
    seen: bool,
}

/// Packets handled after the deadline before giving up on a result (bounds
/// the time a flood can hold `process` past its deadline).
const DRAIN_AFTER_DEADLINE: u32 = 256;

/// One worker's side of a master: its socket, keys, reassembly and counters.
#[derive(Debug)]
struct Path {
    socket: UdpSocket,
    encoder: Encoder,
    key: Option<Key>,
    reasm: Reassembler,
    meta: Vec<SeqMeta>,
    max_seen: Option<u64>,
    worker: SocketAddr,
    key_cell: Option<(Arc<KeyCell>, u64)>,
    /// The control link's "the worker answers" flag, if given.
    alive: Option<Arc<AtomicBool>>,
    /// A send or receive error this period (ICMP port unreachable: nothing listens there).
    refused: bool,
    stats: PathStats,
}

/// The master side of one remote stream. See the [module docs](self).
///
/// # Hot standby
/// With [`MasterConfig::standby`] the master keeps a second data socket to
/// a standby worker that runs the same stream (the control plane sets it
/// up with the same plugin and the same control values, see
/// [`crate::session`]). Every period's input goes to both (mirrored: the
/// standby computes every block, so its plugin's state is the primary's).
/// The master waits for the worker it is *serving from* (the primary at
/// first); when that one's result is not complete at the deadline, or the
/// worker is known gone (a send or receive error this period — the ICMP
/// port unreachable of a killed process —, or its link's flag says it
/// stopped answering) while the other's is complete, it delivers the other's result and
/// serves from that worker from then on ([`MasterStats::takeovers`]). A
/// period neither delivered gets the late policy.
#[derive(Debug)]
pub struct Master {
    paths: Vec<Path>,
    /// The path waited for first.
    active: usize,
    blocks: BlockSet,
    window: u64,
    wait: WaitMode,
    policy: LatePolicy,
    dry: Vec<(usize, Option<usize>)>,
    send_payload: Vec<u8>,
    datagram: Vec<u8>,
    recv_buf: Vec<u8>,
    last_good: Vec<u8>,
    next_seq: u64,
    next_due: u64,
    stats: MasterStats,
    rtt: Vec<u64>,
    rtt_head: usize,
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

impl Path {
    fn new(
        config: &MasterConfig,
        worker: SocketAddr,
        stream_id: u32,
        blocks: &BlockSet,
    ) -> Result<Self> {
        let overhead = if worker.is_ipv4() {
            IPV4_UDP_OVERHEAD
        } else {
            IPV6_UDP_OVERHEAD
        };
        let chunk = max_chunk(config.mtu, overhead, config.key.is_some())?;
        let to_len = blocks.payload_len(Flow::ToWorker);
        let from_len = blocks.payload_len(Flow::FromWorker);
        let encoder = Encoder::new(stream_id, Flow::ToWorker, chunk, config.key.clone())?;
        if encoder.fragments(to_len) > usize::from(u16::MAX) {
            return Err(Error::invalid(format!(
                "the input blocks total {to_len} bytes: more than 65535 fragments of {chunk} bytes; \
                 raise the MTU or send smaller blocks"
            )));
        }
        let bind = config.bind.unwrap_or_else(|| {
            if worker.is_ipv4() {
                SocketAddr::from(([0, 0, 0, 0], 0))
            } else {
                SocketAddr::from(([0u16; 8], 0))
            }
        });
        let socket =
            UdpSocket::bind(bind).map_err(|e| Error::io(&format!("binding UDP {bind}"), e))?;
        socket
            .connect(worker)
            .map_err(|e| Error::io(&format!("connecting UDP to {worker}"), e))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the UDP socket non-blocking", e))?;
        let slots = usize::from(config.window) + 2;
        Ok(Self {
            socket,
            encoder,
            key: config.key.clone(),
            reasm: Reassembler::new(stream_id, Flow::FromWorker, from_len, slots),
            meta: vec![SeqMeta::default(); slots],
            max_seen: None,
            worker,
            key_cell: None,
            alive: None,
            refused: false,
            stats: PathStats::default(),
        })
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

    /// Whether the worker is known gone this period.
    fn gone(&self) -> bool {
        self.refused
            || self
                .alive
                .as_ref()
                .is_some_and(|a| !a.load(Ordering::Acquire))
    }

    /// Retires the sequence number whose slot `seq` takes over, counting it lost if nothing of it came.
    fn retire(&mut self, seq: u64, now: u64) {
        let slots = self.meta.len() as u64;
        let m = &mut self.meta[(seq % slots) as usize];
        if m.valid && (m.late || m.spare) && !m.any_fragment {
            self.stats.lost += 1;
        }
        *m = SeqMeta {
            seq,
            valid: true,
            sent_ns: now,
            ..SeqMeta::default()
        };
    }

    fn send(&mut self, seq: u64, payload: &[u8], datagram: &mut [u8]) {
        for i in 0..self.encoder.fragments(payload.len()) {
            let len = self.encoder.encode(datagram, seq, payload, i);
            // 0: a sealing encoder refused the nonce (see `Encoder::encode`).
            if len == 0 {
                self.stats.send_errors += 1;
            } else if self.socket.send(&datagram[..len]).is_err() {
                self.stats.send_errors += 1;
                self.refused = true;
            }
        }
    }

    fn handle(&mut self, buf: &mut [u8], sent: u64, next_due: u64) {
        let pkt = match decode_in_place(buf, self.key.as_ref()) {
            Ok(p) => p,
            Err(r) => return self.stats.drops.add(r),
        };
        if let Err(r) = self.reasm.check(&pkt) {
            return self.stats.drops.add(r);
        }
        let s = pkt.header.seq;
        let slots = self.meta.len() as u64;
        if s < next_due {
            let m = &mut self.meta[(s % slots) as usize];
            let reason = if !(m.valid && m.seq == s) {
                DropReason::Stale
            } else if m.spare {
                // The other worker's result was used: this one is not late, just not needed.
                m.any_fragment = true;
                return;
            } else if m.late {
                m.any_fragment = true;
                DropReason::AfterDeadline
            } else {
                DropReason::Duplicate
            };
            return self.stats.drops.add(reason);
        }
        match self.reasm.accept(&pkt, next_due, sent) {
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
}

impl Master {
    /// Binds a socket (two with a standby), connects it to
    /// `config.worker` (and `config.standby`) and preallocates every buffer
    /// for `blocks`.
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
        let mut paths = Vec::with_capacity(2);
        paths.push(Path::new(
            &config,
            config.worker,
            config.stream_id,
            &blocks,
        )?);
        if let Some(standby) = config.standby {
            let id = config.standby_stream_id.unwrap_or(config.stream_id);
            paths.push(Path::new(&config, standby, id, &blocks)?);
        }
        let to_len = blocks.payload_len(Flow::ToWorker);
        let from_len = blocks.payload_len(Flow::FromWorker);
        let policy = config
            .late_policy
            .unwrap_or_else(|| LatePolicy::default_for(blocks.layout()));
        let datagram = paths
            .iter()
            .map(|p| p.encoder.max_datagram())
            .max()
            .unwrap_or(0);
        Ok(Self {
            dry: blocks.layout().dry_pairs(),
            send_payload: vec![0; to_len],
            datagram: vec![0; datagram],
            recv_buf: vec![0; MAX_DATAGRAM + 1],
            last_good: vec![0; from_len],
            rtt: vec![0; config.rtt_capacity],
            rtt_head: 0,
            paths,
            active: 0,
            blocks,
            window: u64::from(config.window),
            wait: config.wait,
            policy,
            next_seq: 0,
            next_due: 0,
            stats: MasterStats::default(),
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

    /// The local address of the data socket (the primary worker's).
    ///
    /// # Errors
    /// The OS refused `getsockname`.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.paths[0]
            .socket
            .local_addr()
            .map_err(|e| Error::io("reading the socket's address", e))
    }

    /// The local address of the standby's data socket; `None` without a standby.
    ///
    /// # Errors
    /// The OS refused `getsockname`.
    pub fn standby_local_addr(&self) -> Result<Option<SocketAddr>> {
        self.paths
            .get(1)
            .map(|p| {
                p.socket
                    .local_addr()
                    .map_err(|e| Error::io("reading the socket's address", e))
            })
            .transpose()
    }

    /// The worker's data address.
    pub fn worker(&self) -> SocketAddr {
        self.paths[0].worker
    }

    /// The standby's data address, if there is one.
    pub fn standby(&self) -> Option<SocketAddr> {
        self.paths.get(1).map(|p| p.worker)
    }

    /// Whether the master serves from the standby now (after a takeover).
    /// **RT-safe.**
    pub fn serving_standby(&self) -> bool {
        self.active == 1
    }

    /// Points the stream at another worker address (reconnection by the
    /// control plane). Not RT-safe: call it off the RT thread, between periods.
    ///
    /// # Errors
    /// The OS refused `connect`.
    pub fn set_worker(&mut self, worker: SocketAddr) -> Result<()> {
        self.paths[0]
            .socket
            .connect(worker)
            .map_err(|e| Error::io(&format!("connecting UDP to {worker}"), e))?;
        self.paths[0].worker = worker;
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
        self.paths[0].key_cell = Some((cell, u64::MAX));
        self.paths[0].take_key();
    }

    /// As [`Self::follow_key`], for the standby's session; nothing without a standby.
    pub fn follow_standby_key(&mut self, cell: Arc<KeyCell>) {
        if let Some(p) = self.paths.get_mut(1) {
            p.key_cell = Some((cell, u64::MAX));
            p.take_key();
        }
    }

    /// Reads each worker's "answers" flag (its control link's, see
    /// [`crate::session::Link::connected`]) every period: a worker whose
    /// flag is down is not waited for when the other's result is complete.
    pub fn follow_liveness(
        &mut self,
        worker: Option<Arc<AtomicBool>>,
        standby: Option<Arc<AtomicBool>>,
    ) {
        self.paths[0].alive = worker;
        if let Some(p) = self.paths.get_mut(1) {
            p.alive = standby;
        }
    }

    fn process_period(&mut self, deadline: Deadline) -> PeriodReport {
        for p in self.paths.iter_mut() {
            p.take_key();
            p.refused = false;
        }
        let start = monotonic_ns();
        let deadline = match deadline {
            Deadline::At(t) => t,
            Deadline::After(d) => start.saturating_add(d),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.periods += 1;
        let n = self.blocks.encode(Flow::ToWorker, &mut self.send_payload);
        for p in self.paths.iter_mut() {
            p.retire(seq, start);
            p.send(seq, &self.send_payload[..n], &mut self.datagram);
        }

        let Some(due) = seq.checked_sub(self.window) else {
            // Priming: nothing can be due; take in what is queued and fill the outputs.
            self.receive(seq, None, deadline);
            self.stats.priming += 1;
            self.apply_policy();
            self.sync_stats();
            return PeriodReport {
                seq,
                result_seq: None,
                outcome: Outcome::Priming,
                rtt_ns: None,
                from_standby: false,
            };
        };
        self.receive(seq, Some(due), deadline);
        self.next_due = due + 1;
        let other = self.paths.len() - 1 - self.active;
        let pick = if self.paths[self.active].reasm.complete(due).is_some() {
            Some(self.active)
        } else if other != self.active && self.paths[other].reasm.complete(due).is_some() {
            Some(other)
        } else {
            None
        };
        for (i, p) in self.paths.iter_mut().enumerate() {
            let slots = p.meta.len() as u64;
            let complete = p.reasm.complete(due).is_some();
            let any = p.reasm.has_any(due);
            let m = &mut p.meta[(due % slots) as usize];
            if complete {
                p.stats.ready += 1;
            } else if pick.is_some() && i != self.active {
                m.spare = true;
                m.any_fragment = any;
            } else {
                m.late = true;
                m.any_fragment = any;
            }
        }
        let report = if let Some(i) = pick {
            if i != self.active {
                self.active = i;
                self.stats.takeovers += 1;
            }
            let p = &self.paths[i];
            if let Some(payload) = p.reasm.complete(due) {
                self.last_good.copy_from_slice(payload);
            }
            self.blocks.decode(Flow::FromWorker, &self.last_good);
            self.stats.delivered += 1;
            if i == 1 {
                self.stats.from_standby += 1;
            }
            let slots = p.meta.len() as u64;
            let m = &p.meta[(due % slots) as usize];
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
                from_standby: i == 1,
            }
        } else {
            self.stats.late += 1;
            self.apply_policy();
            PeriodReport {
                seq,
                result_seq: Some(due),
                outcome: Outcome::Late,
                rtt_ns: None,
                from_standby: false,
            }
        };
        self.sync_stats();
        report
    }

    /// Copies the paths' counters into [`MasterStats`]. **RT-safe.**
    fn sync_stats(&mut self) {
        let p = &self.paths[0].stats;
        self.stats.lost = p.lost;
        self.stats.reordered = p.reordered;
        self.stats.send_errors = p.send_errors;
        self.stats.recv_errors = p.recv_errors;
        self.stats.drops = p.drops;
        if let Some(s) = self.paths.get(1) {
            self.stats.standby = s.stats;
        }
    }

    /// Whether period `due` can be decided before the deadline: the
    /// worker served from has its result, or it is gone and the other has.
    fn decided(&self, due: u64) -> bool {
        let a = &self.paths[self.active];
        if a.reasm.complete(due).is_some() {
            return true;
        }
        self.paths.len() > 1
            && a.gone()
            && self.paths[1 - self.active].reasm.complete(due).is_some()
    }

    /// Takes in datagrams until `due` is decided or the deadline passes
    /// (with `due == None`, only what is already queued).
    fn receive(&mut self, sent: u64, due: Option<u64>, deadline: u64) {
        let mut after_deadline = 0u32;
        loop {
            if let Some(d) = due {
                if self.decided(d) {
                    return;
                }
            }
            let mut idle = true;
            for p in self.paths.iter_mut() {
                match p.socket.recv(&mut self.recv_buf) {
                    Ok(len) => {
                        idle = false;
                        p.handle(&mut self.recv_buf[..len], sent, self.next_due);
                    }
                    Err(e) if e.kind() == IoKind::WouldBlock => {}
                    Err(e) if e.kind() == IoKind::Interrupted => idle = false,
                    Err(_) => {
                        // ICMP port unreachable and the like: counted, and the period goes on.
                        idle = false;
                        p.stats.recv_errors += 1;
                        p.refused = true;
                    }
                }
            }
            let now = monotonic_ns();
            if !idle {
                if now >= deadline {
                    after_deadline += 1;
                    if after_deadline >= DRAIN_AFTER_DEADLINE {
                        return;
                    }
                }
                continue;
            }
            let Some(_) = due else { return };
            if now >= deadline {
                return;
            }
            match self.wait {
                WaitMode::Spin => std::hint::spin_loop(),
                WaitMode::Poll => self.poll(deadline - now),
            }
        }
    }

    fn poll(&self, timeout_ns: u64) {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        let fd = |i: usize| self.paths.get(i).map_or(-1, |p| p.socket.as_raw_fd());
        // A negative fd is ignored by ppoll (no standby).
        let mut pfd = [
            libc::pollfd {
                fd: fd(0),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fd(1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `pfd` and `ts` are valid for the call; a null sigmask means
        // "keep the current mask". The result is ignored: the caller's loop
        // re-reads the sockets and the clock either way.
        unsafe {
            libc::ppoll(
                pfd.as_mut_ptr(),
                self.paths.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            );
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
