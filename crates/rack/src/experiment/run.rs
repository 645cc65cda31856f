//! Running the points: a private dummy JACK server and a rack per point,
//! the idle baseline, the counted steps, and the machine it ran on.

use super::plan::{rack_for, Placement, PointSpec, Timing};
use super::ramp::{allowed_xruns, passes, Search};
use super::results::{ExperimentReport, PointResult, StepResult};
use crate::error::{Error, ErrorKind, Result};
use crate::host::{HostOptions, RackHost};
use firmtime_jack::{DummyOptions, DummyServer};
use firmtime_ladspa::Scan;
use firmtime_rt::system::SystemInfo;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run needs from the caller.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// Where `waste_time` is found.
    pub scan: &'a Scan,
    /// Running workers (`firmtime net worker`), at least as many as the largest point needs.
    pub workers: Vec<SocketAddr>,
    /// Step lengths and ramp.
    pub timing: Timing,
    /// Where the `waste_time` plugin of each local point writes its log
    /// ([`waste_log_path`]): the experiment's output directory, never
    /// `/tmp`.
    pub log_dir: &'a Path,
}

/// The environment variable the `waste_time` plugin reads, at
/// instantiate, for its log's path.
pub const WASTE_LOG_ENV: &str = "FIRMTIME_WASTE_LOG";

/// Where the `waste_time` plugin of a local point logs:
/// `DIR/waste_time-fig5-44100hz-64.csv` (figure, rate, frames per period:
/// one file per point, none overwritten). `None` for a remote point, which
/// runs no `waste_time` in this process.
pub fn waste_log_path(dir: &Path, spec: &PointSpec) -> Option<PathBuf> {
    match spec.placement {
        Placement::Local => Some(dir.join(format!(
            "waste_time-fig{}-{}hz-{}.csv",
            spec.figure, spec.rate, spec.period_frames
        ))),
        Placement::Remote { .. } => None,
    }
}

/// Sets [`WASTE_LOG_ENV`] for the plugin instances a point starts, and puts
/// the previous value back on drop. Set before the point's server, client
/// and plugin threads start (the experiment's own thread is the only one
/// then), restored after they ended.
struct WasteLogEnv(Option<Option<OsString>>);

impl WasteLogEnv {
    fn set(path: Option<&Path>) -> Self {
        let Some(path) = path else {
            return WasteLogEnv(None);
        };
        let before = std::env::var_os(WASTE_LOG_ENV);
        std::env::set_var(WASTE_LOG_ENV, path);
        WasteLogEnv(Some(before))
    }
}

impl Drop for WasteLogEnv {
    fn drop(&mut self) {
        match self.0.take() {
            Some(Some(v)) => std::env::set_var(WASTE_LOG_ENV, v),
            Some(None) => std::env::remove_var(WASTE_LOG_ENV),
            None => {}
        }
    }
}

fn set_load(host: &mut RackHost, spec: &PointSpec, fraction: f64) -> Result<()> {
    let names: Vec<String> = host
        .control()
        .stages()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    for n in names {
        let port = match spec.placement {
            Placement::Local => "Start fraction",
            Placement::Remote { .. } => "fraction",
        };
        host.control().set(&n, port, fraction as f32)?;
    }
    Ok(())
}

/// User and system CPU seconds of this process and of `pid`.
fn cpu_seconds(pid: Option<u32>) -> (f64, f64) {
    // SAFETY: rusage is plain old data; all-zero is valid, and getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let (mut u, mut s) = (tv(ru.ru_utime), tv(ru.ru_stime));
    if let Some(pid) = pid {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command name's closing parenthesis; utime and stime are 14 and 15.
            if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) {
                let f: Vec<&str> = rest.split(' ').collect();
                // SAFETY: sysconf has no preconditions.
                let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
                if f.len() > 12 {
                    u += f[11].parse::<f64>().unwrap_or(0.0) / hz;
                    s += f[12].parse::<f64>().unwrap_or(0.0) / hz;
                }
            }
        }
    }
    (u, s)
}

fn late_total(host: &mut RackHost) -> (u64, u64, u64) {
    let s = host.control().stats();
    (s.cycles, s.stages.iter().map(|x| x.late).sum(), s.overruns)
}

fn count_step(
    host: &mut RackHost,
    jackd: Option<u32>,
    fraction: f64,
    seconds: f64,
    baseline_per_s: f64,
    baseline_overruns_per_s: f64,
) -> StepResult {
    let x0 = host.xruns();
    let (c0, l0, o0) = late_total(host);
    let (u0, s0) = cpu_seconds(jackd);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let wall = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu_seconds(jackd);
    let (c1, l1, o1) = late_total(host);
    let xruns = host.xruns() - x0;
    let periods = c1 - c0;
    let late = l1 - l0;
    let overruns = o1 - o0;
    StepResult {
        fraction,
        seconds: wall,
        periods,
        xruns,
        late,
        overruns,
        allowed_overruns: allowed_xruns(wall, baseline_overruns_per_s),
        allowed_xruns: allowed_xruns(wall, baseline_per_s),
        passed: passes(xruns, late, periods, wall, baseline_per_s)
            && overruns <= allowed_xruns(wall, baseline_overruns_per_s),
        central_user: (u1 - u0) / wall,
        central_sys: (s1 - s0) / wall,
        dsp_load: host.cpu_load(),
    }
}

/// Runs one point: a private dummy server, the idle baseline, then the
/// ramp (or Figure 7's fixed step). `progress` hears one line per step.
/// A local point's `waste_time` writes its log to
/// [`waste_log_path`]`(setup.log_dir, spec)` when the point ends (the
/// plugin's cleanup); the result names it (`waste_time_log`).
///
/// # Errors
/// The dummy server does not start (jackd missing: the message says what
/// to install), the rack cannot be built (waste_time not found, a worker
/// unreachable), or a control change is refused.
pub fn run_point(
    spec: &PointSpec,
    setup: &Setup<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<PointResult> {
    let t = setup.timing;
    let log = waste_log_path(setup.log_dir, spec);
    // Declared first: dropped last, after the host and the server.
    let _log_env = WasteLogEnv::set(log.as_deref());
    let mut opts = DummyOptions::new();
    opts.rate = spec.rate;
    opts.period = spec.period_frames;
    opts.realtime = true;
    let server =
        DummyServer::start(opts).map_err(|e| Error::new(ErrorKind::Jack, e.to_string()))?;
    let jackd = server.pid();
    let file = rack_for(spec, &setup.workers, 0.0)?;
    let mut host = RackHost::start(
        &file,
        setup.scan,
        &HostOptions {
            server_name: Some(server.name().to_string()),
            ..HostOptions::default()
        },
    )?;
    // Start-up xruns (ports, first cycles) are not the machine's sporadic ones.
    std::thread::sleep(Duration::from_secs_f64(t.settle_s.max(0.3)));
    let base = count_step(&mut host, jackd, 0.0, t.baseline_s, 0.0, 0.0);
    let baseline_per_s = base.xruns as f64 / base.seconds.max(1e-3);
    let baseline_overruns_per_s = base.overruns as f64 / base.seconds.max(1e-3);
    progress(&format!(
        "fig {} {:.2} ms {}: idle {} xruns, {} overruns in {:.1} s",
        spec.figure,
        spec.period_ms(),
        match spec.placement {
            crate::experiment::Placement::Local => "local".to_string(),
            crate::experiment::Placement::Remote { workers, window } =>
                format!("{workers} worker(s), window {window}"),
        },
        base.xruns,
        base.overruns,
        base.seconds
    ));
    let mut steps = Vec::new();
    let mut usable = None;
    let mut run_step = |host: &mut RackHost, f: f64| -> Result<StepResult> {
        set_load(host, spec, f)?;
        std::thread::sleep(Duration::from_secs_f64(t.settle_s));
        let s = count_step(
            host,
            jackd,
            f,
            t.step_s,
            baseline_per_s,
            baseline_overruns_per_s,
        );
        progress(&format!(
            "  load {:5.1} %: {} periods, {} xruns (≤ {}), {} overruns (≤ {}), {} late, central {:.0} % user {:.0} % sys → {}",
            f * 100.0,
            s.periods,
            s.xruns,
            s.allowed_xruns,
            s.overruns,
            s.allowed_overruns,
            s.late,
            s.central_user * 100.0,
            s.central_sys * 100.0,
            if s.passed { "pass" } else { "FAIL" }
        ));
        Ok(s)
    };
    if let Some(f) = spec.fixed {
        let mut s = run_step(&mut host, f)?;
        // Figure 7 measures CPU: give it twice the step.
        let more = count_step(
            &mut host,
            jackd,
            f,
            t.step_s,
            baseline_per_s,
            baseline_overruns_per_s,
        );
        s.seconds += more.seconds;
        s.central_user = (s.central_user + more.central_user) / 2.0;
        s.central_sys = (s.central_sys + more.central_sys) / 2.0;
        s.xruns += more.xruns;
        s.overruns += more.overruns;
        s.periods += more.periods;
        s.late += more.late;
        s.passed = s.passed && more.passed;
        if s.passed {
            usable = Some(f);
        }
        steps.push(s);
    } else {
        let mut search = Search::new(t.start, t.coarse, t.fine, 1.0)?;
        while let Some(f) = search.next() {
            let s = run_step(&mut host, f)?;
            search.record(s.passed);
            steps.push(s);
        }
        usable = search.usable();
    }
    // A client thread busy in a long callback at close is cancelled by
    // libjack, which aborts the process: drop the load first.
    set_load(&mut host, spec, 0.0)?;
    std::thread::sleep(Duration::from_millis(200));
    drop(host);
    drop(server);
    Ok(PointResult {
        spec: spec.clone(),
        period_ms: spec.period_ms(),
        baseline_xruns: base.xruns,
        baseline_overruns: base.overruns,
        baseline_s: base.seconds,
        usable_fraction: usable,
        steps,
        waste_time_log: log
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned()),
    })
}

/// The machine facts of the report, from [`SystemInfo`] ("unknown" where
/// it has none).
struct Machine {
    kernel: String,
    preempt: String,
    clocksource: String,
    cpu: String,
}

impl Machine {
    fn current() -> Self {
        Self::from_system(&SystemInfo::collect())
    }

    fn from_system(sys: &SystemInfo) -> Self {
        let unknown = || "unknown".to_string();
        // The preemption model as `uname -v` names it.
        let preempt = ["PREEMPT_RT", "PREEMPT_DYNAMIC", "PREEMPT"]
            .into_iter()
            .find(|m| sys.kernel_version.contains(m))
            .unwrap_or("none")
            .to_string();
        Machine {
            kernel: sys.kernel_release.clone(),
            preempt,
            clocksource: sys.clocksource.clone().unwrap_or_else(unknown),
            cpu: sys.cpu_model.clone().unwrap_or_else(unknown),
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs every point of [`plan`](super::plan()) in order and returns the report.
///
/// # Errors
/// As [`run_point`]; the first failing point stops the run.
pub fn run(
    points: &[PointSpec],
    setup: &Setup<'_>,
    quick: bool,
    command: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<ExperimentReport> {
    let started = unix_now();
    let mut out = Vec::with_capacity(points.len());
    for p in points {
        out.push(run_point(p, setup, progress)?);
    }
    let m = Machine::current();
    Ok(ExperimentReport {
        version: env!("CARGO_PKG_VERSION").into(),
        command: command.into(),
        kernel: m.kernel,
        preempt: m.preempt,
        clocksource: m.clocksource,
        cpu: m.cpu,
        conditions: "private jackd -R (SCHED_FIFO) -d dummy per point; remote workers are \
                     `firmtime net worker` processes on 127.0.0.1 holding blocks in sleep mode"
            .into(),
        quick,
        timing: setup.timing,
        started_unix_s: started,
        ended_unix_s: unix_now(),
        points: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_facts_come_from_system_info() {
        let mut sys = SystemInfo::collect();
        sys.kernel_release = "6.1.0-rt".into();
        sys.kernel_version = "#1 SMP PREEMPT_RT Debian".into();
        sys.clocksource = None;
        sys.cpu_model = Some("Some CPU".into());
        let m = Machine::from_system(&sys);
        assert_eq!(m.kernel, "6.1.0-rt");
        assert_eq!(m.preempt, "PREEMPT_RT");
        assert_eq!(m.clocksource, "unknown");
        assert_eq!(m.cpu, "Some CPU");
        sys.kernel_version = "#1 SMP PREEMPT_DYNAMIC".into();
        sys.cpu_model = None;
        let m = Machine::from_system(&sys);
        assert_eq!(
            (m.preempt.as_str(), m.cpu.as_str()),
            ("PREEMPT_DYNAMIC", "unknown")
        );
        sys.kernel_version = "#1 SMP".into();
        assert_eq!(Machine::from_system(&sys).preempt, "none");
    }

    #[test]
    fn waste_time_logs_go_to_the_output_directory_one_per_local_point() {
        let dir = Path::new("/some/out");
        let points = crate::experiment::plan(false);
        let mut seen = std::collections::BTreeSet::new();
        for p in &points {
            match (&p.placement, waste_log_path(dir, p)) {
                (Placement::Local, Some(path)) => {
                    assert_eq!(path.parent(), Some(dir), "{}", path.display());
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    assert_eq!(
                        name,
                        format!(
                            "waste_time-fig{}-{}hz-{}.csv",
                            p.figure, p.rate, p.period_frames
                        )
                    );
                    assert!(seen.insert(name.clone()), "two points log to {name}");
                }
                (Placement::Remote { .. }, None) => {}
                (pl, got) => panic!("{pl:?}: {got:?}"),
            }
        }
        let local = points
            .iter()
            .filter(|p| p.placement == Placement::Local)
            .count();
        assert!(local > 0);
        assert_eq!(seen.len(), local);
    }

    #[test]
    fn the_waste_log_variable_is_put_back_after_a_point() {
        // The only test in this crate's unit tests touching the variable.
        let before = std::env::var_os(WASTE_LOG_ENV);
        {
            let _g = WasteLogEnv::set(Some(Path::new("/some/out/w.csv")));
            assert_eq!(
                std::env::var_os(WASTE_LOG_ENV).as_deref(),
                Some(std::ffi::OsStr::new("/some/out/w.csv"))
            );
        }
        assert_eq!(std::env::var_os(WASTE_LOG_ENV), before);
        {
            let _g = WasteLogEnv::set(None);
            assert_eq!(std::env::var_os(WASTE_LOG_ENV), before);
        }
        assert_eq!(std::env::var_os(WASTE_LOG_ENV), before);
    }
}
