//! `net worker --metrics-listen` and `rack --metrics-listen`: what they
//! serve passes `promtool check metrics`, a real Prometheus scrapes a
//! worker under a `net bench` run and its answers agree with the worker's
//! own figures (`net stats --json`) and the bench's JSON, while the same
//! Prometheus scrapes a `watch` and agrees with its database; the token is
//! required when given; a rack serves its stages' counters while it runs.

mod common;

use common::prometheus::*;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A keyless worker on loopback (SCHED_OTHER) serving metrics on
/// `metrics`, with extra flags; killed on drop.
fn worker_with_metrics(metrics: &str, extra: &[&str]) -> NetWorker {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(EXE);
    cmd.args([
        "net",
        "worker",
        "--listen",
        &addr,
        "--priority",
        "other",
        "--metrics-listen",
        metrics,
    ])
    .args(extra);
    NetWorker(spawn_ready(&mut cmd), addr)
}

fn stats_json(worker: &NetWorker) -> serde_json::Value {
    let p = TmpPath::new("net-metrics-stats.json");
    let out = firmtime(&[
        "net",
        "stats",
        "--worker",
        &worker.1,
        "--json",
        p.to_str().unwrap(),
    ]);
    assert_ok(&out);
    take_json(&p)
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn prometheus_scrapes_a_worker_and_agrees_with_its_stats_and_the_bench() {
    if !prometheus_installed("prometheus_scrapes_a_worker") {
        return;
    }
    let dir = TestDir::new("net-metrics-prom");
    // Prometheus first, so that its first sample of each counter is 0.
    let target = format!("127.0.0.1:{}", free_port());
    // The same Prometheus scrapes a `watch` beside the worker (as a fleet's
    // would): it needs root for SCHED_FIFO.
    let watch_target = format!("127.0.0.1:{}", free_port());
    let with_watch = is_root();
    if !with_watch {
        firmtime_rt::testing::skip(
            "prometheus_scrapes_a_worker: the watch beside the worker needs root (SCHED_FIFO)",
        );
    }
    let mut targets = vec![("firmtime-net-worker", target.as_str())];
    if with_watch {
        targets.push(("firmtime-watch", watch_target.as_str()));
    }
    let (prom, prom_addr) = start_prometheus(&dir.0, &targets);
    let watch_db = dir.0.join("watch.db");
    let watch = with_watch.then(|| {
        let w = Killed(
            Command::new(EXE)
                .args(["watch", "--db"])
                .arg(&watch_db)
                .args([
                    "--period",
                    "1ms",
                    "--interval",
                    "1s",
                    "--cpu",
                    "0",
                    "--explain",
                    "off",
                    "--metrics-listen",
                    &watch_target,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let t0 = Instant::now();
        while http_get(&watch_target, "/metrics").is_none() {
            assert!(t0.elapsed() < Duration::from_secs(20), "watch never served");
            std::thread::sleep(Duration::from_millis(100));
        }
        w
    });
    let worker = worker_with_metrics(&target, &[]);
    let first = http_get(&target, "/metrics").expect("the worker serves /metrics");
    promtool_check_metrics(&first);
    assert_eq!(
        sample(&first, "firmtime_net_worker_periods_total"),
        Some(0.0)
    );
    assert_eq!(sample(&first, "firmtime_net_worker_sessions"), Some(0.0));
    // 256 frames at 48 kHz (5.3 ms), each block held a quarter period
    // (1.33 ms, sleeping): every worker time lies above 1 ms.
    let (_, _, bench) = net_bench(
        &worker,
        "net-metrics-bench.json",
        &[
            "--period-frames",
            "256",
            "--window",
            "2",
            "--work",
            "0.25",
            "--work-mode",
            "sleep",
            "--priority",
            "other",
            "--duration",
            "2s",
        ],
    );
    let during = http_get(&target, "/metrics").unwrap();
    promtool_check_metrics(&during);
    // Two scrapes after the session ended and the worker published.
    std::thread::sleep(Duration::from_millis(1500));
    let r = stats_json(&worker);
    let t = now_s() - 0.2;
    let q = |e: &str| prom_query(&prom_addr, e, t);
    let periods = q("firmtime_net_worker_periods_total");
    assert!(
        periods > 100.0,
        "{periods} periods in 2 s of 5.3 ms periods"
    );
    assert_eq!(periods as u64, r["periods_total"].as_u64().unwrap(), "{r}");
    // The session has ended: `net stats` counts only sessions served now.
    assert_eq!(r["periods"], 0, "{r}");
    assert_eq!(q("firmtime_net_worker_sessions"), 0.0);
    assert_eq!(q("firmtime_net_worker_sessions_opened_total"), 1.0);
    assert_eq!(
        q("firmtime_net_worker_late_periods_total") as u64,
        r["late_total"].as_u64().unwrap()
    );
    assert_eq!(
        q("sum(firmtime_net_worker_lost_periods_total)") as u64,
        r["lost_total"].as_u64().unwrap()
    );
    assert_eq!(
        q("sum(firmtime_net_worker_dropped_datagrams_total{reason!=\"socket_buffer_full\"})")
            as u64,
        r["dropped"].as_u64().unwrap()
    );
    let count = q("firmtime_net_worker_period_time_seconds_count");
    let sum = q("firmtime_net_worker_period_time_seconds_sum");
    assert_eq!(count as u64, r["timed_periods"].as_u64().unwrap());
    let own_sum = r["worker_time_sum_ns"].as_u64().unwrap() as f64 / 1e9;
    assert!((sum - own_sum).abs() < 1e-6, "{sum} vs {own_sum}");
    // Every built-in period was answered by the data thread, so timed.
    assert_eq!(count, periods);
    // The master had a result for each period it counted as delivered,
    // each processed by the worker (warm-up periods are not counted).
    let delivered = bench["workers"][0]["delivered"].as_u64().unwrap();
    assert!(periods as u64 >= delivered, "{periods} < {delivered}");
    // increase() over the run: the whole count (Prometheus extrapolates at
    // most half a scrape interval past the first and last samples).
    let inc = q("increase(firmtime_net_worker_periods_total[1h])");
    assert!(
        inc >= periods * 0.99 && inc <= periods * 1.5,
        "increase {inc} vs {periods}"
    );
    // The median worker time: above the 1.33 ms hold (so in a bucket from
    // 1 ms up), and the bucket it lies in starts below the master's median
    // round trip, of which the worker's time is a part.
    let p50 = q("histogram_quantile(0.5, firmtime_net_worker_period_time_seconds_bucket)");
    let rtt_p50 = bench["rtt_p50_ns"].as_u64().unwrap() as f64 / 1e9;
    let edges = firmtime_net::published::PERIOD_TIME_EDGES_NS;
    let k = edges
        .iter()
        .position(|&e| p50 <= e as f64 / 1e9)
        .unwrap_or(edges.len());
    let lo = if k == 0 {
        0.0
    } else {
        edges[k - 1] as f64 / 1e9
    };
    assert!(p50 >= 0.001, "median worker time {p50} s under the hold");
    assert!(
        lo <= rtt_p50,
        "median worker time {p50} s, round trip {rtt_p50} s"
    );
    let mean = sum / count;
    assert!(mean >= 0.00133, "mean worker time {mean} s under the hold");
    // Every query of the shipped fleet dashboard and net alert rules is
    // PromQL this Prometheus accepts ($worker and $rack as "any").
    let d: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(contrib("grafana/firmtime-fleet.json")).unwrap(),
    )
    .unwrap();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let e = t["expr"]
                .as_str()
                .unwrap()
                .replace("$worker", ".*")
                .replace("$rack", ".*");
            prom_accepts(&prom_addr, &e).unwrap();
        }
    }
    eprintln!(
        "prometheus: {periods} periods, increase {inc:.1}, worker time p50 {p50:.6} s mean {mean:.6} s; \
         bench rtt p50 {rtt_p50:.6} s, delivered {delivered}"
    );
    if let Some(w) = watch {
        // The watch's counters in the same Prometheus are sums over the
        // intervals it had stored: one prefix of its database's rows.
        let wakeups = q("firmtime_watch_wakeups_total") as u64;
        let missed = q("firmtime_watch_missed_deadlines_total") as u64;
        assert_eq!(q("count(up == 1)"), 2.0, "both targets up");
        drop(w); // SIGTERM: the watch stores its last interval and ends
        let db = firmtime_watch::store::Store::open_existing(&watch_db).unwrap();
        let rows = db.intervals_since(0).unwrap();
        let mut prefixes = vec![(0u64, 0u64)];
        for r in &rows {
            let (c, m) = *prefixes.last().unwrap();
            prefixes.push((c + r.interval.count, m + r.interval.missed));
        }
        assert!(wakeups > 0, "the watch's wake-ups reached Prometheus");
        assert!(
            prefixes.contains(&(wakeups, missed)),
            "Prometheus's {wakeups} wake-ups / {missed} missed are not a sum of stored intervals: {prefixes:?}"
        );
        eprintln!(
            "prometheus: watch {wakeups} wake-ups, {missed} missed = the first {} of {} stored intervals",
            prefixes.iter().position(|p| *p == (wakeups, missed)).unwrap(),
            rows.len()
        );
    }
    drop(worker);
    drop(prom);
}

fn contrib(p: &str) -> String {
    format!("{}/../../contrib/{p}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn shipped_net_alert_rules_pass_promtool_check_and_their_unit_tests() {
    if Command::new("promtool").arg("--version").output().is_err() {
        firmtime_rt::testing::skip("promtool not installed (Debian: prometheus)");
        return;
    }
    let out = Command::new("promtool")
        .args([
            "check",
            "rules",
            &contrib("prometheus/firmtime-net.rules.yml"),
        ])
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("SUCCESS: 3 rules found"), "{said}");
    let out = Command::new("promtool")
        .args([
            "test",
            "rules",
            &contrib("prometheus/firmtime-net.rules.test.yml"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_worker_metrics_token_is_required_when_given() {
    let dir = TestDir::new("net-metrics-token");
    let token = dir.0.join("token");
    std::fs::write(&token, "0123456789abcdef-token\n").unwrap();
    let target = format!("127.0.0.1:{}", free_port());
    let worker = worker_with_metrics(&target, &["--metrics-token", token.to_str().unwrap()]);
    let (status, _) = http(&target, "/metrics", "").unwrap();
    assert!(status.contains(" 401 "), "{status}");
    let (status, _) = http(
        &target,
        "/metrics",
        "Authorization: Bearer wrong-token-0123456\r\n",
    )
    .unwrap();
    assert!(status.contains(" 401 "), "{status}");
    let (status, body) = http(
        &target,
        "/metrics",
        "Authorization: Bearer 0123456789abcdef-token\r\n",
    )
    .unwrap();
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        body.contains("firmtime_net_worker_periods_total 0"),
        "{body}"
    );
    drop(worker);
}

/// Runs `firmtime ARGS` (stdin null) and returns its output; fails the test
/// if it has not ended within 20 s (a FIFO token or key hung start-up).
fn firmtime_within(args: &[&str]) -> std::process::Output {
    let mut child = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{args:?} hung: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A file in `dir` holding `bytes`, with permission bits `mode`.
fn secret_file(dir: &TestDir, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.0.join(name);
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// Regression (issue 28 item 6): `--metrics-token /dev/zero` ran out of
/// memory, a FIFO hung start-up, a 2.8 MB token line and a 0666 token file
/// were accepted, and `--key` files others may write (0666, 0662) too. Each
/// is now refused at once naming the flag and the file, a token or key
/// others may read is said on stderr, and a 0600 one starts silently.
#[test]
fn token_and_key_files_follow_the_secret_rule() {
    let dir = TestDir::new("net-metrics-secret");
    let fifo = dir.0.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut big = vec![b'a'; 2_800_000];
    big.push(b'\n');
    let big = secret_file(&dir, "big", &big, 0o600);
    let open = secret_file(&dir, "open", b"0123456789abcdef-token\n", 0o666);
    let group = secret_file(&dir, "group", b"0123456789abcdef-token\n", 0o662);
    let worker = |extra: &[&str]| {
        let mut a = vec![
            "net",
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--priority",
            "other",
            "--metrics-listen",
            "127.0.0.1:0",
        ];
        a.extend_from_slice(extra);
        firmtime_within(&a)
    };
    let bad: [(&str, &str); 5] = [
        ("/dev/zero", "a character device, not a regular file"),
        (fifo.to_str().unwrap(), "a FIFO, not a regular file"),
        (
            big.to_str().unwrap(),
            "2800001 bytes, more than the 4096 a --metrics-token may have",
        ),
        (
            open.to_str().unwrap(),
            "its group and every user may write it (mode 0666)",
        ),
        (
            group.to_str().unwrap(),
            "its group and every user may write it (mode 0662)",
        ),
    ];
    for (file, why) in bad {
        let out = worker(&["--metrics-token", file]);
        assert_exit(&out, 2, &[&format!("--metrics-token {file}: {why}")]);
    }
    let key_open = secret_file(&dir, "key-open", &[7u8; 32], 0o666);
    let key_group = secret_file(&dir, "key-group", &[7u8; 32], 0o662);
    for (file, why) in [
        ("/dev/zero", "not a regular file"),
        (fifo.to_str().unwrap(), "not a regular file"),
        (key_open.to_str().unwrap(), "may write it (mode 0666)"),
        (key_group.to_str().unwrap(), "may write it (mode 0662)"),
    ] {
        let out = firmtime_within(&[
            "net",
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--priority",
            "other",
            "--key",
            file,
        ]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{file}: {err}");
        assert!(
            err.contains(&format!("key file {file}: ")) && err.contains(why),
            "{err}"
        );
    }
    // Readable by others: accepted, and said before the worker is ready.
    let token = secret_file(&dir, "token644", b"0123456789abcdef-token\n", 0o644);
    let key = secret_file(&dir, "key644", &[7u8; 32], 0o644);
    let lines = ready_lines(&[
        "--metrics-token",
        token.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    for (flag, p) in [("--metrics-token", &token), ("key file", &key)] {
        let want = format!(
            "{flag} {} is readable by its group and every user (mode 0644)",
            p.display()
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("firmtime: warning: ") && l.contains(&want)),
            "{want} not in {lines:?}"
        );
    }
    // 0600: no warning.
    let token = secret_file(&dir, "token600", b"0123456789abcdef-token\n", 0o600);
    let key = secret_file(&dir, "key600", &[7u8; 32], 0o600);
    let lines = ready_lines(&[
        "--metrics-token",
        token.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(!lines.iter().any(|l| l.contains("warning")), "{lines:?}");
}

/// Starts a worker on loopback with metrics and `extra`, returns its
/// stderr lines up to its `ready` line, and kills it.
fn ready_lines(extra: &[&str]) -> Vec<String> {
    use std::io::BufRead;
    let mut child = Command::new(EXE)
        .args([
            "net",
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--priority",
            "other",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.wait();
            panic!("the worker ended before it was ready: {lines:?}");
        }
        if line.starts_with("ready") {
            break;
        }
        lines.push(line.trim_end().to_string());
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn bad_metrics_flags_are_usage_errors_naming_the_flag() {
    let dir = TestDir::new("net-metrics-flags");
    let short = dir.0.join("short");
    std::fs::write(&short, "abc\n").unwrap();
    let short = short.to_str().unwrap();
    for cmd in [
        &["net", "worker", "--listen", "127.0.0.1:0"][..],
        &["rack", "/nonexistent.toml"][..],
    ] {
        let mut a = cmd.to_vec();
        a.extend(["--metrics-token", "/tmp/x"]);
        let out = firmtime(&a);
        assert_exit(&out, 2, &["--metrics-listen"]);
        let mut a = cmd.to_vec();
        a.extend(["--metrics-listen", "nowhere"]);
        let out = firmtime(&a);
        assert_exit(&out, 2, &["--metrics-listen"]);
    }
    let out = firmtime(&[
        "net",
        "worker",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--metrics-token",
        short,
    ]);
    assert_exit(&out, 2, &["--metrics-token", "at least 16 printable ASCII"]);
    // A port already taken: the worker says which flag and address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = firmtime(&[
        "net",
        "worker",
        "--listen",
        "127.0.0.1:0",
        "--priority",
        "other",
        "--metrics-listen",
        &addr,
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("--metrics-listen {addr}: cannot listen")),
        "{err}"
    );
}

/// A rack with a local stage and a remote one on a worker that also serves
/// metrics: while it runs, both endpoints pass promtool; the worker has the
/// rack's session; after the worker is killed the rack counts late blocks
/// for the remote stage only, and its final JSON holds at least what was
/// scraped.
#[test]
fn a_rack_serves_its_stages_counters_while_it_runs() {
    if !std::path::Path::new("/usr/lib/ladspa/amp.so").exists()
        || Command::new("jackd").arg("--version").output().is_err()
    {
        firmtime_rt::testing::skip("a_rack_serves: needs ladspa-sdk and jackd2");
        return;
    }
    if !prometheus_installed("a_rack_serves") {
        return;
    }
    let dir = TestDir::new("rack-metrics");
    // A real Prometheus scrapes the rack from before it starts.
    let rack_metrics = format!("127.0.0.1:{}", free_port());
    let (prom, prom_addr) = start_prometheus(&dir.0, &[("firmtime-rack", &rack_metrics)]);
    let worker_metrics = format!("127.0.0.1:{}", free_port());
    let worker = worker_with_metrics(&worker_metrics, &[]);
    let file = dir.0.join("rack.toml");
    std::fs::write(
        &file,
        format!(
            "[[stage]]\nname = \"g\"\nplugin = \"amp:amp_mono\"\ncontrols = {{ Gain = 0.5 }}\n\n\
             [[stage]]\nname = \"far\"\nwork = {{ fraction = 0.1 }}\nremote = {{ worker = \"{}\", window = 2 }}\n",
            worker.1
        ),
    )
    .unwrap();
    let json = dir.0.join("rack.json");
    let mut child = Command::new(EXE)
        .args([
            "rack",
            file.to_str().unwrap(),
            "--jack-dummy",
            "--period-frames",
            "512",
            "--duration",
            "6s",
            "--status-every",
            "0s",
            "--json",
            json.to_str().unwrap(),
            "--metrics-listen",
            &rack_metrics,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let rack = Killed(child);
    let t0 = Instant::now();
    loop {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("rack did not start serving");
        if l == format!("firmtime rack: serving OpenMetrics on http://{rack_metrics}/metrics") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{l}");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let a = http_get(&rack_metrics, "/metrics").expect("rack serves /metrics");
    promtool_check_metrics(&a);
    let w = http_get(&worker_metrics, "/metrics").unwrap();
    promtool_check_metrics(&w);
    assert_eq!(sample(&w, "firmtime_net_worker_sessions"), Some(1.0), "{w}");
    assert!(
        sample(&w, "firmtime_net_worker_periods_total").unwrap() > 0.0,
        "{w}"
    );
    let cycles_a = sample(&a, "firmtime_rack_cycles_total").unwrap();
    assert!(cycles_a > 0.0, "{a}");
    assert_eq!(
        sample(&a, "firmtime_rack_stage_runs_total{stage=\"g\"}"),
        Some(cycles_a),
        "{a}"
    );
    assert!(
        sample(&a, "firmtime_rack_late_blocks_total{stage=\"far\"}").is_some(),
        "{a}"
    );
    assert!(
        !a.contains("firmtime_rack_late_blocks_total{stage=\"g\"}"),
        "{a}"
    );
    // The worker goes away: the remote stage's blocks are late from now on.
    drop(worker);
    std::thread::sleep(Duration::from_millis(1500));
    let b = http_get(&rack_metrics, "/metrics").unwrap();
    promtool_check_metrics(&b);
    let late_b = sample(&b, "firmtime_rack_late_blocks_total{stage=\"far\"}").unwrap();
    assert!(late_b > 0.0, "{b}");
    assert!(sample(&b, "firmtime_rack_cycles_total").unwrap() > cycles_a);
    // Two scrapes later, Prometheus has at least what we read directly.
    std::thread::sleep(Duration::from_millis(1200));
    let t = now_s() - 0.1;
    let prom_late = prom_query(
        &prom_addr,
        "firmtime_rack_late_blocks_total{stage=\"far\"}",
        t,
    );
    let prom_cycles = prom_query(&prom_addr, "firmtime_rack_cycles_total", t);
    assert!(prom_late >= late_b, "prometheus {prom_late} < {late_b}");
    // FirmtimeRackLateBlocks's expression sees the late stage, and only it.
    let fired = http_get(
        &prom_addr,
        &format!(
            "/api/v1/query?query={}&time={t:.3}",
            encode("increase(firmtime_rack_late_blocks_total[5m]) > 0")
        ),
    )
    .unwrap();
    assert!(fired.contains("\"stage\":\"far\""), "{fired}");
    assert!(!fired.contains("\"stage\":\"g\""), "{fired}");
    // Let it end on its own (--duration) and write its JSON.
    let mut rack = rack;
    let t0 = Instant::now();
    while rack.0.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "rack did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = read_json(&json);
    let late_end = v["stats"]["stages"][1]["late"].as_u64().unwrap() as f64;
    let cycles_end = v["stats"]["cycles"].as_u64().unwrap() as f64;
    assert!(late_end >= late_b, "{late_end} < {late_b}");
    assert!(cycles_end >= sample(&b, "firmtime_rack_cycles_total").unwrap());
    let xruns_b = sample(&b, "firmtime_rack_xruns_total").unwrap();
    assert!(v["xruns"].as_u64().unwrap() as f64 >= xruns_b, "{v}");
    // What Prometheus stored lies between our scrape and the rack's end.
    assert!(prom_late <= late_end, "prometheus {prom_late} > {late_end}");
    assert!(prom_cycles <= cycles_end && prom_cycles > cycles_a);
    drop(prom);
}
