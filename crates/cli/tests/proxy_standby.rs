//! The LADSPA proxy with a hot standby (`standby = "host:port"` in its
//! config entry, issue 32 item 2), in offline hosts on loopback with two
//! keyed `firmtime net worker`s serving /usr/lib/ladspa: a primary killed
//! before the render (the standby describes the plugin and serves alone:
//! applyplugin's output bit-exact with the local plugin's), a primary
//! killed in the middle of a render (the standby, fed every block, finishes
//! it exactly instead of the render failing), and an unreachable standby
//! named in the render's failure. The proxy library is built and copied as
//! in proxy.rs.

mod common;

use common::{spawn_ready, EXE};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

const LADSPA: &str = "/usr/lib/ladspa";
static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory for one test, removed when it ends.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!(
        "ftproxy-sb-{}-{}-{name}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// Builds the proxy (and waste_time) once; returns the proxy's LADSPA
/// directory and waste_time's library.
fn libraries() -> (&'static Path, PathBuf) {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "building firmtime-plugin-waste-time");
        common::install_proxy(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftproxy-sb-lib"))
    });
    let waste = Path::new(EXE)
        .parent()
        .unwrap()
        .join("libfirmtime_waste_time.so");
    (dir, waste)
}

fn have(files: &[&str]) -> bool {
    let missing: Vec<&&str> = files
        .iter()
        .filter(|f| !Path::new(f).exists() && !Path::new(LADSPA).join(f).exists())
        .collect();
    if !missing.is_empty() {
        firmtime_rt::testing::skip(format!(
            "{missing:?} not installed (scripts/setup.sh installs them)"
        ));
    }
    missing.is_empty()
}

fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let k = dir.join("net.key");
    std::fs::write(&k, b"0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    k
}

fn free_addr() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// A keyed `firmtime net worker` child on a free loopback port serving
/// `dir`, killed (SIGKILL) on drop.
struct Worker {
    child: Child,
    addr: String,
    /// Where the waste_time instances it runs write their logs: the test's
    /// scratch directory (beside `key`), not /tmp.
    waste_log: PathBuf,
}

impl Worker {
    fn start(key: &Path, dir: &str) -> Self {
        let addr = free_addr();
        let waste_log = key.with_file_name(format!(
            "waste_time-{}.csv",
            addr.rsplit(':').next().unwrap()
        ));
        let mut c = Command::new(EXE);
        c.args(["net", "worker", "--listen", &addr, "--priority", "other"])
            .arg("--key")
            .arg(key)
            .args(["--plugin-dir", dir])
            .env("FIRMTIME_WASTE_LOG", &waste_log)
            .stdin(Stdio::null());
        Worker {
            child: spawn_ready(&mut c),
            addr,
            waste_log,
        }
    }

    /// SIGKILL (what `Child::kill` sends), and reaped.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config(
    dir: &Path,
    worker: &str,
    standby: &str,
    key: &Path,
    label: &str,
    extra: &str,
) -> PathBuf {
    let p = dir.join("proxy.toml");
    std::fs::write(
        &p,
        format!(
            "[[remote]]\nworker = \"{worker}\"\nstandby = \"{standby}\"\nkey_file = \"{}\"\n\
             label = \"{label}\"\nwindow = 0\nconnect_timeout_ms = 1000\n{extra}",
            key.display()
        ),
    )
    .unwrap();
    p
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

/// `cmd` with the proxy's directory, `cfg` and a cache in `dir`.
fn with_proxy<'a>(cmd: &'a mut Command, lad: &Path, cfg: &Path, dir: &Path) -> &'a mut Command {
    cmd.env("LADSPA_PATH", lad)
        .env("FIRMTIME_PROXY_CONFIG", cfg)
        .env("FIRMTIME_PROXY_CACHE", dir.join("cache"))
}

fn applyplugin(input: &Path, output: &Path, so: &Path, label: &str) -> Command {
    let mut c = Command::new("applyplugin");
    c.arg(input)
        .arg(output)
        .arg(so)
        .args([label, "1000"])
        .stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn applyplugin_is_bit_exact_from_the_standby_when_the_primary_was_killed_before_the_render() {
    if !have(&["/usr/bin/applyplugin", "cmt.so"]) {
        return;
    }
    let (lad, _) = libraries();
    let t = tmp("before");
    let dir = t.0.as_path();
    let key = key_file(dir);
    let input = dir.join("in.wav");
    // Not a multiple of applyplugin's 2048-frame blocks.
    wav(&input, 48_000 + 123);
    let direct = dir.join("direct.wav");
    let out = applyplugin(&input, &direct, &Path::new(LADSPA).join("cmt.so"), "lpf")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut primary = Worker::start(&key, LADSPA);
    let standby = Worker::start(&key, LADSPA);
    primary.kill();
    let cfg = config(dir, &primary.addr, &standby.addr, &key, "lpf", "");
    let proxied = dir.join("proxied.wav");
    let so = lad.join("firmtime_proxy.so");
    let out = with_proxy(
        &mut applyplugin(&input, &proxied, &so, "remote_lpf"),
        lad,
        &cfg,
        dir,
    )
    .output()
    .unwrap();
    let err = text(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.contains(&format!("its standby {} serves alone", standby.addr)),
        "{err}"
    );
    assert!(!err.contains("NOT processed"), "{err}");
    assert_eq!(
        samples(&proxied),
        samples(&direct),
        "the standby's render differs from the local plugin's"
    );
}

/// Periods the worker's current sessions processed (`net stats`).
fn periods(worker: &str, key: &Path) -> u64 {
    let out = Command::new(EXE)
        .args(["net", "stats", "--worker", worker, "--key"])
        .arg(key)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["periods"].as_u64().unwrap()
}

/// waste_time copies its input and busy-waits half of each block's
/// duration on the worker, so a 3 s file takes about 1.5 s: long enough to
/// kill the primary in the middle (once `net stats` shows it processing).
#[test]
fn an_offline_render_whose_primary_dies_midway_is_finished_exactly_by_its_standby() {
    let (lad, waste) = libraries();
    let t = tmp("midway");
    let dir = t.0.as_path();
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(&waste, plugins.join("waste_time.so")).unwrap();
    let key = key_file(dir);
    let mut primary = Worker::start(&key, plugins.to_str().unwrap());
    let standby = Worker::start(&key, plugins.to_str().unwrap());
    let cfg = config(
        dir,
        &primary.addr,
        &standby.addr,
        &key,
        "waste_time",
        "offline_wait_ms = 3000\n",
    );
    let input = dir.join("in.wav");
    wav(&input, 3 * 48_000);
    let output = dir.join("out.wav");
    let mut c = Command::new(EXE);
    c.args(["ladspa", "apply"])
        .arg(&input)
        .arg(&output)
        .args(["remote_waste_time", "0.5"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = with_proxy(&mut c, lad, &cfg, dir).spawn().unwrap();
    // Kill once the render is under way on the primary (a few periods
    // processed), whatever the machine's load.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while periods(&primary.addr, &key) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the render never reached the primary"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    primary.kill();
    let out = child.wait_with_output().unwrap();
    let err = text(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("offline render failed"), "{err}");
    // The proxy says the switch and, at the end, what the standby served.
    assert!(
        err.contains("1 takeover(s) from the worker"),
        "no takeover reported: {err}"
    );
    assert_eq!(
        samples(&output),
        samples(&input),
        "waste_time copies: the render must be its input"
    );
    // The standby lets its session go when the render's connection closes:
    // its waste_time instance writes its log then, into the scratch
    // directory (removed with it), none into /tmp.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !standby.waste_log.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby never wrote {}",
            standby.waste_log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let prefix = format!("waste_time-{}-", standby.child.id());
    let in_tmp: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(in_tmp.is_empty(), "{in_tmp:?}");
}

#[test]
fn an_offline_render_names_a_standby_that_cannot_be_reached() {
    if !have(&["/usr/bin/applyplugin", "cmt.so"]) {
        return;
    }
    let (lad, _) = libraries();
    let t = tmp("nostandby");
    let dir = t.0.as_path();
    let key = key_file(dir);
    let primary = Worker::start(&key, LADSPA);
    // Nothing listens there: the port was free a moment ago.
    let nobody = free_addr();
    let cfg = config(
        dir,
        &primary.addr,
        &nobody,
        &key,
        "lpf",
        "offline_wait_ms = 1500\n",
    );
    let input = dir.join("in.wav");
    wav(&input, 4096);
    let so = lad.join("firmtime_proxy.so");
    let out = with_proxy(
        &mut applyplugin(&input, &dir.join("out.wav"), &so, "remote_lpf"),
        lad,
        &cfg,
        dir,
    )
    .output()
    .unwrap();
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("standby {nobody} cannot serve")),
        "{err}"
    );
    assert!(err.contains("offline render failed"), "{err}");
}
