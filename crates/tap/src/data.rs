//! Trial data files: the event CSV and the JSON sidecar (format in `docs/TAP.md`).
//!
//! The CSV has a header row and one row per event, comma-separated, no
//! quoting, empty fields for "not applicable", so `pandas.read_csv(path)`
//! and R's `read.csv(path)` load it without options. Files are written
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
use std::fmt::Write as _;
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
        let mut s = String::with_capacity(48);
        let _ = write!(s, "{},{},", self.kind.as_str(), self.index);
        if let Some(i) = self.intended_us {
            let _ = write!(s, "{i}");
        }
        let _ = write!(s, ",{},", self.actual_us);
        if let Some(n) = self.note {
            let _ = write!(
                s,
                "{},{},{},{}",
                n.channel,
                n.note,
                n.velocity,
                u8::from(n.on)
            );
        } else {
            s.push_str(",,,");
        }
        s
    }
}

/// Writes the events as CSV (header first) into `w`.
///
/// # Errors
/// [`ErrorKind::Io`] if writing fails.
pub fn write_csv<W: std::io::Write>(mut w: W, events: &[Event]) -> Result<()> {
    let io = |e: std::io::Error| Error::new(ErrorKind::Io, format!("cannot write CSV: {e}"));
    writeln!(w, "{CSV_HEADER}").map_err(io)?;
    for e in events {
        writeln!(w, "{}", e.csv_row()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Reads a trial CSV.
///
/// # Errors
/// [`ErrorKind::Format`] with the line number if the header or a row is malformed.
pub fn read_csv(text: &str) -> Result<Vec<Event>> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_end() == CSV_HEADER => {}
        Some((_, h)) => {
            return Err(Error::at(
                ErrorKind::Format,
                1,
                1,
                format!("not a firmtime trial CSV: header is `{h}`, expected `{CSV_HEADER}`"),
            ))
        }
        None => {
            return Err(Error::new(
                ErrorKind::Format,
                "empty file: expected a trial CSV header",
            ))
        }
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = |col: usize, what: &str| {
            let c = f[..col].iter().map(|x| x.len() + 1).sum::<usize>() + 1;
            Error::at(ErrorKind::Format, n, c, format!("{what} in `{line}`"))
        };
        if f.len() != 8 {
            return Err(Error::at(
                ErrorKind::Format,
                n,
                1,
                format!("expected 8 fields, got {} in `{line}`", f.len()),
            ));
        }
        let kind = EventKind::parse(f[0]).ok_or_else(|| bad(0, "unknown kind"))?;
        let index = f[1]
            .parse()
            .map_err(|_| bad(1, "index is not a whole number"))?;
        let intended_us = match f[2] {
            "" => None,
            s => Some(
                s.parse()
                    .map_err(|_| bad(2, "intended_us is not a whole number"))?,
            ),
        };
        let actual_us = f[3]
            .parse()
            .map_err(|_| bad(3, "actual_us is not a whole number"))?;
        let note = if f[4..].iter().all(|s| s.is_empty()) {
            None
        } else {
            let num = |c: usize, max: u8| -> Result<u8> {
                f[c].parse::<u8>()
                    .ok()
                    .filter(|&v| v <= max)
                    .ok_or_else(|| {
                        bad(
                            c,
                            &format!(
                                "{} must be a number 0–{max}",
                                CSV_HEADER.split(',').nth(c).unwrap_or("")
                            ),
                        )
                    })
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
    Ok(out)
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
    /// SIGHUP; or a disconnection) before its end condition.
    pub incomplete: bool,
    /// The signal that stopped an interrupted trial (`SIGINT`, `SIGTERM`,
    /// `SIGHUP`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Number of CSV rows.
    pub events: u64,
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
/// a sidecar never exists without its data.
///
/// # Errors
/// As [`write_atomic`]; [`ErrorKind::Format`] if the sidecar cannot be serialized.
pub fn write_trial(stem: &Path, events: &[Event], sidecar: &Sidecar) -> Result<()> {
    let mut csv = Vec::with_capacity(events.len() * 40 + 64);
    write_csv(&mut csv, events)?;
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
