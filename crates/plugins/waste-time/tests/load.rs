//! The built waste_time .so, loaded by firmtime's host and by analyseplugin.

use firmtime_ladspa::{Library, Plugin};
use firmtime_rt::testing::ScratchDir;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

/// The cdylib cargo built with this test (target/<profile>/deps or target/<profile>).
fn so_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("libfirmtime_waste_time.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libfirmtime_waste_time.so not found next to {}",
        exe.display()
    );
}

/// This process's logs under the plugin's default name
/// (`waste_time-<pid>-<N>.csv` in the temp directory).
fn default_logs() -> Vec<PathBuf> {
    let prefix = format!("waste_time-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".csv"))
        })
        .collect()
}

fn plugin() -> Plugin {
    let lib = Library::load(&so_path()).unwrap();
    assert!(lib.skipped().is_empty(), "{:?}", lib.skipped());
    let plugins = lib.plugins();
    assert_eq!(plugins.len(), 1);
    plugins[0].clone()
}

#[test]
fn analyseplugin_reads_it() {
    let out = match Command::new("analyseplugin").arg(so_path()).output() {
        Ok(o) => o,
        Err(e) => {
            firmtime_rt::testing::skip(format!(
                "analyseplugin not runnable ({e}); apt install ladspa-sdk"
            ));
            return;
        }
    };
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Plugin Label: \"waste_time\""), "{text}");
    assert!(text.contains("Plugin Unique ID: 4700001"), "{text}");
    assert!(
        text.contains("\"Start fraction\" input, control, 0 to 1, default 0.25"),
        "{text}"
    );
    assert!(
        text.contains("\"Step interval (s)\" input, control, 0 to 40, default 10"),
        "{text}"
    );
    let info = plugin().info().clone();
    assert_eq!(info.ports.len(), 6);
    assert_eq!(info.unique_id, 4_700_001);
    assert!(info.properties.hard_rt_capable);
}

#[test]
fn copies_input_and_wastes_at_least_the_fraction_then_logs() {
    // The log goes into a directory of this test's own, removed on drop
    // (also when the test fails), not into /tmp.
    let dir = ScratchDir::new("waste-time-load");
    let log = dir.join("waste.csv");
    // The only test in this binary that instantiates, so the env var is not raced.
    std::env::set_var("FIRMTIME_WASTE_LOG", &log);
    let rate = 48_000u32;
    let n = 480; // 10 ms period
    let fraction = 0.3f32;
    let mut inst = plugin().instantiate(rate, n).unwrap();
    inst.set_control(2, fraction).unwrap();
    inst.set_control(3, 0.2).unwrap(); // step
    inst.set_control(4, 0.05).unwrap(); // every 50 ms of audio
    inst.activate();
    let input: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let period = n as f64 / f64::from(rate);
    let mut fractions = Vec::with_capacity(12);
    for k in 0..12 {
        inst.audio_mut(0).unwrap().copy_from_slice(&input);
        let t0 = Instant::now();
        assert_no_alloc::assert_no_alloc(|| inst.run(n).unwrap());
        let took = t0.elapsed().as_secs_f64();
        let f = inst.control(5).unwrap();
        fractions.push(f);
        // Lower bound only: the busy-wait must last at least this long.
        assert!(
            took >= f64::from(f) * period,
            "run {k}: {took} s < {f} x {period} s"
        );
        assert_eq!(
            inst.audio(1).unwrap(),
            &input[..],
            "run {k}: output != input"
        );
    }
    // 5 runs of 10 ms per 50 ms step: 0.3, 0.5, 0.7 (then capped steps continue).
    assert_eq!(&fractions[..5], &[0.3; 5]);
    assert_eq!(&fractions[5..10], &[0.5; 5]);
    assert!((fractions[10] - 0.7).abs() < 1e-6);
    drop(inst); // deactivate + cleanup write the log
    let text = std::fs::read_to_string(&log).unwrap();
    // The log is the one file the instance wrote: nothing beside it, and
    // nothing under the default name in the temp directory.
    assert_eq!(dir.entries(), std::slice::from_ref(&log));
    assert_eq!(default_logs(), Vec::<PathBuf>::new());
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[0], "audio_time_s");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{text}");
    for r in &rows {
        assert_eq!(r.len(), header.len());
    }
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let runs: Vec<u64> = rows
        .iter()
        .map(|r| r[col("runs")].parse().unwrap())
        .collect();
    assert_eq!(runs, [5, 5, 2]);
    let frames: u64 = rows
        .iter()
        .map(|r| r[col("frames")].parse::<u64>().unwrap())
        .sum();
    assert_eq!(frames, 12 * n as u64);
    assert_eq!(rows[1][col("fraction")], "0.5");
    assert_eq!(rows[0][col("sample_rate")], "48000");
}
