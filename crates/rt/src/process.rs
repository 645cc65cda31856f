//! Child processes that never outlive firmtime: a death signal, an own
//! process group, and a bounded stop.
//!
//! firmtime starts helper processes (load generators, a private `jackd`,
//! network workers, measurement partners). Each must die with firmtime,
//! even when firmtime is killed with SIGKILL and runs no destructor:
//!
//! - [`die_with_parent`] sets `PR_SET_PDEATHSIG` in the child (between fork
//!   and exec) and makes the spawn fail if the parent is already gone;
//!   [`set_death_signal`] does the same from a child made with a bare `fork`.
//! - [`own_group`] makes the child lead its own process group, so a
//!   terminal's Ctrl-C reaches only firmtime (which then stops the child in
//!   order) and [`signal`] with [`Target::Group`] reaches the child and
//!   everything it started.
//! - [`stop`] and [`stop_all`] send SIGTERM, wait up to a grace period,
//!   SIGKILL what is left, and reap every child.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that spawned the child exits,
//! not the process: spawn from a thread that outlives the child (normally the
//! main thread), or the child is killed when that thread ends.
//!
//! Not for the real-time path (these fork, wait and sleep), except
//! [`set_death_signal`], which is async-signal-safe.
//!
//! ```
//! use firmtime_rt::process::{self, Target};
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let mut cmd = Command::new("sleep");
//! cmd.arg("30");
//! process::die_with_parent(&mut cmd, libc::SIGTERM);
//! process::own_group(&mut cmd);
//! let mut child = cmd.spawn()?;
//! let killed = process::stop(&mut child, Target::Group, Duration::from_secs(1));
//! assert!(!killed, "sleep ends on SIGTERM");
//! assert_eq!(child.try_wait()?.map(|s| s.success()), Some(false));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How often [`stop_all`] checks whether the children have exited.
const POLL: Duration = Duration::from_millis(5);

/// Makes the calling process receive `signal` when the thread that created
/// it exits (`prctl(PR_SET_PDEATHSIG)`).
///
/// Async-signal-safe and allocation-free: callable in a child between
/// `fork` and `exec`, or in a child that never execs.
///
/// # Errors
/// The `prctl` error (`EINVAL` for an invalid signal number).
pub fn set_death_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Configures `cmd` so that the child receives `signal` when the thread
/// spawning it exits (including when firmtime is killed with SIGKILL).
///
/// If the parent has already died before the death signal was set, nobody
/// would kill the child: then the spawn fails with `ESRCH`.
pub fn die_with_parent(cmd: &mut Command, signal: libc::c_int) -> &mut Command {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let pre_exec = move || {
        // Only async-signal-safe calls between fork and exec.
        set_death_signal(signal)?;
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the closure calls only async-signal-safe functions (prctl,
    // getppid) and allocates nothing.
    unsafe { cmd.pre_exec(pre_exec) }
}

/// Configures `cmd` so that the child leads its own process group (whose id
/// is the child's pid), for [`signal`] with [`Target::Group`].
pub fn own_group(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0)
}

/// Whom [`signal`], [`stop`] and [`stop_all`] reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The child process alone.
    Process,
    /// The child's process group: the child and what it started. The child
    /// must lead its group ([`own_group`]).
    Group,
}

/// Sends `sig` to a child that is still running (checked with `try_wait`, so
/// a child that has exited is reaped instead of signalled, and its pid can
/// never have been reused). Returns whether the signal was sent.
pub fn signal(child: &mut Child, target: Target, sig: libc::c_int) -> bool {
    if !matches!(child.try_wait(), Ok(None)) {
        return false;
    }
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return false;
    };
    let pid = match target {
        Target::Process => pid,
        Target::Group => -pid,
    };
    // SAFETY: kill has no memory-safety preconditions; `pid` is our own
    // unreaped child (or its group).
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Stops one child: SIGTERM, up to `grace` to exit, then SIGKILL; reaps it.
/// Returns whether it had to be killed.
pub fn stop(child: &mut Child, target: Target, grace: Duration) -> bool {
    stop_all(std::slice::from_mut(child), target, grace)[0]
}

/// Stops children together: SIGTERM to each that still runs, up to `grace`
/// (shared) for all to exit, then SIGKILL to the rest; reaps every one.
/// Returns, per child, whether it had to be killed.
pub fn stop_all(children: &mut [Child], target: Target, grace: Duration) -> Vec<bool> {
    for c in children.iter_mut() {
        signal(c, target, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while children
        .iter_mut()
        .any(|c| matches!(c.try_wait(), Ok(None)))
        && Instant::now() < deadline
    {
        std::thread::sleep(POLL);
    }
    children
        .iter_mut()
        .map(|c| {
            let killed = signal(c, target, libc::SIGKILL);
            // Reaps; it only fails if the child was already reaped.
            let _ = c.wait();
            killed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn stop_kills_a_child_that_ignores_sigterm() {
        use std::io::BufRead;
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.01; done",
        ])
        .stdout(std::process::Stdio::piped());
        die_with_parent(&mut cmd, libc::SIGKILL);
        own_group(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        // Once the line is out, the trap is set.
        let mut line = String::new();
        let mut out = io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        assert!(stop(&mut child, Target::Group, Duration::from_millis(100)));
        let st = child.try_wait().unwrap().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn stop_all_reaps_exited_children_without_signalling_them() {
        let mut children: Vec<Child> = (0..2)
            .map(|_| Command::new("true").spawn().unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let killed = stop_all(&mut children, Target::Process, Duration::from_secs(1));
        assert_eq!(killed, [false, false]);
        for c in &mut children {
            assert!(c.try_wait().unwrap().unwrap().success());
            assert!(!signal(c, Target::Process, libc::SIGKILL));
        }
    }

    #[test]
    fn the_child_dies_with_the_thread_that_spawned_it() {
        let spawner = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd, libc::SIGKILL);
            cmd.spawn().unwrap()
        });
        let mut child = spawner.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "the death signal never came");
            std::thread::sleep(POLL);
        };
        assert_eq!(st.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn invalid_death_signal_is_an_error() {
        let e = set_death_signal(1000).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
