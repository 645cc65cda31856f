//! The parent side: one cell at a time, its workers and hogs started,
//! supervised (Ctrl-C, watchdog) and reaped, their reports gathered.

use super::{
    CellMeasurement, CellResult, CellSpec, Config, KernelTiming, ProcessResult, TailsResult,
    WorkerConfig, WorkerOutput, MS, WATCHDOG_GRACE,
};
use crate::error::{Error, ErrorKind, Result};
use crate::load::{self, LoadSet, LoadSpec};
use crate::measure::{stop_requested, Cell, Progress};
use crate::stats::summarize;
use firmtime_rt::process::{self, Target};
use firmtime_rt::rng::Rng;
use firmtime_rt::sched;
use std::io::Read;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// Runs every cell of `cfg`, starting workers and hogs from `exe` (the
/// firmtime binary: `std::env::current_exe()`).
///
/// Ctrl-C ([`stop_requested`]) stops the running cell's workers (they report
/// what they measured) and skips the remaining cells; the result is then
/// `partial`. SCHED_RR refused → every cell is skipped with the reason.
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] from [`Config::validate`].
/// - [`ErrorKind::Load`] if a worker or hog cannot be started, or a worker
///   fails or reports nothing readable.
pub fn run(cfg: &Config, exe: &Path, progress: &mut dyn Progress) -> Result<TailsResult> {
    cfg.validate()?;
    let cpu = match cfg.cpu {
        Some(c) => c,
        None => *sched::online_cpus()
            .last()
            .ok_or_else(|| Error::new(ErrorKind::Io, "no online CPU found in /sys"))?,
    };
    let mut result = TailsResult {
        config: cfg.clone(),
        cpu,
        kernel: KernelTiming::current(),
        cells: Vec::with_capacity(cfg.cells.len()),
        partial: false,
    };
    let tick_ns = result
        .kernel
        .config_hz
        .map(|hz| 1_000_000_000 / i64::from(hz));
    progress.begin("lab tails", cfg.cells.len() as u64);
    for (i, spec) in cfg.cells.iter().enumerate() {
        if stop_requested() {
            result.partial = true;
            break;
        }
        let r = run_cell(cfg, spec, i, cpu, exe, tick_ns);
        let cell = Cell::from_result(r)?;
        if let Cell::Measured(m) = &cell {
            result.partial |= m.partial;
        }
        result.cells.push(CellResult {
            spec: *spec,
            label: spec.label(),
            paper: spec.paper().copied(),
            result: cell,
        });
        progress.advance(1);
    }
    progress.end();
    result.partial |= stop_requested();
    Ok(result)
}

fn run_cell(
    cfg: &Config,
    spec: &CellSpec,
    index: usize,
    cpu: usize,
    exe: &Path,
    tick_ns: Option<i64>,
) -> Result<CellMeasurement> {
    let bound = cfg.cell_bound(spec);
    let hogs = if spec.extra_cpu > 0 {
        Some(spawn_pinned_hogs(
            exe,
            spec.extra_cpu,
            cpu,
            bound + WATCHDOG_GRACE * 2,
        )?)
    } else {
        None
    };
    let start_at_ns =
        firmtime_rt::clock::monotonic_ns() + 200 * MS + u64::from(spec.procs) * 30 * MS;
    let deadline_ns = start_at_ns + bound.as_nanos() as u64;
    let mut workers = Vec::with_capacity(spec.procs as usize);
    for w in 0..spec.procs {
        let wc = WorkerConfig {
            compute_percent: spec.compute_percent,
            alarms: cfg.alarms,
            max_delay_ns: cfg.max_delay_ns,
            seed: worker_seed(cfg.seed, index as u64, u64::from(w)),
            priority: cfg.priority,
            cpu: Some(cpu),
            start_at_ns,
            deadline_ns,
        };
        // On error, dropping `workers` kills and reaps those started.
        workers.push(WorkerChild::spawn(exe, &wc)?);
    }
    let outputs = supervise(&mut workers, deadline_ns);
    drop(hogs);
    let mut processes = Vec::with_capacity(outputs.len());
    let mut conditions = None;
    for (pid, out) in outputs {
        match out {
            Ok(WorkerOutput::Done(r)) => {
                let r = *r;
                conditions.get_or_insert(r.conditions);
                processes.push(ProcessResult {
                    pid,
                    delivered: r.latencies_ns.len() as u32,
                    timed_out: r.timed_out,
                    interrupted: r.interrupted,
                    rttime_limit_us: r.rttime_limit_us,
                    latencies_ns: r.latencies_ns,
                });
            }
            Ok(WorkerOutput::Refused { reason }) => {
                return Err(Error::new(ErrorKind::Realtime, reason));
            }
            Ok(WorkerOutput::Failed { message }) => {
                return Err(Error::new(
                    ErrorKind::Load,
                    format!("tails worker (pid {pid}) failed: {message}"),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    let conditions = conditions.ok_or_else(|| Error::new(ErrorKind::Load, "no worker reported"))?;
    let all: Vec<i64> = processes
        .iter()
        .flat_map(|p| p.latencies_ns.iter().copied())
        .collect();
    let requested = u64::from(spec.procs) * u64::from(cfg.alarms);
    let missed = requested - all.len() as u64;
    let within_one_tick = match tick_ns {
        Some(t) if !all.is_empty() => {
            Some(all.iter().filter(|&&l| l < t).count() as f64 / all.len() as f64)
        }
        _ => None,
    };
    let partial = processes.iter().any(|p| p.timed_out || p.interrupted);
    Ok(CellMeasurement {
        summary: summarize(&all, missed),
        requested,
        within_one_tick,
        conditions,
        processes,
        partial,
    })
}

/// Starts `hogs` SCHED_OTHER CPU hogs pinned to `cpu` (children inherit the
/// spawning thread's affinity, which is restored afterwards).
fn spawn_pinned_hogs(exe: &Path, hogs: u32, cpu: usize, duration: Duration) -> Result<LoadSet> {
    let before = sched::affinity()?;
    sched::set_affinity(&[cpu])?;
    let set = LoadSet::spawn(exe, &[LoadSpec::Cpu { hogs }], duration);
    sched::set_affinity(&before)?;
    set
}

/// A distinct, reproducible seed per cell and process.
pub fn worker_seed(seed: u64, cell: u64, worker: u64) -> u64 {
    Rng::new(seed ^ cell.wrapping_mul(Rng::GAMMA) ^ worker.rotate_left(32)).next_u64()
}

struct WorkerChild {
    child: Child,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl WorkerChild {
    fn spawn(exe: &Path, wc: &WorkerConfig) -> Result<Self> {
        let mut cmd = load::child_command(exe);
        cmd.args(["lab", "tails-worker"]).args(wc.to_cli_args());
        let mut child = cmd.spawn().map_err(|e| {
            Error::new(
                ErrorKind::Load,
                format!(
                    "cannot start tails worker ({} lab tails-worker): {e}",
                    exe.display()
                ),
            )
        })?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        Ok(Self {
            child,
            reader: Some(reader),
        })
    }

    /// Signals the worker's process group (it leads its own) while it runs.
    fn signal(&mut self, sig: libc::c_int) {
        process::signal(&mut self.child, Target::Group, sig);
    }
}

impl Drop for WorkerChild {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Waits for every worker to finish; on Ctrl-C asks them to stop (SIGTERM:
/// they report what they have); kills any still running after the deadline
/// plus a grace. Returns each worker's pid and parsed report.
fn supervise(workers: &mut [WorkerChild], deadline_ns: u64) -> Vec<(u32, Result<WorkerOutput>)> {
    let mut kill_at = deadline_ns + WATCHDOG_GRACE.as_nanos() as u64;
    let mut termed = false;
    loop {
        let running = workers
            .iter_mut()
            .map(|w| matches!(w.child.try_wait(), Ok(None)))
            .filter(|&r| r)
            .count();
        if running == 0 {
            break;
        }
        let now = firmtime_rt::clock::monotonic_ns();
        if stop_requested() && !termed {
            termed = true;
            workers.iter_mut().for_each(|w| w.signal(libc::SIGTERM));
            kill_at = kill_at.min(now + WATCHDOG_GRACE.as_nanos() as u64);
        }
        if now >= kill_at {
            workers.iter_mut().for_each(|w| w.signal(libc::SIGKILL));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    workers
        .iter_mut()
        .map(|w| {
            let pid = w.child.id();
            let status = w.child.wait();
            let text = w
                .reader
                .take()
                .and_then(|r| r.join().ok())
                .unwrap_or_default();
            let parsed = serde_json::from_str::<WorkerOutput>(&text).map_err(|e| {
                let how = match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                Error::new(
                    ErrorKind::Load,
                    format!(
                        "tails worker (pid {pid}) reported nothing readable ({how}; {e}); its error message, if any, is on stderr above"
                    ),
                )
            });
            (pid, parsed)
        })
        .collect()
}
