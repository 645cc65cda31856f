//! A trial written in FTAP's output form (`<stem>.abs`), beside firmtime's
//! own CSV and sidecar, for analysis scripts written for FTAP.
//!
//! What FTAP's own documentation fixes, and what is firmtime's choice, is
//! listed in `docs/TAP.md` (§2 "What is verified, and against what"; the
//! format in §9). In short: the `.abs` suffix, one line per MIDI input and
//! output event with millisecond times, the event classes
//! keystroke/feedback/metronome/trigger/junk (masking) and trigger lines
//! without channel or note are documented (Finney 2001; the FTAP 2.1
//! distribution's `utils/playftap/README`); the column order, the letters
//! and the `#` header are firmtime's, since FTAP's manual section on its
//! output file could not be consulted.
//!
//! The file: `#` lines (provenance, the parameters as FTAP parameter-file
//! keywords in `firmtime tap import-ftap`'s numbering, what FTAP keywords
//! cannot express, self-checks, the timing certificate, how the trial
//! ended, the column names), then
//! one row per event, whitespace-separated, in the CSV's order:
//!
//! ```text
//! ms type on chan note vel seq sched_ms
//! ```
//!
//! # Real-time contract
//!
//! None: runs after a trial, and allocates.

use crate::data::{self, Event, EventKind, Sidecar};
use crate::error::{Error, ErrorKind, Result};
use crate::experiment::{Device, Experiment, TriggerAt};
use crate::params::{
    Delay, Feedback, KeyRange, MaskSource, Ms, NoteLength, Pitch, Setting, Step, VelocityMode,
    Voice,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The file suffix FTAP gives its output files (playftap's README).
pub const SUFFIX: &str = "abs";

/// The column names, in order (the last `#` line of the header).
pub const COLUMNS: &str = "ms type on chan note vel seq sched_ms";

/// One data row of the FTAP-form file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Row {
    /// When it happened, whole ms since the trial started (floor of µs / 1000).
    pub ms: i64,
    /// `K` keystroke (input), `F` feedback (either channel), `M` metronome,
    /// `T` trigger, `J` junk (masking noise on/off).
    pub kind: char,
    /// 1 note on, 0 note off (0 for `T`).
    pub on: u8,
    /// MIDI channel 1–16 (0 for `T`).
    pub chan: u8,
    /// Note 0–127 (0 for `T`).
    pub note: u8,
    /// Velocity 0–127 (0 for `T`).
    pub vel: u8,
    /// Keystroke number (`K`, `F`), beat number (`M`), trigger id (`T`), 0 (`J`).
    pub seq: u32,
    /// When it was scheduled, whole ms (outputs and triggers); `ms` for `K`.
    pub sched_ms: i64,
}

/// The type letter of an event kind; `None` for the `end` row, which is a
/// header line, not an event.
pub fn type_letter(kind: EventKind) -> Option<char> {
    Some(match kind {
        EventKind::Input => 'K',
        EventKind::Feedback | EventKind::Feedback2 => 'F',
        EventKind::Metronome => 'M',
        EventKind::Trigger => 'T',
        EventKind::Masking => 'J',
        EventKind::End | EventKind::Sound => return None,
    })
}

/// Whole milliseconds of a time in µs, as a millisecond clock reads it
/// (floor: 20 999 µs is 20 ms, −1 µs is −1 ms).
pub fn ms_of(us: i64) -> i64 {
    us.div_euclid(1000)
}

/// The data rows of a trial's events, in their order; the `end` row is left
/// out (see [`write()`]).
pub fn rows(events: &[Event]) -> Vec<Row> {
    events
        .iter()
        .filter_map(|e| {
            let kind = type_letter(e.kind)?;
            let ms = ms_of(e.actual_us);
            let n = e.note;
            Some(Row {
                ms,
                kind,
                on: n.map_or(0, |n| u8::from(n.on)),
                chan: n.map_or(0, |n| n.channel),
                note: n.map_or(0, |n| n.note),
                vel: n.map_or(0, |n| n.velocity),
                seq: e.index,
                sched_ms: e.intended_us.map_or(ms, ms_of),
            })
        })
        .collect()
}

impl Row {
    /// The row as written (no newline).
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.ms, self.kind, self.on, self.chan, self.note, self.vel, self.seq, self.sched_ms
        )
    }
}

/// A time in ms as FTAP parameter files write it (`60`, `0.5`).
fn ms_text(m: Ms) -> String {
    if m.us() % 1000 == 0 {
        (m.us() / 1000).to_string()
    } else {
        m.ms_f64().to_string()
    }
}

/// The experiment's parameters as FTAP parameter-file lines (in the
/// numbering `firmtime tap import-ftap` reads), and what they cannot say.
pub fn parameter_lines(e: &Experiment) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut cannot = Vec::new();
    for (p, f, name) in [
        ("FEED", &e.feedback, "feedback"),
        ("FEED2", &e.feedback2, "feedback2"),
    ] {
        feedback_lines(p, f, name, &mut lines, &mut cannot);
    }
    let m = &e.metronome;
    lines.push(format!("METRON_ON {}", u8::from(m.on)));
    lines.push(format!("MSPB {}", ms_text(m.mspb)));
    lines.push(format!("MET_CHAN {}", m.channel.get()));
    lines.push(format!("MET_NOTE {}", m.note.get()));
    lines.push(format!("MET_VEL {}", m.velocity.get()));
    lines.push(format!("MET_LEN {}", ms_text(m.length_ms)));
    if !m.pattern.is_empty() {
        let steps: Vec<&str> = m
            .pattern
            .as_slice()
            .iter()
            .map(|s| match s {
                Step::Rest => "0",
                Step::Beat => "1",
                Step::Accent => "2",
            })
            .collect();
        lines.push(format!("MET_PATTERN_ARRAY {}", steps.join(" ")));
    }
    if !m.pattern_channels.is_empty() {
        let c: Vec<String> = m
            .pattern_channels
            .as_slice()
            .iter()
            .map(|c| c.get().to_string())
            .collect();
        lines.push(format!("MET_CHAN_ARRAY {}", c.join(" ")));
    }
    if m.accent_velocity.get() != 127 {
        cannot.push(format!(
            "metronome.accent_velocity = {}",
            m.accent_velocity.get()
        ));
    }
    let k = &e.masking;
    lines.push(format!("MASK_ON {}", u8::from(k.on)));
    lines.push(format!("MASK_CHAN {}", k.channel.get()));
    lines.push(format!("MASK_NOTE {}", k.note.get()));
    lines.push(format!("MASK_VEL {}", k.velocity.get()));
    if k.source == MaskSource::Audio {
        cannot.push(format!(
            "masking.source = \"audio\" (level_dbfs = {})",
            k.level_dbfs
        ));
    }
    if e.output.device == Device::Audio {
        cannot.push("output.device = \"audio\"".into());
    }
    if e.input.source.has_audio() {
        cannot.push(format!(
            "input.source = \"{}\" (threshold_db = {}, refractory_ms = {}; the `sound` rows are left out)",
            e.input.source, e.input.threshold_db, e.input.refractory_ms
        ));
    }
    let mut next_id = e.triggers.iter().map(|t| t.id).max().unwrap_or(0);
    for t in &e.triggers {
        let at = trigger_at(t.at);
        if t.end {
            lines.push(format!("TRIGGER {} {at} END_EXP 0", t.id));
        }
        for s in t.settings.as_slice() {
            match setting_line(s, e) {
                Some(kv) => lines.push(format!("TRIGGER {} {at} {kv}", t.id)),
                None => cannot.push(format!("trigger {}: {}", t.id, setting_words(s))),
            }
        }
    }
    // FTAP ends a trial by an END_EXP trigger; firmtime's [end] becomes one.
    let end = &e.end;
    for at in [
        end.keystrokes.map(TriggerAt::Keystroke),
        end.beats.map(TriggerAt::Beat),
        end.duration_ms.map(TriggerAt::Elapsed),
    ]
    .into_iter()
    .flatten()
    {
        next_id = next_id.saturating_add(1);
        lines.push(format!("TRIGGER {next_id} {} END_EXP 0", trigger_at(at)));
    }
    (lines, cannot)
}

fn trigger_at(at: TriggerAt) -> String {
    match at {
        TriggerAt::Keystroke(n) => format!("K {n}"),
        TriggerAt::Elapsed(t) => format!("T {}", ms_text(t)),
        TriggerAt::Beat(n) => format!("M {n}"),
    }
}

fn feedback_lines(
    p: &str,
    f: &Feedback,
    name: &str,
    lines: &mut Vec<String>,
    cannot: &mut Vec<String>,
) {
    lines.push(format!("{p}_ON {}", u8::from(f.on)));
    lines.push(format!("{p}_CHAN {}", f.channel.get()));
    match f.pitch {
        Pitch::Same => lines.push(format!("{p}_PMODE 0")),
        Pitch::Fixed { note } => {
            lines.push(format!("{p}_PMODE 1"));
            lines.push(format!("{p}_NOTE {}", note.get()));
        }
        Pitch::Transpose { semitones } => {
            lines.push(format!("{p}_PMODE 2"));
            lines.push(format!("{p}_NOTE {semitones}"));
        }
        Pitch::Random { notes } => {
            let n: Vec<String> = notes
                .as_slice()
                .iter()
                .map(|n| n.get().to_string())
                .collect();
            lines.push(format!("{p}_PMODE 3"));
            lines.push(format!("{p}_NOTE {}", n.join(" ")));
        }
        Pitch::Map { .. } => cannot.push(format!("{name}.pitch mode \"map\"")),
    }
    match f.velocity {
        VelocityMode::Same => lines.push(format!("{p}_VMODE 0")),
        VelocityMode::Fixed { velocity } => {
            lines.push(format!("{p}_VMODE 1"));
            lines.push(format!("{p}_VEL {}", velocity.get()));
        }
        VelocityMode::Scaled { factor } => cannot.push(format!(
            "{name}.velocity mode \"scaled\" (factor = {factor})"
        )),
    }
    lines.push(format!(
        "{p}_LEN {}",
        match f.duration {
            NoteLength::AsPlayed => "0".to_string(),
            NoteLength::Fixed { ms } => ms_text(ms),
        }
    ));
    let (mode, vals): (u8, Vec<Ms>) = match f.delay {
        Delay::None => (0, vec![Ms::from_us(0)]),
        Delay::Fixed { ms } => (0, vec![ms]),
        Delay::List { ms } => (1, ms.as_slice().to_vec()),
        Delay::Uniform { min_ms, max_ms } => (2, vec![min_ms, max_ms]),
        Delay::Normal {
            mean_ms,
            sd_ms,
            min_ms,
            max_ms,
        } => (3, vec![mean_ms, sd_ms, min_ms, max_ms]),
    };
    let v: Vec<String> = vals.into_iter().map(ms_text).collect();
    lines.push(format!("{p}_DMODE {mode}"));
    lines.push(format!("{p}_DVAL {}", v.join(" ")));
    if f.keys != KeyRange::default() {
        cannot.push(format!(
            "{name}.keys = [{}, {}]",
            f.keys.low.get(),
            f.keys.high.get()
        ));
    }
}

/// A trigger's setting as one `KEYWORD value` an FTAP TRIGGER line can carry.
fn setting_line(s: &Setting, e: &Experiment) -> Option<String> {
    let p = |v: &Voice| match v {
        Voice::First => "FEED",
        Voice::Second => "FEED2",
    };
    let base_delay = |v: &Voice| match v {
        Voice::First => e.feedback.delay,
        Voice::Second => e.feedback2.delay,
    };
    Some(match s {
        Setting::FeedbackOn(v, on) => format!("{}_ON {}", p(v), u8::from(*on)),
        Setting::FeedbackChannel(v, c) => format!("{}_CHAN {}", p(v), c.get()),
        Setting::FeedbackDuration(v, d) => format!(
            "{}_LEN {}",
            p(v),
            match d {
                NoteLength::AsPlayed => "0".to_string(),
                NoteLength::Fixed { ms } => ms_text(*ms),
            }
        ),
        // One keyword per TRIGGER line: a delay value under the file's mode
        // 0 (fixed) only.
        Setting::FeedbackDelay(v, d)
            if matches!(base_delay(v), Delay::None | Delay::Fixed { .. }) =>
        {
            match d {
                Delay::None => format!("{}_DVAL 0", p(v)),
                Delay::Fixed { ms } => format!("{}_DVAL {}", p(v), ms_text(*ms)),
                _ => return None,
            }
        }
        Setting::MetronomeOn(on) => format!("METRON_ON {}", u8::from(*on)),
        Setting::MetronomeMspb(m) => format!("MSPB {}", ms_text(*m)),
        Setting::MetronomeChannel(c) => format!("MET_CHAN {}", c.get()),
        Setting::MetronomeNote(n) => format!("MET_NOTE {}", n.get()),
        Setting::MetronomeVelocity(v) => format!("MET_VEL {}", v.get()),
        Setting::MetronomeLength(m) => format!("MET_LEN {}", ms_text(*m)),
        Setting::MaskingOn(on) => format!("MASK_ON {}", u8::from(*on)),
        Setting::MaskingVelocity(v) => format!("MASK_VEL {}", v.get()),
        _ => return None,
    })
}

fn setting_words(s: &Setting) -> String {
    let v = |v: &Voice| match v {
        Voice::First => "feedback",
        Voice::Second => "feedback2",
    };
    match s {
        Setting::FeedbackOn(w, _) => format!("{}.on", v(w)),
        Setting::FeedbackChannel(w, _) => format!("{}.channel", v(w)),
        Setting::FeedbackKeys(w, k) => {
            format!("{}.keys = [{}, {}]", v(w), k.low.get(), k.high.get())
        }
        Setting::FeedbackPitch(w, _) => format!("{}.pitch", v(w)),
        Setting::FeedbackVelocity(w, _) => format!("{}.velocity", v(w)),
        Setting::FeedbackDuration(w, _) => format!("{}.duration", v(w)),
        Setting::FeedbackDelay(w, _) => {
            format!(
                "{}.delay (only a fixed delay under a fixed-delay file is one FTAP keyword)",
                v(w)
            )
        }
        Setting::MetronomeAccentVelocity(a) => {
            format!("metronome.accent_velocity = {}", a.get())
        }
        Setting::MetronomePattern(_) => "metronome.pattern".into(),
        Setting::MetronomePatternChannels(_) => "metronome.pattern_channels".into(),
        Setting::MaskingLevel(l) => format!("masking.level_dbfs = {l}"),
        Setting::MetronomeOn(_) => "metronome.on".into(),
        Setting::MetronomeMspb(_) => "metronome.mspb".into(),
        Setting::MetronomeChannel(_) => "metronome.channel".into(),
        Setting::MetronomeNote(_) => "metronome.note".into(),
        Setting::MetronomeVelocity(_) => "metronome.velocity".into(),
        Setting::MetronomeLength(_) => "metronome.length_ms".into(),
        Setting::MaskingOn(_) => "masking.on".into(),
        Setting::MaskingVelocity(_) => "masking.velocity".into(),
    }
}

/// The FTAP-form file of a trial: header, then one row per event.
/// `source` names the CSV in the header.
///
/// # Errors
/// [`ErrorKind::Format`] if the sidecar's experiment text does not parse.
pub fn write(events: &[Event], sidecar: &Sidecar, source: &str) -> Result<String> {
    let exp = Experiment::from_toml(&sidecar.experiment_toml).map_err(|e| {
        Error::new(
            ErrorKind::Format,
            format!("the sidecar's experiment_toml does not parse: {e}"),
        )
    })?;
    let mut s = String::with_capacity(events.len() * 24 + 2048);
    let pv = &sidecar.provenance;
    let _ = writeln!(
        s,
        "# FTAP-form output of {source}, written by firmtime {} (docs/TAP.md §9)",
        pv.firmtime_version
    );
    let _ = writeln!(
        s,
        "# subject {} session {} trial {} experiment {} ({}) seed {}",
        sidecar.subject,
        sidecar.session,
        sidecar.trial,
        sidecar.experiment_file,
        exp.name,
        sidecar.seed
    );
    let _ = writeln!(
        s,
        "# started {} ended {}",
        pv.started_utc,
        pv.ended_utc.as_deref().unwrap_or("-")
    );
    let (params, cannot) = parameter_lines(&exp);
    let _ = writeln!(
        s,
        "# parameters (FTAP parameter-file keywords, as firmtime tap import-ftap numbers them):"
    );
    for p in &params {
        let _ = writeln!(s, "# {p}");
    }
    for c in &cannot {
        let _ = writeln!(s, "# not expressible in FTAP keywords: {c}");
    }
    let c = &sidecar.self_checks;
    let _ = writeln!(
        s,
        "# self-checks: output_interval_mean_ms {:.3} output_interval_max_ms {:.3} late_outputs {} xruns {} input_overruns {} events_dropped {}",
        c.output_interval_mean_us / 1000.0,
        c.output_interval_max_us as f64 / 1000.0,
        c.late_outputs,
        c.xruns,
        c.input_overruns,
        c.events_dropped
    );
    // The session's timing certificate (docs/TAP.md §11); none in trials
    // recorded before firmtime took one.
    if let Some(cert) = &sidecar.certificate {
        for l in cert.lines() {
            let _ = writeln!(s, "# {l}");
        }
    }
    match events.iter().rev().find(|e| e.kind == EventKind::End) {
        Some(e) => {
            let how = if e.index == 1 {
                match (&sidecar.stopped_by, &sidecar.input_lost) {
                    (Some(sig), _) => format!("interrupted ({sig})"),
                    (None, Some(l)) => format!("input lost ({}: {})", l.cause, l.words),
                    (None, None) => "interrupted".into(),
                }
            } else {
                "by its end condition or a trigger".into()
            };
            // intended: when the trial was ended; actual: its last output.
            let _ = writeln!(
                s,
                "# end {} ms (last output {} ms), {how}",
                ms_of(e.intended_us.unwrap_or(e.actual_us)),
                ms_of(e.actual_us)
            );
        }
        None => {
            let _ = writeln!(s, "# end: no end row (trial data incomplete)");
        }
    }
    let _ = writeln!(s, "# {COLUMNS}");
    for r in rows(events) {
        s.push_str(&r.line());
        s.push('\n');
    }
    Ok(s)
}

/// Reads the data rows back from an FTAP-form file as [`write()`] writes it
/// (`#` lines skipped).
///
/// # Errors
/// [`ErrorKind::Format`] naming the line for a row that is not eight fields
/// of the right kinds.
pub fn parse_rows(text: &str) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let bad = |what: &str| {
            Error::at(
                ErrorKind::Format,
                i + 1,
                1,
                format!("{what} in `{l}` (expected `{COLUMNS}`)"),
            )
        };
        if f.len() != 8 {
            return Err(bad(&format!("{} fields, not 8", f.len())));
        }
        let int = |k: usize| f[k].parse::<i64>().map_err(|_| bad("not a whole number"));
        let small = |k: usize| f[k].parse::<u8>().map_err(|_| bad("not a number 0–255"));
        let kind = match f[1] {
            "K" | "F" | "M" | "T" | "J" => f[1].chars().next().unwrap_or('?'),
            _ => return Err(bad("type is not K, F, M, T or J")),
        };
        out.push(Row {
            ms: int(0)?,
            kind,
            on: small(2)?,
            chan: small(3)?,
            note: small(4)?,
            vel: small(5)?,
            seq: f[6].parse().map_err(|_| bad("seq is not a whole number"))?,
            sched_ms: int(7)?,
        });
    }
    Ok(out)
}

/// Where [`export_trial`] puts the FTAP-form file of `csv`: `<stem>.abs`
/// in `out_dir`, or beside the CSV.
pub fn output_path(csv: &Path, out_dir: Option<&Path>) -> PathBuf {
    let name = csv.with_extension(SUFFIX);
    match (out_dir, name.file_name()) {
        (Some(d), Some(f)) => d.join(f),
        _ => name,
    }
}

/// Reads a trial (`TRIAL.csv` and its sidecar `TRIAL.json` beside it) and
/// returns its FTAP-form text.
///
/// # Errors
/// [`ErrorKind::Io`] naming the file that cannot be read — the sidecar
/// included, since the parameter header comes from it; [`ErrorKind::Format`]
/// naming the file whose content is malformed.
pub fn export_trial(csv: &Path) -> Result<String> {
    let text = std::fs::read_to_string(csv).map_err(|e| Error::io("read", csv, &e))?;
    let events = data::read_csv(&text)
        .map_err(|e| Error::new(ErrorKind::Format, format!("{}: {e}", csv.display())))?;
    let json = csv.with_extension("json");
    let side = std::fs::read_to_string(&json).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!(
                "cannot read {}, the sidecar of {}: {e}; the FTAP header's parameters come from it \
                 (tap run writes TRIAL.json beside TRIAL.csv)",
                json.display(),
                csv.display()
            ),
        )
    })?;
    let sidecar: Sidecar = serde_json::from_str(&side).map_err(|e| {
        Error::new(
            ErrorKind::Format,
            format!("{}: not a trial sidecar: {e}", json.display()),
        )
    })?;
    let name = csv
        .file_name()
        .map_or_else(|| csv.display().to_string(), |n| n.to_string_lossy().into());
    write(&events, &sidecar, &name)
        .map_err(|e| Error::new(ErrorKind::Format, format!("{}: {e}", json.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 30: taps from sound are no FTAP keyword: said, not dropped.
    #[test]
    fn an_audio_input_is_listed_as_not_expressible_and_sound_rows_are_no_events() {
        let e = Experiment::from_toml(
            "[input]\nsource = \"midi+audio\"\nthreshold_db = 15\n[end]\nkeystrokes = 3\n",
        )
        .unwrap();
        let (_, cannot) = parameter_lines(&e);
        assert!(
            cannot.iter().any(|c| c.starts_with(
                "input.source = \"midi+audio\" (threshold_db = 15, refractory_ms = 60"
            )),
            "{cannot:?}"
        );
        assert_eq!(type_letter(EventKind::Sound), None);
    }

    #[test]
    fn ms_of_is_a_millisecond_clock_reading() {
        assert_eq!(ms_of(0), 0);
        assert_eq!(ms_of(999), 0);
        assert_eq!(ms_of(1000), 1);
        assert_eq!(ms_of(20_999), 20);
        assert_eq!(ms_of(-1), -1);
        assert_eq!(ms_of(-1000), -1);
        assert_eq!(ms_of(-1001), -2);
    }

    #[test]
    fn parse_rows_names_the_line_of_a_bad_row() {
        let t = format!("# {COLUMNS}\n1 K 1 1 60 90 1 1\n2 X 1 1 60 90 1 2\n");
        let e = parse_rows(&t).unwrap_err();
        assert_eq!(e.line(), Some(3));
        assert!(e.message().contains("type is not K, F, M, T or J"), "{e}");
        let e = parse_rows("1 K 1 1 60\n").unwrap_err();
        assert!(e.message().contains("5 fields, not 8"), "{e}");
    }
}
