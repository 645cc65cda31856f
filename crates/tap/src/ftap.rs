//! Import of FTAP parameter files (Finney 2001) into an [`Experiment`].
//!
//! An FTAP parameter file holds one `KEYWORD value…` per line; `#` starts a
//! comment. Unlike FTAP, which printed a message and carried on, an unknown
//! keyword, a bad value, a repeated keyword or an unparseable `TRIGGER` line
//! is an error naming its line. The keyword semantics are in `docs/TAP.md`,
//! including which mode numbers were chosen where FTAP's own documentation
//! could not be consulted.
//!
//! # Real-time contract
//!
//! None: import runs before any trial, and allocates.

use crate::error::{Error, ErrorKind, Result};
use crate::experiment::{Experiment, Output, TrialEnd, Trigger, TriggerAt};
use crate::params::{
    Channel, Delay, Feedback, FixedList, Masking, Metronome, Ms, Note, NoteLength, Pitch, Setting,
    Step, Velocity, VelocityMode, Voice,
};
use std::collections::BTreeMap;

/// Every keyword the importer knows, besides `TRIGGER`.
pub const KEYWORDS: &[&str] = &[
    "FEED_ON",
    "FEED_CHAN",
    "FEED_NOTE",
    "FEED_PMODE",
    "FEED_VMODE",
    "FEED_VEL",
    "FEED_LEN",
    "FEED_DMODE",
    "FEED_DVAL",
    "FEED2_ON",
    "FEED2_CHAN",
    "FEED2_NOTE",
    "FEED2_PMODE",
    "FEED2_VMODE",
    "FEED2_VEL",
    "FEED2_LEN",
    "FEED2_DMODE",
    "FEED2_DVAL",
    "METRON_ON",
    "MSPB",
    "MET_CHAN",
    "MET_NOTE",
    "MET_VEL",
    "MET_LEN",
    "MET_PATTERN_ARRAY",
    "MET_CHAN_ARRAY",
    "MASK_ON",
    "MASK_CHAN",
    "MASK_NOTE",
    "MASK_VEL",
];

/// The result of an import: the experiment and remarks for the user.
#[derive(Debug, Clone)]
pub struct Import {
    /// The experiment (its `end` may be empty; see `notes`).
    pub experiment: Experiment,
    /// Things the user should know or fix before running it.
    pub notes: Vec<String>,
}

#[derive(Clone, Default)]
struct Raw {
    // keyword → (line, values)
    values: BTreeMap<String, (usize, Vec<String>)>,
}

impl Raw {
    fn get(&self, kw: &str) -> Option<(usize, &[String])> {
        self.values.get(kw).map(|(l, v)| (*l, v.as_slice()))
    }
}

fn bad(line: usize, msg: impl Into<String>) -> Error {
    Error::at(ErrorKind::Invalid, line, 1, msg)
}

fn one<'a>(line: usize, kw: &str, v: &'a [String]) -> Result<&'a str> {
    match v {
        [x] => Ok(x),
        _ => Err(bad(line, format!("{kw} takes one value, got {}", v.len()))),
    }
}

fn int(line: usize, kw: &str, s: &str) -> Result<i64> {
    s.parse::<i64>()
        .map_err(|_| bad(line, format!("{kw}: expected a whole number, got `{s}`")))
}

fn ms(line: usize, kw: &str, s: &str) -> Result<Ms> {
    let v: f64 = s
        .parse()
        .map_err(|_| bad(line, format!("{kw}: expected milliseconds, got `{s}`")))?;
    Ms::parse_ms(v).map_err(|e| bad(line, format!("{kw}: {e}")))
}

fn flag(line: usize, kw: &str, v: &[String]) -> Result<bool> {
    match one(line, kw, v)? {
        "0" => Ok(false),
        "1" => Ok(true),
        s => Err(bad(
            line,
            format!("{kw}: expected 0 (off) or 1 (on), got `{s}`"),
        )),
    }
}

fn ranged<T>(
    line: usize,
    kw: &str,
    v: &[String],
    f: fn(i64) -> std::result::Result<T, String>,
) -> Result<T> {
    let n = int(line, kw, one(line, kw, v)?)?;
    f(n).map_err(|e| bad(line, format!("{kw}: {e}")))
}

fn mode(line: usize, kw: &str, v: &[String], names: &[&str]) -> Result<usize> {
    let s = one(line, kw, v)?;
    if let Ok(n) = s.parse::<usize>() {
        if n < names.len() {
            return Ok(n);
        }
    }
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let opts: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i} ({n})"))
                .collect();
            bad(
                line,
                format!("{kw}: expected one of {}, got `{s}`", opts.join(", ")),
            )
        })
}

const PMODES: &[&str] = &["SAME", "FIXED", "SHIFT", "RANDOM"];
const VMODES: &[&str] = &["SAME", "FIXED"];
const DMODES: &[&str] = &["FIXED", "LIST", "UNIFORM", "NORMAL"];

fn feedback(raw: &Raw, p: &str, base: Feedback) -> Result<Feedback> {
    let k = |s: &str| format!("{p}_{s}");
    let mut f = base;
    if let Some((l, v)) = raw.get(&k("ON")) {
        f.on = flag(l, &k("ON"), v)?;
    }
    if let Some((l, v)) = raw.get(&k("CHAN")) {
        f.channel = ranged(l, &k("CHAN"), v, Channel::new)?;
    }
    let note = raw.get(&k("NOTE"));
    let pmode = match raw.get(&k("PMODE")) {
        Some((l, v)) => mode(l, &k("PMODE"), v, PMODES)?,
        None => 0,
    };
    let need_note = |what: &str| -> Result<(usize, &[String])> {
        note.ok_or_else(|| {
            bad(
                raw.get(&k("PMODE")).map_or(1, |x| x.0),
                format!("{} {what} needs {}", k("PMODE"), k("NOTE")),
            )
        })
    };
    f.pitch = match pmode {
        0 => Pitch::Same,
        1 => {
            let (l, v) = need_note("1 (FIXED)")?;
            Pitch::Fixed {
                note: ranged(l, &k("NOTE"), v, Note::new)?,
            }
        }
        2 => {
            let (l, v) = need_note("2 (SHIFT)")?;
            let n = int(l, &k("NOTE"), one(l, &k("NOTE"), v)?)?;
            if !(-127..=127).contains(&n) {
                return Err(bad(
                    l,
                    format!("{}: a shift must be −127…127 semitones, got {n}", k("NOTE")),
                ));
            }
            Pitch::Transpose { semitones: n as i8 }
        }
        _ => {
            let (l, v) = need_note("3 (RANDOM)")?;
            let mut notes = FixedList::new();
            for s in v {
                let n = Note::new(int(l, &k("NOTE"), s)?)
                    .map_err(|e| bad(l, format!("{}: {e}", k("NOTE"))))?;
                notes
                    .push(n)
                    .map_err(|_| bad(l, format!("{}: at most 16 notes", k("NOTE"))))?;
            }
            if notes.is_empty() {
                return Err(bad(l, format!("{} needs at least one note", k("NOTE"))));
            }
            Pitch::Random { notes }
        }
    };
    let vmode = match raw.get(&k("VMODE")) {
        Some((l, v)) => mode(l, &k("VMODE"), v, VMODES)?,
        None => 0,
    };
    f.velocity = match (vmode, raw.get(&k("VEL"))) {
        (0, _) => VelocityMode::Same,
        (_, Some((l, v))) => VelocityMode::Fixed {
            velocity: ranged(l, &k("VEL"), v, Velocity::new)?,
        },
        (_, None) => {
            return Err(bad(
                raw.get(&k("VMODE")).map_or(1, |x| x.0),
                format!("{} 1 (FIXED) needs {}", k("VMODE"), k("VEL")),
            ))
        }
    };
    if let Some((l, v)) = raw.get(&k("LEN")) {
        let d = ms(l, &k("LEN"), one(l, &k("LEN"), v)?)?;
        f.duration = if d.us() == 0 {
            NoteLength::AsPlayed
        } else {
            NoteLength::Fixed { ms: d }
        };
    }
    let dmode = match raw.get(&k("DMODE")) {
        Some((l, v)) => Some((l, mode(l, &k("DMODE"), v, DMODES)?)),
        None => None,
    };
    let dval = raw.get(&k("DVAL"));
    f.delay = match (dmode, dval) {
        (None | Some((_, 0)), None) => Delay::None,
        (None | Some((_, 0)), Some((l, v))) => {
            let d = ms(l, &k("DVAL"), one(l, &k("DVAL"), v)?)?;
            if d.us() == 0 {
                Delay::None
            } else {
                Delay::Fixed { ms: d }
            }
        }
        (Some((l, m)), None) => {
            return Err(bad(
                l,
                format!("{} {m} ({}) needs {}", k("DMODE"), DMODES[m], k("DVAL")),
            ))
        }
        (Some((_, m)), Some((l, v))) => {
            let vals: Vec<Ms> = v
                .iter()
                .map(|s| ms(l, &k("DVAL"), s))
                .collect::<Result<_>>()?;
            let d = match (m, vals.as_slice()) {
                (1, vals) if !vals.is_empty() => Delay::List {
                    ms: FixedList::from_slice(vals)
                        .map_err(|n| bad(l, format!("{}: at most {n} delays", k("DVAL"))))?,
                },
                (2, [min_ms, max_ms]) => Delay::Uniform {
                    min_ms: *min_ms,
                    max_ms: *max_ms,
                },
                (3, [mean_ms, sd_ms, min_ms, max_ms]) => Delay::Normal {
                    mean_ms: *mean_ms,
                    sd_ms: *sd_ms,
                    min_ms: *min_ms,
                    max_ms: *max_ms,
                },
                _ => {
                    let want = ["", "one or more delays", "MIN MAX", "MEAN SD MIN MAX"][m];
                    return Err(bad(
                        l,
                        format!(
                            "{} with {} {m} ({}) takes {want}, got {} values",
                            k("DVAL"),
                            k("DMODE"),
                            DMODES[m],
                            vals.len()
                        ),
                    ));
                }
            };
            d
        }
    };
    f.check().map_err(|e| bad(dval.map_or(1, |x| x.0), e))?;
    Ok(f)
}

fn metronome(raw: &Raw) -> Result<Metronome> {
    let mut m = Metronome::off();
    if let Some((l, v)) = raw.get("METRON_ON") {
        m.on = flag(l, "METRON_ON", v)?;
    }
    if let Some((l, v)) = raw.get("MSPB") {
        m.mspb = ms(l, "MSPB", one(l, "MSPB", v)?)?;
        if m.mspb.us() == 0 {
            return Err(bad(l, "MSPB must be more than 0"));
        }
    }
    if let Some((l, v)) = raw.get("MET_CHAN") {
        m.channel = ranged(l, "MET_CHAN", v, Channel::new)?;
    }
    if let Some((l, v)) = raw.get("MET_NOTE") {
        m.note = ranged(l, "MET_NOTE", v, Note::new)?;
    }
    if let Some((l, v)) = raw.get("MET_VEL") {
        m.velocity = ranged(l, "MET_VEL", v, Velocity::new)?;
    }
    if let Some((l, v)) = raw.get("MET_LEN") {
        m.length_ms = ms(l, "MET_LEN", one(l, "MET_LEN", v)?)?;
    }
    if let Some((l, v)) = raw.get("MET_PATTERN_ARRAY") {
        let mut p = FixedList::new();
        for s in v {
            let step = match s.as_str() {
                "0" => Step::Rest,
                "1" => Step::Beat,
                "2" => Step::Accent,
                _ => {
                    return Err(bad(
                        l,
                        format!(
                        "MET_PATTERN_ARRAY: expected 0 (rest), 1 (beat) or 2 (accent), got `{s}`"
                    ),
                    ))
                }
            };
            p.push(step)
                .map_err(|_| bad(l, "MET_PATTERN_ARRAY: at most 32 steps"))?;
        }
        m.pattern = p;
    }
    if let Some((l, v)) = raw.get("MET_CHAN_ARRAY") {
        let mut p = FixedList::new();
        for s in v {
            let c = Channel::new(int(l, "MET_CHAN_ARRAY", s)?)
                .map_err(|e| bad(l, format!("MET_CHAN_ARRAY: {e}")))?;
            p.push(c)
                .map_err(|_| bad(l, "MET_CHAN_ARRAY: at most 32 steps"))?;
        }
        m.pattern_channels = p;
    }
    m.check().map_err(|e| {
        bad(
            raw.get("MET_CHAN_ARRAY")
                .or(raw.get("MSPB"))
                .map_or(1, |x| x.0),
            e,
        )
    })?;
    Ok(m)
}

fn masking(raw: &Raw) -> Result<Masking> {
    let mut m = Masking::off();
    if let Some((l, v)) = raw.get("MASK_ON") {
        m.on = flag(l, "MASK_ON", v)?;
    }
    if let Some((l, v)) = raw.get("MASK_CHAN") {
        m.channel = ranged(l, "MASK_CHAN", v, Channel::new)?;
    }
    if let Some((l, v)) = raw.get("MASK_NOTE") {
        m.note = ranged(l, "MASK_NOTE", v, Note::new)?;
    }
    if let Some((l, v)) = raw.get("MASK_VEL") {
        m.velocity = ranged(l, "MASK_VEL", v, Velocity::new)?;
    }
    Ok(m)
}

struct Built {
    feedback: [Feedback; 2],
    metronome: Metronome,
    masking: Masking,
}

fn build(raw: &Raw) -> Result<Built> {
    Ok(Built {
        feedback: [
            feedback(
                raw,
                "FEED",
                Feedback {
                    on: false,
                    ..Feedback::default()
                },
            )?,
            feedback(raw, "FEED2", Feedback::off_second())?,
        ],
        metronome: metronome(raw)?,
        masking: masking(raw)?,
    })
}

fn setting_for(kw: &str, b: &Built) -> Option<Setting> {
    let (w, rest) = if let Some(r) = kw.strip_prefix("FEED2_") {
        (Voice::Second, r)
    } else if let Some(r) = kw.strip_prefix("FEED_") {
        (Voice::First, r)
    } else {
        (Voice::First, "")
    };
    let f = &b.feedback[w.index()];
    let m = &b.metronome;
    Some(match (rest, kw) {
        ("ON", _) => Setting::FeedbackOn(w, f.on),
        ("CHAN", _) => Setting::FeedbackChannel(w, f.channel),
        ("NOTE" | "PMODE", _) => Setting::FeedbackPitch(w, f.pitch),
        ("VMODE" | "VEL", _) => Setting::FeedbackVelocity(w, f.velocity),
        ("LEN", _) => Setting::FeedbackDuration(w, f.duration),
        ("DMODE" | "DVAL", _) => Setting::FeedbackDelay(w, f.delay),
        (_, "METRON_ON") => Setting::MetronomeOn(m.on),
        (_, "MSPB") => Setting::MetronomeMspb(m.mspb),
        (_, "MET_CHAN") => Setting::MetronomeChannel(m.channel),
        (_, "MET_NOTE") => Setting::MetronomeNote(m.note),
        (_, "MET_VEL") => Setting::MetronomeVelocity(m.velocity),
        (_, "MET_LEN") => Setting::MetronomeLength(m.length_ms),
        (_, "MET_PATTERN_ARRAY") => Setting::MetronomePattern(m.pattern),
        (_, "MET_CHAN_ARRAY") => Setting::MetronomePatternChannels(m.pattern_channels),
        (_, "MASK_ON") => Setting::MaskingOn(b.masking.on),
        (_, "MASK_VEL") => Setting::MaskingVelocity(b.masking.velocity),
        _ => return None,
    })
}

fn trigger(raw: &Raw, line: usize, t: &[String]) -> Result<Trigger> {
    let usage = "expected `TRIGGER id K|T|M count PARAM value…` (K = keystroke count, T = elapsed ms, M = metronome count)";
    if t.len() < 4 {
        return Err(Error::at(
            ErrorKind::Syntax,
            line,
            1,
            format!("TRIGGER: {usage}"),
        ));
    }
    let id: u16 = t[0].parse().ok().filter(|&i| i > 0).ok_or_else(|| {
        Error::at(
            ErrorKind::Syntax,
            line,
            1,
            format!("TRIGGER: id must be 1–65535, got `{}`; {usage}", t[0]),
        )
    })?;
    let count = || -> Result<u32> {
        t[2].parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::at(
                ErrorKind::Syntax,
                line,
                1,
                format!(
                    "TRIGGER {id}: count must be a whole number ≥ 1, got `{}`",
                    t[2]
                ),
            )
        })
    };
    let at = match t[1].as_str() {
        "K" | "k" => TriggerAt::Keystroke(count()?),
        "M" | "m" => TriggerAt::Beat(count()?),
        "T" | "t" => TriggerAt::Elapsed(ms(line, "TRIGGER", &t[2])?),
        other => {
            return Err(Error::at(
                ErrorKind::Syntax,
                line,
                1,
                format!("TRIGGER {id}: unknown trigger type `{other}`; {usage}"),
            ))
        }
    };
    let param = t[3].as_str();
    let value: Vec<String> = t[4..].to_vec();
    let mut tr = Trigger {
        id,
        at,
        end: false,
        settings: FixedList::new(),
    };
    if param == "END_EXP" {
        tr.end = true;
        return Ok(tr);
    }
    if !KEYWORDS.contains(&param) {
        return Err(Error::at(
            ErrorKind::UnknownKeyword,
            line,
            1,
            format!(
                "TRIGGER {id}: unknown parameter `{param}`; expected END_EXP or one of {}",
                KEYWORDS.join(" ")
            ),
        ));
    }
    if value.is_empty() {
        return Err(Error::at(
            ErrorKind::Syntax,
            line,
            1,
            format!("TRIGGER {id}: {param} needs a value; {usage}"),
        ));
    }
    // The new value takes effect on top of the file's own parameters.
    let mut r = raw.clone();
    r.values.insert(param.to_string(), (line, value));
    let b = build(&r)?;
    let s = setting_for(param, &b).ok_or_else(|| {
        bad(
            line,
            format!("TRIGGER {id}: {param} cannot change during a trial"),
        )
    })?;
    let _ = tr.settings.push(s);
    Ok(tr)
}

/// Converts an FTAP parameter file's text into an [`Experiment`] named `name`.
///
/// # Errors
/// [`ErrorKind::UnknownKeyword`] for a keyword not in [`KEYWORDS`] (or a
/// trigger parameter that is neither one of them nor END_EXP),
/// [`ErrorKind::Syntax`] for an unparseable `TRIGGER` line and
/// [`ErrorKind::Invalid`] for bad or repeated values — each with its line.
pub fn import(text: &str, name: &str) -> Result<Import> {
    let mut raw = Raw::default();
    let mut triggers: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let content = line.split('#').next().unwrap_or("");
        let mut toks = content.split_whitespace().map(str::to_string);
        let Some(kw) = toks.next() else { continue };
        let rest: Vec<String> = toks.collect();
        if kw == "TRIGGER" {
            triggers.push((n, rest));
            continue;
        }
        if kw == "END_EXP" {
            return Err(Error::at(
                ErrorKind::Syntax,
                n,
                1,
                "END_EXP ends a trial from a trigger: write `TRIGGER id K|T|M count END_EXP 0`",
            ));
        }
        if !KEYWORDS.contains(&kw.as_str()) {
            let col = line.find(&kw).map_or(1, |c| line[..c].chars().count() + 1);
            return Err(Error::at(
                ErrorKind::UnknownKeyword,
                n,
                col,
                format!(
                    "unknown FTAP keyword `{kw}`; expected TRIGGER or one of {}",
                    KEYWORDS.join(" ")
                ),
            ));
        }
        if rest.is_empty() {
            return Err(bad(n, format!("{kw} needs a value")));
        }
        if let Some((prev, _)) = raw.values.get(&kw) {
            return Err(bad(
                n,
                format!("{kw} is already set on line {prev}; give each keyword once"),
            ));
        }
        raw.values.insert(kw, (n, rest));
    }
    let b = build(&raw)?;
    let trs = triggers
        .iter()
        .map(|(l, t)| trigger(&raw, *l, t))
        .collect::<Result<Vec<_>>>()?;
    if trs.len() > crate::experiment::MAX_TRIGGERS {
        return Err(bad(
            triggers[crate::experiment::MAX_TRIGGERS].0,
            format!(
                "at most {} triggers are allowed",
                crate::experiment::MAX_TRIGGERS
            ),
        ));
    }
    let mut notes = Vec::new();
    if !trs.iter().any(|t| t.end) {
        notes.push("no TRIGGER … END_EXP line: add an [end] table (keystrokes, beats or duration_ms) before running".to_string());
    }
    Ok(Import {
        experiment: Experiment {
            name: name.to_string(),
            description: format!("imported from FTAP parameter file {name}"),
            feedback: b.feedback[0],
            feedback2: b.feedback[1],
            metronome: b.metronome,
            masking: b.masking,
            output: Output::default(),
            input: crate::experiment::Input::default(),
            end: TrialEnd::default(),
            triggers: trs,
        },
        notes,
    })
}
