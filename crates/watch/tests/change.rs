//! `watch report` finds where the distribution shifted and names what
//! changed with it: a generated history of 28 days, a regression injected
//! on day 14 (a new process making wake-ups late, after a kernel change).

#[path = "support/synth.rs"]
mod synth;

use firmtime_watch::report::{self, Period};
use firmtime_watch::store::{Retention, RunInfo, Store, DAY_NS, HOUR_NS};
use std::path::{Path, PathBuf};
use synth::{minute, Lcg, Shape};

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!(
        "firmtime-watch-change-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

const D0: i64 = 20_000 * DAY_NS as i64;
const DAY: i64 = DAY_NS as i64;

/// 28 days of hour-long intervals on two CPUs as `watch` would store them,
/// rolled up by the default retention at the end; with `regression`, from
/// day 14 a new kernel and a new task (`ffmpeg`) making 1 % of the
/// wake-ups 0.1–25.1 ms late (most of them missing deadlines). Returns the period of the 28 days.
fn history(db: &Path, regression: bool) -> Period {
    let mut s = Store::open(db).unwrap();
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: D0,
            firmtime_version: "t".into(),
            command_line: "t".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    let mut rng = Lcg(7);
    let hours = 28 * 24;
    s.write_bulk(run, hours, |i| {
        let t = D0 + i as i64 * HOUR_NS as i64;
        let late = regression && t >= D0 + 14 * DAY;
        let shape = Shape {
            samples: Some(2000),
            worst: 5,
            tail_every: if late { 100 } else { 5000 },
            cause: late.then_some(("task", "ffmpeg")),
            len_ns: HOUR_NS as i64,
            ..Shape::default()
        };
        let rows = (0..2)
            .map(|c| minute(&mut rng, c, i as u64, t, shape, None))
            .collect();
        let kernel = if late { "6.6.0-rt" } else { "6.1.0-rt" };
        (t + HOUR_NS as i64, synth::state(kernel), rows)
    })
    .unwrap();
    let now = D0 + 28 * DAY;
    let m = s.maintain(now, &Retention::default()).unwrap();
    assert!(m.rolled_to_hour > 0, "the older days are roll-ups: {m:?}");
    Period::read(&s, 28 * DAY_NS, now).unwrap()
}

#[test]
fn a_regression_injected_on_day_14_is_found_there_and_named_by_its_cause() {
    let d = scratch("regression");
    let p = history(&d.0.join("w.db"), true);
    assert!(
        p.resolutions.iter().any(|r| r.resolution == "hour"),
        "{:?}",
        p.resolutions
    );
    // Both series shift: the p99.9 and the miss rate (the late wake-ups
    // reach 25 ms, past the 10 ms period).
    let metrics: Vec<&str> = p.changes.iter().map(|c| c.metric.as_str()).collect();
    assert_eq!(metrics, vec!["miss rate", "p99.9"], "{:#?}", p.changes);
    for c in &p.changes {
        // Within one roll-up step (a day) of the injection: here exactly on it.
        assert!(
            (c.at_unix_ns - (D0 + 14 * DAY)).abs() <= DAY,
            "{} found at {}",
            c.metric,
            report::utc(c.at_unix_ns)
        );
        assert_eq!(c.at_unix_ns, D0 + 14 * DAY, "{}", c.metric);
        assert!(
            c.after > 10.0 * c.before,
            "{}: {} → {}",
            c.metric,
            c.before,
            c.after
        );
        assert_eq!(c.state_changes, vec!["kernel 6.1.0-rt → 6.6.0-rt"]);
        assert_eq!(c.new_processes, vec!["ffmpeg"]);
        assert_eq!(c.new_causes.len(), 1, "{:?}", c.new_causes);
        assert!(c.new_causes[0].contains("ffmpeg"), "{:?}", c.new_causes);
    }
    let c = &p.changes[1];
    let md = report::markdown(&p, Path::new("w.db"), &[], 1_000_000);
    assert!(md.contains("## What changed"), "{md}");
    assert!(md.contains(&c.line()), "{md}");
    assert!(
        c.line().contains("kernel 6.1.0-rt → 6.6.0-rt"),
        "{}",
        c.line()
    );
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["changes"][0]["new_processes"][0], "ffmpeg");
}

#[test]
fn a_history_without_a_regression_has_no_change_point() {
    let d = scratch("steady");
    let p = history(&d.0.join("w.db"), false);
    assert_eq!(p.count, 28 * 24 * 2 * 2000);
    assert_eq!(p.changes, vec![]);
    let md = report::markdown(&p, Path::new("w.db"), &[], 1_000_000);
    assert!(md.contains("No change point"), "{md}");
}
