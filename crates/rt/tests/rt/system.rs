//! `SystemInfo::collect` and `Provenance` on the real machine: agreeing with
//! what the kernel says directly, and round-tripping through JSON.

use firmtime_rt::system::{Provenance, SystemInfo};

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

#[test]
fn system_info_agrees_with_the_kernel() {
    let s = SystemInfo::collect();
    assert_eq!(
        Some(s.kernel_release.clone()),
        read_trim("/proc/sys/kernel/osrelease")
    );
    assert_eq!(s.hostname, read_trim("/proc/sys/kernel/hostname"));
    assert_eq!(s.arch, std::env::consts::ARCH);
    assert_eq!(
        s.clocksource,
        read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    );
    if let Some(cs) = &s.clocksource {
        assert!(s.clocksources_available.contains(cs), "{s:?}");
    }
    assert_eq!(
        s.privileges.sched_rt_runtime_us,
        read_trim("/proc/sys/kernel/sched_rt_runtime_us").and_then(|v| v.parse().ok())
    );
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    assert_eq!(s.cpus_online as i64, online as i64);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(s.privileges.euid, unsafe { libc::geteuid() });
    // A PREEMPT_DYNAMIC build says so in `uname -v`.
    if s.kernel_version.contains("PREEMPT_DYNAMIC") {
        assert_eq!(s.preempt_dynamic, Some(true));
    }
    assert!(!s.preempt_source.is_empty());
}

#[test]
fn system_info_round_trips_through_json() {
    let s = SystemInfo::collect();
    let text = serde_json::to_string(&s).unwrap();
    let back: SystemInfo = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
}

#[test]
fn provenance_records_command_line_and_times() {
    let argv = vec!["firmtime".to_string(), "doctor".to_string()];
    let mut p = Provenance::begin(argv.clone());
    assert_eq!(p.command_line, argv);
    assert!(p.ended_utc.is_none());
    assert!(p.rt.is_none());
    p.finish();
    let (start, end) = (p.started_utc.clone(), p.ended_utc.clone().unwrap());
    for t in [&start, &end] {
        // 2024-03-01T12:00:00.250Z
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
    // Same fixed-width format: lexical order is time order.
    assert!(end >= start, "{start} .. {end}");
    assert_eq!(p.firmtime_version, p.system.firmtime_version);
    let v = serde_json::to_value(&p).unwrap();
    for key in [
        "firmtime_version",
        "command_line",
        "system",
        "rt",
        "started_utc",
        "ended_utc",
        "started_monotonic_ns",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
}

#[test]
fn probes_agree_with_the_filesystem() {
    use firmtime_rt::probe;
    use std::path::Path;
    for d in probe::rtc_devices() {
        assert!(["/dev/rtc", "/dev/rtc0"].contains(&d.as_str()), "{d}");
        assert!(Path::new(&d).exists(), "{d}");
    }
    assert_eq!(probe::snd_seq_present(), Path::new("/dev/snd/seq").exists());
    let midi = probe::midi_devices();
    assert!(midi.windows(2).all(|w| w[0] <= w[1]), "sorted: {midi:?}");
    assert!(midi.iter().all(|m| Path::new(m).exists()), "{midi:?}");
    assert_eq!(
        probe::nohz_full_cpus(),
        read_trim("/sys/devices/system/cpu/nohz_full")
    );
    // `sh` is on every PATH a test runs with, and is executable.
    let sh = probe::find_on_path("sh").expect("sh on PATH");
    assert!(sh.ends_with("sh") && sh.is_file(), "{}", sh.display());
    assert!(probe::find_on_path("firmtime-no-such-program").is_none());
    let jack = probe::JackEvidence::read();
    assert!(jack.processes.windows(2).all(|w| w[0] <= w[1]));
    if let Some(p) = probe::steal_percent_over(std::time::Duration::from_millis(20)) {
        assert!((0.0..=100.0).contains(&p), "{p}");
    }
}
