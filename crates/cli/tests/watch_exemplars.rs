//! One click from a spike to its cause (issue 31 item 4), end to end: a
//! real Prometheus with exemplar storage scrapes `firmtime watch` on a CPU
//! where a SCHED_FIFO hog runs bursts; the exemplars it stored on the
//! latency histogram carry wake-up ids, and `firmtime watch show ID`
//! resolves each to a cause record that names the hog.
//!
//! Needs root (SCHED_FIFO, the explaining trace's tracefs) and Debian's
//! `prometheus`; skips with the reason otherwise.

mod common;

use common::prometheus::*;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The tests here burst on the same CPU: one at a time, so that one's
/// hog is not the other's spike.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts Prometheus with exemplar storage on a free loopback port,
/// scraping `target` every `every` (`500ms`), its storage under `dir`;
/// waits until it has scraped the job once. Returns it (killed by PID on
/// drop) and its address.
fn start_prometheus_with_exemplars(
    dir: &Path,
    job: &str,
    target: &str,
    every: &str,
) -> (Killed, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let cfg = format!(
        "global:\n  scrape_interval: {every}\n  scrape_timeout: 400ms\nscrape_configs:\n  \
         - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
    );
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, cfg).unwrap();
    let prom = Killed(
        Command::new("prometheus")
            .arg("--enable-feature=exemplar-storage")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    loop {
        let body =
            http_get(&addr, &format!("/api/v1/query?query={}", encode("up"))).unwrap_or_default();
        if body.contains(job) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus never scraped: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (prom, addr)
}

/// Runs `f` while a thread named `ft-hog`, pinned to `cpu` at SCHED_FIFO
/// 90, spins 100 ms every 500 ms (longer than the stalls a loaded VM
/// shows, so each burst makes the worst wake-ups); `tid` gets its thread id.
fn with_hog<T>(cpu: usize, tid: &AtomicI32, f: impl FnOnce() -> T) -> T {
    use firmtime_rt::clock::monotonic_ns;
    use firmtime_rt::sched::{self, Policy};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("ft-hog".into())
            .spawn_scoped(s, || {
                // SAFETY: gettid has no preconditions.
                tid.store(unsafe { libc::gettid() }, Ordering::SeqCst);
                sched::set_affinity(&[cpu]).expect("pin the hog");
                sched::set_current_thread(&Policy::Fifo { priority: 90 }).expect("SCHED_FIFO hog");
                while !stop.load(Ordering::Relaxed) {
                    let until = monotonic_ns() + 100_000_000;
                    while monotonic_ns() < until {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(Duration::from_millis(400));
                }
            })
            .expect("start the hog");
        // Stops the hog also when `f` panics (else the scope's join hangs).
        let _stop = firmtime_rt::testing::StopOnDrop(&stop);
        f()
    })
}

#[test]
fn a_prometheus_exemplar_resolves_to_the_wakeup_the_hog_made_late() {
    let test = "a_prometheus_exemplar_resolves_to_the_wakeup_the_hog_made_late";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        firmtime_rt::testing::skip(format!("{test}: needs root (SCHED_FIFO, tracefs)"));
        return;
    }
    if let Err(why) = firmtime_trace::explain::available() {
        firmtime_rt::testing::skip(format!("{test}: no explaining trace: {why}"));
        return;
    }
    if !prometheus_installed(test) {
        return;
    }
    let cpu = *firmtime_rt::sched::online_cpus().last().unwrap();
    let dir = TestDir::new("watch-exemplars");
    let db = dir.0.join("w.db").display().to_string();
    let target = format!("127.0.0.1:{}", free_port());
    let (prom, prom_addr) =
        start_prometheus_with_exemplars(&dir.0, "firmtime-watch", &target, "500ms");
    let start_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    let hog = AtomicI32::new(0);
    let stored = with_hog(cpu, &hog, || {
        let mut child = Command::new(EXE)
            .args(["watch", "--db", &db, "--cpu", &cpu.to_string()])
            .args(["--interval", "2s", "--explain", "on"])
            .args(["--metrics-listen", &target])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = stderr_lines(&mut child);
        let watch = Killed(child);
        let mut stored = Vec::new();
        while stored.len() < 4 {
            let l = lines
                .recv_timeout(Duration::from_secs(30))
                .expect("no interval stored");
            if l.starts_with("watch: interval ") {
                stored.push(l);
            }
        }
        // Two more scrapes after the last store.
        std::thread::sleep(Duration::from_millis(1200));
        drop(watch);
        stored
    });
    let end_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 1.0;
    let q = encode(&format!(
        "firmtime_watch_latency_seconds_bucket{{cpu=\"{cpu}\"}}"
    ));
    let body = http_get(
        &prom_addr,
        &format!("/api/v1/query_exemplars?query={q}&start={start_s:.3}&end={end_s:.3}"),
    )
    .expect("query_exemplars");
    drop(prom);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    // (wake-up id, value in s) of every exemplar Prometheus stored.
    let mut ex: Vec<(i64, f64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["exemplars"].as_array().unwrap().iter())
        .map(|e| {
            (
                e["labels"]["wakeup_id"].as_str().unwrap().parse().unwrap(),
                e["value"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    ex.sort_by_key(|e| e.0);
    ex.dedup_by_key(|e| e.0);
    assert!(
        ex.len() >= 2,
        "exemplars of {} stored intervals: {body}\n{stored:#?}",
        stored.len()
    );
    let hog_tid = hog.load(Ordering::SeqCst);
    let mut named = 0;
    for &(id, value) in &ex {
        let out = firmtime(&["watch", "show", &id.to_string(), "--db", &db, "--json"]);
        let rec: serde_json::Value = serde_json::from_str(&assert_ok(&out)).unwrap();
        // The exemplar is that wake-up: its latency, on the watched CPU.
        assert_eq!(rec["cpu"], cpu, "{rec:#}");
        let lat = rec["wakeup"]["latency_ns"].as_i64().unwrap();
        assert!(
            (value - lat as f64 / 1e9).abs() < 1e-9,
            "exemplar {value} s against the stored {lat} ns: {rec:#}"
        );
        // The hog made it late: by name or pid, in the cause or its parts.
        let text = rec.to_string();
        if text.contains("ft-hog") || text.contains(&format!("\"pid\":{hog_tid}")) {
            named += 1;
            let human = assert_ok(&firmtime(&["watch", "show", &id.to_string(), "--db", &db]));
            assert!(human.contains("ft-hog"), "{human}");
        }
    }
    eprintln!(
        "{} exemplars of {} intervals; {named} name the hog (tid {hog_tid})",
        ex.len(),
        stored.len()
    );
    // The hog's 100 ms bursts are each interval's worst wake-up; allow
    // one interval whose worst had another cause (a loaded VM stalls too).
    assert!(
        named + 1 >= ex.len() && named >= 1,
        "{named} of {} exemplars name the hog: {ex:?}\n{stored:#?}",
        ex.len()
    );
}

/// The target's last scrape as Prometheus reports it (`lastScrape`, an
/// RFC 3339 time), `None` before the first.
fn last_scrape(prom: &str) -> Option<String> {
    let body = http_get(prom, "/api/v1/targets")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let t = v["data"]["activeTargets"][0]["lastScrape"].as_str()?;
    (!t.starts_with("0001-")).then(|| t.to_string())
}

/// Waits until Prometheus has scraped again after `seen`; returns the new
/// `lastScrape`.
fn next_scrape(prom: &str, seen: Option<&str>, within: Duration) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(t) = last_scrape(prom).filter(|t| Some(t.as_str()) != seen) {
            return t;
        }
        assert!(t0.elapsed() < within, "no scrape after {seen:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A scrape interval (10 s) longer than `--store-every` (1 s): a 150 ms
/// burst of a SCHED_FIFO 90 thread on the watched CPU just after a
/// scrape makes one interval's worst wake-up (bucket +Inf); eight or so
/// quiet intervals follow before the next scrape. The exemplar was the
/// last interval's worst only, so that scrape carried a quiet interval's
/// and the spike's id never reached Prometheus. Now the +Inf bucket keeps
/// the spike's: Prometheus stores it, once, and `watch show` resolves it
/// to that wake-up.
#[test]
fn a_spike_between_two_scrapes_reaches_prometheus_as_an_exemplar() {
    let test = "a_spike_between_two_scrapes_reaches_prometheus_as_an_exemplar";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        firmtime_rt::testing::skip(format!("{test}: needs root (SCHED_FIFO)"));
        return;
    }
    if !prometheus_installed(test) {
        return;
    }
    let cpu = *firmtime_rt::sched::online_cpus().last().unwrap();
    let dir = TestDir::new("watch-exemplar-between");
    let db = dir.0.join("w.db").display().to_string();
    let target = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(EXE)
        .args(["watch", "--db", &db, "--cpu", &cpu.to_string()])
        .args(["--store-every", "1s", "--explain", "off"])
        .args(["--metrics-listen", &target])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let watch = Killed(child);
    let stored = |n: usize| {
        let mut k = 0;
        while k < n {
            let l = lines
                .recv_timeout(Duration::from_secs(30))
                .expect("no interval stored");
            if l.starts_with("watch: interval ") {
                k += 1;
            }
        }
    };
    stored(1);
    let (prom, prom_addr) =
        start_prometheus_with_exemplars(&dir.0, "firmtime-watch", &target, "10s");
    let before = next_scrape(&prom_addr, None, Duration::from_secs(30));
    // Just after a scrape: the burst, on the watched CPU, above watch's thread.
    let t_burst = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    std::thread::spawn(move || {
        use firmtime_rt::clock::monotonic_ns;
        use firmtime_rt::sched::{self, Policy};
        sched::set_affinity(&[cpu]).expect("pin the burst");
        sched::set_current_thread(&Policy::Fifo { priority: 90 }).expect("SCHED_FIFO burst");
        let until = monotonic_ns() + 150_000_000;
        while monotonic_ns() < until {
            std::hint::spin_loop();
        }
    })
    .join()
    .unwrap();
    let after = next_scrape(&prom_addr, Some(&before), Duration::from_secs(30));
    // Drain the interval lines stored meanwhile (the spike's and the quiet ones).
    while lines.try_recv().is_ok() {}
    drop(watch);
    let t_end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let q = encode(&format!(
        "firmtime_watch_latency_seconds_bucket{{cpu=\"{cpu}\"}}"
    ));
    let body = http_get(
        &prom_addr,
        &format!(
            "/api/v1/query_exemplars?query={q}&start={:.3}&end={:.3}",
            t_burst as f64 / 1e9 - 60.0,
            t_end + 1.0
        ),
    )
    .expect("query_exemplars");
    drop(prom);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    // (bucket, wake-up id, value in s, time in s) of every exemplar stored.
    let ex: Vec<(String, i64, f64, f64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            let le = s["seriesLabels"]["le"].as_str().unwrap_or("").to_string();
            s["exemplars"].as_array().unwrap().iter().map(move |e| {
                (
                    le.clone(),
                    e["labels"]["wakeup_id"].as_str().unwrap().parse().unwrap(),
                    e["value"].as_str().unwrap().parse().unwrap(),
                    e["timestamp"].as_f64().unwrap(),
                )
            })
        })
        .collect();
    // The spike's wake-up: at least 100 ms late, its deadline after the burst began.
    let spikes: Vec<_> = ex
        .iter()
        .filter(|e| e.2 >= 0.1 && e.3 >= t_burst as f64 / 1e9 - 0.1)
        .collect();
    assert_eq!(
        spikes.len(),
        1,
        "one exemplar of the burst, stored once (scrapes {before} and {after}): {ex:?}"
    );
    let (le, id, value, _) = spikes[0];
    assert_eq!(le, "+Inf", "{ex:?}");
    let out = firmtime(&["watch", "show", &id.to_string(), "--db", &db, "--json"]);
    let rec: serde_json::Value = serde_json::from_str(&assert_ok(&out)).unwrap();
    assert_eq!(rec["cpu"], cpu, "{rec:#}");
    let lat = rec["wakeup"]["latency_ns"].as_i64().unwrap();
    assert!(
        (value - lat as f64 / 1e9).abs() < 1e-9,
        "{value} s against {lat} ns"
    );
    // Quiet intervals followed it before the scrape that carried it.
    let s = firmtime_watch::store::Store::open_existing(Path::new(&db)).unwrap();
    let rows = s.intervals_since(0).unwrap();
    let spike_row = rows
        .iter()
        .position(|r| r.interval.wakeups.iter().any(|w| w.id == Some(*id)))
        .expect("the spike's row");
    assert!(
        rows.len() - spike_row >= 3,
        "{} intervals after the spike's",
        rows.len() - spike_row - 1
    );
    eprintln!(
        "{} exemplars stored; the burst's wake-up {id} ({value} s) on le=+Inf, {} intervals stored after its",
        ex.len(),
        rows.len() - spike_row - 1
    );
}
