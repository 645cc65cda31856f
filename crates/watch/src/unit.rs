//! `watch install`: the systemd unit that runs `firmtime watch` as a
//! service (restarts on failure, logs to the journal, stops on SIGTERM),
//! with the least it needs, and the binary it runs at a stable path.
//!
//! What the unit grants and why (docs/WATCH.md, "The service"):
//!
//! - It runs as root, because tracefs (`/sys/kernel/tracing`, mode 0700)
//!   belongs to root; but with only `CAP_SYS_NICE` (SCHED_FIFO, pinning)
//!   and `CAP_IPC_LOCK` (mlockall) in its bounding set. Tracefs needs no
//!   capability beyond owning its files (tried with `setpriv
//!   --bounding-set=-all,+sys_nice,+ipc_lock --no-new-privs`: the
//!   explaining trace runs); mounting it would need `CAP_SYS_ADMIN`, which
//!   the unit does not grant: Debian mounts it at boot.
//! - The file system is read-only but for the database's directory
//!   (`StateDirectory=firmtime` for the default, `ReadWritePaths=` for
//!   another); homes, /tmp, devices and (without `--metrics-listen`) the
//!   network are private or hidden; `/sys` stays writable for tracefs
//!   (no `ProtectKernelTunables=`); `RestrictRealtime=` is off because
//!   real-time scheduling is the point.
//! - `ExecStopPost=` runs `firmtime watch clean-trace`, which removes the
//!   tracefs instances of firmtime processes that are gone, so a run
//!   killed with SIGKILL does not leave its instance tracing
//!   ([`clean_trace`]).

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where `watch install` writes the unit by default.
pub const UNIT_PATH: &str = "/etc/systemd/system/firmtime-watch.service";

/// Where `watch install` suggests installing the binary the unit runs.
pub const STABLE_EXE: &str = "/usr/local/bin/firmtime";

/// The directory of the default database (`StateDirectory=firmtime`).
pub const STATE_DIR: &str = "/var/lib/firmtime";

/// Where tracefs keeps its instances.
pub const TRACEFS_INSTANCES: &str = "/sys/kernel/tracing/instances";

/// Directories `ProtectHome=yes` hides from the service.
const HIDDEN: [&str; 3] = ["/home", "/root", "/run/user"];

/// Why a unit cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnitError {
    /// A value holds a character the unit file cannot carry as given
    /// (a newline ends `ExecStart=`, other control characters are
    /// misread): `flag` names it (`--db`, or `the binary path`).
    Unwritable {
        /// The flag (or `--exe`).
        flag: String,
        /// The value as given.
        value: String,
        /// The character, named (`a newline`, `U+0001`).
        what: String,
    },
    /// A path the service would need lies where `ProtectHome=yes` hides it.
    Hidden {
        /// The flag.
        flag: String,
        /// The path.
        path: PathBuf,
    },
    /// A relative path: the service runs in `/`.
    Relative {
        /// The flag.
        flag: String,
        /// The path.
        path: PathBuf,
    },
    /// The binary the unit would run is in a cargo build tree.
    BuildTree {
        /// The binary.
        exe: PathBuf,
        /// The build tree (a cargo target directory).
        tree: PathBuf,
    },
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::Unwritable { flag, value, what } => write!(
                f,
                "{flag}: the value {value:?} holds {what}, which systemd would misread in the unit \
                 (a newline ends the ExecStart= line): not written; give it without control characters"
            ),
            UnitError::Hidden { flag, path } if flag == "--exe" => write!(
                f,
                "--exe {}: the service cannot see it (the unit has ProtectHome=yes, which hides {}): \
                 install a copy at a stable path and point the unit at it: \
                 `sudo {} watch install --exe {STABLE_EXE} -- WATCH-FLAGS`",
                path.display(),
                HIDDEN.join(", "),
                path.display()
            ),
            UnitError::Hidden { flag, path } => write!(
                f,
                "{flag} {}: the service cannot see it (the unit has ProtectHome=yes, which hides {}): \
                 use a path outside them, e.g. under {STATE_DIR}",
                path.display(),
                HIDDEN.join(", ")
            ),
            UnitError::Relative { flag, path } => write!(
                f,
                "{flag} {}: a relative path; the service runs in / — give an absolute path",
                path.display()
            ),
            UnitError::BuildTree { exe, tree } => write!(
                f,
                "the binary {} is in a cargo build tree ({}); a unit pointing there breaks at the \
                 next build or `cargo clean`. Install a copy at a stable path and point the unit at it: \
                 `sudo {} watch install --exe {STABLE_EXE} -- WATCH-FLAGS`",
                exe.display(),
                tree.display(),
                exe.display()
            ),
        }
    }
}

impl std::error::Error for UnitError {}

/// What the unit runs.
#[derive(Debug, Clone)]
pub struct Service<'a> {
    /// The binary (a stable path: see [`build_tree`]).
    pub exe: &'a Path,
    /// The `firmtime watch` flags, the database pinned (`--db PATH`).
    pub args: &'a [String],
    /// The database file (its directory is made writable).
    pub db: &'a Path,
}

/// Quotes one argument for systemd's `ExecStart=` (double quotes when it
/// holds a space, a quote, a backslash or a `%` specifier; `$` doubled).
/// Control characters are refused before this ([`check_args`]).
pub fn quote_arg(a: &str) -> String {
    let a = a.replace('%', "%%").replace('$', "$$");
    if a.is_empty()
        || a.chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'' || c == ';')
    {
        format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        a
    }
}

/// The control character in `s` that the unit cannot carry, named.
fn control(s: &str) -> Option<String> {
    s.chars().find(|c| c.is_control()).map(|c| match c {
        '\n' => "a newline".to_string(),
        '\r' => "a carriage return".to_string(),
        '\t' => "a tab".to_string(),
        c => format!("the control character U+{:04X}", u32::from(c)),
    })
}

/// Refuses a value with a control character, naming `flag`.
///
/// # Errors
/// [`UnitError::Unwritable`].
pub fn check_value(flag: &str, value: &str) -> Result<(), UnitError> {
    match control(value) {
        Some(what) => Err(UnitError::Unwritable {
            flag: flag.to_string(),
            value: value.to_string(),
            what,
        }),
        None => Ok(()),
    }
}

/// The flags and values of `args` as `(flag, value)`: `--flag=value`
/// split, a word not starting with `-` the value of the flag before it
/// (`argument N` if none), a flag alone its own value.
fn flag_values(args: &[String]) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    let mut last: Option<&str> = None;
    for (i, a) in args.iter().enumerate() {
        if let Some(rest) = a.strip_prefix("--") {
            match rest.split_once('=') {
                Some((f, v)) => {
                    out.push((format!("--{f}"), v));
                    last = None;
                }
                None => {
                    out.push((a.clone(), a.as_str()));
                    last = Some(a);
                }
            }
        } else {
            let flag = match last.take() {
                Some(f) if !a.starts_with('-') => f.to_string(),
                _ => format!("argument {} ({a:?})", i + 1).replace('\n', "\\n"),
            };
            out.push((flag, a.as_str()));
        }
    }
    out
}

/// Refuses any value of `args` (the watch flags) that the unit file cannot
/// carry, naming its flag (`--db`, whether given as `--db V` or `--db=V`).
///
/// # Errors
/// [`UnitError::Unwritable`].
pub fn check_args(args: &[String]) -> Result<(), UnitError> {
    for (flag, v) in flag_values(args) {
        check_value(&flag, v)?;
    }
    Ok(())
}

/// The values given to `flag` in `args`.
pub fn values_of<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
    flag_values(args)
        .into_iter()
        .filter(|(f, v)| f == flag && !v.starts_with("--"))
        .map(|(_, v)| v)
        .collect()
}

/// Whether `path` lies where `ProtectHome=yes` hides it.
pub fn hidden_by_protect_home(path: &Path) -> bool {
    HIDDEN.iter().any(|h| path.starts_with(h))
}

/// Refuses a path the service needs (`flag`) that is relative or hidden
/// by `ProtectHome=yes`.
///
/// # Errors
/// [`UnitError::Relative`], [`UnitError::Hidden`].
pub fn check_service_path(flag: &str, path: &Path) -> Result<(), UnitError> {
    if path.is_relative() {
        return Err(UnitError::Relative {
            flag: flag.to_string(),
            path: path.to_path_buf(),
        });
    }
    if hidden_by_protect_home(path) {
        return Err(UnitError::Hidden {
            flag: flag.to_string(),
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The cargo build tree (target directory) `exe` lies in, if any: an
/// ancestor holding cargo's `CACHEDIR.TAG` and `.rustc_info.json`, or a
/// directory beside `exe` holding `.fingerprint`.
pub fn build_tree(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    if dir.join(".fingerprint").is_dir() {
        return Some(dir.parent().unwrap_or(dir).to_path_buf());
    }
    exe.ancestors()
        .skip(1)
        .find(|a| a.join("CACHEDIR.TAG").is_file() && a.join(".rustc_info.json").is_file())
        .map(Path::to_path_buf)
}

/// Refuses `exe` as the unit's binary when it is in a build tree, relative,
/// hidden by `ProtectHome=yes` or holds a control character.
///
/// # Errors
/// [`UnitError::BuildTree`], [`UnitError::Relative`], [`UnitError::Hidden`],
/// [`UnitError::Unwritable`].
pub fn check_exe(exe: &Path) -> Result<(), UnitError> {
    check_value("--exe", &exe.to_string_lossy())?;
    check_service_path("--exe", exe)?;
    match build_tree(exe) {
        Some(tree) => Err(UnitError::BuildTree {
            exe: exe.to_path_buf(),
            tree,
        }),
        None => Ok(()),
    }
}

/// Whether `a` and `b` are the same file (device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Installs the binary `from` (normally `/proc/self/exe`: the running
/// image, even if the build tree has been rebuilt since) at `to`, mode
/// 0755 whatever the umask, atomically (a temporary file in `to`'s
/// directory, fsynced, renamed over it: a running service's binary is
/// never half-written). Returns false, writing nothing, when `to` is
/// already `from`.
///
/// # Errors
/// The I/O error, naming `to` (`firmtime_rt::fs::write_atomic_with`'s
/// messages; a symbolic link at `to` is refused).
pub fn install_exe(from: &Path, to: &Path) -> io::Result<bool> {
    if same_file(from, to) {
        return Ok(false);
    }
    let mut src = std::fs::File::open(from)?;
    let kind = firmtime_rt::fs::output_kind(to)?;
    if kind != firmtime_rt::fs::OutputKind::File {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file: not replaced", to.display()),
        ));
    }
    firmtime_rt::fs::write_atomic_with(to, |w| {
        io::copy(&mut src, w)?;
        w.flush()?;
        w.get_ref()
            .set_permissions(std::fs::Permissions::from_mode(0o755))
    })?;
    Ok(true)
}

/// Writes the unit `text` at `path` atomically, mode 0644 whatever the
/// umask (systemd reads units as any user: `systemctl cat` as a user, and
/// a 0600 unit makes `systemd-analyze` complain). A device or FIFO at
/// `path` is written into, its mode left alone.
///
/// # Errors
/// As `firmtime_rt::fs::write_atomic`.
pub fn write_unit_file(path: &Path, text: &str) -> io::Result<()> {
    let file = firmtime_rt::fs::output_kind(path)? == firmtime_rt::fs::OutputKind::File;
    firmtime_rt::fs::write_atomic_with(path, |w| {
        w.write_all(text.as_bytes())?;
        if file {
            w.flush()?;
            w.get_ref()
                .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(())
    })
}

/// Whether `args` serve metrics (`--metrics-listen`): the unit then keeps
/// the network and IP sockets.
pub fn serves_metrics(args: &[String]) -> bool {
    flag_values(args)
        .iter()
        .any(|(f, _)| f == "--metrics-listen")
}

/// Whether the flags hold `/dev/cpu_dma_latency` (`--dma-latency`): the
/// unit then lets the service open that one device.
pub fn holds_dma_latency(args: &[String]) -> bool {
    flag_values(args).iter().any(|(f, _)| f == "--dma-latency")
}

/// The `ReadWritePaths=` value for `dir` (specifiers escaped, quoted when
/// it holds a space or a quote).
fn path_value(dir: &Path) -> String {
    let d = dir.display().to_string().replace('%', "%%");
    if d.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'')
    {
        format!("\"{}\"", d.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        d
    }
}

/// The directory of the database, which the unit makes writable.
pub fn db_dir(db: &Path) -> &Path {
    db.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"))
}

/// The unit text for `s`. The values must have passed [`check_args`] and
/// [`check_exe`].
pub fn unit_text(s: &Service<'_>) -> String {
    let exe = quote_arg(&s.exe.display().to_string());
    let mut cmd = format!("{exe} watch");
    for a in s.args {
        cmd.push(' ');
        cmd.push_str(&quote_arg(a));
    }
    let dir = db_dir(s.db);
    let writable = if dir == Path::new(STATE_DIR) {
        "# The database's directory, the one place it may write.\n".to_string()
    } else {
        format!(
            "# The database's directory, the one place it may write besides {STATE_DIR}.\nReadWritePaths={}\n",
            path_value(dir)
        )
    };
    let network = if serves_metrics(s.args) {
        "# --metrics-listen: IP sockets for Prometheus; nothing else.\n\
         RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n"
            .to_string()
    } else {
        "# No network: nothing is served without --metrics-listen.\n\
         PrivateNetwork=yes\n\
         IPAddressDeny=any\n\
         RestrictAddressFamilies=AF_UNIX\n"
            .to_string()
    };
    let devices = if holds_dma_latency(s.args) {
        "# --dma-latency: the PM QoS device and the pseudo devices, nothing else.\n\
         PrivateDevices=no\n\
         DeviceAllow=/dev/cpu_dma_latency rw\n"
            .to_string()
    } else {
        "PrivateDevices=yes\n".to_string()
    };
    format!(
        "# Written by `firmtime watch install`; `firmtime watch install --print` shows it.
# `systemd-analyze security firmtime-watch.service` rates what it may do.
[Unit]
Description=firmtime watch: long-term wake-up latency of this machine
Documentation=man:systemd.service(5)
After=local-fs.target

[Service]
Type=exec
ExecStart={cmd}
# A run killed with SIGKILL leaves its tracefs instance tracing: remove the
# instances of firmtime processes that are gone (never another's).
ExecStopPost=-{exe} watch clean-trace
# SIGTERM stops it cleanly: the interval being measured is stored.
KillSignal=SIGTERM
TimeoutStopSec=30
Restart=on-failure
RestartSec=10
# Lines (one per interval) go to the journal: journalctl -u firmtime-watch
StandardOutput=journal
StandardError=journal
# Real-time scheduling and locked memory.
LimitRTPRIO=99
LimitMEMLOCK=infinity
Nice=0
# Root for tracefs (owned by root, mode 0700), with two capabilities only:
# SCHED_FIFO and pinning (CAP_SYS_NICE), mlockall (CAP_IPC_LOCK).
CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK
NoNewPrivileges=yes
StateDirectory=firmtime
StateDirectoryMode=0700
UMask=0077
ProtectSystem=strict
{writable}ProtectHome=yes
PrivateTmp=yes
{devices}PrivateMounts=yes
{network}ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
DevicePolicy=closed
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
# Left open on purpose: /sys (tracefs instances; ProtectKernelTunables=
# would make it read-only), real-time scheduling (RestrictRealtime=), the
# process list (ProtectProc=; cause names come from /proc/PID/comm) and
# /proc/stat (ProcSubset=; steal time).

[Install]
WantedBy=multi-user.target
"
    )
}

/// The pid in an instance name of firmtime's form (`firmtime-PID`,
/// `firmtime-PID-N`, `firmtime-PID-explain`, `firmtime-PID-N-explain`).
fn instance_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("firmtime-")?;
    let mut parts = rest.split('-');
    let pid = parts.next()?.parse().ok()?;
    let tail: Vec<&str> = parts.collect();
    let ok = match tail.as_slice() {
        [] | ["explain"] => true,
        [n] | [n, "explain"] => n.parse::<u32>().is_ok(),
        _ => false,
    };
    ok.then_some(pid)
}

/// Removes the tracefs instances in `instances` (normally
/// [`TRACEFS_INSTANCES`]) that firmtime made (`firmtime-PID…`, as
/// `firmtime_trace::tracefs::instance_name` names them) for a process that
/// is gone: a run killed with SIGKILL leaves its instance and keeps
/// tracing into its ring buffers. Instances of live processes, and any
/// other name, are left alone, and so is one the kernel refuses to remove
/// because a process still has its files open (EBUSY). Returns the names
/// removed; a directory that is missing (tracefs not mounted) removes
/// nothing.
///
/// # Errors
/// The first instance that could not be removed (the others are still
/// tried).
pub fn clean_trace(instances: &Path) -> io::Result<Vec<String>> {
    let dir = match std::fs::read_dir(instances) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    let mut first_err = None;
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = instance_pid(&name) else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match std::fs::remove_dir(entry.path()) {
            Ok(()) => removed.push(name),
            // Gone meanwhile, or busy: a process (one in another pid
            // namespace, whose pid this one does not see) holds it open.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::EBUSY) => {
            }
            Err(e) => {
                first_err.get_or_insert_with(|| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot remove {}: {e}", entry.path().display()),
                    )
                });
            }
        }
    }
    removed.sort();
    match first_err {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn arguments_with_spaces_and_specifiers_are_quoted() {
        assert_eq!(quote_arg("--interval"), "--interval");
        assert_eq!(
            quote_arg("/var/lib/my db.sqlite"),
            "\"/var/lib/my db.sqlite\""
        );
        assert_eq!(quote_arg("50%"), "50%%");
        assert_eq!(quote_arg("a\"b"), "\"a\\\"b\"");
        let args = s(&["--db", "/var/lib/firmtime/watch.db"]);
        let t = unit_text(&Service {
            exe: Path::new("/usr/local/bin/firmtime"),
            args: &args,
            db: Path::new("/var/lib/firmtime/watch.db"),
        });
        assert!(
            t.contains(
                "\nExecStart=/usr/local/bin/firmtime watch --db /var/lib/firmtime/watch.db\n"
            ),
            "{t}"
        );
        assert!(t.contains("\nExecStopPost=-/usr/local/bin/firmtime watch clean-trace\n"));
        assert!(t.contains("\nRestart=on-failure\n"));
        assert!(t.contains("\nStandardError=journal\n"));
        assert!(t.contains("\nPrivateNetwork=yes\n"), "{t}");
        assert!(!t.contains("ReadWritePaths="), "{t}");
    }

    #[test]
    fn a_control_character_is_refused_naming_its_flag_in_either_form() {
        let e = check_args(&s(&[
            "--cpu",
            "0",
            "--db",
            "/var/lib/a\nExecStartPre=/bin/sh",
        ]))
        .unwrap_err();
        assert!(
            matches!(&e, UnitError::Unwritable { flag, what, .. } if flag == "--db" && what == "a newline"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("--db: the value "), "{e}");
        let e = check_args(&s(&["--metrics-listen=127.0.0.1:1\r"])).unwrap_err();
        assert!(
            matches!(&e, UnitError::Unwritable { flag, what, .. } if flag == "--metrics-listen" && what == "a carriage return"),
            "{e:?}"
        );
        let e = check_args(&s(&["--cpu\u{1}"])).unwrap_err();
        assert!(e.to_string().contains("U+0001"), "{e}");
        check_args(&s(&["--db", "/var/lib/my db %n $HOME.db", "--cpu=0,1"])).unwrap();
    }

    #[test]
    fn values_and_metrics_are_found_in_both_forms() {
        let a = s(&["--metrics-listen=127.0.0.1:9", "--metrics-token", "/etc/t"]);
        assert!(serves_metrics(&a));
        assert_eq!(values_of(&a, "--metrics-token"), ["/etc/t"]);
        assert!(!serves_metrics(&s(&["--cpu", "0"])));
    }

    #[test]
    fn firmtime_instance_names_are_recognised_and_no_others() {
        assert_eq!(instance_pid("firmtime-123"), Some(123));
        assert_eq!(instance_pid("firmtime-123-2"), Some(123));
        assert_eq!(instance_pid("firmtime-123-explain"), Some(123));
        assert_eq!(instance_pid("firmtime-123-4-explain"), Some(123));
        assert_eq!(instance_pid("firmtime-x"), None);
        assert_eq!(instance_pid("firmtime-123-mine"), None);
        assert_eq!(instance_pid("perf-123"), None);
    }

    #[test]
    fn a_build_tree_is_found_and_a_stable_path_is_not_one() {
        let root = std::env::temp_dir().join(format!("firmtime-unit-bt-{}", std::process::id()));
        let bin = root.join("target/release");
        std::fs::create_dir_all(bin.join(".fingerprint")).unwrap();
        assert_eq!(build_tree(&bin.join("firmtime")), Some(root.join("target")));
        let deep = root.join("target/x86_64-unknown-linux-gnu/release");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(root.join("target/CACHEDIR.TAG"), "Signature").unwrap();
        std::fs::write(root.join("target/.rustc_info.json"), "{}").unwrap();
        assert_eq!(
            build_tree(&deep.join("firmtime")),
            Some(root.join("target"))
        );
        let e = check_exe(&bin.join("firmtime")).unwrap_err();
        assert!(
            e.to_string().contains("--exe /usr/local/bin/firmtime"),
            "{e}"
        );
        assert_eq!(build_tree(Path::new("/usr/local/bin/firmtime")), None);
        let e = check_exe(Path::new("/root/.cargo/bin/firmtime")).unwrap_err();
        assert!(matches!(e, UnitError::Hidden { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("`sudo /root/.cargo/bin/firmtime watch install --exe /usr/local/bin/firmtime -- WATCH-FLAGS`"),
            "{e}"
        );
        assert!(matches!(
            check_exe(Path::new("bin/firmtime")),
            Err(UnitError::Relative { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
