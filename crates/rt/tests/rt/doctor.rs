//! `doctor::run` and `SystemInfo::collect` on the real machine: every check
//! present once, well-formed, and agreeing with what the kernel says directly.

use firmtime_rt::doctor::{self, Status};
use firmtime_rt::system::{Provenance, SystemInfo};
use std::collections::HashSet;
use std::time::Duration;

const IDS: &[&str] = &[
    "preempt_model",
    "config_hz",
    "nohz",
    "high_res_timers",
    "clocksource",
    "tsc_invariant",
    "rtprio_limit",
    "memlock_limit",
    "capabilities",
    "sched_rt_runtime",
    "cpu_governor",
    "idle_states",
    "smt",
    "isolcpus",
    "nohz_full",
    "rcu_nocbs",
    "timer_slack",
    "virtualization",
    "steal_time",
    "jack_installed",
    "jack_running",
    "dev_rtc",
    "dev_snd_seq",
    "dev_midi",
];

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

#[test]
fn doctor_reports_every_check_once_in_order() {
    let r = doctor::run_with(Duration::from_millis(50));
    let ids: Vec<&str> = r.checks.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, IDS);
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len());
    for c in &r.checks {
        assert!(!c.title.is_empty() && !c.value.is_empty(), "{c:?}");
        // A fix exactly when something is not right.
        assert_eq!(c.fix.is_empty(), c.status == Status::Pass, "{c:?}");
    }
    let total: usize = [Status::Pass, Status::Warn, Status::Fail, Status::Unknown]
        .iter()
        .map(|&s| r.count(s))
        .sum();
    assert_eq!(total, IDS.len());
    assert_eq!(r.any_failed(), r.count(Status::Fail) > 0);
}

#[test]
fn doctor_json_has_the_stable_keys() {
    let r = doctor::run_with(Duration::from_millis(10));
    let v = serde_json::to_value(&r).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["checks", "system"].iter().collect::<Vec<_>>()
    );
    for c in v["checks"].as_array().unwrap() {
        let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["fix", "id", "status", "title", "value"]);
        let s = c["status"].as_str().unwrap();
        assert!(["pass", "warn", "fail", "unknown"].contains(&s), "{s}");
    }
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
fn root_is_allowed_real_time_priority() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped root_is_allowed_real_time_priority: needs root");
        return;
    }
    let r = doctor::run_with(Duration::from_millis(10));
    let c = r.checks.iter().find(|c| c.id == "rtprio_limit").unwrap();
    assert_eq!(c.status, Status::Pass);
    assert!(c.value.starts_with("root"), "{}", c.value);
}
