//! `firmtime lab overhead`: Etsion et al. (2003) Table 2 on this machine.

use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use firmtime_lab::measure::{Cell, Priority};
use firmtime_lab::measurement::Overhead;
use firmtime_lab::overhead::{Config, Cost, OverheadResult, Spread, ETSION_TABLE2};

/// Arguments of `firmtime lab overhead`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab overhead --quick\n  \
    firmtime lab overhead --repeats 21 --json overhead.json\n\n\
    Each figure is the median of --repeats repetitions, with min, p90 and max;\n\
    cycles are ns × the calibrated TSC frequency (only with an invariant TSC).")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Repetitions of each figure, 1 to 1000 [default: 11; --quick: 5].
    #[arg(long = "repeats", alias = "reps", value_name = "N", value_parser = count(1, 1000))]
    reps: Option<u32>,
    /// Pipe round trips per repetition, 1 to 100000000 [default: 20000; --quick: 5000].
    #[arg(long, value_name = "N", value_parser = count(1, 100_000_000))]
    round_trips: Option<u32>,
    /// getpid system calls per repetition, 1 to 100000000 [default: 1000000; --quick: 200000].
    #[arg(long, value_name = "N", value_parser = count(1, 100_000_000))]
    traps: Option<u32>,
    /// Reads of each clock per repetition, 2 to 100000000 [default: 1000000; --quick: 200000].
    #[arg(long, value_name = "N", value_parser = count(2, 100_000_000))]
    clock_reads: Option<u32>,
    /// Bytes per memcpy, 4KiB to 4GiB; larger than the caches [default: 64MiB].
    #[arg(long, value_name = "S", value_parser = memcpy_size)]
    memcpy_size: Option<u64>,
    /// Scheduling of the measuring thread: user (or other), setpriority (nice -20 +
    /// mlockall), fifo (SCHED_FIFO 80) or fifo:P (or a bare P, 1 to 99), both + mlockall
    /// [default: user].
    #[arg(long, value_name = "PRIORITY", value_parser = priority)]
    priority: Option<Priority>,
}

fn count(lo: u32, hi: u32) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |s| {
        s.parse::<u32>()
            .ok()
            .filter(|v| (lo..=hi).contains(v))
            .ok_or_else(|| format!("valid is {lo} to {hi}"))
    }
}

fn memcpy_size(s: &str) -> Result<u64, String> {
    let v = args::size(s)?;
    if Config::MEMCPY.contains(&v) {
        Ok(v)
    } else {
        Err("valid is 4KiB to 4GiB".to_string())
    }
}

fn priority(s: &str) -> Result<Priority, String> {
    match s {
        "user" | "other" => Ok(Priority::User),
        "setpriority" => Ok(Priority::Setpriority),
        "fifo" => Ok(Priority::Fifo(80)),
        _ => s
            .strip_prefix("fifo:")
            .or(Some(s))
            .and_then(|p| p.parse::<u8>().ok())
            .filter(|p| (1..=99).contains(p))
            .map(Priority::Fifo)
            .ok_or_else(|| {
                "valid is user (other), setpriority, fifo, fifo:1 to fifo:99 or 1 to 99".to_string()
            }),
    }
}

fn config(args: &Args) -> anyhow::Result<Config> {
    let mut cfg = args.common.preset(Config::quick, Config::full);
    super::set_given(&mut cfg.repetitions, args.reps);
    super::set_given(&mut cfg.round_trips, args.round_trips);
    super::set_given(&mut cfg.traps, args.traps);
    super::set_given(&mut cfg.clock_reads, args.clock_reads);
    super::set_given(&mut cfg.memcpy_bytes, args.memcpy_size);
    super::set_given(&mut cfg.priority, args.priority);
    Ok(cfg)
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    Runner::so_far(&args.common, Overhead).print(|| config(&args), print_table)
}

fn spread(s: &Spread, decimals: usize) -> String {
    format!(
        "{:.d$} ({:.d$}–{:.d$}, p90 {:.d$})",
        s.median,
        s.min,
        s.max,
        s.p90,
        d = decimals
    )
}

fn cost_line(name: &str, c: &Cell<Cost>) {
    match c {
        Cell::Measured(c) => println!(
            "  {name:<34} {:>36}  {:>30}",
            spread(&c.ns, 1),
            c.cycles
                .as_ref()
                .map_or_else(|| "-".to_string(), |s| spread(s, 0))
        ),
        Cell::Skipped { reason } => println!("  {name:<34} skipped: {reason}"),
    }
}

fn print_table(r: &OverheadResult) {
    println!("firmtime lab overhead — Etsion, Tsafrir & Feitelson (2003) Table 2 on this machine");
    match (r.tsc_hz, &r.cycles_unavailable) {
        (Some(hz), _) => println!("TSC {:.3} MHz: cycles = ns × TSC rate", hz / 1e6),
        (None, Some(why)) => println!("no cycle figures: {why}"),
        (None, None) => {}
    }
    let o = &r.conditions.obtained;
    println!(
        "measuring thread: {}{}; figures are median (min–max, p90) over repetitions",
        o.policy,
        if o.memory_locked == Some(true) {
            " mlock"
        } else {
            ""
        }
    );
    println!();
    println!("  {:<34} {:>36}  {:>30}", "", "ns", "cycles");
    for (name, c) in [
        ("context switch, same CPU", &r.context_switch_same_cpu),
        ("context switch, across CPUs", &r.context_switch_cross_cpu),
    ] {
        let as_cost = match c {
            Cell::Measured(cs) => Cell::Measured(cs.cost.clone()),
            Cell::Skipped { reason } => Cell::Skipped {
                reason: reason.clone(),
            },
        };
        let label = match c {
            Cell::Measured(cs) => format!("{name} ({}→{})", cs.parent_cpu, cs.child_cpu),
            Cell::Skipped { .. } => name.to_string(),
        };
        cost_line(&label, &as_cost);
    }
    cost_line("trap (syscall getpid)", &r.trap_getpid);
    match &r.memcpy {
        Cell::Measured(b) => println!(
            "  {:<34} {:>36}  MB/s, {} MiB copies",
            "memcpy bandwidth",
            spread(&b.mb_per_s, 0),
            b.bytes >> 20
        ),
        Cell::Skipped { reason } => println!("  {:<34} skipped: {reason}", "memcpy bandwidth"),
    }
    for c in &r.clock_reads {
        cost_line(&format!("read {}", c.clock), &c.result);
    }
    println!();
    println!(
        "Etsion et al. 2003, Table 2 (Linux 2.4; average ± sd; their cache BW used memcpy too):"
    );
    println!(
        "  {:<11} {:>5}  {:>18} {:>8}  {:>12}  {:>14} {:>7}",
        "processor", "MHz", "ctx switch cycles", "ns", "memcpy MB/s", "trap cycles", "ns"
    );
    for p in ETSION_TABLE2 {
        println!(
            "  {:<11} {:>5}  {:>18} {:>8}  {:>12}  {:>14} {:>7}",
            p.processor,
            p.mhz,
            format!(
                "{} ± {}",
                p.context_switch_cycles, p.context_switch_cycles_sd
            ),
            p.context_switch_ns,
            format!("{} ± {}", p.memcpy_mb_per_s, p.memcpy_mb_per_s_sd),
            format!("{} ± {}", p.trap_cycles, p.trap_cycles_sd),
            p.trap_ns
        );
    }
}
