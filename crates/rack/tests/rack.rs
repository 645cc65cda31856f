//! The rack end to end: the engine over plain buffers (under
//! assert_no_alloc), a remote work stage through a real worker on
//! loopback, and a chain in a private dummy JACK server fed by a signal
//! client (`chain/`, shared with `pipewire.rs`, which runs it on PipeWire).

mod chain;

use assert_no_alloc::assert_no_alloc;
use firmtime_jack::ServerKind;
use firmtime_ladspa::Scan;
use firmtime_net::{ServerConfig, WorkerServer};
use firmtime_rack::{build, ErrorKind, RackFile};
use firmtime_rt::clock::monotonic_ns;
use std::path::PathBuf;

#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

fn scan() -> Option<Scan> {
    let dir = PathBuf::from("/usr/lib/ladspa");
    if !dir.join("amp.so").exists() {
        firmtime_rt::testing::skip("/usr/lib/ladspa/amp.so missing (apt install ladspa-sdk)");
        return None;
    }
    Some(Scan::dirs(&[dir]))
}

const AMP: &str =
    "[[stage]]\nname = \"gain\"\nplugin = \"amp:amp_mono\"\ncontrols = { Gain = 0.5 }\n";

#[test]
fn local_chain_applies_gain_without_allocating() {
    let Some(scan) = scan() else { return };
    let file = RackFile::parse(AMP, "amp.toml").unwrap();
    let (mut engine, mut control) = build(&file, &scan, 48_000, 64).unwrap();
    assert_eq!((engine.input_channels(), engine.output_channels()), (1, 1));
    for (i, x) in engine.input_mut(0).iter_mut().enumerate() {
        *x = i as f32;
    }
    assert_no_alloc(|| engine.process(64, monotonic_ns()));
    let want: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    assert_eq!(engine.output(0), &want[..]);

    assert_eq!(
        control.apply_line("gain.Gain = 2").unwrap(),
        ("gain".to_string(), "Gain".to_string(), 2.0)
    );
    engine.input_mut(0).fill(3.0);
    assert_no_alloc(|| engine.process(64, monotonic_ns()));
    assert!(engine.output(0).iter().all(|&y| y == 6.0));

    let st = control.stats();
    assert_eq!(st.cycles, 2);
    assert_eq!(st.controls_applied, 1);
    assert_eq!(st.stages[0].runs, 2);
    assert_eq!(st.oversize, 0);

    // A block larger than the buffers is silenced and counted, not run.
    assert_no_alloc(|| engine.process(65, monotonic_ns()));
    assert!(engine.output(0).iter().all(|&y| y == 0.0));
    assert_eq!(control.stats().oversize, 1);
    assert_eq!(control.stats().stages[0].runs, 2);
}

#[test]
fn controls_and_lines_are_checked() {
    let Some(scan) = scan() else { return };
    let file = RackFile::parse(AMP, "amp.toml").unwrap();
    let (_engine, mut control) = build(&file, &scan, 48_000, 64).unwrap();
    let e = control.apply_line("gain.Gian = 1").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("has no control \"Gian\""), "{e}");
    assert!(e.message().contains("\"Gain\" (port 0)"), "{e}");
    let e = control.apply_line("amp.Gain = 1").unwrap_err();
    assert!(
        e.message()
            .contains("no stage \"amp\"; the stages are: gain"),
        "{e}"
    );
    let e = control.apply_line("gain Gain 1").unwrap_err();
    assert!(e.message().contains("write stage.port = value"), "{e}");
    let e = control.apply_line("gain.Gain = loud").unwrap_err();
    assert!(e.message().contains("\"loud\" is not a number"), "{e}");
    // The port index works as a name.
    assert!(control.apply_line("gain.0 = 1").is_ok());
}

#[test]
fn build_errors_name_the_stage_line() {
    let Some(scan) = scan() else { return };
    let text =
        "client = \"x\"\n\n[[stage]]\nplugin = \"amp:amp_mono\"\ncontrols = { Volume = 1 }\n";
    let e = build(&RackFile::parse(text, "r.toml").unwrap(), &scan, 48_000, 64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert!(
        e.message()
            .starts_with("r.toml:3:1: plugin amp_mono has no control input \"Volume\""),
        "{e}"
    );
    let text = "[[stage]]\nplugin = \"no_such_plugin\"\n";
    let e = build(&RackFile::parse(text, "r.toml").unwrap(), &scan, 48_000, 64).unwrap_err();
    assert!(e.message().starts_with("r.toml:1:1: "), "{e}");
    // amp_stereo (2 in) after amp_mono (1 out) does not chain.
    let text = "[[stage]]\nplugin = \"amp:amp_mono\"\n[[stage]]\nplugin = \"amp:amp_stereo\"\n";
    let e = build(&RackFile::parse(text, "r.toml").unwrap(), &scan, 48_000, 64).unwrap_err();
    assert!(
        e.message().starts_with(
            "r.toml:3:1: stage \"stage2\" takes 2 audio input(s) but the stage before gives 1"
        ),
        "{e}"
    );
    // A remote plugin stage whose worker does not answer.
    let text = "[[stage]]\nplugin = \"amp_mono\"\nremote = { worker = \"127.0.0.1:9\" }\n";
    let e = build(&RackFile::parse(text, "r.toml").unwrap(), &scan, 48_000, 64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Remote);
}

#[test]
fn remote_work_stage_copies_through_a_worker() {
    let Some(scan) = scan() else { return };
    let server = WorkerServer::start(ServerConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let text = format!(
        "{AMP}\n[[stage]]\nname = \"far\"\nwork = {{ fraction = 0.0 }}\nremote = {{ worker = \"{}\", window = 0 }}\n",
        server.local_addr()
    );
    let file = RackFile::parse(&text, "remote.toml").unwrap();
    // 64 frames at 8 kHz: an 8 ms period, ample for loopback.
    let (mut engine, mut control) = build(&file, &scan, 8_000, 64).unwrap();
    assert!(control.stages()[1]
        .description
        .starts_with("remote work (sleep)"));
    let mut delivered = 0;
    let mut last_late = 0;
    for round in 0..20u32 {
        for (i, x) in engine.input_mut(0).iter_mut().enumerate() {
            *x = (round * 64 + i as u32) as f32;
        }
        // Window 0: the result of this period, within a generous deadline.
        let start = monotonic_ns();
        assert_no_alloc(|| engine.process(64, start));
        let want: Vec<f32> = (0..64).map(|i| (round * 64 + i) as f32 * 0.5).collect();
        // Late results fall back to dry (the same values here), so the output is exact either way.
        assert_eq!(engine.output(0), &want[..], "round {round}");
        let late = control.stats().stages[1].late;
        if late == last_late {
            delivered += 1;
        }
        last_late = late;
    }
    let st = control.stats();
    assert_eq!(st.stages[1].runs, 20);
    assert!(delivered > 0, "no result ever came back: {st:?}");
    control.set("far", "fraction", 0.25).unwrap();
    let e = control.set("far", "fraction", 9.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Remote);
    control.close();
    server.stop();
}

#[test]
fn chain_in_a_dummy_jack_server_halves_a_signal() {
    let Some(scan) = scan() else { return };
    chain::halves_a_signal(&scan, AMP, ServerKind::Jackd);
}
