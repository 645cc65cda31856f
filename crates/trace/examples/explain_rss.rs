//! Resident memory of explaining sessions started one per interval, as
//! `watch` starts them (the next one before the last one finishes), with
//! every page locked (`mlockall`, as `watch` does): each session's drainer
//! storage fresh, or taken from a [`Pool`] (issue 29 item 5).
//!
//! `explain_rss fresh|pooled [INTERVALS] [MS]` (root: tracefs). Prints
//! `MODE intervals=N rss_first_mb=… rss_max_mb=… rss_last_mb=… cpu_ms=…`
//! (the process's CPU time over the run);
//! `scripts/lab-explain-rss.sh` runs both and prints them side by side.

use firmtime_trace::explain::{self, Config, Pool, Session, WokenBy};
use std::time::Duration;

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pooled = match args.get(1).map(String::as_str) {
        Some("pooled") => true,
        Some("fresh") => false,
        _ => {
            eprintln!("usage: explain_rss fresh|pooled [INTERVALS] [MS]");
            std::process::exit(2);
        }
    };
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
    let ms: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(200);
    if let Err(why) = explain::available() {
        eprintln!("explain_rss: {why}");
        std::process::exit(2);
    }
    // SAFETY: mlockall has no memory-safety preconditions.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        eprintln!("explain_rss: mlockall failed (continuing unlocked)");
    }
    // `watch`'s session (crates/watch/src/run/explaining.rs, session_config).
    let cfg = Config {
        max_events: 200_000,
        buffer_kb: 1024,
        woken_by: WokenBy::OwnTimer,
        drain_interval_max_ns: 1_000_000_000,
        ..Config::default()
    };
    let machine = explain::this_machine();
    let pool = Pool::new();
    let start = |pool: &Pool| {
        if pooled {
            Session::start_pooled(&cfg, "ft-rss*", pool)
        } else {
            Session::start(&cfg, "ft-rss*")
        }
    };
    let cpu0 = firmtime_rt::clock::read_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    let (mut first, mut max, mut last) = (0, 0, 0);
    let mut prev: Option<Session> = None;
    for i in 0..n {
        let s = match start(&pool) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("explain_rss: {}", e.message());
                std::process::exit(2);
            }
        };
        if let Some(p) = prev.take() {
            match p.finish() {
                Ok(rec) => drop(explain::explain(rec, &[], &machine)),
                Err(e) => eprintln!("explain_rss: interval {i}: {}", e.message()),
            }
        }
        prev = Some(s);
        std::thread::sleep(Duration::from_millis(ms));
        last = rss_kb();
        if i == 0 {
            first = last;
        }
        max = max.max(last);
    }
    drop(prev);
    let cpu_ms = (firmtime_rt::clock::read_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu0) / 1_000_000;
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!(
        "{} intervals={n} rss_first_mb={:.1} rss_max_mb={:.1} rss_last_mb={:.1} cpu_ms={cpu_ms}",
        if pooled { "pooled" } else { "fresh" },
        mb(first),
        mb(max),
        mb(last)
    );
}
