//! PipeWire's JACK: a private headless PipeWire daemon for tests
//! ([`PipeWireServer`]), and selecting PipeWire's libjack in this process
//! ([`use_pipewire_libjack`]).
//!
//! PipeWire (Debian: `pipewire`, `pipewire-jack`) implements the JACK API in
//! its own `libjack.so.0`, installed outside the linker's path
//! (`/usr/lib/<triplet>/pipewire-0.3/jack`); `pw-jack CMD` runs CMD with that
//! directory in `LD_LIBRARY_PATH`. A process can use one libjack only: the
//! one loaded first. What differs from jackd2, and how firmtime handles it,
//! is in docs/MIDI.md ("PipeWire's JACK").
//!
//! [`PipeWireServer`] runs `pipewire -c CONFIG` with a minimal config of
//! its own: no devices, no D-Bus, no session manager; a timer driver
//! ("Dummy-Driver") runs the graph at a fixed rate and quantum, as jackd's
//! dummy driver does. Its `core.name` is an absolute socket path in a
//! private 0700 directory, and that path is the JACK server name clients
//! pass (`--jack-server PATH`, [`open_client`](crate::open_client)).
//!
//! Not for the RT path: everything here forks, waits, sleeps or dlopens.

use std::ffi::CString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::server::{probe_says, program_on_path, DummyOptions, ServerProcess};

/// The directory holding PipeWire's `libjack.so.0` (what `pw-jack` puts in
/// `LD_LIBRARY_PATH`), or `None` when pipewire-jack is not installed.
pub fn pipewire_jack_dir() -> Option<PathBuf> {
    let arch = std::env::consts::ARCH;
    let mut candidates = vec![
        PathBuf::from(format!("/usr/lib/{arch}-linux-gnu")),
        PathBuf::from("/usr/lib64"),
        PathBuf::from("/usr/lib"),
        PathBuf::from("/usr/local/lib"),
    ];
    // Other multiarch triplets (arm-linux-gnueabihf, …).
    if let Ok(dir) = std::fs::read_dir("/usr/lib") {
        candidates.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with("-linux-gnu")),
        );
    }
    candidates
        .into_iter()
        .map(|d| d.join("pipewire-0.3/jack"))
        .find(|d| d.join("libjack.so.0").is_file())
}

fn not_installed(what: &str) -> Error {
    Error::new(
        ErrorKind::NotInstalled,
        format!("{what}: install PipeWire's JACK (Debian: apt-get install pipewire pipewire-jack)"),
    )
}

/// The directory [`use_pipewire_libjack`] selected, once it did.
static SELECTED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Makes this process use PipeWire's libjack: dlopens its `libjack.so.0`
/// by absolute path with `RTLD_GLOBAL`, so that the `jack` crate's later
/// `dlopen("libjack.so.0")` gets that library (glibc matches the SONAME of
/// a loaded object). Returns the library's directory. Calling it again is
/// harmless.
///
/// Call it before the first JACK call of the process (opening a client,
/// listing ports, …): once a libjack is loaded it stays. Not needed under
/// `pw-jack`, which makes PipeWire's libjack the one the process loads.
///
/// # Errors
/// [`ErrorKind::NotInstalled`] when pipewire-jack is not installed or its
/// library does not load; [`ErrorKind::InvalidInput`] when another libjack
/// (jackd2's) is already loaded in this process.
pub fn use_pipewire_libjack() -> Result<PathBuf, Error> {
    let mut selected = SELECTED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = selected.as_ref() {
        return Ok(dir.clone());
    }
    let dir = pipewire_jack_dir()
        .ok_or_else(|| not_installed("PipeWire's libjack (…/pipewire-0.3/jack) not found"))?;
    let path = dir.join("libjack.so.0");
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::new(ErrorKind::InvalidInput, "library path with a NUL byte"))?;
    let flags = libc::RTLD_NOW | libc::RTLD_NOLOAD;
    // SAFETY: valid NUL-terminated names; RTLD_NOLOAD loads nothing, it only
    // returns a handle (one more reference) to an object already loaded.
    let (any, ours) = unsafe {
        (
            libc::dlopen(c"libjack.so.0".as_ptr(), flags),
            libc::dlopen(cpath.as_ptr(), flags),
        )
    };
    let same = !any.is_null() && any == ours;
    for h in [any, ours] {
        if !h.is_null() {
            // SAFETY: a handle dlopen just returned; this drops only the
            // reference RTLD_NOLOAD added.
            unsafe { libc::dlclose(h) };
        }
    }
    if !any.is_null() && !same {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "another libjack (jackd2's) is already loaded in this process: select \
             PipeWire's before the first JACK call, or run under `pw-jack`",
        ));
    }
    if !same {
        // SAFETY: loading a shared library runs its initializers; PipeWire's
        // libjack is a plain C library meant to be loaded this way. The handle
        // is never closed: the library stays for the process's lifetime.
        let h = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns NULL or a valid NUL-terminated string.
            let why = unsafe {
                let e = libc::dlerror();
                if e.is_null() {
                    String::from("unknown error")
                } else {
                    std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(not_installed(&format!(
                "cannot load {} ({why})",
                path.display()
            )));
        }
    }
    *selected = Some(dir.clone());
    Ok(dir)
}

/// `jack_get_version_string()` of the libjack this process uses (loading
/// it when not loaded yet): `1.9.21` for jackd2, `3.0.0.0 (using PipeWire
/// 0.3.65)` for PipeWire's. `None` without libjack.
pub fn libjack_version() -> Option<String> {
    let lib = jack_sys::library().ok()?;
    type VersionFn = unsafe extern "C" fn() -> *const std::ffi::c_char;
    // SAFETY: jack_get_version_string has exactly this C signature (jack/jack.h).
    let f: VersionFn = unsafe { *lib.get::<VersionFn>(b"jack_get_version_string\0").ok()? };
    // SAFETY: it returns a static NUL-terminated string (or NULL).
    let s = unsafe { f() };
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL, static, NUL-terminated.
    Some(
        unsafe { std::ffi::CStr::from_ptr(s) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The config of a private headless daemon (tested with PipeWire 0.3.65):
/// every module listed is needed (without `module-access` a client hangs
/// forever; without `module-link-factory` nothing connects) except
/// `module-rt` (SCHED_FIFO for the data thread when allowed) and
/// `module-metadata` (pipewire-jack keeps settings there).
fn config(socket: &Path, o: &DummyOptions) -> String {
    let rt = if o.realtime {
        "    { name = libpipewire-module-rt args = { nice.level = -11 } flags = [ ifexists nofail ] }\n"
    } else {
        ""
    };
    format!(
        r#"# A private headless PipeWire for firmtime (written by firmtime-jack).
context.properties = {{
    core.daemon = true
    core.name = "{socket}"
    support.dbus = false
    default.clock.rate = {rate}
    default.clock.allowed-rates = [ {rate} ]
    default.clock.quantum = {period}
    default.clock.min-quantum = {period}
    default.clock.max-quantum = {period}
    vm.overrides = {{ }}
    mem.warn-mlock = false
    log.level = 2
}}
context.spa-libs = {{
    support.* = support/libspa-support
}}
context.modules = [
{rt}    {{ name = libpipewire-module-protocol-native }}
    {{ name = libpipewire-module-metadata }}
    {{ name = libpipewire-module-spa-node-factory }}
    {{ name = libpipewire-module-client-node }}
    {{ name = libpipewire-module-link-factory }}
    {{ name = libpipewire-module-access }}
]
context.objects = [
    {{ factory = spa-node-factory
        args = {{ factory.name = support.node.driver node.name = Dummy-Driver
                 node.group = pipewire.dummy priority.driver = 20000 }} }}
    {{ factory = spa-node-factory
        args = {{ factory.name = support.node.driver node.name = Freewheel-Driver
                 priority.driver = 19000 node.group = pipewire.freewheel node.freewheel = true }} }}
]
"#,
        socket = socket.display(),
        rate = o.rate,
        period = o.period,
    )
}

/// A running private `pipewire` daemon with a timer driver, for JACK
/// clients through PipeWire's libjack. Dropping it stops the daemon
/// (SIGTERM, then SIGKILL after 5 s), reaps it and removes its directory
/// (config, log, socket and lock).
#[derive(Debug)]
pub struct PipeWireServer {
    proc: ServerProcess,
    options: DummyOptions,
    dir: PathBuf,
    socket: String,
    jack_dir: PathBuf,
}

impl PipeWireServer {
    /// Starts `pipewire -c CONFIG` at `options.rate` Hz with a quantum
    /// (period) of `options.period` frames, its socket at
    /// `TMPDIR/NAME.pw/NAME` (NAME = `options.name`), with module-rt when
    /// `options.realtime`, and waits (at most `options.start_timeout`) until
    /// it answers clients.
    ///
    /// # Errors
    /// [`ErrorKind::NotInstalled`] without `pipewire`, `pw-cli` or
    /// PipeWire's libjack; [`ErrorKind::ServerFailed`] when the daemon exits
    /// or does not answer in time (the message quotes its log);
    /// [`ErrorKind::InvalidInput`] for a name with `/`, a socket path too
    /// long for a Unix socket, or a zero rate or period; [`ErrorKind::Io`]
    /// when its directory cannot be made.
    pub fn start(options: DummyOptions) -> Result<Self, Error> {
        if options.name.is_empty()
            || options.name.contains('/')
            || options.rate == 0
            || options.period == 0
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "private PipeWire server: name must be non-empty without '/', rate and \
                     period non-zero (got name {:?}, rate {}, period {})",
                    options.name, options.rate, options.period
                ),
            ));
        }
        for prog in ["pipewire", "pw-cli"] {
            if !program_on_path(prog) {
                return Err(not_installed(&format!("`{prog}` not found on PATH")));
            }
        }
        let jack_dir = pipewire_jack_dir()
            .ok_or_else(|| not_installed("PipeWire's libjack (…/pipewire-0.3/jack) not found"))?;
        let dir = std::env::temp_dir().join(format!("{}.pw", options.name));
        let socket_path = dir.join(&options.name);
        // sun_path holds 108 bytes with the NUL.
        if socket_path.as_os_str().len() > 100 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "PipeWire socket path {} is too long for a Unix socket: use a shorter \
                     TMPDIR or name",
                    socket_path.display()
                ),
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot create {}: {e}", dir.display()),
                )
            })?;
        let conf = dir.join("pipewire.conf");
        std::fs::write(&conf, config(&socket_path, &options)).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write {}: {e}", conf.display()),
            )
        })?;
        let socket = socket_path.to_string_lossy().into_owned();
        let mut cmd = Command::new("pipewire");
        cmd.arg("-c").arg(&conf);
        // The socket path is absolute: no runtime directory is used.
        cmd.env_remove("PIPEWIRE_RUNTIME_DIR")
            .env_remove("PIPEWIRE_REMOTE")
            .env_remove("PIPEWIRE_DEBUG");
        let proc = match ServerProcess::spawn(cmd, "pipewire", &socket, dir.join("pipewire.log")) {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let mut server = PipeWireServer {
            proc,
            options,
            dir,
            socket,
            jack_dir,
        };
        let remote = server.socket.clone();
        server.proc.wait_ready(server.options.start_timeout, || {
            // Answers only once every module (module-access last) is loaded.
            let mut probe = Command::new("pw-cli");
            probe.args(["-r", &remote, "info", "0"]);
            probe_says(probe, Duration::from_secs(2), |out| out.contains("id: 0"))
        })?;
        Ok(server)
    }

    /// For test suites: a daemon at `rate` Hz and `period` frames under a
    /// unique name, with module-rt when this process runs as root; `None`
    /// when PipeWire or pipewire-jack is not installed (the test then skips).
    ///
    /// # Panics
    /// When PipeWire is installed but does not start (the message quotes its log).
    pub fn start_for_test(rate: u32, period: u32) -> Option<Self> {
        match Self::start(DummyOptions::for_test(rate, period)) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == ErrorKind::NotInstalled => None,
            Err(e) => panic!("private PipeWire does not start: {e}"),
        }
    }

    /// The JACK server name clients pass to connect: the daemon's absolute
    /// socket path.
    pub fn name(&self) -> &str {
        &self.socket
    }

    /// The directory of PipeWire's libjack: a child JACK client of this
    /// server needs it in `LD_LIBRARY_PATH` (see [`PipeWireServer::client_env`]).
    pub fn jack_lib_dir(&self) -> &Path {
        &self.jack_dir
    }

    /// Sets up `cmd`, a JACK client program (firmtime, `jack_lsp`,
    /// `jack_midiseq`, …), to use this server: PipeWire's libjack first in
    /// `LD_LIBRARY_PATH` (what `pw-jack` does) and `PIPEWIRE_REMOTE` = the
    /// socket (PipeWire's libjack ignores `JACK_DEFAULT_SERVER`).
    pub fn client_env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        let mut paths = vec![self.jack_dir.clone()];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("LD_LIBRARY_PATH", joined);
        }
        cmd.env("PIPEWIRE_REMOTE", &self.socket)
    }

    /// The options it was started with (`name` is the socket's file name).
    pub fn options(&self) -> &DummyOptions {
        &self.options
    }

    /// The last `lines` lines of the daemon's log, for diagnostics.
    pub fn log_tail(&self, lines: usize) -> String {
        self.proc.log_tail(lines)
    }

    /// The process id of the daemon.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Stops the daemon now (SIGTERM, up to 5 s, then SIGKILL), reaps it and
    /// removes its directory. Also done by `Drop`.
    pub fn stop(&mut self) {
        self.proc.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for PipeWireServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_socket_rate_and_a_fixed_quantum() {
        let o = DummyOptions {
            rate: 44_100,
            period: 128,
            realtime: false,
            ..DummyOptions::new()
        };
        let c = config(Path::new("/tmp/x.pw/x"), &o);
        assert!(c.contains("core.name = \"/tmp/x.pw/x\""), "{c}");
        assert!(c.contains("default.clock.rate = 44100"));
        for q in ["quantum", "min-quantum", "max-quantum"] {
            assert!(c.contains(&format!("default.clock.{q} = 128")), "{q}");
        }
        assert!(!c.contains("module-rt"));
        assert!(c.contains("libpipewire-module-access"));
        let rt = config(
            Path::new("/s"),
            &DummyOptions {
                realtime: true,
                ..o
            },
        );
        assert!(rt.contains("libpipewire-module-rt"));
    }
}
