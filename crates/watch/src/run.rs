//! `firmtime watch`: the long-running monitor.
//!
//! One SCHED_FIFO thread per chosen CPU (pinned, memory locked, the
//! requested policy or an error: never a silent downgrade) wakes every
//! `period` ([`WatchLoop`]); every `interval` the writer (this thread)
//! takes each CPU's buffer, attributes the worst wake-ups from the
//! explaining trace when it runs, and stores the interval in the database
//! in one transaction ([`Store`]), then prunes what is older than `keep`.

use crate::error::{invalid, Error, ErrorKind, Result};
use crate::interval::{rings, Interval, LoopEnd, WatchLoop};
use crate::metrics::Totals;
use crate::state;
use crate::store::{CpuInterval, MachineState, Retention, RunInfo, Store, Wakeup, MAX_DB_BYTES};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::outliers::Notes;
use firmtime_rt::periodic::Periodic;
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::sleep::{self, Mechanism};
use firmtime_trace::explain;
use rtrb::{Consumer, Producer};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
        Ok(())
    }

    /// The CPUs watched.
    pub fn selected_cpus(&self) -> Vec<usize> {
        let mut v = self.cpus.clone().unwrap_or_else(sched::online_cpus);
        v.sort_unstable();
        v.dedup();
        v
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

/// Buffers, rings and the session tag of each buffer, per thread.
struct Lane {
    cpu: usize,
    free: Producer<Box<Interval>>,
    full: Consumer<Box<Interval>>,
    // Boxed: the buffers travel through the rings as pointers.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Interval>>,
    tid: i32,
    slack_ns: u64,
    ended: Arc<AtomicBool>,
}

/// Stack of watch's own threads (the measuring loops, the metrics
/// endpoint's): 512 KiB, not Rust's 2 MiB, since mlockall locks every page
/// of every stack (RSS <= 40 MB, issue 31 item 2).
pub(crate) const THREAD_STACK: usize = 512 * 1024;

/// One explaining session and the buffers bound to it still out.
struct Traced {
    session: explain::Session,
    outstanding: usize,
}

/// Starts the explaining session of one interval, in the storage of an
/// earlier one where `pool` has it (two sessions live at a boundary: the
/// next starts before the last finishes; with the pool that is two
/// storages for the whole run, not a fresh one per interval).
fn start_session(worst: usize, pool: &explain::Pool) -> Result<explain::Session> {
    let cfg = explain::Config {
        worst,
        // Windows are short (a few periods); a modest store per interval
        // (~3.4 MB) and the least pending queues (32,768 events a CPU,
        // 300 ms at ~100,000 events/s; more is a counted hole, never a
        // guess): RSS <= 40 MB with two sessions live (issue 31 item 2).
        max_events: 50_000,
        pending_events: 0,
        // The windows its threads flag: the worst few so far, the missed
        // deadlines (more are counted as flags lost).
        max_windows: 16_384,
        buffer_kb: 1024,
        // Its threads wake only by their own timer.
        woken_by: explain::WokenBy::OwnTimer,
        // A quiet machine's buffers fill slowly: one pass a second then,
        // not fifty (the drainer's wake-ups were most of the trace's cost).
        drain_interval_max_ns: 1_000_000_000,
        ..explain::Config::default()
    };
    Ok(explain::Session::start_pooled(
        &cfg,
        "firmtime-watch*",
        pool,
    )?)
}

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
    // One writer per database: a second watch is refused naming the first.
    let _writer = crate::lock::WriterLock::acquire(&config.db)?;
    let mut store = Store::open(&config.db)?;
    let explain_ok: std::result::Result<(), String> =
        match config.explain.decide(explain::available) {
            explain::Decision::Run => Ok(()),
            explain::Decision::Skip(why) => Err(why),
            explain::Decision::Refuse(why) => {
                return Err(Error::new(ErrorKind::Io, format!("--explain on: {why}")))
            }
        };
    let tracing = explain_ok.is_ok();
    let sys = firmtime_rt::system::SystemInfo::collect();
    let preempt0 = sys.preempt_model.name().to_string();
    let virt = sys
        .virtualization
        .clone()
        .unwrap_or_else(|| "unknown".into());
    let machine = explain::this_machine();
    let per_interval = config.interval_ns / config.period_ns;
    let deadlines = config.deadlines();
    let top = explain::flag_top(per_interval, config.worst);
    let lookback = explain::lookback_ns(config.period_ns);

    // Interval 0's session and buffers, before the threads start.
    let mut sessions: BTreeMap<u64, Traced> = BTreeMap::new();
    let pool = explain::Pool::new();
    if tracing {
        sessions.insert(
            0,
            Traced {
                session: start_session(config.worst, &pool)?,
                outstanding: cpus.len(),
            },
        );
    }
    let make_notes = |sessions: &BTreeMap<u64, Traced>, tag: u64, cpu: usize| -> Notes {
        match sessions.get(&tag) {
            Some(t) => {
                Notes::flagging(config.worst, t.session.flags(), cpu, lookback).flag_only(top, None)
            }
            None => Notes::new(config.worst),
        }
    };

    let start_at = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(cpus.len() + 1));
    let mut lanes = Vec::new();
    let mut handles = Vec::new();
    let (ctx, crx) = std::sync::mpsc::channel::<(usize, Result<RtConditions>)>();
    for (i, &cpu) in cpus.iter().enumerate() {
        let (fp, fc, up, uc) = rings(4);
        let mut first = Box::new(Interval::new(config.worst));
        first.notes = make_notes(&sessions, 0, cpu);
        first.tag = 0;
        let spare = (0..3)
            .map(|_| Box::new(Interval::new(config.worst)))
            .collect();
        let lp = WatchLoop::new(first, fc, up, per_interval);
        let ended = Arc::new(AtomicBool::new(false));
        lanes.push(Lane {
            cpu,
            free: fp,
            full: uc,
            spare,
            tid: 0,
            slack_ns: 0,
            ended: Arc::clone(&ended),
        });
        let req = RtRequest {
            policy: config.policy,
            mlock: true,
            prefault_stack: 256 * 1024,
            cpus: Some(vec![cpu]),
            dma_latency_us: None,
            timer_slack_ns: None,
            allow_downgrade: false,
        };
        let (b, s, tx) = (Arc::clone(&barrier), Arc::clone(&start_at), ctx.clone());
        let period = config.period_ns;
        let h = std::thread::Builder::new()
            .name(format!("firmtime-watch-{cpu}"))
            .stack_size(THREAD_STACK)
            .spawn(move || {
                let mut lp = lp;
                let setup = setup::apply(&req).map_err(Error::from).and_then(|rt| {
                    let sl = sleep::open(Mechanism::ClockNanosleep)?;
                    Ok((rt, sl))
                });
                let (rt, mut sleeper) = match setup {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = tx.send((i, Err(e)));
                        b.wait();
                        b.wait();
                        ended.store(true, Ordering::SeqCst);
                        return LoopEnd::Stopped;
                    }
                };
                let _ = tx.send((i, Ok(rt.conditions.clone())));
                b.wait(); // all set up
                b.wait(); // start time published (0: abort)
                let t0 = s.load(Ordering::SeqCst);
                if t0 == 0 {
                    ended.store(true, Ordering::SeqCst);
                    return LoopEnd::Stopped;
                }
                let mut p = Periodic::new(t0, period);
                let end = firmtime_rt::assert_rt::no_alloc(|| {
                    lp.run(&mut *sleeper, &mut p, deadlines, stop)
                });
                ended.store(true, Ordering::SeqCst);
                end
            })
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot start a watch thread: {e}")))?;
        handles.push(h);
    }
    drop(ctx);
    barrier.wait();
    let mut conditions: Vec<(usize, RtConditions)> = Vec::new();
    let mut refused: Option<Error> = None;
    for (i, r) in crx.iter().take(cpus.len()) {
        match r {
            Ok(c) => {
                lanes[i].tid = c.obtained.tid;
                lanes[i].slack_ns = c.obtained.timer_slack_ns;
                conditions.push((cpus[i], c));
            }
            Err(e) => {
                refused.get_or_insert(Error::new(
                    ErrorKind::Realtime,
                    format!("CPU {}: {}", cpus[i], e.message()),
                ));
            }
        }
    }
    conditions.sort_by_key(|(c, _)| *c);
    if let Some(e) = refused {
        barrier.wait();
        for h in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    let started_unix = unix_now_ns();
    let run_id = store.begin_run(&RunInfo {
        started_unix_ns: started_unix,
        firmtime_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line: command_line.to_string(),
        config: serde_json::to_string(config).unwrap_or_default(),
        conditions: serde_json::to_string(&conditions).unwrap_or_default(),
    })?;
    // The grid starts at the next whole period; its Unix time is fixed
    // here once (CLOCK_MONOTONIC → Unix offset).
    let t0 = monotonic_ns() + config.period_ns;
    let offset = unix_now_ns() - monotonic_ns() as i64;
    start_at.store(t0, Ordering::SeqCst);
    barrier.wait();
    if let Some(t) = &totals {
        // Every watched CPU's series exist from the start, at 0, so that a
        // scraper sees each counter rise from zero.
        let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
        for &c in &cpus {
            t.cpus.entry(c).or_default();
        }
        // An alert reads these: the interval, and the last interval's
        // end (the start until the first is stored).
        t.interval_ns = config.interval_ns;
        t.last_interval_end_unix_ns = Some(started_unix);
    }
    events(Event::Started {
        conditions: conditions.clone(),
        explain: explain_ok.clone(),
    });

    let unix_of = |mono: u64| mono as i64 + offset;
    let interval_start = |seq: u64| t0 + seq * config.interval_ns;
    let lead = (config.interval_ns / 2).min(3_000_000_000);
    let mut prepared = 0u64; // buffers for intervals ≤ prepared are out
    let mut next_seq = 0u64;
    let mut pending: Vec<BTreeMap<u64, Box<Interval>>> =
        cpus.iter().map(|_| BTreeMap::new()).collect();
    let mut steal_prev = state::steal_ns(&cpus);
    let mut proc_cpu_prev = process_cpu_ns();
    let mut endpoint_cpu_prev = crate::metrics::endpoint_cpu_ns();
    let mut budget_noticed: Option<u64> = None;
    let mut stored = 0u64;
    let mut db_error: Option<Error> = None;
    loop {
        // The writer's own wake-ups are part of watch's cost: five a second
        // (not twenty) is soon enough to hand out buffers `lead` ahead and
        // to collect a minute's rows.
        std::thread::sleep(WRITER_TICK);
        // Prepare the next interval's buffers shortly before it starts.
        let now = monotonic_ns();
        let next = prepared + 1;
        let all_ended = lanes.iter().all(|l| l.ended.load(Ordering::SeqCst));
        if !all_ended
            && now + lead >= interval_start(next)
            && lanes.iter().all(|l| !l.spare.is_empty())
        {
            if tracing {
                match start_session(config.worst, &pool) {
                    Ok(s) => {
                        sessions.insert(
                            next,
                            Traced {
                                session: s,
                                outstanding: lanes.len(),
                            },
                        );
                    }
                    Err(e) => events(Event::Notice(format!(
                        "interval {next}: the explaining trace did not start: {}",
                        e.message()
                    ))),
                }
            }
            for l in lanes.iter_mut() {
                if let Some(mut b) = l.spare.pop() {
                    b.clear();
                    b.notes = make_notes(&sessions, next, l.cpu);
                    b.tag = next;
                    if let Err(rtrb::PushError::Full(b)) = l.free.push(b) {
                        l.spare.push(b);
                    }
                }
            }
            prepared = next;
        }
        // Collect what the loops handed over.
        for (i, l) in lanes.iter_mut().enumerate() {
            while let Ok(b) = l.full.pop() {
                pending[i].insert(b.seq, b);
            }
        }
        // Write group `next_seq` once every lane has delivered it or moved past it.
        loop {
            let ready = lanes.iter().enumerate().all(|(i, l)| {
                pending[i].range(next_seq..).next().is_some()
                    || (l.ended.load(Ordering::SeqCst) && l.full.is_empty())
            });
            let any = pending.iter().any(|p| p.contains_key(&next_seq));
            if !ready {
                break;
            }
            if !any {
                if lanes
                    .iter()
                    .all(|l| l.ended.load(Ordering::SeqCst) && l.full.is_empty())
                    && pending.iter().all(|p| p.range(next_seq..).next().is_none())
                {
                    break;
                }
                next_seq += 1;
                continue;
            }
            let mut group: Vec<(usize, Box<Interval>)> = Vec::new();
            for (i, p) in pending.iter_mut().enumerate() {
                if let Some(b) = p.remove(&next_seq) {
                    group.push((i, b));
                }
            }
            // Attribute with the session the buffers were bound to.
            for (_, b) in &group {
                if let Some(t) = sessions.get_mut(&b.tag) {
                    t.outstanding = t.outstanding.saturating_sub(1);
                }
            }
            let mut causes: BTreeMap<(usize, u64), Wakeup> = BTreeMap::new();
            let mut explained: Vec<bool> = vec![false; group.len()];
            let mut lost: Vec<Option<u64>> = vec![None; group.len()];
            // The span of a buffer's interval, CLOCK_MONOTONIC ns: its
            // first deadline to its end (the last wake-up of a cut-short one).
            let span_of = |b: &Interval| {
                let start = t0 + b.first_index * config.period_ns;
                let end = if b.partial {
                    b.last_wake_ns.max(start)
                } else {
                    t0 + (b.seq + 1 + b.merged) * config.interval_ns
                };
                (start, end)
            };
            let tags: Vec<u64> = group.iter().map(|(_, b)| b.tag).collect();
            for tag in tags
                .iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>()
            {
                let done = sessions.get(&tag).is_some_and(|t| t.outstanding == 0);
                if !done {
                    continue;
                }
                let Some(t) = sessions.remove(&tag) else {
                    continue;
                };
                match t.session.finish() {
                    Ok(rec) => {
                        let targets: Vec<explain::Target> = group
                            .iter()
                            .enumerate()
                            .filter(|(_, (_, b))| b.tag == tag)
                            .map(|(k, (i, b))| {
                                let max = b.max_ns.max(0);
                                explain::Target {
                                    thread: k,
                                    cpu: lanes[*i].cpu,
                                    tid: lanes[*i].tid,
                                    period_ns: config.period_ns,
                                    slack_ns: lanes[*i].slack_ns,
                                    threshold_ns: b.hist.quantile(0.999, max).unwrap_or(0),
                                    notes: b.notes.sorted(),
                                    missing_not_kept: b.notes.missing_not_kept(),
                                    missed: b.missed,
                                }
                            })
                            .collect();
                        for tg in &targets {
                            explained[tg.thread] = true;
                            let (a, z) = span_of(&group[tg.thread].1);
                            lost[tg.thread] = Some(interval_lost(
                                &rec.losses,
                                tg.cpu,
                                a.saturating_sub(lookback),
                                z,
                            ));
                        }
                        let ex = explain::explain(rec, &targets, &machine);
                        for o in &ex.outliers {
                            causes.insert(
                                (o.thread, o.index),
                                stored_cause(
                                    &o.cause,
                                    unix_of(o.deadline_ns),
                                    o.latency_ns,
                                    o.missed,
                                ),
                            );
                        }
                    }
                    Err(e) => events(Event::Notice(format!(
                        "interval {next_seq}: the explaining trace failed: {}",
                        e.message()
                    ))),
                }
            }
            // Sessions of intervals already past that still wait for a
            // merged buffer are dropped: their intervals go unexplained.
            let stale: Vec<u64> = sessions.range(..next_seq).map(|(k, _)| *k).collect();
            for k in stale {
                sessions.remove(&k);
            }
            let steal_now = state::steal_ns(&cpus);
            // The endpoint's counter first: what it adds after the process's
            // reading is left for the next interval, never subtracted twice.
            let endpoint_cpu_now = crate::metrics::endpoint_cpu_ns();
            let proc_cpu_now = process_cpu_ns();
            let share = shared_cpu_ns(
                proc_cpu_now.saturating_sub(proc_cpu_prev),
                endpoint_cpu_now.saturating_sub(endpoint_cpu_prev),
                group.iter().map(|(_, b)| b.own_cpu_ns),
            );
            proc_cpu_prev = proc_cpu_now;
            endpoint_cpu_prev = endpoint_cpu_now;
            let mut rows = Vec::with_capacity(group.len());
            for (k, (i, b)) in group.iter().enumerate() {
                let cpu_pos = *i;
                let steal = steal_now[cpu_pos].saturating_sub(steal_prev[cpu_pos]);
                let max = (b.count > 0).then_some(b.max_ns);
                let wakeups = b
                    .notes
                    .sorted()
                    .into_iter()
                    .map(|n| {
                        causes.remove(&(k, n.index)).unwrap_or(Wakeup {
                            deadline_unix_ns: unix_of(n.deadline_ns),
                            latency_ns: n.latency_ns,
                            missed: n.missed,
                            ..Wakeup::default()
                        })
                    })
                    .collect();
                let start = b.first_index;
                let (_, end_mono) = span_of(b);
                rows.push(CpuInterval {
                    seq: b.seq,
                    cpu: lanes[*i].cpu,
                    start_unix_ns: unix_of(t0 + start * config.period_ns),
                    end_unix_ns: unix_of(end_mono),
                    period_ns: config.period_ns,
                    count: b.count,
                    missed: b.missed,
                    min_ns: (b.count > 0).then_some(b.min_ns),
                    max_ns: max,
                    mean_ns: (b.count > 0).then(|| b.sum_ns as f64 / b.count as f64),
                    p99_ns: b.hist.quantile(0.99, b.max_ns),
                    p999_ns: b.hist.quantile(0.999, b.max_ns),
                    steal_ns: steal,
                    partial: b.partial,
                    merged: b.merged,
                    explained: explained[k],
                    histogram: b.hist.sparse(),
                    wakeups,
                    watch_cpu_ns: Some(b.own_cpu_ns + share),
                    trace_lost_events: lost[k],
                });
            }
            steal_prev = steal_now;
            // Over budget: say so at the first such interval, then at most
            // once an hour.
            let hour = 3_600_000_000_000u64.div_ceil(config.interval_ns);
            if budget_noticed.map_or(true, |s| next_seq >= s + hour) {
                if let Some(n) = over_budget(&rows, config) {
                    events(Event::Notice(n));
                    budget_noticed = Some(next_seq);
                }
            }
            let st: MachineState = state::read(&cpus, &preempt0, &virt);
            match store.store_interval(run_id, unix_now_ns(), &st, &mut rows) {
                Ok(_) => {
                    stored += 1;
                    if let Some(t) = &totals {
                        let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                        for r in &rows {
                            t.add(r);
                        }
                    }
                    events(Event::Stored(rows));
                    match store.maintain(unix_now_ns(), &config.retention()) {
                        Ok(m) => {
                            if m.deleted > 0 {
                                events(Event::Pruned(m.deleted));
                            }
                            if m.cap_rolled + m.cap_dropped > 0 {
                                events(Event::Notice(cap_notice(&m, config)));
                            }
                        }
                        Err(e) => events(Event::Notice(format!("pruning failed: {}", e.message()))),
                    }
                }
                Err(e) => {
                    // Stop measuring: what cannot be stored must not pile up.
                    stop.store(true, Ordering::SeqCst);
                    db_error.get_or_insert(e);
                }
            }
            for (i, b) in group {
                lanes[i].spare.push(b);
            }
            next_seq += 1;
        }
        let done = lanes
            .iter()
            .all(|l| l.ended.load(Ordering::SeqCst) && l.full.is_empty())
            && pending.iter().all(BTreeMap::is_empty);
        if done {
            break;
        }
    }
    let mut failed = None;
    for h in handles {
        if let Ok(LoopEnd::Failed(e)) = h.join() {
            failed = Some(e);
        }
    }
    let stopped = stop.load(Ordering::SeqCst);
    let reason = match (&db_error, failed, stopped) {
        (Some(e), _, _) => format!("database error: {}", e.message()),
        (None, Some(e), _) => format!("the sleeper failed: {e}"),
        (None, None, true) => "stopped".to_string(),
        (None, None, false) => "duration reached".to_string(),
    };
    let _ = store.end_run(run_id, unix_now_ns(), &reason);
    if let Some(e) = db_error {
        return Err(e);
    }
    Ok(Summary {
        run_id,
        intervals: stored,
        stopped,
    })
}
