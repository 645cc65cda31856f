//! Finding workers on the LAN: a probe to a worker's port (unicast, or the
//! subnet's broadcast address) is answered by every `firmtime net worker`
//! that receives it.
//!
//! The probe is an ordinary data-plane packet (docs/WIRE.md) of the
//! reserved stream [`DISCOVERY_STREAM`] carrying 16 random bytes; the worker
//! serves that stream like any other, answering 32 bytes: `FTWK`, the
//! probe's bytes and the number of sessions it serves (u64 LE), plus
//! padding. The worker keeps no sequence state for probes: each is answered
//! whatever its sequence number. With a key, probe and answer carry a MAC, so only holders of the
//! key find the workers. A worker listening on one address (not `0.0.0.0`)
//! does not receive broadcasts: probe it by unicast.
//!
//! # RT contract
//! Not RT code: [`discover`] allocates and blocks for its wait.

use crate::block::{BlockSet, BlockSpec, Direction, Flow, Layout};
use crate::error::{Error, Result};
use crate::sample::SampleType;
use crate::wire::{decode, max_chunk, Encoder, Key, IPV4_UDP_OVERHEAD, MAX_DATAGRAM};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stream id reserved for discovery; sessions use any other.
pub const DISCOVERY_STREAM: u32 = 0;
/// First bytes of an answer.
pub const ANSWER_MAGIC: [u8; 4] = *b"FTWK";
const PROBE_LEN: u32 = 16;
const ANSWER_LEN: u32 = 32;

/// The discovery stream's layout: 16 `u8` of probe in, 32 `u8` of answer out.
pub fn layout() -> Layout {
    Layout {
        blocks: vec![
            BlockSpec {
                ty: SampleType::U8,
                dir: Direction::ToWorker,
                len: PROBE_LEN,
            },
            BlockSpec {
                ty: SampleType::U8,
                dir: Direction::FromWorker,
                len: ANSWER_LEN,
            },
        ],
    }
}

/// The worker's side: fills the answer from the probe. **RT-safe.**
pub fn answer(blocks: &mut BlockSet, sessions: &AtomicU64) {
    let (Ok(probe), Ok(out)) = (blocks.id::<u8>(0), blocks.id::<u8>(1)) else {
        return;
    };
    let mut p = [0u8; PROBE_LEN as usize];
    p.copy_from_slice(blocks.get(probe));
    let out = blocks.get_mut(out);
    out.fill(0);
    out[..4].copy_from_slice(&ANSWER_MAGIC);
    out[4..20].copy_from_slice(&p);
    out[20..28].copy_from_slice(&sessions.load(Ordering::Relaxed).to_le_bytes());
}

/// A worker that answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its control and data address.
    pub addr: SocketAddr,
    /// Sessions it serves now.
    pub sessions: u64,
    /// Round trip of the probe.
    pub rtt: Duration,
}

/// Sends a probe to each target (a worker's address, or a broadcast address
/// with the workers' port) and collects answers for `wait`. Each worker is
/// listed once, sorted by address.
///
/// # Errors
/// The socket cannot be bound or set to broadcast; every send failed (the
/// message names the first target, e.g. no route to a broadcast address).
pub fn discover(targets: &[SocketAddr], key: Option<Key>, wait: Duration) -> Result<Vec<Found>> {
    let socket = UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
        .map_err(|e| Error::io("binding the discovery socket", e))?;
    socket
        .set_broadcast(true)
        .map_err(|e| Error::io("allowing broadcast on the discovery socket", e))?;
    let chunk = max_chunk(1500, IPV4_UDP_OVERHEAD, key.is_some())?;
    let enc = Encoder::new(DISCOVERY_STREAM, Flow::ToWorker, chunk, key.clone())?;
    let probe = crate::control::nonce()?;
    let probe = &probe[..PROBE_LEN as usize];
    let mut buf = vec![0u8; enc.max_datagram()];
    // Later probes get higher sequence numbers: the wall clock.
    let seq = firmtime_rt::clock::gettimeofday_ns();
    let len = enc.encode(&mut buf, seq, probe, 0);
    let sent_at = Instant::now();
    let mut first_err = None;
    let mut sent = 0;
    for t in targets {
        match socket.send_to(&buf[..len], t) {
            Ok(_) => sent += 1,
            Err(e) => {
                first_err.get_or_insert_with(|| Error::io(&format!("sending a probe to {t}"), e));
            }
        }
    }
    if sent == 0 {
        return Err(first_err.unwrap_or_else(|| Error::invalid("no target to probe")));
    }
    let mut found: Vec<Found> = Vec::new();
    let mut rbuf = vec![0u8; MAX_DATAGRAM + 1];
    let end = sent_at + wait;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        socket
            .set_read_timeout(Some(end - now))
            .map_err(|e| Error::io("setting the discovery timeout", e))?;
        let Ok((n, from)) = socket.recv_from(&mut rbuf) else {
            continue;
        };
        let Ok(pkt) = decode(&rbuf[..n], key.as_ref()) else {
            continue;
        };
        let h = pkt.header;
        let ok = h.stream_id == DISCOVERY_STREAM
            && h.flow == Flow::FromWorker
            && h.seq == seq
            && pkt.payload.len() == ANSWER_LEN as usize
            && pkt.payload[..4] == ANSWER_MAGIC
            && &pkt.payload[4..20] == probe;
        if ok && !found.iter().any(|f| f.addr == from) {
            let mut s = [0u8; 8];
            s.copy_from_slice(&pkt.payload[20..28]);
            found.push(Found {
                addr: from,
                sessions: u64::from_le_bytes(s),
                rtt: sent_at.elapsed(),
            });
        }
    }
    found.sort_by_key(|f| f.addr);
    Ok(found)
}
