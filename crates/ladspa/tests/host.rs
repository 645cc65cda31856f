//! The host against the plugins Debian installs (ladspa-sdk, swh-plugins,
//! cmt) and against analyseplugin's reading of them.

use firmtime_ladspa::*;
use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

const DIR: &str = "/usr/lib/ladspa";

/// The system plugin directory, or None with a printed skip reason.
fn system(test: &str, needs: &[&str]) -> Option<Scan> {
    for f in needs {
        if !Path::new(DIR).join(f).exists() {
            let _ = test; // the skip names the running test itself
            firmtime_rt::testing::skip(format!(
                "{DIR}/{f} missing (apt install ladspa-sdk swh-plugins cmt)"
            ));
            return None;
        }
    }
    Some(Scan::dirs(&[PathBuf::from(DIR)]))
}

fn analyseplugin(lib: &Path) -> Option<String> {
    let out = Command::new("analyseplugin").arg(lib).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// analyseplugin's ports per label: (name, "input"/"output", "control"/"audio", default text).
/// A port as analyseplugin prints it: name, direction, kind, default text.
type Port = (String, String, String, Option<String>);

fn parse_analyse(text: &str) -> Vec<(String, Vec<Port>)> {
    let mut out: Vec<(String, Vec<_>)> = Vec::new();
    for line in text.lines() {
        if let Some(l) = line.strip_prefix("Plugin Label: \"") {
            out.push((l.trim_end_matches('"').to_string(), Vec::new()));
            continue;
        }
        let port = line
            .strip_prefix("Ports:\t")
            .or_else(|| line.strip_prefix('\t'));
        let Some(port) = port.filter(|p| p.starts_with('"')) else {
            continue;
        };
        let cut = port
            .rfind("\" input,")
            .or_else(|| port.rfind("\" output,"))
            .expect("port line");
        let name = port[1..cut].to_string();
        let rest: Vec<&str> = port[cut + 2..].split(", ").collect();
        let default = rest
            .iter()
            .find_map(|f| f.strip_prefix("default "))
            .map(str::to_string);
        out.last_mut().expect("label before ports").1.push((
            name,
            rest[0].to_string(),
            rest[1].to_string(),
            default,
        ));
    }
    out
}

#[test]
fn list_finds_swh_and_cmt_plugins() {
    let Some(scan) = system("list_finds_swh_and_cmt_plugins", &["cmt.so", "amp_1181.so"]) else {
        return;
    };
    let labels: Vec<String> = scan
        .plugins()
        .iter()
        .map(|p| p.info().label.clone())
        .collect();
    assert!(labels.iter().any(|l| l == "amp"), "swh amp (1181) missing");
    assert!(
        labels.iter().any(|l| l == "amp_mono"),
        "cmt/sdk amp_mono missing"
    );
    assert_eq!(scan.find("1181").unwrap().info().label, "amp");
    assert_eq!(
        scan.find("cmt:amp_mono").unwrap().info().library,
        Path::new(DIR).join("cmt.so")
    );
}

#[test]
fn every_port_and_default_matches_analyseplugin() {
    let Some(scan) = system("every_port_and_default_matches_analyseplugin", &["cmt.so"]) else {
        return;
    };
    if analyseplugin(&Path::new(DIR).join("cmt.so")).is_none() {
        firmtime_rt::testing::skip("analyseplugin not runnable (apt install ladspa-sdk)");
        return;
    }
    let mut compared = 0;
    for lib in &scan.libraries {
        let theirs = parse_analyse(&analyseplugin(lib.path()).expect("analyseplugin"));
        let ours: Vec<&PluginInfo> = lib.infos().collect();
        assert_eq!(ours.len(), theirs.len(), "{}", lib.path().display());
        for (info, (label, ports)) in ours.iter().zip(&theirs) {
            assert_eq!(&info.label, label);
            assert_eq!(info.ports.len(), ports.len(), "{label}");
            for (p, (name, dir, kind, default)) in info.ports.iter().zip(ports) {
                assert_eq!(&p.name, name, "{label}");
                let d = if p.direction == Direction::Input {
                    "input"
                } else {
                    "output"
                };
                let k = if p.kind == PortKind::Audio {
                    "audio"
                } else {
                    "control"
                };
                assert_eq!((d, k), (dir.as_str(), kind.as_str()), "{label} {name}");
                // analyseplugin prints sample-rate defaults as multiples of srate.
                let ours = p.hints.default_value(1.0);
                let theirs = default
                    .as_deref()
                    .map(|t| t.trim_end_matches("*srate").parse::<f64>().expect("number"));
                match (ours, theirs) {
                    (Some(a), Some(b)) => {
                        let tol = 1e-5 * b.abs().max(1e-6);
                        assert!(
                            (f64::from(a) - b).abs() <= tol,
                            "{label} {name}: {a} vs {b}"
                        );
                    }
                    (None, None) => {}
                    (a, b) => panic!("{label} {name}: default {a:?} vs analyseplugin {b:?}"),
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 100, "only {compared} ports compared");
}

fn amp_mono(scan: &Scan) -> Plugin {
    scan.find("amp:amp_mono").unwrap()
}

#[test]
fn run_gain_is_exact_and_allocation_free() {
    let Some(scan) = system("run_gain_is_exact_and_allocation_free", &["amp.so"]) else {
        return;
    };
    let amp = amp_mono(&scan);
    let controls = amp.info().resolve_controls(&[0.5], 48_000.0, true).unwrap();
    let mut chain = Chain::new(
        &[
            Stage {
                plugin: amp.clone(),
                controls: controls.clone(),
            },
            Stage {
                plugin: amp,
                controls,
            },
        ],
        48_000,
        64,
    )
    .unwrap();
    let input: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
    let out = assert_no_alloc::assert_no_alloc(|| {
        let mut sum = 0.0;
        for _ in 0..100 {
            chain.input_mut(0).copy_from_slice(&input);
            chain.process(64).unwrap();
            sum += chain.output(0)[1];
        }
        assert_eq!(
            chain.process(65),
            Err(RunError::BlockTooLarge {
                frames: 65,
                capacity: 64
            })
        );
        sum
    });
    assert_eq!(out, 100.0 * input[1] * 0.25);
    for (o, x) in chain.output(0).iter().zip(&input) {
        assert_eq!(*o, x * 0.25);
    }
}

#[test]
fn run_adding_adds_gain_scaled_output() {
    let Some(scan) = system("run_adding_adds_gain_scaled_output", &["amp_1181.so"]) else {
        return;
    };
    let amp = scan.find("1181").unwrap();
    assert!(amp.info().has_run_adding);
    let mut inst = amp.instantiate(44_100, 8).unwrap();
    assert_eq!(inst.run(8), Err(RunError::NotActive));
    inst.set_control(0, 0.0).unwrap(); // 0 dB
    inst.activate();
    inst.audio_mut(1).unwrap().copy_from_slice(&[1.0; 8]);
    inst.audio_mut(2).unwrap().copy_from_slice(&[0.25; 8]);
    assert_no_alloc::assert_no_alloc(|| {
        inst.set_run_adding_gain(0.5).unwrap();
        inst.run_adding(8).unwrap();
    });
    assert!(inst.audio(2).unwrap().iter().all(|&v| v == 0.75));
    assert_eq!(inst.set_control(1, 0.0), Err(RunError::BadPort(1)));
    // The sdk's amp_mono has no run_adding.
    let mut plain = amp_mono(&scan).instantiate(44_100, 8).unwrap();
    plain.activate();
    assert_eq!(plain.run_adding(8), Err(RunError::NoRunAdding));
}

#[test]
fn bad_inputs_give_one_clear_message_each() {
    let Some(scan) = system(
        "bad_inputs_give_one_clear_message_each",
        &["amp_1181.so", "amp.so"],
    ) else {
        return;
    };
    let e = scan.find("no_such_plugin").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.message().contains("no_such_plugin") && e.message().contains(DIR),
        "{e}"
    );

    let amp = scan.find("amp").unwrap();
    let e = amp
        .info()
        .resolve_controls(&[100.0], 44_100.0, true)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidControl);
    assert!(e.message().contains("\"Amps gain (dB)\""), "{e}");
    assert!(e.message().contains("-70 to 70"), "{e}");
    assert_eq!(
        amp.info()
            .resolve_controls(&[100.0], 44_100.0, false)
            .unwrap(),
        [100.0]
    );
    let e = amp
        .info()
        .resolve_controls(&[1.0, 2.0], 44_100.0, true)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidControl);
    assert!(
        e.message()
            .contains("takes 1 control value(s) but 2 were given"),
        "{e}"
    );
    // Missing values take defaults (swh amp: 0 dB).
    assert_eq!(
        amp.info().resolve_controls(&[], 44_100.0, true).unwrap(),
        [0.0]
    );

    let e = Library::load(Path::new("/nonexistent/x.so")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let dir = firmtime_rt::testing::ScratchDir::new("ladspa-bad-inputs");
    let junk = dir.join("junk.so");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let e = Library::load(&junk).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LoadFailed);
    assert!(
        e.message().contains("cannot load LADSPA library") && e.message().contains("junk.so"),
        "{e}"
    );
    let scan_junk = Scan::dirs(std::slice::from_ref(&dir.0));
    assert_eq!(scan_junk.failures.len(), 1);

    let stereo = scan.find("amp:amp_stereo").unwrap();
    let e = Chain::new(
        &[
            Stage {
                plugin: amp_mono(&scan),
                controls: vec![1.0],
            },
            Stage {
                plugin: stereo,
                controls: vec![1.0],
            },
        ],
        44_100,
        16,
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Mismatch);
    assert!(
        e.message().contains("amp_mono has 1 audio output(s)"),
        "{e}"
    );
}

#[test]
fn apply_halves_every_sample_exactly() {
    let Some(scan) = system("apply_halves_every_sample_exactly", &["amp.so"]) else {
        return;
    };
    let dir = firmtime_rt::testing::ScratchDir::new("ladspa-apply-halves");
    let samples: Vec<i16> = (0..5000)
        .map(|i| ((i * 977) % 65536 - 32768) as i16)
        .collect();
    firmtime_ladspa::apply::write_wav_i16(&dir.join("in.wav"), 1, 44_100, &samples).unwrap();
    let amp = amp_mono(&scan);
    let stage = Stage {
        plugin: amp,
        controls: vec![0.5],
    };
    let opts = ApplyOptions {
        block_size: 333,
        decay_seconds: 0.01,
        ..Default::default()
    };
    let report = apply(&dir.join("in.wav"), &dir.join("out.wav"), &[stage], &opts).unwrap();
    assert_eq!(report.input_frames, 5000);
    assert_eq!(report.output_frames, 5000 + 441);
    let out: Vec<i16> = hound::WavReader::open(dir.join("out.wav"))
        .unwrap()
        .samples::<i16>()
        .map(|s| s.unwrap())
        .collect();
    assert_eq!(out.len(), 5441);
    for (i, (&o, &x)) in out.iter().zip(&samples).enumerate() {
        // x/2 rounded toward minus infinity, as libsndfile's conversion does.
        assert_eq!(i32::from(o), (i32::from(x)).div_euclid(2), "sample {i}");
    }
    assert!(out[5000..].iter().all(|&s| s == 0));
}
