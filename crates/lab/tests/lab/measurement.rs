//! The Measurement trait: the names, files and presets `lab all` relies on.

use firmtime_lab::measurement::{
    Billing, Clock, Cyclic, Frames, Interrupts, Measurement, Overhead, Preset, Sleep, Tails, Ticks,
    Trace, TraceOverhead, Unavailable, Validate,
};
use std::path::Path;

fn names<M: Measurement>(m: &M) -> (&'static str, &'static str, String) {
    (m.name(), m.kind(), m.file())
}

#[test]
fn every_measurement_writes_its_kind_without_lab_as_its_file() {
    let tails = Tails::default();
    let all = [
        names(&Clock),
        names(&Sleep),
        names(&Cyclic),
        names(&tails),
        names(&Overhead),
        names(&Ticks),
        names(&Frames),
        names(&Interrupts),
        names(&Trace),
        names(&Billing),
        names(&TraceOverhead),
    ];
    let files: Vec<&str> = all.iter().map(|(_, _, f)| f.as_str()).collect();
    assert_eq!(
        files,
        [
            "clock.json",
            "sleep.json",
            "cyclic.json",
            "tails.json",
            "overhead.json",
            "ticks.json",
            "frames.json",
            "interrupts.json",
            "trace.json",
            "billing.json",
            "trace-overhead.json"
        ]
    );
    for (name, kind, _) in all {
        assert_eq!(kind, format!("lab-{}", name.replace(' ', "-")));
    }
}

#[test]
fn every_preset_of_every_measurement_validates() {
    let exe = Path::new("/usr/bin/true");
    for preset in [Preset::Quick, Preset::Default, Preset::Full] {
        Clock.config(preset, exe).validate().unwrap();
        Sleep.config(preset, exe).validate().unwrap();
        Cyclic.config(preset, exe).validate().unwrap();
        Tails::default().config(preset, exe).validate().unwrap();
        Overhead.config(preset, exe).validate().unwrap();
        Ticks.config(preset, exe).validate().unwrap();
        Frames.config(preset, exe).validate().unwrap();
        Interrupts.config(preset, exe).validate().unwrap();
        Trace.config(preset, exe).validate().unwrap();
        Billing.config(preset, exe).validate().unwrap();
        TraceOverhead.config(preset, exe).validate().unwrap();
    }
}

#[test]
fn lab_all_presets_are_the_ones_it_always_ran() {
    let exe = Path::new("/usr/bin/true");
    // The default preset keeps Table 6's matrix with 100 alarms per process.
    let t = Tails::default().config(Preset::Default, exe);
    assert_eq!(t.alarms, 100);
    assert_eq!(t.cells, firmtime_lab::tails::Config::full().cells);
    // Frames and interrupts stay short outside --full.
    assert_eq!(
        Frames.config(Preset::Default, exe).cells(),
        firmtime_lab::frames::Config::quick().cells()
    );
    assert_eq!(
        Interrupts.config(Preset::Default, exe).cell_ns,
        firmtime_lab::interrupts::Config::quick().cell_ns
    );
    // Load children are this binary.
    assert_eq!(
        Clock.config(Preset::Quick, exe).load_exe.as_deref(),
        Some(exe)
    );
    assert_eq!(
        Cyclic.config(Preset::Quick, exe).load_exe.as_deref(),
        Some(exe)
    );
    assert_eq!(
        Frames.config(Preset::Quick, exe).load_exe.as_deref(),
        Some(exe)
    );
    // The trace is left out of --quick; unavailable tracing is a skipped section.
    assert!(!Trace.in_preset(Preset::Quick));
    assert!(Trace.in_preset(Preset::Default));
    assert!(matches!(Trace.unavailable(), Unavailable::Skipped(h) if h.starts_with("## ")));
    assert_eq!(Ticks.unavailable(), Unavailable::Omitted);
    assert_eq!(Clock.unavailable(), Unavailable::Fails);
}
