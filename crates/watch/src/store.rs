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
pub const SCHEMA_VERSION: i64 = 4;

/// `resolution_ns` of a row as the writer stored it: one interval.
pub const RAW: u64 = 0;
/// `resolution_ns` of an hourly roll-up.
pub const HOUR_NS: u64 = 3_600_000_000_000;
/// `resolution_ns` of a daily roll-up (UTC days).
pub const DAY_NS: u64 = 86_400_000_000_000;
/// Worst wake-ups a rolled-up row keeps (with their causes).
pub const ROLLUP_WORST: usize = 10;
/// Causes a rolled-up row keeps by name; the rest of each category are
/// summed under the name [`OTHER_NAMES`].
pub const ROLLUP_CAUSES: usize = 32;
/// The name under which a rolled-up row sums the causes beyond
/// [`ROLLUP_CAUSES`] (per category).
pub const OTHER_NAMES: &str = "(other names)";
/// Valid `--max-db-size`, bytes (1 MiB … 64 GiB).
pub const MAX_DB_BYTES: std::ops::RangeInclusive<u64> = (1 << 20)..=(64 << 30);

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
  watch_cpu_ns INTEGER,
  resolution_ns INTEGER NOT NULL DEFAULT 0,
  source_rows INTEGER NOT NULL DEFAULT 1,
  explained_rows INTEGER,
  trace_lost_events INTEGER
);
CREATE INDEX IF NOT EXISTS intervals_by_end ON intervals(end_unix_ns);
CREATE TABLE IF NOT EXISTS wakeups(
  id INTEGER PRIMARY KEY,
  interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
  deadline_unix_ns INTEGER NOT NULL,
  latency_ns INTEGER NOT NULL,
  missed INTEGER NOT NULL,
  category TEXT,
  name TEXT,
  cause_ns INTEGER,
  lost_events INTEGER,
  detail TEXT,
  parts TEXT,
  breakdown TEXT
);
CREATE INDEX IF NOT EXISTS wakeups_by_interval ON wakeups(interval_id);
CREATE TABLE IF NOT EXISTS causes(
  interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
  category TEXT,
  name TEXT,
  wakeups INTEGER NOT NULL,
  missed INTEGER NOT NULL,
  worst_latency_ns INTEGER NOT NULL,
  first_unix_ns INTEGER NOT NULL,
  last_unix_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS causes_by_interval ON causes(interval_id);
";

/// Indexes on the columns schema 3 added (after the migration).
const SCHEMA_3_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS intervals_by_resolution ON intervals(resolution_ns, start_unix_ns);";

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

/// One part of a wake-up's lateness as the explaining trace split it
/// (`firmtime_trace::explain::Part`): stored with the wake-up, shown by
/// `watch show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CausePart {
    /// The category key (`task`, `irq`, …).
    pub category: String,
    /// The task's comm, the interrupt's or softirq's name, …
    pub name: String,
    /// The task's pid (task, irqs off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The task's kernel priority (0–99 real-time, 100–139 normal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<i32>,
    /// Time charged, ns.
    pub ns: u64,
}

/// One worst wake-up, with its cause when the explaining trace ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Wakeup {
    /// Its row id in the database (`watch show ID`, the metrics' exemplar);
    /// `None` until stored. A roll-up keeps the ids of the wake-ups it keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
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
    /// Events the kernel lost in the span its attribution reads: then the
    /// cause is `unknown` named `trace lost events`, never a guess
    /// ([`Wakeup::cause_words`] says `unknown (trace lost N events)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_events: Option<u64>,
    /// The cause in one sentence, with figures. Stored, and read back by
    /// [`Store::wakeup`] only (a period's rows are read without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The contexts that ran in its window (tasks, interrupts, …), largest
    /// first. Stored, and read back by [`Store::wakeup`] only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<CausePart>,
    /// Its lateness split into parts that add up to it, as the explaining
    /// trace gives them (`firmtime_trace::explain::Share` as JSON: `kind`
    /// — `timer_delay`, `irq`, `softirq`, `task`, `non_preemptible`,
    /// `irqs_off`, `idle_exit`, `vcpu_not_running`, `rt_throttled`,
    /// `own_work`, `remainder` — `ns`, `name`, and where known `pid`,
    /// `tgid`, `process`, `policy`, `prio`, `faults`). Stored, and read
    /// back by [`Store::wakeup`] only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<serde_json::Value>,
}

impl Wakeup {
    /// The cause in words: `task stress`, `interrupt eth0`, `unknown
    /// (trace lost 42 events)`; `None` without the trace.
    pub fn cause_words(&self) -> Option<String> {
        let cat = self.category.as_deref()?;
        let name = self.name.as_deref().unwrap_or("");
        if let Some(n) = self.lost_events {
            return Some(format!("unknown (trace lost {n} events)"));
        }
        Some(match firmtime_trace::explain::Category::from_key(cat) {
            Some(c) => firmtime_trace::explain::cause_words(c, name),
            None if name.is_empty() => cat.to_string(),
            None => format!("{cat} {name}"),
        })
    }
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
    /// Events the kernel lost from the explaining trace of this CPU in the
    /// interval (`firmtime_trace::loss::lost_between`); `None` when no
    /// trace ran or in rows stored before schema version 4.
    #[serde(default)]
    pub trace_lost_events: Option<u64>,
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

/// An interval read back (with its row id and run), or a roll-up of
/// several ([`Store::maintain`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredInterval {
    /// Row id.
    pub id: i64,
    /// The run (of a roll-up: the run of its latest interval).
    pub run_id: i64,
    /// The interval.
    #[serde(flatten)]
    pub interval: CpuInterval,
    /// [`RAW`] (0) for an interval as stored, [`HOUR_NS`] or [`DAY_NS`]
    /// for a roll-up.
    pub resolution_ns: u64,
    /// Intervals this row stands for (1 for an interval as stored).
    pub source_rows: u64,
    /// Of them, those the explaining trace explained.
    pub explained_rows: u64,
    /// A roll-up's cause counts over all the wake-ups its intervals kept
    /// (its `wakeups` are then only the [`ROLLUP_WORST`] worst); empty for
    /// an interval as stored, whose causes are its wake-ups.
    pub causes: Vec<CauseCount>,
}

impl StoredInterval {
    /// An interval as stored (resolution [`RAW`], one source row).
    pub fn raw(id: i64, run_id: i64, interval: CpuInterval) -> StoredInterval {
        StoredInterval {
            id,
            run_id,
            explained_rows: u64::from(interval.explained),
            interval,
            resolution_ns: RAW,
            source_rows: 1,
            causes: Vec::new(),
        }
    }

    /// The cause counts of the row: of a roll-up its `causes`, of an
    /// interval as stored its wake-ups counted by category and name.
    pub fn cause_counts(&self) -> Vec<CauseCount> {
        if self.resolution_ns != RAW {
            return self.causes.clone();
        }
        let mut m: std::collections::BTreeMap<(Option<String>, Option<String>), CauseCount> =
            std::collections::BTreeMap::new();
        for w in &self.interval.wakeups {
            let c = CauseCount {
                category: w.category.clone(),
                name: w.name.clone(),
                wakeups: 1,
                missed: w.missed,
                worst_latency_ns: w.latency_ns,
                first_unix_ns: w.deadline_unix_ns,
                last_unix_ns: w.deadline_unix_ns,
            };
            match m.entry((c.category.clone(), c.name.clone())) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(c);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().add(&c),
            }
        }
        m.into_values().collect()
    }
}

/// The wake-ups one cause made late, summed (a roll-up's `causes` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseCount {
    /// Cause category (`None`: no trace ran).
    pub category: Option<String>,
    /// Cause name ([`OTHER_NAMES`]: the category's names beyond the
    /// [`ROLLUP_CAUSES`] most frequent).
    pub name: Option<String>,
    /// Kept wake-ups it made late.
    pub wakeups: u64,
    /// Deadlines missed in them.
    pub missed: u64,
    /// The latest of them, ns.
    pub worst_latency_ns: i64,
    /// The first one's deadline, Unix ns.
    pub first_unix_ns: i64,
    /// The last one's deadline, Unix ns.
    pub last_unix_ns: i64,
}

impl CauseCount {
    /// Adds `o` (the same cause, or folded into this one).
    pub fn add(&mut self, o: &CauseCount) {
        self.wakeups += o.wakeups;
        self.missed += o.missed;
        self.worst_latency_ns = self.worst_latency_ns.max(o.worst_latency_ns);
        self.first_unix_ns = self.first_unix_ns.min(o.first_unix_ns);
        self.last_unix_ns = self.last_unix_ns.max(o.last_unix_ns);
    }
}

/// The retention policy [`Store::maintain`] applies (`--keep`,
/// `--keep-raw`, `--keep-hourly`, `--max-db-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retention {
    /// Nothing older is kept, at any resolution (`--keep`, default 10 years).
    pub keep_ns: u64,
    /// Intervals as stored are kept this long, then rolled up into hours
    /// (`--keep-raw`, default 7 days).
    pub raw_ns: u64,
    /// Hourly roll-ups are kept this long, then rolled up into days
    /// (`--keep-hourly`, default 90 days).
    pub hourly_ns: u64,
    /// The cap on the database file, bytes (`--max-db-size`, default 256 MiB).
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_ns: 3650 * DAY_NS,
            raw_ns: 7 * DAY_NS,
            hourly_ns: 90 * DAY_NS,
            max_bytes: 256 << 20,
        }
    }
}

/// What one [`Store::maintain`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// Rows deleted as older than `keep`.
    pub deleted: usize,
    /// Interval rows rolled up into hours by age.
    pub rolled_to_hour: usize,
    /// Hourly rows rolled up into days by age.
    pub rolled_to_day: usize,
    /// Rows rolled up earlier than their age asks, to fit `max_bytes`.
    pub cap_rolled: usize,
    /// Rows of the oldest days deleted to fit `max_bytes`.
    pub cap_dropped: usize,
    /// The oldest row's start after the cap was applied (`None`: not applied).
    pub oldest_unix_ns: Option<i64>,
    /// The file's size afterwards, bytes.
    pub size_bytes: u64,
}

/// Merges rows (of one CPU, period and state) into one of `resolution_ns`:
/// sums of counts, misses, steal, watch's CPU time (`None` only when no
/// row knew it), merged intervals and source rows; the exact minimum and
/// maximum; the count-weighted mean; the bucket-wise sum of the histograms
/// and its nearest-rank p99 and p99.9 capped at the maximum; the
/// [`ROLLUP_WORST`] worst wake-ups; the cause counts of all, the
/// [`ROLLUP_CAUSES`] most frequent by name and the rest of each category
/// under [`OTHER_NAMES`]. Start and end span the rows; the run, sequence
/// number and CPU are the latest row's. `rows` must not be empty.
pub fn merge_rows(rows: &[StoredInterval], resolution_ns: u64) -> StoredInterval {
    let mut hist = crate::hist::Hist::new();
    let latest = rows
        .iter()
        .max_by_key(|r| (r.interval.start_unix_ns, r.id))
        .expect("merge_rows: at least one row");
    let mut out = CpuInterval {
        seq: latest.interval.seq,
        cpu: latest.interval.cpu,
        start_unix_ns: i64::MAX,
        end_unix_ns: i64::MIN,
        period_ns: latest.interval.period_ns,
        count: 0,
        missed: 0,
        min_ns: None,
        max_ns: None,
        mean_ns: None,
        p99_ns: None,
        p999_ns: None,
        steal_ns: 0,
        partial: false,
        merged: 0,
        explained: false,
        histogram: Vec::new(),
        wakeups: Vec::new(),
        watch_cpu_ns: None,
        trace_lost_events: None,
    };
    let (mut source_rows, mut explained_rows, mut sum) = (0, 0, 0.0);
    let mut causes: std::collections::BTreeMap<(Option<String>, Option<String>), CauseCount> =
        std::collections::BTreeMap::new();
    for s in rows {
        let r = &s.interval;
        out.start_unix_ns = out.start_unix_ns.min(r.start_unix_ns);
        out.end_unix_ns = out.end_unix_ns.max(r.end_unix_ns);
        out.count += r.count;
        out.missed += r.missed;
        out.min_ns = match (out.min_ns, r.min_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        out.max_ns = out.max_ns.max(r.max_ns);
        sum += r.mean_ns.unwrap_or(0.0) * r.count as f64;
        out.steal_ns += r.steal_ns;
        out.partial |= r.partial;
        out.merged += r.merged;
        out.explained |= r.explained;
        hist.add_sparse(&r.histogram);
        out.wakeups.extend(r.wakeups.iter().cloned());
        if let Some(n) = r.watch_cpu_ns {
            out.watch_cpu_ns = Some(out.watch_cpu_ns.unwrap_or(0) + n);
        }
        if let Some(n) = r.trace_lost_events {
            out.trace_lost_events = Some(out.trace_lost_events.unwrap_or(0) + n);
        }
        source_rows += s.source_rows;
        explained_rows += s.explained_rows;
        for c in s.cause_counts() {
            match causes.entry((c.category.clone(), c.name.clone())) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(c);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().add(&c),
            }
        }
    }
    let max = out.max_ns.unwrap_or(0);
    out.mean_ns = (out.count > 0).then(|| sum / out.count as f64);
    out.p99_ns = hist.quantile(0.99, max);
    out.p999_ns = hist.quantile(0.999, max);
    out.histogram = hist.sparse();
    out.wakeups.sort_by(|a, b| {
        b.latency_ns
            .cmp(&a.latency_ns)
            .then(b.deadline_unix_ns.cmp(&a.deadline_unix_ns))
    });
    out.wakeups.truncate(ROLLUP_WORST);
    let mut all: Vec<CauseCount> = causes.into_values().collect();
    all.sort_by(|a, b| {
        b.wakeups
            .cmp(&a.wakeups)
            .then(b.worst_latency_ns.cmp(&a.worst_latency_ns))
    });
    let mut kept: std::collections::BTreeMap<(Option<String>, Option<String>), CauseCount> =
        std::collections::BTreeMap::new();
    for (i, mut c) in all.into_iter().enumerate() {
        if i >= ROLLUP_CAUSES {
            c.name = Some(OTHER_NAMES.to_string());
        }
        match kept.entry((c.category.clone(), c.name.clone())) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(c);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().add(&c),
        }
    }
    StoredInterval {
        id: 0,
        run_id: latest.run_id,
        interval: out,
        resolution_ns,
        source_rows,
        explained_rows,
        causes: kept.into_values().collect(),
    }
}

/// Stores one interval group (see [`Store::write_interval`]) in `tx`.
fn insert_group(
    tx: &Connection,
    run_id: i64,
    now_unix_ns: i64,
    state: &MachineState,
    rows: &mut [CpuInterval],
) -> Result<i64> {
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
    // New wake-ups get ids above every id ever given (`meta.wakeup_ids_issued`),
    // not SQLite's largest-present-plus-one: a roll-up or the retention may
    // have deleted the largest, and an id an exemplar or a report named
    // must never come to mean another wake-up.
    let issued = ids_issued(tx, Cols::CURRENT)?;
    let mut next = issued + 1;
    for row in rows.iter_mut() {
        for w in row.wakeups.iter_mut().filter(|w| w.id.is_none()) {
            w.id = Some(next);
            next += 1;
        }
    }
    for row in rows {
        let (_, ids) = insert_row(
            tx,
            run_id,
            state_id,
            &StoredInterval::raw(0, run_id, row.clone()),
        )?;
        for (w, id) in row.wakeups.iter_mut().zip(ids) {
            w.id = Some(id);
        }
    }
    if next > issued + 1 {
        tx.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES('wakeup_ids_issued', ?1)",
            [(next - 1).to_string()],
        )?;
    }
    Ok(state_id)
}

/// The largest wake-up id ever given in the file: `meta.wakeup_ids_issued`
/// (kept since this build) or the largest id present, whichever is larger.
fn ids_issued(conn: &Connection, cols: Cols) -> Result<i64> {
    let kept: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key='wakeup_ids_issued'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let present: i64 = conn.query_row(
        &format!("SELECT COALESCE(MAX({}), 0) FROM wakeups", cols.wakeup_id()),
        [],
        |r| r.get(0),
    )?;
    Ok(kept
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0)
        .max(present))
}

/// Inserts one row (an interval or a roll-up) with its wake-ups and causes;
/// returns its id and its wake-ups' ids. A wake-up with an id that is
/// stored already (a roll-up's kept wake-ups) is moved to the new row,
/// its id, detail and parts unchanged.
fn insert_row(
    tx: &Connection,
    run_id: i64,
    state_id: i64,
    s: &StoredInterval,
) -> Result<(i64, Vec<i64>)> {
    let row = &s.interval;
    let hist = serde_json::to_string(&row.histogram)
        .map_err(|e| Error::new(ErrorKind::Database, format!("histogram: {e}")))?;
    let mut st = tx.prepare_cached(
        "INSERT INTO intervals(run_id, seq, cpu, start_unix_ns, end_unix_ns, period_ns, count,
            missed, min_ns, max_ns, mean_ns, p99_ns, p999_ns, steal_ns, partial, merged,
            explained, state_id, histogram, watch_cpu_ns, resolution_ns, source_rows, explained_rows,
            trace_lost_events)
         VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
    )?;
    st.execute(params![
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
        row.watch_cpu_ns.map(|n| n.min(i64::MAX as u64) as i64),
        s.resolution_ns as i64,
        s.source_rows as i64,
        s.explained_rows as i64,
        row.trace_lost_events.map(|n| n.min(i64::MAX as u64) as i64)
    ])?;
    let id = tx.last_insert_rowid();
    let mut wst = tx.prepare_cached(
        "INSERT INTO wakeups(id, interval_id, deadline_unix_ns, latency_ns, missed, category, name,
            cause_ns, lost_events, detail, parts, breakdown)
         VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    let mut moved = tx.prepare_cached("UPDATE wakeups SET interval_id = ?1 WHERE id = ?2")?;
    let mut ids = Vec::with_capacity(row.wakeups.len());
    for w in &row.wakeups {
        if let Some(wid) = w.id {
            if moved.execute([id, wid])? == 1 {
                ids.push(wid);
                continue;
            }
        }
        let parts = if w.parts.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&w.parts)
                    .map_err(|e| Error::new(ErrorKind::Database, format!("cause parts: {e}")))?,
            )
        };
        wst.execute(params![
            w.id,
            id,
            w.deadline_unix_ns,
            w.latency_ns,
            w.missed as i64,
            w.category,
            w.name,
            w.cause_ns.map(|n| n as i64),
            w.lost_events.map(|n| n.min(i64::MAX as u64) as i64),
            w.detail,
            parts,
            w.breakdown.as_ref().map(|b| b.to_string())
        ])?;
        ids.push(tx.last_insert_rowid());
    }
    let mut cst = tx.prepare_cached(
        "INSERT INTO causes(interval_id, category, name, wakeups, missed, worst_latency_ns,
            first_unix_ns, last_unix_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for c in &s.causes {
        cst.execute(params![
            id,
            c.category,
            c.name,
            c.wakeups as i64,
            c.missed as i64,
            c.worst_latency_ns,
            c.first_unix_ns,
            c.last_unix_ns
        ])?;
    }
    Ok((id, ids))
}

/// Deletes the states no row refers to (except the latest) and the
/// finished runs before `before_unix_ns` that no row refers to.
fn forget_unreferenced(tx: &Connection, before_unix_ns: i64) -> Result<()> {
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
    Ok(())
}

/// The stored histogram JSON `[[edge,count],…]` as this crate writes it
/// (no spaces, non-negative counts), read without a JSON parser: a report
/// over months reads tens of thousands. `None` for anything else, which
/// then goes to serde_json (and its error message).
fn parse_sparse(text: &str) -> Option<Sparse> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 12);
    let mut i = 0;
    let int = |i: &mut usize| -> Option<i64> {
        let neg = b.get(*i) == Some(&b'-');
        if neg {
            *i += 1;
        }
        let start = *i;
        let mut v: i64 = 0;
        while let Some(d) = b.get(*i).filter(|d| d.is_ascii_digit()) {
            v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
            *i += 1;
        }
        (*i > start).then_some(if neg { -v } else { v })
    };
    let expect = |i: &mut usize, c: u8| -> Option<()> { (b.get(*i) == Some(&c)).then(|| *i += 1) };
    expect(&mut i, b'[')?;
    if b.get(i) == Some(&b']') {
        return (i + 1 == b.len()).then_some(out);
    }
    loop {
        expect(&mut i, b'[')?;
        let e = int(&mut i)?;
        expect(&mut i, b',')?;
        let c = int(&mut i)?;
        expect(&mut i, b']')?;
        out.push((e, u64::try_from(c).ok()?));
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b']') if i + 1 == b.len() => return Some(out),
            _ => return None,
        }
    }
}

/// What a reader selects for the columns a file's schema version has or
/// lacks: a reader never migrates (it opens the file read-only), so an
/// older file is read as the migration would make it (a missing
/// `watch_cpu_ns` is NULL, a row without `resolution_ns` one interval as
/// stored, a wake-up's id its rowid, which the migration keeps).
#[derive(Debug, Clone, Copy)]
struct Cols {
    version: i64,
}

impl Cols {
    const CURRENT: Cols = Cols {
        version: SCHEMA_VERSION,
    };

    fn pick(&self, since: i64, have: &'static str, lack: &'static str) -> &'static str {
        if self.version >= since {
            have
        } else {
            lack
        }
    }

    /// The interval columns after `histogram`, as [`read_rows`] reads them.
    fn interval_tail(&self) -> String {
        [
            self.pick(2, "watch_cpu_ns", "NULL"),
            self.pick(3, "resolution_ns", "0"),
            self.pick(3, "source_rows", "1"),
            self.pick(3, "COALESCE(explained_rows, explained)", "explained"),
            self.pick(4, "trace_lost_events", "NULL"),
        ]
        .join(", ")
    }

    fn wakeup_id(&self) -> &'static str {
        self.pick(4, "id", "rowid")
    }

    fn wakeup_lost(&self) -> &'static str {
        self.pick(4, "lost_events", "NULL")
    }

    fn has_causes(&self) -> bool {
        self.version >= 3
    }
}

/// The rows `WHERE filter` (`params` bound), oldest first, with their
/// wake-ups and causes.
fn read_rows(
    conn: &Connection,
    cols: Cols,
    filter: &str,
    params: impl rusqlite::Params + Clone,
) -> Result<Vec<StoredInterval>> {
    let mut st = conn.prepare(&format!(
        "SELECT id, run_id, seq, cpu, start_unix_ns, end_unix_ns, period_ns, count, missed, min_ns,
                max_ns, mean_ns, p99_ns, p999_ns, steal_ns, partial, merged, explained, histogram,
                {}
         FROM intervals WHERE {filter} ORDER BY start_unix_ns, cpu",
        cols.interval_tail()
    ))?;
    let rows = st.query_map(params.clone(), |r| {
        let hist: String = r.get(18)?;
        Ok((
            StoredInterval {
                id: r.get(0)?,
                run_id: r.get(1)?,
                interval: CpuInterval {
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
                    trace_lost_events: r.get::<_, Option<i64>>(23)?.map(|n| n.max(0) as u64),
                },
                resolution_ns: r.get::<_, i64>(20)?.max(0) as u64,
                source_rows: r.get::<_, i64>(21)?.max(0) as u64,
                explained_rows: r.get::<_, i64>(22)?.max(0) as u64,
                causes: Vec::new(),
            },
            hist,
        ))
    })?;
    let mut out = Vec::new();
    let mut at = std::collections::HashMap::new();
    for row in rows {
        let (mut s, hist) = row?;
        s.interval.histogram = match parse_sparse(&hist) {
            Some(h) => h,
            None => serde_json::from_str(&hist).map_err(|e| {
                Error::new(
                    ErrorKind::Database,
                    format!("interval {}: histogram does not parse: {e}", s.id),
                )
            })?,
        };
        at.insert(s.id, out.len());
        out.push(s);
    }
    let mut wst = conn.prepare(&format!(
        "SELECT interval_id, deadline_unix_ns, latency_ns, missed, category, name, cause_ns, {}, {}
         FROM wakeups
         WHERE interval_id IN (SELECT id FROM intervals WHERE {filter})
         ORDER BY interval_id, latency_ns DESC",
        cols.wakeup_id(),
        cols.wakeup_lost()
    ))?;
    let ws = wst.query_map(params.clone(), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            Wakeup {
                deadline_unix_ns: r.get(1)?,
                latency_ns: r.get(2)?,
                missed: r.get::<_, i64>(3)? as u64,
                category: r.get(4)?,
                name: r.get(5)?,
                cause_ns: r.get::<_, Option<i64>>(6)?.map(|n| n as u64),
                id: r.get(7)?,
                lost_events: r.get::<_, Option<i64>>(8)?.map(|n| n.max(0) as u64),
                ..Wakeup::default()
            },
        ))
    })?;
    for w in ws {
        let (id, w) = w?;
        if let Some(&i) = at.get(&id) {
            out[i].interval.wakeups.push(w);
        }
    }
    if !cols.has_causes() {
        return Ok(out);
    }
    let mut cst = conn.prepare(&format!(
        "SELECT interval_id, category, name, wakeups, missed, worst_latency_ns, first_unix_ns,
                last_unix_ns FROM causes
         WHERE interval_id IN (SELECT id FROM intervals WHERE {filter})
         ORDER BY interval_id, wakeups DESC, worst_latency_ns DESC"
    ))?;
    let cs = cst.query_map(params, |r| {
        Ok((
            r.get::<_, i64>(0)?,
            CauseCount {
                category: r.get(1)?,
                name: r.get(2)?,
                wakeups: r.get::<_, i64>(3)?.max(0) as u64,
                missed: r.get::<_, i64>(4)?.max(0) as u64,
                worst_latency_ns: r.get(5)?,
                first_unix_ns: r.get(6)?,
                last_unix_ns: r.get(7)?,
            },
        ))
    })?;
    for c in cs {
        let (id, c) = c?;
        if let Some(&i) = at.get(&id) {
            out[i].causes.push(c);
        }
    }
    Ok(out)
}

/// A wake-up read back with its cause record and the row it belongs to
/// ([`Store::wakeup`], `watch show`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WakeupRecord {
    /// The wake-up: its id, deadline, latency, misses and cause, with the
    /// cause's detail and parts.
    pub wakeup: Wakeup,
    /// The row it belongs to (an interval, or a roll-up that kept it).
    pub interval_id: i64,
    /// The run of that row.
    pub run_id: i64,
    /// The row's interval number in its run.
    pub seq: u64,
    /// The CPU.
    pub cpu: usize,
    /// The row's start, Unix ns.
    pub interval_start_unix_ns: i64,
    /// The row's end, Unix ns.
    pub interval_end_unix_ns: i64,
    /// Period of the wake-ups, ns.
    pub period_ns: u64,
    /// The row's resolution ([`RAW`], [`HOUR_NS`], [`DAY_NS`]).
    pub resolution_ns: u64,
    /// Wake-ups in the row.
    pub interval_count: u64,
    /// Deadlines missed in the row.
    pub interval_missed: u64,
    /// The row's largest latency, ns.
    pub interval_max_ns: Option<i64>,
    /// The row's p99.9, ns.
    pub interval_p999_ns: Option<i64>,
    /// Events the trace lost on this CPU in the row (`None`: no trace, or
    /// a row stored before schema 4).
    pub interval_trace_lost_events: Option<u64>,
}

/// What remains of a wake-up whose interval was rolled up and which the
/// roll-up did not keep among its [`ROLLUP_WORST`] worst
/// ([`Store::rolled_up`], `watch show`): its own record is gone; the
/// rows it went into keep the maxima, the histograms, the cause counts and
/// their worst wake-ups. Wake-up ids grow with time, so the kept wake-ups
/// with the ids just below and above it bound when it was stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolledUpWakeup {
    /// The id asked for.
    pub id: i64,
    /// The kept wake-up with the next lower id (`None`: none is kept).
    pub kept_before: Option<i64>,
    /// The kept wake-up with the next higher id (`None`: none is kept).
    pub kept_after: Option<i64>,
    /// It was stored in an interval that started at or after this, Unix ns
    /// (the start of the row holding `kept_before`).
    pub from_unix_ns: i64,
    /// … and ended at or before this, Unix ns (the end of the row holding
    /// `kept_after`).
    pub to_unix_ns: i64,
    /// The rolled-up rows of that span, every CPU (it was in one of them),
    /// oldest first, with their worst kept wake-ups and cause counts.
    pub rows: Vec<StoredInterval>,
}

/// A database error: the file is SQLite but not a watch database.
fn not_watch(path: &Path, why: &str) -> Error {
    Error::new(
        ErrorKind::NotWatchDatabase,
        format!(
            "database {}: not a firmtime watch database ({why}); give the file `firmtime watch --db` writes",
            path.display()
        ),
    )
}

/// The schema version of the file `conn` has open, read without writing:
/// `None` for a file without tables (new).
///
/// # Errors
/// A file with tables but no `meta.schema_version` ([`not_watch`]); what
/// SQLite says of a file that is not a database.
fn schema_of(conn: &Connection, path: &Path) -> Result<Option<i64>> {
    let table = |name: &str| -> Result<bool> {
        let n: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name LIKE ?1",
                [name],
                |r| r.get(0),
            )
            .map_err(|e| match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::NotADatabase) => {
                    not_watch(path, "it is not an SQLite database")
                }
                _ => db_err(path, e),
            })?;
        Ok(n > 0)
    };
    if !table("%")? {
        return Ok(None);
    }
    if !table("meta")? {
        return Err(not_watch(path, "it has tables but no meta table"));
    }
    let v: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key='schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| db_err(path, e))?;
    match v.as_deref().map(str::parse::<i64>) {
        Some(Ok(v)) if v >= 1 => Ok(Some(v)),
        Some(_) => Err(not_watch(path, "its meta.schema_version is not a version")),
        None => Err(not_watch(path, "its meta table has no schema_version")),
    }
}

/// A file written by a newer schema is refused, by name, untouched.
fn refuse_newer(path: &Path, v: i64) -> Result<()> {
    if v > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::NotWatchDatabase,
            format!(
                "database {}: schema version {v} is newer than this firmtime's ({SCHEMA_VERSION}); use a newer firmtime",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Migrates a file of schema `v` (1 to 3) to [`SCHEMA_VERSION`], its rows
/// kept: version 2 added `intervals.watch_cpu_ns` (NULL in older rows);
/// version 3 the roll-ups (a row's resolution, the intervals it stands for
/// and how many were explained; NULL: the row's own `explained`), the
/// `causes` table and incremental auto-vacuum; version 4 the trace's lost
/// events per interval and per wake-up, a wake-up's id (its rowid until
/// then, so ids stay), its cause's detail, parts and breakdown.
fn migrate(conn: &Connection, v: i64) -> rusqlite::Result<()> {
    let mut sql = String::from("BEGIN;");
    if v < 2 {
        sql.push_str("ALTER TABLE intervals ADD COLUMN watch_cpu_ns INTEGER;");
    }
    if v < 3 {
        sql.push_str(
            "ALTER TABLE intervals ADD COLUMN resolution_ns INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE intervals ADD COLUMN source_rows INTEGER NOT NULL DEFAULT 1;
             ALTER TABLE intervals ADD COLUMN explained_rows INTEGER;",
        );
    }
    if v < 4 {
        sql.push_str(
            "ALTER TABLE intervals ADD COLUMN trace_lost_events INTEGER;
             CREATE TABLE wakeups_v4(
               id INTEGER PRIMARY KEY,
               interval_id INTEGER NOT NULL REFERENCES intervals(id) ON DELETE CASCADE,
               deadline_unix_ns INTEGER NOT NULL,
               latency_ns INTEGER NOT NULL,
               missed INTEGER NOT NULL,
               category TEXT,
               name TEXT,
               cause_ns INTEGER,
               lost_events INTEGER,
               detail TEXT,
               parts TEXT,
               breakdown TEXT
             );
             INSERT INTO wakeups_v4(id, interval_id, deadline_unix_ns, latency_ns, missed, category,
               name, cause_ns)
               SELECT rowid, interval_id, deadline_unix_ns, latency_ns, missed, category, name, cause_ns
               FROM wakeups;
             DROP TABLE wakeups;
             ALTER TABLE wakeups_v4 RENAME TO wakeups;
             CREATE INDEX IF NOT EXISTS wakeups_by_interval ON wakeups(interval_id);",
        );
    }
    sql.push_str(&format!(
        "UPDATE meta SET value='{SCHEMA_VERSION}' WHERE key='schema_version'; COMMIT;"
    ));
    conn.execute_batch(&sql)?;
    // Once: a file made before schema 3 has no incremental auto-vacuum;
    // VACUUM turns it on (and compacts the file).
    let av: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if av != 2 {
        conn.execute_batch("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")?;
    }
    Ok(())
}

/// `path` as the path of an SQLite URI (`file:…`): what is not plainly
/// safe percent-encoded (`?`, `#`, `%`, spaces, non-ASCII).
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The `-wal` file of database `path`.
fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// What says a file changed: device, inode, size, modification and
/// status-change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileMark {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn file_mark(path: &Path) -> Option<FileMark> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileMark {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

/// The pid of the `watch` holding the writer's lock of `db`
/// ([`crate::lock`]), `Some(None)` when one holds it but its pid is not
/// written yet, `None` when none holds it (or there is no lock file: no
/// `watch` ever ran on it). The lock file is opened read-only and probed
/// with a shared, non-blocking `flock`, released at once: nothing is
/// written, and a `watch` taking the lock in that instant retries.
fn writer_of(db: &Path) -> Option<Option<u32>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(crate::lock::lock_path(db))
        .ok()?;
    // SAFETY: the descriptor is open for the calls' duration.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        // SAFETY: as above.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        return None;
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
        return None;
    }
    let mut text = String::new();
    Some(
        f.read_to_string(&mut text)
            .ok()
            .and_then(|_| text.trim().parse().ok()),
    )
}

/// How long a reader waits for a `watch` starting on its file to have
/// made its tables (and its `-wal`) before giving up with an
/// [`ErrorKind::InUse`] error saying a watch is starting on it.
pub const STARTING_WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The reader's answer when a `watch` starting on the file has not made it
/// readable within [`STARTING_WRITER_WAIT`]: [`ErrorKind::InUse`].
fn starting_writer(path: &Path, pid: Option<u32>) -> Error {
    let who = pid.map_or_else(
        || "its pid not yet written".to_string(),
        |p| format!("pid {p}"),
    );
    Error::new(
        ErrorKind::InUse,
        format!(
            "database {}: a firmtime watch ({who}) is starting on it (creating its tables or \
             switching it to WAL): nothing was read and nothing changed; try again in a moment",
            path.display()
        ),
    )
}

/// Whether a file opened as immutable at `mark` is still as it was: no
/// `watch` holds its lock, no `-wal` is there, the file unchanged.
fn still_quiet(path: &Path, mark: &Option<FileMark>) -> bool {
    writer_of(path).is_none() && !wal_path(path).exists() && file_mark(path) == *mark
}

/// Opens `path` read-only, writing nothing: as a WAL reader beside a
/// writer (`quiet` false: its `-wal` is there); otherwise as immutable, so
/// that no `-wal` or `-shm` file is made (a reader may not be allowed to,
/// and must not leave them).
fn open_read_only(path: &Path, quiet: bool) -> Result<Connection> {
    use rusqlite::OpenFlags;
    let uri = format!(
        "file:{}?mode=ro{}",
        uri_path(path),
        if quiet { "&immutable=1" } else { "" }
    );
    let conn = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| db_err(path, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| db_err(path, e))?;
    Ok(conn)
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
    /// What the file's schema has (a reader reads older files as they are).
    cols: Cols,
    /// Opened read-only ([`Store::open_existing`]).
    read_only: bool,
    /// Opened as immutable (no `watch` was on it): the file as it was
    /// then. Every read checks afterwards that it still is ([`still_quiet`]).
    quiet: Option<Option<FileMark>>,
    /// The reader that replaced this one when a `watch` started on the
    /// file during a read (its reads go there from then on).
    beside_writer: std::cell::RefCell<Option<Box<Store>>>,
}

/// What one attempt of a reader to open a file found.
enum ReaderAttempt {
    /// Open and its schema checked.
    Open(Box<Store>),
    /// A `watch` (its pid, if written) is starting on the file: not yet
    /// readable, or changed while being looked at.
    Starting(Option<u32>),
}

fn db_err(path: &Path, e: rusqlite::Error) -> Error {
    Error::new(
        ErrorKind::Database,
        format!("database {}: {e}", path.display()),
    )
}

impl Store {
    /// Opens (creating if needed) the database at `path` for writing: WAL,
    /// `synchronous=FULL`, the schema, an older schema migrated. The file
    /// is looked at before anything is written: a newer schema or a file
    /// that is not a watch database is refused and left as it was.
    ///
    /// # Errors
    /// [`ErrorKind::Database`] naming the file;
    /// [`ErrorKind::NotWatchDatabase`] for a database written by a newer
    /// schema or a file that is not a watch database.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|e| db_err(path, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| db_err(path, e))?;
        let found = schema_of(&conn, path)?;
        if let Some(v) = found {
            refuse_newer(path, v)?;
        }
        // Before the first table exists (a no-op afterwards): freed pages
        // can be given back, so the file can shrink under --max-db-size.
        conn.execute_batch("PRAGMA auto_vacuum=INCREMENTAL")
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
        // The WAL is cut back to 4 MiB after a checkpoint: a large
        // transaction (a migration, a day rolled up) does not leave it big.
        // The writer's page cache is 512 KiB, not SQLite's 2 MiB: an
        // interval's rows are a few pages, and watch locks its memory
        // (mlockall), so every cached page counts in its RSS for months
        // (issue 31 item 2: <= 40 MB).
        conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA journal_size_limit=4194304; \
             PRAGMA cache_size=-512;",
        )
        .map_err(|e| db_err(path, e))?;
        match found {
            // A new file: its tables and version in one transaction, so
            // that no file has tables without a version.
            None => conn
                .execute_batch(&format!(
                    "BEGIN; {SCHEMA} INSERT OR REPLACE INTO meta(key, value) \
                     VALUES('schema_version', '{SCHEMA_VERSION}'); COMMIT;"
                ))
                .map_err(|e| db_err(path, e))?,
            Some(v) => {
                conn.execute_batch(SCHEMA).map_err(|e| db_err(path, e))?;
                if v < SCHEMA_VERSION {
                    migrate(&conn, v).map_err(|e| db_err(path, e))?;
                }
            }
        }
        conn.execute_batch(SCHEMA_3_INDEXES)
            .map_err(|e| db_err(path, e))?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            cols: Cols::CURRENT,
            read_only: false,
            quiet: None,
            beside_writer: std::cell::RefCell::new(None),
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

    /// Opens an existing database for reading (`report`, `check`, `show`,
    /// tests): read-only, so the file is left byte for byte as it was —
    /// whoever owns it, whatever its schema. The schema version is checked
    /// first: a newer one is refused, a file that is not a watch database
    /// too; an older one is read as it is (not migrated: the next `watch`
    /// on it migrates it). While a writer runs (its `-wal` file is there)
    /// the reader shares its WAL; otherwise the file is read as immutable,
    /// so that not even the `-wal` and `-shm` files are made.
    ///
    /// # Errors
    /// [`ErrorKind::Database`] when the file does not exist or cannot be
    /// read; [`ErrorKind::NotWatchDatabase`] when it is not a firmtime
    /// watch database of this version or older.
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
        let deadline = std::time::Instant::now() + STARTING_WRITER_WAIT;
        loop {
            match Store::reader_attempt(path)? {
                ReaderAttempt::Open(s) => return Ok(*s),
                ReaderAttempt::Starting(pid) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(starting_writer(path, pid));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }

    /// One try of [`Store::open_existing`]. With no `watch` on the file
    /// (its lock free, no `-wal`) the file is opened as immutable, and
    /// what was read is kept only if the file is still so afterwards; with
    /// a `watch` on it, as a WAL reader once its `-wal` and its tables are
    /// there (a new file's tables and version are one transaction).
    fn reader_attempt(path: &Path) -> Result<ReaderAttempt> {
        let mark = file_mark(path);
        let writer = writer_of(path);
        let wal = wal_path(path).exists();
        if let Some(pid) = writer.filter(|_| !wal) {
            // Between its lock and its switch to WAL (a new file, or one
            // it refuses): nothing of it to read yet.
            return Ok(ReaderAttempt::Starting(pid));
        }
        let quiet = writer.is_none() && !wal;
        let conn = open_read_only(path, quiet)?;
        let found = schema_of(&conn, path);
        if quiet && !still_quiet(path, &mark) {
            // A watch started on it while it was looked at (an empty file
            // it is creating is not "not a watch database").
            return Ok(ReaderAttempt::Starting(writer_of(path).flatten()));
        }
        let v = match found? {
            Some(v) => v,
            None => match writer {
                Some(pid) => return Ok(ReaderAttempt::Starting(pid)),
                None => return Err(not_watch(path, "it has no tables")),
            },
        };
        refuse_newer(path, v)?;
        // A reader goes through months of rows (a report) through memory
        // maps rather than a read call per page. Not the writer: mapped
        // pages it touches would count in watch's RSS. Not an immutable
        // reader either: a watch starting on the file may shrink it (its
        // size cap), and a mapped page past the new end would kill the
        // reader (SIGBUS) instead of failing its check.
        if !quiet {
            conn.execute_batch("PRAGMA mmap_size=268435456")
                .map_err(|e| db_err(path, e))?;
        }
        Ok(ReaderAttempt::Open(Box::new(Store {
            conn,
            path: path.to_path_buf(),
            cols: Cols { version: v },
            read_only: true,
            quiet: quiet.then_some(mark),
            beside_writer: std::cell::RefCell::new(None),
        })))
    }

    /// Runs the read `f` on this store's connection, named errors. On an
    /// immutable reader, when a `watch` started on the file during the read
    /// (what was read may mix the file before and after it wrote), `f` runs
    /// again on a reader opened beside that watch, which serves the later
    /// reads too.
    fn reading<T>(&self, f: impl Fn(&Connection, Cols) -> Result<T>) -> Result<T> {
        self.reading_dyn(&f)
    }

    fn reading_dyn<T>(&self, f: &dyn Fn(&Connection, Cols) -> Result<T>) -> Result<T> {
        if let Some(s) = self.beside_writer.borrow().as_ref() {
            return s.reading_dyn(f);
        }
        let r = f(&self.conn, self.cols);
        match &self.quiet {
            Some(mark) if !still_quiet(&self.path, mark) => {
                let again = Store::open_existing(&self.path)?;
                let r = again.reading_dyn(f);
                *self.beside_writer.borrow_mut() = Some(Box::new(again));
                r
            }
            _ => self.named(r),
        }
    }

    /// The schema version of the file as opened (a reader's may be older
    /// than [`SCHEMA_VERSION`]).
    pub fn schema_version(&self) -> i64 {
        self.cols.version
    }

    /// Whether this store was opened read-only ([`Store::open_existing`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The wake-up with row id `id` and the row it belongs to, with its
    /// full cause record (detail and parts); `None` when there is none
    /// (never stored, or rolled up and not among the worst kept).
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn wakeup(&self, id: i64) -> Result<Option<WakeupRecord>> {
        self.reading(|conn, c| -> Result<Option<WakeupRecord>> {
            let sql = format!(
                "SELECT w.{wid}, w.deadline_unix_ns, w.latency_ns, w.missed, w.category, w.name,
                        w.cause_ns, {lost}, {detail}, {parts},
                        i.id, i.run_id, i.seq, i.cpu, i.start_unix_ns, i.end_unix_ns, i.period_ns,
                        {res}, i.count, i.missed, i.max_ns, i.p999_ns, {tl}, {bd}
                 FROM wakeups w JOIN intervals i ON i.id = w.interval_id WHERE w.{wid} = ?1",
                wid = c.wakeup_id(),
                lost = c.pick(4, "w.lost_events", "NULL"),
                detail = c.pick(4, "w.detail", "NULL"),
                parts = c.pick(4, "w.parts", "NULL"),
                res = c.pick(3, "i.resolution_ns", "0"),
                tl = c.pick(4, "i.trace_lost_events", "NULL"),
                bd = c.pick(4, "w.breakdown", "NULL"),
            );
            let row = conn
                .query_row(&sql, [id], |r| {
                    Ok((
                        Wakeup {
                            id: r.get(0)?,
                            deadline_unix_ns: r.get(1)?,
                            latency_ns: r.get(2)?,
                            missed: r.get::<_, i64>(3)?.max(0) as u64,
                            category: r.get(4)?,
                            name: r.get(5)?,
                            cause_ns: r.get::<_, Option<i64>>(6)?.map(|n| n.max(0) as u64),
                            lost_events: r.get::<_, Option<i64>>(7)?.map(|n| n.max(0) as u64),
                            detail: r.get(8)?,
                            parts: Vec::new(),
                            breakdown: None,
                        },
                        (
                            r.get::<_, Option<String>>(9)?,
                            r.get::<_, Option<String>>(23)?,
                        ),
                        WakeupRecord {
                            wakeup: Wakeup::default(),
                            interval_id: r.get(10)?,
                            run_id: r.get(11)?,
                            seq: r.get::<_, i64>(12)?.max(0) as u64,
                            cpu: r.get::<_, i64>(13)?.max(0) as usize,
                            interval_start_unix_ns: r.get(14)?,
                            interval_end_unix_ns: r.get(15)?,
                            period_ns: r.get::<_, i64>(16)?.max(0) as u64,
                            resolution_ns: r.get::<_, i64>(17)?.max(0) as u64,
                            interval_count: r.get::<_, i64>(18)?.max(0) as u64,
                            interval_missed: r.get::<_, i64>(19)?.max(0) as u64,
                            interval_max_ns: r.get(20)?,
                            interval_p999_ns: r.get(21)?,
                            interval_trace_lost_events: r
                                .get::<_, Option<i64>>(22)?
                                .map(|n| n.max(0) as u64),
                        },
                    ))
                })
                .optional()?;
            let Some((mut w, (parts, breakdown), mut rec)) = row else {
                return Ok(None);
            };
            if let Some(b) = breakdown {
                w.breakdown = Some(serde_json::from_str(&b).map_err(|e| {
                    Error::new(
                        ErrorKind::Database,
                        format!("wake-up {id}: its breakdown does not parse: {e}"),
                    )
                })?);
            }
            if let Some(p) = parts {
                w.parts = serde_json::from_str(&p).map_err(|e| {
                    Error::new(
                        ErrorKind::Database,
                        format!("wake-up {id}: cause parts do not parse: {e}"),
                    )
                })?;
            }
            rec.wakeup = w;
            Ok(Some(rec))
        })
    }

    /// For a wake-up id with no record ([`Store::wakeup`] gives `None`):
    /// what remains of it when its interval was rolled up
    /// ([`RolledUpWakeup`]); `None` when the id was never given, or
    /// nothing of its time is left (deleted by `--keep` or the size cap).
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn rolled_up(&self, id: i64) -> Result<Option<RolledUpWakeup>> {
        self.reading(|conn, c| -> Result<Option<RolledUpWakeup>> {
            if id < 1 || id > ids_issued(conn, c)? || !c.has_causes() {
                return Ok(None);
            }
            let wid = c.wakeup_id();
            let neighbour = |cmp: &str, order: &str| -> Result<Option<(i64, i64, i64)>> {
                Ok(conn
                    .query_row(
                        &format!(
                            "SELECT w.{wid}, i.start_unix_ns, i.end_unix_ns
                             FROM wakeups w JOIN intervals i ON i.id = w.interval_id
                             WHERE w.{wid} {cmp} ?1 ORDER BY w.{wid} {order} LIMIT 1"
                        ),
                        [id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?)
            };
            let before = neighbour("<", "DESC")?;
            let after = neighbour(">", "ASC")?;
            if before.is_none() && after.is_none() {
                return Ok(None);
            }
            let from = before.map_or(i64::MIN, |b| b.1);
            let to = after.map_or(i64::MAX, |a| a.2);
            let rows = read_rows(
                conn,
                c,
                "resolution_ns <> 0 AND end_unix_ns > ?1 AND start_unix_ns < ?2",
                params![from, to],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(Some(RolledUpWakeup {
                id,
                kept_before: before.map(|b| b.0),
                kept_after: after.map(|a| a.0),
                from_unix_ns: from,
                to_unix_ns: to,
                rows,
            }))
        })
    }

    /// Rows (at any resolution) whose span holds a moment of `[from, to]`
    /// (Unix ns), oldest first, with their wake-ups: the stored interval
    /// (or hour, or day) of a spike, for `watch report --at`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn intervals_around(
        &self,
        from_unix_ns: i64,
        to_unix_ns: i64,
    ) -> Result<Vec<StoredInterval>> {
        self.reading(|conn, cols| {
            read_rows(
                conn,
                cols,
                "end_unix_ns >= ?1 AND start_unix_ns <= ?2",
                params![from_unix_ns, to_unix_ns],
            )
        })
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
        self.store_interval(run_id, now_unix_ns, state, &mut rows.to_vec())
    }

    /// As [`Store::write_interval`], and sets each wake-up's
    /// [`Wakeup::id`] to the id it was stored under (for the metrics'
    /// exemplars and `watch show`).
    ///
    /// # Errors
    /// [`ErrorKind::Database`]; nothing of the interval is stored then.
    pub fn store_interval(
        &mut self,
        run_id: i64,
        now_unix_ns: i64,
        state: &MachineState,
        rows: &mut [CpuInterval],
    ) -> Result<i64> {
        let r = (|| -> Result<i64> {
            let tx = self.conn.transaction()?;
            let id = insert_group(&tx, run_id, now_unix_ns, state, rows)?;
            tx.commit()?;
            Ok(id)
        })();
        self.named(r)
    }

    /// Stores `groups` interval groups, each as [`Store::write_interval`]
    /// would, all in one transaction: `make(i)` gives group `i` as `(now,
    /// state, rows)`. For importing and for generated histories (tests,
    /// benchmarks): a day of one-minute intervals is one commit, not 1440.
    ///
    /// # Errors
    /// [`ErrorKind::Database`]; nothing is stored then.
    pub fn write_bulk(
        &mut self,
        run_id: i64,
        groups: usize,
        mut make: impl FnMut(usize) -> (i64, MachineState, Vec<CpuInterval>),
    ) -> Result<()> {
        let r = (|| -> Result<()> {
            let tx = self.conn.transaction()?;
            for i in 0..groups {
                let (now, state, mut rows) = make(i);
                insert_group(&tx, run_id, now, &state, &mut rows)?;
            }
            tx.commit()?;
            Ok(())
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
        let r = self.prune_inner(before_unix_ns);
        self.named(r)
    }

    /// Applies `ret` at `now_unix_ns`, in this order: deletes what ended
    /// before `keep` ([`Store::prune`]); rolls the intervals older than
    /// `raw` up into one row per CPU, period, machine state and UTC hour,
    /// and hourly rows older than `hourly` into one per UTC day (whole
    /// hours and days only); then, while the pages in use exceed
    /// `max_bytes`, coarsens the oldest day one step (its intervals to
    /// hours, else its hours to a day, else drops it; the newest day is
    /// never dropped) until they fit in 90 % of it; and when the file is
    /// larger than `max_bytes`, gives the free pages back
    /// (`incremental_vacuum`, then a WAL checkpoint that truncates).
    ///
    /// A roll-up keeps counts, misses, steal and watch's CPU time as sums,
    /// the maximum and minimum exactly, the histogram as the bucket-wise sum
    /// (so its percentiles are those of the union), the
    /// [`ROLLUP_WORST`] worst wake-ups with their causes, and the cause
    /// counts of all its wake-ups ([`CauseCount`]).
    ///
    /// # Errors
    /// [`ErrorKind::Database`]; each step is one transaction, so an error
    /// leaves the database as the last finished step left it.
    pub fn maintain(&mut self, now_unix_ns: i64, ret: &Retention) -> Result<Maintenance> {
        let r = (|| -> Result<Maintenance> {
            let mut m = Maintenance {
                deleted: self.prune_inner(now_unix_ns.saturating_sub(ret.keep_ns as i64))?,
                ..Maintenance::default()
            };
            let h = HOUR_NS as i64;
            let d = DAY_NS as i64;
            let raw_limit = now_unix_ns.saturating_sub(ret.raw_ns as i64).div_euclid(h) * h;
            m.rolled_to_hour = self.coarsen(HOUR_NS, i64::MIN, raw_limit)?;
            let hour_limit = now_unix_ns
                .saturating_sub(ret.hourly_ns as i64)
                .div_euclid(d)
                * d;
            m.rolled_to_day = self.coarsen(DAY_NS, i64::MIN, hour_limit)?;
            let newest_day = now_unix_ns.div_euclid(d);
            if self.used_bytes()? > ret.max_bytes {
                let target = ret.max_bytes / 10 * 9;
                while self.used_bytes()? > target {
                    let oldest: Option<i64> = self
                        .conn
                        .query_row(
                            "SELECT start_unix_ns FROM intervals ORDER BY end_unix_ns LIMIT 1",
                            [],
                            |r| r.get(0),
                        )
                        .optional()?;
                    let Some(oldest) = oldest else { break };
                    let day = oldest.div_euclid(d);
                    let (lo, hi) = (day * d, day * d + d);
                    let finest: Option<i64> = self.conn.query_row(
                        "SELECT MIN(resolution_ns) FROM intervals WHERE start_unix_ns >= ?1 AND start_unix_ns < ?2",
                        [lo, hi],
                        |r| r.get(0),
                    )?;
                    match finest {
                        Some(0) => m.cap_rolled += self.coarsen(HOUR_NS, lo, hi)?,
                        Some(r) if (r as u64) < DAY_NS => {
                            m.cap_rolled += self.coarsen(DAY_NS, lo, hi)?;
                        }
                        _ if day < newest_day => {
                            let tx = self.conn.transaction()?;
                            m.cap_dropped += tx.execute(
                                "DELETE FROM intervals WHERE start_unix_ns >= ?1 AND start_unix_ns < ?2",
                                [lo, hi],
                            )?;
                            forget_unreferenced(&tx, hi)?;
                            tx.commit()?;
                        }
                        _ => break,
                    }
                }
                m.oldest_unix_ns =
                    self.conn
                        .query_row("SELECT MIN(start_unix_ns) FROM intervals", [], |r| r.get(0))?;
            }
            if self.file_bytes()? > ret.max_bytes {
                // It frees one page per step: step it to the end.
                let mut st = self.conn.prepare("PRAGMA incremental_vacuum")?;
                let mut rows = st.query([])?;
                while rows.next()?.is_some() {}
                drop(rows);
                drop(st);
                // Best effort: a reader holding an old snapshot can keep the
                // checkpoint from finishing; the next maintenance retries.
                let _: (i64, i64, i64) =
                    self.conn
                        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })?;
            }
            m.size_bytes = self.file_bytes()?;
            Ok(m)
        })();
        self.named(r)
    }

    fn prune_inner(&mut self, before_unix_ns: i64) -> Result<usize> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(
            "DELETE FROM intervals WHERE end_unix_ns < ?1",
            [before_unix_ns],
        )?;
        forget_unreferenced(&tx, before_unix_ns)?;
        tx.commit()?;
        Ok(n)
    }

    /// Pages in use (not free) times the page size, bytes.
    fn used_bytes(&self) -> Result<u64> {
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let free: i64 = self
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        let size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        Ok(((pages - free).max(0) * size.max(0)) as u64)
    }

    /// The main file's size on disk, bytes (0 when it cannot be read).
    fn file_bytes(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.path).map_or(0, |m| m.len()))
    }

    /// Merges, for every bucket of `resolution_ns` (UTC-aligned) that
    /// starts at or after `lo` and ends at or before `hi` and holds a
    /// finer row, the rows of each CPU, period and machine state in it
    /// into one row of that resolution (one transaction). Returns the rows
    /// merged.
    fn coarsen(&mut self, resolution_ns: u64, lo: i64, hi: i64) -> Result<usize> {
        let r = resolution_ns as i64;
        let tx = self.conn.transaction()?;
        let mut buckets = std::collections::BTreeSet::new();
        {
            let mut st = tx.prepare(
                "SELECT DISTINCT cpu, period_ns, state_id, start_unix_ns / ?4 FROM intervals
                 WHERE resolution_ns = ?1 AND start_unix_ns >= ?2 AND start_unix_ns < ?3",
            )?;
            for fine in [RAW, HOUR_NS].into_iter().filter(|&f| f < resolution_ns) {
                // Whole buckets only: rows up to the last bucket boundary at or before `hi`.
                let hi = hi.div_euclid(r) * r;
                let rows = st.query_map(params![fine as i64, lo, hi, r], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                    ))
                })?;
                for b in rows {
                    buckets.insert(b?);
                }
            }
        }
        let finer = [RAW, HOUR_NS, DAY_NS]
            .iter()
            .filter(|&&f| f <= resolution_ns)
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let mut merged_rows = 0;
        for (cpu, period, state_id, b) in buckets {
            // `resolution_ns IN (…)` rather than `<= r`: the index on
            // (resolution_ns, start_unix_ns) then finds the bucket's rows.
            let rows = read_rows(
                &tx,
                Cols::CURRENT,
                &format!(
                    "resolution_ns IN ({finer}) AND start_unix_ns >= ?4 AND start_unix_ns < ?5
                     AND cpu = ?1 AND period_ns = ?2 AND state_id = ?3"
                ),
                params![cpu, period, state_id, b * r, b * r + r],
            )?;
            if rows.is_empty() {
                continue;
            }
            let m = merge_rows(&rows, resolution_ns);
            // The new row first: the wake-ups it keeps move to it (ids,
            // details and parts kept), the rest go with the old rows.
            insert_row(&tx, m.run_id, state_id, &m)?;
            for s in &rows {
                tx.execute("DELETE FROM intervals WHERE id = ?1", [s.id])?;
            }
            merged_rows += rows.len();
        }
        tx.commit()?;
        Ok(merged_rows)
    }

    /// Intervals that ended at or after `since_unix_ns`, oldest first, with
    /// their wake-ups (and a rolled-up row's causes).
    ///
    /// # Errors
    /// [`ErrorKind::Database`], or a stored histogram that does not parse.
    pub fn intervals_since(&self, since_unix_ns: i64) -> Result<Vec<StoredInterval>> {
        self.reading(|conn, cols| {
            read_rows(conn, cols, "end_unix_ns >= ?1", params![since_unix_ns])
        })
    }

    /// Machine states seen at or after `since_unix_ns`, plus the one in
    /// force then, oldest first: `(seen Unix ns, state)`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn states_since(&self, since_unix_ns: i64) -> Result<Vec<(i64, MachineState)>> {
        self.reading(|conn, _| -> Result<Vec<(i64, MachineState)>> {
            let mut st = conn.prepare(
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
        })
    }

    /// Counts rows of `table` (`intervals`, `wakeups`, `states`, `runs`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for another table name.
    pub fn count(&self, table: &str) -> Result<u64> {
        self.reading(|conn, _| -> Result<u64> {
            if !["intervals", "wakeups", "states", "runs"].contains(&table) {
                return Err(crate::error::invalid(format!("no table {table}")));
            }
            let n: i64 =
                conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    /// The database's size in pages times the page size, bytes: what it
    /// takes once checkpointed, free pages (reused by later rows) included.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn size_bytes(&self) -> Result<u64> {
        self.reading(|conn, _| -> Result<u64> {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages.max(0) * size.max(0)) as u64)
        })
    }

    /// The runs: `(id, started, ended, end reason)`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn runs(&self) -> Result<Vec<RunRow>> {
        self.reading(|conn, _| -> Result<Vec<RunRow>> {
            let mut st = conn.prepare(
                "SELECT id, started_unix_ns, ended_unix_ns, end_reason FROM runs ORDER BY id",
            )?;
            let v = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(v)
        })
    }

    /// Runs `PRAGMA integrity_check`; `Ok` when it says `ok`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`] with what the check found.
    pub fn integrity_check(&self) -> Result<()> {
        self.reading(|conn, _| -> Result<()> {
            let r: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            if r == "ok" {
                Ok(())
            } else {
                Err(Error::new(
                    ErrorKind::Database,
                    format!("integrity check: {r}"),
                ))
            }
        })
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

    /// The fast reader agrees with serde_json on what this crate writes,
    /// and leaves anything else to it.
    #[test]
    fn stored_histograms_read_as_serde_json_reads_them() {
        for h in [
            vec![],
            vec![(0, 1)],
            vec![(5_000, 2), (13_000, 1), (i64::MAX, 7)],
            vec![(-3, 0), (1_000_000, u64::MAX >> 1)],
        ] {
            let text = serde_json::to_string(&h).unwrap();
            assert_eq!(parse_sparse(&text), Some(h.clone()), "{text}");
            assert_eq!(serde_json::from_str::<Sparse>(&text).unwrap(), h);
        }
        for odd in [
            "",
            "[",
            "[[1,2]",
            "[[1,2],]",
            "[[1,-2]]",
            "[ [1,2]]",
            "[[1,2]]x",
            "[[99999999999999999999,1]]",
        ] {
            assert_eq!(parse_sparse(odd), None, "{odd}");
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
