//! Finding plugins: the LADSPA search path, scanning its directories, and
//! resolving what a user typed (`LABEL`, `ID`, `FILE:LABEL`) to a plugin.
//! Not RT: this loads libraries and allocates.

use crate::error::{Error, ErrorKind, Result};
use crate::plugin::{Library, Plugin};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Directories searched when `LADSPA_PATH` is unset or empty.
pub const DEFAULT_PATH: &[&str] = &["/usr/lib/ladspa", "/usr/local/lib/ladspa"];

/// The directories to search: `LADSPA_PATH` (colon-separated, in order)
/// when set and non-empty, else [`DEFAULT_PATH`].
pub fn search_path() -> Vec<PathBuf> {
    match std::env::var_os("LADSPA_PATH") {
        Some(p) if !p.is_empty() => std::env::split_paths(&p)
            .filter(|d| !d.as_os_str().is_empty())
            .collect(),
        _ => DEFAULT_PATH.iter().map(PathBuf::from).collect(),
    }
}

fn path_text(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Every library found in a set of directories.
#[derive(Debug)]
pub struct Scan {
    /// The directories scanned, in order.
    pub dirs: Vec<PathBuf>,
    /// Libraries that loaded, in directory order, then file-name order.
    pub libraries: Vec<Arc<Library>>,
    /// Libraries that did not load, one error each.
    pub failures: Vec<Error>,
}

impl Scan {
    /// Loads every `*.so` in `dirs` (missing directories are skipped).
    pub fn dirs(dirs: &[PathBuf]) -> Scan {
        let mut scan = Scan {
            dirs: dirs.to_vec(),
            libraries: Vec::new(),
            failures: Vec::new(),
        };
        for dir in dirs {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "so") && p.is_file())
                .collect();
            files.sort();
            for f in files {
                match Library::load(&f) {
                    Ok(lib) => scan.libraries.push(lib),
                    Err(e) => scan.failures.push(e),
                }
            }
        }
        scan
    }

    /// Scans [`search_path`].
    pub fn search_path() -> Scan {
        Scan::dirs(&search_path())
    }

    /// Every usable plugin, in library order then descriptor order.
    pub fn plugins(&self) -> Vec<Plugin> {
        self.libraries.iter().flat_map(|l| l.plugins()).collect()
    }

    /// Resolves what a user typed to one plugin:
    /// - `1181`: the first plugin with that unique ID;
    /// - `FILE:LABEL`: label `LABEL` in library `FILE` (a path, or a file
    ///   name in the scanned directories, with or without `.so`);
    /// - `LABEL`: the first plugin with that label in search order (labels
    ///   are unique only within a library; use `FILE:LABEL` to choose).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] naming what was searched and how to list
    /// what is there; [`ErrorKind::LoadFailed`] when a `FILE` given as a
    /// path does not load.
    pub fn find(&self, spec: &str) -> Result<Plugin> {
        let not_found = |what: String| {
            let by_label = what.starts_with("labelled");
            let mut msg = format!(
                "no LADSPA plugin {what} in {} ({} libraries searched); \
                 `firmtime ladspa list` shows what is installed, LADSPA_PATH adds directories",
                path_text(&self.dirs),
                self.libraries.len()
            );
            let close: Vec<String> = self
                .plugins()
                .iter()
                .map(|p| p.info().label.clone())
                .filter(|l| {
                    let (a, b) = (l.to_lowercase(), spec.to_lowercase());
                    a.contains(&b) || b.contains(&a)
                })
                .take(5)
                .collect();
            if by_label && !close.is_empty() {
                msg.push_str(&format!("; similar labels: {}", close.join(", ")));
            }
            Error::new(ErrorKind::NotFound, msg)
        };
        if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
            let id: u64 = spec
                .parse()
                .map_err(|_| not_found(format!("with ID {}", crate::shown(spec))))?;
            return self
                .plugins()
                .into_iter()
                .find(|p| p.info().unique_id == id)
                .ok_or_else(|| not_found(format!("with ID {id}")));
        }
        if let Some((file, label)) = spec.rsplit_once(':') {
            let lib = if file.contains('/') {
                Library::load(Path::new(file))?
            } else {
                let want = file.strip_suffix(".so").unwrap_or(file);
                self.libraries
                    .iter()
                    .find(|l| l.path().file_stem().is_some_and(|s| s == want))
                    .cloned()
                    .ok_or_else(|| not_found(format!("library {}", crate::shown(file))))?
            };
            return lib
                .plugins()
                .into_iter()
                .find(|p| p.info().label == label)
                .ok_or_else(|| {
                    let labels: Vec<String> = lib.infos().map(|i| i.label.clone()).collect();
                    Error::new(
                        ErrorKind::NotFound,
                        format!(
                            "{} has no plugin labelled {}; its labels: {}",
                            lib.path().display(),
                            crate::shown(label),
                            labels.join(", ")
                        ),
                    )
                });
        }
        self.plugins()
            .into_iter()
            .find(|p| p.info().label == spec)
            .ok_or_else(|| not_found(format!("labelled {}", crate::shown(spec))))
    }
}
