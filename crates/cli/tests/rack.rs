//! `firmtime rack`: rack-file errors, a local chain on a dummy JACK server,
//! and remote plugin stages on a real `firmtime net worker --plugin-dir`
//! child on loopback, driven through the engine over plain buffers (no
//! JACK) under `assert_no_alloc`.

mod common;

use assert_no_alloc::assert_no_alloc;
use firmtime_ladspa::Scan;
use firmtime_rack::{build, Engine, ErrorKind, RackFile};
use firmtime_rt::clock::monotonic_ns;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{assert_exit, firmtime, read_json, spawn_ready, TmpPath, EXE};

#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

/// A file `name` in the temp dir, unique to this process, holding `bytes`,
/// readable by its owner only (key files follow the rule for secrets);
/// removed on drop, also when the test fails.
fn tmp(name: &str, bytes: impl AsRef<[u8]>) -> TmpPath {
    use std::os::unix::fs::PermissionsExt;
    let p = TmpPath::new(&format!("rack-{name}"));
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
fn a_bad_rack_file_is_a_usage_error_with_line_and_column() {
    let p = tmp(
        "bad.toml",
        "[[stage]]\nplugin = \"amp_mono\"\nremote = { worker = \"h:1\", window = 5 }\n",
    );
    let out = firmtime(&["rack", p.to_str().unwrap()]);
    assert_exit(
        &out,
        2,
        &[&format!("{}:3:37: window 5 is out of range", p.display())],
    );
}

#[test]
fn a_local_chain_runs_on_a_dummy_server() {
    if !std::path::Path::new("/usr/lib/ladspa/amp.so").exists()
        || Command::new("jackd").arg("--version").output().is_err()
    {
        firmtime_rt::testing::skip("needs ladspa-sdk (/usr/lib/ladspa/amp.so) and jackd2");
        return;
    }
    let p = tmp(
        "amp.toml",
        "[[stage]]\nname = \"g\"\nplugin = \"amp:amp_mono\"\ncontrols = { Gain = 0.5 }\n",
    );
    let json = TmpPath::new("rack-chain.json");
    let out = firmtime(&[
        "rack",
        p.to_str().unwrap(),
        "--jack-dummy",
        "--period-frames",
        "512",
        "--duration",
        "500ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_exit(&out, 0, &[]);
    let v = read_json(&json);
    for k in [
        "firmtime_version",
        "command",
        "rack_file",
        "xruns",
        "dsp_load_percent",
        "stats",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let cycles = v["stats"]["cycles"].as_u64().unwrap();
    assert!(cycles > 0);
    assert_eq!(v["stats"]["stages"][0]["name"], "g");
    assert_eq!(v["stats"]["stages"][0]["runs"].as_u64().unwrap(), cycles);
}

const LADSPA: &str = "/usr/lib/ladspa";

/// Runs `firmtime rack FILE --jack-dummy … ARGS` for 1.5 s with `input` on
/// its (piped) stdin; returns its stderr and its JSON's `controls_applied`.
fn rack_with_stdin(file: &Path, input: &str, args: &[&str]) -> (String, u64) {
    use std::io::Write;
    let json = TmpPath::new(&format!("rack-stdin-{}.json", args.len()));
    let mut child = Command::new(EXE)
        .arg("rack")
        .arg(file)
        .args([
            "--jack-dummy",
            "--period-frames",
            "512",
            "--duration",
            "1500ms",
        ])
        .args(["--status-every", "0s", "--json"])
        .arg(&json)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let v = read_json(&json);
    (err, v["stats"]["controls_applied"].as_u64().unwrap())
}

/// Regression (issue 28 item 5): with stdin not a terminal, `rack` parsed
/// whatever came on it (libjack's "Cannot connect to server socket…") as
/// control commands. Now a pipe is read only with --commands-from-stdin.
#[test]
fn a_piped_stdin_is_read_for_commands_only_when_asked() {
    if !have_amp("rack stdin") || !common::jack_installed("rack stdin") {
        return;
    }
    let p = tmp(
        "stdin.toml",
        "[[stage]]\nname = \"g\"\nplugin = \"amp:amp_mono\"\ncontrols = { Gain = 0.5 }\n",
    );
    let input = "Cannot connect to server socket err = No such file or directory\n\
                 g.Gain = 0.25\n";
    let (err, applied) = rack_with_stdin(&p, input, &[]);
    assert_eq!(applied, 0, "{err}");
    assert!(!err.contains("set g.Gain"), "{err}");
    assert!(!err.contains("Cannot connect to server socket"), "{err}");
    assert!(
        err.contains("stdin is not a terminal: no control commands are read from it"),
        "{err}"
    );
    let (err, applied) = rack_with_stdin(&p, input, &["--commands-from-stdin"]);
    assert_eq!(applied, 1, "{err}");
    assert!(err.contains("set g.Gain = 0.25"), "{err}");
}

/// A `firmtime net worker --key K --plugin-dir /usr/lib/ladspa` child, killed on drop.
struct Worker(Child);

impl Worker {
    fn start(listen: &str, key: &Path) -> Self {
        Worker(spawn_ready(
            Command::new(EXE)
                .args(["net", "worker", "--listen", listen, "--priority", "other"])
                .arg("--key")
                .arg(key)
                .args(["--plugin-dir", LADSPA])
                .stdin(Stdio::null()),
        ))
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn have_amp(test: &str) -> bool {
    let ok = Path::new(LADSPA).join("amp.so").exists();
    if !ok {
        firmtime_rt::testing::skip(format!(
            "{test}: {LADSPA}/amp.so missing (apt install ladspa-sdk)"
        ));
    }
    ok
}

/// The error of building `file` (it must fail).
fn build_err(file: &RackFile, scan: &Scan) -> firmtime_rack::Error {
    build(file, scan, RATE, BLOCK).unwrap_err()
}

fn remote_rack(worker: &str, key: &Path, label: &str, window: u8) -> RackFile {
    let text = format!(
        "deadline = 1.0\n[[stage]]\nname = \"far\"\nplugin = \"{label}\"\ncontrols = {{ Gain = 0.5 }}\n\
         remote = {{ worker = \"{worker}\", key_file = \"{}\", window = {window} }}\n",
        key.display()
    );
    RackFile::parse(&text, "remote.toml").unwrap()
}

/// A worker on a free loopback port with a fresh key, and the scan of
/// [`LADSPA`]; `None` (skipped, with the reason) without amp.so. The key
/// file goes when it drops.
struct Remote {
    key: TmpPath,
    addr: String,
    worker: Worker,
    scan: Scan,
}

impl Remote {
    fn start(test: &str, key_name: &str) -> Option<Remote> {
        if !have_amp(test) {
            return None;
        }
        let key = tmp(key_name, b"0123456789abcdef0123456789abcdef");
        let addr = free_addr();
        let worker = Worker::start(&addr, &key);
        Some(Remote {
            key,
            addr,
            worker,
            scan: Scan::dirs(&[PathBuf::from(LADSPA)]),
        })
    }
}

/// 64 frames at 4 kHz: a 16 ms period, ample for loopback.
const RATE: u32 = 4_000;
const BLOCK: usize = 64;

fn signal(period: usize) -> Vec<f32> {
    (0..BLOCK)
        .map(|i| ((period * BLOCK + i) as f32 * 0.37).sin())
        .collect()
}

/// One period through `engine` (under assert_no_alloc); returns the output.
fn run(engine: &mut Engine, input: &[f32]) -> Vec<f32> {
    engine.input_mut(0).copy_from_slice(input);
    assert_no_alloc(|| engine.process(BLOCK, monotonic_ns()));
    engine.output(0).to_vec()
}

#[test]
fn a_remote_plugin_stage_equals_the_local_plugin_delayed_by_its_window() {
    let Some(r) = Remote::start("remote plugin stage", "good.key") else {
        return;
    };
    let (k, addr, scan) = (&r.key, &r.addr, &r.scan);
    let local = RackFile::parse(
        "[[stage]]\nname = \"g\"\nplugin = \"amp_mono\"\ncontrols = { Gain = 0.5 }\n",
        "local.toml",
    )
    .unwrap();
    let (mut reference, mut ref_control) = build(&local, scan, RATE, BLOCK).unwrap();
    let (mut engine, mut control) =
        build(&remote_rack(addr, k, "amp_mono", 1), scan, RATE, BLOCK).unwrap();
    let info = &control.stages()[0];
    assert!(
        info.description.starts_with("remote amp_mono @ 127.0.0.1:"),
        "{info:?}"
    );
    assert!(info.description.ends_with("window 1"), "{info:?}");
    assert_eq!(info.controls, vec![("Gain".to_string(), 0, 0.5)]);
    assert_eq!(info.latency_frames, BLOCK as u64);

    let periods = 40;
    let mut want_local: Vec<Vec<f32>> = Vec::new();
    let mut delivered = 0;
    let mut last_late = 0;
    for n in 0..periods {
        if n == periods / 2 {
            // A control change reaches the worker with the next period's input.
            control.apply_line("far.Gain = 2").unwrap();
            ref_control.apply_line("g.Gain = 2").unwrap();
        }
        let x = signal(n);
        want_local.push(run(&mut reference, &x));
        let y = run(&mut engine, &x);
        let late = control.stats().stages[0].late;
        if n == 0 {
            // Priming: no result can exist yet, the input passes through.
            assert_eq!(y, x, "period 0");
            assert_eq!(late, 0);
        } else if late == last_late {
            // Window 1: the local plugin's output of the period before, bit for bit.
            assert_eq!(y, want_local[n - 1], "period {n}");
            delivered += 1;
        } else {
            assert_eq!(y, x, "late period {n} is not dry");
        }
        last_late = late;
    }
    assert!(delivered > 0, "no result came back: {:?}", control.stats());
    let st = control.stats();
    assert_eq!(st.stages[0].runs, periods as u64);
    assert_eq!(st.stages[0].latency_frames, BLOCK as u64);
    assert_eq!(st.controls_applied, 1);
    drop(engine);
    control.close();
}

#[test]
fn a_wrong_key_or_an_unknown_label_is_a_clear_build_error() {
    let Some(r) = Remote::start("remote build errors", "ok.key") else {
        return;
    };
    let (k, addr, scan) = (&r.key, &r.addr, &r.scan);
    let wrong = tmp("wrong.key", b"fedcba9876543210fedcba9876543210");

    let e = build_err(&remote_rack(addr, &wrong, "amp_mono", 1), scan);
    assert_eq!(e.kind(), ErrorKind::Remote);
    let m = e.message();
    assert!(
        m.starts_with(&format!(
            "remote.toml:2:1: stage \"far\": plugin amp_mono on worker {addr}: "
        )),
        "{m}"
    );
    assert!(m.to_lowercase().contains("key"), "{m}");

    let e = build_err(&remote_rack(addr, k, "no_such_plugin", 1), scan);
    assert_eq!(e.kind(), ErrorKind::Remote);
    assert!(
        e.message()
            .contains("this worker has no plugin 'no_such_plugin'"),
        "{e}"
    );

    // A control the remote plugin does not have, checked against its description.
    let text = format!(
        "[[stage]]\nplugin = \"amp_mono\"\ncontrols = {{ Volume = 1 }}\n\
         remote = {{ worker = \"{addr}\", key_file = \"{}\" }}\n",
        k.display()
    );
    let e = build_err(&RackFile::parse(&text, "r.toml").unwrap(), scan);
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert!(
        e.message()
            .starts_with("r.toml:1:1: plugin amp_mono has no control input \"Volume\""),
        "{e}"
    );

    // Regression (issue 28 item 6): a key_file others may write was
    // accepted silently; one others may read is now said.
    use std::os::unix::fs::PermissionsExt;
    let set = |mode| std::fs::set_permissions(k, std::fs::Permissions::from_mode(mode)).unwrap();
    set(0o666);
    let e = build_err(&remote_rack(addr, k, "amp_mono", 1), scan);
    assert_eq!(e.kind(), ErrorKind::Remote);
    assert!(
        e.message().starts_with(&format!(
            "remote.toml:2:1: key file {}: its group and every user may write it (mode 0666)",
            k.display()
        )),
        "{e}"
    );
    set(0o644);
    let (engine, control) = build(&remote_rack(addr, k, "amp_mono", 1), scan, RATE, BLOCK)
        .expect("a key others may read is accepted");
    assert_eq!(control.warnings().len(), 1, "{:?}", control.warnings());
    assert!(
        control.warnings()[0].starts_with(&format!(
            "remote.toml:2:1: key file {} is readable by its group and every user (mode 0644)",
            k.display()
        )),
        "{:?}",
        control.warnings()
    );
    drop(engine);
    control.close();
    set(0o600);
    let (engine, control) = build(&remote_rack(addr, k, "amp_mono", 1), scan, RATE, BLOCK)
        .expect("a private key is accepted");
    assert!(control.warnings().is_empty(), "{:?}", control.warnings());
    drop(engine);
    control.close();
}

#[test]
fn a_killed_worker_turns_the_stage_dry_and_counts_late_periods() {
    let Some(mut r) = Remote::start("killed worker", "kill.key") else {
        return;
    };
    let (mut engine, control) = build(
        &remote_rack(&r.addr, &r.key, "amp_mono", 0),
        &r.scan,
        RATE,
        BLOCK,
    )
    .unwrap();
    let mut delivered = 0;
    for n in 0..10 {
        let x = signal(n);
        let y = run(&mut engine, &x);
        let half: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
        assert!(y == half || y == x, "period {n}: neither wet nor dry");
        delivered += usize::from(y == half);
    }
    assert!(delivered > 0, "no result came back: {:?}", control.stats());
    let late_before = control.stats().stages[0].late;
    r.worker.kill();
    let after = 30;
    for n in 10..10 + after {
        let x = signal(n);
        // Window 0 and no worker: every period passes its input through.
        assert_eq!(run(&mut engine, &x), x, "period {n}");
    }
    let st = control.stats();
    assert_eq!(st.stages[0].late - late_before, after as u64, "{st:?}");
    assert_eq!(st.stages[0].runs, 10 + after as u64);
    drop(engine);
    control.close();
}

/// Regression (issue 32 item 4): a remote *work* stage whose worker was
/// known to be away still called the master every cycle and waited until
/// the deadline (90 % of the period by default: with a worker frozen, 5
/// xruns in 3 s at 128 frames); only plugin stages skipped. Now every
/// remote stage passes its input through without waiting while the
/// session's heartbeat says the worker is away, and counts it `away` (a
/// part of `late`).
#[test]
fn a_work_stage_whose_worker_is_away_passes_through_and_counts_it_away() {
    let mut w = common::NetWorker::start();
    let text = format!(
        "deadline = 1.0\n[[stage]]\nname = \"far\"\nwork = {{ fraction = 0.0, mode = \"none\" }}\n\
         channels = 1\nremote = {{ worker = \"{}\", window = 0 }}\n",
        w.1
    );
    let file = RackFile::parse(&text, "work.toml").unwrap();
    let (mut engine, control) = build(&file, &Scan::dirs(&[]), RATE, BLOCK).unwrap();
    for n in 0..10 {
        let x = signal(n);
        // The worker's copy, or (late) the dry input: the same samples.
        assert_eq!(run(&mut engine, &x), x, "period {n}");
    }
    let st = control.stats();
    assert_eq!(st.stages[0].away, 0, "{st:?}");
    assert!(st.stages[0].late < 10, "no result came back: {st:?}");
    let _ = w.0.kill();
    let _ = w.0.wait();
    // The heartbeat notices within its timeout (500 ms); until then periods are late.
    let mut n = 10;
    while control.stats().stages[0].away == 0 {
        assert!(
            n < 10 + 400,
            "the stage never saw the worker away: {:?}",
            control.stats()
        );
        let x = signal(n);
        assert_eq!(run(&mut engine, &x), x, "period {n}");
        std::thread::sleep(std::time::Duration::from_millis(10));
        n += 1;
    }
    let before = control.stats().stages[0].clone();
    let more = 25;
    for k in 0..more {
        let x = signal(n + k);
        assert_eq!(run(&mut engine, &x), x, "period {}", n + k);
    }
    let after = control.stats().stages[0].clone();
    assert_eq!(after.away - before.away, more as u64, "{after:?}");
    assert_eq!(after.late - before.late, more as u64, "{after:?}");
    assert_eq!(after.runs, (n + more) as u64);
    assert!(after.away <= after.late, "{after:?}");
    drop(engine);
    control.close();
}
