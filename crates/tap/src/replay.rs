//! Replay of a recorded trial (FTAP's `playftap`): its outputs (what the
//! subject heard) or its inputs (what the subject played) sent again through
//! a MIDI backend at their recorded times.
//!
//! [`plan`] picks the notes from a trial's events (allocates; before
//! playing); [`play`] sends them, each scheduled at its time with
//! [`OutputEvent::at_ns`] a little ahead, and collects when each went out.
//!
//! # Real-time contract
//!
//! [`play`] is **RT-safe.**: it only indexes the planned slice and calls the
//! backend; it blocks only in [`MidiBackend::wait`].

use std::sync::atomic::{AtomicBool, Ordering};

use firmtime_midi::{MidiBackend, MidiMessage, OutputEvent, PortIndex};
use firmtime_rt::clock::monotonic_ns;

use crate::data::{Event, EventKind};

/// What to play back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaySource {
    /// Feedback, second feedback, metronome and masking notes, at the times
    /// they actually went out.
    Outputs,
    /// The subject's keystrokes, at their recorded times.
    Inputs,
}

/// One note to play, `at_us` after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayItem {
    /// Time since the start of the replay, µs.
    pub at_us: i64,
    /// The message.
    pub msg: MidiMessage,
}

/// The notes of `events` to play, sorted by time, the first at 0.
pub fn plan(events: &[Event], source: ReplaySource) -> Vec<ReplayItem> {
    let mut v: Vec<ReplayItem> = events
        .iter()
        .filter(|e| match source {
            ReplaySource::Inputs => e.kind == EventKind::Input,
            ReplaySource::Outputs => matches!(
                e.kind,
                EventKind::Feedback
                    | EventKind::Feedback2
                    | EventKind::Metronome
                    | EventKind::Masking
            ),
        })
        .filter_map(|e| {
            let n = e.note?;
            let channel = n.channel.saturating_sub(1).min(15);
            let msg = if n.on {
                MidiMessage::NoteOn {
                    channel,
                    note: n.note,
                    velocity: n.velocity,
                }
            } else {
                MidiMessage::NoteOff {
                    channel,
                    note: n.note,
                    velocity: n.velocity,
                }
            };
            Some(ReplayItem {
                at_us: e.actual_us,
                msg,
            })
        })
        .collect();
    v.sort_by_key(|i| i.at_us);
    if let Some(first) = v.first().map(|i| i.at_us) {
        for i in &mut v {
            i.at_us -= first;
        }
    }
    v
}

/// What [`play`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayReport {
    /// Notes handed to the backend (one per note and port).
    pub sent: u64,
    /// Notes the backend reported as gone out.
    pub reported: u64,
    /// Notes refused by the backend (queue full, disconnected).
    pub failed: u64,
    /// Reported notes later than their time by more than 1 ms.
    pub late: u64,
    /// The largest lateness, ns.
    pub max_late_ns: u64,
    /// True if `stop` ended the replay early.
    pub interrupted: bool,
}

/// Plays `items` on each of `ports` of `backend` (e.g. a MIDI output and
/// the JACK synth's audio port), the first `lead_ns` from now. Each note is
/// handed over 100 ms before its time; [`ReplayReport`] counts one send per
/// note and port. **RT-safe.**
pub fn play(
    items: &[ReplayItem],
    backend: &mut dyn MidiBackend,
    ports: &[PortIndex],
    lead_ns: u64,
    stop: &AtomicBool,
) -> ReplayReport {
    // Under the `assert-rt` feature an allocation while playing aborts.
    firmtime_rt::assert_rt::no_alloc(|| {
        const AHEAD_NS: u64 = 100_000_000;
        let t0 = monotonic_ns() + lead_ns;
        let mut r = ReplayReport::default();
        let mut next = 0;
        let last = items.last().map_or(0, |i| i.at_us.max(0) as u64 * 1000);
        let give_up = t0 + last + 2_000_000_000;
        loop {
            let now = monotonic_ns();
            while let Some(it) = items.get(next) {
                let at = t0 + it.at_us.max(0) as u64 * 1000;
                if at > now + AHEAD_NS {
                    break;
                }
                next += 1;
                for &port in ports {
                    let ev = OutputEvent {
                        at_ns: Some(at),
                        port,
                        msg: it.msg,
                        tag: next as u32,
                    };
                    match backend.send(ev) {
                        Ok(()) => r.sent += 1,
                        Err(_) => r.failed += 1,
                    }
                }
            }
            backend.poll_sent(&mut |s| {
                r.reported += 1;
                if let Some(at) = s.intended_ns {
                    let late = s.actual_ns.saturating_sub(at);
                    r.max_late_ns = r.max_late_ns.max(late);
                    if late > 1_000_000 {
                        r.late += 1;
                    }
                }
            });
            if next >= items.len() && r.reported >= r.sent {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                r.interrupted = true;
                break;
            }
            if now > give_up || backend.wait(now + 1_000_000).is_err() {
                break;
            }
        }
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::NoteData;
    use firmtime_midi::loopback::{Loopback, LoopbackOptions};

    fn ev(kind: EventKind, t: i64, note: u8, on: bool) -> Event {
        Event {
            kind,
            index: 1,
            intended_us: None,
            actual_us: t,
            note: Some(NoteData {
                channel: 2,
                note,
                velocity: if on { 90 } else { 0 },
                on,
            }),
        }
    }

    #[test]
    fn outputs_replayed_at_recorded_offsets() {
        let events = [
            ev(EventKind::Input, 1000, 60, true),
            ev(EventKind::Feedback, 21_000, 60, true),
            ev(EventKind::Metronome, 11_000, 76, true),
            ev(EventKind::Feedback, 51_000, 60, false),
        ];
        let items = plan(&events, ReplaySource::Outputs);
        let times: Vec<i64> = items.iter().map(|i| i.at_us).collect();
        assert_eq!(times, [0, 10_000, 40_000]);
        assert_eq!(
            items[1].msg,
            MidiMessage::NoteOn {
                channel: 1,
                note: 60,
                velocity: 90
            }
        );
        assert_eq!(plan(&events, ReplaySource::Inputs).len(), 1);
        let mut lb = Loopback::new(LoopbackOptions::default());
        let stop = AtomicBool::new(false);
        let r = assert_no_alloc::assert_no_alloc(|| play(&items, &mut lb, &[0], 5_000_000, &stop));
        assert_eq!((r.sent, r.reported, r.failed), (3, 3, 0));
        let mut got = Vec::new();
        lb.poll_input(&mut |e| got.push(e)).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].t_ns - got[0].t_ns, 10_000_000);
        assert_eq!(got[2].t_ns - got[0].t_ns, 40_000_000);
    }
}
