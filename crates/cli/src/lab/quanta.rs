//! `firmtime lab trace`: klogger on tracefs — effective quanta, quanta per
//! second, preempted vs blocked and CPU share per application (Etsion,
//! Tsafrir & Feitelson 2003, Tables 4–5, Figure 6), and `--overhead`, the
//! sort benchmark with tracing on vs off (issue 8, acceptance figure 1).

use super::{Common, Runner};
use crate::args::{self, UsageError};
use crate::Outcome;
use firmtime_lab::measurement::{Trace, TraceOverhead};
use firmtime_lab::quanta::{self, overhead, Config, TraceResult};
use firmtime_lab::workloads::Workload;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `firmtime lab trace`.
///
/// Without --pids or a command, traces the built-in workloads (`--workload all`).
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// How long to trace, 100ms to 1h (default 10s; --quick 4s); a command is stopped after it.
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Built-in applications: typist, player, sorter, xserver or all (comma-separated).
    #[arg(long, value_name = "LIST")]
    workload: Option<String>,
    /// Running processes to trace (with their threads and children), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pids: Vec<i32>,
    /// Kernel ring buffer per CPU, KiB, 64 to 1048576 (default 4096, klogger's 4 MB).
    #[arg(long = "buffer-kb")]
    buffer_kb: Option<u32>,
    /// Events the drainer keeps, 1000 to 50000000 (default 2000000).
    #[arg(long = "max-events")]
    max_events: Option<usize>,
    /// Write the effective-quantum CDF (the paper's Figure 6) as a PNG.
    #[arg(long, value_name = "PATH")]
    png: Option<PathBuf>,
    /// Instead of tracing: measure what tracing costs (sort throughput, tracing on vs off).
    #[arg(long)]
    overhead: bool,
    /// --overhead: repeats of the pair of slices (one traced, one not), 1 to 10000, per rate
    /// (default 100; --quick 30).
    #[arg(long = "repeats", alias = "pairs", value_name = "N")]
    pairs: Option<u32>,
    /// --overhead: length of each slice, 50ms to 1min (default 100ms).
    #[arg(long, value_name = "D", value_parser = args::duration)]
    slice: Option<Duration>,
    /// --overhead: the CPU the sorter, typist, player and drainer are pinned to (default: the last online CPU).
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    /// --overhead: bytes of the sorter's array, 4KiB to 256MiB (default: half the L2 cache).
    #[arg(long = "array-size", value_name = "S", value_parser = args::size)]
    array_size: Option<u64>,
    /// --overhead: extra timer rates in Hz, 0 (none) to 100000, comma-separated (default 0,1000,20000; --quick 0,20000).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    rates: Vec<u32>,
    /// --overhead: record the events of `lab cyclic --explain` (scheduler, interrupts,
    /// softirqs, idle, page faults) instead of the scheduler trace's.
    #[arg(long)]
    explain_events: bool,
    /// A command to start and trace (with its children).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `--workload LIST` of `lab trace` and `lab billing`.
pub(super) fn workloads(list: &str) -> Result<Vec<Workload>, UsageError> {
    Workload::parse_list(list).ok_or_else(|| {
        UsageError(format!(
            "--workload {list}: valid are typist, player, sorter, xserver and all (comma-separated)"
        ))
    })
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        if let Some(p) = &self.png {
            args::check_output_file("--png", p)?;
        }
        let mut c = self.common.preset(Config::quick, Config::default);
        super::set_given(&mut c.duration_ns, self.duration.map(args::nanos));
        c.pids = self.pids.clone();
        c.command = self.command.clone();
        c.workloads = match &self.workload {
            Some(w) => workloads(w)?,
            None if c.pids.is_empty() && c.command.is_empty() => Workload::ALL.to_vec(),
            None => Vec::new(),
        };
        super::set_given(&mut c.buffer_kb, self.buffer_kb);
        super::set_given(&mut c.max_events, self.max_events);
        Ok(c)
    }
}

/// Runs `firmtime lab trace`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if args.overhead {
        return run_overhead(args);
    }
    Ok(Runner::new(&args.common, Trace)
        .interrupted("lab trace: interrupted: the results above are partial")
        .unavailable_as("lab trace")
        .run(
            || args.config(),
            |_, result| {
                notes(result);
                print_tables(result);
                if let Some(p) = &args.png {
                    plot(result, p)?;
                }
                Ok(())
            },
        )?
        .outcome())
}

/// Diagnostics every trace prints on stderr.
pub(super) fn notes(r: &TraceResult) {
    if r.mounted_tracefs {
        eprintln!(
            "note: tracefs was not mounted; mounted it at {}",
            firmtime_trace::tracefs::TRACEFS
        );
    }
    eprintln!(
        "traced {:.2}s on {} CPUs: {} events ({} lost by the kernel, {} beyond --max-events), ticks from {}; instance {} {}",
        r.duration_ns as f64 / 1e9,
        r.cpus,
        r.events,
        r.lost,
        r.dropped,
        r.tick_source,
        r.instance,
        if r.instance_removed { "removed" } else { "NOT removed (remove it with rmdir)" }
    );
    if let Some(s) = r.command_status {
        eprintln!("command exited with status {s}");
    }
}

fn ms(ns: Option<i64>) -> String {
    ns.map(|n| format!("{:.3}", n as f64 / 1e6))
        .unwrap_or_else(|| "-".into())
}

fn pair(p: Option<firmtime_lab::billing::PaperPair>, prec: usize) -> String {
    match p {
        Some(p) => format!("{:>9.prec$} {:>9.prec$}", p.hz100, p.hz1000),
        None => format!("{:>9} {:>9}", "", ""),
    }
}

fn print_tables(r: &TraceResult) {
    let hz = r
        .kernel
        .config_hz
        .map(|h| format!("{h}Hz"))
        .unwrap_or_else(|| "this HZ".into());
    println!(
        "Effective quanta per application (Etsion, Tsafrir & Feitelson 2003, Table 4 and Figure 6)"
    );
    println!("Measured on: {}.", r.kernel.describe());
    println!("Paper: Linux 2.4.8 on one Pentium III 664 MHz, 100 Hz and 1000 Hz; applications alone (Table 4).");
    println!();
    println!(
        "{:<24} {:>9} | {:>9} {:>9} | {:>8} {:>8} {:>8} {:>8} | {:>6} {:>6}",
        "Application",
        format!("@{hz}"),
        "@100Hz",
        "@1000Hz",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "preem%",
        "block%"
    );
    println!("{:<24} {:>9} | {:>19} |", "", "quanta/s", "paper quanta/s");
    for a in &r.apps {
        let n = a.quanta.max(1) as f64;
        println!(
            "{:<24} {:>9.2} | {} | {:>8} {:>8} {:>8} {:>8} | {:>6.1} {:>6.1}",
            label(a),
            a.quanta_per_s,
            pair(a.paper.table4.map(|p| p.quanta_per_s), 2),
            ms(a.quantum.p50_ns),
            ms(a.quantum.p90_ns),
            ms(a.quantum.p99_ns),
            ms(a.quantum.max_ns),
            100.0 * a.preempted as f64 / n,
            100.0 * a.blocked as f64 / n,
        );
    }
    println!();
    println!(
        "CPU usage distribution (Table 5; the paper: Xine on one CPU; here: share of all {} CPUs)",
        r.cpus
    );
    println!("Measured on: {}.", r.kernel.describe());
    println!(
        "{:<24} {:>9} | {:>9} {:>9}",
        "",
        format!("@{hz}"),
        "@100Hz",
        "@1000Hz"
    );
    let t5 = |row: &str| {
        quanta::PAPER_TABLE5
            .iter()
            .find(|p| p.row == row)
            .map(|p| p.percent)
    };
    for a in &r.apps {
        let row = match a.paper_application.as_deref() {
            Some("Xine") => t5("Xine"),
            Some("X Server") => t5("X Server"),
            _ => None,
        };
        println!(
            "{:<24} {:>8.2}% | {}",
            label(a),
            100.0 * a.cpu_share,
            pair(row, 2)
        );
    }
    println!(
        "{:<24} {:>8.2}% | {}",
        "idle loop",
        100.0 * r.idle_share,
        pair(t5("idle loop"), 2)
    );
    println!(
        "{:<24} {:>8.2}% | {}",
        "other",
        100.0 * r.other_share,
        pair(t5("other"), 2)
    );
    println!();
    println!("preem%/block%: quanta that ended because the task was preempted (still runnable) or blocked.");
}

/// `typist (Emacs)`.
pub(super) fn label(a: &quanta::AppResult) -> String {
    let mut s = match &a.paper_application {
        Some(p) => format!("{} ({p})", a.name),
        None => a.name.clone(),
    };
    if s.chars().count() > 24 {
        s = s.chars().take(23).collect::<String>() + "…";
    }
    s
}

fn plot(r: &TraceResult, path: &std::path::Path) -> anyhow::Result<()> {
    let mut hists = Vec::new();
    for a in &r.apps {
        let mut h = firmtime_lab::stats::LatencyHistogram::new();
        for &d in &a.durations {
            h.record(d);
        }
        if !h.is_empty() {
            hists.push((a.name.clone(), h));
        }
    }
    if hists.is_empty() {
        eprintln!("lab trace: no quanta to plot");
        return Ok(());
    }
    let series: Vec<(&str, &firmtime_lab::stats::LatencyHistogram)> =
        hists.iter().map(|(n, h)| (n.as_str(), h)).collect();
    let title = format!("Effective quantum CDF — {}", r.kernel.describe());
    firmtime_plot::cdf_png(path, &title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn run_overhead(args: Args) -> anyhow::Result<Outcome> {
    let config = || {
        let mut c = args
            .common
            .preset(overhead::Config::quick, overhead::Config::default);
        super::set_given(&mut c.pairs, args.pairs);
        super::set_given(&mut c.slice_ns, args.slice.map(args::nanos));
        super::set_given(&mut c.buffer_kb, args.buffer_kb);
        c.cpu = args.cpu;
        c.array_bytes = args.array_size;
        c.rates_hz = super::list_or(&args.rates, &c.rates_hz);
        c.explain_events = args.explain_events;
        c.validate().map_err(super::usage)?;
        eprintln!(
            "lab trace --overhead: {} pairs of {:.2}s slices at each of {} timer rates, tracing on/off alternating, about {:.0}s",
            c.pairs,
            c.slice_ns as f64 / 1e9,
            c.rates_hz.len(),
            c.duration_s()
        );
        Ok(c)
    };
    Runner::new(&args.common, TraceOverhead)
        .interrupted(super::PARTIAL_SO_FAR)
        .unavailable_as("lab trace")
        .print(config, |r| {
            print!("{}", firmtime_lab::report::trace_overhead_section(r))
        })
}
