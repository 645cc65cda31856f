//! `firmtime lab sleep`: achieved sleep durations of every sleep mechanism
//! (Finney 2001, "Process suspension").

use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use firmtime_lab::measure::Cell;
use firmtime_lab::measurement::Sleep;
use firmtime_lab::suspend::{self, Config, SleepResult};
use firmtime_rt::sleep::Mechanism;
use firmtime_rt::units;
use std::time::Duration;

/// Arguments of `firmtime lab sleep`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab sleep --quick\n  \
    firmtime lab sleep --sleeper clock_nanosleep,nanosleep,setitimer --interval 100us,1ms --samples 500")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Comma-separated intervals, each 1us to 1s
    /// [default: 50us,100us,500us,1ms,2ms,5ms,10ms,20ms; with --quick 100us,1ms,10ms].
    #[arg(long = "interval", alias = "intervals", value_name = "LIST", value_delimiter = ',',
          value_parser = args::duration)]
    intervals: Vec<Duration>,
    /// Sleep mechanisms, comma-separated or repeated [default: all]: nanosleep, clock_nanosleep,
    /// timerfd, setitimer, posix-timer, poll, epoll, select, spin, hybrid, hybrid:MARGIN, rtc.
    #[arg(
        long = "sleeper",
        alias = "mechanisms",
        value_name = "LIST",
        value_delimiter = ','
    )]
    mechanisms: Vec<Mechanism>,
    /// Samples per mechanism × interval cell, 1 to 1000000 [default: 100; 30 with --quick].
    #[arg(long, value_name = "N")]
    samples: Option<u64>,
    /// SCHED_FIFO priority of the real-time condition: fifo:P or P, 1 to 99.
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:80", value_parser = args::fifo_priority(99))]
    priority: u8,
}

fn config(a: &Args) -> Config {
    let base = a.common.preset(Config::quick, Config::default);
    Config {
        intervals_ns: if a.intervals.is_empty() {
            base.intervals_ns.clone()
        } else {
            a.intervals.iter().map(|&d| args::nanos(d)).collect()
        },
        mechanisms: super::list_or(&a.mechanisms, &base.mechanisms),
        samples: a.samples.unwrap_or(base.samples),
        fifo_priority: a.priority,
    }
}

/// Runs `firmtime lab sleep`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    Runner::new(&args.common, Sleep).print(|| Ok(config(&args)), print_tables)
}

fn us(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |ns| format!("{:.0}", ns as f64 / 1000.0))
}

fn fmt_dur(ns: u64) -> String {
    units::format_duration(Duration::from_nanos(ns))
}

fn print_tables(r: &SleepResult) {
    println!(
        "lab sleep: overshoot (wake - deadline) in µs, p50/p99 of {} samples per cell; \
         timer slack of a normal thread: {}",
        r.config.samples,
        r.default_timer_slack_ns
            .map_or_else(|| "unknown".into(), |s| format!("{s} ns"))
    );
    for (label, cond) in &r.conditions {
        println!();
        let c = match cond {
            Cell::Measured(c) => c,
            Cell::Skipped { reason } => {
                println!("{label}: skipped: {reason}");
                continue;
            }
        };
        println!(
            "{label}: policy {}, timer slack in force {} ns{}",
            c.conditions.obtained.policy,
            c.timer_slack_ns,
            if c.conditions.obtained.policy.is_rt_or_deadline() {
                " (the kernel forces 0 for real-time threads)"
            } else {
                ""
            }
        );
        print!("{:<16}", "mechanism");
        for &i in &r.config.intervals_ns {
            print!(" {:>13}", fmt_dur(i));
        }
        println!();
        for &m in &r.config.mechanisms {
            let cells: Vec<_> = c.cells.iter().filter(|s| s.mechanism == m).collect();
            if cells.is_empty() {
                continue;
            }
            if let Some(Cell::Skipped { reason }) = cells.first().map(|s| &s.cell) {
                println!("{:<16} skipped: {reason}", m.to_string());
                continue;
            }
            print!("{:<16}", m.to_string());
            for s in &cells {
                let text = match &s.cell {
                    Cell::Measured(x) => {
                        format!("{}/{}", us(x.overshoot.p50_ns), us(x.overshoot.p99_ns))
                    }
                    Cell::Skipped { .. } => "skipped".into(),
                };
                print!(" {text:>13}");
            }
            println!();
            for s in &cells {
                if let Cell::Measured(x) = &s.cell {
                    if let Some(e) = &x.error {
                        eprintln!("firmtime: {} at {}: {e}", m, fmt_dur(s.interval_ns));
                    }
                }
            }
        }
    }
    println!();
    println!(
        "Finney 2001 (Linux 2.2, HZ=100): setitimer no shorter than {}; nanosleep {}-{} at normal \
         priority; under SCHED_FIFO a kernel busy-wait, accurate from {} down to {}; /dev/rtc down to {}.",
        fmt_dur(suspend::PAPER_SETITIMER_MIN_NS),
        fmt_dur(suspend::PAPER_NANOSLEEP_NORMAL_MIN_NS),
        fmt_dur(suspend::PAPER_NANOSLEEP_NORMAL_MAX_NS),
        fmt_dur(suspend::PAPER_NANOSLEEP_FIFO_BUSY_MAX_NS),
        fmt_dur(suspend::PAPER_NANOSLEEP_FIFO_MIN_NS),
        fmt_dur(suspend::PAPER_RTC_MIN_NS),
    );
}
