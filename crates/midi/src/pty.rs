//! A pty peer for the raw backend: a MIDI cable and a tapper in software.
//!
//! - [`PtyPair::open`]: a pseudo-terminal, its slave side in raw mode. Give
//!   the slave (or its path) to a [`RawBackend`](crate::raw::RawBackend) and
//!   drive the master from here.
//! - [`PacedLoopback`]: reads every byte written to its fd and writes it
//!   back as a 31.25 kbaud MIDI cable would carry it — each byte 320 µs (10
//!   bits) after the line is free, on an ideal line clock that does not drift
//!   with the thread's wake-up jitter — on its own thread (SCHED_FIFO when
//!   asked). A raw backend on the other side sees a wire-speed MIDI loop, so
//!   FTAP's loop test runs on any machine.
//! - [`Tapper`]: writes Note On / Note Off (or any bytes) at known times and
//!   returns the ground truth: when each write began.
//!
//! # RT contract
//!
//! [`PacedLoopback::start`] allocates the byte queue and sets up the thread;
//! the thread's loop then does not allocate, lock or print. [`Tapper`] is a
//! test peer: [`Tapper::play`] allocates its result list before it starts.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::setup::{RtConditions, RtRequest};

use crate::error::{Error, ErrorKind, Result};
use crate::raw::{self, WIRE_BYTE_NS};
use crate::MidiMessage;

/// A pseudo-terminal: the master, the slave (in raw mode) and the slave's path.
#[derive(Debug)]
pub struct PtyPair {
    /// The master side (non-blocking, close-on-exec).
    pub master: OwnedFd,
    /// The slave side, already open and in raw mode, so the pty stays up
    /// until it is dropped even if nobody else opens the path.
    pub slave: OwnedFd,
    /// The slave's path (`/dev/pts/N`), for opening it by name.
    pub slave_path: PathBuf,
}

impl PtyPair {
    /// Opens a new pty pair with `posix_openpt`, `grantpt`, `unlockpt`,
    /// and puts the slave in raw mode (no echo, no translation).
    ///
    /// # Errors
    /// [`ErrorKind::NotPresent`] without `/dev/ptmx` (no devpts mounted),
    /// [`ErrorKind::Io`] for any other failing call.
    pub fn open() -> Result<Self> {
        let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: posix_openpt has no pointer arguments.
        let m = unsafe { libc::posix_openpt(flags) };
        if m < 0 {
            return Err(Error::last_os(
                "cannot open a pty master (/dev/ptmx)",
                "Mount devpts (`mount -t devpts devpts /dev/pts`) or run where ptys are available",
            ));
        }
        // SAFETY: `m` is a new descriptor owned by nobody else.
        let master = unsafe { OwnedFd::from_raw_fd(m) };
        // SAFETY: grantpt/unlockpt take an open master fd.
        if unsafe { libc::grantpt(m) } != 0 || unsafe { libc::unlockpt(m) } != 0 {
            return Err(Error::last_os("cannot unlock the pty slave", ""));
        }
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: `name` is valid for writes of its length.
        let rc = unsafe { libc::ptsname_r(m, name.as_mut_ptr(), name.len()) };
        if rc != 0 {
            return Err(Error::from_errno(rc, "cannot name the pty slave", ""));
        }
        // SAFETY: ptsname_r wrote a NUL-terminated string into `name`.
        let cname = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
        let slave_path = PathBuf::from(cname.to_string_lossy().into_owned());
        // SAFETY: `cname` is a valid NUL-terminated path.
        let s = unsafe {
            libc::open(
                cname.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if s < 0 {
            return Err(Error::last_os(
                &format!("cannot open the pty slave {}", slave_path.display()),
                "",
            ));
        }
        // SAFETY: `s` is a new descriptor owned by nobody else.
        let slave = unsafe { OwnedFd::from_raw_fd(s) };
        raw::make_raw(slave.as_raw_fd(), &slave_path.display().to_string())?;
        Ok(Self {
            master,
            slave,
            slave_path,
        })
    }
}

/// Options for a [`PacedLoopback`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacedOptions {
    /// Nanoseconds per byte: [`WIRE_BYTE_NS`] (320 µs) for 31.25 kbaud.
    pub byte_ns: u64,
    /// Real-time setup of the loopback's thread.
    pub rt: RtRequest,
    /// Bytes that may be on the virtual wire at once; more are counted in
    /// [`PacedStats::overruns`] and dropped, as a UART would.
    pub capacity: usize,
}

impl Default for PacedOptions {
    fn default() -> Self {
        Self {
            byte_ns: WIRE_BYTE_NS,
            rt: RtRequest::default(),
            capacity: 4096,
        }
    }
}

/// What a [`PacedLoopback`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacedStats {
    /// Bytes read from the fd.
    pub bytes_in: u64,
    /// Bytes written back.
    pub bytes_out: u64,
    /// Bytes dropped because the wire queue was full.
    pub overruns: u64,
    /// The os error that ended the thread early (0 for end of file / hang-up), if any.
    pub ended_by: Option<i32>,
}

#[derive(Debug, Default)]
struct PacedShared {
    stop: AtomicBool,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    overruns: AtomicU64,
    ended: AtomicBool,
    ended_errno: AtomicU64,
}

/// A software MIDI cable from an fd back to itself, paced at wire speed.
/// Stops (and closes the fd) when dropped or [`stop`](PacedLoopback::stop)ped.
#[derive(Debug)]
pub struct PacedLoopback {
    shared: Arc<PacedShared>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    conditions: RtConditions,
}

impl PacedLoopback {
    /// Starts the loopback thread on `fd` (typically [`PtyPair::master`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a zero `byte_ns` or capacity,
    /// [`ErrorKind::Realtime`] when the thread's real-time setup is refused,
    /// [`ErrorKind::Io`] for a failing system call.
    pub fn start(fd: OwnedFd, opts: PacedOptions) -> Result<Self> {
        if opts.byte_ns == 0 || opts.capacity == 0 {
            return Err(Error::invalid(
                "paced loopback: byte time and capacity must be at least 1",
            ));
        }
        let wake = Arc::new(raw::eventfd()?);
        let shared = Arc::new(PacedShared::default());
        let (tx, rx) = mpsc::sync_channel::<Result<RtConditions>>(1);
        let (ts, tw) = (Arc::clone(&shared), Arc::clone(&wake));
        let thread = std::thread::Builder::new()
            .name("firmtime-midi-paced".into())
            .spawn(move || {
                let setup = match firmtime_rt::setup::apply(&opts.rt) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.into()));
                        return;
                    }
                };
                let mut wire = Wire::new(opts.capacity);
                let _ = tx.send(Ok(setup.conditions));
                let _guard = setup.guard;
                paced_loop(&fd, &tw, &ts, &mut wire, opts.byte_ns);
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot start the paced loopback thread: {e}"),
                )
            })?;
        match rx.recv() {
            Ok(Ok(conditions)) => Ok(Self {
                shared,
                wake,
                thread: Some(thread),
                conditions,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(Error::new(
                    ErrorKind::Io,
                    "the paced loopback thread ended during setup",
                ))
            }
        }
    }

    /// The real-time conditions of the loopback's thread.
    pub fn conditions(&self) -> &RtConditions {
        &self.conditions
    }

    /// The counters so far. **RT-safe.**
    pub fn stats(&self) -> PacedStats {
        let s = &self.shared;
        PacedStats {
            bytes_in: s.bytes_in.load(Ordering::Relaxed),
            bytes_out: s.bytes_out.load(Ordering::Relaxed),
            overruns: s.overruns.load(Ordering::Relaxed),
            ended_by: s
                .ended
                .load(Ordering::Acquire)
                .then(|| s.ended_errno.load(Ordering::Relaxed) as i32),
        }
    }

    /// Stops the thread, closes the fd and returns the final counters.
    pub fn stop(mut self) -> PacedStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        raw::signal(self.wake.as_raw_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PacedLoopback {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The virtual wire: bytes with the time they finish arriving, oldest first.
struct Wire {
    bytes: Vec<(u64, u8)>,
    head: usize,
    len: usize,
    free_ns: u64,
}

impl Wire {
    fn new(cap: usize) -> Self {
        Self {
            bytes: vec![(0, 0); cap],
            head: 0,
            len: 0,
            free_ns: 0,
        }
    }
    fn push(&mut self, b: u8, now: u64, byte_ns: u64) -> bool {
        if self.len == self.bytes.len() {
            return false;
        }
        // A byte starts when the line is free and arrives one byte time later.
        self.free_ns = self.free_ns.max(now) + byte_ns;
        let i = (self.head + self.len) % self.bytes.len();
        self.bytes[i] = (self.free_ns, b);
        self.len += 1;
        true
    }
    fn front(&self) -> Option<(u64, u8)> {
        (self.len > 0).then(|| self.bytes[self.head])
    }
    fn pop(&mut self) {
        self.head = (self.head + 1) % self.bytes.len();
        self.len -= 1;
    }
}

fn paced_loop(fd: &OwnedFd, wake: &OwnedFd, shared: &PacedShared, wire: &mut Wire, byte_ns: u64) {
    let mut buf = [0u8; 256];
    let mut out = [0u8; 256];
    let end = |e: i32| {
        shared.ended_errno.store(e as u64, Ordering::Relaxed);
        shared.ended.store(true, Ordering::Release);
    };
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        // Write every byte whose arrival time has come, in one write.
        let now = monotonic_ns();
        let mut n = 0;
        while let Some((due, b)) = wire.front() {
            if due > now || n == out.len() {
                break;
            }
            out[n] = b;
            n += 1;
            wire.pop();
        }
        if n > 0 {
            if let Err(e) = raw::write_all(fd.as_fd(), &out[..n]) {
                end(e);
                return;
            }
            shared.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
        }
        let timeout = wire
            .front()
            .map(|(due, _)| due.saturating_sub(monotonic_ns()));
        let mut fds = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        match raw::ppoll(&mut fds, timeout) {
            Ok(_) => {}
            Err(libc::EINTR) => continue,
            Err(e) => {
                end(e);
                return;
            }
        }
        let t = monotonic_ns();
        let re = fds[0].revents;
        if re & libc::POLLIN != 0 {
            // SAFETY: `buf` is valid for writes of its length; `fd` is open.
            let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if r > 0 {
                shared.bytes_in.fetch_add(r as u64, Ordering::Relaxed);
                for &b in &buf[..r as usize] {
                    if !wire.push(b, t, byte_ns) {
                        shared.overruns.fetch_add(1, Ordering::Relaxed);
                    }
                }
            } else if r == 0 {
                end(0);
                return;
            } else {
                let e = raw::errno();
                if e != libc::EAGAIN && e != libc::EINTR {
                    end(e);
                    return;
                }
            }
        } else if re & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            end(0);
            return;
        }
    }
}

/// One tap for a [`Tapper`]: a key press at `at_ns` after the start, held for `hold_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    /// Press time, ns after [`Tapper::play`] starts.
    pub at_ns: u64,
    /// How long the key is held before its Note Off.
    pub hold_ns: u64,
    /// Channel 0..=15.
    pub channel: u8,
    /// Note number.
    pub note: u8,
    /// Note On velocity (Note Off is sent with velocity 64).
    pub velocity: u8,
}

/// Ground truth: a message and when the tapper began writing it
/// (`CLOCK_MONOTONIC` read just before `write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// When the write began, CLOCK_MONOTONIC ns.
    pub t_ns: u64,
    /// The message written.
    pub msg: MidiMessage,
}

/// A simulated player on an fd (typically [`PtyPair::master`]).
#[derive(Debug)]
pub struct Tapper {
    fd: OwnedFd,
}

impl Tapper {
    /// A tapper writing to `fd`.
    pub fn new(fd: OwnedFd) -> Self {
        Self { fd }
    }

    /// Writes `bytes` now, in one write (waiting while the fd is full), and
    /// returns the time just before the write.
    ///
    /// # Errors
    /// The OS error of a failing write.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<u64> {
        let t = monotonic_ns();
        raw::write_all(self.fd.as_fd(), bytes)
            .map_err(|e| Error::from_errno(e, "tapper write", ""))?;
        Ok(t)
    }

    /// Plays `taps` (Note On at each press, Note Off after its hold), each
    /// message written at its time with `clock_nanosleep`, and returns what
    /// was written when, in time order.
    ///
    /// # Errors
    /// The OS error of a failing write or sleep.
    pub fn play(&mut self, taps: &[Tap]) -> Result<Vec<Written>> {
        let mut plan: Vec<(u64, MidiMessage)> = Vec::with_capacity(taps.len() * 2);
        for t in taps {
            plan.push((
                t.at_ns,
                MidiMessage::NoteOn {
                    channel: t.channel,
                    note: t.note,
                    velocity: t.velocity,
                },
            ));
            plan.push((
                t.at_ns + t.hold_ns,
                MidiMessage::NoteOff {
                    channel: t.channel,
                    note: t.note,
                    velocity: 64,
                },
            ));
        }
        plan.sort_by_key(|p| p.0);
        let mut done = Vec::with_capacity(plan.len());
        let start = monotonic_ns();
        for (at, msg) in plan {
            sleep_until(start + at)?;
            let mut bytes = [0u8; 3];
            let n = msg.encode(&mut bytes);
            let t_ns = self.write_bytes(&bytes[..n])?;
            done.push(Written { t_ns, msg });
        }
        Ok(done)
    }
}

fn sleep_until(deadline_ns: u64) -> Result<()> {
    firmtime_rt::sleep::clock_nanosleep_abs(deadline_ns)
        .map_err(|e| Error::from_errno(e.0, "clock_nanosleep", ""))
}
