//! `doctor::run` on the real machine: every check present once, well-formed,
//! with the stable JSON keys.

use firmtime_lab::doctor::{self, Status};
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
fn root_is_allowed_real_time_priority() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        firmtime_rt::testing::skip("needs root");
        return;
    }
    let r = doctor::run_with(Duration::from_millis(10));
    let c = r.checks.iter().find(|c| c.id == "rtprio_limit").unwrap();
    assert_eq!(c.status, Status::Pass);
    assert!(c.value.starts_with("root"), "{}", c.value);
}
