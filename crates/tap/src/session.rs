//! Sessions: which trials run in which order, what each trial's files are
//! called, and writing a finished trial (CSV + sidecar, atomically).
//!
//! A session is one subject's run of trials. Trial *n* of session *s* for
//! subject *S* is written, when it ends, as `S-s<s>-t<n>.csv` and `.json`
//! (zero-padded: `P07-s02-t013.csv`) through [`data::write_trial`]: a
//! `kill -9` loses only the trial that was running, whose data were in RAM.
//! Temporary files are hidden (`.P07-s02-t013.csv.tmp<pid>`) and never end
//! in `.csv`, so they are never mistaken for trials.
//!
//! # Real-time contract
//!
//! Nothing here runs during a trial: planning and writing allocate.

use std::path::{Path, PathBuf};

use firmtime_rt::setup::RtConditions;
use firmtime_rt::system::Provenance;

use crate::data::{self, Sidecar, FORMAT_VERSION};
use crate::engine::{EndReason, Engine, TrialOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::late::LateReport;
use firmtime_rt::rng::Rng;

/// Most trials one session may list.
pub const MAX_TRIALS: usize = 10_000;

/// Parses a trial list: comma-separated 1-based experiment numbers, each
/// optionally repeated with `xN` (`1,2,1x3` = 1, 2, 1, 1, 1). Returns
/// 0-based indexes into the experiments given.
///
/// # Errors
/// [`ErrorKind::Invalid`] naming the bad item: not a number, 0, beyond
/// `n_experiments`, a zero repeat, or more than [`MAX_TRIALS`] in all.
pub fn parse_trial_list(spec: &str, n_experiments: usize) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim) {
        let (num, rep) = match item.split_once(['x', 'X']) {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (item, "1"),
        };
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Invalid,
                format!(
                    "trial list item `{item}`: {why} (expected experiment numbers 1–{n_experiments}, \
                     each optionally repeated as NxCOUNT, e.g. `1,2,1x3`)"
                ),
            )
        };
        let n: usize = num.parse().map_err(|_| bad("not a number"))?;
        if n == 0 || n > n_experiments {
            return Err(bad("no such experiment"));
        }
        let r: usize = rep
            .parse()
            .map_err(|_| bad("repeat count is not a number"))?;
        if r == 0 {
            return Err(bad("repeat count must be at least 1"));
        }
        if out.len() + r > MAX_TRIALS {
            return Err(bad(&format!("more than {MAX_TRIALS} trials")));
        }
        out.extend(std::iter::repeat(n - 1).take(r));
    }
    Ok(out)
}

/// Shuffles `list` (Fisher–Yates) with a generator seeded by `seed`: the
/// same seed gives the same order, so a recorded seed reproduces it.
pub fn shuffle(list: &mut [usize], seed: u64) {
    let mut rng = Rng::new(seed);
    for i in (1..list.len()).rev() {
        let j = rng.below(i as u32 + 1) as usize;
        list.swap(i, j);
    }
}

/// The seed of trial `trial`'s random feedback, from the session seed.
pub fn trial_seed(session_seed: u64, trial: u32) -> u64 {
    let mut r = Rng::new(session_seed ^ (u64::from(trial) << 32));
    r.next_u64()
}

/// Checks that a subject identifier is safe in a file name.
///
/// # Errors
/// [`ErrorKind::Invalid`] when it is empty, longer than 64 characters, or
/// has characters other than letters, digits, `-` and `_`.
pub fn check_subject(subject: &str) -> Result<()> {
    if subject.is_empty()
        || subject.len() > 64
        || !subject
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!(
                "subject `{subject}`: use 1–64 letters, digits, `-` or `_` (it becomes part of file names)"
            ),
        ));
    }
    Ok(())
}

/// The path stem of a trial's files: `DIR/S-s02-t013`.
pub fn trial_stem(dir: &Path, subject: &str, session: u32, trial: u32) -> PathBuf {
    dir.join(format!("{subject}-s{session:02}-t{trial:03}"))
}

/// Trial files (`.csv`/`.json`) already in `dir` for this subject and
/// session, sorted; temporary files are not listed.
pub fn existing_trial_files(dir: &Path, subject: &str, session: u32) -> Vec<PathBuf> {
    let prefix = format!("{subject}-s{session:02}-t");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| {
                n.starts_with(&prefix) && (n.ends_with(".csv") || n.ends_with(".json"))
            })
        })
        .collect();
    v.sort();
    v
}

/// True if `name` is a temporary file left by an interrupted atomic write.
pub fn is_temp_file(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp")
}

/// Who and what a trial belongs to, for its sidecar.
#[derive(Debug, Clone)]
pub struct TrialMeta {
    /// Subject identifier.
    pub subject: String,
    /// Session number.
    pub session: u32,
    /// Trial number in the session (1-based).
    pub trial: u32,
    /// The experiment file's name.
    pub experiment_file: String,
    /// Its text as run.
    pub experiment_toml: String,
    /// The seed (trial order and random feedback).
    pub seed: u64,
    /// The RT conditions of the engine thread.
    pub rt: Option<RtConditions>,
    /// What stopped an interrupted trial (`SIGINT`, `SIGTERM`, `SIGHUP`),
    /// recorded in the sidecar's `stopped_by`; `None` for a trial that was
    /// not stopped.
    pub stopped_by: Option<String>,
    /// The backend's words on the loss of the input, for a trial that
    /// ended for it ([`firmtime_midi::MidiBackend::describe_input_loss`]).
    pub input_loss_detail: Option<String>,
    /// The audio input port taps from sound came in on (empty: unknown or none).
    pub audio_input_port: String,
}

/// Writes a finished trial: its events (from `engine`) as `<stem>.csv` and
/// the sidecar as `<stem>.json` with the causes of its late outputs
/// (`late`), atomically, CSV first. Returns the sidecar.
///
/// # Errors
/// As [`data::write_trial`].
pub fn write_trial(
    stem: &Path,
    engine: &Engine,
    outcome: &TrialOutcome,
    late: LateReport,
    meta: &TrialMeta,
    provenance: Provenance,
) -> Result<Sidecar> {
    write_trial_certified(stem, engine, outcome, late, meta, provenance, None)
}

/// As [`write_trial`], with the session's timing certificate: the
/// sidecar's `certificate` and the CSV's `certificate` rows (docs/TAP.md §11).
///
/// # Errors
/// As [`data::write_trial`].
pub fn write_trial_certified(
    stem: &Path,
    engine: &Engine,
    outcome: &TrialOutcome,
    late: LateReport,
    meta: &TrialMeta,
    provenance: Provenance,
    certificate: Option<&crate::certificate::Certificate>,
) -> Result<Sidecar> {
    let rows = trial_rows(engine);
    let events = rows.events;
    let sidecar = Sidecar {
        format_version: FORMAT_VERSION,
        subject: meta.subject.clone(),
        session: meta.session,
        trial: meta.trial,
        experiment_file: meta.experiment_file.clone(),
        experiment_toml: meta.experiment_toml.clone(),
        seed: meta.seed,
        provenance,
        rt: meta.rt.clone(),
        self_checks: outcome.self_checks().with_late(late),
        incomplete: outcome.incomplete(),
        input_lost: outcome
            .input_loss
            .map(|l| data::InputLost::of(l, outcome.start_ns, meta.input_loss_detail.clone())),
        stopped_by: if outcome.reason == EndReason::Interrupted {
            meta.stopped_by.clone()
        } else {
            None
        },
        events: events.len() as u64,
        audio_input: engine
            .audio_report()
            .map(|r| data::AudioInputInfo::of(r, &meta.audio_input_port)),
        pairing: rows.pairing,
        certificate: certificate.cloned(),
    };
    data::write_trial_with(stem, &events, rows.extras.as_deref(), &sidecar)?;
    Ok(sidecar)
}

/// A trial's rows as written: its events and, with an audio input, the
/// extra columns of each row and (`midi+audio`) the pairing.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRows {
    /// The CSV's rows.
    pub events: Vec<data::Event>,
    /// Their extra columns ([`data::CSV_HEADER_AUDIO`]); `None`: MIDI input.
    pub extras: Option<Vec<data::RowExtra>>,
    /// MIDI paired with sound (`[input] source = "midi+audio"`).
    pub pairing: Option<crate::pairing::PairingSummary>,
}

/// The rows of the last trial of `engine` (allocates; after the trial).
/// With `midi+audio`, every sound is a `sound` row (its keystroke, or 0)
/// and each MIDI press has its pad delay or the flag `no_sound`; a sound
/// after the trial's `end` row is left out.
pub fn trial_rows(engine: &Engine) -> TrialRows {
    let mut events = engine.data_events();
    if engine.audio_report().is_none() {
        return TrialRows {
            events,
            extras: None,
            pairing: None,
        };
    }
    let taps = engine.audio_taps();
    if !engine.pairs_midi_with_sound() {
        let data: Vec<data::AudioTapData> = taps.into_iter().map(Into::into).collect();
        let by_key: std::collections::HashMap<u32, data::AudioTapData> =
            data.iter().map(|t| (t.keystroke, *t)).collect();
        let extras = events
            .iter()
            .map(|e| {
                let t = (e.kind == data::EventKind::Input && e.note.is_some_and(|n| n.on))
                    .then(|| by_key.get(&e.index))
                    .flatten();
                t.map_or_else(data::RowExtra::default, |t| data::RowExtra {
                    source: Some("audio"),
                    onset_frame: Some(t.onset_frame),
                    peak_dbfs: Some(t.peak_dbfs),
                    confidence_db: Some(t.confidence_db),
                    ..data::RowExtra::default()
                })
            })
            .collect();
        return TrialRows {
            events,
            extras: Some(extras),
            pairing: None,
        };
    }
    let start = engine.start_ns();
    let rel = |t: u64| (i128::from(t) - i128::from(start)).div_euclid(1000) as i64;
    let end_us = events
        .iter()
        .rev()
        .find(|e| e.kind == data::EventKind::End)
        .map_or(i64::MAX, |e| e.actual_us);
    let sounds: Vec<(i64, crate::engine::AudioTap)> = taps
        .into_iter()
        .map(|t| (rel(t.t_ns), t))
        .filter(|(us, _)| *us <= end_us)
        .collect();
    let press_rows: Vec<usize> = (0..events.len())
        .filter(|&i| {
            events[i].kind == data::EventKind::Input
                && events[i].note.is_some_and(|n| n.on && n.velocity > 0)
        })
        .collect();
    let press_us: Vec<i64> = press_rows.iter().map(|&i| events[i].actual_us).collect();
    let sound_us: Vec<i64> = sounds.iter().map(|s| s.0).collect();
    let pairs = crate::pairing::pair(&press_us, &sound_us);
    let summary = crate::pairing::PairingSummary::of(&press_us, &sound_us, &pairs);
    let mut extras = vec![data::RowExtra::default(); events.len()];
    for (p, &row) in press_rows.iter().enumerate() {
        let x = &mut extras[row];
        x.source = Some("midi");
        match pairs.sound_of_press[p] {
            Some(j) => {
                let t = sounds[j].1;
                x.onset_frame = Some(t.onset_frame);
                x.peak_dbfs = Some(t.peak_dbfs);
                x.confidence_db = Some(t.confidence_db);
                x.pad_delay_us = Some(press_us[p] - sound_us[j]);
            }
            None => x.flag = Some("no_sound"),
        }
    }
    for (j, (us, t)) in sounds.iter().enumerate() {
        let keystroke = pairs.press_of_sound[j].map_or(0, |p| events[press_rows[p]].index);
        events.push(data::Event {
            kind: data::EventKind::Sound,
            index: keystroke,
            intended_us: None,
            actual_us: *us,
            note: None,
        });
        extras.push(data::RowExtra {
            source: Some("audio"),
            onset_frame: Some(t.onset_frame),
            peak_dbfs: Some(t.peak_dbfs),
            confidence_db: Some(t.confidence_db),
            pad_delay_us: pairs.press_of_sound[j].map(|p| press_us[p] - us),
            flag: pairs.press_of_sound[j].is_none().then_some("no_midi"),
        });
    }
    // In time order, the end row last (stable: a sound at the end's time before it).
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| (events[i].kind == data::EventKind::End, events[i].actual_us));
    TrialRows {
        events: order.iter().map(|&i| events[i]).collect(),
        extras: Some(order.iter().map(|&i| extras[i]).collect()),
        pairing: Some(summary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_list_repeats_and_errors_name_the_item() {
        assert_eq!(parse_trial_list("1,2,1x3", 2).unwrap(), [0, 1, 0, 0, 0]);
        assert_eq!(parse_trial_list(" 2 x 2 ", 2).unwrap(), [1, 1]);
        let e = parse_trial_list("1,3", 2).unwrap_err();
        assert!(e.message().contains("`3`"), "{e}");
        assert!(parse_trial_list("1x0", 1).is_err());
        assert!(parse_trial_list("a", 1).is_err());
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<usize> = (0..20).collect();
        let mut b = a.clone();
        shuffle(&mut a, 42);
        shuffle(&mut b, 42);
        assert_eq!(a, b);
        assert_ne!(a, (0..20).collect::<Vec<_>>());
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn stems_and_subjects() {
        assert_eq!(
            trial_stem(Path::new("d"), "P07", 2, 13),
            Path::new("d/P07-s02-t013")
        );
        assert!(check_subject("P07_a-1").is_ok());
        assert!(check_subject("../x").is_err());
        assert!(check_subject("").is_err());
        assert!(is_temp_file(".P07-s02-t013.csv.tmp1234"));
        assert!(!is_temp_file("P07-s02-t013.csv"));
    }
}
