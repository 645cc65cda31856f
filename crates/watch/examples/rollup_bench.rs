//! Generates a watch database of DAYS simulated days ending now, as
//! `firmtime watch` would have left it: each day's one-minute intervals
//! (2 CPUs, 6000 wake-ups a minute, 10 worst wake-ups with causes) stored
//! in one transaction, then the retention applied at the end of the day
//! ([`Store::maintain`] with the defaults: 7 days as stored, hours to 90
//! days, days beyond, 256 MiB). Prints what it made, then times the report
//! of the last DAYS (read + Markdown/JSON/PNG) three times.
//!
//!   cargo run --release -p firmtime-watch --example rollup_bench -- DAYS DB [CPUS]
//!
//! Used by scripts/watch-rollup-bench.sh.

#[path = "../tests/support/synth.rs"]
mod synth;

use firmtime_watch::report::{self, Period};
use firmtime_watch::store::{Retention, RunInfo, Store, DAY_NS};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use synth::{minute, Lcg, Shape};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: rollup_bench DAYS DB [CPUS]");
        std::process::exit(2);
    }
    let days: i64 = args[1].parse().expect("DAYS: a whole number");
    let db = std::path::PathBuf::from(&args[2]);
    let cpus: usize = args.get(3).map_or(2, |c| c.parse().expect("CPUS"));
    // REUSE=1 with DB present: time the report only (profiling).
    let reuse = std::env::var_os("REUSE").is_some() && db.is_file();
    if !reuse {
        let _ = std::fs::remove_file(&db);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let min = 60_000_000_000i64;
    let end = now.div_euclid(min) * min;
    let start = end - days * DAY_NS as i64;
    let mut s = Store::open(&db).expect("open");
    let run = s
        .begin_run(&RunInfo {
            started_unix_ns: start,
            firmtime_version: "rollup_bench".into(),
            command_line: "rollup_bench".into(),
            config: "{}".into(),
            conditions: "[]".into(),
        })
        .expect("run");
    let ret = Retention::default();
    let mut rng = Lcg(42);
    let shape = Shape {
        samples: None,
        worst: 10,
        names: 6,
        ..Shape::default()
    };
    let (mut t_gen, mut t_maint) = (0.0, 0.0);
    for d in (0..days).filter(|_| !reuse) {
        let day0 = start + d * DAY_NS as i64;
        let t = Instant::now();
        s.write_bulk(run, 1440, |i| {
            let t = day0 + i as i64 * min;
            let seq = (d * 1440) as u64 + i as u64;
            let rows = (0..cpus)
                .map(|c| minute(&mut rng, c, seq, t, shape, None))
                .collect();
            (t + min, synth::state("6.1.0-rt"), rows)
        })
        .expect("write");
        t_gen += t.elapsed().as_secs_f64();
        let t = Instant::now();
        s.maintain(day0 + DAY_NS as i64, &ret).expect("maintain");
        t_maint += t.elapsed().as_secs_f64();
    }
    let rows = s.intervals_since(i64::MIN).expect("read");
    let by = |r: u64| rows.iter().filter(|x| x.resolution_ns == r).count();
    let len = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    // The main file and its write-ahead log.
    let size = len(&db) + len(&db.with_extension("db-wal"));
    println!(
        "generated {days} days x {cpus} CPUs: {} interval rows in {t_gen:.2} s, retention applied in {t_maint:.2} s; kept {} rows ({} as stored, {} hourly, {} daily); file {} (cap {})",
        days * 1440 * cpus as i64,
        rows.len(),
        by(0),
        by(firmtime_watch::store::HOUR_NS),
        by(DAY_NS),
        report::size_words(size),
        report::size_words(ret.max_bytes)
    );
    drop(rows);
    // The report opens the database as `watch report` does.
    drop(s);
    let s = Store::open_existing(&db).expect("open for the report");
    let out = db.with_extension("report");
    let cpu_s = || {
        // SAFETY: rusage is plain data; all zeros is a valid value.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct it is given, which lives here.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    let (mut times, mut reads, mut cpus_s) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let c = cpu_s();
        let t = Instant::now();
        let p = Period::read(&s, days as u64 * DAY_NS, now).expect("report");
        reads.push(t.elapsed().as_secs_f64());
        report::write(&p, &db, &out, 1_000_000).expect("write report");
        times.push(t.elapsed().as_secs_f64());
        cpus_s.push(cpu_s() - c);
    }
    for v in [&mut times, &mut reads, &mut cpus_s] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "report --since {days}d in process, median of 5: {:.3} s (min {:.3}, max {:.3}; CPU time {:.3} s), of which reading and summing {:.3} s",
        times[2], times[0], times[4], cpus_s[2], reads[2]
    );
    let _ = std::fs::remove_dir_all(&out);
}
