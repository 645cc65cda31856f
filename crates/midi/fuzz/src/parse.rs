//! The body of the `parse` fuzz target (fuzz_targets/parse.rs), kept in a
//! file of its own so that the stable corpus replay
//! (crates/midi/tests/midi/fuzz_corpus.rs, part of `./test.sh`) compiles and
//! runs exactly the code the fuzzer runs: both include it by `#[path]`.
//!
//! The first input byte picks the SysEx capacity; the rest is the stream.
//! Checked for every input: no panic, at most two events per byte, counters
//! agree with what came out, SysEx lengths within the buffer, every non-SysEx
//! message re-encodes to bytes `parse_message` reads back, and a status byte
//! after the garbage resynchronizes.

use firmtime_midi::{parse_message, MidiMessage, Parser};

/// What one input exercised (the replay asserts that its corpus reaches
/// each path; the fuzzer ignores it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Events out of the byte parser, SysEx included.
    pub events: u64,
    /// SysEx events among them.
    pub sysex: u64,
    /// Whether the whole stream parsed as one message (`parse_message`).
    pub whole_message: bool,
}

/// Runs one fuzz input through the checks above; panics when one fails.
pub fn check(data: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let Some((&cap, stream)) = data.split_first() else {
        return seen;
    };
    let cap = usize::from(cap % 64);
    let mut parser = Parser::new(cap);
    for (i, &b) in stream.iter().enumerate() {
        let events = parser.push(b, i as u64);
        assert!(events.len() <= 2);
        for ev in events {
            seen.events += 1;
            assert!(ev.t_ns <= i as u64);
            match ev.msg {
                MidiMessage::SysEx { len, .. } => {
                    seen.sysex += 1;
                    assert!(len <= cap);
                    assert_eq!(parser.sysex_data().len(), len);
                }
                msg => {
                    let mut out = [0; 3];
                    let n = msg.encode(&mut out);
                    assert_eq!(parse_message(&out[..n]), Ok(msg));
                }
            }
        }
    }
    let stats = parser.stats();
    assert_eq!(stats.messages, seen.events);
    assert_eq!(stats.bytes, stream.len() as u64);

    // A status byte always starts afresh, whatever the garbage left behind.
    let t = stream.len() as u64;
    let mut last = None;
    for b in [0x90, 0x3C, 0x64] {
        for ev in parser.push(b, t) {
            last = Some(ev.msg);
        }
    }
    assert_eq!(
        last,
        Some(MidiMessage::NoteOn {
            channel: 0,
            note: 0x3C,
            velocity: 0x64
        })
    );

    // The whole input as one JACK event: any answer, never a panic.
    if let Ok(msg) = parse_message(stream) {
        seen.whole_message = true;
        if !matches!(msg, MidiMessage::SysEx { .. }) {
            let mut out = [0; 3];
            let n = msg.encode(&mut out);
            assert_eq!(&out[..n], stream);
        }
    }
    seen
}
