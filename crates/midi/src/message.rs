//! MIDI 1.0 messages as values, their encoding, and parsing of one complete
//! message (a JACK MIDI event).
//!
//! **RT-safe** throughout: nothing here allocates, locks or blocks.
//! [`MidiMessage`] is `Copy`; a SysEx payload is never held in it (the
//! stream [`Parser`](crate::Parser) keeps it in its own preallocated buffer,
//! [`parse_message`] leaves it in the caller's bytes).

use std::fmt;

/// One MIDI 1.0 message.
///
/// Channels are numbered **0..=15** here (the wire value: MIDI channel 1 is
/// `channel: 0`). Data values are 7-bit (0..=127); [`PitchBend`](Self::PitchBend)
/// and [`SongPosition`](Self::SongPosition) are 14-bit (0..=16383, pitch-bend
/// centre 8192). Encoding masks out-of-range fields to their width.
///
/// A Note On with velocity 0 stays a [`NoteOn`](Self::NoteOn) (the parser does
/// not rewrite what the keyboard sent); use [`is_note_off_like`](Self::is_note_off_like)
/// to treat it as a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MidiMessage {
    /// Note Off (0x8n).
    NoteOff {
        /// Channel 0..=15.
        channel: u8,
        /// Note number 0..=127 (60 is middle C).
        note: u8,
        /// Release velocity 0..=127.
        velocity: u8,
    },
    /// Note On (0x9n). Velocity 0 is a release by convention; see
    /// [`MidiMessage::is_note_off_like`].
    NoteOn {
        /// Channel 0..=15.
        channel: u8,
        /// Note number 0..=127.
        note: u8,
        /// Velocity 0..=127.
        velocity: u8,
    },
    /// Polyphonic key pressure / aftertouch (0xAn).
    PolyPressure {
        /// Channel 0..=15.
        channel: u8,
        /// Note number 0..=127.
        note: u8,
        /// Pressure 0..=127.
        pressure: u8,
    },
    /// Control Change (0xBn), including channel mode messages (controllers 120..=127).
    ControlChange {
        /// Channel 0..=15.
        channel: u8,
        /// Controller number 0..=127.
        controller: u8,
        /// Value 0..=127.
        value: u8,
    },
    /// Program Change (0xCn).
    ProgramChange {
        /// Channel 0..=15.
        channel: u8,
        /// Program 0..=127.
        program: u8,
    },
    /// Channel pressure / aftertouch (0xDn).
    ChannelPressure {
        /// Channel 0..=15.
        channel: u8,
        /// Pressure 0..=127.
        pressure: u8,
    },
    /// Pitch Bend (0xEn).
    PitchBend {
        /// Channel 0..=15.
        channel: u8,
        /// 14-bit value 0..=16383; 8192 is no bend.
        value: u16,
    },
    /// MIDI Time Code quarter frame (0xF1): the data byte (message type in
    /// bits 4..=6, value in bits 0..=3).
    MtcQuarterFrame(u8),
    /// Song Position Pointer (0xF2): MIDI beats (sixteenth notes) since the
    /// start of the song, 0..=16383.
    SongPosition(u16),
    /// Song Select (0xF3): song number 0..=127.
    SongSelect(u8),
    /// Tune Request (0xF6).
    TuneRequest,
    /// Timing Clock (0xF8), 24 per quarter note.
    Clock,
    /// Start (0xFA).
    Start,
    /// Continue (0xFB).
    Continue,
    /// Stop (0xFC).
    Stop,
    /// Active Sensing (0xFE).
    ActiveSensing,
    /// System Reset (0xFF).
    Reset,
    /// System Exclusive (0xF0 … 0xF7). The payload (the data bytes between
    /// 0xF0 and 0xF7, both excluded) is not in the message: read it with
    /// [`Parser::sysex_data`](crate::Parser::sysex_data), or from the event's
    /// own bytes after [`parse_message`].
    SysEx {
        /// Payload bytes available (at most the parser's SysEx capacity).
        len: usize,
        /// `true` when the payload is incomplete: it overflowed the parser's
        /// buffer (the excess was dropped), or another status byte ended the
        /// message before its EOX (0xF7).
        truncated: bool,
    },
}

impl MidiMessage {
    /// The channel 0..=15 of a channel voice message, `None` for system messages.
    ///
    /// **RT-safe.**
    pub fn channel(&self) -> Option<u8> {
        match *self {
            Self::NoteOff { channel, .. }
            | Self::NoteOn { channel, .. }
            | Self::PolyPressure { channel, .. }
            | Self::ControlChange { channel, .. }
            | Self::ProgramChange { channel, .. }
            | Self::ChannelPressure { channel, .. }
            | Self::PitchBend { channel, .. } => Some(channel),
            _ => None,
        }
    }

    /// `true` for a Note Off, and for a Note On with velocity 0 (the usual
    /// way keyboards send a release under running status).
    ///
    /// **RT-safe.**
    pub fn is_note_off_like(&self) -> bool {
        matches!(
            self,
            Self::NoteOff { .. } | Self::NoteOn { velocity: 0, .. }
        )
    }

    /// `true` for the system real-time messages (0xF8..=0xFF), which may
    /// appear anywhere in a byte stream, even inside another message.
    ///
    /// **RT-safe.**
    pub fn is_realtime(&self) -> bool {
        matches!(
            self,
            Self::Clock
                | Self::Start
                | Self::Continue
                | Self::Stop
                | Self::ActiveSensing
                | Self::Reset
        )
    }

    /// The status byte this message is sent with (channel included, masked to 0..=15).
    ///
    /// **RT-safe.**
    pub fn status(&self) -> u8 {
        match *self {
            Self::NoteOff { channel, .. } => 0x80 | (channel & 0x0F),
            Self::NoteOn { channel, .. } => 0x90 | (channel & 0x0F),
            Self::PolyPressure { channel, .. } => 0xA0 | (channel & 0x0F),
            Self::ControlChange { channel, .. } => 0xB0 | (channel & 0x0F),
            Self::ProgramChange { channel, .. } => 0xC0 | (channel & 0x0F),
            Self::ChannelPressure { channel, .. } => 0xD0 | (channel & 0x0F),
            Self::PitchBend { channel, .. } => 0xE0 | (channel & 0x0F),
            Self::SysEx { .. } => 0xF0,
            Self::MtcQuarterFrame(_) => 0xF1,
            Self::SongPosition(_) => 0xF2,
            Self::SongSelect(_) => 0xF3,
            Self::TuneRequest => 0xF6,
            Self::Clock => 0xF8,
            Self::Start => 0xFA,
            Self::Continue => 0xFB,
            Self::Stop => 0xFC,
            Self::ActiveSensing => 0xFE,
            Self::Reset => 0xFF,
        }
    }

    /// Writes the message's bytes (status first) into `out` and returns how
    /// many were written: 1, 2 or 3. Out-of-range fields are masked to their
    /// width (7 bits, 14 bits, channel 4 bits).
    ///
    /// A [`SysEx`](Self::SysEx) does not fit in three bytes: it writes nothing
    /// and returns 0; use [`encode_sysex`](crate::encode_sysex).
    ///
    /// **RT-safe.**
    pub fn encode(&self, out: &mut [u8; 3]) -> usize {
        if let Self::SysEx { .. } = self {
            return 0;
        }
        out[0] = self.status();
        let data = |b: u8| b & 0x7F;
        let lsb = |v: u16| (v & 0x7F) as u8;
        let msb = |v: u16| ((v >> 7) & 0x7F) as u8;
        match *self {
            Self::NoteOff { note, velocity, .. } | Self::NoteOn { note, velocity, .. } => {
                out[1] = data(note);
                out[2] = data(velocity);
                3
            }
            Self::PolyPressure { note, pressure, .. } => {
                out[1] = data(note);
                out[2] = data(pressure);
                3
            }
            Self::ControlChange {
                controller, value, ..
            } => {
                out[1] = data(controller);
                out[2] = data(value);
                3
            }
            Self::ProgramChange { program: b, .. }
            | Self::ChannelPressure { pressure: b, .. }
            | Self::MtcQuarterFrame(b)
            | Self::SongSelect(b) => {
                out[1] = data(b);
                2
            }
            Self::PitchBend { value: v, .. } | Self::SongPosition(v) => {
                out[1] = lsb(v);
                out[2] = msb(v);
                3
            }
            Self::TuneRequest
            | Self::Clock
            | Self::Start
            | Self::Continue
            | Self::Stop
            | Self::ActiveSensing
            | Self::Reset => 1,
            Self::SysEx { .. } => 0,
        }
    }
}

/// Number of data bytes that follow `status` in a (non-SysEx) message, or
/// `None` for a byte that does not start one: data bytes, 0xF0, 0xF4, 0xF5,
/// 0xF7, 0xF9, 0xFD.
pub(crate) fn data_len(status: u8) -> Option<u8> {
    match status {
        0x80..=0xBF | 0xE0..=0xEF | 0xF2 => Some(2),
        0xC0..=0xDF | 0xF1 | 0xF3 => Some(1),
        0xF6 | 0xF8 | 0xFA..=0xFC | 0xFE | 0xFF => Some(0),
        _ => None,
    }
}

/// Builds the message for `status` and its data bytes (`d0`, `d1`; unused
/// ones ignored). `status` must be one [`data_len`] accepts.
pub(crate) fn from_parts(status: u8, d0: u8, d1: u8) -> MidiMessage {
    let channel = status & 0x0F;
    let wide = u16::from(d0) | (u16::from(d1) << 7);
    match status {
        0x80..=0x8F => MidiMessage::NoteOff {
            channel,
            note: d0,
            velocity: d1,
        },
        0x90..=0x9F => MidiMessage::NoteOn {
            channel,
            note: d0,
            velocity: d1,
        },
        0xA0..=0xAF => MidiMessage::PolyPressure {
            channel,
            note: d0,
            pressure: d1,
        },
        0xB0..=0xBF => MidiMessage::ControlChange {
            channel,
            controller: d0,
            value: d1,
        },
        0xC0..=0xCF => MidiMessage::ProgramChange {
            channel,
            program: d0,
        },
        0xD0..=0xDF => MidiMessage::ChannelPressure {
            channel,
            pressure: d0,
        },
        0xE0..=0xEF => MidiMessage::PitchBend {
            channel,
            value: wide,
        },
        0xF1 => MidiMessage::MtcQuarterFrame(d0),
        0xF2 => MidiMessage::SongPosition(wide),
        0xF3 => MidiMessage::SongSelect(d0),
        0xF6 => MidiMessage::TuneRequest,
        0xF8 => MidiMessage::Clock,
        0xFA => MidiMessage::Start,
        0xFB => MidiMessage::Continue,
        0xFC => MidiMessage::Stop,
        0xFE => MidiMessage::ActiveSensing,
        0xFF => MidiMessage::Reset,
        _ => unreachable!("from_parts called with status {status:#04x}"),
    }
}

/// Why [`parse_message`] rejected an event's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseError {
    /// The event has no bytes.
    Empty,
    /// The first byte is a data byte (below 0x80). A complete message starts
    /// with its status byte; running status belongs to byte streams
    /// ([`Parser`](crate::Parser)).
    MissingStatus(u8),
    /// The status byte is undefined in MIDI 1.0 (0xF4, 0xF5, 0xF9, 0xFD),
    /// or is an EOX (0xF7) with no SysEx before it.
    UndefinedStatus(u8),
    /// A status byte stands where a data byte belongs.
    UnexpectedStatus {
        /// Position of the offending byte in the event.
        index: usize,
        /// The byte.
        byte: u8,
    },
    /// The event is shorter than its status byte requires.
    Incomplete {
        /// Bytes the message needs, status included.
        expected: usize,
        /// Bytes the event has.
        got: usize,
    },
    /// The event is longer than its status byte allows (one message per event).
    TrailingBytes {
        /// Bytes the message needs, status included.
        expected: usize,
        /// Bytes the event has.
        got: usize,
    },
    /// A SysEx (0xF0) that does not end with EOX (0xF7).
    UnterminatedSysEx,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Empty => write!(f, "empty MIDI event: a message needs at least a status byte"),
            Self::MissingStatus(b) => write!(
                f,
                "MIDI event starts with data byte {b:#04x}: a complete message must start with a status byte (0x80..=0xFF)"
            ),
            Self::UndefinedStatus(b) => write!(
                f,
                "MIDI event starts with {b:#04x}, which starts no MIDI 1.0 message (undefined status or stray EOX)"
            ),
            Self::UnexpectedStatus { index, byte } => write!(
                f,
                "status byte {byte:#04x} at position {index} of a MIDI event where a data byte (below 0x80) belongs"
            ),
            Self::Incomplete { expected, got } => write!(
                f,
                "incomplete MIDI message: {got} byte(s), its status byte needs {expected}"
            ),
            Self::TrailingBytes { expected, got } => write!(
                f,
                "MIDI event has {got} bytes but its message is {expected}: one message per event"
            ),
            Self::UnterminatedSysEx => write!(f, "SysEx event does not end with EOX (0xF7)"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses one complete message, as JACK delivers MIDI events: status byte
/// first, no running status, nothing after the message. A SysEx event must
/// run from 0xF0 to 0xF7; its payload is `bytes[1..bytes.len() - 1]` and the
/// result is `SysEx { len: bytes.len() - 2, truncated: false }`.
///
/// **RT-safe.**
///
/// # Errors
///
/// A [`ParseError`] saying what is wrong with the bytes: empty, no status
/// byte first, undefined status, a status byte among the data, too few or
/// too many bytes, or an unterminated SysEx.
///
/// ```
/// use firmtime_midi::{parse_message, MidiMessage, ParseError};
///
/// assert_eq!(
///     parse_message(&[0x91, 60, 100]),
///     Ok(MidiMessage::NoteOn { channel: 1, note: 60, velocity: 100 })
/// );
/// assert_eq!(parse_message(&[60, 100]), Err(ParseError::MissingStatus(60)));
/// ```
pub fn parse_message(bytes: &[u8]) -> Result<MidiMessage, ParseError> {
    let (&status, rest) = bytes.split_first().ok_or(ParseError::Empty)?;
    if status < 0x80 {
        return Err(ParseError::MissingStatus(status));
    }
    if let Some(i) = rest.iter().position(|&b| b >= 0x80) {
        let index = i + 1;
        let byte = rest[i];
        let sysex_end = status == 0xF0 && byte == 0xF7 && index == bytes.len() - 1;
        if !sysex_end {
            return Err(ParseError::UnexpectedStatus { index, byte });
        }
    }
    if status == 0xF0 {
        return if bytes.len() >= 2 && bytes[bytes.len() - 1] == 0xF7 {
            Ok(MidiMessage::SysEx {
                len: bytes.len() - 2,
                truncated: false,
            })
        } else {
            Err(ParseError::UnterminatedSysEx)
        };
    }
    let n = data_len(status).ok_or(ParseError::UndefinedStatus(status))?;
    let expected = usize::from(n) + 1;
    let got = bytes.len();
    if got < expected {
        return Err(ParseError::Incomplete { expected, got });
    }
    if got > expected {
        return Err(ParseError::TrailingBytes { expected, got });
    }
    let d = |i: usize| bytes.get(i).copied().unwrap_or(0);
    Ok(from_parts(status, d(1), d(2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every kind, with distinct field values.
    pub(crate) fn samples() -> [MidiMessage; 17] {
        [
            MidiMessage::NoteOff {
                channel: 0,
                note: 60,
                velocity: 64,
            },
            MidiMessage::NoteOn {
                channel: 15,
                note: 127,
                velocity: 1,
            },
            MidiMessage::PolyPressure {
                channel: 3,
                note: 40,
                pressure: 90,
            },
            MidiMessage::ControlChange {
                channel: 9,
                controller: 64,
                value: 127,
            },
            MidiMessage::ProgramChange {
                channel: 2,
                program: 17,
            },
            MidiMessage::ChannelPressure {
                channel: 4,
                pressure: 33,
            },
            MidiMessage::PitchBend {
                channel: 5,
                value: 16383,
            },
            MidiMessage::MtcQuarterFrame(0x35),
            MidiMessage::SongPosition(0x1234),
            MidiMessage::SongSelect(7),
            MidiMessage::TuneRequest,
            MidiMessage::Clock,
            MidiMessage::Start,
            MidiMessage::Continue,
            MidiMessage::Stop,
            MidiMessage::ActiveSensing,
            MidiMessage::Reset,
        ]
    }

    #[test]
    fn encode_gives_the_wire_bytes() {
        let cases: [(MidiMessage, &[u8]); 17] = [
            (samples()[0], &[0x80, 60, 64]),
            (samples()[1], &[0x9F, 127, 1]),
            (samples()[2], &[0xA3, 40, 90]),
            (samples()[3], &[0xB9, 64, 127]),
            (samples()[4], &[0xC2, 17]),
            (samples()[5], &[0xD4, 33]),
            (samples()[6], &[0xE5, 0x7F, 0x7F]),
            (samples()[7], &[0xF1, 0x35]),
            (samples()[8], &[0xF2, 0x34, 0x24]),
            (samples()[9], &[0xF3, 7]),
            (samples()[10], &[0xF6]),
            (samples()[11], &[0xF8]),
            (samples()[12], &[0xFA]),
            (samples()[13], &[0xFB]),
            (samples()[14], &[0xFC]),
            (samples()[15], &[0xFE]),
            (samples()[16], &[0xFF]),
        ];
        for (msg, want) in cases {
            let mut out = [0; 3];
            let n = msg.encode(&mut out);
            assert_eq!(&out[..n], want, "{msg:?}");
            assert_eq!(parse_message(want), Ok(msg));
        }
    }

    #[test]
    fn pitch_bend_centre_is_0x00_0x40() {
        let mut out = [0; 3];
        let msg = MidiMessage::PitchBend {
            channel: 0,
            value: 8192,
        };
        assert_eq!(msg.encode(&mut out), 3);
        assert_eq!(out, [0xE0, 0x00, 0x40]);
    }

    #[test]
    fn encode_masks_out_of_range_fields() {
        let mut out = [0; 3];
        let msg = MidiMessage::NoteOn {
            channel: 17,
            note: 200,
            velocity: 255,
        };
        assert_eq!(msg.encode(&mut out), 3);
        assert_eq!(out, [0x91, 200 & 0x7F, 0x7F]);
    }

    #[test]
    fn sysex_encodes_to_nothing() {
        let mut out = [0xAA; 3];
        let msg = MidiMessage::SysEx {
            len: 4,
            truncated: false,
        };
        assert_eq!(msg.encode(&mut out), 0);
        assert_eq!(out, [0xAA; 3]);
    }

    #[test]
    fn note_on_velocity_zero_is_note_off_like_but_stays_note_on() {
        let msg = parse_message(&[0x90, 60, 0]).unwrap();
        assert!(matches!(msg, MidiMessage::NoteOn { velocity: 0, .. }));
        assert!(msg.is_note_off_like());
        assert!(!samples()[1].is_note_off_like());
        assert!(samples()[0].is_note_off_like());
    }

    #[test]
    fn accessors() {
        let s = samples();
        assert_eq!(s[1].channel(), Some(15));
        assert_eq!(s[7].channel(), None);
        assert_eq!(s.iter().filter(|m| m.is_realtime()).count(), 6);
        assert!(!s[10].is_realtime());
    }

    #[test]
    fn parse_message_sysex_and_errors() {
        assert_eq!(
            parse_message(&[0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7]),
            Ok(MidiMessage::SysEx {
                len: 4,
                truncated: false
            })
        );
        assert_eq!(
            parse_message(&[0xF0, 0xF7]),
            Ok(MidiMessage::SysEx {
                len: 0,
                truncated: false
            })
        );
        assert_eq!(parse_message(&[]), Err(ParseError::Empty));
        assert_eq!(parse_message(&[0x3C]), Err(ParseError::MissingStatus(0x3C)));
        for b in [0xF4, 0xF5, 0xF7, 0xF9, 0xFD] {
            assert_eq!(parse_message(&[b]), Err(ParseError::UndefinedStatus(b)));
        }
        assert_eq!(
            parse_message(&[0x90, 60]),
            Err(ParseError::Incomplete {
                expected: 3,
                got: 2
            })
        );
        assert_eq!(
            parse_message(&[0xC0, 1, 2]),
            Err(ParseError::TrailingBytes {
                expected: 2,
                got: 3
            })
        );
        assert_eq!(
            parse_message(&[0x90, 0xF8, 60, 100]),
            Err(ParseError::UnexpectedStatus {
                index: 1,
                byte: 0xF8
            })
        );
        assert_eq!(
            parse_message(&[0xF0, 1, 2]),
            Err(ParseError::UnterminatedSysEx)
        );
        assert_eq!(parse_message(&[0xF0]), Err(ParseError::UnterminatedSysEx));
        assert_eq!(
            parse_message(&[0xF0, 1, 0xF7, 0xF7]),
            Err(ParseError::UnexpectedStatus {
                index: 2,
                byte: 0xF7
            })
        );
    }

    #[test]
    fn parse_error_messages_say_what_is_wrong() {
        let e = ParseError::Incomplete {
            expected: 3,
            got: 2,
        };
        assert_eq!(
            e.to_string(),
            "incomplete MIDI message: 2 byte(s), its status byte needs 3"
        );
        assert!(ParseError::MissingStatus(0x3C)
            .to_string()
            .contains("must start with a status byte"));
    }
}
