//! `firmtime watch`: rows stored per interval, kill -9 and SIGTERM, retention,
//! `check`'s exit codes, `report`'s files, `install`'s unit, usage errors.
//! Runs the real binary with real SCHED_FIFO threads (root) on CPU 0.

mod common;

use common::prometheus::*;
use common::*;
use firmtime_watch::store::{CausePart, CpuInterval, MachineState, RunInfo, Store, Wakeup};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn root(test: &str) -> bool {
    let ok = is_root();
    if !ok {
        firmtime_rt::testing::skip(format!("{test}: needs root (SCHED_FIFO, mlockall)"));
    }
    ok
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn db_arg(dir: &TestDir) -> String {
    dir.0.join("w.db").display().to_string()
}

/// `(seq, count + missed, merged, partial)` of every stored row, in order.
fn rows(db: &Path) -> Vec<(u64, u64, u64, bool)> {
    let s = Store::open_existing(db).unwrap();
    s.integrity_check().unwrap();
    s.intervals_since(0)
        .unwrap()
        .into_iter()
        .map(|r| {
            let i = r.interval;
            (i.seq, i.count + i.missed, i.merged, i.partial)
        })
        .collect()
}

/// Starts `firmtime watch ARGS` and waits until it has stored `n`
/// intervals (its `watch: interval` lines); stderr is drained after that.
fn start_watch(args: &[&str], n: usize) -> std::process::Child {
    // The tests count deadlines at 1 kHz (the default is 10 ms).
    let mut child = Command::new(EXE)
        .args(["watch", "--period", "1ms"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = 0;
    let mut line = String::new();
    let t0 = Instant::now();
    while seen < n {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "watch ended early after {seen} intervals"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no interval stored"
        );
        if line.starts_with("watch: interval ") {
            seen += 1;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    child
}

#[test]
fn watch_stores_one_row_per_cpu_and_interval_and_every_deadline_once() {
    if !root("watch_stores_one_row_per_cpu_and_interval") {
        return;
    }
    let dir = TestDir::new("watch-rows");
    let db = db_arg(&dir);
    let out = firmtime(&[
        "watch",
        "--db",
        &db,
        "--cpu",
        "0,1",
        "--period",
        "1ms",
        "--interval",
        "1s",
        "--duration",
        "3500ms",
        "--explain",
        "off",
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("watch: --duration reached; 4 intervals stored (run 1)"),
        "{err}"
    );
    let s = Store::open_existing(Path::new(&db)).unwrap();
    let all = s.intervals_since(0).unwrap();
    assert_eq!(all.len(), 8, "4 intervals × 2 CPUs");
    for cpu in [0, 1] {
        let mine: Vec<&CpuInterval> = all
            .iter()
            .map(|r| &r.interval)
            .filter(|i| i.cpu == cpu)
            .collect();
        assert_eq!(mine.iter().map(|i| i.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        // Every deadline is a wake-up or a counted miss, in exactly one interval.
        assert_eq!(mine.iter().map(|i| i.count + i.missed).sum::<u64>(), 3500);
        for i in &mine[..3] {
            assert_eq!(i.merged, 0, "the writer kept up: {i:?}");
            assert_eq!(i.count + i.missed, 1000, "a whole interval: {i:?}");
            assert!(!i.partial);
            let h: u64 = i.histogram.iter().map(|(_, c)| c).sum();
            assert_eq!(h, i.count, "the histogram holds every wake-up");
            assert!(i.p999_ns <= i.max_ns && i.p99_ns <= i.p999_ns);
            assert!(!i.wakeups.is_empty() && i.wakeups.len() <= 10);
            assert_eq!(i.wakeups[0].latency_ns, i.max_ns.unwrap(), "worst first");
            assert!(!i.explained);
            assert_eq!(i.end_unix_ns - i.start_unix_ns, 1_000_000_000);
        }
        assert!(mine[3].partial, "the last half interval");
    }
    assert_eq!(s.count("states").unwrap(), 1, "the state did not change");
    let runs = s.runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].3.as_deref(), Some("duration reached"));
}

#[test]
fn kill_9_loses_at_most_the_current_interval() {
    if !root("kill_9_loses_at_most_the_current_interval") {
        return;
    }
    let dir = TestDir::new("watch-kill9");
    let db = db_arg(&dir);
    let mut child = start_watch(
        &[
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--explain",
            "off",
        ],
        3,
    );
    // Mid-interval.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(kill(child.id(), libc::SIGKILL), 0);
    child.wait().unwrap();
    let r = rows(Path::new(&db));
    assert!(r.len() >= 3, "the 3 intervals reported are stored: {r:?}");
    let mut next = 0;
    for (seq, deadlines, merged, partial) in &r {
        assert_eq!(*seq, next, "contiguous from 0: {r:?}");
        // A row spans 1 + merged intervals when the writer was late.
        assert_eq!(
            *deadlines,
            1000 * (1 + merged),
            "each stored interval is whole: {r:?}"
        );
        assert!(!partial);
        next = seq + 1 + merged;
    }
    let s = Store::open_existing(Path::new(&db)).unwrap();
    assert_eq!(s.runs().unwrap()[0].3, None, "the killed run has no end");
    drop(s);
    // The database takes a new run after the crash.
    let out = firmtime(&[
        "watch",
        "--db",
        &db,
        "--cpu",
        "0",
        "--interval",
        "1s",
        "--duration",
        "1s",
        "--explain",
        "off",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = Store::open_existing(Path::new(&db)).unwrap();
    assert_eq!(s.runs().unwrap().len(), 2);
    assert_eq!(s.count("intervals").unwrap(), r.len() as u64 + 1);
}

#[test]
fn sigterm_stores_the_interval_being_measured() {
    if !root("sigterm_stores_the_interval_being_measured") {
        return;
    }
    let dir = TestDir::new("watch-term");
    let db = db_arg(&dir);
    let mut child = start_watch(
        &[
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--explain",
            "off",
        ],
        1,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(kill(child.id(), libc::SIGTERM), 0);
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}");
    let r = rows(Path::new(&db));
    let last = r.last().unwrap();
    assert!(
        last.3,
        "the interval cut short is stored, flagged partial: {r:?}"
    );
    assert!(last.1 > 0 && last.1 < 1000 * (1 + last.2), "{r:?}");
    let s = Store::open_existing(Path::new(&db)).unwrap();
    assert_eq!(s.runs().unwrap()[0].3.as_deref(), Some("stopped"));
}

fn fake_row(seq: u64, end_unix_ns: i64, max_ns: i64, missed: u64) -> CpuInterval {
    CpuInterval {
        seq,
        cpu: 0,
        start_unix_ns: end_unix_ns - 60_000_000_000,
        end_unix_ns,
        period_ns: 1_000_000,
        count: 60_000 - missed,
        missed,
        min_ns: Some(2_000),
        max_ns: Some(max_ns),
        mean_ns: Some(5_000.0),
        p99_ns: Some(9_000),
        p999_ns: Some(12_000),
        steal_ns: 0,
        partial: false,
        merged: 0,
        explained: false,
        histogram: vec![(5_000, 60_000 - missed - 1), (max_ns, 1)],
        wakeups: vec![],
        watch_cpu_ns: None,
        trace_lost_events: None,
    }
}

fn fake_db(path: &Path, rows: &[CpuInterval]) {
    let mut s = Store::open(path).unwrap();
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "test".into(),
            command_line: "test".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    for r in rows {
        s.write_interval(
            run,
            r.end_unix_ns,
            &MachineState::default(),
            std::slice::from_ref(r),
        )
        .unwrap();
    }
}

#[test]
fn retention_deletes_intervals_older_than_keep() {
    if !root("retention_deletes_intervals_older_than_keep") {
        return;
    }
    let dir = TestDir::new("watch-keep");
    let db = db_arg(&dir);
    let day = 86_400_000_000_000;
    fake_db(
        Path::new(&db),
        &[
            fake_row(0, now_ns() - 2 * day, 50_000, 0),
            fake_row(1, now_ns() - day / 2, 50_000, 0),
        ],
    );
    let out = firmtime(&[
        "watch",
        "--db",
        &db,
        "--cpu",
        "0",
        "--interval",
        "1s",
        "--duration",
        "2s",
        "--keep",
        "1d",
        "--explain",
        "off",
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("watch: deleted 1 interval rows older than --keep"),
        "{err}"
    );
    let s = Store::open_existing(Path::new(&db)).unwrap();
    let ends: Vec<i64> = s
        .intervals_since(0)
        .unwrap()
        .iter()
        .map(|r| r.interval.end_unix_ns)
        .collect();
    assert_eq!(ends.len(), 3, "the half-day-old one and the 2 new ones");
    assert!(ends.iter().all(|&e| e > now_ns() - day));
}

#[test]
fn check_exits_0_when_fine_1_when_not_2_without_data() {
    let dir = TestDir::new("watch-check");
    let db = db_arg(&dir);
    let code = |args: &[&str]| {
        let out = firmtime(args);
        (out.status.code(), text(&out.stdout))
    };
    let (c, line) = code(&["watch", "check", "--db", &db]);
    assert_eq!(c, Some(2), "{line}");
    assert!(line.starts_with("no data: database"), "{line}");
    let now = now_ns();
    fake_db(
        Path::new(&db),
        &[
            fake_row(0, now - 120_000_000_000, 300_000, 0),
            fake_row(1, now - 60_000_000_000, 2_400_000, 2),
        ],
    );
    let (c, line) = code(&["watch", "check", "--db", &db, "--since", "1h"]);
    assert_eq!(c, Some(1), "{line}");
    assert!(
        line.starts_with("NOT fine: worst wake-up 2.4 ms late"),
        "{line}"
    );
    assert!(line.contains("2 missed deadlines (allowed 0)"), "{line}");
    let (c, line) = code(&[
        "watch",
        "check",
        "--db",
        &db,
        "--max-latency",
        "5ms",
        "--max-missed",
        "2",
    ]);
    assert_eq!(c, Some(0), "{line}");
    assert!(
        line.starts_with("fine: 119998 wake-ups, worst 2.4 ms ≤ 5ms"),
        "{line}"
    );
    // Both intervals ended more than 30 s ago: a 30 s window holds nothing.
    let (c, line) = code(&["watch", "check", "--db", &db, "--since", "30s"]);
    assert_eq!(c, Some(2), "{line}");
    let json = dir.0.join("check.json");
    let (c, _) = code(&[
        "watch",
        "check",
        "--db",
        &db,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(c, Some(1));
    let v = read_json(&json);
    assert_eq!(v["answer"], "not_fine");
    assert_eq!(v["period"]["missed"], 2);
}

#[test]
fn report_writes_markdown_json_and_plots() {
    let dir = TestDir::new("watch-report");
    let db = db_arg(&dir);
    let now = now_ns();
    let rows: Vec<CpuInterval> = (0..30)
        .map(|k| {
            let mut r = fake_row(
                k,
                now - (30 - k as i64) * 60_000_000_000,
                40_000 + k as i64 * 1000,
                0,
            );
            // The first ten rows come from before schema 2 (unknown);
            // the others cost 0.2 s of CPU in their minute (0.33 %).
            r.watch_cpu_ns = (k >= 10).then_some(200_000_000);
            r
        })
        .collect();
    fake_db(Path::new(&db), &rows);
    let out_dir = dir.0.join("rep");
    let out = firmtime(&[
        "watch",
        "report",
        "--db",
        &db,
        "--since",
        "24h",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = assert_ok(&out);
    assert!(
        stdout.starts_with("fine: 1800000 wake-ups, worst 69 µs"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for needle in [
        "## Latency over time",
        "![latency over time](latency-over-time.png)",
        "![histogram](histogram.png)",
        "## Causes of the worst wake-ups",
        "| CPU | intervals |",
    ] {
        assert!(md.contains(needle), "{needle} missing from {md}");
    }
    for png in ["latency-over-time.png", "histogram.png"] {
        let b = std::fs::read(out_dir.join(png)).unwrap();
        assert!(b.len() > 1000, "{png}: {} bytes", b.len());
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{png}: PNG signature");
        assert_eq!(&b[12..16], b"IHDR", "{png}");
        let size = (
            u32::from_be_bytes(b[16..20].try_into().unwrap()),
            u32::from_be_bytes(b[20..24].try_into().unwrap()),
        );
        assert_eq!(size, firmtime_plot::SIZE, "{png}");
    }
    let v = read_json(&out_dir.join("report.json"));
    assert_eq!(v["count"], 1_800_000);
    assert_eq!(v["over_time"].as_array().unwrap().len(), 30);
    assert_eq!(v["max_ns"], 69_000);
    // watch's own CPU over the rows that recorded it only.
    assert_eq!(v["cpus"][0]["watch_cpu_ns"], 20 * 200_000_000u64);
    let pct = v["cpus"][0]["watch_cpu_percent"].as_f64().unwrap();
    assert!((pct - 100.0 / 300.0).abs() < 1e-9, "{pct}");
    assert!(md.contains("| 0.33 % of the CPU |"), "{md}");
}

#[test]
fn install_prints_and_writes_a_unit_that_systemd_accepts() {
    let out = firmtime(&[
        "watch", "install", "--print", "--", "--cpu", "0", "--keep", "7d",
    ]);
    let unit = assert_ok(&out);
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(
        exec.ends_with(" watch --db /var/lib/firmtime/watch.db --cpu 0 --keep 7d") || !is_root(),
        "{exec}"
    );
    assert!(exec.contains(" watch "), "{exec}");
    for l in [
        "Restart=on-failure",
        "StandardError=journal",
        "KillSignal=SIGTERM",
        "WantedBy=multi-user.target",
    ] {
        assert!(unit.lines().any(|x| x == l), "{l} missing: {unit}");
    }
    let dir = TestDir::new("watch-install");
    let path = dir.0.join("firmtime-watch.service");
    // This binary is in the build tree: the unit runs a copy (--exe).
    let exe = dir.0.join("firmtime");
    let out = firmtime(&[
        "watch",
        "install",
        "--unit",
        path.to_str().unwrap(),
        "--exe",
        exe.to_str().unwrap(),
        "--",
        "--interval",
        "30s",
    ]);
    let said = assert_ok(&out);
    assert!(
        said.contains("systemctl daemon-reload && systemctl enable --now firmtime-watch.service"),
        "{said}"
    );
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("--interval 30s"), "{written}");
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let v = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            v.status.success(),
            "systemd-analyze verify: {}{}",
            text(&v.stdout),
            text(&v.stderr)
        );
        let complaints = text(&v.stderr);
        assert!(
            !complaints.contains("firmtime-watch.service:"),
            "{complaints}"
        );
    } else {
        firmtime_rt::testing::skip(
            "systemd-analyze not installed: the unit was checked as text only",
        );
    }
    // Bad watch flags are refused before anything is written.
    assert_usage_error(
        &["watch", "install", "--print", "--", "--interval", "10ms"],
        &["--store-every 10ms is out of range: valid is 1s to 1h"],
    );
}

/// `watch install --unit LINK` renamed the unit over the link (a unit
/// linked from elsewhere, or masked by `systemctl mask`): it is refused,
/// before anything is written, and the link and its target are left alone.
#[test]
fn install_refuses_a_unit_path_that_is_a_link() {
    let dir = TestDir::new("watch-install-link");
    let target = dir.0.join("elsewhere.service");
    std::fs::write(&target, "[Unit]\nDescription=someone else's\n").unwrap();
    let link = dir.0.join("firmtime-watch.service");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = firmtime(&["watch", "install", "--unit", link.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let needle = format!(
        "--unit: {} is a symbolic link to {}",
        link.display(),
        target.display()
    );
    assert!(err.contains(&needle), "'{needle}' missing from: {err}");
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "[Unit]\nDescription=someone else's\n"
    );
    assert_eq!(dir.entries().len(), 2, "{:?}", dir.entries());
}

#[test]
fn bad_watch_flags_are_usage_errors_naming_the_flag() {
    assert_usage_errors(
        "watch --db /tmp/never-written.db",
        &[
            (
                "--store-every 500ms",
                &["--store-every 500ms is out of range: valid is 1s to 1h"],
            ),
            (
                "--period 10us",
                &["--period 10µs is out of range: valid is 100µs to 1s"],
            ),
            ("--keep 30s", &["--keep 30s is out of range"]),
            (
                "--interval 1s --period 3ms",
                &["--store-every 1s must be a whole number of --period (3ms)"],
            ),
            (
                "--priority other",
                &["--priority other: watch measures a real-time thread"],
            ),
            (
                "--worst 0",
                &["--worst 0 is out of range: valid is 1 to 1000"],
            ),
            ("--metrics-token /tmp/x", &["--metrics-listen"]),
            ("--cpu 999", &["--cpu: CPU 999 is not online"]),
            (
                "--explain sometimes",
                &["--explain", "\"sometimes\"", "valid is auto, on or off"],
            ),
            (
                "--budget 0",
                &["--budget 0 % is out of range: valid is 0.01 % to 100 %"],
            ),
            ("--budget lots", &["--budget", "'lots' is not a percentage"]),
            (
                "--max-db-size 512KiB",
                &["--max-db-size 512KiB is out of range: valid is 1MiB to 64GiB"],
            ),
            (
                "--max-db-size 100GiB",
                &["--max-db-size 100GiB is out of range: valid is 1MiB to 64GiB"],
            ),
            (
                "--keep-raw 30d --keep-hourly 7d",
                &["--keep-hourly 7d is shorter than --keep-raw (30d)"],
            ),
            (
                "--metrics-linger 30s",
                &["--metrics-linger", "out of range: valid is 0s to 20s"],
            ),
            (
                "--interval 1h --keep-raw 10min",
                &["--keep-raw 10min is shorter than one --store-every (1h)"],
            ),
        ],
    );
    assert!(!Path::new("/tmp/never-written.db").exists());
}

fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool").args(args).output() {
        Ok(o) => Some(o),
        Err(_) => {
            firmtime_rt::testing::skip("promtool not installed (Debian: prometheus)");
            None
        }
    }
}

fn contrib(p: &str) -> String {
    format!("{}/../../contrib/{p}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn shipped_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = contrib("prometheus/firmtime-watch.rules.yml");
    let Some(out) = promtool(&["check", "rules", &rules]) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("SUCCESS: 3 rules found"),
        "{}",
        text(&out.stdout)
    );
    let out = promtool(&[
        "test",
        "rules",
        &contrib("prometheus/firmtime-watch.rules.test.yml"),
    ])
    .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_watch_serves() {
    let d: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(contrib("grafana/firmtime-watch.json")).unwrap(),
    )
    .unwrap();
    // The names watch serves, from its own exposition.
    let mut totals = firmtime_watch::metrics::Totals::default();
    totals.add(&fake_row(0, 60_000_000_000, 1_000_000, 0));
    let text = firmtime_watch::metrics::WatchCollector::render(&std::sync::Arc::new(
        std::sync::Mutex::new(totals),
    ));
    let served: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let panels = d["panels"].as_array().unwrap();
    assert_eq!(panels.len(), 8);
    let mut exprs: Vec<String> = panels
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    exprs.push(
        d["templating"]["list"][1]["definition"]
            .as_str()
            .unwrap()
            .into(),
    );
    for e in &exprs {
        let names: Vec<&str> = e
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("firmtime_"))
            .collect();
        assert!(!names.is_empty(), "{e}");
        for n in names {
            assert!(served.contains(&n), "{n} in {e} is not served");
        }
    }
    // One click from a spike: the latency panels link to this dashboard
    // with the moment in `at`, which the text panel turns into the
    // command; the p99.9 panel shows the bucket series' exemplars.
    for p in &panels[..2] {
        let url = p["fieldConfig"]["defaults"]["links"][0]["url"]
            .as_str()
            .unwrap();
        // This dashboard (by its uid), the moment (Unix ms) and the machine.
        assert!(
            url.starts_with(&format!("/d/{}?", d["uid"].as_str().unwrap()))
                && url.contains("var-at=${__value.time}")
                && url.contains("var-spike_instance=${__field.labels.instance}"),
            "{url}"
        );
    }
    assert_eq!(panels[0]["targets"][0]["exemplar"], true);
    assert!(panels[0]["targets"][0]["expr"]
        .as_str()
        .unwrap()
        .contains("firmtime_watch_latency_seconds_bucket"));
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(
        vars.contains(&"at") && vars.contains(&"spike_instance"),
        "{vars:?}"
    );
    let text = panels[7]["options"]["content"].as_str().unwrap();
    assert!(
        text.contains("firmtime watch report --at ${at} --since 10min")
            && text.contains("firmtime watch show WAKEUP_ID"),
        "{text}"
    );
    // `${__value.time}` is Unix ms: `--at` takes it as it comes.
    let out = firmtime(&[
        "watch",
        "report",
        "--at",
        "1795000000123",
        "--db",
        "/nonexistent/firmtime-watch.db",
    ]);
    assert!(
        text_of(&out).contains("/nonexistent/firmtime-watch.db does not exist"),
        "{}",
        text_of(&out)
    );
}

fn text_of(out: &std::process::Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// Every file in `dir`: name, bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                e.metadata().unwrap().modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A database with one interval whose worst wake-up has a whole cause
/// record; returns its directory, path and the wake-up's id.
fn recorded_db(name: &str) -> (TestDir, String, i64, i64) {
    let dir = TestDir::new(name);
    let db = dir.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let db = db.join("w.db");
    let end = now_ns() - 120_000_000_000;
    let mut r = fake_row(3, end, 2_345_000, 1);
    r.explained = true;
    r.trace_lost_events = Some(0);
    let deadline = end - 30_000_000_000;
    r.wakeups = vec![Wakeup {
        deadline_unix_ns: deadline,
        latency_ns: 2_345_000,
        missed: 1,
        category: Some("task".into()),
        name: Some("ft-hog".into()),
        cause_ns: Some(2_300_000),
        detail: Some(
            "ft-hog (pid 4242, SCHED_FIFO 90) ran 2.30 ms on CPU 0 while the thread was due".into(),
        ),
        parts: vec![
            CausePart {
                category: "task".into(),
                name: "ft-hog".into(),
                pid: Some(4242),
                prio: Some(9),
                ns: 2_300_000,
            },
            CausePart {
                category: "irq".into(),
                name: "eth0".into(),
                pid: None,
                prio: None,
                ns: 40_000,
            },
        ],
        breakdown: Some(serde_json::json!([
            {"kind": "task", "ns": 2_300_000, "name": "ft-hog", "pid": 4242, "tgid": 4240,
             "process": "watch_exemplars", "policy": "SCHED_FIFO", "prio": 9},
            {"kind": "timer_delay", "ns": 45_000, "name": "hrtimer"}
        ])),
        ..Wakeup::default()
    }];
    let mut s = Store::open(&db).unwrap();
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "test".into(),
            command_line: "test".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    let mut rows = vec![r];
    s.store_interval(run, end, &MachineState::default(), &mut rows)
        .unwrap();
    let id = rows[0].wakeups[0].id.unwrap();
    drop(s);
    (dir, db.display().to_string(), id, deadline)
}

#[test]
fn watch_show_prints_a_wakeups_whole_cause_record() {
    let (_dir, db, id, deadline) = recorded_db("watch-show");
    let out = firmtime(&["watch", "show", &id.to_string(), "--db", &db]);
    let s = assert_ok(&out);
    let at = firmtime_rt::system::rfc3339_utc(UNIX_EPOCH + Duration::from_nanos(deadline as u64));
    for needle in [
        format!("wake-up {id} on CPU 0: deadline "),
        "2.3 ms late, 1 deadline missed".to_string(),
        "cause: task ft-hog, 2.3 ms charged to it".to_string(),
        "  ft-hog (pid 4242, SCHED_FIFO 90) ran 2.30 ms".to_string(),
        "its lateness, part by part (they add up to it):\n  2.3 ms: task ft-hog (pid 4242, process watch_exemplars, SCHED_FIFO, kernel prio 9)\n  45 µs: timer delay hrtimer\n".to_string(),
        "what ran in its window, largest first:\n  2.3 ms: task ft-hog (pid 4242, kernel prio 9)".to_string(),
        "  40 µs: interrupt eth0".to_string(),
        "in interval 3 of run 1".to_string(),
        format!("around it: firmtime watch report --at {at}"),
    ] {
        assert!(
            s.contains(&needle),
            "{needle:?} not in:
{s}"
        );
    }
    let out = firmtime(&["watch", "show", &id.to_string(), "--db", &db, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&assert_ok(&out)).unwrap();
    assert_eq!(v["wakeup"]["id"], id);
    assert_eq!(v["wakeup"]["name"], "ft-hog");
    assert_eq!(v["wakeup"]["parts"][0]["pid"], 4242);
    assert_eq!(v["wakeup"]["parts"][1]["name"], "eth0");
    assert_eq!(v["wakeup"]["breakdown"][0]["policy"], "SCHED_FIFO");
    assert_eq!(v["wakeup"]["breakdown"][1]["kind"], "timer_delay");
    assert_eq!(v["cpu"], 0);
    assert_eq!(v["seq"], 3);
    // No such wake-up: a usage error naming it.
    let out = firmtime(&["watch", "show", "999999", "--db", &db]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(
        text_of(&out).contains("no wake-up 999999 in"),
        "{}",
        text_of(&out)
    );
}

/// `watch check` and `watch report` switched the database to WAL and ran
/// `CREATE TABLE` before reading it; a non-root user's check on root's
/// database failed with "attempt to write a readonly database".
#[test]
fn report_check_and_show_leave_the_database_byte_identical() {
    let (dir, db, id, deadline) = recorded_db("watch-readonly");
    let db_dir = Path::new(&db).parent().unwrap().to_path_buf();
    std::thread::sleep(Duration::from_millis(20));
    let before = snapshot(&db_dir);
    let out_dir = dir.0.join("rep");
    let at = firmtime_rt::system::rfc3339_utc(UNIX_EPOCH + Duration::from_nanos(deadline as u64));
    for args in [
        vec![
            "watch",
            "check",
            "--db",
            &db,
            "--max-latency",
            "5ms",
            "--max-missed",
            "1",
        ],
        vec![
            "watch",
            "report",
            "--db",
            &db,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        vec![
            "watch",
            "report",
            "--db",
            &db,
            "--at",
            &at,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        vec!["watch", "show", "--db", &db, &id.to_string()],
    ] {
        let out = firmtime(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text_of(&out));
    }
    assert!(
        before == snapshot(&db_dir),
        "the database directory changed"
    );
    // `--at` reports the interval around the spike, with its worst wake-up's id.
    // The check's line names the worst wake-up's id.
    let out = firmtime(&["watch", "check", "--db", &db, "--max-latency", "1ms"]);
    assert_eq!(out.status.code(), Some(1), "{}", text_of(&out));
    assert!(
        text(&out.stdout).contains(&format!("(task ft-hog; wake-up {id}) > 1ms")),
        "{}",
        text_of(&out)
    );
    let v = read_json(&out_dir.join("report.json"));
    assert_eq!(v["rows"], 1);
    assert_eq!(v["worst"][0]["id"], id);
    assert_eq!(v["worst"][0]["cause"], "task ft-hog");
    // A user who may not write the file or its directory reads it too.
    if is_root() {
        let nobody = Command::new(EXE)
            .args([
                "watch",
                "check",
                "--db",
                &db,
                "--max-latency",
                "5ms",
                "--max-missed",
                "1",
            ])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert_eq!(nobody.status.code(), Some(0), "{}", text_of(&nobody));
        assert!(
            text(&nobody.stdout).starts_with("fine:"),
            "{}",
            text_of(&nobody)
        );
        assert!(
            before == snapshot(&db_dir),
            "the database directory changed"
        );
    } else {
        firmtime_rt::testing::skip("report_check_and_show_leave…: the other-user part needs root");
    }
}

/// `watch report --out DIR` wrote its PNGs through links planted in DIR
/// (a plot was skipped with a notice, exit 0); now a link at any of its
/// names is refused before anything is read or written (exit 2), and it
/// and what it leads to are left alone.
#[test]
fn report_refuses_a_link_planted_in_its_out_directory() {
    let (dir, db, _, _) = recorded_db("watch-report-link");
    let out_dir = dir.0.join("rep");
    std::fs::create_dir_all(&out_dir).unwrap();
    let victim = dir.0.join("victim");
    std::fs::write(&victim, b"root's file\n").unwrap();
    std::os::unix::fs::symlink(&victim, out_dir.join("histogram.png")).unwrap();
    let out = firmtime(&[
        "watch",
        "report",
        "--db",
        &db,
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(
        text_of(&out).contains("histogram.png is a symbolic link to"),
        "{}",
        text_of(&out)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file\n");
    assert_eq!(
        std::fs::read_link(out_dir.join("histogram.png")).unwrap(),
        victim
    );
    assert!(!out_dir.join("report.md").exists(), "nothing written");
}

/// Starts `watch ARGS` (with a `--metrics-listen`); returns it and the
/// address it serves on. Its stderr lines go to `lines`.
fn start_watch_serving(args: &[&str]) -> (Killed, String, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(EXE)
        .arg("watch")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let child = Killed(child);
    let addr = loop {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("watch did not start serving");
        if let Some(rest) = l.strip_prefix("watch: serving OpenMetrics on http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    (child, addr, rx)
}

#[test]
fn prometheus_scrapes_watch_and_agrees_with_its_database() {
    if !root("prometheus_scrapes_watch") {
        return;
    }
    if !prometheus_installed("prometheus_scrapes_watch") {
        return;
    }
    let dir = TestDir::new("watch-prom");
    let db = db_arg(&dir);
    // Prometheus first, so that it scrapes watch from its first moment:
    // each counter's first sample is 0 and increase() sees all of it.
    let target = format!("127.0.0.1:{}", free_port());
    let (prom, prom_addr) = start_prometheus(&dir.0, &[("firmtime-watch", &target)]);
    let (watch, served_on, lines) = start_watch_serving(&[
        "--db",
        &db,
        "--cpu",
        "0",
        "--interval",
        "2s",
        "--explain",
        "off",
        "--metrics-listen",
        &target,
    ]);
    assert_eq!(served_on, target);
    // What we serve passes promtool (text format) and is OpenMetrics for Prometheus.
    let served = http_get(&target, "/metrics").unwrap();
    assert!(
        served.contains("firmtime_watch_missed_deadlines_total{cpu=\"0\"} 0"),
        "{served}"
    );
    promtool_check_metrics(&served);
    // Let watch store 4 intervals (8 s) while Prometheus scrapes.
    let mut stored = 0;
    while stored < 4 {
        let l = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("no interval stored");
        if l.starts_with("watch: interval ") {
            stored += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t = (now_ns() as f64 / 1e9) - 0.2;
    let q = |e: &str| prom_query(&prom_addr, e, t);
    let n = q("firmtime_watch_intervals_total{cpu=\"0\"}") as usize;
    assert!(n >= 3, "scraped after {n} intervals");
    let wakeups = q("firmtime_watch_wakeups_total{cpu=\"0\"}");
    let missed = q("firmtime_watch_missed_deadlines_total{cpu=\"0\"}");
    let count = q("firmtime_watch_latency_seconds_count{cpu=\"0\"}");
    let p999 = q("histogram_quantile(0.999, firmtime_watch_latency_seconds_bucket{cpu=\"0\"})");
    let inc = q("increase(firmtime_watch_missed_deadlines_total{cpu=\"0\"}[1h])");
    // The same intervals from the database.
    let s = Store::open_existing(Path::new(&db)).unwrap();
    let rows: Vec<CpuInterval> = s
        .intervals_since(0)
        .unwrap()
        .into_iter()
        .map(|r| r.interval)
        .take(n)
        .collect();
    assert_eq!(rows.len(), n);
    let db_count: u64 = rows.iter().map(|r| r.count).sum();
    let db_missed: u64 = rows.iter().map(|r| r.missed).sum();
    assert_eq!(wakeups as u64, db_count, "wake-ups");
    assert_eq!(count as u64, db_count, "histogram count");
    assert_eq!(missed as u64, db_missed, "missed deadlines");
    // increase() extrapolates past the first and last samples (by up to
    // half a scrape interval each side, and not below zero at the start):
    // with a first sample of 0, at least the stored misses; 0 without any.
    if db_missed == 0 {
        assert_eq!(inc, 0.0);
    } else {
        let raw = http_get(
            &prom_addr,
            &format!(
                "/api/v1/query?query={}&time={t:.3}",
                encode("firmtime_watch_missed_deadlines_total{cpu=\"0\"}[1h]")
            ),
        );
        assert!(
            inc >= db_missed as f64 * 0.99 && inc <= db_missed as f64 * 1.5,
            "increase {inc} vs {db_missed} stored; samples: {raw:?}"
        );
    }
    // histogram_quantile interpolates inside a bucket: it lies in the
    // Prometheus bucket that holds firmtime's nearest-rank p99.9 of the
    // same intervals.
    let mut h = firmtime_watch::hist::Hist::new();
    for r in &rows {
        h.add_sparse(&r.histogram);
    }
    let total = h.total();
    let rank = firmtime_rt::quantile::nearest_rank(0.999, total);
    let edges = firmtime_watch::metrics::BUCKET_EDGES_NS;
    let k = edges
        .iter()
        .position(|&e| h.at_or_below(e) >= rank)
        .unwrap_or(edges.len());
    let lo = if k == 0 {
        0.0
    } else {
        edges[k - 1] as f64 / 1e9
    };
    let hi = edges.get(k).map_or(f64::INFINITY, |&e| e as f64 / 1e9);
    // Prometheus ranks at q·n (not rounded up): at a bucket boundary it may
    // take the bucket below, whose upper edge is `lo`.
    assert!(
        p999 >= lo && p999 <= hi,
        "histogram_quantile {p999} outside [{lo}, {hi}]"
    );
    eprintln!(
        "prometheus at {t:.1}: {n} intervals, {wakeups} wake-ups, {missed} missed, increase {inc:.2}; \
         histogram_quantile(0.999) {p999:.6} s in [{lo}, {hi}] (firmtime p99.9 {:?} ns)",
        h.quantile(0.999, rows.iter().filter_map(|r| r.max_ns).max().unwrap_or(0))
    );
    drop(prom);
    drop(watch);
}

/// Resident memory of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The database's size in pages (`Store::size_bytes`), read beside the
/// writer (WAL: readers do not block it).
fn db_bytes(db: &Path) -> u64 {
    Store::open_existing(db).unwrap().size_bytes().unwrap()
}

/// The CI-sized soak: 80 one-second intervals with the explaining trace
/// and a one-minute `--keep`, so that pruning runs for the last 20. The
/// 30-minute run is `scripts/watch-soak.sh` (docs/WATCH.md).
#[test]
fn a_soak_keeps_memory_flat_and_the_database_bounded_by_keep() {
    if !root("a_soak_keeps_memory_flat") {
        return;
    }
    if firmtime_trace::explain::available().is_err() {
        firmtime_rt::testing::skip("a_soak_keeps_memory_flat: tracefs unavailable");
        return;
    }
    let dir = TestDir::new("watch-soak");
    let db = db_arg(&dir);
    let mut child = start_watch(
        &[
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--keep",
            "1min",
            "--duration",
            "80s",
            "--explain",
            "on",
        ],
        10,
    );
    let pid = child.id();
    let base_rss = rss_kib(pid);
    // The most RSS in the first 30 s after the first ten intervals, and in
    // the rest of the run.
    let (mut early_rss, mut max_rss, mut db_at_65) = (base_rss, base_rss, 0);
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(500));
        let rss = rss_kib(pid);
        if t0.elapsed() < Duration::from_secs(30) {
            early_rss = early_rss.max(rss);
        }
        max_rss = max_rss.max(rss);
        if db_at_65 == 0 && t0.elapsed() >= Duration::from_secs(55) {
            db_at_65 = db_bytes(Path::new(&db));
        }
        assert!(t0.elapsed() < Duration::from_secs(150), "watch did not end");
    }
    assert!(child.wait().unwrap().success());
    let r = rows(Path::new(&db));
    // About a minute of one-second rows is kept, and they are the latest.
    assert!(
        (55..=62).contains(&r.len()),
        "{} rows kept with --keep 1min",
        r.len()
    );
    assert!(
        r.last().unwrap().0 >= 78,
        "the latest intervals are kept: {r:?}"
    );
    let end_bytes = db_bytes(Path::new(&db));
    eprintln!(
        "soak: RSS {base_rss} KiB after 10 intervals, at most {early_rss} KiB in the next 30 s, at most {max_rss} KiB in all; database {db_at_65} bytes at 65 s, {end_bytes} at the end; {} rows",
        r.len()
    );
    // Flat: what the first 30 s allocated is all it needs (each interval's
    // explaining session allocates its stores afresh and frees them; nothing
    // may accumulate). The first 30 s set the bar, not the first ten
    // intervals alone: a session's stores follow the machine's event rate,
    // which the other tests of this binary raise at first, while a leak
    // keeps growing over the rest of the run.
    assert!(
        max_rss <= early_rss + early_rss / 4,
        "RSS grew from {early_rss} KiB (first 30 s) to {max_rss} KiB"
    );
    // Bounded: pruning frees pages that later rows reuse.
    assert!(
        db_at_65 > 0 && end_bytes <= db_at_65 + db_at_65 / 2,
        "database grew from {db_at_65} to {end_bytes} bytes while pruning"
    );
}

/// The service's case: root's `watch` writes its database while another
/// user runs `watch check` on it (it failed with "attempt to write a
/// readonly database", exit 1, read as "not fine").
#[test]
fn another_user_checks_the_database_of_a_running_watch() {
    if !root("another_user_checks_the_database_of_a_running_watch") {
        return;
    }
    let dir = TestDir::new("watch-other-user");
    let db = db_arg(&dir);
    let mut child = start_watch(
        &[
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--explain",
            "off",
        ],
        2,
    );
    let out = Command::new(EXE)
        .args([
            "watch",
            "check",
            "--db",
            &db,
            "--max-latency",
            "1s",
            "--max-missed",
            "1000000",
        ])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let _ = kill(child.id(), libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    assert!(text(&out.stdout).starts_with("fine: "), "{}", text_of(&out));
}

/// The Done-when of issue 31 item 10, through the commands: `check`,
/// `report` and `show` on a newer-schema database and on a SQLite file of
/// something else refuse it by name and leave it byte-identical (they
/// used to switch it to WAL and create their tables first).
#[test]
fn readers_refuse_a_newer_or_foreign_database_and_leave_it_byte_identical() {
    let dir = TestDir::new("watch-newer");
    let newer = dir.0.join("newer");
    let foreign = dir.0.join("foreign");
    for d in [&newer, &foreign] {
        std::fs::create_dir_all(d).unwrap();
    }
    drop(Store::open(&newer.join("w.db")).unwrap());
    // This crate has no SQLite of its own: python3's writes the two files.
    let py = |db: &Path, sql: &str| {
        Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit(); c.close()",
            ])
            .arg(db)
            .arg(sql)
            .status()
    };
    match py(
        &newer.join("w.db"),
        "UPDATE meta SET value='99' WHERE key='schema_version';",
    ) {
        Ok(st) => assert!(st.success()),
        Err(_) => {
            firmtime_rt::testing::skip(
                "readers_refuse_a_newer_or_foreign_database: python3 not installed",
            );
            return;
        }
    }
    assert!(py(
        &foreign.join("w.db"),
        "CREATE TABLE t(x); INSERT INTO t VALUES(1);"
    )
    .unwrap()
    .success());
    std::thread::sleep(Duration::from_millis(20));
    let out_dir = dir.0.join("rep");
    for (d, want) in [
        (&newer, "schema version 99 is newer than this firmtime's"),
        (&foreign, "not a firmtime watch database"),
    ] {
        let db = d.join("w.db").display().to_string();
        let before = snapshot(d);
        for args in [
            vec!["watch", "check", "--db", &db],
            vec![
                "watch",
                "report",
                "--db",
                &db,
                "--out",
                out_dir.to_str().unwrap(),
            ],
            vec!["watch", "show", "--db", &db, "1"],
        ] {
            let out = firmtime(&args);
            assert_ne!(out.status.code(), Some(0), "{args:?}: {}", text_of(&out));
            assert!(text_of(&out).contains(want), "{args:?}: {}", text_of(&out));
        }
        assert!(before == snapshot(d), "{} changed", d.display());
    }
}

/// `watch check` on a file that is not a watch database exited 1, which
/// reads as "the machine was not fine": it has its own status, 3, for every
/// kind of such file, and its JSON says so.
#[test]
fn check_exits_3_on_a_file_that_is_not_a_watch_database() {
    let dir = TestDir::new("watch-check-foreign");
    let text_file = dir.0.join("notes.txt");
    std::fs::write(
        &text_file,
        "not a database at all, just words\n".repeat(200),
    )
    .unwrap();
    let empty = dir.0.join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let newer = dir.0.join("newer.db");
    fake_db(
        &newer,
        &[fake_row(0, now_ns() - 60_000_000_000, 300_000, 0)],
    );
    let foreign = dir.0.join("foreign.db");
    let py = |db: &Path, sql: &str| {
        Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit(); c.close()",
            ])
            .arg(db)
            .arg(sql)
            .status()
    };
    let mut cases = vec![
        (text_file, "it is not an SQLite database"),
        (empty, "it has no tables"),
    ];
    match py(&newer, "UPDATE meta SET value='99' WHERE key='schema_version';") {
        Ok(st) => {
            assert!(st.success());
            assert!(py(&foreign, "CREATE TABLE t(x); INSERT INTO t VALUES(1);")
                .unwrap()
                .success());
            cases.push((newer, "schema version 99 is newer than this firmtime's"));
            cases.push((foreign, "not a firmtime watch database"));
        }
        Err(_) => firmtime_rt::testing::skip(
            "check_exits_3: python3 not installed: the newer and foreign SQLite files are not tried",
        ),
    }
    for (db, want) in cases {
        let db = db.display().to_string();
        let out = firmtime(&["watch", "check", "--db", &db]);
        assert_eq!(out.status.code(), Some(3), "{db}: {}", text_of(&out));
        let line = text(&out.stdout);
        assert!(line.contains(want) && line.contains(&db), "{db}: {line}");
        assert_eq!(line.lines().count(), 1, "{line}");
        let json = dir.0.join("check.json");
        let out = firmtime(&[
            "watch",
            "check",
            "--db",
            &db,
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(3), "{db}: {}", text_of(&out));
        let v = read_json(&json);
        assert_eq!(v["answer"], "not_watch_database", "{v}");
        assert!(v["period"].is_null(), "{v}");
    }
    // --help says what 3 means.
    let help = text(&firmtime(&["watch", "check", "--help"]).stdout);
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("3 the file is not a watch database"),
        "{help}"
    );
}

/// The last interval before exit never reached Prometheus: the endpoint
/// closed right after the final store. Now it stays open until a scrape
/// has read it (at most --metrics-linger): a client scraping until the
/// connection is refused last sees exactly what the database holds.
#[test]
fn the_last_interval_reaches_a_scraper_before_watch_exits() {
    if !root("the_last_interval_reaches_a_scraper_before_watch_exits") {
        return;
    }
    let dir = TestDir::new("watch-linger");
    let db = db_arg(&dir);
    let target = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(EXE)
        .args([
            "watch",
            "--period",
            "1ms",
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--duration",
            "2s",
            "--explain",
            "off",
            "--metrics-listen",
            &target,
            "--metrics-linger",
            "10s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let child = Killed(child);
    // A scraper every 2 s (slower than the run's intervals): the final
    // store falls between two of its scrapes.
    let scraper = {
        let target = target.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut last: Option<String> = None;
            let mut refused_after_serving = false;
            while t0.elapsed() < Duration::from_secs(30) {
                match http_get(&target, "/metrics") {
                    Some(body) => last = Some(body),
                    None if last.is_some() => {
                        refused_after_serving = true;
                        break;
                    }
                    None => {}
                }
                std::thread::sleep(if last.is_some() {
                    Duration::from_secs(2)
                } else {
                    Duration::from_millis(50)
                });
            }
            (last, refused_after_serving)
        })
    };
    let mut said = Vec::new();
    while let Ok(l) = lines.recv_timeout(Duration::from_secs(30)) {
        said.push(l);
    }
    let mut child = child;
    let st = child.0.wait().unwrap();
    assert!(st.success(), "{st:?}: {said:?}");
    let (last, refused) = scraper.join().unwrap();
    assert!(refused, "the endpoint never closed: {said:?}");
    let last = last.expect("never scraped");
    assert!(
        said.iter()
            .any(|l| l.starts_with("watch: the last interval was scraped ")),
        "{said:?}"
    );
    let r = rows(Path::new(&db));
    let stored: u64 = r.iter().map(|x| x.1).sum();
    let served = last
        .lines()
        .find_map(|l| l.strip_prefix("firmtime_watch_intervals_total{cpu=\"0\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("intervals served");
    assert_eq!(served as usize, r.len(), "{r:?}\n{last}");
    let wakeups = last
        .lines()
        .find_map(|l| l.strip_prefix("firmtime_watch_wakeups_total{cpu=\"0\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    let missed = last
        .lines()
        .find_map(|l| l.strip_prefix("firmtime_watch_missed_deadlines_total{cpu=\"0\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert_eq!((wakeups + missed) as u64, stored, "{last}");
    // Nobody scraping: it waits --metrics-linger and says so.
    let quiet = format!("127.0.0.1:{}", free_port());
    let out = firmtime(&[
        "watch",
        "--period",
        "1ms",
        "--db",
        &db,
        "--cpu",
        "0",
        "--interval",
        "1s",
        "--duration",
        "1s",
        "--explain",
        "off",
        "--metrics-listen",
        &quiet,
        "--metrics-linger",
        "500ms",
    ]);
    assert!(out.status.success(), "{}", text_of(&out));
    assert!(
        text(&out.stderr).contains(
            "watch: no scrape within --metrics-linger 500ms: Prometheus did not see the last interval"
        ),
        "{}",
        text_of(&out)
    );
}

/// Two watches started together on one database: one exited at once with
/// "database is locked" (10 of 10 tries) or both wrote interleaved runs.
/// Now one runs and stores its intervals; the other is refused at once,
/// naming the first one's pid — every try.
#[test]
fn two_watches_started_together_on_one_database_both_get_a_clear_outcome() {
    if !root("two_watches_started_together") {
        return;
    }
    for attempt in 0..3 {
        let dir = TestDir::new(&format!("watch-two-{attempt}"));
        let db = db_arg(&dir);
        let args = [
            "watch",
            "--period",
            "1ms",
            "--db",
            &db,
            "--cpu",
            "0",
            "--interval",
            "1s",
            "--duration",
            "2s",
            "--explain",
            "off",
        ];
        let spawn = || {
            Command::new(EXE)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let pids = [a.id(), b.id()];
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let ok: Vec<usize> = (0..2).filter(|&i| outs[i].status.success()).collect();
        assert_eq!(
            ok.len(),
            1,
            "exactly one runs: {:?} / {:?}",
            text_of(&outs[0]),
            text_of(&outs[1])
        );
        let (won, lost) = (ok[0], 1 - ok[0]);
        let refused = text(&outs[lost].stderr);
        assert_eq!(outs[lost].status.code(), Some(1), "{refused}");
        assert!(
            refused.contains(&format!(
                "--db {db}: another firmtime watch (pid {}) is writing this database",
                pids[won]
            )),
            "{refused}"
        );
        // Refused before it measured anything or touched the database.
        assert!(!refused.contains("watch: CPU 0"), "{refused}");
        assert!(
            text(&outs[won].stderr).contains("intervals stored (run 1)"),
            "{}",
            text_of(&outs[won])
        );
        let s = Store::open_existing(Path::new(&db)).unwrap();
        assert_eq!(s.runs().unwrap().len(), 1);
    }
}
