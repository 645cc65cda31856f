//! An in-process loopback backend: whatever is sent comes back as input.
//!
//! [`Loopback`] implements [`MidiBackend`] with no thread and no device, for
//! testing engines (the loop test, the experiment engine) anywhere. Output is
//! queued by time like a real backend's; when it goes out it travels a
//! virtual wire back to the input: instantly, or paced like a 31.25 kbaud
//! MIDI cable (`byte_ns: Some(320_000)`), one message after another.
//!
//! Times are virtual but consistent: a message starts on the wire at
//! `max(its time, the moment the wire is free)` (its [`SentEvent::actual_ns`]),
//! its input timestamp is the arrival of its first byte (start + one byte
//! time), and the whole message is delivered when its last byte has arrived.
//! Time advances with `CLOCK_MONOTONIC`, checked on every call.
//!
//! # RT contract
//!
//! [`Loopback::new`] allocates every queue. After that every method is
//! **RT-safe.**: nothing allocates, locks or prints; [`MidiBackend::wait`]
//! sleeps with `clock_nanosleep` (firmtime-rt's `clock_nanosleep_abs`) until the
//! next delivery or the deadline.
//! Anything that does not fit a queue is counted in [`BackendStats`].

use std::collections::VecDeque;

use firmtime_rt::clock::monotonic_ns;

use crate::backend::{
    bump, BackendError, BackendKind, BackendStats, Counters, InputEvent, InputLoss, LossCause,
    LossCell, MidiBackend, OutputEvent, SentEvent,
};

/// Options for a [`Loopback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopbackOptions {
    /// Nanoseconds per byte on the virtual wire: `None` delivers at once,
    /// `Some(320_000)` paces like a 31.25 kbaud MIDI cable (10 bits per byte).
    pub byte_ns: Option<u64>,
    /// Capacity of each queue (output, in flight, input, sent).
    pub capacity: usize,
}

impl Default for LoopbackOptions {
    fn default() -> Self {
        Self {
            byte_ns: None,
            capacity: 1024,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    due_ns: u64,
    seq: u64,
    ev: OutputEvent,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    deliver_ns: u64,
    ev: InputEvent,
}

/// The in-process loopback backend. One port each way (index 0).
#[derive(Debug)]
pub struct Loopback {
    opts: LoopbackOptions,
    /// Output waiting for its time, sorted by (due, seq) descending: the next is last.
    pending: Vec<Pending>,
    in_flight: VecDeque<InFlight>,
    input: VecDeque<InputEvent>,
    sent: VecDeque<SentEvent>,
    wire_free_ns: u64,
    seq: u64,
    counters: Counters,
    disconnected: bool,
    loss: LossCell,
}

impl Loopback {
    /// A loopback with every queue allocated (`opts.capacity` each, at least 1).
    pub fn new(opts: LoopbackOptions) -> Self {
        let cap = opts.capacity.max(1);
        Self {
            opts: LoopbackOptions {
                capacity: cap,
                ..opts
            },
            pending: Vec::with_capacity(cap),
            in_flight: VecDeque::with_capacity(cap),
            input: VecDeque::with_capacity(cap),
            sent: VecDeque::with_capacity(cap),
            wire_free_ns: 0,
            seq: 0,
            counters: Counters::default(),
            disconnected: false,
            loss: LossCell::default(),
        }
    }

    /// Simulates the far end going away: output is refused from now on, and
    /// [`MidiBackend::poll_input`] reports [`BackendError::Disconnected`]
    /// once everything already delivered has been drained.
    ///
    /// **RT-safe.**
    pub fn disconnect(&mut self) {
        let now = monotonic_ns();
        self.advance(now);
        self.disconnected = true;
        self.loss.lose(LossCause::DeviceClosed, now);
    }

    /// Simulates the input's source going away while the backend stays
    /// (a JACK port disconnected): [`MidiBackend::input_loss`] reports
    /// `cause` from now on, output still goes out. **RT-safe.**
    pub fn lose_input(&mut self, cause: LossCause) {
        self.loss.lose(cause, monotonic_ns());
    }

    /// The input's source is back (after [`Loopback::lose_input`]). **RT-safe.**
    pub fn restore_input(&mut self) {
        self.loss.restored();
    }

    /// Moves virtual time to `now`: starts due output on the wire, delivers
    /// arrived messages to the input queue.
    fn advance(&mut self, now: u64) {
        if !self.disconnected {
            while let Some(p) = self.pending.last().copied() {
                let start = p.due_ns.max(self.wire_free_ns);
                if start > now {
                    break;
                }
                self.pending.pop();
                let mut bytes = [0u8; 3];
                let n = p.ev.msg.encode(&mut bytes) as u64;
                if n == 0 {
                    // SysEx does not travel through OutputEvent.
                    bump(&self.counters.output_dropped);
                    continue;
                }
                let byte_ns = self.opts.byte_ns.unwrap_or(0);
                self.wire_free_ns = start + n * byte_ns;
                bump(&self.counters.sent);
                let sent = SentEvent {
                    intended_ns: p.ev.at_ns,
                    actual_ns: start,
                    frame: None,
                    port: 0,
                    msg: p.ev.msg,
                    tag: p.ev.tag,
                };
                if self.sent.len() < self.opts.capacity {
                    self.sent.push_back(sent);
                }
                let flight = InFlight {
                    deliver_ns: self.wire_free_ns,
                    ev: InputEvent {
                        t_ns: start + byte_ns,
                        frame: None,
                        port: 0,
                        msg: p.ev.msg,
                    },
                };
                if self.in_flight.len() < self.opts.capacity {
                    self.in_flight.push_back(flight);
                } else {
                    bump(&self.counters.input_dropped);
                }
            }
        }
        while let Some(f) = self.in_flight.front() {
            if f.deliver_ns > now {
                break;
            }
            let ev = f.ev;
            self.in_flight.pop_front();
            if self.input.len() < self.opts.capacity {
                self.input.push_back(ev);
            } else {
                bump(&self.counters.input_dropped);
            }
        }
    }

    /// The next time something changes: a delivery, or output starting.
    fn next_change_ns(&self) -> Option<u64> {
        let delivery = self.in_flight.front().map(|f| f.deliver_ns);
        let start = if self.disconnected {
            None
        } else {
            self.pending.last().map(|p| p.due_ns.max(self.wire_free_ns))
        };
        match (delivery, start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl MidiBackend for Loopback {
    fn kind(&self) -> BackendKind {
        BackendKind::Loopback
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        self.advance(monotonic_ns());
        let mut n = 0;
        while let Some(ev) = self.input.pop_front() {
            f(ev);
            n += 1;
        }
        self.counters.add_received(n);
        if n == 0 && self.disconnected {
            return Err(BackendError::Disconnected);
        }
        Ok(n)
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        let now = monotonic_ns();
        self.advance(now);
        if !self.input.is_empty() {
            return Ok(());
        }
        if self.disconnected && self.in_flight.is_empty() {
            return Err(BackendError::Disconnected);
        }
        let until = self
            .next_change_ns()
            .map_or(deadline_ns, |t| t.min(deadline_ns));
        if until > now {
            // A signal does not end the sleep early: `until` is never past the deadline.
            firmtime_rt::sleep::clock_nanosleep_abs(until).map_err(|e| BackendError::Os(e.0))?;
        }
        self.advance(monotonic_ns());
        Ok(())
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        if ev.port != 0 {
            return Err(BackendError::NoSuchPort(ev.port));
        }
        if self.disconnected {
            return Err(BackendError::Disconnected);
        }
        let now = monotonic_ns();
        self.advance(now);
        if self.pending.len() >= self.opts.capacity {
            bump(&self.counters.output_dropped);
            return Err(BackendError::OutputQueueFull);
        }
        let item = Pending {
            due_ns: ev.at_ns.unwrap_or(now),
            seq: self.seq,
            ev,
        };
        self.seq += 1;
        let key = (item.due_ns, item.seq);
        let pos = self.pending.partition_point(|p| (p.due_ns, p.seq) > key);
        self.pending.insert(pos, item);
        self.advance(now);
        Ok(())
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        self.advance(monotonic_ns());
        let mut n = 0;
        while let Some(ev) = self.sent.pop_front() {
            f(ev);
            n += 1;
        }
        n
    }

    fn input_loss(&self) -> Option<InputLoss> {
        self.loss.get()
    }

    fn stats(&self) -> BackendStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MidiMessage;

    fn note(n: u8) -> MidiMessage {
        MidiMessage::NoteOn {
            channel: 0,
            note: n,
            velocity: 100,
        }
    }

    fn out(at_ns: Option<u64>, n: u8) -> OutputEvent {
        OutputEvent {
            at_ns,
            port: 0,
            msg: note(n),
            tag: u32::from(n),
        }
    }

    #[test]
    fn scheduled_output_comes_back_in_time_order_without_allocating() {
        let mut lb = Loopback::new(LoopbackOptions::default());
        let mut got = [0u8; 4];
        let mut count = 0;
        let mut sent_ok = true;
        assert_no_alloc::assert_no_alloc(|| {
            let t0 = monotonic_ns();
            // Sent out of order; times 3, 1, 2 ms ahead, and one "now".
            lb.send(out(Some(t0 + 3_000_000), 3)).unwrap();
            lb.send(out(Some(t0 + 1_000_000), 1)).unwrap();
            lb.send(out(Some(t0 + 2_000_000), 2)).unwrap();
            lb.send(out(None, 0)).unwrap();
            while count < 4 {
                lb.wait(monotonic_ns() + 10_000_000).unwrap();
                lb.poll_input(&mut |ev| {
                    if let MidiMessage::NoteOn { note, .. } = ev.msg {
                        got[count] = note;
                        count += 1;
                    }
                })
                .unwrap();
            }
            lb.poll_sent(&mut |s| {
                if let Some(at) = s.intended_ns {
                    sent_ok &= s.actual_ns >= at;
                }
            });
        });
        assert_eq!(got, [0, 1, 2, 3]);
        assert!(sent_ok, "a SentEvent went out before its time");
        assert_eq!(lb.stats().sent, 4);
        assert_eq!(lb.stats().received, 4);
    }

    #[test]
    fn paced_wire_spaces_messages_by_their_bytes() {
        let mut lb = Loopback::new(LoopbackOptions {
            byte_ns: Some(320_000),
            capacity: 8,
        });
        let t0 = monotonic_ns();
        for n in 0..3 {
            lb.send(out(Some(t0), n)).unwrap();
        }
        let mut times = Vec::new();
        while times.len() < 3 {
            lb.wait(monotonic_ns() + 10_000_000).unwrap();
            lb.poll_input(&mut |ev| times.push(ev.t_ns)).unwrap();
        }
        // Back to back on the wire: exactly one 3-byte message apart.
        assert_eq!(times[1] - times[0], 960_000);
        assert_eq!(times[2] - times[1], 960_000);
    }

    #[test]
    fn full_queue_and_bad_port_are_refused_and_counted() {
        let mut lb = Loopback::new(LoopbackOptions {
            byte_ns: None,
            capacity: 2,
        });
        let far = monotonic_ns() + 60_000_000_000;
        lb.send(out(Some(far), 1)).unwrap();
        lb.send(out(Some(far), 2)).unwrap();
        assert_eq!(
            lb.send(out(Some(far), 3)),
            Err(BackendError::OutputQueueFull)
        );
        assert_eq!(lb.stats().output_dropped, 1);
        let mut ev = out(None, 4);
        ev.port = 1;
        assert_eq!(lb.send(ev), Err(BackendError::NoSuchPort(1)));
    }

    #[test]
    fn disconnect_delivers_what_arrived_first() {
        let mut lb = Loopback::new(LoopbackOptions::default());
        lb.send(out(None, 7)).unwrap();
        lb.disconnect();
        let mut n = 0;
        assert_eq!(lb.poll_input(&mut |_| n += 1), Ok(1));
        assert_eq!(n, 1);
        assert_eq!(lb.poll_input(&mut |_| {}), Err(BackendError::Disconnected));
        assert_eq!(lb.send(out(None, 8)), Err(BackendError::Disconnected));
        assert_eq!(lb.wait(0), Err(BackendError::Disconnected));
    }
}
