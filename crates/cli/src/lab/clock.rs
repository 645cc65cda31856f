//! `firmtime lab clock`: Finney (2001) Table 1 on this machine.

use super::{Common, Runner};
use crate::Outcome;
use firmtime_lab::clockread::{ClockResult, Config, FINNEY_TABLE1};
use firmtime_lab::load::LoadSpec;
use firmtime_lab::measure::Cell;
use firmtime_lab::measurement::Clock;
use firmtime_rt::clock::ClockKind;

/// Arguments of `firmtime lab clock`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab clock                      # gettimeofday, 1,000,000 reads, 3 hogs, like the paper\n  \
    firmtime lab clock --clock monotonic --quick --json clock.json\n\n\
    Columns are the gaps between successive reads in µs: mean, max, sd, and the\n\
    smallest non-zero gap (the clock's effective granularity); Finney's 2001\n\
    figures (Pentium II 350 MHz, Linux 2.2.12) are printed beside them.")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The clock to read: gettimeofday, monotonic, monotonic-raw, realtime,
    /// boottime, tai or tsc [default: gettimeofday, the paper's clock].
    #[arg(long, value_name = "CLOCK", value_parser = clock_kind)]
    clock: Option<ClockKind>,
    /// Successive reads per condition, 2 to 100000000 [default: 1000000; --quick: 200000].
    #[arg(long = "samples", alias = "calls", value_name = "N", value_parser = calls)]
    calls: Option<u64>,
    /// CPU hogs in the load rows, 0 to 256 (0 = idle rows only) [default: 3, like the paper].
    #[arg(long, value_name = "N", value_parser = hogs)]
    hogs: Option<u32>,
    /// The load rows' load as a spec, repeatable: cpu or cpu:N, Finney's CPU hogs (the hogs of
    /// several add up); the same as --hogs N.
    #[arg(long, value_name = "SPEC", value_parser = cpu_load, conflicts_with = "hogs")]
    load: Vec<u32>,
    /// SCHED_FIFO priority of the SCHED_FIFO rows: fifo:P or P, 1 to 99 [default: fifo:80].
    #[arg(long = "priority", alias = "fifo-priority", value_name = "PRIORITY",
          value_parser = crate::args::fifo_priority(99))]
    fifo_priority: Option<u8>,
}

fn clock_kind(s: &str) -> Result<ClockKind, String> {
    s.parse::<ClockKind>().map_err(|e| e.to_string())
}

fn calls(s: &str) -> Result<u64, String> {
    let r = Config::CALLS;
    s.parse::<u64>()
        .ok()
        .filter(|v| r.contains(v))
        .ok_or_else(|| format!("valid is {} to {}", r.start(), r.end()))
}

fn hogs(s: &str) -> Result<u32, String> {
    let r = Config::HOGS;
    s.parse::<u32>()
        .ok()
        .filter(|v| r.contains(v))
        .ok_or_else(|| format!("valid is {} to {} (0 = idle rows only)", r.start(), r.end()))
}

/// The hogs of a `--load` spec: the load rows take CPU hogs only.
fn cpu_load(s: &str) -> Result<u32, String> {
    match s.parse::<LoadSpec>().map_err(|e| e.message().to_string())? {
        LoadSpec::Cpu { hogs } => Ok(hogs),
        other => Err(format!(
            "the load rows of lab clock are Finney's CPU hogs: valid is cpu or cpu:N \
             (N 1 to 256), not {}",
            other.kind()
        )),
    }
}

/// The configuration these arguments ask for.
fn config(args: &Args) -> anyhow::Result<Config> {
    let mut cfg = args.common.preset(Config::quick, Config::full);
    super::set_given(&mut cfg.clock, args.clock);
    super::set_given(&mut cfg.calls, args.calls);
    super::set_given(&mut cfg.hogs, args.hogs);
    if !args.load.is_empty() {
        cfg.hogs = args.load.iter().fold(0u32, |sum, &h| sum.saturating_add(h));
    }
    super::set_given(&mut cfg.fifo_priority, args.fifo_priority);
    cfg.load_exe = Some(std::env::current_exe()?);
    Ok(cfg)
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    Runner::so_far(&args.common, Clock).print(|| config(&args), print_table)
}

fn us(ns: Option<i64>, decimals: usize) -> String {
    ns.map_or_else(
        || "-".to_string(),
        |v| format!("{:.*}", decimals, v as f64 / 1e3),
    )
}

fn print_table(r: &ClockResult) {
    let res = r
        .resolution_ns
        .map_or_else(|| "unavailable".to_string(), |n| format!("{n} ns"));
    println!(
        "firmtime lab clock — Finney (2001) Table 1: times between successive reads of {}",
        r.clock
    );
    print!("{} reads per condition, clock_getres {res}", r.calls);
    if let Some(hz) = r.tsc_hz {
        print!(", TSC {:.3} MHz", hz / 1e6);
    }
    println!(
        ", load = {} CPU hog{}",
        r.hogs,
        if r.hogs == 1 { "" } else { "s" }
    );
    println!();
    println!("{:<22} {:<61} | Finney 2001, µs", "", "this machine, µs");
    println!(
        "{:<22} {:>9} {:>11} {:>9} {:>9}  {:<18} | {:>6} {:>11} {:>8}",
        "Configuration", "mean", "max", "sd", "min>0", "obtained", "mean", "max", "sd"
    );
    for c in &r.cells {
        let paper = c.paper.map_or_else(
            || format!("{:>6} {:>11} {:>8}", "-", "-", "-"),
            |p| {
                format!(
                    "{:>6} {:>11} {:>8}",
                    us(Some(p.mean_ns), 2),
                    us(Some(p.max_ns), 0),
                    us(Some(p.sd_ns), 2)
                )
            },
        );
        match &c.result {
            Cell::Measured(m) => {
                let o = &m.conditions.obtained;
                let obtained = format!(
                    "{}{}",
                    o.policy,
                    if o.memory_locked == Some(true) {
                        " mlock"
                    } else {
                        ""
                    }
                );
                println!(
                    "{:<22} {:>9} {:>11} {:>9} {:>9}  {:<18} | {paper}{}",
                    c.label,
                    us(m.summary.mean_ns, 3),
                    us(m.summary.max_ns, 1),
                    us(m.summary.sd_ns, 3),
                    us(m.smallest_nonzero_gap_ns, 3),
                    obtained,
                    if m.partial { "  (partial)" } else { "" }
                );
            }
            Cell::Skipped { reason } => {
                println!("{:<22} skipped: {reason}", c.label);
                println!("{:<22} {:>61} | {paper}", "", "");
            }
        }
    }
    let missing = FINNEY_TABLE1.len().saturating_sub(r.cells.len());
    if r.partial && missing > 0 {
        println!("({missing} row(s) not measured: interrupted)");
    }
    println!();
    println!(
        "min>0 is the smallest non-zero gap (the clock's granularity). Finney: 10 runs of \
         1,000,000 gettimeofday calls,\nPentium II 350 MHz, Linux 2.2.12, load = 3 programs \
         doing continuous arithmetic."
    );
}
