//! The pre-authentication gate of a worker's control port: what a stranger
//! gets before its first message's MAC is verified.
//!
//! One thread polls the listening socket and every pending connection
//! (non-blocking, `poll(2)`); nothing else is spent on a stranger: no
//! thread, and at most [`MAX_GREETING`] then [`MAX_FIRST_LINE`] bytes of
//! buffer. A connection leaves the gate in one of three ways:
//!
//! * **authenticated**: it sent a greeting and a first message (a master
//!   sends a ping) whose MAC verifies (any first message without a key);
//!   it goes to the caller, who gives it a session thread;
//! * **deadline**: the whole handshake did not finish within
//!   [`GateConfig::login_grace`] of the accept (OpenSSH's LoginGraceTime),
//!   however many bytes trickled in;
//! * **early drop** ([`Startups`], OpenSSH's MaxStartups): with `n`
//!   strangers pending when another connects, the *oldest* stranger is
//!   dropped with probability 0 below `start`, `rate` % at `start`, rising
//!   linearly to 100 % at `full`. Unlike sshd, which refuses the newcomer,
//!   the gate drops the stranger that has had longest: a master finishes its
//!   handshake within one round trip, so a pool of held slow connections
//!   cannot lock masters out; the number pending never exceeds `full`.
//!
//! A dropped stranger gets one clear-text line saying why
//! ([`control::refusal_line`]) when its socket takes it, then is closed.
//!
//! # RT contract
//! None of this runs on the RT path: it allocates and makes syscalls.

use crate::control::{self, Conn, Nonces, Reply, Request, MAX_FIRST_LINE, MAX_GREETING};
use crate::error::{Error, ErrorKind, Result};
use crate::wire::Key;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// OpenSSH's MaxStartups for the control port: `start:rate:full`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Startups {
    /// Strangers pending below which none is dropped (≥ 1).
    pub start: usize,
    /// Drop probability in % at `start` (0–100).
    pub rate: u32,
    /// Strangers pending at which one is always dropped (≥ `start`): the cap.
    pub full: usize,
}

impl Startups {
    /// sshd's default, `10:30:100`.
    pub const DEFAULT: Startups = Startups {
        start: 10,
        rate: 30,
        full: 100,
    };

    /// Probability in % that a stranger is dropped when another connects
    /// while `pending` are waiting.
    pub fn drop_percent(&self, pending: usize) -> u32 {
        if pending < self.start {
            0
        } else if pending >= self.full {
            100
        } else {
            let span = (self.full - self.start) as u64;
            let over = (pending - self.start) as u64;
            self.rate + ((100 - u64::from(self.rate)) * over / span) as u32
        }
    }

    /// Checks the ranges.
    ///
    /// # Errors
    /// `start` is 0, `start > full`, or `rate > 100`.
    pub fn validate(&self) -> Result<()> {
        if self.start == 0 || self.start > self.full || self.rate > 100 {
            return Err(Error::invalid(format!(
                "max-startups {self}: use START:RATE:FULL with 1 ≤ START ≤ FULL and RATE ≤ 100 \
                 (e.g. 10:30:100), or one number N for N:100:N"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for Startups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.start, self.rate, self.full)
    }
}

impl std::str::FromStr for Startups {
    type Err = Error;

    /// `START:RATE:FULL`, or `N` for `N:100:N` (no early drop, a hard cap).
    fn from_str(text: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "max-startups '{text}': use START:RATE:FULL with 1 ≤ START ≤ FULL and RATE ≤ \
                 100 (e.g. 10:30:100), or one number N for N:100:N"
            ))
        };
        let n: Vec<&str> = text.split(':').collect();
        let s = match n.as_slice() {
            [full] => {
                let full = full.trim().parse().map_err(|_| bad())?;
                Startups {
                    start: full,
                    rate: 100,
                    full,
                }
            }
            [start, rate, full] => Startups {
                start: start.trim().parse().map_err(|_| bad())?,
                rate: rate.trim().parse().map_err(|_| bad())?,
                full: full.trim().parse().map_err(|_| bad())?,
            },
            _ => return Err(bad()),
        };
        s.validate().map_err(|_| bad())?;
        Ok(s)
    }
}

/// Bounds of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateConfig {
    /// Whole-handshake deadline from the accept (greeting and first message).
    pub login_grace: Duration,
    /// Cap on strangers, with early drop.
    pub startups: Startups,
}

impl Default for GateConfig {
    /// 10 s and `10:30:100`.
    fn default() -> Self {
        Self {
            login_grace: Duration::from_secs(10),
            startups: Startups::DEFAULT,
        }
    }
}

/// What the gate did since the worker started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Strangers pending now.
    pub pending: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections that authenticated (handed to a session thread).
    pub authenticated: u64,
    /// Strangers dropped at the handshake deadline.
    pub timed_out: u64,
    /// Strangers dropped early (over `start`, or out of file descriptors).
    pub early_dropped: u64,
    /// Strangers that did not speak the protocol (bad greeting, line too long, bad JSON).
    pub malformed: u64,
    /// Strangers whose first message's MAC failed (no key or another key).
    pub refused: u64,
    /// Strangers that closed their connection (or whose socket failed) before authenticating.
    pub abandoned: u64,
}

/// The gate's counters, shared with whoever reports them.
#[derive(Debug, Default)]
pub(crate) struct GateCounters {
    pending: AtomicU64,
    accepted: AtomicU64,
    authenticated: AtomicU64,
    timed_out: AtomicU64,
    early_dropped: AtomicU64,
    malformed: AtomicU64,
    refused: AtomicU64,
    abandoned: AtomicU64,
}

impl GateCounters {
    pub(crate) fn snapshot(&self) -> GateStats {
        firmtime_rt::load_counters!(GateStats {
            pending, accepted, authenticated, timed_out, early_dropped, malformed, refused,
            abandoned,
        } from self)
    }
}

/// What leaves the gate.
pub(crate) enum Passed {
    /// A connection whose first message verified, with that message.
    Authenticated(Box<Conn>, Request),
    /// A stranger whose MAC failed, or a peer whose authenticated first
    /// message could not be decoded (either was told why).
    Refused {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        message: String,
    },
    /// Strangers dropped since the last such report (at most one a second).
    Dropped(GateStats),
}

struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    deadline: Instant,
    buf: Vec<u8>,
    nonces: Option<Nonces>,
}

enum Step {
    Wait,
    Ready,
    Closed,
    Malformed(String),
}

impl Pending {
    /// Reads what is there without blocking; exchanges greetings when the
    /// master's is complete.
    fn read_some(&mut self, keyed: bool) -> Step {
        let mut scratch = [0u8; 1024];
        loop {
            let limit = if self.nonces.is_none() {
                MAX_GREETING
            } else {
                MAX_FIRST_LINE
            };
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                if self.nonces.is_some() {
                    return Step::Ready;
                }
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                let Some(master) = control::parse_master_greeting(&line) else {
                    return Step::Malformed(format!(
                        "not a {} {} greeting",
                        control::GREETING,
                        control::PROTOCOL
                    ));
                };
                self.buf.drain(..=i);
                let nonces = Nonces {
                    worker: control::worker_nonce(),
                    master,
                };
                let greet = control::worker_greeting(&nonces.worker, keyed);
                // A fresh socket's send buffer takes 100 bytes at once.
                if !matches!(self.stream.write(greet.as_bytes()), Ok(n) if n == greet.len()) {
                    return Step::Closed;
                }
                self.nonces = Some(nonces);
                continue;
            }
            if self.buf.len() >= limit {
                return Step::Malformed(if self.nonces.is_none() {
                    format!("a greeting longer than {MAX_GREETING} bytes")
                } else {
                    format!(
                        "a first message longer than {MAX_FIRST_LINE} bytes: before \
                         authentication a worker reads at most that (masters send a ping first)"
                    )
                });
            }
            let want = (limit - self.buf.len()).min(scratch.len());
            match self.stream.read(&mut scratch[..want]) {
                Ok(0) => return Step::Closed,
                Ok(n) => self.buf.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Wait,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Closed,
            }
        }
    }

    /// Tells the stranger why, if its socket takes it at once, and closes it.
    fn refuse(self, why: &str) {
        let mut s = self.stream;
        let _ = s.write(control::refusal_line(why).as_bytes());
    }
}

/// A small PRNG for early drop (xorshift64*, seeded from the kernel).
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let n = control::worker_nonce();
        Self(u64::from_le_bytes([n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]]) | 1)
    }

    fn percent(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % 100
    }
}

/// Runs the gate until `stop`: accepts on `tcp` (non-blocking) and passes
/// what leaves it to `pass`.
pub(crate) fn run(
    tcp: &TcpListener,
    cfg: GateConfig,
    key: Option<&Key>,
    stop: &AtomicBool,
    counters: &GateCounters,
    mut pass: impl FnMut(Passed),
) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut rng = Rng::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut reported = counters.snapshot();
    let mut last_report = Instant::now();
    let grace_text = firmtime_rt::units::format_duration(cfg.login_grace);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_millis(100))
            .min(Duration::from_millis(100));
        fds.clear();
        fds.push(libc::pollfd {
            fd: tcp.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(pending.iter().map(|p| libc::pollfd {
            fd: p.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let r = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis().max(1) as libc::c_int,
            )
        };
        if r < 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // Strangers that sent something, in order; then deadlines; then newcomers.
        let mut kept = VecDeque::with_capacity(pending.len());
        for (mut p, fd) in pending.drain(..).zip(fds[1..].iter()) {
            if fd.revents == 0 {
                kept.push_back(p);
                continue;
            }
            match p.read_some(key.is_some()) {
                Step::Wait => kept.push_back(p),
                Step::Closed => {
                    counters.abandoned.fetch_add(1, Ordering::Relaxed);
                }
                Step::Malformed(why) => {
                    counters.malformed.fetch_add(1, Ordering::Relaxed);
                    p.refuse(&why);
                }
                Step::Ready => {
                    if let Some(out) = authenticate(p, key, counters) {
                        pass(out);
                    }
                }
            }
        }
        pending = kept;
        let now = Instant::now();
        while pending.front().is_some_and(|p| p.deadline <= now) {
            if let Some(p) = pending.pop_front() {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                p.refuse(&format!(
                    "no authenticated first message within {grace_text} of connecting \
                     (the worker's --login-grace)"
                ));
            }
        }
        if fds[0].revents != 0 {
            accept_some(tcp, cfg, &mut pending, &mut rng, counters);
        }
        counters
            .pending
            .store(pending.len() as u64, Ordering::Relaxed);
        if last_report.elapsed() >= Duration::from_secs(1) {
            let now_stats = counters.snapshot();
            let delta = GateStats {
                timed_out: now_stats.timed_out - reported.timed_out,
                early_dropped: now_stats.early_dropped - reported.early_dropped,
                malformed: now_stats.malformed - reported.malformed,
                abandoned: now_stats.abandoned - reported.abandoned,
                ..now_stats
            };
            if delta.timed_out + delta.early_dropped + delta.malformed > 0 {
                pass(Passed::Dropped(delta));
            }
            reported = now_stats;
            last_report = Instant::now();
        }
    }
    counters.pending.store(0, Ordering::Relaxed);
}

/// Accepts what the backlog holds (at most 256 at a time, so that pending
/// strangers are read), dropping the oldest stranger as [`Startups`] says.
fn accept_some(
    tcp: &TcpListener,
    cfg: GateConfig,
    pending: &mut VecDeque<Pending>,
    rng: &mut Rng,
    counters: &GateCounters,
) {
    let busy = format!(
        "too many unauthenticated connections (the worker's --max-startups {}): try again",
        cfg.startups
    );
    for _ in 0..256 {
        match tcp.accept() {
            Ok((stream, peer)) => {
                counters.accepted.fetch_add(1, Ordering::Relaxed);
                let p = cfg.startups.drop_percent(pending.len());
                if p >= 100 || (p > 0 && rng.percent() < p) {
                    if let Some(old) = pending.pop_front() {
                        counters.early_dropped.fetch_add(1, Ordering::Relaxed);
                        old.refuse(&busy);
                    }
                }
                if stream.set_nonblocking(true).is_err() {
                    counters.abandoned.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                pending.push_back(Pending {
                    stream,
                    peer,
                    deadline: Instant::now() + cfg.login_grace,
                    buf: Vec::new(),
                    nonces: None,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                // Out of descriptors: a stranger makes room for the next connection.
                match pending.pop_front() {
                    Some(old) => {
                        counters.early_dropped.fetch_add(1, Ordering::Relaxed);
                        old.refuse(&busy);
                    }
                    None => {
                        std::thread::sleep(Duration::from_millis(10));
                        return;
                    }
                }
            }
            Err(_) => return,
        }
    }
}

/// Verifies a complete first message; the connection leaves the gate either way.
fn authenticate(p: Pending, key: Option<&Key>, counters: &GateCounters) -> Option<Passed> {
    let Pending {
        stream,
        peer,
        buf,
        nonces,
        ..
    } = p;
    let conn = nonces
        .filter(|_| stream.set_nonblocking(false).is_ok())
        .and_then(|nonces| Conn::from_greeted(stream, key.cloned(), peer, nonces, buf).ok());
    let Some(mut conn) = conn else {
        counters.abandoned.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    // The first line is in the read-ahead: this reads no socket; the timeout bounds the error's write.
    let _ = conn.set_timeout(Some(Duration::from_secs(1)));
    match conn.recv::<Request>() {
        Ok(req) => {
            counters.authenticated.fetch_add(1, Ordering::Relaxed);
            Some(Passed::Authenticated(Box::new(conn), req))
        }
        // Authenticated, but the message does not decode: told (with a MAC) and logged.
        Err(e) if e.kind() == ErrorKind::InvalidInput => {
            counters.authenticated.fetch_add(1, Ordering::Relaxed);
            let _ = conn.send(&Reply::Error {
                message: e.message().to_string(),
            });
            Some(Passed::Refused {
                peer,
                message: e.to_string(),
            })
        }
        Err(e) => {
            let _ = conn.send_unauthenticated(&Reply::Error {
                message: e.message().to_string(),
            });
            if e.kind() == ErrorKind::PermissionDenied {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                Some(Passed::Refused {
                    peer,
                    message: e.to_string(),
                })
            } else {
                counters.malformed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startups_parse_print_and_refuse_bad_ranges() {
        let s: Startups = "10:30:100".parse().unwrap();
        assert_eq!(s, Startups::DEFAULT);
        assert_eq!(s.to_string(), "10:30:100");
        let s: Startups = "5".parse().unwrap();
        assert_eq!(
            s,
            Startups {
                start: 5,
                rate: 100,
                full: 5
            }
        );
        for bad in ["", "0", "10:30", "20:30:10", "1:101:5", "a:b:c", "0:30:100"] {
            let e = bad.parse::<Startups>().unwrap_err();
            assert!(e.message().contains("START:RATE:FULL"), "{bad}: {e}");
        }
    }

    #[test]
    fn drop_probability_rises_from_rate_at_start_to_all_at_full() {
        let s = Startups::DEFAULT;
        assert_eq!(s.drop_percent(0), 0);
        assert_eq!(s.drop_percent(9), 0);
        assert_eq!(s.drop_percent(10), 30);
        assert_eq!(s.drop_percent(55), 65);
        assert_eq!(s.drop_percent(99), 99);
        assert_eq!(s.drop_percent(100), 100);
        assert_eq!(s.drop_percent(5000), 100);
        let hard = Startups {
            start: 3,
            rate: 100,
            full: 3,
        };
        assert_eq!(hard.drop_percent(2), 0);
        assert_eq!(hard.drop_percent(3), 100);
    }

    #[test]
    fn early_drop_rng_is_roughly_uniform() {
        let mut r = Rng(0x1234_5678_9abc_def1);
        let below_30 = (0..100_000).filter(|_| r.percent() < 30).count();
        assert!((27_000..33_000).contains(&below_30), "{below_30}");
    }
}
