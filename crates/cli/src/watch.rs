//! `firmtime watch`: the long-running monitor (run, report, check,
//! install). See docs/WATCH.md.

use crate::args::{self, UsageError};
use crate::Outcome;
use anyhow::Context;
use clap::{Args, Subcommand};
use firmtime_rt::sched::Policy;
use firmtime_watch::metrics::{Totals, WatchCollector};
use firmtime_watch::report::{self, Answer, Period};
use firmtime_watch::run::{self, Config, Event};
use firmtime_watch::store::Store;
use firmtime_watch::unit;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `firmtime watch …`
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WatchArgs {
    #[command(subcommand)]
    command: Option<WatchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

/// The subcommands of `watch`.
#[derive(Debug, Subcommand)]
enum WatchCommand {
    /// Latency over a period (or around a moment: --at) as Markdown + JSON + PNG: over time, the histogram, the worst wake-ups with their ids, the top causes, what changed (and the resolution of each part: older intervals are rolled up into hours and days).
    Report(ReportArgs),
    /// Was this machine fine? One line; exit 0 fine, 1 not fine, 2 no data, 3 the file is not a watch database (not SQLite, another program's, or a newer firmtime's), 4 a watch starting on it has not made it readable yet (try again).
    Check(CheckArgs),
    /// Write a systemd unit that runs `firmtime watch` with the flags given, and say how to enable it.
    Install(InstallArgs),
    /// One stored wake-up's whole cause record, by the id a report, the journal's interval lines or the metrics' exemplar give; exit 0 shown, 2 no such wake-up (one whose interval was rolled up and not kept among the roll-up's worst: what remains of it, its hour's or day's figures, top causes and worst kept, then exit 2).
    Show(ShowArgs),
    /// Remove the tracefs instances of firmtime processes that are gone (a run killed with SIGKILL leaves its instance tracing); the unit runs it after each stop.
    CleanTrace,
}

/// The default database: /var/lib/firmtime/watch.db for root, else
/// ~/.local/state/firmtime/watch.db.
fn default_db() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/firmtime/watch.db");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/state/firmtime/watch.db")
}

/// `--keep` and `--since`: a duration with units, days as `d` too (`30d`).
fn long_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if let Some(n) = t.strip_suffix('d') {
        if let Ok(days) = n.trim().parse::<f64>() {
            if days.is_finite() && days > 0.0 && days <= 36_500.0 {
                return Ok(Duration::from_secs_f64(days * 86_400.0));
            }
            return Err("out of range; give more than 0d, up to 36500d".into());
        }
    }
    args::duration(t)
}

/// The flags of `firmtime watch` (run).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The database file (created if missing). Default /var/lib/firmtime/watch.db as root, else ~/.local/state/firmtime/watch.db.
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Period of the wake-ups (100us to 1s). Each wake-up costs CPU (about 25 µs in a VM, a few µs on bare metal); see --budget.
    #[arg(long, value_name = "D", default_value = "10ms", value_parser = args::duration)]
    period: Duration,
    /// How often an interval is stored: the storage interval (1s to 1h; a whole number of
    /// --period). `--interval` is the old spelling.
    #[arg(long = "store-every", alias = "interval", value_name = "D", default_value = "1min", value_parser = args::duration)]
    interval: Duration,
    /// Stop after this long (default: until SIGTERM or SIGINT).
    #[arg(long, value_name = "D", value_parser = long_duration)]
    duration: Option<Duration>,
    /// Scheduling policy of the measuring threads: fifo:P or rr:P (never degraded: refused is an error).
    #[arg(
        long = "priority",
        alias = "policy",
        value_name = "PRIORITY",
        default_value = "fifo:80"
    )]
    policy: Policy,
    /// CPUs to watch, one pinned thread each (e.g. 0,2-3); default every online CPU.
    #[arg(long = "cpu", alias = "cpus", value_name = "LIST")]
    cpus: Option<String>,
    /// CPUs of the housekeeping threads (the writer, the metrics endpoint, the explaining trace's drainer), e.g. 0; default the online CPUs not watched, or the first watched CPU when every CPU is watched: the other watched CPUs then carry their measuring thread only.
    #[arg(long = "housekeeping-cpu", value_name = "LIST")]
    housekeeping_cpu: Option<String>,
    /// Hold /dev/cpu_dma_latency at D while watching, e.g. 0us (cyclictest holds 0: no CPU then enters an idle state that exits slower, a cheaper wake-up for more power); a bare number is microseconds. Default: leave the idle states alone.
    #[arg(long, value_name = "D", value_parser = args::dma_latency)]
    dma_latency: Option<u32>,
    /// Keep nothing older than this, at any resolution (e.g. 30d, 12h; 1min to 3650d). The default keeps what --max-db-size holds.
    #[arg(long, value_name = "D", default_value = "3650d", value_parser = long_duration)]
    keep: Duration,
    /// Keep intervals as stored this long, then roll them up into one row per CPU and hour (1min to 3650d; at least one --store-every).
    #[arg(long, value_name = "D", default_value = "7d", value_parser = long_duration)]
    keep_raw: Duration,
    /// Keep hourly rows this long, then roll them up into one per CPU and day (at least --keep-raw).
    #[arg(long, value_name = "D", default_value = "90d", value_parser = long_duration)]
    keep_hourly: Duration,
    /// Cap on the database file (1MiB to 64GiB): over it, the oldest day is rolled up early, then dropped.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = args::size)]
    max_db_size: u64,
    /// Worst wake-ups kept per CPU and interval, with their causes (1-1000).
    #[arg(long, value_name = "N", default_value_t = 10)]
    worst: usize,
    /// The explaining trace (needs root and tracefs): auto (when available), on (required), off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    explain: run::ExplainMode,
    #[command(flatten)]
    metrics: crate::exposition::MetricsArgs,
    /// After the last interval is stored at exit, keep serving --metrics-listen until one scrape
    /// has read it, at most this long (0s to 20s; the unit stops within 30 s), so that
    /// Prometheus sees the last interval too.
    #[arg(long, value_name = "D", default_value = "15s", value_parser = linger)]
    metrics_linger: Duration,
    /// Share of each watched CPU watch itself may use, % (0.01 to 100): every interval's own CPU is stored; one above it gets a notice naming a --period that fits.
    #[arg(long, value_name = "PERCENT", default_value = "0.5", value_parser = percent)]
    budget: f64,
}

/// The longest `--metrics-linger`: the unit's `TimeoutStopSec=30` leaves
/// the final interval's storing time besides.
pub const MAX_LINGER: Duration = Duration::from_secs(20);

/// `--metrics-linger`: a duration from 0 to [`MAX_LINGER`].
fn linger(s: &str) -> Result<Duration, String> {
    let d = if s.trim() == "0" {
        Duration::ZERO
    } else {
        args::duration(s)?
    };
    if d > MAX_LINGER {
        return Err(format!(
            "out of range: valid is 0s to {}s",
            MAX_LINGER.as_secs()
        ));
    }
    Ok(d)
}

/// A percentage: `0.5` or `0.5%`.
fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%').trim();
    t.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("'{s}' is not a percentage (e.g. 0.5 or 0.5%)"))
}

/// `firmtime watch report`
#[derive(Debug, Args)]
struct ReportArgs {
    /// The period: the last D (e.g. 24h, 7d; default 24h). With --at, the D around that time (default 10min).
    #[arg(long, value_name = "D", value_parser = long_duration)]
    since: Option<Duration>,
    /// Report the stored intervals around TIME (a spike's, as Grafana's link gives it): RFC 3339 in UTC (2026-11-27T10:01:02Z) or Unix seconds (or milliseconds).
    #[arg(long, value_name = "TIME", value_parser = report::parse_time)]
    at: Option<i64>,
    /// The database file (as for `watch`).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Directory for report.md, report.json and the PNGs.
    #[arg(long, value_name = "DIR", default_value = "firmtime-watch-report")]
    out: PathBuf,
    /// The limit the report's first line judges the worst wake-up against.
    #[arg(long, value_name = "D", default_value = "1ms", value_parser = args::duration)]
    max_latency: Duration,
}

/// `firmtime watch check`
#[derive(Debug, Args)]
struct CheckArgs {
    /// The period: the last D (e.g. 1h).
    #[arg(long, value_name = "D", default_value = "1h", value_parser = long_duration)]
    since: Duration,
    /// The database file (as for `watch`).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Fine only if every wake-up was at most this late.
    #[arg(long, value_name = "D", default_value = "1ms", value_parser = args::duration)]
    max_latency: Duration,
    /// Fine only if at most this many deadlines were missed.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_missed: u64,
    /// Also write the period's figures as JSON to PATH (`-`: stdout). A file is replaced
    /// atomically, a device or FIFO written into, a symbolic link refused.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `firmtime watch show`
#[derive(Debug, Args)]
struct ShowArgs {
    /// The wake-up's id (the `id` column of a report's worst wake-ups, the `wakeup_id` of an exemplar).
    #[arg(value_name = "ID")]
    id: i64,
    /// The database file (as for `watch`).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Print the record as JSON to PATH instead (`-` or no value: stdout). A file is replaced
    /// atomically, a device or FIFO written into, a symbolic link refused.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `firmtime watch install`
#[derive(Debug, Args)]
struct InstallArgs {
    /// Print the unit instead of writing it.
    #[arg(long)]
    print: bool,
    /// Where to write the unit.
    #[arg(long, value_name = "PATH", default_value = unit::UNIT_PATH)]
    unit: PathBuf,
    /// The binary the unit runs: this binary is copied there (atomically, mode 0755) unless it
    /// is already that file. Default: this binary, unless it is in a cargo build tree or under
    /// /home or /root (then give e.g. `--exe /usr/local/bin/firmtime`).
    #[arg(long, value_name = "PATH")]
    exe: Option<PathBuf>,
    /// The `firmtime watch` flags the service runs with (after `--`), e.g. `-- --cpu 1 --keep 90d`.
    #[arg(last = true, value_name = "WATCH-FLAGS")]
    flags: Vec<String>,
}

/// Runs `firmtime watch …`.
pub fn run(a: WatchArgs) -> anyhow::Result<Outcome> {
    match a.command {
        None => watch(a.run),
        Some(WatchCommand::Report(r)) => report_cmd(r),
        Some(WatchCommand::Check(c)) => check_cmd(c),
        Some(WatchCommand::Install(i)) => install_cmd(i),
        Some(WatchCommand::Show(s)) => show_cmd(s),
        Some(WatchCommand::CleanTrace) => clean_trace_cmd(),
    }
}

fn nanos(d: Duration) -> u64 {
    args::nanos(d)
}

/// The run's config from its flags (usage errors name the flag).
fn config(a: &RunArgs) -> Result<Config, UsageError> {
    let cpus = a.cpus.as_deref().map(args::cpu_list).transpose()?;
    let housekeeping_cpus = a
        .housekeeping_cpu
        .as_deref()
        .map(|t| args::cpu_list_for("--housekeeping-cpu", t))
        .transpose()?;
    let c = Config {
        db: a.db.clone().unwrap_or_else(default_db),
        period_ns: nanos(a.period),
        interval_ns: nanos(a.interval),
        duration_ns: a.duration.map(nanos),
        policy: a.policy,
        cpus,
        housekeeping_cpus,
        dma_latency_us: a.dma_latency,
        keep_ns: nanos(a.keep),
        keep_raw_ns: nanos(a.keep_raw),
        keep_hourly_ns: nanos(a.keep_hourly),
        max_db_bytes: a.max_db_size,
        worst: a.worst,
        explain: a.explain,
        budget_percent: a.budget,
    };
    c.validate()
        .map_err(|e| UsageError(e.message().to_string()))?;
    Ok(c)
}

fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn interval_line(rows: &[firmtime_watch::store::CpuInterval]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut parts = Vec::new();
    for r in rows {
        let f = |v: Option<i64>| v.map_or("-".into(), report::fmt_ns);
        let cause = r
            .wakeups
            .first()
            .and_then(|w| {
                let words = w.cause_words()?;
                Some(match w.id {
                    Some(id) => format!(", worst: {words} (wake-up {id})"),
                    None => format!(", worst: {words}"),
                })
            })
            .unwrap_or_default();
        let wall = r.end_unix_ns - r.start_unix_ns;
        let own = match r.watch_cpu_ns {
            Some(n) if wall > 0 => {
                format!(", watch itself {:.2} %", 100.0 * n as f64 / wall as f64)
            }
            _ => String::new(),
        };
        parts.push(format!(
            "CPU {}: {} wake-ups, p99.9 {}, max {}, {} missed{}{}{}",
            r.cpu,
            r.count,
            f(r.p999_ns),
            f(r.max_ns),
            r.missed,
            own,
            cause,
            if r.partial { " (partial)" } else { "" }
        ));
    }
    format!(
        "interval {} from {}: {}",
        first.seq,
        report::utc(first.start_unix_ns),
        parts.join("; ")
    )
}

fn watch(a: RunArgs) -> anyhow::Result<Outcome> {
    let cfg = config(&a)?;
    // One malloc arena for the whole process, before any thread starts:
    // glibc gives each allocating thread an arena of its own, and watch
    // locks its memory (mlockall), so each arena's touched pages stay in
    // its RSS (~1 MB here). The measuring loops do not allocate, so there
    // is no contention to spare them (issue 31 item 2: RSS <= 40 MB).
    // SAFETY: mallopt has no preconditions; a refusal changes nothing.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    if let Some(dir) = cfg.db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            UsageError(format!(
                "--db {}: cannot create {}: {e}",
                cfg.db.display(),
                dir.display()
            ))
        })?;
    }
    let endpoint = a.metrics.prepare()?;
    let stop = crate::signals::catch(crate::signals::Repeat::Ends)?;
    let mut t0 = Totals::default();
    for c in cfg.selected_cpus() {
        // Served at 0 from the first scrape on.
        t0.cpus.entry(c).or_default();
    }
    let totals = Arc::new(Mutex::new(t0));
    let t = Arc::clone(&totals);
    // Full renders so far: counted as each starts, so one counted after
    // the final store read the final totals.
    let renders = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let r = Arc::clone(&renders);
    let server = endpoint.serve("watch", move || {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        WatchCollector::render(&t)
    })?;
    let cmdline = std::env::args().collect::<Vec<_>>().join(" ");
    let db = cfg.db.clone();
    let summary = run::run(&cfg, &cmdline, stop, Some(totals), &mut |e| match e {
        Event::Started {
            conditions,
            explain,
        } => {
            for (cpu, c) in &conditions {
                eprintln!(
                    "watch: CPU {cpu}: {} priority {}, memory locked {}, tid {}{}",
                    c.obtained.policy,
                    c.obtained.priority,
                    c.obtained
                        .memory_locked
                        .map_or("unknown".into(), |b| b.to_string()),
                    c.obtained.tid,
                    c.obtained
                        .dma_latency_us
                        .map_or(String::new(), |us| format!(
                            ", /dev/cpu_dma_latency held at {us} µs"
                        ))
                );
            }
            match explain {
                Ok(()) => eprintln!("watch: the explaining trace runs: the worst wake-ups get causes"),
                Err(why) => eprintln!("watch: no explaining trace ({why}): the worst wake-ups are stored without causes"),
            }
            eprintln!(
                "watch: storing into {} every {}",
                db.display(),
                firmtime_rt::units::format_duration(Duration::from_nanos(cfg.interval_ns))
            );
        }
        Event::Stored(rows) => eprintln!("watch: {}", interval_line(&rows)),
        Event::Pruned(n) => eprintln!("watch: deleted {n} interval rows older than --keep"),
        Event::Notice(s) => eprintln!("watch: {s}"),
    })?;
    if server.is_some() && summary.intervals > 0 {
        linger_for_a_scrape(&renders, a.metrics_linger);
    }
    if summary.stopped {
        eprintln!(
            "watch: stopped by {}; {} intervals stored (run {})",
            crate::signals::describe(),
            summary.intervals,
            summary.run_id
        );
    } else {
        eprintln!(
            "watch: --duration reached; {} intervals stored (run {})",
            summary.intervals, summary.run_id
        );
    }
    Ok(Outcome::Ok)
}

/// Keeps the endpoint open (the caller holds it) until a scrape has
/// rendered the final figures or `most` has passed, and says which.
fn linger_for_a_scrape(renders: &std::sync::atomic::AtomicU64, most: Duration) {
    use std::sync::atomic::Ordering;
    if most.is_zero() {
        eprintln!("watch: --metrics-linger 0s: the last interval is not served");
        return;
    }
    let before = renders.load(Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < most {
        if renders.load(Ordering::SeqCst) > before {
            eprintln!(
                "watch: the last interval was scraped {} after it was stored",
                firmtime_rt::units::format_duration(t0.elapsed())
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "watch: no scrape within --metrics-linger {}: Prometheus did not see the last interval",
        firmtime_rt::units::format_duration(most)
    );
}

fn open_db(db: Option<PathBuf>) -> anyhow::Result<(PathBuf, Store)> {
    let db = db.unwrap_or_else(default_db);
    let s = Store::open_existing(&db)?;
    Ok((db, s))
}

fn report_cmd(a: ReportArgs) -> anyhow::Result<Outcome> {
    args::check_output_dir("--out", &a.out)?;
    // A link planted at one of the names is refused before anything is read or written.
    for name in report::OUTPUT_FILES {
        args::check_output_file("--out", &a.out.join(name))?;
    }
    let (db, store) = open_db(a.db)?;
    let p = match a.at {
        Some(at) => Period::read_at(&store, at, a.since.map_or(600_000_000_000, nanos))?,
        None => Period::read(
            &store,
            a.since.map_or(86_400_000_000_000, nanos),
            now_unix_ns(),
        )?,
    };
    let max = nanos(a.max_latency) as i64;
    let w = report::write(&p, &db, &a.out, max)?;
    let (_, line) = report::verdict(&p, max, 0);
    println!("{line}");
    for e in &w.plot_errors {
        eprintln!("watch report: plot not drawn: {e}");
    }
    println!("Report: {}", w.markdown.display());
    Ok(Outcome::Ok)
}

/// The human form of a stored wake-up's record (`watch show`).
pub fn show_text(r: &firmtime_watch::store::WakeupRecord) -> String {
    use std::fmt::Write as _;
    let w = &r.wakeup;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "wake-up {} on CPU {}: deadline {} ({}), {} late, {} deadline{} missed",
        w.id.unwrap_or(0),
        r.cpu,
        report::utc(w.deadline_unix_ns),
        firmtime_rt::system::rfc3339_utc(
            UNIX_EPOCH + Duration::from_nanos(w.deadline_unix_ns.max(0) as u64)
        ),
        report::fmt_ns(w.latency_ns),
        w.missed,
        if w.missed == 1 { "" } else { "s" }
    );
    match w.cause_words() {
        Some(words) => {
            let _ = writeln!(
                s,
                "cause: {words}{}",
                w.cause_ns.map_or(String::new(), |n| format!(
                    ", {} charged to it",
                    report::fmt_ns(n as i64)
                ))
            );
        }
        None => {
            let _ = writeln!(s, "cause: none recorded (the explaining trace did not run)");
        }
    }
    if let Some(d) = &w.detail {
        let _ = writeln!(s, "  {d}");
    }
    let shares = w
        .breakdown
        .as_ref()
        .and_then(|b| b.as_array())
        .filter(|a| !a.is_empty());
    if let Some(shares) = shares {
        let _ = writeln!(s, "its lateness, part by part (they add up to it):");
        for p in shares {
            let field = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let mut who = Vec::new();
            if let Some(pid) = p.get("pid").and_then(|v| v.as_i64()) {
                who.push(format!("pid {pid}"));
            }
            if !field("process").is_empty() {
                who.push(format!("process {}", field("process")));
            }
            if !field("policy").is_empty() {
                who.push(field("policy").to_string());
            }
            if let Some(prio) = p.get("prio").and_then(|v| v.as_i64()) {
                who.push(format!("kernel prio {prio}"));
            }
            if let Some(n) = p.get("faults").and_then(|v| v.as_u64()) {
                who.push(format!("{n} page faults"));
            }
            let who = if who.is_empty() {
                String::new()
            } else {
                format!(" ({})", who.join(", "))
            };
            let ns = p.get("ns").and_then(|v| v.as_i64()).unwrap_or(0);
            let _ = writeln!(
                s,
                "  {}: {} {}{who}",
                report::fmt_ns(ns),
                field("kind").replace('_', " "),
                field("name")
            );
        }
    }
    if !w.parts.is_empty() {
        let _ = writeln!(s, "what ran in its window, largest first:");
        for p in &w.parts {
            let who = match (p.pid, p.prio) {
                (Some(pid), Some(prio)) => format!(" (pid {pid}, kernel prio {prio})"),
                (Some(pid), None) => format!(" (pid {pid})"),
                _ => String::new(),
            };
            let words = firmtime_trace::explain::Category::from_key(&p.category).map_or_else(
                || format!("{} {}", p.category, p.name),
                |c| firmtime_trace::explain::cause_words(c, &p.name),
            );
            let _ = writeln!(s, "  {}: {words}{who}", report::fmt_ns(p.ns as i64));
        }
    }
    if let Some(n) = w.lost_events {
        let _ = writeln!(
            s,
            "the kernel lost {n} trace events in the span this wake-up's attribution reads: no cause is given rather than a guess"
        );
    }
    let row = if r.resolution_ns == firmtime_watch::store::RAW {
        format!("interval {} of run {}", r.seq, r.run_id)
    } else {
        format!(
            "a roll-up per {} (it kept this wake-up among its worst)",
            report::resolution_word(r.resolution_ns)
        )
    };
    let f = |v: Option<i64>| v.map_or("-".into(), report::fmt_ns);
    let _ = writeln!(
        s,
        "in {row}, {} to {}: {} wake-ups, {} missed, p99.9 {}, max {}{}",
        report::utc(r.interval_start_unix_ns),
        report::utc(r.interval_end_unix_ns),
        r.interval_count,
        r.interval_missed,
        f(r.interval_p999_ns),
        f(r.interval_max_ns),
        r.interval_trace_lost_events
            .map_or(String::new(), |n| format!(", trace lost {n} events"))
    );
    let _ = writeln!(
        s,
        "around it: firmtime watch report --at {}",
        firmtime_rt::system::rfc3339_utc(
            UNIX_EPOCH + Duration::from_nanos(w.deadline_unix_ns.max(0) as u64)
        )
    );
    s
}

/// `watch show ID`: exit 0 with the record, 2 when there is no such wake-up.
fn show_cmd(a: ShowArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let (db, store) = open_db(a.db)?;
    let Some(r) = store.wakeup(a.id)? else {
        if let Some(g) = store.rolled_up(a.id)? {
            // Its interval was rolled up: what remains of it, then exit 2.
            match &a.json {
                Some(path) => args::write_json(path, &serde_json::json!({ "rolled_up": g }))?,
                None => print!("{}", report::rolled_up_text(&g)),
            }
            return Err(UsageError(format!(
                "no record of wake-up {} in {}: its interval was rolled up and the roll-up did not keep it among its {} worst (what remains of it: {})",
                a.id,
                db.display(),
                firmtime_watch::store::ROLLUP_WORST,
                if a.json.is_some() { "`rolled_up` in the JSON" } else { "above" }
            ))
            .into());
        }
        return Err(UsageError(format!(
            "no wake-up {} in {} (ids come from `watch report`'s worst wake-ups and the metrics' exemplars; a wake-up not among the worst kept by a roll-up is gone)",
            a.id,
            db.display()
        ))
        .into());
    };
    match &a.json {
        Some(path) => args::write_json(path, &r)?,
        None => print!("{}", show_text(&r)),
    }
    Ok(Outcome::Ok)
}

/// `watch check`: exit 0 fine, 1 not fine, 2 no data, 3 not a watch
/// database, 4 a watch is starting on it (the process exits here).
fn check_cmd(a: CheckArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let db = a.db.clone().unwrap_or_else(default_db);
    let opened = if db.is_file() {
        Some(Store::open_existing(&db))
    } else {
        None
    };
    let (answer, line, period) = match opened {
        Some(Err(e)) if e.kind() == firmtime_watch::ErrorKind::NotWatchDatabase => {
            (Answer::NotWatchDatabase, e.message().to_string(), None)
        }
        // A watch starting on the file: no answer yet (not "not fine").
        Some(Err(e)) if e.kind() == firmtime_watch::ErrorKind::InUse => {
            (Answer::Starting, e.message().to_string(), None)
        }
        Some(opened) => match Period::read(&opened?, nanos(a.since), now_unix_ns()) {
            Err(e) if e.kind() == firmtime_watch::ErrorKind::InUse => {
                (Answer::Starting, e.message().to_string(), None)
            }
            p => {
                let p = p?;
                let (ans, line) = report::verdict(&p, nanos(a.max_latency) as i64, a.max_missed);
                (ans, line, Some(p))
            }
        },
        None => (
            Answer::NoData,
            format!("no data: database {} does not exist", db.display()),
            None,
        ),
    };
    if let Some(path) = &a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            answer: Answer,
            line: &'a str,
            period: Option<&'a Period>,
        }
        let _quiet = args::StdoutToStderr::when_json_on_stdout(Some(path))?;
        drop(_quiet);
        args::write_json(
            path,
            &Out {
                answer,
                line: &line,
                period: period.as_ref(),
            },
        )?;
    }
    if !args::is_stdout(a.json.as_deref()) {
        println!("{line}");
    } else {
        eprintln!("{line}");
    }
    std::process::exit(i32::from(answer.code()));
}

fn install_cmd(a: InstallArgs) -> anyhow::Result<Outcome> {
    let refused = |e: unit::UnitError| UsageError(format!("watch install: {e}"));
    // A value the unit file cannot carry (a newline would end ExecStart=).
    unit::check_args(&a.flags).map_err(refused)?;
    // Check the flags now, as `firmtime watch` would parse them.
    #[derive(Debug, clap::Parser)]
    struct Probe {
        #[command(flatten)]
        run: RunArgs,
    }
    let probe = <Probe as clap::Parser>::try_parse_from(
        std::iter::once("firmtime watch".to_string()).chain(a.flags.iter().cloned()),
    )
    .map_err(|e| {
        UsageError(format!(
            "the watch flags given to install: {}",
            e.render().to_string().trim()
        ))
    })?;
    config(&probe.run)?;
    let mut flags = a.flags.clone();
    // The service runs as root: pin root's default database, whoever installs.
    let db = match &probe.run.db {
        Some(db) => db.clone(),
        None => {
            let db = Path::new(unit::STATE_DIR).join("watch.db");
            flags.splice(0..0, ["--db".to_string(), db.display().to_string()]);
            db
        }
    };
    unit::check_service_path("--db", &db).map_err(refused)?;
    for token in unit::values_of(&a.flags, "--metrics-token") {
        unit::check_service_path("--metrics-token", Path::new(token)).map_err(refused)?;
    }
    if !a.print {
        if let Some(m) = masked(&a.unit) {
            return Err(UsageError(m).into());
        }
        args::check_output_file("--unit", &a.unit)?;
    }
    // The binary the unit runs: never one in a build tree.
    let running = std::env::current_exe().context("cannot find this executable")?;
    // The command to run instead, with the flags given.
    let refused_exe = |e: unit::UnitError| {
        let shown: Vec<String> = a.flags.iter().map(|f| shell_word(f)).collect();
        let given = if shown.is_empty() {
            String::new()
        } else {
            format!(" -- {}", shown.join(" "))
        };
        UsageError(format!(
            "watch install: {}",
            e.to_string().replace(" -- WATCH-FLAGS", &given)
        ))
    };
    let exe = match &a.exe {
        Some(exe) => {
            unit::check_exe(exe).map_err(refused_exe)?;
            exe.clone()
        }
        None => match unit::check_exe(&running) {
            Ok(()) => running.clone(),
            Err(e) if a.print => {
                eprintln!(
                    "watch install: {e}\n(the unit below runs {}, as `--exe {}` would install it)",
                    unit::STABLE_EXE,
                    unit::STABLE_EXE
                );
                PathBuf::from(unit::STABLE_EXE)
            }
            Err(e) => return Err(refused_exe(e).into()),
        },
    };
    let text = unit::unit_text(&unit::Service {
        exe: &exe,
        args: &flags,
        db: &db,
    });
    if a.print {
        print!("{text}");
        return Ok(Outcome::Ok);
    }
    if unit::install_exe(Path::new("/proc/self/exe"), &exe)
        .with_context(|| format!("--exe {}: cannot install this binary there", exe.display()))?
    {
        println!(
            "Installed this binary as {} (rerun `watch install` after a rebuild to update it).",
            exe.display()
        );
    }
    let dir = unit::db_dir(&db);
    if dir != Path::new(unit::STATE_DIR) {
        // ReadWritePaths= needs it to exist when the service starts.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--db {}: cannot create {}", db.display(), dir.display()))?;
    }
    write_unit(&a.unit, &text)?;
    let name = a
        .unit
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("firmtime-watch.service");
    println!(
        "Wrote {} (mode 0644). Enable and start it with:",
        a.unit.display()
    );
    println!("  systemctl daemon-reload && systemctl enable --now {name}");
    println!("Follow it with `journalctl -u {name} -f`; check it with `firmtime watch check`.");
    Ok(Outcome::Ok)
}

/// `word` as a shell reads it back (single-quoted when needed).
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `firmtime watch clean-trace` (the unit's ExecStopPost=).
fn clean_trace_cmd() -> anyhow::Result<Outcome> {
    let removed = unit::clean_trace(Path::new(unit::TRACEFS_INSTANCES))
        .with_context(|| format!("watch clean-trace: {}", unit::TRACEFS_INSTANCES))?;
    for name in removed {
        eprintln!(
            "watch clean-trace: removed {}/{name} (its process is gone)",
            unit::TRACEFS_INSTANCES
        );
    }
    Ok(Outcome::Ok)
}

/// Writes the unit file; a masked unit or a link at `path` is refused
/// by name (a usage error), here too, whoever calls it.
fn write_unit(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(m) = masked(path) {
        return Err(UsageError(m).into());
    }
    args::check_output_file("--unit", path)?;
    unit::write_unit_file(path, text)
        .with_context(|| format!("--unit {}: cannot write", path.display()))
}

/// The refusal for a unit file that is a link to /dev/null: `systemctl
/// mask` made it, and replacing it would unmask the service behind the
/// administrator's back (as the unit writer once did).
fn masked(path: &Path) -> Option<String> {
    let to = std::fs::read_link(path).ok()?;
    (to == Path::new("/dev/null")).then(|| {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        format!(
            "--unit {}: the unit is masked (a link to /dev/null, from `systemctl mask`): \
             not replaced; `systemctl unmask {name}` first if it should run",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A masked unit (a link to /dev/null) was renamed over: unmasked.
    /// Only the link is read; /dev/null is never opened.
    #[test]
    fn a_masked_unit_is_named_and_refused() {
        let d = std::env::temp_dir().join(format!("firmtime-watch-mask-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let unit = d.join("firmtime-watch.service");
        std::os::unix::fs::symlink("/dev/null", &unit).unwrap();
        let m = masked(&unit).expect("masked");
        assert_eq!(
            m,
            format!(
                "--unit {}: the unit is masked (a link to /dev/null, from `systemctl mask`): \
                 not replaced; `systemctl unmask firmtime-watch.service` first if it should run",
                unit.display()
            )
        );
        let e = write_unit(&unit, "[Unit]\n").unwrap_err();
        assert!(e.is::<UsageError>(), "{e}");
        assert_eq!(std::fs::read_link(&unit).unwrap(), Path::new("/dev/null"));
        let plain = d.join("other.service");
        std::fs::write(&plain, "x").unwrap();
        assert_eq!(masked(&plain), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        w: WatchArgs,
    }

    #[test]
    fn keep_takes_days_and_run_flags_become_a_config() {
        assert_eq!(long_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(long_duration("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert!(long_duration("0d").is_err());
        let t = T::try_parse_from(["t", "--db", "/tmp/x.db", "--interval", "2s", "--keep", "1d"])
            .unwrap();
        let c = config(&t.w.run).unwrap();
        assert_eq!(
            (c.interval_ns, c.keep_ns, c.period_ns),
            (2_000_000_000, 86_400_000_000_000, 10_000_000)
        );
        // The retention defaults: a week as stored, 90 days of hours, 256 MiB.
        assert_eq!(
            (c.keep_raw_ns, c.keep_hourly_ns, c.max_db_bytes),
            (7 * 86_400_000_000_000, 90 * 86_400_000_000_000, 256 << 20)
        );
        let t = T::try_parse_from([
            "t",
            "--keep-raw",
            "2d",
            "--keep-hourly",
            "30d",
            "--max-db-size",
            "1GiB",
        ])
        .unwrap();
        let c = config(&t.w.run).unwrap();
        assert_eq!(
            (c.keep_raw_ns, c.keep_hourly_ns, c.max_db_bytes, c.keep_ns),
            (
                2 * 86_400_000_000_000,
                30 * 86_400_000_000_000,
                1 << 30,
                3650 * 86_400_000_000_000
            )
        );
        let t = T::try_parse_from(["t", "--interval", "1500us"]).unwrap();
        let e = config(&t.w.run).unwrap_err().0;
        assert!(
            e.starts_with("--store-every 1500µs is out of range: valid is 1s to 1h"),
            "{e}"
        );
        // --metrics-linger: 15 s by default, 0 to 20 s.
        assert_eq!(t.w.run.metrics_linger, Duration::from_secs(15));
        assert_eq!(linger("0"), Ok(Duration::ZERO));
        assert_eq!(linger("20s"), Ok(MAX_LINGER));
        assert_eq!(
            linger("21s"),
            Err("out of range: valid is 0s to 20s".to_string())
        );
        let t = T::try_parse_from(["t", "--policy", "other"]).unwrap();
        let e = config(&t.w.run).unwrap_err().0;
        assert!(e.contains("--priority other"), "{e}");
    }
}
