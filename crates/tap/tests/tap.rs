//! firmtime-tap integration tests: example files, error locations, FTAP
//! import, CSV round trip, analysis on hand-made and synthetic data.

use firmtime_tap::analysis::{self, AnalysisConfig, Phase};
use firmtime_tap::data::{self, Event, EventKind, NoteData};
use firmtime_tap::experiment::TriggerAt;
use firmtime_tap::params::{Delay, Ms, NoteLength, Pitch, Setting, Step, VelocityMode, Voice};
use firmtime_tap::{ftap, ftap_out, ErrorKind, Experiment, Rng};
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        // examples/rack-*.toml are `firmtime rack` files, not experiments.
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("rack-"))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_parses_and_round_trips() {
    let files = examples();
    assert!(
        files.len() >= 5,
        "expected the five paradigm examples, found {files:?}"
    );
    for f in files {
        let e = Experiment::load(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!e.name.is_empty(), "{}", f.display());
        let back = Experiment::from_toml(&e.to_toml().unwrap()).unwrap();
        assert_eq!(back, e, "{}", f.display());
        assert!(e.summary().contains(&e.name));
    }
}

#[test]
fn example_contents_match_their_paradigm() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let sc = Experiment::load(&dir.join("sync-continuation.toml")).unwrap();
    assert!(sc.metronome.on);
    assert_eq!(sc.metronome.mspb.us(), 500_000);
    assert_eq!(sc.triggers[0].at, TriggerAt::Beat(12));
    assert_eq!(
        sc.triggers[0].settings.as_slice(),
        &[Setting::MetronomeOn(false)]
    );
    assert_eq!(sc.end.keystrokes, Some(42));

    let w = Experiment::load(&dir.join("wing1977-perturbation.toml")).unwrap();
    let mut p = w.params();
    let mut rng = Rng::new(0);
    // Replay the triggers keystroke by keystroke: only keystrokes 20, 28, 36
    // (1-based) are delayed.
    let mut delayed = Vec::new();
    for k in 1..=45u32 {
        for t in w
            .triggers
            .iter()
            .filter(|t| t.at == TriggerAt::Keystroke(k - 1))
        {
            for s in t.settings.as_slice() {
                p.apply(s);
            }
        }
        if p.feedback[0].delay.sample_us(u64::from(k - 1), &mut rng) > 0 {
            delayed.push(k);
        }
    }
    assert_eq!(delayed, [20, 28, 36]);

    let f = Experiment::load(&dir.join("finney1997-pitch.toml")).unwrap();
    assert!(f.feedback.keys.contains(59) && !f.feedback.keys.contains(60));
    assert!(f.feedback2.on && f.feedback2.keys.contains(60));
}

fn err(text: &str) -> firmtime_tap::Error {
    Experiment::from_toml(text).unwrap_err()
}

#[test]
fn errors_name_line_and_column() {
    // Out of range channel: the value's position.
    let e = err("name = \"x\"\n[feedback]\nchannel = 17\n[end]\nkeystrokes = 3\n");
    assert_eq!((e.line(), e.column()), (Some(3), Some(11)), "{e}");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(
        e.message().contains("MIDI channel must be 1–16, got 17"),
        "{e}"
    );

    // Unknown key.
    let e = err("[metronome]\nmspb = 500\ntempo = 120\n[end]\nbeats = 3\n");
    assert_eq!((e.line(), e.column()), (Some(3), Some(1)), "{e}");
    assert!(e.message().contains("unknown field `tempo`"), "{e}");

    // Unknown mode inside an inline table.
    let e = err("[feedback]\ndelay = { mode = \"fixd\", ms = 3 }\n[end]\nbeats = 3\n");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(e.message().contains("unknown variant `fixd`"), "{e}");

    // Cross-field rule: bounds, located at the feedback table.
    let e = err("[feedback]\ndelay = { mode = \"uniform\", min_ms = 300, max_ms = 100 }\n[end]\nbeats = 3\n");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(e.message().contains("min_ms ≤ max_ms"), "{e}");

    // Note out of range in a key range.
    let e = err("[feedback]\nkeys = [0, 128]\n[end]\nbeats = 3\n");
    assert_eq!((e.line(), e.column()), (Some(2), Some(8)), "{e}");

    // TOML syntax error.
    let e = err("[feedback\nchannel = 1\n");
    assert_eq!(e.kind(), ErrorKind::Syntax);
    assert_eq!(e.line(), Some(1), "{e}");

    // Trigger with an unknown parameter path: located at its [[trigger]] header.
    let e = err("[end]\nbeats = 3\n\n[[trigger]]\nbeat = 2\nset.metronome.tempo = 3\n");
    assert_eq!(e.line(), Some(4), "{e}");
    assert!(
        e.message().contains("unknown parameter `metronome.tempo`"),
        "{e}"
    );

    // Trigger with two points.
    let e = err("[end]\nbeats = 3\n[[trigger]]\nbeat = 2\nkeystroke = 3\nend = true\n");
    assert!(e.message().contains("exactly one of"), "{e}");

    // Pattern channels must match the pattern: a rule of the table, located at its header.
    let e = err("[metronome]\npattern = [\"accent\", \"beat\"]\npattern_channels = [10]\n[end]\nbeats = 3\n");
    assert_eq!((e.line(), e.column()), (Some(1), Some(1)), "{e}");
    assert!(
        e.message()
            .contains("pattern_channels has 1 entries but pattern has 2"),
        "{e}"
    );

    // A trial that cannot end.
    let e = err("[feedback]\n");
    assert!(e.message().contains("never ends"), "{e}");
}

#[test]
fn triggers_can_set_nested_and_quoted_paths() {
    let e = Experiment::from_toml(
        "[end]\nbeats = 3\n[[trigger]]\nid = 7\nelapsed_ms = 2500.5\nset = { \"metronome.mspb\" = 400, feedback2 = { on = true, velocity = { mode = \"scaled\", factor = 0.5 } } }\n",
    )
    .unwrap();
    let t = &e.triggers[0];
    assert_eq!(t.id, 7);
    assert_eq!(t.at, TriggerAt::Elapsed(Ms::from_us(2_500_500)));
    let s = t.settings.as_slice();
    assert!(s.contains(&Setting::MetronomeMspb(Ms::from_ms(400))));
    assert!(s.contains(&Setting::FeedbackOn(Voice::Second, true)));
    assert!(s.contains(&Setting::FeedbackVelocity(
        Voice::Second,
        VelocityMode::Scaled { factor: 0.5 }
    )));
}

#[test]
fn ftap_import_maps_every_keyword() {
    let text = std::fs::read_to_string(data("daf-sync.ftap")).unwrap();
    let imp = ftap::import(&text, "daf-sync").unwrap();
    assert!(imp.notes.is_empty(), "{:?}", imp.notes);
    let e = &imp.experiment;
    let f = &e.feedback;
    assert!(f.on);
    assert_eq!(f.channel.get(), 2);
    assert_eq!(
        f.pitch,
        Pitch::Fixed {
            note: firmtime_tap::params::Note::new(72).unwrap()
        }
    );
    assert_eq!(
        f.velocity,
        VelocityMode::Fixed {
            velocity: firmtime_tap::params::Velocity::new(90).unwrap()
        }
    );
    assert_eq!(
        f.duration,
        NoteLength::Fixed {
            ms: Ms::from_ms(100)
        }
    );
    assert_eq!(
        f.delay,
        Delay::Fixed {
            ms: Ms::from_ms(200)
        }
    );
    let g = &e.feedback2;
    assert!(g.on);
    assert_eq!(g.channel.get(), 3);
    assert_eq!(g.pitch, Pitch::Transpose { semitones: -12 });
    assert_eq!(
        g.delay,
        Delay::Uniform {
            min_ms: Ms::from_ms(100),
            max_ms: Ms::from_ms(300)
        }
    );
    let m = &e.metronome;
    assert!(m.on);
    assert_eq!(
        (
            m.mspb.us(),
            m.channel.get(),
            m.note.get(),
            m.velocity.get(),
            m.length_ms.us()
        ),
        (600_000, 10, 76, 110, 40_000)
    );
    assert_eq!(
        m.pattern.as_slice(),
        &[Step::Accent, Step::Beat, Step::Beat, Step::Rest]
    );
    assert_eq!(
        m.pattern_channels
            .as_slice()
            .iter()
            .map(|c| c.get())
            .collect::<Vec<_>>(),
        [10, 10, 10, 11]
    );
    assert!(e.masking.on);
    assert_eq!(
        (
            e.masking.channel.get(),
            e.masking.note.get(),
            e.masking.velocity.get()
        ),
        (16, 61, 80)
    );

    let t = &e.triggers;
    assert_eq!(t.len(), 5);
    assert_eq!((t[0].id, t[0].at), (1, TriggerAt::Beat(16)));
    assert_eq!(
        t[0].settings.as_slice(),
        &[Setting::MetronomeMspb(Ms::from_ms(500))]
    );
    assert_eq!(t[1].settings.as_slice(), &[Setting::MetronomeOn(false)]);
    assert_eq!(t[2].at, TriggerAt::Keystroke(40));
    assert_eq!(
        t[2].settings.as_slice(),
        &[Setting::FeedbackDelay(Voice::First, Delay::None)]
    );
    assert_eq!(t[3].at, TriggerAt::Elapsed(Ms::from_ms(60_000)));
    // FEED2_DMODE 1 (list) over the file's FEED2_DVAL 100 300.
    match t[3].settings.as_slice() {
        [Setting::FeedbackDelay(Voice::Second, Delay::List { ms })] => {
            assert_eq!(ms.as_slice(), &[Ms::from_ms(100), Ms::from_ms(300)])
        }
        other => panic!("{other:?}"),
    }
    assert!(t[4].end && t[4].settings.is_empty());

    // The written TOML is a valid experiment file that reads back equal.
    let back = Experiment::from_toml(&e.to_toml().unwrap()).unwrap();
    assert_eq!(&back, e);
}

#[test]
fn ftap_unknown_keyword_is_an_error_with_its_line() {
    let text = std::fs::read_to_string(data("unknown-keyword.ftap")).unwrap();
    let e = ftap::import(&text, "x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownKeyword);
    assert_eq!(e.line(), Some(4), "{e}");
    assert!(
        e.message().contains("unknown FTAP keyword `FEED_DELAY`"),
        "{e}"
    );
}

#[test]
fn ftap_unparseable_trigger_is_an_error_with_its_line() {
    let text = std::fs::read_to_string(data("bad-trigger.ftap")).unwrap();
    let e = ftap::import(&text, "x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Syntax);
    assert_eq!(e.line(), Some(3), "{e}");
    assert!(e.message().contains("unknown trigger type `X`"), "{e}");

    for (line, want) in [
        ("TRIGGER 1 K", "expected `TRIGGER id"),
        ("TRIGGER x K 3 MSPB 400", "id must be"),
        ("TRIGGER 1 K 0 MSPB 400", "count must be"),
        ("TRIGGER 1 K 3 TEMPO 400", "unknown parameter `TEMPO`"),
        ("TRIGGER 1 K 3 MSPB", "needs a value"),
        ("TRIGGER 1 K 3 MASK_NOTE 50", "cannot change during a trial"),
        (
            "TRIGGER 1 K 3 MET_VEL 200",
            "MET_VEL: a MIDI velocity must be 1–127, got 200",
        ),
    ] {
        let e = ftap::import(&format!("FEED_ON 1\n{line}\n"), "x").unwrap_err();
        assert_eq!(e.line(), Some(2), "{line}: {e}");
        assert!(e.message().contains(want), "{line}: {e}");
    }
}

#[test]
fn ftap_keyword_values_are_checked() {
    for (text, line, want) in [
        (
            "FEED_CHAN 0\n",
            1,
            "FEED_CHAN: a MIDI channel must be 1–16, got 0",
        ),
        ("FEED_ON 2\n", 1, "expected 0 (off) or 1 (on)"),
        ("FEED_ON 1\nFEED_ON 0\n", 2, "already set on line 1"),
        ("FEED_PMODE 1\n", 1, "FEED_PMODE 1 (FIXED) needs FEED_NOTE"),
        ("FEED_PMODE 7\n", 1, "expected one of 0 (SAME)"),
        (
            "FEED_DMODE 2\nFEED_DVAL 10\n",
            2,
            "takes MIN MAX, got 1 values",
        ),
        ("FEED_DMODE 2\nFEED_DVAL 300 100\n", 2, "min_ms ≤ max_ms"),
        ("MSPB 0\n", 1, "MSPB must be more than 0"),
        ("MSPB fast\n", 1, "MSPB: expected milliseconds"),
        (
            "MET_PATTERN_ARRAY 1 3\n",
            1,
            "expected 0 (rest), 1 (beat) or 2 (accent)",
        ),
        (
            "MET_NOTE 128\n",
            1,
            "MET_NOTE: a MIDI note must be 0–127, got 128",
        ),
        ("END_EXP\n", 1, "ends a trial from a trigger"),
        ("FEED_VEL\n", 1, "FEED_VEL needs a value"),
    ] {
        let e = ftap::import(text, "x").unwrap_err();
        assert_eq!(e.line(), Some(line), "{text:?}: {e}");
        assert!(e.message().contains(want), "{text:?}: {e}");
    }
    // Symbolic mode names work as well as numbers; comments and blank lines are skipped.
    let imp = ftap::import("# hi\n\nFEED_ON 1 # on\nFEED_PMODE random\nFEED_NOTE 60 64 67\nFEED_DMODE NORMAL\nFEED_DVAL 100 20 50 150\n", "x").unwrap();
    let f = imp.experiment.feedback;
    assert!(matches!(f.pitch, Pitch::Random { notes } if notes.len() == 3));
    assert_eq!(
        f.delay,
        Delay::Normal {
            mean_ms: Ms::from_ms(100),
            sd_ms: Ms::from_ms(20),
            min_ms: Ms::from_ms(50),
            max_ms: Ms::from_ms(150)
        }
    );
    assert_eq!(imp.notes.len(), 1, "no END_EXP: a note says to add [end]");
}

#[test]
fn csv_round_trip_and_atomic_write() {
    let mut rng = Rng::new(5);
    let kinds = [
        EventKind::Input,
        EventKind::Feedback,
        EventKind::Feedback2,
        EventKind::Metronome,
        EventKind::Masking,
        EventKind::Trigger,
        EventKind::End,
    ];
    let events: Vec<Event> = (0..500)
        .map(|i| {
            let kind = kinds[rng.below(kinds.len() as u32) as usize];
            let note = (!matches!(kind, EventKind::Trigger | EventKind::End)).then(|| NoteData {
                channel: 1 + rng.below(16) as u8,
                note: rng.below(128) as u8,
                velocity: rng.below(128) as u8,
                on: rng.below(2) == 1,
            });
            Event {
                kind,
                index: i,
                intended_us: (kind != EventKind::Input).then(|| i64::from(i) * 1000 - 7),
                actual_us: i64::from(i) * 1000 + rng.below(900) as i64,
                note,
            }
        })
        .collect();
    let dir = firmtime_rt::testing::ScratchDir::new("tap-csv-round-trip");
    let stem = dir.join("s01-t001");
    let side = data::Sidecar {
        format_version: data::FORMAT_VERSION,
        subject: "s01".into(),
        session: 1,
        trial: 1,
        experiment_file: "x.toml".into(),
        experiment_toml: "[end]\nbeats = 1\n".into(),
        seed: 42,
        provenance: firmtime_rt::system::Provenance::begin(vec!["firmtime".into(), "test".into()]),
        rt: None,
        self_checks: data::SelfChecks {
            late_outputs: 2,
            late_threshold_us: 1000,
            ..Default::default()
        },
        incomplete: true,
        input_lost: None,
        stopped_by: Some("SIGTERM".into()),
        events: events.len() as u64,
        audio_input: None,
        pairing: None,
        certificate: None,
    };
    data::write_trial(&stem, &events, &side).unwrap();
    let text = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
    assert_eq!(text.lines().next(), Some(data::CSV_HEADER));
    assert_eq!(text.lines().count(), events.len() + 1);
    assert!(text.lines().all(|l| l.split(',').count() == 8));
    assert_eq!(data::read_csv(&text).unwrap(), events);
    let json: data::Sidecar =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            json.subject.as_str(),
            json.seed,
            json.incomplete,
            json.self_checks.late_outputs
        ),
        ("s01", 42, true, 2)
    );
    assert_eq!(json.stopped_by.as_deref(), Some("SIGTERM"));
    // No temp files left behind.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn csv_reader_rejects_foreign_files() {
    let e = data::read_csv("a,b,c\n1,2,3\n").unwrap_err();
    assert_eq!((e.kind(), e.line()), (ErrorKind::Format, Some(1)));
    let e = data::read_csv(&format!("{}\nclick,1,,5,,,,\n", data::CSV_HEADER)).unwrap_err();
    assert_eq!((e.line(), e.column()), (Some(2), Some(1)));
    assert!(e.message().contains("unknown kind"), "{e}");
}

#[test]
fn analysis_of_a_small_hand_made_trial() {
    let ev = data::read_csv(&std::fs::read_to_string(data("trial-small.csv")).unwrap()).unwrap();
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert_eq!(
        a.taps.iter().map(|t| t.time_us).collect::<Vec<_>>(),
        [20_000, 480_000, 1_010_000, 1_490_000, 2_520_000]
    );
    assert_eq!(a.double_taps, 1);
    assert_eq!((a.beats, a.ibi_us), (2, Some(499_998)));
    assert_eq!(
        a.taps.iter().map(|t| t.phase).collect::<Vec<_>>(),
        [
            Phase::Synchronization,
            Phase::Synchronization,
            Phase::Continuation,
            Phase::Continuation,
            Phase::Continuation
        ]
    );
    assert_eq!(
        a.taps.iter().map(|t| t.asynchrony_us).collect::<Vec<_>>(),
        [Some(19_988), Some(-20_010), None, None, None]
    );
    assert_eq!(
        a.taps.iter().map(|t| t.iti_us).collect::<Vec<_>>(),
        [
            None,
            Some(460_000),
            Some(530_000),
            Some(480_000),
            Some(1_030_000)
        ]
    );
    assert_eq!(
        a.taps.iter().map(|t| t.gap).collect::<Vec<_>>(),
        [false, false, false, false, true]
    );
    let [s, c] = a.phases;
    assert_eq!(
        (s.taps, s.double_taps, s.itis, s.missing, s.asynchronies),
        (2, 1, 1, 0, 2)
    );
    assert_eq!(s.iti_mean_us, None);
    assert_eq!(s.async_mean_us, Some(-11.0));
    assert!((s.async_sd_us.unwrap() - 19_999.0 * 2f64.sqrt()).abs() < 1e-6);
    assert_eq!((c.taps, c.double_taps, c.itis, c.missing), (3, 0, 2, 1));
    assert_eq!(c.iti_mean_us, Some(505_000.0));
    assert!((c.iti_sd_us.unwrap() - 25_000.0 * 2f64.sqrt()).abs() < 1e-6);
    assert_eq!(c.drift_us_per_iti, Some(-50_000.0));
    assert_eq!(c.wk, None);

    let sum = analysis::summary_csv(&[("t1".into(), a.clone())]);
    let lines: Vec<&str> = sum.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], analysis::SUMMARY_HEADER);
    assert!(lines
        .iter()
        .all(|l| l.split(',').count() == analysis::SUMMARY_HEADER.split(',').count()));
    assert!(
        lines[2].starts_with("t1,continuation,3,0,1,2,505000.000,"),
        "{}",
        lines[2]
    );
    let taps = analysis::taps_csv(&a);
    assert_eq!(
        taps.lines().nth(5),
        Some("5,2520000,continuation,1030000,1,")
    );
}

/// `n` events of `kind` every `gap_us` from `from_us` (note-ons).
fn onsets(kind: EventKind, from_us: i64, gap_us: i64, n: usize) -> Vec<Event> {
    (0..n)
        .map(|k| Event {
            kind,
            index: k as u32 + 1,
            intended_us: None,
            actual_us: from_us + k as i64 * gap_us,
            note: Some(NoteData {
                channel: 1,
                note: 60,
                velocity: 80,
                on: true,
            }),
        })
        .collect()
}

fn end_at(us: i64) -> Event {
    Event {
        kind: EventKind::End,
        index: 0,
        intended_us: Some(us),
        actual_us: us,
        note: None,
    }
}

/// Regression (issue 28, item 2): a keyboard gone 6 s into a
/// synchronization–continuation trial that then ran to its 60-s end was
/// analyzed as a continuation phase of "0 taps, 0 missing". A phase with no
/// input where input was expected is flagged; one that never was expected
/// is not.
#[test]
fn analysis_flags_a_phase_with_no_taps_where_taps_were_expected() {
    // 12 beats at 500 ms with a tap on each, then nothing until 60 s.
    let mut ev = onsets(EventKind::Metronome, 0, 500_000, 12);
    ev.extend(onsets(EventKind::Input, 10_000, 500_000, 12));
    ev.push(end_at(60_000_000));
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert_eq!(
        (a.phases[0].taps, a.phases[1].taps, a.phases[1].missing),
        (12, 0, 0)
    );
    assert_eq!(
        a.flags,
        [analysis::Flag {
            phase: Some(Phase::Continuation),
            message:
                "no taps in the 54.250 s the trial went on after the metronome (5.750–60.000 s)"
                    .into()
        }]
    );
    // Ended right after the metronome (its keystroke end): no continuation was expected.
    let n = ev.len();
    ev[n - 1] = end_at(5_600_000 + 2 * 500_000 - 1);
    assert_eq!(analysis::analyze(&ev, &AnalysisConfig::default()).flags, []);
    // No tap while the metronome played, taps after it.
    let mut ev = onsets(EventKind::Metronome, 0, 500_000, 4);
    ev.extend(onsets(EventKind::Input, 3_000_000, 500_000, 6));
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert_eq!(a.flags.len(), 1, "{:?}", a.flags);
    assert_eq!(a.flags[0].phase, Some(Phase::Synchronization));
    assert!(a.flags[0]
        .message
        .starts_with("no taps while 4 metronome beats sounded"));
    // No tap at all.
    let mut ev = onsets(EventKind::Metronome, 0, 500_000, 4);
    ev.push(end_at(3_000_000));
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert_eq!(a.flags.len(), 1);
    assert_eq!(a.flags[0].phase, None);
    // Taps before the start (an older file): left out, flagged.
    let mut ev = onsets(EventKind::Metronome, 0, 500_000, 12);
    ev.extend(onsets(EventKind::Input, -5_800_000, 500_000, 12));
    ev.extend(onsets(EventKind::Input, 10_000, 500_000, 12));
    ev.push(end_at(6_000_000));
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert_eq!(a.taps.len(), 12, "the taps before the start are left out");
    assert!(a.taps.iter().all(|t| t.time_us >= 0));
    assert_eq!(a.phases[0].taps, 12);
    assert_eq!(a.flags.len(), 1, "{:?}", a.flags);
    assert!(
        a.flags[0]
            .message
            .starts_with("12 taps before the trial's start"),
        "{:?}",
        a.flags
    );
    // The hand-made trial has taps in both phases: nothing flagged.
    let ev = data::read_csv(&std::fs::read_to_string(data("trial-small.csv")).unwrap()).unwrap();
    assert_eq!(analysis::analyze(&ev, &AnalysisConfig::default()).flags, []);
}

#[test]
fn analysis_debounce_is_configurable() {
    let ev = data::read_csv(&std::fs::read_to_string(data("trial-small.csv")).unwrap()).unwrap();
    let a = analysis::analyze(
        &ev,
        &AnalysisConfig {
            debounce_us: 5_000,
            ..Default::default()
        },
    );
    assert_eq!(a.double_taps, 0);
    assert_eq!(a.taps.len(), 6);
}

#[test]
fn wing_kristofferson_exact_on_a_hand_series() {
    // x = 1, 3, 1, 3: mean 2, γ(0) = 4/3, γ(1) = (−1·1)·3/3 = −1.
    let w = analysis::wing_kristofferson(&[1.0, 3.0, 1.0, 3.0]).unwrap();
    assert!((w.iti_var - 4.0 / 3.0).abs() < 1e-12);
    assert!((w.acov1 + 1.0).abs() < 1e-12);
    assert!((w.motor_var - 1.0).abs() < 1e-12);
    assert!((w.clock_var - (4.0 / 3.0 - 2.0)).abs() < 1e-12);
    assert!(!w.model_holds, "γ(1) < −γ(0)/2 breaks the model");
    assert_eq!(analysis::slope(&[3.0, 5.0, 7.0]), Some(2.0));
}

/// Taps from the Wing–Kristofferson model: I_n = C_n + M_{n+1} − M_n.
fn wk_taps(n: usize, clock_mean: f64, clock_sd: f64, motor_sd: f64, seed: u64) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let mut clock = 1_000_000.0;
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let t = clock + motor_sd * rng.next_normal();
        out.push(Event {
            kind: EventKind::Input,
            index: k as u32 + 1,
            intended_us: None,
            actual_us: t.round() as i64,
            note: Some(NoteData {
                channel: 1,
                note: 60,
                velocity: 80,
                on: true,
            }),
        });
        clock += clock_mean + clock_sd * rng.next_normal();
    }
    out
}

#[test]
fn wing_kristofferson_estimates_converge_on_synthetic_taps() {
    // Clock sd 20 ms, motor sd 10 ms at 500 ms: true clock variance 4e8 µs²,
    // motor variance 1e8 µs². Statistical check on a long seeded series.
    let ev = wk_taps(200_000, 500_000.0, 20_000.0, 10_000.0, 1973);
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    let c = a.phases[1];
    assert_eq!(a.phases[0].taps, 0, "no metronome: all continuation");
    assert_eq!(c.missing, 0);
    let w = c.wk.unwrap();
    assert!(w.model_holds);
    assert!(
        (w.clock_var / 4.0e8 - 1.0).abs() < 0.03,
        "clock var {}",
        w.clock_var
    );
    assert!(
        (w.motor_var / 1.0e8 - 1.0).abs() < 0.05,
        "motor var {}",
        w.motor_var
    );
    assert!((c.iti_mean_us.unwrap() / 500_000.0 - 1.0).abs() < 0.001);
    assert!(c.drift_us_per_iti.unwrap().abs() < 1.0);
}

#[test]
fn drift_recovers_a_linear_tempo_change() {
    // ITIs 500 ms + 100 µs per interval, no noise.
    let mut t = 0i64;
    let mut ev = Vec::new();
    for k in 0..100 {
        ev.push(Event {
            kind: EventKind::Input,
            index: k + 1,
            intended_us: None,
            actual_us: t,
            note: Some(NoteData {
                channel: 1,
                note: 60,
                velocity: 80,
                on: true,
            }),
        });
        t += 500_000 + 100 * i64::from(k);
    }
    let a = analysis::analyze(&ev, &AnalysisConfig::default());
    assert!((a.phases[1].drift_us_per_iti.unwrap() - 100.0).abs() < 1e-6);
}

// --- FTAP's output form (docs/TAP.md §9) -----------------------------------

/// The `.abs` file of the recorded trial `tests/data/ftap-demo-trial.*`
/// (`tap run --backend loopback --input-channel 1`: the metronome on
/// channel 1 comes back as keystrokes, feedback on channel 2 30 ms later,
/// 60 ms after the trigger at keystroke 1). Written by hand from the CSV:
/// ms = floor(actual_us / 1000), sched_ms = floor(intended_us / 1000)
/// (= ms for K), the `end` row as the `# end` line.
const FTAP_DEMO_ABS: &str = "\
# FTAP-form output of ftap-demo-trial.csv, written by firmtime 0.1.0 (docs/TAP.md §9)
# subject S session 1 trial 1 experiment ftap-demo.toml (ftap-demo) seed 7
# started 2026-11-26T07:34:25.781Z ended 2026-11-26T07:34:26.124Z
# parameters (FTAP parameter-file keywords, as firmtime tap import-ftap numbers them):
# FEED_ON 1
# FEED_CHAN 2
# FEED_PMODE 0
# FEED_VMODE 0
# FEED_LEN 0
# FEED_DMODE 0
# FEED_DVAL 30
# FEED2_ON 0
# FEED2_CHAN 2
# FEED2_PMODE 0
# FEED2_VMODE 0
# FEED2_LEN 0
# FEED2_DMODE 0
# FEED2_DVAL 0
# METRON_ON 1
# MSPB 100
# MET_CHAN 1
# MET_NOTE 76
# MET_VEL 100
# MET_LEN 20
# MASK_ON 1
# MASK_CHAN 16
# MASK_NOTE 60
# MASK_VEL 100
# TRIGGER 1 K 1 FEED_DVAL 60
# TRIGGER 2 T 250 END_EXP 0
# not expressible in FTAP keywords: feedback.keys = [0, 100]
# self-checks: output_interval_mean_ms 0.610 output_interval_max_ms 3.696 late_outputs 0 xruns 0 input_overruns 0 events_dropped 0
# end 250 ms (last output 280 ms), by its end condition or a trigger
# ms type on chan note vel seq sched_ms
0 J 1 16 60 100 0 0
100 M 1 1 76 100 1 100
100 K 1 1 76 100 1 100
100 T 0 0 0 0 1 100
120 M 0 1 76 0 1 120
120 K 0 1 76 0 1 120
130 F 1 2 76 100 1 130
150 F 0 2 76 0 1 150
200 M 1 1 76 100 2 200
200 K 1 1 76 100 2 200
220 M 0 1 76 0 2 220
220 K 0 1 76 0 2 220
250 J 0 16 60 0 0 250
260 F 1 2 76 100 2 260
280 F 0 2 76 0 2 280
";

#[test]
fn ftap_export_of_a_recorded_trial_is_exactly_the_hand_checked_file() {
    let got = ftap_out::export_trial(&data("ftap-demo-trial.csv")).unwrap();
    // Line by line first, so a difference names its line.
    for (i, (g, w)) in got.lines().zip(FTAP_DEMO_ABS.lines()).enumerate() {
        assert_eq!(g, w, "line {}", i + 1);
    }
    assert_eq!(got, FTAP_DEMO_ABS);
    // The trigger's 100 108 µs and the masking off's 250 073 µs are read as
    // a millisecond clock reads them: 100 and 250.
    let csv = std::fs::read_to_string(data("ftap-demo-trial.csv")).unwrap();
    assert!(csv.contains("trigger,1,100000,100108,"), "fixture changed");
    assert!(csv.contains("masking,0,250073,250073,"), "fixture changed");
}

/// Our CSV events ↔ FTAP rows: one row per non-`end` event, same order,
/// times in whole ms, the same channel, note, velocity and index; checked
/// on the recorded trial and on events with sub-ms and negative times.
#[test]
fn ftap_rows_match_the_csv_events_one_for_one() {
    let check = |events: &[Event], text: &str| {
        let rows = ftap_out::parse_rows(text).unwrap();
        let kept: Vec<&Event> = events.iter().filter(|e| e.kind != EventKind::End).collect();
        assert_eq!(rows.len(), kept.len(), "one row per event but the end");
        assert_eq!(
            rows.len() + 1,
            events.len(),
            "the end row is the only one left out"
        );
        for (r, e) in rows.iter().zip(&kept) {
            let letter = match e.kind {
                EventKind::Input => 'K',
                EventKind::Feedback | EventKind::Feedback2 => 'F',
                EventKind::Metronome => 'M',
                EventKind::Trigger => 'T',
                EventKind::Masking => 'J',
                EventKind::End | EventKind::Sound => unreachable!(),
            };
            assert_eq!(r.kind, letter, "{e:?}");
            assert_eq!(r.ms, e.actual_us.div_euclid(1000), "{e:?}");
            assert_eq!(
                r.sched_ms,
                e.intended_us.unwrap_or(e.actual_us).div_euclid(1000),
                "{e:?}"
            );
            assert_eq!(r.seq, e.index, "{e:?}");
            match e.note {
                Some(n) => assert_eq!(
                    (r.on, r.chan, r.note, r.vel),
                    (u8::from(n.on), n.channel, n.note, n.velocity),
                    "{e:?}"
                ),
                None => assert_eq!((r.on, r.chan, r.note, r.vel), (0, 0, 0, 0), "{e:?}"),
            }
        }
        // Order: the rows' times are the events' times in the same sequence.
        let t_rows: Vec<i64> = rows.iter().map(|r| r.ms).collect();
        let t_events: Vec<i64> = kept.iter().map(|e| e.actual_us.div_euclid(1000)).collect();
        assert_eq!(t_rows, t_events);
    };

    let csv = std::fs::read_to_string(data("ftap-demo-trial.csv")).unwrap();
    let events = data::read_csv(&csv).unwrap();
    check(
        &events,
        &ftap_out::export_trial(&data("ftap-demo-trial.csv")).unwrap(),
    );

    // Sub-ms and negative times, the second feedback channel, a trigger.
    let note = |channel, note, velocity, on| {
        Some(NoteData {
            channel,
            note,
            velocity,
            on,
        })
    };
    let ev = |kind, index, intended_us, actual_us, note| Event {
        kind,
        index,
        intended_us,
        actual_us,
        note,
    };
    let events = vec![
        ev(EventKind::Input, 1, None, -1_500, note(1, 60, 80, true)),
        ev(EventKind::Feedback2, 1, Some(0), 999, note(3, 62, 80, true)),
        ev(
            EventKind::Metronome,
            1,
            Some(100_000),
            100_999,
            note(10, 76, 100, true),
        ),
        ev(EventKind::Trigger, 4, Some(20_999), 21_000, None),
        ev(EventKind::End, 0, Some(300_000), 300_000, None),
    ];
    let side: data::Sidecar =
        serde_json::from_str(&std::fs::read_to_string(data("ftap-demo-trial.json")).unwrap())
            .unwrap();
    let text = ftap_out::write(&events, &side, "made.csv").unwrap();
    check(&events, &text);
    let rows = ftap_out::parse_rows(&text).unwrap();
    assert_eq!(rows[0].line(), "-2 K 1 1 60 80 1 -2");
    assert_eq!(rows[1].line(), "0 F 1 3 62 80 1 0");
    assert_eq!(rows[2].line(), "100 M 1 10 76 100 1 100");
    assert_eq!(rows[3].line(), "21 T 0 0 0 0 4 20");
}

/// The header's parameter lines are FTAP keywords in import-ftap's
/// numbering: imported back, they give the same feedback, metronome and
/// masking, for each pitch, velocity and delay mode FTAP keywords can say.
#[test]
fn ftap_parameter_lines_import_back_to_the_same_parameters() {
    let cases = [
        r#"[feedback]
channel = 3
pitch = { mode = "fixed", note = 72 }
velocity = { mode = "fixed", velocity = 90 }
duration = { mode = "fixed", ms = 100 }
delay = { mode = "fixed", ms = 275 }
[end]
keystrokes = 40"#,
        r#"[feedback]
pitch = { mode = "transpose", semitones = -12 }
delay = { mode = "list", ms = [0, 0, 200.5] }
[feedback2]
channel = 5
pitch = { mode = "random", notes = [60, 62, 64] }
delay = { mode = "uniform", min_ms = 100, max_ms = 300 }
[metronome]
mspb = 450
channel = 9
note = 80
velocity = 70
length_ms = 25
pattern = ["beat", "rest", "accent", "beat"]
pattern_channels = [9, 9, 10, 9]
[masking]
channel = 15
note = 40
velocity = 30
[end]
beats = 16"#,
        r#"[feedback]
delay = { mode = "normal", mean_ms = 200, sd_ms = 20, min_ms = 150, max_ms = 250 }
[metronome]
on = false
[end]
duration_ms = 60000"#,
    ];
    for toml in cases {
        let e = Experiment::from_toml(toml).unwrap();
        let (lines, cannot) = ftap_out::parameter_lines(&e);
        assert!(cannot.is_empty(), "{toml}: {cannot:?}");
        let imp = ftap::import(&lines.join("\n"), "back").unwrap();
        let b = imp.experiment;
        assert_eq!(b.feedback, e.feedback, "{toml}\n{lines:#?}");
        assert_eq!(b.feedback2, e.feedback2, "{toml}\n{lines:#?}");
        assert_eq!(b.metronome, e.metronome, "{toml}\n{lines:#?}");
        assert_eq!(b.masking, e.masking, "{toml}\n{lines:#?}");
        // The [end] condition comes back as an END_EXP trigger.
        assert!(b.triggers.iter().any(|t| t.end), "{lines:#?}");
        assert!(imp.notes.is_empty(), "{:?}", imp.notes);
    }
    // What FTAP keywords cannot say is listed, not dropped.
    let e = Experiment::from_toml(
        r#"[feedback]
keys = [0, 59]
velocity = { mode = "scaled", factor = 0.5 }
[metronome]
accent_velocity = 120
[end]
keystrokes = 4"#,
    )
    .unwrap();
    let (_, cannot) = ftap_out::parameter_lines(&e);
    assert_eq!(
        cannot,
        [
            "feedback.velocity mode \"scaled\" (factor = 0.5)",
            "feedback.keys = [0, 59]",
            "metronome.accent_velocity = 120"
        ]
    );
}

#[test]
fn ftap_export_without_the_sidecar_names_the_missing_file() {
    let dir = firmtime_rt::testing::ScratchDir::new("tap-ftap-nosidecar");
    let csv = dir.join("S-s01-t001.csv");
    std::fs::copy(data("ftap-demo-trial.csv"), &csv).unwrap();
    let e = ftap_out::export_trial(&csv).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    let json = dir.join("S-s01-t001.json");
    assert!(
        e.message().contains(&format!(
            "cannot read {}, the sidecar of {}",
            json.display(),
            csv.display()
        )),
        "{e}"
    );
    // A sidecar that is not one: named too.
    std::fs::write(&json, "{\"subject\": 1}").unwrap();
    let e = ftap_out::export_trial(&csv).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Format);
    assert!(
        e.message()
            .contains(&format!("{}: not a trial sidecar", json.display())),
        "{e}"
    );
}

/// The synchronization–continuation example of FTAP's Reference Manual
/// (2.1.05, §5; docs/TAP.md §2 "What is verified"): with its array count
/// removed it imports to what the example describes — a fixed 76 at
/// velocity 90 for 100 ms, 275 ms late, switched on at beat 32 when the
/// 250-ms metronome stops; as printed (count first) and with the
/// split-keyboard example's `FEED_ON 3` it is refused, naming the line.
#[test]
fn ftap_manual_example_imports_as_it_describes_and_its_differences_are_refused() {
    let manual = "FEED_ON 0\nFEED_CHAN 1\nFEED_NOTE 76\nFEED_VMODE 1\nFEED_VEL 90\nFEED_LEN 100\n\
                  FEED_PMODE 1\nFEED_DMODE 1\nFEED_DVAL 275\nMETRON_ON 1\nMSPB 250\nMET_CHAN 1\n\
                  MET_NOTE 86\nMET_VEL 100\nMET_LEN 30\nMET_PATTERN_ARRAY 8 1 1 1 1 0 1 1 0\n\
                  TRIGGER 1 M 32 FEED_ON 1\nTRIGGER 2 M 32 METRON_ON 0\nTRIGGER 3 M 92 END_EXP 0\n";
    let e = ftap::import(manual, "manual").unwrap_err();
    assert_eq!(e.line(), Some(16), "{e}");
    assert!(e.message().contains("got `8`"), "{e}");

    let fixed = manual.replace("MET_PATTERN_ARRAY 8 ", "MET_PATTERN_ARRAY ");
    let x = ftap::import(&fixed, "manual").unwrap().experiment;
    let f = x.feedback;
    assert!(!f.on);
    assert_eq!(
        f.pitch,
        Pitch::Fixed {
            note: firmtime_tap::params::Note::new(76).unwrap()
        }
    );
    assert_eq!(
        f.velocity,
        VelocityMode::Fixed {
            velocity: firmtime_tap::params::Velocity::new(90).unwrap()
        }
    );
    assert_eq!(
        f.duration,
        NoteLength::Fixed {
            ms: Ms::from_ms(100)
        }
    );
    let mut rng = Rng::new(1);
    for k in 0..4 {
        assert_eq!(f.delay.sample_us(k, &mut rng), 275_000, "keystroke {k}");
    }
    assert_eq!(x.metronome.mspb, Ms::from_ms(250));
    let steps: Vec<Step> = x.metronome.pattern.as_slice().to_vec();
    use Step::{Beat as B, Rest as R};
    assert_eq!(steps, [B, B, B, B, R, B, B, R]);
    assert_eq!(x.triggers.len(), 3);
    assert_eq!(x.triggers[0].at, TriggerAt::Beat(32));
    assert_eq!(
        x.triggers[0].settings.as_slice(),
        &[Setting::FeedbackOn(Voice::First, true)]
    );
    assert!(x.triggers[2].end);

    let e = ftap::import("FEED_ON 3\nFEED2_ON 2\n", "split").unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    assert!(
        e.message().contains("expected 0 (off) or 1 (on), got `3`"),
        "{e}"
    );
}

/// Regression (issue 28, item 2): a raw MIDI device that ends mid-trial
/// (end of file: the cable's far end closed) ended the trial, but the
/// sidecar said neither why nor when. The trial ends incomplete with the
/// cause (`device_closed`) and the time of the loss.
#[test]
fn a_raw_device_that_ends_mid_trial_ends_it_incomplete_with_cause_and_time() {
    use firmtime_midi::raw::{RawBackend, RawOptions};
    use firmtime_midi::LossCause;
    use firmtime_tap::engine::{EndReason, Engine, EngineOptions};
    use std::io::Write as _;
    use std::os::fd::OwnedFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut b = RawBackend::from_fd(OwnedFd::from(ours), RawOptions::default()).unwrap();
    let text = "name = \"raw\"\n[end]\nduration_ms = 60000\n";
    let e = Experiment::from_toml(text).unwrap();
    let mut eng = Engine::new(&e, EngineOptions::for_experiment(&e, 1)).unwrap();
    let (stop, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let (out, closed_ns) = std::thread::scope(|s| {
        let device = s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            // Two stray data bytes (a bad cable): counted as malformed input.
            theirs.write_all(&[0x3C, 0x3D]).unwrap();
            for n in 0..3u8 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                theirs.write_all(&[0x90, 60 + n, 100]).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            let t = firmtime_rt::clock::monotonic_ns();
            drop(theirs);
            t
        });
        // A watchdog: without the loss noticed the trial would run a minute.
        s.spawn(|| {
            let t0 = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) && t0.elapsed().as_secs() < 10 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let out = eng.run(&mut b, &stop).unwrap();
        done.store(true, Ordering::Relaxed);
        (out, device.join().unwrap())
    });
    assert_eq!(out.reason, EndReason::Disconnected, "{out:?}");
    assert!(out.incomplete());
    assert_eq!(out.keystrokes, 3);
    let loss = out.input_loss.expect("the loss is recorded");
    assert_eq!(loss.cause, LossCause::DeviceClosed);
    assert!(
        loss.t_ns >= closed_ns && loss.t_ns <= out.end_ns,
        "{loss:?} {out:?}"
    );
    let dir = firmtime_rt::testing::ScratchDir::new("tap-raw-lost");
    let stem = dir.join("R-s01-t001");
    let meta = firmtime_tap::session::TrialMeta {
        subject: "R".into(),
        session: 1,
        trial: 1,
        experiment_file: "raw.toml".into(),
        experiment_toml: text.into(),
        seed: 1,
        rt: None,
        stopped_by: None,
        input_loss_detail: None,
        audio_input_port: String::new(),
    };
    let prov = firmtime_rt::system::Provenance::begin(vec!["test".into()]);
    let side = firmtime_tap::session::write_trial(
        &stem,
        &eng,
        &out,
        firmtime_tap::late::LateReport::default(),
        &meta,
        prov,
    )
    .unwrap();
    assert!(side.incomplete);
    assert_eq!(side.self_checks.input_malformed, 2, "the stray bytes");
    let lost = side.input_lost.expect("input_lost in the sidecar");
    assert_eq!(lost.cause, "device_closed");
    assert_eq!(lost.at_us, ((loss.t_ns - out.start_ns) / 1000) as i64);
    assert_eq!(lost.words, "the device closed (end of file or hang-up)");
}

/// A trial that ended for the loss of its input says so in its FTAP-form
/// header (it said "interrupted", as for Ctrl-C).
#[test]
fn ftap_form_of_a_trial_whose_input_was_lost_names_the_loss() {
    let mut side: data::Sidecar =
        serde_json::from_str(&std::fs::read_to_string(data("ftap-demo-trial.json")).unwrap())
            .unwrap();
    side.incomplete = true;
    side.input_lost = Some(data::InputLost {
        cause: "port_disconnected".into(),
        at_us: 250_000,
        words: "the input port was disconnected: tapper:out no longer feeds firmtime-tap:in (disconnected)".into(),
        errno: None,
    });
    let events = vec![Event {
        kind: EventKind::End,
        index: 1,
        intended_us: Some(250_000),
        actual_us: 260_000,
        note: None,
    }];
    let text = ftap_out::write(&events, &side, "lost.csv").unwrap();
    assert!(
        text.contains(
            "\n# end 250 ms (last output 260 ms), input lost (port_disconnected: the input port \
             was disconnected: tapper:out no longer feeds firmtime-tap:in (disconnected))\n"
        ),
        "{text}"
    );
}
