//! `lab trace` (also `lab quanta`): klogger rebuilt on tracefs — effective quanta, quanta per
//! second, preempted versus blocked and CPU share per application
//! (Etsion, Tsafrir & Feitelson 2003, §2, §6, Tables 4–5, Figure 6), and the
//! tick billing of the same quanta (§4, Table 3; see [`crate::billing`],
//! which this module uses and which does not use it: `lab billing`'s
//! trace is [`Config::billing`]).
//!
//! The paper's klogger logged scheduler events into a 4 MB kernel buffer
//! exported every few seconds by a daemon. Here a private tracefs instance
//! ([`firmtime_trace::tracefs::Instance`]) records `sched_switch`, `sched_wakeup(_new)`,
//! `sched_process_fork`, `hrtimer_expire_entry` and `local_timer_entry` with
//! the `mono` clock into per-CPU ring buffers; a drainer thread reads the
//! binary pages (`trace_pipe_raw`) into a preallocated store
//! ([`firmtime_trace::tracefs::drain`]), [`firmtime_trace::raw`] decodes them with the kernel's own format
//! files, and [`analysis`] turns the switches into effective quanta.
//!
//! What is traced: built-in [`Workload`]s (threads of this process), a list
//! of running processes (`--pids`, with their threads and anything they
//! fork), or a command started under the trace (`-- CMD…`).
//!
//! # RT contract
//! Nothing here runs at a deadline. The drainer never allocates after setup
//! (its store is preallocated and touched) and counts what does not fit.

pub mod analysis;
pub mod overhead;

use crate::billing::{self, BillingRow, Fig4Bin, KernelAccounting, ProcAccounting, QuantumBill};
use crate::check::{self, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::measure::{stop_requested, Progress};
use crate::stats::{summarize, Summary};
use crate::workloads::{self, Control, Workload};
use analysis::{Analysis, Targets, TickSource};
use firmtime_rt::clock::monotonic_ns;
use firmtime_trace::raw::EventKind;
use firmtime_trace::tracefs;
use firmtime_trace::{BUFFER_KB, MAX_EVENTS};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// klogger's own overhead as the paper estimates it (§2.1): 0.63 % at
/// 100 Hz, 0.95 % at 1000 Hz, 1.18 % at 20,000 Hz.
pub const PAPER_KLOGGER_OVERHEAD_PERCENT: [(u32, f64); 3] =
    [(100, 0.63), (1000, 0.95), (20_000, 1.18)];
/// Issue 8's acceptance target: sort throughput with tracing on within 5 % of off.
pub const OVERHEAD_TARGET_PERCENT: f64 = 5.0;

/// One row of the paper's Table 4 (quanta per second, each application alone).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperQuanta {
    /// Application, as the paper names it.
    pub application: &'static str,
    /// Average quanta per second.
    pub quanta_per_s: billing::PaperPair,
}

/// Etsion, Tsafrir & Feitelson (2003), Table 4 "Average quanta per second
/// achieved by each application when running in isolation".
pub const PAPER_TABLE4: [PaperQuanta; 5] = [
    PaperQuanta {
        application: "Emacs",
        quanta_per_s: billing::PaperPair {
            hz100: 22.36,
            hz1000: 34.60,
        },
    },
    PaperQuanta {
        application: "Xine",
        quanta_per_s: billing::PaperPair {
            hz100: 470.67,
            hz1000: 695.94,
        },
    },
    PaperQuanta {
        application: "Quake",
        quanta_per_s: billing::PaperPair {
            hz100: 187.88,
            hz1000: 273.85,
        },
    },
    PaperQuanta {
        application: "X Server",
        quanta_per_s: billing::PaperPair {
            hz100: 71.35,
            hz1000: 148.21,
        },
    },
    PaperQuanta {
        application: "CPU-bound",
        quanta_per_s: billing::PaperPair {
            hz100: 28.81,
            hz1000: 38.97,
        },
    },
];

/// One row of the paper's Table 5 (CPU usage while running Xine), percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperUsage {
    /// Row: `Xine`, `X Server`, `idle loop`, `other`.
    pub row: &'static str,
    /// CPU usage, percent.
    pub percent: billing::PaperPair,
}

/// Etsion, Tsafrir & Feitelson (2003), Table 5 "CPU usage distribution when
/// running Xine" (one CPU).
pub const PAPER_TABLE5: [PaperUsage; 4] = [
    PaperUsage {
        row: "Xine",
        percent: billing::PaperPair {
            hz100: 39.42,
            hz1000: 40.42,
        },
    },
    PaperUsage {
        row: "X Server",
        percent: billing::PaperPair {
            hz100: 20.10,
            hz1000: 20.79,
        },
    },
    PaperUsage {
        row: "idle loop",
        percent: billing::PaperPair {
            hz100: 31.46,
            hz1000: 31.58,
        },
    },
    PaperUsage {
        row: "other",
        percent: billing::PaperPair {
            hz100: 9.02,
            hz1000: 7.21,
        },
    },
];

/// The paper's Table 4 row for `application`.
pub fn paper_quanta(application: &str) -> Option<&'static PaperQuanta> {
    PAPER_TABLE4.iter().find(|r| r.application == application)
}

/// Valid `--duration` range, ns (100 ms … 1 h).
pub const DURATION_NS: std::ops::RangeInclusive<u64> = 100_000_000..=3_600_000_000_000;

/// Valid drain interval, ns (1 ms … 10 s).
const DRAIN_NS: std::ops::RangeInclusive<u64> = 1_000_000..=10_000_000_000;

/// What to trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// How long to trace (`--duration`); a command is stopped after it. Default 10 s.
    pub duration_ns: u64,
    /// Built-in applications (`--workload`), threads of this process.
    pub workloads: Vec<Workload>,
    /// Running processes to trace (`--pids`), with their threads and children.
    pub pids: Vec<i32>,
    /// A command to start under the trace (`-- CMD…`).
    pub command: Vec<String>,
    /// Kernel ring buffer per CPU, KiB (`--buffer-kb`), default 4096 (klogger used 4 MB).
    pub buffer_kb: u32,
    /// Events the drainer's store holds (`--max-events`), default 2,000,000.
    pub max_events: usize,
    /// How often the drainer empties the ring buffers, ns, default 50 ms.
    pub drain_interval_ns: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            duration_ns: 10_000_000_000,
            workloads: Workload::ALL.to_vec(),
            pids: Vec::new(),
            command: Vec::new(),
            buffer_kb: 4096,
            max_events: 2_000_000,
            drain_interval_ns: 50_000_000,
        }
    }
}

impl Config {
    /// `lab billing`'s default: this trace of the four
    /// [`Workload::BILLING`] workloads (typist, player, sorter and the
    /// tick-synchronized xserver), 10 s.
    pub fn billing() -> Config {
        Config {
            workloads: Workload::BILLING.to_vec(),
            ..Config::default()
        }
    }

    /// `lab billing --quick`: as [`Config::billing`] for 4 s.
    pub fn billing_quick() -> Config {
        Config {
            workloads: Workload::BILLING.to_vec(),
            ..Config::quick()
        }
    }

    /// `lab billing --full` (for the report): as [`Config::billing`] for 30 s.
    pub fn billing_full() -> Config {
        Config {
            workloads: Workload::BILLING.to_vec(),
            ..Config::full()
        }
    }

    /// `--quick`: the three workloads for 4 s.
    pub fn quick() -> Self {
        Self {
            duration_ns: 4_000_000_000,
            ..Self::default()
        }
    }

    /// `--full`: the three workloads for 30 s.
    pub fn full() -> Self {
        Self {
            duration_ns: 30_000_000_000,
            ..Self::default()
        }
    }

    /// Checks every parameter; errors name the flag and the valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending flag.
    pub fn validate(&self) -> Result<()> {
        check::ns_in_range("--duration", self.duration_ns, &DURATION_NS)?;
        check::in_range_note("--buffer-kb", self.buffer_kb, &BUFFER_KB, " (KiB per CPU)")?;
        check::in_range("--max-events", self.max_events, &MAX_EVENTS)?;
        check::ns_in_range("drain interval", self.drain_interval_ns, &DRAIN_NS)?;
        if self.workloads.is_empty() && self.pids.is_empty() && self.command.is_empty() {
            return Err(invalid(
                "nothing to trace: give --workload typist|player|sorter|xserver|all, --pids LIST or -- CMD…",
            ));
        }
        if let Some(p) = self
            .pids
            .iter()
            .find(|&&p| p <= 0 || !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            return Err(invalid(format!(
                "--pids: process {p} does not exist: valid are running process ids"
            )));
        }
        if self.command.first().is_some_and(|c| c.is_empty()) {
            return Err(invalid("-- CMD: the command is empty"));
        }
        Ok(())
    }
}

/// The kernel a table was measured on: every table states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelLine {
    /// `uname -r`.
    pub release: String,
    /// CONFIG_HZ.
    pub config_hz: Option<u32>,
    /// Current clocksource.
    pub clocksource: Option<String>,
    /// Preemption model (`none`, `voluntary`, `full`, `lazy`, `rt`).
    pub preempt_model: String,
}

impl KernelLine {
    /// This machine's.
    pub fn current() -> KernelLine {
        let s = firmtime_rt::system::SystemInfo::collect();
        KernelLine {
            release: s.kernel_release,
            config_hz: s.config_hz,
            clocksource: s.clocksource,
            preempt_model: s.preempt_model.name().to_string(),
        }
    }

    /// `kernel 6.1.0, HZ=250, clocksource tsc, preempt none`.
    pub fn describe(&self) -> String {
        format!(
            "kernel {}, HZ={}, clocksource {}, preempt {}",
            self.release,
            self.config_hz
                .map(|h| h.to_string())
                .unwrap_or_else(|| "unknown".into()),
            self.clocksource.as_deref().unwrap_or("unknown"),
            self.preempt_model
        )
    }
}

/// A point of a cumulative distribution (Figure 6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CdfPoint {
    /// Effective quantum length, ns.
    pub quantum_ns: i64,
    /// Fraction of quanta at most this long.
    pub fraction: f64,
}

/// The paper's figures for one application.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperApp {
    /// Table 4 row.
    pub table4: Option<PaperQuanta>,
    /// Table 3 row.
    pub table3: Option<billing::PaperBilling>,
}

/// What the trace shows for one application.
#[derive(Debug, Clone, Serialize)]
pub struct AppResult {
    /// `typist`, `player`, …, `pid 1234 (comm)` or the command.
    pub name: String,
    /// The paper's application it stands for (built-in workloads).
    pub paper_application: Option<String>,
    /// Thread ids that ran.
    pub tids: Vec<i32>,
    /// Keystrokes, frames, sorts or bursts done (built-in workloads).
    pub iterations: Option<u64>,
    /// Complete effective quanta.
    pub quanta: u64,
    /// Quanta per second of trace (Table 4).
    pub quanta_per_s: f64,
    /// Effective quantum lengths (Figure 6); `summary.missed` = 0.
    pub quantum: Summary,
    /// Quanta ended by preemption (still runnable, prev_state R).
    pub preempted: u64,
    /// Quanta ended by blocking (sleep, I/O, exit).
    pub blocked: u64,
    /// Quanta cut by the start or end of the trace (not counted).
    pub truncated: u64,
    /// CPU time in complete quanta, ns.
    pub cpu_ns: u64,
    /// Share of all traced CPU time (all CPUs together) (Table 5).
    pub cpu_share: f64,
    /// Cumulative distribution of quantum lengths at 5 % steps (Figure 6).
    pub cdf: Vec<CdfPoint>,
    /// Tick billing of these quanta (Table 3).
    pub billing: BillingRow,
    /// Quantum length versus ticks charged (Figure 4).
    pub fig4: Vec<Fig4Bin>,
    /// The paper's figures for this application.
    pub paper: PaperApp,
    /// Quantum lengths, ns, for plots (not serialized).
    #[serde(skip)]
    pub durations: Vec<i64>,
}

/// The result of `lab trace` (and `lab billing`).
#[derive(Debug, Clone, Serialize)]
pub struct TraceResult {
    /// The configuration traced.
    pub config: Config,
    /// Kernel, HZ, clocksource, preempt model.
    pub kernel: KernelLine,
    /// How this kernel accounts CPU time.
    pub accounting: KernelAccounting,
    /// True if tracefs was not mounted and this run mounted it.
    pub mounted_tracefs: bool,
    /// The tracefs instance used.
    pub instance: String,
    /// True once the instance was removed again.
    pub instance_removed: bool,
    /// Events recorded.
    pub events_enabled: Vec<EventKind>,
    /// How ticks were counted: `tick handler interrupts` or `1/HZ grid`.
    pub tick_source: String,
    /// Tick length used for billing, ns.
    pub tick_ns: u64,
    /// Traced wall time, ns.
    pub duration_ns: u64,
    /// CPUs traced.
    pub cpus: usize,
    /// Events decoded.
    pub events: u64,
    /// Events that did not fit in the store.
    pub dropped: u64,
    /// Events the kernel lost (ring-buffer overrun).
    pub lost: u64,
    /// Tick interrupts seen (all tasks).
    pub ticks_seen: u64,
    /// One entry per application.
    pub apps: Vec<AppResult>,
    /// Share of traced CPU time in the idle task.
    pub idle_share: f64,
    /// Share of traced CPU time in tasks of no traced application.
    pub other_share: f64,
    /// The command's exit status (`-- CMD`), if it exited.
    pub command_status: Option<i32>,
    /// True when interrupted (Ctrl-C).
    pub partial: bool,
}

struct Running<'a> {
    ctl: &'a Control,
    tids: Vec<AtomicI32>,
    iterations: Vec<AtomicU64>,
}

/// Runs the trace (see the module docs).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a bad config; [`ErrorKind::Unavailable`]
/// without root or tracefs (the message says how to fix it);
/// [`ErrorKind::Io`] if the command cannot start or tracefs misbehaves.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<TraceResult> {
    config.validate()?;
    if !tracefs::is_root() {
        return Err(Error::new(
            ErrorKind::Unavailable,
            "lab trace needs root: it reads scheduler tracepoints through tracefs. Run it with sudo.",
        ));
    }
    let kernel = KernelLine::current();
    let accounting = KernelAccounting::current();
    let hz = accounting.config_hz.or(kernel.config_hz).unwrap_or(250);
    let tick_ns = workloads::tick_ns(hz);
    let ticks = match tracefs::tick_handler_address() {
        Some(a) => TickSource::Handler(a),
        None => TickSource::Grid(tick_ns),
    };
    let cpus = firmtime_rt::sched::online_cpus();
    let inst = tracefs::Instance::create(&tracefs::instance_name(), config.buffer_kb)?;

    // Applications: workloads, then pids, then the command.
    let mut names: Vec<(String, Option<String>)> = Vec::new();
    for w in &config.workloads {
        names.push((w.name().to_string(), Some(w.paper_row().to_string())));
    }
    let mut targets_pids = Vec::new();
    for &p in &config.pids {
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        targets_pids.push((names.len(), p));
        names.push((format!("pid {p} ({})", comm.trim()), None));
    }
    let cmd_app = (!config.command.is_empty()).then(|| {
        names.push((config.command.join(" "), None));
        names.len() - 1
    });
    let mut targets = Targets::new(names.len(), true);
    let mut before: Vec<Option<ProcAccounting>> = vec![None; names.len()];
    for &(app, p) in &targets_pids {
        for t in tasks_of(p) {
            targets.add(t, app);
        }
        before[app] = read_process(p).ok();
    }

    let ctl = Control::default();
    let run_state = Running {
        ctl: &ctl,
        tids: config.workloads.iter().map(|_| AtomicI32::new(0)).collect(),
        iterations: config.workloads.iter().map(|_| AtomicU64::new(0)).collect(),
    };
    let drain_stop = AtomicBool::new(false);
    let interval = Duration::from_nanos(config.drain_interval_ns);
    let mut command_status = None;
    let mut after: Vec<Option<ProcAccounting>> = vec![None; names.len()];
    let mut interrupted = false;
    let mut elapsed = 0;

    let capture = std::thread::scope(|s| -> Result<tracefs::Capture> {
        let drainer = std::thread::Builder::new()
            .name("ft-trace-drain".into())
            .spawn_scoped(s, || {
                tracefs::drain(&inst, &cpus, config.max_events, interval, &drain_stop)
            })
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot start the drainer: {e}")))?;
        let hz_for = hz;
        let started = (|| -> Result<(u64, Option<i32>)> {
            inst.set_on(true)?;
            let t0 = monotonic_ns();
            for (i, w) in config.workloads.iter().enumerate() {
                let (w, rs) = (*w, &run_state);
                std::thread::Builder::new()
                    .name(w.thread_name().into())
                    .spawn_scoped(s, move || {
                        workloads::run(w, rs.ctl, &rs.tids[i], &rs.iterations[i], hz_for)
                    })
                    .map_err(|e| {
                        Error::new(ErrorKind::Io, format!("cannot start workload {w}: {e}"))
                    })?;
            }
            let child = match config.command.split_first() {
                Some((prog, args)) => Some(
                    std::process::Command::new(prog)
                        .args(args)
                        .spawn()
                        .map_err(|e| {
                            Error::new(ErrorKind::Io, format!("cannot start `{prog}`: {e}"))
                        })?
                        .id() as i32,
                ),
                None => None,
            };
            Ok((t0, child))
        })();
        let (t0, child) = match started {
            Ok(v) => v,
            Err(e) => {
                stop_workloads(&ctl, 0);
                drain_stop.store(true, Ordering::SeqCst);
                let _ = drainer.join();
                return Err(e);
            }
        };
        if let (Some(app), Some(pid)) = (cmd_app, child) {
            targets.add(pid, app);
        }
        progress.begin("trace", config.duration_ns / 1_000_000);
        let mut shown = 0;
        let mut child_exited = false;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let ms = ((monotonic_ns() - t0) / 1_000_000).min(config.duration_ns / 1_000_000);
            progress.advance(ms - shown);
            shown = ms;
            if let Some(pid) = child {
                child_exited = child_has_exited(pid);
                if child_exited {
                    break;
                }
            }
            if stop_requested() {
                interrupted = true;
                break;
            }
            if monotonic_ns() - t0 >= config.duration_ns {
                break;
            }
        }
        progress.end();
        // Workloads finish their iteration and park, so their /proc entries
        // can be read after tracing stops.
        ctl.finish.store(true, Ordering::SeqCst);
        let parked_by = monotonic_ns() + 2_000_000_000;
        while ctl.arrived.load(Ordering::SeqCst) < config.workloads.len()
            && monotonic_ns() < parked_by
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(pid) = child {
            if !child_exited {
                terminate(pid);
            }
        }
        let _ = inst.set_on(false);
        elapsed = monotonic_ns() - t0;
        for (i, t) in run_state.tids.iter().enumerate() {
            let tid = t.load(Ordering::SeqCst);
            if tid > 0 {
                targets.add(tid, i);
                after[i] = ProcAccounting::read(&format!("self/task/{tid}")).ok();
            }
        }
        for &(app, p) in &targets_pids {
            after[app] = read_process(p).ok();
        }
        if let (Some(app), Some(pid)) = (cmd_app, child) {
            let (status, acc) = reap(pid);
            command_status = status;
            after[app] = acc;
        }
        ctl.release.store(true, Ordering::SeqCst);
        drain_stop.store(true, Ordering::SeqCst);
        Ok(drainer
            .join()
            .map_err(|_| Error::new(ErrorKind::Io, "the trace drainer panicked"))??)
    })?;

    let lost = inst.lost_events(&cpus);
    let events_enabled = inst.events.clone();
    let instance_path = inst.path().display().to_string();
    let mounted = inst.mounted;
    let instance_removed = inst.remove();

    let mut events = capture.events;
    events.sort_by_key(|e| e.time_ns);
    let analysis = analysis::analyze(&events, &mut targets, ticks);
    let user_hz = billing::user_hz();
    let apps = names
        .iter()
        .enumerate()
        .map(|(i, (name, paper))| {
            let iterations = (i < config.workloads.len())
                .then(|| run_state.iterations[i].load(Ordering::SeqCst));
            let acc = match (after[i], before[i]) {
                (Some(a), Some(b)) => Some((a.since(&b), user_hz)),
                (Some(a), None) => Some((a, user_hz)),
                _ => None,
            };
            app_result(
                name,
                paper.as_deref(),
                &analysis,
                i,
                elapsed,
                tick_ns,
                iterations,
                acc,
            )
        })
        .collect();
    let covered = analysis.covered_ns.max(1) as f64;
    Ok(TraceResult {
        config: config.clone(),
        kernel,
        accounting,
        mounted_tracefs: mounted,
        instance: instance_path,
        instance_removed,
        events_enabled,
        tick_source: match ticks {
            TickSource::Handler(_) => "tick handler interrupts (hrtimer_expire_entry)".into(),
            TickSource::Grid(_) => {
                "1/HZ grid on CLOCK_MONOTONIC (tick handler address hidden)".into()
            }
        },
        tick_ns,
        duration_ns: elapsed,
        cpus: cpus.len(),
        events: events.len() as u64,
        dropped: capture.dropped,
        lost: lost + capture.missed,
        ticks_seen: analysis.ticks_seen,
        apps,
        idle_share: analysis.idle_ns as f64 / covered,
        other_share: analysis.other_ns as f64 / covered,
        command_status,
        partial: interrupted,
    })
}

#[allow(clippy::too_many_arguments)]
fn app_result(
    name: &str,
    paper: Option<&str>,
    a: &Analysis,
    i: usize,
    elapsed_ns: u64,
    tick_ns: u64,
    iterations: Option<u64>,
    acc: Option<(ProcAccounting, u64)>,
) -> AppResult {
    let q = &a.quanta[i];
    let durations: Vec<i64> = q.iter().map(|q| q.duration_ns as i64).collect();
    let bills: Vec<QuantumBill> = q
        .iter()
        .map(|q| QuantumBill {
            duration_ns: q.duration_ns,
            ticks: q.ticks,
        })
        .collect();
    let cpu_ns: u64 = q.iter().map(|q| q.duration_ns).sum();
    let preempted = q.iter().filter(|q| q.preempted).count() as u64;
    AppResult {
        name: name.to_string(),
        paper_application: paper.map(str::to_string),
        tids: a.tids[i].clone(),
        iterations,
        quanta: q.len() as u64,
        quanta_per_s: if elapsed_ns == 0 {
            0.0
        } else {
            q.len() as f64 * 1e9 / elapsed_ns as f64
        },
        quantum: summarize(&durations, 0),
        preempted,
        blocked: q.len() as u64 - preempted,
        truncated: a.truncated[i],
        cpu_ns,
        cpu_share: cpu_ns as f64 / a.covered_ns.max(1) as f64,
        cdf: cdf(&durations),
        billing: BillingRow::compute(&bills, tick_ns, acc),
        fig4: billing::fig4(&bills, tick_ns, 20),
        paper: PaperApp {
            table4: paper.and_then(paper_quanta).copied(),
            table3: paper.and_then(billing::paper_row).copied(),
        },
        durations,
    }
}

/// The cumulative distribution of `samples` at 5 % steps (nearest rank).
pub fn cdf(samples: &[i64]) -> Vec<CdfPoint> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    (1..=20)
        .map(|k| {
            let f = k as f64 / 20.0;
            let rank = ((f * s.len() as f64).ceil() as usize).clamp(1, s.len());
            CdfPoint {
                quantum_ns: s[rank - 1],
                fraction: f,
            }
        })
        .collect()
}

fn stop_workloads(ctl: &Control, _n: usize) {
    ctl.finish.store(true, Ordering::SeqCst);
    ctl.release.store(true, Ordering::SeqCst);
}

/// Thread ids of process `pid` (`/proc/PID/task`).
pub fn tasks_of(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if v.is_empty() {
        v.push(pid);
    }
    v
}

/// A whole process's accounting: `/proc/PID/stat` (all threads) and the
/// sum of its threads' schedstat.
fn read_process(pid: i32) -> Result<ProcAccounting> {
    let mut acc = ProcAccounting::read(&pid.to_string())?;
    let sum: Option<u64> = tasks_of(pid)
        .iter()
        .map(|t| {
            ProcAccounting::read(&format!("{pid}/task/{t}"))
                .ok()?
                .schedstat_ns
        })
        .sum();
    acc.schedstat_ns = sum;
    Ok(acc)
}

fn child_has_exited(pid: i32) -> bool {
    // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: info is a valid siginfo_t; WNOWAIT leaves the child to reap later.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled info (si_pid is 0 when the child has not exited).
    r == 0 && unsafe { info.si_pid() } == pid
}

fn terminate(pid: i32) {
    // SAFETY: kill has no memory preconditions; pid is our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let by = monotonic_ns() + 1_000_000_000;
    while monotonic_ns() < by {
        if child_has_exited(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Reaps the child, returning its exit status and its rusage (which the
/// kernel scales like /proc/PID/stat) as accounting.
fn reap(pid: i32) -> (Option<i32>, Option<ProcAccounting>) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: status and ru are valid for writes; pid is our own child.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        return (None, None);
    }
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Some(128 + libc::WTERMSIG(status))
    } else {
        None
    };
    let user_hz = billing::user_hz();
    let ticks = |t: libc::timeval| {
        let us = t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        us * user_hz / 1_000_000
    };
    (
        code,
        Some(ProcAccounting {
            utime_ticks: ticks(ru.ru_utime),
            stime_ticks: ticks(ru.ru_stime),
            schedstat_ns: None,
        }),
    )
}
