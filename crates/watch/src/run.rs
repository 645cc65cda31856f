//! `firmtime watch`: the long-running monitor.
//!
//! One SCHED_FIFO thread per chosen CPU (pinned, memory locked, the
//! requested policy or an error: never a silent downgrade) wakes every
//! `period` ([`WatchLoop`](crate::interval::WatchLoop)); every `interval`
//! the writer (this thread) takes each CPU's buffer, attributes the worst
//! wake-ups from the explaining trace when it runs, and stores the
//! interval in the database in one transaction ([`Store`]), then prunes
//! what is older than `keep`.
//!
//! [`run`] is the list of steps; each lives beside it:
//! - `lanes`: the measuring threads and the writer's end of their rings
//!   (started behind two barriers: all set up, then all started on one
//!   grid), the buffers handed out and collected, grouped by interval;
//! - `explaining`: the explaining trace, one session per interval
//!   ([`explain::Rotation`]: the next interval's in the storage of an
//!   earlier one), the notes each buffer flags into it, the causes of an
//!   interval's worst wake-ups once its buffers are back;
//! - `writer`: per interval group, watch's own CPU time, the rows, the
//!   budget notice, the store and the metrics, and the run's end.

mod explaining;
mod lanes;
mod writer;

use crate::error::{invalid, Error, ErrorKind, Result};
use crate::metrics::Totals;
use crate::store::{CpuInterval, Retention, RunInfo, Store, Wakeup, MAX_DB_BYTES};
use explaining::Explaining;
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::RtConditions;
use firmtime_trace::explain;
use lanes::Lanes;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use writer::{Grid, MachineFacts, Sink, Writer};

/// Valid `--period` range, ns (100 µs … 1 s).
pub const PERIOD_NS: std::ops::RangeInclusive<u64> = 100_000..=1_000_000_000;
/// Valid `--store-every` range, ns (1 s … 1 h).
pub const INTERVAL_NS: std::ops::RangeInclusive<u64> = 1_000_000_000..=3_600_000_000_000;
/// Valid `--keep` range, ns (1 min … 10 years).
pub const KEEP_NS: std::ops::RangeInclusive<u64> = 60_000_000_000..=315_360_000_000_000_000;
/// How often the writer looks at the loops' rings.
const WRITER_TICK: Duration = Duration::from_millis(200);
/// Valid `--budget` range, % of a CPU.
pub const BUDGET_PERCENT: std::ops::RangeInclusive<f64> = 0.01..=100.0;
/// Valid `--worst` range (wake-ups kept per CPU and interval).
pub const WORST: std::ops::RangeInclusive<usize> = 1..=1000;

/// Whether to run the explaining trace: the one mode type of every command
/// that explains (`auto`: when root and tracefs allow it, otherwise the
/// worst wake-ups are stored without causes and the run says why once;
/// `on`: an error when it cannot run; `off`).
pub use firmtime_trace::explain::ExplainMode;

/// What to watch.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The database file (`--db`).
    pub db: PathBuf,
    /// Period of the wake-ups (`--period`), default 10 ms.
    pub period_ns: u64,
    /// Storage interval (`--store-every`, old spelling `--interval`), default 1 min.
    pub interval_ns: u64,
    /// Stop after this long (`--duration`); `None`: until stopped.
    pub duration_ns: Option<u64>,
    /// Policy of the measuring threads (`--priority`), default `fifo:80`.
    pub policy: Policy,
    /// CPUs to watch (`--cpu`); `None`: every online CPU.
    pub cpus: Option<Vec<usize>>,
    /// CPUs of the housekeeping threads — the writer, the metrics endpoint,
    /// the explaining trace's drainer — (`--housekeeping-cpu`); `None`:
    /// the online CPUs not watched, or the first watched CPU when every
    /// CPU is watched ([`Config::housekeeping`]).
    pub housekeeping_cpus: Option<Vec<usize>>,
    /// Hold `/dev/cpu_dma_latency` at this many µs while watching
    /// (`--dma-latency`; cyclictest holds 0): the CPUs then skip the idle
    /// states that exit slower. `None` (default): leave the idle states
    /// alone (a fleet's machines would burn power otherwise).
    pub dma_latency_us: Option<u32>,
    /// Nothing older is kept, at any resolution (`--keep`), default 3650
    /// days (10 years: in practice `--max-db-size` decides).
    pub keep_ns: u64,
    /// Intervals are kept as stored this long, then rolled up into hours
    /// (`--keep-raw`), default 7 days.
    pub keep_raw_ns: u64,
    /// Hourly roll-ups are kept this long, then rolled up into days
    /// (`--keep-hourly`), default 90 days.
    pub keep_hourly_ns: u64,
    /// The cap on the database file (`--max-db-size`), bytes, default 256 MiB.
    pub max_db_bytes: u64,
    /// Worst wake-ups kept per CPU and interval (`--worst`), default 10.
    pub worst: usize,
    /// The explaining trace (`--explain`), default auto.
    pub explain: ExplainMode,
    /// The share of each watched CPU `watch` may use, % (`--budget`),
    /// default 0.5: an interval above it gets a notice naming a period
    /// that fits.
    pub budget_percent: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            db: PathBuf::from("/var/lib/firmtime/watch.db"),
            period_ns: 10_000_000,
            interval_ns: 60_000_000_000,
            duration_ns: None,
            policy: Policy::Fifo { priority: 80 },
            cpus: None,
            housekeeping_cpus: None,
            dma_latency_us: None,
            keep_ns: 3650 * 86_400_000_000_000,
            keep_raw_ns: 7 * 86_400_000_000_000,
            keep_hourly_ns: 90 * 86_400_000_000_000,
            max_db_bytes: 256 << 20,
            worst: 10,
            explain: ExplainMode::Auto,
            budget_percent: 0.5,
        }
    }
}

fn range_err<T: std::fmt::Display>(flag: &str, v: T, lo: T, hi: T) -> Error {
    invalid(format!("{flag} {v} is out of range: valid is {lo} to {hi}"))
}

fn fmt_ns(ns: u64) -> String {
    crate::report::dur_words(ns as i64)
}

impl Config {
    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the flag.
    pub fn validate(&self) -> Result<()> {
        let check = |flag: &str, v: u64, r: &std::ops::RangeInclusive<u64>| {
            if r.contains(&v) {
                Ok(())
            } else {
                Err(range_err(
                    flag,
                    fmt_ns(v),
                    fmt_ns(*r.start()),
                    fmt_ns(*r.end()),
                ))
            }
        };
        check("--period", self.period_ns, &PERIOD_NS)?;
        check("--store-every", self.interval_ns, &INTERVAL_NS)?;
        check("--keep", self.keep_ns, &KEEP_NS)?;
        check("--keep-raw", self.keep_raw_ns, &KEEP_NS)?;
        check("--keep-hourly", self.keep_hourly_ns, &KEEP_NS)?;
        if !MAX_DB_BYTES.contains(&self.max_db_bytes) {
            return Err(range_err(
                "--max-db-size",
                crate::report::size_words(self.max_db_bytes),
                crate::report::size_words(*MAX_DB_BYTES.start()),
                crate::report::size_words(*MAX_DB_BYTES.end()),
            ));
        }
        if self.keep_hourly_ns < self.keep_raw_ns {
            return Err(invalid(format!(
                "--keep-hourly {} is shorter than --keep-raw ({}): intervals become hours before hours become days",
                fmt_ns(self.keep_hourly_ns),
                fmt_ns(self.keep_raw_ns)
            )));
        }
        if self.keep_raw_ns < self.interval_ns {
            return Err(invalid(format!(
                "--keep-raw {} is shorter than one --store-every ({})",
                fmt_ns(self.keep_raw_ns),
                fmt_ns(self.interval_ns)
            )));
        }
        if !BUDGET_PERCENT.contains(&self.budget_percent) {
            return Err(range_err(
                "--budget",
                format!("{} %", self.budget_percent),
                format!("{} %", BUDGET_PERCENT.start()),
                format!("{} %", BUDGET_PERCENT.end()),
            ));
        }
        if self.interval_ns % self.period_ns != 0 {
            return Err(invalid(format!(
                "--store-every {} must be a whole number of --period ({})",
                fmt_ns(self.interval_ns),
                fmt_ns(self.period_ns)
            )));
        }
        if self.keep_ns < self.interval_ns {
            return Err(invalid(format!(
                "--keep {} is shorter than one --store-every ({})",
                fmt_ns(self.keep_ns),
                fmt_ns(self.interval_ns)
            )));
        }
        if let Some(d) = self.duration_ns {
            if d < self.period_ns {
                return Err(invalid(format!(
                    "--duration {} is shorter than one --period ({})",
                    fmt_ns(d),
                    fmt_ns(self.period_ns)
                )));
            }
        }
        if !WORST.contains(&self.worst) {
            return Err(range_err("--worst", self.worst, 1, 1000));
        }
        if !self.policy.is_rt_or_deadline() || matches!(self.policy, Policy::Deadline { .. }) {
            return Err(invalid(format!(
                "--priority {}: watch measures a real-time thread: valid are fifo:1..99 and rr:1..99",
                self.policy
            )));
        }
        self.policy
            .validate()
            .map_err(|e| invalid(format!("--priority {}: {}", self.policy, e.message())))?;
        if let Some(c) = &self.cpus {
            let online = sched::online_cpus();
            if c.is_empty() {
                return Err(invalid("--cpu is empty"));
            }
            if let Some(bad) = c.iter().find(|c| !online.contains(c)) {
                return Err(invalid(format!(
                    "--cpu: CPU {bad} is not online: valid are {}",
                    sched::format_cpu_list(&online)
                )));
            }
        }
        if let Some(c) = &self.housekeeping_cpus {
            let online = sched::online_cpus();
            if c.is_empty() {
                return Err(invalid("--housekeeping-cpu is empty"));
            }
            if let Some(bad) = c.iter().find(|c| !online.contains(c)) {
                return Err(invalid(format!(
                    "--housekeeping-cpu: CPU {bad} is not online: valid are {}",
                    sched::format_cpu_list(&online)
                )));
            }
        }
        Ok(())
    }

    /// The CPUs watched.
    pub fn selected_cpus(&self) -> Vec<usize> {
        let mut v = self.cpus.clone().unwrap_or_else(sched::online_cpus);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The CPUs of the housekeeping threads: `--housekeeping-cpu`, else
    /// the `online` CPUs not in `watched`, else (every CPU watched) the
    /// first watched CPU — so that the other watched CPUs carry their own
    /// measuring thread only, as each of cyclictest's does (pure: tested).
    pub fn housekeeping(&self, watched: &[usize], online: &[usize]) -> Vec<usize> {
        if let Some(h) = &self.housekeeping_cpus {
            let mut h = h.clone();
            h.sort_unstable();
            h.dedup();
            return h;
        }
        let free: Vec<usize> = online
            .iter()
            .copied()
            .filter(|c| !watched.contains(c))
            .collect();
        if free.is_empty() {
            watched.iter().copied().min().into_iter().collect()
        } else {
            free
        }
    }

    /// The retention policy of `--keep`, `--keep-raw`, `--keep-hourly` and
    /// `--max-db-size`.
    pub fn retention(&self) -> Retention {
        Retention {
            keep_ns: self.keep_ns,
            raw_ns: self.keep_raw_ns,
            hourly_ns: self.keep_hourly_ns,
            max_bytes: self.max_db_bytes,
        }
    }

    fn deadlines(&self) -> u64 {
        self.duration_ns.map_or(u64::MAX, |d| d / self.period_ns)
    }
}

/// What the writer tells its caller (one line each in the journal).
#[derive(Debug, Clone)]
pub enum Event {
    /// The threads run; the conditions obtained per CPU.
    Started {
        /// `(cpu, conditions)`.
        conditions: Vec<(usize, RtConditions)>,
        /// Whether the explaining trace runs, and if not why.
        explain: std::result::Result<(), String>,
    },
    /// One interval stored.
    Stored(Vec<CpuInterval>),
    /// Intervals older than `--keep` were deleted.
    Pruned(usize),
    /// Something the user should know (the trace failed for an interval, …).
    Notice(String),
}

/// How the run ended.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The run's id in the database.
    pub run_id: i64,
    /// Interval groups stored.
    pub intervals: u64,
    /// True when stopped by the stop flag.
    pub stopped: bool,
}

/// What the size cap made `maintain` do, in words.
fn cap_notice(m: &crate::store::Maintenance, config: &Config) -> String {
    format!(
        "the database reached --max-db-size {}: {} rows rolled up before their time, {} rows of the oldest days dropped; it now starts at {} ({})",
        crate::report::size_words(config.max_db_bytes),
        m.cap_rolled,
        m.cap_dropped,
        m.oldest_unix_ns.map_or("-".into(), crate::report::utc),
        crate::report::size_words(m.size_bytes)
    )
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Stack of watch's own threads (the measuring loops, the metrics
/// endpoint's): 512 KiB, not Rust's 2 MiB, since mlockall locks every page
/// of every stack (RSS <= 40 MB, issue 31 item 2).
pub(crate) const THREAD_STACK: usize = 512 * 1024;

/// This process's CPU time (every thread, living or ended), ns.
fn process_cpu_ns() -> u64 {
    firmtime_rt::clock::read_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU time of the process not spent in the measuring threads nor in
/// the metrics endpoint, split evenly over the measuring threads:
/// `process` ns in all, `endpoint` the endpoint's (accounted apart:
/// `firmtime_watch_endpoint_cpu_seconds`), `own` each thread's (pure:
/// unit-tested).
pub fn shared_cpu_ns(process: u64, endpoint: u64, own: impl Iterator<Item = u64>) -> u64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for o in own {
        sum += o;
        n += 1;
    }
    process.saturating_sub(sum).saturating_sub(endpoint) / n.max(1)
}

/// The wake-up periods a notice suggests: 100 µs, 200 µs, 500 µs, 1 ms …
/// 1 s (1-2-5 steps, each a divisor of a minute).
fn period_steps_ns() -> impl Iterator<Item = u64> {
    (0..5u32)
        .flat_map(|k| [1u64, 2, 5].map(|m| m * 100_000 * 10u64.pow(k)))
        .take_while(|&p| p <= 1_000_000_000)
}

/// A notice when a whole interval of `rows` used more of a watched CPU than
/// `--budget`, naming the shortest period that would fit at the CPU time a
/// wake-up cost (pure: unit-tested).
pub fn over_budget(rows: &[CpuInterval], config: &Config) -> Option<String> {
    let worst = rows
        .iter()
        .filter(|r| !r.partial && r.count > 0)
        .filter_map(|r| {
            let wall = config.interval_ns * (1 + r.merged);
            let used = r.watch_cpu_ns?;
            Some((r, 100.0 * used as f64 / wall as f64, used / r.count))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (r, pct, per_wakeup) = worst;
    if pct <= config.budget_percent {
        return None;
    }
    let need = (per_wakeup as f64 * 100.0 / config.budget_percent).ceil() as u64;
    let fits = period_steps_ns()
        .find(|&p| p >= need && p > config.period_ns && config.interval_ns % p == 0);
    let advice = match fits {
        Some(p) => format!("--period {} or longer fits", fmt_ns(p)),
        None => "no period up to 1 s fits; raise --budget or watch fewer CPUs (--cpu)".into(),
    };
    Some(format!(
        "over budget: watch itself used {pct:.2} % of CPU {} in interval {} (--budget {} %), {} of CPU per wake-up: {advice}",
        r.cpu,
        r.seq,
        config.budget_percent,
        crate::report::fmt_ns(per_wakeup as i64),
    ))
}

/// Events the kernel lost from the explaining trace on `cpu` in `[a, b]`
/// (trace clock, ns): what a row's `trace_lost_events` stores. A loss
/// that could not be located in time covers its CPU's whole session and
/// so counts in every interval of it (pure: unit-tested).
pub fn interval_lost(losses: &[firmtime_trace::loss::Loss], cpu: usize, a: u64, b: u64) -> u64 {
    let mine: Vec<firmtime_trace::loss::Loss> = losses
        .iter()
        .filter(|l| usize::from(l.cpu) == cpu)
        .copied()
        .collect();
    firmtime_trace::loss::lost_between(&mine, a, b)
}

/// The stored form of a wake-up `latency_ns` late (`missed` deadlines)
/// whose deadline was `deadline_unix_ns`, explained as `cause`: its
/// category, name, time, sentence and parts, and the events the trace lost
/// in its span (then the cause is `unknown`, `trace lost events`, never a
/// guess) (pure: tested).
pub fn stored_cause(
    cause: &explain::Cause,
    deadline_unix_ns: i64,
    latency_ns: i64,
    missed: u64,
) -> Wakeup {
    Wakeup {
        id: None,
        deadline_unix_ns,
        latency_ns,
        missed,
        category: Some(cause.category.key().to_string()),
        name: Some(cause.name.clone()),
        cause_ns: Some(cause.ns),
        lost_events: cause.lost_events,
        detail: (!cause.detail.is_empty()).then(|| cause.detail.clone()),
        parts: cause
            .parts
            .iter()
            .map(|p| crate::store::CausePart {
                category: p.category.key().to_string(),
                name: p.name.clone(),
                pid: p.pid,
                prio: p.prio,
                ns: p.ns,
            })
            .collect(),
        breakdown: serde_json::to_value(&cause.breakdown)
            .ok()
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty())),
    }
}

/// Runs the watch until `stop` is set or `--duration` is over (see the
/// module docs). `events` is called from this (non-RT) thread.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; [`ErrorKind::Realtime`]
/// when a thread's policy or memory locking is refused;
/// [`ErrorKind::Database`] when the database cannot be opened or written
/// (intervals already stored stay); [`ErrorKind::InUse`] when another
/// watch writes it ([`crate::lock`]).
pub fn run(
    config: &Config,
    command_line: &str,
    stop: &'static AtomicBool,
    totals: Option<Arc<Mutex<Totals>>>,
    events: &mut dyn FnMut(Event),
) -> Result<Summary> {
    config.validate()?;
    let cpus = config.selected_cpus();
    let housekeeping = config.housekeeping(&cpus, &sched::online_cpus());
    // Every thread there is now (this one, the metrics endpoint's) and
    // every one started from here on (the drainers: `drainer_cpus`) runs
    // on the housekeeping CPUs; the measuring threads pin themselves.
    pin_housekeeping(&housekeeping)?;
    // One writer per database: a second watch is refused naming the first.
    let _writer = crate::lock::WriterLock::acquire(&config.db)?;
    let mut store = Store::open(&config.db)?;
    let explain_ok = explain_decision(config.explain)?;
    let machine = MachineFacts::read();
    let mut trace = Explaining::new(config, explain_ok.is_ok(), &housekeeping);
    // Interval 0's session and buffers, before the threads start.
    trace.start_first(cpus.len())?;
    let mut lanes = Lanes::spawn(config, &cpus, |cpu| trace.notes(0, cpu), stop)?;
    let conditions = lanes.set_up()?;
    // Every measuring thread has locked the process's memory (the last
    // mlockall): what none of watch's threads runs leaves the lock.
    let unlocked = firmtime_rt::memory::unlock_unused(UNUSED_LIBRARIES).unwrap_or_default();
    let started_unix = unix_now_ns();
    let run_id = store.begin_run(&run_info(config, command_line, &conditions, started_unix))?;
    let grid = lanes.start(config);
    open_metrics(totals.as_ref(), &cpus, config, started_unix);
    events(Event::Started {
        conditions,
        explain: explain_ok,
    });
    events(Event::Notice(format!(
        "memory: locked, but for {} KiB of unwinding tables and {} KiB of libraries watch never \
         calls ({})",
        unlocked.unwind_bytes / 1024,
        unlocked.library_bytes / 1024,
        UNUSED_LIBRARIES.join(", ")
    )));
    events(Event::Notice(format!(
        "housekeeping (the writer, the metrics endpoint, the explaining trace's drainer) on CPU {} \
         (--housekeeping-cpu); each measuring thread alone on its CPU",
        sched::format_cpu_list(&housekeeping)
    )));
    let sink = Sink {
        store,
        run_id,
        totals,
    };
    let mut writer = Writer::new(config, &cpus, grid, sink, machine);
    loop {
        // The writer's own wake-ups are part of watch's cost: five a second
        // (not twenty) is soon enough to hand out buffers `lead` ahead and
        // to collect a minute's rows.
        std::thread::sleep(WRITER_TICK);
        writer.hand_out_next(&mut lanes, &mut trace, events);
        lanes.collect();
        while let Some(group) = lanes.next_group() {
            writer.write(group, &mut lanes, &mut trace, stop, events);
        }
        if lanes.drained() {
            break;
        }
    }
    let failed = lanes.join();
    writer.end(failed, stop.load(Ordering::SeqCst))
}

/// Shared libraries firmtime links that no `watch` thread calls (ALSA is
/// for `midi` and `tap`): left out of the memory lock
/// ([`firmtime_rt::memory::unlock_unused`]), about 1 MB.
const UNUSED_LIBRARIES: &[&str] = &["libasound.so"];

/// Pins every thread of this process to `cpus` (`--housekeeping-cpu`):
/// called before the measuring threads start, so these are all
/// housekeeping threads; threads started later inherit the CPUs.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming `--housekeeping-cpu` when the kernel
/// refuses the CPUs (e.g. a cpuset that excludes them).
fn pin_housekeeping(cpus: &[usize]) -> Result<()> {
    let tids: Vec<i32> = std::fs::read_dir("/proc/self/task")
        .map_err(|e| Error::new(ErrorKind::Io, format!("/proc/self/task: {e}")))?
        .filter_map(|d| d.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for tid in tids {
        match sched::set_thread_affinity(tid, cpus) {
            Ok(()) => {}
            // A thread that ended meanwhile needs no place.
            Err(e) if e.errno() == Some(libc::ESRCH) => {}
            Err(e) => {
                return Err(invalid(format!(
                    "--housekeeping-cpu {}: {}",
                    sched::format_cpu_list(cpus),
                    e.message()
                )))
            }
        }
    }
    Ok(())
}

/// What `--explain` decides here: `Ok` to run the explaining trace, `Err`
/// why not (the run goes on without causes).
///
/// # Errors
/// `--explain on` where the trace cannot run.
fn explain_decision(mode: ExplainMode) -> Result<std::result::Result<(), String>> {
    match mode.decide(explain::available) {
        explain::Decision::Run => Ok(Ok(())),
        explain::Decision::Skip(why) => Ok(Err(why)),
        explain::Decision::Refuse(why) => {
            Err(Error::new(ErrorKind::Io, format!("--explain on: {why}")))
        }
    }
}

/// The run's row in the database: when, which firmtime, how it was
/// called, the config and the conditions each thread obtained.
fn run_info(
    config: &Config,
    command_line: &str,
    conditions: &[(usize, RtConditions)],
    started_unix_ns: i64,
) -> RunInfo {
    RunInfo {
        started_unix_ns,
        firmtime_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line: command_line.to_string(),
        config: serde_json::to_string(config).unwrap_or_default(),
        conditions: serde_json::to_string(conditions).unwrap_or_default(),
    }
}

/// Opens the metrics' series of a run: every watched CPU's at 0, so that a
/// scraper sees each counter rise from zero, and what an alert reads (the
/// interval, and the last interval's end: the start until the first is
/// stored).
fn open_metrics(
    totals: Option<&Arc<Mutex<Totals>>>,
    cpus: &[usize],
    config: &Config,
    started_unix_ns: i64,
) {
    if let Some(t) = totals {
        let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
        for &c in cpus {
            t.cpus.entry(c).or_default();
        }
        t.interval_ns = config.interval_ns;
        t.last_interval_end_unix_ns = Some(started_unix_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    #[test]
    fn housekeeping_goes_to_the_cpus_not_watched_else_the_first_watched() {
        let c = Config::default();
        assert_eq!(c.housekeeping(&[2, 3], &[0, 1, 2, 3]), [0, 1]);
        assert_eq!(c.housekeeping(&[1, 0], &[0, 1]), [0], "every CPU watched");
        assert_eq!(c.housekeeping(&[3], &[3]), [3]);
        let named = Config {
            housekeeping_cpus: Some(vec![3, 1, 3]),
            ..Config::default()
        };
        assert_eq!(named.housekeeping(&[0, 1], &[0, 1, 2, 3]), [1, 3]);
    }

    #[test]
    fn a_housekeeping_cpu_list_is_checked_like_cpu() {
        let empty = Config {
            housekeeping_cpus: Some(vec![]),
            ..Config::default()
        };
        assert!(empty
            .validate()
            .unwrap_err()
            .message()
            .contains("--housekeeping-cpu is empty"));
        let offline = Config {
            housekeeping_cpus: Some(vec![4096]),
            ..Config::default()
        };
        let e = offline.validate().unwrap_err();
        assert!(
            e.message()
                .starts_with("--housekeeping-cpu: CPU 4096 is not online: valid are "),
            "{}",
            e.message()
        );
    }
}
