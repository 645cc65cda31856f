//! `watch --housekeeping-cpu` (issue 31 item 1: "the housekeeping threads
//! placed explicitly"): while a real `firmtime watch` runs, every thread of
//! the process but the measuring ones is allowed on the housekeeping CPUs
//! only — the writer, the metrics endpoint, the explaining trace's
//! drainers started at each interval — and each measuring thread on its
//! own watched CPU only, so a watched CPU pays for its own wake-ups, as
//! each of cyclictest's does.

mod common;

use common::{assert_usage_error, is_root, stderr_lines, TestDir, EXE};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `(name, allowed CPUs)` of each thread of `pid` now.
fn threads(pid: u32) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return v;
    };
    for t in dir.flatten() {
        let p = t.path();
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(p.join("comm")),
            std::fs::read_to_string(p.join("status")),
        ) else {
            continue;
        };
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        v.push((comm.trim().to_string(), allowed));
    }
    v.sort();
    v
}

#[test]
fn housekeeping_threads_run_on_their_cpu_and_each_measuring_thread_on_its_own() {
    if !is_root() {
        firmtime_rt::testing::skip("needs root (SCHED_FIFO, mlockall)");
        return;
    }
    if firmtime_rt::sched::online_cpus().len() < 2 {
        firmtime_rt::testing::skip("needs 2 online CPUs (one watched, one for housekeeping)");
        return;
    }
    let d = TestDir::new("watch-housekeeping");
    let db = d.join("w.db");
    let mut child = Command::new(EXE)
        .args(["watch", "--db"])
        .arg(&db)
        .args(["--cpu", "0", "--housekeeping-cpu", "1", "--period", "1ms"])
        .args(["--store-every", "1s", "--duration", "6s"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let mut log = Vec::new();
    // Started: the conditions line of CPU 0 and the housekeeping notice.
    let end = Instant::now() + Duration::from_secs(20);
    while !log.iter().any(|l: &String| l.contains("housekeeping (")) {
        let l = lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("watch never said where housekeeping runs: {log:#?}"));
        log.push(l);
    }
    let notice = log.iter().find(|l| l.contains("housekeeping (")).unwrap();
    assert!(notice.contains("on CPU 1 (--housekeeping-cpu)"), "{notice}");
    // Look at the threads a few times over interval boundaries (each
    // interval starts a drainer of its own).
    let mut seen = Vec::new();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(400));
        seen.push(threads(child.id()));
    }
    let status = child.wait().unwrap();
    log.extend(lines.try_iter());
    assert!(status.success(), "{log:#?}");
    let mut measuring = 0;
    let mut drainers = 0;
    for snapshot in &seen {
        for (name, allowed) in snapshot {
            if name.starts_with("firmtime-watch") {
                measuring += 1;
                assert_eq!(allowed, "0", "the measuring thread: {snapshot:?}");
            } else {
                drainers += usize::from(name.starts_with("ft-explain"));
                assert_eq!(allowed, "1", "housekeeping thread {name}: {snapshot:?}");
            }
        }
    }
    assert_eq!(measuring, seen.len(), "one measuring thread in every look");
    eprintln!("{} looks, {drainers} drainer sightings", seen.len());
}

#[test]
fn a_housekeeping_cpu_that_is_not_online_is_a_usage_error_naming_the_flag() {
    assert_usage_error(
        &[
            "watch",
            "--db",
            "/nonexistent/w.db",
            "--housekeeping-cpu",
            "999",
        ],
        &["--housekeeping-cpu", "999", "not online", "valid are"],
    );
    assert_usage_error(
        &[
            "watch",
            "--db",
            "/nonexistent/w.db",
            "--housekeeping-cpu",
            "x",
        ],
        &["--housekeeping-cpu x", "valid: online CPUs"],
    );
}
