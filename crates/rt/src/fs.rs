//! Writing result files so that a crash never leaves half a file.
//!
//! [`write_atomic`] and [`write_atomic_with`] write to a temporary file in
//! the target's directory (`.<name>.tmp<pid>`), fsync it, rename it over the
//! target and fsync the directory: a reader sees the old file or the whole
//! new one, and after a power cut the new one is there or the old one is.
//! The temporary file is removed if any step fails.
//!
//! Not for the real-time path: these allocate and block on the disk.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("firmtime-fs-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("result.csv");
//! firmtime_rt::fs::write_atomic(&path, b"a,b\n1,2\n")?;
//! firmtime_rt::fs::write_atomic_with(&path, |w| {
//!     use std::io::Write;
//!     writeln!(w, "a,b")?;
//!     writeln!(w, "3,4")
//! })?;
//! assert_eq!(std::fs::read_to_string(&path)?, "a,b\n3,4\n");
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically: temp file in the same directory,
/// write, fsync, rename over `path`, fsync the directory.
///
/// # Errors
/// The failing step's I/O error, with the same kind, and a message naming
/// the step and the file: `cannot create <tmp>: …`, `cannot write <tmp>: …`,
/// `cannot fsync <tmp>: …`, `cannot rename onto <path>: …`, or
/// `<path> has no file name`. Its [`source`](std::error::Error::source) is
/// the step's own error, for callers that name the file themselves. The temp file is removed on failure. A
/// directory that refuses fsync (some filesystems do) is not an error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// As [`write_atomic`], with the content produced by `write` into a
/// buffered writer on the temporary file (flushed before the fsync).
///
/// # Errors
/// As [`write_atomic`]; an error `write` returns is reported as
/// `cannot write <tmp>: <its message>`, with its kind.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_path(path).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", path.display()),
        )
    })?;
    let res = (|| {
        let f = File::create(&tmp).map_err(|e| step("create", &tmp, e))?;
        let mut w = BufWriter::new(f);
        write(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| step("write", &tmp, e))?;
        let f = w
            .into_inner()
            .map_err(|e| step("write", &tmp, e.into_error()))?;
        f.sync_all().map_err(|e| step("fsync", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| step("rename onto", path, e))?;
        if let Ok(d) = File::open(dir_of(path)) {
            // Makes the rename itself durable; some filesystems refuse, which is harmless.
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// The directory `path` is in (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `cannot <what> <path>: <e>`, keeping `e`'s kind, with `e` as its source.
fn step(what: &str, path: &Path, e: io::Error) -> io::Error {
    let message = format!("cannot {what} {}: {e}", path.display());
    io::Error::new(e.kind(), Step { message, source: e })
}

/// A failed step of an atomic write: the message names the step and the
/// file, the source is the step's own error.
#[derive(Debug)]
struct Step {
    message: String,
    source: io::Error,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Step {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The temporary file [`write_atomic`] uses for `path` (for tests and for
/// cleaning up after a killed writer).
/// `None` if `path` has no file name.
pub fn temp_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    Some(dir_of(path).join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Reads a small file (a configuration, a key): a regular file only (a FIFO is
/// refused without blocking, a device such as `/dev/zero` without reading
/// it) of at most `max` bytes.
///
/// # Errors
/// A message naming `what`, the file, and what is wrong with it.
pub fn read_small_file(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |why: String| format!("{what} {}: {why}", path.display());
    let f = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| err(e.to_string()))?;
    let m = f.metadata().map_err(|e| err(e.to_string()))?;
    if !m.file_type().is_file() {
        return Err(err("not a regular file; give a regular file".into()));
    }
    if m.len() > max {
        return Err(err(format!(
            "{} bytes, more than the {max} a {what} may have",
            m.len()
        )));
    }
    let mut buf = Vec::new();
    // `take`: the file may grow between fstat and read.
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| err(e.to_string()))?;
    if buf.len() as u64 > max {
        return Err(err(format!("more than the {max} bytes a {what} may have")));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("firmtime-rt-fs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temp() {
        let d = scratch("replace");
        let p = d.join("out.json");
        write_atomic(&p, b"old").unwrap();
        write_atomic(&p, b"new content").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new content");
        assert!(!temp_path(&p).unwrap().exists());
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failed_writer_keeps_the_old_file_and_removes_the_temp() {
        let d = scratch("fail");
        let p = d.join("out.csv");
        write_atomic(&p, b"old").unwrap();
        let e = write_atomic_with(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("disk on fire"))
        })
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        let tmp = temp_path(&p).unwrap();
        assert_eq!(
            e.to_string(),
            format!("cannot write {}: disk on fire", tmp.display())
        );
        let source = std::error::Error::source(&e).expect("the step's error");
        assert_eq!(source.to_string(), "disk on fire");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!tmp.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_directory_names_the_temp_file() {
        let d = scratch("missing");
        let p = d.join("no/such/dir/out.csv");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let tmp = temp_path(&p).unwrap();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot create {}: ", tmp.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn path_without_file_name_is_refused() {
        let e = write_atomic(Path::new("/"), b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), "/ has no file name");
    }
}
