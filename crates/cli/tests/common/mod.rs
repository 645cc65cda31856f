//! What the tests of the `firmtime` binary share: running it, checking its
//! exit status and messages, scratch paths, its JSON, and the skips for
//! missing root, JACK or network namespaces.

// Each test binary uses only some of these.
#![allow(dead_code)]

pub mod prometheus;

use firmtime_jack::{program_on_path, TestServer};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_firmtime");

/// Hands each line `child` writes to its (piped) stderr to the returned
/// receiver, from a thread of its own, until the stream ends.
pub fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let err = BufReader::new(child.stderr.take().expect("stderr piped"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in err.lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs `firmtime ARGS` to its end, capturing stdout and stderr.
pub fn firmtime(args: &[&str]) -> Output {
    Command::new(EXE).args(args).output().expect("run firmtime")
}

/// An output stream as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts that `out` exited 0 (showing its stdout and stderr otherwise);
/// returns its stdout.
pub fn assert_ok(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}: {stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    stdout
}

/// Asserts that `out` exited with `code` and that its stderr holds each of
/// `needles`; returns its stderr.
pub fn assert_exit(out: &Output, code: i32, needles: &[&str]) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' missing from: {err}");
    }
    err
}

/// Runs `firmtime ARGS` and asserts a usage error (exit status 2) whose
/// message holds each of `needles`.
pub fn assert_usage_error(args: &[&str], needles: &[&str]) {
    let out = firmtime(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' missing from: {err}");
    }
}

/// For each `(args, needles)`: `firmtime PREFIX ARGS`, both split at
/// spaces, is a usage error whose message holds every needle.
pub fn assert_usage_errors(prefix: &str, cases: &[(&str, &[&str])]) {
    for (args, needles) in cases {
        let line: Vec<&str> = prefix
            .split_whitespace()
            .chain(args.split_whitespace())
            .collect();
        assert_usage_error(&line, needles);
    }
}

/// A path in the temp directory for one test of this process (not created).
pub fn tmp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("firmtime-test-{name}-{}", std::process::id()))
}

/// Reads and parses the JSON file `p`.
pub fn read_json(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// [`read_json`], then removes the file.
pub fn take_json(p: &Path) -> serde_json::Value {
    let v = read_json(p);
    let _ = std::fs::remove_file(p);
    v
}

/// A fresh, empty directory for one test, `tmp_path(name)`, removed on
/// drop (also when the test fails): the one scratch directory of every
/// crate's tests.
#[allow(unused_imports)] // each test binary uses only some of these
pub use firmtime_rt::testing::ScratchDir as TestDir;

/// A path in the temp directory for one test ([`tmp_path`]), made fresh:
/// whatever the test puts there (a file or a directory) is removed on drop,
/// also when the test fails. Derefs to the [`Path`].
#[derive(Debug)]
pub struct TmpPath(pub PathBuf);

impl TmpPath {
    /// [`tmp_path`]`(name)`, with anything left there removed.
    pub fn new(name: &str) -> Self {
        let p = Self(tmp_path(name));
        p.remove();
        p
    }

    fn remove(&self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}

impl std::ops::Deref for TmpPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TmpPath {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether jackd is installed; skips (`firmtime_rt::testing::skip`) for
/// `test` when it is not.
pub fn jack_installed(test: &str) -> bool {
    let ok = Command::new("jackd").arg("--version").output().is_ok();
    if !ok {
        firmtime_rt::testing::skip(format!(
            "{test}: jackd not installed (apt-get install jackd2)"
        ));
    }
    ok
}

/// Whether network namespaces can be made here (root and iproute2); skips
/// (`firmtime_rt::testing::skip`) for `test` when not.
pub fn netns_root(test: &str) -> bool {
    let ok = is_root() && Command::new("ip").arg("-V").output().is_ok();
    if !ok {
        firmtime_rt::testing::skip(format!(
            "{test}: needs root and iproute2 (network namespaces)"
        ));
    }
    ok
}

/// Runs `ip ARGS`, asserting that it succeeds.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sends `signal` to our unreaped child `pid`; returns kill(2)'s result.
pub fn kill(pid: u32, signal: libc::c_int) -> libc::c_int {
    // SAFETY: kill has no memory-safety preconditions; the child is not reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, signal) }
}

/// Starts `cmd` (a `firmtime net worker`) and waits for its `ready` line on
/// stderr; stderr is drained after that so the worker never blocks on it.
pub fn spawn_ready(cmd: &mut Command) -> Child {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "worker ended early");
        if line.starts_with("ready") {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    child
}

/// A keyless `firmtime net worker` on a free loopback port (SCHED_OTHER),
/// killed on drop; `.1` is its address.
pub struct NetWorker(pub Child, pub String);

impl NetWorker {
    /// Starts one, unpinned.
    pub fn start() -> Self {
        Self::start_on(None)
    }

    /// Starts one, pinned to `cpu` (with taskset) if given.
    pub fn start_on(cpu: Option<usize>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let worker = [
            EXE,
            "net",
            "worker",
            "--listen",
            &addr,
            "--priority",
            "other",
        ];
        let mut cmd = match cpu {
            Some(c) => {
                let mut cmd = Command::new("taskset");
                cmd.args(["-c", &c.to_string()]).args(worker);
                cmd
            }
            None => {
                let mut cmd = Command::new(EXE);
                cmd.args(&worker[1..]);
                cmd
            }
        };
        NetWorker(spawn_ready(&mut cmd), addr)
    }
}

impl Drop for NetWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `firmtime net bench --workers W --json PATH ARGS` to its end;
/// returns its exit code, stdout and JSON report.
pub fn net_bench(
    worker: &NetWorker,
    json: &str,
    args: &[&str],
) -> (Option<i32>, String, serde_json::Value) {
    let path = TmpPath::new(json);
    let p = path.to_str().unwrap();
    let mut all = vec!["net", "bench", "--workers", &worker.1, "--json", p];
    all.extend(args);
    let out = firmtime(&all);
    let stdout = text(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    (out.status.code(), stdout, read_json(&path))
}

/// Runs `f` while a thread named `ft-hog`, pinned to `cpu` at SCHED_FIFO
/// `priority`, spins `burst` every `burst + gap`: an induced cause of late
/// wake-ups for a loop at a lower priority on that CPU.
pub fn with_fifo_hog<T>(
    cpu: usize,
    priority: u8,
    burst: std::time::Duration,
    gap: std::time::Duration,
    f: impl FnOnce() -> T,
) -> T {
    use firmtime_rt::clock::monotonic_ns;
    use firmtime_rt::sched::{self, Policy};
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("ft-hog".into())
            .spawn_scoped(s, || {
                sched::set_affinity(&[cpu]).expect("pin the hog");
                sched::set_current_thread(&Policy::Fifo { priority }).expect("SCHED_FIFO hog");
                while !stop.load(Ordering::Relaxed) {
                    let until = monotonic_ns() + burst.as_nanos() as u64;
                    while monotonic_ns() < until {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(gap);
                }
            })
            .expect("start the hog");
        // Stops the hog also when `f` panics (else the scope's join hangs).
        let _stop = firmtime_rt::testing::StopOnDrop(&stop);
        f()
    })
}

/// Builds firmtime-plugin-proxy (the `firmtime` binary under test does not
/// need it) and copies its library into `dir` as `firmtime_proxy.so`, so
/// `dir` is a LADSPA directory holding the proxy. Returns `dir`.
pub fn install_proxy(dir: &Path) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "-q", "-p", "firmtime-plugin-proxy"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success(), "building firmtime-plugin-proxy");
    let so = Path::new(EXE)
        .parent()
        .unwrap()
        .join("libfirmtime_proxy.so");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(so, dir.join("firmtime_proxy.so")).unwrap();
    dir.to_path_buf()
}

// ------------------------------------------------------------ JACK clients

/// Whether jack_midiseq and jack_lsp are there (jackd2's example clients);
/// prints the SKIP line when not.
pub fn midiseq_installed() -> bool {
    let ok = program_on_path("jack_midiseq") && program_on_path("jack_lsp");
    if !ok {
        firmtime_rt::testing::skip("jack_midiseq/jack_lsp not installed (Debian: jackd2)");
    }
    ok
}

/// A JACK client child (jack_midiseq), killed and reaped on drop.
pub struct Kid(pub Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `jack_midiseq NAME ARGS…` on `srv` and waits until `NAME:out` exists.
pub fn midiseq(srv: &TestServer, name: &str, args: &[&str]) -> Kid {
    let kid = Kid(srv
        .client_env(&mut Command::new("jack_midiseq"))
        .arg(name)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("jack_midiseq starts"));
    let port = format!("{name}:out");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lsp = srv
            .client_env(&mut Command::new("jack_lsp"))
            .args(["-s", srv.name()])
            .stderr(Stdio::null())
            .output()
            .expect("jack_lsp runs");
        if text(&lsp.stdout).lines().any(|l| l.trim() == port) {
            return kid;
        }
        assert!(Instant::now() < deadline, "{port} never registered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `firmtime ARGS` as a client of `srv`.
pub fn firmtime_on(srv: &TestServer, args: &[&str]) -> std::process::Output {
    srv.client_env(&mut Command::new(EXE))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run firmtime")
}

/// `firmtime tap run EXP` as a client of `srv`: subject `subject`, session
/// 1, no prompt, files in `out`, JACK input from `tapper:out`; `extra`
/// appended.
pub fn tap_run_on(
    srv: &TestServer,
    exp: &Path,
    subject: &str,
    out: &Path,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "tap",
        "run",
        exp.to_str().unwrap(),
        "--subject",
        subject,
        "--session",
        "1",
        "--no-prompt",
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "jack",
        "--jack-server",
        srv.name(),
        "--connect",
        "tapper:out",
    ];
    args.extend_from_slice(extra);
    firmtime_on(srv, &args)
}
