//! Fuzzes the MIDI byte-stream parser and `parse_message`.
//!
//! Run from crates/midi: `cargo +nightly fuzz run parse`. The first input byte
//! picks the SysEx capacity; the rest is the stream. Checked for every input:
//! no panic, at most two events per byte, counters agree with what came out,
//! SysEx lengths within the buffer, every non-SysEx message re-encodes to bytes
//! `parse_message` reads back, and a status byte after the garbage resynchronizes.

#![no_main]

use firmtime_midi::{parse_message, MidiMessage, Parser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cap, stream)) = data.split_first() else {
        return;
    };
    let cap = usize::from(cap % 64);
    let mut parser = Parser::new(cap);
    let mut count = 0u64;
    for (i, &b) in stream.iter().enumerate() {
        let events = parser.push(b, i as u64);
        assert!(events.len() <= 2);
        for ev in events {
            count += 1;
            assert!(ev.t_ns <= i as u64);
            match ev.msg {
                MidiMessage::SysEx { len, .. } => {
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
    assert_eq!(stats.messages, count);
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
        Some(MidiMessage::NoteOn { channel: 0, note: 0x3C, velocity: 0x64 })
    );

    // The whole input as one JACK event: any answer, never a panic.
    if let Ok(msg) = parse_message(stream) {
        if !matches!(msg, MidiMessage::SysEx { .. }) {
            let mut out = [0; 3];
            let n = msg.encode(&mut out);
            assert_eq!(&out[..n], stream);
        }
    }
});
