//! Encoding for output streams: running status and SysEx.
//!
//! **RT-safe** throughout: nothing here allocates, locks or blocks. On a
//! 31.25 kbaud wire a byte takes 320 µs, so running status (omitting a
//! repeated channel status byte) takes a third off a run of Note On/Off.

use std::fmt;

use crate::message::MidiMessage;

/// Encodes messages for one output stream, optionally with running status.
///
/// With running status on, a channel voice message whose status byte equals
/// the previous one's is sent without it. System common messages and SysEx
/// cancel running status (as MIDI 1.0 requires of receivers); real-time
/// messages do not affect it.
///
/// ```
/// use firmtime_midi::{Encoder, MidiMessage};
///
/// let mut enc = Encoder::new(true);
/// let mut out = [0; 3];
/// let on = |note| MidiMessage::NoteOn { channel: 0, note, velocity: 100 };
/// let n = enc.encode_running(&on(60), &mut out);
/// assert_eq!(&out[..n], &[0x90, 60, 100]);
/// let n = enc.encode_running(&on(64), &mut out);
/// assert_eq!(&out[..n], &[64, 100]); // running status: no second 0x90
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoder {
    running_status: bool,
    last_status: Option<u8>,
}

impl Encoder {
    /// A new encoder; `running_status` chooses whether to omit repeated
    /// channel status bytes.
    pub fn new(running_status: bool) -> Self {
        Self {
            running_status,
            last_status: None,
        }
    }

    /// Whether this encoder uses running status.
    pub fn uses_running_status(&self) -> bool {
        self.running_status
    }

    /// Forgets the running status, so the next channel message is sent with
    /// its status byte. Call it after a gap in output or when the receiver may
    /// have missed a status byte (e.g. it was connected mid-stream).
    ///
    /// **RT-safe.**
    pub fn reset(&mut self) {
        self.last_status = None;
    }

    /// Writes `msg` into `out` and returns the number of bytes written (0..=3),
    /// omitting the status byte when running status allows it.
    ///
    /// A [`SysEx`](MidiMessage::SysEx) writes nothing and returns 0 (its
    /// payload is not in the message): use [`Encoder::encode_sysex`].
    ///
    /// **RT-safe.**
    pub fn encode_running(&mut self, msg: &MidiMessage, out: &mut [u8; 3]) -> usize {
        let n = msg.encode(out);
        if n == 0 || msg.is_realtime() {
            return n;
        }
        let status = out[0];
        if status >= 0xF0 {
            self.last_status = None;
            return n;
        }
        if self.running_status && self.last_status == Some(status) {
            out.copy_within(1..n, 0);
            return n - 1;
        }
        self.last_status = Some(status);
        n
    }

    /// Writes a SysEx message (0xF0, `payload`, 0xF7) into `out`, returns the
    /// number of bytes written (`payload.len() + 2`), and cancels running status.
    ///
    /// **RT-safe.**
    ///
    /// # Errors
    ///
    /// As [`encode_sysex`]; on error nothing is written and running status is kept.
    pub fn encode_sysex(&mut self, payload: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
        let n = encode_sysex(payload, out)?;
        self.last_status = None;
        Ok(n)
    }
}

/// Writes a SysEx message (0xF0, `payload`, 0xF7) into `out` and returns the
/// number of bytes written (`payload.len() + 2`).
///
/// **RT-safe.**
///
/// # Errors
///
/// [`EncodeError::BufferTooSmall`] if `out` is shorter than
/// `payload.len() + 2`; [`EncodeError::StatusInPayload`] if a payload byte
/// is 0x80 or above (a SysEx carries 7-bit data only). Nothing is written then.
///
/// ```
/// let mut out = [0; 8];
/// let n = firmtime_midi::encode_sysex(&[0x7E, 0x7F, 0x06, 0x01], &mut out).unwrap();
/// assert_eq!(&out[..n], &[0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7]);
/// ```
pub fn encode_sysex(payload: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    let needed = payload.len() + 2;
    if out.len() < needed {
        return Err(EncodeError::BufferTooSmall {
            needed,
            available: out.len(),
        });
    }
    if let Some(index) = payload.iter().position(|&b| b >= 0x80) {
        return Err(EncodeError::StatusInPayload {
            index,
            byte: payload[index],
        });
    }
    out[0] = 0xF0;
    out[1..needed - 1].copy_from_slice(payload);
    out[needed - 1] = 0xF7;
    Ok(needed)
}

/// Why a SysEx could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too short.
    BufferTooSmall {
        /// Bytes the encoded message needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A payload byte has its top bit set; SysEx data are 7-bit.
    StatusInPayload {
        /// Position of the byte in the payload.
        index: usize,
        /// The byte.
        byte: u8,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BufferTooSmall { needed, available } => write!(
                f,
                "SysEx needs {needed} bytes but the output buffer has {available}: give a larger buffer"
            ),
            Self::StatusInPayload { index, byte } => write!(
                f,
                "SysEx payload byte {index} is {byte:#04x}: payload bytes must be below 0x80 (7-bit data)"
            ),
        }
    }
}

impl std::error::Error for EncodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(enc: &mut Encoder, msgs: &[MidiMessage]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for m in msgs {
            let mut out = [0; 3];
            let n = enc.encode_running(m, &mut out);
            bytes.extend_from_slice(&out[..n]);
        }
        bytes
    }

    const ON: MidiMessage = MidiMessage::NoteOn {
        channel: 0,
        note: 60,
        velocity: 100,
    };
    const OFF: MidiMessage = MidiMessage::NoteOn {
        channel: 0,
        note: 60,
        velocity: 0,
    };

    #[test]
    fn running_status_omits_repeated_status() {
        let mut enc = Encoder::new(true);
        let pc = MidiMessage::ProgramChange {
            channel: 0,
            program: 5,
        };
        assert_eq!(
            run(&mut enc, &[ON, OFF, pc, pc, ON]),
            [0x90, 60, 100, 60, 0, 0xC0, 5, 5, 0x90, 60, 100]
        );
    }

    #[test]
    fn realtime_keeps_running_status_and_system_common_cancels_it() {
        let mut enc = Encoder::new(true);
        assert_eq!(
            run(
                &mut enc,
                &[ON, MidiMessage::Clock, OFF, MidiMessage::TuneRequest, ON]
            ),
            [0x90, 60, 100, 0xF8, 60, 0, 0xF6, 0x90, 60, 100]
        );
    }

    #[test]
    fn sysex_and_reset_cancel_running_status() {
        let mut enc = Encoder::new(true);
        let mut bytes = run(&mut enc, &[ON]);
        let mut buf = [0; 4];
        let n = enc.encode_sysex(&[1, 2], &mut buf).unwrap();
        bytes.extend_from_slice(&buf[..n]);
        bytes.extend(run(&mut enc, &[ON, OFF]));
        enc.reset();
        bytes.extend(run(&mut enc, &[OFF]));
        assert_eq!(
            bytes,
            [0x90, 60, 100, 0xF0, 1, 2, 0xF7, 0x90, 60, 100, 60, 0, 0x90, 60, 0]
        );
    }

    #[test]
    fn without_running_status_every_status_is_sent() {
        let mut enc = Encoder::new(false);
        assert!(!enc.uses_running_status());
        assert_eq!(run(&mut enc, &[ON, OFF]), [0x90, 60, 100, 0x90, 60, 0]);
    }

    #[test]
    fn encode_sysex_errors_write_nothing() {
        let mut out = [0xAA; 3];
        assert_eq!(
            encode_sysex(&[1, 2], &mut out),
            Err(EncodeError::BufferTooSmall {
                needed: 4,
                available: 3
            })
        );
        assert_eq!(
            encode_sysex(&[0x90], &mut out),
            Err(EncodeError::StatusInPayload {
                index: 0,
                byte: 0x90
            })
        );
        assert_eq!(out, [0xAA; 3]);
        assert!(EncodeError::StatusInPayload {
            index: 0,
            byte: 0x90
        }
        .to_string()
        .contains("below 0x80"));
    }
}
