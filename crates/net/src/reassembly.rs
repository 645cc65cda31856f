//! Reassembly of a period's fragments, in any arrival order, into
//! preallocated per-sequence slots.
//!
//! A [`Reassembler`] holds a small ring of slots (sequence `s` lives in slot
//! `s % slots`), each with a payload buffer of the layout's length and a
//! bitmap of the fragments received. A fragment is dropped, and the reason
//! returned, if it belongs to another stream or direction, disagrees with the
//! layout's length, lies outside the caller's window of sequence numbers,
//! repeats a fragment already held, or disagrees with earlier fragments of
//! its period on the fragment count.
//!
//! # RT contract
//! [`Reassembler::new`] allocates every slot. After that every method is
//! **RT-safe**: no allocation, no lock.

use crate::block::Flow;
use crate::wire::{fragment_span, DropReason, Packet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    Filling,
    Complete,
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    state: State,
    count: u16,
    received: u16,
    bits: Vec<u64>,
    buf: Vec<u8>,
}

/// What a fragment accepted by [`Reassembler::accept`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Stored; the period still misses fragments.
    Partial {
        /// The period's sequence number.
        seq: u64,
    },
    /// The period's last missing fragment: its payload is complete.
    Complete {
        /// The period's sequence number.
        seq: u64,
    },
}

/// Reassembles one stream's periods in one direction.
#[derive(Debug)]
pub struct Reassembler {
    stream_id: u32,
    flow: Flow,
    total: usize,
    slots: Vec<Slot>,
}

impl Reassembler {
    /// A reassembler for `stream_id`'s packets in `flow`, whose periods carry
    /// `total` payload bytes, with `slots` slots (at least 1).
    pub fn new(stream_id: u32, flow: Flow, total: usize, slots: usize) -> Self {
        let max_frags = total.clamp(1, usize::from(u16::MAX));
        let words = max_frags.div_ceil(64);
        let slots = (0..slots.max(1))
            .map(|_| Slot {
                seq: 0,
                state: State::Empty,
                count: 0,
                received: 0,
                bits: vec![0; words],
                buf: vec![0; total],
            })
            .collect();
        Self {
            stream_id,
            flow,
            total,
            slots,
        }
    }

    /// The stream id served.
    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// Payload bytes per period.
    pub fn payload_len(&self) -> usize {
        self.total
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Checks `pkt` against this stream (id, direction, length) without
    /// storing it. **RT-safe.**
    ///
    /// # Errors
    /// [`DropReason::ForeignStream`], [`DropReason::WrongFlow`],
    /// [`DropReason::LayoutMismatch`] or [`DropReason::BadLength`] (fields
    /// that break the fragmentation rule).
    pub fn check(&self, pkt: &Packet<'_>) -> Result<(), DropReason> {
        let h = &pkt.header;
        if h.stream_id != self.stream_id {
            Err(DropReason::ForeignStream)
        } else if h.flow != self.flow {
            Err(DropReason::WrongFlow)
        } else if h.total_len as usize != self.total {
            Err(DropReason::LayoutMismatch)
        } else if usize::from(h.frag_len) != pkt.payload.len()
            || fragment_span(
                self.total,
                usize::from(h.frag_count),
                usize::from(h.frag_index),
            ) != Some((h.frag_offset as usize, pkt.payload.len()))
        {
            // `decode` guarantees this; a hand-built packet may not.
            Err(DropReason::BadLength)
        } else {
            Ok(())
        }
    }

    /// Stores a decoded fragment whose sequence number must lie in
    /// `min_seq..=max_seq`. A slot holding an older period is recycled; a
    /// slot holding a newer one makes the fragment stale. **RT-safe.**
    ///
    /// # Errors
    /// Why the fragment was dropped: see [`Self::check`], plus
    /// [`DropReason::Stale`], [`DropReason::Unsolicited`] (above `max_seq`),
    /// [`DropReason::Duplicate`] and [`DropReason::BadLength`] (a fragment
    /// count that disagrees with earlier fragments of the period).
    pub fn accept(
        &mut self,
        pkt: &Packet<'_>,
        min_seq: u64,
        max_seq: u64,
    ) -> Result<Accepted, DropReason> {
        self.check(pkt)?;
        let h = &pkt.header;
        let seq = h.seq;
        if seq < min_seq {
            return Err(DropReason::Stale);
        }
        if seq > max_seq {
            return Err(DropReason::Unsolicited);
        }
        let n = self.slots.len() as u64;
        let slot = &mut self.slots[(seq % n) as usize];
        if slot.state == State::Empty || slot.seq < seq {
            let words = usize::from(h.frag_count).div_ceil(64);
            if words > slot.bits.len() {
                // More fragments than bytes: decode's span rule forbids it.
                return Err(DropReason::BadLength);
            }
            slot.bits[..words].fill(0);
            slot.seq = seq;
            slot.state = State::Filling;
            slot.count = h.frag_count;
            slot.received = 0;
        } else if slot.seq > seq {
            return Err(DropReason::Stale);
        }
        if slot.state == State::Complete {
            return Err(DropReason::Duplicate);
        }
        if slot.count != h.frag_count {
            return Err(DropReason::BadLength);
        }
        let i = usize::from(h.frag_index);
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if slot.bits[word] & bit != 0 {
            return Err(DropReason::Duplicate);
        }
        slot.bits[word] |= bit;
        let off = h.frag_offset as usize;
        slot.buf[off..off + pkt.payload.len()].copy_from_slice(pkt.payload);
        slot.received += 1;
        if slot.received == slot.count {
            slot.state = State::Complete;
            Ok(Accepted::Complete { seq })
        } else {
            Ok(Accepted::Partial { seq })
        }
    }

    /// The payload of period `seq` if it is complete. **RT-safe.**
    pub fn complete(&self, seq: u64) -> Option<&[u8]> {
        let slot = &self.slots[(seq % self.slots.len() as u64) as usize];
        (slot.state == State::Complete && slot.seq == seq).then_some(&slot.buf[..])
    }

    /// Whether any fragment of period `seq` is held (complete or not). **RT-safe.**
    pub fn has_any(&self, seq: u64) -> bool {
        let slot = &self.slots[(seq % self.slots.len() as u64) as usize];
        slot.state != State::Empty && slot.seq == seq
    }

    /// The period the slot of `seq` holds now, and whether it is complete;
    /// `None` if the slot is empty. **RT-safe.**
    pub fn slot_of(&self, seq: u64) -> Option<(u64, bool)> {
        let slot = &self.slots[(seq % self.slots.len() as u64) as usize];
        (slot.state != State::Empty).then_some((slot.seq, slot.state == State::Complete))
    }

    /// Forgets every slot (e.g. when a session restarts). **RT-safe.**
    pub fn reset(&mut self) {
        for s in &mut self.slots {
            s.state = State::Empty;
        }
    }
}
