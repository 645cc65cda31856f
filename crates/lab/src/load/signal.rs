//! The process-wide stop flag. The `firmtime` binary's one signal owner
//! sets it on SIGINT, SIGTERM or SIGHUP; measurements and the load
//! generator poll it and end cleanly (write what was done, remove temporary
//! files, reap children). This library installs no handler itself.

use std::sync::atomic::AtomicBool;

static STOP: AtomicBool = AtomicBool::new(false);

/// The process-wide stop flag, set by the binary's handler of SIGINT,
/// SIGTERM and SIGHUP (an atomic store: async-signal-safe). Pass it to
/// [`super::run_generator`] and poll it in measurement loops.
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}
