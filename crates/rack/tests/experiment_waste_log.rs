//! `firmtime net experiment`'s `waste_time` logs: a local point's plugin
//! writes its log into the experiment's output directory, named for the
//! point, and nothing into the temp directory (it used to leave
//! `/tmp/waste_time-<pid>-<N>.csv` per instance, never read). One test in
//! this binary: the plugin numbers its instances per process.

use firmtime_ladspa::Scan;
use firmtime_rack::experiment::{
    run_point, waste_log_path, Placement, PointSpec, Setup, Timing, WASTE_LOG_ENV,
};
use firmtime_rt::testing::{skip, ScratchDir};
use std::path::PathBuf;
use std::process::Command;

/// Builds the repo's waste_time plugin and copies it into `dir`.
fn waste_time_into(dir: &std::path::Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success(), "building firmtime-plugin-waste-time");
    // target/debug/deps/THIS → target/debug/libfirmtime_waste_time.so
    let exe = std::env::current_exe().unwrap();
    let lib: PathBuf = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("libfirmtime_waste_time.so");
    std::fs::copy(&lib, dir.join("libfirmtime_waste_time.so"))
        .unwrap_or_else(|e| panic!("copying {}: {e}", lib.display()));
}

/// The files of the temp directory this process's waste_time would have
/// left with no log directory (`waste_time-<pid>-<N>.csv`); removed once
/// listed, so that a failing run leaves none either.
fn strays_in_temp() -> Vec<PathBuf> {
    let prefix = format!("waste_time-{}-", std::process::id());
    let strays: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect();
    for p in &strays {
        let _ = std::fs::remove_file(p);
    }
    strays
}

#[test]
fn a_local_points_waste_time_log_lands_in_the_output_directory_not_in_tmp() {
    if !firmtime_jack::program_on_path("jackd") {
        skip("jackd not installed (apt-get install jackd2)");
        return;
    }
    let plugins = ScratchDir::new("experiment-waste-plugins");
    waste_time_into(&plugins);
    // As a user runs it, without FIRMTIME_WASTE_LOG: the plugin's own
    // default was the temp directory (the only test of this binary: no
    // other thread reads the environment).
    std::env::remove_var(WASTE_LOG_ENV);
    let out = ScratchDir::new("experiment-waste-out");
    let scan = Scan::dirs(&[plugins.to_path_buf()]);
    // The smallest point: Figure 5's local waste_time, one fixed step at
    // 10 % of a 1024-frame period, short steps.
    let spec = PointSpec {
        figure: 5,
        rate: 48_000,
        period_frames: 1024,
        placement: Placement::Local,
        fixed: Some(0.1),
    };
    let setup = Setup {
        scan: &scan,
        workers: Vec::new(),
        timing: Timing {
            baseline_s: 0.2,
            step_s: 0.2,
            settle_s: 0.05,
            coarse: 0.1,
            fine: 0.05,
            start: 0.1,
        },
        log_dir: &out,
    };
    let r = run_point(&spec, &setup, &mut |_| {}).unwrap();

    assert_eq!(
        strays_in_temp(),
        Vec::<PathBuf>::new(),
        "waste_time logged to the temp directory"
    );
    let want = waste_log_path(&out, &spec).unwrap();
    let name = want.file_name().unwrap().to_str().unwrap();
    assert_eq!(name, "waste_time-fig5-48000hz-1024.csv");
    assert_eq!(r.waste_time_log.as_deref(), Some(name));
    // The output directory holds this one log, nothing else of waste_time's.
    let logs: Vec<PathBuf> = out
        .entries()
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("waste_time"))
        })
        .collect();
    assert_eq!(logs, vec![want.clone()]);
    // It is this point's log: the documented header, a row at the step's
    // load, the point's sample rate.
    let csv = std::fs::read_to_string(&want).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[0], "audio_time_s");
    let col = |k: &str| header.iter().position(|h| *h == k).unwrap();
    let (fraction, rate) = (col("fraction"), col("sample_rate"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(!rows.is_empty(), "no rows in {csv}");
    assert!(
        rows.iter().all(|r| r[rate] == "48000"),
        "sample rate other than 48000 in {csv}"
    );
    assert!(
        rows.iter().any(|r| r[fraction].parse::<f32>() == Ok(0.1)),
        "no row at the step's load 0.1 in {csv}"
    );
    // The variable is put back as it was (unset).
    assert_eq!(std::env::var_os(WASTE_LOG_ENV), None);
}
