//! The database as readers and the cause record see it: readers leave the
//! file byte for byte as it was (a current, an older, a newer schema, a
//! foreign SQLite file); schema 4's migration keeps rows and wake-up ids;
//! a roll-up keeps the ids, details and parts of the wake-ups it keeps;
//! the trace's lost events per interval (stored, rolled up, reported,
//! counted); a wake-up whose span lost events is `unknown (trace lost N
//! events)`; the exemplar on the latency histogram; `report --at` times;
//! a report refuses a planted link.

use firmtime_trace::explain::{self, attribute, Category, Timeline};
use firmtime_trace::loss::Loss;
use firmtime_trace::raw::{Event, EventKind};
use firmtime_watch::metrics::{Totals, WatchCollector, WorstWakeup};
use firmtime_watch::report::{self, Period};
use firmtime_watch::run;
use firmtime_watch::store::{
    CausePart, CpuInterval, MachineState, Retention, RunInfo, Store, Wakeup, HOUR_NS,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A fresh directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let p = std::env::temp_dir().join(format!(
        "firmtime-watch-records-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

const MIN: i64 = 60_000_000_000;

fn row(cpu: usize, start: i64, wakeups: Vec<Wakeup>, lost: Option<u64>) -> CpuInterval {
    CpuInterval {
        seq: 0,
        cpu,
        start_unix_ns: start,
        end_unix_ns: start + MIN,
        period_ns: 10_000_000,
        count: 6000,
        missed: 0,
        min_ns: Some(3_000),
        max_ns: wakeups.iter().map(|w| w.latency_ns).max().or(Some(9_000)),
        mean_ns: Some(5_000.0),
        p99_ns: Some(8_000),
        p999_ns: Some(9_000),
        steal_ns: 0,
        partial: false,
        merged: 0,
        explained: lost.is_some(),
        histogram: vec![(5_000, 5990), (9_000, 10)],
        wakeups,
        watch_cpu_ns: Some(1_000_000),
        trace_lost_events: lost,
    }
}

fn late(deadline: i64, latency_ns: i64, name: &str) -> Wakeup {
    Wakeup {
        deadline_unix_ns: deadline,
        latency_ns,
        category: Some("task".into()),
        name: Some(name.into()),
        cause_ns: Some(latency_ns as u64 - 1_000),
        detail: Some(format!("{name} ran at priority 9 while the thread was due")),
        parts: vec![CausePart {
            category: "task".into(),
            name: name.into(),
            pid: Some(4242),
            prio: Some(9),
            ns: latency_ns as u64 - 1_000,
        }],
        ..Wakeup::default()
    }
}

fn new_db(path: &Path) -> (Store, i64) {
    let mut s = Store::open(path).unwrap();
    let id = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "t".into(),
            command_line: "firmtime watch".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    (s, id)
}

/// Every file in `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                m.modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Everything a reader does: the period, the states, the runs, a
/// wake-up's record, the integrity check.
fn read_all(s: &Store) {
    let rows = s.intervals_since(i64::MIN).unwrap();
    s.states_since(i64::MIN).unwrap();
    s.runs().unwrap();
    s.integrity_check().unwrap();
    let p = Period::of(&rows, Vec::new(), 0, i64::MAX);
    if let Some(id) = p.worst.first().and_then(|w| w.id) {
        assert!(s.wakeup(id).unwrap().is_some(), "wake-up {id}");
    }
}

/// The schema a version-3 watch wrote (exactly), with one interval and
/// two wake-ups (rowids 1 and 2).
const SCHEMA_3: &str = "
PRAGMA journal_mode=WAL;
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '3');
CREATE TABLE runs(id INTEGER PRIMARY KEY, started_unix_ns INTEGER NOT NULL, ended_unix_ns INTEGER,
  end_reason TEXT, firmtime_version TEXT NOT NULL, command_line TEXT NOT NULL, config TEXT NOT NULL,
  conditions TEXT NOT NULL);
CREATE TABLE states(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, seen_unix_ns INTEGER NOT NULL,
  kernel_release TEXT NOT NULL, kernel_cmdline TEXT NOT NULL, governors TEXT NOT NULL,
  preempt_model TEXT NOT NULL, clocksource TEXT NOT NULL, virtualization TEXT NOT NULL,
  tuned_profile TEXT NOT NULL);
CREATE TABLE intervals(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  cpu INTEGER NOT NULL, start_unix_ns INTEGER NOT NULL, end_unix_ns INTEGER NOT NULL,
  period_ns INTEGER NOT NULL, count INTEGER NOT NULL, missed INTEGER NOT NULL, min_ns INTEGER,
  max_ns INTEGER, mean_ns REAL, p99_ns INTEGER, p999_ns INTEGER, steal_ns INTEGER NOT NULL,
  partial INTEGER NOT NULL, merged INTEGER NOT NULL, explained INTEGER NOT NULL,
  state_id INTEGER NOT NULL, histogram TEXT NOT NULL, watch_cpu_ns INTEGER,
  resolution_ns INTEGER NOT NULL DEFAULT 0, source_rows INTEGER NOT NULL DEFAULT 1,
  explained_rows INTEGER);
CREATE INDEX intervals_by_end ON intervals(end_unix_ns);
CREATE TABLE wakeups(interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
  deadline_unix_ns INTEGER NOT NULL, latency_ns INTEGER NOT NULL, missed INTEGER NOT NULL,
  category TEXT, name TEXT, cause_ns INTEGER);
CREATE INDEX wakeups_by_interval ON wakeups(interval_id);
CREATE TABLE causes(interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
  category TEXT, name TEXT, wakeups INTEGER NOT NULL, missed INTEGER NOT NULL,
  worst_latency_ns INTEGER NOT NULL, first_unix_ns INTEGER NOT NULL, last_unix_ns INTEGER NOT NULL);
CREATE INDEX causes_by_interval ON causes(interval_id);
CREATE INDEX intervals_by_resolution ON intervals(resolution_ns, start_unix_ns);
INSERT INTO runs VALUES(1, 0, 100, 'stopped', '0.3', 'firmtime watch', '{}', '[]');
INSERT INTO states VALUES(1, 1, 0, '6.1', '', '', '', '', '', '');
INSERT INTO intervals VALUES(1, 1, 0, 0, 0, 60000000000, 10000000, 6000, 1, 2000, 2500000, 5000.0,
  8000, 9000, 0, 0, 0, 1, 1, '[[8000,5998],[9000,1],[2500000,1]]', 123, 0, 1, 1);
INSERT INTO wakeups VALUES(1, 5, 2500000, 1, 'task', 'hog', 2400000);
INSERT INTO wakeups VALUES(1, 6, 9000, 0, 'irq', 'eth0', 1000);
";

/// `watch check` and `watch report` wrote to the database: WAL switched
/// on and `CREATE TABLE` run before the schema was checked, so a newer
/// file was changed and then refused, a foreign SQLite file gained tables,
/// and the `-wal`/`-shm` files were left beside any of them.
#[test]
fn readers_leave_the_file_byte_identical_whatever_its_schema() {
    let d = scratch("readonly");
    // This version's, written and closed.
    let cur = d.0.join("current");
    std::fs::create_dir_all(&cur).unwrap();
    {
        let (mut s, run) = new_db(&cur.join("w.db"));
        s.write_interval(
            run,
            1,
            &MachineState::default(),
            &[row(0, 0, vec![late(5, 2_000_000, "hog")], Some(3))],
        )
        .unwrap();
    }
    // A version-3 file, an older schema: read as it is, not migrated.
    let v3 = d.0.join("v3");
    std::fs::create_dir_all(&v3).unwrap();
    rusqlite::Connection::open(v3.join("w.db"))
        .unwrap()
        .execute_batch(SCHEMA_3)
        .unwrap();
    // A newer schema.
    let newer = d.0.join("newer");
    std::fs::create_dir_all(&newer).unwrap();
    drop(Store::open(&newer.join("w.db")).unwrap());
    rusqlite::Connection::open(newer.join("w.db"))
        .unwrap()
        .execute("UPDATE meta SET value='99' WHERE key='schema_version'", [])
        .unwrap();
    // A SQLite file of something else (rollback journal, no meta).
    let foreign = d.0.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    rusqlite::Connection::open(foreign.join("w.db"))
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES(1);")
        .unwrap();
    // mtimes of a rewrite within the same clock tick would compare equal.
    std::thread::sleep(std::time::Duration::from_millis(20));
    for (dir, ok) in [
        (&cur, true),
        (&v3, true),
        (&newer, false),
        (&foreign, false),
    ] {
        let db = dir.join("w.db");
        let before = snapshot(dir);
        match Store::open_existing(&db) {
            Ok(s) => {
                assert!(ok, "{} was read", dir.display());
                assert!(s.is_read_only());
                read_all(&s);
                drop(s);
            }
            Err(e) => {
                assert!(!ok, "{}: {}", dir.display(), e.message());
                let m = e.message();
                assert!(
                    m.contains("schema version 99 is newer")
                        || m.contains("not a firmtime watch database"),
                    "{m}"
                );
            }
        }
        assert!(before == snapshot(dir), "{} was changed", dir.display());
    }
    // The version-3 file as a reader sees it: its wake-ups' ids are their
    // rowids, which the migration keeps.
    let s = Store::open_existing(&v3.join("w.db")).unwrap();
    assert_eq!(s.schema_version(), 3);
    let rows = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].interval.trace_lost_events, None);
    let ids: Vec<Option<i64>> = rows[0].interval.wakeups.iter().map(|w| w.id).collect();
    assert_eq!(ids, [Some(1), Some(2)]);
    let r = s.wakeup(1).unwrap().expect("wake-up 1");
    assert_eq!(r.wakeup.name.as_deref(), Some("hog"));
    assert_eq!(r.wakeup.detail, None, "schema 3 kept no detail");
}

#[test]
fn a_schema_3_database_migrates_to_4_keeping_its_rows_and_wakeup_ids() {
    let d = scratch("migrate3");
    let p = d.0.join("w.db");
    rusqlite::Connection::open(&p)
        .unwrap()
        .execute_batch(SCHEMA_3)
        .unwrap();
    let before = Store::open_existing(&p)
        .unwrap()
        .intervals_since(i64::MIN)
        .unwrap();
    let mut s = Store::open(&p).unwrap();
    assert_eq!(s.schema_version(), firmtime_watch::store::SCHEMA_VERSION);
    let v: String = rusqlite::Connection::open(&p)
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key='schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, "4");
    assert_eq!(s.intervals_since(i64::MIN).unwrap(), before);
    // New wake-ups get new ids; the old ones keep theirs.
    let run = s.runs().unwrap()[0].0;
    s.write_interval(
        run,
        1,
        &MachineState::default(),
        &[row(0, MIN, vec![late(MIN + 5, 3_000_000, "new")], Some(0))],
    )
    .unwrap();
    let rows = s.intervals_since(i64::MIN).unwrap();
    let ids: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.interval.wakeups.iter().filter_map(|w| w.id))
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(
        s.wakeup(3).unwrap().unwrap().wakeup.detail.as_deref(),
        Some("new ran at priority 9 while the thread was due")
    );
    s.integrity_check().unwrap();
    drop(s);
    // Opening again changes nothing.
    assert_eq!(
        Store::open(&p).unwrap().intervals_since(i64::MIN).unwrap(),
        rows
    );
}

#[test]
fn a_rollup_keeps_the_ids_details_and_parts_of_the_wakeups_it_keeps() {
    let d = scratch("rollup-ids");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    // Two one-minute intervals of CPU 0 in the first hour, 12 wake-ups
    // each: the hour keeps the 10 worst of the 24.
    let mut rows: Vec<CpuInterval> = (0..2)
        .map(|k| {
            let w = (0..12)
                .map(|i| late(k * MIN + i, 100_000 + (k * 12 + i) * 1000, "hog"))
                .collect();
            row(0, k * MIN, w, Some(k as u64 + 1))
        })
        .collect();
    s.store_interval(run, 1, &MachineState::default(), &mut rows[..1])
        .unwrap();
    s.store_interval(run, 2, &MachineState::default(), &mut rows[1..])
        .unwrap();
    let worst = rows[1].wakeups.last().unwrap().clone();
    let id = worst.id.expect("the writer set the id");
    let m = s
        .maintain(8 * 86_400_000_000_000, &Retention::default())
        .unwrap();
    assert_eq!(m.rolled_to_hour, 2);
    let after = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].resolution_ns, HOUR_NS);
    assert_eq!(after[0].interval.trace_lost_events, Some(3), "1 + 2 summed");
    assert_eq!(after[0].interval.wakeups.len(), 10);
    assert_eq!(s.count("wakeups").unwrap(), 10, "the other 14 went");
    let r = s
        .wakeup(id)
        .unwrap()
        .expect("the worst is kept under its id");
    assert_eq!(r.resolution_ns, HOUR_NS);
    assert_eq!(r.interval_id, after[0].id);
    assert_eq!(r.wakeup.latency_ns, worst.latency_ns);
    assert_eq!(r.wakeup.detail, worst.detail);
    assert_eq!(r.wakeup.parts, worst.parts);
    // The least late of the first interval was not kept.
    let gone = rows[0].wakeups[0].id.unwrap();
    assert_eq!(s.wakeup(gone).unwrap(), None);
    s.integrity_check().unwrap();
}

#[test]
fn trace_lost_events_are_stored_per_interval_reported_and_counted() {
    let d = scratch("lost");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let mut rows = vec![
        row(0, 0, vec![late(5, 2_000_000, "hog")], Some(5)),
        row(1, 0, vec![], None),
    ];
    s.store_interval(run, 1, &MachineState::default(), &mut rows)
        .unwrap();
    let mut more = vec![row(0, MIN, vec![], Some(7)), row(1, MIN, vec![], Some(0))];
    s.store_interval(run, 2, &MachineState::default(), &mut more)
        .unwrap();
    let back = s.intervals_since(i64::MIN).unwrap();
    let lost: Vec<(usize, Option<u64>)> = back
        .iter()
        .map(|r| (r.interval.cpu, r.interval.trace_lost_events))
        .collect();
    assert_eq!(lost, [(0, Some(5)), (1, None), (0, Some(7)), (1, Some(0))]);
    let p = Period::of(&back, Vec::new(), 0, 3 * MIN);
    assert_eq!(p.trace_lost_events, Some(12));
    let per: Vec<Option<u64>> = p.cpus.iter().map(|c| c.trace_lost_events).collect();
    assert_eq!(per, [Some(12), Some(0)]);
    let md = report::markdown(&p, Path::new("w.db"), &[], 1_000_000);
    assert!(
        md.contains("The kernel lost 12 events from the explaining trace"),
        "{md}"
    );
    assert!(md.contains("| 12 events |"), "{md}");
    // The metrics: a counter per CPU equal to the rows' sum.
    let mut t = Totals::default();
    for r in rows.iter().chain(&more) {
        t.add(r);
    }
    let text = WatchCollector::render(&Arc::new(Mutex::new(t)));
    assert!(
        text.contains("firmtime_watch_trace_lost_events_total{cpu=\"0\"} 12"),
        "{text}"
    );
    assert!(
        text.contains("firmtime_watch_trace_lost_events_total{cpu=\"1\"} 0"),
        "{text}"
    );
}

/// The losses of a session for one row: only that CPU's, only those that
/// overlap the interval; one that could not be located in time (the whole
/// session) counts.
#[test]
fn interval_lost_counts_the_cpus_losses_that_overlap_its_interval() {
    let l = |cpu: u16, from_ns: u64, to_ns: u64, events: u64| Loss {
        cpu,
        from_ns,
        to_ns,
        events,
        counted: true,
    };
    let losses = [
        l(0, 100, 200, 7),      // inside
        l(0, 950, 1_100, 11),   // across the end
        l(0, 2_000, 2_100, 13), // after
        l(1, 100, 200, 17),     // another CPU
        l(0, 0, u64::MAX, 19),  // not located: the whole session
    ];
    assert_eq!(run::interval_lost(&losses, 0, 50, 1_000), 7 + 11 + 19);
    assert_eq!(run::interval_lost(&losses, 1, 50, 1_000), 17);
    assert_eq!(run::interval_lost(&losses, 2, 50, 1_000), 0);
    assert_eq!(run::interval_lost(&[], 0, 0, u64::MAX), 0);
}

fn comm(s: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..s.len()].copy_from_slice(s.as_bytes());
    c
}

/// A wake-up 2 ms late on CPU 0 behind a task `hog`, attributed from a
/// trace, through the path `watch` stores it by (`run::stored_cause`):
/// with events lost in its span it is `unknown (trace lost 42 events)`,
/// its count kept, never the task the surviving events suggest.
#[test]
fn a_wakeup_whose_span_lost_events_is_stored_as_unknown_trace_lost_n_events() {
    let d: u64 = 1_000_000_000;
    let wk = d + 2_000_000;
    let sw = |t: u64, prev: i32, prev_comm: &str, next: i32, state: i64| Event {
        time_ns: t,
        cpu: 0,
        kind: EventKind::Switch,
        pid: prev,
        prev_pid: prev,
        next_pid: next,
        prev_state: state,
        arg: (9u64 << 32) | 120,
        comm: comm(prev_comm),
    };
    let events = vec![
        sw(d - 500_000, 100, "watcher", 200, 1),
        sw(wk - 1_000, 200, "hog", 100, 0),
        sw(wk + 50_000, 100, "watcher", 0, 1),
    ];
    let w = explain::Wakeup {
        cpu: 0,
        tid: 100,
        deadline_ns: d,
        wake_ns: wk,
        slack_ns: 50_000,
        period_ns: 10_000_000,
    };
    let m = explain::this_machine();
    let whole = attribute::attribute(&Timeline::new(events.clone()), &w, &m);
    assert_eq!(whole.lost_events, None, "{whole:?}");
    assert_ne!(whole.name, attribute::TRACE_LOST, "{whole:?}");
    // Its breakdown is stored as the trace gives it, and read back.
    let kept = run::stored_cause(&whole, 1, 2_000_000, 0);
    let shares = kept
        .breakdown
        .as_ref()
        .and_then(|b| b.as_array())
        .expect("a breakdown");
    let sum: u64 = shares.iter().map(|s| s["ns"].as_u64().unwrap()).sum();
    assert_eq!(sum, whole.breakdown.iter().map(|s| s.ns).sum::<u64>());
    assert_eq!(shares.len(), whole.breakdown.len());
    let holed = Timeline::new(events).with_losses(vec![Loss {
        cpu: 0,
        from_ns: d + 100_000,
        to_ns: d + 900_000,
        events: 42,
        counted: true,
    }]);
    let cause = attribute::attribute(&holed, &w, &m);
    assert_eq!(cause.category, Category::Unknown);
    assert_eq!(cause.lost_events, Some(42));
    let stored = run::stored_cause(&cause, 1_795_000_000_000_000_000, 2_000_000, 0);
    assert_eq!(
        stored.cause_words().as_deref(),
        Some("unknown (trace lost 42 events)")
    );
    // Stored and read back as `watch show` reads it.
    let dir = scratch("lost-cause");
    let (mut s, run) = new_db(&dir.0.join("w.db"));
    let mut rows = vec![row(0, 0, vec![stored, kept], Some(42))];
    s.store_interval(run, 1, &MachineState::default(), &mut rows)
        .unwrap();
    let id = rows[0].wakeups[0].id.unwrap();
    let r = s.wakeup(id).unwrap().unwrap();
    assert_eq!(r.wakeup.category.as_deref(), Some("unknown"));
    assert_eq!(r.wakeup.name.as_deref(), Some(attribute::TRACE_LOST));
    assert_eq!(r.wakeup.lost_events, Some(42));
    assert_eq!(
        r.wakeup.cause_words().as_deref(),
        Some("unknown (trace lost 42 events)")
    );
    assert!(
        r.wakeup
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("42 events"),
        "{:?}",
        r.wakeup.detail
    );
    assert_eq!(r.interval_trace_lost_events, Some(42));
    let k = s.wakeup(rows[0].wakeups[1].id.unwrap()).unwrap().unwrap();
    assert_eq!(k.wakeup.breakdown, rows[0].wakeups[1].breakdown);
    assert!(k.wakeup.breakdown.is_some());
    let p = Period::of(&s.intervals_since(i64::MIN).unwrap(), Vec::new(), 0, MIN);
    assert_eq!(
        p.worst[0].cause.as_deref(),
        Some("unknown (trace lost 42 events)")
    );
    assert_eq!(
        p.max_cause.as_deref(),
        Some("unknown (trace lost 42 events)")
    );
}

/// The OpenMetrics text carries, per CPU, the worst wake-up of the last
/// interval as an exemplar on the bucket holding its latency; the text
/// format (which has none) drops it and still passes promtool.
#[test]
fn the_latency_histogram_carries_the_worst_wakeup_as_an_exemplar() {
    let d = scratch("exemplar");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let mut rows = vec![row(
        0,
        0,
        vec![
            late(7_000_000_000, 3_500_000, "hog"),
            late(8_000_000_000, 150_000, "x"),
        ],
        Some(0),
    )];
    s.store_interval(run, 1, &MachineState::default(), &mut rows)
        .unwrap();
    let mut t = Totals::default();
    t.add(&rows[0]);
    let id = rows[0].wakeups[0].id.unwrap();
    assert_eq!(
        t.cpus[&0].worst,
        Some(WorstWakeup {
            id,
            latency_ns: 3_500_000,
            deadline_unix_ns: 7_000_000_000
        })
    );
    let om = WatchCollector::render(&Arc::new(Mutex::new(t)));
    let with: Vec<&str> = om.lines().filter(|l| l.contains(" # {")).collect();
    assert_eq!(with.len(), 1, "{om}");
    // 3.5 ms lies in the (2 ms, 5 ms] bucket.
    assert!(
        with[0].starts_with("firmtime_watch_latency_seconds_bucket{")
            && with[0].contains("le=\"0.005\"")
            && with[0].ends_with(&format!(" # {{wakeup_id=\"{id}\"}} 0.0035 7")),
        "{}",
        with[0]
    );
    assert_eq!(firmtime_watch::metrics::bucket_of(3_500_000), 8);
    assert_eq!(firmtime_watch::metrics::bucket_of(5_000_000), 8);
    assert_eq!(firmtime_watch::metrics::bucket_of(200_000_000), 13);
    let text = firmtime_watch::metrics::to_prometheus_text(&om);
    assert!(!text.contains(" # {"), "{text}");
    let Ok(mut pt) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        firmtime_rt::testing::skip("promtool not installed (Debian: prometheus)");
        return;
    };
    use std::io::Write;
    pt.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = pt.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three intervals stored between two scrapes (a scrape interval longer
/// than `--store-every`): a 60 ms spike's, then two quiet ones. The
/// exemplar was the last interval's worst only, so the spike's id never
/// reached Prometheus. Now each bucket line carries the worst of the
/// latest interval whose worst fell in it: the spike's stays on its
/// bucket, the quiet ones share theirs (the later one wins), and each
/// exemplar served is one interval's worst, once.
#[test]
fn a_spike_between_two_scrapes_keeps_its_exemplar_after_quiet_intervals() {
    let d = scratch("exemplar-between");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let mut t = Totals::default();
    let mut worst_ids = Vec::new();
    for (k, (lat, name)) in [(60_000_000, "hog"), (30_000, "a"), (40_000, "b")]
        .into_iter()
        .enumerate()
    {
        let start = k as i64 * MIN;
        let mut rows = vec![row(
            0,
            start,
            vec![
                late(start + 1_000, lat, name),
                late(start + 2_000, 12_000, "x"),
            ],
            Some(0),
        )];
        s.store_interval(run, start, &MachineState::default(), &mut rows)
            .unwrap();
        worst_ids.push(rows[0].wakeups[0].id.unwrap());
        t.add(&rows[0]);
    }
    let om = WatchCollector::render(&Arc::new(Mutex::new(t)));
    let with: Vec<&str> = om.lines().filter(|l| l.contains(" # {")).collect();
    assert_eq!(with.len(), 2, "{om}");
    // 40 µs (the last interval) in (20 µs, 50 µs]; 30 µs, in the same
    // bucket, is the older one's and gives way.
    assert!(
        with[0].contains("le=\"0.00005\"")
            && with[0].ends_with(&format!(
                " # {{wakeup_id=\"{}\"}} 0.00004 {}",
                worst_ids[2],
                (2 * MIN + 1_000) as f64 / 1e9
            )),
        "{om}"
    );
    // 60 ms in (50 ms, 100 ms], two intervals later.
    assert!(
        with[1].contains("le=\"0.1\"")
            && with[1].ends_with(&format!(
                " # {{wakeup_id=\"{}\"}} 0.06 {}",
                worst_ids[0],
                1_000f64 / 1e9
            )),
        "{om}"
    );
    for id in &worst_ids[1..2] {
        assert!(!om.contains(&format!("\"{id}\"")), "{id}: {om}");
    }
}

#[test]
fn report_at_takes_rfc3339_the_reports_own_form_and_unix_seconds_or_ms() {
    let t = 1_795_000_000_000_000_000i64; // 2026-11-18T11:06:40Z
    for (text, want) in [
        ("2026-11-18T11:06:40Z", t),
        ("2026-11-18T11:06:40.250Z", t + 250_000_000),
        ("2026-11-18T11:06:40+00:00", t),
        ("2026-11-18 11:06:40 UTC", t),
        ("1795000000", t),
        ("@1795000000.5", t + 500_000_000),
        ("1795000000123", t + 123_000_000),
        ("1970-01-01T00:00:00Z", 0),
        ("2000-02-29T00:00:00Z", 951_782_400_000_000_000),
    ] {
        assert_eq!(report::parse_time(text), Ok(want), "{text}");
    }
    assert_eq!(report::utc(t), "2026-11-18 11:06:40 UTC");
    for bad in [
        "",
        "yesterday",
        "2026-11-18T11:06:40",
        "2026-13-18T10:13:20Z",
        "2026-11-18T25:13:20Z",
        "2026-11-18T11:06:40+02:00",
    ] {
        let e = report::parse_time(bad).unwrap_err();
        assert!(e.contains("RFC 3339"), "{bad}: {e}");
    }
}

/// Report outputs went through links planted in `--out`: now the report
/// refuses the link by name before writing anything, and leaves it and
/// what it leads to alone.
#[test]
fn a_report_refuses_a_link_planted_at_one_of_its_names() {
    let d = scratch("report-link");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    s.write_interval(
        run,
        1,
        &MachineState::default(),
        &[row(0, 0, vec![late(5, 2_000_000, "hog")], Some(0))],
    )
    .unwrap();
    let p = Period::of(&s.intervals_since(i64::MIN).unwrap(), Vec::new(), 0, MIN);
    for name in report::OUTPUT_FILES {
        let out = d.0.join(format!("out-{name}"));
        std::fs::create_dir_all(&out).unwrap();
        let victim = d.0.join(format!("victim-{name}"));
        std::fs::write(&victim, b"secret\n").unwrap();
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        let e = report::write(&p, Path::new("w.db"), &out, 1_000_000).unwrap_err();
        assert!(
            e.message().contains("is a symbolic link") && e.message().contains(name),
            "{}",
            e.message()
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret\n");
        assert_eq!(std::fs::read_link(out.join(name)).unwrap(), victim);
        let written: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(written, [name.to_string()], "nothing else written");
    }
    // Without a link, all four are written.
    let out = d.0.join("out");
    let w = report::write(&p, Path::new("w.db"), &out, 1_000_000).unwrap();
    assert!(w.markdown.is_file() && w.json.is_file());
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    let id = p.worst[0].id.unwrap();
    assert!(md.contains(&format!("| {id} | 0 |")), "{md}");
}

/// `watch --db` on a newer file switched it to WAL and ran `CREATE TABLE`
/// before it looked at the version; on a foreign SQLite file it added its
/// tables. Now both are refused before anything is written.
#[test]
fn the_writer_refuses_a_newer_or_foreign_file_untouched() {
    let d = scratch("writer-refuses");
    let newer = d.0.join("newer");
    std::fs::create_dir_all(&newer).unwrap();
    {
        let c = rusqlite::Connection::open(newer.join("w.db")).unwrap();
        c.execute_batch(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES('schema_version', '99');
             CREATE TABLE intervals_v99(x);",
        )
        .unwrap();
    }
    let foreign = d.0.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    rusqlite::Connection::open(foreign.join("w.db"))
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES(1);")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    for (dir, want) in [
        (
            &newer,
            "schema version 99 is newer than this firmtime's (4)",
        ),
        (
            &foreign,
            "not a firmtime watch database (it has tables but no meta table)",
        ),
    ] {
        let before = snapshot(dir);
        let e = Store::open(&dir.join("w.db")).unwrap_err();
        assert!(e.message().contains(want), "{}", e.message());
        assert!(
            e.message()
                .contains(&dir.join("w.db").display().to_string()),
            "{}",
            e.message()
        );
        assert!(before == snapshot(dir), "{} was changed", dir.display());
    }
}

/// The read-only open goes through an SQLite URI: a path with `?`, `#`,
/// `%` or a space must still name the file (not a query, a fragment or an
/// escape).
#[test]
fn a_reader_opens_a_path_with_uri_characters() {
    let d = scratch("uri-chars");
    let dir = d.0.join("a dir?x=1#frag%20");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("w 1%41.db");
    {
        let (mut s, run) = new_db(&p);
        s.write_interval(
            run,
            1,
            &MachineState::default(),
            &[row(0, 0, vec![late(5, 2_000_000, "hog")], Some(0))],
        )
        .unwrap();
    }
    let before = snapshot(&dir);
    let s = Store::open_existing(&p).unwrap();
    assert_eq!(s.intervals_since(i64::MIN).unwrap().len(), 1);
    drop(s);
    assert!(before == snapshot(&dir));
    assert!(!d.0.join("a dir").exists(), "no file made at the cut path");
}

/// The period's worst wake-ups are the 10 latest of all its rows' (ties
/// by the later deadline), whatever order the rows come in.
#[test]
fn a_periods_worst_wakeups_are_the_ten_latest_of_all_its_rows() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rows: Vec<firmtime_watch::store::StoredInterval> = (0..200)
        .map(|k| {
            let w: Vec<Wakeup> = (0..(next() % 12))
                .map(|i| {
                    let mut w = late(
                        k * MIN + i as i64,
                        10_000 + (next() % 500) as i64 * 1000,
                        "t",
                    );
                    w.id = Some(k * 100 + i as i64);
                    w
                })
                .collect();
            firmtime_watch::store::StoredInterval::raw(
                k,
                1,
                row((k % 2) as usize, k * MIN, w, None),
            )
        })
        .collect();
    let p = Period::of(&rows, Vec::new(), 0, 201 * MIN);
    let mut all: Vec<(i64, i64, Option<i64>)> = rows
        .iter()
        .flat_map(|r| r.interval.wakeups.iter())
        .map(|w| (w.latency_ns, w.deadline_unix_ns, w.id))
        .collect();
    all.sort_by_key(|w| std::cmp::Reverse((w.0, w.1)));
    let got: Vec<(i64, i64, Option<i64>)> = p
        .worst
        .iter()
        .map(|w| (w.latency_ns, w.deadline_unix_ns, w.id))
        .collect();
    assert_eq!(got, all[..report::WORST_LISTED]);
}
