//! A simulated tapper: a JACK client of its own that plays MIDI messages at
//! known frames, and returns the ground truth to compare recordings with.
//!
//! The schedule is given up front as frame offsets from a start frame. The
//! start frame is fixed by the first process cycle after the client is
//! activated and connected: that cycle's first frame plus
//! [`TapperOptions::lead_frames`]. Each tap goes out at its exact frame
//! (`start + offset`), and its [`TapRecord`] says which absolute frame that
//! was and its CLOCK_MONOTONIC time, converted exactly as
//! [`JackBackend`](super::JackBackend) converts input, so a recording client
//! in the same server must see the same frame and the same nanoseconds.
//!
//! # Real-time contract
//!
//! The schedule and the record buffer are allocated in [`Tapper::start`];
//! the process callback only indexes them, writes to its port and stores
//! atomics. No allocation, no locks, no printing.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jack::{Client, Control, MidiOut, Port, ProcessScope, RawMidi};

use firmtime_jack::{
    activate, connect, deactivate, jack_clock_offset, open_client, port_name, read_cycle_times,
    CycleTimes, FrameExtender, FrameGaps, XrunNotifier,
};

use super::MidiSink;
use crate::error::{Error, ErrorKind};
use crate::MidiMessage;

/// Options for [`Tapper::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapperOptions {
    /// The JACK server; `None`: the default server.
    pub server_name: Option<String>,
    /// The tapper's client name.
    pub client_name: String,
    /// Short name of its MIDI output port.
    pub port_name: String,
    /// Full names of the ports to connect the output to before the schedule starts.
    pub connect_to: Vec<String>,
    /// Frames between the first cycle after arming and the schedule's frame 0.
    pub lead_frames: u64,
}

impl TapperOptions {
    /// Client `client_name` on the default server, port `out`, no
    /// connections, no lead.
    pub fn new(client_name: impl Into<String>) -> Self {
        TapperOptions {
            server_name: None,
            client_name: client_name.into(),
            port_name: "out".into(),
            connect_to: Vec::new(),
            lead_frames: 0,
        }
    }
}

/// One scheduled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    /// Frames after the start frame.
    pub offset: u64,
    /// The message (SysEx is not sent).
    pub msg: MidiMessage,
}

/// A message as the tapper actually sent it: the ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapRecord {
    /// The absolute frame it was written at.
    pub frame: u64,
    /// That frame's time, CLOCK_MONOTONIC ns.
    pub t_ns: u64,
    /// The message.
    pub msg: MidiMessage,
    /// True when its frame had already passed when the tapper got to it (it
    /// went out at the start of the next cycle instead). Never with enough lead.
    pub late: bool,
}

/// What [`Tapper::finish`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapperReport {
    /// The absolute frame the schedule's offsets count from.
    pub start_frame: Option<u64>,
    /// Every message that went out, in order.
    pub records: Vec<TapRecord>,
    /// Messages that could not be written (port buffer full, or SysEx).
    pub dropped: u64,
    /// Server xruns seen while the tapper ran.
    pub xruns: u64,
    /// Cycles the server dropped while the tapper ran, seen as gaps in the
    /// frame counter ([`firmtime_jack::FrameGaps`]; PipeWire reports no xruns).
    pub frame_gaps: u64,
    /// True when every tap went out before the timeout.
    pub complete: bool,
}

#[derive(Debug)]
struct TapShared {
    armed: AtomicBool,
    start_frame: AtomicU64,
    emitted: AtomicUsize,
    dropped: AtomicU64,
    xruns: AtomicU64,
    frame_gaps: AtomicU64,
}

/// The tapper's process core over plain values (unit-tested without a server).
#[derive(Debug)]
pub(crate) struct TapperCore {
    taps: Vec<Tap>,
    records: Vec<TapRecord>,
    next: usize,
    base: Option<u64>,
    lead: u64,
    shared: Arc<TapShared>,
}

impl TapperCore {
    fn new(mut taps: Vec<Tap>, lead: u64) -> Self {
        taps.sort_by_key(|t| t.offset);
        let records = Vec::with_capacity(taps.len());
        TapperCore {
            taps,
            records,
            next: 0,
            base: None,
            lead,
            shared: Arc::new(TapShared {
                armed: AtomicBool::new(false),
                start_frame: AtomicU64::new(u64::MAX),
                emitted: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
                xruns: AtomicU64::new(0),
                frame_gaps: AtomicU64::new(0),
            }),
        }
    }

    #[cfg(test)]
    pub(crate) fn new_for_test(taps: Vec<Tap>, lead: u64) -> Self {
        Self::new(taps, lead)
    }

    #[cfg(test)]
    pub(crate) fn arm_for_test(&self) {
        self.shared.armed.store(true, Ordering::Release);
    }

    #[cfg(test)]
    pub(crate) fn records_for_test(&self) -> &[TapRecord] {
        &self.records
    }

    /// Writes every tap due in this cycle to output port 0 of `sink`. **RT-safe.**
    pub(crate) fn emit(&mut self, cycle: &CycleTimes, sink: &mut dyn MidiSink) {
        let base = match self.base {
            Some(b) => b,
            None if self.shared.armed.load(Ordering::Acquire) => {
                let b = cycle.frame + self.lead;
                self.base = Some(b);
                self.shared.start_frame.store(b, Ordering::Release);
                b
            }
            None => return,
        };
        let end = cycle.end_frame();
        while let Some(tap) = self.taps.get(self.next) {
            let frame = base + tap.offset;
            if frame >= end {
                break;
            }
            self.next += 1;
            let placed = frame.max(cycle.frame);
            let mut buf = [0u8; 3];
            let n = tap.msg.encode(&mut buf);
            if n == 0 || !sink.write(0, (placed - cycle.frame) as u32, &buf[..n]) {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Capacity is the number of taps: this push never allocates.
            if self.records.len() < self.records.capacity() {
                self.records.push(TapRecord {
                    frame: placed,
                    t_ns: cycle.frame_to_ns(placed),
                    msg: tap.msg,
                    late: frame < cycle.frame,
                });
            }
        }
        self.shared.emitted.store(self.next, Ordering::Release);
    }
}

struct TapProcess {
    core: TapperCore,
    port: Port<MidiOut>,
    ext: FrameExtender,
    gaps: FrameGaps,
    clock_offset_ns: i64,
}

struct OneWriter<'a>(jack::MidiWriter<'a>);

impl MidiSink for OneWriter<'_> {
    fn write(&mut self, port: u16, offset: u32, bytes: &[u8]) -> bool {
        port == 0
            && self
                .0
                .write(&RawMidi {
                    time: offset,
                    bytes,
                })
                .is_ok()
    }
}

impl jack::ProcessHandler for TapProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(ps))
    }
}

impl TapProcess {
    /// One process cycle. **RT-safe.**
    fn cycle(&mut self, ps: &ProcessScope) -> Control {
        let cycle = read_cycle_times(ps, &mut self.ext, self.clock_offset_ns);
        if self.gaps.observe_cycle(&cycle) {
            self.core.shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        let mut sink = OneWriter(self.port.writer(ps));
        self.core.emit(&cycle, &mut sink);
        Control::Continue
    }
}

/// A running simulated tapper. [`Tapper::finish`] waits for the schedule
/// and returns the ground truth; dropping it closes the client.
pub struct Tapper {
    client: Option<jack::AsyncClient<XrunNotifier<TapShared>, TapProcess>>,
    shared: Arc<TapShared>,
    n_taps: usize,
    port_name: String,
}

impl fmt::Debug for Tapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tapper")
            .field("port_name", &self.port_name)
            .field("n_taps", &self.n_taps)
            .finish_non_exhaustive()
    }
}

impl Tapper {
    /// Opens the tapper's client, registers its output, activates it,
    /// connects it and arms the schedule (`taps`, in any order: they are
    /// sorted by offset, ties kept in the given order).
    ///
    /// # Errors
    /// As [`JackBackend::open`](super::JackBackend::open): no libjack, no
    /// server, or a port that cannot be registered or connected.
    pub fn start(options: TapperOptions, taps: Vec<Tap>) -> Result<Self, Error> {
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let port = client
            .register_port(&options.port_name, MidiOut::default())
            .map_err(|e| {
                Error::new(
                    ErrorKind::Port,
                    format!(
                        "cannot register JACK MIDI port {:?}: {e}",
                        options.port_name
                    ),
                )
            })?;
        let port_name = port_name(&port)?;
        let (clock_offset_ns, _) = jack_clock_offset(&client);
        let n_taps = taps.len();
        let core = TapperCore::new(taps, options.lead_frames);
        let shared = Arc::clone(&core.shared);
        let process = TapProcess {
            core,
            port,
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            clock_offset_ns,
        };
        let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
        let active = activate(client, notifier, process, "JACK client")?;
        for dst in &options.connect_to {
            connect(active.as_client(), &port_name, dst)?;
        }
        shared.armed.store(true, Ordering::Release);
        Ok(Tapper {
            client: Some(active),
            shared,
            n_taps,
            port_name,
        })
    }

    /// Full name of the tapper's output port.
    pub fn port_name(&self) -> &str {
        &self.port_name
    }

    /// The start frame, once the first armed cycle has run.
    pub fn start_frame(&self) -> Option<u64> {
        match self.shared.start_frame.load(Ordering::Acquire) {
            u64::MAX => None,
            f => Some(f),
        }
    }

    /// How many taps have gone out (or been dropped) so far.
    pub fn emitted(&self) -> usize {
        self.shared.emitted.load(Ordering::Acquire)
    }

    /// Waits until every tap has gone out or `timeout` has passed, closes
    /// the client and returns the ground truth.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when the client cannot be deactivated.
    pub fn finish(mut self, timeout: Duration) -> Result<TapperReport, Error> {
        let deadline = Instant::now() + timeout;
        while self.emitted() < self.n_taps && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let complete = self.emitted() >= self.n_taps;
        let client = self
            .client
            .take()
            .expect("client is Some until finish or drop");
        let (_, _, process) = deactivate(client, "JACK client")?;
        Ok(TapperReport {
            start_frame: self.start_frame(),
            records: process.core.records,
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            xruns: self.shared.xruns.load(Ordering::Relaxed),
            frame_gaps: self.shared.frame_gaps.load(Ordering::Relaxed),
            complete,
        })
    }
}

impl Drop for Tapper {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
    }
}
