//! The raw backend: MIDI as a byte stream on a file descriptor — a serial
//! tty at 31250 baud, `/dev/midi*`, `/dev/snd/midiC*D*`, a pty, a pipe or a
//! socket.
//!
//! [`RawBackend::open`] (or [`RawBackend::from_fd`]) starts a real-time
//! thread that owns the fd. It `ppoll`s the fd and an eventfd; when bytes
//! arrive it reads `CLOCK_MONOTONIC` at once, stamps every byte of that read
//! with it, and feeds the [`Parser`], so each message carries the arrival time
//! of its *first* byte. Output handed to [`MidiBackend::send`] goes through a
//! ring into a preallocated queue ordered by time; the thread's `ppoll`
//! timeout is the next due time (nanosecond precision), and each message is
//! written at its time, its actual write time going back as a [`SentEvent`].
//! An eventfd wakes the engine side's [`MidiBackend::wait`] when input arrives.
//!
//! A device that vanishes (EOF, `EIO`, `ENODEV`, `POLLHUP`, `POLLERR`) ends the
//! thread: everything read before is delivered, then
//! [`MidiBackend::poll_input`] returns [`BackendError::Disconnected`].
//! Garbage, truncated messages and SysEx floods are counted
//! ([`BackendStats::malformed`], [`RawBackend::parser_stats`]).
//!
//! # RT contract
//!
//! `open`/`from_fd` allocate everything (rings, output queue, parser) and set
//! up the thread as asked ([`RtRequest`], normally SCHED_FIFO and `mlockall`):
//! a refusal is an error, or a downgrade recorded in [`RawInfo::rt`] when the
//! request allows it — never silently weaker. After that neither the thread
//! nor the engine side allocates, locks or prints; every [`MidiBackend`]
//! method is **RT-safe.** and only [`MidiBackend::wait`] blocks.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::setup::{RtConditions, RtRequest};
use rtrb::{Consumer, Producer, RingBuffer};

use crate::backend::{
    bump, drain, BackendError, BackendKind, BackendStats, Counters, InputEvent, InputLoss,
    LossCause, LossCell, MidiBackend, OutputEvent, SentEvent,
};
use crate::error::{Error, ErrorKind, Result};
use crate::{Encoder, Parser, ParserStats};

/// The MIDI 1.0 wire rate, in baud.
pub const MIDI_BAUD: u32 = 31_250;

/// One byte on a 31.25 kbaud MIDI wire (10 bits: start, 8 data, stop), in ns.
pub const WIRE_BYTE_NS: u64 = 320_000;

/// An output written more than this after its time counts in
/// [`BackendStats::late_outputs`] (FTAP's unit of precision: 1 ms).
pub const LATE_TOLERANCE_NS: u64 = 1_000_000;

/// `CBAUD` from `asm-generic/termbits.h`: the baud bits of `c_cflag`.
const CBAUD: libc::tcflag_t = 0o010017;

/// How to open a raw MIDI byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOptions {
    /// Set this baud rate on a serial tty (`Some(31250)` for a MIDI serial
    /// interface), with `termios2`/`BOTHER`, and read it back; a driver that
    /// cannot do it is an [`ErrorKind::Unsupported`] error. `None` leaves the
    /// rate alone (USB MIDI, `/dev/midi*`, ptys). Only for ttys.
    pub baud: Option<u32>,
    /// Real-time setup of the backend's thread (policy, memory lock, CPUs).
    pub rt: RtRequest,
    /// Never write faster than a 31.25 kbaud wire carries (320 µs per byte):
    /// for devices with no wire of their own (a pty, a pipe), so output is
    /// timed as a cable would carry it.
    pub pace_output: bool,
    /// Send with running status (a repeated status byte is left out).
    pub running_status: bool,
    /// Capacity of the input ring (messages).
    pub input_capacity: usize,
    /// Capacity of the output ring, the output queue and the sent ring (messages).
    pub output_capacity: usize,
    /// SysEx payload bytes the parser keeps per message.
    pub sysex_capacity: usize,
}

impl Default for RawOptions {
    /// No baud change, SCHED_OTHER (ask for SCHED_FIFO explicitly), no
    /// pacing, no running status, 1024-message rings, 4 KiB SysEx.
    fn default() -> Self {
        Self {
            baud: None,
            rt: RtRequest::default(),
            pace_output: false,
            running_status: false,
            input_capacity: 1024,
            output_capacity: 1024,
            sysex_capacity: 4096,
        }
    }
}

/// What was opened and what was obtained.
#[derive(Debug, Clone)]
pub struct RawInfo {
    /// The device path, when opened by path.
    pub path: Option<PathBuf>,
    /// Whether the fd is a terminal (serial port or pty); it was put in raw mode.
    pub is_tty: bool,
    /// The baud rate read back after setting it (only when one was asked).
    pub baud: Option<u32>,
    /// The real-time conditions of the backend's thread, as obtained.
    pub rt: RtConditions,
}

/// Counters shared by the thread and the engine side.
#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    gone: AtomicBool,
    /// The device's end as an input loss (cause and time).
    loss: LossCell,
    gone_errno: AtomicI32,
    counters: Counters,
    p_bytes: AtomicU64,
    p_messages: AtomicU64,
    p_stray: AtomicU64,
    p_truncated: AtomicU64,
    p_overflows: AtomicU64,
    p_undefined: AtomicU64,
    p_stray_eox: AtomicU64,
    /// Engine → thread: output queued, or stop.
    rt_wake: OwnedFd,
    /// Thread → engine: input arrived, or the device went away.
    engine_wake: OwnedFd,
}

/// The raw backend's engine side. One port each way (index 0).
/// Dropping it stops the thread and closes the fd.
#[derive(Debug)]
pub struct RawBackend {
    input: Consumer<InputEvent>,
    output: Producer<OutputEvent>,
    sent: Consumer<SentEvent>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    info: RawInfo,
}

impl RawBackend {
    /// Opens `path` read-write, non-blocking; puts a tty in raw mode (and sets
    /// `opts.baud`); starts the backend thread with `opts.rt`.
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidInput`]: a zero capacity or baud, or a baud for a non-tty.
    /// - [`ErrorKind::NotPresent`] / [`ErrorKind::PermissionDenied`]: the
    ///   device is missing or not accessible (the message says how to fix it).
    /// - [`ErrorKind::Unsupported`]: the driver refused the baud rate.
    /// - [`ErrorKind::Realtime`]: the thread's real-time setup was refused.
    /// - [`ErrorKind::Io`]: any other system call failure.
    pub fn open(path: &Path, opts: RawOptions) -> Result<Self> {
        validate(&opts)?;
        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            Error::invalid(format!(
                "device path {} contains a NUL byte",
                path.display()
            ))
        })?;
        // SAFETY: `cpath` is a valid NUL-terminated string for the call.
        let fd = unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let errno = errno();
            let fix = match errno {
                libc::ENOENT | libc::ENODEV | libc::ENXIO => {
                    "Check the path: `firmtime midi ports` lists the MIDI devices present"
                }
                libc::EACCES | libc::EPERM => {
                    "Add yourself to the group that owns it (`audio` for /dev/snd and /dev/midi*, `dialout` for serial ports: `sudo adduser $USER dialout`) and log in again"
                }
                libc::EBUSY => "Another program holds it open: close it (or use the ALSA sequencer backend, which shares ports)",
                _ => "",
            };
            return Err(Error::from_errno(
                errno,
                &format!("cannot open MIDI device {}", path.display()),
                fix,
            ));
        }
        // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Self::start(owned, opts, Some(path.to_path_buf()))
    }

    /// Uses an fd that is already open (a pty, a pipe, a socketpair, a
    /// device opened elsewhere): makes it non-blocking, puts a tty in raw
    /// mode, and starts the backend thread, which owns the fd from now on.
    ///
    /// # Errors
    /// As [`RawBackend::open`], without the open errors.
    pub fn from_fd(fd: OwnedFd, opts: RawOptions) -> Result<Self> {
        validate(&opts)?;
        Self::start(fd, opts, None)
    }

    fn start(fd: OwnedFd, opts: RawOptions, path: Option<PathBuf>) -> Result<Self> {
        let name = path
            .as_ref()
            .map_or_else(|| "the MIDI fd".to_string(), |p| p.display().to_string());
        set_nonblocking(fd.as_raw_fd(), &name)?;
        // SAFETY: isatty only inspects the fd.
        let is_tty = unsafe { libc::isatty(fd.as_raw_fd()) } == 1;
        let baud = if is_tty {
            make_raw(fd.as_raw_fd(), &name)?;
            match opts.baud {
                Some(b) => Some(set_baud(fd.as_raw_fd(), b, &name)?),
                None => None,
            }
        } else {
            if let Some(b) = opts.baud {
                return Err(Error::invalid(format!(
                    "--baud {b} applies to serial ttys, but {name} is not a terminal (raw MIDI devices and pipes have no baud rate): leave the baud rate out"
                )));
            }
            None
        };
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            loss: LossCell::default(),
            gone_errno: AtomicI32::new(0),
            counters: Counters::default(),
            p_bytes: AtomicU64::new(0),
            p_messages: AtomicU64::new(0),
            p_stray: AtomicU64::new(0),
            p_truncated: AtomicU64::new(0),
            p_overflows: AtomicU64::new(0),
            p_undefined: AtomicU64::new(0),
            p_stray_eox: AtomicU64::new(0),
            rt_wake: eventfd()?,
            engine_wake: eventfd()?,
        });
        let (in_p, in_c) = RingBuffer::new(opts.input_capacity);
        let (out_p, out_c) = RingBuffer::new(opts.output_capacity);
        let (sent_p, sent_c) = RingBuffer::new(opts.output_capacity);
        let (tx, rx) = mpsc::sync_channel::<Result<RtConditions>>(1);
        let thread_shared = Arc::clone(&shared);
        let thread_opts = opts.clone();
        let thread = std::thread::Builder::new()
            .name("firmtime-midi-raw".into())
            .spawn(move || {
                let setup = match firmtime_rt::setup::apply(&thread_opts.rt) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.into()));
                        return;
                    }
                };
                let mut io = RawIo {
                    fd,
                    shared: thread_shared,
                    input: in_p,
                    output: out_c,
                    sent: sent_p,
                    parser: Parser::new(thread_opts.sysex_capacity),
                    encoder: Encoder::new(thread_opts.running_status),
                    queue: Vec::with_capacity(thread_opts.output_capacity),
                    seq: 0,
                    pace: thread_opts.pace_output,
                    wire_free_ns: 0,
                    partial: None,
                };
                let _ = tx.send(Ok(setup.conditions));
                // Keep the DMA latency request (if any) for the thread's life.
                let _guard = setup.guard;
                io.run();
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot start the raw MIDI thread: {e}"),
                )
            })?;
        let rt = match rx.recv() {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::new(
                    ErrorKind::Io,
                    "the raw MIDI thread ended during setup",
                ));
            }
        };
        Ok(Self {
            input: in_c,
            output: out_p,
            sent: sent_c,
            shared,
            thread: Some(thread),
            info: RawInfo {
                path,
                is_tty,
                baud,
                rt,
            },
        })
    }

    /// What was opened and the real-time conditions obtained.
    pub fn info(&self) -> &RawInfo {
        &self.info
    }

    /// The parser's counters (bytes, messages, and each kind of bad input).
    ///
    /// **RT-safe.**
    pub fn parser_stats(&self) -> ParserStats {
        firmtime_rt::load_counters!(ParserStats {
            bytes: p_bytes,
            messages: p_messages,
            stray_data_bytes: p_stray,
            truncated_messages: p_truncated,
            sysex_overflows: p_overflows,
            undefined_status_bytes: p_undefined,
            stray_eox: p_stray_eox,
        } from self.shared)
    }

    /// `None` while the device is there; after it went away, the OS error
    /// number that ended it, or `Some(0)` for end of file / hang-up.
    ///
    /// **RT-safe.**
    pub fn disconnect_errno(&self) -> Option<i32> {
        if self.shared.gone.load(Ordering::Acquire) {
            Some(self.shared.gone_errno.load(Ordering::Relaxed))
        } else {
            None
        }
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        signal(self.shared.rt_wake.as_raw_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl MidiBackend for RawBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Raw
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        // Read the flag first: everything pushed before it was set is drained below.
        let gone = self.shared.gone.load(Ordering::Acquire);
        let n = drain(&mut self.input, f);
        self.shared.counters.add_received(n);
        if n == 0 && gone {
            return Err(BackendError::Disconnected);
        }
        Ok(n)
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        if !self.input.is_empty() {
            return Ok(());
        }
        if self.shared.gone.load(Ordering::Acquire) {
            return if self.input.is_empty() {
                Err(BackendError::Disconnected)
            } else {
                Ok(())
            };
        }
        let now = monotonic_ns();
        if deadline_ns <= now {
            return Ok(());
        }
        let fd = self.shared.engine_wake.as_raw_fd();
        match poll_one(fd, libc::POLLIN, Some(deadline_ns - now)) {
            Ok(re) if re & libc::POLLIN != 0 => {
                drain_eventfd(fd);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(libc::EINTR) => Ok(()),
            Err(e) => Err(BackendError::Os(e)),
        }
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        if ev.port != 0 {
            return Err(BackendError::NoSuchPort(ev.port));
        }
        if self.shared.gone.load(Ordering::Acquire) {
            return Err(BackendError::Disconnected);
        }
        if self.output.push(ev).is_err() {
            bump(&self.shared.counters.output_dropped);
            return Err(BackendError::OutputQueueFull);
        }
        signal(self.shared.rt_wake.as_raw_fd());
        Ok(())
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        drain(&mut self.sent, f)
    }

    fn stats(&self) -> BackendStats {
        self.shared.counters.snapshot()
    }

    fn input_loss(&self) -> Option<InputLoss> {
        self.shared.loss.get()
    }
}

// ---------------------------------------------------------------------------
// The real-time thread.

#[derive(Debug, Clone, Copy)]
struct Queued {
    due_ns: u64,
    seq: u64,
    ev: OutputEvent,
}

/// A message the device did not take whole: the rest waits for POLLOUT.
#[derive(Debug, Clone, Copy)]
struct Partial {
    bytes: [u8; 3],
    len: usize,
    off: usize,
    ev: OutputEvent,
}

struct RawIo {
    fd: OwnedFd,
    shared: Arc<Shared>,
    input: Producer<InputEvent>,
    output: Consumer<OutputEvent>,
    sent: Producer<SentEvent>,
    parser: Parser,
    encoder: Encoder,
    /// Sorted by (due, seq) descending: the next one is last.
    queue: Vec<Queued>,
    seq: u64,
    pace: bool,
    wire_free_ns: u64,
    partial: Option<Partial>,
}

impl RawIo {
    fn run(&mut self) {
        let fd = self.fd.as_raw_fd();
        let wake = self.shared.rt_wake.as_raw_fd();
        let mut buf = [0u8; 256];
        let cause = loop {
            if self.shared.stop.load(Ordering::Acquire) {
                break None;
            }
            self.take_output();
            if let Err(e) = self.write_due() {
                break Some(e);
            }
            let timeout = if self.partial.is_some() {
                None
            } else {
                self.next_due_ns().map(|t| t.saturating_sub(monotonic_ns()))
            };
            let out_ev = if self.partial.is_some() {
                libc::POLLOUT
            } else {
                0
            };
            let mut fds = [
                libc::pollfd {
                    fd,
                    events: libc::POLLIN | out_ev,
                    revents: 0,
                },
                libc::pollfd {
                    fd: wake,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let rc = ppoll(&mut fds, timeout);
            // The arrival time of every byte this wake reads.
            let t_wake = monotonic_ns();
            if let Err(e) = rc {
                if e == libc::EINTR {
                    continue;
                }
                break Some(e);
            }
            if fds[1].revents & libc::POLLIN != 0 {
                drain_eventfd(wake);
            }
            let re = fds[0].revents;
            if re & libc::POLLIN != 0 {
                // SAFETY: `buf` is valid for writes of its length; `fd` is open (owned by self).
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    self.feed(&buf[..n as usize], t_wake);
                } else if n == 0 {
                    break Some(0);
                } else {
                    let e = errno();
                    if e != libc::EAGAIN && e != libc::EINTR {
                        break Some(e);
                    }
                }
            } else if re & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                break Some(if re & libc::POLLNVAL != 0 {
                    libc::EBADF
                } else {
                    0
                });
            }
        };
        self.publish_parser_stats();
        if let Some(e) = cause {
            let why = if e == 0 {
                LossCause::DeviceClosed
            } else {
                LossCause::DeviceError(e)
            };
            self.shared.loss.lose(why, monotonic_ns());
            self.shared.gone_errno.store(e, Ordering::Relaxed);
            self.shared.gone.store(true, Ordering::Release);
            signal(self.shared.engine_wake.as_raw_fd());
        }
    }

    fn feed(&mut self, bytes: &[u8], t_ns: u64) {
        let mut pushed = false;
        for &b in bytes {
            for ev in self.parser.push(b, t_ns) {
                let ie = InputEvent {
                    t_ns: ev.t_ns,
                    frame: None,
                    port: 0,
                    msg: ev.msg,
                };
                if self.input.push(ie).is_ok() {
                    pushed = true;
                } else {
                    bump(&self.shared.counters.input_dropped);
                }
            }
        }
        self.publish_parser_stats();
        if pushed {
            signal(self.shared.engine_wake.as_raw_fd());
        }
    }

    fn publish_parser_stats(&self) {
        let p = self.parser.stats();
        let s = &self.shared;
        s.p_bytes.store(p.bytes, Ordering::Relaxed);
        s.p_messages.store(p.messages, Ordering::Relaxed);
        s.p_stray.store(p.stray_data_bytes, Ordering::Relaxed);
        s.p_truncated.store(p.truncated_messages, Ordering::Relaxed);
        s.p_overflows.store(p.sysex_overflows, Ordering::Relaxed);
        s.p_undefined
            .store(p.undefined_status_bytes, Ordering::Relaxed);
        s.p_stray_eox.store(p.stray_eox, Ordering::Relaxed);
        let malformed = p.stray_data_bytes
            + p.truncated_messages
            + p.sysex_overflows
            + p.undefined_status_bytes
            + p.stray_eox;
        s.counters.malformed.store(malformed, Ordering::Relaxed);
    }

    /// Moves output from the ring into the time-ordered queue while it has room.
    fn take_output(&mut self) {
        while self.queue.len() < self.queue.capacity() {
            let Ok(ev) = self.output.pop() else { break };
            let due_ns = ev.at_ns.unwrap_or_else(monotonic_ns);
            let item = Queued {
                due_ns,
                seq: self.seq,
                ev,
            };
            self.seq += 1;
            let key = (due_ns, item.seq);
            let pos = self.queue.partition_point(|q| (q.due_ns, q.seq) > key);
            self.queue.insert(pos, item);
        }
    }

    fn next_due_ns(&self) -> Option<u64> {
        let q = self.queue.last()?;
        Some(if self.pace {
            q.due_ns.max(self.wire_free_ns)
        } else {
            q.due_ns
        })
    }

    /// Writes every message that is due. `Err(errno)` when the device is gone.
    fn write_due(&mut self) -> std::result::Result<(), i32> {
        loop {
            if let Some(p) = self.partial {
                if !self.write_partial(p)? {
                    return Ok(());
                }
                continue;
            }
            let now = monotonic_ns();
            match self.next_due_ns() {
                Some(t) if t <= now => {}
                _ => return Ok(()),
            }
            let Some(q) = self.queue.pop() else {
                return Ok(());
            };
            let mut bytes = [0u8; 3];
            let len = self.encoder.encode_running(&q.ev.msg, &mut bytes);
            if len == 0 {
                // SysEx is not sent through OutputEvent: counted, not written.
                bump(&self.shared.counters.output_dropped);
                continue;
            }
            self.partial = Some(Partial {
                bytes,
                len,
                off: 0,
                ev: q.ev,
            });
        }
    }

    /// Writes what is left of `p`; `Ok(true)` when it is all out.
    fn write_partial(&mut self, mut p: Partial) -> std::result::Result<bool, i32> {
        let fd = self.fd.as_raw_fd();
        let t = monotonic_ns();
        let rest = &p.bytes[p.off..p.len];
        // SAFETY: `rest` is valid for reads of its length; `fd` is open.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EINTR {
                self.partial = Some(p);
                return Ok(false);
            }
            return Err(e);
        }
        if p.off == 0 && n > 0 {
            // The first byte went out now: that is when the message was sent.
            self.record_sent(&p, t);
        }
        p.off += n as usize;
        if p.off < p.len {
            self.partial = Some(p);
            return Ok(false);
        }
        self.partial = None;
        Ok(true)
    }

    fn record_sent(&mut self, p: &Partial, t: u64) {
        if self.pace {
            self.wire_free_ns = t.max(self.wire_free_ns) + p.len as u64 * WIRE_BYTE_NS;
        }
        let s = &self.shared;
        bump(&s.counters.sent);
        if let Some(at) = p.ev.at_ns {
            if t > at + LATE_TOLERANCE_NS {
                bump(&s.counters.late_outputs);
            }
        }
        // A full sent ring only loses the report, never the output.
        let _ = self.sent.push(SentEvent {
            intended_ns: p.ev.at_ns,
            actual_ns: t,
            frame: None,
            port: 0,
            msg: p.ev.msg,
            tag: p.ev.tag,
        });
    }
}

// ---------------------------------------------------------------------------
// System call helpers, shared with the pty peer. All RT-safe except setup ones.

fn validate(opts: &RawOptions) -> Result<()> {
    if opts.input_capacity == 0 || opts.output_capacity == 0 {
        return Err(Error::invalid(
            "raw MIDI ring capacities must be at least 1 message",
        ));
    }
    if opts.baud == Some(0) {
        return Err(Error::invalid(
            "baud 0 would hang up the line: use 31250 for MIDI, or leave it out",
        ));
    }
    Ok(())
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_nonblocking(fd: RawFd, name: &str) -> Result<()> {
    // SAFETY: fcntl on an open fd with F_GETFL/F_SETFL has no memory effects.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(Error::last_os(
            &format!("cannot make {name} non-blocking"),
            "",
        ));
    }
    Ok(())
}

/// Puts a tty in raw mode: no echo, no line editing, no translation, 8N1.
pub(crate) fn make_raw(fd: RawFd, name: &str) -> Result<()> {
    // SAFETY: termios is plain old data; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid termios for tcgetattr to write.
    if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
        return Err(Error::last_os(
            &format!("cannot read the terminal settings of {name}"),
            "",
        ));
    }
    // SAFETY: `t` is a valid termios.
    unsafe { libc::cfmakeraw(&mut t) };
    t.c_cflag |= libc::CLOCAL | libc::CREAD;
    t.c_cc[libc::VMIN] = 1;
    t.c_cc[libc::VTIME] = 0;
    // SAFETY: `t` is a valid termios for tcsetattr to read.
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) } != 0 {
        return Err(Error::last_os(
            &format!("cannot put {name} in raw mode"),
            "",
        ));
    }
    Ok(())
}

/// Sets a custom baud rate with termios2/BOTHER and returns the rate read back.
fn set_baud(fd: RawFd, baud: u32, name: &str) -> Result<u32> {
    // SAFETY: termios2 is plain old data; TCGETS2 fills it.
    let mut t: libc::termios2 = unsafe { std::mem::zeroed() };
    // SAFETY: TCGETS2 writes a termios2 into `t`.
    if unsafe { libc::ioctl(fd, libc::TCGETS2, &mut t) } != 0 {
        return Err(Error::last_os(
            &format!("cannot read the line settings (TCGETS2) of {name}"),
            "",
        ));
    }
    t.c_cflag &= !CBAUD;
    t.c_cflag |= libc::BOTHER;
    t.c_ispeed = baud;
    t.c_ospeed = baud;
    // SAFETY: TCSETS2 reads a termios2 from `t`.
    if unsafe { libc::ioctl(fd, libc::TCSETS2, &t) } != 0 {
        let e = errno();
        let mut err = Error::from_errno(
            e,
            &format!("the driver of {name} refused {baud} baud (termios2 BOTHER)"),
            "Use a MIDI interface whose driver accepts custom rates (most USB-serial and 16550 drivers do), or a USB MIDI device (/dev/snd/midiC*D*)",
        );
        if err.kind() == ErrorKind::Io {
            err = Error::new(ErrorKind::Unsupported, err.message());
        }
        return Err(err);
    }
    // SAFETY: as the first TCGETS2.
    let mut back: libc::termios2 = unsafe { std::mem::zeroed() };
    // SAFETY: TCGETS2 writes a termios2 into `back`.
    if unsafe { libc::ioctl(fd, libc::TCGETS2, &mut back) } != 0 {
        return Err(Error::last_os(
            &format!("cannot read back the baud rate of {name}"),
            "",
        ));
    }
    // Drivers round to what their clock divider can make; MIDI allows ±1 %.
    let got = back.c_ospeed;
    if got.abs_diff(baud) * 100 > baud {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the driver of {name} set {got} baud instead of {baud}: it cannot make this rate. Use a MIDI interface whose driver accepts custom rates, or a USB MIDI device (/dev/snd/midiC*D*)"
            ),
        ));
    }
    Ok(got)
}

pub(crate) fn eventfd() -> Result<OwnedFd> {
    // SAFETY: eventfd has no pointer arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::last_os("cannot create an eventfd", ""));
    }
    // SAFETY: `fd` is a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd. **RT-safe.**
pub(crate) fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64. A full counter (EAGAIN) is
    // already signalled, so the result does not matter.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd. **RT-safe.**
pub(crate) fn drain_eventfd(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64; EAGAIN (already 0) is fine.
    let _ = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// `ppoll` with a relative timeout in ns (`None`: no timeout). **RT-safe.**
pub(crate) fn ppoll(
    fds: &mut [libc::pollfd],
    timeout_ns: Option<u64>,
) -> std::result::Result<i32, i32> {
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid array of its length; `tp` is null or points to
    // a timespec that lives across the call; a null sigmask keeps the mask.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tp,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

/// Polls one fd; returns its `revents`. **RT-safe.**
pub(crate) fn poll_one(
    fd: RawFd,
    events: libc::c_short,
    timeout_ns: Option<u64>,
) -> std::result::Result<libc::c_short, i32> {
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    ppoll(&mut fds, timeout_ns)?;
    Ok(fds[0].revents)
}

/// Writes all of `bytes` to a possibly non-blocking fd, waiting for POLLOUT
/// when it is full. **RT-safe.**
pub(crate) fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> std::result::Result<(), i32> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length; `fd` is open.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = errno();
            match e {
                libc::EINTR => {}
                libc::EAGAIN => {
                    poll_one(fd.as_raw_fd(), libc::POLLOUT, None)?;
                }
                _ => return Err(e),
            }
        } else {
            bytes = &bytes[n as usize..];
        }
    }
    Ok(())
}

/// What kind of device a [`RawPort`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RawPortKind {
    /// An ALSA raw MIDI device, `/dev/snd/midiC*D*`.
    AlsaRawMidi,
    /// An OSS-style raw MIDI device, `/dev/midi*`.
    OssMidi,
    /// A serial port (`/dev/ttyS*`, `/dev/ttyUSB*`, `/dev/ttyACM*`): a MIDI
    /// interface on it needs `baud: Some(31250)` (or its own fixed rate).
    Serial,
}

/// A device the raw backend can open.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RawPort {
    /// The device path.
    pub path: PathBuf,
    /// What it is.
    pub kind: RawPortKind,
}

/// The byte-stream MIDI devices present: `/dev/snd/midiC*D*`, `/dev/midi*`,
/// `/dev/ttyS*`, `/dev/ttyUSB*`, `/dev/ttyACM*`, sorted by path. A serial
/// port listed may have no hardware behind it (the kernel makes `ttyS0..3`
/// regardless); opening it tells.
pub fn list_ports() -> Vec<RawPort> {
    let mut ports = Vec::new();
    let scan = |dir: &str, ports: &mut Vec<RawPort>, pick: &dyn Fn(&str) -> Option<RawPortKind>| {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(kind) = pick(&name) {
                    ports.push(RawPort {
                        path: e.path(),
                        kind,
                    });
                }
            }
        }
    };
    scan("/dev/snd", &mut ports, &|n| {
        (n.starts_with("midiC") && n.contains('D')).then_some(RawPortKind::AlsaRawMidi)
    });
    scan("/dev", &mut ports, &|n| {
        if n.starts_with("midi") {
            Some(RawPortKind::OssMidi)
        } else if ["ttyS", "ttyUSB", "ttyACM"].iter().any(|p| {
            n.strip_prefix(p)
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        }) {
            Some(RawPortKind::Serial)
        } else {
            None
        }
    });
    ports.sort_by(|a, b| a.path.cmp(&b.path));
    ports
}
