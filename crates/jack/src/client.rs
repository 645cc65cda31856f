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
        return Err(Error::new(
            ErrorKind::ServerUnavailable,
            format!(
                "cannot open JACK client \"{name}\" on {}: {}. Is that server running? \
                 Start one (jackd, PipeWire), name another (--jack-server NAME or \
                 $JACK_DEFAULT_SERVER), or use a dummy server (--jack-dummy)",
                server_description(server, std::env::var("JACK_DEFAULT_SERVER").ok().as_deref()),
                status_words(st)
            ),
        ));
    }
    // SAFETY: `raw` is a client jack_client_open just returned; the Client
    // owns it from now on and closes it on drop.
    Ok(unsafe { Client::from_raw(raw) })
}

/// The server a client without a name connects to, in words: `named`, else
/// `$JACK_DEFAULT_SERVER` (`env`), else JACK's `default`.
pub fn server_description(named: Option<&str>, env: Option<&str>) -> String {
    match (named, env.filter(|e| !e.is_empty())) {
        (Some(n), _) => format!("the JACK server \"{n}\""),
        (None, Some(e)) => format!("the JACK server \"{e}\" (named by $JACK_DEFAULT_SERVER)"),
        (None, None) => "the default JACK server (\"default\")".to_string(),
    }
}

/// What libjack's status bits of a failed open mean, in words.
pub fn status_words(st: ClientStatus) -> String {
    let words: [(ClientStatus, &str); 11] = [
        (
            ClientStatus::SERVER_FAILED,
            "no server of that name answered",
        ),
        (
            ClientStatus::SERVER_ERROR,
            "the server did not answer properly",
        ),
        (ClientStatus::INVALID_OPTION, "the server refused an option"),
        (ClientStatus::NAME_NOT_UNIQUE, "the client name is taken"),
        (ClientStatus::NO_SUCH_CLIENT, "no such client"),
        (
            ClientStatus::LOAD_FAILURE,
            "an internal client could not be loaded",
        ),
        (
            ClientStatus::INIT_FAILURE,
            "an internal client could not be initialized",
        ),
        (
            ClientStatus::SHM_FAILURE,
            "JACK's shared memory could not be reached",
        ),
        (
            ClientStatus::VERSION_ERROR,
            "client and server speak different protocol versions",
        ),
        (ClientStatus::BACKEND_ERROR, "the server's backend failed"),
        (
            ClientStatus::CLIENT_ZOMBIE,
            "the client was dropped by the server",
        ),
    ];
    let said: Vec<&str> = words
        .iter()
        .filter(|(bit, _)| st.contains(*bit))
        .map(|(_, w)| *w)
        .collect();
    if said.is_empty() {
        "the server refused the client".to_string()
    } else {
        said.join("; ")
    }
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

/// Connects `src` to `dst` (full port names), with an error that names both
/// and, for a port that does not exist, the closest names the server has.
///
/// # Errors
/// [`ErrorKind::Port`] when either port does not exist or the connection
/// is refused.
pub fn connect(client: &Client, src: &str, dst: &str) -> Result<(), Error> {
    client.connect_ports_by_name(src, dst).map_err(|e| {
        let kind_of = |n: &str| client.port_by_name(n).and_then(|p| p.port_type().ok());
        let (src_type, dst_type) = (kind_of(src), kind_of(dst));
        let mut missing = Vec::new();
        for (name, other_type, flag, role) in [
            (src, &dst_type, jack::PortFlags::IS_OUTPUT, "source"),
            (dst, &src_type, jack::PortFlags::IS_INPUT, "destination"),
        ] {
            if client.port_by_name(name).is_some() {
                continue;
            }
            let names: Vec<String> = client
                .ports(None, None, flag)
                .into_iter()
                .filter(|n| other_type.is_none() || kind_of(n) == *other_type)
                .collect();
            let near = closest(name, &names, 3);
            missing.push(if near.is_empty() {
                format!("there is no {role} port \"{name}\" and none with a similar name")
            } else {
                format!(
                    "there is no {role} port \"{name}\"; did you mean {}?",
                    near.iter()
                        .map(|n| format!("\"{n}\""))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            });
        }
        let audio = [&src_type, &dst_type]
            .iter()
            .any(|t| t.as_deref().is_some_and(|t| t.contains("audio")));
        let list = if audio {
            "list the audio ports with `jack_lsp -t`"
        } else {
            "list the MIDI ports with `firmtime midi ports`"
        };
        let why = if missing.is_empty() {
            format!("JACK refused: {e}")
        } else {
            missing.join("; ")
        };
        Error::new(
            ErrorKind::Port,
            format!("cannot connect JACK port \"{src}\" to \"{dst}\": {why} ({list})"),
        )
    })
}

/// The names in `names` closest to `wanted` (at most `n`, closest first):
/// those within an edit distance of a third of the longer name (at least
/// 2), or holding `wanted` (or held by it) when compared without case.
pub fn closest<'a>(wanted: &str, names: &'a [String], n: usize) -> Vec<&'a str> {
    let w = wanted.to_lowercase();
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .filter_map(|name| {
            let l = name.to_lowercase();
            let d = edit_distance(&w, &l);
            let limit = (w.chars().count().max(l.chars().count()) / 3).max(2);
            // Holding the other counts as close, behind any near spelling.
            let contains = !w.is_empty() && (l.contains(&w) || w.contains(&l));
            (d <= limit || contains)
                .then_some((if d <= limit { d } else { limit + d }, name.as_str()))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(n).map(|(_, s)| s).collect()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_mistyped_port_finds_its_neighbours_closest_first() {
        let ports = names(&[
            "firmtime-tap:midi_in",
            "firmtime-tap:midi_out",
            "system:midi_capture_1",
            "system:playback_1",
        ]);
        assert_eq!(
            closest("firmtime-tap:midi_inn", &ports, 3),
            vec!["firmtime-tap:midi_in", "firmtime-tap:midi_out"]
        );
        // A part of the name (no client) finds the ports holding it.
        assert_eq!(
            closest("midi_capture", &ports, 3),
            vec!["system:midi_capture_1"]
        );
        assert!(closest("nothing:like_it", &ports, 3).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    #[test]
    fn the_server_tried_is_named_from_the_flag_or_the_environment() {
        assert_eq!(
            server_description(Some("x"), Some("y")),
            "the JACK server \"x\""
        );
        assert_eq!(
            server_description(None, Some("nonexistent")),
            "the JACK server \"nonexistent\" (named by $JACK_DEFAULT_SERVER)"
        );
        assert!(server_description(None, Some("")).contains("default"));
        let st = ClientStatus::FAILURE | ClientStatus::SERVER_FAILED;
        let w = status_words(st);
        assert_eq!(w, "no server of that name answered");
        assert!(!w.contains("ClientStatus"));
    }
}
