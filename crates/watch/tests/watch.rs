//! firmtime-watch in process: a real run (root: SCHED_FIFO threads, and the
//! explaining trace where tracefs is usable), the database's schema guard
//! and retention, the OpenMetrics text (checked by `promtool check
//! metrics`) and the endpoint's token, over loopback.
//!
//! With `--features assert-rt` the run's RT loops execute under
//! `assert_no_alloc` (an allocation aborts the test).

use firmtime_watch::metrics::{self, Totals, WatchCollector};
use firmtime_watch::run::{self, Config, Event, ExplainMode};
use firmtime_watch::store::{CpuInterval, MachineState, RunInfo, Store, Wakeup};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("firmtime-watch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

static STOP: AtomicBool = AtomicBool::new(false);

#[test]
fn a_run_stores_every_interval_and_explains_its_worst_wakeups() {
    if !is_root() {
        firmtime_rt::testing::skip("a_run_stores_every_interval: needs root (SCHED_FIFO)");
        return;
    }
    assert_eq!(
        firmtime_rt::assert_rt::ENABLED,
        cfg!(all(feature = "assert-rt", debug_assertions))
    );
    let dir = scratch("run");
    let tracing = firmtime_trace::explain::available().is_ok();
    let cfg = Config {
        db: dir.join("w.db"),
        period_ns: 1_000_000,
        interval_ns: 1_000_000_000,
        duration_ns: Some(3_000_000_000),
        cpus: Some(vec![0]),
        explain: if tracing {
            ExplainMode::On
        } else {
            ExplainMode::Off
        },
        ..Config::default()
    };
    let totals = Arc::new(Mutex::new(Totals::default()));
    let mut stored = Vec::new();
    let mut started = false;
    let s = run::run(
        &cfg,
        "test",
        &STOP,
        Some(Arc::clone(&totals)),
        &mut |e| match e {
            Event::Started { conditions, .. } => {
                started = true;
                assert_eq!(conditions.len(), 1);
                assert_eq!(conditions[0].1.obtained.priority, 80, "never degraded");
            }
            Event::Stored(rows) => stored.push(rows),
            Event::Pruned(_) | Event::Notice(_) => {}
        },
    )
    .unwrap();
    assert!(started);
    assert_eq!((s.intervals, s.stopped), (3, false));
    assert_eq!(stored.len(), 3);
    let db = Store::open_existing(&cfg.db).unwrap();
    let rows = db.intervals_since(0).unwrap();
    assert_eq!(rows.len(), 3);
    for (k, r) in rows.iter().enumerate() {
        let i = &r.interval;
        assert_eq!(i.seq, k as u64);
        assert_eq!(i.count + i.missed, 1000);
        assert_eq!(i.explained, tracing, "{i:?}");
        // A thousand wake-ups cost CPU time; it is stored with the row.
        assert!(i.watch_cpu_ns.is_some_and(|n| n > 0), "{i:?}");
        if tracing {
            assert!(
                i.wakeups.iter().all(|w| w.category.is_some()),
                "every kept wake-up has a cause category (unknown included): {:?}",
                i.wakeups
            );
        }
    }
    let t = totals.lock().unwrap();
    let c0 = &t.cpus[&0];
    assert_eq!(c0.count, rows.iter().map(|r| r.interval.count).sum::<u64>());
    assert_eq!(
        c0.missed,
        rows.iter().map(|r| r.interval.missed).sum::<u64>()
    );
    assert_eq!(c0.intervals, 3);
    assert_eq!(
        c0.watch_cpu_ns,
        rows.iter()
            .filter_map(|r| r.interval.watch_cpu_ns)
            .sum::<u64>()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_schema_1_database_gains_the_watch_cpu_column_and_keeps_its_rows() {
    let dir = scratch("migrate");
    let p = dir.join("v1.db");
    // A version-1 database as the first watch wrote it: no watch_cpu_ns.
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES('schema_version', '1');
             CREATE TABLE intervals(
               id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, seq INTEGER NOT NULL,
               cpu INTEGER NOT NULL, start_unix_ns INTEGER NOT NULL, end_unix_ns INTEGER NOT NULL,
               period_ns INTEGER NOT NULL, count INTEGER NOT NULL, missed INTEGER NOT NULL,
               min_ns INTEGER, max_ns INTEGER, mean_ns REAL, p99_ns INTEGER, p999_ns INTEGER,
               steal_ns INTEGER NOT NULL, partial INTEGER NOT NULL, merged INTEGER NOT NULL,
               explained INTEGER NOT NULL, state_id INTEGER NOT NULL, histogram TEXT NOT NULL);
             INSERT INTO intervals VALUES(1, 1, 0, 0, 0, 60000000000, 1000000, 60000, 0,
               2000, 9000, 5000.0, 8000, 9000, 0, 0, 0, 0, 1, '[[9000,60000]]');",
        )
        .unwrap();
    }
    let (mut s, run) = new_db(&p);
    let v: String = rusqlite::Connection::open(&p)
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key='schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, store_version());
    s.write_interval(run, 200, &MachineState::default(), &[row(200, vec![])])
        .unwrap();
    let rows = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(rows.len(), 2);
    let old = rows.iter().find(|r| r.interval.count == 60_000);
    let new = rows.iter().find(|r| r.interval.count == 999);
    assert_eq!(
        old.expect("the old row is kept").interval.watch_cpu_ns,
        None,
        "unknown, not 0"
    );
    assert_eq!(new.unwrap().interval.watch_cpu_ns, Some(4_000_000));
    // Opening again changes nothing.
    drop(s);
    drop(Store::open(&p).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

/// A schema-2 database as the previous watch wrote it (its exact schema:
/// no roll-up columns, no `causes` table, no incremental auto-vacuum),
/// with one interval and two wake-ups.
#[test]
fn a_schema_2_database_migrates_keeps_its_rows_and_rolls_them_up() {
    let dir = scratch("migrate2");
    let p = dir.join("v2.db");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES('schema_version', '2');
             CREATE TABLE runs(id INTEGER PRIMARY KEY, started_unix_ns INTEGER NOT NULL,
               ended_unix_ns INTEGER, end_reason TEXT, firmtime_version TEXT NOT NULL,
               command_line TEXT NOT NULL, config TEXT NOT NULL, conditions TEXT NOT NULL);
             CREATE TABLE states(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,
               seen_unix_ns INTEGER NOT NULL, kernel_release TEXT NOT NULL,
               kernel_cmdline TEXT NOT NULL, governors TEXT NOT NULL, preempt_model TEXT NOT NULL,
               clocksource TEXT NOT NULL, virtualization TEXT NOT NULL, tuned_profile TEXT NOT NULL);
             CREATE TABLE intervals(
               id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, seq INTEGER NOT NULL,
               cpu INTEGER NOT NULL, start_unix_ns INTEGER NOT NULL, end_unix_ns INTEGER NOT NULL,
               period_ns INTEGER NOT NULL, count INTEGER NOT NULL, missed INTEGER NOT NULL,
               min_ns INTEGER, max_ns INTEGER, mean_ns REAL, p99_ns INTEGER, p999_ns INTEGER,
               steal_ns INTEGER NOT NULL, partial INTEGER NOT NULL, merged INTEGER NOT NULL,
               explained INTEGER NOT NULL, state_id INTEGER NOT NULL, histogram TEXT NOT NULL,
               watch_cpu_ns INTEGER);
             CREATE INDEX intervals_by_end ON intervals(end_unix_ns);
             CREATE TABLE wakeups(
               interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
               deadline_unix_ns INTEGER NOT NULL, latency_ns INTEGER NOT NULL,
               missed INTEGER NOT NULL, category TEXT, name TEXT, cause_ns INTEGER);
             CREATE INDEX wakeups_by_interval ON wakeups(interval_id);
             INSERT INTO runs VALUES(1, 0, 100, 'stopped', '0.1', 'firmtime watch', '{}', '[]');
             INSERT INTO states VALUES(1, 1, 0, '6.1', '', '', '', '', '', '');
             INSERT INTO intervals VALUES(1, 1, 0, 0, 0, 60000000000, 1000000, 60000, 2,
               2000, 9000, 5000.0, 8000, 9000, 7, 0, 0, 1, 1, '[[8000,59990],[9000,10]]', 123);
             INSERT INTO wakeups VALUES(1, 5, 9000, 1, 'irq', 'eth0', 100);
             INSERT INTO wakeups VALUES(1, 6, 8500, 1, 'irq', 'eth0', 100);",
        )
        .unwrap();
    }
    let mut s = Store::open(&p).unwrap();
    let c = rusqlite::Connection::open(&p).unwrap();
    let q = |sql: &str| c.query_row(sql, [], |r| r.get::<_, String>(0)).unwrap();
    assert_eq!(
        q("SELECT value FROM meta WHERE key='schema_version'"),
        store_version()
    );
    let av: i64 = c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
    assert_eq!(
        av, 2,
        "incremental auto-vacuum, so the cap can shrink the file"
    );
    let rows = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r.resolution_ns, r.source_rows, r.explained_rows),
        (0, 1, 1),
        "an old row is one interval as stored"
    );
    assert_eq!(
        (r.interval.count, r.interval.missed, r.interval.watch_cpu_ns),
        (60_000, 2, Some(123))
    );
    assert_eq!(r.interval.wakeups.len(), 2);
    // It rolls up like a new one (a week and more later).
    let m = s
        .maintain(
            8 * 86_400_000_000_000,
            &firmtime_watch::store::Retention::default(),
        )
        .unwrap();
    assert_eq!(m.rolled_to_hour, 1);
    let rows = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(rows.len(), 1);
    let h = &rows[0];
    assert_eq!(
        (h.resolution_ns, h.interval.count, h.interval.max_ns),
        (firmtime_watch::store::HOUR_NS, 60_000, Some(9000))
    );
    assert_eq!(h.causes.len(), 1);
    assert_eq!((h.causes[0].wakeups, h.causes[0].missed), (2, 2));
    s.integrity_check().unwrap();
    drop(s);
    // Opening again changes nothing.
    drop(Store::open(&p).unwrap());
    assert_eq!(
        Store::open(&p).unwrap().intervals_since(i64::MIN).unwrap(),
        rows
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn store_version() -> String {
    firmtime_watch::store::SCHEMA_VERSION.to_string()
}

#[test]
fn an_interval_over_budget_gets_a_notice_naming_a_period_that_fits() {
    let cfg = Config {
        period_ns: 1_000_000,
        interval_ns: 60_000_000_000,
        budget_percent: 0.5,
        ..Config::default()
    };
    let mut r = row(60_000_000_000, vec![]);
    r.seq = 4;
    r.count = 60_000;
    r.start_unix_ns = 0;
    // 25 µs a wake-up: 1.5 s in a minute = 2.5 %.
    r.watch_cpu_ns = Some(60_000 * 25_000);
    let n = run::over_budget(&[r.clone()], &cfg).expect("over budget");
    assert!(
        n.contains("interval 4") && n.contains("2.50 % of CPU 1") && n.contains("--budget 0.5 %"),
        "{n}"
    );
    // 25 µs per wake-up at 0.5 % needs 5 ms.
    assert!(n.contains("--period 5ms or longer fits"), "{n}");
    assert!(n.contains("25 µs of CPU per wake-up"), "{n}");
    // Within budget, partial, or unknown: no notice.
    r.watch_cpu_ns = Some(60_000 * 4_000);
    assert_eq!(run::over_budget(&[r.clone()], &cfg), None);
    r.watch_cpu_ns = Some(60_000 * 25_000);
    r.partial = true;
    assert_eq!(run::over_budget(&[r.clone()], &cfg), None);
    r.partial = false;
    r.watch_cpu_ns = None;
    assert_eq!(run::over_budget(&[r.clone()], &cfg), None);
    // Nothing fits up to 1 s: say what else to do.
    r.count = 10;
    r.watch_cpu_ns = Some(1_000_000_000);
    let n = run::over_budget(&[r], &cfg).unwrap();
    assert!(n.contains("raise --budget or watch fewer CPUs"), "{n}");
}

#[test]
fn a_budget_outside_its_range_is_refused_by_name() {
    for b in [0.0, -1.0, 101.0, f64::NAN] {
        let cfg = Config {
            budget_percent: b,
            ..Config::default()
        };
        let e = cfg.validate().unwrap_err();
        assert!(e.message().contains("--budget"), "{}", e.message());
        assert!(e.message().contains("0.01 % to 100 %"), "{}", e.message());
    }
}

fn row(end: i64, wakeups: Vec<Wakeup>) -> CpuInterval {
    CpuInterval {
        seq: 0,
        cpu: 1,
        start_unix_ns: end - 1_000_000_000,
        end_unix_ns: end,
        period_ns: 1_000_000,
        count: 999,
        missed: 1,
        min_ns: Some(3_000),
        max_ns: Some(1_500_000),
        mean_ns: Some(10_000.0),
        p99_ns: Some(20_000),
        p999_ns: Some(150_000),
        steal_ns: 20_000_000,
        partial: false,
        merged: 0,
        explained: true,
        histogram: vec![(9_000, 500), (10_000, 490), (150_000, 8), (1_500_000, 1)],
        wakeups,
        watch_cpu_ns: Some(4_000_000),
        trace_lost_events: None,
    }
}

fn wakeup(cat: &str) -> Wakeup {
    Wakeup {
        deadline_unix_ns: 5,
        latency_ns: 1_500_000,
        missed: 1,
        category: Some(cat.into()),
        name: Some("x".into()),
        cause_ns: Some(1_000_000),
        ..Wakeup::default()
    }
}

fn new_db(path: &Path) -> (Store, i64) {
    let mut s = Store::open(path).unwrap();
    let id = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "t".into(),
            command_line: "t".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    (s, id)
}

#[test]
fn prune_deletes_old_intervals_with_their_wakeups_and_keeps_the_state() {
    let dir = scratch("prune");
    let (mut s, run) = new_db(&dir.join("p.db"));
    let st = MachineState {
        kernel_release: "6.1".into(),
        ..MachineState::default()
    };
    s.write_interval(
        run,
        100,
        &st,
        &[row(100, vec![wakeup("vm"), wakeup("task")])],
    )
    .unwrap();
    let st2 = MachineState {
        governors: "performance".into(),
        ..st.clone()
    };
    s.write_interval(run, 200, &st2, &[row(200, vec![wakeup("irq")])])
        .unwrap();
    s.write_interval(run, 300, &st2, &[row(300, vec![])])
        .unwrap();
    assert_eq!(s.count("states").unwrap(), 2, "a row per change");
    assert_eq!(s.count("wakeups").unwrap(), 3);
    assert_eq!(s.prune(150).unwrap(), 1);
    assert_eq!(s.count("intervals").unwrap(), 2);
    assert_eq!(
        s.count("wakeups").unwrap(),
        1,
        "deleted with their interval"
    );
    assert_eq!(
        s.count("states").unwrap(),
        1,
        "the unreferenced old state goes"
    );
    assert_eq!(s.prune(1000).unwrap(), 2);
    assert_eq!(s.count("states").unwrap(), 1, "the latest state stays");
    s.integrity_check().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_database_from_a_newer_schema_is_refused_by_name() {
    let dir = scratch("schema");
    let p = dir.join("n.db");
    drop(Store::open(&p).unwrap());
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute("UPDATE meta SET value='99' WHERE key='schema_version'", [])
        .unwrap();
    drop(c);
    let e = Store::open(&p).unwrap_err();
    assert!(
        e.message().contains("schema version 99 is newer"),
        "{}",
        e.message()
    );
    let e = Store::open_existing(&dir.join("missing.db")).unwrap_err();
    assert!(e.message().contains("does not exist"), "{}", e.message());
    let _ = std::fs::remove_dir_all(dir);
}

fn totals() -> Arc<Mutex<Totals>> {
    let mut t = Totals::default();
    t.add(&row(1, vec![wakeup("vm"), wakeup("softirq")]));
    t.add(&row(2, vec![wakeup("vm")]));
    Arc::new(Mutex::new(t))
}

#[test]
fn metrics_text_has_cumulative_buckets_and_passes_promtool() {
    let text = WatchCollector::render(&totals());
    for line in [
        "# TYPE firmtime_watch_latency_seconds histogram",
        "firmtime_watch_latency_seconds_count{cpu=\"1\"} 1998",
        "firmtime_watch_latency_seconds_bucket{le=\"0.00001\",cpu=\"1\"} 1980",
        "firmtime_watch_latency_seconds_bucket{le=\"0.0002\",cpu=\"1\"} 1996",
        "firmtime_watch_latency_seconds_bucket{le=\"0.002\",cpu=\"1\"} 1998",
        "firmtime_watch_latency_seconds_bucket{le=\"+Inf\",cpu=\"1\"} 1998",
        "firmtime_watch_missed_deadlines_total{cpu=\"1\"} 2.0",
        "firmtime_watch_steal_seconds_total{cpu=\"1\"} 0.04",
        "firmtime_watch_self_cpu_seconds_total{cpu=\"1\"} 0.008",
        "firmtime_watch_worst_wakeups_by_cause_total{category=\"vm\"} 2.0",
        "firmtime_watch_worst_wakeups_by_cause_total{category=\"softirq\"} 1.0",
        "firmtime_watch_worst_wakeups_by_cause_total{category=\"unknown\"} 0.0",
        "# EOF",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    match std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut c) => {
            // What the endpoint serves a client that does not ask for
            // OpenMetrics (promtool reads the Prometheus text format).
            let plain = metrics::to_prometheus_text(&text);
            c.stdin.take().unwrap().write_all(plain.as_bytes()).unwrap();
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(_) => firmtime_rt::testing::skip(
            "promtool not installed (Debian: prometheus): metrics checked as text only",
        ),
    }
}

/// `FirmtimeWatchStalled` once fired on a healthy watch storing every
/// 30 min (a fixed 10 min window): the alert now reads the interval and
/// the last interval's end from the metrics.
#[test]
fn metrics_serve_the_interval_and_the_last_stored_intervals_end() {
    let t = totals();
    // Before the run starts: neither is served (no false "stalled").
    let text = WatchCollector::render(&t);
    assert!(!text.contains("firmtime_watch_interval_seconds"), "{text}");
    t.lock().unwrap().interval_ns = 1_800_000_000_000;
    t.lock().unwrap().last_interval_end_unix_ns = Some(1_700_000_000_500_000_000);
    let text = WatchCollector::render(&t);
    for line in [
        "# TYPE firmtime_watch_interval_seconds gauge",
        "firmtime_watch_interval_seconds 1800.0",
        "# TYPE firmtime_watch_last_interval_end_timestamp_seconds gauge",
        "firmtime_watch_last_interval_end_timestamp_seconds 1700000000.5",
        "# TYPE firmtime_watch_endpoint_cpu_seconds counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    // A stored interval moves the end to its own; a row ending earlier
    // (another CPU's) never moves it back.
    t.lock()
        .unwrap()
        .add(&row(1_800_000_000_000_000_000, vec![]));
    let text = WatchCollector::render(&t);
    assert!(
        text.lines()
            .any(|l| l == "firmtime_watch_last_interval_end_timestamp_seconds 1800000000.0"),
        "{text}"
    );
    t.lock().unwrap().add(&row(5, vec![]));
    assert_eq!(
        t.lock().unwrap().last_interval_end_unix_ns,
        Some(1_800_000_000_000_000_000)
    );
}

/// A scrape flood's CPU (~1.1 CPU at 10,000 scrapes/s) was charged to the
/// measuring threads' figure (`watch_cpu_ns`, the budget notice): the
/// share of the process's CPU they are charged now leaves the endpoint's
/// out.
#[test]
fn the_measuring_threads_share_leaves_the_endpoints_cpu_out() {
    // 10 ms of process CPU: two threads 1 ms each, the endpoint 6 ms: 2 ms
    // of the rest (writer, trace) split over two is 1 ms each.
    assert_eq!(
        run::shared_cpu_ns(10_000_000, 6_000_000, [1_000_000, 1_000_000].into_iter()),
        1_000_000
    );
    // Without the endpoint the whole rest is shared (4 ms each).
    assert_eq!(
        run::shared_cpu_ns(10_000_000, 0, [1_000_000, 1_000_000].into_iter()),
        4_000_000
    );
    // Never below zero when the readings cross.
    assert_eq!(run::shared_cpu_ns(1_000, 6_000, [500].into_iter()), 0);
}

fn get(addr: std::net::SocketAddr, req: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn the_endpoint_serves_metrics_only_with_the_token() {
    // The token file's rule (firmtime_rt::secret) is the CLI's: here the
    // endpoint's use of a token already read.
    let token = "s3cret-token-0123456789".to_string();
    let t = totals();
    let server = metrics::serve("127.0.0.1:0".parse().unwrap(), Some(token), move || {
        WatchCollector::render(&t)
    })
    .unwrap();
    let addr = server.addr();
    let no = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(no.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{no}");
    assert!(!no.contains("firmtime_watch"), "{no}");
    let yes = get(
        addr,
        "GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cret-token-0123456789\r\n\r\n",
    );
    assert!(yes.starts_with("HTTP/1.1 200 OK\r\n"), "{yes}");
    assert!(yes.contains("firmtime_watch_missed_deadlines_total{cpu=\"1\"} 2.0"));
    assert!(
        yes.contains("Content-Type: text/plain; version=0.0.4"),
        "{yes}"
    );
    let om = get(
        addr,
        "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\nAuthorization: Bearer s3cret-token-0123456789\r\n\r\n",
    );
    assert!(
        om.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    let nf = get(addr, "GET /other HTTP/1.1\r\n\r\n");
    assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
    // A client that never finishes its request is dropped at the deadline.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /metr").unwrap();
    let mut s = String::new();
    slow.read_to_string(&mut s).unwrap();
    assert!(s.starts_with("HTTP/1.1 400"), "{s}");
    drop(server);
}

#[test]
fn silent_and_slow_clients_cannot_keep_a_scrape_out() {
    let t = totals();
    let server = metrics::serve("127.0.0.1:0".parse().unwrap(), None, move || {
        WatchCollector::render(&t)
    })
    .unwrap();
    let addr = server.addr();
    // Twice as many strangers as slots: half a request head each, then silence.
    let held: Vec<TcpStream> = (0..2 * metrics::MAX_CONNECTIONS)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /metr").unwrap();
            c
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    // A scrape is answered before any of them reaches its 2 s deadline
    // (one connection at a time, it would have waited behind all 16).
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(metrics::CONN_DEADLINE / 2))
        .unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s)
        .expect("the scrape was answered while the strangers held their connections");
    assert!(s.starts_with("HTTP/1.1 200 OK"), "{s}");
    assert!(s.contains("firmtime_watch_wakeups_total"), "{s}");
    // The oldest strangers were closed to make room; the endpoint still
    // answers, and no more than its slots stay open.
    let closed = held
        .into_iter()
        .filter(|c| {
            let mut c = c.try_clone().unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .unwrap();
            // Closed: end of stream; still open: the read times out.
            matches!(c.read(&mut [0u8; 1]), Ok(0))
        })
        .count();
    assert!(
        closed >= metrics::MAX_CONNECTIONS,
        "{closed} of {} strangers closed",
        2 * metrics::MAX_CONNECTIONS
    );
    let again = get(addr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(again.starts_with("HTTP/1.1 200 OK"), "{again}");
}

static STOP_FLOOD: AtomicBool = AtomicBool::new(false);

/// A flood of scrapes (~1.1 CPU at 10,000 a second) was charged to the
/// measuring threads' own-CPU figure (`watch_cpu_ns`), which then advised a
/// longer `--period`. Now the endpoint's CPU is counted apart: what the
/// rows are charged plus what the endpoint used never exceeds what the
/// process used (before, the rows alone took the whole process's CPU, so
/// the sum exceeded it by the endpoint's share).
#[test]
fn a_scrape_flood_is_not_charged_to_the_measuring_threads() {
    if !is_root() {
        firmtime_rt::testing::skip("a_scrape_flood_is_not_charged: needs root (SCHED_FIFO)");
        return;
    }
    let dir = scratch("flood");
    let totals = Arc::new(Mutex::new(Totals::default()));
    let t = Arc::clone(&totals);
    let server = metrics::serve("127.0.0.1:0".parse().unwrap(), None, move || {
        WatchCollector::render(&t)
    })
    .unwrap();
    // The flood comes from another process: its CPU is not this one's.
    let flood = "import socket, sys, threading, time\n\
        a = ('127.0.0.1', int(sys.argv[1])); end = time.time() + float(sys.argv[2])\n\
        def w():\n    while time.time() < end:\n        try:\n            \
        s = socket.create_connection(a); s.sendall(b'GET /metrics HTTP/1.1\\r\\n\\r\\n')\n            \
        while s.recv(65536): pass\n            s.close()\n        except Exception: pass\n\
        ts = [threading.Thread(target=w) for _ in range(8)]\n\
        [t.start() for t in ts]; [t.join() for t in ts]\n";
    let child = std::process::Command::new("python3")
        .args(["-c", flood, &server.addr().port().to_string(), "4"])
        .spawn();
    let Ok(mut child) = child else {
        firmtime_rt::testing::skip("a_scrape_flood_is_not_charged: python3 not installed");
        return;
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let cpu = || firmtime_rt::clock::read_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    let (p0, e0) = (cpu(), metrics::endpoint_cpu_ns());
    let cfg = Config {
        db: dir.join("w.db"),
        period_ns: 1_000_000,
        interval_ns: 1_000_000_000,
        duration_ns: Some(3_000_000_000),
        cpus: Some(vec![0]),
        explain: ExplainMode::Off,
        ..Config::default()
    };
    let s = run::run(&cfg, "test", &STOP_FLOOD, Some(totals), &mut |_| {}).unwrap();
    let (p1, e1) = (cpu(), metrics::endpoint_cpu_ns());
    let _ = child.kill();
    let _ = child.wait();
    drop(server);
    assert_eq!(s.intervals, 3);
    let rows = Store::open_existing(&cfg.db)
        .unwrap()
        .intervals_since(0)
        .unwrap();
    let charged: u64 = rows.iter().filter_map(|r| r.interval.watch_cpu_ns).sum();
    let (process, endpoint) = (p1 - p0, e1 - e0);
    eprintln!(
        "flood: process {process} ns, endpoint {endpoint} ns, charged to the rows {charged} ns"
    );
    assert!(
        endpoint > 100_000_000,
        "the flood cost the endpoint only {endpoint} ns: too weak to tell"
    );
    // 20 ms for the endpoint's CPU credited at the end of each connection
    // rather than as it ran.
    assert!(
        charged + endpoint <= process + 20_000_000,
        "charged {charged} + endpoint {endpoint} > process {process}: the endpoint's CPU is in the rows"
    );
    let _ = std::fs::remove_dir_all(dir);
}
