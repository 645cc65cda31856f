//! Looking back: `watch check` (was this machine fine?) and `watch report`
//! (Markdown + JSON + PNG over a period), from the database alone.
//!
//! The figures of a period are computed from the stored intervals by pure
//! functions ([`Period::of`], [`verdict`]), unit-tested without a machine.

use crate::error::{Error, ErrorKind, Result};
use crate::hist::{Hist, OVERFLOW_EDGE};
use crate::store::{MachineState, Store, StoredInterval};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// `2026-11-26 07:41:12 UTC`.
pub fn utc(unix_ns: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(unix_ns.max(0) as u64);
    let s = firmtime_rt::system::rfc3339_utc(t);
    // `2026-11-26T07:41:12Z` (or with fractions): the readable form.
    let s = s.trim_end_matches('Z').replacen('T', " ", 1);
    let s = s.split('.').next().unwrap_or(&s).to_string();
    format!("{s} UTC")
}

/// A latency in words: `45 µs`, `1.64 ms`.
pub fn fmt_ns(ns: i64) -> String {
    if ns == OVERFLOW_EDGE {
        return "> 1 s".into();
    }
    firmtime_trace::explain::attribute::fmt_ns(ns.max(0) as u64)
}

/// One cause over the period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseLine {
    /// Category key (`vm`, `task`, …; `unexplained` when no trace ran).
    pub category: String,
    /// Name (task, interrupt, softirq).
    pub name: String,
    /// Worst wake-ups it made late.
    pub wakeups: u64,
    /// Deadlines missed in them.
    pub missed: u64,
    /// The latest of them, ns.
    pub worst_latency_ns: i64,
    /// When it first made a kept wake-up late (Unix ns).
    pub first_unix_ns: i64,
    /// When it last did.
    pub last_unix_ns: i64,
}

/// One CPU over the period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuLine {
    /// The CPU.
    pub cpu: usize,
    /// Intervals stored.
    pub intervals: u64,
    /// Wake-ups.
    pub count: u64,
    /// Missed deadlines.
    pub missed: u64,
    /// p99 over the period (nearest rank, bucket edge), ns.
    pub p99_ns: Option<i64>,
    /// p99.9, ns.
    pub p999_ns: Option<i64>,
    /// Largest latency, ns.
    pub max_ns: Option<i64>,
    /// Steal, ns.
    pub steal_ns: u64,
    /// watch's own CPU time charged to this CPU, ns (rows that recorded it).
    pub watch_cpu_ns: u64,
    /// That as a share of the time those rows span, % (`None`: no row
    /// recorded it, e.g. all stored before schema 2).
    pub watch_cpu_percent: Option<f64>,
    /// Time spanned by the rows that recorded `watch_cpu_ns`, ns.
    #[serde(skip)]
    watch_cpu_span_ns: i64,
    /// Events the explaining trace lost on this CPU (rows that recorded
    /// it; `None`: none did — no trace, or rows older than schema 4).
    pub trace_lost_events: Option<u64>,
}

/// One of the period's worst kept wake-ups, with its id for `firmtime
/// watch show ID`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorstLine {
    /// Its row id in the database.
    pub id: Option<i64>,
    /// The CPU.
    pub cpu: usize,
    /// Its deadline, Unix ns.
    pub deadline_unix_ns: i64,
    /// How late, ns.
    pub latency_ns: i64,
    /// Deadlines missed in it.
    pub missed: u64,
    /// Its cause in words (`None`: no trace ran).
    pub cause: Option<String>,
}

/// The files `watch report` writes into its `--out` directory.
pub const OUTPUT_FILES: [&str; 4] = [
    "report.md",
    "report.json",
    "latency-over-time.png",
    "histogram.png",
];

/// A time as `watch report --at` and Grafana's links give it: RFC 3339 in
/// UTC (`2026-11-27T10:01:02Z`, fractions allowed, `+00:00` too), this
/// report's own `2026-11-27 10:01:02.5 UTC`, or a Unix time in seconds
/// (`1795000000`, `@1795000000.5`) or milliseconds (13 digits and more, as
/// Grafana's `${__value.time}`). Returns Unix ns.
///
/// # Errors
/// A message naming the forms accepted.
pub fn parse_time(text: &str) -> std::result::Result<i64, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "'{text}' is not a time: give RFC 3339 in UTC (2026-11-27T10:01:02Z) or Unix seconds (1795000000)"
        )
    };
    let unix = t.strip_prefix('@').unwrap_or(t);
    if !unix.is_empty() && unix.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let (int, frac) = unix.split_once('.').unwrap_or((unix, ""));
        if int.is_empty() || frac.contains('.') {
            return Err(bad());
        }
        // Milliseconds from 13 digits on (Grafana's), else seconds.
        let digits: u32 = if int.len() >= 13 { 6 } else { 9 };
        let frac: String = frac
            .chars()
            .chain(std::iter::repeat('0'))
            .take(digits as usize)
            .collect();
        let i: i64 = int.parse().map_err(|_| bad())?;
        let f: i64 = frac.parse().map_err(|_| bad())?;
        return i
            .checked_mul(10i64.pow(digits))
            .and_then(|n| n.checked_add(f))
            .ok_or_else(bad);
    }
    let t = t
        .strip_suffix(" UTC")
        .or_else(|| t.strip_suffix('Z'))
        .or_else(|| t.strip_suffix("+00:00"))
        .ok_or_else(bad)?;
    let (date, time) = t.split_once(['T', ' ']).ok_or_else(bad)?;
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d[..] else {
        return Err(bad());
    };
    let (y, mo, da) = (num(y)?, num(mo)?, num(da)?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let h: Vec<&str> = hms.split(':').collect();
    let [hh, mi, ss] = h[..] else {
        return Err(bad());
    };
    let (hh, mi, ss) = (num(hh)?, num(mi)?, num(ss)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || hh > 23 || mi > 59 || ss > 60 {
        return Err(bad());
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 9 {
        return Err(bad());
    }
    let frac_ns = if frac.is_empty() {
        0
    } else {
        num(frac)? * 10i64.pow(9 - frac.len() as u32)
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * m + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 86_400 + hh * 3600 + mi * 60 + ss) * 1_000_000_000) + frac_ns)
}

/// Worst wake-ups a report lists.
pub const WORST_LISTED: usize = 10;

/// One point of the latency-over-time plot: an interval (all CPUs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimePoint {
    /// Interval start, Unix ns.
    pub start_unix_ns: i64,
    /// Largest latency of any CPU, ns.
    pub max_ns: i64,
    /// Largest p99.9 of any CPU, ns.
    pub p999_ns: i64,
    /// Missed deadlines, all CPUs.
    pub missed: u64,
    /// The row's resolution: 0 an interval as stored, else a roll-up's
    /// length (the point then stands for an hour or a day), ns.
    pub resolution_ns: u64,
}

/// What a period holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Period {
    /// Start of the period asked for, Unix ns.
    pub since_unix_ns: i64,
    /// Its end (now), Unix ns.
    pub until_unix_ns: i64,
    /// Interval rows (one per CPU and interval).
    pub rows: u64,
    /// Time covered by stored intervals (the union over CPUs), ns.
    pub covered_ns: i64,
    /// Wake-ups, all CPUs.
    pub count: u64,
    /// Missed deadlines, all CPUs.
    pub missed: u64,
    /// Largest latency, ns.
    pub max_ns: Option<i64>,
    /// When it happened (its wake-up's deadline if kept, else its interval's start).
    pub max_at_unix_ns: Option<i64>,
    /// Its cause, when the trace ran.
    pub max_cause: Option<String>,
    /// p99 over all CPUs, ns.
    pub p99_ns: Option<i64>,
    /// p99.9 over all CPUs, ns.
    pub p999_ns: Option<i64>,
    /// Per CPU.
    pub cpus: Vec<CpuLine>,
    /// Latency over time.
    pub over_time: Vec<TimePoint>,
    /// The histogram of the period, non-empty buckets `(edge ns, count)`.
    pub histogram: Vec<(i64, u64)>,
    /// Causes of the kept worst wake-ups, most first.
    pub causes: Vec<CauseLine>,
    /// Intervals whose worst wake-ups were explained by the trace.
    pub explained_rows: u64,
    /// Machine states in force (the first one at the start of the period).
    pub states: Vec<(i64, MachineState)>,
    /// Intervals the rows stand for (a roll-up stands for many).
    pub intervals: u64,
    /// Which resolution each part of the period has, oldest first: the
    /// intervals as stored, or hourly or daily roll-ups (docs/WATCH.md,
    /// "Retention").
    pub resolutions: Vec<ResolutionSpan>,
    /// Where the daily p99.9 or miss rate shifted, and what changed with
    /// it ([`crate::change`]), oldest first.
    pub changes: Vec<crate::change::ChangePoint>,
    /// Events the explaining trace lost, all CPUs (`None`: no row recorded it).
    pub trace_lost_events: Option<u64>,
    /// The [`WORST_LISTED`] worst kept wake-ups, latest first, with their ids.
    pub worst: Vec<WorstLine>,
}

/// A stretch of the period stored at one resolution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolutionSpan {
    /// `interval` (as stored), `hour` or `day`.
    pub resolution: String,
    /// 0 for intervals as stored, else the roll-up's length, ns.
    pub resolution_ns: u64,
    /// The first row's start, Unix ns.
    pub from_unix_ns: i64,
    /// The last row's end, Unix ns.
    pub to_unix_ns: i64,
    /// Rows at this resolution.
    pub rows: u64,
    /// Intervals they stand for.
    pub intervals: u64,
}

/// The word for a resolution: `interval`, `hour`, `day`.
pub fn resolution_word(ns: u64) -> String {
    match ns {
        crate::store::RAW => "interval".into(),
        crate::store::HOUR_NS => "hour".into(),
        crate::store::DAY_NS => "day".into(),
        n => dur_words(n as i64),
    }
}

impl Period {
    /// Sums `rows` (oldest first) over `[since, until]`.
    pub fn of<'a>(
        rows: &'a [StoredInterval],
        states: Vec<(i64, MachineState)>,
        since_unix_ns: i64,
        until_unix_ns: i64,
    ) -> Period {
        let mut all = Hist::new();
        let mut per: BTreeMap<usize, (Hist, CpuLine)> = BTreeMap::new();
        let mut times: BTreeMap<i64, TimePoint> = BTreeMap::new();
        let mut causes: std::collections::HashMap<(Option<&'a str>, Option<&'a str>), CauseSum> =
            std::collections::HashMap::new();
        let mut days: BTreeMap<i64, (Hist, u64, u64)> = BTreeMap::new();
        let mut day_causes: std::collections::HashMap<
            (i64, Option<&'a str>, Option<&'a str>),
            u64,
        > = std::collections::HashMap::new();
        let (mut count, mut missed, mut explained_rows) = (0, 0, 0);
        let mut max: Option<(i64, i64, Option<String>)> = None;
        let mut spans: Vec<(i64, i64)> = Vec::new();
        let mut intervals = 0;
        let mut resolutions: Vec<ResolutionSpan> = Vec::new();
        let mut worst: Vec<((i64, i64), usize, &'a crate::store::Wakeup)> = Vec::new();
        for s in rows {
            let r = &s.interval;
            count += r.count;
            missed += r.missed;
            explained_rows += s.explained_rows;
            intervals += s.source_rows;
            match resolutions.last_mut() {
                Some(l) if l.resolution_ns == s.resolution_ns => {
                    l.to_unix_ns = l.to_unix_ns.max(r.end_unix_ns);
                    l.rows += 1;
                    l.intervals += s.source_rows;
                }
                _ => resolutions.push(ResolutionSpan {
                    resolution: resolution_word(s.resolution_ns),
                    resolution_ns: s.resolution_ns,
                    from_unix_ns: r.start_unix_ns,
                    to_unix_ns: r.end_unix_ns,
                    rows: 1,
                    intervals: s.source_rows,
                }),
            }
            spans.push((
                r.start_unix_ns.max(since_unix_ns),
                r.end_unix_ns.min(until_unix_ns),
            ));
            all.add_sparse(&r.histogram);
            let day = r.start_unix_ns.div_euclid(crate::store::DAY_NS as i64);
            let dd = days.entry(day).or_insert_with(|| (Hist::new(), 0, 0));
            dd.0.add_sparse(&r.histogram);
            dd.1 += r.count;
            dd.2 += r.missed;
            let e = per.entry(r.cpu).or_insert_with(|| {
                (
                    Hist::new(),
                    CpuLine {
                        cpu: r.cpu,
                        intervals: 0,
                        count: 0,
                        missed: 0,
                        p99_ns: None,
                        p999_ns: None,
                        max_ns: None,
                        steal_ns: 0,
                        watch_cpu_ns: 0,
                        watch_cpu_percent: None,
                        watch_cpu_span_ns: 0,
                        trace_lost_events: None,
                    },
                )
            });
            e.0.add_sparse(&r.histogram);
            e.1.intervals += s.source_rows;
            e.1.count += r.count;
            e.1.missed += r.missed;
            e.1.steal_ns += r.steal_ns;
            if let Some(n) = r.watch_cpu_ns {
                e.1.watch_cpu_ns += n;
                e.1.watch_cpu_span_ns += (r.end_unix_ns - r.start_unix_ns).max(0);
            }
            e.1.max_ns = e.1.max_ns.max(r.max_ns);
            if let Some(n) = r.trace_lost_events {
                e.1.trace_lost_events = Some(e.1.trace_lost_events.unwrap_or(0) + n);
            }
            // A row whose largest latency is below the 10th worst so far
            // has none to add (months of rows: most are skipped whole).
            let floor = (worst.len() == WORST_LISTED)
                .then(|| worst.iter().map(|x| x.0 .0).min())
                .flatten();
            let wakeups: &[crate::store::Wakeup] = match (floor, r.max_ns) {
                (Some(f), Some(m)) if m < f => &[],
                _ => &r.wakeups,
            };
            for w in wakeups {
                let key = (w.latency_ns, w.deadline_unix_ns);
                if worst.len() < WORST_LISTED {
                    worst.push((key, r.cpu, w));
                } else if let Some(m) = worst.iter_mut().min_by_key(|x| x.0) {
                    if key > m.0 {
                        *m = (key, r.cpu, w);
                    }
                }
            }
            if let Some(m) = r.max_ns {
                let tp = times.entry(r.start_unix_ns).or_insert(TimePoint {
                    start_unix_ns: r.start_unix_ns,
                    max_ns: m,
                    p999_ns: 0,
                    missed: 0,
                    resolution_ns: s.resolution_ns,
                });
                tp.resolution_ns = tp.resolution_ns.max(s.resolution_ns);
                tp.max_ns = tp.max_ns.max(m);
                tp.p999_ns = tp.p999_ns.max(r.p999_ns.unwrap_or(0));
                tp.missed += r.missed;
                if max.as_ref().map_or(true, |(x, _, _)| m > *x) {
                    let w = r.wakeups.iter().find(|w| w.latency_ns == m);
                    let at = w.map_or(r.start_unix_ns, |w| w.deadline_unix_ns);
                    let cause = w.and_then(crate::store::Wakeup::cause_words);
                    max = Some((m, at, cause));
                }
            }
            // Borrowed keys: no allocation per wake-up over months of rows.
            let mut add = |category: Option<&'a str>, name: Option<&'a str>, c: CauseSum| {
                *day_causes.entry((day, category, name)).or_default() += c.wakeups;
                match causes.entry((category, name)) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(c);
                    }
                    std::collections::hash_map::Entry::Occupied(mut o) => o.get_mut().add(&c),
                }
            };
            if s.resolution_ns == crate::store::RAW {
                for w in &r.wakeups {
                    add(
                        w.category.as_deref(),
                        w.name.as_deref(),
                        CauseSum {
                            wakeups: 1,
                            missed: w.missed,
                            worst: w.latency_ns,
                            first: w.deadline_unix_ns,
                            last: w.deadline_unix_ns,
                        },
                    );
                }
            } else {
                for c in &s.causes {
                    add(
                        c.category.as_deref(),
                        c.name.as_deref(),
                        CauseSum {
                            wakeups: c.wakeups,
                            missed: c.missed,
                            worst: c.worst_latency_ns,
                            first: c.first_unix_ns,
                            last: c.last_unix_ns,
                        },
                    );
                }
            }
        }
        let mut daily: BTreeMap<i64, crate::change::Day> = days
            .into_iter()
            .map(|(d, (h, count, missed))| {
                // The day's max is not kept apart: the bucket edge stands for it.
                let p999_ns = h.quantile(0.999, i64::MAX);
                (
                    d,
                    crate::change::Day {
                        start_unix_ns: d * crate::store::DAY_NS as i64,
                        count,
                        missed,
                        p999_ns,
                        causes: BTreeMap::new(),
                    },
                )
            })
            .collect();
        for ((d, cat, name), n) in day_causes {
            if let Some(day) = daily.get_mut(&d) {
                *day.causes
                    .entry((
                        cat.unwrap_or("unexplained").to_string(),
                        name.unwrap_or_default().to_string(),
                    ))
                    .or_default() += n;
            }
        }
        let daily: Vec<crate::change::Day> = daily.into_values().collect();
        let changes = crate::change::find(&daily, &states);
        let mut by_key: BTreeMap<(String, String), CauseLine> = BTreeMap::new();
        for ((cat, name), c) in causes {
            let key = (
                cat.unwrap_or("unexplained").to_string(),
                name.unwrap_or_default().to_string(),
            );
            let l = by_key.entry(key.clone()).or_insert(CauseLine {
                category: key.0,
                name: key.1,
                wakeups: 0,
                missed: 0,
                worst_latency_ns: c.worst,
                first_unix_ns: c.first,
                last_unix_ns: c.last,
            });
            l.wakeups += c.wakeups;
            l.missed += c.missed;
            l.worst_latency_ns = l.worst_latency_ns.max(c.worst);
            l.first_unix_ns = l.first_unix_ns.min(c.first);
            l.last_unix_ns = l.last_unix_ns.max(c.last);
        }
        let causes = by_key;
        let cpus = per
            .into_values()
            .map(|(h, mut l)| {
                let m = l.max_ns.unwrap_or(0);
                l.p99_ns = h.quantile(0.99, m);
                l.p999_ns = h.quantile(0.999, m);
                l.watch_cpu_percent = (l.watch_cpu_span_ns > 0)
                    .then(|| 100.0 * l.watch_cpu_ns as f64 / l.watch_cpu_span_ns as f64);
                l
            })
            .collect();
        let mut causes: Vec<CauseLine> = causes.into_values().collect();
        causes.sort_by(|a, b| {
            b.wakeups
                .cmp(&a.wakeups)
                .then(b.worst_latency_ns.cmp(&a.worst_latency_ns))
        });
        let m = max.as_ref().map_or(0, |x| x.0);
        worst.sort_by_key(|w| std::cmp::Reverse(w.0));
        let worst = worst
            .into_iter()
            .map(|(_, cpu, w)| WorstLine {
                id: w.id,
                cpu,
                deadline_unix_ns: w.deadline_unix_ns,
                latency_ns: w.latency_ns,
                missed: w.missed,
                cause: w.cause_words(),
            })
            .collect();
        let trace_lost_events = rows
            .iter()
            .filter_map(|s| s.interval.trace_lost_events)
            .reduce(|a, b| a + b);
        Period {
            since_unix_ns,
            until_unix_ns,
            rows: rows.len() as u64,
            covered_ns: union_ns(spans),
            count,
            missed,
            max_ns: max.as_ref().map(|x| x.0),
            max_at_unix_ns: max.as_ref().map(|x| x.1),
            max_cause: max.and_then(|x| x.2),
            p99_ns: all.quantile(0.99, m),
            p999_ns: all.quantile(0.999, m),
            cpus,
            over_time: times.into_values().collect(),
            histogram: all.sparse(),
            causes,
            explained_rows,
            states,
            intervals,
            resolutions,
            changes,
            trace_lost_events,
            worst,
        }
    }

    /// Reads the period `[at − width/2, at + width/2]` from `store`: the
    /// rows (every CPU) whose span overlaps it — the stored interval of a
    /// spike, or the hour or day it was rolled into (`watch report --at`).
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn read_at(store: &Store, at_unix_ns: i64, width_ns: u64) -> Result<Period> {
        let half = (width_ns / 2).min(i64::MAX as u64) as i64;
        let (since, until) = (
            at_unix_ns.saturating_sub(half),
            at_unix_ns.saturating_add(half),
        );
        let rows = store.intervals_around(since, until)?;
        let states = store.states_since(since)?;
        Ok(Period::of(&rows, states, since, until))
    }

    /// Reads the period `[now − since, now]` from `store`.
    ///
    /// # Errors
    /// [`ErrorKind::Database`].
    pub fn read(store: &Store, since_ns: u64, now_unix_ns: i64) -> Result<Period> {
        let since = now_unix_ns - since_ns as i64;
        let rows = store.intervals_since(since)?;
        let states = store.states_since(since)?;
        Ok(Period::of(&rows, states, since, now_unix_ns))
    }
}

/// One cause's wake-ups summed while a period is read.
#[derive(Debug, Clone, Copy)]
struct CauseSum {
    wakeups: u64,
    missed: u64,
    worst: i64,
    first: i64,
    last: i64,
}

impl CauseSum {
    fn add(&mut self, o: &CauseSum) {
        self.wakeups += o.wakeups;
        self.missed += o.missed;
        self.worst = self.worst.max(o.worst);
        self.first = self.first.min(o.first);
        self.last = self.last.max(o.last);
    }
}

/// Total length of the union of `[a, b)` spans, ns.
fn union_ns(mut spans: Vec<(i64, i64)>) -> i64 {
    spans.retain(|(a, b)| b > a);
    spans.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(i64, i64)> = None;
    for (a, b) in spans {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

/// What `watch show ID` prints for a wake-up whose interval was rolled up
/// and not kept among the roll-up's worst ([`Store::rolled_up`]): that its
/// own record is gone, the span it was stored in, and per rolled-up row
/// of that span (it was in one of them) the figures kept — wake-ups,
/// misses, p99.9, maximum, the top causes and the worst wake-ups kept,
/// with their ids — then the command for the report of that span.
pub fn rolled_up_text(g: &crate::store::RolledUpWakeup) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "wake-up {} is not kept: its interval was rolled up, and a roll-up keeps only its {} worst wake-ups with their causes",
        g.id,
        crate::store::ROLLUP_WORST
    );
    let from = g
        .rows
        .iter()
        .map(|r| r.interval.start_unix_ns)
        .min()
        .unwrap_or(0);
    let to = g
        .rows
        .iter()
        .map(|r| r.interval.end_unix_ns)
        .max()
        .unwrap_or(0);
    let bound =
        |what: &str, id: Option<i64>| id.map_or(String::new(), |i| format!("{what} wake-up {i}"));
    let near: Vec<String> = [bound("after", g.kept_before), bound("before", g.kept_after)]
        .into_iter()
        .filter(|b| !b.is_empty())
        .collect();
    let _ = writeln!(
        s,
        "it was stored between {} and {}{}; what remains of it is in one of these rows:",
        utc(g.from_unix_ns.max(from)),
        utc(g.to_unix_ns.min(to)),
        if near.is_empty() {
            String::new()
        } else {
            format!(
                " ({}, which {} kept)",
                near.join(", "),
                if near.len() == 1 { "is" } else { "are" }
            )
        }
    );
    let f = |v: Option<i64>| v.map_or("-".into(), fmt_ns);
    for r in &g.rows {
        let i = &r.interval;
        let _ = writeln!(
            s,
            "  CPU {}, roll-up per {} from {} to {} ({} intervals): {} wake-ups, {} missed, p99.9 {}, max {}",
            i.cpu,
            resolution_word(r.resolution_ns),
            utc(i.start_unix_ns),
            utc(i.end_unix_ns),
            r.source_rows,
            i.count,
            i.missed,
            f(i.p999_ns),
            f(i.max_ns)
        );
        let mut causes = r.cause_counts();
        causes.sort_by(|a, b| {
            b.wakeups
                .cmp(&a.wakeups)
                .then(b.worst_latency_ns.cmp(&a.worst_latency_ns))
        });
        let top: Vec<String> = causes
            .iter()
            .take(5)
            .map(|c| {
                let w = crate::store::Wakeup {
                    category: c.category.clone(),
                    name: c.name.clone(),
                    ..crate::store::Wakeup::default()
                };
                format!(
                    "{} ×{} (worst {})",
                    w.cause_words()
                        .unwrap_or_else(|| "no cause recorded".into()),
                    c.wakeups,
                    fmt_ns(c.worst_latency_ns)
                )
            })
            .collect();
        if !top.is_empty() {
            let _ = writeln!(
                s,
                "    top causes of its worst wake-ups: {}",
                top.join(", ")
            );
        }
        let worst: Vec<String> = i
            .wakeups
            .iter()
            .take(5)
            .map(|w| {
                format!(
                    "{} {}{}",
                    w.id.map_or("-".into(), |i| i.to_string()),
                    fmt_ns(w.latency_ns),
                    w.cause_words().map_or(String::new(), |c| format!(" ({c})"))
                )
            })
            .collect();
        if !worst.is_empty() {
            let _ = writeln!(
                s,
                "    worst kept (`watch show` them): {}",
                worst.join(", ")
            );
        }
    }
    let _ = writeln!(
        s,
        "around it: firmtime watch report --at {} --since {}",
        firmtime_rt::system::rfc3339_utc(
            UNIX_EPOCH + Duration::from_nanos((from + (to - from) / 2).max(0) as u64)
        ),
        dur_words((to - from).max(60_000_000_000))
    );
    s
}

/// The answer of `watch check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Every wake-up within the limit, no missed deadline beyond the allowed.
    Fine,
    /// Not so.
    NotFine,
    /// No interval stored in the period.
    NoData,
    /// The file is not a watch database this firmtime reads (not SQLite,
    /// another program's SQLite file, or a newer schema): no answer about
    /// the machine, and not "not fine" either.
    NotWatchDatabase,
    /// A `watch` starting on the file had not made it readable (its
    /// tables, its switch to WAL) within the reader's wait
    /// ([`crate::store::STARTING_WRITER_WAIT`]): no answer yet, nothing
    /// read or changed; ask again.
    Starting,
}

impl Answer {
    /// The exit code: 0 fine, 1 not fine, 2 no data, 3 not a watch
    /// database, 4 a watch is starting on it (try again).
    pub fn code(self) -> u8 {
        match self {
            Answer::Fine => 0,
            Answer::NotFine => 1,
            Answer::NoData => 2,
            Answer::NotWatchDatabase => 3,
            Answer::Starting => 4,
        }
    }
}

/// A duration as a user types it: the largest unit that divides it
/// (`30d`, `1h`, `90s`, `500µs`), else firmtime's usual form (`1.5ms`).
pub fn dur_words(ns: i64) -> String {
    let ns = ns.max(0) as u64;
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "min"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "µs"),
    ];
    for (u, name) in UNITS {
        if ns >= u && ns % u == 0 {
            return format!("{}{name}", ns / u);
        }
    }
    firmtime_rt::units::format_duration(Duration::from_nanos(ns))
}

/// A size as a user types it: the largest binary unit that divides it
/// (`256MiB`, `1GiB`), else MiB with one decimal (`3.4MiB`).
pub fn size_words(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (u, name) in UNITS {
        if bytes >= u && bytes % u == 0 {
            return format!("{}{name}", bytes / u);
        }
    }
    if bytes < 1 << 20 {
        return format!("{bytes}B");
    }
    format!("{:.1}MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// "Was this machine fine?": fine when the period holds data, its worst
/// wake-up is at most `max_latency_ns` late and at most `max_missed`
/// deadlines were missed. Returns the answer and one line saying why.
pub fn verdict(p: &Period, max_latency_ns: i64, max_missed: u64) -> (Answer, String) {
    let window = dur_words(p.until_unix_ns - p.since_unix_ns);
    if p.rows == 0 || p.count == 0 {
        return (
            Answer::NoData,
            format!(
                "no data: no interval stored in the last {window} (since {})",
                utc(p.since_unix_ns)
            ),
        );
    }
    let cpus: Vec<String> = p.cpus.iter().map(|c| c.cpu.to_string()).collect();
    let max = p.max_ns.unwrap_or(0);
    let coverage = format!(
        "{} of the last {window} watched on CPU{} {}",
        dur_words(p.covered_ns),
        if cpus.len() == 1 { "" } else { "s" },
        cpus.join(",")
    );
    let at = p
        .max_at_unix_ns
        .map(|t| format!(" at {}", utc(t)))
        .unwrap_or_default();
    // The worst wake-up's id, for `watch show`.
    let id = p
        .worst
        .first()
        .filter(|w| w.latency_ns == max)
        .and_then(|w| w.id);
    let cause = match (&p.max_cause, id) {
        (Some(c), Some(id)) => format!(" ({c}; wake-up {id})"),
        (Some(c), None) => format!(" ({c})"),
        (None, Some(id)) => format!(" (wake-up {id})"),
        (None, None) => String::new(),
    };
    let p999 = p.p999_ns.map_or("-".into(), fmt_ns);
    if max > max_latency_ns || p.missed > max_missed {
        let mut why = Vec::new();
        if max > max_latency_ns {
            why.push(format!(
                "worst wake-up {} late{at}{cause} > {}",
                fmt_ns(max),
                dur_words(max_latency_ns)
            ));
        }
        if p.missed > max_missed {
            why.push(format!(
                "{} missed deadline{} (allowed {max_missed})",
                p.missed,
                if p.missed == 1 { "" } else { "s" }
            ));
        }
        (
            Answer::NotFine,
            format!(
                "NOT fine: {}; {} wake-ups, p99.9 {p999}; {coverage}",
                why.join("; "),
                p.count
            ),
        )
    } else {
        (
            Answer::Fine,
            format!(
                "fine: {} wake-ups, worst {} ≤ {}, p99.9 {p999}, {} missed deadlines; {coverage}",
                p.count,
                fmt_ns(max),
                dur_words(max_latency_ns),
                p.missed
            ),
        )
    }
}

/// Files `watch report` wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// report.md.
    pub markdown: PathBuf,
    /// report.json.
    pub json: PathBuf,
    /// The PNGs (none when nothing to plot).
    pub plots: Vec<PathBuf>,
    /// Plots that could not be drawn, and why (no font, …).
    pub plot_errors: Vec<String>,
}

/// The Markdown of a period (plots referenced by file name when drawn).
pub fn markdown(p: &Period, db: &Path, plots: &[PathBuf], max_latency_ns: i64) -> String {
    let mut s = String::new();
    let (_, line) = verdict(p, max_latency_ns, 0);
    let _ = writeln!(s, "# firmtime watch report\n");
    let _ = writeln!(
        s,
        "Database `{}`, from {} to {}.\n",
        db.display(),
        utc(p.since_unix_ns),
        utc(p.until_unix_ns)
    );
    let _ = writeln!(s, "**{line}**\n");
    if !p.resolutions.is_empty() {
        let _ = writeln!(
            s,
            "## Resolution\n\nOlder intervals are rolled up into hours, then days (docs/WATCH.md, \"Retention\"); the figures below sum them exactly (counts, misses, maxima, histograms).\n\n| from | to | resolution | rows | intervals |\n|---|---|---|---|---|"
        );
        for r in &p.resolutions {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                utc(r.from_unix_ns),
                utc(r.to_unix_ns),
                match r.resolution_ns {
                    0 => "each interval as stored".to_string(),
                    _ => format!("per {}", r.resolution),
                },
                r.rows,
                r.intervals
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## What changed\n");
    if p.changes.is_empty() {
        let _ = writeln!(
            s,
            "No change point: the p99.9 and the miss rate per day did not shift (a two-sample test over up to {} days either side, |t| ≥ {}, a factor of {} at least).\n",
            crate::change::WINDOW_DAYS,
            crate::change::T_MIN,
            crate::change::FACTOR_MIN
        );
    } else {
        for c in &p.changes {
            let _ = writeln!(s, "- {}", c.line());
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Per CPU\n");
    let _ = writeln!(
        s,
        "| CPU | intervals | wake-ups | missed | p99 | p99.9 | max | steal | watch itself | trace lost |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &p.cpus {
        let f = |v: Option<i64>| v.map_or("-".into(), fmt_ns);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.cpu,
            c.intervals,
            c.count,
            c.missed,
            f(c.p99_ns),
            f(c.p999_ns),
            f(c.max_ns),
            fmt_ns(c.steal_ns as i64),
            c.watch_cpu_percent
                .map_or("-".into(), |p| format!("{p:.2} % of the CPU")),
            c.trace_lost_events
                .map_or("-".into(), |n| format!("{n} events"))
        );
    }
    if let Some(n) = p.trace_lost_events.filter(|&n| n > 0) {
        let _ = writeln!(
            s,
            "\nThe kernel lost {n} events from the explaining trace in this period (ring buffer overrun): a late wake-up whose span lost events has the cause \"unknown (trace lost N events)\", never a guess."
        );
    }
    let _ = writeln!(s, "\n## Worst wake-ups\n");
    if p.worst.is_empty() {
        let _ = writeln!(s, "No wake-up kept in this period.");
    } else {
        let _ = writeln!(
            s,
            "Each with its id: `firmtime watch show ID` prints its whole cause record.\n\n| id | CPU | deadline | late | missed | cause |\n|---|---|---|---|---|---|"
        );
        for w in &p.worst {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                w.id.map_or("-".into(), |i| i.to_string()),
                w.cpu,
                utc(w.deadline_unix_ns),
                fmt_ns(w.latency_ns),
                w.missed,
                w.cause.as_deref().unwrap_or("no trace (cause unknown)")
            );
        }
    }
    let _ = writeln!(s, "\n## Latency over time\n");
    for pl in plots {
        let name = pl.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("latency-over-time") {
            let _ = writeln!(s, "![latency over time]({name})\n");
        }
    }
    let mut worst: Vec<&TimePoint> = p.over_time.iter().collect();
    worst.sort_by_key(|t| std::cmp::Reverse(t.max_ns));
    let _ = writeln!(
        s,
        "The {} intervals with the latest wake-up:\n\n| interval start | max | p99.9 | missed | resolution |\n|---|---|---|---|---|",
        worst.len().min(10)
    );
    for t in worst.iter().take(10) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            utc(t.start_unix_ns),
            fmt_ns(t.max_ns),
            fmt_ns(t.p999_ns),
            t.missed,
            resolution_word(t.resolution_ns)
        );
    }
    let _ = writeln!(s, "\n## Histogram of the period\n");
    for pl in plots {
        let name = pl.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("histogram") {
            let _ = writeln!(s, "![histogram]({name})\n");
        }
    }
    let _ = writeln!(s, "| latency up to | wake-ups |\n|---|---|");
    let mut h = Hist::new();
    h.add_sparse(&p.histogram);
    let mut below = 0;
    for e in crate::metrics::BUCKET_EDGES_NS {
        let n = h.at_or_below(e);
        let _ = writeln!(s, "| {} | {} |", fmt_ns(e), n - below);
        below = n;
    }
    let _ = writeln!(s, "| later | {} |", h.total() - below);
    let _ = writeln!(s, "\n## Causes of the worst wake-ups\n");
    if p.causes.is_empty() {
        let _ = writeln!(s, "No wake-up kept in this period.");
    } else {
        let _ = writeln!(
            s,
            "Each interval keeps each CPU's worst wake-ups; {} of {} intervals were explained by the trace.\n",
            p.explained_rows, p.intervals
        );
        let _ = writeln!(
            s,
            "| cause | wake-ups | missed | worst | first | last |\n|---|---|---|---|---|---|"
        );
        for c in p.causes.iter().take(20) {
            let what = firmtime_trace::explain::Category::from_key(&c.category).map_or_else(
                || "no trace (cause unknown)".to_string(),
                |k| firmtime_trace::explain::cause_words(k, &c.name),
            );
            let _ = writeln!(
                s,
                "| {what} | {} | {} | {} | {} | {} |",
                c.wakeups,
                c.missed,
                fmt_ns(c.worst_latency_ns),
                utc(c.first_unix_ns),
                utc(c.last_unix_ns)
            );
        }
    }
    let _ = writeln!(s, "\n## Machine state\n");
    for (t, st) in &p.states {
        let _ = writeln!(
            s,
            "- from {}: kernel {}, preempt {}, governors {}, clocksource {}, virtualization {}, tuned {}; cmdline `{}`",
            utc(*t),
            st.kernel_release,
            st.preempt_model,
            st.governors,
            st.clocksource,
            st.virtualization,
            st.tuned_profile,
            st.kernel_cmdline
        );
    }
    s
}

/// Points the latency-over-time plot draws at most (about two per pixel
/// column): months of one-minute intervals are tens of thousands.
const PLOT_POINTS: usize = 2000;

/// At most `n` points for a plot: consecutive points in equal groups, each
/// group one point at its first start with the group's largest max and
/// p99.9 and its summed misses, so that no spike is lost.
fn decimate(points: &[TimePoint], n: usize) -> Vec<TimePoint> {
    if points.len() <= n || n == 0 {
        return points.to_vec();
    }
    points
        .chunks(points.len().div_ceil(n))
        .map(|g| TimePoint {
            start_unix_ns: g[0].start_unix_ns,
            max_ns: g.iter().map(|t| t.max_ns).max().unwrap_or(0),
            p999_ns: g.iter().map(|t| t.p999_ns).max().unwrap_or(0),
            missed: g.iter().map(|t| t.missed).sum(),
            resolution_ns: g.iter().map(|t| t.resolution_ns).max().unwrap_or(0),
        })
        .collect()
}

/// Writes report.md, report.json and the plots into `out`.
///
/// # Errors
/// [`ErrorKind::Io`] when `out` or a file cannot be written (a plot that
/// cannot be drawn is listed in [`Written::plot_errors`] instead).
pub fn write(p: &Period, db: &Path, out: &Path, max_latency_ns: i64) -> Result<Written> {
    std::fs::create_dir_all(out).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("--out {}: cannot create: {e}", out.display()),
        )
    })?;
    // Before anything is written: a symbolic link (or a directory, …)
    // planted at one of the names is refused and left alone, and so is the
    // whole report (none of it half-written beside it).
    for name in OUTPUT_FILES {
        firmtime_rt::fs::output_kind(&out.join(name)).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("--out {}: {e}", out.display()),
            )
        })?;
    }
    let mut plots = Vec::new();
    let mut plot_errors = Vec::new();
    if !p.over_time.is_empty() {
        let path = out.join(OUTPUT_FILES[2]);
        let t0 = p.over_time[0].start_unix_ns;
        let span = p.over_time[p.over_time.len() - 1].start_unix_ns - t0;
        // The x axis in the unit that suits the span.
        let (unit_ns, x_label) = match span {
            s if s > 3 * 86_400_000_000_000 => (8.64e13, "days"),
            s if s > 3 * 3_600_000_000_000 => (3.6e12, "hours"),
            s if s > 3 * 60_000_000_000 => (6e10, "minutes"),
            _ => (1e9, "seconds"),
        };
        let hours = |t: i64| (t - t0) as f64 / unit_ns;
        let points = decimate(&p.over_time, PLOT_POINTS);
        let max: Vec<(f64, f64)> = points
            .iter()
            .map(|t| (hours(t.start_unix_ns), t.max_ns as f64 / 1000.0))
            .collect();
        let p999: Vec<(f64, f64)> = points
            .iter()
            .map(|t| (hours(t.start_unix_ns), t.p999_ns as f64 / 1000.0))
            .collect();
        let title = format!("Wake-up latency per interval from {}", utc(t0));
        match firmtime_plot::chart_png_log_y(
            &path,
            &title,
            x_label,
            "latency (µs, log)",
            &[
                firmtime_plot::Series::new("max", &max),
                firmtime_plot::Series::new("p99.9", &p999),
            ],
        ) {
            Ok(()) => plots.push(path),
            Err(e) => plot_errors.push(format!("{}: {}", path.display(), e.message())),
        }
    }
    if !p.histogram.is_empty() {
        let path = out.join(OUTPUT_FILES[3]);
        // watch's buckets are upper-inclusive, (previous edge, edge].
        let buckets = p.histogram.iter().map(|&(e, count)| {
            let i = crate::hist::index(e.min(1_000_000_001));
            let low_ns = if i == 0 {
                e
            } else {
                crate::hist::edge(i - 1) + 1
            };
            firmtime_plot::Bucket {
                low_ns,
                high_ns: e,
                count,
            }
        });
        let counts = firmtime_plot::Counts::new(buckets).with_extremes(None, p.max_ns);
        match firmtime_plot::histogram_png(
            &path,
            "Histogram of the period: wake-up latency, all CPUs",
            &[("wake-ups", &counts)],
            firmtime_plot::Unit::Us,
        ) {
            Ok(()) => plots.push(path),
            Err(e) => plot_errors.push(format!("{}: {}", path.display(), e.message())),
        }
    }
    let md = out.join(OUTPUT_FILES[0]);
    firmtime_rt::fs::write_atomic(&md, markdown(p, db, &plots, max_latency_ns).as_bytes())?;
    let json = out.join(OUTPUT_FILES[1]);
    let text = serde_json::to_string_pretty(p)
        .map_err(|e| Error::new(ErrorKind::Io, format!("report.json: {e}")))?;
    firmtime_rt::fs::write_atomic(&json, text.as_bytes())?;
    Ok(Written {
        markdown: md,
        json,
        plots,
        plot_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CpuInterval, Wakeup};

    fn row(
        cpu: usize,
        start_s: i64,
        max_us: i64,
        missed: u64,
        cat: Option<&str>,
    ) -> StoredInterval {
        let mut h = Hist::new();
        for _ in 0..999 {
            h.record(10_000);
        }
        h.record(max_us * 1000);
        StoredInterval::raw(
            0,
            1,
            CpuInterval {
                seq: 0,
                cpu,
                start_unix_ns: start_s * 1_000_000_000,
                end_unix_ns: (start_s + 60) * 1_000_000_000,
                period_ns: 1_000_000,
                count: 1000,
                missed,
                min_ns: Some(10_000),
                max_ns: Some(max_us * 1000),
                mean_ns: Some(10_000.0),
                p99_ns: Some(10_000),
                p999_ns: Some(10_000),
                steal_ns: 0,
                partial: false,
                merged: 0,
                explained: cat.is_some(),
                watch_cpu_ns: None,
                trace_lost_events: None,
                histogram: h.sparse(),
                wakeups: vec![Wakeup {
                    deadline_unix_ns: (start_s + 7) * 1_000_000_000,
                    latency_ns: max_us * 1000,
                    missed,
                    category: cat.map(str::to_string),
                    name: cat.map(|_| "kworker/0:1".to_string()),
                    cause_ns: cat.map(|_| 1000),
                    ..crate::store::Wakeup::default()
                }],
            },
        )
    }

    #[test]
    fn check_answers_fine_not_fine_and_no_data() {
        let now = 3600 * 1_000_000_000;
        let empty = Period::of(&[], vec![], 0, now);
        assert_eq!(verdict(&empty, 1_000_000, 0).0, Answer::NoData);
        assert_eq!(Answer::NoData.code(), 2);

        let ok = Period::of(
            &[row(0, 0, 300, 0, None), row(1, 0, 200, 0, None)],
            vec![],
            0,
            now,
        );
        let (a, line) = verdict(&ok, 1_000_000, 0);
        assert_eq!(a, Answer::Fine, "{line}");
        assert!(
            line.starts_with("fine: 2000 wake-ups, worst 300 µs"),
            "{line}"
        );
        assert_eq!(ok.covered_ns, 60_000_000_000, "two CPUs, one minute");

        let late = Period::of(
            &[row(0, 0, 300, 0, None), row(0, 60, 2500, 2, Some("task"))],
            vec![],
            0,
            now,
        );
        let (a, line) = verdict(&late, 1_000_000, 0);
        assert_eq!((a, a.code()), (Answer::NotFine, 1));
        assert!(
            line.contains(
                "worst wake-up 2.5 ms late at 1970-01-01 00:01:07 UTC (task kworker/0:1)"
            ),
            "{line}"
        );
        assert!(line.contains("2 missed deadlines"), "{line}");
        assert_eq!(late.max_ns, Some(2_500_000));
        assert_eq!(late.causes[0].category, "task");
        assert_eq!(late.over_time.len(), 2);
        // A higher limit and two allowed misses: fine.
        assert_eq!(verdict(&late, 5_000_000, 2).0, Answer::Fine);
    }

    /// Months of intervals are drawn as at most PLOT_POINTS points, and
    /// the largest wake-up of the period is still one of them.
    #[test]
    fn a_decimated_plot_keeps_every_spike() {
        let pts: Vec<TimePoint> = (0..10_001)
            .map(|i| TimePoint {
                start_unix_ns: i * 60,
                max_ns: if i == 7_777 { 50_000_000 } else { 100 + i % 7 },
                p999_ns: 50,
                missed: u64::from(i % 100 == 0),
                resolution_ns: 0,
            })
            .collect();
        let d = decimate(&pts, 2000);
        assert!(d.len() <= 2000, "{}", d.len());
        assert_eq!(d.iter().map(|t| t.max_ns).max(), Some(50_000_000));
        assert_eq!(d.iter().map(|t| t.missed).sum::<u64>(), 101);
        assert_eq!(d[0].start_unix_ns, 0);
        assert_eq!(decimate(&pts[..5], 2000), pts[..5].to_vec());
    }

    #[test]
    fn union_of_spans_counts_overlaps_once() {
        assert_eq!(union_ns(vec![(0, 10), (5, 15), (20, 30)]), 25);
        assert_eq!(union_ns(vec![]), 0);
    }
}
