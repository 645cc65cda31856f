//! `firmtime lab interrupts`: what a higher timer-interrupt rate costs the
//! sort benchmark (Etsion et al. 2003, Figs 2, 3 and 8).

use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use firmtime_lab::interrupts::{self as intr, Config, InterruptsResult};
use firmtime_lab::measure::Cell;
use firmtime_lab::measurement::Interrupts;
use std::time::Duration;

/// Arguments of `firmtime lab interrupts`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab interrupts --quick\n  \
    firmtime lab interrupts --rates 1000,10000 --levels 1,8 --duration 2s --repeats 5\n\n\
    overhead = 1 - throughput / throughput without the extra timer (same repeat), median over repeats;\n\
    direct = the timer thread's own CPU time / cell; indirect = overhead - direct.")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Timer rates in Hz, comma-separated, 1 to 100000 [default: 100,1000,5000,10000,20000;
    /// --quick: 1000,10000].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    rates: Vec<u32>,
    /// Multiprogramming levels (sort threads), comma-separated, 1 to 64 [default: 1,2,4,8; --quick: 1,4].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    levels: Vec<u32>,
    /// Length of each cell, 100ms to 60s [default: 1s; --quick: 500ms].
    #[arg(long = "duration", alias = "cell", value_name = "D", value_parser = args::duration)]
    cell: Option<Duration>,
    /// Repeats of the interleaved matrix, 1 to 100 [default: 3].
    #[arg(long, value_name = "N")]
    repeats: Option<u32>,
    /// The measured CPU [default: the last online CPU].
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    /// SCHED_FIFO priority of the timer thread: fifo:P or P, 1 to 99.
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:80", value_parser = args::fifo_priority(99))]
    priority: u8,
    /// Bytes of each sorter's array, 4KiB to 256MiB [default: half the L2 cache].
    #[arg(long, value_name = "S", value_parser = args::size)]
    array_size: Option<u64>,
    /// Seed of the arrays' PRNG.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
}

fn config(a: &Args) -> Config {
    let base = a.common.preset(Config::quick, Config::default);
    Config {
        rates_hz: super::list_or(&a.rates, &base.rates_hz),
        levels: super::list_or(&a.levels, &base.levels),
        cell_ns: a.cell.map_or(base.cell_ns, args::nanos),
        repeats: a.repeats.unwrap_or(base.repeats),
        cpu: a.cpu,
        timer_priority: a.priority,
        array_bytes: a.array_size,
        seed: a.seed,
    }
}

/// Runs `firmtime lab interrupts`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    Runner::new(&args.common, Interrupts).print(
        || Ok(config(&args)),
        |result| {
            print!("{}", table(result));
            if let Some(Cell::Skipped { reason }) = result
                .cells
                .iter()
                .map(|c| &c.result)
                .find(|c| c.measured().is_none())
            {
                eprintln!("firmtime: timer cells skipped: {reason}");
            }
        },
    )
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |f| format!("{:+.2}%", f * 100.0))
}

/// The human table: one row per level × rate, the paper's figures above.
pub fn table(r: &InterruptsResult) -> String {
    use std::fmt::Write;
    let c = &r.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lab interrupts: sort benchmark on CPU {}, {} numbers ({} KiB, {}) per thread, {} per cell, {} repeats (medians, paired with the baseline of the same repeat)",
        r.cpu,
        r.array_elements,
        r.array_bytes / 1024,
        r.array_source,
        firmtime_rt::units::format_duration(Duration::from_nanos(c.cell_ns)),
        c.repeats
    );
    let _ = writeln!(s, "measured on: {}", r.machine.line());
    let _ = writeln!(
        s,
        "Etsion et al. 2003 (§3, P-III 664, 1 sorter): 100 Hz -> 10,000 Hz added {:.1}% ({} -> {} ms per sort); \
         direct {:.0}% / indirect {:.0}% (up to {:.0}% indirect); {} ns per interrupt (Table 1); \
         Fig 3: up to {:.0}% at 20,000 Hz with short quanta; Fig 8: {:.3} M numbers/s (P-III 664, 100 Hz) vs {:.3} M (P-III 1.133, 20,000 Hz).",
        (intr::PAPER_SORT_10KHZ_NS as f64 / intr::PAPER_SORT_100HZ_NS as f64 - 1.0) * 100.0,
        intr::PAPER_SORT_100HZ_NS as f64 / 1e6,
        intr::PAPER_SORT_10KHZ_NS as f64 / 1e6,
        intr::PAPER_DIRECT_SHARE * 100.0,
        intr::PAPER_INDIRECT_SHARE * 100.0,
        intr::PAPER_INDIRECT_SHARE_MAX * 100.0,
        intr::PAPER_IRQ_NS,
        intr::PAPER_20KHZ_SHORT_QUANTA_OVERHEAD * 100.0,
        intr::PAPER_FIG8_PIII664_BASE / 1e6,
        intr::PAPER_FIG8_PIII1133_EXTREME / 1e6,
    );
    let _ = writeln!(
        s,
        "Here the extra interrupts come from a SCHED_FIFO thread waking at RATE on the same CPU (the tick stays at HZ); \
         baseline = no extra timer."
    );
    let _ = writeln!(
        s,
        "{:>5} {:>8} {:>12} {:>9} {:>9} {:>9} {:>12} {:>12} {:>10} {:>7}",
        "level",
        "rate Hz",
        "M numbers/s",
        "overhead",
        "direct",
        "indirect",
        "direct share",
        "ns/wake-up",
        "woke Hz",
        "missed"
    );
    for cell in &r.cells {
        let rate = cell
            .rate_hz
            .map_or_else(|| "none".to_string(), |h| h.to_string());
        match &cell.result {
            Cell::Measured(m) => {
                let _ = writeln!(
                    s,
                    "{:>5} {:>8} {:>12.3} {:>9} {:>9} {:>9} {:>12} {:>12} {:>10} {:>7}",
                    cell.level,
                    rate,
                    m.throughput / 1e6,
                    pct(m.overhead),
                    pct(m.direct),
                    pct(m.indirect),
                    m.direct_share
                        .map_or_else(|| "-".into(), |d| format!("{:.0}%", d * 100.0)),
                    m.cpu_per_wakeup_ns
                        .map_or_else(|| "-".into(), |n| n.to_string()),
                    m.achieved_hz
                        .map_or_else(|| "-".into(), |h| format!("{h:.0}")),
                    if cell.rate_hz.is_some() {
                        m.missed.to_string()
                    } else {
                        "-".into()
                    }
                );
            }
            Cell::Skipped { reason } => {
                let _ = writeln!(s, "{:>5} {:>8} skipped: {reason}", cell.level, rate);
            }
        }
    }
    s
}
