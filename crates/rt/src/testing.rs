//! The skip policy of firmtime's own tests, shared by every crate's test
//! suite (not used by the binary).
//!
//! A test that meets a missing tool, privilege or CPU calls [`skip`]; one
//! that needs a device this kind of machine cannot have (an RTC, a sound
//! card, a MIDI interface) calls [`skip_device`]. Both print `SKIP test:
//! reason` and append that line to the file named by `FIRMTIME_SKIP_LOG`
//! (`test.sh` lists them once at the end of the run, where `cargo test`'s
//! captured output would hide them). Under `FIRMTIME_NO_SKIP=1` (`.ci/run`
//! sets it) [`skip`] fails the test instead: in CI green means tested; only
//! the device skips remain, listed by name.

use std::io::Write as _;

/// Set (to anything but `0` or empty) to make [`skip`] fail the test.
pub const NO_SKIP_ENV: &str = "FIRMTIME_NO_SKIP";

/// A file each skip is appended to, one line each.
pub const SKIP_LOG_ENV: &str = "FIRMTIME_SKIP_LOG";

/// Whether skips fail (`FIRMTIME_NO_SKIP`).
pub fn no_skip() -> bool {
    std::env::var(NO_SKIP_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string()
}

fn log(line: &str) {
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty()) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The calling test cannot run here for want of a tool, a privilege or a
/// CPU (`reason` says which and how to get it): prints and logs `SKIP`, and
/// the caller returns. Under `FIRMTIME_NO_SKIP` it panics instead.
///
/// # Panics
/// Under `FIRMTIME_NO_SKIP`, always.
#[track_caller]
pub fn skip(reason: impl std::fmt::Display) {
    let line = format!("SKIP {}: {reason}", test_name());
    if no_skip() {
        panic!("{line} ({NO_SKIP_ENV} is set: every test must run here)");
    }
    log(&line);
}

/// The calling test needs `device` (`/dev/rtc`, an ALSA sound card, …),
/// which this kind of machine does not have: prints and logs `SKIP`, also
/// under `FIRMTIME_NO_SKIP`; the caller returns.
pub fn skip_device(device: &str, reason: impl std::fmt::Display) {
    log(&format!(
        "SKIP {} (no {device} on this machine): {reason}",
        test_name()
    ));
}
