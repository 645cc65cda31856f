//! The disk load: write + fsync a bounded file, like Varoquaux's
//! `dd if=/dev/zero of=/tmp/foo bs=1M; sync`, rewriting from the start when
//! the size bound is reached.
//!
//! The file lives in a fresh directory under `std::env::temp_dir()` (TMPDIR)
//! and is unlinked, and the directory removed, as soon as the file is open:
//! the writes go on through the open descriptor, and no exit path — not even
//! SIGKILL — can leave anything behind.

use super::{monotonic_ns, Until, Work};
use crate::error::{Error, ErrorKind, Result};
use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Distinguishes directories made by several disk loads of one process.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Removes the file and directory on drop, if they still exist.
struct Scratch {
    dir: PathBuf,
    file: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    let hint = match e.raw_os_error() {
        Some(libc::ENOSPC) => {
            "; free space there, set TMPDIR to a filesystem with room, or use a smaller size"
        }
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
            "; set TMPDIR to a writable directory"
        }
        _ => "",
    };
    Error::new(
        ErrorKind::Io,
        format!("disk load: cannot {what} {}: {e}{hint}", path.display()),
    )
}

fn is_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    // f_type and TMPFS_MAGIC have different integer types on some architectures.
    #[allow(clippy::unnecessary_cast)]
    let tmpfs = st.f_type as i64 == libc::TMPFS_MAGIC as i64;
    rc == 0 && tmpfs
}

/// Opens an anonymous file in a fresh temporary directory; returns it with
/// the (already removed) directory's path and whether it was on tmpfs.
fn open_scratch() -> Result<(File, PathBuf, bool)> {
    let base = std::env::temp_dir();
    let dir = base.join(format!(
        "firmtime-load-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        monotonic_ns()
    ));
    DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io_err("create a directory in", &base, e))?;
    let scratch = Scratch {
        file: dir.join("load.dat"),
        dir,
    };
    let tmpfs = is_tmpfs(&scratch.dir);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&scratch.file)
        .map_err(|e| io_err("create", &scratch.file, e))?;
    std::fs::remove_file(&scratch.file).map_err(|e| io_err("unlink", &scratch.file, e))?;
    std::fs::remove_dir(&scratch.dir).map_err(|e| io_err("remove", &scratch.dir, e))?;
    Ok((file, scratch.dir.clone(), tmpfs))
}

/// Writes `chunk` bytes + fsync at a time until done, restarting at offset 0
/// whenever the next chunk would pass `file_size`.
pub(super) fn writer(until: &Until<'_>, file_size: u64, chunk: u64) -> Result<Work> {
    let (file, dir, tmpfs) = open_scratch()?;
    let mut buf = vec![0u8; chunk as usize];
    let mut w = Work {
        temp_dir: Some(dir.clone()),
        on_tmpfs: tmpfs,
        ..Work::default()
    };
    let mut pos = 0u64;
    let mut pass = 0u8;
    while !until.done() {
        if pos + chunk > file_size {
            pos = 0;
            w.rewinds += 1;
        }
        if pos == 0 {
            // New contents on every pass, so no layer can skip an unchanged block.
            pass = pass.wrapping_add(1);
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i as u8) ^ pass);
        }
        file.write_all_at(&buf, pos)
            .map_err(|e| io_err("write to a file in", &dir, e))?;
        file.sync_all()
            .map_err(|e| io_err("fsync a file in", &dir, e))?;
        pos += chunk;
        w.bytes_written += chunk;
        w.fsyncs += 1;
    }
    Ok(w)
}
