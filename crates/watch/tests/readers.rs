//! Readers (`report`, `check`, `show`, `Store::open_existing`) against a
//! `watch` starting on the same file: a reader never calls a file a
//! starting watch is creating "not a watch database", waits for its tables
//! (or says, after a bounded wait, that a watch is starting on it), and an
//! immutable reader whose file a watch starts writing reads again beside
//! that watch. The watch here is this process (its lock and its `Store`),
//! so each step happens in a known order; `crates/cli/tests/watch_readers.rs`
//! races real `firmtime watch` processes.

use firmtime_watch::lock::WriterLock;
use firmtime_watch::store::{CpuInterval, MachineState, RunInfo, Store, STARTING_WRITER_WAIT};
use firmtime_watch::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let p = std::env::temp_dir().join(format!(
        "firmtime-watch-readers-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

/// Every file in `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
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

const MIN: i64 = 60_000_000_000;

fn row(start: i64) -> CpuInterval {
    CpuInterval {
        seq: 0,
        cpu: 0,
        start_unix_ns: start,
        end_unix_ns: start + MIN,
        period_ns: 10_000_000,
        count: 6000,
        missed: 0,
        min_ns: Some(3_000),
        max_ns: Some(9_000),
        mean_ns: Some(5_000.0),
        p99_ns: Some(8_000),
        p999_ns: Some(9_000),
        steal_ns: 0,
        partial: false,
        merged: 0,
        explained: false,
        histogram: vec![(5_000, 5990), (9_000, 10)],
        wakeups: Vec::new(),
        watch_cpu_ns: None,
        trace_lost_events: None,
    }
}

/// What `watch` does when it starts: its lock, then the file.
fn start_writer(db: &Path) -> (WriterLock, Store, i64) {
    let lock = WriterLock::acquire(db).unwrap();
    let mut s = Store::open(db).unwrap();
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "t".into(),
            command_line: "firmtime watch".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    (lock, s, run)
}

/// A watch has taken its lock and SQLite has made the file (empty) but
/// not yet its tables: the reader said "not a firmtime watch database (it
/// has no tables)" (`watch check` exit 3). Now it waits, and reads the
/// file once the watch has made it.
#[test]
fn a_reader_waits_for_the_tables_of_a_starting_watch_instead_of_calling_the_file_foreign() {
    let d = scratch("wait");
    let db = d.0.join("w.db");
    let lock = WriterLock::acquire(&db).unwrap();
    std::fs::File::create(&db).unwrap();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut s = Store::open(&db).unwrap();
            let run = s
                .begin_run(&RunInfo {
                    started_unix_ns: 0,
                    firmtime_version: "t".into(),
                    command_line: "firmtime watch".into(),
                    config: "{}".into(),
                    conditions: "[]".into(),
                })
                .unwrap();
            s.write_interval(run, 1, &MachineState::default(), &[row(0)])
                .unwrap();
            s
        })
    };
    let t0 = Instant::now();
    let r = Store::open_existing(&db).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "read before the tables were made"
    );
    assert_eq!(r.schema_version(), firmtime_watch::store::SCHEMA_VERSION);
    assert!(r.count("intervals").unwrap() <= 1);
    let w = writer.join().unwrap();
    assert_eq!(r.intervals_since(i64::MIN).unwrap().len(), 1);
    drop((r, w, lock));
}

/// A watch that holds its lock but never makes its tables (stopped in
/// between): the reader gives up after STARTING_WRITER_WAIT with an
/// `InUse` error naming the watch's pid and saying to try again — not
/// "not a watch database" — and leaves every file as it was.
#[test]
fn a_reader_gives_up_on_a_watch_that_does_not_finish_starting_with_a_clear_error() {
    let d = scratch("give-up");
    let db = d.0.join("w.db");
    let lock = WriterLock::acquire(&db).unwrap();
    std::fs::File::create(&db).unwrap();
    let before = snapshot(&d.0);
    let t0 = Instant::now();
    let e = Store::open_existing(&db).unwrap_err();
    assert!(t0.elapsed() >= STARTING_WRITER_WAIT);
    assert_eq!(e.kind(), ErrorKind::InUse, "{}", e.message());
    assert_eq!(
        e.message(),
        format!(
            "database {}: a firmtime watch (pid {}) is starting on it (creating its tables or \
             switching it to WAL): nothing was read and nothing changed; try again in a moment",
            db.display(),
            std::process::id()
        )
    );
    assert_eq!(snapshot(&d.0), before);
    drop(lock);
    // Without the watch, the same empty file is what it is.
    let e = Store::open_existing(&db).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotWatchDatabase, "{}", e.message());
    assert_eq!(snapshot(&d.0), before);
}

/// A reader opened a file no watch was on (so as immutable: it reads the
/// main file only, and assumes it never changes); then a watch started
/// on it and stored an interval. The reader went on reading the file as
/// it was when opened, blind to the watch, and a watch that checkpoints
/// (or shrinks the file to its size cap) under an immutable reader can
/// give it pages of two states. Now each read checks afterwards that no
/// watch came, and reads again beside it when one did: what it returns
/// is one state of the file, the watch's latest committed.
#[test]
fn an_immutable_reader_reads_again_beside_a_watch_that_started_during_its_reads() {
    let d = scratch("beside");
    let db = d.0.join("w.db");
    {
        let (lock, mut s, run) = start_writer(&db);
        s.write_interval(run, 1, &MachineState::default(), &[row(0)])
            .unwrap();
        drop((s, lock));
    }
    assert!(!d.0.join("w.db-wal").exists(), "a quiet file");
    let r = Store::open_existing(&db).unwrap();
    assert_eq!(r.intervals_since(i64::MIN).unwrap().len(), 1);
    let (lock, mut s, run) = start_writer(&db);
    s.write_interval(run, 2, &MachineState::default(), &[row(MIN)])
        .unwrap();
    let rows = r.intervals_since(i64::MIN).unwrap();
    assert_eq!(
        rows.iter()
            .map(|x| x.interval.start_unix_ns)
            .collect::<Vec<_>>(),
        vec![0, MIN]
    );
    assert_eq!(r.runs().unwrap().len(), 2);
    // The watch goes on; so does the reader, beside it.
    s.write_interval(run, 3, &MachineState::default(), &[row(2 * MIN)])
        .unwrap();
    assert_eq!(r.count("intervals").unwrap(), 3);
    drop((s, lock));
    assert_eq!(r.count("intervals").unwrap(), 3);
}
