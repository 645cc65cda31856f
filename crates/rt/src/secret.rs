//! The one rule for reading secrets (pre-shared keys, bearer tokens).
//!
//! [`read_secret`] reads a file only if it is a secret worth trusting:
//!
//! - a **regular file**: it is opened without blocking (`O_NONBLOCK`, so a
//!   FIFO with no writer cannot hang start-up) and the opened descriptor is
//!   checked with `fstat` before a byte is read (a device such as
//!   `/dev/zero` is refused without reading it);
//! - **small**: at most the caller's cap (a few KiB), checked on the size
//!   and again while reading (the file may grow in between);
//! - **not writable by others**: a file the group or the world may write,
//!   or that another user than root or this process's user owns (who can
//!   make it writable at will), is refused: whoever can write a key can
//!   choose it. This is the rule plugin libraries already follow;
//! - **readable by others** is accepted with a [`SecretWarning`] the caller
//!   shows (this library never prints): whoever can read a key can use it.
//!
//! Symbolic links are followed (secrets are often mounted through them, as
//! Kubernetes does); the checks apply to the file that was opened, not to the
//! link, and the directories on the way are not checked.
//!
//! ```
//! use std::os::unix::fs::PermissionsExt;
//! let p = std::env::temp_dir().join(format!("firmtime-secret-doc-{}", std::process::id()));
//! std::fs::write(&p, b"0123456789abcdef")?;
//! std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
//! let s = firmtime_rt::secret::read_secret(&p, 4096, "key file")?;
//! assert_eq!(s.bytes(), b"0123456789abcdef");
//! assert!(s.warning().is_none());
//! std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666))?;
//! assert!(firmtime_rt::secret::read_secret(&p, 4096, "key file").is_err());
//! # std::fs::remove_file(&p)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Not for the real-time path: it allocates and blocks on the disk.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The cap for a key or token file: 4 KiB.
pub const DEFAULT_MAX_LEN: u64 = 4096;

/// Why a secret file was refused, to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SecretErrorKind {
    /// It could not be opened (missing, no permission, a socket…).
    Open,
    /// It is not a regular file (a FIFO, a device, a directory).
    NotRegular,
    /// It holds more than the cap.
    TooLarge,
    /// The group or the world may write it, or another user owns it.
    WritableByOthers,
    /// Reading it failed.
    Read,
}

/// A secret file refused: the kind, and a message naming what the file is
/// for, the file, what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretError {
    kind: SecretErrorKind,
    message: String,
}

impl SecretError {
    /// Why, to match on.
    pub fn kind(&self) -> SecretErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SecretError {}

/// A secret file the group or the world may read: accepted, to be shown
/// to the user (its `Display` is the whole line, without a prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretWarning {
    what: String,
    path: PathBuf,
    mode: u32,
}

impl SecretWarning {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its permission bits (e.g. `0o644`).
    pub fn mode(&self) -> u32 {
        self.mode
    }
}

impl fmt::Display for SecretWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match (self.mode & 0o040 != 0, self.mode & 0o004 != 0) {
            (true, true) => "its group and every user",
            (true, false) => "its group",
            _ => "every user",
        };
        write!(
            f,
            "{} {} is readable by {who} (mode {:04o}): whoever can read it can use it; \
             chmod 600 {}",
            self.what,
            self.path.display(),
            self.mode,
            self.path.display()
        )
    }
}

/// The bytes of a secret file, and a warning if others may read it. The
/// bytes are overwritten with zeros when it drops; `Debug` never shows them.
pub struct Secret {
    bytes: Vec<u8>,
    warning: Option<SecretWarning>,
}

impl Secret {
    /// The file's bytes, as read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Set when the group or the world may read the file: the caller shows it.
    pub fn warning(&self) -> Option<&SecretWarning> {
        self.warning.as_ref()
    }

    /// The warning, taken out (to keep after the bytes are used).
    pub fn take_warning(&mut self) -> Option<SecretWarning> {
        self.warning.take()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("len", &self.bytes.len())
            .field("warning", &self.warning)
            .finish_non_exhaustive()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.bytes.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into the buffer.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

fn file_type_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads the secret file `path` (`what` names it in messages: `key file`,
/// `--metrics-token`) under the rule of this module: a regular file of at
/// most `max_len` bytes that neither the group nor the world may write,
/// owned by root or by this process's user. A file others may read is
/// accepted with a [`Secret::warning`].
///
/// # Errors
/// A [`SecretError`] whose message names `what`, the file, what is wrong
/// and how to fix it.
pub fn read_secret(path: &Path, max_len: u64, what: &str) -> Result<Secret, SecretError> {
    let err = |kind, why: String| SecretError {
        kind,
        message: format!("{what} {}: {why}", path.display()),
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| err(SecretErrorKind::Open, e.to_string()))?;
    // The descriptor opened, not the path again: nothing can swap the file in between.
    let m = f
        .metadata()
        .map_err(|e| err(SecretErrorKind::Open, e.to_string()))?;
    if !m.file_type().is_file() {
        return Err(err(
            SecretErrorKind::NotRegular,
            format!(
                "{}, not a regular file: give a regular file",
                file_type_name(m.file_type())
            ),
        ));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and every user",
            (true, false) => "its group",
            _ => "every user",
        };
        return Err(err(
            SecretErrorKind::WritableByOthers,
            format!(
                "{who} may write it (mode {mode:04o}), so anyone of them could choose the \
                 secret: chmod 600 {}",
                path.display()
            ),
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.uid() != 0 && m.uid() != me {
        return Err(err(
            SecretErrorKind::WritableByOthers,
            format!(
                "owned by uid {}, neither root nor this user (uid {me}), who can change it at \
                 will: chown it to this user or root",
                m.uid()
            ),
        ));
    }
    if m.len() > max_len {
        return Err(err(
            SecretErrorKind::TooLarge,
            format!(
                "{} bytes, more than the {max_len} a {what} may have",
                m.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    // `take`: the file may grow between fstat and read.
    f.take(max_len + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(SecretErrorKind::Read, e.to_string()))?;
    if bytes.len() as u64 > max_len {
        // Zeroed on drop, as any secret.
        drop(Secret {
            bytes,
            warning: None,
        });
        return Err(err(
            SecretErrorKind::TooLarge,
            format!("more than the {max_len} bytes a {what} may have"),
        ));
    }
    let warning = (mode & 0o044 != 0).then(|| SecretWarning {
        what: what.to_string(),
        path: path.to_path_buf(),
        mode,
    });
    Ok(Secret { bytes, warning })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A scratch directory for one test, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir()
                .join(format!("firmtime-rt-secret-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Self(d)
        }

        fn file(&self, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_private_regular_file_is_read_without_a_warning() {
        let d = Dir::new("good");
        let p = d.file("k", b"0123456789abcdef\n", 0o600);
        let s = read_secret(&p, DEFAULT_MAX_LEN, "key file").unwrap();
        assert_eq!(s.bytes(), b"0123456789abcdef\n");
        assert!(s.warning().is_none());
        // Read-only for its owner is as good.
        let p = d.file("r", b"x", 0o400);
        assert!(read_secret(&p, 10, "key file").unwrap().warning().is_none());
        assert!(!format!("{s:?}").contains("0123"), "{s:?}");
    }

    #[test]
    fn a_file_others_may_read_is_read_with_a_warning_naming_it() {
        let d = Dir::new("readable");
        for (mode, who) in [
            (0o644, "its group and every user"),
            (0o640, "its group"),
            (0o604, "every user"),
        ] {
            let p = d.file(&format!("k{mode:o}"), b"secret", mode);
            let s = read_secret(&p, 100, "--metrics-token").unwrap();
            assert_eq!(s.bytes(), b"secret");
            let w = s.warning().expect("a warning").to_string();
            assert!(
                w.starts_with(&format!("--metrics-token {}", p.display()))
                    && w.contains(who)
                    && w.contains(&format!("mode {mode:04o}"))
                    && w.contains("chmod 600"),
                "{w}"
            );
        }
    }

    /// Regression (issue 28 item 6): key files of mode 0666 and 0662 were
    /// accepted silently.
    #[test]
    fn a_file_others_may_write_is_refused() {
        let d = Dir::new("writable");
        for (mode, who) in [
            (0o666, "its group and every user"),
            (0o662, "its group and every user"),
            (0o620, "its group"),
            (0o602, "every user"),
        ] {
            let p = d.file(&format!("k{mode:o}"), b"0123456789abcdef", mode);
            let e = read_secret(&p, 100, "key file").unwrap_err();
            assert_eq!(e.kind(), SecretErrorKind::WritableByOthers, "{e}");
            let m = e.to_string();
            assert!(
                m.starts_with(&format!("key file {}: {who} may write it", p.display()))
                    && m.contains(&format!("mode {mode:04o}"))
                    && m.contains("chmod 600"),
                "{m}"
            );
        }
    }

    /// Regression (issue 28 item 6): `--metrics-token /dev/zero` ran out of memory.
    #[test]
    fn a_device_is_refused_without_reading_it() {
        let e = read_secret(Path::new("/dev/zero"), 100, "--metrics-token").unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::NotRegular);
        assert_eq!(
            e.to_string(),
            "--metrics-token /dev/zero: a character device, not a regular file: give a regular file"
        );
        let d = Dir::new("dir");
        let e = read_secret(&d.0, 100, "key file").unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::NotRegular);
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    /// Regression (issue 28 item 6): a FIFO as `--metrics-token` hung start-up.
    #[test]
    fn a_fifo_without_a_writer_is_refused_at_once() {
        let d = Dir::new("fifo");
        let fifo = d.0.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(read_secret(&f2, 100, "key file").map(|_| ()));
        });
        // A hang would block forever; 10 s is far beyond an open and an fstat.
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("read_secret returned (it must not wait for a writer)");
        let e = r.unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::NotRegular);
        assert!(e.to_string().contains("a FIFO"), "{e}");
    }

    /// Regression (issue 28 item 6): a 2.8 MB token line was accepted.
    #[test]
    fn a_file_over_the_cap_is_refused() {
        let d = Dir::new("big");
        let p = d.file("big", &vec![b'a'; 2_800_000], 0o600);
        let e = read_secret(&p, DEFAULT_MAX_LEN, "--metrics-token").unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::TooLarge);
        assert!(
            e.to_string()
                .contains("2800000 bytes, more than the 4096 a --metrics-token may have"),
            "{e}"
        );
        // At the cap exactly is fine.
        let p = d.file("cap", &[b'b'; 4096], 0o600);
        assert_eq!(
            read_secret(&p, DEFAULT_MAX_LEN, "key file")
                .unwrap()
                .bytes()
                .len(),
            4096
        );
    }

    #[test]
    fn a_file_another_user_owns_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            crate::testing::skip("needs root to give a file to another user (chown)");
            return;
        }
        let d = Dir::new("owner");
        let p = d.file("k", b"0123456789abcdef", 0o600);
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let e = read_secret(&p, 100, "key file").unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::WritableByOthers);
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }

    #[test]
    fn a_missing_file_names_the_file() {
        let e = read_secret(Path::new("/nonexistent/k"), 100, "key file").unwrap_err();
        assert_eq!(e.kind(), SecretErrorKind::Open);
        assert!(
            e.to_string().starts_with("key file /nonexistent/k: "),
            "{e}"
        );
    }
}
