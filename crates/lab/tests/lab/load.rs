//! The load generators, run in-process: each does work, stops on its flag,
//! ends by itself at its duration, and leaves nothing behind.

use firmtime_lab::load::{run_generator, LoadReport, LoadSpec};
use firmtime_lab::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Runs `spec` with a long duration and sets the stop flag after 200 ms.
fn run_stopped(spec: &str) -> LoadReport {
    let spec: LoadSpec = spec.parse().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::SeqCst);
        });
        let r = run_generator(&spec, Duration::from_secs(600), &stop).unwrap();
        assert!(r.stopped, "{spec}: the stop flag ended the run");
        assert_eq!(r.spec, spec);
        assert_eq!(r.requested_ns, 600_000_000_000);
        r
    })
}

#[test]
fn cpu_hogs_do_arithmetic_until_stopped() {
    let r = run_stopped("cpu:2");
    assert_eq!(r.threads, 2);
    assert!(r.iterations > 0);
    assert_eq!(r.bytes_written + r.round_trips + r.pages_touched, 0);
}

#[test]
fn duty_workers_run_periods_and_sleep_between() {
    let r = run_stopped("duty:30%@5ms,workers=2");
    assert_eq!(r.threads, 2);
    assert!(r.periods > 0);
    assert!(r.iterations > 0);
    assert!(r.busy_ns > 0);
}

#[test]
fn duty_at_100_percent_never_sleeps_and_misses_nothing() {
    let r = run_stopped("duty:100%@1ms");
    assert!(r.periods > 0);
    assert_eq!(r.missed_periods, 0);
}

#[test]
fn disk_writes_whole_chunks_with_fsync_and_leaves_no_file() {
    let r = run_stopped("disk:256KiB,chunk=64KiB");
    assert_eq!(r.threads, 1);
    assert!(r.bytes_written > 0);
    assert_eq!(r.bytes_written % (64 * 1024), 0, "whole chunks only");
    assert_eq!(
        r.fsyncs,
        r.bytes_written / (64 * 1024),
        "one fsync per chunk"
    );
    // Four chunks per pass: a rewind before every fifth chunk.
    assert_eq!(r.rewinds, (r.fsyncs - 1) / 4);
    let dir = r.temp_dir.expect("disk reports its temp dir");
    assert!(dir.starts_with(std::env::temp_dir()));
    assert!(!dir.exists(), "{} must be gone", dir.display());
}

#[test]
fn disk_bounded_by_its_duration_ends_by_itself_and_cleans_up() {
    let spec: LoadSpec = "disk:128KiB,chunk=64KiB".parse().unwrap();
    let stop = AtomicBool::new(false);
    let r = run_generator(&spec, Duration::from_millis(100), &stop).unwrap();
    assert!(!r.stopped);
    assert!(r.elapsed_ns >= 100_000_000, "ran its whole duration");
    assert!(!r.temp_dir.unwrap().exists());
}

#[test]
fn memory_touches_every_page_of_the_working_set() {
    let bytes = 4 << 20;
    let r = run_stopped(&format!("memory:{bytes}B"));
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    assert_eq!(r.pages, bytes / page);
    assert!(
        r.pages_touched >= r.pages,
        "the first pass touches every page"
    );
}

#[test]
fn memory_larger_than_available_is_refused_with_the_reason() {
    let spec = LoadSpec::Memory { bytes: 1 << 40 };
    let e = run_generator(&spec, Duration::from_secs(1), &AtomicBool::new(false)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("MemAvailable"), "{e}");
}

#[test]
fn net_pairs_complete_round_trips_on_loopback() {
    let r = run_stopped("net:2");
    assert_eq!(r.threads, 4, "a pinger and a ponger per pair");
    assert!(r.round_trips > 0);
}

#[test]
fn stress_mixes_net_hashing_and_disk_and_cleans_up() {
    let r = run_stopped("stress");
    assert_eq!(r.threads, 4);
    assert!(r.round_trips > 0);
    assert!(r.bytes_hashed > 0);
    assert_ne!(r.hash, 0);
    assert!(r.bytes_written > 0);
    assert!(!r.temp_dir.unwrap().exists());
}

#[test]
fn an_already_set_stop_flag_ends_at_once() {
    let stop = AtomicBool::new(true);
    let r = run_generator(&LoadSpec::Cpu { hogs: 1 }, Duration::from_secs(600), &stop).unwrap();
    assert!(r.stopped);
    assert_eq!(r.iterations, 0);
}

#[test]
fn out_of_range_duration_is_refused_with_the_range() {
    let stop = AtomicBool::new(false);
    let e = run_generator(&LoadSpec::Net { pairs: 1 }, Duration::ZERO, &stop).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("valid is 1ms to 24h"), "{e}");
}

#[test]
fn report_json_round_trips() {
    let r = run_stopped("cpu:1");
    let text = serde_json::to_string(&r).unwrap();
    let back: LoadReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
}
