//! One writer per database: `watch` holds an exclusive `flock(2)` on
//! `DB.lock` (beside the database) for as long as it runs, with its pid
//! in the file. A second watch started on the same database — even at the
//! same moment — is refused at once with the first one's pid, instead of
//! one of them failing on "database is locked" (SQLite's busy timeout does
//! not cover two writers opening one new file together). Readers (`report`,
//! `check`, `show`) take no lock: they only probe it, to know whether a
//! watch is on the file (`Store::open_existing`). The lock ends with the process (also on
//! `kill -9`); the file stays.

use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file of database `db`: `DB.lock`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// Takes the writer's lock of `db`, or refuses naming the watch that
    /// holds it.
    ///
    /// # Errors
    /// [`ErrorKind::InUse`] naming the database and the other watch's pid
    /// when one runs on it; [`ErrorKind::Io`] when the lock file cannot be
    /// opened (a symbolic link there is not followed: refused).
    pub fn acquire(db: &Path) -> Result<WriterLock> {
        let path = lock_path(db);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "--db {}: cannot open its lock file {}: {e}",
                        db.display(),
                        path.display()
                    ),
                )
            })?;
        // A reader (`report`, `check`, `show`) probes the lock with a
        // shared flock it drops at once: a few tries over 100 ms see past
        // such a probe to a watch that really holds it.
        let mut r = -1;
        for _ in 0..20 {
            // SAFETY: the descriptor is open for the call's duration.
            r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("--db {}: cannot lock {}: {e}", db.display(), path.display()),
                ));
            }
            let who = match holder(&mut file) {
                Some(pid) => format!("pid {pid}"),
                None => "its pid not yet written".to_string(),
            };
            return Err(Error::new(
                ErrorKind::InUse,
                format!(
                    "--db {}: another firmtime watch ({who}) is writing this database; \
                     stop it first (`systemctl stop firmtime-watch` if it is the service) \
                     or give another --db",
                    db.display()
                ),
            ));
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(WriterLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid the lock's holder wrote (it writes it just after locking: a
/// few tries over 200 ms cover that moment).
fn holder(file: &mut File) -> Option<u32> {
    for _ in 0..20 {
        let mut s = String::new();
        if file.rewind().is_ok() && file.read_to_string(&mut s).is_ok() {
            if let Ok(pid) = s.trim().parse::<u32>() {
                return Some(pid);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's probe (a shared flock, dropped at once) at the moment a
    /// watch takes the lock: the watch was refused as if another watch
    /// held it. Now it tries again for up to 100 ms and gets it.
    #[test]
    fn a_readers_probe_does_not_refuse_a_starting_watch() {
        let d = std::env::temp_dir().join(format!("firmtime-watch-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let db = d.join("w.db");
        std::fs::write(lock_path(&db), "").unwrap();
        let probe = File::open(lock_path(&db)).unwrap();
        // SAFETY: the descriptor is open for the call's duration.
        let r = unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        assert_eq!(r, 0);
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            drop(probe);
        });
        let held = WriterLock::acquire(&db).expect("the watch gets the lock past the probe");
        release.join().unwrap();
        drop(held);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Two watches on one database: the second is refused at once, naming
    /// the first one's pid; once the first ends, the database is free.
    #[test]
    fn a_second_writer_is_refused_naming_the_first() {
        let d = std::env::temp_dir().join(format!("firmtime-watch-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let db = d.join("w.db");
        let first = WriterLock::acquire(&db).unwrap();
        assert_eq!(first.path(), d.join("w.db.lock"));
        assert_eq!(
            std::fs::read_to_string(first.path()).unwrap(),
            format!("{}\n", std::process::id())
        );
        let e = WriterLock::acquire(&db).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InUse);
        assert_eq!(
            e.message(),
            format!(
                "--db {}: another firmtime watch (pid {}) is writing this database; stop it first \
                 (`systemctl stop firmtime-watch` if it is the service) or give another --db",
                db.display(),
                std::process::id()
            )
        );
        drop(first);
        let again = WriterLock::acquire(&db).unwrap();
        drop(again);
        // A link planted at the lock's name is not followed.
        let other = d.join("o.db");
        std::os::unix::fs::symlink(d.join("target"), lock_path(&other)).unwrap();
        let e = WriterLock::acquire(&other).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(!d.join("target").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
