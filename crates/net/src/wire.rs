//! The wire format: one versioned 32-byte header, a fragment of a period's
//! payload, and an optional 16-byte keyed MAC (HMAC-SHA256, truncated) or,
//! for an encrypted ("sealed") session, a 16-byte Poly1305 tag after the
//! payload encrypted with ChaCha20 ([`Key::sealed_session`]). Pure
//! functions, no I/O.
//!
//! docs/WIRE.md has the byte-offset table and the drop rules. In short:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `FTNB` |
//! | 4 | 1 | version (2) |
//! | 5 | 1 | flags: bit 0 = result (worker → master), bit 1 = MAC present, bit 2 = sealed (payload encrypted, the tag is Poly1305's) |
//! | 6 | 2 | fragment index |
//! | 8 | 2 | fragment count (≥ 1) |
//! | 10 | 2 | fragment length (bytes of payload in this datagram) |
//! | 12 | 4 | stream id |
//! | 16 | 8 | period sequence number |
//! | 24 | 4 | total payload length of the period |
//! | 28 | 4 | fragment offset in the period's payload |
//!
//! All fields little-endian. A period's payload of `total` bytes is cut into
//! `count` fragments of `chunk = ceil(total / count)` bytes (the last one
//! shorter); fragment `i` starts at `i * chunk`. The receiver checks every
//! field against that rule, so a fragment has exactly one valid place.
//!
//! # Sealed packets
//! A sealed key ([`Key::sealed_session`]) holds one ChaCha20-Poly1305 key
//! per direction. The header (32 bytes, in clear) is the associated data,
//! the payload fragment is encrypted in place, and the 16-byte tag takes the
//! MAC's place, so fragment sizes are those of a MAC'd session. The 96-bit
//! nonce is `stream id (u32 LE) ‖ seq (low 48 bits, LE) ‖ fragment index
//! (u16 LE)`; an [`Encoder`] never seals the same `(seq, index)` twice under
//! one key and refuses sequence numbers of 2^48 and above
//! ([`MAX_SEALED_SEQ`]) rather than wrap. Replays are refused as for MAC'd
//! packets: by the receiver's sequence checks (duplicate, stale).
//!
//! # RT contract
//! [`Encoder::encode`], [`decode`], [`decode_in_place`], [`Key::tag`] and
//! [`Key::verify`] are **RT-safe**: no allocation, no lock, work bounded by
//! the datagram length. [`decode`] and [`decode_in_place`] never panic,
//! whatever the bytes.

use crate::block::Flow;
use crate::error::{Error, Result};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::cell::Cell;
use std::fmt;

/// The first four bytes of every packet.
pub const MAGIC: [u8; 4] = *b"FTNB";
/// The wire format version this crate speaks (2: a session's packets are
/// keyed by its [`Key::session`] key, bound to the control handshake's nonces).
pub const VERSION: u8 = 2;
/// Header length in bytes.
pub const HEADER_LEN: usize = 32;
/// Length of the truncated HMAC-SHA256 tag that follows the payload when a key is set.
pub const MAC_LEN: usize = 16;
/// Default path MTU (Ethernet).
pub const DEFAULT_MTU: usize = 1500;
/// IPv4 (20) + UDP (8) header bytes subtracted from the path MTU.
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// IPv6 (40) + UDP (8) header bytes subtracted from the path MTU.
pub const IPV6_UDP_OVERHEAD: usize = 48;
/// Smallest fragment payload an MTU must leave room for.
pub const MIN_CHUNK: usize = 64;
/// Largest datagram this crate sends or accepts (a UDP datagram's payload limit).
pub const MAX_DATAGRAM: usize = 65_507;

/// Flag bit: the packet is a result (worker → master).
pub const FLAG_RESULT: u8 = 0x01;
/// Flag bit: a MAC follows the payload.
pub const FLAG_MAC: u8 = 0x02;
/// Flag bit: the packet is sealed: the payload is encrypted (ChaCha20) and
/// the tag after it is Poly1305's over header and ciphertext. Always set
/// with [`FLAG_MAC`]. A peer of an earlier version drops such a packet as
/// [`DropReason::BadFlags`]: it never reads ciphertext as samples.
pub const FLAG_SEALED: u8 = 0x04;
const KNOWN_FLAGS: u8 = FLAG_RESULT | FLAG_MAC | FLAG_SEALED;

type HmacSha256 = Hmac<Sha256>;

/// What [`Key::session`] puts before the nonces.
pub const SESSION_LABEL: &[u8] = b"firmtime-net-data/2";

/// What [`Key::sealed_session`] puts before the nonces (the HKDF extract step).
pub const SEAL_LABEL: &[u8] = b"firmtime-net-seal/1";
/// HKDF-Expand info of the master → worker key.
pub const SEAL_INFO_TO_WORKER: &[u8] = b"firmtime-net-seal/1 master->worker";
/// HKDF-Expand info of the worker → master key.
pub const SEAL_INFO_FROM_WORKER: &[u8] = b"firmtime-net-seal/1 worker->master";
/// Largest sequence number a sealed packet may carry: the nonce holds 48
/// bits of it (2^48 periods are 11 900 years at 750 periods a second). An
/// [`Encoder`] refuses to seal beyond it rather than wrap.
pub const MAX_SEALED_SEQ: u64 = (1 << 48) - 1;

/// One AEAD key per direction (sealed sessions).
#[derive(Clone)]
struct Seal {
    to_worker: ChaCha20Poly1305,
    from_worker: ChaCha20Poly1305,
}

impl Seal {
    fn cipher(&self, flow: Flow) -> &ChaCha20Poly1305 {
        match flow {
            Flow::ToWorker => &self.to_worker,
            Flow::FromWorker => &self.from_worker,
        }
    }
}

/// The nonce of fragment `index` of period `seq` of `stream_id`
/// (`seq` ≤ [`MAX_SEALED_SEQ`]; the direction is in the key).
fn seal_nonce(stream_id: u32, seq: u64, index: u16) -> Nonce {
    let mut n = [0u8; 12];
    n[0..4].copy_from_slice(&stream_id.to_le_bytes());
    n[4..10].copy_from_slice(&seq.to_le_bytes()[..6]);
    n[10..12].copy_from_slice(&index.to_le_bytes());
    Nonce::from(n)
}

/// A pre-shared key. Every packet then carries HMAC-SHA256 over header and
/// payload, truncated to [`MAC_LEN`] bytes; or, for a sealed session key
/// ([`Key::sealed_session`]), is encrypted and authenticated with
/// ChaCha20-Poly1305. `Debug` never shows the key.
#[derive(Clone)]
pub struct Key {
    mac: HmacSha256,
    seal: Option<Seal>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.seal.is_some() {
            "Key(<hidden>, sealed)"
        } else {
            "Key(<hidden>)"
        })
    }
}

impl Key {
    /// Minimum key length in bytes.
    pub const MIN_LEN: usize = 16;

    /// A key from raw bytes.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if shorter
    /// than [`Key::MIN_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < Self::MIN_LEN {
            return Err(Error::invalid(format!(
                "the key has {} bytes; use at least {} random bytes (e.g. `(umask 077; head -c 32 /dev/urandom > net.key)`)",
                bytes.len(),
                Self::MIN_LEN
            )));
        }
        let mac = <HmacSha256 as Mac>::new_from_slice(bytes)
            .map_err(|_| Error::invalid("HMAC refused the key"))?;
        Ok(Self { mac, seal: None })
    }

    /// A key read from a file (its raw bytes, as `head -c 32 /dev/urandom`
    /// writes them) under the one rule for secrets
    /// ([`firmtime_rt::secret`]), and the warning the caller shows when the
    /// group or the world may read the file.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput): the file
    /// cannot be read, is not a regular file (a FIFO, a device), is larger
    /// than 4 KiB, the group or the world may write it (or another user owns
    /// it), or it holds fewer than [`Key::MIN_LEN`] bytes.
    pub fn from_file(
        path: &std::path::Path,
    ) -> Result<(Self, Option<firmtime_rt::secret::SecretWarning>)> {
        let mut s = firmtime_rt::secret::read_secret(
            path,
            firmtime_rt::secret::DEFAULT_MAX_LEN,
            "key file",
        )
        .map_err(|e| Error::invalid(e.to_string()))?;
        let key = Self::new(s.bytes())
            .map_err(|e| Error::invalid(format!("key file {}: {}", path.display(), e.message())))?;
        Ok((key, s.take_warning()))
    }

    /// The truncated tag of `data`. **RT-safe.**
    pub fn tag(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let mut m = self.mac.clone();
        m.update(data);
        let full = m.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// The data-plane key of one control session: `HMAC-SHA256(key,
    /// "firmtime-net-data/2" ‖ worker nonce ‖ master nonce)` (all 32 bytes)
    /// used as a key of its own. A packet of one session fails the MAC of
    /// any other, even with the same stream id and ports.
    pub fn session(&self, worker_nonce: &[u8; 32], master_nonce: &[u8; 32]) -> Key {
        let mut m = self.mac.clone();
        m.update(SESSION_LABEL);
        m.update(worker_nonce);
        m.update(master_nonce);
        let full = m.finalize().into_bytes();
        Self {
            mac: <HmacSha256 as Mac>::new_from_slice(&full).unwrap_or_else(|_| self.mac.clone()),
            seal: None,
        }
    }

    /// The encrypting data-plane key of one control session (docs/WIRE.md,
    /// "Sealed packets"): HKDF-SHA256 whose extract step is keyed by the
    /// pre-shared key, `PRK = HMAC-SHA256(key, "firmtime-net-seal/1" ‖
    /// worker nonce ‖ master nonce)`, expanded into one 32-byte
    /// ChaCha20-Poly1305 key per direction ([`SEAL_INFO_TO_WORKER`],
    /// [`SEAL_INFO_FROM_WORKER`]). Packets under it are sealed
    /// ([`FLAG_SEALED`]); it refuses MAC'd ones and the other way round.
    /// Both ends derive the same key from the same handshake; a packet of
    /// one session, or of the other direction, fails the tag of any other.
    pub fn sealed_session(&self, worker_nonce: &[u8; 32], master_nonce: &[u8; 32]) -> Key {
        let mut m = self.mac.clone();
        m.update(SEAL_LABEL);
        m.update(worker_nonce);
        m.update(master_nonce);
        let prk = m.finalize().into_bytes();
        let mut to_worker = [0u8; 32];
        let mut from_worker = [0u8; 32];
        // A 32-byte PRK is the hash's length and 32 bytes are far below
        // HKDF's 255 × 32 limit: neither step can fail.
        if let Ok(hk) = Hkdf::<Sha256>::from_prk(&prk) {
            let _ = hk.expand(SEAL_INFO_TO_WORKER, &mut to_worker);
            let _ = hk.expand(SEAL_INFO_FROM_WORKER, &mut from_worker);
        }
        let key = Self {
            mac: self.session(worker_nonce, master_nonce).mac,
            seal: Some(Seal {
                to_worker: ChaCha20Poly1305::new(&to_worker.into()),
                from_worker: ChaCha20Poly1305::new(&from_worker.into()),
            }),
        };
        to_worker.fill(0);
        from_worker.fill(0);
        key
    }

    /// Whether packets under this key are sealed (encrypted), see [`Key::sealed_session`].
    pub fn is_sealed(&self) -> bool {
        self.seal.is_some()
    }

    /// Whether `tag` is the truncated tag of `data`, compared in constant time. **RT-safe.**
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        let mut m = self.mac.clone();
        m.update(data);
        tag.len() == MAC_LEN && m.verify_truncated_left(tag).is_ok()
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Which way the packet travels.
    pub flow: Flow,
    /// Whether a MAC (or, sealed, a Poly1305 tag) followed the payload.
    pub mac: bool,
    /// Whether the payload was sealed (encrypted; [`FLAG_SEALED`]).
    pub sealed: bool,
    /// The stream the packet belongs to.
    pub stream_id: u32,
    /// Period sequence number.
    pub seq: u64,
    /// Index of this fragment, `0..frag_count`.
    pub frag_index: u16,
    /// Number of fragments of this period's payload.
    pub frag_count: u16,
    /// Payload bytes in this datagram.
    pub frag_len: u16,
    /// Total payload bytes of the period.
    pub total_len: u32,
    /// Offset of this fragment in the period's payload.
    pub frag_offset: u32,
}

/// A packet accepted by [`decode`]: its header and its payload fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The header.
    pub header: Header,
    /// The fragment's payload bytes.
    pub payload: &'a [u8],
}

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $name:ident = $key:literal,)*) => {
        /// Why a packet was dropped. Every drop is counted by reason, never processed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum DropReason { $($(#[$doc])* $name,)* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];

            /// A short stable name (`bad_magic`, …) for reports and JSON.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$name => $key,)* }
            }
        }
    };
}

drop_reasons! {
    /// Shorter than a header, or too short for the lengths it claims.
    Truncated = "truncated",
    /// The first four bytes are not [`MAGIC`].
    BadMagic = "bad_magic",
    /// A version this crate does not speak.
    BadVersion = "bad_version",
    /// Unknown flag bits set.
    BadFlags = "bad_flags",
    /// Fragment index, count, offset or length inconsistent with each other,
    /// with the datagram's size, or with earlier fragments of the same period.
    BadLength = "bad_length",
    /// A key is set and the MAC is missing or wrong, or a MAC is present and no key is set.
    BadMac = "bad_mac",
    /// A stream id (or peer) this endpoint does not serve.
    ForeignStream = "foreign_stream",
    /// A packet going the wrong way (a result sent to a worker, an input to a master).
    WrongFlow = "wrong_flow",
    /// The period's total length differs from the layout's.
    LayoutMismatch = "layout_mismatch",
    /// A sequence number older than anything still awaited.
    Stale = "stale",
    /// A sequence number the master never sent.
    Unsolicited = "unsolicited",
    /// A fragment already received, or a period already complete.
    Duplicate = "duplicate",
    /// A result that arrived after its deadline had passed (never delivered later).
    AfterDeadline = "after_deadline",
}

/// Number of [`DropReason`]s.
pub const DROP_REASONS: usize = DropReason::ALL.len();

impl DropReason {
    fn index(self) -> usize {
        DropReason::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Dropped packets counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts {
    counts: [u64; DROP_REASONS],
}

impl DropCounts {
    /// Counts one drop. **RT-safe.**
    pub fn add(&mut self, reason: DropReason) {
        self.counts[reason.index()] += 1;
    }

    /// Counts `n` drops. **RT-safe.**
    pub fn add_n(&mut self, reason: DropReason, n: u64) {
        self.counts[reason.index()] += n;
    }

    /// Adds every count of `other`. **RT-safe.**
    pub fn merge(&mut self, other: &DropCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// Drops counted for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `(reason, count)` for every reason, in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .copied()
            .zip(self.counts.iter().copied())
    }
}

/// Largest payload bytes per fragment for a path MTU, the IP+UDP overhead and
/// whether a MAC is carried.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if the MTU
/// leaves fewer than [`MIN_CHUNK`] bytes.
pub fn max_chunk(mtu: usize, ip_udp_overhead: usize, mac: bool) -> Result<usize> {
    let over = ip_udp_overhead + HEADER_LEN + if mac { MAC_LEN } else { 0 };
    let datagram = mtu.min(MAX_DATAGRAM + ip_udp_overhead);
    match datagram.checked_sub(over) {
        Some(c) if c >= MIN_CHUNK => Ok(c.min(usize::from(u16::MAX))),
        _ => Err(Error::invalid(format!(
            "MTU {mtu} leaves no room for a fragment: it needs at least {} bytes \
             ({ip_udp_overhead} IP/UDP + {HEADER_LEN} header + {} MAC + {MIN_CHUNK} payload)",
            over + MIN_CHUNK,
            if mac { MAC_LEN } else { 0 }
        ))),
    }
}

/// Number of fragments for `total` payload bytes at `max_chunk` bytes per
/// fragment (at least 1, also for an empty payload).
pub fn fragment_count(total: usize, max_chunk: usize) -> usize {
    total.div_ceil(max_chunk.max(1)).max(1)
}

/// Where fragment `index` of `count` lies in a payload of `total` bytes:
/// `(offset, len)`, or `None` if no such fragment exists.
pub fn fragment_span(total: usize, count: usize, index: usize) -> Option<(usize, usize)> {
    if count == 0 || index >= count {
        return None;
    }
    if total == 0 {
        return (count == 1).then_some((0, 0));
    }
    let chunk = total.div_ceil(count);
    let offset = index.checked_mul(chunk)?;
    if offset >= total {
        return None;
    }
    Some((offset, chunk.min(total - offset)))
}

/// Encodes the fragments of one stream's payloads in one direction.
#[derive(Debug, Clone)]
pub struct Encoder {
    stream_id: u32,
    flow: Flow,
    max_chunk: usize,
    key: Option<Key>,
    nonces: Cell<NonceGuard>,
}

/// Which nonces a sealing [`Encoder`] has used under its key: the highest
/// sequence number begun, the 64 before it (bit `i` = `high − i` begun),
/// and the fragment index expected next of the period being sealed.
#[derive(Debug, Clone, Copy, Default)]
struct NonceGuard {
    high: Option<u64>,
    begun: u64,
    /// `(seq, next index)` of the period being sealed.
    open: Option<(u64, usize)>,
    refused: u64,
}

impl NonceGuard {
    /// Whether fragment `index` of `seq` may be sealed (its nonce never
    /// used under this key); records it if so. A period is begun at index 0
    /// and sealed in index order; a period begun once is never begun again;
    /// one more than 64 below the highest begun is refused.
    fn take(&mut self, seq: u64, index: usize) -> bool {
        if seq > MAX_SEALED_SEQ {
            return false;
        }
        if index > 0 {
            if self.open == Some((seq, index)) {
                self.open = Some((seq, index + 1));
                return true;
            }
            return false;
        }
        match self.high {
            None => {
                self.high = Some(seq);
                self.begun = 1;
            }
            Some(h) if seq > h => {
                let shift = seq - h;
                self.begun = if shift >= 64 { 0 } else { self.begun << shift } | 1;
                self.high = Some(seq);
            }
            Some(h) => {
                let back = h - seq;
                if back >= 64 || self.begun & (1 << back) != 0 {
                    return false;
                }
                self.begun |= 1 << back;
            }
        }
        self.open = Some((seq, 1));
        true
    }
}

impl Encoder {
    /// An encoder for `stream_id` in `flow`, cutting payloads into fragments
    /// of at most `max_chunk` bytes (see [`max_chunk`]), with a MAC if `key` is set.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if
    /// `max_chunk` is 0 or above 65535.
    pub fn new(stream_id: u32, flow: Flow, max_chunk: usize, key: Option<Key>) -> Result<Self> {
        if max_chunk == 0 || max_chunk > usize::from(u16::MAX) {
            return Err(Error::invalid(format!(
                "fragment size {max_chunk} is out of range 1..=65535"
            )));
        }
        Ok(Self {
            stream_id,
            flow,
            max_chunk,
            key,
            nonces: Cell::new(NonceGuard::default()),
        })
    }

    /// Replaces the key (a new session's [`Key::session`] or
    /// [`Key::sealed_session`]); the MAC and sealed flags follow it. The
    /// record of nonces used starts afresh (a new key). **RT-safe** (no
    /// allocation).
    pub fn set_key(&mut self, key: Option<Key>) {
        self.key = key;
        self.nonces.set(NonceGuard::default());
    }

    /// Fragments this encoder refused to seal because their nonce was used
    /// under its key already (a period sealed twice, a fragment out of
    /// order) or their sequence number is above [`MAX_SEALED_SEQ`].
    pub fn refused(&self) -> u64 {
        self.nonces.get().refused
    }

    /// Number of fragments a payload of `total` bytes is sent in.
    pub fn fragments(&self, total: usize) -> usize {
        fragment_count(total, self.max_chunk)
    }

    /// Largest datagram this encoder writes.
    pub fn max_datagram(&self) -> usize {
        HEADER_LEN + self.max_chunk + if self.key.is_some() { MAC_LEN } else { 0 }
    }

    /// Writes fragment `index` of period `seq`'s `payload` into `out` and
    /// returns the datagram's length. **RT-safe.**
    ///
    /// Under a sealed key the payload is encrypted in place in `out`; the
    /// fragments of a period must then be encoded in index order, each
    /// period once (its nonces are used then), and a refused fragment
    /// returns 0 (nothing to send; counted in [`Self::refused`]): a period
    /// begun before, a fragment out of order, a period more than 64 below
    /// the highest begun, or `seq` above [`MAX_SEALED_SEQ`].
    ///
    /// # Panics
    /// If `index` is not below [`Self::fragments`]`(payload.len())`, the
    /// payload needs more than 65535 fragments or is over 4 GiB, or `out` is
    /// shorter than [`Self::max_datagram`].
    pub fn encode(&self, out: &mut [u8], seq: u64, payload: &[u8], index: usize) -> usize {
        let count = self.fragments(payload.len());
        let (offset, len) =
            fragment_span(payload.len(), count, index).expect("fragment index out of range");
        let count = u16::try_from(count).expect("payload needs more than 65535 fragments");
        let mut flags = 0;
        if self.flow == Flow::FromWorker {
            flags |= FLAG_RESULT;
        }
        if self.key.is_some() {
            flags |= FLAG_MAC;
        }
        let seal = self.key.as_ref().and_then(|k| k.seal.as_ref());
        if seal.is_some() {
            flags |= FLAG_SEALED;
            let mut guard = self.nonces.get();
            let ok = guard.take(seq, index);
            if !ok {
                guard.refused += 1;
            }
            self.nonces.set(guard);
            if !ok {
                return 0;
            }
        }
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = flags;
        out[6..8].copy_from_slice(&(index as u16).to_le_bytes());
        out[8..10].copy_from_slice(&count.to_le_bytes());
        out[10..12].copy_from_slice(&(len as u16).to_le_bytes());
        out[12..16].copy_from_slice(&self.stream_id.to_le_bytes());
        out[16..24].copy_from_slice(&seq.to_le_bytes());
        let total = u32::try_from(payload.len()).expect("payload over 4 GiB");
        out[24..28].copy_from_slice(&total.to_le_bytes());
        out[28..32].copy_from_slice(&(offset as u32).to_le_bytes());
        let end = HEADER_LEN + len;
        out[HEADER_LEN..end].copy_from_slice(&payload[offset..offset + len]);
        if let Some(seal) = seal {
            let nonce = seal_nonce(self.stream_id, seq, index as u16);
            let (head, rest) = out.split_at_mut(HEADER_LEN);
            let Ok(tag) =
                seal.cipher(self.flow)
                    .encrypt_in_place_detached(&nonce, head, &mut rest[..len])
            else {
                // Only for a fragment of 256 GiB: cannot be. Send nothing.
                return 0;
            };
            out[end..end + MAC_LEN].copy_from_slice(&tag);
            return end + MAC_LEN;
        }
        match &self.key {
            Some(key) => {
                let tag = key.tag(&out[..end]);
                out[end..end + MAC_LEN].copy_from_slice(&tag);
                end + MAC_LEN
            }
            None => end,
        }
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes and authenticates one datagram. **RT-safe.** Never panics.
///
/// Checks, in order: length ≥ header, magic, version, flags, MAC presence
/// against `key`, datagram length against the fragment length, fragment
/// index/count/offset/length against the fragmentation rule, then the MAC.
/// Stream, direction and sequence checks belong to the receiver
/// ([`Reassembler`](crate::Reassembler)).
///
/// A sealed packet cannot be opened in a shared buffer: under a sealed key
/// use [`decode_in_place`]; here every packet is then
/// [`DropReason::BadMac`].
///
/// # Errors
/// The [`DropReason`] of the first check that failed.
pub fn decode<'a>(buf: &'a [u8], key: Option<&Key>) -> Result<Packet<'a>, DropReason> {
    let (header, end) = check(buf, key)?;
    if header.sealed {
        return Err(DropReason::BadMac);
    }
    if let Some(key) = key {
        if !key.verify(&buf[..end], &buf[end..]) {
            return Err(DropReason::BadMac);
        }
    }
    Ok(Packet {
        header,
        payload: &buf[HEADER_LEN..end],
    })
}

/// As [`decode`], and opens a sealed packet in place: verifies its
/// Poly1305 tag (over header and ciphertext, before anything is
/// decrypted) and decrypts its payload in `buf`. A packet that fails is
/// left as it came. **RT-safe.** Never panics.
///
/// # Errors
/// The [`DropReason`] of the first check that failed; a sealed packet
/// where the key is not sealed (or none is set), a MAC'd one under a
/// sealed key, or a tag that does not verify: [`DropReason::BadMac`].
pub fn decode_in_place<'a>(buf: &'a mut [u8], key: Option<&Key>) -> Result<Packet<'a>, DropReason> {
    let (header, end) = check(buf, key)?;
    let Some(seal) = key.and_then(|k| k.seal.as_ref()) else {
        return decode(buf, key);
    };
    let nonce = seal_nonce(header.stream_id, header.seq, header.frag_index);
    let (head, rest) = buf.split_at_mut(HEADER_LEN);
    let (body, tag) = rest.split_at_mut(end - HEADER_LEN);
    let tag = Tag::from_slice(tag);
    if header.seq > MAX_SEALED_SEQ
        || seal
            .cipher(header.flow)
            .decrypt_in_place_detached(&nonce, head, body, tag)
            .is_err()
    {
        return Err(DropReason::BadMac);
    }
    Ok(Packet {
        header,
        payload: &buf[HEADER_LEN..end],
    })
}

/// The checks before the MAC: the header and where the payload ends.
fn check(buf: &[u8], key: Option<&Key>) -> Result<(Header, usize), DropReason> {
    if buf.len() < HEADER_LEN {
        return Err(DropReason::Truncated);
    }
    if buf[0..4] != MAGIC {
        return Err(DropReason::BadMagic);
    }
    if buf[4] != VERSION {
        return Err(DropReason::BadVersion);
    }
    let flags = buf[5];
    if flags & !KNOWN_FLAGS != 0 {
        return Err(DropReason::BadFlags);
    }
    let has_mac = flags & FLAG_MAC != 0;
    let sealed = flags & FLAG_SEALED != 0;
    if has_mac != key.is_some() || sealed != key.is_some_and(Key::is_sealed) {
        return Err(DropReason::BadMac);
    }
    let header = Header {
        flow: if flags & FLAG_RESULT != 0 {
            Flow::FromWorker
        } else {
            Flow::ToWorker
        },
        mac: has_mac,
        sealed,
        frag_index: le16(buf, 6),
        frag_count: le16(buf, 8),
        frag_len: le16(buf, 10),
        stream_id: le32(buf, 12),
        seq: le64(buf, 16),
        total_len: le32(buf, 24),
        frag_offset: le32(buf, 28),
    };
    let end = HEADER_LEN + usize::from(header.frag_len);
    let expected = end + if has_mac { MAC_LEN } else { 0 };
    if buf.len() < expected {
        return Err(DropReason::Truncated);
    }
    if buf.len() > expected {
        return Err(DropReason::BadLength);
    }
    let span = fragment_span(
        header.total_len as usize,
        usize::from(header.frag_count),
        usize::from(header.frag_index),
    );
    if span != Some((header.frag_offset as usize, usize::from(header.frag_len))) {
        return Err(DropReason::BadLength);
    }
    Ok((header, end))
}

#[cfg(test)]
pub(crate) mod tests {
    #[test]
    fn a_key_file_must_be_a_small_regular_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ft-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8], mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let good = write("good.key", &[7u8; 32], 0o600);
        let (_, warning) = super::Key::from_file(&good).unwrap();
        assert!(warning.is_none());
        let big = write("big.key", &[7u8; 5000], 0o600);
        let e = super::Key::from_file(&big).unwrap_err();
        assert!(e.message().contains("more than the 4096"), "{e}");
        let fifo = dir.join("fifo.key");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Refused at once: no writer is waited for.
        let e = super::Key::from_file(&fifo).unwrap_err();
        assert!(e.message().contains("not a regular file"), "{e}");
        let e = super::Key::from_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.message().contains("not a regular file"), "{e}");
        // Regression (issue 28 item 6): keys others may write were accepted silently.
        for mode in [0o666, 0o662] {
            let p = write(&format!("w{mode:o}.key"), &[7u8; 32], mode);
            let e = super::Key::from_file(&p).unwrap_err();
            assert!(e.message().contains("may write it"), "{e}");
        }
        let p = write("r.key", &[7u8; 32], 0o644);
        let (_, warning) = super::Key::from_file(&p).unwrap();
        assert!(warning.unwrap().to_string().contains("readable by"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;
    use crate::block::{BlockSet, Direction};
    use crate::reassembly::{Accepted, Reassembler};

    /// The project's seeded generator with index-sized draws, so failures reproduce.
    pub(crate) struct Rng(firmtime_rt::rng::Rng);
    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Self(firmtime_rt::rng::Rng::new(seed))
        }
        pub(crate) fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
        pub(crate) fn below(&mut self, n: usize) -> usize {
            self.0.below(u32::try_from(n).expect("small range")) as usize
        }
        pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
            for i in (1..v.len()).rev() {
                v.swap(i, self.below(i + 1));
            }
        }
    }

    fn key() -> Key {
        Key::new(b"0123456789abcdef0123456789abcdef").unwrap()
    }

    fn random_set(rng: &mut Rng) -> BlockSet {
        let mut set = BlockSet::new();
        for _ in 0..1 + rng.below(6) {
            let dir = [Direction::ToWorker, Direction::FromWorker, Direction::Both][rng.below(3)];
            let len = 1 + rng.below(1500);
            macro_rules! fill {
                ($t:ty, $f:expr) => {{
                    let id = set.add::<$t>(dir, len).unwrap();
                    for v in set.get_mut(id) {
                        let r = rng.next();
                        *v = $f(r);
                    }
                }};
            }
            match rng.below(5) {
                0 => fill!(u8, |r: u64| r as u8),
                1 => fill!(i16, |r: u64| r as i16),
                2 => fill!(i32, |r: u64| r as i32),
                3 => fill!(f32, |r: u64| f32::from_bits(r as u32)),
                _ => fill!(f64, |r: u64| f64::from_bits(r)),
            }
        }
        set
    }

    fn fragments(enc: &Encoder, seq: u64, payload: &[u8]) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; enc.max_datagram()];
        (0..enc.fragments(payload.len()))
            .map(|i| {
                let n = enc.encode(&mut buf, seq, payload, i);
                buf[..n].to_vec()
            })
            .collect()
    }

    #[test]
    fn fragment_spans_tile_the_payload() {
        for total in (0..3000)
            .step_by(7)
            .chain([1, 64, 65, 1424, 1425, 2848, 2849])
        {
            for chunk in [1, 2, 3, 64, 100, 1000, 1424, 1440, 8972] {
                let count = fragment_count(total, chunk);
                let mut at = 0;
                for i in 0..count {
                    let (off, len) = fragment_span(total, count, i).unwrap();
                    assert_eq!(off, at, "total {total} chunk {chunk} fragment {i}");
                    assert!(len <= chunk && (len > 0 || total == 0));
                    at += len;
                }
                assert_eq!(at, total);
                assert_eq!(fragment_span(total, count, count), None);
            }
        }
    }

    #[test]
    fn round_trip_many_layouts_mtus_orders_and_duplicates() {
        let mut rng = Rng::new(0x5eed);
        for case in 0..120 {
            let sent = random_set(&mut rng);
            let flow = if case % 2 == 0 {
                Flow::ToWorker
            } else {
                Flow::FromWorker
            };
            let total = sent.payload_len(flow);
            let mut payload = vec![0u8; total];
            sent.encode(flow, &mut payload);
            let mtu = [128 + 28 + 48, 576, 1500, 9000][case % 4];
            let k = (case % 3 == 0).then(key);
            let chunk = max_chunk(mtu, IPV4_UDP_OVERHEAD, k.is_some()).unwrap();
            let enc = Encoder::new(9, flow, chunk, k.clone()).unwrap();
            let seq = rng.next() >> 1;
            let mut frags = fragments(&enc, seq, &payload);
            assert_eq!(frags.len(), fragment_count(total, chunk));
            assert!(frags.iter().all(|f| f.len() <= mtu - IPV4_UDP_OVERHEAD));
            // Duplicate a few, then shuffle.
            for _ in 0..rng.below(4) {
                let d = frags[rng.below(frags.len())].clone();
                frags.push(d);
            }
            rng.shuffle(&mut frags);
            let mut re = Reassembler::new(9, flow, total, 3);
            let (mut completes, mut dups) = (0, 0);
            for f in &frags {
                let pkt = decode(f, k.as_ref()).unwrap();
                assert_eq!(pkt.header.seq, seq);
                match re.accept(&pkt, seq, seq) {
                    Ok(Accepted::Complete { seq: s }) => {
                        assert_eq!(s, seq);
                        completes += 1;
                    }
                    Ok(Accepted::Partial { .. }) => {}
                    Err(DropReason::Duplicate) => dups += 1,
                    Err(r) => panic!("case {case}: unexpected drop {r}"),
                }
            }
            assert_eq!(completes, 1);
            assert_eq!(dups, frags.len() - fragment_count(total, chunk));
            let got = re.complete(seq).unwrap();
            assert_eq!(got, &payload[..], "case {case}");
            let mut received = BlockSet::from_layout(sent.layout()).unwrap();
            received.decode(flow, got);
            let mut again = vec![0u8; total];
            received.encode(flow, &mut again);
            assert_eq!(again, payload, "case {case}: blocks differ bit for bit");
        }
    }

    #[test]
    fn header_bytes_are_as_documented() {
        let enc = Encoder::new(0x0403_0201, Flow::FromWorker, 100, None).unwrap();
        let payload: Vec<u8> = (0..150).map(|i| i as u8).collect();
        let mut out = [0u8; 200];
        let n = enc.encode(&mut out, 0x1122_3344_5566_7788, &payload, 1);
        assert_eq!(n, HEADER_LEN + 75);
        assert_eq!(&out[0..4], b"FTNB");
        assert_eq!(out[4], 2);
        assert_eq!(out[5], FLAG_RESULT);
        assert_eq!(&out[6..12], &[1, 0, 2, 0, 75, 0]);
        assert_eq!(&out[12..16], &[1, 2, 3, 4]);
        assert_eq!(
            &out[16..24],
            &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(&out[24..28], &[150, 0, 0, 0]);
        assert_eq!(&out[28..32], &[75, 0, 0, 0]);
        assert_eq!(out[32], 75);
    }

    fn valid(k: Option<&Key>) -> Vec<u8> {
        let enc = Encoder::new(5, Flow::ToWorker, 64, k.cloned()).unwrap();
        fragments(&enc, 10, &[7u8; 100]).swap_remove(0)
    }

    /// Rewrites the fields after a change so only the intended check fails.
    fn remac(p: &mut [u8], k: &Key) {
        let end = p.len() - MAC_LEN;
        let tag = k.tag(&p[..end]);
        p[end..].copy_from_slice(&tag);
    }

    #[test]
    fn each_malformed_packet_is_dropped_with_its_reason() {
        let k = key();
        let good = valid(Some(&k));
        assert!(decode(&good, Some(&k)).is_ok());
        type Change = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Change, DropReason)> = vec![
            ("empty", Box::new(|p| p.clear()), DropReason::Truncated),
            (
                "header only",
                Box::new(|p| p.truncate(31)),
                DropReason::Truncated,
            ),
            (
                "cut payload",
                Box::new(|p| p.truncate(60)),
                DropReason::Truncated,
            ),
            ("magic", Box::new(|p| p[0] = b'X'), DropReason::BadMagic),
            (
                "version 1 (before session keys)",
                Box::new(|p| p[4] = 1),
                DropReason::BadVersion,
            ),
            ("flags", Box::new(|p| p[5] |= 0x80), DropReason::BadFlags),
            (
                "no mac flag",
                Box::new(|p| p[5] &= !FLAG_MAC),
                DropReason::BadMac,
            ),
            (
                "trailing byte",
                Box::new(|p| p.push(0)),
                DropReason::BadLength,
            ),
            (
                "index past count",
                Box::new(|p| p[6] = 2),
                DropReason::BadLength,
            ),
            ("count 0", Box::new(|p| p[8] = 0), DropReason::BadLength),
            ("offset", Box::new(|p| p[28] = 1), DropReason::BadLength),
            ("total", Box::new(|p| p[24] = 200), DropReason::BadLength),
            (
                "payload flipped",
                Box::new(|p| p[40] ^= 1),
                DropReason::BadMac,
            ),
            ("seq flipped", Box::new(|p| p[16] ^= 1), DropReason::BadMac),
            (
                "tag flipped",
                Box::new(|p| *p.last_mut().unwrap() ^= 1),
                DropReason::BadMac,
            ),
        ];
        for (what, change, reason) in cases {
            let mut p = good.clone();
            change(&mut p);
            assert_eq!(decode(&p, Some(&k)), Err(reason), "{what}");
        }
        // A MAC'd packet where no key is set; a bare packet where one is; another key.
        assert_eq!(decode(&good, None), Err(DropReason::BadMac));
        assert_eq!(decode(&valid(None), Some(&k)), Err(DropReason::BadMac));
        let other = Key::new(&[9u8; 32]).unwrap();
        assert_eq!(decode(&good, Some(&other)), Err(DropReason::BadMac));
        // Consistent lengths re-MACed still fail the span rule.
        let mut p = good.clone();
        p[10] = 49; // fragment length 49 where the rule says 50
        p.remove(HEADER_LEN);
        remac(&mut p, &k);
        assert_eq!(decode(&p, Some(&k)), Err(DropReason::BadLength));
    }

    #[test]
    fn stream_level_drops_in_reassembly() {
        let enc = Encoder::new(5, Flow::ToWorker, 64, None).unwrap();
        let f = |seq| fragments(&enc, seq, &[1u8; 100]);
        let mut re = Reassembler::new(5, Flow::ToWorker, 100, 3);
        let a = f(10);
        let pa = decode(&a[0], None).unwrap();
        assert_eq!(re.accept(&pa, 10, 10), Ok(Accepted::Partial { seq: 10 }));
        assert_eq!(re.accept(&pa, 10, 10), Err(DropReason::Duplicate));
        assert_eq!(re.accept(&pa, 11, 12), Err(DropReason::Stale));
        assert_eq!(re.accept(&pa, 0, 9), Err(DropReason::Unsolicited));
        let other = Reassembler::new(6, Flow::ToWorker, 100, 3);
        assert_eq!(other.check(&pa), Err(DropReason::ForeignStream));
        let result_side = Reassembler::new(5, Flow::FromWorker, 100, 3);
        assert_eq!(result_side.check(&pa), Err(DropReason::WrongFlow));
        let longer = Reassembler::new(5, Flow::ToWorker, 101, 3);
        assert_eq!(longer.check(&pa), Err(DropReason::LayoutMismatch));
        // Same period, different fragmentation (another MTU): inconsistent count.
        let enc3 = Encoder::new(5, Flow::ToWorker, 34, None).unwrap();
        let c = fragments(&enc3, 10, &[1u8; 100]);
        assert_eq!(c.len(), 3);
        let pc = decode(&c[2], None).unwrap();
        assert_eq!(re.accept(&pc, 10, 10), Err(DropReason::BadLength));
        // Period 13 takes slot 1 from 10 (3 slots); 10 is then stale.
        let d = f(13);
        let pd = decode(&d[0], None).unwrap();
        assert_eq!(re.accept(&pd, 0, 20), Ok(Accepted::Partial { seq: 13 }));
        assert!(!re.has_any(10));
        let pa1 = decode(&a[1], None).unwrap();
        assert_eq!(re.accept(&pa1, 0, 20), Err(DropReason::Stale));
        let pd1 = decode(&d[1], None).unwrap();
        assert_eq!(re.accept(&pd1, 0, 20), Ok(Accepted::Complete { seq: 13 }));
        assert_eq!(re.accept(&pd1, 0, 20), Err(DropReason::Duplicate));
        assert_eq!(re.complete(13), Some(&[1u8; 100][..]));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let k = key();
        let mut rng = Rng::new(42);
        let good = [valid(None), valid(Some(&k))];
        let mut buf = vec![0u8; 300];
        let mut re = Reassembler::new(5, Flow::ToWorker, 100, 3);
        for i in 0..200_000 {
            let len;
            if i % 2 == 0 {
                len = rng.below(buf.len());
                for b in &mut buf[..len] {
                    *b = rng.next() as u8;
                }
                if i % 4 == 0 && len >= 4 {
                    buf[..4].copy_from_slice(&MAGIC);
                    if len > 5 {
                        buf[4] = VERSION;
                        buf[5] &= KNOWN_FLAGS;
                    }
                }
            } else {
                // Mutate a valid packet: flip bits, cut, or extend.
                let g = &good[i % 4 / 2];
                len = g.len() + rng.below(3) - 1;
                buf[..g.len()].copy_from_slice(g);
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(g.len());
                    buf[at] ^= 1 << rng.below(8);
                }
            }
            let keyed = i % 3 == 0;
            let r = assert_no_alloc::assert_no_alloc(|| {
                decode(&buf[..len], keyed.then_some(&k)).map(|p| {
                    let _ = re.accept(&p, 0, u64::MAX);
                    p.header
                })
            });
            if let Ok(h) = r {
                // Accepted packets satisfy every invariant.
                assert_eq!(h.mac, keyed);
                assert!(h.frag_index < h.frag_count);
                assert!(h.frag_offset as u64 + u64::from(h.frag_len) <= u64::from(h.total_len));
            }
        }
    }

    #[test]
    fn keyed_mutations_never_authenticate() {
        let k = key();
        let good = valid(Some(&k));
        let mut rng = Rng::new(7);
        for _ in 0..20_000 {
            let mut p = good.clone();
            let at = rng.below(p.len());
            p[at] ^= 1 << rng.below(8);
            assert!(decode(&p, Some(&k)).is_err());
        }
    }

    fn sealed_key(worker_nonce: u8) -> Key {
        key().sealed_session(&[worker_nonce; 32], &[2; 32])
    }

    /// Every fragment of `seq` sealed by `enc`, under `assert_no_alloc`.
    fn sealed(enc: &Encoder, seq: u64, payload: &[u8]) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; enc.max_datagram()];
        (0..enc.fragments(payload.len()))
            .map(|i| {
                let n = assert_no_alloc::assert_no_alloc(|| enc.encode(&mut buf, seq, payload, i));
                assert!(n > 0, "fragment {i} of {seq} refused");
                buf[..n].to_vec()
            })
            .collect()
    }

    fn open(datagram: &[u8], k: &Key) -> Result<(Header, Vec<u8>), DropReason> {
        let mut d = datagram.to_vec();
        assert_no_alloc::assert_no_alloc(|| {
            decode_in_place(&mut d, Some(k)).map(|p| (p.header, p.payload.len()))
        })
        .map(|(h, n)| (h, d[HEADER_LEN..HEADER_LEN + n].to_vec()))
    }

    #[test]
    fn sealed_round_trip_both_ways_and_the_payload_is_not_in_clear() {
        let k = sealed_key(1);
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        for flow in [Flow::ToWorker, Flow::FromWorker] {
            let chunk = max_chunk(1500, IPV4_UDP_OVERHEAD, true).unwrap();
            let enc = Encoder::new(9, flow, chunk, Some(k.clone())).unwrap();
            let frags = sealed(&enc, 41, &payload);
            assert_eq!(frags.len(), 3);
            let mut re = Reassembler::new(9, flow, payload.len(), 3);
            for f in &frags {
                assert_eq!(f[5] & (FLAG_SEALED | FLAG_MAC), FLAG_SEALED | FLAG_MAC);
                assert!(f.len() <= 1500 - IPV4_UDP_OVERHEAD);
                let (off, len) = (le32(f, 28) as usize, usize::from(le16(f, 10)));
                // Ciphertext: no 8-byte run of the fragment's plaintext survives.
                assert!(!f[HEADER_LEN..HEADER_LEN + len]
                    .windows(8)
                    .any(|w| payload[off..off + len].windows(8).any(|p| p == w)));
                let mut d = f.clone();
                let pkt = decode_in_place(&mut d, Some(&k)).unwrap();
                assert!(pkt.header.sealed && pkt.header.mac);
                assert_eq!(pkt.header.flow, flow);
                assert_eq!(pkt.payload, &payload[off..off + len]);
                let _ = re.accept(&pkt, 41, 41).unwrap();
            }
            assert_eq!(re.complete(41), Some(&payload[..]));
        }
    }

    #[test]
    fn tampered_sealed_datagrams_are_refused_and_left_as_they_came() {
        let k = sealed_key(1);
        let enc = Encoder::new(5, Flow::ToWorker, 64, Some(k.clone())).unwrap();
        let good = sealed(&enc, 10, &[7u8; 100]).swap_remove(0);
        assert!(open(&good, &k).is_ok());
        let mut rng = Rng::new(11);
        for at in 0..good.len() {
            let mut p = good.clone();
            p[at] ^= 1 << rng.below(8);
            let before = p.clone();
            let r = decode_in_place(&mut p, Some(&k)).map(|_| ());
            assert!(r.is_err(), "a flipped bit at byte {at} was accepted");
            assert_eq!(p, before, "byte {at}: a refused datagram was modified");
        }
        // Payload, header (associated data) and tag each: BadMac.
        for at in [HEADER_LEN + 3, 16, 12, good.len() - 1] {
            let mut p = good.clone();
            p[at] ^= 0x10;
            assert_eq!(open(&p, &k).unwrap_err(), DropReason::BadMac, "byte {at}");
        }
        // The result flag flipped: the other direction's key, and the header changed.
        let mut p = good.clone();
        p[5] |= FLAG_RESULT;
        assert_eq!(open(&p, &k).unwrap_err(), DropReason::BadMac);
    }

    #[test]
    fn a_replayed_sealed_datagram_is_refused_as_duplicate_then_stale() {
        let k = sealed_key(1);
        let enc = Encoder::new(5, Flow::ToWorker, 64, Some(k.clone())).unwrap();
        let first = sealed(&enc, 10, &[3u8; 100]);
        let mut re = Reassembler::new(5, Flow::ToWorker, 100, 3);
        let mut bytes = first[0].clone();
        let p = decode_in_place(&mut bytes, Some(&k)).unwrap();
        assert_eq!(re.accept(&p, 10, 10), Ok(Accepted::Partial { seq: 10 }));
        // The same bytes again (an attacker's copy): authentic, but a duplicate.
        let mut replay = first[0].clone();
        let p = decode_in_place(&mut replay, Some(&k)).unwrap();
        assert_eq!(re.accept(&p, 10, 10), Err(DropReason::Duplicate));
        // Once newer periods moved on, stale.
        for seq in 11..14 {
            for f in sealed(&enc, seq, &[3u8; 100]) {
                let mut d = f.clone();
                let p = decode_in_place(&mut d, Some(&k)).unwrap();
                let _ = re.accept(&p, seq - 2, seq);
            }
        }
        let mut replay = first[1].clone();
        let p = decode_in_place(&mut replay, Some(&k)).unwrap();
        assert_eq!(re.accept(&p, 12, 13), Err(DropReason::Stale));
    }

    #[test]
    fn a_sealed_datagram_fails_under_every_other_key() {
        let k = sealed_key(1);
        let enc = Encoder::new(5, Flow::ToWorker, 64, Some(k.clone())).unwrap();
        let good = sealed(&enc, 10, &[7u8; 100]).swap_remove(0);
        // Another session's sealed key (other nonces), another shared key, the
        // same session's MAC key, no key, and the immutable decode.
        let other_session = sealed_key(3);
        let other_shared = Key::new(&[9u8; 32])
            .unwrap()
            .sealed_session(&[1; 32], &[2; 32]);
        let mac_key = key().session(&[1; 32], &[2; 32]);
        for (what, wrong) in [
            ("other session", Some(&other_session)),
            ("other shared key", Some(&other_shared)),
            ("the session's MAC key", Some(&mac_key)),
            ("no key", None),
        ] {
            let mut d = good.clone();
            assert_eq!(
                decode_in_place(&mut d, wrong).map(|_| ()),
                Err(DropReason::BadMac),
                "{what}"
            );
        }
        assert_eq!(decode(&good, Some(&k)), Err(DropReason::BadMac));
        // And a MAC'd datagram under the sealed key: refused, never read as plaintext.
        let menc = Encoder::new(5, Flow::ToWorker, 64, Some(mac_key.clone())).unwrap();
        let mut plain = fragments(&menc, 10, &[7u8; 100]).swap_remove(0);
        assert!(decode_in_place(&mut plain.clone(), Some(&mac_key)).is_ok());
        assert_eq!(
            decode_in_place(&mut plain, Some(&k)).map(|_| ()),
            Err(DropReason::BadMac)
        );
        assert_eq!(format!("{k:?}"), "Key(<hidden>, sealed)");
        assert!(k.is_sealed() && !mac_key.is_sealed());
    }

    /// With a zero payload the ciphertext is the keystream: two equal
    /// keystreams would be one nonce used twice (or both directions keyed
    /// alike).
    #[test]
    fn sealed_keystreams_never_repeat_over_many_blocks_and_both_ways() {
        let k = sealed_key(1);
        let zeros = [0u8; 300];
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for flow in [Flow::ToWorker, Flow::FromWorker] {
            for stream in [5u32, 6] {
                let enc = Encoder::new(stream, flow, 100, Some(k.clone())).unwrap();
                for seq in (0..5000u64).chain([MAX_SEALED_SEQ - 1, MAX_SEALED_SEQ]) {
                    for f in sealed(&enc, seq, &zeros) {
                        let stream_bytes: [u8; 32] =
                            f[HEADER_LEN..HEADER_LEN + 32].try_into().unwrap();
                        assert!(
                            seen.insert(stream_bytes),
                            "keystream repeated: {flow:?} stream {stream} seq {seq}"
                        );
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 2 * 2 * 5002 * 3);
    }

    #[test]
    fn mutated_sealed_datagrams_never_open_never_panic_and_never_allocate() {
        let k = sealed_key(1);
        let mac = key().session(&[1; 32], &[2; 32]);
        let enc = Encoder::new(5, Flow::FromWorker, 64, Some(k.clone())).unwrap();
        let good = sealed(&enc, 10, &[7u8; 100]).swap_remove(0);
        let mut rng = Rng::new(99);
        let mut buf = vec![0u8; good.len() + 2];
        for i in 0..50_000 {
            let len = good.len() + rng.below(3) - 1;
            buf[..good.len()].copy_from_slice(&good);
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(len);
                buf[at] ^= 1 << rng.below(8);
            }
            let key = [Some(&k), Some(&mac), None][i % 3];
            let unchanged = buf[..len] == good[..];
            let r = assert_no_alloc::assert_no_alloc(|| {
                decode_in_place(&mut buf[..len], key).map(|p| p.header)
            });
            // A mutated sealed datagram opens under no key (flips that
            // cancel out leave it as it was: then under the sealed key only).
            if let Ok(h) = r {
                assert!(unchanged && i % 3 == 0 && h.sealed, "case {i} opened");
            }
        }
    }

    #[test]
    fn an_encoder_never_seals_a_nonce_twice_and_refuses_to_wrap() {
        let k = sealed_key(1);
        let mut enc = Encoder::new(5, Flow::FromWorker, 40, Some(k.clone())).unwrap();
        let p = [1u8; 100];
        let mut buf = vec![0u8; enc.max_datagram()];
        let mut seal = |enc: &Encoder, seq, i| enc.encode(&mut buf, seq, &p, i);
        assert_eq!(enc.fragments(100), 3);
        for i in 0..3 {
            assert!(seal(&enc, 7, i) > 0);
        }
        // The same period again, a fragment again, or out of order: refused.
        assert_eq!(seal(&enc, 7, 0), 0);
        assert_eq!(seal(&enc, 7, 2), 0);
        assert_eq!(seal(&enc, 9, 1), 0);
        // A period reordered (8 after 9) is sealed once, within 64 of the highest.
        assert!(seal(&enc, 9, 0) > 0);
        assert!(seal(&enc, 8, 0) > 0);
        assert_eq!(seal(&enc, 8, 0), 0);
        assert!(seal(&enc, 100, 0) > 0);
        assert_eq!(seal(&enc, 36, 0), 0, "more than 64 below the highest");
        assert!(seal(&enc, 37, 0) > 0);
        assert!(seal(&enc, MAX_SEALED_SEQ, 0) > 0);
        assert_eq!(seal(&enc, MAX_SEALED_SEQ + 1, 0), 0, "the nonce would wrap");
        assert_eq!(seal(&enc, u64::MAX, 0), 0);
        assert_eq!(enc.refused(), 7);
        // A new key starts afresh; a MAC'd encoder keeps encoding repeats.
        enc.set_key(Some(sealed_key(4)));
        assert!(enc.encode(&mut buf, 7, &p, 0) > 0);
        assert_eq!(enc.refused(), 0);
        let plain = Encoder::new(5, Flow::FromWorker, 40, Some(key())).unwrap();
        assert!(plain.encode(&mut buf, 7, &p, 0) > 0);
        assert!(plain.encode(&mut buf, 7, &p, 0) > 0);
    }

    #[test]
    fn mtu_too_small_is_refused_with_the_minimum() {
        let e = max_chunk(100, IPV4_UDP_OVERHEAD, true).unwrap_err();
        assert!(e.message().contains("at least 140 bytes"), "{e}");
        assert_eq!(max_chunk(1500, IPV4_UDP_OVERHEAD, false).unwrap(), 1440);
        assert_eq!(max_chunk(1500, IPV4_UDP_OVERHEAD, true).unwrap(), 1424);
        assert!(Key::new(&[0; 15]).is_err());
        assert_eq!(format!("{:?}", key()), "Key(<hidden>)");
    }
}
