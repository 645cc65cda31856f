//! The network load: UDP ping-pong between two sockets on 127.0.0.1 (only
//! loopback, never the outside world), like Varoquaux's `ping`, but without
//! depending on a remote host.

use super::{Until, Work};
use crate::error::{Error, ErrorKind, Result};
use std::io::ErrorKind as IoKind;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

/// Datagram size: ping's default 56 data bytes + 8 header bytes.
const SIZE: usize = 64;
/// How long the pinger waits for an answer before counting it lost.
const TIMEOUT: Duration = Duration::from_millis(50);

fn err(what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("net load: cannot {what} on 127.0.0.1: {e}; the loopback interface must be up (ip link set lo up)"),
    )
}

/// Two UDP sockets on 127.0.0.1, each connected to the other.
pub(super) fn pair() -> Result<(UdpSocket, UdpSocket)> {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| err("bind a UDP socket", e))?;
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| err("bind a UDP socket", e))?;
    a.connect(b.local_addr().map_err(|e| err("query a socket", e))?)
        .map_err(|e| err("connect a UDP socket", e))?;
    b.connect(a.local_addr().map_err(|e| err("query a socket", e))?)
        .map_err(|e| err("connect a UDP socket", e))?;
    for s in [&a, &b] {
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(|e| err("set a socket timeout", e))?;
    }
    Ok((a, b))
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        IoKind::WouldBlock | IoKind::TimedOut | IoKind::Interrupted | IoKind::ConnectionRefused
    )
}

/// Sends numbered datagrams and counts the answers that carry the same number.
pub(super) fn pinger(until: &Until<'_>, s: UdpSocket) -> Result<Work> {
    let mut w = Work::default();
    let mut out = [0u8; SIZE];
    let mut back = [0u8; SIZE];
    let mut seq: u64 = 0;
    'send: while !until.done() {
        seq += 1;
        out[..8].copy_from_slice(&seq.to_le_bytes());
        match s.send(&out) {
            Ok(_) => {}
            Err(e) if transient(&e) => continue,
            Err(e) => return Err(err("send a datagram", e)),
        }
        loop {
            match s.recv(&mut back) {
                Ok(n) if n >= 8 && back[..8] == out[..8] => {
                    w.round_trips += 1;
                    continue 'send;
                }
                // A late answer to an earlier datagram: keep waiting for this one.
                Ok(_) => {}
                Err(e) if e.kind() == IoKind::Interrupted && !until.done() => {}
                Err(e) if transient(&e) => {
                    w.lost_datagrams += 1;
                    continue 'send;
                }
                Err(e) => return Err(err("receive a datagram", e)),
            }
        }
    }
    Ok(w)
}

/// Echoes every datagram back until done.
pub(super) fn ponger(until: &Until<'_>, s: UdpSocket) -> Result<Work> {
    let mut buf = [0u8; SIZE];
    while !until.done() {
        match s.recv(&mut buf) {
            Ok(n) => match s.send(&buf[..n]) {
                Ok(_) => {}
                Err(e) if transient(&e) => {}
                Err(e) => return Err(err("send a datagram", e)),
            },
            Err(e) if transient(&e) => {}
            Err(e) => return Err(err("receive a datagram", e)),
        }
    }
    Ok(Work::default())
}
