//! The binary's one owner of the stop signals: SIGINT (Ctrl-C), SIGTERM
//! (systemd, `timeout`, `kill`) and SIGHUP (a closing terminal) all do what
//! Ctrl-C does. Each command that can stop cleanly calls [`catch`] once; from
//! then on any of the three sets one process-wide stop flag
//! ([`firmtime_lab::load::stop_flag`], which the lab's measurements, the
//! load generator, the net worker, the rack and `firmtime midi`/`tap` poll)
//! and records which signal came first ([`received`]), so that what stops
//! can say why. The data gathered so far is kept: each command writes it,
//! flagged partial or incomplete.
//!
//! Commands that do not call [`catch`] keep the default action of these
//! signals (the process ends).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The first stop signal received (0: none).
static FIRST: AtomicI32 = AtomicI32::new(0);

/// The signals handled, each as Ctrl-C is.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// What a second signal of the same kind does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Ends the process at once (`SA_RESETHAND`): for long measurements and
    /// servers, where a stuck stop must still be breakable.
    Ends,
    /// Is caught again (the flag is already set): for `tap` and `midi`
    /// runs, whose data a second Ctrl-C while they are written must not lose.
    Caught,
}

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe.
    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    firmtime_lab::load::stop_flag().store(true, Ordering::SeqCst);
}

/// From now on SIGINT, SIGTERM and SIGHUP set [`flag`] instead of ending
/// the process, and returns the flag. No `SA_RESTART`: a blocking system
/// call in the receiving thread returns `EINTR`, so its caller looks at the
/// flag.
///
/// # Errors
/// When `sigaction` fails (it does not for these signals).
pub fn catch(repeat: Repeat) -> anyhow::Result<&'static AtomicBool> {
    for sig in STOP_SIGNALS {
        // SAFETY: an all-zero sigaction is a valid value that is filled in below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = match repeat {
            Repeat::Ends => libc::SA_RESETHAND,
            Repeat::Caught => 0,
        };
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: `sa` is fully initialised and the handler only does atomic stores.
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } != 0 {
            anyhow::bail!(
                "cannot install the handler for {}: {}",
                name(sig),
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(flag())
}

/// The process-wide stop flag (set by a stop signal after [`catch`]).
pub fn flag() -> &'static AtomicBool {
    firmtime_lab::load::stop_flag()
}

/// Whether a stop signal arrived since [`catch`].
pub fn interrupted() -> bool {
    flag().load(Ordering::Relaxed)
}

/// The first stop signal received, by name (`SIGINT`, `SIGTERM`, `SIGHUP`).
pub fn received() -> Option<&'static str> {
    match FIRST.load(Ordering::SeqCst) {
        0 => None,
        s => Some(name(s)),
    }
}

/// How a stop is told to the user: `SIGINT (Ctrl-C)`, `SIGTERM`, `SIGHUP`,
/// or `a stop request` when the flag was set another way.
pub fn describe() -> &'static str {
    match received() {
        Some("SIGINT") => "SIGINT (Ctrl-C)",
        Some(s) => s,
        None => "a stop request",
    }
}

fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stop_signal_has_its_name() {
        assert_eq!(
            STOP_SIGNALS.map(name),
            ["SIGINT", "SIGTERM", "SIGHUP"],
            "the names the messages use"
        );
    }
}
