//! `firmtime lab cyclic`: periodic wake-up latency, like realfeel and
//! cyclictest (Varoquaux 2006).

use super::{Common, Runner};
use crate::args::{self, PolicyArg, UsageError};
use crate::Outcome;
use anyhow::Context;
use firmtime_lab::cyclic::{self, Config, CyclicResult};
use firmtime_lab::load::LoadSpec;
use firmtime_lab::measure::{Cell, Progress, Silent};
use firmtime_lab::measurement::Cyclic;
use firmtime_lab::output::{self, RtTestsHeader, StatusLine, ThreadHist};
use firmtime_lab::report::{Answer, Bar};
use firmtime_lab::stats::Summary;
use firmtime_plot::{self as plot, Unit};
use firmtime_rt::sched::Policy;
use firmtime_rt::sleep::Mechanism;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Arguments of `firmtime lab cyclic`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime lab cyclic --period 1ms --duration 10s --priority fifo:80 --cpu 1\n  \
    firmtime lab cyclic --sleeper hybrid --margin 50us --load stress\n  \
    firmtime lab cyclic --histogram hist.txt --rt-tests-json rt.json --plots plots/")]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Period of the wake-ups, 10us to 1s (cyclictest's -i; `--interval` is the old spelling).
    #[arg(long = "period", alias = "interval", value_name = "D", default_value = "1ms", value_parser = args::duration)]
    interval: Duration,
    /// Length of the run, 10ms to 24h [default: 10s, 5s with --quick].
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Scheduling policy: other, other:NICE, batch, idle, fifo:P, rr:P, deadline:R/D/P
    /// [default: fifo:80]. `--priority` alone sets it too.
    #[arg(long, value_name = "POLICY")]
    policy: Option<PolicyArg>,
    /// Scheduling of the measuring threads: fifo:P, rr:P or other; a bare P means fifo:P
    /// [default: fifo:80]. Beside --policy fifo or rr, its priority supplies or overrides
    /// that policy's.
    #[arg(long, value_name = "PRIORITY", value_parser = args::priority)]
    priority: Option<Policy>,
    /// CPUs to measure on, one pinned thread each: a CPU list (1, 0-3, 0,2) [default: all online].
    #[arg(long = "cpu", alias = "cpus", value_name = "LIST")]
    cpus: Option<String>,
    /// Lock all memory (the default).
    #[arg(long, overrides_with = "no_mlock")]
    mlock: bool,
    /// Do not lock memory.
    #[arg(long)]
    no_mlock: bool,
    /// How to wait: clock_nanosleep, nanosleep, timerfd, setitimer, posix-timer,
    /// poll, epoll, select, spin, hybrid, rtc.
    #[arg(long, value_name = "MECHANISM", default_value = "clock_nanosleep")]
    sleeper: Mechanism,
    /// hybrid: sleep until this long before the deadline, then busy-wait; less than --period.
    #[arg(long, value_name = "D", default_value = "50us", value_parser = args::duration)]
    margin: Duration,
    /// Load during the measurement, repeatable: cpu:3, duty:50%@10ms, disk, memory, net, stress.
    /// All of them run at once.
    #[arg(long, value_name = "SPEC")]
    load: Vec<LoadSpec>,
    /// Hold /dev/cpu_dma_latency at D while measuring, e.g. 0us (cyclictest holds 0);
    /// a bare number is microseconds, as cyclictest takes it.
    #[arg(long, value_name = "D", value_parser = args::dma_latency)]
    dma_latency: Option<u32>,
    /// Timer slack of the measuring threads, e.g. `1ns` (SCHED_FIFO/RR threads have 0 on
    /// recent kernels whatever is asked); default: leave as is.
    #[arg(long, value_name = "D", value_parser = args::duration)]
    timer_slack: Option<Duration>,
    /// Accept weaker settings when the kernel refuses (e.g. SCHED_OTHER instead of FIFO),
    /// recording each downgrade in the JSON. Without it a refusal is an error.
    #[arg(long)]
    allow_downgrade: bool,
    /// Write cyclictest's `-h` histogram text to FILE.
    #[arg(long, value_name = "FILE")]
    histogram: Option<PathBuf>,
    /// Buckets (1 us each) of --histogram and --rt-tests-json, 1 to 100000.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    histogram_buckets: usize,
    /// Write rt-tests JSON v1 (cyclictest --json) to FILE.
    #[arg(long, value_name = "FILE")]
    rt_tests_json: Option<PathBuf>,
    /// Write histogram PNGs (µs and units of the period) into DIR.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    #[command(flatten)]
    explain: args::ExplainArgs,
    /// With --explain: explain wake-ups later than D [default: the thread's p99.9].
    /// Missed deadlines are always explained.
    #[arg(long, value_name = "D", value_parser = args::duration)]
    explain_above: Option<Duration>,
    /// With --explain: how many of each thread's worst wake-ups are noted, 1 to 100000, at
    /// least (a quarter of the run's deadlines are noted when that is more, up to 100000, so
    /// that every wake-up that missed a deadline can be explained).
    #[arg(long, value_name = "N", default_value_t = 256)]
    explain_worst: usize,
    /// With --explain: trace events kept around late wake-ups (about 64 bytes each, allocated
    /// before measuring), 1000 to 50000000. When full, the windows of the least late
    /// wake-ups are dropped first, whole.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    explain_max_events: usize,
    /// With --explain (implies it): record the kernel stack of the task a measured thread was
    /// switched in from (a `stacktrace` trigger on sched_switch, removed at the end) and show
    /// it on the outliers' task and non-preemptible parts: where that task was when it gave up
    /// the CPU. Off by default: it unwinds a stack on the thread's wake-up path each time it
    /// preempts a task (scripts/lab-kernel-stacks-cost.sh measures the cost). A kernel without
    /// the trigger is said in the output.
    #[arg(long)]
    kernel_stacks: bool,
    /// The bar, as `watch check`'s: exit 1 when the worst wake-up was later than D
    /// (e.g. 1ms). Without --max-latency or --max-missed there is no bar.
    #[arg(long, value_name = "D", value_parser = args::duration)]
    max_latency: Option<Duration>,
    /// The bar: exit 1 when more than N deadlines were missed (e.g. 0).
    #[arg(long, value_name = "N")]
    max_missed: Option<u64>,
    /// Exit 0 whether or not the run meets --max-latency / --max-missed; a run that could
    /// not measure (no thread measured, a thread failed, demoted, interrupted) still exits 2.
    #[arg(long)]
    exit_zero: bool,
}

/// The policy of `--policy` and `--priority`: either alone, or `--priority`'s
/// number completing or overriding a fifo or rr `--policy`.
fn policy(policy: Option<PolicyArg>, priority: Option<Policy>) -> Result<Policy, UsageError> {
    let number = |p: Policy| match p {
        Policy::Fifo { priority } | Policy::Rr { priority } => Some(priority),
        _ => None,
    };
    match (policy, priority) {
        (None, None) => Ok(Policy::Fifo { priority: 80 }),
        (None, Some(p)) => Ok(p),
        (Some(policy), None) => policy.resolve(None),
        (Some(policy), Some(p)) => match number(p) {
            Some(n) => policy.resolve(Some(n)),
            None => Err(UsageError(format!(
                "--priority {p} is a policy of its own; give it alone, or a number 1-99 \
                 beside --policy"
            ))),
        },
    }
}

/// Whether `lab cyclic` traces: off by default, on with a bare `--explain`,
/// `--explain-above` or `--kernel-stacks` (the session then fails, naming the reason, where
/// it cannot run), `--explain auto` where it can.
fn explain_runs(a: &Args) -> Result<bool, UsageError> {
    use firmtime_trace::explain::ExplainMode;
    let default = if a.explain_above.is_some() || a.kernel_stacks {
        ExplainMode::On
    } else {
        ExplainMode::Off
    };
    match a.explain.mode(default) {
        ExplainMode::Off if a.kernel_stacks => Err(UsageError(
            "--kernel-stacks records into the explaining trace: give it without --explain off \
             (--no-explain)"
                .into(),
        )),
        ExplainMode::Off => Ok(false),
        ExplainMode::On => Ok(true),
        auto => args::ExplainArgs::runs(auto),
    }
}

fn config(a: &Args) -> anyhow::Result<Config> {
    if let Some(p) = &a.histogram {
        args::check_output_file("--histogram", p)?;
    }
    if let Some(p) = &a.rt_tests_json {
        args::check_output_file("--rt-tests-json", p)?;
    }
    if let Some(p) = &a.plots {
        args::check_output_dir("--plots", p)?;
    }
    let base = a.common.preset(Config::quick, Config::default);
    let policy = policy(a.policy, a.priority)?;
    let cpus = a.cpus.as_deref().map(args::cpu_list).transpose()?;
    let sleeper = match a.sleeper {
        Mechanism::Hybrid { .. } => Mechanism::Hybrid {
            margin_ns: args::nanos(a.margin),
        },
        m => m,
    };
    Ok(Config {
        interval_ns: args::nanos(a.interval),
        duration_ns: a.duration.map_or(base.duration_ns, args::nanos),
        policy,
        cpus,
        mlock: !a.no_mlock || a.mlock,
        sleeper,
        load: a.load.clone(),
        histogram_buckets: a.histogram_buckets,
        dma_latency_us: a.dma_latency,
        timer_slack_ns: a.timer_slack.map(|d| args::nanos(d).max(1)),
        allow_downgrade: a.allow_downgrade,
        explain: explain_runs(a)?.then(|| firmtime_trace::explain::Config {
            above_ns: a.explain_above.map(args::nanos),
            worst: a.explain_worst,
            max_events: a.explain_max_events,
            kernel_stacks: a.kernel_stacks,
            ..firmtime_trace::explain::Config::default()
        }),
        load_exe: Some(std::env::current_exe().context("cannot find the firmtime binary")?),
        ..base
    })
}

/// Runs `firmtime lab cyclic`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let start_time = SystemTime::now();
    let ran = Runner::new(&args.common, Cyclic).run_with(
        || config(&args),
        |_, cfg, bars| measure(cfg, bars),
        |cfg, result| show(&args, cfg, result, start_time),
    )?;
    let bar = bar(&args);
    Ok(ran.then(|result, _| {
        let answer = bar.judge(&result.combined);
        if answer == Answer::Misses {
            eprintln!("firmtime: {}", misses(&bar, &result.combined));
        }
        status(
            answer,
            result.partial || result.measured().any(|t| t.error.is_some()),
            result.demoted,
            args.exit_zero,
        )
    }))
}

fn bar(a: &Args) -> Bar {
    Bar {
        max_latency_ns: a
            .max_latency
            .map(|d| i64::try_from(args::nanos(d)).unwrap_or(i64::MAX)),
        max_missed: a.max_missed,
    }
}

/// What missed the bar: `the worst wake-up was 2950.0 µs late, more than
/// --max-latency 1ms; 3 deadlines missed, more than --max-missed 0`.
fn misses(bar: &Bar, s: &Summary) -> String {
    let mut what = Vec::new();
    if let Some(m) = bar.max_latency_ns {
        match s.max_ns {
            Some(w) if w > m => what.push(format!(
                "the worst wake-up was {} µs late, more than --max-latency {}",
                us(Some(w)),
                fmt_dur(m.unsigned_abs())
            )),
            None if s.missed > 0 => what.push(format!(
                "no wake-up was on time: every deadline was missed (--max-latency {})",
                fmt_dur(m.unsigned_abs())
            )),
            _ => {}
        }
    }
    if let Some(m) = bar.max_missed.filter(|&m| s.missed > m) {
        what.push(format!(
            "{} deadlines missed, more than --max-missed {m}",
            s.missed
        ));
    }
    format!("the run misses its bar: {}", what.join("; "))
}

/// The exit status of `lab cyclic` (docs/LAB-FORMATS.md, "Exit status"):
/// 2 when a measuring thread was demoted (its figures are not of the policy
/// asked for), else as `lab all`'s from the bar's `answer`: 0 meets it (or
/// there is none), 1 misses it, 2 nothing measured, or it met the bar but a
/// thread failed or the run was interrupted (`incomplete`).
fn status(answer: Answer, incomplete: bool, demoted: bool, exit_zero: bool) -> Outcome {
    if demoted {
        return Outcome::Unmeasured;
    }
    let answer = if exit_zero && answer == Answer::Misses {
        Answer::Meets
    } else {
        answer
    };
    super::all::status(answer, incomplete, false)
}

/// Measures with cyclictest's status lines on a terminal, else with `bars`.
fn measure(cfg: &Config, bars: &mut dyn Progress) -> firmtime_lab::Result<CyclicResult> {
    let terminal = std::io::stderr().is_terminal();
    let mut silent = Silent;
    // The status lines replace the progress bar on a terminal, as in cyclictest.
    let progress: &mut dyn Progress = if terminal { &mut silent } else { bars };
    let mut printed = 0usize;
    let mut status = |lines: &[StatusLine]| {
        if !terminal {
            return;
        }
        let mut err = std::io::stderr().lock();
        if printed > 0 {
            let _ = write!(err, "\x1b[{printed}A");
        }
        for l in lines {
            let _ = writeln!(err, "{l}\x1b[K");
        }
        printed = lines.len();
    };
    cyclic::run_with_status(cfg, progress, &mut status)
}

/// The table, the diagnostics, and the files the flags ask for.
fn show(
    args: &Args,
    cfg: &Config,
    result: &CyclicResult,
    start_time: SystemTime,
) -> anyhow::Result<()> {
    let end_time = SystemTime::now();
    print_table(result);
    if let Some(e) = &result.explain {
        print_explanation(e, 10);
    }
    for t in &result.threads {
        if let Cell::Skipped { reason } = t {
            eprintln!("firmtime: skipped: {reason}");
        }
    }
    for t in result.measured() {
        if let Some(e) = &t.error {
            eprintln!("firmtime: thread {} (CPU {}): {e}", t.thread, t.cpu);
        }
        if !t.conditions.matches_request() {
            for m in t.conditions.mismatches() {
                eprintln!("firmtime: warning: thread {}: {m}", t.thread);
            }
        }
    }
    if result.demoted {
        eprintln!(
            "firmtime: runaway protection demoted a measuring thread to SCHED_OTHER: \
             its latencies after that were not measured under {}",
            cfg.policy
        );
    }

    let hists: Vec<ThreadHist> = result.measured().map(|t| t.cyclictest.clone()).collect();
    if let Some(path) = &args.histogram {
        if hists.is_empty() {
            eprintln!(
                "firmtime: no thread was measured: {} not written",
                path.display()
            );
        } else {
            firmtime_rt::fs::write_atomic_with(path, |w| {
                output::write_cyclictest_histogram(w, &hists, false)
                    .map_err(|e| std::io::Error::other(e.message().to_string()))
            })
            .context("--histogram")?;
        }
    }
    if let Some(path) = &args.rt_tests_json {
        let header = RtTestsHeader {
            cmdline: std::env::args().collect::<Vec<_>>().join(" "),
            version: env!("CARGO_PKG_VERSION").to_string(),
            start_time: output::rt_tests_timestamp(start_time),
            end_time: output::rt_tests_timestamp(end_time),
            return_code: i32::from(result.partial),
            sysinfo: firmtime_rt::system::SystemInfo::collect(),
        };
        firmtime_rt::fs::write_atomic_with(path, |w| {
            output::write_rt_tests_json(w, &header, &hists)
                .map_err(|e| std::io::Error::other(e.message().to_string()))
        })
        .context("--rt-tests-json")?;
    }
    if let Some(dir) = &args.plots {
        write_plots(dir, result)?;
    }
    Ok(())
}

fn write_plots(dir: &std::path::Path, r: &CyclicResult) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let labels: Vec<String> = r
        .measured()
        .map(|t| format!("T:{} CPU {}", t.thread, t.cpu))
        .collect();
    let series: Vec<(&str, &firmtime_lab::stats::LatencyHistogram)> = r
        .measured()
        .zip(&labels)
        .map(|(t, l)| (l.as_str(), &t.latency))
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    let title = format!(
        "wake-up latency, {} every {}",
        r.config.sleeper,
        fmt_dur(r.config.interval_ns)
    );
    for (name, unit) in [
        ("cyclic-us.png", Unit::Us),
        ("cyclic-periods.png", Unit::Periods(r.config.interval_ns)),
    ] {
        let path = dir.join(name);
        if let Err(e) = plot::histogram_png_with_period(
            &path,
            &title,
            &series,
            unit,
            Some(r.config.interval_ns),
        ) {
            eprintln!(
                "firmtime: warning: plot {} not written: {e}",
                path.display()
            );
        }
    }
    Ok(())
}

/// The worst `n` explained wake-ups, the summary by cause and the coverage.
pub fn print_explanation(e: &firmtime_trace::explain::Explanation, n: usize) {
    println!();
    println!(
        "why the worst wake-ups were late ({})",
        e.events_line("--explain-max-events")
    );
    println!("  {}", e.capture_line());
    if let Some(line) = e.stacks_line() {
        println!("  {line}");
    }
    if e.outliers.is_empty() {
        println!("  no wake-up above the threshold");
        return;
    }
    println!(
        "  {:>3} {:>10} {:>6}  {:<9} what",
        "CPU", "latency", "missed", "cause"
    );
    for o in e.outliers.iter().take(n) {
        println!(
            "  {:>3} {:>10} {:>6}  {:<9} {}",
            o.cpu,
            format!("{:.1} µs", o.latency_ns as f64 / 1000.0),
            o.missed,
            o.cause.category.name(),
            o.cause.detail
        );
        if o.cause.breakdown.len() > 1 {
            println!(
                "  {:>38}largest parts: {}",
                "",
                firmtime_trace::explain::breakdown::largest_words(
                    &o.cause.breakdown,
                    firmtime_trace::explain::PARTS_SHOWN
                )
            );
        }
        if let Some(w) = firmtime_trace::explain::stacks::largest_stack_words(&o.cause.breakdown) {
            println!("  {:>38}{w}", "");
        }
    }
    if e.outliers.len() > n {
        println!("  … {} more in the JSON", e.outliers.len() - n);
    }
    println!("by cause: {}", e.summary());
    let processes = e.process_line();
    if !processes.is_empty() {
        println!("tasks by process: {processes}");
    }
    println!("{}", e.coverage());
}

fn fmt_dur(ns: u64) -> String {
    firmtime_rt::units::format_duration(Duration::from_nanos(ns))
}

fn us(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |ns| format!("{:.1}", ns as f64 / 1000.0))
}

fn row(label: &str, cpu: &str, s: &Summary, spin: Option<f64>) -> String {
    format!(
        "{label:<6} {cpu:>4} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}{}",
        s.samples,
        s.missed,
        us(s.min_ns),
        us(s.mean_ns),
        us(s.p50_ns),
        us(s.p90_ns),
        us(s.p99_ns),
        us(s.p99_9_ns),
        us(s.max_ns),
        spin.map_or(String::new(), |f| format!(" {:>6.1}%", f * 100.0)),
    )
}

fn print_table(r: &CyclicResult) {
    let c = &r.config;
    let loads: Vec<String> = c.load.iter().map(ToString::to_string).collect();
    println!(
        "lab cyclic: every {} for {}, {}, sleeper {}, {}, load {}",
        fmt_dur(c.interval_ns),
        fmt_dur(c.duration_ns),
        c.policy,
        c.sleeper,
        if c.mlock { "mlock" } else { "no mlock" },
        if loads.is_empty() {
            "none".into()
        } else {
            loads.join(" + ")
        }
    );
    let spins = c.sleeper.spins();
    println!(
        "latency = wake - deadline, µs{}",
        if spins {
            "; spin = CPU time busy-waiting"
        } else {
            ""
        }
    );
    println!(
        "{:<6} {:>4} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}{}",
        "thread",
        "CPU",
        "samples",
        "missed",
        "min",
        "mean",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        if spins { "    spin" } else { "" }
    );
    for t in &r.threads {
        match t {
            Cell::Measured(t) => println!(
                "{}",
                row(
                    &format!("T:{}", t.thread),
                    &t.cpu.to_string(),
                    &t.summary,
                    spins.then_some(t.spin_fraction)
                )
            ),
            Cell::Skipped { reason } => println!("skipped: {reason}"),
        }
    }
    if r.measured().count() > 1 {
        println!("{}", row("all", "", &r.combined, None));
    }
    let p = |ns: i64| ns as f64 / 1000.0;
    let period = c.interval_ns as f64;
    if let (Some(p50), Some(max)) = (r.combined.p50_ns, r.combined.max_ns) {
        println!(
            "in periods of {}: p50 {:.3}, max {:.3}",
            fmt_dur(c.interval_ns),
            p50 as f64 / period,
            max as f64 / period
        );
    }
    println!(
        "Varoquaux 2006 (Linux 2.6.18, RTC period {}, under stress): mean ≈ {:.0} µs, jitter up to {:.0} µs \
         (half a period); RT_PREEMPT ≈ {:.0} µs",
        fmt_dur(cyclic::PAPER_PERIOD_NS),
        p(cyclic::PAPER_MEAN_LATENCY_NS),
        p(cyclic::PAPER_JITTER_NS),
        p(cyclic::PAPER_RT_PREEMPT_LATENCY_NS)
    );
    if let Some(rw) = &r.runaway {
        println!(
            "runaway protection: RLIMIT_RTTIME {}, demotions {}",
            fmt_dur(rw.limit_ns),
            rw.demotions
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_alone_or_completing_policy_gives_one_policy() {
        let fifo = |p| Policy::Fifo { priority: p };
        assert_eq!(policy(None, None).unwrap(), fifo(80));
        assert_eq!(policy(None, Some(fifo(70))).unwrap(), fifo(70));
        assert_eq!(
            policy(None, Some(Policy::Rr { priority: 50 })).unwrap(),
            Policy::Rr { priority: 50 }
        );
        let rr: PolicyArg = "rr".parse().unwrap();
        assert_eq!(
            policy(Some(rr), Some(fifo(60))).unwrap(),
            Policy::Rr { priority: 60 },
            "the old `--policy rr --priority 60`"
        );
        let other: PolicyArg = "other".parse().unwrap();
        assert!(policy(Some(other), Some(fifo(5))).is_err());
        let e = policy(Some(rr), Some(Policy::Other { nice: 0 })).unwrap_err();
        assert!(e.0.contains("--priority other"), "{e}");
    }

    /// Every answer of the bar, complete or not, demoted or not, with and
    /// without --exit-zero, maps to its documented exit status.
    #[test]
    fn exit_status_follows_the_bar() {
        use Outcome::{Failed, Ok, Unmeasured};
        for exit_zero in [false, true] {
            let miss = if exit_zero { Ok } else { Failed };
            let cases = [
                // (answer, incomplete, demoted) → status
                (Answer::Meets, false, false, Ok),
                (Answer::Misses, false, false, miss),
                (Answer::Unmeasured, false, false, Unmeasured),
                (Answer::Meets, true, false, Unmeasured),
                (
                    Answer::Misses,
                    true,
                    false,
                    if exit_zero { Unmeasured } else { Failed },
                ),
                (Answer::Meets, false, true, Unmeasured),
                (Answer::Misses, false, true, Unmeasured),
            ];
            for (answer, incomplete, demoted, want) in cases {
                assert_eq!(
                    status(answer, incomplete, demoted, exit_zero),
                    want,
                    "{answer:?}, incomplete {incomplete}, demoted {demoted}, --exit-zero {exit_zero}"
                );
            }
        }
    }

    #[test]
    fn a_missed_bar_is_named_with_its_figures_and_flags() {
        let mut s = firmtime_lab::stats::summarize(&[10_000, 2_950_000], 3);
        s.max_ns = Some(2_950_000);
        let bar = Bar {
            max_latency_ns: Some(1_000_000),
            max_missed: Some(0),
        };
        assert_eq!(
            misses(&bar, &s),
            "the run misses its bar: the worst wake-up was 2950.0 µs late, more than \
             --max-latency 1ms; 3 deadlines missed, more than --max-missed 0"
        );
    }

    #[test]
    fn dma_latency_takes_microseconds_bare_or_with_units() {
        assert_eq!(args::dma_latency("0"), Ok(0));
        assert_eq!(args::dma_latency("0us"), Ok(0));
        assert_eq!(args::dma_latency("1ms"), Ok(1000));
        assert!(args::dma_latency("1500ns").is_err());
        assert!(args::dma_latency("soon").is_err());
    }
}
