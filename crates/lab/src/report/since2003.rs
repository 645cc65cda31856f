//! "What changed since 2003": Etsion et al.'s findings on Linux 2.4.8 at
//! 100 Hz beside what today's kernels do and this machine's figures.

use super::{table, thousands, us};
use crate::tails::TailsResult;

/// The figures behind "What changed since 2003": each part `None` when its
/// measurement did not run in this preset (or failed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Since2003 {
    /// CONFIG_HZ, when readable.
    pub config_hz: Option<u32>,
    /// High-resolution timers active.
    pub high_res_timers: Option<bool>,
    /// Tick mode: `periodic`, `idle`, `full`.
    pub nohz: Option<String>,
    /// CONFIG_TICK_CPU_ACCOUNTING, when the kernel config is readable.
    pub tick_cpu_accounting: Option<bool>,
    /// Frame pacing (`lab frames`).
    pub frames: Option<FramesFigures>,
    /// Timer-interrupt overhead (`lab interrupts`).
    pub interrupts: Option<InterruptFigures>,
    /// Local timer interrupts per CPU while the lab waited.
    pub ticks: Option<crate::ticks::TickRates>,
    /// Billing and quanta (`lab trace` of the built-in workloads).
    pub trace: Option<TraceFigures>,
    /// Timer-signal tails (`lab tails`).
    pub tails: Option<TailsFigures>,
}

/// Frame pacing over every measured cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FramesFigures {
    /// The desired frame rate.
    pub desired_fps: f64,
    /// The tick model's mean frame rate at this kernel's HZ.
    pub tick_model_fps: Option<f64>,
    /// The tick model's mean frame rate at the paper's 100 Hz.
    pub paper_model_fps: Option<f64>,
    /// Measured cells.
    pub cells: usize,
    /// Cells that achieved at least `desired_fps − 0.1`.
    pub full_rate_cells: usize,
    /// Lowest achieved frame rate.
    pub min_fps: f64,
    /// Highest achieved frame rate.
    pub max_fps: f64,
}

/// One cell of `lab interrupts`: at the fewest sorters, the paper's 10,000 Hz
/// if it was measured, else the highest extra rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterruptFigures {
    /// Extra timer rate, Hz.
    pub rate_hz: u32,
    /// Sort processes.
    pub sorters: u32,
    /// Throughput lost against no extra timer (fraction).
    pub overhead: f64,
    /// Share of it the timer thread used itself (fraction), if positive.
    pub direct_share: Option<f64>,
}

/// What the scheduler trace showed for two of the paper's applications.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceFigures {
    /// The tick-synchronized `xserver` workload: tick billing ratio.
    pub xserver_billing: Option<f64>,
    /// Its quanta that no tick fell in, percent.
    pub xserver_missed_percent: Option<f64>,
    /// `/proc` utime + stime over its traced run time.
    pub xserver_proc_ratio: Option<f64>,
    /// The CPU-bound `sorter`: quanta per second.
    pub sorter_quanta_per_s: Option<f64>,
    /// Its median effective quantum, ns.
    pub sorter_median_quantum_ns: Option<i64>,
}

/// The timer rows of `lab tails` that the paper's Table 6 also has (BLK and
/// N %, not CONT, which measure quanta rather than timers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailsFigures {
    /// Rows compared.
    pub rows: usize,
    /// The largest p99 among them here, ns.
    pub p99_ns: i64,
    /// The largest p99 of the same rows in the paper at 100 Hz, µs.
    pub paper_100hz_p99_us: u64,
    /// The same at 20,000 Hz, µs.
    pub paper_20khz_p99_us: u64,
}

impl Since2003 {
    /// Picks the figures out of whichever results there are (and reads
    /// the kernel config for its accounting options).
    pub fn collect(
        sys: &firmtime_rt::system::SystemInfo,
        frames: Option<&crate::frames::FramesResult>,
        interrupts: Option<&crate::interrupts::InterruptsResult>,
        ticks: Option<crate::ticks::TickRates>,
        trace: Option<&crate::quanta::TraceResult>,
        tails: Option<&TailsResult>,
    ) -> Since2003 {
        let frames = frames.and_then(|r| {
            let played: Vec<&crate::frames::Playback> =
                r.cells.iter().filter_map(|c| c.result.measured()).collect();
            let fps = played.iter().map(|p| p.achieved_fps);
            Some(FramesFigures {
                desired_fps: r.config.fps,
                tick_model_fps: r.prediction.as_ref().map(|p| p.mean_fps),
                paper_model_fps: r
                    .paper_predictions
                    .iter()
                    .find(|p| p.hz == 100)
                    .map(|p| p.mean_fps),
                cells: played.len(),
                full_rate_cells: played
                    .iter()
                    .filter(|p| p.achieved_fps >= r.config.fps - 0.1)
                    .count(),
                min_fps: fps.clone().reduce(f64::min)?,
                max_fps: fps.reduce(f64::max)?,
            })
        });
        let interrupts = interrupts.and_then(|r| {
            r.cells
                .iter()
                .filter_map(|c| Some((c.level, c.rate_hz?, c.result.measured()?)))
                .filter_map(|(level, hz, m)| Some((level, hz, m.overhead?, m.direct_share)))
                // The fewest sorters; the paper's 10,000 Hz if measured, else the highest rate.
                .min_by_key(|&(level, hz, ..)| (level, hz != 10_000, std::cmp::Reverse(hz)))
                .map(
                    |(sorters, rate_hz, overhead, direct_share)| InterruptFigures {
                        rate_hz,
                        sorters,
                        overhead,
                        direct_share,
                    },
                )
        });
        let tick_cpu_accounting = trace.map_or_else(
            || crate::billing::KernelAccounting::current().tick_cpu_accounting,
            |t| t.accounting.tick_cpu_accounting,
        );
        let trace = trace.map(|r| {
            let app = |name: &str| r.apps.iter().find(|a| a.name == name);
            let (x, s) = (app("xserver"), app("sorter"));
            TraceFigures {
                xserver_billing: x.and_then(|a| a.billing.billing_ratio),
                xserver_missed_percent: x.and_then(|a| a.billing.missed_percent),
                xserver_proc_ratio: x.and_then(|a| a.billing.proc.and_then(|p| p.stat_ratio)),
                sorter_quanta_per_s: s.map(|a| a.quanta_per_s),
                sorter_median_quantum_ns: s.and_then(|a| a.quantum.p50_ns),
            }
        });
        let tails = tails.and_then(|r| {
            let rows: Vec<(i64, &crate::tails::PaperRow)> = r
                .cells
                .iter()
                .filter(|c| c.spec.compute_percent < 100)
                .filter_map(|c| Some((c.result.measured()?.summary.p99_ns?, c.paper.as_ref()?)))
                .collect();
            Some(TailsFigures {
                rows: rows.len(),
                p99_ns: rows.iter().map(|r| r.0).max()?,
                paper_100hz_p99_us: rows.iter().map(|r| r.1.hz100.p99_us).max()?,
                paper_20khz_p99_us: rows.iter().map(|r| r.1.hz20000.p99_us).max()?,
            })
        });
        Since2003 {
            config_hz: sys.config_hz,
            high_res_timers: sys.high_res_timers,
            nohz: sys.nohz.clone(),
            tick_cpu_accounting,
            frames,
            interrupts,
            ticks,
            trace,
            tails,
        }
    }
}

/// "What changed since 2003": for each of Etsion et al.'s findings, what the
/// paper measured on Linux 2.4.8 at 100 Hz, what today's kernels do
/// differently, and this machine's figure from the measurements above.
pub fn since_2003_section(f: &Since2003) -> String {
    let hz = f.config_hz.map_or("unknown".into(), |h| h.to_string());
    let pct = |v: f64| format!("{:.1} %", v * 100.0);
    let not_run = |what: &str| format!("not measured in this run (`firmtime {what}`)");
    let mut rows: Vec<[String; 4]> = Vec::new();

    rows.push([
        "Do timers fire between ticks? (Figs 1, 5)".into(),
        format!(
            "No: Xine's 4 ms alarms fired on 100 Hz ticks only, and at 60 fps a third of \
             the frames were dropped: about {:.0} fps (§5).",
            crate::frames::PAPER_100HZ_FPS
        ),
        format!(
            "High-resolution timers ({}): each timer is programmed for its own expiry, not \
             rounded up to a tick (Linux 2.6.21, 2007).",
            match f.high_res_timers {
                Some(true) => "active here",
                Some(false) => "inactive here",
                None => "unknown here",
            }
        ),
        f.frames.map_or_else(
            || not_run("lab frames"),
            |fr| {
                format!(
                    "{} of {} cells (every sleeper, policy and load) kept {:.0} fps; achieved \
                     {:.2}–{:.2} fps. A tick-only timer would give {} fps at HZ {hz} ({} at 100 Hz).",
                    fr.full_rate_cells,
                    fr.cells,
                    fr.desired_fps,
                    fr.min_fps,
                    fr.max_fps,
                    fr.tick_model_fps.map_or("?".into(), |v| format!("{v:.1}")),
                    fr.paper_model_fps.map_or("?".into(), |v| format!("{v:.1}")),
                )
            },
        ),
    ]);

    rows.push([
        "Does an idle CPU take the tick?".into(),
        "Yes: every CPU took HZ = 100 interrupts a second, busy or idle.".into(),
        format!(
            "Tickless kernels (NO_HZ, 2.6.21, 2007; {} here): an idle CPU stops its tick; \
             high-resolution timers add interrupts between ticks for timers that expire there.",
            f.nohz.as_deref().unwrap_or("mode unknown")
        ),
        f.ticks.as_ref().map_or_else(
            || "not measured (no local timer row in /proc/interrupts)".into(),
            |t| {
                let per: Vec<String> = t
                    .cpus
                    .iter()
                    .map(|c| format!("CPU {} {:.0}/s", c.cpu, c.per_s))
                    .collect();
                format!(
                    "Local timer interrupts over {} with the lab waiting: {} (a periodic tick: {hz}/s).",
                    firmtime_rt::units::format_ns(t.duration_ns as f64),
                    per.join(", ")
                )
            },
        ),
    ]);

    rows.push([
        "What does a faster timer cost? (Figs 2, 3)".into(),
        format!(
            "10,000 Hz instead of 100 Hz made one sort {} slower; {:.0} % of that was the \
             handlers, {:.0} % cache and TLB damage (§3).",
            pct(crate::interrupts::PAPER_SORT_10KHZ_NS as f64
                / crate::interrupts::PAPER_SORT_100HZ_NS as f64
                - 1.0),
            crate::interrupts::PAPER_DIRECT_SHARE * 100.0,
            crate::interrupts::PAPER_INDIRECT_SHARE * 100.0,
        ),
        format!(
            "HZ is still fixed when the kernel is built (CONFIG_HZ {hz} here), so firmtime \
             imposes the extra interrupts with a SCHED_FIFO timer thread, which also \
             switches to it and back each time."
        ),
        f.interrupts.map_or_else(
            || not_run("lab interrupts"),
            |i| {
                format!(
                    "{} Hz beside {} sorter{}: {} throughput lost, {} of it the timer thread itself.",
                    thousands(i64::from(i.rate_hz)),
                    i.sorters,
                    if i.sorters == 1 { "" } else { "s" },
                    pct(i.overhead),
                    i.direct_share.map_or("—".into(), pct),
                )
            },
        ),
    ]);

    let trace_here = |each: &dyn Fn(&TraceFigures) -> String| {
        f.trace
            .as_ref()
            .map_or_else(|| not_run("lab billing"), each)
    };
    let x100 = crate::billing::paper_row("X Server").map(|p| (p.billing_ratio, p.missed_percent));
    rows.push([
        "Is CPU time billed correctly? (Table 3, Fig 4)".into(),
        x100.map_or_else(String::new, |(b, m)| {
            format!(
                "No: billing sampled who ran at each tick; the X server, running between \
                 ticks, was billed {:.2} of its CPU time at 100 Hz ({:.0} % of its quanta \
                 saw no tick), {:.2} at 1000 Hz.",
                b.hz100, m.hz100, b.hz1000
            )
        }),
        format!(
            "CFS (2.6.23) and EEVDF (6.6) charge each task's run time from the clock at \
             every switch; ticks (CONFIG_TICK_CPU_ACCOUNTING {}) only split that total into \
             user and system time in /proc.",
            f.tick_cpu_accounting
                .map_or("unknown", |y| if y { "y" } else { "n" })
        ),
        trace_here(&|t| {
            let two = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2}"));
            format!(
                "The tick-synchronized xserver workload: tick sampling would bill {} of its \
                 traced run time ({} of its quanta saw no tick); /proc's utime + stime \
                 came to {} of it.",
                two(t.xserver_billing),
                t.xserver_missed_percent
                    .map_or("—".into(), |m| format!("{m:.0} %")),
                two(t.xserver_proc_ratio),
            )
        }),
    ]);

    let q = crate::quanta::paper_quanta("CPU-bound").map(|p| p.quanta_per_s);
    rows.push([
        "How long are the quanta? (Table 4, Fig 6)".into(),
        q.map_or_else(String::new, |q| {
            format!(
                "Counted in ticks: a CPU-bound process ran {:.1} quanta a second at 100 Hz, \
                 {:.1} at 1000 Hz.",
                q.hz100, q.hz1000
            )
        }),
        "Slices are nanoseconds of virtual run time (CFS, EEVDF), not ticks; a waking \
         task preempts at once when its deadline is earlier."
            .into(),
        trace_here(&|t| {
            format!(
                "The sorter, beside the typist, player and xserver: {} quanta a second, median \
                 quantum {} µs.",
                t.sorter_quanta_per_s
                    .map_or("—".into(), |v| format!("{v:.1}")),
                us(t.sorter_median_quantum_ns),
            )
        }),
    ]);

    rows.push([
        "Do timer signals arrive on time under contention? (Table 6)".into(),
        {
            // The rows measured here, or all of the paper's timer rows.
            let (p100, p20k) = f.tails.map_or_else(
                || {
                    let timer_rows = crate::tails::PAPER_TABLE6
                        .iter()
                        .filter(|r| r.cell.compute_percent < 100);
                    timer_rows.fold((0, 0), |(a, b), r| {
                        (a.max(r.hz100.p99_us), b.max(r.hz20000.p99_us))
                    })
                },
                |t| (t.paper_100hz_p99_us, t.paper_20khz_p99_us),
            );
            format!(
                "Not at 100 Hz: p99 up to {} µs in the BLK and N % rows; {} µs at 20,000 Hz \
                 with 100 µs quanta.",
                thousands(p100 as i64),
                thousands(p20k as i64),
            )
        },
        "High-resolution timers deliver the signal at its expiry; what remains is \
         waiting for the CPU."
            .into(),
        f.tails.map_or_else(
            || not_run("lab tails"),
            |t| {
                format!(
                    "p99 up to {} µs over the {} BLK and N % rows (SCHED_RR, one CPU).",
                    us(Some(t.p99_ns)),
                    t.rows
                )
            },
        ),
    ]);

    let mut s = String::from(
        "## What changed since 2003 (Etsion et al.)\n\n\
         The paper measured Linux 2.4.8 on a 664 MHz Pentium III at 100 Hz and, modified, \
         up to 20,000 Hz. Its findings, what today's kernels do differently, and this \
         machine's figure from the sections above:\n\n",
    );
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.into_iter().map(|c| c.replace('|', "/")).collect())
        .collect();
    s.push_str(&table(
        &[
            "Question",
            "2003 (the paper)",
            "What changed",
            "This machine",
        ],
        &rows,
    ));
    s
}

#[cfg(test)]
mod since_2003_tests {
    use super::*;

    fn figures() -> Since2003 {
        Since2003 {
            config_hz: Some(250),
            high_res_timers: Some(true),
            nohz: Some("idle".into()),
            tick_cpu_accounting: Some(true),
            frames: Some(FramesFigures {
                desired_fps: 60.0,
                tick_model_fps: Some(59.0),
                paper_model_fps: Some(47.5),
                cells: 8,
                full_rate_cells: 7,
                min_fps: 58.25,
                max_fps: 60.0,
            }),
            interrupts: Some(InterruptFigures {
                rate_hz: 10_000,
                sorters: 1,
                overhead: 0.11,
                direct_share: Some(0.55),
            }),
            ticks: Some(crate::ticks::TickRates {
                row: "LOC (Local timer interrupts)".into(),
                duration_ns: 2_000_000_000,
                config_hz: Some(250),
                nohz: Some("idle".into()),
                cpus: vec![
                    crate::ticks::CpuTicks {
                        cpu: 0,
                        interrupts: 112,
                        per_s: 56.0,
                    },
                    crate::ticks::CpuTicks {
                        cpu: 1,
                        interrupts: 30,
                        per_s: 15.0,
                    },
                ],
            }),
            trace: Some(TraceFigures {
                xserver_billing: Some(0.04),
                xserver_missed_percent: Some(97.0),
                xserver_proc_ratio: Some(1.01),
                sorter_quanta_per_s: Some(120.5),
                sorter_median_quantum_ns: Some(2_900_000),
            }),
            tails: Some(TailsFigures {
                rows: 6,
                p99_ns: 812_000,
                paper_100hz_p99_us: 19_999,
                paper_20khz_p99_us: 990,
            }),
        }
    }

    fn row<'a>(s: &'a str, question: &str) -> &'a str {
        s.lines()
            .find(|l| l.starts_with(&format!("| {question}")))
            .unwrap_or_else(|| panic!("no row {question:?} in\n{s}"))
    }

    #[test]
    fn each_row_holds_the_paper_the_change_and_this_machine() {
        let s = since_2003_section(&figures());
        assert!(s.starts_with("## What changed since 2003 (Etsion et al.)\n"));
        assert_eq!(s.lines().filter(|l| l.starts_with("| ")).count(), 7);
        let r = row(&s, "Do timers fire between ticks?");
        assert!(r.contains("about 40 fps"), "{r}");
        assert!(r.contains("(active here)"), "{r}");
        assert!(r.contains("7 of 8 cells"), "{r}");
        assert!(r.contains("58.25–60.00 fps"), "{r}");
        assert!(r.contains("59.0 fps at HZ 250 (47.5 at 100 Hz)"), "{r}");
        let r = row(&s, "Does an idle CPU take the tick?");
        assert!(r.contains("idle here"), "{r}");
        assert!(
            r.contains("CPU 0 56/s, CPU 1 15/s (a periodic tick: 250/s)"),
            "{r}"
        );
        let r = row(&s, "What does a faster timer cost?");
        assert!(r.contains("5.7 % slower; 9 %"), "{r}");
        assert!(
            r.contains("10,000 Hz beside 1 sorter: 11.0 % throughput lost, 55.0 %"),
            "{r}"
        );
        let r = row(&s, "Is CPU time billed correctly?");
        assert!(
            r.contains("billed 0.02 of its CPU time at 100 Hz (99 %"),
            "{r}"
        );
        assert!(r.contains("CONFIG_TICK_CPU_ACCOUNTING y"), "{r}");
        assert!(r.contains("bill 0.04 of its traced run time (97 %"), "{r}");
        assert!(
            r.contains("/proc's utime + stime came to 1.01 of it"),
            "{r}"
        );
        let r = row(&s, "How long are the quanta?");
        assert!(
            r.contains("28.8 quanta a second at 100 Hz, 39.0 at 1000 Hz"),
            "{r}"
        );
        assert!(
            r.contains("120.5 quanta a second, median quantum 2,900 µs"),
            "{r}"
        );
        let r = row(&s, "Do timer signals arrive on time");
        assert!(
            r.contains("p99 up to 19,999 µs in the BLK and N % rows; 990 µs"),
            "{r}"
        );
        assert!(
            r.contains("p99 up to 812 µs over the 6 BLK and N % rows"),
            "{r}"
        );
    }

    #[test]
    fn what_did_not_run_is_named_with_the_command_that_measures_it() {
        let s = since_2003_section(&Since2003::default());
        assert_eq!(s.lines().filter(|l| l.starts_with("| ")).count(), 7);
        for (q, cmd) in [
            ("Do timers fire between ticks?", "lab frames"),
            ("What does a faster timer cost?", "lab interrupts"),
            ("Is CPU time billed correctly?", "lab billing"),
            ("How long are the quanta?", "lab billing"),
            ("Do timer signals arrive on time", "lab tails"),
        ] {
            let r = row(&s, q);
            assert!(
                r.contains(&format!("not measured in this run (`firmtime {cmd}`)")),
                "{r}"
            );
        }
        let r = row(&s, "Does an idle CPU take the tick?");
        assert!(r.contains("not measured (no local timer row"), "{r}");
        assert!(r.contains("mode unknown"), "{r}");
        assert!(row(&s, "Do timers fire between ticks?").contains("(unknown here)"));
        // Without a tails run, the paper's figures cover all its BLK and N % rows.
        assert!(row(&s, "Do timer signals arrive on time")
            .contains("p99 up to 170,014 µs in the BLK and N % rows; 200 µs"));
    }
}
