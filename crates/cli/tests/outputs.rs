//! Output paths are the user's: `--json PATH`, `-o PATH` and the other
//! options that write atomically by rename replace only a regular file (or
//! nothing). A character device or a FIFO is written into and stays what it
//! was; a symbolic link is refused and left alone (docs/DOCTOR.md, "Output
//! files"). None of these tests touches the real /dev/null: the FIFOs and
//! device nodes are made in a scratch directory.

mod common;

use common::{assert_ok, firmtime, is_root, text, TestDir};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

use firmtime_rt::testing::{mkfifo, mknod};

/// A character device node `major:minor` at `p`, openable for writing
/// (not on a nodev filesystem).
fn mknod_char(p: &Path, major: u32, minor: u32) -> std::io::Result<()> {
    mknod(p, libc::S_IFCHR, major, minor)?;
    std::fs::OpenOptions::new().write(true).open(p).map(drop)
}

fn reads_to_end(p: &Path) -> std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = p.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(&p));
    });
    rx
}

/// `doctor --json FIFO`: the check before the run opened the FIFO (its
/// reader got an empty file), then the JSON was renamed over the FIFO.
#[test]
fn doctor_json_into_a_fifo_reaches_its_reader_and_the_fifo_stays() {
    let d = TestDir::new("outputs-fifo");
    let fifo = d.0.join("doctor.json");
    mkfifo(&fifo);
    let got = reads_to_end(&fifo);
    let out = firmtime(&["doctor", "--json", fifo.to_str().unwrap()]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(t.is_fifo(), "{} is no longer a FIFO: {t:?}", fifo.display());
    let bytes = got
        .recv_timeout(Duration::from_secs(60))
        .expect("the reader finished")
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {:?}", text(&bytes)));
    assert!(v["checks"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    assert_eq!(d.entries(), vec![fifo.clone()], "no temp file left");
}

/// `--json LINK`: the link was replaced by a regular file. It is refused
/// before anything runs, and the link and its target are left alone.
#[test]
fn doctor_json_through_a_symlink_is_refused_and_both_are_left_alone() {
    let d = TestDir::new("outputs-symlink");
    let target = d.0.join("precious.json");
    std::fs::write(&target, b"keep me").unwrap();
    let link = d.0.join("doctor.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = firmtime(&["doctor", "--json", link.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let needle = format!(
        "--json: {} is a symbolic link to {}",
        link.display(),
        target.display()
    );
    assert!(err.contains(&needle), "'{needle}' missing from: {err}");
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert_eq!(d.entries().len(), 2, "{:?}", d.entries());
}

/// As root, `tap import-ftap … -o /dev/null` turned the machine's /dev/null
/// into a regular file. A copy of its node (1:3) stands in for it; a copy
/// of /dev/full's (1:7), which refuses every write, shows that the data
/// went into the device rather than beside it.
#[test]
fn tap_import_ftap_output_into_a_char_device_stays_the_device() {
    let d = TestDir::new("outputs-chardev");
    let null = d.0.join("null");
    let full = d.0.join("full");
    if let Err(e) = mknod_char(&null, 1, 3).and_then(|()| mknod_char(&full, 1, 7)) {
        firmtime_rt::testing::skip(format!(
            "cannot make a usable character device node in {} ({e}; root: {}): needs \
             CAP_MKNOD and a filesystem without nodev",
            d.0.display(),
            is_root()
        ));
        return;
    }
    let src = root().join("crates/tap/tests/data/daf-sync.ftap");
    let out = firmtime(&[
        "tap",
        "import-ftap",
        src.to_str().unwrap(),
        "-o",
        null.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let m = std::fs::symlink_metadata(&null).unwrap();
    assert!(m.file_type().is_char_device(), "{}: {m:?}", null.display());
    assert_eq!(m.rdev(), libc::makedev(1, 3));

    let out = firmtime(&[
        "tap",
        "import-ftap",
        src.to_str().unwrap(),
        "-o",
        full.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let needle = format!("cannot write {}: No space left on device", full.display());
    assert!(err.contains(&needle), "'{needle}' missing from: {err}");
    let m = std::fs::symlink_metadata(&full).unwrap();
    assert!(m.file_type().is_char_device(), "{}: {m:?}", full.display());
    assert_eq!(m.rdev(), libc::makedev(1, 7));
    assert_eq!(d.entries().len(), 2, "no temp file left: {:?}", d.entries());
}

/// `ladspa lv2-bundle DIR LIB` copied LIB to a temporary file and renamed
/// it over whatever had LIB's name in DIR: a FIFO there became a library.
#[test]
fn lv2_bundle_leaves_a_fifo_with_the_librarys_name_alone() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .args(["build", "-q", "-p", "firmtime-plugin-waste-time"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success(), "building firmtime-plugin-waste-time");
    let lib = Path::new(common::EXE)
        .parent()
        .unwrap()
        .join("libfirmtime_waste_time.so");
    let d = TestDir::new("outputs-lv2");
    let bundle = d.0.join("firmtime.lv2");
    std::fs::create_dir(&bundle).unwrap();
    let fifo = bundle.join("libfirmtime_waste_time.so");
    mkfifo(&fifo);
    let out = firmtime(&[
        "ladspa",
        "lv2-bundle",
        bundle.to_str().unwrap(),
        lib.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let needle = format!(
        "{} is a FIFO, not a regular file: not replaced by {}",
        fifo.display(),
        lib.display()
    );
    assert!(err.contains(&needle), "'{needle}' missing from: {err}");
    let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(t.is_fifo(), "{} is no longer a FIFO: {t:?}", fifo.display());
}
