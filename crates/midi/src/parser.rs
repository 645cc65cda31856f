//! The MIDI 1.0 byte-stream parser: one byte in, zero, one or two
//! timestamped messages out.
//!
//! **RT contract.** [`Parser::new`] allocates and touches the SysEx buffer;
//! after that nothing allocates, locks or blocks, and every call does a
//! bounded amount of work (no loop depends on the input), so a flood of
//! garbage or an endless SysEx costs the same per byte as music.

use std::fmt;

use crate::message::{data_len, from_parts, MidiMessage};

/// A message and the time of its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event {
    /// The timestamp passed with the message's first byte: its status byte,
    /// or its first data byte under running status. A real-time message's
    /// own byte is its first byte.
    pub t_ns: u64,
    /// The message.
    pub msg: MidiMessage,
}

/// What the parser has counted since it was made or [`reset`](Parser::reset).
///
/// Bad input is counted here and otherwise ignored: the parser never panics
/// on any byte sequence and resynchronizes on the next status byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ParserStats {
    /// Bytes pushed.
    pub bytes: u64,
    /// Messages returned (every [`Event`], real-time and SysEx included).
    pub messages: u64,
    /// Data bytes with no status to belong to: at the start of the stream,
    /// after a system common message, after a SysEx, after an undefined
    /// status byte.
    pub stray_data_bytes: u64,
    /// Messages cut short by a status byte before their last data byte
    /// (dropped), plus SysEx messages ended by a status byte other than EOX
    /// (returned with `truncated: true`).
    pub truncated_messages: u64,
    /// SysEx messages longer than the buffer (the excess was dropped; the
    /// message is returned with `truncated: true`). Counted when the first
    /// excess byte arrives, so an endless SysEx shows up before it ends.
    pub sysex_overflows: u64,
    /// Undefined status bytes (0xF4, 0xF5, 0xF9, 0xFD), ignored.
    pub undefined_status_bytes: u64,
    /// EOX bytes (0xF7) with no SysEx open, ignored.
    pub stray_eox: u64,
}

/// The messages completed by one byte: none, one, or (rarely) two.
///
/// Two happen only when a status byte ends an open SysEx (returned first,
/// `truncated: true`) and is itself a complete message (Tune Request, 0xF6).
/// Iterate it: `for ev in parser.push(byte, t) { … }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events {
    slots: [Option<Event>; 2],
    next: usize,
}

impl Events {
    fn push(&mut self, ev: Event) {
        let i = usize::from(self.slots[0].is_some());
        self.slots[i] = Some(ev);
    }

    /// `true` when no message remains.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first remaining message, without consuming it.
    pub fn peek(&self) -> Option<&Event> {
        self.slots.get(self.next).and_then(Option::as_ref)
    }
}

impl Iterator for Events {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        let ev = self.slots.get_mut(self.next)?.take()?;
        self.next += 1;
        Some(ev)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.slots[self.next.min(2)..]
            .iter()
            .filter(|s| s.is_some())
            .count();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Events {}

/// A MIDI 1.0 byte-stream parser for one input (a serial port, a raw MIDI
/// device, a pty).
///
/// Feed it every byte in arrival order with its arrival time; it handles
/// running status, real-time bytes (0xF8..=0xFF) anywhere (even inside another
/// message or a SysEx, without disturbing it), system common messages, and
/// SysEx of any length into a buffer of fixed capacity. Garbage is counted in
/// [`ParserStats`] and skipped; the next status byte resynchronizes.
///
/// Running status is kept across real-time bytes and cancelled by system
/// common bytes (0xF0..=0xF7, including the undefined 0xF4, 0xF5), as MIDI 1.0
/// requires. System Reset (0xFF) is returned as [`MidiMessage::Reset`] and,
/// like every real-time byte, leaves the parser's state alone; call
/// [`Parser::reset`] if the application wants that.
///
/// ```
/// use firmtime_midi::{MidiMessage, Parser};
///
/// let mut parser = Parser::new(64);
/// // Note On, a Timing Clock in the middle of it, then a second note by running status.
/// let bytes = [0x90, 0x3C, 0xF8, 0x64, 0x40, 0x50];
/// let mut got = Vec::new();
/// for (i, &b) in bytes.iter().enumerate() {
///     got.extend(parser.push(b, 1_000 * i as u64));
/// }
/// assert_eq!(got[0].msg, MidiMessage::Clock);
/// assert_eq!(got[0].t_ns, 2_000);
/// assert_eq!(got[1].msg, MidiMessage::NoteOn { channel: 0, note: 0x3C, velocity: 0x64 });
/// assert_eq!(got[1].t_ns, 0); // the time of its status byte
/// assert_eq!(got[2].msg, MidiMessage::NoteOn { channel: 0, note: 0x40, velocity: 0x50 });
/// assert_eq!(got[2].t_ns, 4_000); // the time of its first data byte
/// ```
pub struct Parser {
    /// Status of the message being collected, or the running status between
    /// channel messages; 0 when data bytes have nowhere to go.
    status: u8,
    /// Data bytes the current status takes.
    need: u8,
    data: [u8; 2],
    have: u8,
    /// A message has started (status or first data byte seen) and is not complete.
    in_progress: bool,
    t_first: u64,
    in_sysex: bool,
    sysex_overflow: bool,
    sysex_t: u64,
    /// Bytes stored for the SysEx being collected.
    sysex_fill: usize,
    /// Bytes of the last returned SysEx, for [`Parser::sysex_data`].
    sysex_view: usize,
    sysex: Box<[u8]>,
    stats: ParserStats,
}

impl fmt::Debug for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The SysEx buffer can be large: show its size, not its bytes.
        f.debug_struct("Parser")
            .field("status", &format_args!("{:#04x}", self.status))
            .field("in_progress", &self.in_progress)
            .field("have", &self.have)
            .field("in_sysex", &self.in_sysex)
            .field("sysex_fill", &self.sysex_fill)
            .field("sysex_capacity", &self.sysex.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Parser {
    /// A parser whose SysEx buffer holds `sysex_capacity` payload bytes
    /// (0 is allowed: every SysEx with a payload then overflows). The buffer
    /// is allocated and written here, so its pages are resident before the
    /// real-time loop starts.
    pub fn new(sysex_capacity: usize) -> Self {
        let mut sysex = vec![0u8; sysex_capacity];
        // A zeroed allocation may be untouched zero pages; write one byte per
        // page (black_box keeps the store) so the RT loop takes no page faults.
        for page in sysex.chunks_mut(4096) {
            page[0] = std::hint::black_box(0);
        }
        Self {
            status: 0,
            need: 0,
            data: [0; 2],
            have: 0,
            in_progress: false,
            t_first: 0,
            in_sysex: false,
            sysex_overflow: false,
            sysex_t: 0,
            sysex_fill: 0,
            sysex_view: 0,
            sysex: sysex.into_boxed_slice(),
            stats: ParserStats::default(),
        }
    }

    /// The SysEx buffer's capacity in payload bytes.
    pub fn sysex_capacity(&self) -> usize {
        self.sysex.len()
    }

    /// Counters since [`Parser::new`] or [`Parser::reset`].
    ///
    /// **RT-safe.**
    pub fn stats(&self) -> ParserStats {
        self.stats
    }

    /// Back to the state [`Parser::new`] left it in: no running status, no
    /// message or SysEx in progress, counters at zero. The buffer is kept.
    ///
    /// **RT-safe.**
    pub fn reset(&mut self) {
        self.status = 0;
        self.need = 0;
        self.have = 0;
        self.in_progress = false;
        self.in_sysex = false;
        self.sysex_overflow = false;
        self.sysex_fill = 0;
        self.sysex_view = 0;
        self.stats = ParserStats::default();
    }

    /// The payload (bytes between 0xF0 and the end, both excluded) of the last
    /// [`MidiMessage::SysEx`] returned. Read it before the next
    /// [`push`](Parser::push): a new SysEx overwrites the buffer.
    ///
    /// **RT-safe.**
    pub fn sysex_data(&self) -> &[u8] {
        &self.sysex[..self.sysex_view]
    }

    /// Parses one byte that arrived at `t_ns` (any clock, any epoch: it is only
    /// copied into events) and returns the messages it completes.
    ///
    /// **RT-safe.**
    #[must_use = "the messages this byte completes are returned only here"]
    pub fn push(&mut self, byte: u8, t_ns: u64) -> Events {
        let mut out = Events::default();
        self.stats.bytes += 1;
        match byte {
            0x00..=0x7F => self.data_byte(byte, t_ns, &mut out),
            0xF8..=0xFF => match data_len(byte) {
                Some(_) => self.emit(&mut out, t_ns, from_parts(byte, 0, 0)),
                None => self.stats.undefined_status_bytes += 1,
            },
            _ => self.status_byte(byte, t_ns, &mut out),
        }
        out
    }

    /// Pushes every byte of `bytes`, all stamped `t_ns` (e.g. one `read()`
    /// whose bytes arrived together), and calls `on_event` for each message.
    ///
    /// **RT-safe** if `on_event` is.
    pub fn push_slice(&mut self, bytes: &[u8], t_ns: u64, mut on_event: impl FnMut(Event)) {
        for &b in bytes {
            for ev in self.push(b, t_ns) {
                on_event(ev);
            }
        }
    }

    fn emit(&mut self, out: &mut Events, t_ns: u64, msg: MidiMessage) {
        self.stats.messages += 1;
        out.push(Event { t_ns, msg });
    }

    fn data_byte(&mut self, byte: u8, t_ns: u64, out: &mut Events) {
        if self.in_sysex {
            if let Some(slot) = self.sysex.get_mut(self.sysex_fill) {
                *slot = byte;
                self.sysex_fill += 1;
            } else if !self.sysex_overflow {
                self.sysex_overflow = true;
                self.stats.sysex_overflows += 1;
            }
            return;
        }
        if self.status == 0 {
            self.stats.stray_data_bytes += 1;
            return;
        }
        if !self.in_progress {
            self.in_progress = true;
            self.t_first = t_ns;
            self.have = 0;
        }
        self.data[usize::from(self.have)] = byte;
        self.have += 1;
        if self.have == self.need {
            let msg = from_parts(self.status, self.data[0], self.data[1]);
            self.in_progress = false;
            self.have = 0;
            if self.status >= 0xF0 {
                // System common messages carry no running status.
                self.status = 0;
            }
            let t = self.t_first;
            self.emit(out, t, msg);
        }
    }

    /// A status byte 0x80..=0xF7.
    fn status_byte(&mut self, byte: u8, t_ns: u64, out: &mut Events) {
        if self.in_sysex {
            self.in_sysex = false;
            self.sysex_view = self.sysex_fill;
            let ended = byte == 0xF7;
            if !ended {
                self.stats.truncated_messages += 1;
            }
            let msg = MidiMessage::SysEx {
                len: self.sysex_fill,
                truncated: self.sysex_overflow || !ended,
            };
            let t = self.sysex_t;
            self.emit(out, t, msg);
            if ended {
                return;
            }
        } else if self.in_progress {
            self.stats.truncated_messages += 1;
        }
        self.in_progress = false;
        self.have = 0;
        self.status = 0;
        match byte {
            0xF0 => {
                self.in_sysex = true;
                self.sysex_overflow = false;
                // The previous payload stays readable until data overwrites it.
                self.sysex_fill = 0;
                self.sysex_t = t_ns;
            }
            0xF4 | 0xF5 => self.stats.undefined_status_bytes += 1,
            0xF6 => self.emit(out, t_ns, MidiMessage::TuneRequest),
            0xF7 => self.stats.stray_eox += 1,
            _ => {
                // Channel voice (0x80..=0xEF) or system common with data (0xF1..=0xF3).
                self.status = byte;
                self.need = data_len(byte).unwrap_or(0);
                self.in_progress = true;
                self.t_first = t_ns;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MidiMessage as M;

    fn feed(p: &mut Parser, bytes: &[u8]) -> Vec<Event> {
        let mut got = Vec::new();
        for (i, &b) in bytes.iter().enumerate() {
            got.extend(p.push(b, i as u64 * 10));
        }
        got
    }

    fn msgs(p: &mut Parser, bytes: &[u8]) -> Vec<MidiMessage> {
        feed(p, bytes).into_iter().map(|e| e.msg).collect()
    }

    fn on(channel: u8, note: u8, velocity: u8) -> MidiMessage {
        M::NoteOn {
            channel,
            note,
            velocity,
        }
    }

    #[test]
    fn every_message_type() {
        let mut p = Parser::new(16);
        let bytes = [
            0x80, 60, 64, 0x9F, 127, 1, 0xA3, 40, 90, 0xB9, 64, 127, 0xC2, 17, 0xD4, 33, 0xE5,
            0x7F, 0x7F, 0xF1, 0x35, 0xF2, 0x34, 0x24, 0xF3, 7, 0xF6, 0xF8, 0xFA, 0xFB, 0xFC, 0xFE,
            0xFF, 0xF0, 1, 2, 3, 0xF7,
        ];
        let got = msgs(&mut p, &bytes);
        assert_eq!(
            got,
            [
                M::NoteOff {
                    channel: 0,
                    note: 60,
                    velocity: 64
                },
                on(15, 127, 1),
                M::PolyPressure {
                    channel: 3,
                    note: 40,
                    pressure: 90
                },
                M::ControlChange {
                    channel: 9,
                    controller: 64,
                    value: 127
                },
                M::ProgramChange {
                    channel: 2,
                    program: 17
                },
                M::ChannelPressure {
                    channel: 4,
                    pressure: 33
                },
                M::PitchBend {
                    channel: 5,
                    value: 16383
                },
                M::MtcQuarterFrame(0x35),
                M::SongPosition(0x1234),
                M::SongSelect(7),
                M::TuneRequest,
                M::Clock,
                M::Start,
                M::Continue,
                M::Stop,
                M::ActiveSensing,
                M::Reset,
                M::SysEx {
                    len: 3,
                    truncated: false
                },
            ]
        );
        assert_eq!(p.sysex_data(), [1, 2, 3]);
        let s = p.stats();
        assert_eq!(s.messages, 18);
        assert_eq!(s.bytes, bytes.len() as u64);
        assert_eq!(
            ParserStats {
                messages: 0,
                bytes: 0,
                ..s
            },
            ParserStats::default()
        );
    }

    #[test]
    fn running_status_across_many_messages() {
        let mut p = Parser::new(0);
        let mut bytes = vec![0x90];
        for n in 0..100u8 {
            bytes.extend([n, 100 - n]);
        }
        let got = feed(&mut p, &bytes);
        assert_eq!(got.len(), 100);
        for (n, ev) in got.iter().enumerate() {
            let n8 = n as u8;
            assert_eq!(ev.msg, on(0, n8, 100 - n8));
            // First message: its status byte (index 0); then each first data byte.
            let first = if n == 0 { 0 } else { 1 + 2 * n };
            assert_eq!(ev.t_ns, first as u64 * 10);
        }
        // One-data-byte messages: each data byte is a message.
        assert_eq!(
            msgs(&mut p, &[0xC3, 1, 2, 3]),
            [1, 2, 3].map(|program| M::ProgramChange {
                channel: 3,
                program
            })
        );
        assert_eq!(p.stats().stray_data_bytes, 0);
        assert_eq!(p.stats().truncated_messages, 0);
    }

    #[test]
    fn realtime_inside_note_on_keeps_first_byte_timestamp() {
        let mut p = Parser::new(0);
        let got = feed(&mut p, &[0x90, 0x3C, 0xF8, 0x64]);
        assert_eq!(
            got,
            [
                Event {
                    t_ns: 20,
                    msg: M::Clock
                },
                Event {
                    t_ns: 0,
                    msg: on(0, 0x3C, 0x64)
                }
            ]
        );
        // Real-time between status and first data byte, and running status after it.
        let got = msgs(&mut p, &[0x91, 0xFE, 1, 0xFF, 2, 0xF8, 3, 0xFA, 4]);
        assert_eq!(
            got,
            [
                M::ActiveSensing,
                M::Reset,
                on(1, 1, 2),
                M::Clock,
                M::Start,
                on(1, 3, 4)
            ]
        );
    }

    #[test]
    fn realtime_inside_sysex() {
        let mut p = Parser::new(8);
        let got = feed(&mut p, &[0xF0, 1, 0xF8, 2, 0xFE, 3, 0xF7]);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].msg, M::Clock);
        assert_eq!(got[1].msg, M::ActiveSensing);
        assert_eq!(
            got[2],
            Event {
                t_ns: 0,
                msg: M::SysEx {
                    len: 3,
                    truncated: false
                }
            }
        );
        assert_eq!(p.sysex_data(), [1, 2, 3]);
    }

    #[test]
    fn sysex_ended_by_status_byte_is_truncated_and_the_status_starts_a_message() {
        let mut p = Parser::new(8);
        let got = feed(&mut p, &[0xF0, 5, 6, 0x90, 60, 100]);
        assert_eq!(
            got,
            [
                Event {
                    t_ns: 0,
                    msg: M::SysEx {
                        len: 2,
                        truncated: true
                    }
                },
                Event {
                    t_ns: 30,
                    msg: on(0, 60, 100)
                },
            ]
        );
        assert_eq!(p.stats().truncated_messages, 1);
        assert_eq!(p.stats().sysex_overflows, 0);
    }

    #[test]
    fn sysex_ended_by_tune_request_gives_two_events_from_one_byte() {
        let mut p = Parser::new(8);
        assert!(p.push(0xF0, 1).is_empty());
        assert!(p.push(9, 2).is_empty());
        let evs = p.push(0xF6, 3);
        assert_eq!(evs.len(), 2);
        assert_eq!(p.sysex_data(), [9]);
        assert_eq!(
            evs.collect::<Vec<_>>(),
            [
                Event {
                    t_ns: 1,
                    msg: M::SysEx {
                        len: 1,
                        truncated: true
                    }
                },
                Event {
                    t_ns: 3,
                    msg: M::TuneRequest
                }
            ]
        );
        assert_eq!(p.stats().messages, 2);
    }

    #[test]
    fn sysex_started_by_sysex_keeps_old_payload_until_new_data() {
        let mut p = Parser::new(8);
        feed(&mut p, &[0xF0, 1, 2]);
        let evs: Vec<_> = p.push(0xF0, 99).collect();
        assert_eq!(
            evs[0].msg,
            M::SysEx {
                len: 2,
                truncated: true
            }
        );
        assert_eq!(p.sysex_data(), [1, 2]);
        feed(&mut p, &[7, 0xF7]);
        assert_eq!(p.sysex_data(), [7]);
    }

    #[test]
    fn sysex_overflow_is_flagged_counted_and_parser_recovers() {
        let mut p = Parser::new(4);
        let mut bytes = vec![0xF0];
        bytes.extend(0..10u8);
        bytes.push(0xF7);
        bytes.extend([0x80, 60, 0]);
        let got = msgs(&mut p, &bytes);
        assert_eq!(
            got,
            [
                M::SysEx {
                    len: 4,
                    truncated: true
                },
                M::NoteOff {
                    channel: 0,
                    note: 60,
                    velocity: 0
                }
            ]
        );
        assert_eq!(p.stats().sysex_overflows, 1);
        assert_eq!(p.stats().truncated_messages, 0);
        // The next SysEx that fits is whole again.
        let got = msgs(&mut p, &[0xF0, 1, 2, 3, 4, 0xF7]);
        assert_eq!(
            got,
            [M::SysEx {
                len: 4,
                truncated: false
            }]
        );
        assert_eq!(p.sysex_data(), [1, 2, 3, 4]);
        assert_eq!(p.stats().sysex_overflows, 1);
    }

    #[test]
    fn zero_capacity_sysex() {
        let mut p = Parser::new(0);
        assert_eq!(
            msgs(&mut p, &[0xF0, 0xF7, 0xF0, 1, 0xF7]),
            [
                M::SysEx {
                    len: 0,
                    truncated: false
                },
                M::SysEx {
                    len: 0,
                    truncated: true
                }
            ]
        );
        assert_eq!(p.stats().sysex_overflows, 1);
    }

    #[test]
    fn stray_data_bytes_at_start_are_counted_then_resync() {
        let mut p = Parser::new(0);
        let got = feed(&mut p, &[1, 2, 3, 0x92, 4, 5]);
        assert_eq!(
            got,
            [Event {
                t_ns: 30,
                msg: on(2, 4, 5)
            }]
        );
        assert_eq!(p.stats().stray_data_bytes, 3);
    }

    #[test]
    fn system_common_cancels_running_status() {
        let mut p = Parser::new(0);
        let got = msgs(&mut p, &[0x90, 1, 2, 0xF3, 5, 3, 4, 0xF6, 6]);
        assert_eq!(got, [on(0, 1, 2), M::SongSelect(5), M::TuneRequest]);
        assert_eq!(p.stats().stray_data_bytes, 3);
        // EOX after SysEx too.
        let got = msgs(&mut p, &[0x90, 1, 2, 0xF0, 0xF7, 3, 4]);
        assert_eq!(got.len(), 2);
        assert_eq!(p.stats().stray_data_bytes, 5);
    }

    #[test]
    fn undefined_status_bytes() {
        let mut p = Parser::new(0);
        // F9/FD are real-time: ignored without disturbing the Note On.
        let got = msgs(&mut p, &[0x90, 1, 0xF9, 2, 0xFD]);
        assert_eq!(got, [on(0, 1, 2)]);
        // F4/F5 are system common: they cancel running status and cut a message short.
        let got = msgs(&mut p, &[3, 0xF4, 4, 5, 0x90, 6, 0xF5, 7]);
        assert!(got.is_empty());
        let s = p.stats();
        assert_eq!(s.undefined_status_bytes, 4);
        assert_eq!(s.truncated_messages, 2);
        assert_eq!(s.stray_data_bytes, 3);
        assert_eq!(s.messages, 1);
    }

    #[test]
    fn stray_eox_is_counted() {
        let mut p = Parser::new(0);
        let got = msgs(&mut p, &[0xF7, 0x90, 1, 0xF7, 2]);
        assert!(got.is_empty());
        assert_eq!(p.stats().stray_eox, 2);
        assert_eq!(p.stats().truncated_messages, 1);
        assert_eq!(p.stats().stray_data_bytes, 1);
    }

    #[test]
    fn truncated_message_is_dropped_and_counted() {
        let mut p = Parser::new(0);
        let got = feed(&mut p, &[0x90, 60, 0x80, 61, 0]);
        assert_eq!(
            got,
            [Event {
                t_ns: 20,
                msg: M::NoteOff {
                    channel: 0,
                    note: 61,
                    velocity: 0
                }
            }]
        );
        assert_eq!(p.stats().truncated_messages, 1);
        // A status byte right after another (no data yet) also truncates.
        msgs(&mut p, &[0xB0, 0xC0, 5]);
        assert_eq!(p.stats().truncated_messages, 2);
    }

    #[test]
    fn reset_byte_is_a_message_and_leaves_state_alone() {
        let mut p = Parser::new(0);
        let got = msgs(&mut p, &[0x90, 1, 0xFF, 2, 3, 4]);
        assert_eq!(got, [M::Reset, on(0, 1, 2), on(0, 3, 4)]);
    }

    #[test]
    fn reset_method_clears_state_and_counters() {
        let mut p = Parser::new(4);
        msgs(&mut p, &[1, 0x90, 1, 2, 3, 0xF0, 1]);
        p.reset();
        assert_eq!(p.stats(), ParserStats::default());
        assert!(p.sysex_data().is_empty());
        // No running status, no SysEx open.
        assert!(msgs(&mut p, &[4, 0xF7]).is_empty());
        assert_eq!(p.stats().stray_data_bytes, 1);
        assert_eq!(p.stats().stray_eox, 1);
        assert_eq!(p.sysex_capacity(), 4);
    }

    #[test]
    fn push_slice_stamps_every_byte_alike() {
        let mut p = Parser::new(0);
        let mut got = Vec::new();
        p.push_slice(&[0x90, 1, 0xF8, 2], 77, |e| got.push(e));
        assert_eq!(
            got,
            [
                Event {
                    t_ns: 77,
                    msg: M::Clock
                },
                Event {
                    t_ns: 77,
                    msg: on(0, 1, 2)
                }
            ]
        );
    }

    #[test]
    fn debug_shows_state_not_the_buffer() {
        let mut p = Parser::new(100_000);
        let _ = p.push(0x90, 0);
        let s = format!("{p:?}");
        assert!(s.contains("status: 0x90"), "{s}");
        assert!(s.contains("sysex_capacity: 100000"), "{s}");
        assert!(s.len() < 1_000, "{s}");
    }

    #[test]
    fn events_iterator_reports_its_length() {
        let mut p = Parser::new(0);
        let evs = p.push(0xF8, 0);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs.peek().map(|e| e.msg), Some(M::Clock));
        let mut evs = evs;
        assert!(evs.next().is_some());
        assert!(evs.is_empty());
        assert_eq!(evs.next(), None);
        assert_eq!(evs.next(), None);
    }

    #[test]
    fn long_stream_allocates_nothing() {
        let mut p = Parser::new(64);
        let mut stream = Vec::new();
        for i in 0..2_000u32 {
            let b = (i % 128) as u8;
            stream.extend([
                0x90, b, 100, b, 0, 0xF8, 0xF0, b, b, 0xF7, 0xB1, 7, b, 0xE2, b, 0x40,
            ]);
            stream.extend([0xF4, 5, 0xF9, 0xF1, 0x20, 0xF7]);
        }
        let mut count = 0u64;
        assert_no_alloc::assert_no_alloc(|| {
            for (i, &b) in stream.iter().enumerate() {
                for ev in p.push(b, i as u64) {
                    count += 1;
                    if let M::SysEx { len, .. } = ev.msg {
                        assert_eq!(p.sysex_data().len(), len);
                    }
                }
            }
            p.push_slice(&stream, 5, |_| count += 1);
        });
        // Per block: NoteOn, NoteOn, Clock, SysEx, CC, PitchBend, MTC = 7.
        assert_eq!(count, 2 * 2_000 * 7);
        assert_eq!(p.stats().messages, count);
        assert_eq!(p.stats().undefined_status_bytes, 2 * 2_000 * 2);
        assert_eq!(p.stats().stray_data_bytes, 2 * 2_000);
        assert_eq!(p.stats().stray_eox, 2 * 2_000);
    }
}
