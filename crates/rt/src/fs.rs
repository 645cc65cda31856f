//! Writing result files so that a crash never leaves half a file, and so
//! that nothing is replaced but the file the user named.
//!
//! [`write_atomic`], [`write_atomic_with`] and [`write_atomic_via`] (for a
//! writer that needs a path of its own, such as a PNG encoder) look at what
//! is at the path (without following a symbolic link, [`output_kind`]) and:
//!
//! - **nothing, or a regular file**: write a temporary file in the same
//!   directory (`.<name>.tmp<pid>`, created exclusively, never through a
//!   link), fsync it, rename it over the target and fsync the directory: a
//!   reader sees the old file or the whole new one, and after a power cut
//!   the new one is there or the old one is. The temporary file is removed
//!   if any step fails.
//! - **a character device or a FIFO** (`/dev/null`, a terminal, a named
//!   pipe): open it for writing, without creating or truncating anything,
//!   and write straight into it. The device node stays the device node
//!   (renaming over it would turn `/dev/null` into a regular file). A FIFO
//!   waits for its reader, as a shell's `>` does.
//! - **`/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`**: write
//!   into a copy of that descriptor of this process, wherever it leads (a
//!   terminal, a pipe, the file the shell opened), at its current offset.
//! - **a symbolic link** (other than those names): refused, and left alone.
//!   Writing through it would write somewhere the user did not name (a link
//!   planted in `/tmp` may lead to `/etc/passwd` or `/dev/mem`); renaming
//!   over it would destroy the link. The error names the link and where it
//!   leads: give that path itself.
//! - **a directory, a block device, a socket**: refused, and left alone.
//!
//! `-` is an ordinary file name here: the CLI maps `-` to standard output
//! before it calls these. Errors name the path the caller gave, never the
//! temporary file.
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
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What is at an output path, and so how [`write_atomic`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputKind {
    /// Nothing yet, or a regular file: a new file is renamed into place.
    File,
    /// A character device or a FIFO: written straight into, left in place.
    Stream,
    /// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` or `/proc/self/fd/N`:
    /// this process's descriptor N, written through a copy of it.
    Descriptor(i32),
}

/// What is at `path`, looked at without following a symbolic link and
/// without opening anything.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] for what [`write_atomic`] refuses: a
/// symbolic link (the message names where it leads), a directory, a block
/// device, a socket; the error of `lstat` itself (e.g. permission denied on
/// a directory on the way). A message naming `path`.
pub fn output_kind(path: &Path) -> io::Result<OutputKind> {
    if let Some(fd) = descriptor_name(path) {
        return Ok(OutputKind::Descriptor(fd));
    }
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(OutputKind::File),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Err(not_a_dir(path, e)),
        Err(e) => return Err(step("write", path, e)),
    };
    let t = m.file_type();
    if t.is_file() {
        return Ok(OutputKind::File);
    }
    if t.is_char_device() || t.is_fifo() {
        return Ok(OutputKind::Stream);
    }
    let p = path.display();
    let why = if t.is_symlink() {
        let to = std::fs::read_link(path).map_or_else(
            |e| format!("an unreadable target ({e})"),
            |t| t.display().to_string(),
        );
        format!(
            "{p} is a symbolic link to {to}: not written through (it leads somewhere \
             you did not name) and not replaced; give the path it leads to itself"
        )
    } else if t.is_dir() {
        format!("{p} is a directory; give a file name")
    } else if t.is_block_device() {
        format!(
            "{p} is a block device: a result file is never written onto a disk; give a file name"
        )
    } else {
        format!("{p} is a socket (or another special file); give a file name")
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, why))
}

/// [`output_kind`], and for what already exists, that it can be opened
/// for writing, without writing anything, consuming a FIFO's reader or
/// blocking: for a command to check its output paths before a long run.
/// Whether a new file can be created in the directory is the caller's to
/// check (a temporary probe file).
///
/// # Errors
/// As [`output_kind`]; a descriptor that is not open; a device or FIFO this
/// process may not write. A message naming `path`.
pub fn check_output(path: &Path) -> io::Result<OutputKind> {
    let kind = output_kind(path)?;
    match kind {
        OutputKind::File => {}
        OutputKind::Descriptor(fd) => drop(copy_descriptor(path, fd)?),
        OutputKind::Stream => {
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
                .map_err(|e| step("write", path, e))?;
            // Opening a FIFO to check it would hand its reader an end of
            // file; the access check needs no open.
            // SAFETY: `c` is a NUL-terminated string that outlives the call.
            let r = unsafe {
                libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS)
            };
            if r != 0 {
                return Err(step("write", path, io::Error::last_os_error()));
            }
        }
    }
    Ok(kind)
}

/// Writes `bytes` to `path`: atomically by rename for a regular file (or
/// none), straight into a character device, FIFO or descriptor, never
/// through a symbolic link (see the [module docs](self)).
///
/// # Errors
/// The failing step's I/O error, with the same kind, and a message naming
/// the step and `path` (never the temporary file): `cannot write <path>:
/// directory <dir> does not exist`, `cannot write <path>: cannot create a
/// file in <dir>: …`, `cannot write <path>: …`, `cannot fsync <path>: …`,
/// `cannot rename onto <path>: …`, `<path> has no file name`, or what
/// [`output_kind`] refuses. Its [`source`](std::error::Error::source) is the
/// step's own error, for callers that name the file themselves. The temp
/// file is removed on failure. A directory that refuses fsync (some
/// filesystems do) is not an error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// As [`write_atomic`], with the content produced by `write` into a
/// buffered writer on the temporary file, device or descriptor (flushed
/// before the fsync).
///
/// # Errors
/// As [`write_atomic`]; an error `write` returns is reported as
/// `cannot write <path>: <its message>`, with its kind.
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
    match output_kind(path)? {
        OutputKind::File => replace(path, &tmp, write),
        OutputKind::Stream => write_into(path, open_stream(path)?, write),
        OutputKind::Descriptor(fd) => write_into(path, copy_descriptor(path, fd)?, write),
    }
}

/// The temp file, fsync, rename, directory fsync.
fn replace(
    path: &Path,
    tmp: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let res = (|| {
        let f = create_temp(tmp).map_err(|e| create_error(path, tmp, e))?;
        let mut w = BufWriter::new(f);
        write(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| step("write", path, e))?;
        let f = w
            .into_inner()
            .map_err(|e| step("write", path, e.into_error()))?;
        f.sync_all().map_err(|e| step("fsync", path, e))?;
        rename_into_place(tmp, path)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    res
}

/// Renames the written temporary file `tmp` over `path`, then fsyncs the
/// directory.
fn rename_into_place(tmp: &Path, path: &Path) -> io::Result<()> {
    std::fs::rename(tmp, path).map_err(|e| step("rename onto", path, e))?;
    if let Ok(d) = File::open(dir_of(path)) {
        // Makes the rename itself durable; some filesystems refuse, which is harmless.
        let _ = d.sync_all();
    }
    Ok(())
}

/// `path` lies under something that is not a directory (`a-file/x.json`):
/// names the first such part of `path`.
fn not_a_dir(path: &Path, e: io::Error) -> io::Error {
    let culprit = path
        .ancestors()
        .skip(1)
        .find(|a| std::fs::symlink_metadata(a).is_ok_and(|m| !m.is_dir()))
        .unwrap_or_else(|| dir_of(path));
    let message = format!(
        "cannot write {}: {} is not a directory",
        path.display(),
        culprit.display()
    );
    io::Error::new(e.kind(), Step { message, source: e })
}

/// The error of creating the temporary file `tmp` for `path`, naming `path`
/// and the directory it is in.
fn create_error(path: &Path, tmp: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        return not_a_dir(path, e);
    }
    let dir = dir_of(tmp).display();
    let message = if e.kind() == io::ErrorKind::NotFound {
        format!(
            "cannot write {}: directory {dir} does not exist",
            path.display()
        )
    } else {
        format!(
            "cannot write {}: cannot create a file in {dir}: {e}",
            path.display()
        )
    };
    io::Error::new(e.kind(), Step { message, source: e })
}

/// As [`write_atomic`], for a writer that can only be handed a path (an
/// image encoder): `write` writes the whole file at the path it is given, a
/// new empty regular file made as [`write_atomic`] makes its temporary
/// file, with `path`'s extension (`.plot.png.tmp<pid>.png`). For a regular file (or none) at `path` that file is then fsynced
/// and renamed over `path`; for a character device, FIFO or descriptor it
/// is made in the temporary directory, copied into `path`, and removed.
/// What [`output_kind`] refuses is refused before `write` runs.
///
/// # Errors
/// As [`write_atomic`]; an error `write` returns is reported as `cannot
/// write <path>: <its message>`, with its kind.
pub fn write_atomic_via(
    path: &Path,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let no_name = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", path.display()),
        )
    };
    let name = path.file_name().ok_or_else(no_name)?;
    let kind = output_kind(path)?;
    let tmp = match kind {
        OutputKind::File => temp_path(path).ok_or_else(no_name)?,
        // Not beside a device: /dev takes no files from most users.
        _ => std::env::temp_dir().join(format!(
            ".firmtime-{}-{}.tmp",
            std::process::id(),
            name.to_string_lossy()
        )),
    };
    // Keeps the extension last: an encoder may choose its format by it.
    let tmp = match path.extension() {
        Some(x) => {
            let mut t = tmp.into_os_string();
            t.push(".");
            t.push(x);
            PathBuf::from(t)
        }
        None => tmp,
    };
    let res = (|| {
        drop(create_temp(&tmp).map_err(|e| create_error(path, &tmp, e))?);
        write(&tmp).map_err(|e| step("write", path, e))?;
        let mut written = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| step("write", path, e))?;
        match kind {
            OutputKind::File => {
                written.sync_all().map_err(|e| step("fsync", path, e))?;
                rename_into_place(&tmp, path)
            }
            OutputKind::Stream => write_into(path, open_stream(path)?, |w| {
                io::copy(&mut written, w).map(drop)
            }),
            OutputKind::Descriptor(fd) => write_into(path, copy_descriptor(path, fd)?, |w| {
                io::copy(&mut written, w).map(drop)
            }),
        }
    })();
    if res.is_err() || kind != OutputKind::File {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Creates `tmp` exclusively: never through a link someone put there, never
/// into an existing file. One left by a killed writer with this process id
/// (or planted) is removed first (a link is removed, not followed).
fn create_temp(tmp: &Path) -> io::Result<File> {
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)
    };
    match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            create()
        }
        r => r,
    }
}

/// Opens a character device or FIFO for writing: no O_CREAT (nothing is
/// made if it vanished), no O_TRUNC, no link followed, and checks that what
/// was opened is still a device or FIFO.
fn open_stream(path: &Path) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| step("write", path, e))?;
    let t = f
        .metadata()
        .map_err(|e| step("write", path, e))?
        .file_type();
    if !(t.is_char_device() || t.is_fifo()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot write {}: it stopped being a device or FIFO while it was opened",
                path.display()
            ),
        ));
    }
    Ok(f)
}

/// A copy of this process's descriptor `fd` (closed with the `File`), after
/// flushing what Rust's own stdout or stderr holds, so output stays in order.
fn copy_descriptor(path: &Path, fd: i32) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    match fd {
        1 => io::stdout().flush().map_err(|e| step("write", path, e))?,
        2 => io::stderr().flush().map_err(|e| step("write", path, e))?,
        _ => {}
    }
    // SAFETY: F_DUPFD_CLOEXEC takes and returns plain integers; it touches
    // no memory of ours and fails with EBADF if `fd` is not open.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        let e = io::Error::last_os_error();
        let message = format!(
            "cannot write {}: descriptor {fd} is not open ({e})",
            path.display()
        );
        return Err(io::Error::new(e.kind(), Step { message, source: e }));
    }
    // SAFETY: `copy` is a new descriptor that nothing else owns; the File
    // closes it.
    Ok(unsafe { File::from_raw_fd(copy) })
}

/// Writes into an opened device, FIFO or descriptor: no temp file, no
/// fsync (devices and pipes refuse it).
fn write_into(
    path: &Path,
    f: File,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let mut w = BufWriter::new(f);
    write(&mut w)
        .and_then(|()| w.flush())
        .map_err(|e| step("write", path, e))
}

/// `/dev/stdout` → 1, `/dev/stderr` → 2, `/dev/fd/N` and
/// `/proc/self/fd/N` → N, exactly as written.
fn descriptor_name(path: &Path) -> Option<i32> {
    let s = path.to_str()?;
    match s {
        "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        _ => {
            let n = s
                .strip_prefix("/dev/fd/")
                .or_else(|| s.strip_prefix("/proc/self/fd/"))?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            n.parse().ok()
        }
    }
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
    use std::os::unix::fs::MetadataExt;

    use crate::testing::{mkfifo, mknod, ScratchDir};

    fn scratch(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("rt-fs-{tag}"))
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
        assert_eq!(
            e.to_string(),
            format!("cannot write {}: disk on fire", p.display())
        );
        let source = std::error::Error::source(&e).expect("the step's error");
        assert_eq!(source.to_string(), "disk on fire");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!temp_path(&p).unwrap().exists());
    }

    /// The error named `.out.csv.tmp<pid>`, a file the user never heard of.
    #[test]
    fn missing_directory_names_the_path_given_not_the_temp_file() {
        let d = scratch("missing");
        let p = d.join("no/such/dir/out.csv");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            format!(
                "cannot write {}: directory {} does not exist",
                p.display(),
                d.join("no/such/dir").display()
            )
        );
    }

    /// `a-file/x.json` was reported as "directory a-file does not exist"
    /// (or a bare "Not a directory"): name the file in the way.
    #[test]
    fn a_file_in_the_way_is_named_not_a_directory() {
        let d = scratch("notdir");
        let f = d.join("a-file");
        std::fs::write(&f, "x").unwrap();
        for p in [f.join("x.json"), f.join("deeper/x.json")] {
            let e = write_atomic(&p, b"x").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "cannot write {}: {} is not a directory",
                    p.display(),
                    f.display()
                )
            );
            let e = check_output(&p).unwrap_err();
            assert!(
                e.to_string()
                    .ends_with(&format!("{} is not a directory", f.display())),
                "{e}"
            );
        }
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
    }

    #[test]
    fn path_without_file_name_is_refused() {
        let e = write_atomic(Path::new("/"), b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), "/ has no file name");
    }

    /// A FIFO at the output path was renamed over: its reader never got
    /// the data, and the FIFO became a regular file.
    #[test]
    fn fifo_output_is_written_into_and_stays_a_fifo() {
        let d = scratch("fifo");
        let p = d.join("out.json");
        mkfifo(&p);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = p.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(&reader).map_err(|e| e.to_string()));
        });
        write_atomic_with(&p, |w| w.write_all(b"{\"a\": 1}\n")).unwrap();
        let t = std::fs::symlink_metadata(&p).unwrap().file_type();
        assert!(t.is_fifo(), "{} is no longer a FIFO: {t:?}", p.display());
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the reader finished")
            .unwrap();
        assert_eq!(got, b"{\"a\": 1}\n");
        assert_eq!(check_output(&p).unwrap(), OutputKind::Stream);
        assert!(!temp_path(&p).unwrap().exists());
    }

    /// As root, `--json /dev/null` turned the machine's /dev/null into a
    /// regular file. Node copies in a scratch directory stand in for it:
    /// 1:3 (null) takes the data and stays a device; 1:7 (full) refuses
    /// every write with ENOSPC, which shows the data went into the device.
    #[test]
    fn char_device_output_is_written_into_and_stays_the_device() {
        let d = scratch("chardev");
        let null = d.join("null");
        let full = d.join("full");
        let made = mknod(&null, libc::S_IFCHR, 1, 3)
            .and_then(|()| mknod(&full, libc::S_IFCHR, 1, 7))
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&null)
                    .map(drop)
            });
        if let Err(e) = made {
            crate::testing::skip(format!(
                "cannot make and open a character device node in {} ({e}): needs root \
                 (CAP_MKNOD) and a filesystem without nodev",
                d.display()
            ));
            return;
        }
        write_atomic(&null, b"{\"results\": []}\n").unwrap();
        let m = std::fs::symlink_metadata(&null).unwrap();
        assert!(m.file_type().is_char_device(), "{}: {m:?}", null.display());
        assert_eq!(m.rdev(), libc::makedev(1, 3));
        assert_eq!(check_output(&null).unwrap(), OutputKind::Stream);

        let e = write_atomic(&full, b"{\"results\": []}\n").unwrap_err();
        let source = std::error::Error::source(&e).expect("the write's own error");
        let os = source
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error);
        assert_eq!(os, Some(libc::ENOSPC), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("cannot write {}: ", full.display())),
            "{e}"
        );
        let m = std::fs::symlink_metadata(&full).unwrap();
        assert!(m.file_type().is_char_device(), "{}: {m:?}", full.display());
        assert_eq!(m.rdev(), libc::makedev(1, 7));
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 2, "no temp file left: {names:?}");
    }

    /// A block device node was renamed over like any file; a result file
    /// is never written onto a disk either.
    #[test]
    fn block_device_output_is_refused_and_left_alone() {
        let d = scratch("blockdev");
        let p = d.join("disk");
        // 7:0 is loop0; nothing is ever opened.
        if let Err(e) = mknod(&p, libc::S_IFBLK, 7, 0) {
            crate::testing::skip(format!(
                "cannot make a block device node in {} ({e}): needs root (CAP_MKNOD)",
                d.display()
            ));
            return;
        }
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("is a block device"), "{e}");
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.file_type().is_block_device(), "{m:?}");
        assert_eq!(m.rdev(), libc::makedev(7, 0));
    }

    /// A symbolic link at the output path was replaced by a regular file;
    /// following it instead would write where the user did not say.
    #[test]
    fn symlink_output_is_refused_and_link_and_target_left_alone() {
        let d = scratch("symlink");
        let target = d.join("precious.json");
        std::fs::write(&target, b"keep me").unwrap();
        let link = d.join("out.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write_atomic(&link, b"new").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a symbolic link to {}: not written through (it leads somewhere you \
                 did not name) and not replaced; give the path it leads to itself",
                link.display(),
                target.display()
            )
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        assert!(!temp_path(&link).unwrap().exists());
        assert!(check_output(&link).is_err());
        // Also a link to a device, e.g. to /proc/self/fd/1.
        let to_fd = d.join("stdout.json");
        std::os::unix::fs::symlink("/proc/self/fd/1", &to_fd).unwrap();
        assert!(write_atomic(&to_fd, b"x").is_err());
        assert!(std::fs::symlink_metadata(&to_fd)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    /// The temp file was opened with O_CREAT|O_TRUNC: a link planted at
    /// `.out.json.tmp<pid>` was written through.
    #[test]
    fn temp_file_planted_as_a_link_is_not_written_through() {
        let d = scratch("planted");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let p = d.join("out.json");
        std::os::unix::fs::symlink(&victim, temp_path(&p).unwrap()).unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(std::fs::symlink_metadata(temp_path(&p).unwrap()).is_err());
    }

    #[test]
    fn directory_output_is_refused_and_left_alone() {
        let d = scratch("dir");
        let p = d.join("sub");
        std::fs::create_dir(&p).unwrap();
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            format!("{} is a directory; give a file name", p.display())
        );
        assert!(p.is_dir());
        assert!(!temp_path(&p).unwrap().exists());
    }

    /// `/dev/fd/N` and `/proc/self/fd/N` name a descriptor of this process
    /// (bash's idiom for "write here"): the data goes into it.
    #[test]
    fn descriptor_names_write_into_that_descriptor() {
        for prefix in ["/dev/fd/", "/proc/self/fd/"] {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors pipe writes.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            let path = PathBuf::from(format!("{prefix}{}", fds[1]));
            write_atomic(&path, b"through the pipe\n").unwrap();
            assert_eq!(check_output(&path).unwrap(), OutputKind::Descriptor(fds[1]));
            use std::os::fd::FromRawFd;
            // SAFETY: both descriptors are ours, each owned by one File.
            let (mut r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
            drop(w);
            let mut got = Vec::new();
            io::Read::read_to_end(&mut r, &mut got).unwrap();
            assert_eq!(got, b"through the pipe\n", "{}", path.display());
        }
        // A descriptor that is not open is named as such.
        let e = check_output(Path::new("/dev/fd/999999")).unwrap_err();
        assert!(
            e.to_string().contains("descriptor 999999 is not open"),
            "{e}"
        );
    }

    /// A writer that needs a path (the plots' PNG encoder) gets the same
    /// rules: a file replaced atomically, a FIFO written into, a link
    /// refused before anything is drawn.
    #[test]
    fn write_via_a_path_follows_the_same_rules() {
        let d = scratch("via");
        let p = d.join("plot.png");
        write_atomic(&p, b"old").unwrap();
        write_atomic_via(&p, |tmp| {
            let t = temp_path(&p).unwrap();
            assert_eq!(tmp.to_str(), Some(format!("{}.png", t.display()).as_str()));
            std::fs::write(tmp, b"new picture")
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new picture");
        let e = write_atomic_via(&p, |tmp| {
            std::fs::write(tmp, b"half")?;
            Err(io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot write {}: encoder failed", p.display())
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"new picture");
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1, "no temp file left: {names:?}");

        let fifo = d.join("fifo.png");
        mkfifo(&fifo);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(&reader).map_err(|e| e.to_string()));
        });
        let mut handed = PathBuf::new();
        write_atomic_via(&fifo, |tmp| {
            handed = tmp.to_path_buf();
            std::fs::write(tmp, b"through")
        })
        .unwrap();
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the reader finished")
            .unwrap();
        assert_eq!(got, b"through");
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(
            std::fs::symlink_metadata(&handed).is_err(),
            "{}",
            handed.display()
        );

        let link = d.join("link.png");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let e = write_atomic_via(&link, |_| panic!("drawn for a refused path")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(std::fs::read(&p).unwrap(), b"new picture");
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn descriptor_name_is_exact() {
        assert_eq!(descriptor_name(Path::new("/dev/stdout")), Some(1));
        assert_eq!(descriptor_name(Path::new("/dev/stderr")), Some(2));
        assert_eq!(descriptor_name(Path::new("/dev/fd/7")), Some(7));
        assert_eq!(descriptor_name(Path::new("/proc/self/fd/12")), Some(12));
        for other in [
            "/dev/fd/",
            "/dev/fd/+1",
            "/dev/fd/1x",
            "dev/stdout",
            "/dev/stdin",
        ] {
            assert_eq!(descriptor_name(Path::new(other)), None, "{other}");
        }
    }
}
