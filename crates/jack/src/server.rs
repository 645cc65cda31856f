//! A private `jackd -d dummy` server, started as a child process.
//!
//! Tests, and `--jack-dummy` when no JACK server runs, start one under a
//! private server name, so they never touch (or depend on) a user's own
//! server. The dummy driver needs no sound card: it runs the graph from a
//! timer, which is enough for MIDI between clients, where timing is in frames.
//!
//! Not for the RT path: everything here forks, waits and sleeps.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use firmtime_rt::process::{self, Target};

use crate::error::{Error, ErrorKind};

/// How to start a [`DummyServer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DummyOptions {
    /// The private server name (`jackd -n NAME`), e.g. from [`DummyOptions::unique_name`].
    pub name: String,
    /// Sample rate in Hz (`-r`).
    pub rate: u32,
    /// Frames per period (`-p`).
    pub period: u32,
    /// Run the server's process thread with SCHED_FIFO (`jackd -R`); when
    /// false, `jackd -r` (no real-time scheduling, so it works without privileges).
    pub realtime: bool,
    /// How long to wait for the server to accept clients.
    pub start_timeout: Duration,
}

impl DummyOptions {
    /// A test server's options: `rate`, `period`, a unique name, and a
    /// real-time graph when running as root (so load does not become xruns).
    pub fn for_test(rate: u32, period: u32) -> Self {
        // SAFETY: geteuid cannot fail and has no side effects.
        let root = unsafe { libc::geteuid() } == 0;
        Self {
            rate,
            period,
            realtime: root,
            ..Self::new()
        }
    }

    /// 48 kHz, 256 frames per period, no real-time scheduling, a unique name,
    /// and 10 s to start.
    pub fn new() -> Self {
        DummyOptions {
            name: Self::unique_name(),
            rate: 48_000,
            period: 256,
            realtime: false,
            start_timeout: Duration::from_secs(10),
        }
    }

    /// A server name no other server of this or another process uses:
    /// `firmtime-<pid>-<n>`.
    pub fn unique_name() -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        format!(
            "firmtime-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }
}

impl Default for DummyOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// A running `jackd -d dummy` child. Dropping it stops the server (SIGTERM,
/// then SIGKILL after 5 s) and reaps it.
#[derive(Debug)]
pub struct DummyServer {
    proc: ServerProcess,
    options: DummyOptions,
}

/// True when `prog` is an executable file on `PATH`.
pub fn program_on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(prog);
            std::fs::metadata(&p).is_ok_and(|m| m.is_file())
        })
    })
}

impl DummyServer {
    /// Starts `jackd -n NAME [-R|-r] -d dummy -r RATE -p PERIOD` and waits
    /// (at most `options.start_timeout`) until it accepts clients.
    ///
    /// # Errors
    /// [`ErrorKind::NotInstalled`] when `jackd` or `jack_wait` is not on
    /// `PATH`; [`ErrorKind::ServerFailed`] when jackd exits or does not
    /// accept clients in time (the message quotes jackd's last log lines);
    /// [`ErrorKind::InvalidInput`] for an empty name or a zero rate or period.
    pub fn start(options: DummyOptions) -> Result<Self, Error> {
        if options.name.is_empty() || options.rate == 0 || options.period == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "dummy JACK server: name must be non-empty and rate/period non-zero \
                     (got name {:?}, rate {}, period {})",
                    options.name, options.rate, options.period
                ),
            ));
        }
        for prog in ["jackd", "jack_wait"] {
            if !program_on_path(prog) {
                return Err(Error::new(
                    ErrorKind::NotInstalled,
                    format!(
                        "`{prog}` not found on PATH: install JACK 2 (Debian: apt-get install jackd2)"
                    ),
                ));
            }
        }
        let log_path = std::env::temp_dir().join(format!("{}.jackd.log", options.name));
        let mut cmd = Command::new("jackd");
        cmd.arg("-n").arg(&options.name);
        cmd.arg(if options.realtime { "-R" } else { "-r" });
        cmd.args(["-d", "dummy", "-r"])
            .arg(options.rate.to_string())
            .arg("-p")
            .arg(options.period.to_string());
        // No D-Bus device reservation: the dummy driver has no device.
        cmd.env("JACK_NO_AUDIO_RESERVATION", "1");
        // Under `pw-jack` jackd would load PipeWire's libjackserver and exit.
        without_pipewire_jack_dir(&mut cmd);
        let proc = ServerProcess::spawn(cmd, "jackd", &options.name, log_path)?;
        let mut server = DummyServer { proc, options };
        let name = server.options.name.clone();
        server.proc.wait_ready(server.options.start_timeout, || {
            // jack_wait -c connects once and reports; it never starts a server.
            let mut probe = Command::new("jack_wait");
            probe.args(["-s", &name, "-c"]);
            without_pipewire_jack_dir(&mut probe);
            probe_says(probe, Duration::from_secs(5), |out| out.trim() == "running")
        })?;
        Ok(server)
    }

    /// For test suites: a server at `rate` Hz and `period` frames under a
    /// unique name, at SCHED_FIFO (`jackd -R`) when this process runs as
    /// root (so that other load on the machine turns into fewer xruns), else
    /// without; `None` when `jackd` is not installed (the test then skips).
    ///
    /// # Panics
    /// When jackd is installed but does not start (the message quotes its log).
    pub fn start_for_test(rate: u32, period: u32) -> Option<Self> {
        if !program_on_path("jackd") {
            return None;
        }
        match Self::start(DummyOptions::for_test(rate, period)) {
            Ok(s) => Some(s),
            Err(e) => panic!("dummy jackd does not start: {e}"),
        }
    }

    /// The last `lines` lines jackd wrote to its log (stdout and stderr),
    /// for diagnostics; empty when the log cannot be read.
    pub fn log_tail(&self, lines: usize) -> String {
        self.proc.log_tail(lines)
    }

    /// The server name clients pass to connect (e.g. to [`open_client`](crate::open_client)).
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// The options the server was started with.
    pub fn options(&self) -> &DummyOptions {
        &self.options
    }

    /// The process id of jackd.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Stops the server now: SIGTERM, up to 5 s to exit, then SIGKILL; reaps
    /// it and removes its log (`$TMPDIR/NAME.jackd.log`), except when
    /// dropped while the thread panics (a failing test): the log is then
    /// kept, to say what the server did. Also done by `Drop`.
    pub fn stop(&mut self) {
        self.proc.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.proc.log_path);
        }
        self.remove_shm_leftovers();
    }

    /// Removes this server's files in /dev/shm that jackd leaves behind for
    /// clients that died without closing (`jack_sem.<uid>_<name>_<client>`).
    /// Only names of this private server are touched. The registry shared by
    /// all JACK servers and clients (`jack-shm-registry`) stays, as JACK
    /// intends: libjack in this process keeps using it, and removing it
    /// breaks every later client of the process.
    fn remove_shm_leftovers(&self) {
        // SAFETY: getuid cannot fail and has no side effects.
        let uid = unsafe { libc::getuid() };
        let prefixes = [
            format!("jack_sem.{uid}_{}_", self.options.name),
            format!("jack_{}_", self.options.name),
        ];
        let Ok(dir) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Paths in /dev/shm that belong to this server (for leak checks).
    pub fn shm_entries(&self) -> Vec<PathBuf> {
        shm_entries_of(&self.options.name)
    }
}

/// Paths in /dev/shm whose name contains `server_name` (JACK semaphores and
/// shared memory of that server), for leak checks after a server stopped.
pub fn shm_entries_of(server_name: &str) -> Vec<PathBuf> {
    let needle = format!("_{server_name}_");
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(&needle))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// A server child process (jackd, pipewire) with its log file: what
/// [`DummyServer`] and [`PipeWireServer`](crate::PipeWireServer) share.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    /// "jackd" or "pipewire", for messages.
    program: &'static str,
    /// The server name, for messages.
    name: String,
    pub(crate) log_path: PathBuf,
}

impl ServerProcess {
    /// Spawns `cmd` with stdin closed and stdout and stderr into a new file
    /// at `log_path`, dying with this process (PDEATHSIG SIGTERM).
    pub(crate) fn spawn(
        mut cmd: Command,
        program: &'static str,
        name: &str,
        log_path: PathBuf,
    ) -> Result<Self, Error> {
        let log = File::create(&log_path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot create {program} log {}: {e}", log_path.display()),
            )
        })?;
        let log_err = log.try_clone().map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot duplicate {program} log: {e}"),
            )
        })?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
        // If firmtime dies without running Drop (SIGKILL), the server goes too.
        process::die_with_parent(&mut cmd, libc::SIGTERM);
        let child = cmd.spawn().map_err(|e| {
            // The log was made for a server that never ran.
            let _ = std::fs::remove_file(&log_path);
            Error::new(
                ErrorKind::ServerFailed,
                format!("cannot start {program}: {e}"),
            )
        })?;
        Ok(ServerProcess {
            child: Some(child),
            program,
            name: name.to_string(),
            log_path,
        })
    }

    /// Polls `ready` every 50 ms until it says yes, the server exits, or
    /// `timeout` passes.
    pub(crate) fn wait_ready(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.failed(&format!(
                        "{} exited during start-up ({status})",
                        self.program
                    )));
                }
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(self.failed(&format!(
                    "{} did not accept clients within {:.1} s",
                    self.program,
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn failed(&self, what: &str) -> Error {
        let server = if self.program == "jackd" {
            "dummy JACK server"
        } else {
            "private PipeWire server"
        };
        Error::new(
            ErrorKind::ServerFailed,
            format!(
                "{server} {:?}: {what}; {} said:\n{}",
                self.name,
                self.program,
                self.log_tail(8)
            ),
        )
    }

    /// The last `lines` lines of the log; empty when it cannot be read.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let mut log = String::new();
        if let Ok(mut f) = File::open(&self.log_path) {
            let _ = f.read_to_string(&mut log);
        }
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        tail.join("\n")
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, up to 5 s to exit, then SIGKILL; reaps it. Idempotent.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::stop(&mut child, Target::Process, Duration::from_secs(5));
        }
    }
}

/// Runs the probe `cmd` (stdin and stderr closed) for at most `timeout`
/// (killed after it: a PipeWire client can hang forever on a half-set-up
/// daemon) and tells whether it exited 0 with a stdout `ok` accepts.
pub(crate) fn probe_says(
    mut cmd: Command,
    timeout: Duration,
    ok: impl FnOnce(&str) -> bool,
) -> bool {
    let Ok(mut child) = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
    child
        .wait_with_output()
        .map(|o| o.status.success() && ok(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or(false)
}

/// Removes PipeWire's JACK directory (`…/pipewire-0.3/jack`, what `pw-jack`
/// adds) from `cmd`'s `LD_LIBRARY_PATH`: jackd and jackd2's tools must load
/// jackd2's libraries.
pub(crate) fn without_pipewire_jack_dir(cmd: &mut Command) {
    let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") else {
        return;
    };
    match strip_pipewire(&paths) {
        Some(kept) => cmd.env("LD_LIBRARY_PATH", kept),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
}

/// A library path without its PipeWire directories; `None` when nothing is left.
fn strip_pipewire(paths: &std::ffi::OsStr) -> Option<std::ffi::OsString> {
    let kept: Vec<PathBuf> = std::env::split_paths(paths)
        .filter(|p| !p.to_string_lossy().contains("pipewire"))
        .collect();
    std::env::join_paths(kept).ok().filter(|j| !j.is_empty())
}

impl Drop for DummyServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// Tests left `NAME.jackd.log` files in /tmp: the log goes with the
    /// server, but a failing test (a panic unwinding through the drop) keeps
    /// it, being what tells why.
    #[test]
    fn the_log_goes_with_the_server_and_stays_when_a_test_fails() {
        let Some(s) = DummyServer::start_for_test(48_000, 256) else {
            firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
            return;
        };
        let log = s.proc.log_path.clone();
        assert!(log.is_file(), "{}", log.display());
        drop(s);
        assert!(!log.exists(), "{} left behind", log.display());

        let s = DummyServer::start_for_test(48_000, 256).expect("jackd starts again");
        let log = s.proc.log_path.clone();
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _s = s;
            panic!("a failing test");
        }));
        assert!(failed.is_err());
        let kept = log.is_file();
        let _ = std::fs::remove_file(&log);
        assert!(kept, "{} removed during the panic", log.display());
    }

    #[test]
    fn pw_jack_library_path_is_kept_from_jackd() {
        let pw = "/usr/${LIB}/pipewire-0.3/jack";
        assert_eq!(strip_pipewire(OsStr::new(pw)), None);
        assert_eq!(
            strip_pipewire(OsStr::new(&format!("{pw}:/opt/lib"))),
            Some("/opt/lib".into())
        );
        assert_eq!(strip_pipewire(OsStr::new("/a:/b")), Some("/a:/b".into()));
    }
}
