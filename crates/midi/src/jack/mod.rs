//! JACK MIDI: frame-accurate input timestamps and output placed at its exact frame.
//!
//! [`JackBackend`] is a JACK client with MIDI input and output ports. Its
//! process callback (the real-time side) does, every cycle:
//!
//! - **input**: each event's frame offset in the cycle becomes an absolute
//!   frame (the cycle's first frame plus the offset) and a CLOCK_MONOTONIC
//!   time through the cycle's times from `jack_get_cycle_times`
//!   (see [`CycleTimes`]). Events are never stamped with the time the callback
//!   happens to run (midir's JACK backend does, and loses the offset).
//! - **output**: each [`OutputEvent`] with `at_ns` becomes an absolute frame;
//!   it is written at its exact offset in the cycle that contains that frame.
//!   Events for later cycles wait in a preallocated, time-ordered queue;
//!   events whose frame has already passed go out at offset 0 of the current
//!   cycle and count as late. Each event that went out is reported as a
//!   [`SentEvent`] with its frame and that frame's time.
//!
//! Server xruns are counted (xrun callback), never treated as failures.
//!
//! # Clocks
//!
//! JACK's cycle times are in microseconds of `jack_get_time()`. Which clock
//! that is depends on the JACK build: measured here, jackd2 1.9.21 (Debian 12)
//! uses **CLOCK_MONOTONIC_RAW** (it differed from CLOCK_MONOTONIC by 108 ms,
//! and from CLOCK_MONOTONIC_RAW by < 1 µs); PipeWire's JACK uses
//! CLOCK_MONOTONIC. So [`JackBackend::open`] does not assume: it reads
//! `jack_get_time()` between two readings of each clock and picks the one
//! that agrees within 1 ms ([`JackClock`]). For CLOCK_MONOTONIC the offset is
//! 0; for CLOCK_MONOTONIC_RAW it is CLOCK_MONOTONIC − CLOCK_MONOTONIC_RAW,
//! measured to tens of ns; otherwise the offset measured against JACK's
//! clock itself. The offset is shared by every client of the process (and
//! re-measured at an open more than a minute after the last measurement), so
//! two clients of one server give one frame the same nanoseconds. It is
//! reported by [`JackBackend::clock_offset_ns`]. Times within a cycle are
//! interpolated linearly between the cycle's start and the next cycle's
//! start, as `jack_frames_to_time` does, but in integer nanoseconds so that
//! frame → ns → frame round-trips exactly.
//!
//! Works with jackd2 (tested with its dummy driver, see [`server`]) and with
//! PipeWire's JACK, which implements the same API; libjack is loaded at run
//! time, so a machine without JACK builds and gets a clear error at `open`.
//!
//! # Real-time contract
//!
//! Everything the process callback touches is allocated in `open`: SPSC rings
//! (rtrb) to and from the engine side, the pending-output queue and the
//! port list. In the callback: no allocation, no locks, no printing; a full
//! ring or queue drops the event and counts it. The engine side
//! ([`MidiBackend`] methods) is **RT-safe.** as well; [`MidiBackend::wait`]
//! blocks on a futex the callback wakes.

pub mod audio;
pub mod relay;
pub mod server;
pub mod tapper;

use std::collections::VecDeque;
use std::ffi::{c_char, CString};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jack::{AudioOut, Client, ClientStatus, Control, MidiIn, MidiOut, Port, ProcessScope, RawMidi};
use rtrb::{Consumer, Producer, RingBuffer};

use crate::backend::{
    bump, drain, BackendError, BackendKind, BackendStats, Counters, InputEvent, MidiBackend,
    OutputEvent, PortIndex, SentEvent,
};
use crate::error::{Error, ErrorKind};
use crate::parse_message;

pub use audio::{
    playback_ports, AudioOptions, AudioStats, NoiseColor, OnsetRecorder, RecorderOptions,
    RecorderReport, Sound, Synth, SynthOptions,
};
pub use relay::{HopSummary, LoopHops, Relay, RelayOptions, RelayReport};
pub use server::{DummyOptions, DummyServer};
pub use tapper::{Tap, TapRecord, Tapper, TapperOptions};

/// The most MIDI ports of one direction a [`JackBackend`] opens.
pub const MAX_PORTS: usize = 16;

/// The times of one JACK process cycle, in absolute frames and
/// CLOCK_MONOTONIC nanoseconds.
///
/// `frame` is JACK's 32-bit frame counter extended to 64 bits (it wraps
/// after about a day at 48 kHz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleTimes {
    /// Absolute frame of the cycle's first frame.
    pub frame: u64,
    /// Frames in this cycle.
    pub n_frames: u32,
    /// Time of the cycle's first frame, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Time of the next cycle's first frame, CLOCK_MONOTONIC ns (> `start_ns`).
    pub next_ns: u64,
}

impl CycleTimes {
    fn span(&self) -> (i128, i128) {
        let d = (self.next_ns as i128 - self.start_ns as i128).max(1);
        (d, i128::from(self.n_frames.max(1)))
    }

    /// The time of absolute frame `frame` (it may lie outside the cycle:
    /// extrapolated at this cycle's rate), rounded down to a nanosecond.
    ///
    /// **RT-safe.**
    pub fn frame_to_ns(&self, frame: u64) -> u64 {
        let (d, n) = self.span();
        let k = frame as i128 - self.frame as i128;
        let t = self.start_ns as i128 + (k * d).div_euclid(n);
        t.clamp(0, u64::MAX as i128) as u64
    }

    /// The first absolute frame whose time ([`CycleTimes::frame_to_ns`]) is
    /// not before `ns`, so output is never early and
    /// `ns_to_frame(frame_to_ns(f)) == f`.
    ///
    /// **RT-safe.**
    pub fn ns_to_frame(&self, ns: u64) -> u64 {
        let (d, n) = self.span();
        let dt = ns as i128 - self.start_ns as i128;
        // ceil(dt * n / d), for either sign.
        let k = -((-dt * n).div_euclid(d));
        (self.frame as i128 + k).clamp(0, u64::MAX as i128) as u64
    }

    /// One past the last frame of the cycle.
    ///
    /// **RT-safe.**
    pub fn end_frame(&self) -> u64 {
        self.frame + u64::from(self.n_frames)
    }
}

/// Extends JACK's wrapping 32-bit frame counter to 64 bits.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FrameExtender {
    last: Option<u32>,
    high: u64,
}

impl FrameExtender {
    /// **RT-safe.** `frame` must be the next cycle's start (frames only go forward).
    pub(crate) fn extend(&mut self, frame: u32) -> u64 {
        if let Some(last) = self.last {
            if frame < last {
                self.high += 1 << 32;
            }
        }
        self.last = Some(frame);
        self.high | u64::from(frame)
    }
}

/// Reads this cycle's times from JACK and converts them. **RT-safe.**
pub(crate) fn read_cycle_times(
    ps: &ProcessScope,
    ext: &mut FrameExtender,
    clock_offset_ns: i64,
) -> CycleTimes {
    let n_frames = ps.n_frames();
    let to_ns = |us: u64| (i128::from(us) * 1000 + i128::from(clock_offset_ns)).max(0) as u64;
    match ps.cycle_times() {
        Ok(ct) => {
            let start_ns = to_ns(ct.current_usecs);
            let next_ns = to_ns(ct.next_usecs).max(start_ns + 1);
            CycleTimes {
                frame: ext.extend(ct.current_frames),
                n_frames,
                start_ns,
                next_ns,
            }
        }
        Err(_) => {
            // Old libjack without jack_get_cycle_times: fall back to the frame
            // clock and the current time (less exact, never seen with jackd2).
            let frame = ext.extend(ps.last_frame_time());
            // SAFETY: jack_get_time takes no arguments and only reads the clock.
            let now_us = unsafe { jack_sys::jack_get_time() };
            let start_ns = to_ns(now_us);
            CycleTimes {
                frame,
                n_frames,
                start_ns,
                next_ns: start_ns + u64::from(n_frames.max(1)) * 20_833,
            }
        }
    }
}

/// Where the process callback's core writes output events.
pub(crate) trait MidiSink {
    /// Writes `bytes` at `offset` frames into the cycle on output `port`;
    /// false when the port buffer is full. Offsets come in non-decreasing order.
    fn write(&mut self, port: PortIndex, offset: u32, bytes: &[u8]) -> bool;
}

/// Counters and flags shared by the RT side and the engine side.
#[derive(Debug, Default)]
struct Shared {
    link: EngineLink,
    reports_dropped: AtomicU64,
    cycles: AtomicU64,
}

/// What a real-time side that wakes its engine side through a futex (the
/// JACK process callback, the ALSA thread) shares with that engine side.
#[derive(Debug, Default)]
pub(crate) struct EngineLink {
    pub(crate) counters: Counters,
    /// Set once the server or device went away.
    pub(crate) shutdown: AtomicBool,
    /// Futex word: bumped (and woken) when the RT side delivered something.
    pub(crate) seq: AtomicU32,
}

impl EngineLink {
    /// Wakes the engine side. **RT-safe** (one non-blocking syscall).
    pub(crate) fn notify(&self) {
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake(&self.seq);
    }

    /// Marks the server or device gone and wakes the engine side. **RT-safe.**
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.notify();
    }
}

/// The engine-side ends of the rings to an [`EngineLink`]'s RT side, and
/// the [`MidiBackend`] methods over them. **RT-safe.**, as those methods.
#[derive(Debug)]
pub(crate) struct EngineEnds {
    pub(crate) input_rx: Consumer<InputEvent>,
    pub(crate) output_tx: Producer<OutputEvent>,
    pub(crate) sent_rx: Consumer<SentEvent>,
}

impl EngineEnds {
    /// [`MidiBackend::poll_input`].
    pub(crate) fn poll_input(
        &mut self,
        link: &EngineLink,
        f: &mut dyn FnMut(InputEvent),
    ) -> Result<usize, BackendError> {
        let n = drain(&mut self.input_rx, f);
        link.counters.add_received(n);
        if n == 0 && link.shutdown.load(Ordering::Acquire) {
            return Err(BackendError::Disconnected);
        }
        Ok(n)
    }

    /// [`MidiBackend::wait`].
    pub(crate) fn wait(&self, link: &EngineLink, deadline_ns: u64) -> Result<(), BackendError> {
        let seq = link.seq.load(Ordering::Acquire);
        if link.shutdown.load(Ordering::Acquire) {
            return if self.input_rx.is_empty() {
                Err(BackendError::Disconnected)
            } else {
                Ok(())
            };
        }
        if !self.input_rx.is_empty() || !self.sent_rx.is_empty() {
            return Ok(());
        }
        if firmtime_rt::clock::monotonic_ns() < deadline_ns {
            futex_wait_until(&link.seq, seq, deadline_ns);
        }
        Ok(())
    }

    /// [`MidiBackend::send`] once the port is checked.
    pub(crate) fn send(&mut self, link: &EngineLink, ev: OutputEvent) -> Result<(), BackendError> {
        if link.shutdown.load(Ordering::Acquire) {
            return Err(BackendError::Disconnected);
        }
        self.output_tx.push(ev).map_err(|_| {
            bump(&link.counters.output_dropped);
            BackendError::OutputQueueFull
        })
    }

    /// [`MidiBackend::poll_sent`].
    pub(crate) fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        drain(&mut self.sent_rx, f)
    }
}

/// Wakes every thread waiting on `word`. **RT-safe** (one non-blocking syscall).
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 that lives as long as the
    // Arc that holds it; the kernel only reads the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// Sleeps while `*word == expected`, until `deadline_ns` CLOCK_MONOTONIC at the latest.
pub(crate) fn futex_wait_until(word: &AtomicU32, expected: u32, deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT_BITSET with an absolute CLOCK_MONOTONIC timeout on a
    // valid, aligned u32; `ts` outlives the call. Spurious returns are fine.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        );
    }
}

/// The core of the process callback, over plain values: no JACK calls, so it
/// is unit-tested without a server and under `assert_no_alloc`.
#[derive(Debug)]
pub(crate) struct JackCore {
    shared: Arc<Shared>,
    input_tx: Producer<InputEvent>,
    output_rx: Consumer<OutputEvent>,
    sent_tx: Producer<SentEvent>,
    pending: VecDeque<OutputEvent>,
    pending_cap: usize,
    delivered: bool,
}

/// Sort key of a pending output: "as soon as possible" first, then by time.
fn due_key(ev: &OutputEvent) -> u64 {
    ev.at_ns.unwrap_or(0)
}

impl JackCore {
    /// Takes one input event at `offset` frames into the cycle. **RT-safe.**
    pub(crate) fn input(&mut self, cycle: &CycleTimes, port: PortIndex, offset: u32, bytes: &[u8]) {
        let frame = cycle.frame + u64::from(offset);
        match parse_message(bytes) {
            Ok(msg) => {
                let ev = InputEvent {
                    t_ns: cycle.frame_to_ns(frame),
                    frame: Some(frame),
                    port,
                    msg,
                };
                if self.input_tx.push(ev).is_ok() {
                    self.delivered = true;
                } else {
                    bump(&self.shared.link.counters.input_dropped);
                }
            }
            Err(_) => bump(&self.shared.link.counters.malformed),
        }
    }

    /// Moves newly queued output into the time-ordered queue and writes
    /// every event due in this cycle to `sink`. **RT-safe.**
    pub(crate) fn output(&mut self, cycle: &CycleTimes, sink: &mut dyn MidiSink) {
        while let Ok(ev) = self.output_rx.pop() {
            if self.pending.len() >= self.pending_cap {
                bump(&self.shared.link.counters.output_dropped);
                continue;
            }
            let key = due_key(&ev);
            let at = self.pending.partition_point(|p| due_key(p) <= key);
            self.pending.insert(at, ev);
        }
        let end = cycle.end_frame();
        while let Some(front) = self.pending.front() {
            let frame = match front.at_ns {
                None => cycle.frame,
                Some(t) => cycle.ns_to_frame(t),
            };
            if frame >= end {
                break;
            }
            let Some(ev) = self.pending.pop_front() else {
                break;
            };
            let late = frame < cycle.frame;
            let placed = frame.max(cycle.frame);
            let mut buf = [0u8; 3];
            let n = ev.msg.encode(&mut buf);
            let offset = (placed - cycle.frame) as u32;
            if n == 0 || !sink.write(ev.port, offset, &buf[..n]) {
                bump(&self.shared.link.counters.output_dropped);
                continue;
            }
            bump(&self.shared.link.counters.sent);
            if late {
                bump(&self.shared.link.counters.late_outputs);
            }
            let report = SentEvent {
                intended_ns: ev.at_ns,
                actual_ns: cycle.frame_to_ns(placed),
                frame: Some(placed),
                port: ev.port,
                msg: ev.msg,
                tag: ev.tag,
            };
            if self.sent_tx.push(report).is_ok() {
                self.delivered = true;
            } else {
                bump(&self.shared.reports_dropped);
            }
        }
    }

    /// Ends a cycle: wakes the engine side if anything was delivered. **RT-safe.**
    pub(crate) fn end_cycle(&mut self) {
        bump(&self.shared.cycles);
        if self.delivered {
            self.delivered = false;
            self.shared.link.notify();
        }
    }
}

fn new_core(capacity: usize) -> (JackCore, EngineEnds, Arc<Shared>) {
    let shared = Arc::new(Shared::default());
    let (input_tx, input_rx) = RingBuffer::new(capacity);
    let (output_tx, output_rx) = RingBuffer::new(capacity);
    let (sent_tx, sent_rx) = RingBuffer::new(capacity);
    let core = JackCore {
        shared: Arc::clone(&shared),
        input_tx,
        output_rx,
        sent_tx,
        pending: VecDeque::with_capacity(capacity),
        pending_cap: capacity,
        delivered: false,
    };
    (
        core,
        EngineEnds {
            input_rx,
            output_tx,
            sent_rx,
        },
        shared,
    )
}

/// Options for [`JackBackend::open`].
#[derive(Debug, Clone, PartialEq)]
pub struct JackOptions {
    /// The JACK server to connect to; `None`: `$JACK_DEFAULT_SERVER` or "default".
    /// A server is never started implicitly (see [`DummyServer`]).
    pub server_name: Option<String>,
    /// The client name (JACK may append `-01` etc. if it is taken).
    pub client_name: String,
    /// Short names of the MIDI input ports to register (at most [`MAX_PORTS`]).
    pub inputs: Vec<String>,
    /// Short names of the MIDI output ports to register (at most [`MAX_PORTS`]).
    pub outputs: Vec<String>,
    /// Full names of ports (`client:port`) to connect to our inputs: entry
    /// `i` goes to input `i`, entries past the last input to the last input.
    pub connect_inputs: Vec<String>,
    /// Full names of ports to connect our outputs to: entry `i` from output
    /// `i`, entries past the last output from the last output.
    pub connect_outputs: Vec<String>,
    /// Capacity of each ring (input, output, sent reports) and of the
    /// pending-output queue, in events.
    pub queue_capacity: usize,
    /// Audio output (see [`audio`]): `Some` adds audio port(s) and one more
    /// output index, [`JackBackend::audio_port`], whose note messages are
    /// rendered as sound at their frame.
    pub audio: Option<AudioOptions>,
}

impl JackOptions {
    /// A client named `client_name` on the default server, with one input
    /// `in` and one output `out`, no connections, queues of 4096 events.
    pub fn new(client_name: impl Into<String>) -> Self {
        JackOptions {
            server_name: None,
            client_name: client_name.into(),
            inputs: vec!["in".into()],
            outputs: vec!["out".into()],
            connect_inputs: Vec::new(),
            connect_outputs: Vec::new(),
            queue_capacity: 4096,
            audio: None,
        }
    }
}

/// Serializes client opening within this process (libjack's open is not
/// reentrant-safe in every version).
static OPEN_LOCK: Mutex<()> = Mutex::new(());

/// Opens a JACK client `name` on `server` (or the default), never starting
/// a server. Shared with other JACK clients of firmtime (the rack).
///
/// # Errors
/// [`ErrorKind::NotInstalled`] without libjack; [`ErrorKind::InvalidInput`]
/// for a name with a NUL byte; [`ErrorKind::ServerUnavailable`] when no
/// server of that name answers (the message says how to start one).
pub fn open_client(name: &str, server: Option<&str>) -> Result<Client, Error> {
    type OpenFn = unsafe extern "C" fn(
        *const c_char,
        jack_sys::jack_options_t,
        *mut jack_sys::jack_status_t,
        ...
    ) -> *mut jack_sys::jack_client_t;
    let lib = jack_sys::library().map_err(|e| {
        Error::new(
            ErrorKind::NotInstalled,
            format!(
                "cannot load libjack ({e}): install JACK (Debian: apt-get install jackd2, \
                 or pipewire-jack)"
            ),
        )
    })?;
    // SAFETY: jack_client_open has exactly this C signature in every libjack
    // (jack/jack.h: const char *, jack_options_t, jack_status_t *, ...).
    let open: OpenFn = match unsafe { lib.get::<OpenFn>(b"jack_client_open\0") } {
        Ok(sym) => *sym,
        Err(e) => {
            return Err(Error::new(
                ErrorKind::NotInstalled,
                format!("libjack has no jack_client_open ({e}): reinstall JACK"),
            ))
        }
    };
    let cname = CString::new(name).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("JACK client name {name:?} contains a NUL byte"),
        )
    })?;
    let sname = match server {
        Some(s) => Some(CString::new(s).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("JACK server name {s:?} contains a NUL byte"),
            )
        })?),
        None => None,
    };
    let mut status: jack_sys::jack_status_t = 0;
    let _guard = OPEN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let raw = match &sname {
        // SAFETY: valid NUL-terminated strings that outlive the call; with
        // JackServerName libjack reads exactly one extra `const char *`.
        Some(s) => unsafe {
            open(
                cname.as_ptr(),
                jack_sys::JackNoStartServer | jack_sys::JackServerName,
                &mut status,
                s.as_ptr(),
            )
        },
        // SAFETY: as above, without the variadic argument.
        None => unsafe { open(cname.as_ptr(), jack_sys::JackNoStartServer, &mut status) },
    };
    if raw.is_null() {
        let st = ClientStatus::from_bits_truncate(status);
        let server_desc = server.unwrap_or("the default server");
        return Err(Error::new(
            ErrorKind::ServerUnavailable,
            format!(
                "cannot open JACK client {name:?} on {server_desc:?} (status {st:?}): \
                 is a JACK server running? Start one (jackd, PipeWire) or use a dummy \
                 server (--jack-dummy)"
            ),
        ));
    }
    // SAFETY: `raw` is a client jack_client_open just returned; the Client
    // owns it from now on and closes it on drop.
    Ok(unsafe { Client::from_raw(raw) })
}

/// One MIDI port a JACK server has, as [`list_ports`] sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JackPort {
    /// Full name, `client:port`.
    pub name: String,
    /// Other clients can write to it (a MIDI input of its client).
    pub is_input: bool,
    /// Other clients can read from it (a MIDI output of its client).
    pub is_output: bool,
    /// It stands for a hardware port.
    pub is_physical: bool,
    /// Its aliases (e.g. the ALSA name behind an a2jmidid port).
    pub aliases: Vec<String>,
}

/// The MIDI ports of a running JACK server (`None`: the default server),
/// like `jack_lsp -t` filtered to MIDI. Never starts a server.
///
/// # Errors
/// [`ErrorKind::NotInstalled`] without libjack; [`ErrorKind::ServerUnavailable`]
/// when no server of that name runs.
pub fn list_ports(server: Option<&str>) -> Result<Vec<JackPort>, Error> {
    let client = open_client("firmtime-ports", server)?;
    let mut out = Vec::new();
    for name in client.ports(None, Some("midi"), jack::PortFlags::empty()) {
        let Some(port) = client.port_by_name(&name) else {
            continue;
        };
        let flags = port.flags();
        out.push(JackPort {
            is_input: flags.contains(jack::PortFlags::IS_INPUT),
            is_output: flags.contains(jack::PortFlags::IS_OUTPUT),
            is_physical: flags.contains(jack::PortFlags::IS_PHYSICAL),
            aliases: port.aliases().unwrap_or_default(),
            name,
        });
    }
    Ok(out)
}

/// True when a JACK server of that name (`None`: the default) accepts
/// clients now. Never starts one.
pub fn server_running(server: Option<&str>) -> bool {
    // libjack prints "cannot connect to server" to stderr when none runs:
    // for a probe that is the expected answer, not an error.
    jack::set_logger(jack::LoggerType::None);
    let up = open_client("firmtime-probe", server).is_ok();
    jack::set_logger(jack::LoggerType::Stdio);
    up
}

/// The clock behind `jack_get_time()`, as [`JackBackend::open`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JackClock {
    /// CLOCK_MONOTONIC itself: no conversion (PipeWire's JACK, older jackd2).
    Monotonic,
    /// CLOCK_MONOTONIC_RAW (jackd2 1.9.x on Linux, as on Debian 12): converted
    /// with the measured CLOCK_MONOTONIC − CLOCK_MONOTONIC_RAW offset.
    MonotonicRaw,
    /// Neither: converted with an offset measured against `jack_get_time()`
    /// itself (µs resolution).
    Other,
}

/// Best (narrowest-window) measurement of `a() − b()` in ns over a few tries,
/// reading `b` between two readings of `a`.
fn sandwich(a: impl Fn() -> i128, b: impl Fn() -> i128) -> i128 {
    let mut best: Option<(i128, i128)> = None;
    for _ in 0..7 {
        let t0 = a();
        let x = b();
        let t1 = a();
        let width = t1 - t0;
        let off = t0 + width / 2 - x;
        match best {
            Some((w, _)) if w <= width => {}
            _ => best = Some((width, off)),
        }
    }
    best.map_or(0, |(_, o)| o)
}

/// The process-wide JACK → CLOCK_MONOTONIC offset, shared by every client of
/// this process so that clients in one server convert a frame to the very
/// same nanosecond: (offset ns, measured at CLOCK_MONOTONIC ns, clock).
static CLOCK_MAP: Mutex<Option<(i64, u64, JackClock)>> = Mutex::new(None);

/// How long a measured offset is reused before [`jack_clock_offset`] measures
/// again. CLOCK_MONOTONIC is slewed by NTP against CLOCK_MONOTONIC_RAW by at
/// most 500 ppm (typically a few ppm), so within this time the offset moves
/// by far less than a frame.
const CLOCK_MAP_REUSE_NS: u64 = 60_000_000_000;

/// The offset to add to `jack_get_time()` × 1000 to get CLOCK_MONOTONIC ns,
/// and which clock JACK uses. Called when a client opens (never from the
/// callback); within [`CLOCK_MAP_REUSE_NS`] of the last measurement every
/// client of the process gets the same value.
pub(crate) fn jack_clock_offset(client: &Client) -> (i64, JackClock) {
    let now = firmtime_rt::clock::monotonic_ns();
    let mut map = CLOCK_MAP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((off, at, clock)) = *map {
        if now.saturating_sub(at) < CLOCK_MAP_REUSE_NS {
            return (off, clock);
        }
    }
    let mono = || i128::from(firmtime_rt::clock::monotonic_ns());
    let raw = || i128::from(firmtime_rt::clock::read_ns(libc::CLOCK_MONOTONIC_RAW));
    let jack = || i128::from(client.time()) * 1000;
    let vs_mono = sandwich(mono, jack);
    let vs_raw = sandwich(raw, jack);
    // jack_get_time() truncates to µs: within 1 ms means "this clock".
    let (off, clock) = if vs_mono.abs() < 1_000_000 {
        (0, JackClock::Monotonic)
    } else if vs_raw.abs() < 1_000_000 {
        // Both are vDSO reads in ns: this offset is exact to tens of ns.
        (sandwich(mono, raw) as i64, JackClock::MonotonicRaw)
    } else {
        (vs_mono as i64, JackClock::Other)
    };
    *map = Some((off, now, clock));
    (off, clock)
}

/// Full names of the ports a client registered.
fn port_names<PS: jack::PortSpec>(ports: &[Port<PS>]) -> Result<Vec<String>, Error> {
    ports
        .iter()
        .map(|p| {
            p.name()
                .map_err(|e| Error::new(ErrorKind::Port, format!("JACK port name: {e}")))
        })
        .collect()
}

/// Connects `src` to `dst`, with an error that names both.
pub(crate) fn connect(client: &Client, src: &str, dst: &str) -> Result<(), Error> {
    client.connect_ports_by_name(src, dst).map_err(|e| {
        Error::new(
            ErrorKind::Port,
            format!("cannot connect JACK port {src:?} to {dst:?} ({e}): check the names with `jack_lsp`"),
        )
    })
}

/// Activates `client` with its handlers; `what` names the client in the
/// error ("JACK client").
pub(crate) fn activate<N, P>(
    client: Client,
    notifier: N,
    process: P,
    what: &str,
) -> Result<jack::AsyncClient<N, P>, Error>
where
    N: 'static + Send + Sync + jack::NotificationHandler,
    P: 'static + Send + jack::ProcessHandler,
{
    client
        .activate_async(notifier, process)
        .map_err(|e| Error::new(ErrorKind::Backend, format!("cannot activate {what}: {e}")))
}

/// Deactivates `client` and hands back its handlers; `what` as in [`activate`].
pub(crate) fn deactivate<N, P>(
    client: jack::AsyncClient<N, P>,
    what: &str,
) -> Result<(Client, N, P), Error>
where
    N: 'static + Send + Sync + jack::NotificationHandler,
    P: 'static + Send + jack::ProcessHandler,
{
    client
        .deactivate()
        .map_err(|e| Error::new(ErrorKind::Backend, format!("cannot deactivate {what}: {e}")))
}

/// The notification handler of the helper clients (tapper, relay,
/// recorder): it only counts xruns, into the counter `xruns` picks out of
/// the client's shared state.
pub(crate) struct XrunNotifier<S> {
    shared: Arc<S>,
    xruns: fn(&S) -> &AtomicU64,
}

impl<S> XrunNotifier<S> {
    pub(crate) fn new(shared: &Arc<S>, xruns: fn(&S) -> &AtomicU64) -> Self {
        XrunNotifier {
            shared: Arc::clone(shared),
            xruns,
        }
    }
}

impl<S: Send + Sync> jack::NotificationHandler for XrunNotifier<S> {
    fn xrun(&mut self, _: &Client) -> Control {
        bump((self.xruns)(&self.shared));
        Control::Continue
    }
}

struct Notifier {
    shared: Arc<Shared>,
}

impl jack::NotificationHandler for Notifier {
    unsafe fn shutdown(&mut self, _status: ClientStatus, _reason: &str) {
        self.shared.link.shut_down();
    }

    fn xrun(&mut self, _: &Client) -> Control {
        bump(&self.shared.link.counters.xruns);
        Control::Continue
    }
}

/// The audio side of the process callback.
struct AudioPart {
    synth: Synth,
    ports: Vec<Port<AudioOut>>,
    /// The output index the synth answers to.
    index: PortIndex,
}

struct Process {
    core: JackCore,
    ins: Vec<Port<MidiIn>>,
    outs: Vec<Port<MidiOut>>,
    audio: Option<AudioPart>,
    ext: FrameExtender,
    clock_offset_ns: i64,
}

/// The JACK port writers of one cycle (and the synth), as a [`MidiSink`].
struct Writers<'a> {
    w: [Option<jack::MidiWriter<'a>>; MAX_PORTS],
    synth: Option<(PortIndex, &'a mut Synth)>,
}

impl MidiSink for Writers<'_> {
    fn write(&mut self, port: PortIndex, offset: u32, bytes: &[u8]) -> bool {
        if let Some((index, synth)) = self.synth.as_mut() {
            if *index == port {
                return synth.queue(offset, bytes);
            }
        }
        match self.w.get_mut(usize::from(port)) {
            Some(Some(w)) => w
                .write(&RawMidi {
                    time: offset,
                    bytes,
                })
                .is_ok(),
            _ => false,
        }
    }
}

impl jack::ProcessHandler for Process {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        let cycle = read_cycle_times(ps, &mut self.ext, self.clock_offset_ns);
        for (i, port) in self.ins.iter().enumerate() {
            for ev in port.iter(ps) {
                self.core.input(&cycle, i as PortIndex, ev.time, ev.bytes);
            }
        }
        let mut outs = self.outs.iter_mut();
        // Creating a writer clears the port's buffer, as every cycle must.
        {
            let mut sink = Writers {
                w: std::array::from_fn(|_| outs.next().map(|p| p.writer(ps))),
                synth: self.audio.as_mut().map(|a| (a.index, &mut a.synth)),
            };
            self.core.output(&cycle, &mut sink);
        }
        if let Some(a) = self.audio.as_mut() {
            if let Some((first, rest)) = a.ports.split_first_mut() {
                let buf = first.as_mut_slice(ps);
                a.synth.render(buf);
                for p in rest {
                    p.as_mut_slice(ps).copy_from_slice(buf);
                }
            } else {
                a.synth.render(&mut []);
            }
        }
        self.core.end_cycle();
        Control::Continue
    }
}

/// A JACK MIDI client: the engine side of the JACK backend.
///
/// Drop it (or call [`JackBackend::close`]) to deactivate and close the client.
pub struct JackBackend {
    client: Option<jack::AsyncClient<Notifier, Process>>,
    ends: EngineEnds,
    shared: Arc<Shared>,
    n_outputs: usize,
    input_names: Vec<String>,
    output_names: Vec<String>,
    audio_names: Vec<String>,
    audio_port: Option<PortIndex>,
    audio_counters: Option<Arc<audio::AudioCounters>>,
    client_name: String,
    sample_rate: u32,
    buffer_size: u32,
    clock_offset_ns: i64,
    jack_clock: JackClock,
}

impl fmt::Debug for JackBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JackBackend")
            .field("client_name", &self.client_name)
            .field("inputs", &self.input_names)
            .field("outputs", &self.output_names)
            .field("sample_rate", &self.sample_rate)
            .field("clock_offset_ns", &self.clock_offset_ns)
            .finish_non_exhaustive()
    }
}

fn check_ports(what: &str, names: &[String]) -> Result<(), Error> {
    if names.len() > MAX_PORTS {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} MIDI {what} ports asked for; at most {MAX_PORTS}",
                names.len()
            ),
        ));
    }
    Ok(())
}

impl JackBackend {
    /// Opens the client, registers its MIDI ports, activates it and makes
    /// the connections asked for.
    ///
    /// # Errors
    /// [`ErrorKind::NotInstalled`] without libjack;
    /// [`ErrorKind::ServerUnavailable`] when no server runs under that
    /// name; [`ErrorKind::Port`] when a port cannot be registered or
    /// connected; [`ErrorKind::InvalidInput`] for more than
    /// [`MAX_PORTS`] ports or a zero queue capacity.
    pub fn open(options: JackOptions) -> Result<Self, Error> {
        check_ports("input", &options.inputs)?;
        check_ports("output", &options.outputs)?;
        if options.queue_capacity == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "JACK queue capacity must be at least 1 event",
            ));
        }
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let reg_err = |name: &str, e: jack::Error| {
            Error::new(
                ErrorKind::Port,
                format!("cannot register JACK MIDI port {name:?}: {e}"),
            )
        };
        let mut ins = Vec::with_capacity(options.inputs.len());
        for name in &options.inputs {
            ins.push(
                client
                    .register_port(name, MidiIn::default())
                    .map_err(|e| reg_err(name, e))?,
            );
        }
        let mut outs = Vec::with_capacity(options.outputs.len());
        for name in &options.outputs {
            outs.push(
                client
                    .register_port(name, MidiOut::default())
                    .map_err(|e| reg_err(name, e))?,
            );
        }
        let input_names = port_names(&ins)?;
        let output_names = port_names(&outs)?;
        let sample_rate = client.sample_rate();
        let audio =
            match &options.audio {
                None => None,
                Some(a) => {
                    if a.ports.is_empty() || a.ports.len() > audio::MAX_AUDIO_PORTS {
                        return Err(Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{} audio ports asked for; 1 to {} (all carry the same sound)",
                                a.ports.len(),
                                audio::MAX_AUDIO_PORTS
                            ),
                        ));
                    }
                    let synth = Synth::new(a.synth, sample_rate)?;
                    let mut ports = Vec::with_capacity(a.ports.len());
                    for name in &a.ports {
                        ports.push(client.register_port(name, AudioOut::default()).map_err(
                            |e| {
                                Error::new(
                                    ErrorKind::Port,
                                    format!("cannot register JACK audio port {name:?}: {e}"),
                                )
                            },
                        )?);
                    }
                    Some(AudioPart {
                        synth,
                        ports,
                        index: options.outputs.len() as PortIndex,
                    })
                }
            };
        let audio_names = match &audio {
            Some(a) => port_names(&a.ports)?,
            None => Vec::new(),
        };
        let audio_port = audio.as_ref().map(|a| a.index);
        let audio_counters = audio.as_ref().map(|a| a.synth.counters());
        let (clock_offset_ns, jack_clock) = jack_clock_offset(&client);
        let client_name = client.name().to_string();
        let buffer_size = client.buffer_size();
        let (core, ends, shared) = new_core(options.queue_capacity);
        let process = Process {
            core,
            ins,
            outs,
            audio,
            ext: FrameExtender::default(),
            clock_offset_ns,
        };
        let notifier = Notifier {
            shared: Arc::clone(&shared),
        };
        let active = activate(client, notifier, process, "JACK client")?;
        let backend = JackBackend {
            client: Some(active),
            ends,
            shared,
            n_outputs: options.outputs.len() + usize::from(audio_port.is_some()),
            input_names,
            output_names,
            audio_names,
            audio_port,
            audio_counters,
            client_name,
            sample_rate,
            buffer_size,
            clock_offset_ns,
            jack_clock,
        };
        let c = backend.jack_client();
        for (i, src) in options.connect_inputs.iter().enumerate() {
            if let Some(dst) = backend
                .input_names
                .get(i.min(backend.input_names.len().saturating_sub(1)))
            {
                connect(c, src, dst)?;
            }
        }
        for (i, dst) in options.connect_outputs.iter().enumerate() {
            if let Some(src) = backend
                .output_names
                .get(i.min(backend.output_names.len().saturating_sub(1)))
            {
                connect(c, src, dst)?;
            }
        }
        if let Some(a) = &options.audio {
            for (i, dst) in a.connect.iter().enumerate() {
                let n = backend.audio_names.len();
                connect(c, &backend.audio_names[i.min(n - 1)], dst)?;
            }
        }
        Ok(backend)
    }

    fn jack_client(&self) -> &Client {
        self.client
            .as_ref()
            .map(jack::AsyncClient::as_client)
            .expect("client is Some until close or drop")
    }

    /// The client's name as JACK registered it.
    pub fn client_name(&self) -> &str {
        &self.client_name
    }

    /// Full names (`client:port`) of the input ports, by [`PortIndex`].
    pub fn input_port_names(&self) -> &[String] {
        &self.input_names
    }

    /// Full names (`client:port`) of the output ports, by [`PortIndex`].
    pub fn output_port_names(&self) -> &[String] {
        &self.output_names
    }

    /// The output index whose note messages the synth renders as audio
    /// (one past the MIDI outputs), when audio was asked for. **RT-safe.**
    pub fn audio_port(&self) -> Option<PortIndex> {
        self.audio_port
    }

    /// Full names of the audio output ports (empty without audio).
    pub fn audio_port_names(&self) -> &[String] {
        &self.audio_names
    }

    /// The synth's counters (`None` without audio). **RT-safe.**
    pub fn audio_stats(&self) -> Option<AudioStats> {
        self.audio_counters.as_ref().map(|c| c.stats())
    }

    /// The server's sample rate, Hz.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// The server's period (frames per cycle) when the client opened.
    pub fn buffer_size(&self) -> u32 {
        self.buffer_size
    }

    /// What is added to JACK time (µs × 1000) to get CLOCK_MONOTONIC ns;
    /// 0 when JACK's clock is CLOCK_MONOTONIC.
    pub fn clock_offset_ns(&self) -> i64 {
        self.clock_offset_ns
    }

    /// The clock JACK's times are on.
    pub fn jack_clock(&self) -> JackClock {
        self.jack_clock
    }

    /// The server's frame counter now (32 bits, wraps), from a non-RT thread.
    pub fn frame_time(&self) -> u32 {
        self.jack_client().frame_time()
    }

    /// Process cycles run so far. **RT-safe.**
    pub fn cycles(&self) -> u64 {
        self.shared.cycles.load(Ordering::Relaxed)
    }

    /// Sent reports lost because [`MidiBackend::poll_sent`] was not called
    /// often enough (the events themselves went out). **RT-safe.**
    pub fn sent_reports_dropped(&self) -> u64 {
        self.shared.reports_dropped.load(Ordering::Relaxed)
    }

    /// Connects two ports by full name (any clients), e.g. to wire other
    /// clients to this one after opening.
    ///
    /// # Errors
    /// [`ErrorKind::Port`] when either port does not exist or the
    /// connection is refused.
    pub fn connect(&self, src: &str, dst: &str) -> Result<(), Error> {
        connect(self.jack_client(), src, dst)
    }

    /// Deactivates and closes the client.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when JACK refuses to deactivate it (it is closed anyway).
    pub fn close(mut self) -> Result<(), Error> {
        self.deactivate()
    }

    fn deactivate(&mut self) -> Result<(), Error> {
        match self.client.take() {
            Some(c) => deactivate(c, "JACK client").map(|_| ()),
            None => Ok(()),
        }
    }
}

impl Drop for JackBackend {
    fn drop(&mut self) {
        let _ = self.deactivate();
    }
}

impl MidiBackend for JackBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Jack
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        self.ends.poll_input(&self.shared.link, f)
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        self.ends.wait(&self.shared.link, deadline_ns)
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        if usize::from(ev.port) >= self.n_outputs {
            return Err(BackendError::NoSuchPort(ev.port));
        }
        self.ends.send(&self.shared.link, ev)
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        self.ends.poll_sent(f)
    }

    fn stats(&self) -> BackendStats {
        self.shared.link.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MidiMessage;

    /// A sink that records into a preallocated buffer, like a JACK port buffer.
    struct VecSink {
        out: Vec<(PortIndex, u32, [u8; 3], usize)>,
        room: usize,
    }

    impl VecSink {
        fn new(room: usize) -> Self {
            VecSink {
                out: Vec::with_capacity(room),
                room,
            }
        }
    }

    impl MidiSink for VecSink {
        fn write(&mut self, port: PortIndex, offset: u32, bytes: &[u8]) -> bool {
            if self.out.len() >= self.room {
                return false;
            }
            if let Some(last) = self.out.last() {
                assert!(last.1 <= offset, "JACK needs non-decreasing offsets");
            }
            let mut b = [0; 3];
            b[..bytes.len()].copy_from_slice(bytes);
            self.out.push((port, offset, b, bytes.len()));
            true
        }
    }

    // 48 kHz, 256 frames: 5_333_333 ns per cycle.
    fn cycle(k: u64) -> CycleTimes {
        let start = 1_000_000_000 + k * 5_333_333;
        CycleTimes {
            frame: 10_000 + k * 256,
            n_frames: 256,
            start_ns: start,
            next_ns: start + 5_333_333,
        }
    }

    fn note(n: u8) -> MidiMessage {
        MidiMessage::NoteOn {
            channel: 0,
            note: n,
            velocity: 100,
        }
    }

    #[test]
    fn frame_ns_round_trip_is_exact() {
        let c = cycle(3);
        for f in (c.frame - 1000)..(c.frame + 2000) {
            assert_eq!(c.ns_to_frame(c.frame_to_ns(f)), f, "frame {f}");
        }
        assert_eq!(c.frame_to_ns(c.frame), c.start_ns);
        assert_eq!(c.frame_to_ns(c.end_frame()), c.next_ns);
        // One ns after a frame's time belongs to the next frame: never early.
        assert_eq!(c.ns_to_frame(c.start_ns + 1), c.frame + 1);
        assert_eq!(c.ns_to_frame(0), 0);
    }

    #[test]
    fn frame_counter_wrap_extends_to_64_bits() {
        let mut e = FrameExtender::default();
        assert_eq!(e.extend(u32::MAX - 255), u64::from(u32::MAX - 255));
        assert_eq!(e.extend(0), 1 << 32);
        assert_eq!(e.extend(256), (1 << 32) + 256);
    }

    #[test]
    fn input_gets_frame_and_time_of_its_offset() {
        let (mut core, mut ends, shared) = new_core(16);
        let c = cycle(0);
        assert_no_alloc::assert_no_alloc(|| {
            core.input(&c, 0, 0, &[0x90, 60, 100]);
            core.input(&c, 1, 128, &[0x80, 60, 0]);
            core.input(&c, 0, 200, &[60, 100]); // no status byte: malformed
            core.end_cycle();
        });
        let a = ends.input_rx.pop().unwrap();
        let b = ends.input_rx.pop().unwrap();
        assert!(ends.input_rx.pop().is_err());
        assert_eq!((a.frame, a.t_ns, a.port), (Some(10_000), c.start_ns, 0));
        assert_eq!(a.msg, note(60));
        assert_eq!(b.frame, Some(10_128));
        assert_eq!(b.t_ns, c.start_ns + 5_333_333 / 2);
        assert_eq!(b.port, 1);
        assert_eq!(shared.link.counters.malformed.load(Ordering::Relaxed), 1);
        assert_eq!(
            shared.link.seq.load(Ordering::Relaxed),
            1,
            "engine woken once"
        );
    }

    #[test]
    fn input_ring_full_is_counted() {
        let (mut core, _ends, shared) = new_core(2);
        let c = cycle(0);
        assert_no_alloc::assert_no_alloc(|| {
            for i in 0..5 {
                core.input(&c, 0, i, &[0x90, 60, 100]);
            }
        });
        assert_eq!(
            shared.link.counters.input_dropped.load(Ordering::Relaxed),
            3
        );
    }

    #[test]
    fn scheduled_output_goes_out_at_its_exact_frame_in_its_cycle() {
        let (mut core, mut ends, shared) = new_core(64);
        let c0 = cycle(0);
        let c2 = cycle(2);
        // Frame 10_600 lies in cycle 2 (10_512..10_768), offset 88.
        let at = c2.frame_to_ns(10_600);
        let later = c2.frame_to_ns(10_601);
        ends.output_tx
            .push(OutputEvent {
                at_ns: Some(later),
                port: 0,
                msg: note(2),
                tag: 2,
            })
            .unwrap();
        ends.output_tx
            .push(OutputEvent {
                at_ns: Some(at),
                port: 0,
                msg: note(1),
                tag: 1,
            })
            .unwrap();
        ends.output_tx
            .push(OutputEvent {
                at_ns: None,
                port: 0,
                msg: note(0),
                tag: 0,
            })
            .unwrap();
        let mut sink = VecSink::new(16);
        assert_no_alloc::assert_no_alloc(|| core.output(&c0, &mut sink));
        // Only the "now" event goes out in cycle 0, at offset 0.
        assert_eq!(sink.out.len(), 1);
        assert_eq!((sink.out[0].1, sink.out[0].2), (0, [0x90, 0, 100]));
        let mut sink = VecSink::new(16);
        assert_no_alloc::assert_no_alloc(|| core.output(&cycle(1), &mut sink));
        assert!(sink.out.is_empty());
        assert_no_alloc::assert_no_alloc(|| core.output(&c2, &mut sink));
        let placed: Vec<_> = sink.out.iter().map(|o| (o.1, o.2[1])).collect();
        assert_eq!(placed, [(88, 1), (89, 2)], "time order, exact offsets");
        let sent: Vec<SentEvent> = std::iter::from_fn(|| ends.sent_rx.pop().ok()).collect();
        assert_eq!(sent.len(), 3);
        assert_eq!((sent[0].tag, sent[0].frame), (0, Some(10_000)));
        assert_eq!(
            (sent[1].tag, sent[1].frame, sent[1].actual_ns),
            (1, Some(10_600), at)
        );
        assert_eq!(
            (sent[2].tag, sent[2].frame, sent[2].actual_ns),
            (2, Some(10_601), later)
        );
        assert_eq!(shared.link.counters.sent.load(Ordering::Relaxed), 3);
        assert_eq!(shared.link.counters.late_outputs.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn output_whose_frame_passed_goes_at_offset_zero_and_counts_late() {
        let (mut core, mut ends, shared) = new_core(8);
        let c = cycle(5);
        let past = cycle(3).frame_to_ns(cycle(3).frame + 7);
        ends.output_tx
            .push(OutputEvent {
                at_ns: Some(past),
                port: 0,
                msg: note(9),
                tag: 9,
            })
            .unwrap();
        let mut sink = VecSink::new(4);
        assert_no_alloc::assert_no_alloc(|| core.output(&c, &mut sink));
        assert_eq!(sink.out[0].1, 0);
        let s = ends.sent_rx.pop().unwrap();
        assert_eq!(s.frame, Some(c.frame));
        assert_eq!(s.intended_ns, Some(past));
        assert_eq!(shared.link.counters.late_outputs.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn full_queue_and_full_port_drop_and_count() {
        let (mut core, mut ends, shared) = new_core(2);
        let far = cycle(100).start_ns;
        for tag in 0..2 {
            ends.output_tx
                .push(OutputEvent {
                    at_ns: Some(far),
                    port: 0,
                    msg: note(1),
                    tag,
                })
                .unwrap();
        }
        let mut sink = VecSink::new(0);
        core.output(&cycle(0), &mut sink);
        for tag in 2..4 {
            ends.output_tx
                .push(OutputEvent {
                    at_ns: None,
                    port: 0,
                    msg: note(1),
                    tag,
                })
                .unwrap();
        }
        assert_no_alloc::assert_no_alloc(|| core.output(&cycle(1), &mut sink));
        // Queue of 2 holds the two far events: both "now" events are refused.
        assert_eq!(
            shared.link.counters.output_dropped.load(Ordering::Relaxed),
            2
        );
        // In cycle 100 the port has no room: both dropped, none sent.
        assert_no_alloc::assert_no_alloc(|| core.output(&cycle(100), &mut sink));
        assert_eq!(
            shared.link.counters.output_dropped.load(Ordering::Relaxed),
            4
        );
        assert_eq!(shared.link.counters.sent.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn tapper_core_places_taps_at_start_plus_offset() {
        let taps = vec![
            tapper::Tap {
                offset: 300,
                msg: note(2),
            },
            tapper::Tap {
                offset: 0,
                msg: note(1),
            },
            tapper::Tap {
                offset: 1000,
                msg: note(3),
            },
        ];
        let mut core = tapper::TapperCore::new_for_test(taps, 10);
        let mut sink = VecSink::new(8);
        core.emit(&cycle(0), &mut sink);
        assert!(sink.out.is_empty(), "not armed yet");
        core.arm_for_test();
        assert_no_alloc::assert_no_alloc(|| {
            for k in 1..8 {
                core.emit(&cycle(k), &mut sink);
            }
        });
        let start = cycle(1).frame + 10;
        let recs = core.records_for_test();
        let frames: Vec<u64> = recs.iter().map(|r| r.frame).collect();
        assert_eq!(frames, [start, start + 300, start + 1000]);
        assert!(recs.iter().all(|r| !r.late));
        assert_eq!(recs[1].t_ns, cycle(2).frame_to_ns(start + 300));
        let notes: Vec<u8> = sink.out.iter().map(|o| o.2[1]).collect();
        assert_eq!(notes, [1, 2, 3]);
    }
}
