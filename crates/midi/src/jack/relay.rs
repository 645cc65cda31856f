//! A relay client: a second JACK client that re-sends every MIDI event it
//! receives, in the same cycle and at the same frame.
//!
//! FTAP's loop test through JACK runs out → in through a second client:
//! the [`JackBackend`](super::JackBackend)'s output goes to the relay's
//! input, the relay's output back to the backend's input. The relay copies
//! each event inside its own process callback, so it adds no frames itself;
//! what a hop costs is the graph's doing (JACK runs a feedback connection
//! one period late). It records the absolute frame of each event it
//! forwarded, so the caller can split a round trip into frames per hop.
//!
//! # Real-time contract
//!
//! The record buffer is allocated in [`Relay::start`] with a fixed capacity;
//! the process callback never allocates, locks or prints: events beyond the
//! capacity are still forwarded but their frames are not recorded (counted
//! in [`RelayReport::records_dropped`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use jack::{Client, Control, MidiIn, MidiOut, Port, ProcessScope, RawMidi};

use crate::error::{Error, ErrorKind};
use firmtime_jack::{
    activate, connect, deactivate, open_client, port_name, read_cycle_times, FrameExtender,
    FrameGaps, XrunNotifier,
};

/// How to start a [`Relay`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayOptions {
    /// The JACK server (`None`: the default server).
    pub server_name: Option<String>,
    /// The client name (JACK may append `-01` etc.).
    pub client_name: String,
    /// How many forwarded events' frames to record (the rest are forwarded
    /// and counted, not recorded).
    pub record_capacity: usize,
}

impl RelayOptions {
    /// A relay named `client_name` on the default server recording up to
    /// 100 000 frames.
    pub fn new(client_name: impl Into<String>) -> Self {
        RelayOptions {
            server_name: None,
            client_name: client_name.into(),
            record_capacity: 100_000,
        }
    }
}

/// What a relay did, returned by [`Relay::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayReport {
    /// The absolute frame at which each forwarded event came in (and went
    /// out: the relay forwards at the same frame), in order.
    pub frames: Vec<u64>,
    /// Events forwarded.
    pub forwarded: u64,
    /// Events that did not fit in the output port's buffer (lost).
    pub dropped: u64,
    /// Forwarded events whose frame was not recorded (capacity reached).
    pub records_dropped: u64,
    /// Server xruns seen while the relay ran.
    pub xruns: u64,
    /// Cycles the server dropped while the relay ran, seen as gaps in the
    /// frame counter ([`firmtime_jack::FrameGaps`]; PipeWire reports no xruns).
    pub frame_gaps: u64,
}

#[derive(Debug, Default)]
struct RelayShared {
    forwarded: AtomicU64,
    dropped: AtomicU64,
    records_dropped: AtomicU64,
    xruns: AtomicU64,
    frame_gaps: AtomicU64,
}

struct RelayProcess {
    input: Port<MidiIn>,
    output: Port<MidiOut>,
    ext: FrameExtender,
    gaps: FrameGaps,
    frames: Vec<u64>,
    shared: Arc<RelayShared>,
}

impl jack::ProcessHandler for RelayProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(ps))
    }
}

impl RelayProcess {
    /// One process cycle. **RT-safe.**
    fn cycle(&mut self, ps: &ProcessScope) -> Control {
        let cycle = read_cycle_times(ps, &mut self.ext, 0);
        if self.gaps.observe_cycle(&cycle) {
            self.shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        let mut writer = self.output.writer(ps);
        for ev in self.input.iter(ps) {
            let ok = writer
                .write(&RawMidi {
                    time: ev.time,
                    bytes: ev.bytes,
                })
                .is_ok();
            if !ok {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.shared.forwarded.fetch_add(1, Ordering::Relaxed);
            // Capacity was reserved in `start`: this push never allocates.
            if self.frames.len() < self.frames.capacity() {
                self.frames.push(cycle.frame + u64::from(ev.time));
            } else {
                self.shared.records_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Control::Continue
    }
}

/// A running relay client. [`Relay::finish`] closes it and returns what it
/// recorded; dropping it closes the client.
pub struct Relay {
    client: Option<jack::AsyncClient<XrunNotifier<RelayShared>, RelayProcess>>,
    shared: Arc<RelayShared>,
    input_name: String,
    output_name: String,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("input", &self.input_name)
            .field("output", &self.output_name)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Opens the relay client with ports `in` and `out` and activates it.
    /// Connect it with [`JackBackend::connect`](super::JackBackend::connect)
    /// or [`Relay::connect`].
    ///
    /// # Errors
    /// As [`JackBackend::open`](super::JackBackend::open): no libjack
    /// ([`ErrorKind::NotInstalled`]), no server
    /// ([`ErrorKind::ServerUnavailable`]), a port that cannot be registered
    /// ([`ErrorKind::Port`]).
    pub fn start(options: RelayOptions) -> Result<Self, Error> {
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let reg = |e: jack::Error| {
            Error::new(
                ErrorKind::Port,
                format!("cannot register the relay's JACK MIDI ports: {e}"),
            )
        };
        let input = client.register_port("in", MidiIn::default()).map_err(reg)?;
        let output = client
            .register_port("out", MidiOut::default())
            .map_err(reg)?;
        let input_name = port_name(&input)?;
        let output_name = port_name(&output)?;
        let shared = Arc::new(RelayShared::default());
        let process = RelayProcess {
            input,
            output,
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            frames: Vec::with_capacity(options.record_capacity),
            shared: Arc::clone(&shared),
        };
        let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
        let active = activate(client, notifier, process, "the JACK relay client")?;
        Ok(Relay {
            client: Some(active),
            shared,
            input_name,
            output_name,
        })
    }

    /// Full name of the relay's input port.
    pub fn input_name(&self) -> &str {
        &self.input_name
    }

    /// Full name of the relay's output port.
    pub fn output_name(&self) -> &str {
        &self.output_name
    }

    /// Connects two ports by full name through the relay's client.
    ///
    /// # Errors
    /// [`ErrorKind::Port`] when either port does not exist or JACK refuses.
    pub fn connect(&self, src: &str, dst: &str) -> Result<(), Error> {
        match &self.client {
            Some(c) => Ok(connect(c.as_client(), src, dst)?),
            None => Err(Error::new(ErrorKind::Backend, "the relay is closed")),
        }
    }

    /// Events forwarded so far.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::Relaxed)
    }

    /// Deactivates and closes the client and returns what it recorded.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when JACK refuses to deactivate the client.
    pub fn finish(mut self) -> Result<RelayReport, Error> {
        let client = self
            .client
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Backend, "the relay is closed"))?;
        let (_, _, process) = deactivate(client, "the JACK relay client")?;
        let s = &self.shared;
        Ok(RelayReport {
            frames: process.frames,
            forwarded: s.forwarded.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            records_dropped: s.records_dropped.load(Ordering::Relaxed),
            xruns: s.xruns.load(Ordering::Relaxed),
            frame_gaps: s.frame_gaps.load(Ordering::Relaxed),
        })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
    }
}

/// Frames one hop took over many events: count, min, mean, max.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct HopSummary {
    /// Events measured.
    pub count: u64,
    /// Fewest frames.
    pub min: i64,
    /// Mean frames.
    pub mean: f64,
    /// Most frames.
    pub max: i64,
}

impl HopSummary {
    fn of(diffs: impl Iterator<Item = i64>) -> Option<Self> {
        let (mut count, mut sum, mut min, mut max) = (0u64, 0i128, i64::MAX, i64::MIN);
        for d in diffs {
            count += 1;
            sum += i128::from(d);
            min = min.min(d);
            max = max.max(d);
        }
        (count > 0).then(|| HopSummary {
            count,
            min,
            mean: sum as f64 / count as f64,
            max,
        })
    }
}

/// The loop test's round trip through a relay, split into hops, in frames.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LoopHops {
    /// Our output port → the relay's input (frame the relay saw − frame we placed it at).
    pub out_to_relay: Option<HopSummary>,
    /// The relay's output → our input (frame we received − frame the relay forwarded at).
    pub relay_to_in: Option<HopSummary>,
    /// Our input → our output again: the engine's re-send "at once"
    /// (frame of the re-send − frame of the event that caused it).
    pub turnaround: Option<HopSummary>,
    /// The whole circle: frame received − frame sent, per event.
    pub round_trip: Option<HopSummary>,
}

impl LoopHops {
    /// Matches the `i`-th frame of each list (events keep their order
    /// through JACK; the loop test re-sends received event `i` as sent event
    /// `i + primed`) and summarizes each hop. Lists may differ in length
    /// (events in flight at the end, lost events): only indices present in
    /// both lists of a hop are used.
    pub fn compute(sent: &[u64], relayed: &[u64], received: &[u64], primed: usize) -> Self {
        let diff = |a: &[u64], b: &[u64]| -> Vec<i64> {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| (y as i128 - x as i128) as i64)
                .collect()
        };
        let sent_after = sent.get(primed..).unwrap_or(&[]);
        LoopHops {
            out_to_relay: HopSummary::of(diff(sent, relayed).into_iter()),
            relay_to_in: HopSummary::of(diff(relayed, received).into_iter()),
            turnaround: HopSummary::of(diff(received, sent_after).into_iter()),
            round_trip: HopSummary::of(diff(sent, received).into_iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_match_events_by_order() {
        // Period 256: each feedback hop costs one period, the re-send goes
        // out at the start of the next cycle.
        let sent = [1000, 1048, 1256, 1304, 1512];
        let relayed = [1000, 1048, 1256, 1304];
        let received = [1256, 1304, 1512];
        let h = LoopHops::compute(&sent, &relayed, &received, 2);
        let o = h.out_to_relay.unwrap();
        assert_eq!((o.count, o.min, o.max, o.mean), (4, 0, 0, 0.0));
        let r = h.relay_to_in.unwrap();
        assert_eq!((r.count, r.min, r.max, r.mean), (3, 256, 256, 256.0));
        let t = h.turnaround.unwrap();
        assert_eq!((t.count, t.min, t.max), (3, 0, 0));
        let rt = h.round_trip.unwrap();
        assert_eq!((rt.count, rt.min, rt.max), (3, 256, 256));
    }

    #[test]
    fn hops_of_nothing_are_none() {
        let h = LoopHops::compute(&[5], &[], &[], 2);
        assert_eq!(h.out_to_relay, None);
        assert_eq!(h.turnaround, None);
    }
}
