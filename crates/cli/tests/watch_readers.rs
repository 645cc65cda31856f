//! `watch check` and `watch report` racing real `firmtime watch` processes
//! that start on their database — a new file (the watch creates it, makes
//! its tables, switches it to WAL) and an existing one (a restart: the
//! readers had been reading it as immutable). Every reader gets an answer
//! about the database as one of its states, or "a watch is starting on
//! it: try again" (check exit 4); never "not a watch database", never a
//! database error. Runs the real binary with SCHED_FIFO threads (root) on
//! CPU 0.

mod common;

use common::*;
use firmtime_watch::store::Store;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One reader's run: which command, its exit code, stdout, stderr.
type Seen = (&'static str, Option<i32>, String, String);

/// Runs `watch check` (and, every third time, `watch report`) on `db`
/// until `stop`, as fast as they start.
fn read_until(db: String, out: std::path::PathBuf, stop: Arc<AtomicBool>) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut k = 0u32;
    while !stop.load(Ordering::SeqCst) {
        k += 1;
        let (what, o) = if k % 3 == 0 {
            let o = Command::new(EXE)
                .args(["watch", "report", "--db", &db, "--since", "1h", "--out"])
                .arg(&out)
                .output()
                .unwrap();
            ("report", o)
        } else {
            let o = Command::new(EXE)
                .args([
                    "watch",
                    "check",
                    "--db",
                    &db,
                    "--since",
                    "1h",
                    "--max-latency",
                    "10s",
                    "--max-missed",
                    "1000000",
                ])
                .output()
                .unwrap();
            ("check", o)
        };
        seen.push((what, o.status.code(), text(&o.stdout), text(&o.stderr)));
    }
    seen
}

#[test]
fn readers_racing_a_starting_watch_get_a_state_of_the_database_or_try_again() {
    if !is_root() {
        firmtime_rt::testing::skip("watch readers race: needs root (SCHED_FIFO, mlockall)");
        return;
    }
    let dir = TestDir::new("watch-readers-race");
    let mut all: Vec<Seen> = Vec::new();
    // Three new files, each then restarted once (an existing database).
    for file in 0..3 {
        let db = dir.0.join(format!("w{file}.db")).display().to_string();
        for start in 0..2 {
            let stop = Arc::new(AtomicBool::new(false));
            let readers: Vec<_> = (0..3)
                .map(|r| {
                    let (db, stop) = (db.clone(), Arc::clone(&stop));
                    let out = dir.0.join(format!("report-{file}-{start}-{r}"));
                    std::thread::spawn(move || read_until(db, out, stop))
                })
                .collect();
            // Let the readers get going on the file as it is.
            std::thread::sleep(std::time::Duration::from_millis(150));
            let w = Command::new(EXE)
                .args([
                    "watch",
                    "--period",
                    "1ms",
                    "--db",
                    &db,
                    "--cpu",
                    "0",
                    "--store-every",
                    "1s",
                    "--duration",
                    "1500ms",
                    "--explain",
                    "off",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            stop.store(true, Ordering::SeqCst);
            for r in readers {
                all.extend(r.join().unwrap());
            }
            let werr = text(&w.stderr);
            assert!(w.status.success(), "watch {file}/{start}: {werr}");
            assert!(
                werr.contains(&format!("intervals stored (run {})", start + 1)),
                "{werr}"
            );
        }
        let s = Store::open_existing(Path::new(&db)).unwrap();
        s.integrity_check().unwrap();
        assert_eq!(s.runs().unwrap().len(), 2);
    }
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for (what, code, out, err) in &all {
        let first = out.lines().next().unwrap_or("");
        let kind = match (*what, *code) {
            ("check", Some(0)) if first.starts_with("fine: ") => "check fine",
            ("check", Some(2)) if first.starts_with("no data: ") => "check no data",
            ("check", Some(4)) if first.contains("is starting on it") => "check try again",
            ("report", Some(0)) if out.contains("Report: ") => "report written",
            ("report", Some(1))
                if err.contains("does not exist (`firmtime watch --db PATH` writes one)") =>
            {
                "report before the file"
            }
            ("report", Some(1)) if err.contains("is starting on it") => "report try again",
            _ => panic!("{what} gave exit {code:?}:\nstdout: {out}\nstderr: {err}"),
        };
        *counts.entry(kind.to_string()).or_default() += 1;
        // A database error, or a file taken for a foreign one, is never an answer.
        assert!(
            !out.contains("not a firmtime watch database")
                && !err.contains("not a firmtime watch database")
                && !err.contains("malformed")
                && !err.contains("database is locked"),
            "{what}: {out}{err}"
        );
    }
    eprintln!("readers' outcomes over 6 watch starts: {counts:?}");
    assert!(
        counts.get("check fine").copied().unwrap_or(0) > 0
            && counts.get("check no data").copied().unwrap_or(0) > 0,
        "the readers saw both sides of the starts: {counts:?}"
    );
}

/// A watch holds its lock and SQLite has made its (empty) file, but it
/// goes no further (stopped there): `watch check` said exit 3, "not a
/// firmtime watch database (it has no tables)". Now it waits 3 s, then
/// exits 4 naming the watch's pid, "try again"; `--json` says
/// `"answer": "starting"`; the files are left as they were. Without the
/// watch, the same empty file is not a watch database (exit 3).
#[test]
fn check_exits_4_while_a_watch_starting_on_the_file_has_not_made_it() {
    let dir = TestDir::new("watch-check-starting");
    let db = dir.0.join("w.db");
    let lock = firmtime_watch::lock::WriterLock::acquire(&db).unwrap();
    std::fs::File::create(&db).unwrap();
    let dbs = db.display().to_string();
    let json = dir.0.join("check.json");
    let listing = || {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .filter(|(n, _)| n != "check.json")
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let t0 = std::time::Instant::now();
    let out = firmtime(&[
        "watch",
        "check",
        "--db",
        &dbs,
        "--json",
        &json.display().to_string(),
    ]);
    assert!(t0.elapsed() >= firmtime_watch::store::STARTING_WRITER_WAIT);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "database {dbs}: a firmtime watch (pid {}) is starting on it (creating its tables or \
             switching it to WAL): nothing was read and nothing changed; try again in a moment\n",
            std::process::id()
        )
    );
    assert_eq!(read_json(&json)["answer"], "starting");
    assert_eq!(listing(), before);
    drop(lock);
    let out = firmtime(&["watch", "check", "--db", &dbs]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert_eq!(listing(), before);
}
