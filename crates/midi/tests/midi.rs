//! Integration tests for firmtime-midi: fixture streams from `tests/data/`
//! and seeded property tests (round trips with and without running status,
//! real-time bytes anywhere, garbage never panics and always resynchronizes).
//!
//! The property tests use a small seeded generator instead of proptest: no
//! extra dependencies to build on shared cores, and a failure names its seed,
//! which reproduces it exactly.

use std::path::PathBuf;

use firmtime_midi::{
    encode_sysex, parse_message, Encoder, Event, MidiMessage, ParseError, Parser, ParserStats,
};

#[cfg(debug_assertions)]
#[global_allocator]
static A: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

#[path = "midi/fuzz_corpus.rs"]
mod fuzz_corpus;

/// One byte time at 31.25 kbaud.
const BYTE_NS: u64 = 320_000;

// ---------------------------------------------------------------- fixtures

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Messages by kind, counted without allocating.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    note_off: u64,
    note_on: u64,
    note_on_zero: u64,
    poly_pressure: u64,
    control_change: u64,
    program_change: u64,
    channel_pressure: u64,
    pitch_bend: u64,
    mtc: u64,
    song_position: u64,
    song_select: u64,
    tune_request: u64,
    clock: u64,
    start: u64,
    continue_: u64,
    stop: u64,
    active_sensing: u64,
    reset: u64,
    sysex: u64,
    sysex_truncated: u64,
}

impl Tally {
    fn add(&mut self, msg: &MidiMessage) {
        use MidiMessage as M;
        let slot = match *msg {
            M::NoteOff { .. } => &mut self.note_off,
            M::NoteOn { velocity: 0, .. } => &mut self.note_on_zero,
            M::NoteOn { .. } => &mut self.note_on,
            M::PolyPressure { .. } => &mut self.poly_pressure,
            M::ControlChange { .. } => &mut self.control_change,
            M::ProgramChange { .. } => &mut self.program_change,
            M::ChannelPressure { .. } => &mut self.channel_pressure,
            M::PitchBend { .. } => &mut self.pitch_bend,
            M::MtcQuarterFrame(_) => &mut self.mtc,
            M::SongPosition(_) => &mut self.song_position,
            M::SongSelect(_) => &mut self.song_select,
            M::TuneRequest => &mut self.tune_request,
            M::Clock => &mut self.clock,
            M::Start => &mut self.start,
            M::Continue => &mut self.continue_,
            M::Stop => &mut self.stop,
            M::ActiveSensing => &mut self.active_sensing,
            M::Reset => &mut self.reset,
            M::SysEx { truncated, .. } => {
                if truncated {
                    self.sysex_truncated += 1;
                }
                &mut self.sysex
            }
        };
        *slot += 1;
    }
}

/// Parses a fixture under `assert_no_alloc`, returning the tally, the stats,
/// the first few events and the SysEx lengths seen (fixed-size storage).
fn parse_fixture(name: &str, sysex_capacity: usize) -> (Tally, ParserStats, [Option<Event>; 8]) {
    let bytes = fixture(name);
    let mut parser = Parser::new(sysex_capacity);
    let mut tally = Tally::default();
    let mut first = [None; 8];
    let mut n = 0;
    assert_no_alloc::assert_no_alloc(|| {
        for (i, &b) in bytes.iter().enumerate() {
            for ev in parser.push(b, i as u64 * BYTE_NS) {
                tally.add(&ev.msg);
                if let MidiMessage::SysEx { len, .. } = ev.msg {
                    assert_eq!(parser.sysex_data().len(), len);
                    assert!(len <= sysex_capacity);
                }
                if n < first.len() {
                    first[n] = Some(ev);
                }
                n += 1;
            }
        }
    });
    let stats = parser.stats();
    assert_eq!(stats.messages, n as u64, "{name}: messages counted");
    assert_eq!(stats.bytes, bytes.len() as u64, "{name}: bytes counted");
    (tally, stats, first)
}

fn note_on(channel: u8, note: u8, velocity: u8) -> MidiMessage {
    MidiMessage::NoteOn {
        channel,
        note,
        velocity,
    }
}

#[test]
fn fixture_running_status() {
    let (tally, stats, first) = parse_fixture("running_status.bin", 0);
    assert_eq!(
        tally,
        Tally {
            note_on: 3,
            note_on_zero: 3,
            ..Tally::default()
        }
    );
    assert_eq!(
        stats,
        ParserStats {
            bytes: 13,
            messages: 6,
            ..ParserStats::default()
        }
    );
    // First message at its status byte, the next at its first data byte (index 3).
    assert_eq!(
        first[0],
        Some(Event {
            t_ns: 0,
            msg: note_on(0, 0x3C, 0x64)
        })
    );
    assert_eq!(
        first[1],
        Some(Event {
            t_ns: 3 * BYTE_NS,
            msg: note_on(0, 0x3C, 0)
        })
    );
}

#[test]
fn fixture_realtime_interleaved() {
    let (tally, stats, first) = parse_fixture("realtime_interleaved.bin", 16);
    assert_eq!(
        tally,
        Tally {
            note_on: 1,
            note_on_zero: 1,
            clock: 6,
            active_sensing: 1,
            sysex: 1,
            start: 1,
            stop: 1,
            continue_: 1,
            reset: 1,
            ..Tally::default()
        }
    );
    assert_eq!(stats.messages, 14);
    assert_eq!(
        ParserStats {
            bytes: 0,
            messages: 0,
            ..stats
        },
        ParserStats::default()
    );
    let order: Vec<_> = first.iter().map(|e| e.unwrap()).collect();
    let t = |i: u64| i * BYTE_NS;
    assert_eq!(
        order,
        [
            Event {
                t_ns: t(0),
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: t(2),
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: t(4),
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: t(1),
                msg: note_on(0, 0x3C, 0x64)
            },
            Event {
                t_ns: t(6),
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: t(8),
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: t(7),
                msg: note_on(0, 0x3C, 0)
            },
            Event {
                t_ns: t(10),
                msg: MidiMessage::ActiveSensing
            },
        ]
    );
}

#[test]
fn fixture_sysex() {
    let (tally, stats, _) = parse_fixture("sysex.bin", 32);
    assert_eq!(
        tally,
        Tally {
            sysex: 5,
            sysex_truncated: 3,
            note_on: 1,
            tune_request: 1,
            clock: 1,
            ..Tally::default()
        }
    );
    assert_eq!(stats.messages, 8);
    assert_eq!(stats.sysex_overflows, 1);
    assert_eq!(stats.truncated_messages, 2);
    assert_eq!(stats.stray_data_bytes, 0);

    // The payloads themselves.
    let bytes = fixture("sysex.bin");
    let mut parser = Parser::new(32);
    let mut payloads = Vec::new();
    for &b in &bytes {
        for ev in parser.push(b, 0) {
            if let MidiMessage::SysEx { truncated, .. } = ev.msg {
                payloads.push((parser.sysex_data().to_vec(), truncated));
            }
        }
    }
    let overflowed: Vec<u8> = (0..32).collect();
    assert_eq!(
        payloads,
        [
            (vec![0x7E, 0x7F, 0x06, 0x01], false),
            (overflowed, true),
            (vec![0x43, 0x10, 0x4C, 0x00, 0x00, 0x7E, 0x00], true),
            (vec![0x01, 0x02], true),
            (vec![], false),
        ]
    );
}

#[test]
fn fixture_garbage() {
    let (tally, stats, _) = parse_fixture("garbage.bin", 8);
    assert_eq!(
        tally,
        Tally {
            note_off: 1,
            mtc: 1,
            clock: 1,
            program_change: 2,
            pitch_bend: 1,
            note_on: 1,
            ..Tally::default()
        }
    );
    assert_eq!(
        stats,
        ParserStats {
            bytes: 33,
            messages: 7,
            stray_data_bytes: 7,
            truncated_messages: 3,
            sysex_overflows: 0,
            undefined_status_bytes: 4,
            stray_eox: 1,
        }
    );
}

#[test]
fn fixture_tapping_session() {
    let (tally, stats, first) = parse_fixture("tapping_session.bin", 0);
    assert_eq!(
        tally,
        Tally {
            note_on: 64,
            note_on_zero: 64,
            active_sensing: 8,
            clock: 32,
            ..Tally::default()
        }
    );
    assert_eq!(stats.messages, 168);
    assert_eq!(stats.stray_data_bytes + stats.truncated_messages, 0);
    // 99 FE 24 40 F8 24 00: Active Sensing, press at the status byte, clock, release.
    let msgs: Vec<_> = first[..4].iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        msgs,
        [
            Event {
                t_ns: BYTE_NS,
                msg: MidiMessage::ActiveSensing
            },
            Event {
                t_ns: 0,
                msg: note_on(9, 0x24, 0x40)
            },
            Event {
                t_ns: 4 * BYTE_NS,
                msg: MidiMessage::Clock
            },
            Event {
                t_ns: 5 * BYTE_NS,
                msg: note_on(9, 0x24, 0)
            },
        ]
    );
}

// ---------------------------------------------------------------- generators

/// Spreads test cases: firmtime-rt's seeded RNG (SplitMix64), drawn with `%`.
struct Rng(firmtime_rt::rng::Rng);

impl Rng {
    fn seeded(seed: u64) -> Self {
        Rng(firmtime_rt::rng::Rng::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn data(&mut self) -> u8 {
        self.below(128) as u8
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const REALTIME: [MidiMessage; 6] = [
    MidiMessage::Clock,
    MidiMessage::Start,
    MidiMessage::Continue,
    MidiMessage::Stop,
    MidiMessage::ActiveSensing,
    MidiMessage::Reset,
];

/// A random message with its SysEx payload (empty for other kinds). Channels
/// are drawn from a few so running status gets used often.
fn random_message(rng: &mut Rng, max_sysex: usize) -> (MidiMessage, Vec<u8>) {
    use MidiMessage as M;
    let channel = rng.below(3) as u8 * 7; // 0, 7 or 14
    let msg = match rng.below(100) {
        0..=24 => note_on(channel, rng.data(), rng.data()),
        25..=39 => M::NoteOff {
            channel,
            note: rng.data(),
            velocity: rng.data(),
        },
        40..=44 => M::PolyPressure {
            channel,
            note: rng.data(),
            pressure: rng.data(),
        },
        45..=54 => M::ControlChange {
            channel,
            controller: rng.data(),
            value: rng.data(),
        },
        55..=62 => M::ProgramChange {
            channel,
            program: rng.data(),
        },
        63..=67 => M::ChannelPressure {
            channel,
            pressure: rng.data(),
        },
        68..=74 => M::PitchBend {
            channel,
            value: rng.below(16384) as u16,
        },
        75..=77 => M::MtcQuarterFrame(rng.data()),
        78..=79 => M::SongPosition(rng.below(16384) as u16),
        80..=81 => M::SongSelect(rng.data()),
        82..=83 => M::TuneRequest,
        84..=89 => REALTIME[rng.below(6) as usize],
        _ => {
            let len = rng.below(max_sysex as u64 + 1) as usize;
            let payload: Vec<u8> = (0..len).map(|_| rng.data()).collect();
            return (
                M::SysEx {
                    len,
                    truncated: false,
                },
                payload,
            );
        }
    };
    (msg, Vec::new())
}

/// One byte of a generated stream and the message it starts or ends.
#[derive(Clone, Copy)]
struct Item {
    byte: u8,
    /// Index (into the message list) of the message this byte starts.
    starts: Option<usize>,
    /// Index of the message this byte completes.
    ends: Option<usize>,
}

/// Encodes `msgs` with `enc` into items, then inserts real-time bytes at
/// random positions (inside messages and SysEx too) with `rt_percent` chance
/// before each byte. Returns the items and the full message list (inserted
/// real-time messages appended to `msgs`).
fn build_stream(
    rng: &mut Rng,
    enc: &mut Encoder,
    msgs: &mut Vec<(MidiMessage, Vec<u8>)>,
    rt_percent: u64,
) -> Vec<Item> {
    let mut items = Vec::new();
    for (i, (msg, payload)) in msgs.iter().enumerate() {
        let mut bytes = vec![0; payload.len() + 3];
        let n = if let MidiMessage::SysEx { .. } = msg {
            enc.encode_sysex(payload, &mut bytes).unwrap()
        } else {
            let mut out = [0; 3];
            let n = enc.encode_running(msg, &mut out);
            bytes[..n].copy_from_slice(&out[..n]);
            n
        };
        assert!(n >= 1, "every message encodes to at least one byte");
        for (k, &byte) in bytes[..n].iter().enumerate() {
            items.push(Item {
                byte,
                starts: (k == 0).then_some(i),
                ends: (k == n - 1).then_some(i),
            });
        }
    }
    let mut out = Vec::with_capacity(items.len() * 2);
    for item in items {
        while rng.chance(rt_percent) {
            let rt = REALTIME[rng.below(6) as usize];
            msgs.push((rt, Vec::new()));
            let j = msgs.len() - 1;
            let mut b = [0; 3];
            rt.encode(&mut b);
            out.push(Item {
                byte: b[0],
                starts: Some(j),
                ends: Some(j),
            });
        }
        out.push(item);
    }
    out
}

/// What the parser must return for `items`, byte `i` stamped `t(i)`.
fn expected_events(items: &[Item], msgs: &[(MidiMessage, Vec<u8>)]) -> Vec<(Event, Vec<u8>)> {
    let mut start_t = vec![0; msgs.len()];
    let mut want = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(m) = item.starts {
            start_t[m] = t(i);
        }
        if let Some(m) = item.ends {
            want.push((
                Event {
                    t_ns: start_t[m],
                    msg: msgs[m].0,
                },
                msgs[m].1.clone(),
            ));
        }
    }
    want
}

fn t(i: usize) -> u64 {
    1_000_000 + i as u64 * BYTE_NS
}

fn parse_items(parser: &mut Parser, items: &[Item]) -> Vec<(Event, Vec<u8>)> {
    let mut got = Vec::new();
    for (i, item) in items.iter().enumerate() {
        for ev in parser.push(item.byte, t(i)) {
            let payload = match ev.msg {
                MidiMessage::SysEx { .. } => parser.sysex_data().to_vec(),
                _ => Vec::new(),
            };
            got.push((ev, payload));
        }
    }
    got
}

// ---------------------------------------------------------------- properties

const CASES: u64 = 400;
const SYSEX_CAPACITY: usize = 48;

fn round_trip(running_status: bool, rt_percent: u64) {
    for seed in 0..CASES {
        let mut rng = Rng::seeded(seed ^ (u64::from(running_status) << 32) ^ (rt_percent << 40));
        let n = 1 + rng.below(80) as usize;
        let mut msgs: Vec<_> = (0..n)
            .map(|_| random_message(&mut rng, SYSEX_CAPACITY))
            .collect();
        let mut enc = Encoder::new(running_status);
        let items = build_stream(&mut rng, &mut enc, &mut msgs, rt_percent);
        let want = expected_events(&items, &msgs);
        let mut parser = Parser::new(SYSEX_CAPACITY);
        let got = parse_items(&mut parser, &items);
        assert_eq!(
            got,
            want,
            "seed {seed}, running status {running_status}, stream {:02X?}",
            items.iter().map(|i| i.byte).collect::<Vec<_>>()
        );
        let stats = parser.stats();
        assert_eq!(
            stats,
            ParserStats {
                bytes: items.len() as u64,
                messages: want.len() as u64,
                ..ParserStats::default()
            },
            "seed {seed}: clean streams count nothing bad"
        );
        if running_status {
            let plain: usize = msgs
                .iter()
                .map(|(m, p)| {
                    if p.is_empty() && !matches!(m, MidiMessage::SysEx { .. }) {
                        m.encode(&mut [0; 3])
                    } else {
                        p.len() + 2
                    }
                })
                .sum();
            assert!(
                items.len() <= plain,
                "seed {seed}: running status never adds bytes"
            );
        }
    }
}

#[test]
fn round_trip_without_running_status() {
    round_trip(false, 0);
}

#[test]
fn round_trip_with_running_status() {
    round_trip(true, 0);
}

#[test]
fn round_trip_with_realtime_bytes_anywhere() {
    round_trip(false, 15);
    round_trip(true, 15);
}

#[test]
fn sysex_overflow_keeps_the_first_bytes_and_recovers() {
    for seed in 0..CASES {
        let mut rng = Rng::seeded(seed);
        let cap = rng.below(20) as usize;
        let len = cap + 1 + rng.below(100) as usize;
        let payload: Vec<u8> = (0..len).map(|_| rng.data()).collect();
        let mut bytes = vec![0; len + 2];
        encode_sysex(&payload, &mut bytes).unwrap();
        bytes.extend([0xC1, 0x05]);
        let mut parser = Parser::new(cap);
        let mut got = Vec::new();
        for (i, &b) in bytes.iter().enumerate() {
            for ev in parser.push(b, i as u64) {
                got.push((ev.msg, parser.sysex_data().to_vec()));
            }
        }
        assert_eq!(
            got,
            [
                (
                    MidiMessage::SysEx {
                        len: cap,
                        truncated: true
                    },
                    payload[..cap].to_vec()
                ),
                (
                    MidiMessage::ProgramChange {
                        channel: 1,
                        program: 5
                    },
                    payload[..cap].to_vec()
                ),
            ],
            "seed {seed}"
        );
        assert_eq!(parser.stats().sysex_overflows, 1, "seed {seed}");
    }
}

/// Random bytes biased towards the interesting ones.
fn garbage(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| match rng.below(10) {
            0..=4 => rng.data(),
            5 => 0xF0,
            6 => 0xF7,
            7 => 0xF0 | rng.below(16) as u8,
            _ => 0x80 | rng.below(128) as u8,
        })
        .collect()
}

#[test]
fn garbage_never_panics_and_resynchronizes_on_the_next_status_byte() {
    for seed in 0..CASES {
        let mut rng = Rng::seeded(seed.wrapping_mul(31));
        let cap = rng.below(16) as usize;
        let len = rng.below(600) as usize;
        let bytes = garbage(&mut rng, len);
        let mut parser = Parser::new(cap);
        let mut count = 0u64;
        for (i, &b) in bytes.iter().enumerate() {
            let evs = parser.push(b, i as u64);
            assert!(evs.len() <= 2, "seed {seed}");
            for ev in evs {
                count += 1;
                assert!(ev.t_ns <= i as u64, "seed {seed}: no time from the future");
                match ev.msg {
                    MidiMessage::SysEx { len, .. } => {
                        assert!(len <= cap, "seed {seed}");
                        assert_eq!(parser.sysex_data().len(), len, "seed {seed}");
                        assert!(parser.sysex_data().iter().all(|&d| d < 0x80));
                    }
                    msg => {
                        // Every field is in range: it survives encode + parse_message.
                        let mut out = [0; 3];
                        let n = msg.encode(&mut out);
                        assert_eq!(parse_message(&out[..n]), Ok(msg), "seed {seed}");
                    }
                }
            }
        }
        let stats = parser.stats();
        assert_eq!(stats.messages, count, "seed {seed}");
        assert_eq!(stats.bytes, bytes.len() as u64, "seed {seed}");

        // Whatever state the garbage left, a status byte starts afresh.
        let base = bytes.len() as u64;
        let mut tail = Vec::new();
        for (k, b) in [0x95u8, 0x3C, 0x64].into_iter().enumerate() {
            tail.extend(parser.push(b, base + k as u64));
        }
        let (last, before) = tail.split_last().expect("the Note On must come out");
        assert_eq!(
            *last,
            Event {
                t_ns: base,
                msg: note_on(5, 0x3C, 0x64)
            },
            "seed {seed}"
        );
        for ev in before {
            // Only an open SysEx may be closed by the status byte.
            assert!(
                matches!(
                    ev.msg,
                    MidiMessage::SysEx {
                        truncated: true,
                        ..
                    }
                ),
                "seed {seed}: {ev:?}"
            );
        }
    }
}

#[test]
fn parse_message_round_trips_and_never_panics() {
    for seed in 0..CASES * 5 {
        let mut rng = Rng::seeded(seed + 7);
        let (msg, payload) = random_message(&mut rng, 20);
        let mut bytes = vec![0; payload.len() + 3];
        let n = if let MidiMessage::SysEx { .. } = msg {
            encode_sysex(&payload, &mut bytes).unwrap()
        } else {
            let mut out = [0; 3];
            let n = msg.encode(&mut out);
            bytes[..n].copy_from_slice(&out[..n]);
            n
        };
        assert_eq!(parse_message(&bytes[..n]), Ok(msg), "seed {seed}");

        let len = rng.below(6) as usize;
        let junk = garbage(&mut rng, len);
        match parse_message(&junk) {
            Ok(MidiMessage::SysEx { len, truncated }) => {
                assert!(!truncated);
                assert_eq!(len + 2, junk.len());
            }
            Ok(m) => {
                let mut out = [0; 3];
                let n = m.encode(&mut out);
                assert_eq!(&out[..n], &junk[..], "seed {seed}");
            }
            Err(ParseError::Empty) => assert!(junk.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

#[test]
fn long_random_stream_parses_without_allocating() {
    let mut rng = Rng::seeded(42);
    let mut msgs: Vec<_> = (0..5_000)
        .map(|_| random_message(&mut rng, SYSEX_CAPACITY))
        .collect();
    let mut stream: Vec<u8> = build_stream(&mut rng, &mut Encoder::new(true), &mut msgs, 10)
        .iter()
        .map(|i| i.byte)
        .collect();
    stream.extend(garbage(&mut rng, 20_000));
    let mut parser = Parser::new(SYSEX_CAPACITY);
    let mut count = 0u64;
    assert_no_alloc::assert_no_alloc(|| {
        for (i, &b) in stream.iter().enumerate() {
            count += parser.push(b, i as u64).len() as u64;
        }
    });
    assert!(count >= msgs.len() as u64);
    assert_eq!(parser.stats().messages, count);
}

// ------------------------------------------------- raw backend over a pty

mod raw_backend {
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use firmtime_midi::looptest::{LoopConfig, LoopTest};
    use firmtime_midi::pty::{PacedLoopback, PacedOptions, PtyPair, Tap, Tapper};
    use firmtime_midi::raw::{RawBackend, RawOptions};
    use firmtime_midi::{
        BackendError, InputEvent, MidiBackend, MidiMessage, OutputEvent, Parser, SentEvent,
    };
    use firmtime_rt::clock::monotonic_ns;

    /// Every wait in these tests ends by this long; a hang fails instead.
    const BOUND_NS: u64 = 10_000_000_000;

    fn note_on(note: u8, velocity: u8) -> MidiMessage {
        MidiMessage::NoteOn {
            channel: 0,
            note,
            velocity,
        }
    }

    /// Collects input until `n` events or a disconnect, without allocating
    /// in the engine calls (the Vec is preallocated).
    fn collect(b: &mut RawBackend, n: usize) -> (Vec<InputEvent>, bool) {
        let mut got = Vec::with_capacity(n + 16);
        let mut gone = false;
        let end = monotonic_ns() + BOUND_NS;
        assert_no_alloc::assert_no_alloc(|| {
            while got.len() < n && monotonic_ns() < end {
                match b.poll_input(&mut |ev| {
                    if got.len() < got.capacity() {
                        got.push(ev)
                    }
                }) {
                    Ok(_) => {}
                    Err(BackendError::Disconnected) => {
                        gone = true;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
                if got.len() < n {
                    let _ = b.wait(monotonic_ns() + 50_000_000);
                }
            }
        });
        (got, gone)
    }

    #[test]
    fn tapper_notes_arrive_in_order_stamped_at_or_after_their_write() {
        let pty = PtyPair::open().unwrap();
        let mut b = RawBackend::from_fd(pty.slave, RawOptions::default()).unwrap();
        assert!(b.info().is_tty);
        let taps: Vec<Tap> = (0..5)
            .map(|i| Tap {
                at_ns: 5_000_000 + i * 7_000_000,
                hold_ns: 3_000_000,
                channel: 2,
                note: 60 + i as u8,
                velocity: 100,
            })
            .collect();
        let mut tapper = Tapper::new(pty.master);
        let player = std::thread::spawn(move || {
            let w = tapper.play(&taps).unwrap();
            (w, tapper)
        });
        let (got, gone) = collect(&mut b, 10);
        let (truth, _tapper) = player.join().unwrap();
        assert!(!gone);
        assert_eq!(got.len(), truth.len());
        for (ev, w) in got.iter().zip(&truth) {
            assert_eq!(ev.msg, w.msg);
            assert!(
                ev.t_ns >= w.t_ns,
                "stamped before it was written: {ev:?} {w:?}"
            );
            assert_eq!(ev.frame, None);
        }
        assert!(got.windows(2).all(|p| p[0].t_ns <= p[1].t_ns));
        assert_eq!(b.stats().received, 10);
        assert_eq!(b.stats().malformed, 0);
    }

    #[test]
    fn running_status_realtime_inside_and_garbage_are_handled_and_counted() {
        let pty = PtyPair::open().unwrap();
        let mut b = RawBackend::from_fd(pty.slave, RawOptions::default()).unwrap();
        let mut tapper = Tapper::new(pty.master);
        // Stray data byte, Note On, running-status Note On with a clock byte
        // inside it, an undefined status byte, a truncated message, Note Off.
        let t = tapper
            .write_bytes(&[
                0x45, 0x90, 60, 100, 62, 0xF8, 90, 0xF4, 0xB0, 7, 0x80, 60, 0,
            ])
            .unwrap();
        let (got, _) = collect(&mut b, 4);
        let msgs: Vec<MidiMessage> = got.iter().map(|e| e.msg).collect();
        assert_eq!(
            msgs,
            [
                note_on(60, 100),
                MidiMessage::Clock,
                note_on(62, 90),
                MidiMessage::NoteOff {
                    channel: 0,
                    note: 60,
                    velocity: 0
                }
            ]
        );
        assert!(got.iter().all(|e| e.t_ns >= t));
        let p = b.parser_stats();
        assert_eq!(p.bytes, 13);
        assert_eq!(p.stray_data_bytes, 1);
        assert_eq!(p.undefined_status_bytes, 1);
        assert_eq!(p.truncated_messages, 1);
        assert_eq!(b.stats().malformed, 3);
    }

    #[test]
    fn scheduled_output_goes_out_in_time_order_never_early() {
        let pty = PtyPair::open().unwrap();
        let mut b = RawBackend::from_fd(pty.slave, RawOptions::default()).unwrap();
        let t0 = monotonic_ns() + 5_000_000;
        let order = [5u8, 1, 3, 2, 4];
        let mut sent: Vec<SentEvent> = Vec::with_capacity(8);
        assert_no_alloc::assert_no_alloc(|| {
            for &k in &order {
                b.send(OutputEvent {
                    at_ns: Some(t0 + u64::from(k) * 2_000_000),
                    port: 0,
                    msg: note_on(k, 100),
                    tag: u32::from(k),
                })
                .unwrap();
            }
            assert_eq!(
                b.send(OutputEvent {
                    at_ns: None,
                    port: 3,
                    msg: note_on(0, 1),
                    tag: 0
                }),
                Err(BackendError::NoSuchPort(3))
            );
            let end = monotonic_ns() + BOUND_NS;
            while sent.len() < 5 && monotonic_ns() < end {
                b.poll_sent(&mut |s| sent.push(s));
                let _ = b.wait(monotonic_ns() + 2_000_000);
            }
        });
        // The peer reads what went out on the wire.
        let mut parser = Parser::new(16);
        let mut notes = Vec::new();
        let mut buf = [0u8; 64];
        let end = monotonic_ns() + BOUND_NS;
        let master = std::fs::File::from(pty.master);
        while notes.len() < 5 && monotonic_ns() < end {
            use std::io::Read;
            match (&master).read(&mut buf) {
                Ok(n) => {
                    for &byte in &buf[..n] {
                        for ev in parser.push(byte, 0) {
                            if let MidiMessage::NoteOn { note, .. } = ev.msg {
                                notes.push(note);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(notes, [1, 2, 3, 4, 5]);
        assert_eq!(sent.len(), 5);
        let tags: Vec<u32> = sent.iter().map(|s| s.tag).collect();
        assert_eq!(tags, [1, 2, 3, 4, 5]);
        for s in &sent {
            assert!(s.actual_ns >= s.intended_ns.unwrap(), "{s:?}");
        }
        assert_eq!(b.stats().sent, 5);
    }

    #[test]
    fn peer_closing_gives_disconnected_after_every_event_is_delivered() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut b = RawBackend::from_fd(OwnedFd::from(ours), RawOptions::default()).unwrap();
        assert!(!b.info().is_tty);
        let mut tapper = Tapper::new(OwnedFd::from(theirs));
        for n in 0..20u8 {
            tapper.write_bytes(&[0x90, n, 100]).unwrap();
        }
        drop(tapper);
        let (got, gone) = collect(&mut b, 1000);
        assert!(gone, "no Disconnected within the bound");
        let notes: Vec<u8> = got
            .iter()
            .map(|e| match e.msg {
                MidiMessage::NoteOn { note, .. } => note,
                m => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(notes, (0..20).collect::<Vec<u8>>());
        assert_eq!(b.disconnect_errno(), Some(0));
        assert_eq!(
            b.send(OutputEvent {
                at_ns: None,
                port: 0,
                msg: note_on(1, 1),
                tag: 0
            }),
            Err(BackendError::Disconnected)
        );
        assert_eq!(
            b.wait(monotonic_ns() + 1_000_000),
            Err(BackendError::Disconnected)
        );
    }

    #[test]
    fn pty_master_closing_ends_the_backend_without_hanging() {
        let pty = PtyPair::open().unwrap();
        let mut b = RawBackend::from_fd(pty.slave, RawOptions::default()).unwrap();
        drop(pty.master);
        let (got, gone) = collect(&mut b, 1000);
        assert!(gone, "no Disconnected within the bound");
        assert!(got.is_empty());
        assert!(b.disconnect_errno().is_some());
    }

    #[test]
    fn sysex_flood_is_counted_and_the_stream_recovers() {
        let pty = PtyPair::open().unwrap();
        let mut b = RawBackend::from_fd(
            pty.slave,
            RawOptions {
                sysex_capacity: 64,
                ..RawOptions::default()
            },
        )
        .unwrap();
        let mut tapper = Tapper::new(pty.master);
        let mut flood = vec![0xF0];
        flood.extend_from_slice(&[0x11; 10_000]);
        flood.extend([0xF7, 0x90, 60, 100]);
        tapper.write_bytes(&flood).unwrap();
        let (got, _) = collect(&mut b, 2);
        let msgs: Vec<MidiMessage> = got.iter().map(|e| e.msg).collect();
        assert_eq!(
            msgs,
            [
                MidiMessage::SysEx {
                    len: 64,
                    truncated: true
                },
                note_on(60, 100)
            ]
        );
        assert_eq!(b.parser_stats().sysex_overflows, 1);
        assert_eq!(b.parser_stats().bytes, 10_005);
        assert_eq!(b.stats().malformed, 1);
    }

    #[test]
    fn midi_baud_on_a_pty_is_set_and_read_back() {
        let pty = PtyPair::open().unwrap();
        let b = RawBackend::open(
            &pty.slave_path,
            RawOptions {
                baud: Some(31_250),
                ..RawOptions::default()
            },
        )
        .unwrap();
        assert_eq!(b.info().baud, Some(31_250));
        assert!(b.info().is_tty);
    }

    #[test]
    fn opening_a_missing_device_says_how_to_find_one() {
        let e = RawBackend::open(
            std::path::Path::new("/dev/firmtime-no-such-midi"),
            RawOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.kind(), firmtime_midi::ErrorKind::NotPresent);
        assert!(e.to_string().contains("firmtime midi ports"), "{e}");
    }

    #[test]
    fn baud_on_a_pipe_is_refused_with_the_reason() {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = RawBackend::from_fd(
            OwnedFd::from(ours),
            RawOptions {
                baud: Some(31_250),
                ..RawOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.kind(), firmtime_midi::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not a terminal"), "{e}");
    }

    #[test]
    fn loop_test_over_the_paced_pty_loopback_counts_every_event() {
        let pty = PtyPair::open().unwrap();
        let looper = PacedLoopback::start(pty.master, PacedOptions::default()).unwrap();
        let mut b = RawBackend::open(&pty.slave_path, RawOptions::default()).unwrap();
        drop(pty.slave);
        let mut test = LoopTest::new(LoopConfig {
            events: 100,
            ..LoopConfig::default()
        })
        .unwrap();
        let r = assert_no_alloc::assert_no_alloc(|| test.run(&mut b));
        assert_eq!(r.events_received, 100, "{r:?}");
        assert_eq!(r.lost, 0, "{r:?}");
        assert!(!r.timed_out && !r.disconnected);
        assert_eq!(r.wire_limit_ns, 960_000);
        let s = looper.stop();
        assert_eq!(s.overruns, 0);
        assert_eq!(s.bytes_in, s.bytes_out);
        assert_eq!(s.bytes_in, 3 * r.sent);
    }
}
