//! The wire format: one versioned 32-byte header, a fragment of a period's
//! payload, and an optional 16-byte keyed MAC. Pure functions, no I/O.
//!
//! docs/WIRE.md has the byte-offset table and the drop rules. In short:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `FTNB` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | flags: bit 0 = result (worker → master), bit 1 = MAC present |
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
//! # RT contract
//! [`Encoder::encode`], [`decode`], [`Key::tag`] and [`Key::verify`] are
//! **RT-safe**: no allocation, no lock, work bounded by the datagram length.
//! [`decode`] never panics, whatever the bytes.

use crate::block::Flow;
use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

/// The first four bytes of every packet.
pub const MAGIC: [u8; 4] = *b"FTNB";
/// The wire format version this crate speaks.
pub const VERSION: u8 = 1;
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
const KNOWN_FLAGS: u8 = FLAG_RESULT | FLAG_MAC;

type HmacSha256 = Hmac<Sha256>;

/// A pre-shared key. Every packet then carries HMAC-SHA256 over header and
/// payload, truncated to [`MAC_LEN`] bytes. `Debug` never shows the key.
#[derive(Clone)]
pub struct Key {
    mac: HmacSha256,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<hidden>)")
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
                "the key has {} bytes; use at least {} random bytes (e.g. `head -c 32 /dev/urandom > net.key`)",
                bytes.len(),
                Self::MIN_LEN
            )));
        }
        let mac = HmacSha256::new_from_slice(bytes)
            .map_err(|_| Error::invalid("HMAC refused the key"))?;
        Ok(Self { mac })
    }

    /// A key read from a file (its raw bytes, as `head -c 32 /dev/urandom` writes them).
    ///
    /// # Errors
    /// The file cannot be read, or holds fewer than [`Key::MIN_LEN`] bytes.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io(&format!("reading key file {}", path.display()), e))?;
        Self::new(&bytes).map_err(|e| {
            Error::invalid(format!("key file {}: {}", path.display(), e.message()))
        })
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
    /// Whether a MAC followed the payload.
    pub mac: bool,
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
        DropReason::ALL
            .iter()
            .position(|&r| r == self)
            .unwrap_or(0)
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
        DropReason::ALL.iter().copied().zip(self.counts.iter().copied())
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
        })
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
/// # Errors
/// The [`DropReason`] of the first check that failed.
pub fn decode<'a>(buf: &'a [u8], key: Option<&Key>) -> Result<Packet<'a>, DropReason> {
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
    if has_mac != key.is_some() {
        return Err(DropReason::BadMac);
    }
    let header = Header {
        flow: if flags & FLAG_RESULT != 0 {
            Flow::FromWorker
        } else {
            Flow::ToWorker
        },
        mac: has_mac,
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
