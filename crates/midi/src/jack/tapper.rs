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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use jack::{Client, Control, MidiOut, Port, ProcessScope, RawMidi};

use firmtime_jack::{open_client, port_name, CycleTimes};

use super::sim::{Running, Schedule, SimClock, SimShared};
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

/// The tapper's process core over plain values (unit-tested without a server).
#[derive(Debug)]
pub(crate) struct TapperCore {
    schedule: Schedule,
    records: Vec<TapRecord>,
}

impl TapperCore {
    fn new(taps: Vec<Tap>, lead: u64) -> Self {
        let records = Vec::with_capacity(taps.len());
        TapperCore {
            schedule: Schedule::new(taps, lead, SimShared::new()),
            records,
        }
    }

    #[cfg(test)]
    pub(crate) fn new_for_test(taps: Vec<Tap>, lead: u64) -> Self {
        Self::new(taps, lead)
    }

    #[cfg(test)]
    pub(crate) fn arm_for_test(&self) {
        self.schedule.shared.armed.store(true, Ordering::Release);
    }

    #[cfg(test)]
    pub(crate) fn records_for_test(&self) -> &[TapRecord] {
        &self.records
    }

    /// Writes every tap due in this cycle to output port 0 of `sink`. **RT-safe.**
    pub(crate) fn emit(&mut self, cycle: &CycleTimes, sink: &mut dyn MidiSink) {
        let Some(base) = self.schedule.start(cycle) else {
            return;
        };
        let records = &mut self.records;
        self.schedule.emit(
            cycle,
            base,
            &mut |offset, bytes| sink.write(0, offset, bytes),
            &mut |frame, tap, late| {
                // Capacity is the number of taps: this push never allocates.
                if records.len() < records.capacity() {
                    records.push(TapRecord {
                        frame,
                        t_ns: cycle.frame_to_ns(frame),
                        msg: tap.msg,
                        late,
                    });
                }
            },
        );
        self.schedule
            .shared
            .progress
            .store(self.schedule.next() as u64, Ordering::Release);
    }
}

struct TapProcess {
    core: TapperCore,
    port: Port<MidiOut>,
    clock: SimClock,
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
        let cycle = self.clock.read(ps, &self.core.schedule.shared);
        let mut sink = OneWriter(self.port.writer(ps));
        self.core.emit(&cycle, &mut sink);
        Control::Continue
    }
}

/// A running simulated tapper. [`Tapper::finish`] waits for the schedule
/// and returns the ground truth; dropping it closes the client.
pub struct Tapper {
    running: Running<TapProcess>,
}

impl fmt::Debug for Tapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tapper")
            .field("port_name", &self.running.port_name)
            .field("n_taps", &self.running.total())
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
        let clock = SimClock::new(&client);
        let n_taps = taps.len() as u64;
        let core = TapperCore::new(taps, options.lead_frames);
        let shared = Arc::clone(&core.schedule.shared);
        let process = TapProcess { core, port, clock };
        let connections: Vec<(&str, &str)> = options
            .connect_to
            .iter()
            .map(|dst| (port_name.as_str(), dst.as_str()))
            .collect();
        let running = Running::start(
            client,
            process,
            shared,
            n_taps,
            port_name.clone(),
            &connections,
        )?;
        Ok(Tapper { running })
    }

    /// Full name of the tapper's output port.
    pub fn port_name(&self) -> &str {
        &self.running.port_name
    }

    /// The start frame, once the first armed cycle has run.
    pub fn start_frame(&self) -> Option<u64> {
        self.running.shared().start_frame()
    }

    /// How many taps have gone out (or been dropped) so far.
    pub fn emitted(&self) -> usize {
        self.running.progress() as usize
    }

    /// Waits until every tap has gone out or `timeout` has passed, closes
    /// the client and returns the ground truth.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when the client cannot be deactivated.
    pub fn finish(self, timeout: Duration) -> Result<TapperReport, Error> {
        let done = self.running.finish(timeout)?;
        Ok(TapperReport {
            start_frame: done.start_frame,
            records: done.process.core.records,
            dropped: done.dropped,
            xruns: done.xruns,
            frame_gaps: done.frame_gaps,
            complete: done.complete,
        })
    }
}
