//! Loading plugins on someone else's behalf (a worker serving masters):
//! only from allowed directories, every file checked before it is
//! `dlopen`-ed, only the library asked for, and the scan cached.
//!
//! A library's constructors run the moment it is mapped, so a refusal after
//! loading comes too late. [`AllowedDirs`] therefore decides from the file
//! alone:
//!
//! 1. its real path (symlinks resolved) lies directly in an allowed
//!    directory — a symlink to a file elsewhere is refused;
//! 2. opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO does not hang the
//!    open), it is a regular file, owned by root or by this process's
//!    effective user, and writable by neither group nor others;
//! 3. it is mapped through `/proc/self/fd/N` of that very descriptor, so the
//!    file checked is the file loaded even if the name is swapped meanwhile.
//!
//! `LIBRARY:LABEL` loads that one library and nothing else. A label or ID
//! needs the index of the directories: it is built once (every file that
//! passes the checks is loaded once and kept loaded) and rebuilt only when
//! a directory's modification time changes or a chosen library's file
//! changed (inode, size or mtime), so requests do not reload anything.
//!
//! Not RT: this loads libraries, allocates and takes a mutex.

use crate::error::{Error, ErrorKind, Result};
use crate::plugin::{Library, Plugin};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What identifies a file's contents cheaply: device, inode, size, mtime.
type Identity = (u64, u64, u64, i64, i64);

fn identity(m: &std::fs::Metadata) -> Identity {
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())
}

/// Directory mtimes this close to a scan's start are not trusted to show later changes.
const RACY_SECS: i64 = 2;

/// A directory's state: inode and modification time (entries added, removed, renamed).
type DirStamp = Option<(u64, i64, i64)>;

fn dir_stamp(dir: &Path) -> DirStamp {
    std::fs::metadata(dir)
        .ok()
        .map(|m| (m.ino(), m.mtime(), m.mtime_nsec()))
}

struct Loaded {
    /// The name in the directory (`cmt.so`).
    name: String,
    lib: Arc<Library>,
    identity: Identity,
}

#[derive(Default)]
struct Index {
    /// `None` until the first scan.
    stamps: Option<Vec<DirStamp>>,
    libs: Vec<Loaded>,
    refused: Vec<String>,
    loads: u64,
    scans: u64,
}

/// Directories whose libraries may be loaded, with the checks and the
/// cache described in the [module docs](self). Cheap to clone: clones
/// share the cache.
#[derive(Clone, Default)]
pub struct AllowedDirs {
    dirs: Vec<PathBuf>,
    index: Arc<Mutex<Index>>,
}

impl std::fmt::Debug for AllowedDirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllowedDirs")
            .field("dirs", &self.dirs)
            .finish_non_exhaustive()
    }
}

impl AllowedDirs {
    /// An allow-list of `dirs`, each resolved to its real path.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming a directory that does not exist
    /// or is not a directory.
    pub fn new(dirs: &[PathBuf]) -> Result<Self> {
        let dirs = dirs
            .iter()
            .map(|d| {
                let real = d.canonicalize().map_err(|e| {
                    Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "plugin directory {}: {e}; give an existing directory of LADSPA libraries",
                            d.display()
                        ),
                    )
                })?;
                if !real.is_dir() {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "plugin directory {}: not a directory; give a directory of LADSPA libraries",
                            d.display()
                        ),
                    ));
                }
                Ok(real)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            dirs,
            index: Arc::default(),
        })
    }

    /// The directories (real paths).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// How many times a library was `dlopen`-ed through this list (clones
    /// included): what the cache saves shows here.
    pub fn loads(&self) -> u64 {
        self.lock().loads
    }

    /// How many times the directories were scanned.
    pub fn scans(&self) -> u64 {
        self.lock().scans
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        // A panic while holding the lock leaves a usable index (at worst stale).
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks `name` in `dir` (see the [module docs](self)) and opens it.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] when it does not exist;
    /// [`ErrorKind::PermissionDenied`] naming the check it failed.
    pub fn check(&self, dir: &Path, name: &str) -> Result<(PathBuf, File)> {
        let path = dir.join(name);
        let denied = |why: String| {
            Error::new(
                ErrorKind::PermissionDenied,
                format!("{}: {why}; it is not loaded", path.display()),
            )
        };
        let real = path.canonicalize().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no LADSPA library at {}", path.display()),
                )
            } else {
                denied(format!("cannot resolve its real path ({e})"))
            }
        })?;
        if !real
            .parent()
            .is_some_and(|p| self.dirs.iter().any(|d| d == p))
        {
            return Err(denied(format!(
                "resolves to {}, outside the allowed directories ({})",
                real.display(),
                self.dirs_text()
            )));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(&real)
            .map_err(|e| denied(format!("cannot open {} ({e})", real.display())))?;
        let m = file
            .metadata()
            .map_err(|e| denied(format!("cannot stat {} ({e})", real.display())))?;
        if !m.file_type().is_file() {
            return Err(denied(format!("{} is not a regular file", real.display())));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if m.uid() != 0 && m.uid() != euid {
            return Err(denied(format!(
                "{} is owned by uid {}, neither root nor this process's user (uid {euid})",
                real.display(),
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(denied(format!(
                "{} is writable by its group or others (mode {:o}); `chmod go-w` it",
                real.display(),
                m.mode() & 0o7777
            )));
        }
        Ok((real, file))
    }

    /// Loads a file [`AllowedDirs::check`] accepted, through its descriptor.
    fn load_checked(idx: &mut Index, real: &Path, file: &File) -> Result<Arc<Library>> {
        idx.loads += 1;
        let fd = file
            .try_clone()
            .map_err(|e| Error::new(ErrorKind::LoadFailed, format!("{}: {e}", real.display())))?;
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Library::load_as(&fd_path, real, Some(fd))
    }

    /// Rescans when a directory changed (or never was scanned): every
    /// `*.so` that passes the checks is loaded once; unchanged files keep
    /// their loaded library.
    fn refresh(&self, idx: &mut Index, force: bool) {
        let stamps: Vec<DirStamp> = self.dirs.iter().map(|d| dir_stamp(d)).collect();
        if !force && idx.stamps.as_ref() == Some(&stamps) {
            return;
        }
        idx.scans += 1;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let old = std::mem::take(&mut idx.libs);
        idx.refused.clear();
        for dir in &self.dirs {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".so"))
                .collect();
            names.sort();
            for name in names {
                let (real, file) = match self.check(dir, &name) {
                    Ok(x) => x,
                    Err(e) => {
                        idx.refused.push(e.message().to_string());
                        continue;
                    }
                };
                let Ok(m) = file.metadata() else { continue };
                let id = identity(&m);
                if idx.libs.iter().any(|l| l.identity == id) {
                    continue; // a symlink to a library already indexed
                }
                if let Some(l) = old.iter().find(|l| l.identity == id && l.name == name) {
                    idx.libs.push(Loaded {
                        name,
                        lib: Arc::clone(&l.lib),
                        identity: id,
                    });
                    continue;
                }
                match Self::load_checked(idx, &real, &file) {
                    Ok(lib) => idx.libs.push(Loaded {
                        name,
                        lib,
                        identity: id,
                    }),
                    Err(e) => idx.refused.push(e.message().to_string()),
                }
            }
        }
        // A directory changed within the clock's granularity of the scan
        // may change again with the same mtime (git's "racy clean"): trust
        // the stamps only once they are old enough.
        let racy = stamps
            .iter()
            .any(|s| s.is_some_and(|(_, sec, _)| sec >= started - RACY_SECS));
        idx.stamps = (!racy).then_some(stamps);
    }

    /// Whether the file behind a loaded library is still the one loaded.
    fn unchanged(l: &Loaded) -> bool {
        std::fs::metadata(l.lib.path()).is_ok_and(|m| identity(&m) == l.identity)
    }

    /// Resolves a label, an ID or `LIBRARY:LABEL` (`LIBRARY` a file name
    /// in an allowed directory, with or without `.so`; never a path).
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] for a spec naming a path or a
    /// library that fails a check (the message says which);
    /// [`ErrorKind::NotFound`] when no allowed library has it (the message
    /// counts the files refused and says why for the first ones);
    /// [`ErrorKind::LoadFailed`] when the library does not load.
    pub fn find(&self, spec: &str) -> Result<Plugin> {
        if spec.contains('/') {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "plugin '{}' names a path: only libraries in the allowed directories ({}) \
                     are loaded; name the plugin by label, ID or LIBRARY:LABEL",
                    crate::shown(spec),
                    self.dirs_text()
                ),
            ));
        }
        let mut idx = self.lock();
        if let Some((file, label)) = spec.rsplit_once(':') {
            return self.find_in_library(&mut idx, file, label);
        }
        let by_id = !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit());
        let id: Option<u64> = if by_id { spec.parse().ok() } else { None };
        for attempt in 0..2 {
            self.refresh(&mut idx, attempt > 0);
            let hit = idx.libs.iter().find_map(|l| {
                let p = l.lib.plugins().into_iter().find(|p| {
                    let i = p.info();
                    if by_id {
                        Some(i.unique_id) == id
                    } else {
                        i.label == spec
                    }
                })?;
                Some((p, Self::unchanged(l)))
            });
            match hit {
                Some((p, true)) => return Ok(p),
                // The file was replaced in place: rescan once.
                Some((_, false)) if attempt == 0 => continue,
                Some((_, false)) => break,
                None => break,
            }
        }
        Err(self.not_found(&idx, &format!("'{}'", crate::shown(spec))))
    }

    fn find_in_library(&self, idx: &mut Index, file: &str, label: &str) -> Result<Plugin> {
        let name = if file.ends_with(".so") {
            file.to_string()
        } else {
            format!("{file}.so")
        };
        if name.starts_with('.') || name == ".so" {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "library '{}': give a file name such as cmt or cmt.so",
                    crate::shown(file)
                ),
            ));
        }
        for dir in &self.dirs {
            match self.check(dir, &name) {
                Ok((real, f)) => {
                    let id = f
                        .metadata()
                        .map(|m| identity(&m))
                        .map_err(|e| Error::new(ErrorKind::LoadFailed, e.to_string()))?;
                    let lib = match idx.libs.iter().find(|l| l.identity == id) {
                        Some(l) => Arc::clone(&l.lib),
                        None => {
                            let lib = Self::load_checked(idx, &real, &f)?;
                            // Remembered for the next request; a later scan keeps it.
                            idx.libs.push(Loaded {
                                name: name.clone(),
                                lib: Arc::clone(&lib),
                                identity: id,
                            });
                            lib
                        }
                    };
                    return lib
                        .plugins()
                        .into_iter()
                        .find(|p| p.info().label == label)
                        .ok_or_else(|| {
                            let labels: Vec<String> =
                                lib.infos().map(|i| i.label.clone()).collect();
                            Error::new(
                                ErrorKind::NotFound,
                                format!(
                                    "{} has no plugin labelled {}; its labels: {}",
                                    real.display(),
                                    crate::shown(label),
                                    labels.join(", ")
                                ),
                            )
                        });
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Err(self.not_found(idx, &format!("library {}", crate::shown(&name))))
    }

    fn not_found(&self, idx: &Index, what: &str) -> Error {
        let mut msg = format!(
            "no LADSPA plugin {what} in {} ({} libraries indexed)",
            self.dirs_text(),
            idx.libs.len()
        );
        if !idx.refused.is_empty() {
            msg.push_str(&format!(
                "; {} file(s) refused: {}",
                idx.refused.len(),
                idx.refused
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        Error::new(ErrorKind::NotFound, msg)
    }

    fn dirs_text(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmtime_rt::testing::ScratchDir;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory for one test, removed when it ends (pass or fail).
    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new(&format!("ladspa-allowed-{name}"))
    }

    #[test]
    fn files_that_fail_a_check_are_refused_before_loading() {
        let root = scratch("checks");
        let (dir, out) = (root.0.join("allowed"), root.0.join("outside"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("x.so"), b"not a library").unwrap();
        std::os::unix::fs::symlink(out.join("x.so"), dir.join("link.so")).unwrap();
        std::fs::write(dir.join("open.so"), b"not a library").unwrap();
        std::fs::set_permissions(dir.join("open.so"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        std::fs::create_dir(dir.join("sub.so")).unwrap();
        let a = AllowedDirs::new(std::slice::from_ref(&dir)).unwrap();
        let e = a.check(&a.dirs()[0], "link.so").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(
            e.message().contains("outside the allowed directories"),
            "{e}"
        );
        let e = a.check(&a.dirs()[0], "open.so").unwrap_err();
        assert!(
            e.message().contains("writable by its group or others"),
            "{e}"
        );
        let e = a.check(&a.dirs()[0], "sub.so").unwrap_err();
        assert!(e.message().contains("not a regular file"), "{e}");
        let e = a.check(&a.dirs()[0], "none.so").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        // By name the refusal is the answer; by label the index counts them.
        let e = a.find("link:x").unwrap_err();
        assert!(
            e.message().contains("outside the allowed directories"),
            "{e}"
        );
        let e = a.find("x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("3 file(s) refused"), "{e}");
        assert_eq!(a.loads(), 0, "nothing was dlopen-ed");
        let e = a.find("../outside/x:x").unwrap_err();
        assert!(e.message().contains("names a path"), "{e}");
    }

    #[test]
    fn the_scan_is_cached_until_the_directory_changes() {
        if !Path::new("/usr/lib/ladspa/amp.so").exists() {
            firmtime_rt::testing::skip("/usr/lib/ladspa/amp.so not installed (scripts/setup.sh)");
            return;
        }
        let scratch = scratch("cache");
        let dir = &scratch.0;
        std::fs::copy("/usr/lib/ladspa/amp.so", dir.join("amp.so")).unwrap();
        // An mtime this recent is not trusted (it could change within the clock's tick).
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        File::open(dir).unwrap().set_modified(past).unwrap();
        let a = AllowedDirs::new(std::slice::from_ref(dir)).unwrap();
        // By LIBRARY:LABEL only that library is loaded, and no scan happens.
        assert_eq!(a.find("amp:amp_mono").unwrap().info().label, "amp_mono");
        assert_eq!((a.loads(), a.scans()), (1, 0));
        for _ in 0..3 {
            assert_eq!(a.find("amp_stereo").unwrap().info().label, "amp_stereo");
        }
        assert_eq!((a.loads(), a.scans()), (1, 1), "one scan, nothing reloaded");
        assert!(a.find("1049").is_ok(), "by unique ID");
        // A new file changes the directory's mtime: rescanned, only the new file loaded.
        std::fs::copy("/usr/lib/ladspa/delay.so", dir.join("delay.so")).unwrap();
        let d = a.find("delay_5s");
        assert!(d.is_ok(), "{:?}", d.err());
        assert_eq!((a.loads(), a.scans()), (2, 2));
    }
}
