//! The database: one SQLite file (WAL mode, `synchronous=FULL`), one
//! transaction per interval, so a `kill -9` or a power cut loses at most
//! the interval being measured. The schema is documented in docs/WATCH.md
//! and versioned in `meta`.
//!
//! Nothing here runs in the RT loops: the writer thread calls it between
//! intervals.

use crate::error::{Error, ErrorKind, Result};
use crate::hist::Sparse;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The schema version this build writes (`meta.schema_version`).
pub const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY,
  started_unix_ns INTEGER NOT NULL,
  ended_unix_ns INTEGER,
  end_reason TEXT,
  firmtime_version TEXT NOT NULL,
  command_line TEXT NOT NULL,
  config TEXT NOT NULL,
  conditions TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS states(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL,
  seen_unix_ns INTEGER NOT NULL,
  kernel_release TEXT NOT NULL,
  kernel_cmdline TEXT NOT NULL,
  governors TEXT NOT NULL,
  preempt_model TEXT NOT NULL,
  clocksource TEXT NOT NULL,
  virtualization TEXT NOT NULL,
  tuned_profile TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS intervals(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  cpu INTEGER NOT NULL,
  start_unix_ns INTEGER NOT NULL,
  end_unix_ns INTEGER NOT NULL,
  period_ns INTEGER NOT NULL,
  count INTEGER NOT NULL,
  missed INTEGER NOT NULL,
  min_ns INTEGER,
  max_ns INTEGER,
  mean_ns REAL,
  p99_ns INTEGER,
  p999_ns INTEGER,
  steal_ns INTEGER NOT NULL,
  partial INTEGER NOT NULL,
  merged INTEGER NOT NULL,
  explained INTEGER NOT NULL,
  state_id INTEGER NOT NULL,
  histogram TEXT NOT NULL,
  watch_cpu_ns INTEGER
);
CREATE INDEX IF NOT EXISTS intervals_by_end ON intervals(end_unix_ns);
CREATE TABLE IF NOT EXISTS wakeups(
  interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
  deadline_unix_ns INTEGER NOT NULL,
  latency_ns INTEGER NOT NULL,
  missed INTEGER NOT NULL,
  category TEXT,
  name TEXT,
  cause_ns INTEGER
);
CREATE INDEX IF NOT EXISTS wakeups_by_interval ON wakeups(interval_id);
";

/// A `states` row selected as `key, kernel_release, kernel_cmdline,
/// governors, preempt_model, clocksource, virtualization, tuned_profile`.
fn keyed_state(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, MachineState)> {
    Ok((
        r.get(0)?,
        MachineState {
            kernel_release: r.get(1)?,
            kernel_cmdline: r.get(2)?,
            governors: r.get(3)?,
            preempt_model: r.get(4)?,
            clocksource: r.get(5)?,
            virtualization: r.get(6)?,
            tuned_profile: r.get(7)?,
        },
    ))
}

/// The machine's state; a row is stored whenever it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MachineState {
    /// `uname -r`.
    pub kernel_release: String,
    /// `/proc/cmdline`.
    pub kernel_cmdline: String,
    /// The CPU frequency governors in use (`none` without cpufreq), comma-separated.
    pub governors: String,
    /// The kernel's preemption model.
    pub preempt_model: String,
    /// The current clocksource.
    pub clocksource: String,
    /// `none` on bare metal, else the hypervisor.
    pub virtualization: String,
    /// tuned's active profile (`none` without tuned).
    pub tuned_profile: String,
}

/// One worst wake-up, with its cause when the explaining trace ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wakeup {
    /// Its deadline, Unix ns.
    pub deadline_unix_ns: i64,
    /// How late, ns.
    pub latency_ns: i64,
    /// Deadlines passed while late.
    pub missed: u64,
    /// Cause category (`vm`, `irq`, `softirq`, `task`, …; `None` without the trace).
    pub category: Option<String>,
    /// Cause name (task comm, interrupt, softirq).
    pub name: Option<String>,
    /// Time charged to the cause, ns.
    pub cause_ns: Option<u64>,
}

/// One CPU's interval, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuInterval {
    /// Interval number in its run.
    pub seq: u64,
    /// The CPU.
    pub cpu: usize,
    /// First deadline of the interval, Unix ns.
    pub start_unix_ns: i64,
    /// End of the interval (last deadline + period), Unix ns.
    pub end_unix_ns: i64,
    /// Period of the wake-ups, ns.
    pub period_ns: u64,
    /// Wake-ups measured.
    pub count: u64,
    /// Deadlines missed.
    pub missed: u64,
    /// Smallest latency, ns.
    pub min_ns: Option<i64>,
    /// Largest latency, ns.
    pub max_ns: Option<i64>,
    /// Mean latency, ns.
    pub mean_ns: Option<f64>,
    /// p99 (nearest rank, bucket edge), ns.
    pub p99_ns: Option<i64>,
    /// p99.9 (nearest rank, bucket edge), ns.
    pub p999_ns: Option<i64>,
    /// Steal time of the CPU during the interval, ns.
    pub steal_ns: u64,
    /// The run stopped inside this interval.
    pub partial: bool,
    /// Boundaries it spans besides its own (the writer was late).
    pub merged: u64,
    /// Whether the explaining trace ran for this interval.
    pub explained: bool,
    /// Non-empty histogram buckets `(upper edge ns, count)`.
    pub histogram: Sparse,
    /// The worst wake-ups, latest first.
    pub wakeups: Vec<Wakeup>,
    /// `watch`'s own CPU time charged to this CPU during the interval: its
    /// measuring thread's plus an equal share of the rest of the process
    /// (writer, explaining trace, metrics), ns. `None` in rows stored
    /// before schema version 2.
    pub watch_cpu_ns: Option<u64>,
}

/// What a run was: stored once when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Unix ns.
    pub started_unix_ns: i64,
    /// firmtime's version.
    pub firmtime_version: String,
    /// The command line.
    pub command_line: String,
    /// The configuration, JSON.
    pub config: String,
    /// The RT conditions obtained per thread, JSON.
    pub conditions: String,
}

/// An interval read back (with its row id and run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredInterval {
    /// Row id.
    pub id: i64,
    /// The run.
    pub run_id: i64,
    /// The interval.
    #[serde(flatten)]
    pub interval: CpuInterval,
}

/// A run as listed by [`Store::runs`]: `(id, started Unix ns, ended Unix
/// ns, end reason)`.
pub type RunRow = (i64, i64, Option<i64>, Option<String>);

/// The database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    /// The file, named in every error.
    path: PathBuf,
}

fn db_err(path: &Path, e: rusqlite::Error) -> Error {
    Error::new(
        ErrorKind::Database,
        format!("database {}: {e}", path.display()),
    )
}

impl Store {
    /// Opens (creating if needed) the database at `path`: WAL,
    /// `synchronous=FULL`, the schema.
    ///
    /// # Errors
    /// [`ErrorKind::Database`] naming the file, also for a database written
    /// by a newer schema.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|e| db_err(path, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| db_err(path, e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| db_err(path, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::new(
                ErrorKind::Database,
                format!(
                    "database {}: cannot use WAL mode (got {mode})",
                    path.display()
                ),
            ));
        }
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
            .map_err(|e| db_err(path, e))?;
        conn.execute_batch(SCHEMA).map_err(|e| db_err(path, e))?;
        let v: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key='schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(path, e))?;
        match v.and_then(|v| v.parse::<i64>().ok()) {
            None => {
                conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?1)",
                    [SCHEMA_VERSION.to_string()],
                )
                .map_err(|e| db_err(path, e))?;
            }
            Some(v) if v > SCHEMA_VERSION => {
                return Err(Error::new(
                    ErrorKind::Database,
                    format!(
                        "database {}: schema version {v} is newer than this firmtime's ({SCHEMA_VERSION}); use a newer firmtime",
                        path.display()
                    ),
                ))
            }
            Some(1) => {
                // Version 2 added intervals.watch_cpu_ns (NULL in older rows).
                conn.execute_batch(
                    "BEGIN;
                     ALTER TABLE intervals ADD COLUMN watch_cpu_ns INTEGER;
                     UPDATE meta SET value='2' WHERE key='schema_version';
                     COMMIT;",
                )
                .map_err(|e| db_err(path, e))?;
            }
            Some(_) => {}
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The file this store is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `r` with a database error naming the file: `database PATH: database
    /// is locked` rather than `database: database is locked`.
    fn named<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| {
            if e.kind() != ErrorKind::Database {
                return e;
            }
            let m = e.message();
            let m = m.strip_prefix("database: ").unwrap_or(m);
            Error::new(
                ErrorKind::Database,
                format!("database {}: {m}", self.path.display()),
            )
        })
    }

    /// Opens an existing database for reading (`report`, `check`).
    ///
    /// # Errors
    /// [`ErrorKind::Database`] when the file does not exist or is not a
    /// firmtime watch database.
    pub fn open_existing(path: &Path) -> Result<Store> {
        if !path.is_file() {
            return Err(Error::new(
                ErrorKind::Database,
                format!(
                    "database {} does not exist (`firmtime watch --db PATH` writes one)",
                    path.display()
                ),
            ));
        }
        Store::open(path)
    }

    /// Records a run's start; returns its id.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn begin_run(&mut self, r: &RunInfo) -> Result<i64> {
        let r = (|| -> Result<i64> {
            self.conn.execute(
                "INSERT INTO runs(started_unix_ns, firmtime_version, command_line, config, conditions)
                 VALUES(?1, ?2, ?3, ?4, ?5)",
                params![
                    r.started_unix_ns,
                    r.firmtime_version,
                    r.command_line,
                    r.config,
                    r.conditions
                ],
            )?;
            Ok(self.conn.last_insert_rowid())
        })();
        self.named(r)
    }

    /// Records a run's end and why.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn end_run(&mut self, run_id: i64, ended_unix_ns: i64, reason: &str) -> Result<()> {
        let r = (|| -> Result<()> {
            self.conn.execute(
                "UPDATE runs SET ended_unix_ns=?1, end_reason=?2 WHERE id=?3",
                params![ended_unix_ns, reason, run_id],
            )?;
            Ok(())
        })();
        self.named(r)
    }

    /// Stores one interval of every CPU, and the machine state when it
    /// differs from the last stored one, in one transaction. Returns the
    /// state's id.
    ///
    /// # Errors
    /// [`ErrorKind::Database`]; nothing of the interval is stored then.
    pub fn write_interval(
        &mut self,
        run_id: i64,
        now_unix_ns: i64,
        state: &MachineState,
        rows: &[CpuInterval],
    ) -> Result<i64> {
        let r = (|| -> Result<i64> {
            let tx = self.conn.transaction()?;
            let last: Option<(i64, MachineState)> = tx
                .query_row(
                    "SELECT id, kernel_release, kernel_cmdline, governors, preempt_model, clocksource,
                            virtualization, tuned_profile FROM states ORDER BY id DESC LIMIT 1",
                    [],
                    keyed_state,
                )
                .optional()?;
            let state_id = match last {
                Some((id, s)) if &s == state => id,
                _ => {
                    tx.execute(
                        "INSERT INTO states(run_id, seen_unix_ns, kernel_release, kernel_cmdline, governors,
                            preempt_model, clocksource, virtualization, tuned_profile)
                         VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                        params![
                            run_id,
                            now_unix_ns,
                            state.kernel_release,
                            state.kernel_cmdline,
                            state.governors,
                            state.preempt_model,
                            state.clocksource,
                            state.virtualization,
                            state.tuned_profile
                        ],
                    )?;
                    tx.last_insert_rowid()
                }
            };
            for row in rows {
                let hist = serde_json::to_string(&row.histogram)
                    .map_err(|e| Error::new(ErrorKind::Database, format!("histogram: {e}")))?;
                tx.execute(
                    "INSERT INTO intervals(run_id, seq, cpu, start_unix_ns, end_unix_ns, period_ns, count,
                        missed, min_ns, max_ns, mean_ns, p99_ns, p999_ns, steal_ns, partial, merged,
                        explained, state_id, histogram, watch_cpu_ns)
                     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                    params![
                        run_id,
                        row.seq as i64,
                        row.cpu as i64,
                        row.start_unix_ns,
                        row.end_unix_ns,
                        row.period_ns as i64,
                        row.count as i64,
                        row.missed as i64,
                        row.min_ns,
                        row.max_ns,
                        row.mean_ns,
                        row.p99_ns,
                        row.p999_ns,
                        row.steal_ns as i64,
                        row.partial,
                        row.merged as i64,
                        row.explained,
                        state_id,
                        hist,
                        row.watch_cpu_ns.map(|n| n.min(i64::MAX as u64) as i64)
                    ],
                )?;
                let id = tx.last_insert_rowid();
                for w in &row.wakeups {
                    tx.execute(
                        "INSERT INTO wakeups(interval_id, deadline_unix_ns, latency_ns, missed, category, name, cause_ns)
                         VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        params![
                            id,
                            w.deadline_unix_ns,
                            w.latency_ns,
                            w.missed as i64,
                            w.category,
                            w.name,
                            w.cause_ns.map(|n| n as i64)
                        ],
                    )?;
                }
            }
            tx.commit()?;
            Ok(state_id)
        })();
        self.named(r)
    }

    /// Deletes intervals that ended before `before_unix_ns` (their
    /// wake-ups with them), then states and finished runs nothing refers
    /// to. Returns the intervals deleted. Freed pages are reused, so the
    /// file stops growing once the retention is reached.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn prune(&mut self, before_unix_ns: i64) -> Result<usize> {
        let r = (|| -> Result<usize> {
            let tx = self.conn.transaction()?;
            let n = tx.execute(
                "DELETE FROM intervals WHERE end_unix_ns < ?1",
                [before_unix_ns],
            )?;
            tx.execute(
                "DELETE FROM states WHERE id NOT IN (SELECT DISTINCT state_id FROM intervals)
                   AND id <> (SELECT MAX(id) FROM states)",
                [],
            )?;
            tx.execute(
                "DELETE FROM runs WHERE ended_unix_ns IS NOT NULL AND ended_unix_ns < ?1
                   AND id NOT IN (SELECT DISTINCT run_id FROM intervals)",
                [before_unix_ns],
            )?;
            tx.commit()?;
            Ok(n)
        })();
        self.named(r)
    }

    /// Intervals that ended at or after `since_unix_ns`, oldest first, with
    /// their wake-ups.
    ///
    /// # Errors
    /// [`ErrorKind::Database`], or a stored histogram that does not parse.
    pub fn intervals_since(&self, since_unix_ns: i64) -> Result<Vec<StoredInterval>> {
        let r = (|| -> Result<Vec<StoredInterval>> {
            let mut st = self.conn.prepare(
                "SELECT id, run_id, seq, cpu, start_unix_ns, end_unix_ns, period_ns, count, missed, min_ns,
                        max_ns, mean_ns, p99_ns, p999_ns, steal_ns, partial, merged, explained, histogram,
                        watch_cpu_ns
                 FROM intervals WHERE end_unix_ns >= ?1 ORDER BY start_unix_ns, cpu",
            )?;
            let rows = st.query_map([since_unix_ns], |r| {
                let hist: String = r.get(18)?;
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    CpuInterval {
                        seq: r.get::<_, i64>(2)? as u64,
                        cpu: r.get::<_, i64>(3)? as usize,
                        start_unix_ns: r.get(4)?,
                        end_unix_ns: r.get(5)?,
                        period_ns: r.get::<_, i64>(6)? as u64,
                        count: r.get::<_, i64>(7)? as u64,
                        missed: r.get::<_, i64>(8)? as u64,
                        min_ns: r.get(9)?,
                        max_ns: r.get(10)?,
                        mean_ns: r.get(11)?,
                        p99_ns: r.get(12)?,
                        p999_ns: r.get(13)?,
                        steal_ns: r.get::<_, i64>(14)? as u64,
                        partial: r.get(15)?,
                        merged: r.get::<_, i64>(16)? as u64,
                        explained: r.get(17)?,
                        histogram: Vec::new(),
                        wakeups: Vec::new(),
                        watch_cpu_ns: r.get::<_, Option<i64>>(19)?.map(|n| n.max(0) as u64),
                    },
                    hist,
                ))
            })?;
            let mut out = Vec::new();
            let mut wst = self.conn.prepare(
                "SELECT deadline_unix_ns, latency_ns, missed, category, name, cause_ns FROM wakeups
                 WHERE interval_id = ?1 ORDER BY latency_ns DESC",
            )?;
            for row in rows {
                let (id, run_id, mut interval, hist) = row?;
                interval.histogram = serde_json::from_str(&hist).map_err(|e| {
                    Error::new(
                        ErrorKind::Database,
                        format!("interval {id}: histogram does not parse: {e}"),
                    )
                })?;
                interval.wakeups = wst
                    .query_map([id], |r| {
                        Ok(Wakeup {
                            deadline_unix_ns: r.get(0)?,
                            latency_ns: r.get(1)?,
                            missed: r.get::<_, i64>(2)? as u64,
                            category: r.get(3)?,
                            name: r.get(4)?,
                            cause_ns: r.get::<_, Option<i64>>(5)?.map(|n| n as u64),
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                out.push(StoredInterval {
                    id,
                    run_id,
                    interval,
                });
            }
            Ok(out)
        })();
        self.named(r)
    }

    /// Machine states seen at or after `since_unix_ns`, plus the one in
    /// force then, oldest first: `(seen Unix ns, state)`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn states_since(&self, since_unix_ns: i64) -> Result<Vec<(i64, MachineState)>> {
        let r = (|| -> Result<Vec<(i64, MachineState)>> {
            let mut st = self.conn.prepare(
                "SELECT seen_unix_ns, kernel_release, kernel_cmdline, governors, preempt_model, clocksource,
                        virtualization, tuned_profile FROM states
                 WHERE seen_unix_ns >= ?1
                    OR id = (SELECT MAX(id) FROM states WHERE seen_unix_ns < ?1)
                 ORDER BY id",
            )?;
            let v = st
                .query_map([since_unix_ns], keyed_state)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(v)
        })();
        self.named(r)
    }

    /// Counts rows of `table` (`intervals`, `wakeups`, `states`, `runs`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for another table name.
    pub fn count(&self, table: &str) -> Result<u64> {
        let r = (|| -> Result<u64> {
            if !["intervals", "wakeups", "states", "runs"].contains(&table) {
                return Err(crate::error::invalid(format!("no table {table}")));
            }
            let n: i64 =
                self.conn
                    .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
            Ok(n as u64)
        })();
        self.named(r)
    }

    /// The database's size in pages times the page size, bytes: what it
    /// takes once checkpointed, free pages (reused by later rows) included.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn size_bytes(&self) -> Result<u64> {
        let r = (|| -> Result<u64> {
            let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages.max(0) * size.max(0)) as u64)
        })();
        self.named(r)
    }

    /// The runs: `(id, started, ended, end reason)`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn runs(&self) -> Result<Vec<RunRow>> {
        let r = (|| -> Result<Vec<RunRow>> {
            let mut st = self.conn.prepare(
                "SELECT id, started_unix_ns, ended_unix_ns, end_reason FROM runs ORDER BY id",
            )?;
            let v = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(v)
        })();
        self.named(r)
    }

    /// Runs `PRAGMA integrity_check`; `Ok` when it says `ok`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`] with what the check found.
    pub fn integrity_check(&self) -> Result<()> {
        let r = (|| -> Result<()> {
            let r: String = self
                .conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            if r == "ok" {
                Ok(())
            } else {
                Err(Error::new(
                    ErrorKind::Database,
                    format!("integrity check: {r}"),
                ))
            }
        })();
        self.named(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, removed on drop (a failed test too).
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(tag: &str) -> Scratch {
        let d =
            std::env::temp_dir().join(format!("firmtime-watch-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn run_info(config: String) -> RunInfo {
        RunInfo {
            started_unix_ns: 1,
            firmtime_version: "test".into(),
            command_line: "firmtime watch".into(),
            config,
            conditions: "[]".into(),
        }
    }

    /// The error said "database: database or disk is full", naming no file.
    #[test]
    fn a_full_database_is_named_in_the_error() {
        let d = scratch("full");
        let db = d.0.join("watch.db");
        let mut s = Store::open(&db).unwrap();
        let pages: i64 = s
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        let max: i64 = s
            .conn
            .query_row(&format!("PRAGMA max_page_count={pages}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(max, pages);
        let e = s.begin_run(&run_info("x".repeat(256 * 1024))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Database);
        assert_eq!(
            e.message(),
            format!("database {}: database or disk is full", db.display())
        );
        assert_eq!(s.count("runs").unwrap(), 0, "nothing half-written");
        drop(s);
    }

    /// The error said "database: database is locked", naming no file.
    #[test]
    fn a_locked_database_is_named_in_the_error() {
        let d = scratch("locked");
        let db = d.0.join("watch.db");
        let mut s = Store::open(&db).unwrap();
        s.conn.busy_timeout(std::time::Duration::ZERO).unwrap();
        let other = Connection::open(&db).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let e = s.begin_run(&run_info(String::new())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Database);
        assert_eq!(
            e.message(),
            format!("database {}: database is locked", db.display())
        );
        other.execute_batch("ROLLBACK").unwrap();
        assert!(s.begin_run(&run_info(String::new())).is_ok());
        assert_eq!(s.path(), db.as_path());
        drop((s, other));
    }
}
