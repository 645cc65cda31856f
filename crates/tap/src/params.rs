//! Experiment parameters as plain `Copy` data the engine reads on the RT path.
//!
//! Every variable-length parameter (a delay list, a metronome pattern, a set
//! of random notes) lives in a [`FixedList`] of fixed capacity, so a whole
//! [`Params`] block is one `Copy` value: the engine copies it at setup and a
//! trigger changes it with [`Params::apply`], which never allocates.
//!
//! In files, channels are 1–16 (as on the keyboard's display), notes 0–127,
//! velocities 1–127 and times in milliseconds (fractions allowed, held as
//! whole microseconds).
//!
//! # Real-time contract
//!
//! Parsing and formatting (serde) allocate and are for setup only. Functions
//! marked **RT-safe.** never allocate, lock, block or print.

use firmtime_rt::rng::Rng;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A list of at most `N` items stored inline (no heap), for the RT path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedList<T: Copy + Default, const N: usize> {
    len: u16,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> FixedList<T, N> {
    /// Capacity.
    pub const CAPACITY: usize = N;

    /// An empty list. **RT-safe.**
    pub fn new() -> Self {
        Self {
            len: 0,
            items: [T::default(); N],
        }
    }

    /// Builds a list from a slice.
    ///
    /// # Errors
    /// Returns the capacity if `items` holds more than `N` entries.
    pub fn from_slice(items: &[T]) -> Result<Self, usize> {
        let mut l = Self::new();
        for &i in items {
            l.push(i).map_err(|_| N)?;
        }
        Ok(l)
    }

    /// Appends an item. **RT-safe.**
    ///
    /// # Errors
    /// Hands the item back if the list is full.
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if usize::from(self.len) >= N {
            return Err(item);
        }
        self.items[usize::from(self.len)] = item;
        self.len += 1;
        Ok(())
    }

    /// The items. **RT-safe.**
    pub fn as_slice(&self) -> &[T] {
        &self.items[..usize::from(self.len)]
    }

    /// Number of items. **RT-safe.**
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True if there are no items. **RT-safe.**
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Copy + Default, const N: usize> Default for FixedList<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + fmt::Debug, const N: usize> fmt::Debug for FixedList<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T: Copy + Default + Serialize, const N: usize> Serialize for FixedList<T, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for i in self.as_slice() {
            seq.serialize_element(i)?;
        }
        seq.end()
    }
}

impl<'de, T: Copy + Default + Deserialize<'de>, const N: usize> Deserialize<'de>
    for FixedList<T, N>
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Copy + Default + Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = FixedList<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {N} entries")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut l = FixedList::new();
                while let Some(item) = seq.next_element()? {
                    if l.push(item).is_err() {
                        return Err(de::Error::custom(format!(
                            "too many entries: at most {N} are allowed"
                        )));
                    }
                }
                Ok(l)
            }
        }
        d.deserialize_seq(V::<T, N>(std::marker::PhantomData))
    }
}

macro_rules! ranged_u8 {
    ($(#[$m:meta])* $name:ident, $lo:expr, $hi:expr, $what:expr, $default:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize)]
        #[serde(transparent)]
        pub struct $name(u8);

        impl $name {
            /// Smallest valid value.
            pub const MIN: u8 = $lo;
            /// Largest valid value.
            pub const MAX: u8 = $hi;

            /// Checks the range.
            ///
            /// # Errors
            /// A message naming the valid range.
            pub fn new(v: i64) -> Result<Self, String> {
                if ($lo as i64..=$hi as i64).contains(&v) {
                    Ok(Self(v as u8))
                } else {
                    Err(format!("{} must be {}–{}, got {v}", $what, $lo, $hi))
                }
            }

            /// The value. **RT-safe.**
            pub fn get(self) -> u8 {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self($default)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = i64::deserialize(d)?;
                Self::new(v).map_err(de::Error::custom)
            }
        }
    };
}

ranged_u8!(
    /// A MIDI channel as users number it, 1–16 (byte value + 1).
    Channel, 1, 16, "a MIDI channel", 1
);
ranged_u8!(
    /// A MIDI note number, 0–127 (60 = middle C).
    Note, 0, 127, "a MIDI note", 60
);
ranged_u8!(
    /// A note-on velocity, 1–127 (0 would mean note off).
    Velocity, 1, 127, "a MIDI velocity", 100
);

impl Channel {
    /// The channel as MIDI bytes carry it, 0–15. **RT-safe.**
    pub fn midi(self) -> u8 {
        self.0 - 1
    }
}

/// A time given in milliseconds in files, held as whole microseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Ms(u64);

impl Ms {
    /// Longest time accepted: one day.
    pub const MAX_US: u64 = 86_400_000_000;

    /// From microseconds (saturating at [`Ms::MAX_US`]). **RT-safe.**
    pub fn from_us(us: u64) -> Self {
        Self(us.min(Self::MAX_US))
    }

    /// From whole milliseconds. **RT-safe.**
    pub fn from_ms(ms: u64) -> Self {
        Self::from_us(ms.saturating_mul(1000))
    }

    /// Microseconds. **RT-safe.**
    pub fn us(self) -> u64 {
        self.0
    }

    /// Milliseconds as a float (for display).
    pub fn ms_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// Parses a millisecond count (fractions to the microsecond).
    ///
    /// # Errors
    /// When negative, not finite, or longer than a day.
    pub fn parse_ms(ms: f64) -> Result<Self, String> {
        if !ms.is_finite() || ms < 0.0 {
            return Err(format!(
                "a time in milliseconds must be 0 or more, got {ms}"
            ));
        }
        let us = (ms * 1000.0).round();
        if us > Self::MAX_US as f64 {
            return Err(format!(
                "a time in milliseconds must be at most 86400000 (one day), got {ms}"
            ));
        }
        Ok(Self(us as u64))
    }
}

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{} ms", self.0 / 1000)
        } else {
            write!(f, "{} ms", self.ms_f64())
        }
    }
}

impl Serialize for Ms {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 % 1000 == 0 {
            s.serialize_u64(self.0 / 1000)
        } else {
            s.serialize_f64(self.ms_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Ms {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        Self::parse_ms(v).map_err(de::Error::custom)
    }
}

/// An inclusive range of keys, written `[low, high]`: feedback applies only
/// to input notes inside it (two feedback channels with disjoint ranges
/// split the keyboard).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyRange {
    /// Lowest key.
    pub low: Note,
    /// Highest key.
    pub high: Note,
}

impl Default for KeyRange {
    fn default() -> Self {
        Self {
            low: Note(0),
            high: Note(127),
        }
    }
}

impl KeyRange {
    /// True if `note` is inside. **RT-safe.**
    pub fn contains(self, note: u8) -> bool {
        (self.low.0..=self.high.0).contains(&note)
    }
}

impl Serialize for KeyRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        [self.low.0, self.high.0].serialize(s)
    }
}

impl<'de> Deserialize<'de> for KeyRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let [lo, hi] = <[i64; 2]>::deserialize(d)?;
        let low = Note::new(lo).map_err(de::Error::custom)?;
        let high = Note::new(hi).map_err(de::Error::custom)?;
        if low > high {
            return Err(de::Error::custom(format!(
                "keys = [low, high] needs low ≤ high, got [{lo}, {hi}]"
            )));
        }
        Ok(Self { low, high })
    }
}

/// A note-to-note map for [`Pitch::Map`]; keys not listed keep their pitch.
/// Written as pairs: `map = [[60, 62], [62, 60]]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyMap([u8; 128]);

impl KeyMap {
    /// The identity map.
    pub fn identity() -> Self {
        let mut m = [0u8; 128];
        for (i, v) in m.iter_mut().enumerate() {
            *v = i as u8;
        }
        Self(m)
    }

    /// Maps `from` to `to`.
    pub fn set(&mut self, from: Note, to: Note) {
        self.0[usize::from(from.0)] = to.0;
    }

    /// Where `note` goes. **RT-safe.**
    pub fn get(&self, note: u8) -> u8 {
        self.0[usize::from(note & 0x7f)]
    }
}

impl Default for KeyMap {
    fn default() -> Self {
        Self::identity()
    }
}

impl fmt::Debug for KeyMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .enumerate()
                    .filter(|(i, v)| *i as u8 != **v)
                    .map(|(i, v)| (i, *v)),
            )
            .finish()
    }
}

impl Serialize for KeyMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<[u8; 2]> = (0u8..128)
            .filter(|&i| self.0[usize::from(i)] != i)
            .map(|i| [i, self.0[usize::from(i)]])
            .collect();
        pairs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for KeyMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = Vec::<[i64; 2]>::deserialize(d)?;
        let mut m = Self::identity();
        for [f, t] in pairs {
            let from = Note::new(f).map_err(de::Error::custom)?;
            let to = Note::new(t).map_err(de::Error::custom)?;
            m.set(from, to);
        }
        Ok(m)
    }
}

/// Most notes in a [`Pitch::Random`] set.
pub const MAX_RANDOM_NOTES: usize = 16;
/// Most entries in a [`Delay::List`].
pub const MAX_DELAY_LIST: usize = 32;
/// Most steps in a metronome pattern.
pub const MAX_PATTERN: usize = 32;

// Inline on purpose: boxing the large variant would allocate on the RT path.
#[allow(clippy::large_enum_variant)]
/// The pitch of a feedback note (`pitch = { mode = "…", … }`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Pitch {
    /// The key that was played.
    #[default]
    Same,
    /// Always this note.
    Fixed {
        /// The note.
        note: Note,
    },
    /// The key played, moved by some semitones (results clamped to 0–127).
    Transpose {
        /// Semitones, −127…127.
        semitones: i8,
    },
    /// Looked up in a key map; keys not listed keep their pitch.
    Map {
        /// `[[from, to], …]`.
        map: KeyMap,
    },
    /// A note drawn uniformly from a set, independently per keystroke.
    Random {
        /// The set (1–16 notes).
        notes: FixedList<Note, MAX_RANDOM_NOTES>,
    },
}

impl Pitch {
    /// Checks the rules serde cannot express: a random set holds 1–16 notes.
    ///
    /// # Errors
    /// A message naming the broken rule.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Pitch::Random { ref notes } if notes.is_empty() => Err(format!(
                "pitch mode \"random\" needs 1–{MAX_RANDOM_NOTES} notes, got none"
            )),
            _ => Ok(()),
        }
    }

    /// The feedback note for input `note`. **RT-safe.**
    pub fn apply(&self, note: u8, rng: &mut Rng) -> u8 {
        match *self {
            Pitch::Same => note,
            Pitch::Fixed { note: n } => n.0,
            Pitch::Transpose { semitones } => {
                (i16::from(note) + i16::from(semitones)).clamp(0, 127) as u8
            }
            Pitch::Map { ref map } => map.get(note),
            Pitch::Random { ref notes } => {
                let s = notes.as_slice();
                if s.is_empty() {
                    note
                } else {
                    s[rng.below(s.len() as u32) as usize].0
                }
            }
        }
    }
}

/// The velocity of a feedback note (`velocity = { mode = "…", … }`).
#[derive(Clone, Copy, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum VelocityMode {
    /// The velocity played.
    #[default]
    Same,
    /// Always this velocity.
    Fixed {
        /// The velocity.
        velocity: Velocity,
    },
    /// The velocity played times `factor` (0–8), clamped to 1–127.
    Scaled {
        /// The factor.
        factor: f32,
    },
}

impl VelocityMode {
    /// The feedback velocity for input velocity `v` (1–127). **RT-safe.**
    pub fn apply(&self, v: u8) -> u8 {
        match *self {
            VelocityMode::Same => v,
            VelocityMode::Fixed { velocity } => velocity.0,
            VelocityMode::Scaled { factor } => {
                (f32::from(v) * factor).round().clamp(1.0, 127.0) as u8
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        match *self {
            VelocityMode::Scaled { factor } if !(0.0..=8.0).contains(&factor) => {
                Err(format!("velocity factor must be 0–8, got {factor}"))
            }
            _ => Ok(()),
        }
    }
}

/// How long a feedback note sounds (`duration = { mode = "…", … }`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum NoteLength {
    /// Until the key is released (the note-off is fed back too).
    #[default]
    AsPlayed,
    /// A fixed length; the key release is ignored.
    Fixed {
        /// Length.
        ms: Ms,
    },
}

// Inline on purpose: boxing the large variant would allocate on the RT path.
#[allow(clippy::large_enum_variant)]
/// The delay between a keystroke and its feedback (`delay = { mode = "…", … }`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Delay {
    /// At once.
    #[default]
    None,
    /// A fixed delay.
    Fixed {
        /// Delay.
        ms: Ms,
    },
    /// Keystroke *k* (counted from 0) gets `ms[k % len]`: a per-keystroke
    /// list that repeats.
    List {
        /// Delays (1–32).
        ms: FixedList<Ms, MAX_DELAY_LIST>,
    },
    /// Uniform between the bounds, independently per keystroke.
    Uniform {
        /// Lower bound.
        min_ms: Ms,
        /// Upper bound.
        max_ms: Ms,
    },
    /// Normal with this mean and sd, redrawn until inside the bounds (after
    /// 16 tries, clamped into them).
    Normal {
        /// Mean.
        mean_ms: Ms,
        /// Standard deviation.
        sd_ms: Ms,
        /// Lower bound.
        min_ms: Ms,
        /// Upper bound.
        max_ms: Ms,
    },
}

impl Delay {
    /// The shortest delay it can give, µs.
    pub fn min_us(&self) -> u64 {
        match *self {
            Delay::None => 0,
            Delay::Fixed { ms } => ms.0,
            Delay::List { ref ms } => ms.as_slice().iter().map(|m| m.0).min().unwrap_or(0),
            Delay::Uniform { min_ms, .. } | Delay::Normal { min_ms, .. } => min_ms.0,
        }
    }

    /// The delay for keystroke `k` (0-based), in µs. **RT-safe.**
    pub fn sample_us(&self, k: u64, rng: &mut Rng) -> u64 {
        match *self {
            Delay::None => 0,
            Delay::Fixed { ms } => ms.0,
            Delay::List { ref ms } => {
                let s = ms.as_slice();
                if s.is_empty() {
                    0
                } else {
                    s[(k % s.len() as u64) as usize].0
                }
            }
            Delay::Uniform { min_ms, max_ms } => {
                let span = (max_ms.0 - min_ms.0 + 1) as f64;
                (min_ms.0 + (rng.next_f64() * span) as u64).min(max_ms.0)
            }
            Delay::Normal {
                mean_ms,
                sd_ms,
                min_ms,
                max_ms,
            } => {
                let mut x = mean_ms.0 as f64;
                for _ in 0..16 {
                    x = mean_ms.0 as f64 + sd_ms.0 as f64 * rng.next_normal();
                    if x >= min_ms.0 as f64 && x <= max_ms.0 as f64 {
                        break;
                    }
                }
                x.round().clamp(min_ms.0 as f64, max_ms.0 as f64) as u64
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        match *self {
            Delay::List { ref ms } if ms.is_empty() => {
                Err("delay mode \"list\" needs at least one entry in ms".into())
            }
            Delay::Uniform { min_ms, max_ms } | Delay::Normal { min_ms, max_ms, .. }
                if min_ms > max_ms =>
            {
                Err(format!(
                    "delay needs min_ms ≤ max_ms, got {min_ms} > {max_ms}"
                ))
            }
            Delay::Normal {
                mean_ms,
                min_ms,
                max_ms,
                ..
            } if mean_ms < min_ms || mean_ms > max_ms => Err(format!(
                "delay mean_ms ({mean_ms}) must lie within min_ms…max_ms ({min_ms}…{max_ms})"
            )),
            _ => Ok(()),
        }
    }
}

/// One feedback channel: what sound answers each keystroke (FTAP's FEED_*
/// and FEED2_* parameters).
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Feedback {
    /// Feedback on. Default: true when the table is given.
    pub on: bool,
    /// Output channel, 1–16.
    pub channel: Channel,
    /// Input keys this channel answers, `[low, high]` (split keyboard).
    pub keys: KeyRange,
    /// Pitch.
    #[serde(deserialize_with = "checked_pitch")]
    pub pitch: Pitch,
    /// Velocity.
    #[serde(deserialize_with = "checked_velocity")]
    pub velocity: VelocityMode,
    /// Length.
    pub duration: NoteLength,
    /// Delay.
    #[serde(deserialize_with = "checked_delay")]
    pub delay: Delay,
}

// Checks inside deserialization so the TOML parser locates errors at the value.
fn checked_delay<'de, D: Deserializer<'de>>(d: D) -> Result<Delay, D::Error> {
    let v = Delay::deserialize(d)?;
    v.check().map_err(de::Error::custom)?;
    Ok(v)
}

fn checked_pitch<'de, D: Deserializer<'de>>(d: D) -> Result<Pitch, D::Error> {
    let v = Pitch::deserialize(d)?;
    v.check().map_err(de::Error::custom)?;
    Ok(v)
}

fn checked_velocity<'de, D: Deserializer<'de>>(d: D) -> Result<VelocityMode, D::Error> {
    let v = VelocityMode::deserialize(d)?;
    v.check().map_err(de::Error::custom)?;
    Ok(v)
}

impl Default for Feedback {
    fn default() -> Self {
        Self {
            on: true,
            channel: Channel(1),
            keys: KeyRange::default(),
            pitch: Pitch::Same,
            velocity: VelocityMode::Same,
            duration: NoteLength::AsPlayed,
            delay: Delay::None,
        }
    }
}

impl Feedback {
    /// The second channel's default: off, on channel 2.
    pub fn off_second() -> Self {
        Self {
            on: false,
            channel: Channel(2),
            ..Self::default()
        }
    }

    /// Checks the rules serde cannot express.
    ///
    /// # Errors
    /// A message naming the broken rule.
    pub fn check(&self) -> Result<(), String> {
        self.pitch.check()?;
        self.velocity.check()?;
        self.delay.check()
    }
}

/// One step of a metronome pattern.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// A beat at `velocity`.
    #[default]
    Beat,
    /// A beat at `accent_velocity`.
    Accent,
    /// Silence (the beat still counts).
    Rest,
}

/// The metronome (FTAP's METRON_ON, MSPB, MET_*).
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Metronome {
    /// Sounding. Default: true when the table is given.
    pub on: bool,
    /// Milliseconds per beat (FTAP's MSPB); > 0.
    pub mspb: Ms,
    /// Channel, 1–16.
    pub channel: Channel,
    /// Note.
    pub note: Note,
    /// Velocity of an ordinary beat.
    pub velocity: Velocity,
    /// Velocity of an accented beat.
    pub accent_velocity: Velocity,
    /// Note length.
    pub length_ms: Ms,
    /// Steps repeated in order, `["accent", "beat", "rest", …]`; empty = every beat sounds.
    pub pattern: FixedList<Step, MAX_PATTERN>,
    /// Per-step channels (FTAP's MET_CHAN_ARRAY); empty = all on `channel`,
    /// else exactly as long as `pattern`.
    pub pattern_channels: FixedList<Channel, MAX_PATTERN>,
}

impl Default for Metronome {
    fn default() -> Self {
        Self {
            on: true,
            mspb: Ms::from_ms(500),
            channel: Channel(10),
            note: Note(76),
            velocity: Velocity(100),
            accent_velocity: Velocity(127),
            length_ms: Ms::from_ms(50),
            pattern: FixedList::new(),
            pattern_channels: FixedList::new(),
        }
    }
}

/// What the metronome does at one beat.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BeatOut {
    /// Channel, 1–16.
    pub channel: Channel,
    /// Note.
    pub note: u8,
    /// Velocity; `None` for a rest.
    pub velocity: Option<u8>,
}

impl Metronome {
    /// The metronome's default when the table is absent: off.
    pub fn off() -> Self {
        Self {
            on: false,
            ..Self::default()
        }
    }

    /// What beat `k` (0-based) plays. **RT-safe.**
    pub fn beat(&self, k: u64) -> BeatOut {
        let p = self.pattern.as_slice();
        if p.is_empty() {
            return BeatOut {
                channel: self.channel,
                note: self.note.0,
                velocity: Some(self.velocity.0),
            };
        }
        let i = (k % p.len() as u64) as usize;
        let channel = self
            .pattern_channels
            .as_slice()
            .get(i)
            .copied()
            .unwrap_or(self.channel);
        let velocity = match p[i] {
            Step::Beat => Some(self.velocity.0),
            Step::Accent => Some(self.accent_velocity.0),
            Step::Rest => None,
        };
        BeatOut {
            channel,
            note: self.note.0,
            velocity,
        }
    }

    /// Checks the rules serde cannot express.
    ///
    /// # Errors
    /// A message naming the broken rule.
    pub fn check(&self) -> Result<(), String> {
        if self.mspb.0 == 0 {
            return Err("metronome mspb must be more than 0 ms".into());
        }
        if !self.pattern_channels.is_empty() && self.pattern_channels.len() != self.pattern.len() {
            return Err(format!(
                "metronome pattern_channels has {} entries but pattern has {}; give one channel per step or none",
                self.pattern_channels.len(),
                self.pattern.len()
            ));
        }
        Ok(())
    }
}

/// Where masking noise comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskSource {
    /// A held note on a MIDI noise patch (FTAP's way).
    #[default]
    Midi,
    /// Noise rendered as audio by the JACK synth ([`MaskNoise`] spectrum).
    Audio,
}

/// Spectrum of audio masking noise (`[masking] noise`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskNoise {
    /// Flat spectrum.
    #[default]
    White,
    /// −3 dB per octave: equal energy per octave, less hiss.
    Pink,
}

/// Masking noise that hides the sound of the keys themselves.
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Masking {
    /// Playing. Default: true when the table is given.
    pub on: bool,
    /// Source.
    pub source: MaskSource,
    /// MIDI channel of the noise patch.
    pub channel: Channel,
    /// MIDI note held.
    pub note: Note,
    /// MIDI velocity.
    pub velocity: Velocity,
    /// Audio level in dBFS (≤ 0).
    pub level_dbfs: f32,
    /// Audio only: white or pink noise.
    pub noise: MaskNoise,
}

impl Default for Masking {
    fn default() -> Self {
        Self {
            on: true,
            source: MaskSource::Midi,
            channel: Channel(16),
            note: Note(60),
            velocity: Velocity(100),
            level_dbfs: -20.0,
            noise: MaskNoise::White,
        }
    }
}

impl Masking {
    /// The default when the table is absent: off.
    pub fn off() -> Self {
        Self {
            on: false,
            ..Self::default()
        }
    }

    /// Checks the rules serde cannot express.
    ///
    /// # Errors
    /// A message naming the broken rule.
    pub fn check(&self) -> Result<(), String> {
        if !(self.level_dbfs <= 0.0 && self.level_dbfs >= -120.0) {
            return Err(format!(
                "masking level_dbfs must be −120…0, got {}",
                self.level_dbfs
            ));
        }
        Ok(())
    }
}

/// Everything a trigger can change during a trial: the engine's working set.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Params {
    /// Feedback channels: `[feedback, feedback2]`.
    pub feedback: [Feedback; 2],
    /// Metronome.
    pub metronome: Metronome,
    /// Masking noise.
    pub masking: Masking,
}

/// Which feedback channel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Voice {
    /// `feedback` (FTAP's FEED_*).
    First,
    /// `feedback2` (FTAP's FEED2_*).
    Second,
}

impl Voice {
    /// Index into [`Params::feedback`].
    pub fn index(self) -> usize {
        match self {
            Voice::First => 0,
            Voice::Second => 1,
        }
    }

    fn table(self) -> &'static str {
        match self {
            Voice::First => "feedback",
            Voice::Second => "feedback2",
        }
    }
}

// Inline on purpose: boxing the large variant would allocate on the RT path.
#[allow(clippy::large_enum_variant)]
/// One parameter change a trigger makes: a path and a typed value.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Setting {
    /// `feedback.on` / `feedback2.on`.
    FeedbackOn(Voice, bool),
    /// `feedback.channel`.
    FeedbackChannel(Voice, Channel),
    /// `feedback.keys`.
    FeedbackKeys(Voice, KeyRange),
    /// `feedback.pitch`.
    FeedbackPitch(Voice, Pitch),
    /// `feedback.velocity`.
    FeedbackVelocity(Voice, VelocityMode),
    /// `feedback.duration`.
    FeedbackDuration(Voice, NoteLength),
    /// `feedback.delay`.
    FeedbackDelay(Voice, Delay),
    /// `metronome.on` (start/stop).
    MetronomeOn(bool),
    /// `metronome.mspb` (tempo change).
    MetronomeMspb(Ms),
    /// `metronome.channel`.
    MetronomeChannel(Channel),
    /// `metronome.note`.
    MetronomeNote(Note),
    /// `metronome.velocity`.
    MetronomeVelocity(Velocity),
    /// `metronome.accent_velocity`.
    MetronomeAccentVelocity(Velocity),
    /// `metronome.length_ms`.
    MetronomeLength(Ms),
    /// `metronome.pattern`.
    MetronomePattern(FixedList<Step, MAX_PATTERN>),
    /// `metronome.pattern_channels`.
    MetronomePatternChannels(FixedList<Channel, MAX_PATTERN>),
    /// `masking.on`.
    MaskingOn(bool),
    /// `masking.velocity`.
    MaskingVelocity(Velocity),
    /// `masking.level_dbfs`.
    MaskingLevel(f32),
}

/// Every path a trigger may set, for error messages and docs.
pub const SETTING_PATHS: &[&str] = &[
    "feedback.on",
    "feedback.channel",
    "feedback.keys",
    "feedback.pitch",
    "feedback.velocity",
    "feedback.duration",
    "feedback.delay",
    "feedback2.<same as feedback>",
    "metronome.on",
    "metronome.mspb",
    "metronome.channel",
    "metronome.note",
    "metronome.velocity",
    "metronome.accent_velocity",
    "metronome.length_ms",
    "metronome.pattern",
    "metronome.pattern_channels",
    "masking.on",
    "masking.velocity",
    "masking.level_dbfs",
];

impl Setting {
    /// True if `path` names a settable parameter (a leaf, not a table).
    pub fn is_path(path: &str) -> bool {
        let leaf = path
            .strip_prefix("feedback2.")
            .map(|r| format!("feedback.{r}"))
            .unwrap_or_else(|| path.to_string());
        SETTING_PATHS.contains(&leaf.as_str())
    }

    /// Parses `path = value` from a trigger's `set` table.
    ///
    /// # Errors
    /// Names the path and what was expected.
    pub fn from_path(path: &str, value: toml::Value) -> Result<Self, String> {
        fn v<T: serde::de::DeserializeOwned>(path: &str, value: toml::Value) -> Result<T, String> {
            value
                .try_into::<T>()
                .map_err(|e| format!("{path}: {}", e.message().trim()))
        }
        let (voice, rest) = if let Some(r) = path.strip_prefix("feedback2.") {
            (Some(Voice::Second), r)
        } else if let Some(r) = path.strip_prefix("feedback.") {
            (Some(Voice::First), r)
        } else {
            (None, path)
        };
        let s = match (voice, rest) {
            (Some(w), "on") => Setting::FeedbackOn(w, v(path, value)?),
            (Some(w), "channel") => Setting::FeedbackChannel(w, v(path, value)?),
            (Some(w), "keys") => Setting::FeedbackKeys(w, v(path, value)?),
            (Some(w), "pitch") => {
                let p: Pitch = v(path, value)?;
                p.check().map_err(|e| format!("{path}: {e}"))?;
                Setting::FeedbackPitch(w, p)
            }
            (Some(w), "velocity") => {
                let m: VelocityMode = v(path, value)?;
                m.check().map_err(|e| format!("{path}: {e}"))?;
                Setting::FeedbackVelocity(w, m)
            }
            (Some(w), "duration") => Setting::FeedbackDuration(w, v(path, value)?),
            (Some(w), "delay") => {
                let d: Delay = v(path, value)?;
                d.check().map_err(|e| format!("{path}: {e}"))?;
                Setting::FeedbackDelay(w, d)
            }
            (None, "metronome.on") => Setting::MetronomeOn(v(path, value)?),
            (None, "metronome.mspb") => {
                let m: Ms = v(path, value)?;
                if m.0 == 0 {
                    return Err(format!("{path}: must be more than 0 ms"));
                }
                Setting::MetronomeMspb(m)
            }
            (None, "metronome.channel") => Setting::MetronomeChannel(v(path, value)?),
            (None, "metronome.note") => Setting::MetronomeNote(v(path, value)?),
            (None, "metronome.velocity") => Setting::MetronomeVelocity(v(path, value)?),
            (None, "metronome.accent_velocity") => {
                Setting::MetronomeAccentVelocity(v(path, value)?)
            }
            (None, "metronome.length_ms") => Setting::MetronomeLength(v(path, value)?),
            (None, "metronome.pattern") => Setting::MetronomePattern(v(path, value)?),
            (None, "metronome.pattern_channels") => {
                Setting::MetronomePatternChannels(v(path, value)?)
            }
            (None, "masking.on") => Setting::MaskingOn(v(path, value)?),
            (None, "masking.velocity") => Setting::MaskingVelocity(v(path, value)?),
            (None, "masking.level_dbfs") => Setting::MaskingLevel(v(path, value)?),
            _ => {
                return Err(format!(
                    "unknown parameter `{path}`; a trigger can set: {}",
                    SETTING_PATHS.join(", ")
                ))
            }
        };
        Ok(s)
    }

    /// The path this setting writes, e.g. `feedback2.delay`.
    pub fn path(&self) -> String {
        let fb = |w: Voice, k: &str| format!("{}.{k}", w.table());
        match *self {
            Setting::FeedbackOn(w, _) => fb(w, "on"),
            Setting::FeedbackChannel(w, _) => fb(w, "channel"),
            Setting::FeedbackKeys(w, _) => fb(w, "keys"),
            Setting::FeedbackPitch(w, _) => fb(w, "pitch"),
            Setting::FeedbackVelocity(w, _) => fb(w, "velocity"),
            Setting::FeedbackDuration(w, _) => fb(w, "duration"),
            Setting::FeedbackDelay(w, _) => fb(w, "delay"),
            Setting::MetronomeOn(_) => "metronome.on".into(),
            Setting::MetronomeMspb(_) => "metronome.mspb".into(),
            Setting::MetronomeChannel(_) => "metronome.channel".into(),
            Setting::MetronomeNote(_) => "metronome.note".into(),
            Setting::MetronomeVelocity(_) => "metronome.velocity".into(),
            Setting::MetronomeAccentVelocity(_) => "metronome.accent_velocity".into(),
            Setting::MetronomeLength(_) => "metronome.length_ms".into(),
            Setting::MetronomePattern(_) => "metronome.pattern".into(),
            Setting::MetronomePatternChannels(_) => "metronome.pattern_channels".into(),
            Setting::MaskingOn(_) => "masking.on".into(),
            Setting::MaskingVelocity(_) => "masking.velocity".into(),
            Setting::MaskingLevel(_) => "masking.level_dbfs".into(),
        }
    }

    /// The value as TOML (for writing files).
    ///
    /// # Panics
    /// Never for the types held here (all serialize to TOML).
    pub fn value(&self) -> toml::Value {
        fn t<T: Serialize>(x: &T) -> toml::Value {
            toml::Value::try_from(x).expect("parameter values serialize to TOML")
        }
        match self {
            Setting::FeedbackOn(_, x) | Setting::MetronomeOn(x) | Setting::MaskingOn(x) => t(x),
            Setting::FeedbackChannel(_, x) | Setting::MetronomeChannel(x) => t(x),
            Setting::FeedbackKeys(_, x) => t(x),
            Setting::FeedbackPitch(_, x) => t(x),
            Setting::FeedbackVelocity(_, x) => t(x),
            Setting::FeedbackDuration(_, x) => t(x),
            Setting::FeedbackDelay(_, x) => t(x),
            Setting::MetronomeMspb(x) | Setting::MetronomeLength(x) => t(x),
            Setting::MetronomeNote(x) => t(x),
            Setting::MetronomeVelocity(x)
            | Setting::MetronomeAccentVelocity(x)
            | Setting::MaskingVelocity(x) => t(x),
            Setting::MetronomePattern(x) => t(x),
            Setting::MetronomePatternChannels(x) => t(x),
            Setting::MaskingLevel(x) => t(x),
        }
    }
}

impl Params {
    /// Applies one change. **RT-safe.**
    pub fn apply(&mut self, s: &Setting) {
        match *s {
            Setting::FeedbackOn(w, x) => self.feedback[w.index()].on = x,
            Setting::FeedbackChannel(w, x) => self.feedback[w.index()].channel = x,
            Setting::FeedbackKeys(w, x) => self.feedback[w.index()].keys = x,
            Setting::FeedbackPitch(w, x) => self.feedback[w.index()].pitch = x,
            Setting::FeedbackVelocity(w, x) => self.feedback[w.index()].velocity = x,
            Setting::FeedbackDuration(w, x) => self.feedback[w.index()].duration = x,
            Setting::FeedbackDelay(w, x) => self.feedback[w.index()].delay = x,
            Setting::MetronomeOn(x) => self.metronome.on = x,
            Setting::MetronomeMspb(x) => self.metronome.mspb = x,
            Setting::MetronomeChannel(x) => self.metronome.channel = x,
            Setting::MetronomeNote(x) => self.metronome.note = x,
            Setting::MetronomeVelocity(x) => self.metronome.velocity = x,
            Setting::MetronomeAccentVelocity(x) => self.metronome.accent_velocity = x,
            Setting::MetronomeLength(x) => self.metronome.length_ms = x,
            Setting::MetronomePattern(x) => self.metronome.pattern = x,
            Setting::MetronomePatternChannels(x) => self.metronome.pattern_channels = x,
            Setting::MaskingOn(x) => self.masking.on = x,
            Setting::MaskingVelocity(x) => self.masking.velocity = x,
            Setting::MaskingLevel(x) => self.masking.level_dbfs = x,
        }
    }
}

// ---------------------------------------------------------------- in words
//
// What `firmtime tap check` and `tap run` print: each setting as a
// behavioural scientist would say it, not as the file spells it.

fn list<T>(items: &[T], each: impl Fn(&T) -> String) -> String {
    items.iter().map(each).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for KeyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.low.0 == 0 && self.high.0 == 127 {
            write!(f, "every key")
        } else {
            write!(f, "keys {}–{}", self.low.0, self.high.0)
        }
    }
}

impl fmt::Display for Pitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Pitch::Same => write!(f, "the key played"),
            Pitch::Fixed { note } => write!(f, "always note {}", note.0),
            Pitch::Transpose { semitones } => {
                write!(f, "the key played moved {semitones:+} semitone(s)")
            }
            Pitch::Map { ref map } => {
                let moved: Vec<String> = (0u8..128)
                    .filter(|&k| map.get(k) != k)
                    .map(|k| format!("{k}→{}", map.get(k)))
                    .collect();
                if moved.is_empty() {
                    write!(f, "the key played (empty key map)")
                } else {
                    write!(f, "the key played, mapped {}", moved.join(", "))
                }
            }
            Pitch::Random { ref notes } => write!(
                f,
                "a random one of notes {}",
                list(notes.as_slice(), |n| n.0.to_string())
            ),
        }
    }
}

impl fmt::Display for VelocityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VelocityMode::Same => write!(f, "as played"),
            VelocityMode::Fixed { velocity } => write!(f, "always {}", velocity.0),
            VelocityMode::Scaled { factor } => write!(f, "as played × {factor}"),
        }
    }
}

impl fmt::Display for NoteLength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NoteLength::AsPlayed => write!(f, "as long as the key is held"),
            NoteLength::Fixed { ms } => write!(f, "{ms}"),
        }
    }
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Delay::None => write!(f, "none (at once)"),
            Delay::Fixed { ms } => write!(f, "{ms}"),
            Delay::List { ref ms } => write!(
                f,
                "per keystroke in turn: {}",
                list(ms.as_slice(), ToString::to_string)
            ),
            Delay::Uniform { min_ms, max_ms } => {
                write!(f, "random, uniform between {min_ms} and {max_ms}")
            }
            Delay::Normal {
                mean_ms,
                sd_ms,
                min_ms,
                max_ms,
            } => write!(
                f,
                "random, normal with mean {mean_ms} and sd {sd_ms}, kept between {min_ms} and {max_ms}"
            ),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Beat => "beat",
            Step::Accent => "accent",
            Step::Rest => "rest",
        })
    }
}

impl fmt::Display for MaskSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MaskSource::Midi => "a held note on a MIDI noise patch",
            MaskSource::Audio => "noise rendered as audio",
        })
    }
}

impl fmt::Display for MaskNoise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MaskNoise::White => "white",
            MaskNoise::Pink => "pink",
        })
    }
}

/// A metronome pattern in words: `every beat sounds` or `accent, beat, rest`.
pub fn pattern_words(p: &[Step]) -> String {
    if p.is_empty() {
        "every beat sounds".to_string()
    } else {
        list(p, ToString::to_string)
    }
}

impl fmt::Display for Setting {
    /// `feedback delay → 200 ms`, `metronome → stops`, …
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        match *self {
            Setting::FeedbackOn(w, x) => write!(f, "{} → {}", w.table(), on(x)),
            Setting::FeedbackChannel(w, x) => write!(f, "{} channel → {}", w.table(), x.0),
            Setting::FeedbackKeys(w, x) => write!(f, "{} keys → {x}", w.table()),
            Setting::FeedbackPitch(w, x) => write!(f, "{} pitch → {x}", w.table()),
            Setting::FeedbackVelocity(w, x) => write!(f, "{} velocity → {x}", w.table()),
            Setting::FeedbackDuration(w, x) => write!(f, "{} length → {x}", w.table()),
            Setting::FeedbackDelay(w, x) => write!(f, "{} delay → {x}", w.table()),
            Setting::MetronomeOn(x) => {
                write!(f, "metronome → {}", if x { "starts" } else { "stops" })
            }
            Setting::MetronomeMspb(x) => write!(
                f,
                "metronome tempo → {x} per beat ({:.1} bpm)",
                60_000.0 / x.ms_f64().max(1e-3)
            ),
            Setting::MetronomeChannel(x) => write!(f, "metronome channel → {}", x.0),
            Setting::MetronomeNote(x) => write!(f, "metronome note → {}", x.0),
            Setting::MetronomeVelocity(x) => write!(f, "metronome velocity → {}", x.0),
            Setting::MetronomeAccentVelocity(x) => {
                write!(f, "metronome accent velocity → {}", x.0)
            }
            Setting::MetronomeLength(x) => write!(f, "metronome note length → {x}"),
            Setting::MetronomePattern(ref x) => {
                write!(f, "metronome pattern → {}", pattern_words(x.as_slice()))
            }
            Setting::MetronomePatternChannels(ref x) => write!(
                f,
                "metronome channels per step → {}",
                if x.is_empty() {
                    "all on the metronome's channel".to_string()
                } else {
                    list(x.as_slice(), |c| c.0.to_string())
                }
            ),
            Setting::MaskingOn(x) => write!(f, "masking noise → {}", on(x)),
            Setting::MaskingVelocity(x) => write!(f, "masking velocity → {}", x.0),
            Setting::MaskingLevel(x) => write!(f, "masking level → {x} dBFS"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_list_cycles_and_uniform_stays_in_bounds() {
        let d = Delay::List {
            ms: FixedList::from_slice(&[Ms::from_ms(0), Ms::from_ms(200), Ms::from_ms(50)])
                .unwrap(),
        };
        let mut rng = Rng::new(1);
        let got: Vec<u64> = (0..5).map(|k| d.sample_us(k, &mut rng)).collect();
        assert_eq!(got, [0, 200_000, 50_000, 0, 200_000]);
        let u = Delay::Uniform {
            min_ms: Ms::from_ms(10),
            max_ms: Ms::from_ms(20),
        };
        for k in 0..1000 {
            let x = u.sample_us(k, &mut rng);
            assert!((10_000..=20_000).contains(&x), "{x}");
        }
    }

    #[test]
    fn apply_is_rt_safe_and_changes_the_field() {
        let mut p = Params {
            feedback: [Feedback::default(), Feedback::off_second()],
            metronome: Metronome::off(),
            masking: Masking::off(),
        };
        let s = [
            Setting::FeedbackDelay(
                Voice::Second,
                Delay::Fixed {
                    ms: Ms::from_ms(200),
                },
            ),
            Setting::MetronomeMspb(Ms::from_ms(400)),
            Setting::MetronomeOn(true),
        ];
        let mut rng = Rng::new(3);
        assert_no_alloc::assert_no_alloc(|| {
            for x in &s {
                p.apply(x);
            }
            let _ = p.feedback[1].delay.sample_us(0, &mut rng);
            let _ = p.metronome.beat(3);
            let _ = p.feedback[0].pitch.apply(60, &mut rng);
        });
        assert_eq!(
            p.feedback[1].delay,
            Delay::Fixed {
                ms: Ms::from_ms(200)
            }
        );
        assert_eq!(p.metronome.mspb.us(), 400_000);
        assert!(p.metronome.on);
    }

    #[test]
    fn pitch_modes() {
        let mut rng = Rng::new(9);
        assert_eq!(Pitch::Transpose { semitones: 2 }.apply(126, &mut rng), 127);
        assert_eq!(Pitch::Transpose { semitones: -5 }.apply(60, &mut rng), 55);
        let mut m = KeyMap::identity();
        m.set(Note(60), Note(62));
        assert_eq!(Pitch::Map { map: m }.apply(60, &mut rng), 62);
        assert_eq!(Pitch::Map { map: m }.apply(61, &mut rng), 61);
        let set = FixedList::from_slice(&[Note(40), Note(41)]).unwrap();
        for _ in 0..100 {
            let n = Pitch::Random { notes: set }.apply(60, &mut rng);
            assert!(n == 40 || n == 41);
        }
    }

    #[test]
    fn metronome_pattern_steps() {
        let m = Metronome {
            pattern: FixedList::from_slice(&[Step::Accent, Step::Beat, Step::Rest]).unwrap(),
            ..Metronome::default()
        };
        assert_eq!(m.beat(0).velocity, Some(127));
        assert_eq!(m.beat(1).velocity, Some(100));
        assert_eq!(m.beat(2).velocity, None);
        assert_eq!(m.beat(3).velocity, Some(127));
    }

    #[test]
    fn setting_round_trips_through_path_and_value() {
        let s = Setting::FeedbackDelay(
            Voice::Second,
            Delay::Uniform {
                min_ms: Ms::from_ms(100),
                max_ms: Ms::from_us(250_500),
            },
        );
        let back = Setting::from_path(&s.path(), s.value()).unwrap();
        assert_eq!(back, s);
        let e = Setting::from_path("feedback.dealy", toml::Value::Integer(1)).unwrap_err();
        assert!(e.contains("unknown parameter `feedback.dealy`"), "{e}");
    }
}
