//! Helpers shared by the integration tests.

/// True when this process may use SCHED_FIFO (root, CAP_SYS_NICE or a
/// non-zero RLIMIT_RTPRIO). Prints the skip reason when it may not.
#[allow(dead_code)]
pub fn can_rt(test: &str) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid, owned struct.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut lim) } == 0;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root || (ok && lim.rlim_cur > 0) {
        true
    } else {
        firmtime_rt::testing::skip(format!(
            "{test}: needs root or RLIMIT_RTPRIO > 0 (see docs/RT-SETUP.md)"
        ));
        false
    }
}
