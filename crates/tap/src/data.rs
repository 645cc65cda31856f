//! Trial data files: the event CSV and the JSON sidecar (format in `docs/TAP.md`).
//!
//! The CSV has a header row and one row per event, comma-separated, no
//! quoting, empty fields for "not applicable", so `pandas.read_csv(path)`
//! and R's `read.csv(path)` load it without options; what their default
//! writers produce from it reads back ([`read_csv`]). Files are written
//! atomically: a temporary file in the same directory, fsync, rename, fsync
//! of the directory — a crash leaves either the old file or the whole new one.
//!
//! # Real-time contract
//!
//! [`Event`] is `Copy` so the engine can store events in preallocated
//! memory during a trial; everything that formats or writes runs after it.

use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::setup::RtConditions;
use firmtime_rt::system::Provenance;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of the CSV and sidecar formats; bumped on any incompatible change.
pub const FORMAT_VERSION: u32 = 1;

/// The CSV header.
pub const CSV_HEADER: &str = "kind,index,intended_us,actual_us,channel,note,velocity,on";

/// What an event is.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A keystroke (or key release) from the subject.
    Input,
    /// Output of the first feedback channel.
    Feedback,
    /// Output of the second feedback channel.
    Feedback2,
    /// A metronome note.
    Metronome,
    /// Masking noise on/off.
    Masking,
    /// A trigger fired.
    Trigger,
    /// The trial ended (`index` 0: by its end conditions or a trigger; 1: interrupted).
    End,
    /// The onset of a tap's sound beside MIDI keystrokes (`[input] source =
    /// "midi+audio"`): `index` is the keystroke it pairs with, 0 for none.
    Sound,
}

impl EventKind {
    /// The CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Input => "input",
            EventKind::Feedback => "feedback",
            EventKind::Feedback2 => "feedback2",
            EventKind::Metronome => "metronome",
            EventKind::Masking => "masking",
            EventKind::Trigger => "trigger",
            EventKind::End => "end",
            EventKind::Sound => "sound",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "input" => EventKind::Input,
            "feedback" => EventKind::Feedback,
            "feedback2" => EventKind::Feedback2,
            "metronome" => EventKind::Metronome,
            "masking" => EventKind::Masking,
            "trigger" => EventKind::Trigger,
            "end" => EventKind::End,
            "sound" => EventKind::Sound,
            _ => return None,
        })
    }
}

/// A MIDI note event's content.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NoteData {
    /// Channel 1–16.
    pub channel: u8,
    /// Note 0–127.
    pub note: u8,
    /// Velocity 0–127 (0 with `on = false` for a release).
    pub velocity: u8,
    /// Note on (true) or off (false).
    pub on: bool,
}

/// One row of the trial CSV. Times are µs since the trial started.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Event {
    /// What it is.
    pub kind: EventKind,
    /// Input and feedback: the keystroke number (1-based); metronome: the
    /// beat number (1-based); trigger: its id; masking/end: 0.
    pub index: u32,
    /// When it was scheduled (outputs and triggers); `None` for input.
    pub intended_us: Option<i64>,
    /// When it happened (input timestamp, or output sent).
    pub actual_us: i64,
    /// The note, for MIDI events; `None` for triggers and end.
    pub note: Option<NoteData>,
}

impl Event {
    /// The CSV row (no newline).
    pub fn csv_row(&self) -> String {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::with_capacity(48));
        // Writing to memory cannot fail.
        let _ = w.serialize(Row::of(self));
        let mut s = String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default();
        s.truncate(s.trim_end().len());
        s
    }
}

/// One CSV row as written: the header is these field names.
#[derive(Serialize)]
struct Row {
    kind: &'static str,
    index: u32,
    intended_us: Option<i64>,
    actual_us: i64,
    channel: Option<u8>,
    note: Option<u8>,
    velocity: Option<u8>,
    on: Option<u8>,
}

impl Row {
    fn of(e: &Event) -> Row {
        Row {
            kind: e.kind.as_str(),
            index: e.index,
            intended_us: e.intended_us,
            actual_us: e.actual_us,
            channel: e.note.map(|n| n.channel),
            note: e.note.map(|n| n.note),
            velocity: e.note.map(|n| n.velocity),
            on: e.note.map(|n| u8::from(n.on)),
        }
    }
}

/// Writes the events as CSV (header first) into `w`.
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv<W: std::io::Write>(w: W, events: &[Event]) -> Result<()> {
    write_csv_certified(w, events, &[])
}

/// As [`write_csv`], with the timing certificate's rows (kind
/// `certificate`, [`crate::certificate::CertificateRow`]) right after the
/// header, before the events.
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv_certified<W: std::io::Write>(
    w: W,
    events: &[Event],
    certificate: &[crate::certificate::CertificateRow],
) -> Result<()> {
    let io =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("cannot write CSV: {e}"));
    let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(w);
    w.write_record(CSV_HEADER.split(',')).map_err(|e| io(&e))?;
    for r in certificate {
        w.write_record(r.fields(COLUMNS.len()))
            .map_err(|e| io(&e))?;
    }
    for e in events {
        w.serialize(Row::of(e)).map_err(|e| io(&e))?;
    }
    w.flush().map_err(|e| io(&e))
}

/// The CSV header of a trial whose taps came from an audio input
/// (`[input] source = "audio"`): [`CSV_HEADER`] and four more columns,
/// filled on `input` rows of audio taps, empty elsewhere.
pub const CSV_HEADER_AUDIO: &str =
    "kind,index,intended_us,actual_us,channel,note,velocity,on,source,onset_frame,peak_dbfs,confidence_db,pad_delay_us,flag";

/// The extra columns of one row of [`CSV_HEADER_AUDIO`] (all empty: `None`).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct RowExtra {
    /// `audio` (a tap from sound), `midi` (a MIDI press of a `midi+audio` trial).
    pub source: Option<&'static str>,
    /// The onset frame of the tap's sound.
    pub onset_frame: Option<u64>,
    /// Its peak, dBFS.
    pub peak_dbfs: Option<f32>,
    /// The detector's confidence, dB.
    pub confidence_db: Option<f32>,
    /// MIDI − sound, µs (a paired MIDI press).
    pub pad_delay_us: Option<i64>,
    /// `no_sound` (a MIDI press without a sound), `no_midi` (a sound without a press).
    pub flag: Option<&'static str>,
}

/// What the audio input's detector recorded of one tap (the extra columns
/// of [`CSV_HEADER_AUDIO`]).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AudioTapData {
    /// The keystroke it is (the `index` of its `input` row).
    pub keystroke: u32,
    /// The frame of its onset (JACK's frame counter).
    pub onset_frame: u64,
    /// Its peak level, dBFS.
    pub peak_dbfs: f32,
    /// The envelope's peak above the noise floor, dB.
    pub confidence_db: f32,
}

impl From<crate::engine::AudioTap> for AudioTapData {
    fn from(t: crate::engine::AudioTap) -> Self {
        AudioTapData {
            keystroke: t.keystroke,
            onset_frame: t.onset_frame,
            peak_dbfs: t.peak_dbfs,
            confidence_db: t.confidence_db,
        }
    }
}

/// Writes the events of an audio-input trial as CSV with the columns of
/// [`CSV_HEADER_AUDIO`]: an `input` note-on whose keystroke is in `taps`
/// gets `source` = `audio`, its onset frame, peak (dBFS, 0.1 dB) and
/// confidence (dB, 0.1 dB).
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv_audio<W: std::io::Write>(
    w: W,
    events: &[Event],
    taps: &[AudioTapData],
) -> Result<()> {
    let by_key: std::collections::HashMap<u32, &AudioTapData> =
        taps.iter().map(|t| (t.keystroke, t)).collect();
    let extras: Vec<RowExtra> = events
        .iter()
        .map(|e| {
            let tap = (e.kind == EventKind::Input && e.note.is_some_and(|n| n.on))
                .then(|| by_key.get(&e.index).copied())
                .flatten();
            tap.map_or_else(RowExtra::default, |t| RowExtra {
                source: Some("audio"),
                onset_frame: Some(t.onset_frame),
                peak_dbfs: Some(t.peak_dbfs),
                confidence_db: Some(t.confidence_db),
                ..RowExtra::default()
            })
        })
        .collect();
    write_csv_extra(w, events, &extras)
}

/// Writes `events` as CSV with the columns of [`CSV_HEADER_AUDIO`], row
/// `i`'s extra columns from `extras[i]` (missing: empty).
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv_extra<W: std::io::Write>(
    w: W,
    events: &[Event],
    extras: &[RowExtra],
) -> Result<()> {
    write_csv_extra_certified(w, events, extras, &[])
}

/// As [`write_csv_extra`], with the timing certificate's rows right after
/// the header (their extra columns empty).
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv_extra_certified<W: std::io::Write>(
    w: W,
    events: &[Event],
    extras: &[RowExtra],
    certificate: &[crate::certificate::CertificateRow],
) -> Result<()> {
    let io =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("cannot write CSV: {e}"));
    let mut w = csv::Writer::from_writer(w);
    w.write_record(CSV_HEADER_AUDIO.split(','))
        .map_err(|e| io(&e))?;
    let width = CSV_HEADER_AUDIO.split(',').count();
    for r in certificate {
        w.write_record(r.fields(width)).map_err(|e| io(&e))?;
    }
    for (i, e) in events.iter().enumerate() {
        let x = extras.get(i).copied().unwrap_or_default();
        let row = Row::of(e);
        let r = [
            row.kind.to_string(),
            row.index.to_string(),
            row.intended_us.map(|v| v.to_string()).unwrap_or_default(),
            row.actual_us.to_string(),
            row.channel.map(|v| v.to_string()).unwrap_or_default(),
            row.note.map(|v| v.to_string()).unwrap_or_default(),
            row.velocity.map(|v| v.to_string()).unwrap_or_default(),
            row.on.map(|v| v.to_string()).unwrap_or_default(),
            x.source.unwrap_or_default().to_string(),
            x.onset_frame.map(|v| v.to_string()).unwrap_or_default(),
            x.peak_dbfs.map(|v| format!("{v:.1}")).unwrap_or_default(),
            x.confidence_db
                .map(|v| format!("{v:.1}"))
                .unwrap_or_default(),
            x.pad_delay_us.map(|v| v.to_string()).unwrap_or_default(),
            x.flag.unwrap_or_default().to_string(),
        ];
        w.write_record(&r).map_err(|e| io(&e))?;
    }
    w.flush().map_err(|e| io(&e))
}

/// The columns of [`CSV_HEADER`], in order.
const COLUMNS: [&str; 8] = [
    "kind",
    "index",
    "intended_us",
    "actual_us",
    "channel",
    "note",
    "velocity",
    "on",
];

/// 1-based character column where field `field` (0-based) of `line`
/// begins, quotes respected.
fn field_column(line: &str, field: usize) -> usize {
    let (mut quoted, mut seen) = (false, 0);
    for (i, ch) in line.chars().enumerate() {
        if seen == field {
            return i + 1;
        }
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => seen += 1,
            _ => {}
        }
    }
    line.chars().count() + 1
}

/// A field's text as "not applicable": empty, or the missing-value
/// spellings pandas and R write (`NA`, `NaN`).
fn missing(s: &str) -> bool {
    matches!(s, "" | "NA" | "NaN" | "nan" | "<NA>")
}

/// A whole number as firmtime, pandas (`5000000.0`, a column with a gap
/// becomes floating point) or R (`5e+06`) writes it.
fn whole(s: &str) -> Option<i64> {
    if let Ok(v) = s.parse::<i64>() {
        return Some(v);
    }
    let f: f64 = s.parse().ok()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// Reads a trial CSV: the file firmtime wrote, or the same data written
/// back by pandas (`to_csv`, with or without its index), R (`write.csv`,
/// `readr::write_csv`) or a spreadsheet: columns are found by name, in any
/// order, other columns ignored; fields may be quoted; whole numbers may
/// be written as floating point (`5000000.0`, `5e+06`); `NA`/`NaN` mean an
/// empty field; `on` may be `TRUE`/`FALSE`.
///
/// # Errors
/// [`ErrorKind::Format`] with the line and column if the header lacks a
/// column or a row is malformed.
pub fn read_csv(text: &str) -> Result<Vec<Event>> {
    read_csv_certified(text).map(|(events, _)| events)
}

/// As [`read_csv`], and the rows of the timing certificate (kind
/// `certificate`, written right after the header since issue 30; none in
/// older files). [`read_csv`] leaves them out: they are no events.
///
/// # Errors
/// As [`read_csv`]; a `certificate` row whose `index`, `actual_us` or `on`
/// is not a number, with its line and column.
pub fn read_csv_certified(
    text: &str,
) -> Result<(Vec<Event>, Vec<crate::certificate::CertificateRow>)> {
    if text.trim().is_empty() {
        return Err(Error::new(
            ErrorKind::Format,
            "empty file: expected a trial CSV header",
        ));
    }
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header = rdr
        .headers()
        .map_err(|e| Error::at(ErrorKind::Format, 1, 1, format!("unreadable header: {e}")))?
        .clone();
    let mut at = [0usize; 8];
    let mut absent = Vec::new();
    for (slot, name) in at.iter_mut().zip(COLUMNS) {
        match header.iter().position(|h| h == name) {
            Some(i) => *slot = i,
            None => absent.push(format!("`{name}`")),
        }
    }
    if !absent.is_empty() {
        let first = text.lines().next().unwrap_or("");
        return Err(Error::at(
            ErrorKind::Format,
            1,
            1,
            format!(
                "not a firmtime trial CSV: no column {} in header `{first}` (expected `{CSV_HEADER}`; \
                 columns may come in any order, others are ignored)",
                absent.join(", ")
            ),
        ));
    }
    let mut out = Vec::new();
    let mut certificate = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            Error::at(
                ErrorKind::Format,
                line.max(1),
                1,
                format!("unreadable row: {e}"),
            )
        })?;
        let (n, byte) = rec
            .position()
            .map_or((0, 0), |p| (p.line() as usize, p.byte() as usize));
        let raw = text
            .get(byte..)
            .and_then(|t| t.lines().next())
            .unwrap_or("")
            .trim_end();
        if rec.iter().all(str::is_empty) {
            continue;
        }
        if rec.len() != header.len() {
            return Err(Error::at(
                ErrorKind::Format,
                n,
                1,
                format!(
                    "expected {} fields (as the header has), got {} in `{raw}`",
                    header.len(),
                    rec.len()
                ),
            ));
        }
        let field = |c: usize| rec.get(at[c]).unwrap_or("");
        let bad = |c: usize, what: &str| {
            Error::at(
                ErrorKind::Format,
                n,
                field_column(raw, at[c]),
                format!("{what} in `{raw}`"),
            )
        };
        if field(0) == "certificate" {
            let check = whole(field(1))
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| bad(1, "a certificate row's index is not a check number"))?;
            let expected_us = if missing(field(2)) {
                None
            } else {
                Some(whole(field(2)).ok_or_else(|| bad(2, "intended_us is not a whole number"))?)
            };
            let measured_us =
                whole(field(3)).ok_or_else(|| bad(3, "actual_us is not a whole number"))?;
            let passed = match field(7) {
                "1" | "TRUE" | "True" | "true" => true,
                "0" | "FALSE" | "False" | "false" => false,
                s => match whole(s) {
                    Some(1) => true,
                    Some(0) => false,
                    _ => {
                        return Err(bad(
                            7,
                            "a certificate row's on must be 1 (passed) or 0 (failed)",
                        ))
                    }
                },
            };
            certificate.push(crate::certificate::CertificateRow {
                check,
                expected_us,
                measured_us,
                passed,
            });
            continue;
        }
        let kind = EventKind::parse(field(0)).ok_or_else(|| {
            bad(
                0,
                "unknown kind (input, feedback, feedback2, metronome, masking, trigger, end, sound or certificate)",
            )
        })?;
        let index = whole(field(1))
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| bad(1, "index is not a whole number 0–4294967295"))?;
        let intended_us = if missing(field(2)) {
            None
        } else {
            Some(whole(field(2)).ok_or_else(|| bad(2, "intended_us is not a whole number"))?)
        };
        let actual_us = whole(field(3)).ok_or_else(|| bad(3, "actual_us is not a whole number"))?;
        let note = if (4..8).all(|c| missing(field(c))) {
            None
        } else {
            let num = |c: usize, max: u8| -> Result<u8> {
                let v = match (c, field(c)) {
                    (7, "TRUE" | "True" | "true") => Some(1),
                    (7, "FALSE" | "False" | "false") => Some(0),
                    (_, s) => whole(s),
                };
                v.and_then(|v| u8::try_from(v).ok())
                    .filter(|&v| v <= max)
                    .ok_or_else(|| bad(c, &format!("{} must be a number 0–{max}", COLUMNS[c])))
            };
            Some(NoteData {
                channel: num(4, 16)?,
                note: num(5, 127)?,
                velocity: num(6, 127)?,
                on: num(7, 1)? == 1,
            })
        };
        out.push(Event {
            kind,
            index,
            intended_us,
            actual_us,
            note,
        });
    }
    Ok((out, certificate))
}

/// The self-checks stored with every trial.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfChecks {
    /// Mean interval between runs of the output routine, µs (FTAP's diagnostic).
    pub output_interval_mean_us: f64,
    /// Largest such interval, µs.
    pub output_interval_max_us: u64,
    /// Outputs whose actual − intended exceeded `late_threshold_us`.
    pub late_outputs: u64,
    /// The lateness threshold, µs.
    pub late_threshold_us: u64,
    /// Audio xruns during the trial (JACK); 0 for MIDI-only runs.
    pub xruns: u64,
    /// JACK cycles dropped during the trial, seen as gaps in the frame
    /// counter: PipeWire's JACK never reports xruns, this counts them there
    /// (jackd's show in both). 0 for other backends and in older sidecars.
    #[serde(default)]
    pub frame_gaps: u64,
    /// Input bytes or events lost to full buffers.
    pub input_overruns: u64,
    /// Events dropped because the trial's event storage was full.
    pub events_dropped: u64,
    /// Input stamped before the trial's start (a keyboard already playing
    /// when the trial was started) and releases of keys pressed before it:
    /// dropped, not trial data (no row, no feedback, no keystroke count).
    /// 0 in older sidecars.
    #[serde(default)]
    pub input_before_start: u64,
    /// Input stamped after the trial's end (a tap after the last keystroke
    /// the end condition counts, after the duration, or while the last
    /// outputs were drained), audio onsets included: dropped, not trial
    /// data (no row, no feedback). 0 in older sidecars.
    #[serde(default)]
    pub input_after_end: u64,
    /// Malformed input bytes or events (stray data, truncated messages): a
    /// keystroke may be among them. 0 in older sidecars.
    #[serde(default)]
    pub input_malformed: u64,
    /// Outputs the backend refused (its queue full, or gone): never went
    /// out, not rows of the data. 0 in older sidecars.
    #[serde(default)]
    pub outputs_refused: u64,
    /// Outputs handed over whose report never came back before the end:
    /// left out of the data. 0 in older sidecars.
    #[serde(default)]
    pub outputs_unreported: u64,
    /// The late outputs by cause, most first ([`crate::late`]); empty when
    /// none was late, and in older sidecars.
    #[serde(default)]
    pub late_causes: Vec<crate::late::LateCause>,
    /// Of the late outputs, those with a cause (not `unknown` or `not_traced`).
    #[serde(default)]
    pub late_explained: u64,
    /// What the explaining trace of the engine's loop covered; `null` when
    /// it did not run (not root, `--no-explain`) and in older sidecars.
    #[serde(default)]
    pub late_trace: Option<firmtime_rt::outliers::TraceCoverage>,
}

impl SelfChecks {
    /// These checks with the causes of the late outputs from `late`.
    pub fn with_late(self, late: crate::late::LateReport) -> SelfChecks {
        SelfChecks {
            late_causes: late.causes,
            late_explained: late.explained,
            late_trace: late.trace,
            ..self
        }
    }

    /// One line naming the causes of the late outputs ([`crate::late::summary`]).
    pub fn late_summary(&self) -> String {
        crate::late::summary(
            &self.late_causes,
            self.late_outputs,
            self.late_threshold_us,
            self.late_explained,
        )
    }
}

/// How a trial's input was lost: the sidecar's `input_lost`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputLost {
    /// `port_disconnected`, `client_gone`, `server_shutdown`,
    /// `device_closed`, `device_error` or `disconnected`
    /// ([`firmtime_midi::LossCause::key`]).
    pub cause: String,
    /// When the backend learnt of it, µs since the trial's start (negative:
    /// before it, the trial then ended at once).
    pub at_us: i64,
    /// The cause in words, with the ports or device concerned when known.
    pub words: String,
    /// The OS error number of a `device_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

impl InputLost {
    /// The record of `loss` in a trial that started at `start_ns`;
    /// `detail`: the backend's words ([`firmtime_midi::MidiBackend::describe_input_loss`]).
    pub fn of(loss: firmtime_midi::InputLoss, start_ns: u64, detail: Option<String>) -> Self {
        let words = match detail {
            Some(d) => format!("{}: {d}", loss.cause.words()),
            None => loss.cause.words(),
        };
        InputLost {
            cause: loss.cause.key().to_string(),
            at_us: (i128::from(loss.t_ns) - i128::from(start_ns)).div_euclid(1000) as i64,
            words,
            errno: match loss.cause {
                firmtime_midi::LossCause::DeviceError(e) => Some(e),
                _ => None,
            },
        }
    }
}

/// The JSON sidecar written next to each trial CSV.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sidecar {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Subject identifier.
    pub subject: String,
    /// Session number.
    pub session: u32,
    /// Trial number within the session (1-based).
    pub trial: u32,
    /// The experiment file's name.
    pub experiment_file: String,
    /// The experiment file's full text, as run.
    pub experiment_toml: String,
    /// The randomization seed used (feedback randomness, trial order).
    pub seed: u64,
    /// firmtime version, command line, machine, start and end times.
    pub provenance: Provenance,
    /// The RT conditions obtained for the engine thread.
    pub rt: Option<RtConditions>,
    /// Self-checks.
    pub self_checks: SelfChecks,
    /// True if the trial was interrupted (a stop signal: SIGINT, SIGTERM or
    /// SIGHUP; a disconnection; or the loss of its input) before its end
    /// condition.
    pub incomplete: bool,
    /// How the trial's input was lost, when the trial ended for that (a
    /// JACK port disconnected, its client gone, the server shut down, a
    /// device error or end of file); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_lost: Option<InputLost>,
    /// The signal that stopped an interrupted trial (`SIGINT`, `SIGTERM`,
    /// `SIGHUP`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Number of event rows in the CSV (the certificate's rows are none).
    pub events: u64,
    /// Taps from sound (`[input] source = "audio"`): the detector's
    /// settings and what the audio input did; absent for MIDI input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_input: Option<AudioInputInfo>,
    /// MIDI keystrokes paired with their sound (`[input] source =
    /// "midi+audio"`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairing: Option<crate::pairing::PairingSummary>,
    /// The session's timing certificate (docs/TAP.md §11): taken before
    /// its first trial, or `certified: false` with the reason; absent in
    /// sidecars written before issue 30 (and by library callers that took
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<crate::certificate::Certificate>,
}

/// The sidecar's `audio_input` block (docs/TAP.md §10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AudioInputInfo {
    /// The JACK audio input port the taps came in on (empty if unknown).
    pub port: String,
    /// Sample rate, Hz.
    pub sample_rate: u32,
    /// `[input] threshold_db`.
    pub threshold_db: f64,
    /// `[input] refractory_ms`.
    pub refractory_ms: f64,
    /// The detector's fixed constants, in words and figures.
    pub detector: serde_json::Value,
    /// Taps detected during the trial (each a keystroke and an `input` row).
    pub taps: u64,
    /// Onsets stamped before the trial's start: dropped, not trial data.
    pub before_start: u64,
    /// Taps detected but not stored (storage full).
    pub taps_dropped: u64,
    /// Audio frames the backend dropped (its ring full): taps among them are lost.
    pub frames_dropped: u64,
    /// Audio frames analysed during the trial.
    pub frames: u64,
    /// Detector restarts during the trial (gaps in the frames), each a
    /// warm-up without detection.
    pub restarts: u64,
    /// The noise floor at the trial's end (mean square of the high-passed
    /// input), dBFS.
    pub floor_dbfs: f64,
}

impl AudioInputInfo {
    /// The record of `r`, from the audio input `port`.
    pub fn of(r: crate::engine::AudioInputReport, port: &str) -> Self {
        use crate::onset as o;
        AudioInputInfo {
            port: port.to_string(),
            sample_rate: r.sample_rate,
            threshold_db: r.settings.threshold_db,
            refractory_ms: r.settings.refractory_ms,
            detector: serde_json::json!({
                "highpass_hz": o::HIGHPASS_HZ,
                "envelope_ms": o::ENVELOPE_MS,
                "floor_ms": o::FLOOR_MS,
                "warmup_ms": o::WARMUP_MS,
                "floor_min_dbfs": o::FLOOR_MIN_DBFS,
                "peak_ms": o::PEAK_MS,
                "lookback_ms": o::LOOKBACK_MS,
                "onset_fraction": o::ONSET_FRACTION,
                "onset_noise_sigmas": o::ONSET_NOISE_SIGMAS,
            }),
            taps: r.taps,
            before_start: r.before_start,
            taps_dropped: r.taps_dropped,
            frames_dropped: r.frames_dropped,
            frames: r.frames,
            restarts: r.restarts,
            floor_dbfs: if r.floor_dbfs.is_finite() {
                r.floor_dbfs
            } else {
                o::FLOOR_MIN_DBFS
            },
        }
    }
}

/// Writes `bytes` to `path` atomically with [`firmtime_rt::fs::write_atomic`]:
/// temp file in the same directory, fsync, rename over `path`, fsync the
/// directory.
///
/// # Errors
/// [`ErrorKind::Io`] naming the file and the step that failed; the temp
/// file is removed on failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    firmtime_rt::fs::write_atomic(path, bytes).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))
}

/// Writes a trial: `<stem>.csv` and `<stem>.json` atomically, CSV first, so
/// a sidecar never exists without its data. The sidecar's certificate, if
/// any, is also the CSV's `certificate` rows.
///
/// # Errors
/// As [`write_atomic`]; [`ErrorKind::Format`] if the sidecar cannot be serialized.
pub fn write_trial(stem: &Path, events: &[Event], sidecar: &Sidecar) -> Result<()> {
    write_trial_with(stem, events, None, sidecar)
}

/// As [`write_trial`]; with `extras` (a trial with an audio input) the CSV
/// has the columns of [`CSV_HEADER_AUDIO`] ([`write_csv_extra`]).
///
/// # Errors
/// As [`write_trial`].
pub fn write_trial_with(
    stem: &Path,
    events: &[Event],
    extras: Option<&[RowExtra]>,
    sidecar: &Sidecar,
) -> Result<()> {
    let mut csv = Vec::with_capacity(events.len() * 40 + 64);
    let rows = sidecar
        .certificate
        .as_ref()
        .map(crate::certificate::Certificate::csv_rows)
        .unwrap_or_default();
    match extras {
        None => write_csv_certified(&mut csv, events, &rows)?,
        Some(x) => write_csv_extra_certified(&mut csv, events, x, &rows)?,
    }
    write_atomic(&stem.with_extension("csv"), &csv)?;
    let json = serde_json::to_string_pretty(sidecar).map_err(|e| {
        Error::new(
            ErrorKind::Format,
            format!("cannot serialize the sidecar: {e}"),
        )
    })? + "\n";
    write_atomic(&stem.with_extension("json"), json.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_row_leaves_not_applicable_fields_empty() {
        let e = Event {
            kind: EventKind::Trigger,
            index: 3,
            intended_us: Some(5_000_000),
            actual_us: 5_000_120,
            note: None,
        };
        assert_eq!(e.csv_row(), "trigger,3,5000000,5000120,,,,");
        let i = Event {
            kind: EventKind::Input,
            index: 1,
            intended_us: None,
            actual_us: 1234,
            note: Some(NoteData {
                channel: 1,
                note: 60,
                velocity: 90,
                on: true,
            }),
        };
        assert_eq!(i.csv_row(), "input,1,,1234,1,60,90,1");
    }

    #[test]
    fn read_csv_names_line_and_column() {
        let t = format!("{CSV_HEADER}\ninput,1,,100,1,60,90,1\ninput,2,,x,1,60,90,1\n");
        let e = read_csv(&t).unwrap_err();
        assert_eq!((e.line(), e.column()), (Some(3), Some(10)));
        assert!(e.message().contains("actual_us"), "{e}");
    }
}
