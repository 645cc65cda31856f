//! `firmtime lab billing`: tick-sampled CPU billing versus precise run time
//! (Etsion, Tsafrir & Feitelson 2003, §4, Table 3 and Figure 4), for the
//! built-in workloads plus a tick-synchronized bursty process (the paper's
//! X server case).

use super::quanta::{label, notes, workloads};
use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use firmtime_lab::measurement::Billing;
use firmtime_lab::quanta::{self, TraceResult};
use std::time::Duration;

/// Arguments of `firmtime lab billing`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// How long to trace, 100ms to 1h (default 10s; --quick 4s).
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Workloads: typist, player, sorter, xserver or all (default: all four).
    #[arg(long, value_name = "LIST")]
    workload: Option<String>,
}

/// Runs `firmtime lab billing`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let config = || {
        let mut cfg = args
            .common
            .preset(quanta::Config::billing_quick, quanta::Config::billing);
        super::set_given(&mut cfg.duration_ns, args.duration.map(args::nanos));
        if let Some(w) = &args.workload {
            cfg.workloads = workloads(w)?;
        }
        Ok(cfg)
    };
    Runner::new(&args.common, Billing)
        .interrupted("lab billing: interrupted: the results above are partial")
        .unavailable_as("lab billing")
        .print(config, |r| {
            notes(r);
            print_table(r);
        })
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

fn print_table(r: &TraceResult) {
    let hz = r
        .kernel
        .config_hz
        .map(|h| format!("{h}Hz"))
        .unwrap_or_else(|| "this HZ".into());
    println!("Scheduler billing success rate (Etsion, Tsafrir & Feitelson 2003, Table 3)");
    println!("Measured on: {}.", r.kernel.describe());
    println!(
        "Billed = tick interrupts that found the process running × {:.3} ms; consumed = its effective quanta in the trace.",
        r.tick_ns as f64 / 1e6
    );
    println!();
    println!(
        "{:<24} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>8} {:>8}",
        "Application",
        "ratio",
        "@100Hz",
        "@1000Hz",
        "missed%",
        "@100Hz",
        "@1000Hz",
        "stat",
        "schedst"
    );
    println!(
        "{:<24} | {:>8} {:>17} | {:>8} {:>17} | {:>17}",
        "",
        format!("@{hz}"),
        "billing (paper)",
        format!("@{hz}"),
        "missed (paper)",
        "/proc ÷ consumed"
    );
    for a in &r.apps {
        let b = &a.billing;
        let p = a.paper.table3;
        let proc_r = b.proc.as_ref();
        println!(
            "{:<24} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>8} {:>8}",
            label(a),
            f(b.billing_ratio, 4),
            f(p.map(|p| p.billing_ratio.hz100), 4),
            f(p.map(|p| p.billing_ratio.hz1000), 4),
            f(b.missed_percent, 2),
            f(p.map(|p| p.missed_percent.hz100), 2),
            f(p.map(|p| p.missed_percent.hz1000), 2),
            f(proc_r.and_then(|x| x.stat_ratio), 3),
            f(proc_r.and_then(|x| x.schedstat_ratio), 3),
        );
    }
    println!();
    println!(
        "Figure 4 (quantum length vs ticks billed), tenths of a tick; mean ticks billed per band:"
    );
    for a in &r.apps {
        let bands: Vec<String> = a
            .fig4
            .iter()
            .filter(|b| b.quanta >= 1)
            .take(12)
            .map(|b| {
                format!(
                    "{:.1}t:{}q→{:.2}",
                    b.quantum_ticks, b.quanta, b.mean_billed_ticks
                )
            })
            .collect();
        println!("  {:<22} {}", label(a), bands.join("  "));
    }
    println!();
    println!("What this kernel bills: {}", r.accounting.explanation);
    println!(
        "stat = (utime+stime from /proc, USER_HZ={}) ÷ consumed; schedst = sum_exec_runtime ÷ consumed.",
        r.accounting.user_hz
    );
}
