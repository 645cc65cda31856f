//! [`LoadSet`]: the parent side of load child processes.

use super::spec::check_duration;
use super::{format_duration, LoadReport, LoadSpec};
use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::process::{self, Target};
use serde::Serialize;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long [`LoadSet::stop`] waits after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// How long [`LoadSet::spawn`] waits for a child to install its signal handlers.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How one load child ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildOutcome {
    /// The load it ran.
    pub spec: LoadSpec,
    /// Its process id (no longer valid: the child is reaped).
    pub pid: u32,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// True if it ignored SIGTERM for the grace period and was SIGKILLed.
    pub killed: bool,
    /// True if it ended (by itself) before [`LoadSet::stop`] was called and
    /// before its duration was over.
    pub early: bool,
    /// The report it wrote on stdout, if it exited cleanly.
    pub report: Option<LoadReport>,
}

impl ChildOutcome {
    /// True if the child exited with status 0 and reported its work.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.report.is_some()
    }
}

#[derive(Debug)]
struct LoadChild {
    spec: LoadSpec,
    child: Child,
    status: Option<ExitStatus>,
    early: bool,
}

impl LoadChild {
    /// Looks, without blocking, whether the child has ended, and records its
    /// status the first time: true if that is now.
    fn ended_now(&mut self) -> bool {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
                return true;
            }
        }
        false
    }
}

/// Load child processes (`firmtime load …`), always bounded in time and
/// always reaped.
///
/// Each child runs one [`LoadSpec`] for the set's duration, in its own
/// process group (so a terminal's Ctrl-C reaches only the parent, which then
/// stops the children in order), at SCHED_OTHER nice 0 whatever the parent's
/// policy, and with `PR_SET_PDEATHSIG(SIGKILL)`, so it dies if the parent is
/// killed with -9. Children inherit the parent's CPU affinity and stderr
/// (where their error messages go); their stdout carries their JSON report.
///
/// [`LoadSet::stop`] (and `Drop`) sends SIGTERM to every child's group,
/// waits up to a grace period, SIGKILLs what is left, and reaps every child.
///
/// PR_SET_PDEATHSIG fires when the *thread* that spawned the children exits:
/// spawn from a thread that outlives the set (normally the main thread).
#[derive(Debug)]
pub struct LoadSet {
    children: Vec<LoadChild>,
    duration: Duration,
    started: Instant,
    outcomes: Option<Vec<ChildOutcome>>,
}

impl LoadSet {
    /// Starts `exe load <spec…> --duration D --json -` for each spec, and
    /// returns once every child has installed its stop handlers (so a stop
    /// right after this returns is always a clean one).
    ///
    /// `exe` is the firmtime binary: `std::env::current_exe()` in the real
    /// program.
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidInput`] if a spec or the duration is out of range.
    /// - [`ErrorKind::Load`] if a child cannot be started, exits before it is
    ///   ready, or is not ready within 10 s; the message names the child.
    ///   Children already started are stopped and reaped first.
    pub fn spawn(exe: &Path, specs: &[LoadSpec], duration: Duration) -> Result<LoadSet> {
        check_duration(duration)?;
        for s in specs {
            s.validate()?;
        }
        let mut set = LoadSet {
            children: Vec::with_capacity(specs.len()),
            duration,
            started: Instant::now(),
            outcomes: None,
        };
        // On an error below, dropping `set` stops and reaps what was started.
        for spec in specs {
            let child = spawn_one(exe, spec, duration)?;
            set.children.push(LoadChild {
                spec: spec.clone(),
                child,
                status: None,
                early: false,
            });
            let c = set.children.last_mut().expect("just pushed");
            wait_ready(exe, c)?;
        }
        set.started = Instant::now();
        Ok(set)
    }

    /// The children's process ids, in the order of the specs.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.child.id()).collect()
    }

    /// The number of children.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// True if the set has no children.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Looks (without blocking) whether every child is still running. Call it
    /// before and after a measurement: a load that died means the measurement
    /// ran without it.
    ///
    /// # Errors
    /// [`ErrorKind::Load`] naming the first child that has exited before its
    /// duration was over, and how it ended.
    pub fn check(&mut self) -> Result<()> {
        let end = self.started + self.duration;
        for c in &mut self.children {
            if c.ended_now() {
                c.early = Instant::now() < end;
            }
            if let (Some(st), true) = (c.status, c.early) {
                return Err(Error::new(
                    ErrorKind::Load,
                    format!(
                        "load child '{}' (pid {}) ended early: {}; its error message, if any, is on stderr above",
                        c.spec,
                        c.child.id(),
                        describe(st)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Stops every child (SIGTERM to its process group, SIGKILL after a 2 s
    /// grace), reaps it, and returns how each ended, in the order of the
    /// specs. Calling it again returns the same outcomes.
    pub fn stop(&mut self) -> Vec<ChildOutcome> {
        self.stop_with_grace(GRACE)
    }

    /// [`LoadSet::stop`] with a chosen grace period between SIGTERM and SIGKILL.
    pub fn stop_with_grace(&mut self, grace: Duration) -> Vec<ChildOutcome> {
        if let Some(o) = &self.outcomes {
            return o.clone();
        }
        let end = self.started + self.duration;
        for c in &mut self.children {
            if c.ended_now() {
                c.early = Instant::now() < end;
            }
            if c.status.is_none() {
                process::signal(&mut c.child, Target::Group, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        let mut killed = vec![false; self.children.len()];
        loop {
            let mut running = false;
            for c in &mut self.children {
                c.ended_now();
                running |= c.status.is_none();
            }
            if !running || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for (c, k) in self.children.iter_mut().zip(killed.iter_mut()) {
            if c.status.is_none() {
                *k = process::signal(&mut c.child, Target::Group, libc::SIGKILL);
                // wait() reaps; it only fails if the child was already reaped.
                c.status = c.child.wait().ok();
            }
        }
        let outcomes: Vec<ChildOutcome> = self
            .children
            .iter_mut()
            .zip(killed)
            .map(|(c, killed)| {
                let mut out = String::new();
                if let Some(mut stdout) = c.child.stdout.take() {
                    let _ = stdout.read_to_string(&mut out);
                }
                let st = c.status;
                let exit_code = st.and_then(|s| s.code());
                ChildOutcome {
                    spec: c.spec.clone(),
                    pid: c.child.id(),
                    exit_code,
                    signal: st.and_then(|s| s.signal()),
                    killed,
                    early: c.early,
                    report: if exit_code == Some(0) {
                        serde_json::from_str(&out).ok()
                    } else {
                        None
                    },
                }
            })
            .collect();
        self.outcomes = Some(outcomes.clone());
        outcomes
    }

    /// Waits for the children to end by themselves at the end of their
    /// duration (plus the grace period), then stops any left, reaps all and
    /// returns how each ended.
    pub fn wait(&mut self) -> Vec<ChildOutcome> {
        let until = self.started + self.duration + GRACE;
        while Instant::now() < until {
            let all_done = self.children.iter_mut().all(|c| {
                c.ended_now();
                c.status.is_some()
            });
            if all_done {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop()
    }
}

impl Drop for LoadSet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// "exited with status 1", "killed by signal 9".
fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended".to_string(),
    }
}

/// A command for a child process that reports on stdout: stdin from
/// /dev/null, stdout piped, stderr inherited, in its own process group, and
/// killed (`PR_SET_PDEATHSIG`) when the thread that spawns it exits.
pub(crate) fn child_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    process::own_group(&mut cmd);
    process::die_with_parent(&mut cmd, libc::SIGKILL);
    cmd
}

fn spawn_one(exe: &Path, spec: &LoadSpec, duration: Duration) -> Result<Child> {
    let mut cmd = child_command(exe);
    cmd.arg("load")
        .args(spec.to_cli_args())
        .arg("--duration")
        .arg(format_duration(duration))
        .arg("--json")
        .arg("-");
    // Runs after child_command's pre_exec (pre_exec closures run in order).
    let pre_exec = || {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param; pid 0 is this (single-threaded) child.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        // Lowering a positive nice needs CAP_SYS_NICE; without it, stay as we are.
        // SAFETY: setpriority has no memory-safety preconditions.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 0) };
        Ok(())
    };
    // SAFETY: the closure calls only async-signal-safe functions
    // (sched_setscheduler, setpriority) and allocates nothing.
    unsafe { cmd.pre_exec(pre_exec) };
    cmd.spawn().map_err(|e| {
        Error::new(
            ErrorKind::Load,
            format!(
                "cannot start load child '{spec}' ({} load {}): {e}",
                exe.display(),
                spec.to_cli_args().join(" ")
            ),
        )
    })
}

/// True once /proc/<pid>/status shows handlers for both SIGINT and SIGTERM.
fn handlers_installed(pid: u32) -> bool {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("SigCgt:")) else {
        return false;
    };
    let Ok(mask) = u64::from_str_radix(line["SigCgt:".len()..].trim(), 16) else {
        return false;
    };
    let bit = |s: libc::c_int| 1u64 << (s - 1);
    mask & bit(libc::SIGINT) != 0 && mask & bit(libc::SIGTERM) != 0
}

/// Waits until the child (already exec'd: `spawn` returns after exec)
/// catches SIGINT and SIGTERM, or fails if it exits or takes too long.
fn wait_ready(exe: &Path, c: &mut LoadChild) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(st)) = c.child.try_wait() {
            c.status = Some(st);
            c.early = true;
            return Err(Error::new(
                ErrorKind::Load,
                format!(
                    "load child '{}' ({} load {}) {} before it started; its error message, if any, is on stderr above",
                    c.spec,
                    exe.display(),
                    c.spec.to_cli_args().join(" "),
                    describe(st)
                ),
            ));
        }
        if handlers_installed(c.child.id()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Load,
                format!(
                    "load child '{}' (pid {}, {}) did not start its load within {}: is {} the firmtime binary?",
                    c.spec,
                    c.child.id(),
                    exe.display(),
                    format_duration(READY_TIMEOUT),
                    exe.display()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
