//! Ctrl-C as a flag: `firmtime midi` and `firmtime tap` runs poll it and end
//! cleanly (their JSON and CSV files are still written).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once SIGINT arrived after [`catch`].
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// From now on SIGINT sets [`INTERRUPTED`] instead of killing the process.
pub fn catch() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe);
    // `sa` is fully initialised before sigaction reads it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Whether SIGINT arrived since [`catch`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}
