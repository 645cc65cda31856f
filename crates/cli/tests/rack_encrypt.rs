//! `rack` remote stages with an encrypted data plane (`encrypt = true`,
//! issue 32 item 3): bit-exact through a worker that serves only encrypted
//! sessions (`net worker --key K --encrypt`, which refuses every other
//! setup, so a session that delivers was encrypted), and the refusals named
//! when only one side encrypts. Driven through the engine over plain
//! buffers (no JACK) under `assert_no_alloc`, as rack.rs does.

mod common;

use assert_no_alloc::assert_no_alloc;
use firmtime_ladspa::Scan;
use firmtime_rack::{build, Engine, ErrorKind, RackFile};
use firmtime_rt::clock::monotonic_ns;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{spawn_ready, EXE};

#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

const LADSPA: &str = "/usr/lib/ladspa";
/// 64 frames at 4 kHz: a 16 ms period, ample for loopback.
const RATE: u32 = 4_000;
const BLOCK: usize = 64;

/// A key file unique to this process, readable by its owner only; removed on drop.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let p =
            std::env::temp_dir().join(format!("firmtime-rack-enc-{}-{name}", std::process::id()));
        std::fs::write(&p, b"0123456789abcdef0123456789abcdef").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        KeyFile(p)
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A keyed `firmtime net worker --plugin-dir /usr/lib/ladspa` child
/// (`--encrypt` when asked) on a free loopback port, killed on drop.
struct Worker {
    child: Child,
    addr: String,
}

impl Worker {
    fn start(key: &Path, encrypt: bool) -> Self {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let mut c = Command::new(EXE);
        c.args(["net", "worker", "--listen", &addr, "--priority", "other"])
            .arg("--key")
            .arg(key)
            .args(["--plugin-dir", LADSPA])
            .stdin(Stdio::null());
        if encrypt {
            c.arg("--encrypt");
        }
        Worker {
            child: spawn_ready(&mut c),
            addr,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn have_amp() -> bool {
    let ok = Path::new(LADSPA).join("amp.so").exists();
    if !ok {
        firmtime_rt::testing::skip(format!("{LADSPA}/amp.so missing (apt install ladspa-sdk)"));
    }
    ok
}

/// A one-stage rack: amp_mono (Gain 0.5) on the worker, or its built-in
/// copy (`work`), window 1; `encrypt` is the remote table's text for it
/// (`""` for none).
fn rack(worker: &str, key: &Path, work: bool, encrypt: &str) -> RackFile {
    let what = if work {
        "work = { fraction = 0.0, mode = \"none\" }\nchannels = 1\n"
    } else {
        "plugin = \"amp_mono\"\ncontrols = { Gain = 0.5 }\n"
    };
    let text = format!(
        "deadline = 1.0\n[[stage]]\nname = \"far\"\n{what}\
         remote = {{ worker = \"{worker}\", key_file = \"{}\", window = 1{encrypt} }}\n",
        key.display()
    );
    RackFile::parse(&text, "enc.toml").unwrap()
}

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

/// Runs `periods` periods through `engine` and checks each against
/// `want(n)` (what period `n`'s output must be when its result came): the
/// first period passes its input (priming), every later one is `want(n)`
/// bit for bit or, counted late, the dry input. Returns the delivered count.
fn check_stream(
    engine: &mut Engine,
    control: &firmtime_rack::RackControl,
    periods: usize,
    mut want: impl FnMut(usize, &[f32]) -> Vec<f32>,
    what: &str,
) -> usize {
    let mut delivered = 0;
    let mut last_late = 0;
    for n in 0..periods {
        let x = signal(n);
        let w = want(n, &x);
        let y = run(engine, &x);
        let late = control.stats().stages[0].late;
        if n == 0 {
            assert_eq!(y, x, "{what}: period 0 (priming) passes its input");
        } else if late == last_late {
            assert_eq!(y, w, "{what}: period {n}");
            delivered += 1;
        } else {
            assert_eq!(y, x, "{what}: late period {n} is not dry");
        }
        last_late = late;
    }
    assert_eq!(control.stats().stages[0].runs, periods as u64, "{what}");
    delivered
}

#[test]
fn encrypted_remote_stages_are_bit_exact_through_a_worker_that_serves_only_encrypted_sessions() {
    if !have_amp() {
        return;
    }
    let key = KeyFile::new("good.key");
    let w = Worker::start(&key.0, true);
    let scan = Scan::dirs(&[PathBuf::from(LADSPA)]);
    let local = RackFile::parse(
        "[[stage]]\nname = \"g\"\nplugin = \"amp_mono\"\ncontrols = { Gain = 0.5 }\n",
        "local.toml",
    )
    .unwrap();
    let (mut reference, _ref_control) = build(&local, &scan, RATE, BLOCK).unwrap();
    let periods = 40;
    // The plugin hosted by the worker: the local plugin's output one period late.
    let file = rack(&w.addr, &key.0, false, ", encrypt = true");
    assert!(file.stages[0].remote.as_ref().unwrap().encrypt);
    let (mut engine, control) = build(&file, &scan, RATE, BLOCK).unwrap();
    assert_eq!(control.stages()[0].latency_frames, BLOCK as u64);
    let mut prev: Vec<f32> = Vec::new();
    let delivered = check_stream(
        &mut engine,
        &control,
        periods,
        |_, x| {
            let now = run(&mut reference, x);
            std::mem::replace(&mut prev, now)
        },
        "encrypted plugin stage",
    );
    assert!(delivered > 0, "no result came back: {:?}", control.stats());
    drop(engine);
    control.close();
    // The worker's built-in copy (a work stage): the input one period late.
    let (mut engine, control) = build(
        &rack(&w.addr, &key.0, true, ", encrypt = true"),
        &scan,
        RATE,
        BLOCK,
    )
    .unwrap();
    let delivered = check_stream(
        &mut engine,
        &control,
        periods,
        |n, _| signal(n.saturating_sub(1)),
        "encrypted work stage",
    );
    assert!(delivered > 0, "no result came back: {:?}", control.stats());
    drop(engine);
    control.close();
}

#[test]
fn a_rack_that_does_not_encrypt_is_refused_by_an_encrypting_worker_naming_encrypt() {
    if !have_amp() {
        return;
    }
    let key = KeyFile::new("refused.key");
    let w = Worker::start(&key.0, true);
    let scan = Scan::dirs(&[PathBuf::from(LADSPA)]);
    for (work, encrypt) in [(false, ""), (true, ""), (false, ", encrypt = false")] {
        let e = build(&rack(&w.addr, &key.0, work, encrypt), &scan, RATE, BLOCK).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Remote, "{e}");
        let m = e.to_string();
        assert!(m.starts_with("enc.toml:2:1: stage \"far\""), "{m}");
        assert!(
            m.contains(&w.addr)
                && m.contains("serves only encrypted sessions")
                && m.contains("encrypt = true"),
            "work {work}: {m}"
        );
    }
}

#[test]
fn encrypt_without_a_key_file_is_a_file_error_at_the_value() {
    let e = RackFile::parse(
        "[[stage]]\nplugin = \"amp_mono\"\nremote = { worker = \"h:1\", encrypt = true }\n",
        "t.toml",
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Parse);
    assert!(
        e.to_string()
            .starts_with("t.toml:3:38: encrypt = true needs key_file"),
        "{e}"
    );
    let e = RackFile::parse(
        "[[stage]]\nplugin = \"amp_mono\"\nremote = { worker = \"h:1\", encrypt = 1 }\n",
        "t.toml",
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("t.toml:3:"), "{e}");
    // Off by default, and `encrypt = false` needs no key.
    for text in [
        "[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\" }\n",
        "[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\", encrypt = false }\n",
    ] {
        let f = RackFile::parse(text, "t.toml").unwrap();
        assert!(!f.stages[0].remote.as_ref().unwrap().encrypt, "{text}");
    }
}

#[test]
fn an_encrypting_rack_works_with_a_keyed_worker_that_also_serves_plaintext() {
    if !have_amp() {
        return;
    }
    let key = KeyFile::new("both.key");
    let w = Worker::start(&key.0, false);
    let scan = Scan::dirs(&[PathBuf::from(LADSPA)]);
    let (mut engine, control) = build(
        &rack(&w.addr, &key.0, true, ", encrypt = true"),
        &scan,
        RATE,
        BLOCK,
    )
    .unwrap();
    let delivered = check_stream(
        &mut engine,
        &control,
        40,
        |n, _| signal(n.saturating_sub(1)),
        "encrypted work stage, worker without --encrypt",
    );
    assert!(delivered > 0, "no result came back: {:?}", control.stats());
    drop(engine);
    control.close();
}
