//! SIGINT and SIGTERM as a stop flag: the first one asks the run to end
//! cleanly (write what was done, remove temporary files, reap children); the
//! handler then resets itself, so a second Ctrl-C ends the process at once.

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// The process-wide stop flag set by SIGINT and SIGTERM once
/// [`install_stop_signals`] has run. Pass it to [`super::run_generator`] and
/// poll it in measurement loops.
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// Installs handlers (with `sigaction`) that make SIGINT and SIGTERM set
/// [`stop_flag`], and returns the flag.
///
/// The handlers are one-shot (`SA_RESETHAND`): a second signal gets the
/// default action and ends the process. They do not use `SA_RESTART`, so a
/// blocking system call in the receiving thread returns `EINTR` and the
/// caller gets to look at the flag.
///
/// # Errors
/// [`ErrorKind::Io`] if `sigaction` fails (it does not for these signals).
pub fn install_stop_signals() -> Result<&'static AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is a valid value that is filled in below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESETHAND;
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: `sa` is fully initialized and the handler only does an atomic store.
        let rc = unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot install the handler for signal {sig}: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
    }
    Ok(&STOP)
}
