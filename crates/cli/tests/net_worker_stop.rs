//! `firmtime net worker` stops on SIGTERM within 1 s in every state
//! (issue 20 item 2): idle, serving sessions (one of them holding its block
//! for 4 s), and with a plugin run that overruns its budget (before and
//! after the watchdog cut it off). Each test prints the time it measured.

mod common;

use common::{spawn_ready, tmp_path, TmpPath, EXE};
use firmtime_net::remote::{self, PluginSetup};
use firmtime_net::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const KEY: [u8; 32] = *b"net worker signal test key, 32 b";

/// The key in a file of its own (tests run in parallel), removed on drop.
fn key_file() -> TmpPath {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let p = TmpPath::new(&format!(
        "net-worker-key-{}",
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&p, KEY).unwrap();
    p
}

/// Removes the plugin directory when the test process exits (it is shared
/// by the tests, so no test's drop may remove it).
extern "C" fn remove_waste_time_dir() {
    let _ = std::fs::remove_dir_all(tmp_path("net-worker-plugins"));
}

fn key() -> Option<Key> {
    Some(Key::new(&KEY).unwrap())
}

/// Builds the repo's waste_time plugin once, copied into a directory of its own.
fn waste_time_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "building firmtime-plugin-waste-time");
        let lib = Path::new(EXE)
            .parent()
            .unwrap()
            .join("libfirmtime_waste_time.so");
        let dir = tmp_path("net-worker-plugins");
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: registers a plain function with no preconditions.
        unsafe { libc::atexit(remove_waste_time_dir) };
        std::fs::copy(&lib, dir.join("libfirmtime_waste_time.so")).unwrap();
        dir
    })
    .clone()
}

fn start_worker(plugin_dir: Option<&Path>) -> (Child, SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let key = key_file();
    let mut cmd = Command::new(EXE);
    cmd.args([
        "net",
        "worker",
        "--listen",
        &addr.to_string(),
        "--priority",
        "other",
    ])
    .arg("--key")
    .arg(&key);
    if let Some(d) = plugin_dir {
        cmd.arg("--plugin-dir").arg(d);
    }
    // Read at start-up: the file may go once the worker is ready.
    (spawn_ready(&mut cmd), addr)
}

/// Sends SIGTERM and returns how long the worker took to exit (status 0).
fn sigterm(mut child: Child) -> Duration {
    let t0 = Instant::now();
    // SAFETY: kill with a valid signal on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "the worker exited with {st}");
            return t0.elapsed();
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the worker ignored SIGTERM for 10 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn check(state: &str, took: Duration) {
    println!(
        "SIGTERM to exit, {state}: {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    assert!(took < Duration::from_secs(1), "{state}: {took:?}");
}

#[test]
fn sigterm_ends_an_idle_worker_within_a_second() {
    let (w, _) = start_worker(None);
    check("idle", sigterm(w));
}

/// Regression: a session holding its block (here 4 s, the longest a setup
/// allows: period 1 s × work 4, sleep) put the data thread to sleep and
/// SIGTERM was not obeyed until it woke.
#[test]
fn sigterm_ends_a_worker_serving_sessions_within_a_second() {
    let (w, addr) = start_worker(None);
    let mut held = SessionConfig::new(addr, 1_000_000_000);
    held.key = key();
    held.work = Work {
        fraction: 4.0,
        mode: WorkMode::Sleep,
    };
    let mut set = BlockSet::new();
    set.add::<f32>(Direction::ToWorker, 64).unwrap();
    set.add::<f32>(Direction::FromWorker, 64).unwrap();
    let (mut hm, _hl) = connect(held, BlockSet::from_layout(set.layout()).unwrap()).unwrap();
    hm.process(Deadline::After(1_000_000));
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let streaming = std::thread::spawn(move || {
        let mut cfg = SessionConfig::new(addr, 1_000_000);
        cfg.key = key();
        let (mut m, _link) = connect(cfg, set).unwrap();
        let mut delivered = 0u64;
        while !s.load(Ordering::Relaxed) {
            if m.process(Deadline::After(1_000_000)).outcome == Outcome::Delivered {
                delivered += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        delivered
    });
    std::thread::sleep(Duration::from_millis(300));
    let took = sigterm(w);
    stop.store(true, Ordering::Relaxed);
    assert!(
        streaming.join().unwrap() > 0,
        "the streaming session was served"
    );
    check("two sessions, one holding its block for 4 s", took);
}

/// waste_time at 1 kHz with 8192-frame periods, start fraction 1: one run
/// spins 8.2 s; the watchdog cuts it off at its 500 ms budget.
fn overrunning_session(addr: SocketAddr) -> (Master, Link) {
    let desc = remote::describe(addr, key(), "waste_time", Duration::from_secs(2)).unwrap();
    let mut cfg = SessionConfig::new(addr, 1_000_000_000);
    cfg.key = key();
    cfg.plugin = Some(PluginSetup {
        plugin: "waste_time".into(),
        sample_rate: 1_000,
        max_frames: 8192,
        ports: desc.ports.clone(),
    });
    let (mut set, ids) = desc.blocks(8192);
    set.get_mut(ids.frames_in.unwrap())[0] = 8192;
    set.get_mut(ids.control_in.unwrap())[0] = 1.0;
    let (mut m, link) = connect(cfg, set).unwrap();
    m.process(Deadline::After(1_000_000));
    (m, link)
}

#[test]
fn sigterm_ends_a_worker_whose_plugin_overruns_within_a_second() {
    for (state, cut) in [
        ("plugin run 300 ms into 8.2 s (before the cut-off)", 0),
        ("plugin run cut off, its thread still spinning", 1),
    ] {
        let (w, addr) = start_worker(Some(&waste_time_dir()));
        let _session = overrunning_session(addr);
        std::thread::sleep(Duration::from_millis(300));
        let stats = || control::query_stats(addr, key(), Duration::from_secs(2)).unwrap();
        let mut r = stats();
        // The budget is 500 ms of CPU; a run is cut at 2 s of wall time in any case.
        let end = Instant::now() + Duration::from_secs(3);
        while r.cut_off < cut && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
            r = stats();
        }
        assert_eq!(r.cut_off, cut, "{state}: {r:?}");
        check(state, sigterm(w));
    }
}
