//! `firmtime lab frames`: frame pacing of a Xine-like player (Etsion et al.
//! 2003, Figs 1 and 5).

use super::{Common, Runner};
use crate::args;
use crate::Outcome;
use anyhow::Context;
use firmtime_lab::frames::{self, Config, FramesResult, TickPrediction};
use firmtime_lab::load::LoadSpec;
use firmtime_lab::measure::Cell;
use firmtime_lab::measurement::Frames;
use firmtime_rt::sched::Policy;
use firmtime_rt::sleep::Mechanism;
use std::time::Duration;

/// Arguments of `firmtime lab frames`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab frames --quick\n  \
    firmtime lab frames --sleeper clock_nanosleep --policy fifo:80 --load cpu:2 --duration 30s\n  \
    firmtime lab frames --fps 50 --alarm 4ms --json frames.json\n\n\
    Xine's rules: a frame is never shown early, and dropped when late by more than half a frame.\n\
    The tick model is the paper's: alarms that expire only on ticks of 1/HZ.")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Desired frame rate, 1 to 1000.
    #[arg(long, value_name = "FPS", default_value_t = frames::PAPER_FPS)]
    fps: f64,
    /// Length of each cell, 100ms to 1h [default: 30s, 5s with --quick].
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Sleep mechanisms, comma-separated or repeated [default:
    /// clock_nanosleep,nanosleep,timerfd,poll,hybrid; --quick: clock_nanosleep,poll].
    #[arg(
        long = "sleeper",
        alias = "sleepers",
        value_name = "LIST",
        value_delimiter = ','
    )]
    sleepers: Vec<Mechanism>,
    /// Policies of the player thread, comma-separated or repeated: other, other:NICE, fifo:P,
    /// rr:P (default: other,fifo:80).
    #[arg(
        long = "policy",
        alias = "policies",
        value_name = "LIST",
        value_delimiter = ','
    )]
    policies: Vec<Policy>,
    /// Loads, one condition per --load (repeatable; each is a row of its own): none, cpu:N,
    /// duty:P%@T, disk, memory, net, stress [default: none,cpu:2; --quick: cpu:2].
    /// `--loads LIST` takes them comma-separated.
    #[arg(long, value_name = "SPEC", value_parser = load_or_none)]
    load: Vec<Option<LoadSpec>>,
    /// The loads of --load as one comma-separated list (the older spelling).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = load_or_none, hide = true)]
    loads: Vec<Option<LoadSpec>>,
    /// Alarm period of the tick-based model (Xine: 4ms), 1us to 1s.
    #[arg(long, value_name = "D", default_value = "4ms", value_parser = args::duration)]
    alarm: Duration,
}

/// A load condition of the matrix: a spec, or `none` for the idle rows.
fn load_or_none(s: &str) -> Result<Option<LoadSpec>, String> {
    if s.trim() == "none" {
        Ok(None)
    } else {
        s.parse::<LoadSpec>()
            .map(Some)
            .map_err(|e| format!("{} (or none)", e.message()))
    }
}

fn config(a: &Args) -> anyhow::Result<Config> {
    let base = a.common.preset(Config::quick, Config::default);
    let given: Vec<Option<LoadSpec>> = a.load.iter().chain(&a.loads).cloned().collect();
    let loads = super::list_or(&given, &base.loads);
    Ok(Config {
        fps: a.fps,
        duration_ns: a.duration.map_or(base.duration_ns, args::nanos),
        sleepers: super::list_or(&a.sleepers, &base.sleepers),
        policies: super::list_or(&a.policies, &base.policies),
        loads,
        alarm_ns: args::nanos(a.alarm),
        load_exe: Some(std::env::current_exe().context("cannot find the firmtime binary")?),
    })
}

/// Runs `firmtime lab frames`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ran = Runner::new(&args.common, Frames).run(|| config(&args), |_, r| show(r))?;
    Ok(ran.failed_if(|result| {
        !result.cells.iter().any(|c| c.result.measured().is_some())
            || result
                .cells
                .iter()
                .filter_map(|c| c.result.measured())
                .any(|p| p.error.is_some())
    }))
}

/// The table, the target line and each cell's diagnostics.
fn show(result: &FramesResult) -> anyhow::Result<()> {
    print!("{}", table(result));
    println!("target: {}", firmtime_lab::report::frames_target(result));
    for c in &result.cells {
        match &c.result {
            Cell::Skipped { reason } => {
                eprintln!("firmtime: skipped {} / {}: {reason}", c.sleeper, c.policy)
            }
            Cell::Measured(p) => {
                if let Some(e) = &p.error {
                    eprintln!("firmtime: {} / {}: {e}", c.sleeper, c.policy);
                }
                for m in p.conditions.mismatches() {
                    eprintln!("firmtime: warning: {} / {}: {m}", c.sleeper, c.policy);
                }
            }
        }
    }
    Ok(())
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn us(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |ns| format!("{:.0}", ns as f64 / 1000.0))
}

fn prediction_line(p: &TickPrediction, this: bool) -> String {
    format!(
        "  HZ={:<5}{} alarms every {} ms: mean {:.1} fps, worst {:.1} fps; {:.0} % of start shifts drop frames{}",
        p.hz,
        if this { " (this kernel)" } else { "              " },
        ms(p.granularity_ns),
        p.mean_fps,
        p.worst_fps,
        p.share_of_shifts_dropping * 100.0,
        if p.worst_dropped_in_cycle.is_empty() {
            String::new()
        } else {
            format!(
                " (worst: frames {} of every {} dropped)",
                p.worst_dropped_in_cycle
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                p.cycle_frames
            )
        }
    )
}

/// The human table: the paper's figures and the tick model, then one row per cell.
pub fn table(r: &FramesResult) -> String {
    use std::fmt::Write;
    let c = &r.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lab frames: {} fps, {} per cell ({} frames), Xine's rules (never early; drop if late > half a frame = {} ms)",
        c.fps,
        firmtime_rt::units::format_duration(Duration::from_nanos(c.duration_ns)),
        c.frames(),
        ms(frames::half_frame_ns(c.fps))
    );
    let _ = writeln!(s, "measured on: {}", r.machine.line());
    let _ = writeln!(
        s,
        "Etsion et al. 2003 (Fig 1, §5; Xine, {} frames, {} ms alarms): {} fps desired; at 100 Hz about {} fps \
         (a third of the frames dropped) in {:.0} % of start shifts; at 1000 Hz {} fps.",
        frames::PAPER_FRAMES,
        ms(frames::PAPER_ALARM_NS),
        frames::PAPER_FPS,
        frames::PAPER_100HZ_FPS,
        frames::PAPER_100HZ_DROP_CHANCE * 100.0,
        frames::PAPER_1000HZ_FPS
    );
    let _ = writeln!(
        s,
        "Tick model (a timer that expires only on ticks; frame k shown iff (shift - k/fps) mod A <= half a frame) at {} fps, {} ms alarms:",
        c.fps,
        ms(c.alarm_ns)
    );
    for p in &r.paper_predictions {
        let this = r.prediction.as_ref().is_some_and(|t| t.hz == p.hz);
        let _ = writeln!(s, "{}", prediction_line(p, this));
    }
    match &r.prediction {
        Some(p) if !r.paper_predictions.iter().any(|q| q.hz == p.hz) => {
            let _ = writeln!(s, "{}", prediction_line(p, true));
        }
        None => {
            let _ = writeln!(
                s,
                "  this kernel's HZ is unknown (no kernel config): no prediction"
            );
        }
        _ => {}
    }
    if r.machine.high_res_timers != Some(false) {
        let _ = writeln!(
            s,
            "This kernel has high-resolution timers: sleeps are not bounded by the tick, so the model \
             describes a tick-based timer, not the rows below."
        );
    }
    let _ = writeln!(
        s,
        "{:<17} {:<9} {:<8} {:>6} {:>6} {:>7} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7}  lateness bins (shown) …, dropped",
        "sleeper", "policy", "load", "frames", "shown", "dropped", "longest", "fps", "p50 µs", "p99 µs", "max µs", "steal %"
    );
    for cell in &r.cells {
        let load = cell
            .load
            .as_ref()
            .map_or_else(|| "none".to_string(), ToString::to_string);
        match &cell.result {
            Cell::Measured(p) => {
                let bins: Vec<String> = p
                    .lateness_histogram
                    .iter()
                    .map(|b| format!("{}:{}", b.label, b.count))
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<17} {:<9} {:<8} {:>6} {:>6} {:>7} {:>7} {:>9.3} {:>8} {:>8} {:>8} {:>7}  {}",
                    cell.sleeper.to_string(),
                    cell.policy.to_string(),
                    load,
                    p.played,
                    p.shown,
                    p.dropped,
                    p.longest_drop_run,
                    p.achieved_fps,
                    us(p.lateness.p50_ns),
                    us(p.lateness.p99_ns),
                    us(p.lateness.max_ns),
                    p.steal_percent.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
                    bins.join(" ")
                );
            }
            Cell::Skipped { reason } => {
                let _ = writeln!(
                    s,
                    "{:<17} {:<9} {:<8} skipped: {reason}",
                    cell.sleeper.to_string(),
                    cell.policy.to_string(),
                    load
                );
            }
        }
    }
    s
}
