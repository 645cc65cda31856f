//! The JACK backend's process callback (the real-time side) and its core.
//!
//! [`JackCore`] does the work over plain values (cycle times, bytes, a
//! [`MidiSink`]) with no JACK calls, so it is unit-tested without a server
//! and under `assert_no_alloc`; [`Process`] feeds it from JACK's ports once
//! per cycle. Everything here but `new_core` (which allocates the rings and
//! the queue) is **RT-safe.**

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use firmtime_jack::{read_cycle_times, CycleTimes, FrameExtender, FrameGaps};
use jack::{
    AudioOut, Client, ClientStatus, Control, MidiIn, MidiOut, Port, PortId, ProcessScope, RawMidi,
    Unowned,
};
use rtrb::{Consumer, Producer, RingBuffer};

use super::audio::Synth;
use super::audio_in::AudioInPart;
use super::MAX_PORTS;
use crate::backend::{
    bump, EngineEnds, EngineLink, InputEvent, LossCause, OutputEvent, PortIndex, SentEvent,
};
use crate::parse_message;

/// Where the process callback's core writes output events.
pub(crate) trait MidiSink {
    /// Writes `bytes` at `offset` frames into the cycle on output `port`;
    /// false when the port buffer is full. Offsets come in non-decreasing order.
    fn write(&mut self, port: PortIndex, offset: u32, bytes: &[u8]) -> bool;
}

/// Counters and flags shared by the RT side and the engine side.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) link: EngineLink,
    pub(super) reports_dropped: AtomicU64,
    pub(super) cycles: AtomicU64,
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

    /// Counts a cycle that did not follow the last one. **RT-safe.**
    pub(crate) fn frame_gap(&self) {
        bump(&self.shared.link.counters.frame_gaps);
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

pub(super) fn new_core(capacity: usize) -> (JackCore, EngineEnds, Arc<Shared>) {
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

/// The JACK client's notification handler (JACK's notification thread, not
/// the RT thread): counts xruns, marks a server shutdown, and watches the
/// MIDI inputs' connections so that a source that goes away mid-trial is
/// an input loss ([`crate::backend::LossCell`]) the engine side reads from
/// atomics.
pub(super) struct Notifier {
    pub(super) shared: Arc<Shared>,
    /// Our MIDI input ports (unowned handles), to read their connections.
    pub(super) inputs: Vec<Port<Unowned>>,
    /// Their full names.
    pub(super) input_names: Vec<String>,
    /// Each input's connections as last seen.
    pub(super) peers: Vec<Vec<String>>,
    /// Inputs that had a connection and have none now.
    pub(super) lost: Vec<bool>,
    /// For each lost input, the ports that fed it.
    pub(super) lost_from: Vec<Vec<String>>,
}

impl Notifier {
    pub(super) fn new(shared: Arc<Shared>, inputs: Vec<Port<Unowned>>, names: Vec<String>) -> Self {
        let n = inputs.len();
        Self {
            shared,
            inputs,
            input_names: names,
            peers: vec![Vec::new(); n],
            lost: vec![false; n],
            lost_from: vec![Vec::new(); n],
        }
    }

    /// The loss's words: which ports fed which input, and why they stopped.
    fn describe(&self, i: usize, client_gone: bool) -> String {
        format!(
            "{} no longer feeds {} ({})",
            self.lost_from[i].join(", "),
            self.input_names[i],
            if client_gone {
                "its client went away"
            } else {
                "disconnected"
            }
        )
    }

    /// Re-reads every input's connections after a change in the graph
    /// (`gone`: a client that just unregistered). An input whose last
    /// connection went is a loss; the cause is the client's exit when the
    /// source port no longer exists or belonged to `gone`, else a port
    /// disconnection. An input with a connection again is restored.
    fn check_inputs(&mut self, client: &Client, gone: Option<&str>) {
        let loss = Arc::clone(&self.shared);
        let loss = &loss.link.loss;
        for i in 0..self.inputs.len() {
            let now = self.inputs[i].get_connections();
            let before = std::mem::replace(&mut self.peers[i], now);
            if !self.peers[i].is_empty() {
                self.lost[i] = false;
                continue;
            }
            if before.is_empty() {
                continue;
            }
            // The source's ports as last seen: still there, or gone with their client?
            let client_gone = before.iter().any(|p| {
                client.port_by_name(p).is_none()
                    || gone.is_some_and(|g| p.split_once(':').is_some_and(|(c, _)| c == g))
            });
            let cause = if client_gone {
                LossCause::ClientGone
            } else {
                LossCause::PortDisconnected
            };
            self.lost[i] = true;
            self.lost_from[i] = before;
            loss.lose(cause, firmtime_rt::clock::monotonic_ns());
            loss.set_detail(self.describe(i, client_gone));
        }
        if !self.lost.iter().any(|&l| l) {
            loss.restored();
        }
    }
}

impl jack::NotificationHandler for Notifier {
    unsafe fn shutdown(&mut self, _status: ClientStatus, _reason: &str) {
        self.shared.link.shut_down(LossCause::ServerShutdown);
    }

    fn xrun(&mut self, _: &Client) -> Control {
        bump(&self.shared.link.counters.xruns);
        Control::Continue
    }

    fn ports_connected(&mut self, client: &Client, _a: PortId, _b: PortId, _connected: bool) {
        self.check_inputs(client, None);
    }

    fn port_registration(&mut self, client: &Client, _port: PortId, _registered: bool) {
        self.check_inputs(client, None);
    }

    fn client_registration(&mut self, client: &Client, name: &str, registered: bool) {
        if registered {
            return;
        }
        // A client's exit is told as its ports' disconnection first: the
        // loss of an input it fed was its exit.
        let loss = &self.shared.link.loss;
        let of_client = |p: &String| p.split_once(':').is_some_and(|(c, _)| c == name);
        let fed = (0..self.inputs.len())
            .find(|&i| self.lost[i] && self.lost_from[i].iter().any(of_client));
        if let (Some(i), Some(l)) = (fed, loss.get()) {
            if l.ongoing && l.cause == LossCause::PortDisconnected {
                loss.refine(LossCause::ClientGone);
                loss.set_detail(self.describe(i, true));
            }
        }
        self.check_inputs(client, Some(name));
    }
}

/// The audio side of the process callback.
pub(super) struct AudioPart {
    pub(super) synth: Synth,
    pub(super) ports: Vec<Port<AudioOut>>,
    /// The output index the synth answers to.
    pub(super) index: PortIndex,
}

/// The JACK backend's process callback.
pub(super) struct Process {
    pub(super) core: JackCore,
    pub(super) ins: Vec<Port<MidiIn>>,
    pub(super) outs: Vec<Port<MidiOut>>,
    pub(super) audio: Option<AudioPart>,
    pub(super) audio_in: Option<AudioInPart>,
    pub(super) ext: FrameExtender,
    pub(super) gaps: FrameGaps,
    pub(super) clock_offset_ns: i64,
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
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(ps))
    }
}

impl Process {
    /// One process cycle. **RT-safe.**
    fn cycle(&mut self, ps: &ProcessScope) -> Control {
        let cycle = read_cycle_times(ps, &mut self.ext, self.clock_offset_ns);
        if self.gaps.observe_cycle(&cycle) {
            self.core.frame_gap();
        }
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
        if let Some(a) = self.audio_in.as_mut() {
            a.cycle(&cycle, ps);
        }
        self.core.end_cycle();
        Control::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::super::tapper;
    use super::*;
    use crate::MidiMessage;
    use std::sync::atomic::Ordering;

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
