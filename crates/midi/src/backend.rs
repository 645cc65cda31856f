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
        let ld = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BackendStats {
            received: ld(&self.received),
            sent: ld(&self.sent),
            input_dropped: ld(&self.input_dropped),
            output_dropped: ld(&self.output_dropped),
            late_outputs: ld(&self.late_outputs),
            malformed: ld(&self.malformed),
            xruns: ld(&self.xruns),
            frame_gaps: ld(&self.frame_gaps),
        }
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
