//! `firmtime lab tails`: timer-signal delivery latency tails under SCHED_RR
//! contention (Etsion, Tsafrir & Feitelson 2003, §7, Table 6), and the
//! hidden `firmtime lab tails-worker` each measuring process runs.

use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use firmtime_lab::measurement::Tails;
use firmtime_lab::tails::{
    self, CellMeasurement, CellResult, Config, PaperTails, TailsResult, WorkerConfig, WorkerOutput,
};
use firmtime_rt::units::format_duration;
use std::time::Duration;

/// Process types of `--types`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProcType {
    /// Set alarms, compute nothing.
    Blk,
    /// Compute N % (each of --percents) of the time till the next alarm.
    Percent,
    /// Compute continuously; still set alarms.
    Cont,
}

/// Arguments of `firmtime lab tails`.
///
/// Without --procs/--percents/--types/--extra-cpu, measures the rows of the
/// paper's Table 6 (or, with --quick, BLK 2, CONT 2, 4% 2 and 4% 1+2CPU).
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Numbers of timer-setting SCHED_RR processes per cell (the paper: 1,2,4,8).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    procs: Vec<u32>,
    /// Compute shares of the N% type, 1 to 99 (the paper: 1,2,4,8).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    percents: Vec<u8>,
    /// Process types to measure.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    types: Vec<ProcType>,
    /// Extra CPU-bound SCHED_OTHER processes beside one N% process (the paper's "1+2CPU": 2).
    #[arg(long = "extra-cpu", value_delimiter = ',', value_name = "LIST")]
    extra_cpu: Vec<u32>,
    /// Alarms each process requests, 1 to 100000 (paper: 500; --quick: 100).
    #[arg(long)]
    alarms: Option<u32>,
    /// Longest alarm delay; delays are uniform from 1ms to it, 2ms to 10s (paper: 1s; --quick: 50ms).
    #[arg(long = "max-delay", value_name = "D", value_parser = args::duration)]
    max_delay: Option<Duration>,
    /// SCHED_RR priority of the timer-setting processes: rr:P or P, 1 to 99 [default: rr:50].
    #[arg(long, value_name = "PRIORITY", value_parser = crate::args::rr_priority,
          default_value_t = tails::DEFAULT_PRIORITY, hide_default_value = true)]
    priority: u8,
    /// Seed of the delays' PRNG (recorded in the JSON).
    #[arg(long, default_value_t = tails::DEFAULT_SEED)]
    seed: u64,
    /// CPU every process is pinned to (default: the last online CPU), like the paper's uniprocessor.
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
}

impl Args {
    fn config(&self) -> firmtime_lab::Result<Config> {
        let mut cfg = self.common.preset(Config::quick, Config::full);
        let custom = !self.procs.is_empty()
            || !self.percents.is_empty()
            || !self.types.is_empty()
            || !self.extra_cpu.is_empty();
        if custom {
            let procs = if self.procs.is_empty() {
                vec![1, 2, 4, 8]
            } else {
                self.procs.clone()
            };
            let percents = if self.percents.is_empty() {
                vec![1, 2, 4, 8]
            } else {
                self.percents.clone()
            };
            let all = self.types.is_empty();
            let has = |t| all || self.types.contains(&t);
            cfg.cells = Config::matrix(
                &procs,
                &percents,
                &self.extra_cpu,
                has(ProcType::Blk),
                has(ProcType::Cont),
                has(ProcType::Percent),
            )?;
        }
        super::set_given(&mut cfg.alarms, self.alarms);
        super::set_given(&mut cfg.max_delay_ns, self.max_delay.map(args::nanos));
        cfg.priority = self.priority;
        cfg.seed = self.seed;
        cfg.cpu = self.cpu;
        Ok(cfg)
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let tails = Tails {
        exe: std::env::current_exe()?,
    };
    let ran = Runner::new(&args.common, tails)
        .interrupted("lab tails: interrupted or timed out: the results above are partial")
        .run(
            || announce(&args),
            |_, r| {
                print_table(r);
                Ok(())
            },
        )?;
    Ok(ran.then(|result, outcome| {
        let measured = result
            .cells
            .iter()
            .filter(|c| c.result.measured().is_some())
            .count();
        if outcome == Outcome::Ok && measured == 0 {
            eprintln!("lab tails: no cell could be measured (see the reasons above)");
            return Outcome::Failed;
        }
        outcome
    }))
}

/// The configuration the flags ask for, announced on stderr.
fn announce(args: &Args) -> anyhow::Result<Config> {
    let cfg = args.config().map_err(super::usage)?;
    cfg.validate().map_err(super::usage)?;
    let cells: Vec<String> = cfg.cells.iter().map(|c| c.label()).collect();
    eprintln!(
        "lab tails: {} cell(s) [{}], {} alarms per process, delays 1ms..{}{}; about {} (at most {})",
        cfg.cells.len(),
        cells.join(", "),
        cfg.alarms,
        format_duration(Duration::from_nanos(cfg.max_delay_ns)),
        if args.common.quick {
            " (--quick: reduced matrix and delays; the paper used 500 alarms of 1..1000ms)"
        } else {
            ""
        },
        format_duration(round_s(cfg.expected_duration())),
        format_duration(round_s(cfg.time_bound())),
    );
    if cfg
        .cells
        .iter()
        .any(|c| c.compute_percent == 100 && c.procs > 1)
    {
        eprintln!(
            "note: CONT cells keep the pinned CPU busy at SCHED_RR; RT throttling (kernel.sched_rt_runtime_us) and the fair server give SCHED_OTHER work a slice of it, which shows up in the tails"
        );
    }
    Ok(cfg)
}

fn round_s(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs().max(1))
}

/// `50003` → `50,003`, like the paper's table.
fn grouped(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn us(ns: Option<i64>) -> String {
    match ns {
        Some(n) => grouped(((n.max(0) + 500) / 1000) as u64),
        None => "-".into(),
    }
}

fn paper_cols(p: Option<&PaperTails>) -> String {
    match p {
        Some(p) => format!(
            "{:>8} {:>8} {:>8} {:>8}",
            grouped(p.p90_us),
            grouped(p.p95_us),
            grouped(p.p99_us),
            grouped(p.max_us)
        ),
        None => format!("{:>8} {:>8} {:>8} {:>8}", "", "", "", ""),
    }
}

fn ours(m: &CellMeasurement) -> String {
    let s = &m.summary;
    format!(
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        us(s.p90_ns),
        us(s.p95_ns),
        us(s.p99_ns),
        us(s.p99_9_ns),
        us(s.max_ns),
        m.within_one_tick
            .map(|f| format!("{f:.2}"))
            .unwrap_or_else(|| "-".into())
    )
}

fn print_table(r: &TailsResult) {
    let k = &r.kernel;
    let hz = k
        .config_hz
        .map(|h| format!("CONFIG_HZ={h}"))
        .unwrap_or_else(|| "CONFIG_HZ unknown".into());
    let hres = match k.high_res_timers {
        Some(true) => "high-resolution timers active",
        Some(false) => "high-resolution timers NOT active (alarms expire on ticks)",
        None => "high-resolution timers unknown",
    };
    let slice = k
        .rr_timeslice_ms
        .map(|ms| format!("SCHED_RR timeslice {ms} ms"))
        .unwrap_or_else(|| "SCHED_RR timeslice unknown".into());
    let throttle = match (k.rt_runtime_us, k.rt_period_us) {
        (Some(-1), _) => "RT throttling off".to_string(),
        (Some(rt), Some(p)) => format!("RT throttling {rt}/{p} µs"),
        _ => "RT throttling unknown".into(),
    };
    println!("Latency to deliver timer signals, µs (Etsion, Tsafrir & Feitelson 2003, Table 6)");
    println!("This kernel: {hz}, {hres}, {slice}, {throttle}.");
    println!(
        "Paper: Linux 2.4 on one Pentium CPU, no high-resolution timers: 100 Hz with a 60 ms quantum, and 20,000 Hz with a 100 µs quantum."
    );
    println!(
        "Here: processes at SCHED_RR priority {}, pinned to CPU {}; {} alarms each, delays uniform in 1ms..{}, seed {}.",
        r.config.priority,
        r.cpu,
        r.config.alarms,
        format_duration(Duration::from_nanos(r.config.max_delay_ns)),
        r.config.seed
    );
    println!();
    let this = format!("this machine ({hz})");
    println!(
        "{:<16} | {:^56} | {:^35} | {:^35}",
        "Processes", this, "@100Hz (paper)", "@20,000Hz (paper)"
    );
    println!(
        "{:<6} {:<9} | {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} | {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8}",
        "Type", "Number", "0.9", "0.95", "0.99", "0.999", "max", "<tick",
        "0.9", "0.95", "0.99", "max", "0.9", "0.95", "0.99", "max"
    );
    for c in &r.cells {
        print_row(c);
    }
    println!();
    println!(
        "<tick: fraction delivered within one tick (1/CONFIG_HZ), the paper's Figure 7 reading. Blank paper columns: Table 6 has no such row."
    );
}

fn print_row(c: &CellResult) {
    let head = format!("{:<6} {:<9}", c.spec.type_label(), c.spec.number_label());
    let p100 = paper_cols(c.paper.as_ref().map(|p| &p.hz100));
    let p20k = paper_cols(c.paper.as_ref().map(|p| &p.hz20000));
    match &c.result {
        firmtime_lab::measure::Cell::Measured(m) => {
            let mark = if m.partial { " (partial)" } else { "" };
            println!("{head} | {} | {p100} | {p20k}{mark}", ours(m));
        }
        firmtime_lab::measure::Cell::Skipped { reason } => {
            println!("{head} | {:<56} | {p100} | {p20k}", "skipped");
            println!("    skipped: {reason}");
        }
    }
}

/// Arguments of the hidden `firmtime lab tails-worker` (one measuring process).
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[arg(long = "compute-percent")]
    compute_percent: u8,
    #[arg(long)]
    alarms: u32,
    #[arg(long = "max-delay-ns")]
    max_delay_ns: u64,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    priority: u8,
    #[arg(long)]
    cpu: Option<usize>,
    #[arg(long = "start-at-ns", default_value_t = 0)]
    start_at_ns: u64,
    #[arg(long = "deadline-ns")]
    deadline_ns: u64,
}

/// Runs one worker and prints its [`WorkerOutput`] as JSON on stdout.
pub fn run_worker(a: WorkerArgs) -> anyhow::Result<Outcome> {
    let cfg = WorkerConfig {
        compute_percent: a.compute_percent,
        alarms: a.alarms,
        max_delay_ns: a.max_delay_ns,
        seed: a.seed,
        priority: a.priority,
        cpu: a.cpu,
        start_at_ns: a.start_at_ns,
        deadline_ns: a.deadline_ns,
    };
    let out = WorkerOutput::from_result(tails::run_worker(&cfg));
    let failed = matches!(out, WorkerOutput::Failed { .. });
    println!("{}", serde_json::to_string(&out)?);
    Ok(if failed { Outcome::Failed } else { Outcome::Ok })
}

#[cfg(test)]
mod tests {
    use super::grouped;

    #[test]
    fn thousands_are_grouped_like_the_paper() {
        assert_eq!(grouped(5), "5");
        assert_eq!(grouped(50_003), "50,003");
        assert_eq!(grouped(740_025), "740,025");
        assert_eq!(grouped(1_000_000), "1,000,000");
    }
}
