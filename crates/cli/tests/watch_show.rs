//! `firmtime watch show ID` after a roll-up, on generated rows pushed
//! through the retention: a kept wake-up's whole record; a rolled-away
//! one's "not kept" with what remains of it (its hour's figures, top
//! causes and worst kept wake-ups, in text and JSON), exit 2; an id never
//! given, exit 2 as before.

mod common;

use common::*;
use firmtime_watch::store::{
    CpuInterval, MachineState, Retention, RunInfo, Store, Wakeup, DAY_NS, HOUR_NS,
};
use std::path::Path;

const MIN: i64 = 60_000_000_000;
/// A UTC midnight (2024-10-04).
const D0: i64 = 20_000 * DAY_NS as i64;

/// One minute of CPU `cpu` with 12 late wake-ups, all `task hog-(K mod
/// 3)` in the K-th minute, latencies growing with the minute: the hour's
/// 10 worst are the last minute's.
fn minute(cpu: usize, k: i64) -> CpuInterval {
    let start = D0 + k * MIN;
    let wakeups: Vec<Wakeup> = (0..12)
        .map(|i| Wakeup {
            deadline_unix_ns: start + i * 1_000_000_000,
            latency_ns: 100_000 + k * 10_000 + i * 1_000,
            category: Some("task".into()),
            name: Some(format!("hog-{}", k % 3)),
            cause_ns: Some(90_000),
            detail: Some("hog ran".into()),
            ..Wakeup::default()
        })
        .collect();
    CpuInterval {
        seq: k as u64,
        cpu,
        start_unix_ns: start,
        end_unix_ns: start + MIN,
        period_ns: 10_000_000,
        count: 6000,
        missed: 0,
        min_ns: Some(3_000),
        max_ns: wakeups.iter().map(|w| w.latency_ns).max(),
        mean_ns: Some(5_000.0),
        p99_ns: Some(8_000),
        p999_ns: Some(9_000),
        steal_ns: 0,
        partial: false,
        merged: 0,
        explained: true,
        histogram: vec![(5_000, 5988), (200_000, 12)],
        wakeups,
        watch_cpu_ns: Some(1_000_000),
        trace_lost_events: Some(0),
    }
}

/// 30 minutes of one CPU, rolled up into their hour; returns the ids as
/// stored, minute by minute.
fn rolled_db(db: &Path) -> Vec<Vec<i64>> {
    let mut s = Store::open(db).unwrap();
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: D0,
            firmtime_version: "t".into(),
            command_line: "firmtime watch".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    let mut ids = Vec::new();
    for k in 0..30 {
        let mut rows = vec![minute(0, k)];
        s.store_interval(run, D0 + (k + 1) * MIN, &MachineState::default(), &mut rows)
            .unwrap();
        ids.push(rows[0].wakeups.iter().map(|w| w.id.unwrap()).collect());
    }
    let m = s
        .maintain(D0 + 8 * DAY_NS as i64, &Retention::default())
        .unwrap();
    assert_eq!(m.rolled_to_hour, 30);
    ids
}

#[test]
fn watch_show_of_a_rolled_up_wakeup_says_what_remains_of_it() {
    let dir = TestDir::new("watch-show-rolled");
    let db = dir.0.join("w.db");
    let ids = rolled_db(&db);
    let dbs = db.display().to_string();
    // The worst of the hour (the last minute's) is kept, whole.
    let kept = ids[29][11];
    let out = firmtime(&["watch", "show", &kept.to_string(), "--db", &dbs]);
    let t = assert_ok(&out);
    assert!(
        t.contains(&format!("wake-up {kept} on CPU 0"))
            && t.contains("in a roll-up per hour (it kept this wake-up among its worst)"),
        "{t}"
    );
    // The first minute's least late is not: what remains of it.
    let gone = ids[0][0];
    let out = firmtime(&["watch", "show", &gone.to_string(), "--db", &dbs]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "wake-up {gone} is not kept: its interval was rolled up, and a roll-up keeps only its 10 worst wake-ups with their causes"
        ),
        "{stdout}"
    );
    // Its neighbours kept: none below (the hour's 10 worst are the last minute's).
    assert_eq!(
        lines[1],
        format!(
            "it was stored between 2024-10-04 00:00:00 UTC and 2024-10-04 00:30:00 UTC (before wake-up {}, which is kept); what remains of it is in one of these rows:",
            ids[29][2]
        ),
        "{stdout}"
    );
    assert_eq!(
        lines[2],
        "  CPU 0, roll-up per hour from 2024-10-04 00:00:00 UTC to 2024-10-04 00:30:00 UTC (30 intervals): 180000 wake-ups, 0 missed, p99.9 200 µs, max 401 µs",
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("    top causes of its worst wake-ups: task hog-2 ×"),
        "{stdout}"
    );
    assert_eq!(
        lines[4],
        format!(
            "    worst kept (`watch show` them): {} 401 µs (task hog-2), {} 400 µs (task hog-2), {} 399 µs (task hog-2), {} 398 µs (task hog-2), {} 397 µs (task hog-2)",
            ids[29][11], ids[29][10], ids[29][9], ids[29][8], ids[29][7]
        ),
        "{stdout}"
    );
    assert_eq!(
        lines[5], "around it: firmtime watch report --at 2024-10-04T00:15:00.000Z --since 30min",
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "no record of wake-up {gone} in {dbs}: its interval was rolled up and the roll-up did not keep it among its 10 worst (what remains of it: above)"
        )),
        "{stderr}"
    );
    // The same as JSON.
    let json = dir.0.join("gone.json");
    let out = firmtime(&[
        "watch",
        "show",
        &gone.to_string(),
        "--db",
        &dbs,
        "--json",
        &json.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let j = read_json(&json);
    let g = &j["rolled_up"];
    assert_eq!(g["id"], gone);
    assert_eq!(g["kept_before"], serde_json::Value::Null);
    assert_eq!(g["kept_after"], ids[29][2]);
    let rows = g["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["resolution_ns"], HOUR_NS);
    assert_eq!(rows[0]["source_rows"], 30);
    assert_eq!(rows[0]["wakeups"].as_array().unwrap().len(), 10);
    // An id never given: exit 2, nothing on stdout.
    let never = ids[29][11] + 1;
    let out = firmtime(&["watch", "show", &never.to_string(), "--db", &dbs]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains(&format!("no wake-up {never} in {dbs}")),
        "{}",
        text(&out.stderr)
    );
}
