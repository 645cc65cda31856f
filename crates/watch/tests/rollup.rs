//! Retention: intervals rolled up into hours and days keep every figure a
//! report sums (counts, misses, maxima, histograms, causes) exactly; the
//! size cap holds the file under `--max-db-size`; a report says which
//! resolution each part of its period has.

#[path = "support/synth.rs"]
mod synth;

use firmtime_watch::hist::Hist;
use firmtime_watch::report::{self, Period};
use firmtime_watch::store::{
    self, CauseCount, Retention, RunInfo, Store, StoredInterval, DAY_NS, HOUR_NS, OTHER_NAMES,
    ROLLUP_CAUSES,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use synth::{minute, Lcg, Shape};

/// A fresh directory, removed on drop (a failed test too).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!(
        "firmtime-watch-rollup-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

fn new_db(path: &Path) -> (Store, i64) {
    let mut s = Store::open(path).unwrap();
    let id = s
        .begin_run(&RunInfo {
            started_unix_ns: 0,
            firmtime_version: "t".into(),
            command_line: "t".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .unwrap();
    (s, id)
}

/// A UTC midnight.
const D0: i64 = 20_000 * DAY_NS as i64;
const MIN: i64 = 60_000_000_000;

/// Writes `minutes` one-minute intervals of `cpus` CPUs from `start`, in
/// one transaction; returns every row written.
fn generate(
    s: &mut Store,
    run: i64,
    start: i64,
    minutes: usize,
    cpus: usize,
    shape: Shape,
    union: &mut BTreeMap<usize, Hist>,
) -> Vec<store::CpuInterval> {
    let mut rng = Lcg(start as u64 ^ 0x5eed);
    let mut all = Vec::new();
    s.write_bulk(run, minutes, |i| {
        let t = start + i as i64 * MIN;
        let rows: Vec<_> = (0..cpus)
            .map(|c| {
                let u = union.entry(c).or_default();
                minute(&mut rng, c, i as u64, t, shape, Some(u))
            })
            .collect();
        all.extend(rows.iter().cloned());
        (t + MIN, synth::state("6.1.0"), rows)
    })
    .unwrap();
    all
}

fn wide() -> Retention {
    Retention {
        keep_ns: 3650 * DAY_NS,
        raw_ns: 7 * DAY_NS,
        hourly_ns: 90 * DAY_NS,
        max_bytes: 1 << 40,
    }
}

/// The figures a report sums, which a roll-up must leave as they were.
fn assert_same_figures(before: &Period, after: &Period, what: &str) {
    assert_eq!(before.count, after.count, "{what}: wake-ups");
    assert_eq!(before.missed, after.missed, "{what}: missed");
    assert_eq!(before.max_ns, after.max_ns, "{what}: max");
    assert_eq!(
        before.max_at_unix_ns, after.max_at_unix_ns,
        "{what}: max at"
    );
    assert_eq!(before.max_cause, after.max_cause, "{what}: max cause");
    assert_eq!(before.p99_ns, after.p99_ns, "{what}: p99");
    assert_eq!(before.p999_ns, after.p999_ns, "{what}: p99.9");
    assert_eq!(before.histogram, after.histogram, "{what}: histogram");
    assert_eq!(before.causes, after.causes, "{what}: causes");
    assert_eq!(before.cpus, after.cpus, "{what}: per CPU");
    assert_eq!(before.intervals, after.intervals, "{what}: intervals");
    assert_eq!(
        before.explained_rows, after.explained_rows,
        "{what}: explained"
    );
    assert_eq!(before.covered_ns, after.covered_ns, "{what}: covered");
}

#[test]
fn rollup_to_hours_then_days_keeps_counts_maxima_histograms_and_causes_exactly() {
    let d = scratch("exact");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let shape = Shape {
        samples: Some(300),
        worst: 5,
        names: 6,
        ..Shape::default()
    };
    let mut union = BTreeMap::new();
    let raw = generate(&mut s, run, D0, 180, 2, shape, &mut union);
    let read = |s: &Store| s.intervals_since(i64::MIN).unwrap();
    let period = |rows: &[StoredInterval]| Period::of(rows, vec![], D0, D0 + DAY_NS as i64);
    let before = period(&read(&s));
    assert_eq!(before.resolutions.len(), 1);
    assert_eq!(before.resolutions[0].resolution, "interval");

    // Seven days and four hours later: the three hours are older than --keep-raw.
    let m = s
        .maintain(D0 + 7 * DAY_NS as i64 + 4 * HOUR_NS as i64, &wide())
        .unwrap();
    assert_eq!((m.rolled_to_hour, m.rolled_to_day, m.deleted), (360, 0, 0));
    let hours = read(&s);
    assert_eq!(hours.len(), 6, "one row per CPU and hour");
    for h in &hours {
        assert_eq!(
            (h.resolution_ns, h.source_rows, h.explained_rows),
            (HOUR_NS, 60, 60)
        );
        let src: Vec<_> = raw
            .iter()
            .filter(|r| {
                r.cpu == h.interval.cpu
                    && r.start_unix_ns.div_euclid(HOUR_NS as i64)
                        == h.interval.start_unix_ns.div_euclid(HOUR_NS as i64)
            })
            .collect();
        assert_eq!(src.len(), 60);
        let i = &h.interval;
        assert_eq!(i.count, src.iter().map(|r| r.count).sum::<u64>());
        assert_eq!(i.missed, src.iter().map(|r| r.missed).sum::<u64>());
        assert_eq!(i.steal_ns, src.iter().map(|r| r.steal_ns).sum::<u64>());
        assert_eq!(
            i.watch_cpu_ns,
            Some(src.iter().filter_map(|r| r.watch_cpu_ns).sum::<u64>())
        );
        assert_eq!(i.max_ns, src.iter().filter_map(|r| r.max_ns).max());
        assert_eq!(i.min_ns, src.iter().filter_map(|r| r.min_ns).min());
        assert_eq!(i.start_unix_ns, src[0].start_unix_ns);
        assert_eq!(i.end_unix_ns, src[59].end_unix_ns);
        let mut hh = Hist::new();
        src.iter().for_each(|r| hh.add_sparse(&r.histogram));
        assert_eq!(i.histogram, hh.sparse());
        assert_eq!(i.p999_ns, hh.quantile(0.999, i.max_ns.unwrap()));
        assert_eq!(i.wakeups.len(), store::ROLLUP_WORST);
        assert_eq!(
            i.wakeups[0].latency_ns,
            i.max_ns.unwrap(),
            "the worst wake-up is kept"
        );
        let kept: u64 = h.causes.iter().map(|c| c.wakeups).sum();
        assert_eq!(
            kept,
            src.iter().map(|r| r.wakeups.len() as u64).sum::<u64>()
        );
    }
    // The merged histograms of a CPU are the histogram of all its samples.
    for (cpu, u) in &union {
        let mut m = Hist::new();
        hours
            .iter()
            .filter(|h| h.interval.cpu == *cpu)
            .for_each(|h| m.add_sparse(&h.interval.histogram));
        assert_eq!(&m, u, "CPU {cpu}");
    }
    let after = period(&hours);
    assert_same_figures(&before, &after, "hours");
    assert_eq!(after.resolutions.len(), 1);
    assert_eq!(
        (
            after.resolutions[0].resolution.as_str(),
            after.resolutions[0].rows,
            after.resolutions[0].intervals
        ),
        ("hour", 6, 360)
    );

    // Ninety-one days later: the hours are older than --keep-hourly.
    let m = s.maintain(D0 + 91 * DAY_NS as i64, &wide()).unwrap();
    assert_eq!((m.rolled_to_hour, m.rolled_to_day), (0, 6));
    let days = read(&s);
    assert_eq!(days.len(), 2);
    assert!(days
        .iter()
        .all(|r| r.resolution_ns == DAY_NS && r.source_rows == 180));
    for (cpu, u) in &union {
        let day = days.iter().find(|r| r.interval.cpu == *cpu).unwrap();
        let mut m = Hist::new();
        m.add_sparse(&day.interval.histogram);
        assert_eq!(&m, u, "CPU {cpu}");
    }
    let after = period(&days);
    assert_same_figures(&before, &after, "days");
    assert_eq!(after.resolutions[0].resolution, "day");
    s.integrity_check().unwrap();
}

#[test]
fn causes_beyond_a_rollups_list_are_summed_per_category_under_other_names() {
    let d = scratch("causes");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let shape = Shape {
        samples: Some(100),
        worst: 10,
        names: 200,
        ..Shape::default()
    };
    let raw = generate(&mut s, run, D0, 60, 1, shape, &mut BTreeMap::new());
    let rows: Vec<StoredInterval> = s.intervals_since(i64::MIN).unwrap();
    let mut want: BTreeMap<(Option<String>, Option<String>), CauseCount> = BTreeMap::new();
    for r in &rows {
        for c in r.cause_counts() {
            want.entry((c.category.clone(), c.name.clone()))
                .and_modify(|w| w.add(&c))
                .or_insert(c);
        }
    }
    assert!(
        want.len() > ROLLUP_CAUSES + 10,
        "enough names to overflow: {}",
        want.len()
    );
    s.maintain(D0 + 8 * DAY_NS as i64, &wide()).unwrap();
    let h = s.intervals_since(i64::MIN).unwrap();
    assert_eq!(h.len(), 1);
    let got = &h[0].causes;
    let named: Vec<&CauseCount> = got
        .iter()
        .filter(|c| c.name.as_deref() != Some(OTHER_NAMES))
        .collect();
    assert_eq!(named.len(), ROLLUP_CAUSES);
    for c in &named {
        assert_eq!(
            Some(*c),
            want.get(&(c.category.clone(), c.name.clone())),
            "kept exactly"
        );
    }
    // The most frequent names are the ones kept.
    let least_kept = named.iter().map(|c| c.wakeups).min().unwrap();
    let kept: Vec<_> = named
        .iter()
        .map(|c| (c.category.clone(), c.name.clone()))
        .collect();
    assert!(want
        .iter()
        .filter(|(k, _)| !kept.contains(k))
        .all(|(_, c)| c.wakeups <= least_kept));
    // Per category, the sums are those of all wake-ups.
    let by_cat = |v: &mut dyn Iterator<Item = &CauseCount>| {
        let mut m: BTreeMap<Option<String>, (u64, u64, i64)> = BTreeMap::new();
        for c in v {
            let e = m.entry(c.category.clone()).or_default();
            e.0 += c.wakeups;
            e.1 += c.missed;
            e.2 = e.2.max(c.worst_latency_ns);
        }
        m
    };
    assert_eq!(by_cat(&mut got.iter()), by_cat(&mut want.values()));
    assert_eq!(
        got.iter().map(|c| c.wakeups).sum::<u64>(),
        raw.iter().map(|r| r.wakeups.len() as u64).sum::<u64>()
    );
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

#[test]
fn the_size_cap_holds_the_file_rolling_up_early_then_dropping_the_oldest_days() {
    let d = scratch("cap");
    let db = d.0.join("w.db");
    let (mut s, run) = new_db(&db);
    let shape = Shape {
        samples: None,
        worst: 10,
        names: 6,
        ..Shape::default()
    };
    let day = DAY_NS as i64;
    // Two days of two CPUs, all younger than --keep-raw; the cap is 1.3
    // times what one day takes.
    let mut raw = generate(&mut s, run, D0, 1440, 2, shape, &mut BTreeMap::new());
    let one_day = s.size_bytes().unwrap();
    raw.extend(generate(
        &mut s,
        run,
        D0 + day,
        1440,
        2,
        shape,
        &mut BTreeMap::new(),
    ));
    let count = |rows: &[store::CpuInterval], from: i64| -> u64 {
        rows.iter()
            .filter(|r| r.start_unix_ns >= from)
            .map(|r| r.count)
            .sum()
    };
    let kept = |s: &Store| -> u64 {
        s.intervals_since(i64::MIN)
            .unwrap()
            .iter()
            .map(|r| r.interval.count)
            .sum()
    };
    let cap = one_day / 10 * 13;
    let full = s.size_bytes().unwrap();
    assert!(
        full > cap,
        "the history ({full} bytes) is larger than the cap ({cap})"
    );
    let ret = Retention {
        max_bytes: cap,
        ..wide()
    };
    let m = s.maintain(D0 + 2 * day, &ret).unwrap();
    assert!(
        file_len(&db) <= cap,
        "{} bytes over the cap {cap}",
        file_len(&db)
    );
    assert_eq!(m.size_bytes, file_len(&db));
    // Rolling the oldest day up into hours was enough: nothing dropped.
    assert_eq!((m.cap_rolled, m.cap_dropped), (2880, 0), "{m:?}");
    assert_eq!(kept(&s), count(&raw, D0));
    s.integrity_check().unwrap();
    // A third day and half the cap: the oldest days go, the newest is
    // rolled up into hours, every wake-up of it still counted.
    raw.extend(generate(
        &mut s,
        run,
        D0 + 2 * day,
        1440,
        2,
        shape,
        &mut BTreeMap::new(),
    ));
    // Less than a day as stored takes.
    let cap = one_day / 10 * 6;
    let ret = Retention {
        max_bytes: cap,
        ..wide()
    };
    let m = s.maintain(D0 + 3 * day, &ret).unwrap();
    assert!(
        file_len(&db) <= cap,
        "{} bytes over the cap {cap}",
        file_len(&db)
    );
    assert!(m.cap_dropped > 0, "{m:?}");
    assert_eq!(m.oldest_unix_ns, Some(D0 + 2 * day));
    let rows = s.intervals_since(i64::MIN).unwrap();
    assert!(rows
        .iter()
        .all(|r| r.interval.start_unix_ns >= D0 + 2 * day));
    assert!(rows.iter().all(|r| r.resolution_ns == HOUR_NS));
    assert_eq!(kept(&s), count(&raw, D0 + 2 * day));
    s.integrity_check().unwrap();
    // Under the cap now: a second pass changes nothing.
    let again = s.maintain(D0 + 3 * day, &ret).unwrap();
    assert_eq!(
        (again.cap_rolled, again.cap_dropped, again.deleted),
        (0, 0, 0)
    );
}

#[test]
fn a_report_says_which_resolution_each_part_of_its_period_has() {
    let d = scratch("res");
    let (mut s, run) = new_db(&d.0.join("w.db"));
    let shape = Shape {
        samples: Some(50),
        worst: 3,
        names: 6,
        ..Shape::default()
    };
    let mut u = BTreeMap::new();
    generate(&mut s, run, D0, 120, 1, shape, &mut u);
    // The first two hours become hours; then an hour more as stored.
    s.maintain(D0 + 7 * DAY_NS as i64 + 2 * HOUR_NS as i64, &wide())
        .unwrap();
    generate(&mut s, run, D0 + 2 * HOUR_NS as i64, 60, 1, shape, &mut u);
    let rows = s.intervals_since(i64::MIN).unwrap();
    let p = Period::of(&rows, vec![], D0, D0 + 3 * HOUR_NS as i64);
    let r: Vec<_> = p
        .resolutions
        .iter()
        .map(|r| {
            (
                r.resolution.as_str(),
                r.rows,
                r.intervals,
                r.from_unix_ns,
                r.to_unix_ns,
            )
        })
        .collect();
    let h = HOUR_NS as i64;
    assert_eq!(
        r,
        vec![
            ("hour", 2, 120, D0, D0 + 2 * h),
            ("interval", 60, 60, D0 + 2 * h, D0 + 3 * h)
        ]
    );
    assert_eq!(p.intervals, 180);
    let md = report::markdown(&p, Path::new("w.db"), &[], 1_000_000);
    assert!(md.contains("## Resolution"), "{md}");
    assert!(
        md.contains(&format!(
            "| {} | {} | per hour | 2 | 120 |",
            report::utc(D0),
            report::utc(D0 + 2 * h)
        )),
        "{md}"
    );
    assert!(md.contains("| each interval as stored | 60 | 60 |"), "{md}");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["resolutions"][0]["resolution"], "hour");
    assert_eq!(json["resolutions"][1]["resolution_ns"], 0);
    assert_eq!(json["over_time"][0]["resolution_ns"], HOUR_NS);
}

/// `watch show ID` after a roll-up. A wake-up the roll-up did not keep
/// among its 10 worst gave "no wake-up ID", the same as an id never given
/// — and SQLite gave the next wake-up the largest id present plus one, so
/// once a roll-up had deleted the largest (the last interval of a run,
/// rolled up when the next run starts a week later) an id an exemplar or
/// a report had named came to mean another wake-up. Now ids are never
/// given twice (`meta.wakeup_ids_issued`), and for a rolled-away id
/// `Store::rolled_up` names what remains: the rolled-up rows of the span
/// its kept neighbours bound, one of which is its CPU's row of its hour.
#[test]
fn a_wakeup_rolled_away_is_told_by_what_remains_and_its_id_is_never_given_again() {
    let d = scratch("show-rolled");
    let db = d.0.join("w.db");
    let (mut s, run) = new_db(&db);
    let shape = Shape {
        samples: Some(200),
        worst: 4,
        names: 6,
        ..Shape::default()
    };
    let mut union = BTreeMap::new();
    generate(&mut s, run, D0, 120, 2, shape, &mut union);
    // Every wake-up as stored: id → (CPU, its interval's start and end, latency).
    let mut stored = BTreeMap::new();
    for r in s.intervals_since(i64::MIN).unwrap() {
        for w in &r.interval.wakeups {
            stored.insert(
                w.id.unwrap(),
                (
                    r.interval.cpu,
                    r.interval.start_unix_ns,
                    r.interval.end_unix_ns,
                    w.latency_ns,
                ),
            );
        }
    }
    assert_eq!(stored.len(), 120 * 2 * 4);
    let last = *stored.keys().next_back().unwrap();
    let m = s
        .maintain(D0 + 8 * DAY_NS as i64, &wide())
        .expect("roll the two hours up");
    assert_eq!(m.rolled_to_hour, 240);
    drop(s);
    let r = Store::open_existing(&db).unwrap();
    let (mut kept, mut told) = (0, 0);
    for (&id, &(cpu, start, end, latency)) in &stored {
        if let Some(k) = r.wakeup(id).unwrap() {
            assert_eq!(k.resolution_ns, HOUR_NS);
            assert_eq!((k.cpu, k.wakeup.latency_ns), (cpu, latency));
            assert_eq!(r.rolled_up(id).unwrap().map(|x| x.id), Some(id), "{id}");
            kept += 1;
            continue;
        }
        let g = r
            .rolled_up(id)
            .unwrap()
            .unwrap_or_else(|| panic!("wake-up {id} rolled up: what remains"));
        assert_eq!(g.id, id);
        assert!(
            g.from_unix_ns <= start && end <= g.to_unix_ns,
            "{id}: {g:?}"
        );
        assert!(g.kept_before.is_none_or(|b| b < id) && g.kept_after.is_none_or(|a| a > id));
        // Its CPU's row of its hour is among the rows named, and holds it.
        let home: Vec<_> = g
            .rows
            .iter()
            .filter(|x| {
                x.interval.cpu == cpu
                    && x.interval.start_unix_ns <= start
                    && end <= x.interval.end_unix_ns
            })
            .collect();
        assert_eq!(home.len(), 1, "{id}: {g:?}");
        assert_eq!(home[0].resolution_ns, HOUR_NS);
        assert!(home[0].interval.max_ns >= Some(latency));
        assert!(!home[0].causes.is_empty());
        assert!(g.rows.iter().all(|x| x.resolution_ns == HOUR_NS));
        assert!(g.rows.len() <= 4, "two hours of two CPUs at most");
        told += 1;
    }
    assert_eq!(kept, 2 * 2 * 10, "each CPU's hour keeps its 10 worst");
    assert_eq!(kept + told, stored.len());
    assert!(r.wakeup(last).unwrap().is_none(), "the last wake-up went");
    for never in [0, -1, last + 1] {
        assert_eq!(r.rolled_up(never).unwrap(), None, "{never}");
    }
    drop(r);
    // The next run's wake-ups get ids above every id given before.
    let (mut s, run2) = new_db(&db);
    let mut fresh = vec![synth::minute(
        &mut Lcg(7),
        0,
        0,
        D0 + 8 * DAY_NS as i64,
        shape,
        None,
    )];
    s.store_interval(run2, 1, &synth::state("6.1.0"), &mut fresh)
        .unwrap();
    let ids: Vec<i64> = fresh[0].wakeups.iter().map(|w| w.id.unwrap()).collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.iter().all(|&i| i > last), "{ids:?} after {last}");
    assert!(s.wakeup(last).unwrap().is_none());
    assert_eq!(
        s.rolled_up(last).unwrap().map(|g| g.rows[0].resolution_ns),
        Some(HOUR_NS)
    );
}
