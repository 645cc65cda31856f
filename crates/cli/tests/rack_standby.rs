//! `rack` remote stages with a hot standby (`standby = "HOST:PORT"` in the
//! stage's `remote`, issue 32 item 2): the primary `firmtime net worker`
//! SIGKILLed mid-run, the stage goes on from the standby, bit-exact with a
//! run without the kill; a standby that cannot be reached at start is a
//! build error naming it and the stage's place in the file. Driven through
//! the engine over plain buffers (no JACK, so no xrun or frame gap can
//! spoil a run) under `assert_no_alloc`, as rack.rs does.

mod common;

use assert_no_alloc::assert_no_alloc;
use firmtime_ladspa::Scan;
use firmtime_rack::{build, Engine, ErrorKind, RackFile};
use firmtime_rt::clock::monotonic_ns;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
        let p = std::env::temp_dir().join(format!(
            "firmtime-rack-standby-{}-{name}",
            std::process::id()
        ));
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

fn free_addr() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// A keyed `firmtime net worker --plugin-dir /usr/lib/ladspa` child on a
/// free loopback port, killed (SIGKILL) on drop.
struct Worker {
    child: Child,
    addr: String,
}

impl Worker {
    fn start(key: &Path) -> Self {
        let addr = free_addr();
        let mut c = Command::new(EXE);
        c.args(["net", "worker", "--listen", &addr, "--priority", "other"])
            .arg("--key")
            .arg(key)
            .args(["--plugin-dir", LADSPA])
            .stdin(Stdio::null());
        Worker {
            child: spawn_ready(&mut c),
            addr,
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

fn have_amp() -> bool {
    let ok = Path::new(LADSPA).join("amp.so").exists();
    if !ok {
        firmtime_rt::testing::skip(format!("{LADSPA}/amp.so missing (apt install ladspa-sdk)"));
    }
    ok
}

/// A one-stage rack: amp_mono (Gain 0.5, stateless) on `worker` with
/// `standby`, window 1.
fn rack(worker: &str, standby: &str, key: &Path) -> RackFile {
    let text = format!(
        "deadline = 1.0\n[[stage]]\nname = \"far\"\nplugin = \"amp_mono\"\n\
         controls = {{ Gain = 0.5 }}\n\
         remote = {{ worker = \"{worker}\", standby = \"{standby}\", key_file = \"{}\", window = 1 }}\n",
        key.display()
    );
    RackFile::parse(&text, "standby.toml").unwrap()
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

const PERIODS: usize = 120;
const KILL_AT: usize = 50;

#[test]
fn a_sigkilled_primary_is_replaced_by_the_standby_bit_exact_with_a_run_without_the_kill() {
    if !have_amp() {
        return;
    }
    let key = KeyFile::new("k");
    let mut primary = Worker::start(&key.0);
    let standby = Worker::start(&key.0);
    let scan = Scan::dirs(&[PathBuf::from(LADSPA)]);
    let file = rack(&primary.addr, &standby.addr, &key.0);
    assert_eq!(
        file.stages[0].remote.as_ref().unwrap().standby.as_deref(),
        Some(standby.addr.as_str())
    );

    // The run without the kill: every period's output, and which were late.
    let (mut engine, control) = build(&file, &scan, RATE, BLOCK).unwrap();
    assert_eq!(
        control.stages()[0].standby.as_deref(),
        Some(standby.addr.as_str())
    );
    let mut want = Vec::with_capacity(PERIODS);
    let mut late_in_want = [false; PERIODS];
    let mut last_late = 0;
    for (n, l) in late_in_want.iter_mut().enumerate() {
        want.push(run(&mut engine, &signal(n)));
        let late = control.stats().stages[0].late;
        *l = late != last_late;
        last_late = late;
    }
    let st = control.stats().stages[0].clone();
    assert_eq!(
        (st.takeovers, st.from_standby),
        (0, 0),
        "nothing from the standby without a kill: {st:?}"
    );
    drop(engine);
    control.close();

    // The same with the primary SIGKILLed before period KILL_AT.
    let (mut engine, control) = build(&file, &scan, RATE, BLOCK).unwrap();
    let mut substituted_at_kill = 0;
    let mut compared_after = 0;
    let mut last_late = 0;
    for n in 0..PERIODS {
        if n == KILL_AT {
            primary.kill();
        }
        if n == KILL_AT + 10 || n == KILL_AT + 40 {
            // Time for the primary's link to see its worker gone (its
            // control connection closed, or 500 ms without an answer): the
            // stage must not go dry then, the standby still serves.
            std::thread::sleep(Duration::from_millis(600));
        }
        let x = signal(n);
        let y = run(&mut engine, &x);
        let late = control.stats().stages[0].late;
        if late != last_late {
            // A substituted block: the dry input (the late policy), counted.
            assert_eq!(y, x, "late period {n} is not dry");
            if (KILL_AT..KILL_AT + 10).contains(&n) {
                substituted_at_kill += 1;
            }
        } else if !late_in_want[n] {
            assert_eq!(
                y, want[n],
                "period {n} differs from the run without the kill"
            );
            if n > KILL_AT {
                compared_after += 1;
            }
        }
        last_late = late;
    }
    let st = control.stats().stages[0].clone();
    assert_eq!(st.runs, PERIODS as u64, "{st:?}");
    assert_eq!(st.takeovers, 1, "one switch to the standby: {st:?}");
    assert!(
        substituted_at_kill <= 1,
        "{substituted_at_kill} blocks substituted at the kill (at most 1): {st:?}"
    );
    assert_eq!(st.away, 0, "the stage was never without a worker: {st:?}");
    // Every period from the kill on (but the one substituted, if any) is
    // the standby's: the primary never came back.
    let after = (PERIODS - KILL_AT) as u64;
    assert!(
        st.from_standby + 1 >= after && st.from_standby <= after + 1,
        "{} periods from the standby, {after} after the kill: {st:?}",
        st.from_standby
    );
    assert!(
        compared_after + 5 >= PERIODS - KILL_AT - 1,
        "only {compared_after} periods after the kill compared: {st:?}"
    );
    drop(engine);
    control.close();
}

#[test]
fn an_unreachable_standby_is_a_build_error_naming_it_and_the_stage() {
    if !have_amp() {
        return;
    }
    let key = KeyFile::new("u");
    let primary = Worker::start(&key.0);
    let scan = Scan::dirs(&[PathBuf::from(LADSPA)]);
    // Nothing listens there: the port was free a moment ago.
    let nobody = free_addr();
    let e = build(&rack(&primary.addr, &nobody, &key.0), &scan, RATE, BLOCK).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Remote, "{e}");
    let m = e.message();
    assert!(m.starts_with("standby.toml:2:1: stage \"far\": "), "{m}");
    assert!(m.contains(&format!("standby {nobody}")), "{m}");
    assert!(m.contains("must be reachable"), "{m}");
}
