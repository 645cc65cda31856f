//! Talking to a real Prometheus (Debian's `prometheus`, `promtool`) and to
//! firmtime's metrics endpoints over loopback HTTP.

use super::{kill, text};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on `addr` with optional extra header lines; the status line
/// and the body.
pub fn http(addr: &str, path: &str, headers: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    let (head, body) = s.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The body of a `GET path` answered 200.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    let (status, body) = http(addr, path, "")?;
    status.contains(" 200 ").then_some(body)
}

/// URL-encodes a query.
pub fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of a PromQL instant query at Unix time `t` (one series expected).
pub fn prom_query(addr: &str, q: &str, t: f64) -> f64 {
    let body = http_get(
        addr,
        &format!("/api/v1/query?query={}&time={t:.3}", encode(q)),
    )
    .unwrap_or_else(|| panic!("query {q} failed"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    let r = v["data"]["result"].as_array().unwrap();
    assert_eq!(r.len(), 1, "{q}: one series expected: {body}");
    r[0]["value"][1].as_str().unwrap().parse().unwrap()
}

/// Whether Prometheus accepts and evaluates a PromQL query (any result).
pub fn prom_accepts(addr: &str, q: &str) -> Result<(), String> {
    let (status, body) = http(addr, &format!("/api/v1/query?query={}", encode(q)), "")
        .ok_or_else(|| format!("no answer to {q}"))?;
    if status.contains(" 200 ") && body.contains("\"status\":\"success\"") {
        Ok(())
    } else {
        Err(format!("{q}: {status} {body}"))
    }
}

/// A child ended with SIGTERM (then SIGKILL after 10 s) on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = kill(self.0.id(), libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `prometheus` and `promtool` are installed (skips with the reason if not).
pub fn prometheus_installed(test: &str) -> bool {
    let ok = ["prometheus", "promtool"]
        .iter()
        .all(|p| Command::new(p).arg("--version").output().is_ok());
    if !ok {
        firmtime_rt::testing::skip(format!(
            "{test}: prometheus or promtool not installed (Debian: prometheus)"
        ));
    }
    ok
}

/// Starts Prometheus on a free loopback port scraping `targets` (job name,
/// address) every 500 ms, with its database under `dir`; waits until it
/// has scraped each job once (`up` known). Returns it and its address.
pub fn start_prometheus(dir: &Path, targets: &[(&str, &str)]) -> (Killed, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cfg = String::from(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n",
    );
    for (job, target) in targets {
        cfg.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, cfg).unwrap();
    let prom = Killed(
        Command::new("prometheus")
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
    while http_get(&addr, "/-/ready").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus not ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let t0 = Instant::now();
    loop {
        let body =
            http_get(&addr, &format!("/api/v1/query?query={}", encode("up"))).unwrap_or_default();
        if targets.iter().all(|(job, _)| body.contains(job)) {
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

/// Pipes `exposition` through `promtool check metrics`; panics with its
/// complaints if it fails.
pub fn promtool_check_metrics(exposition: &str) {
    let mut pt = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        pt.stdin
            .take()
            .unwrap()
            .write_all(exposition.as_bytes())
            .unwrap();
    }
    let out = pt.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\non:\n{exposition}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The value of the sample `series` (name with labels, exactly as served) in
/// a scrape.
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let v = l.strip_prefix(series)?.strip_prefix(' ')?;
        v.split(' ').next()?.parse().ok()
    })
}
