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
//!
//! A test that ran but could not check what it checks this time (the VM's
//! steal time caused an xrun, a frame gap) calls [`waive`]: a waiver is a
//! skip of one repetition, printed and logged as `WAIVED test: reason` in the
//! same list. A test waived in every repetition fails ([`Repetitions`],
//! [`until_checked`]): green never means "waived every time".

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

/// The calling test ran but could not check its claim this time (`reason`
/// says why, e.g. "2 xruns in the loop"): prints and logs `WAIVED test:
/// reason`. Prefer [`Repetitions`] or [`until_checked`], which also fail the
/// test when every repetition was waived.
pub fn waive(reason: impl std::fmt::Display) {
    log(&format!("WAIVED {}: {reason}", test_name()));
}

/// Counts a test's repetitions that checked and those that were waived.
/// [`Repetitions::finish`] fails the test when none checked.
#[derive(Debug, Default)]
#[must_use = "call finish() to fail the test when every repetition was waived"]
pub struct Repetitions {
    checked: usize,
    waived: usize,
    last_reason: String,
}

impl Repetitions {
    /// No repetition yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// This repetition could not be checked: logs `WAIVED` ([`waive`]).
    pub fn waive(&mut self, reason: impl std::fmt::Display) {
        let reason = reason.to_string();
        waive(&reason);
        self.waived += 1;
        self.last_reason = reason;
    }

    /// This repetition was checked (its assertions ran).
    pub fn checked(&mut self) {
        self.checked += 1;
    }

    /// How many repetitions were checked.
    pub fn checked_count(&self) -> usize {
        self.checked
    }

    /// How many repetitions were waived.
    pub fn waived_count(&self) -> usize {
        self.waived
    }

    /// Ends the test's repetitions.
    ///
    /// # Panics
    /// When no repetition was checked (every one waived, or none ran).
    #[track_caller]
    pub fn finish(self) {
        assert!(
            self.checked > 0,
            "{}: waived in every repetition ({} of {}; last: {}): nothing was checked",
            test_name(),
            self.waived,
            self.waived + self.checked,
            self.last_reason
        );
    }
}

/// One attempt of [`until_checked`]: it checked (with its result) or it was
/// waived (with the reason).
#[derive(Debug)]
pub enum Attempt<T> {
    /// The attempt's assertions ran; its result.
    Checked(T),
    /// The attempt could not be checked; why.
    Waived(String),
}

/// Runs `attempt(0)`, `attempt(1)`, … up to `attempts` times until one is
/// [`Attempt::Checked`] and returns its result; each waived attempt is
/// logged as `WAIVED`.
///
/// # Panics
/// When every attempt was waived.
#[track_caller]
pub fn until_checked<T>(attempts: usize, mut attempt: impl FnMut(usize) -> Attempt<T>) -> T {
    let mut reps = Repetitions::new();
    for i in 0..attempts {
        match attempt(i) {
            Attempt::Checked(t) => {
                reps.checked();
                reps.finish();
                return t;
            }
            Attempt::Waived(reason) => reps.waive(reason),
        }
    }
    reps.finish();
    unreachable!("finish panics when no attempt was checked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_waived_in_every_repetition_fails() {
        let r = std::panic::catch_unwind(|| {
            let mut reps = Repetitions::new();
            reps.waive("xrun");
            reps.waive("xrun");
            reps.finish();
        });
        assert!(r.is_err());
        let r =
            std::panic::catch_unwind(|| until_checked(3, |_| Attempt::<()>::Waived("gap".into())));
        assert!(r.is_err());
    }

    #[test]
    fn one_checked_repetition_passes_and_returns_its_result() {
        let mut reps = Repetitions::new();
        reps.waive("xrun");
        reps.checked();
        assert_eq!((reps.checked_count(), reps.waived_count()), (1, 1));
        reps.finish();
        let got = until_checked(3, |i| {
            if i == 0 {
                Attempt::Waived("gap".into())
            } else {
                Attempt::Checked(i)
            }
        });
        assert_eq!(got, 1);
    }
}
