//! Plugin loading on a real worker (issue 20, item 3): a library is mapped
//! only after its file passed the checks, only the one asked for, and once.
//!
//! The libraries are built here with `cc`: each is a valid LADSPA library
//! (so a refusal cannot be a load failure in disguise) whose constructor
//! appends a line to its own marker file the moment it is mapped.

use firmtime_net::control::{Conn, Reply, Request, Setup};
use firmtime_net::remote::{describe, PluginAllowList, PluginSetup};
use firmtime_net::{Key, ServerConfig, Transform, Work, WorkerServer};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SOURCE: &str = r#"
#include <ladspa.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen(MARKER, "a");
    if (f) { fputs("mapped\n", f); fclose(f); }
}
static LADSPA_PortDescriptor pd[2] = {LADSPA_PORT_INPUT | LADSPA_PORT_AUDIO,
                                      LADSPA_PORT_OUTPUT | LADSPA_PORT_AUDIO};
static const char *pn[2] = {"In", "Out"};
static LADSPA_PortRangeHint ph[2] = {{0, 0, 0}, {0, 0, 0}};
static float *io[2];
static LADSPA_Handle inst(const LADSPA_Descriptor *d, unsigned long r) { return (LADSPA_Handle)io; }
static void con(LADSPA_Handle h, unsigned long p, LADSPA_Data *d) { if (p < 2) io[p] = d; }
static void run(LADSPA_Handle h, unsigned long n) { for (unsigned long i = 0; i < n; i++) io[1][i] = io[0][i]; }
static void cleanup(LADSPA_Handle h) {}
static LADSPA_Descriptor D = {ID, LABEL, 0, LABEL, "firmtime tests", "None", 2, pd, pn, ph, 0,
                              inst, con, 0, run, 0, 0, 0, cleanup};
const LADSPA_Descriptor *ladspa_descriptor(unsigned long i) { return i == 0 ? &D : 0; }
"#;

/// Builds `dir/<file>` with `label`, whose constructor writes `marker`; `None` without cc or ladspa.h.
fn build(dir: &Path, file: &str, label: &str, id: u32, marker: &Path) -> Option<PathBuf> {
    let src = dir.join(format!("{label}.c"));
    std::fs::write(&src, SOURCE).unwrap();
    let out = dir.join(file);
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-DMARKER=\"{}\"", marker.display()))
        .arg(format!("-DLABEL=\"{label}\""))
        .arg(format!("-DID={id}"))
        .output()
        .ok()?;
    st.status.success().then_some(out)
}

fn marks(marker: &Path) -> usize {
    std::fs::read_to_string(marker).map_or(0, |s| s.lines().count())
}

fn maps() -> String {
    std::fs::read_to_string("/proc/self/maps").unwrap()
}

/// Regression test for issue 20 item 3: describe and setup scanned the
/// plugin directory by dlopen-ing every `*.so` (symlinks to files outside
/// it included) on every request, running constructors before refusing.
/// Removes the scratch directory when the test ends, pass or fail.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_library_outside_the_allowed_directory_is_never_mapped() {
    let scratch = Scratch(std::env::temp_dir().join(format!("ftplugins-{}", std::process::id())));
    let root = &scratch.0;
    let _ = std::fs::remove_dir_all(root);
    let (dir, outside) = (root.join("allowed"), root.join("outside"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let m = |n: &str| root.join(format!("{n}.marker"));
    let Some(evil) = build(&outside, "evil.so", "evil", 4_700_301, &m("evil")) else {
        firmtime_rt::testing::skip(
            "cc or /usr/include/ladspa.h missing (apt install gcc ladspa-sdk)",
        );
        return;
    };
    std::os::unix::fs::symlink(&evil, dir.join("evil.so")).unwrap();
    let loose = build(&dir, "loose.so", "loose", 4_700_302, &m("loose")).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    build(&dir, "good.so", "good", 4_700_303, &m("good")).unwrap();
    build(&dir, "other.so", "other", 4_700_304, &m("other")).unwrap();
    // A FIFO must not hang the worker (opening it for reading would block).
    let fifo = std::ffi::CString::new(dir.join("fifo.so").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);

    let key = Key::new(b"0123456789abcdef0123456789abcdef").unwrap();
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.key = Some(key.clone());
    let allow = PluginAllowList::new(std::slice::from_ref(&dir)).unwrap();
    cfg.plugins = allow.clone();
    let srv = WorkerServer::start(cfg).unwrap();
    let addr = srv.local_addr();
    let t = Duration::from_secs(5);
    let ask = |spec: &str| describe(addr, Some(key.clone()), spec, t);

    // LIBRARY:LABEL maps that library and nothing else.
    assert_eq!(ask("good:good").unwrap().label, "good");
    assert_eq!((marks(&m("good")), marks(&m("other"))), (1, 0));

    // Refusals, each saying why, before anything is mapped.
    let refused = |spec: &str, why: &str| {
        let e = ask(spec).unwrap_err().to_string();
        assert!(e.contains(why), "{spec}: {e}");
    };
    refused("evil:evil", "outside the allowed directories");
    refused("evil.so:evil", "outside the allowed directories");
    refused("loose:loose", "writable by its group or others");
    refused("fifo:x", "not a regular file");
    refused(&format!("{}:evil", evil.display()), "names a path");
    refused("../outside/evil:evil", "names a path");
    // By label: the scan skips every refused file and says so.
    refused("evil", "3 file(s) refused");
    refused("4700301", "has no plugin '4700301'");

    // A setup naming the symlink is refused the same way.
    let good = ask("good").unwrap();
    let mut c = Conn::connect(addr, Some(key.clone()), t).unwrap();
    c.send(&Request::Setup(Setup {
        stream_id: 7,
        data_port: 9,
        layout: good.layout(64),
        window: 0,
        period_ns: 1_000_000,
        transform: Transform::Copy,
        work: Work::default(),
        plugin: Some(PluginSetup {
            plugin: "evil:evil".into(),
            sample_rate: 48_000,
            max_frames: 64,
            ports: good.ports.clone(),
        }),
    }))
    .unwrap();
    match c.recv::<Reply>().unwrap() {
        Reply::Error { message } => assert!(
            message.contains("outside the allowed directories"),
            "{message}"
        ),
        other => panic!("setup of a symlinked library: {other:?}"),
    }

    // The scan is cached: more requests map nothing new, constructors ran once.
    for spec in ["good", "other", "4700303", "good:good"] {
        assert!(ask(spec).is_ok(), "{spec}");
    }
    assert_eq!((marks(&m("good")), marks(&m("other"))), (1, 1));
    assert_eq!(allow.loads(), 2, "good.so and other.so, once each");

    assert_eq!(marks(&m("evil")), 0, "evil.so's constructor never ran");
    assert_eq!(marks(&m("loose")), 0, "loose.so's constructor never ran");
    let maps = maps();
    assert!(!maps.contains(evil.to_str().unwrap()), "evil.so mapped");
    assert!(!maps.contains(loose.to_str().unwrap()), "loose.so mapped");
    assert!(
        maps.contains(dir.join("good.so").to_str().unwrap()),
        "the check of /proc/self/maps can fail: good.so is mapped"
    );
    srv.stop();
}
