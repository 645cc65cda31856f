//! Opening JACK clients (never starting a server), listing and connecting
//! ports, activating and deactivating, and an xrun-counting notification
//! handler.
//!
//! Not for the RT path, except the xrun callback of [`XrunNotifier`]:
//! opening and connecting allocate and talk to the server.

use std::ffi::{c_char, CString};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jack::{Client, ClientStatus, Control, Port};

use crate::error::{Error, ErrorKind};

/// Serializes client opening within this process (libjack's open is not
/// reentrant-safe in every version).
static OPEN_LOCK: Mutex<()> = Mutex::new(());

/// Opens a JACK client `name` on `server` (or the default), never starting
/// a server. Every JACK client of firmtime opens through it.
///
/// # Errors
/// [`ErrorKind::NotInstalled`] without libjack; [`ErrorKind::InvalidInput`]
/// for a name with a NUL byte; [`ErrorKind::ServerUnavailable`] when no
/// server of that name answers (the message says how to start one).
pub fn open_client(name: &str, server: Option<&str>) -> Result<Client, Error> {
    type OpenFn = unsafe extern "C" fn(
        *const c_char,
        jack_sys::jack_options_t,
        *mut jack_sys::jack_status_t,
        ...
    ) -> *mut jack_sys::jack_client_t;
    let lib = jack_sys::library().map_err(|e| {
        Error::new(
            ErrorKind::NotInstalled,
            format!(
                "cannot load libjack ({e}): install JACK (Debian: apt-get install jackd2, \
                 or pipewire-jack)"
            ),
        )
    })?;
    // SAFETY: jack_client_open has exactly this C signature in every libjack
    // (jack/jack.h: const char *, jack_options_t, jack_status_t *, ...).
    let open: OpenFn = match unsafe { lib.get::<OpenFn>(b"jack_client_open\0") } {
        Ok(sym) => *sym,
        Err(e) => {
            return Err(Error::new(
                ErrorKind::NotInstalled,
                format!("libjack has no jack_client_open ({e}): reinstall JACK"),
            ))
        }
    };
    let cname = CString::new(name).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("JACK client name {name:?} contains a NUL byte"),
        )
    })?;
    let sname = match server {
        Some(s) => Some(CString::new(s).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("JACK server name {s:?} contains a NUL byte"),
            )
        })?),
        None => None,
    };
    let mut status: jack_sys::jack_status_t = 0;
    let _guard = OPEN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let raw = match &sname {
        // SAFETY: valid NUL-terminated strings that outlive the call; with
        // JackServerName libjack reads exactly one extra `const char *`.
        Some(s) => unsafe {
            open(
                cname.as_ptr(),
                jack_sys::JackNoStartServer | jack_sys::JackServerName,
                &mut status,
                s.as_ptr(),
            )
        },
        // SAFETY: as above, without the variadic argument.
        None => unsafe { open(cname.as_ptr(), jack_sys::JackNoStartServer, &mut status) },
    };
    if raw.is_null() {
        let st = ClientStatus::from_bits_truncate(status);
        let server_desc = server.unwrap_or("the default server");
        return Err(Error::new(
            ErrorKind::ServerUnavailable,
            format!(
                "cannot open JACK client {name:?} on {server_desc:?} (status {st:?}): \
                 is a JACK server running? Start one (jackd, PipeWire) or use a dummy \
                 server (--jack-dummy)"
            ),
        ));
    }
    // SAFETY: `raw` is a client jack_client_open just returned; the Client
    // owns it from now on and closes it on drop.
    Ok(unsafe { Client::from_raw(raw) })
}

/// One MIDI port a JACK server has, as [`list_ports`] sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JackPort {
    /// Full name, `client:port`.
    pub name: String,
    /// Other clients can write to it (a MIDI input of its client).
    pub is_input: bool,
    /// Other clients can read from it (a MIDI output of its client).
    pub is_output: bool,
    /// It stands for a hardware port.
    pub is_physical: bool,
    /// Its aliases (e.g. the ALSA name behind an a2jmidid port).
    pub aliases: Vec<String>,
}

/// The MIDI ports of a running JACK server (`None`: the default server),
/// like `jack_lsp -t` filtered to MIDI. Never starts a server.
///
/// # Errors
/// [`ErrorKind::NotInstalled`] without libjack; [`ErrorKind::ServerUnavailable`]
/// when no server of that name runs.
pub fn list_ports(server: Option<&str>) -> Result<Vec<JackPort>, Error> {
    let client = open_client("firmtime-ports", server)?;
    let mut out = Vec::new();
    for name in client.ports(None, Some("midi"), jack::PortFlags::empty()) {
        let Some(port) = client.port_by_name(&name) else {
            continue;
        };
        let flags = port.flags();
        out.push(JackPort {
            is_input: flags.contains(jack::PortFlags::IS_INPUT),
            is_output: flags.contains(jack::PortFlags::IS_OUTPUT),
            is_physical: flags.contains(jack::PortFlags::IS_PHYSICAL),
            aliases: port.aliases().unwrap_or_default(),
            name,
        });
    }
    Ok(out)
}

/// True when a JACK server of that name (`None`: the default) accepts
/// clients now. Never starts one.
pub fn server_running(server: Option<&str>) -> bool {
    // libjack prints "cannot connect to server" to stderr when none runs:
    // for a probe that is the expected answer, not an error.
    jack::set_logger(jack::LoggerType::None);
    let up = open_client("firmtime-probe", server).is_ok();
    jack::set_logger(jack::LoggerType::Stdio);
    up
}

/// Full names of the physical playback ports (`system:playback_*`) of a
/// running JACK server (`None`: the default), in order. Never starts a server.
///
/// # Errors
/// As [`list_ports`].
pub fn playback_ports(server: Option<&str>) -> Result<Vec<String>, Error> {
    let client = open_client("firmtime-ports", server)?;
    Ok(client.ports(
        None,
        Some("audio"),
        jack::PortFlags::IS_INPUT | jack::PortFlags::IS_PHYSICAL,
    ))
}

/// The full name (`client:port`) of a port a client registered.
///
/// # Errors
/// [`ErrorKind::Port`] when JACK cannot name it.
pub fn port_name<PS: jack::PortSpec>(port: &Port<PS>) -> Result<String, Error> {
    port.name()
        .map_err(|e| Error::new(ErrorKind::Port, format!("JACK port name: {e}")))
}

/// Full names (`client:port`) of the ports a client registered.
///
/// # Errors
/// [`ErrorKind::Port`] when JACK cannot name one.
pub fn port_names<PS: jack::PortSpec>(ports: &[Port<PS>]) -> Result<Vec<String>, Error> {
    ports.iter().map(port_name).collect()
}

/// Connects `src` to `dst` (full port names), with an error that names both.
///
/// # Errors
/// [`ErrorKind::Port`] when either port does not exist or the connection
/// is refused.
pub fn connect(client: &Client, src: &str, dst: &str) -> Result<(), Error> {
    client.connect_ports_by_name(src, dst).map_err(|e| {
        Error::new(
            ErrorKind::Port,
            format!("cannot connect JACK port {src:?} to {dst:?} ({e}): check the names with `jack_lsp`"),
        )
    })
}

/// Activates `client` with its handlers; `what` names the client in the
/// error ("JACK client").
///
/// # Errors
/// [`ErrorKind::Backend`] when JACK refuses to activate it.
pub fn activate<N, P>(
    client: Client,
    notifier: N,
    process: P,
    what: &str,
) -> Result<jack::AsyncClient<N, P>, Error>
where
    N: 'static + Send + Sync + jack::NotificationHandler,
    P: 'static + Send + jack::ProcessHandler,
{
    client
        .activate_async(notifier, process)
        .map_err(|e| Error::new(ErrorKind::Backend, format!("cannot activate {what}: {e}")))
}

/// Deactivates `client` and hands back its handlers; `what` as in [`activate`].
///
/// # Errors
/// [`ErrorKind::Backend`] when JACK refuses to deactivate it.
pub fn deactivate<N, P>(
    client: jack::AsyncClient<N, P>,
    what: &str,
) -> Result<(Client, N, P), Error>
where
    N: 'static + Send + Sync + jack::NotificationHandler,
    P: 'static + Send + jack::ProcessHandler,
{
    client
        .deactivate()
        .map_err(|e| Error::new(ErrorKind::Backend, format!("cannot deactivate {what}: {e}")))
}

/// A notification handler that only counts xruns, into the counter `xruns`
/// picks out of the client's shared state (firmtime-midi's tapper, relay
/// and recorder use it). The xrun callback is **RT-safe.**: one Relaxed
/// atomic add.
pub struct XrunNotifier<S> {
    shared: Arc<S>,
    xruns: fn(&S) -> &AtomicU64,
}

impl<S> fmt::Debug for XrunNotifier<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrunNotifier").finish_non_exhaustive()
    }
}

impl<S> XrunNotifier<S> {
    /// A handler that counts into `xruns(&shared)`.
    pub fn new(shared: &Arc<S>, xruns: fn(&S) -> &AtomicU64) -> Self {
        XrunNotifier {
            shared: Arc::clone(shared),
            xruns,
        }
    }
}

impl<S: Send + Sync> jack::NotificationHandler for XrunNotifier<S> {
    fn xrun(&mut self, _: &Client) -> Control {
        (self.xruns)(&self.shared).fetch_add(1, Ordering::Relaxed);
        Control::Continue
    }
}
