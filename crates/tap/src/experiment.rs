//! Experiment files: one TOML file per trial type (format in `docs/TAP.md`).
//!
//! [`Experiment::from_toml`] parses and validates; every error names the
//! line and column and what was expected. Unknown keys are errors. The
//! parsed [`Experiment`] gives the engine a `Copy` [`Params`] block and a
//! fixed-capacity trigger table.
//!
//! # Real-time contract
//!
//! Loading and writing allocate (setup only). [`Trigger`], [`TriggerAt`] and
//! [`TrialEnd`] are `Copy`; their methods marked **RT-safe.** never allocate.

use crate::error::{Error, ErrorKind, Result};
use crate::params::{Feedback, FixedList, Masking, Metronome, Ms, Params, Setting, SETTING_PATHS};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Most triggers in one experiment.
pub const MAX_TRIGGERS: usize = 32;
/// Most settings one trigger changes.
pub const MAX_TRIGGER_SETTINGS: usize = 8;

/// When a trigger fires.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TriggerAt {
    /// At the n-th keystroke (1-based; FTAP's `K`).
    Keystroke(u32),
    /// When this much time has passed since the trial started (FTAP's `T`).
    Elapsed(Ms),
    /// At the n-th metronome beat, rests included (1-based; FTAP's `M`).
    Beat(u32),
}

impl TriggerAt {
    /// True once the trial has reached this point. **RT-safe.**
    pub fn reached(self, keystrokes: u32, elapsed_us: u64, beats: u32) -> bool {
        match self {
            TriggerAt::Keystroke(n) => keystrokes >= n,
            TriggerAt::Elapsed(t) => elapsed_us >= t.us(),
            TriggerAt::Beat(n) => beats >= n,
        }
    }
}

/// A trigger: at a point in the trial, change parameters and/or end it.
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(try_from = "TriggerToml", into = "TriggerToml")]
pub struct Trigger {
    /// Identifier recorded in the data file (1–65535; defaults to the
    /// trigger's position in the file).
    pub id: u16,
    /// When.
    pub at: TriggerAt,
    /// End the trial (FTAP's END_EXP).
    pub end: bool,
    /// Parameter changes, applied in order.
    pub settings: FixedList<Setting, MAX_TRIGGER_SETTINGS>,
}

impl Default for Trigger {
    fn default() -> Self {
        Self {
            id: 0,
            at: TriggerAt::Keystroke(1),
            end: false,
            settings: FixedList::new(),
        }
    }
}

impl Default for Setting {
    fn default() -> Self {
        Setting::MetronomeOn(false)
    }
}

/// A trigger as written in the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggerToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keystroke: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    elapsed_ms: Option<Ms>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    beat: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    end: bool,
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    set: toml::Table,
}

fn flatten_set(
    prefix: &str,
    table: toml::Table,
    out: &mut FixedList<Setting, MAX_TRIGGER_SETTINGS>,
) -> std::result::Result<(), String> {
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k
        } else {
            format!("{prefix}.{k}")
        };
        if Setting::is_path(&path) {
            let s = Setting::from_path(&path, v)?;
            out.push(s).map_err(|_| {
                format!("a trigger can change at most {MAX_TRIGGER_SETTINGS} parameters; split it into two triggers at the same point")
            })?;
        } else if let toml::Value::Table(t) = v {
            flatten_set(&path, t, out)?;
        } else {
            return Err(format!(
                "unknown parameter `{path}`; a trigger can set: {}",
                SETTING_PATHS.join(", ")
            ));
        }
    }
    Ok(())
}

impl TryFrom<TriggerToml> for Trigger {
    type Error = String;

    fn try_from(t: TriggerToml) -> std::result::Result<Self, String> {
        let at = match (t.keystroke, t.elapsed_ms, t.beat) {
            (Some(0), None, None) | (None, None, Some(0)) => {
                return Err(
                    "trigger counts start at 1 (keystroke = 1 is the first keystroke)".into(),
                )
            }
            (Some(n), None, None) => TriggerAt::Keystroke(n),
            (None, Some(ms), None) => TriggerAt::Elapsed(ms),
            (None, None, Some(n)) => TriggerAt::Beat(n),
            _ => {
                return Err(
                    "a trigger needs exactly one of keystroke = N, elapsed_ms = T or beat = N"
                        .into(),
                )
            }
        };
        if t.id == Some(0) {
            return Err("trigger id must be 1–65535".into());
        }
        let mut settings = FixedList::new();
        flatten_set("", t.set, &mut settings)?;
        if settings.is_empty() && !t.end {
            return Err("this trigger does nothing: add `end = true` or a `set` table".into());
        }
        Ok(Trigger {
            id: t.id.unwrap_or(0),
            at,
            end: t.end,
            settings,
        })
    }
}

impl From<Trigger> for TriggerToml {
    fn from(t: Trigger) -> Self {
        let mut set = toml::Table::new();
        for s in t.settings.as_slice() {
            set.insert(s.path(), s.value());
        }
        let (keystroke, elapsed_ms, beat) = match t.at {
            TriggerAt::Keystroke(n) => (Some(n), None, None),
            TriggerAt::Elapsed(ms) => (None, Some(ms), None),
            TriggerAt::Beat(n) => (None, None, Some(n)),
        };
        TriggerToml {
            id: (t.id != 0).then_some(t.id),
            keystroke,
            elapsed_ms,
            beat,
            end: t.end,
            set,
        }
    }
}

/// When a trial ends, besides triggers with `end = true`; the first reached wins.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrialEnd {
    /// After this many keystrokes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keystrokes: Option<u32>,
    /// After this many metronome beats (rests included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beats: Option<u32>,
    /// After this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<Ms>,
}

impl TrialEnd {
    /// True once any end condition is met. **RT-safe.**
    pub fn reached(&self, keystrokes: u32, elapsed_us: u64, beats: u32) -> bool {
        self.keystrokes.is_some_and(|n| keystrokes >= n)
            || self.beats.is_some_and(|n| beats >= n)
            || self.duration_ms.is_some_and(|d| elapsed_us >= d.us())
    }

    fn is_empty(&self) -> bool {
        self.keystrokes.is_none() && self.beats.is_none() && self.duration_ms.is_none()
    }
}

/// Where sound goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    /// MIDI messages to a tone generator.
    #[default]
    Midi,
    /// Audio rendered directly (JACK), onsets sample-accurate.
    Audio,
}

/// What audio output sounds like.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sound {
    /// A short click (note and velocity scale its level only).
    #[default]
    Click,
    /// A sine tone at the note's equal-tempered pitch (A4 = 69 = 440 Hz)
    /// for the note's length.
    Tone,
}

/// Output settings.
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Output {
    /// MIDI or audio.
    pub device: Device,
    /// Audio only: click or tone.
    pub sound: Sound,
    /// Audio only: level of a velocity-127 note, dBFS (≤ 0).
    pub level_dbfs: f32,
}

impl Default for Output {
    fn default() -> Self {
        Self {
            device: Device::Midi,
            sound: Sound::Click,
            level_dbfs: -6.0,
        }
    }
}

/// Where keystrokes come from (`[input] source`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputSource {
    /// Note-ons of a MIDI keyboard or drum pad.
    #[default]
    Midi,
    /// Tap onsets detected in an audio input (a contact microphone, a
    /// piezo, a pad's audio): [`crate::onset`].
    Audio,
    /// MIDI keystrokes, each paired with the onset of its sound in an
    /// audio input ([`crate::pairing`]): the pad's delay per tap, and
    /// hits without sound or sound without hits flagged.
    #[serde(rename = "midi+audio")]
    MidiAudio,
}

impl InputSource {
    /// True when the backend needs an audio input.
    pub fn has_audio(self) -> bool {
        self != InputSource::Midi
    }
}

impl<'de> Deserialize<'de> for InputSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "midi" => Ok(InputSource::Midi),
            "audio" => Ok(InputSource::Audio),
            "midi+audio" => Ok(InputSource::MidiAudio),
            other => Err(de::Error::custom(format!(
                "input.source must be \"midi\", \"audio\" or \"midi+audio\", got \"{other}\""
            ))),
        }
    }
}

impl std::fmt::Display for InputSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InputSource::Midi => "midi",
            InputSource::Audio => "audio",
            InputSource::MidiAudio => "midi+audio",
        })
    }
}

/// `[input]`: where keystrokes come from and, for audio, the onset
/// detector's settings (docs/TAP.md §10).
#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Input {
    /// MIDI or audio.
    pub source: InputSource,
    /// Audio: the envelope's rise above the noise floor that is a tap, dB.
    pub threshold_db: f64,
    /// Audio: no second tap within this long of a tap's onset, ms.
    pub refractory_ms: f64,
    /// Audio: the MIDI channel (1–16) an audio tap plays as, for the
    /// feedback's key ranges and the data's `channel` column.
    pub channel: u8,
    /// Audio: the note (0–127) an audio tap plays as.
    pub note: u8,
}

impl Default for Input {
    fn default() -> Self {
        let o = crate::onset::OnsetSettings::default();
        Input {
            source: InputSource::Midi,
            threshold_db: o.threshold_db,
            refractory_ms: o.refractory_ms,
            channel: 1,
            note: 60,
        }
    }
}

impl Input {
    /// The detector's settings.
    pub fn onset_settings(&self) -> crate::onset::OnsetSettings {
        crate::onset::OnsetSettings {
            threshold_db: self.threshold_db,
            refractory_ms: self.refractory_ms,
        }
    }

    fn is_default(&self) -> bool {
        *self == Input::default()
    }
}

trait Check {
    fn check(&self) -> std::result::Result<(), String>;
}
impl Check for Input {
    fn check(&self) -> std::result::Result<(), String> {
        self.onset_settings()
            .check()
            .map_err(|e| e.message().to_string())?;
        if !(1..=16).contains(&self.channel) {
            return Err(format!(
                "input.channel must be a MIDI channel 1–16, got {}",
                self.channel
            ));
        }
        if self.note > 127 {
            return Err(format!("input.note must be 0–127, got {}", self.note));
        }
        Ok(())
    }
}
impl Check for Feedback {
    fn check(&self) -> std::result::Result<(), String> {
        Feedback::check(self)
    }
}
impl Check for Metronome {
    fn check(&self) -> std::result::Result<(), String> {
        Metronome::check(self)
    }
}
impl Check for Masking {
    fn check(&self) -> std::result::Result<(), String> {
        Masking::check(self)
    }
}
impl Check for Output {
    fn check(&self) -> std::result::Result<(), String> {
        if !(self.level_dbfs <= 0.0 && self.level_dbfs >= -120.0) {
            return Err(format!(
                "output level_dbfs must be −120…0, got {}",
                self.level_dbfs
            ));
        }
        Ok(())
    }
}

// Runs the cross-field checks inside deserialization so the TOML parser
// attaches the table's span (line/column) to the error.
fn checked<'de, D: Deserializer<'de>, T: Deserialize<'de> + Check>(
    d: D,
) -> std::result::Result<T, D::Error> {
    let v = T::deserialize(d)?;
    v.check().map_err(de::Error::custom)?;
    Ok(v)
}

fn off_first() -> Feedback {
    Feedback {
        on: false,
        ..Feedback::default()
    }
}

/// One trial type: everything the engine needs to run it.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, recorded in data files.
    #[serde(default)]
    pub name: String,
    /// Free text for the researcher.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// First feedback channel (off if the table is absent).
    #[serde(default = "off_first", deserialize_with = "checked")]
    pub feedback: Feedback,
    /// Second feedback channel (off if the table is absent).
    #[serde(default = "Feedback::off_second", deserialize_with = "checked")]
    pub feedback2: Feedback,
    /// Metronome (off if the table is absent).
    #[serde(default = "Metronome::off", deserialize_with = "checked")]
    pub metronome: Metronome,
    /// Masking noise (off if the table is absent).
    #[serde(default = "Masking::off", deserialize_with = "checked")]
    pub masking: Masking,
    /// Output device.
    #[serde(default, deserialize_with = "checked")]
    pub output: Output,
    /// Where keystrokes come from (MIDI if the table is absent).
    #[serde(
        default,
        deserialize_with = "checked",
        skip_serializing_if = "Input::is_default"
    )]
    pub input: Input,
    /// End conditions.
    #[serde(default)]
    pub end: TrialEnd,
    /// Triggers (`[[trigger]]`), in file order (at most [`MAX_TRIGGERS`];
    /// the engine copies them into a fixed table at setup).
    #[serde(default, rename = "trigger", skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<Trigger>,
}

impl Experiment {
    /// Parses and validates an experiment file's text.
    ///
    /// # Errors
    /// [`ErrorKind::Syntax`] for bad TOML, [`ErrorKind::Invalid`] for
    /// unknown keys, out-of-range values and broken rules; each with the
    /// line and column (1-based) when the problem has a place in the file.
    pub fn from_toml(text: &str) -> Result<Self> {
        let locate = |kind: ErrorKind, e: toml::de::Error| {
            let msg = e.message().trim().to_string();
            match e.span() {
                Some(s) => Error::at_byte(kind, text, s.start, msg),
                None => Error::new(kind, msg),
            }
        };
        // Syntax first, so a typo in TOML is not reported as a bad value.
        text.parse::<toml::Table>()
            .map_err(|e| locate(ErrorKind::Syntax, e))?;
        let mut e: Experiment = toml::from_str(text).map_err(|e| locate(ErrorKind::Invalid, e))?;
        if e.triggers.len() > MAX_TRIGGERS {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "{} triggers: at most {MAX_TRIGGERS} are allowed per experiment",
                    e.triggers.len()
                ),
            ));
        }
        // Default trigger ids: position in the file.
        for (i, t) in e.triggers.iter_mut().enumerate() {
            if t.id == 0 {
                t.id = (i + 1) as u16;
            }
        }
        if e.end.is_empty() && !e.triggers.iter().any(|t| t.end) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "this trial never ends: add an [end] table (keystrokes, beats or duration_ms) or a [[trigger]] with end = true",
            ));
        }
        Ok(e)
    }

    /// Reads and parses an experiment file.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if it cannot be read; else as [`Experiment::from_toml`].
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, &e))?;
        Self::from_toml(&text)
    }

    /// The file text for this experiment (parses back to an equal value).
    ///
    /// # Errors
    /// [`ErrorKind::Format`] if serialization fails (not expected).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::new(ErrorKind::Format, e.to_string()))
    }

    /// The parameter block a trial starts with.
    pub fn params(&self) -> Params {
        Params {
            feedback: [self.feedback, self.feedback2],
            metronome: self.metronome,
            masking: self.masking,
        }
    }

    /// A few lines describing the trial for `firmtime tap check`, in words
    /// (no file syntax, no program names).
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let name = if self.name.is_empty() {
            "(unnamed)"
        } else {
            &self.name
        };
        let _ = writeln!(s, "experiment: {name}");
        for (label, f) in [("feedback", &self.feedback), ("feedback2", &self.feedback2)] {
            if f.on {
                let _ = writeln!(
                    s,
                    "{label}: channel {}, answers {}; pitch {}; velocity {}; length {}; delay {}",
                    f.channel.get(),
                    f.keys,
                    f.pitch,
                    f.velocity,
                    f.duration,
                    f.delay
                );
            } else {
                let _ = writeln!(s, "{label}: off");
            }
        }
        let m = &self.metronome;
        if m.on {
            let _ = writeln!(
                s,
                "metronome: {} per beat ({:.1} bpm), channel {}, note {}, velocity {}, length {}, pattern: {}",
                m.mspb,
                60_000.0 / m.mspb.ms_f64(),
                m.channel.get(),
                m.note.get(),
                m.velocity.get(),
                m.length_ms,
                crate::params::pattern_words(m.pattern.as_slice())
            );
        } else {
            let _ = writeln!(s, "metronome: off at start");
        }
        let i = &self.input;
        if i.source == InputSource::MidiAudio {
            let _ = writeln!(
                s,
                "input: MIDI keystrokes, each paired with its sound's onset in an audio input (onset {} dB \
                 above the noise floor, {} ms refractory): pad delay per tap, hits without sound and \
                 sounds without hits flagged",
                i.threshold_db, i.refractory_ms
            );
        }
        if i.source == InputSource::Audio {
            let _ = writeln!(
                s,
                "input: taps detected in sound from an audio input (onset {} dB above the noise floor, \
                 {} ms refractory), each a keystroke of note {} on channel {}",
                i.threshold_db, i.refractory_ms, i.note, i.channel
            );
        }
        let k = &self.masking;
        let _ = writeln!(
            s,
            "masking: {}",
            match (k.on, k.source) {
                (false, _) => "off".to_string(),
                (true, crate::params::MaskSource::Audio) => {
                    format!(
                        "{} noise rendered as audio at {} dBFS",
                        k.noise, k.level_dbfs
                    )
                }
                (true, crate::params::MaskSource::Midi) => format!(
                    "{} (channel {}, note {}, velocity {})",
                    k.source,
                    k.channel.get(),
                    k.note.get(),
                    k.velocity.get()
                ),
            }
        );
        let _ = writeln!(
            s,
            "output: {}",
            match self.output.device {
                Device::Midi => "MIDI messages to a tone generator".to_string(),
                Device::Audio => format!(
                    "audio rendered by firmtime ({} at {} dBFS for a velocity-127 note)",
                    match self.output.sound {
                        Sound::Click => "clicks",
                        Sound::Tone => "tones at each note's pitch",
                    },
                    self.output.level_dbfs
                ),
            }
        );
        let mut ends = Vec::new();
        if let Some(n) = self.end.keystrokes {
            ends.push(format!("{n} keystrokes"));
        }
        if let Some(n) = self.end.beats {
            ends.push(format!("{n} beats"));
        }
        if let Some(d) = self.end.duration_ms {
            ends.push(span(d));
        }
        for t in self.triggers.iter().filter(|t| t.end) {
            ends.push(format!("trigger {}", t.id));
        }
        let _ = writeln!(s, "ends at: {}", ends.join(" or "));
        for t in &self.triggers {
            let at = match t.at {
                TriggerAt::Keystroke(n) => format!("keystroke {n}"),
                TriggerAt::Elapsed(d) => span(d),
                TriggerAt::Beat(n) => format!("beat {n}"),
            };
            let mut what: Vec<String> = t
                .settings
                .as_slice()
                .iter()
                .map(ToString::to_string)
                .collect();
            if t.end {
                what.push("the trial ends".into());
            }
            let _ = writeln!(s, "trigger {} at {at}: {}", t.id, what.join("; "));
        }
        s
    }
}

/// A time in words: whole seconds as `60 s` (or `2 min 30 s` from two
/// minutes on), anything else in ms.
fn span(d: Ms) -> String {
    let us = d.us();
    if us < 1_000_000 || us % 1_000_000 != 0 {
        return d.to_string();
    }
    let s = us / 1_000_000;
    match (s / 60, s % 60) {
        (m, 0) if m >= 2 => format!("{m} min"),
        (m, r) if m >= 2 => format!("{m} min {r} s"),
        _ => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_speaks_words_not_file_syntax() {
        let text = "name = \"x\"\n[feedback]\npitch = { mode = \"same\" }\n\
                    delay = { mode = \"uniform\", min_ms = 100, max_ms = 300 }\n\
                    [output]\ndevice = \"audio\"\n[masking]\nsource = \"audio\"\n\
                    [end]\nduration_ms = 150000\n[[trigger]]\nkeystroke = 5\n\
                    set.feedback.delay = { mode = \"none\" }\nset.metronome.on = false\n";
        let s = Experiment::from_toml(text).unwrap().summary();
        for words in [
            "pitch the key played",
            "delay random, uniform between 100 ms and 300 ms",
            "output: audio rendered by firmtime (clicks",
            "masking: white noise rendered as audio",
            "ends at: 2 min 30 s",
            "trigger 1 at keystroke 5: feedback delay → none (at once); metronome → stops",
        ] {
            assert!(s.contains(words), "{words:?} missing from:\n{s}");
        }
        for syntax in ["{", "mode =", "Audio", "Some(", "None"] {
            assert!(!s.contains(syntax), "{syntax:?} in:\n{s}");
        }
    }

    #[test]
    fn minimal_file_parses_and_round_trips() {
        let text = "name = \"x\"\n[feedback]\ndelay = { mode = \"fixed\", ms = 200 }\n[end]\nkeystrokes = 10\n[[trigger]]\nkeystroke = 5\nset.feedback.delay = { mode = \"none\" }\n";
        let e = Experiment::from_toml(text).unwrap();
        assert!(e.feedback.on);
        assert!(!e.feedback2.on);
        assert_eq!(e.triggers.len(), 1);
        assert_eq!(e.triggers[0].id, 1);
        let back = Experiment::from_toml(&e.to_toml().unwrap()).unwrap();
        assert_eq!(back, e);
    }
    /// Regression: an empty random set was accepted (the docs say 1–16
    /// notes) and the feedback then played the input note.
    #[test]
    fn empty_random_pitch_set_is_refused_in_feedback_and_in_a_trigger() {
        let fb = "[feedback]\npitch = { mode = \"random\", notes = [] }\n[end]\nkeystrokes = 3\n";
        let e = Experiment::from_toml(fb).unwrap_err().to_string();
        assert!(
            e.contains("pitch mode \"random\" needs 1–16 notes, got none"),
            "{e}"
        );
        assert!(e.contains("line 2"), "located: {e}");
        let trig = "[end]\nkeystrokes = 3\n[[trigger]]\nkeystroke = 1\nset.feedback.pitch = { mode = \"random\", notes = [] }\n";
        let e = Experiment::from_toml(trig).unwrap_err().to_string();
        assert!(e.contains("needs 1–16 notes"), "{e}");
        let ok = "[feedback]\npitch = { mode = \"random\", notes = [60] }\n[end]\nkeystrokes = 3\n";
        assert!(Experiment::from_toml(ok).is_ok());
    }
}
