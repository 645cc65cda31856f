//! Lago (2004) §7, Figures 5–8, on JACK's dummy backend.
//!
//! Each *point* (a sample rate, a period size, a placement of the
//! `waste_time` load: a local plugin or N remote workers at a window)
//! starts a private `jackd -R -d dummy` server, runs a rack on it, and
//! first measures the sporadic xruns of this machine with the rack at zero
//! load (Lago's "ignored sporadic xruns"). Then it raises the load step by
//! step ([`Search`]: coarse steps, then fine steps after the first
//! failure) and keeps the largest fraction of the period whose step
//! [`passes`]: its xruns do not exceed what the baseline rate predicts
//! (plus three standard deviations of a Poisson count, at least one),
//! nor do its overruns (cycles the rack itself measured longer than the
//! period: JACK's dummy driver catches up after a late cycle instead of
//! always reporting an xrun), and at most 0.1 % of its periods got a late
//! remote result.
//!
//! Figure 7 is not a ramp: one step at a fixed load, measuring the CPU
//! time of the central machine (this process plus jackd) per second.
//!
//! Remote workers are `firmtime net worker` processes the caller starts
//! (on loopback); the built-in work holds each block by *sleeping*, which
//! emulates separate machines on this 2-core VM (spinning workers would
//! compete with the central machine for the same cores).
//!
//! Not for the RT path: everything here allocates, forks and sleeps; the
//! rack's process callback is the RT part ([`crate::host`]).

use crate::error::{Error, ErrorKind, Result};
use crate::file::{RackFile, RemoteSpec, StageKind, StageSpec};
use crate::host::{HostOptions, RackHost};
use firmtime_ladspa::Scan;
use firmtime_midi::jack::{DummyOptions, DummyServer};
use firmtime_net::{Work, WorkMode};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Largest share of a step's periods allowed a late remote result.
pub const LATE_TOLERANCE: f64 = 0.001;

/// Does a step pass? `xruns` in `seconds`, against the idle baseline rate
/// `baseline_per_s`; `late` remote results out of `periods`.
///
/// The xruns allowed are the baseline's expectation plus three standard
/// deviations of a Poisson count, and at least one, rounded down:
/// `floor(λ + max(1, 3·√λ))` with `λ = baseline_per_s × seconds`. **Pure.**
pub fn passes(xruns: u64, late: u64, periods: u64, seconds: f64, baseline_per_s: f64) -> bool {
    xruns <= allowed_xruns(seconds, baseline_per_s)
        && (late as f64) <= LATE_TOLERANCE * periods as f64
}

/// The xruns a step of `seconds` may have (see [`passes`]). **Pure.**
pub fn allowed_xruns(seconds: f64, baseline_per_s: f64) -> u64 {
    let lambda = (baseline_per_s * seconds).max(0.0);
    (lambda + (3.0 * lambda.sqrt()).max(1.0)).floor() as u64
}

/// The ramp of one point: fractions of the period from `start` up by
/// `coarse` until a step fails, then from the last passing fraction up by
/// `fine` until a step fails or reaches the failed coarse fraction. The
/// usable fraction is the largest that passed. **Pure.**
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    coarse: f64,
    fine: f64,
    max: f64,
    next: Option<f64>,
    fine_until: Option<f64>,
    usable: Option<f64>,
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Search {
    /// A ramp from `start` to at most `max`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] unless `0 < fine <= coarse` and `0 <= start <= max`.
    pub fn new(start: f64, coarse: f64, fine: f64, max: f64) -> Result<Search> {
        if !(fine > 0.0 && fine <= coarse && (0.0..=max).contains(&start)) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("ramp: need 0 < fine ({fine}) <= coarse ({coarse}) and 0 <= start ({start}) <= max ({max})"),
            ));
        }
        Ok(Search {
            coarse,
            fine,
            max,
            next: Some(round6(start)),
            fine_until: None,
            usable: None,
        })
    }

    /// The fraction to try next; `None` when the ramp is over.
    pub fn next(&self) -> Option<f64> {
        self.next
    }

    /// Records whether the step at [`Search::next`] passed.
    pub fn record(&mut self, passed: bool) {
        let Some(f) = self.next else { return };
        let below = |x: f64, ceiling: f64| x < ceiling - 1e-9;
        if passed {
            self.usable = Some(self.usable.map_or(f, |u| u.max(f)));
            self.next = match self.fine_until {
                None => Some(round6(f + self.coarse)).filter(|&x| x <= self.max + 1e-9),
                Some(c) => Some(round6(f + self.fine)).filter(|&x| below(x, c)),
            };
            return;
        }
        let ceiling = self.fine_until.map_or(f, |c| c.min(f));
        let searching_fine = self.fine_until.is_some() && self.usable.is_some();
        self.fine_until = Some(ceiling);
        self.next = if searching_fine {
            None
        } else if let Some(u) = self.usable {
            Some(round6(u + self.fine)).filter(|&x| below(x, ceiling))
        } else if f - self.coarse > 1e-9 {
            // Even the first step failed: walk down until one passes.
            Some(round6(f - self.coarse))
        } else {
            Some(round6(self.fine)).filter(|&x| below(x, f))
        };
    }

    /// The largest fraction that passed so far.
    pub fn usable(&self) -> Option<f64> {
        self.usable
    }
}

/// Where the load runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Placement {
    /// The `waste_time` plugin in the rack.
    Local,
    /// The workers' built-in work, one stage per worker, in series.
    Remote {
        /// Worker count.
        workers: usize,
        /// Window, 0 to 2.
        window: u8,
    },
}

/// One point of a figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointSpec {
    /// Figure number, 5 to 8.
    pub figure: u8,
    /// Sample rate, Hz.
    pub rate: u32,
    /// Frames per period.
    pub period_frames: u32,
    /// Where the load runs.
    pub placement: Placement,
    /// `Some(f)`: one step at load `f` (Figure 7) instead of a ramp.
    pub fixed: Option<f64>,
}

impl PointSpec {
    /// The period in milliseconds.
    pub fn period_ms(&self) -> f64 {
        f64::from(self.period_frames) * 1000.0 / f64::from(self.rate)
    }
}

/// How long steps last and how the ramp moves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Idle measurement per point, s.
    pub baseline_s: f64,
    /// Counted time per step, s.
    pub step_s: f64,
    /// Settling time after a change, before counting, s.
    pub settle_s: f64,
    /// Coarse ramp step.
    pub coarse: f64,
    /// Fine ramp step.
    pub fine: f64,
    /// First fraction.
    pub start: f64,
}

impl Timing {
    /// The full run (all of Figures 5–8 in under 10 minutes here).
    pub fn full() -> Self {
        Timing {
            baseline_s: 2.0,
            step_s: 1.0,
            settle_s: 0.1,
            coarse: 0.1,
            fine: 0.02,
            start: 0.5,
        }
    }

    /// `--quick`: shorter steps, coarser fine steps.
    pub fn quick() -> Self {
        Timing {
            baseline_s: 1.0,
            step_s: 0.3,
            settle_s: 0.05,
            coarse: 0.1,
            fine: 0.05,
            start: 0.5,
        }
    }
}

/// One counted step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepResult {
    /// Fraction of the period per stage.
    pub fraction: f64,
    /// Counted seconds.
    pub seconds: f64,
    /// Periods (process cycles).
    pub periods: u64,
    /// JACK xruns.
    pub xruns: u64,
    /// Cycles the rack measured longer than the period.
    pub overruns: u64,
    /// Overruns the baseline allowed.
    pub allowed_overruns: u64,
    /// Late remote results (all stages).
    pub late: u64,
    /// Xruns the baseline allowed.
    pub allowed_xruns: u64,
    /// Passed.
    pub passed: bool,
    /// Central user CPU (this process + jackd), fraction of one CPU.
    pub central_user: f64,
    /// Central system CPU, fraction of one CPU.
    pub central_sys: f64,
    /// JACK's DSP load at the end of the step, percent.
    pub dsp_load: f32,
}

/// A point's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointResult {
    /// What was run.
    pub spec: PointSpec,
    /// Period, ms.
    pub period_ms: f64,
    /// Idle xruns measured first.
    pub baseline_xruns: u64,
    /// Idle overruns measured first.
    pub baseline_overruns: u64,
    /// Over this many seconds.
    pub baseline_s: f64,
    /// Largest passing fraction (`None`: even the first step failed).
    pub usable_fraction: Option<f64>,
    /// Every step.
    pub steps: Vec<StepResult>,
}

/// What a run needs from the caller.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// Where `waste_time` is found.
    pub scan: &'a Scan,
    /// Running workers (`firmtime net worker`), at least as many as the largest point needs.
    pub workers: Vec<SocketAddr>,
    /// Step lengths and ramp.
    pub timing: Timing,
}

/// The points of Figures 5–8 (`quick`: a subset).
pub fn plan(quick: bool) -> Vec<PointSpec> {
    let mut v = Vec::new();
    let p = |figure, rate, period_frames, placement, fixed| PointSpec {
        figure,
        rate,
        period_frames,
        placement,
        fixed,
    };
    let (f5_44, f5_96): (&[u32], &[u32]) = if quick {
        (&[64, 128, 256], &[])
    } else {
        (&[64, 96, 128, 256, 512], &[140, 210, 288])
    };
    for &n in f5_44 {
        v.push(p(5, 44_100, n, Placement::Local, None));
    }
    for &n in f5_96 {
        v.push(p(5, 96_000, n, Placement::Local, None));
    }
    for workers in 1..=3 {
        v.push(p(
            6,
            44_100,
            128,
            Placement::Remote { workers, window: 0 },
            None,
        ));
    }
    let f7: &[(u32, u32, usize)] = if quick {
        &[
            (44_100, 96, 1),
            (44_100, 96, 2),
            (44_100, 96, 4),
            (96_000, 210, 7),
        ]
    } else {
        &[
            (44_100, 96, 1),
            (44_100, 96, 2),
            (44_100, 96, 3),
            (44_100, 96, 4),
            (96_000, 210, 4),
            (96_000, 210, 7),
        ]
    };
    for &(rate, n, workers) in f7 {
        v.push(p(
            7,
            rate,
            n,
            Placement::Remote { workers, window: 2 },
            Some(0.5),
        ));
    }
    let f8: &[(u32, usize)] = if quick {
        &[(210, 4), (210, 7)]
    } else {
        &[(140, 4), (210, 4), (288, 4), (432, 4), (210, 7)]
    };
    for &(n, workers) in f8 {
        v.push(p(
            8,
            96_000,
            n,
            Placement::Remote { workers, window: 1 },
            None,
        ));
    }
    v
}

/// The rack file of a point at load `fraction`.
pub fn rack_for(spec: &PointSpec, workers: &[SocketAddr], fraction: f64) -> Result<RackFile> {
    let stages = match spec.placement {
        Placement::Local => vec![StageSpec {
            name: "load".into(),
            kind: StageKind::Plugin("waste_time".into()),
            controls: vec![
                ("Start fraction".into(), fraction as f32),
                ("Step".into(), 0.0),
                ("Step interval (s)".into(), 0.0),
            ],
            remote: None,
            at: Default::default(),
        }],
        Placement::Remote { workers: n, window } => {
            if workers.len() < n {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "this point needs {n} workers but {} were given",
                        workers.len()
                    ),
                ));
            }
            workers[..n]
                .iter()
                .enumerate()
                .map(|(k, w)| StageSpec {
                    name: format!("w{}", k + 1),
                    kind: StageKind::Work {
                        work: Work {
                            fraction,
                            mode: WorkMode::Sleep,
                        },
                        channels: Some(1),
                    },
                    controls: Vec::new(),
                    remote: Some(RemoteSpec {
                        worker: w.to_string(),
                        key_file: None,
                        window,
                    }),
                    at: Default::default(),
                })
                .collect()
        }
    };
    Ok(RackFile {
        origin: format!("figure {} point", spec.figure),
        client: "firmtime-experiment".into(),
        connect_in: Vec::new(),
        connect_out: Vec::new(),
        deadline: 0.9,
        stages,
    })
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
        "fig {} {:.2} ms {:?}: idle {} xruns, {} overruns in {:.1} s",
        spec.figure,
        spec.period_ms(),
        spec.placement,
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
    })
}

/// The whole experiment's record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// firmtime version.
    pub version: String,
    /// The command line.
    pub command: String,
    /// `uname -r`.
    pub kernel: String,
    /// Preemption model from `uname -v` (`PREEMPT_DYNAMIC`, `PREEMPT_RT`, …).
    pub preempt: String,
    /// Current clocksource.
    pub clocksource: String,
    /// CPU model.
    pub cpu: String,
    /// RT conditions: jackd -R (SCHED_FIFO) on a dummy backend; workers on loopback.
    pub conditions: String,
    /// `--quick`.
    pub quick: bool,
    /// Step lengths and ramp.
    pub timing: Timing,
    /// Start, Unix seconds.
    pub started_unix_s: u64,
    /// End, Unix seconds.
    pub ended_unix_s: u64,
    /// Every point, in plan order.
    pub points: Vec<PointResult>,
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs every point of [`plan`] in order and returns the report.
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
    let sys = Some(firmtime_rt::system::SystemInfo::collect());
    let version = sys
        .as_ref()
        .map_or(String::new(), |s| s.kernel_version.clone());
    let preempt = ["PREEMPT_RT", "PREEMPT_DYNAMIC", "PREEMPT"]
        .into_iter()
        .find(|m| version.contains(m))
        .unwrap_or("none")
        .to_string();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    Ok(ExperimentReport {
        version: env!("CARGO_PKG_VERSION").into(),
        command: command.into(),
        kernel: sys.map_or("unknown".into(), |s| s.kernel_release),
        preempt,
        clocksource: read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        cpu,
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

/// Lago's figures as his text gives them: (figure, what, value).
pub const PAPER: &[(u8, &str, &str)] = &[
    (
        5,
        "local, 1.45 ms at 44.1 kHz",
        "89 % usable (user 91 %, sys 1 %)",
    ),
    (
        5,
        "local, ≥ 3.0 ms at 44.1 kHz",
        "≈ 96 % usable (user 97 %, sys 0 %)",
    ),
    (5, "local, 96 kHz", "a little lower than 44.1 kHz"),
    (6, "window 0, 1 remote machine", "73 % usable"),
    (6, "window 0, 2 remote machines", "27 % usable each"),
    (6, "window 0, 3 remote machines", "9 % usable each"),
    (
        7,
        "window 2, 2.18 ms at 44.1 kHz, 1–4 machines; 96 kHz 4 and 7",
        "central load grows linearly; 4 machines ≈ same at 44.1 and 96 kHz",
    ),
    (
        8,
        "window 1, 2.19 ms at 96 kHz, 7 machines",
        "96 % usable; central 45 % user, 20 % sys",
    ),
];

fn pct(x: Option<f64>) -> String {
    x.map_or("none".into(), |v| format!("{:.0} %", v * 100.0))
}

/// Writes `report.md`, `results.json` and `fig5.png`…`fig8.png` into `dir`.
///
/// # Errors
/// [`ErrorKind::Io`] when a file cannot be written or the plot font is missing
/// (the message says which package to install).
pub fn write_report(r: &ExperimentReport, dir: &Path) -> Result<()> {
    let io = |e: std::io::Error, p: &Path| {
        Error::new(ErrorKind::Io, format!("cannot write {}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io(e, dir))?;
    let json = serde_json::to_string_pretty(r).expect("report serializes");
    let jp = dir.join("results.json");
    std::fs::write(&jp, json + "\n").map_err(|e| io(e, &jp))?;
    plots(r, dir)?;
    let mut md = String::new();
    md.push_str("# Lago (2004) Figures 5–8 on this machine\n\n");
    md.push_str(&format!(
        "firmtime {} · `{}` · kernel {} ({}) · clocksource {} · CPU {} · {}{}.\n\n",
        r.version,
        r.command,
        r.kernel,
        r.preempt,
        r.clocksource,
        r.cpu,
        r.conditions,
        if r.quick { " · **--quick**" } else { "" }
    ));
    md.push_str(&format!(
        "Started {} and ended {} (Unix s): {} s. Steps of {} s after {} s of idle baseline per point; ramp from {:.0} % by {:.0} %, then by {:.0} % after the first failure. A step fails when its JACK xruns or its overruns (cycles the rack measured longer than the period) exceed the idle rate's expectation plus max(1, 3√λ), or more than 0.1 % of its periods got a late remote result.\n\n",
        r.started_unix_s,
        r.ended_unix_s,
        r.ended_unix_s.saturating_sub(r.started_unix_s),
        r.timing.step_s,
        r.timing.baseline_s,
        r.timing.start * 100.0,
        r.timing.coarse * 100.0,
        r.timing.fine * 100.0
    ));
    md.push_str(
        "## The paper (Lago 2004, §7.3)\n\n| Figure | Configuration | Lago |\n|---|---|---|\n",
    );
    for (f, what, v) in PAPER {
        md.push_str(&format!("| {f} | {what} | {v} |\n"));
    }
    md.push_str("\n## This machine\n\n| Figure | Rate | Period | Placement | Idle xruns / overruns | Usable fraction | Central user | Central sys | DSP load |\n|---|---|---|---|---|---|---|---|---|\n");
    for p in &r.points {
        let last = p.steps.iter().rev().find(|s| s.passed).or(p.steps.last());
        let place = match p.spec.placement {
            Placement::Local => "local waste_time".to_string(),
            Placement::Remote { workers, window } => {
                format!("{workers} worker(s), window {window}")
            }
        };
        md.push_str(&format!(
            "| {} | {} Hz | {} frames ({:.2} ms) | {} | {} / {} in {:.1} s | {} | {} | {} | {} |\n",
            p.spec.figure,
            p.spec.rate,
            p.spec.period_frames,
            p.period_ms,
            place,
            p.baseline_xruns,
            p.baseline_overruns,
            p.baseline_s,
            if p.spec.fixed.is_some() {
                format!(
                    "fixed {}{}",
                    pct(p.spec.fixed),
                    if p.usable_fraction.is_some() {
                        ""
                    } else {
                        " (failed)"
                    }
                )
            } else {
                pct(p.usable_fraction)
            },
            last.map_or("-".into(), |s| format!("{:.1} %", s.central_user * 100.0)),
            last.map_or("-".into(), |s| format!("{:.1} %", s.central_sys * 100.0)),
            last.map_or("-".into(), |s| format!("{:.1} %", s.dsp_load)),
        ));
    }
    md.push_str("\nCentral CPU is this process (the rack's JACK client and its sessions) plus jackd, as a fraction of one CPU, during the last passing step. The workers' CPU is not central: they are separate processes, as Lago's were separate machines.\n\n");
    md.push_str("Plots: fig5.png (usable fraction vs period, local), fig6.png (usable fraction per worker vs workers, window 0), fig7.png (central CPU vs workers, window 2), fig8.png (usable fraction vs period, window 1). Raw steps: results.json.\n");
    let mp = dir.join("report.md");
    std::fs::write(&mp, md).map_err(|e| io(e, &mp))?;
    Ok(())
}

type Series = (String, Vec<(f64, f64)>);

fn plots(r: &ExperimentReport, dir: &Path) -> Result<()> {
    use std::collections::BTreeMap;
    let font = firmtime_lab::plot::font_path();
    firmtime_lab::plot::use_font(&font).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    let mut figs: BTreeMap<u8, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for p in &r.points {
        let (key, x, y) = match (p.spec.figure, &p.spec.placement) {
            (5, _) => (
                format!("{} Hz", p.spec.rate),
                p.period_ms,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            (6, Placement::Remote { workers, .. }) => (
                format!("{} Hz, {:.2} ms", p.spec.rate, p.period_ms),
                *workers as f64,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            (7, Placement::Remote { workers, .. }) => {
                let s = p.steps.last();
                let u = s.map_or(0.0, |s| s.central_user * 100.0);
                let sy = s.map_or(0.0, |s| s.central_sys * 100.0);
                figs.entry(7)
                    .or_default()
                    .entry(format!("{} Hz sys", p.spec.rate))
                    .or_default()
                    .push((*workers as f64, sy));
                (format!("{} Hz user", p.spec.rate), *workers as f64, u)
            }
            (8, Placement::Remote { workers, .. }) => (
                format!("{} Hz, {workers} workers", p.spec.rate),
                p.period_ms,
                p.usable_fraction.unwrap_or(0.0) * 100.0,
            ),
            _ => continue,
        };
        figs.entry(p.spec.figure)
            .or_default()
            .entry(key)
            .or_default()
            .push((x, y));
    }
    for (fig, series) in figs {
        let (title, xl, yl) = match fig {
            5 => (
                "Fig. 5: usable fraction, local waste_time",
                "period (ms)",
                "usable (% of period)",
            ),
            6 => (
                "Fig. 6: usable fraction per worker, window 0",
                "workers",
                "usable (% of period)",
            ),
            7 => (
                "Fig. 7: central CPU, window 2, 50 % load",
                "workers",
                "central CPU (% of one CPU)",
            ),
            _ => (
                "Fig. 8: usable remote fraction, window 1",
                "period (ms)",
                "usable (% of period)",
            ),
        };
        let series: Vec<Series> = series.into_iter().collect();
        let path = dir.join(format!("fig{fig}.png"));
        line_png(&path, title, xl, yl, &series)
            .map_err(|e| Error::new(ErrorKind::Io, format!("plot {}: {e}", path.display())))?;
    }
    Ok(())
}

fn line_png(
    path: &Path,
    title: &str,
    xl: &str,
    yl: &str,
    series: &[Series],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let xmax = xs.clone().fold(0.0f64, f64::max) * 1.1 + 0.5;
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(100.0f64, f64::max)
        * 1.05;
    let root = BitMapBackend::new(path, firmtime_lab::plot::SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc(xl)
        .y_desc(yl)
        .label_style(("sans-serif", 15))
        .draw()?;
    for (k, (name, pts)) in series.iter().enumerate() {
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = Palette99::pick(k).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(mut s: Search, fail_at: f64) -> (Vec<f64>, Option<f64>) {
        let mut tried = Vec::new();
        while let Some(f) = s.next() {
            tried.push(f);
            s.record(f < fail_at - 1e-9);
            assert!(tried.len() < 100, "ramp does not end");
        }
        (tried, s.usable())
    }

    #[test]
    fn ramp_goes_coarse_then_fine() {
        let s = Search::new(0.5, 0.1, 0.02, 1.0).unwrap();
        let (tried, usable) = drive(s, 0.75);
        assert_eq!(tried, vec![0.5, 0.6, 0.7, 0.8, 0.72, 0.74, 0.76]);
        assert_eq!(usable, Some(0.74));
    }

    #[test]
    fn ramp_that_never_fails_stops_at_max() {
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.02, 1.0).unwrap(), 9.0);
        assert_eq!(tried, vec![0.5, 0.6, 0.7, 0.8, 0.9, 1.0]);
        assert_eq!(usable, Some(1.0));
    }

    #[test]
    fn ramp_failing_at_once_searches_below() {
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.05, 1.0).unwrap(), 0.47);
        assert_eq!(tried, vec![0.5, 0.4, 0.45]);
        assert_eq!(usable, Some(0.45));
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.02, 1.0).unwrap(), 0.25);
        assert_eq!(tried, vec![0.5, 0.4, 0.3, 0.2, 0.22, 0.24, 0.26]);
        assert_eq!(usable, Some(0.24));
        let (tried, usable) = drive(Search::new(0.1, 0.1, 0.05, 1.0).unwrap(), 0.01);
        assert_eq!(tried, vec![0.1, 0.05]);
        assert_eq!(usable, None);
    }

    #[test]
    fn ramp_rejects_bad_steps() {
        assert_eq!(
            Search::new(0.5, 0.01, 0.1, 1.0).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn sporadic_xruns_are_discounted() {
        // No idle xruns: one xrun is tolerated, two are the load's.
        assert_eq!(allowed_xruns(1.0, 0.0), 1);
        assert!(passes(1, 0, 1000, 1.0, 0.0));
        assert!(!passes(2, 0, 1000, 1.0, 0.0));
        // 4 idle xruns per second over 1 s: λ = 4, 4 + 3·2 = 10 allowed.
        assert_eq!(allowed_xruns(1.0, 4.0), 10);
        assert!(passes(10, 0, 1000, 1.0, 4.0));
        assert!(!passes(11, 0, 1000, 1.0, 4.0));
        // Overload: an xrun almost every period.
        assert!(!passes(400, 0, 450, 1.0, 4.0));
    }

    #[test]
    fn late_results_fail_a_step() {
        assert!(passes(0, 1, 1000, 1.0, 0.0));
        assert!(!passes(0, 2, 1000, 1.0, 0.0));
    }

    #[test]
    fn plan_covers_figures_5_to_8() {
        for quick in [true, false] {
            let p = plan(quick);
            for f in 5..=8 {
                assert!(p.iter().any(|s| s.figure == f), "figure {f} quick={quick}");
            }
            assert!(p
                .iter()
                .filter(|s| s.figure == 7)
                .all(|s| s.fixed.is_some()
                    && matches!(s.placement, Placement::Remote { window: 2, .. })));
            assert!(p
                .iter()
                .filter(|s| s.figure == 6)
                .all(|s| matches!(s.placement, Placement::Remote { window: 0, .. })));
        }
        assert_eq!(
            plan(false)
                .iter()
                .map(|s| match s.placement {
                    Placement::Remote { workers, .. } => workers,
                    _ => 0,
                })
                .max(),
            Some(7)
        );
    }

    #[test]
    fn rack_for_a_remote_point_has_one_stage_per_worker() {
        let spec = PointSpec {
            figure: 8,
            rate: 96_000,
            period_frames: 210,
            placement: Placement::Remote {
                workers: 2,
                window: 1,
            },
            fixed: None,
        };
        let w: Vec<SocketAddr> = vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        let f = rack_for(&spec, &w, 0.3).unwrap();
        assert_eq!(f.stages.len(), 2);
        assert_eq!(f.stages[1].remote.as_ref().unwrap().worker, "127.0.0.1:2");
        assert_eq!(f.stages[1].remote.as_ref().unwrap().window, 1);
        assert!(rack_for(&spec, &w[..1], 0.3).is_err());
    }

    #[test]
    fn json_keys_are_stable() {
        let r = ExperimentReport {
            version: "0".into(),
            command: "c".into(),
            kernel: "k".into(),
            preempt: "p".into(),
            clocksource: "tsc".into(),
            cpu: "cpu".into(),
            conditions: "x".into(),
            quick: true,
            timing: Timing::quick(),
            started_unix_s: 1,
            ended_unix_s: 2,
            points: vec![PointResult {
                spec: plan(true)[0].clone(),
                period_ms: 1.45,
                baseline_xruns: 0,
                baseline_overruns: 0,
                baseline_s: 1.0,
                usable_fraction: Some(0.9),
                steps: vec![StepResult {
                    fraction: 0.9,
                    seconds: 1.0,
                    periods: 689,
                    xruns: 0,
                    overruns: 0,
                    allowed_overruns: 1,
                    late: 0,
                    allowed_xruns: 1,
                    passed: true,
                    central_user: 0.9,
                    central_sys: 0.01,
                    dsp_load: 90.0,
                }],
            }],
        };
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "version",
            "command",
            "kernel",
            "preempt",
            "clocksource",
            "cpu",
            "conditions",
            "quick",
            "timing",
            "started_unix_s",
            "ended_unix_s",
            "points",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        let p = &v["points"][0];
        for k in [
            "spec",
            "period_ms",
            "baseline_xruns",
            "baseline_overruns",
            "baseline_s",
            "usable_fraction",
            "steps",
        ] {
            assert!(p.get(k).is_some(), "missing point.{k}");
        }
        assert_eq!(p["spec"]["placement"]["kind"], "local");
        for k in [
            "fraction",
            "seconds",
            "periods",
            "xruns",
            "overruns",
            "allowed_overruns",
            "late",
            "allowed_xruns",
            "passed",
            "central_user",
            "central_sys",
            "dsp_load",
        ] {
            assert!(p["steps"][0].get(k).is_some(), "missing step.{k}");
        }
    }
}
