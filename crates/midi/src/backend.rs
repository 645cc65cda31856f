//! One interface over every MIDI backend: JACK, a raw byte-stream fd, the
//! ALSA sequencer and an in-process loopback.
//!
//! A backend has two sides. Its real-time side (a JACK process callback, or
//! an RT thread the backend starts to poll a device) timestamps input and
//! emits scheduled output at its time. Its engine side, the value that
//! implements [`MidiBackend`], is what an experiment engine or the loop test
//! calls: it drains timestamped input, queues output "now" or "at t", and
//! learns when each output actually went out. The two sides talk through
//! preallocated SPSC rings; nothing is allocated after `open`.
//!
//! This module also holds what the backends share inside the crate: the
//! atomic `Counters` behind every backend's [`BackendStats`], and the link
//! (rings plus a futex word, `EngineLink` and `EngineEnds`) through which
//! the JACK process callback and the ALSA thread wake their engine side.
//!
//! All times are `CLOCK_MONOTONIC` nanoseconds
//! (`firmtime_rt::clock::monotonic_ns` on the same host),
//! whatever the backend's native time base (JACK frames, ALSA queue time).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use rtrb::{Consumer, Producer};

use crate::MidiMessage;

/// Index of a backend port (input or output), in the order the ports were opened.
pub type PortIndex = u16;

/// Which backend this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// JACK MIDI (jackd2 or PipeWire's JACK): frame-accurate timestamps.
    Jack,
    /// A raw MIDI byte stream: serial tty, `/dev/midi*`, `/dev/snd/midiC*D*`, a pty.
    Raw,
    /// The ALSA sequencer with a kernel real-time queue.
    Alsa,
    /// An in-process loopback, for tests.
    Loopback,
}

/// One received MIDI message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputEvent {
    /// When the message arrived, CLOCK_MONOTONIC ns: for JACK the time of its
    /// frame, for raw the arrival of its first byte, for ALSA the queue timestamp.
    pub t_ns: u64,
    /// The absolute frame (JACK frame time) of the event, where the backend has frames.
    pub frame: Option<u64>,
    /// The input port it came in on.
    pub port: PortIndex,
    /// The message (a SysEx is reported by length only).
    pub msg: MidiMessage,
}

/// One MIDI message to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputEvent {
    /// When it should go out, CLOCK_MONOTONIC ns; `None` means as soon as possible.
    pub at_ns: Option<u64>,
    /// The output port.
    pub port: PortIndex,
    /// The message (SysEx is not sent through this path).
    pub msg: MidiMessage,
    /// A caller-chosen tag echoed in [`SentEvent`], so the caller can match
    /// what it asked for with what happened (e.g. an index into its event log).
    pub tag: u32,
}

/// An output event as it actually went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentEvent {
    /// The time that was asked for (`None`: as soon as possible).
    pub intended_ns: Option<u64>,
    /// When it actually went out, CLOCK_MONOTONIC ns: for JACK the time of the
    /// frame it was placed at, for raw the write of its first byte.
    pub actual_ns: u64,
    /// The absolute frame it was placed at, where the backend has frames.
    pub frame: Option<u64>,
    /// The output port.
    pub port: PortIndex,
    /// The message.
    pub msg: MidiMessage,
    /// The tag given in [`OutputEvent::tag`].
    pub tag: u32,
}

/// Counters every backend keeps. Nothing is dropped without being counted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Input messages delivered to the engine side.
    pub received: u64,
    /// Output messages that went out.
    pub sent: u64,
    /// Input messages lost because the engine did not drain fast enough.
    pub input_dropped: u64,
    /// Output messages refused because the output queue was full.
    pub output_dropped: u64,
    /// Output messages that went out later than asked, beyond each backend's
    /// tolerance: JACK counts an event whose frame had already passed when
    /// its cycle ran (it goes out at the cycle's first frame; the tolerance
    /// is the rounding up to the next frame, under one frame); raw counts a
    /// write more than 1 ms after its time
    /// ([`raw::LATE_TOLERANCE_NS`](crate::raw::LATE_TOLERANCE_NS)); ALSA
    /// counts an event whose time had already passed when it was handed to
    /// the kernel queue; the loopback never counts any.
    pub late_outputs: u64,
    /// Malformed input bytes or events (stray data, truncated messages, …).
    pub malformed: u64,
    /// Server xruns (JACK) or device overruns seen while open.
    pub xruns: u64,
    /// JACK: cycles that did not start where the previous one ended (cycles
    /// the server dropped). jackd reports those as xruns too; PipeWire never
    /// calls the xrun callback, so this is the only count of them there.
    /// 0 for other backends.
    pub frame_gaps: u64,
}

/// The atomic counters behind [`BackendStats`], one per field, shared by a
/// backend's real-time side and its engine side. A counter a backend does
/// not keep stays 0.
///
/// Every method is **RT-safe.**: one Relaxed atomic operation per counter,
/// no lock, no allocation.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
    pub(crate) input_dropped: AtomicU64,
    pub(crate) output_dropped: AtomicU64,
    pub(crate) late_outputs: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) xruns: AtomicU64,
    pub(crate) frame_gaps: AtomicU64,
}

impl Counters {
    /// Counts `n` input messages delivered to the engine side.
    pub(crate) fn add_received(&self, n: usize) {
        self.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The counters now, as [`BackendStats`].
    pub(crate) fn snapshot(&self) -> BackendStats {
        firmtime_rt::load_counters!(BackendStats {
            received, sent, input_dropped, output_dropped, late_outputs, malformed, xruns,
            frame_gaps,
        } from self)
    }
}

/// Adds one to a counter. **RT-safe.**
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Calls `f` for everything in `rx`, oldest first, and returns how many
/// there were: the body of [`MidiBackend::poll_sent`] and of the drain in
/// [`MidiBackend::poll_input`]. **RT-safe.**
pub(crate) fn drain<T>(rx: &mut Consumer<T>, f: &mut dyn FnMut(T)) -> usize {
    let mut n = 0;
    while let Ok(item) = rx.pop() {
        f(item);
        n += 1;
    }
    n
}

/// Why a backend's input source went away (see [`InputLoss`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// The last connection into an input port was removed (JACK; ALSA: the
    /// last subscription): the source's port was disconnected, the source
    /// itself may still run.
    PortDisconnected,
    /// The client feeding an input port went away (JACK: it closed, crashed
    /// or was killed; ALSA: its port or client exited).
    ClientGone,
    /// The server shut this client down or went away (JACK, PipeWire).
    ServerShutdown,
    /// The server ran no process cycle for a second while the engine
    /// waited for it: killed or stopped without telling its clients
    /// (PipeWire's JACK does not), or hung.
    ServerStopped,
    /// The device ended: end of file or hang-up (raw).
    DeviceClosed,
    /// The device failed with this OS error number (raw, ALSA).
    DeviceError(i32),
    /// The backend reported a disconnection without saying more.
    Disconnected,
}

impl LossCause {
    /// The sidecar's spelling: `port_disconnected`, `client_gone`,
    /// `server_shutdown`, `server_stopped`, `device_closed`, `device_error`,
    /// `disconnected`.
    pub fn key(self) -> &'static str {
        match self {
            LossCause::PortDisconnected => "port_disconnected",
            LossCause::ClientGone => "client_gone",
            LossCause::ServerShutdown => "server_shutdown",
            LossCause::ServerStopped => "server_stopped",
            LossCause::DeviceClosed => "device_closed",
            LossCause::DeviceError(_) => "device_error",
            LossCause::Disconnected => "disconnected",
        }
    }

    /// The cause in words, for messages and the live line.
    pub fn words(self) -> String {
        match self {
            LossCause::PortDisconnected => "the input port was disconnected".into(),
            LossCause::ClientGone => "the client feeding the input went away".into(),
            LossCause::ServerShutdown => "the JACK server shut the client down".into(),
            LossCause::ServerStopped => {
                "the JACK server ran no cycle for a second (killed, stopped or hung)".into()
            }
            LossCause::DeviceClosed => "the device closed (end of file or hang-up)".into(),
            LossCause::DeviceError(e) => format!(
                "the device failed: {}",
                std::io::Error::from_raw_os_error(e)
            ),
            LossCause::Disconnected => "the MIDI backend disconnected".into(),
        }
    }

    /// The cause as one number, for an atomic ([`LossCause::from_bits`]).
    pub fn to_bits(self) -> u32 {
        match self {
            LossCause::PortDisconnected => 1,
            LossCause::ClientGone => 2,
            LossCause::ServerShutdown => 3,
            LossCause::DeviceClosed => 4,
            // The errno in the upper bits (errno values are small and positive).
            LossCause::DeviceError(e) => 5 | ((e.max(0) as u32) << 8),
            LossCause::Disconnected => 6,
            LossCause::ServerStopped => 7,
        }
    }

    /// The cause stored by [`LossCause::to_bits`]; `None` for 0 (no loss).
    pub fn from_bits(c: u32) -> Option<Self> {
        Some(match c & 0xff {
            1 => LossCause::PortDisconnected,
            2 => LossCause::ClientGone,
            3 => LossCause::ServerShutdown,
            4 => LossCause::DeviceClosed,
            5 => LossCause::DeviceError((c >> 8) as i32),
            6 => LossCause::Disconnected,
            7 => LossCause::ServerStopped,
            _ => return None,
        })
    }
}

/// The backend's input source went away: a keyboard unplugged or killed,
/// its port disconnected, the server or device gone. Small and `Copy`:
/// read on the RT path ([`MidiBackend::input_loss`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLoss {
    /// Why.
    pub cause: LossCause,
    /// When the backend learnt of it, CLOCK_MONOTONIC ns.
    pub t_ns: u64,
    /// Losses since the backend opened, this one included: a loss after a
    /// moment `m` has a count above the one read at `m`.
    pub count: u32,
    /// The input is still without a source (false once a JACK port got a
    /// connection again).
    pub ongoing: bool,
}

/// The latest [`InputLoss`] of a backend, written by a non-RT thread (a
/// JACK notification, a device thread) and read by the engine side.
/// **RT-safe.**: atomics only; the words describing the loss are in a
/// mutex only non-RT code touches.
#[derive(Debug, Default)]
pub(crate) struct LossCell {
    count: AtomicU32,
    cause: AtomicU32,
    t_ns: AtomicU64,
    ongoing: AtomicBool,
    detail: Mutex<String>,
}

impl LossCell {
    /// Records a new loss of the input at `t_ns`. **RT-safe.** (async-signal-safe).
    pub(crate) fn lose(&self, cause: LossCause, t_ns: u64) {
        self.t_ns.store(t_ns, Ordering::Relaxed);
        self.cause.store(cause.to_bits(), Ordering::Relaxed);
        self.ongoing.store(true, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Release);
    }

    /// A better account of the current loss (a port's disconnection turns
    /// out to be its client's exit). **RT-safe.**
    pub(crate) fn refine(&self, cause: LossCause) {
        if self.count.load(Ordering::Acquire) > 0 {
            self.cause.store(cause.to_bits(), Ordering::Release);
        }
    }

    /// The input has a source again. **RT-safe.**
    pub(crate) fn restored(&self) {
        self.ongoing.store(false, Ordering::Release);
    }

    /// Sets the words describing the loss (non-RT).
    pub(crate) fn set_detail(&self, words: String) {
        *self
            .detail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = words;
    }

    /// The words describing the loss, if any (non-RT).
    pub(crate) fn detail(&self) -> Option<String> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let d = self
            .detail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (!d.is_empty()).then(|| d.clone())
    }

    /// The latest loss, `None` before any. **RT-safe.**
    pub(crate) fn get(&self) -> Option<InputLoss> {
        let count = self.count.load(Ordering::Acquire);
        if count == 0 {
            return None;
        }
        Some(InputLoss {
            cause: LossCause::from_bits(self.cause.load(Ordering::Acquire))
                .unwrap_or(LossCause::Disconnected),
            t_ns: self.t_ns.load(Ordering::Relaxed),
            count,
            ongoing: self.ongoing.load(Ordering::Acquire),
        })
    }
}

/// What a real-time side that wakes its engine side through a futex (the
/// JACK process callback, the ALSA thread) shares with that engine side.
#[derive(Debug, Default)]
pub(crate) struct EngineLink {
    pub(crate) counters: Counters,
    /// Set once the server or device went away.
    pub(crate) shutdown: AtomicBool,
    /// The input's latest loss (the server's or device's end is one).
    pub(crate) loss: LossCell,
    /// Futex word: bumped (and woken) when the RT side delivered something.
    pub(crate) seq: AtomicU32,
}

impl EngineLink {
    /// Wakes the engine side. **RT-safe** (one non-blocking syscall).
    pub(crate) fn notify(&self) {
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake(&self.seq);
    }

    /// Marks the server or device gone (`cause`) and wakes the engine
    /// side. **RT-safe.** (async-signal-safe: atomics and a futex wake).
    pub(crate) fn shut_down(&self, cause: LossCause) {
        self.loss.lose(cause, firmtime_rt::clock::monotonic_ns());
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
    let ts = firmtime_rt::clock::timespec(deadline_ns);
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

/// A failure on the engine side. Small and `Copy`: returned on the RT path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// The output queue is full; the event was not queued (it is counted).
    OutputQueueFull,
    /// The device, server or peer went away. Data received so far stays
    /// available; the run should end with a clear error.
    Disconnected,
    /// No such port index.
    NoSuchPort(PortIndex),
    /// An OS error number from the backend's system calls.
    Os(i32),
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OutputQueueFull => f.write_str("MIDI output queue full: event not sent"),
            Self::Disconnected => f.write_str("MIDI device or server disconnected"),
            Self::NoSuchPort(p) => write!(f, "no MIDI port with index {p}"),
            Self::Os(e) => write!(f, "MIDI backend: {}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

impl std::error::Error for BackendError {}

/// The engine side of a MIDI backend.
///
/// Every method is **RT-safe.**: no allocation, no lock a non-RT thread
/// holds, no blocking except in [`MidiBackend::wait`].
pub trait MidiBackend: Send {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Calls `f` for every input event received since the last call, oldest
    /// first, and returns how many there were.
    ///
    /// # Errors
    /// [`BackendError::Disconnected`] once the device or server is gone and
    /// every event received before that has been delivered.
    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError>;

    /// Blocks until input may be available or `deadline_ns` (CLOCK_MONOTONIC)
    /// has passed, whichever is first. May return early; callers loop.
    ///
    /// # Errors
    /// As [`MidiBackend::poll_input`].
    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError>;

    /// Queues `ev` for output at its time (or at once).
    ///
    /// # Errors
    /// [`BackendError::OutputQueueFull`] (counted), [`BackendError::NoSuchPort`],
    /// [`BackendError::Disconnected`].
    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError>;

    /// Calls `f` for every output event that went out since the last call,
    /// with its actual time, and returns how many there were.
    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize;

    /// The counters so far.
    fn stats(&self) -> BackendStats;

    /// The latest loss of the input source since the backend opened (a
    /// JACK port disconnected or its client gone, the server shut down, a
    /// device error or end of file), `None` if there was none. An engine
    /// reads the count at its start and ends its trial when a loss with a
    /// higher count appears, or when the loss is still
    /// [`ongoing`](InputLoss::ongoing). The default: a backend that cannot
    /// tell (none).
    fn input_loss(&self) -> Option<InputLoss> {
        None
    }

    /// The latest loss in words naming the ports or device concerned (for
    /// the sidecar and messages), `None` when there was none or the backend
    /// has nothing to add to [`LossCause::words`]. **Not RT-safe** (it
    /// allocates): call it after the trial.
    fn describe_input_loss(&self) -> Option<String> {
        None
    }

    /// Calls `f` for each block of audio input queued since the last call,
    /// oldest first, and returns how many there were: taps from sound
    /// ([`crate::jack::audio_in`]). Backends without an audio input have
    /// none. **RT-safe.**
    fn poll_audio(&mut self, _f: &mut dyn FnMut(&crate::jack::AudioBlock)) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_each_counter_into_its_own_field() {
        let c = Counters::default();
        c.add_received(1);
        let each = [
            (&c.sent, 2),
            (&c.input_dropped, 3),
            (&c.output_dropped, 4),
            (&c.late_outputs, 5),
            (&c.malformed, 6),
            (&c.xruns, 7),
            (&c.frame_gaps, 8),
        ];
        for (counter, n) in each {
            for _ in 0..n {
                bump(counter);
            }
        }
        let want = BackendStats {
            received: 1,
            sent: 2,
            input_dropped: 3,
            output_dropped: 4,
            late_outputs: 5,
            malformed: 6,
            xruns: 7,
            frame_gaps: 8,
        };
        assert_eq!(assert_no_alloc::assert_no_alloc(|| c.snapshot()), want);
    }

    #[test]
    fn drain_hands_over_everything_in_order() {
        let (mut tx, mut rx) = rtrb::RingBuffer::new(4);
        for i in 0..3u32 {
            tx.push(i).unwrap();
        }
        let mut got = [0u32; 4];
        let n = assert_no_alloc::assert_no_alloc(|| {
            let mut k = 0;
            drain(&mut rx, &mut |v| {
                got[k] = v;
                k += 1;
            })
        });
        assert_eq!((n, got), (3, [0, 1, 2, 0]));
        assert_eq!(drain(&mut rx, &mut |_| {}), 0);
    }
}
