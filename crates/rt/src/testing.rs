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

// This module's own tests exercise waivers: they must not land in the
// run's WAIVED list.
/// Every stored input of fuzz target `target` under `fuzz_dir` (a crate's
/// `fuzz/`): the committed seeds (`seeds/TARGET/`), then a local fuzz run's
/// corpus (`corpus/TARGET/`) if there is one; each sorted by name, with its
/// path.
///
/// # Panics
/// When a listed file cannot be read.
pub fn fuzz_inputs(fuzz_dir: &std::path::Path, target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in [
        fuzz_dir.join("seeds").join(target),
        fuzz_dir.join("corpus").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<std::path::PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for p in paths {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            out.push((p, data));
        }
    }
    out
}

/// Runs fuzz target `target`'s `check` on the stored input `data` (from
/// `path`), and returns its result.
///
/// # Panics
/// When `check` panics: names the input and how to reproduce it.
pub fn fuzz_replay<T>(
    target: &str,
    path: &std::path::Path,
    data: &[u8],
    check: impl Fn(&[u8]) -> T,
) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(data))).unwrap_or_else(|_| {
        panic!(
            "the {target} fuzz target's checks failed on {} (reproduce: cargo +nightly fuzz run {target} {})",
            path.display(),
            path.display()
        )
    })
}

#[cfg(test)]
thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn log(line: &str) {
    #[cfg(test)]
    if QUIET.with(std::cell::Cell::get) {
        return;
    }
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

/// Sets its flag when dropped: a test's load thread (a hog, a flood) stops
/// also when the test panics. Threads of a `std::thread::scope` are joined
/// before the scope returns or unwinds, so a load thread that waits for a
/// flag set only after the test's body would turn a failure into a hang;
/// hold one of these in the scope instead.
#[derive(Debug)]
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
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

/// The z of [`assert_rate_at_least`]: one-sided 99.9 % (nominal). Counts
/// are whole numbers, so the real chance that a product whose true rate
/// is exactly the claimed one fails is up to 0.7 % for 5 samples at a claim
/// of 80 %, 0.1–0.3 % from 20 samples on (claims of 90 % and more need
/// tens of samples: 2 % at 5 of 95 %); a product above its claim (the
/// usual case: a claim is set below what the product does) fails far less
/// often.
pub const RATE_Z: f64 = 3.090;

/// The Wilson score interval of `successes` in `n` trials at `z` (1.96:
/// two-sided 95 %), as `(lower, upper)`; `(0, 1)` when `n` is 0 (nothing
/// is known). Unlike `p̂ ± z·√(p̂(1−p̂)/n)` it stays inside `[0, 1]` and is
/// not zero-width at 0 or n successes, which is what small samples need.
///
/// # Panics
/// When `successes > n`.
pub fn wilson(successes: u64, n: u64, z: f64) -> (f64, f64) {
    assert!(successes <= n, "{successes} successes in {n} trials");
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, nf) = (successes as f64, n as f64);
    let p = k / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let center = (p + z2 / (2.0 * nf)) / denom;
    let half = z / denom * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt();
    // The ends at 0 and n successes are exactly 0 and 1 (not rounding's
    // 1e-17 or 0.999…).
    let lower = if successes == 0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let upper = if successes == n {
        1.0
    } else {
        (center + half).min(1.0)
    };
    (lower, upper)
}

/// The lower end of [`wilson`]: the smallest rate the sample supports.
pub fn wilson_lower(successes: u64, n: u64, z: f64) -> f64 {
    wilson(successes, n, z).0
}

/// The upper end of [`wilson`]: the largest rate the sample supports.
pub fn wilson_upper(successes: u64, n: u64, z: f64) -> f64 {
    wilson(successes, n, z).1
}

/// Asserts a claim "at least `p` of the trials succeed" from `successes`
/// of `n`: fails when the sample rules a rate of `p` out, i.e. when the
/// Wilson upper bound at [`RATE_Z`] (one-sided 99.9 %) is below `p` (the
/// score test of H0: rate ≥ p). A plain `successes ≥ p·n` on a handful of
/// samples flips by chance: a product at 90 % shows 3 of 5 (below 80 %)
/// in 8 % of runs. This one rarely fails a product at or above `p` (see
/// [`RATE_Z`]) and still fails a broken one: for `p` = 0.8, 0 or 1 of 5
/// fail, and 4 of 10, 12 of 25 or 47 of 80 fail. How much it can tell
/// depends on `n`: callers assert a minimum `n` of their own.
///
/// # Panics
/// When the sample rules `p` out, when `n` is 0 (nothing to judge), or
/// when `successes > n`.
#[track_caller]
pub fn assert_rate_at_least(successes: u64, n: u64, p: f64, what: impl std::fmt::Display) {
    assert!(n > 0, "{what}: no trials to judge a rate of {p} from");
    let upper = wilson_upper(successes, n, RATE_Z);
    assert!(
        upper >= p,
        "{what}: {successes} of {n} rules out a rate of {p} (Wilson upper bound {upper:.3} at \
         one-sided 99.9 %)"
    );
}

/// A fresh, empty directory for one test, `firmtime-test-NAME-PID` in the
/// temp directory; removed on drop, also when the test fails. Derefs to its
/// [`Path`](std::path::Path).
#[derive(Debug)]
pub struct ScratchDir(pub std::path::PathBuf);

impl ScratchDir {
    /// Creates the directory afresh (anything left there by an earlier run
    /// of the same process id is removed first).
    ///
    /// # Panics
    /// When the directory cannot be created.
    pub fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("firmtime-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        Self(p)
    }

    /// The paths in the directory.
    ///
    /// # Panics
    /// When the directory cannot be read.
    pub fn entries(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for ScratchDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a device node (mode 0600) at `p`: `kind` is `libc::S_IFCHR` or
/// `libc::S_IFBLK`, `major:minor` the device (root only).
///
/// # Errors
/// `mknod`'s.
pub fn mknod(
    p: &std::path::Path,
    kind: libc::mode_t,
    major: u32,
    minor: u32,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let r = unsafe { libc::mknod(c.as_ptr(), kind | 0o600, libc::makedev(major, minor)) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes a FIFO (mode 0600) at `p`.
///
/// # Panics
/// When `mkfifo` fails (naming the path and the error).
pub fn mkfifo(p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(
        r,
        0,
        "mkfifo {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn stop_on_drop_stops_a_scoped_load_thread_when_the_body_panics() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = AtomicBool::new(false);
        let spins = AtomicU64::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        spins.fetch_add(1, Ordering::Relaxed);
                        std::thread::yield_now();
                    }
                });
                let _stop = StopOnDrop(&stop);
                panic!("the test body failed");
            })
        }));
        assert!(r.is_err(), "the body's panic comes through");
        assert!(stop.load(Ordering::Relaxed), "the flag was set");
    }

    use super::*;

    #[test]
    fn a_scratch_dir_is_fresh_and_goes_on_drop() {
        let d = ScratchDir::new("rt-testing-scratch");
        assert!(d.entries().is_empty());
        mkfifo(&d.join("f"));
        assert_eq!(d.entries(), vec![d.join("f")]);
        let p = d.0.clone();
        drop(d);
        assert!(!p.exists());
    }

    #[test]
    fn a_test_waived_in_every_repetition_fails() {
        QUIET.with(|q| q.set(true));
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
        QUIET.with(|q| q.set(true));
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

    /// Reference values of the Wilson score interval (computed
    /// independently: Newcombe 1998, Table I, and R's
    /// `prop.test(k, n, correct = FALSE)$conf.int`).
    #[test]
    fn wilson_matches_published_values() {
        let close = |a: f64, b: f64| (a - b).abs() < 5e-4;
        // Newcombe 1998: 81/263 → 0.2553–0.3662; 15/148 → 0.0624–0.1605;
        // 0/20 → 0–0.1611; 1/29 → 0.0061–0.1718.
        for (k, n, lo, hi) in [
            (81, 263, 0.2553, 0.3662),
            (15, 148, 0.0624, 0.1605),
            (0, 20, 0.0, 0.1611),
            (1, 29, 0.0061, 0.1718),
        ] {
            let (l, h) = wilson(k, n, 1.959_964);
            assert!(close(l, lo) && close(h, hi), "{k}/{n}: {l} {h}");
        }
        // 5 of 5 at 95 %: 0.5655–1, symmetric with 0 of 5.
        let (l, h) = wilson(5, 5, 1.959_964);
        assert!(close(l, 0.5655) && h == 1.0, "{l} {h}");
        let (l, h) = wilson(0, 5, 1.959_964);
        assert!(l == 0.0 && close(h, 0.4345), "{l} {h}");
        assert_eq!(wilson(0, 0, 1.96), (0.0, 1.0));
        assert!(close(wilson_lower(81, 263, 1.959_964), 0.2553));
        assert!(close(wilson_upper(81, 263, 1.959_964), 0.3662));
    }

    #[test]
    fn the_interval_holds_the_estimate_and_narrows_with_n() {
        for n in 1..60u64 {
            for k in 0..=n {
                let (l, h) = wilson(k, n, RATE_Z);
                let p = k as f64 / n as f64;
                assert!(0.0 <= l && l <= p && p <= h && h <= 1.0, "{k}/{n}: {l} {h}");
                // Ten times the trials at the same rate: a narrower interval.
                let (l10, h10) = wilson(k * 10, n * 10, RATE_Z);
                assert!(h10 - l10 < h - l, "{k}/{n}");
            }
        }
    }

    fn passes(k: u64, n: u64, p: f64) -> bool {
        std::panic::catch_unwind(|| assert_rate_at_least(k, n, p, "t")).is_ok()
    }

    #[test]
    fn a_rate_claim_fails_a_broken_product_and_not_a_working_one_by_chance() {
        // A claim of 80 %: 0 or 1 of 5 fail, 2 of 5 is too few to tell.
        assert!(!passes(0, 5, 0.8) && !passes(1, 5, 0.8));
        assert!(passes(2, 5, 0.8) && passes(4, 5, 0.8) && passes(5, 5, 0.8));
        // More samples, finer judgement: half of 10, 25 and 100.
        assert!(passes(5, 10, 0.8) && !passes(4, 10, 0.8));
        assert!(!passes(12, 25, 0.8) && !passes(47, 80, 0.8));
        assert!(!passes(50, 100, 0.8) && !passes(66, 100, 0.8) && passes(70, 100, 0.8));
        // A product at exactly the claimed rate: how often it fails (exact
        // binomial sums), what RATE_Z's doc promises.
        for n in [5u64, 10, 20, 50, 256] {
            for p in [0.5, 0.6, 0.8, 0.95] {
                if p > 0.8 && n < 20 {
                    continue;
                }
                let mut fail = 0.0;
                let mut c = 1.0f64; // C(n, k)
                for k in 0..=n {
                    if k > 0 {
                        c *= (n - k + 1) as f64 / k as f64;
                    }
                    if !passes(k, n, p) {
                        fail += c * p.powi(k as i32) * (1.0 - p).powi((n - k) as i32);
                    }
                }
                let promised = if n < 20 { 0.007 } else { 0.0035 };
                assert!(fail < promised, "n {n}, p {p}: fails {fail}");
            }
        }
        // Nothing to judge, or an impossible count: a failure, not a pass.
        assert!(!passes(0, 0, 0.5));
        assert!(!passes(6, 5, 0.5));
    }
}
