//! The LADSPA proxy (`firmtime_proxy.so`) against real workers and real
//! hosts: bit-exact through a network namespace with `applyplugin`, every
//! kind of bad input turning into one stderr line and a pass-through
//! plugin, a refused port layout, and a worker crash the host survives.
//!
//! The proxy library is built by `cargo build -p firmtime-plugin-proxy`
//! (once per run) and copied as `firmtime_proxy.so` into a temporary
//! LADSPA directory. Hosts run as child processes with their own
//! `FIRMTIME_PROXY_CONFIG`, since the proxy reads its configuration once
//! per process; only `worker_crash_…` loads it into this process.

mod common;

use common::{ip, netns_root, spawn_ready, EXE};
use firmtime_net::control::{Conn, Reply, Request, Setup};
use firmtime_net::remote::{PluginAllowList, PluginDescription, PluginSetup};
use firmtime_net::{Key, ServerConfig, Transform, Work, WorkerServer};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

const LADSPA: &str = "/usr/lib/ladspa";
static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory for one test, removed when the test ends (pass or
/// fail): the proxy copies and LV2 bundles are tens of MB each.
struct Tmp(PathBuf);

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Tmp {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!(
        "ftproxy-{}-{}-{name}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// Builds the proxy once; returns a LADSPA directory holding `firmtime_proxy.so`.
fn proxy_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    // In cargo's scratch directory for integration tests (under target/),
    // overwritten by every run, since a static is never dropped.
    DIR.get_or_init(|| {
        common::install_proxy(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftproxy-lib"))
    })
}

fn have(test: &str, files: &[&str]) -> bool {
    let missing: Vec<&&str> = files
        .iter()
        .filter(|f| !Path::new(f).exists() && !Path::new(LADSPA).join(f).exists())
        .collect();
    if !missing.is_empty() {
        let _ = test; // the skip names the running test itself
        firmtime_rt::testing::skip(format!(
            "{missing:?} not installed (scripts/setup.sh installs them)"
        ));
    }
    missing.is_empty()
}

fn key_file(dir: &Path) -> PathBuf {
    let k = dir.join("net.key");
    std::fs::write(&k, b"0123456789abcdef0123456789abcdef").unwrap();
    // A key others can read draws a warning (the secret-file rule).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    k
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `firmtime net worker` child, killed on drop.
struct WorkerProc(Child);

impl WorkerProc {
    fn start(prefix: &[&str], listen: &str, key: Option<&Path>, dirs: &[&str]) -> Self {
        let mut c = Command::new(prefix.first().copied().unwrap_or(EXE));
        if !prefix.is_empty() {
            c.args(&prefix[1..]).arg(EXE);
        }
        c.args(["net", "worker", "--listen", listen, "--priority", "other"]);
        if let Some(k) = key {
            c.arg("--key").arg(k);
        }
        for d in dirs {
            c.args(["--plugin-dir", d]);
        }
        WorkerProc(spawn_ready(&mut c))
    }

    fn kill(&mut self, signal: i32) {
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(self.0.id() as i32, signal) };
        let _ = self.0.wait();
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("proxy.toml");
    std::fs::write(&p, body).unwrap();
    p
}

fn entry(worker: &str, key: Option<&Path>, label: &str, window: u8) -> String {
    format!(
        "[[remote]]\nworker = \"{worker}\"\n{}label = \"{label}\"\nwindow = {window}\n\
         deadline_ms = 5000\nconnect_timeout_ms = 1000\n",
        key.map_or(String::new(), |k| format!(
            "key_file = \"{}\"\n",
            k.display()
        ))
    )
}

/// A 16-bit mono WAV of two sines, `frames` long.
fn wav(path: &Path, frames: usize) {
    let x: Vec<i16> = (0..frames)
        .map(|i| (12_000.0 * (i as f64 * 0.05).sin() + 3_000.0 * (i as f64 * 0.31).sin()) as i16)
        .collect();
    firmtime_ladspa::apply::write_wav_i16(path, 1, 48_000, &x).unwrap();
}

fn samples(path: &Path) -> Vec<i16> {
    hound::WavReader::open(path)
        .unwrap()
        .samples::<i16>()
        .map(Result::unwrap)
        .collect()
}

/// Runs a host with the proxy's directory and config; the cache goes to `dir`.
fn host(prefix: &[&str], cfg: &Path, dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(prefix[0]);
    c.args(&prefix[1..])
        .args(args)
        .env("LADSPA_PATH", proxy_dir())
        .env("FIRMTIME_PROXY_CONFIG", cfg)
        .env("FIRMTIME_PROXY_CACHE", dir.join("cache"));
    let out = c.output().unwrap();
    assert!(
        out.status.code().is_some(),
        "the host was killed by a signal: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Two namespaces joined by a veth pair: master 10.215.0.1, worker 10.215.0.2.
struct Pair(String, String);

impl Pair {
    fn up() -> Self {
        let tag = format!(
            "ftp{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let p = Pair(format!("{tag}m"), format!("{tag}w"));
        for (ns, addr) in [(&p.0, "10.215.0.1/24"), (&p.1, "10.215.0.2/24")] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            let _ = addr;
        }
        ip(&[
            "-n", &p.0, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
            &p.1,
        ]);
        for (ns, addr) in [(&p.0, "10.215.0.1/24"), (&p.1, "10.215.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
        }
        p
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in [&self.0, &self.1] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

#[test]
fn applyplugin_through_the_proxy_in_another_namespace_is_bit_exact() {
    let t = "applyplugin_through_the_proxy_in_another_namespace_is_bit_exact";
    if !netns_root(t) || !have(t, &["/usr/bin/applyplugin", "cmt.so"]) {
        return;
    }
    let dir = tmp("exact");
    let key = key_file(&dir);
    let input = dir.join("in.wav");
    // Not a multiple of applyplugin's 2048-frame blocks: the last run is shorter.
    wav(&input, 48_000 * 2 + 123);
    let direct = dir.join("direct.wav");
    let out = Command::new("applyplugin")
        .args([&input, &direct])
        .args([&format!("{LADSPA}/cmt.so"), "lpf", "1000"].map(PathBuf::from))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let net = Pair::up();
    let ns = ["ip", "netns", "exec", net.1.as_str()];
    let _w = WorkerProc::start(&ns, "10.215.0.2:7700", Some(&key), &[LADSPA]);
    let want = samples(&direct);
    for window in [0u8, 1] {
        let cfg = write_config(&dir, &entry("10.215.0.2:7700", Some(&key), "lpf", window));
        let proxied = dir.join(format!("proxied{window}.wav"));
        let m = ["ip", "netns", "exec", net.0.as_str(), "applyplugin"];
        let so = proxy_dir().join("firmtime_proxy.so");
        let out = host(
            &m,
            &cfg,
            &dir,
            &[
                input.to_str().unwrap(),
                proxied.to_str().unwrap(),
                so.to_str().unwrap(),
                "remote_lpf",
                "1000",
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let got = samples(&proxied);
        assert_eq!(got.len(), want.len());
        // The latency port reports window × 2048 (applyplugin's first
        // block); applyplugin does not compensate it: the output is that
        // late, zeros before, to the last sample (the last block is short).
        let shift = usize::from(window) * 2048;
        assert!(got[..shift].iter().all(|&x| x == 0), "window {window}");
        assert!(
            got[shift..] == want[..want.len() - shift],
            "window {window}: the proxied samples differ from the plugin's, shifted by {shift}"
        );
        if window == 0 {
            assert_eq!(got, want, "window 0 is bit-exact to the last sample");
        }
    }
}

/// Starts a keyed worker on loopback serving /usr/lib/ladspa; returns it and its address.
fn loopback_worker(key: &Path) -> (WorkerProc, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    (WorkerProc::start(&[], &addr, Some(key), &[LADSPA]), addr)
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// sox (14.4.2) asks for a value for every control port without a default,
/// the proxy's `latency` output included: regression test for issue 14
/// (`not enough arguments for control ports` without a dummy `0`).
/// Reference: sox running cmt's lpf itself; `-D` because sox dithers
/// otherwise. Window 0 is exact with a length that is no multiple of sox's
/// buffer; window 1 is exact with `ladspa -l` (sox drops the `latency`
/// samples the proxy reports and drains them at the end). Runs of 8192
/// frames are split into two exchanges (max_block 4096), which the
/// reported latency must count as one exchange of delay, not 8192 frames.
/// Lengths that are no multiple of the block: see
/// `every_host_gets_the_plugins_output_to_the_last_sample_whatever_the_files_length`.
#[test]
fn sox_through_the_proxy_needs_no_dummy_argument_and_is_bit_exact() {
    let t = "sox_through_the_proxy_needs_no_dummy_argument_and_is_bit_exact";
    if !have(t, &["/usr/bin/sox", "/usr/bin/analyseplugin", "cmt.so"]) {
        return;
    }
    let dir = tmp("sox");
    let key = key_file(&dir);
    let (_w, addr) = loopback_worker(&key);
    let so = proxy_dir().join("firmtime_proxy.so");
    for (window, frames, compensate) in [(0u8, 48_000 * 2 + 123, false), (1, 12 * 8192, true)] {
        let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", window));
        let input = dir.join(format!("in{window}.wav"));
        wav(&input, frames);
        let direct = dir.join(format!("direct{window}.wav"));
        run_ok(
            Command::new("sox")
                .args(["-D", "--buffer", "8192"])
                .args([&input, &direct])
                .args(["ladspa", "cmt", "lpf", "1000"])
                .env("LADSPA_PATH", LADSPA),
        );
        if window == 0 {
            // The proxy's ports are the plugin's, as analyseplugin shows
            // them, then `latency` with its default.
            let ports = |text: &str| text[text.find("Ports:").unwrap()..].trim_end().to_string();
            let out = host(&["analyseplugin"], &cfg, &dir, &[so.to_str().unwrap()]);
            let proxied = ports(&String::from_utf8_lossy(&out.stdout));
            let local = Command::new("analyseplugin")
                .args([&format!("{LADSPA}/cmt.so"), "lpf"])
                .output()
                .unwrap();
            let local = ports(&String::from_utf8_lossy(&local.stdout));
            assert_eq!(
                proxied,
                format!("{local}\n\t\"latency\" output, control, 0 to ..., default 0, integer")
            );
        }
        let proxied = dir.join(format!("proxied{window}.wav"));
        let mut args = vec!["-D", "--buffer", "8192"];
        args.extend([input.to_str().unwrap(), proxied.to_str().unwrap(), "ladspa"]);
        if compensate {
            args.push("-l");
        }
        // No value for `latency`: its default (0) fills in.
        args.extend(["firmtime_proxy", "remote_lpf", "1000"]);
        let out = host(&["sox"], &cfg, &dir, &args);
        assert!(out.status.success(), "window {window}: {out:?}");
        let (got, want) = (samples(&proxied), samples(&direct));
        assert_eq!(got.len(), frames);
        assert_ne!(want, samples(&input), "the filter changes the signal");
        assert!(
            got == want,
            "window {window}: sox's proxied output differs from the plugin's"
        );
    }
}

/// Regression test for issue 28 item 3: `sox … ladspa -l firmtime_proxy`
/// at window 1 corrupted the tail of every file whose length was no
/// multiple of sox's block (96 000 frames: the last 4 095 samples wrong;
/// 48 001: 4 096), because the latency port said `window × min(n,
/// max_block)` for each run, which shrank on the short last block, and a
/// result was written into whatever block ran next, cut to its size. Now
/// the first run fixes the latency `L = window × min(n₁, max_block)` for
/// the instance and every result goes to its own position, `L` frames
/// later. Each host against the same host running cmt's lpf itself, for
/// lengths that are and are not multiples of the block and one shorter
/// than a block: sox with `-l` (it drops `L` leading frames and drains
/// `L` more) and `firmtime ladspa apply` (which does the same) to the
/// last sample; sox without `-l`, applyplugin, ecasound and `firmtime
/// ladspa apply --no-latency-compensation` `L` frames late to the last
/// sample, zeros before. `max_block = 3000` splits runs unevenly.
#[test]
fn every_host_gets_the_plugins_output_to_the_last_sample_whatever_the_files_length() {
    let t = "every_host_gets_the_plugins_output_to_the_last_sample_whatever_the_files_length";
    if !have(
        t,
        &[
            "/usr/bin/sox",
            "/usr/bin/applyplugin",
            "/usr/bin/ecasound",
            "cmt.so",
        ],
    ) {
        return;
    }
    let dir = tmp("tail");
    let key = key_file(&dir);
    let (_w, addr) = loopback_worker(&key);
    let so = proxy_dir().join("firmtime_proxy.so");
    let so = so.to_str().unwrap();
    // (host, its block: frames per run() but the last, compensates latency)
    let hosts = [
        ("sox -l", 8192usize, true),
        ("sox", 8192, false),
        ("applyplugin", 2048, false),
        ("ecasound", 1024, false),
        ("firmtime", 2048, true),
        ("firmtime --no-latency-compensation", 2048, false),
    ];
    let command = |host: &str, inp: &Path, out: &Path, label: &str, lib: &str| -> Vec<String> {
        let (i, o) = (inp.to_str().unwrap(), out.to_str().unwrap());
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        match host {
            "sox -l" | "sox" => {
                let mut a = vec!["sox", "-D", "--buffer", "8192", i, o, "ladspa"];
                if host == "sox -l" {
                    a.push("-l");
                }
                a.extend([lib, label, "1000"]);
                v(&a)
            }
            "applyplugin" => v(&["applyplugin", i, o, lib, label, "1000"]),
            "firmtime" => v(&[EXE, "ladspa", "apply", i, o, label, "1000"]),
            "firmtime --no-latency-compensation" => v(&[
                EXE,
                "ladspa",
                "apply",
                "--no-latency-compensation",
                i,
                o,
                label,
                "1000",
            ]),
            _ => v(&[
                "ecasound",
                "-q",
                "-b:1024",
                "-f:16,1,48000",
                &format!("-i:{i}"),
                &format!("-o:{o}"),
                &format!("-el:{label},1000"),
            ]),
        }
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for frames in [96_000usize, 48_001, 81_920, 1_000] {
        let input = dir.join(format!("in{frames}.wav"));
        wav(&input, frames);
        for &(h, block, compensates) in &hosts {
            let direct = dir.join("direct.wav");
            let _ = std::fs::remove_file(&direct);
            let lib = if h.starts_with("sox") {
                "cmt".to_string()
            } else {
                format!("{LADSPA}/cmt.so")
            };
            let local = if h.starts_with("firmtime") {
                "cmt:lpf"
            } else {
                "lpf"
            };
            let c = command(h, &input, &direct, local, &lib);
            run_ok(Command::new(&c[0]).args(&c[1..]).env("LADSPA_PATH", LADSPA));
            let want = samples(&direct);
            assert_eq!(want.len(), frames, "{h}: the local plugin's output");
            for (window, max_block) in [(1u8, 4096usize), (2, 4096), (1, 3000)] {
                let body = format!(
                    "{}max_block = {max_block}\n",
                    entry(&addr, Some(&key), "lpf", window)
                );
                let cfg = write_config(&dir, &body);
                let proxied = dir.join("proxied.wav");
                let _ = std::fs::remove_file(&proxied);
                let lib = if h.starts_with("sox") {
                    "firmtime_proxy"
                } else {
                    so
                };
                let c = command(h, &input, &proxied, "remote_lpf", lib);
                let args: Vec<&str> = c[1..].iter().map(String::as_str).collect();
                let out = host(&[&c[0]], &cfg, &dir, &args);
                assert!(out.status.success(), "{h}, window {window}: {out:?}");
                let got = samples(&proxied);
                let case = format!("{h}, {frames} frames, window {window}, max_block {max_block}");
                assert_eq!(got.len(), frames, "{case}: frames written");
                checked += 1;
                if compensates {
                    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                    if differ > 0 {
                        let last = got.iter().zip(&want).rposition(|(a, b)| a != b).unwrap();
                        failures.push(format!(
                            "{case}: {differ} samples differ, the last at {last}"
                        ));
                    }
                    continue;
                }
                let l = (usize::from(window) * frames.min(block).min(max_block)).min(frames);
                let lead = got[..l].iter().filter(|&&x| x != 0).count();
                let differ = got[l..].iter().zip(&want).filter(|(a, b)| a != b).count();
                if lead + differ > 0 {
                    failures.push(format!(
                        "{case}: latency {l}: {lead} of the first {l} samples are not 0, {differ} \
                         of the {} after differ from the plugin's",
                        frames - l
                    ));
                }
            }
        }
    }
    assert_eq!(checked, 4 * hosts.len() * 3);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A worker that accepts connections and never answers (what a SIGSTOPped
/// worker's kernel does). Counts the connections and the most that were
/// open at once: a connection whose peer closed it reads end-of-file.
struct FrozenWorker {
    addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, usize)>>,
}

impl FrozenWorker {
    fn start() -> Self {
        use std::io::Read;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let alive = |c: &mut std::net::TcpStream| {
                let mut buf = [0u8; 256];
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => return false,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                        Err(_) => return false,
                    }
                }
            };
            let (mut conns, mut most) = (Vec::new(), 0);
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(true).unwrap();
                        conns.push(c);
                        let open = conns.iter_mut().map(alive).filter(|&a| a).count();
                        most = most.max(open);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            (conns.len(), most)
        });
        FrozenWorker {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// (connections accepted, most open at once).
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for FrozenWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Regression test for issue 28 item 6: the proxy described its entries
/// one after another, so a frozen worker made a host's plugin scan last N
/// × `connect_timeout_ms` (4 entries 4.1 s, 10 entries 10.2 s), each with
/// "Resource temporarily unavailable (os error 11)". Now every entry is
/// asked at once under one deadline: all six connections are open at the
/// same time (one after another, each closes before the next opens), and
/// each entry has one line naming the worker, the timeout and its value.
/// A bad entry whose label is 500 KB is named in one short line.
#[test]
fn a_frozen_worker_costs_a_scan_one_timeout_and_says_which() {
    let dir = tmp("frozen");
    let frozen = FrozenWorker::start();
    let mut body = String::new();
    for k in 1..=6 {
        body.push_str(&format!(
            "[[remote]]\nworker = \"{}\"\nlabel = \"p{k}\"\nconnect_timeout_ms = 1000\n",
            frozen.addr
        ));
    }
    let huge = "x".repeat(500_000);
    body.push_str(&format!(
        "[[remote]]\nworker = \"{}\"\nlabel = \"{huge}\"\n",
        frozen.addr
    ));
    let cfg = write_config(&dir, &body);
    let addr = frozen.addr.clone();
    let out = host(&[EXE], &cfg, &dir, &["ladspa", "list"]);
    let (accepted, most_open) = frozen.finish();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err:.2000}");
    let want = format!("no description from the worker {addr} within connect_timeout_ms = 1000 ms");
    let timed_out: Vec<&str> = err.lines().filter(|l| l.contains(&want)).collect();
    assert_eq!(timed_out.len(), 6, "{err:.3000}");
    for (k, l) in (1..=6).zip(&timed_out) {
        assert!(
            l.starts_with(&format!("firmtime_proxy: p{k} on ")) && l.contains("placeholder"),
            "{l}"
        );
    }
    assert!(!err.contains("os error 11"), "{err:.3000}");
    assert_eq!(accepted, 6, "one connection per good entry");
    assert_eq!(most_open, 6, "the entries were asked one after another");
    let long: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("(500000 bytes)"))
        .collect();
    assert_eq!(long.len(), 1, "{err:.3000}");
    assert!(
        long[0].contains(&format!(
            "label = \"{}… (500000 bytes)\": give at most 256 bytes",
            "x".repeat(64)
        )),
        "{:.500}",
        long[0]
    );
    assert!(err.lines().all(|l| l.len() < 1000), "{err:.3000}");
}

/// ecasound offline (file to file): the proxy at window 0 against the same
/// chain with cmt's lpf itself.
#[test]
fn ecasound_through_the_proxy_is_bit_exact() {
    let t = "ecasound_through_the_proxy_is_bit_exact";
    if !have(t, &["/usr/bin/ecasound", "cmt.so"]) {
        return;
    }
    let dir = tmp("eca");
    let key = key_file(&dir);
    let (_w, addr) = loopback_worker(&key);
    let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", 0));
    let input = dir.join("in.wav");
    wav(&input, 48_000 * 2 + 123);
    let direct = dir.join("direct.wav");
    let proxied = dir.join("proxied.wav");
    let chain = |out: &Path, op: &str| {
        vec![
            "-q".to_string(),
            "-i".into(),
            input.to_str().unwrap().into(),
            "-o".into(),
            out.to_str().unwrap().into(),
            format!("-el:{op},1000"),
        ]
    };
    run_ok(
        Command::new("ecasound")
            .args(chain(&direct, "lpf"))
            .env("LADSPA_PATH", LADSPA),
    );
    let args = chain(&proxied, "remote_lpf");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = host(&["ecasound"], &cfg, &dir, &args);
    assert!(out.status.success(), "{out:?}");
    let want = samples(&direct);
    assert_ne!(want, samples(&input), "the filter changes the signal");
    assert!(
        samples(&proxied) == want,
        "ecasound's proxied output differs from the plugin's"
    );
}

struct Case {
    name: &'static str,
    config: String,
    stderr: &'static str,
}

/// Each kind of bad input: one line saying why, and a placeholder that an
/// offline render (firmtime ladspa apply: not a real-time thread) refuses
/// to run — exit 75 and one more line — while a real-time host
/// (`mode = "realtime"`) gets the audio passed through and the count.
#[test]
fn bad_input_gives_one_clear_line_and_a_placeholder_that_never_passes_for_the_plugin() {
    let t = "bad_input_gives_one_clear_line_and_a_placeholder_that_never_passes_for_the_plugin";
    if !have(t, &["cmt.so"]) {
        return;
    }
    let dir = tmp("bad");
    let key = key_file(&dir);
    let other = dir.join("other.key");
    std::fs::write(&other, b"fedcba9876543210fedcba9876543210").unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let keyed = format!("127.0.0.1:{}", free_port());
    let keyless = format!("127.0.0.1:{}", free_port());
    let _w1 = WorkerProc::start(&[], &keyed, Some(&key), &[LADSPA]);
    let _w2 = WorkerProc::start(&[], &keyless, None, &[]);
    let nobody = format!("127.0.0.1:{}", free_port());
    let cases = [
        Case {
            name: "missing worker",
            config: entry(&nobody, Some(&key), "lpf", 0),
            stderr: "connecting to the worker's control port",
        },
        Case {
            name: "wrong key",
            config: entry(&keyed, Some(&other), "lpf", 0),
            stderr: "authentication failed",
        },
        Case {
            name: "unknown label",
            config: entry(&keyed, Some(&key), "no_such_plugin", 0),
            stderr: "has no plugin 'no_such_plugin'",
        },
        Case {
            name: "outside the allow-list",
            config: entry(&keyed, Some(&key), "/tmp/evil.so:lpf", 0),
            stderr: "loads plugins only from its allow-listed directories",
        },
        Case {
            name: "unauthenticated master",
            config: entry(&keyless, None, "lpf", 0),
            stderr: "serves plugins only to authenticated masters",
        },
        Case {
            name: "bad entry",
            config: entry(&keyed, Some(&key), "lpf", 9),
            stderr: "window = 9: use 0, 1 or 2",
        },
    ];
    let input = dir.join("in.wav");
    wav(&input, 5000);
    for (c, realtime) in cases.iter().flat_map(|c| [(c, false), (c, true)]) {
        let cfg = if realtime {
            write_config(&dir, &format!("{}mode = \"realtime\"\n", c.config))
        } else {
            write_config(&dir, &c.config)
        };
        let label = if c.name == "outside the allow-list" {
            "remote__tmp_evil_so_lpf"
        } else {
            "remote_no_such_plugin"
        };
        let label = match c.name {
            "unknown label" | "outside the allow-list" => label,
            _ => "remote_lpf",
        };
        let output = dir.join("out.wav");
        let _ = std::fs::remove_file(&output);
        let out = host(
            &[EXE],
            &cfg,
            &dir,
            &[
                "ladspa",
                "apply",
                input.to_str().unwrap(),
                output.to_str().unwrap(),
                label,
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(c.stderr)).collect();
        assert_eq!(
            lines.len(),
            1,
            "{}: one line with {:?} in:\n{err}",
            c.name,
            c.stderr
        );
        assert!(lines[0].starts_with("firmtime_proxy: "), "{}", lines[0]);
        assert!(lines[0].contains("placeholder"), "{}: {}", c.name, lines[0]);
        let failed: Vec<&str> = err
            .lines()
            .filter(|l| l.contains(": offline render failed: "))
            .collect();
        // A bad entry has no mode: it is auto, so offline here.
        if realtime && c.name != "bad entry" {
            assert!(out.status.success(), "{} (realtime): {out:?}", c.name);
            assert!(failed.is_empty(), "{err}");
            assert_eq!(
                samples(&output),
                samples(&input),
                "{}: in real time the placeholder passes audio through",
                c.name
            );
            assert!(
                err.contains(&format!(
                    "{label}: 5000 of 5000 frames (100.0 %) were NOT processed by the worker"
                )),
                "{}: the count of unprocessed frames in:\n{err}",
                c.name
            );
        } else {
            assert_eq!(out.status.code(), Some(75), "{}: {out:?}", c.name);
            assert_eq!(failed.len(), 1, "{}: {err}", c.name);
            assert!(
                failed[0].starts_with(&format!("firmtime_proxy: {label}: offline render failed")),
                "{}",
                failed[0]
            );
        }
    }
    // A malformed file: one line, no plugins, no crash of the host.
    let cfg = write_config(&dir, "[[remote]\nworker = ");
    let out = host(&[EXE], &cfg, &dir, &["ladspa", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not valid TOML"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("no remote plugins are presented"),
        "{err}"
    );
    // Regression test for issue 20 item 6: a FIFO as config hung the host
    // in ladspa_descriptor; /dev/zero was read until memory ran out.
    let fifo = dir.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (cfg, want) in [
        (
            fifo.as_path(),
            format!("cannot read config {}: not a regular file", fifo.display()),
        ),
        (
            Path::new("/dev/zero"),
            "cannot read config /dev/zero: not a regular file".into(),
        ),
    ] {
        let out = host(&["timeout", "60", EXE], cfg, &dir, &["ladspa", "list"]);
        assert_ne!(
            out.status.code(),
            Some(124),
            "{}: the host hung",
            cfg.display()
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.matches(want.as_str()).count(), 1, "{err}");
    }
}

/// Regression test for issue 20 item 6: with the worker gone, `ecasound
/// -i:in.wav -o:out.wav -el:remote_lpf,1000` exited 0 with out.wav equal to
/// the input. An offline render now fails (exit 75, one line saying why)
/// after waiting `offline_wait_ms` for the worker, in ecasound, applyplugin
/// and firmtime; with `mode = "realtime"` the audio passes through and the
/// count of unprocessed frames is on stderr.
#[test]
fn an_offline_render_without_its_worker_fails_instead_of_writing_the_input() {
    let t = "an_offline_render_without_its_worker_fails_instead_of_writing_the_input";
    if !have(t, &["/usr/bin/ecasound", "/usr/bin/applyplugin", "cmt.so"]) {
        return;
    }
    let dir = tmp("offline");
    let key = key_file(&dir);
    let (mut w, addr) = loopback_worker(&key);
    let body = format!(
        "{}offline_wait_ms = 700\n",
        entry(&addr, Some(&key), "lpf", 0)
    );
    let cfg = write_config(&dir, &body);
    let input = dir.join("in.wav");
    let frames = 48_000 + 123;
    wav(&input, frames);
    let inp = input.to_str().unwrap();
    let out_of = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let so = proxy_dir().join("firmtime_proxy.so");
    let so = so.to_str().unwrap();
    let hosts = |out: &str| -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        vec![
            v(&[
                "ecasound",
                "-q",
                &format!("-i:{inp}"),
                &format!("-o:{out}"),
                "-el:remote_lpf,1000",
            ]),
            v(&["applyplugin", inp, out, so, "remote_lpf", "1000"]),
            v(&[EXE, "ladspa", "apply", inp, out, "remote_lpf", "1000"]),
        ]
    };
    // With the worker: processed (and the description cached).
    for h in hosts(&out_of("ok.wav")) {
        let args: Vec<&str> = h[1..].iter().map(String::as_str).collect();
        let out = host(&[&h[0]], &cfg, &dir, &args);
        assert!(out.status.success(), "{}: {out:?}", h[0]);
        assert_ne!(samples(&dir.join("ok.wav")), samples(&input), "{}", h[0]);
    }
    w.kill(libc::SIGKILL);
    for h in hosts(&out_of("gone.wav")) {
        let args: Vec<&str> = h[1..].iter().map(String::as_str).collect();
        let out = host(&[&h[0]], &cfg, &dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "{}: {out:?}", h[0]);
        let failed: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("offline render failed"))
            .collect();
        assert_eq!(failed.len(), 1, "{}: {err}", h[0]);
        assert!(
            failed[0].starts_with(&format!(
                "firmtime_proxy: remote_lpf: offline render failed: no session with the worker \
                 {addr} within offline_wait_ms = 700 ms"
            )),
            "{}: {}",
            h[0],
            failed[0]
        );
    }
    // Real time by choice: the input passes, and the count says so.
    let cfg = write_config(&dir, &format!("{body}mode = \"realtime\"\n"));
    let out = host(
        &[EXE],
        &cfg,
        &dir,
        &[
            "ladspa",
            "apply",
            inp,
            &out_of("rt.wav"),
            "remote_lpf",
            "1000",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(samples(&dir.join("rt.wav")), samples(&input));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "firmtime_proxy: remote_lpf: {frames} of {frames} frames (100.0 %) were NOT processed \
             by the worker {addr} (late or away): they hold the dry input"
        )),
        "{err}"
    );
}

#[test]
fn the_cached_description_survives_a_worker_that_is_away_at_load() {
    let t = "the_cached_description_survives_a_worker_that_is_away_at_load";
    if !have(t, &["cmt.so"]) {
        return;
    }
    let dir = tmp("cache");
    let key = key_file(&dir);
    let addr = format!("127.0.0.1:{}", free_port());
    let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", 0));
    let mut w = WorkerProc::start(&[], &addr, Some(&key), &[LADSPA]);
    let out = host(&[EXE], &cfg, &dir, &["ladspa", "info", "remote_lpf"]);
    assert!(out.status.success(), "{out:?}");
    let fresh = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(fresh.contains("Cutoff Frequency"), "{fresh}");
    w.kill(libc::SIGKILL);
    let out = host(&[EXE], &cfg, &dir, &["ladspa", "info", "remote_lpf"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("presenting its cached description"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), fresh);
}

#[test]
fn a_setup_whose_ports_differ_from_the_plugin_is_refused() {
    if !have(
        "a_setup_whose_ports_differ_from_the_plugin_is_refused",
        &["cmt.so"],
    ) {
        return;
    }
    let key = Key::new(b"0123456789abcdef0123456789abcdef").unwrap();
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.key = Some(key.clone());
    cfg.plugins = PluginAllowList::new(&[PathBuf::from(LADSPA)]).unwrap();
    let srv = WorkerServer::start(cfg).unwrap();
    let addr = srv.local_addr();
    let desc =
        firmtime_net::remote::describe(addr, Some(key.clone()), "lpf", Duration::from_secs(2))
            .unwrap();
    assert_eq!(
        PluginDescription::ports_text(&desc.ports),
        "control in, audio in, audio out"
    );
    let mut wrong = desc.clone();
    wrong.ports.swap(0, 1);
    let mut c = Conn::connect(addr, Some(key), Duration::from_secs(2)).unwrap();
    c.send(&Request::Setup(Setup {
        stream_id: 5,
        data_port: 9,
        layout: wrong.layout(64),
        window: 0,
        period_ns: 1_000_000,
        transform: Transform::Copy,
        work: Work::default(),
        plugin: Some(PluginSetup {
            plugin: "lpf".into(),
            sample_rate: 48_000,
            max_frames: 64,
            ports: wrong.ports.clone(),
        }),
    }))
    .unwrap();
    match c.recv::<Reply>().unwrap() {
        Reply::Error { message } => {
            assert!(message.starts_with("mismatched port layout"), "{message}");
            assert!(
                message.contains("[audio in, control in, audio out]"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn worker_crash_falls_back_to_dry_and_reconnects_when_it_is_back() {
    if !have(
        "worker_crash_falls_back_to_dry_and_reconnects_when_it_is_back",
        &["cmt.so"],
    ) {
        return;
    }
    let dir = tmp("crash");
    let key = key_file(&dir);
    let addr = format!("127.0.0.1:{}", free_port());
    let mut w = WorkerProc::start(&[], &addr, Some(&key), &[LADSPA]);
    // Real time by choice: this thread is not a real-time one, and offline
    // mode would end the test process when the worker goes. deadline_ms =
    // 5000 (the docs' example) must not make run() wait 5 s on a frozen worker.
    let cfg = format!(
        "{}mode = \"realtime\"\n",
        entry(&addr, Some(&key), "amp_mono", 0)
    );
    let cfg = write_config(&dir, &cfg);
    // The only test that loads the proxy into this process (it reads its config once).
    std::env::set_var("FIRMTIME_PROXY_CONFIG", &cfg);
    std::env::set_var("FIRMTIME_PROXY_CACHE", dir.join("cache"));
    let lib = firmtime_ladspa::Library::load(&proxy_dir().join("firmtime_proxy.so")).unwrap();
    let plugin = lib
        .plugins()
        .into_iter()
        .find(|p| p.info().label == "remote_amp_mono")
        .expect("remote_amp_mono presented");
    let ports = &plugin.info().ports;
    let port = |name: &str| ports.iter().position(|p| p.name == name).unwrap();
    let (gain, inp, out) = (port("Gain"), port("Input"), port("Output"));
    let mut inst = plugin.instantiate(48_000, 256).unwrap();
    inst.activate();
    inst.set_control(gain, 2.0).unwrap();
    // Runs periods until the output is `k` × the input (or gives up); returns the periods run.
    let until = |inst: &mut firmtime_ladspa::Instance, k: f32, periods: usize| -> Option<usize> {
        for n in 0..periods {
            for (i, x) in inst.audio_mut(inp).unwrap().iter_mut().enumerate() {
                *x = (i + n) as f32 * 0.001;
            }
            inst.run(256).unwrap();
            let o = inst.audio(out).unwrap();
            let i = inst.audio(inp).unwrap();
            if o.iter().zip(i).all(|(o, i)| *o == k * i) {
                return Some(n);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    };
    assert!(
        until(&mut inst, 2.0, 400).is_some(),
        "processed by the worker"
    );
    // Frozen (SIGSTOP): runs wait at most the block's duration (5.3 ms)
    // once, then not at all until the worker answers; never deadline_ms.
    // SAFETY: kill(2) on our own child's PID.
    unsafe { libc::kill(w.0.id() as i32, libc::SIGSTOP) };
    let mut slowest = Duration::ZERO;
    let frozen = std::time::Instant::now();
    for _ in 0..200 {
        let t0 = std::time::Instant::now();
        inst.run(256).unwrap();
        slowest = slowest.max(t0.elapsed());
    }
    let frozen = frozen.elapsed();
    assert!(
        slowest < Duration::from_secs(1) && frozen < Duration::from_secs(4),
        "frozen worker: slowest run {slowest:?}, 200 runs {frozen:?}"
    );
    let o = inst.audio(out).unwrap();
    let i = inst.audio(inp).unwrap();
    assert!(o.iter().zip(i).all(|(o, i)| o == i), "dry while frozen");
    // SAFETY: as above.
    unsafe { libc::kill(w.0.id() as i32, libc::SIGCONT) };
    assert!(
        until(&mut inst, 2.0, 2000).is_some(),
        "processed again after SIGCONT"
    );
    // SIGABRT: what a plugin that aborts does (Rust handles a sent SIGSEGV and carries on).
    w.kill(libc::SIGABRT);
    assert!(
        until(&mut inst, 1.0, 400).is_some(),
        "dry pass-through after the crash"
    );
    let _w = WorkerProc::start(&[], &addr, Some(&key), &[LADSPA]);
    assert!(
        until(&mut inst, 2.0, 2000).is_some(),
        "processed again after the restart"
    );
}

// ---- LV2: the same library's `lv2_descriptor`, and the bundle `firmtime ladspa lv2-bundle` writes.

/// Builds both plugin libraries (with their LV2 entry points) once.
fn plugin_libraries() -> (&'static Path, PathBuf) {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = proxy_dir();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "building firmtime-plugin-waste-time");
    });
    let waste = Path::new(EXE)
        .parent()
        .unwrap()
        .join("libfirmtime_waste_time.so");
    (dir, waste)
}

/// Writes an LV2 bundle `firmtime.lv2` under `dir` with `cfg` as the
/// proxy's configuration; returns the LV2_PATH directory and the command's stdout.
fn lv2_bundle(cfg: &Path, dir: &Path) -> (PathBuf, String) {
    let (proxy, waste) = plugin_libraries();
    let path = dir.join("lv2");
    let out = Command::new(EXE)
        .args(["ladspa", "lv2-bundle"])
        .arg(path.join("firmtime.lv2"))
        .arg(proxy.join("firmtime_proxy.so"))
        .arg(&waste)
        .env("FIRMTIME_PROXY_CONFIG", cfg)
        .env("FIRMTIME_PROXY_CACHE", dir.join("cache"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (path, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs an LV2 tool with the bundle's LV2_PATH and the proxy's config.
fn lv2_tool(tool: &str, lv2_path: &Path, cfg: &Path, cache: &Path, args: &[&str]) -> Output {
    let out = Command::new(tool)
        .args(args)
        .env("LV2_PATH", lv2_path)
        .env("FIRMTIME_PROXY_CONFIG", cfg)
        .env("FIRMTIME_PROXY_CACHE", cache)
        .env("FIRMTIME_WASTE_LOG", cache.with_file_name("waste_time.csv"))
        .output()
        .unwrap();
    assert!(out.status.code().is_some(), "{tool} was killed: {out:?}");
    out
}

/// A 32-bit float mono WAV of two sines on the 16-bit grid (so that every
/// host reads the same floats), `frames` long.
fn float_wav(path: &Path, frames: usize) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 48_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..frames {
        let x = (12_000.0 * (i as f64 * 0.05).sin() + 3_000.0 * (i as f64 * 0.31).sin()) as i16;
        w.write_sample(f32::from(x) / 32_768.0).unwrap();
    }
    w.finalize().unwrap();
}

fn float_samples(path: &Path) -> Vec<f32> {
    hound::WavReader::open(path)
        .unwrap()
        .samples::<f32>()
        .map(Result::unwrap)
        .collect()
}

/// lv2apply (lilv-utils) runs the LV2 build of the proxy fronting cmt's
/// lpf on a worker on loopback, windows 0 and 1 (one frame late, as its
/// latency port says). Reference: the same plugin run
/// locally by applyplugin on the same float input. lv2apply writes floats
/// (like its input), applyplugin 16-bit as `trunc(y · 2^31) >> 16`
/// (docs/LADSPA.md), so lv2apply's floats are converted that way and every
/// sample must be equal. lv2apply calls run() once per frame (one exchange
/// each), hence the short input; a one-pole filter's output does not
/// depend on the block size.
#[test]
fn lv2apply_through_the_lv2_proxy_is_bit_exact() {
    let t = "lv2apply_through_the_lv2_proxy_is_bit_exact";
    if !have(t, &["/usr/bin/lv2apply", "/usr/bin/applyplugin", "cmt.so"]) {
        return;
    }
    let dir = tmp("lv2apply");
    let key = key_file(&dir);
    let (_w, addr) = loopback_worker(&key);
    let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", 0));
    let (lv2_path, _) = lv2_bundle(&cfg, &dir);
    let input = dir.join("in.wav");
    float_wav(&input, 4_800);
    let direct = dir.join("direct.wav");
    run_ok(
        Command::new("applyplugin")
            .args([&input, &direct])
            .args([&format!("{LADSPA}/cmt.so"), "lpf", "1000"].map(PathBuf::from)),
    );
    let want = samples(&direct);
    let dry: Vec<i16> = float_samples(&input)
        .iter()
        .map(|&x| (x * 32_768.0) as i16)
        .collect();
    assert_ne!(want, dry, "the filter changes the signal");
    // The bundle stays valid when only the window changes (same ports).
    for window in [0u8, 1] {
        let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", window));
        let proxied = dir.join(format!("proxied{window}.wav"));
        let out = lv2_tool(
            "lv2apply",
            &lv2_path,
            &cfg,
            &dir.join("cache"),
            &[
                "-i",
                input.to_str().unwrap(),
                "-o",
                proxied.to_str().unwrap(),
                "-c",
                "cutoff_frequency_hz",
                "1000",
                "urn:firmtime:proxy:remote_lpf",
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let got: Vec<i16> = float_samples(&proxied)
            .iter()
            .map(|&y| ((f64::from(y) * 2_147_483_648.0).trunc() as i64 >> 16) as i16)
            .collect();
        assert_eq!(got.len(), 4_800);
        // At window 1 each one-frame run gets the previous frame's result
        // (latency 1, which lv2apply does not compensate); the first is 0.
        let shift = usize::from(window);
        let differ = got[shift..]
            .iter()
            .zip(&want)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            differ, 0,
            "window {window}: samples differing from applyplugin's, shifted by {shift}"
        );
        if window == 1 {
            assert_eq!(
                got[0], 0,
                "before the first result: zeros (the stream's start)"
            );
        }
    }
}

/// lv2ls and lv2info (lilv) read the bundle: both plugins, the proxy's
/// ports with symbols, ranges and defaults, and its latency port. The LV2
/// waste_time runs in lv2apply and, at fraction 0, passes audio through.
/// A bundle written for other ports than the plugin has now (the worker
/// went away and nothing was cached: a 3-port placeholder) gives an
/// instance that passes audio through with the bundle's ports, and one
/// line saying to write the bundle again.
#[test]
fn lilv_reads_the_bundle_and_a_stale_bundle_passes_audio_through() {
    let t = "lilv_reads_the_bundle_and_a_stale_bundle_passes_audio_through";
    if !have(
        t,
        &[
            "/usr/bin/lv2ls",
            "/usr/bin/lv2info",
            "/usr/bin/lv2apply",
            "cmt.so",
        ],
    ) {
        return;
    }
    let dir = tmp("lv2info");
    let key = key_file(&dir);
    let (mut w, addr) = loopback_worker(&key);
    let cfg = write_config(&dir, &entry(&addr, Some(&key), "lpf", 0));
    let (lv2_path, listed) = lv2_bundle(&cfg, &dir);
    assert_eq!(
        listed,
        "urn:firmtime:proxy:remote_lpf  urn_firmtime_proxy_remote_lpf.ttl\n\
         urn:firmtime:waste_time  urn_firmtime_waste_time.ttl\n"
    );
    let cache = dir.join("cache");
    let out = lv2_tool("lv2ls", &lv2_path, &cfg, &cache, &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "urn:firmtime:proxy:remote_lpf\nurn:firmtime:waste_time\n"
    );
    let out = lv2_tool(
        "lv2info",
        &lv2_path,
        &cfg,
        &cache,
        &["urn:firmtime:proxy:remote_lpf"],
    );
    assert!(out.status.success(), "{out:?}");
    let info = String::from_utf8_lossy(&out.stdout);
    for want in [
        "Name:              remote: Low Pass Filter (One Pole)\n",
        "Has latency:       yes, reported by port 3\n",
        "Symbol:      cutoff_frequency_hz\n\t\tName:        Cutoff Frequency (Hz)\n\t\t\
         Minimum:     0.000000\n\t\tMaximum:     0.500000\n\t\tDefault:     440.000000\n",
        "Symbol:      input\n",
        "Symbol:      output\n",
        "Symbol:      latency\n\t\tName:        latency\n\t\t\
         Designation: http://lv2plug.in/ns/lv2core#latency\n",
        "Properties:  http://lv2plug.in/ns/lv2core#reportsLatency\n",
    ] {
        assert!(info.contains(want), "{want:?} missing from:\n{info}");
    }
    assert_eq!(info.matches("\tPort ").count(), 4, "{info}");
    let out = lv2_tool(
        "lv2info",
        &lv2_path,
        &cfg,
        &cache,
        &["urn:firmtime:waste_time"],
    );
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("Has latency:       no\n"), "{info}");
    assert_eq!(info.matches("\tPort ").count(), 6, "{info}");
    // waste_time, local, fraction 0: a pass-through.
    let input = dir.join("in.wav");
    float_wav(&input, 2_000);
    let copied = dir.join("copied.wav");
    let out = lv2_tool(
        "lv2apply",
        &lv2_path,
        &cfg,
        &cache,
        &[
            "-i",
            input.to_str().unwrap(),
            "-o",
            copied.to_str().unwrap(),
            "-c",
            "start_fraction",
            "0",
            "urn:firmtime:waste_time",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(float_samples(&copied), float_samples(&input));
    // Worker away and no cache: the proxy presents a placeholder (3 ports).
    w.kill(libc::SIGKILL);
    let stale = dir.join("stale.wav");
    let out = lv2_tool(
        "lv2apply",
        &lv2_path,
        &cfg,
        &dir.join("no-cache"),
        &[
            "-i",
            input.to_str().unwrap(),
            "-o",
            stale.to_str().unwrap(),
            "urn:firmtime:proxy:remote_lpf",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("declares ports"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("urn:firmtime:proxy:remote_lpf: ")
            && lines[0].contains(
                "declares ports [control in, audio in, audio out, control out] but the plugin \
                 now has [audio in, audio out, control out]"
            )
            && lines[0].contains("passing audio through: write the bundle again"),
        "{}",
        lines[0]
    );
    assert_eq!(float_samples(&stale), float_samples(&input));
}

/// A LADSPA library without `lv2_descriptor` (cmt) gets no bundle: one
/// error naming it, exit 1, nothing written.
#[test]
fn lv2_bundle_refuses_a_library_without_lv2_descriptor() {
    let t = "lv2_bundle_refuses_a_library_without_lv2_descriptor";
    if !have(t, &["cmt.so"]) {
        return;
    }
    let scratch = tmp("lv2refuse");
    let dir = scratch.join("firmtime.lv2");
    let out = Command::new(EXE)
        .args(["ladspa", "lv2-bundle"])
        .arg(&dir)
        .arg(format!("{LADSPA}/cmt.so"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{LADSPA}/cmt.so exports no lv2_descriptor"))
            && err.contains("not an LV2 build of a firmtime plugin"),
        "{err}"
    );
    assert!(!dir.exists());
}

/// An offline render whose worker dies half-way fails (exit 75) instead of
/// finishing with the rest of the file unprocessed. The worker serves
/// waste_time, which busy-waits half of each block's duration, so the
/// render lasts long enough (3 s of audio: about 1.5 s) to kill it midway.
#[test]
fn an_offline_render_whose_worker_dies_midway_fails() {
    let dir = tmp("midway");
    let (_, waste) = plugin_libraries();
    let lad = dir.join("lad");
    std::fs::create_dir_all(&lad).unwrap();
    std::fs::copy(&waste, lad.join("waste_time.so")).unwrap();
    let key = key_file(&dir);
    let addr = format!("127.0.0.1:{}", free_port());
    let mut w = WorkerProc::start(&[], &addr, Some(&key), &[lad.to_str().unwrap()]);
    let body = format!(
        "{}offline_wait_ms = 3000\n",
        entry(&addr, Some(&key), "waste_time", 0).replace("deadline_ms = 5000\n", "")
    );
    let cfg = write_config(&dir, &body);
    let input = dir.join("in.wav");
    wav(&input, 3 * 48_000);
    let output = dir.join("out.wav");
    let mut c = Command::new(EXE);
    c.args(["ladspa", "apply"])
        .arg(&input)
        .arg(&output)
        .args(["remote_waste_time", "0.5"])
        .env("LADSPA_PATH", proxy_dir())
        .env("FIRMTIME_PROXY_CONFIG", &cfg)
        .env("FIRMTIME_PROXY_CACHE", dir.join("cache"))
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    w.kill(libc::SIGKILL);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    let failed: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("offline render failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{err}");
    assert!(
        failed[0].contains(&format!("the worker {addr} went away during the render"))
            || failed[0].contains(&format!("no result from the worker {addr} within 3000 ms")),
        "{}",
        failed[0]
    );
}
