//! `report.md`: each paper's table beside this machine's numbers, and a
//! plain-language verdict.
//!
//! Pure rendering: every function takes results and returns Markdown text.

use crate::clockread::ClockResult;
use crate::measure::Cell;
use crate::overhead::{OverheadResult, ETSION_TABLE2};
use crate::stats::Summary;
use crate::tails::TailsResult;
use std::fmt::Write as _;

/// A Markdown table from a header and rows of cells.
pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", head.iter().map(|_| "---|").collect::<String>());
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// Nanoseconds as microseconds with a precision that suits the size:
/// `0.062`, `12.4`, `1,234`. `—` for a missing value.
pub fn us(ns: Option<i64>) -> String {
    match ns {
        None => "—".into(),
        Some(ns) => us_f(ns as f64),
    }
}

/// Like [`us`] for a fractional number of nanoseconds.
pub fn us_f(ns: f64) -> String {
    let u = ns / 1000.0;
    let a = u.abs();
    if a >= 1000.0 {
        thousands(u.round() as i64)
    } else if a >= 100.0 {
        format!("{u:.0}")
    } else if a >= 10.0 {
        format!("{u:.1}")
    } else if a >= 1.0 {
        format!("{u:.2}")
    } else {
        format!("{u:.3}")
    }
}

/// An integer with thousands separators: `840,019`.
pub fn thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// "skipped: reason" for a skipped cell, for tables.
fn skipped(reason: &str) -> String {
    format!("skipped: {}", reason.replace('|', "/"))
}

/// Finney (2001) Table 1 beside this machine's gaps between successive clock reads.
pub fn clock_section(r: &ClockResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Successive clock reads (Finney 2001, Table 1)\n\n\
         {} reads of `{}` per condition; gaps between successive reads in µs. \
         The paper: 350 MHz Pentium II, Linux 2.2.12, `gettimeofday`, load = 3 \
         processes doing arithmetic. Here the load is {} CPU hogs.\n",
        thousands(r.calls as i64),
        r.clock.name(),
        r.hogs
    );
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            let paper = |f: fn(&crate::clockread::PaperRow) -> i64| {
                c.paper.as_ref().map_or("—".into(), |p| us(Some(f(p))))
            };
            let mut row = vec![
                c.label.clone(),
                paper(|p| p.mean_ns),
                paper(|p| p.max_ns),
                paper(|p| p.sd_ns),
            ];
            match &c.result {
                Cell::Measured(m) => row.extend([
                    us(m.summary.mean_ns),
                    us(m.summary.max_ns),
                    us(m.summary.sd_ns),
                    us(m.summary.p99_9_ns),
                ]),
                Cell::Skipped { reason } => {
                    row.extend([skipped(reason), String::new(), String::new(), String::new()])
                }
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Condition",
            "paper mean",
            "paper max",
            "paper sd",
            "mean",
            "max",
            "sd",
            "p99.9",
        ],
        &rows,
    ));
    s
}

/// Etsion et al. (2003) Table 2 beside this machine's basic costs.
pub fn overhead_section(r: &OverheadResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Basic costs (Etsion et al. 2003, Table 2)\n\n\
         Medians over repetitions; cycles from the calibrated TSC where it is invariant.\n"
    );
    let cost = |c: &Cell<crate::overhead::Cost>| match c {
        Cell::Measured(c) => {
            let cyc = c
                .cycles
                .as_ref()
                .map_or(String::new(), |y| format!(" ({:.0} cycles)", y.median));
            format!("{}{cyc}", us_f(c.ns.median))
        }
        Cell::Skipped { reason } => skipped(reason),
    };
    let cs = |c: &Cell<crate::overhead::ContextSwitch>| match c {
        Cell::Measured(c) => cost(&Cell::Measured(c.cost.clone())),
        Cell::Skipped { reason } => skipped(reason),
    };
    let mut rows = vec![
        vec![
            "context switch, same CPU".into(),
            cs(&r.context_switch_same_cpu),
        ],
        vec![
            "context switch, across CPUs".into(),
            cs(&r.context_switch_cross_cpu),
        ],
        vec!["trap (getpid)".into(), cost(&r.trap_getpid)],
        vec![
            "memcpy bandwidth".into(),
            match &r.memcpy {
                Cell::Measured(b) => format!("{:.0} MB/s", b.mb_per_s.median),
                Cell::Skipped { reason } => skipped(reason),
            },
        ],
    ];
    for c in &r.clock_reads {
        rows.push(vec![format!("read `{}`", c.clock.name()), cost(&c.result)]);
    }
    s.push_str(&table(&["This machine", "µs per operation"], &rows));
    s.push('\n');
    let paper: Vec<Vec<String>> = ETSION_TABLE2
        .iter()
        .map(|p| {
            vec![
                format!("{} ({} MHz)", p.processor, p.mhz),
                format!(
                    "{} ({} cycles)",
                    us(Some(p.context_switch_ns as i64)),
                    p.context_switch_cycles
                ),
                format!("{} ({} cycles)", us(Some(p.trap_ns as i64)), p.trap_cycles),
                format!("{} MB/s", p.memcpy_mb_per_s),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Paper (Linux 2.4)",
            "context switch µs",
            "trap µs",
            "memcpy",
        ],
        &paper,
    ));
    s
}

/// Etsion et al. (2003) Table 6 beside this machine's timer-signal latency tails.
pub fn tails_section(r: &TailsResult) -> String {
    let mut s = String::new();
    let k = &r.kernel;
    let _ = writeln!(
        s,
        "## Timer-signal delivery tails (Etsion et al. 2003, Table 6)\n\n\
         SCHED_RR processes setting alarms (BLK: no compute, N%: compute N % of \
         the time till the next alarm, CONT: compute continuously), all pinned to \
         CPU {}. This kernel: CONFIG_HZ {}, high-resolution timers {}, RR timeslice \
         {} ms. The paper's Linux 2.4 had no high-resolution timers and a 60 ms \
         quantum at 100 Hz (100 µs at 20,000 Hz): its CONT rows wait for whole \
         quanta of the other processes, as CONT rows here wait for RR timeslices.\n",
        r.cpu,
        k.config_hz.map_or("unknown".into(), |h| h.to_string()),
        match k.high_res_timers {
            Some(true) => "active",
            Some(false) => "inactive",
            None => "unknown",
        },
        k.rr_timeslice_ms.map_or("?".into(), |t| t.to_string()),
    );
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            let mut row = vec![c.spec.type_label(), c.spec.number_label()];
            match &c.result {
                Cell::Measured(m) => {
                    let sm: &Summary = &m.summary;
                    row.extend([
                        us(sm.p90_ns),
                        us(sm.p95_ns),
                        us(sm.p99_ns),
                        us(sm.p99_9_ns),
                        us(sm.max_ns),
                    ]);
                }
                Cell::Skipped { reason } => {
                    row.push(skipped(reason));
                    row.extend((0..4).map(|_| String::new()));
                }
            }
            match &c.paper {
                Some(p) => row.extend([
                    format!(
                        "{} / {} / {}",
                        thousands(p.hz100.p90_us as i64),
                        thousands(p.hz100.p99_us as i64),
                        thousands(p.hz100.max_us as i64)
                    ),
                    format!(
                        "{} / {} / {}",
                        thousands(p.hz20000.p90_us as i64),
                        thousands(p.hz20000.p99_us as i64),
                        thousands(p.hz20000.max_us as i64)
                    ),
                ]),
                None => row.extend(["—".into(), "—".into()]),
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Type",
            "Number",
            "0.9",
            "0.95",
            "0.99",
            "0.999",
            "max",
            "paper @100Hz 0.9/0.99/max",
            "paper @20kHz 0.9/0.99/max",
        ],
        &rows,
    ));
    s.push_str("\nAll figures in µs.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_the_papers() {
        assert_eq!(thousands(840019), "840,019");
        assert_eq!(thousands(-1234), "-1,234");
        assert_eq!(thousands(12), "12");
        assert_eq!(us(Some(1_290)), "1.29");
        assert_eq!(us(Some(62)), "0.062");
        assert_eq!(us(Some(72_400)), "72.4");
        assert_eq!(us(Some(840_019_000)), "840,019");
        assert_eq!(us(None), "—");
    }

    fn cyclic_with(p99_9_ns: i64, max_ns: i64, missed: u64) -> crate::cyclic::CyclicResult {
        let mut samples: Vec<i64> = vec![10_000; 999];
        samples.push(p99_9_ns);
        let mut combined = crate::stats::summarize(&samples, missed);
        combined.p99_9_ns = Some(p99_9_ns);
        combined.max_ns = Some(max_ns);
        crate::cyclic::CyclicResult {
            config: crate::cyclic::Config::default(),
            threads: Vec::new(),
            combined,
            combined_histogram_us: Vec::new(),
            runaway: None,
            demoted: false,
            load: Vec::new(),
            partial: false,
        }
    }

    fn doctor() -> crate::doctor::Report {
        use crate::doctor::{Check, Status};
        let check = |id: &str, status: Status, fix: &str| Check {
            id: id.into(),
            title: id.into(),
            status,
            value: "v".into(),
            fix: fix.into(),
        };
        crate::doctor::Report {
            checks: vec![
                check("a", Status::Pass, ""),
                check("b", Status::Warn, "do b"),
                check("c", Status::Fail, "do c"),
                check("d", Status::Unknown, ""),
            ],
            system: firmtime_rt::system::SystemInfo::collect(),
        }
    }

    #[test]
    fn verdict_says_yes_only_when_every_wakeup_was_within_a_millisecond() {
        let clean = cyclic_with(400_000, 900_000, 0);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &clean,
        };
        let v = verdict(Some(&row), None, &doctor());
        assert!(v.headline.starts_with("Yes: "), "{}", v.headline);
        assert_eq!(v.findings.len(), 1);
        assert_eq!(v.advice, ["b (v): do b", "c (v): do c"]);
    }

    #[test]
    fn verdict_names_rare_exceptions_and_failures() {
        let spiky = cyclic_with(400_000, 2_950_000, 3);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &spiky,
        };
        let v = verdict(Some(&row), None, &doctor());
        assert!(
            v.headline.starts_with("Yes, with rare exceptions"),
            "{}",
            v.headline
        );
        assert!(v.headline.contains("2.95 ms"), "{}", v.headline);

        let late = cyclic_with(1_500_000, 3_000_000, 9);
        let row = CyclicRow {
            label: "SCHED_FIFO".into(),
            result: &late,
        };
        assert!(verdict(Some(&row), None, &doctor())
            .headline
            .starts_with("Not reliably"));
        assert!(verdict(None, None, &doctor())
            .headline
            .starts_with("Undetermined"));
    }

    #[test]
    fn tables_have_a_separator_per_column() {
        let t = table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}

/// Finney (2001) "Process suspension" beside this machine: overshoot of each
/// sleep mechanism at each interval, per condition.
pub fn sleep_section(r: &crate::suspend::SleepResult) -> String {
    use crate::suspend::{PAPER_NANOSLEEP_NORMAL_MIN_NS, PAPER_RTC_MIN_NS, PAPER_SETITIMER_MIN_NS};
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Sleeping until a deadline (Finney 2001, \"Process suspension\")\n\n\
         Overshoot = wake time − deadline, median / 99th percentile in µs, {} samples \
         per cell. Default timer slack of a normal thread here: {}. The paper (Linux 2.2, \
         HZ=100): `setitimer` no finer than {} ms, `nanosleep` {}–20 ms for normal \
         processes, `/dev/rtc` down to {} ms.\n",
        r.config.samples,
        r.default_timer_slack_ns
            .map_or("unknown".into(), |n| format!("{} µs", us(Some(n as i64)))),
        PAPER_SETITIMER_MIN_NS / 1_000_000,
        PAPER_NANOSLEEP_NORMAL_MIN_NS / 1_000_000,
        PAPER_RTC_MIN_NS as f64 / 1e6,
    );
    let intervals = &r.config.intervals_ns;
    let mut head: Vec<String> = vec!["Mechanism".into()];
    head.extend(
        intervals
            .iter()
            .map(|i| firmtime_rt::units::format_ns(*i as f64)),
    );
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    for (label, cond) in &r.conditions {
        match cond {
            Cell::Skipped { reason } => {
                let _ = writeln!(s, "### {label}\n\n{}\n", skipped(reason));
            }
            Cell::Measured(c) => {
                let _ = writeln!(
                    s,
                    "### {label} (policy {}, timer slack {})\n",
                    c.conditions.obtained.policy,
                    firmtime_rt::units::format_ns(c.timer_slack_ns as f64)
                );
                let mut rows: Vec<Vec<String>> = Vec::new();
                let mut last_skip: Option<&str> = None;
                for cell in &c.cells {
                    let name = cell.mechanism.to_string();
                    if rows.last().map(|r| &r[0]) != Some(&name) {
                        rows.push(vec![name]);
                        last_skip = None;
                    }
                    // A mechanism skipped for one reason says it once, not per interval.
                    let v = match &cell.cell {
                        Cell::Measured(m) => {
                            format!("{} / {}", us(m.overshoot.p50_ns), us(m.overshoot.p99_ns))
                        }
                        Cell::Skipped { reason } if last_skip == Some(reason.as_str()) => {
                            "″".into()
                        }
                        Cell::Skipped { reason } => {
                            last_skip = Some(reason.as_str());
                            skipped(reason)
                        }
                    };
                    if let Some(row) = rows.last_mut() {
                        row.push(v);
                    }
                }
                s.push_str(&table(&head_ref, &rows));
                s.push('\n');
            }
        }
    }
    s
}

/// One condition of the periodic wake-up measurement, for the report.
#[derive(Debug)]
pub struct CyclicRow<'a> {
    /// Short name, e.g. `SCHED_FIFO, stress`.
    pub label: String,
    /// The measurement.
    pub result: &'a crate::cyclic::CyclicResult,
}

/// Varoquaux (2006) and cyclictest beside this machine: periodic wake-up
/// latency per condition.
pub fn cyclic_section(rows: &[CyclicRow<'_>], plots: &[(&str, &str)]) -> String {
    use crate::cyclic::{PAPER_MEAN_LATENCY_NS, PAPER_RT_PREEMPT_LATENCY_NS};
    let mut s = String::new();
    let interval = rows
        .first()
        .map_or(1_000_000, |r| r.result.config.interval_ns);
    let _ = writeln!(
        s,
        "## Periodic wake-ups (Varoquaux 2006; cyclictest)\n\n\
         A thread per CPU wakes every {} on absolute deadlines; latency = wake − \
         deadline in µs. Deadlines that passed while a thread was late are counted as \
         missed, never skipped. Varoquaux (Linux 2.6.18, RTC interrupts at 1 kHz, \
         his stress script) saw about {} ms mean latency and jitter up to half a \
         period; PREEMPT_RT was reported at {} µs.\n",
        firmtime_rt::units::format_ns(interval as f64),
        PAPER_MEAN_LATENCY_NS as f64 / 1e6,
        PAPER_RT_PREEMPT_LATENCY_NS / 1000,
    );
    let t: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let c = &r.result.combined;
            vec![
                r.label.clone(),
                thousands(c.samples as i64),
                us(c.p50_ns),
                us(c.p99_ns),
                us(c.p99_9_ns),
                us(c.max_ns),
                thousands(c.missed as i64),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Condition",
            "wake-ups",
            "p50",
            "p99",
            "p99.9",
            "max",
            "missed",
        ],
        &t,
    ));
    s.push('\n');
    for (file, caption) in plots {
        let _ = writeln!(s, "![{caption}]({file})\n");
    }
    s
}

/// The plain-language answer to "can this machine do millisecond timing?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// One-line answer.
    pub headline: String,
    /// Supporting sentences, each with its figure.
    pub findings: Vec<String>,
    /// What to change, from the doctor's warnings and failures.
    pub advice: Vec<String>,
}

impl Verdict {
    /// Markdown for the top of the report.
    pub fn markdown(&self) -> String {
        let mut s = format!("## Verdict\n\n**{}**\n\n", self.headline);
        for f in &self.findings {
            let _ = writeln!(s, "- {f}");
        }
        if !self.advice.is_empty() {
            s.push_str("\nWhat to change:\n\n");
            for a in &self.advice {
                let _ = writeln!(s, "- {a}");
            }
        }
        s
    }
}

/// Judges the best real-time condition and the best non-real-time one of
/// the periodic wake-up runs against a millisecond: 99.9 % of wake-ups
/// within 1 ms of the deadline, and no missed deadline.
pub fn verdict(
    rt: Option<&CyclicRow<'_>>,
    other: Option<&CyclicRow<'_>>,
    doctor: &crate::doctor::Report,
) -> Verdict {
    const MS: i64 = 1_000_000;
    let mut findings = Vec::new();
    let ok = |r: &CyclicRow<'_>| {
        let c = &r.result.combined;
        c.samples > 0 && c.p99_9_ns.is_some_and(|p| p < MS)
    };
    let describe = |r: &CyclicRow<'_>| {
        let c = &r.result.combined;
        format!(
            "{}: 99 % of {} wake-ups within {} µs and 99.9 % within {} µs of the deadline; \
             worst {} µs; {} deadlines missed.",
            r.label,
            thousands(c.samples as i64),
            us(c.p99_ns),
            us(c.p99_9_ns),
            us(c.max_ns),
            thousands(c.missed as i64)
        )
    };
    if let Some(r) = rt {
        findings.push(describe(r));
    }
    if let Some(r) = other {
        findings.push(describe(r));
    }
    let headline = match (rt, other) {
        (Some(r), _) if ok(r) => {
            let worst = r.result.combined.max_ns.unwrap_or(0);
            if worst < MS && r.result.combined.missed == 0 {
                format!(
                    "Yes: millisecond timing works on this machine under {} — every wake-up in this run was within a millisecond.",
                    r.label
                )
            } else {
                format!(
                    "Yes, with rare exceptions: under {} 99.9 % of wake-ups were within a millisecond, but the worst was {:.2} ms — check for them in your data (self-checks) rather than assume they never happen.",
                    r.label,
                    worst as f64 / 1e6
                )
            }
        }
        (Some(r), _) => format!(
            "Not reliably: even under {} more than 0.1 % of wake-ups were a millisecond late or worse.",
            r.label
        ),
        (None, _) => "Undetermined: no real-time condition could be measured (see the skipped reasons).".into(),
    };
    let advice = doctor
        .checks
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                crate::doctor::Status::Fail | crate::doctor::Status::Warn
            ) && !c.fix.is_empty()
        })
        .map(|c| format!("{} ({}): {}", c.title, c.value, c.fix))
        .collect();
    Verdict {
        headline,
        findings,
        advice,
    }
}

/// Etsion et al. (2003) Figs 1 and 5 beside this machine: a 60 fps player
/// under each sleep mechanism, policy and load.
pub fn frames_section(r: &crate::frames::FramesResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Frame pacing (Etsion et al. 2003, Figs 1 and 5)\n\n\
         A player at {} fps following Xine's rules (never show a frame early; drop \
         a frame later than half a frame). Measured on {}. The paper's Xine at \
         100 Hz fell to 40–50 fps because its 4 ms alarms fired only on ticks; the \
         tick model below gives that prediction for a tick-only timer (this kernel's \
         high-resolution timers are not bound by ticks).\n",
        r.config.fps,
        r.machine.line()
    );
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            let mut row = vec![
                c.sleeper.to_string(),
                c.policy.to_string(),
                c.load.as_ref().map_or("none".into(), |l| l.to_string()),
            ];
            match &c.result {
                Cell::Measured(p) => row.extend([
                    format!("{:.3}", p.achieved_fps),
                    format!(
                        "{} / {}",
                        thousands(p.shown as i64),
                        thousands(p.frames as i64)
                    ),
                    thousands(p.dropped as i64),
                    us(p.lateness.p99_ns),
                    us(p.lateness.max_ns),
                    p.steal_percent.map_or("—".into(), |v| format!("{v:.2} %")),
                ]),
                Cell::Skipped { reason } => {
                    row.push(skipped(reason));
                    row.extend((0..5).map(|_| String::new()));
                }
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Sleeper",
            "Policy",
            "Load",
            "fps",
            "shown",
            "dropped",
            "lateness p99 µs",
            "max µs",
            "steal",
        ],
        &rows,
    ));
    s.push('\n');
    let preds: Vec<Vec<String>> = r
        .paper_predictions
        .iter()
        .chain(r.prediction.iter())
        .map(|p| {
            vec![
                p.hz.to_string(),
                format!("{:.1}", p.mean_fps),
                format!("{:.1}", p.worst_fps),
                format!("{:.0} %", p.share_of_shifts_dropping * 100.0),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Tick-only timer at HZ",
            "mean fps",
            "worst fps",
            "start shifts that drop frames",
        ],
        &preds,
    ));
    let _ = writeln!(s, "\n**Target:** {}", frames_target(r));
    s
}

/// The frame-pacing acceptance figure (issue 8), or why it is not in `r`;
/// one line of plain text (`lab frames` prints it too).
pub fn frames_target(r: &crate::frames::FramesResult) -> String {
    use crate::frames::{TARGET_DURATION_NS, TARGET_FPS};
    let secs = TARGET_DURATION_NS / 1_000_000_000;
    let target = format!(
        "60 fps under SCHED_FIFO with clock_nanosleep and 2 CPU hogs, ≥ {TARGET_FPS} fps over {secs} s"
    );
    let Some(t) = r.target_cell() else {
        return format!("{target}: not in this run's matrix (`scripts/lab-frames.sh` runs it).");
    };
    let p = t.playback;
    format!(
        "{target}: {:.3} fps achieved at SCHED_FIFO {} ({} of {} frames shown) over {} — {}.",
        p.achieved_fps,
        t.priority,
        thousands(p.shown as i64),
        thousands(p.played as i64),
        firmtime_rt::units::format_ns(r.config.duration_ns as f64),
        match t.met {
            Some(true) => "met".to_string(),
            Some(false) => format!(
                "NOT met{}",
                match p.steal_percent {
                    Some(st) if st > 0.0 => format!(
                        " (the hypervisor stole {st:.2} % of the CPUs' time during the run; \
                         a stolen stretch longer than half a frame drops frames under any policy)"
                    ),
                    _ => String::new(),
                }
            ),
            None => format!(
                "not judged: the target needs {secs} s at 60 fps, complete \
                 (`scripts/lab-frames.sh` or `--full` runs it)"
            ),
        }
    )
}

/// Etsion et al. (2003) Figs 2, 3 and 8 beside this machine: what extra
/// timer interrupts cost a sort benchmark.
pub fn interrupts_section(r: &crate::interrupts::InterruptsResult) -> String {
    use crate::interrupts::{PAPER_DIRECT_SHARE, PAPER_INDIRECT_SHARE};
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Timer-interrupt overhead (Etsion et al. 2003, Figs 2, 3 and 8)\n\n\
         A SCHED_FIFO thread on CPU {} takes timer wake-ups at each rate while \
         sort processes (array {} bytes, about half the L2) run beside it; overhead = \
         1 − throughput / throughput without the extra timer, medians of paired \
         repeats. Direct = the timer thread's own CPU time; indirect = the rest (cache \
         and TLB damage, extra switches). The paper found {:.0} % direct and {:.0} % \
         indirect. Measured on {}.\n",
        r.cpu,
        thousands(r.array_bytes as i64),
        PAPER_DIRECT_SHARE * 100.0,
        PAPER_INDIRECT_SHARE * 100.0,
        r.machine.line()
    );
    let pct = |v: Option<f64>| v.map_or("—".into(), |v| format!("{:+.1} %", v * 100.0));
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .filter(|c| c.rate_hz.is_some())
        .map(|c| {
            let mut row = vec![
                c.level.to_string(),
                c.rate_hz.map_or("none".into(), |h| thousands(h as i64)),
            ];
            match &c.result {
                Cell::Measured(m) => row.extend([
                    pct(m.overhead),
                    pct(m.direct),
                    pct(m.indirect),
                    m.cpu_per_wakeup_ns
                        .map_or("—".into(), |n| us(Some(n as i64))),
                ]),
                Cell::Skipped { reason } => {
                    row.push(skipped(reason));
                    row.extend((0..3).map(|_| String::new()));
                }
            }
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Sorters",
            "Timer Hz",
            "overhead",
            "direct",
            "indirect",
            "timer CPU per wake-up µs",
        ],
        &rows,
    ));
    s
}

/// Etsion et al. (2003) Tables 3–5 beside this machine: effective quanta and
/// tick billing of the paper's workloads, from a scheduler trace.
pub fn trace_section(r: &crate::trace::TraceResult) -> String {
    let mut s = String::new();
    let k = &r.kernel;
    let _ = writeln!(
        s,
        "## Effective quanta and billing (Etsion et al. 2003, Tables 3–5)\n\n\
         sched_switch events traced for {} on kernel {}, HZ {}, clocksource {}, preempt {}. \
         Billing = tick-sampled CPU time ÷ traced run time; missed = quanta during which no \
         tick fell. {}\n",
        firmtime_rt::units::format_ns(r.duration_ns as f64),
        k.release,
        k.config_hz.map_or("unknown".into(), |h| h.to_string()),
        k.clocksource.as_deref().unwrap_or("unknown"),
        k.preempt_model,
        r.accounting.explanation,
    );
    let pair = |p: Option<&crate::billing::PaperPair>| {
        p.map_or("—".into(), |p| format!("{} / {}", p.hz100, p.hz1000))
    };
    let rows: Vec<Vec<String>> = r
        .apps
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                a.paper_application.clone().unwrap_or_default(),
                format!("{:.0}", a.quanta_per_s),
                pair(a.paper.table4.as_ref().map(|p| &p.quanta_per_s)),
                us(a.quantum.p50_ns),
                format!("{:.1} %", a.cpu_share * 100.0),
                a.billing
                    .billing_ratio
                    .map_or("—".into(), |b| format!("{b:.2}")),
                pair(a.paper.table3.as_ref().map(|p| &p.billing_ratio)),
                a.billing
                    .missed_percent
                    .map_or("—".into(), |m| format!("{m:.0} %")),
                pair(a.paper.table3.as_ref().map(|p| &p.missed_percent)),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "Workload",
            "paper's application",
            "quanta/s",
            "paper 100 / 1000 Hz",
            "median quantum µs",
            "CPU share",
            "billing",
            "paper 100 / 1000 Hz",
            "missed",
            "paper 100 / 1000 Hz",
        ],
        &rows,
    ));
    s
}

/// The trace-overhead section (issue 8, acceptance figure 1): the sort
/// benchmark's throughput with the trace on versus off at each timer rate,
/// beside klogger's. `firmtime lab trace --overhead` prints the same text.
pub fn trace_overhead_section(r: &crate::trace::overhead::OverheadResult) -> String {
    use crate::trace::{OVERHEAD_TARGET_PERCENT, PAPER_KLOGGER_OVERHEAD_PERCENT};
    let mut s = String::new();
    let pct = |v: f64| format!("{v:.2} %");
    let _ = writeln!(
        s,
        "## Trace overhead (klogger, Etsion et al. 2003 §2.1)\n\n\
         Measured on {}. The sort benchmark ({} u32, {}) with the typist \
         and player beside it, the trace drainer and, per row, a SCHED_FIFO timer \
         thread waking at the extra rate, all pinned to CPU {}; {} pairs of {} slices \
         per row. Between slices the trace's events are enabled or disabled \
         (tracepoints patched out), in the order on/off, off/on, … Throughput = sorts \
         ÷ the time they took; lost = 1 − the median of the pairs' on/off ratios, \
         with its 95 % confidence interval. klogger's figures were for whole-kernel \
         clock rates of 100, 1000 and 20,000 Hz; here the kernel keeps its HZ and the \
         timer thread adds the interrupts.\n",
        r.kernel.describe(),
        thousands(r.sort_len as i64),
        if r.config.array_bytes.is_some() {
            "--array-size"
        } else {
            "half the L2"
        },
        r.cpu,
        r.config.pairs,
        firmtime_rt::units::format_ns(r.config.slice_ns as f64),
    );
    let rows: Vec<Vec<String>> = r
        .config
        .rates_hz
        .iter()
        .zip(&r.rates)
        .map(|(&hz, cell)| {
            let rate = if hz == 0 {
                "none (tick only)".to_string()
            } else {
                format!("{} Hz", thousands(i64::from(hz)))
            };
            // Tick only is compared with klogger at the paper's default clock, 100 Hz.
            let paper_hz = if hz == 0 { 100 } else { hz };
            let paper = PAPER_KLOGGER_OVERHEAD_PERCENT
                .iter()
                .find(|(h, _)| *h == paper_hz)
                .map_or("—".into(), |(h, p)| {
                    format!("{p} % at {} Hz", thousands(i64::from(*h)))
                });
            let mut row = vec![rate];
            match cell {
                Cell::Measured(m) => {
                    let ratios: Vec<f64> = m.pairs.iter().map(|p| p.ratio).collect();
                    let lo = ratios.iter().copied().reduce(f64::min);
                    let hi = ratios.iter().copied().reduce(f64::max);
                    row.extend([
                        format!("{} / {}", m.pairs.len(), r.config.pairs),
                        m.timer
                            .as_ref()
                            .map_or("—".into(), |t| format!("{:.0}", t.achieved_hz())),
                        format!(
                            "{}{}",
                            if m.dropped_events > 0 { "≥ " } else { "" },
                            thousands(m.events_per_s.round() as i64)
                        ),
                        match (m.cost_per_event_ns, m.overhead_ci95_percent) {
                            (Some(c), Some([lo, _])) if lo > 0.0 => {
                                format!("{}{c:.0}", if m.dropped_events > 0 { "≤ " } else { "" })
                            }
                            (Some(_), Some(_)) => "within noise".into(),
                            _ => "—".into(),
                        },
                        format!("{:.2} %", m.drainer_cpu_percent),
                        m.overhead_percent.map_or("—".into(), pct),
                        m.overhead_ci95_percent
                            .map_or("— (< 6 pairs)".into(), |[a, b]| {
                                format!("{} to {}", pct(a), pct(b))
                            }),
                        m.pooled_ratio
                            .map_or("—".into(), |p| pct((1.0 - p) * 100.0)),
                        match (lo, hi) {
                            (Some(lo), Some(hi)) => format!("{lo:.3}–{hi:.3}"),
                            _ => "—".into(),
                        },
                    ]);
                }
                Cell::Skipped { reason } => {
                    row.push(skipped(reason));
                    row.extend((0..8).map(|_| String::new()));
                }
            }
            row.push(paper);
            row
        })
        .collect();
    s.push_str(&table(
        &[
            "Extra timer",
            "pairs",
            "wake-ups/s",
            "events/s",
            "ns lost per event",
            "drainer CPU",
            "throughput lost",
            "95 % interval",
            "pooled",
            "pair ratios",
            "klogger (paper)",
        ],
        &rows,
    ));
    for m in r.rates.iter().filter_map(Cell::measured) {
        if m.slice_ns > r.config.slice_ns {
            let _ = writeln!(
                s,
                "\nAt {} the slices were lengthened to {} so that about {} sorts fit in each.",
                if m.rate_hz == 0 {
                    "no extra timer".to_string()
                } else {
                    format!("{} Hz", thousands(i64::from(m.rate_hz)))
                },
                firmtime_rt::units::format_ns(m.slice_ns as f64),
                crate::trace::overhead::MIN_SORTS_PER_SLICE
            );
        }
    }
    let dropped: u64 = r
        .rates
        .iter()
        .filter_map(|c| c.measured().map(|m| m.dropped_events))
        .sum();
    let _ = writeln!(
        s,
        "\nEvents the kernel lost: {}; decoded but not stored (store full): {}{}.",
        thousands(r.kernel_lost_events as i64),
        thousands(dropped as i64),
        if dropped > 0 {
            " — the kernel still recorded them (their cost is in the throughput), but \
             unstored events cannot be placed in slices, so events/s is a lower bound (≥) \
             and the cost per event an upper bound (≤)"
        } else {
            ""
        }
    );
    let base = r
        .rates
        .iter()
        .filter_map(Cell::measured)
        .find(|m| m.rate_hz == 0);
    let verdict = match base.and_then(|m| m.overhead_percent.map(|o| (o, m.overhead_ci95_percent)))
    {
        None => "the target is judged without an extra timer (rate 0), which has no \
                 complete pair here: nothing to judge."
            .to_string(),
        Some((_, None)) if base.is_some_and(|m| m.pairs.len() as u32 == r.config.pairs) => {
            format!(
                "nothing to judge: {} pairs were asked for (`--pairs`); an interval needs 6 or more.",
                r.config.pairs
            )
        }
        Some((_, None)) => format!(
            "nothing to judge: without an extra timer only {} of {} pairs were complete (a \
             pair counts when a sort finished inside both of its slices), too few for an \
             interval. The sorter got too little CPU: is something else running at a \
             real-time priority or loading CPU {}? Run again on a quiet machine, or with \
             a longer `--slice`.",
            base.map_or(0, |m| m.pairs.len()),
            r.config.pairs,
            r.cpu
        ),
        Some((o, Some([lo, hi]))) => match base.and_then(|m| m.within_target) {
            Some(true) => format!(
                "target met: the sort benchmark lost {} of its throughput to tracing{}, and \
                 the whole 95 % interval ({} to {}) lies within {OVERHEAD_TARGET_PERCENT} %.",
                pct(o),
                if o < 0.0 {
                    " (below zero: tracing cannot speed sorting up, so this is the noise)"
                } else {
                    ""
                },
                pct(lo),
                pct(hi)
            ),
            Some(false) => format!(
                "target NOT met: the sort benchmark lost {} of its throughput to tracing, and \
                 the whole 95 % interval ({} to {}) lies above {OVERHEAD_TARGET_PERCENT} %.",
                pct(o),
                pct(lo),
                pct(hi)
            ),
            None => format!(
                "undecided: the sort benchmark lost {} of its throughput to tracing, but the \
                 95 % interval ({} to {}) straddles {OVERHEAD_TARGET_PERCENT} %: run more \
                 pairs (`--pairs`), on a quieter machine.",
                pct(o),
                pct(lo),
                pct(hi)
            ),
        },
    };
    let stress: Vec<String> = r
        .rates
        .iter()
        .filter_map(Cell::measured)
        .filter(|m| m.rate_hz > 0)
        .filter_map(|m| {
            m.overhead_percent
                .map(|o| format!("{} at {} Hz", pct(o), thousands(i64::from(m.rate_hz))))
        })
        .collect();
    let verdict = if stress.is_empty() {
        verdict
    } else {
        format!(
            "{verdict} With an extra timer: {} lost. Each of its interrupts wakes a \
             thread, so it records about five events (interrupt, hrtimer, wake-up, two \
             switches) where klogger's faster clock woke no one: compare the events per \
             second and the cost per event, not the percentages, with the paper.",
            stress.join(", ")
        )
    };
    let _ = writeln!(s, "\n**Verdict:** {verdict}");
    s
}

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
        trace: Option<&crate::trace::TraceResult>,
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

    let q = crate::trace::paper_quanta("CPU-bound").map(|p| p.quanta_per_s);
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
