//! What the two simulated clients, [`Tapper`](super::Tapper) (MIDI taps)
//! and [`AudioPlayer`](super::player::AudioPlayer) (a signal, and MIDI
//! beside it), share: a start frame fixed by the first armed process cycle
//! plus a lead, a schedule of MIDI messages at frame offsets from it, the
//! counters the caller reads, and the running client's wait-and-close.
//!
//! # Real-time contract
//!
//! [`Schedule::start`], [`Schedule::emit`] and [`SimClock::read`] run in
//! the process callback: they only index preallocated storage and store
//! atomics. No allocation, no locks, no printing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jack::{Client, ProcessScope};

use firmtime_jack::{
    activate, connect, deactivate, jack_clock_offset, read_cycle_times, CycleTimes, FrameExtender,
    FrameGaps, XrunNotifier,
};

use super::tapper::Tap;
use crate::error::Error;

/// The counters a simulated client shares with its caller.
#[derive(Debug)]
pub(crate) struct SimShared {
    /// Set once the client is activated and connected: the next cycle fixes the start.
    pub(crate) armed: AtomicBool,
    /// The start frame (`u64::MAX` until fixed).
    pub(crate) start_frame: AtomicU64,
    /// How far it has got: samples played, or messages emitted (sent or dropped).
    pub(crate) progress: AtomicU64,
    /// MIDI messages that could not be written (port buffer full, or SysEx).
    pub(crate) dropped: AtomicU64,
    /// Server xruns seen while it ran.
    pub(crate) xruns: AtomicU64,
    /// Cycles the server dropped while it ran (gaps in the frame counter).
    pub(crate) frame_gaps: AtomicU64,
}

impl SimShared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SimShared {
            armed: AtomicBool::new(false),
            start_frame: AtomicU64::new(u64::MAX),
            progress: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            xruns: AtomicU64::new(0),
            frame_gaps: AtomicU64::new(0),
        })
    }

    /// The start frame, once the first armed cycle has run.
    pub(crate) fn start_frame(&self) -> Option<u64> {
        match self.start_frame.load(Ordering::Acquire) {
            u64::MAX => None,
            f => Some(f),
        }
    }
}

/// The start frame and the MIDI messages at frame offsets from it.
#[derive(Debug)]
pub(crate) struct Schedule {
    taps: Vec<Tap>,
    next: usize,
    base: Option<u64>,
    lead: u64,
    pub(crate) shared: Arc<SimShared>,
}

impl Schedule {
    /// `taps` in any order (sorted by offset, ties kept in the given order),
    /// the start `lead` frames after the first armed cycle's first frame.
    pub(crate) fn new(mut taps: Vec<Tap>, lead: u64, shared: Arc<SimShared>) -> Self {
        taps.sort_by_key(|t| t.offset);
        Schedule {
            taps,
            next: 0,
            base: None,
            lead,
            shared,
        }
    }

    /// The start frame, fixed (and published) by the first cycle after
    /// arming; `None` before. **RT-safe.**
    pub(crate) fn start(&mut self, cycle: &CycleTimes) -> Option<u64> {
        match self.base {
            Some(b) => Some(b),
            None if self.shared.armed.load(Ordering::Acquire) => {
                let b = cycle.frame + self.lead;
                self.base = Some(b);
                self.shared.start_frame.store(b, Ordering::Release);
                Some(b)
            }
            None => None,
        }
    }

    /// The start frame, once [`Schedule::start`] fixed it.
    pub(crate) fn base(&self) -> Option<u64> {
        self.base
    }

    /// How many messages have gone out or been dropped.
    pub(crate) fn next(&self) -> usize {
        self.next
    }

    /// Writes the messages due in this cycle (start `base`) through
    /// `write(offset in the cycle, bytes)`; each one written is passed to
    /// `sent(frame written at, message, late)` (late: its frame had passed,
    /// it went out at the cycle's start), each one not written (SysEx, or
    /// `write` false) counted in `dropped`. **RT-safe.**
    pub(crate) fn emit(
        &mut self,
        cycle: &CycleTimes,
        base: u64,
        write: &mut dyn FnMut(u32, &[u8]) -> bool,
        sent: &mut dyn FnMut(u64, &Tap, bool),
    ) {
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
            if n == 0 || !write((placed - cycle.frame) as u32, &buf[..n]) {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            sent(placed, tap, frame < cycle.frame);
        }
    }
}

/// A process callback's clock: the cycle's times, dropped cycles counted.
#[derive(Debug)]
pub(crate) struct SimClock {
    ext: FrameExtender,
    gaps: FrameGaps,
    clock_offset_ns: i64,
}

impl SimClock {
    pub(crate) fn new(client: &Client) -> Self {
        SimClock {
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            clock_offset_ns: jack_clock_offset(client).0,
        }
    }

    /// This cycle's times; a gap in the frame counter counted in
    /// `shared.frame_gaps`. **RT-safe.**
    pub(crate) fn read(&mut self, ps: &ProcessScope, shared: &SimShared) -> CycleTimes {
        let cycle = read_cycle_times(ps, &mut self.ext, self.clock_offset_ns);
        if self.gaps.observe_cycle(&cycle) {
            shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        cycle
    }
}

/// What [`Running::finish`] returns.
pub(crate) struct Finished<P> {
    pub(crate) process: P,
    pub(crate) complete: bool,
    pub(crate) start_frame: Option<u64>,
    pub(crate) dropped: u64,
    pub(crate) xruns: u64,
    pub(crate) frame_gaps: u64,
}

/// A running simulated client; dropping it closes the client.
pub(crate) struct Running<P: 'static + Send + jack::ProcessHandler> {
    client: Option<jack::AsyncClient<XrunNotifier<SimShared>, P>>,
    shared: Arc<SimShared>,
    total: u64,
    pub(crate) port_name: String,
}

impl<P: 'static + Send + jack::ProcessHandler> Running<P> {
    /// Activates `client` with `process`, makes the `connections` (from,
    /// to) and arms it; done when `shared.progress` reaches `total`.
    pub(crate) fn start(
        client: Client,
        process: P,
        shared: Arc<SimShared>,
        total: u64,
        port_name: String,
        connections: &[(&str, &str)],
    ) -> Result<Self, Error> {
        let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
        let active = activate(client, notifier, process, "JACK client")?;
        for (from, to) in connections {
            connect(active.as_client(), from, to)?;
        }
        shared.armed.store(true, Ordering::Release);
        Ok(Running {
            client: Some(active),
            shared,
            total,
            port_name,
        })
    }

    pub(crate) fn shared(&self) -> &SimShared {
        &self.shared
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// How far it has got (`shared.progress`).
    pub(crate) fn progress(&self) -> u64 {
        self.shared.progress.load(Ordering::Acquire)
    }

    /// Waits until the progress reaches the total or `timeout` has passed,
    /// closes the client and returns its process and counters.
    pub(crate) fn finish(mut self, timeout: Duration) -> Result<Finished<P>, Error> {
        let deadline = Instant::now() + timeout;
        while self.progress() < self.total && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let complete = self.progress() >= self.total;
        let client = self
            .client
            .take()
            .expect("client is Some until finish or drop");
        let (_, _, process) = deactivate(client, "JACK client")?;
        Ok(Finished {
            process,
            complete,
            start_frame: self.shared.start_frame(),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            xruns: self.shared.xruns.load(Ordering::Relaxed),
            frame_gaps: self.shared.frame_gaps.load(Ordering::Relaxed),
        })
    }
}

impl<P: 'static + Send + jack::ProcessHandler> Drop for Running<P> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
    }
}
