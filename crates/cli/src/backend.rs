//! Backend opening shared by `firmtime midi` and `firmtime tap`: one
//! opener ([`open`]) for every MIDI backend (raw, JACK, ALSA, loopback),
//! the JACK server to use (starting a private dummy one when asked) and
//! the real-time request of a backend's thread. Each command renders what
//! was opened ([`Facts`]) in its own output.

use std::path::{Path, PathBuf};

use anyhow::Context;
use firmtime_jack::{DummyOptions, DummyServer, JackClock};
use firmtime_midi::jack::{self, AudioOptions, JackBackend, JackOptions, SynthOptions};
use firmtime_midi::loopback::{Loopback, LoopbackOptions};
use firmtime_midi::raw::{RawBackend, RawInfo, RawOptions};
use firmtime_midi::{MidiBackend, PortIndex};
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{RtConditions, RtRequest};

use crate::args::UsageError;

/// The JACK server to use: `named` (or the default) when it runs; with
/// `dummy` and none running, a private `jackd -d dummy` started here (named
/// `named` if given) and stopped when the returned value drops.
/// `realtime`: run the dummy server's graph at SCHED_FIFO (`jackd -R`), so
/// that load on the machine does not turn into xruns.
pub(crate) fn jack_server(
    named: Option<&str>,
    dummy: bool,
    realtime: bool,
) -> anyhow::Result<(Option<String>, Option<DummyServer>)> {
    let named = named.map(str::to_string);
    if !dummy || firmtime_jack::server_running(named.as_deref()) {
        return Ok((named, None));
    }
    let mut options = DummyOptions::new();
    options.realtime = realtime;
    if let Some(n) = &named {
        options.name = n.clone();
    }
    let server =
        DummyServer::start(options).context("starting a dummy JACK server (--jack-dummy)")?;
    Ok((Some(server.name().to_string()), Some(server)))
}

/// The server name to record in output files: `named`, else what libjack
/// connects to without one ($JACK_DEFAULT_SERVER, else `default`).
pub(crate) fn server_label(named: Option<&str>) -> String {
    match named {
        Some(n) => n.to_string(),
        None => std::env::var("JACK_DEFAULT_SERVER")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into()),
    }
}

/// SCHED_FIFO at `priority` with memory locking (when `mlock`), or nothing
/// at all with `no_rt`.
pub(crate) fn rt_request(no_rt: bool, priority: u8, mlock: bool) -> RtRequest {
    if no_rt {
        RtRequest::default()
    } else {
        RtRequest {
            policy: Policy::Fifo { priority },
            mlock,
            prefault_stack: if mlock { 256 * 1024 } else { 0 },
            ..RtRequest::default()
        }
    }
}

/// Which MIDI backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A raw byte stream at [`Request::device`].
    Raw,
    /// JACK MIDI.
    Jack,
    /// The ALSA sequencer.
    Alsa,
    /// In-process loopback.
    Loopback,
}

/// What to open, as the command line asked.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// The backend.
    pub kind: Kind,
    /// Raw: the device path.
    pub device: Option<&'a Path>,
    /// Raw: the baud rate of a serial tty.
    pub baud: Option<u32>,
    /// Raw, ALSA: the backend's I/O thread's real-time request.
    pub io_rt: RtRequest,
    /// JACK: our client's name.
    pub client: &'a str,
    /// JACK: the server name (`--jack-server`).
    pub jack_server: Option<&'a str>,
    /// JACK: start a private dummy server when none runs (`--jack-dummy`).
    pub jack_dummy: bool,
    /// JACK: run that dummy server at SCHED_FIFO.
    pub server_realtime: bool,
    /// JACK / ALSA: ports connected to our input.
    pub connect: &'a [String],
    /// JACK / ALSA: ports our output is connected to.
    pub connect_out: &'a [String],
    /// JACK: the synth's audio port, and where to connect it (`--audio-out`;
    /// empty: the physical playback ports of a real server, `none`: nowhere).
    pub audio: Option<(SynthOptions, &'a [String])>,
    /// JACK: an audio input port (taps from sound) and the ports to connect
    /// to it (`--audio-in`; `none` entries are skipped).
    pub audio_in: Option<&'a [String]>,
    /// JACK: start the loop test's relay client and cable our output
    /// through it back to our input.
    pub relay: bool,
}

impl<'a> Request<'a> {
    /// A request for `kind` with every option off.
    pub fn new(kind: Kind) -> Self {
        Request {
            kind,
            device: None,
            baud: None,
            io_rt: RtRequest::default(),
            client: "firmtime",
            jack_server: None,
            jack_dummy: false,
            server_realtime: false,
            connect: &[],
            connect_out: &[],
            audio: None,
            audio_in: None,
            relay: false,
        }
    }
}

/// What the JACK backend reported when it opened.
#[derive(Debug, Clone)]
pub(crate) struct JackFacts {
    /// The server name used (`None`: the default server).
    pub server: Option<String>,
    /// Our client's name.
    pub client: String,
    /// Our MIDI input ports.
    pub inputs: Vec<String>,
    /// Our MIDI output ports.
    pub outputs: Vec<String>,
    /// Frames per second.
    pub sample_rate: u32,
    /// Frames per period.
    pub buffer_size: u32,
    /// The clock behind `jack_get_time()`.
    pub jack_clock: JackClock,
    /// `jack_get_time()` minus CLOCK_MONOTONIC, ns.
    pub clock_offset_ns: i64,
    /// `jack_get_version_string()` of the libjack in use: jackd2's
    /// ("1.9.21") or PipeWire's ("3.0.0.0 (using PipeWire 0.3.65)").
    pub jack_library: String,
    /// Our audio ports.
    pub audio_ports: Vec<String>,
    /// The synth's port index, when audio was asked for.
    pub audio_port: Option<PortIndex>,
    /// The audio options the backend opened with.
    pub audio: Option<AudioOptions>,
    /// Our audio input port (taps from sound), when one was asked for.
    pub audio_input: Option<String>,
}

/// What was opened, per backend, for each command to render.
#[derive(Debug, Clone)]
pub(crate) enum Facts {
    /// A raw device.
    Raw {
        /// The path opened.
        device: PathBuf,
        /// What the backend found.
        info: RawInfo,
    },
    /// JACK.
    Jack(JackFacts),
    /// The ALSA sequencer.
    #[cfg(feature = "alsa")]
    Alsa(firmtime_midi::alsa::AlsaInfo),
    /// In-process loopback.
    Loopback,
}

impl Facts {
    /// The backend's own I/O thread's RT conditions (raw, ALSA).
    pub fn io_rt(&self) -> Option<RtConditions> {
        match self {
            Facts::Raw { info, .. } => Some(info.rt.clone()),
            #[cfg(feature = "alsa")]
            Facts::Alsa(info) => Some(info.rt.clone()),
            Facts::Jack(_) | Facts::Loopback => None,
        }
    }
}

/// An opened backend. Fields drop in order: the backend closes before its
/// relay and before a dummy JACK server it used is stopped.
pub(crate) struct Opened {
    /// The backend.
    pub backend: Box<dyn MidiBackend>,
    /// What was opened.
    pub facts: Facts,
    /// JACK: the loop test's relay client, if one was started.
    pub relay: Option<jack::Relay>,
    /// JACK: the dummy server started for this run, stopped when dropped.
    pub server: Option<DummyServer>,
}

/// Opens the backend `r` asks for. One arm per backend.
///
/// # Errors
/// A raw backend without a device (a [`UsageError`]), a backend that does
/// not open, a dummy server that does not start, or ALSA in a build
/// without the `alsa` feature.
pub(crate) fn open(r: &Request<'_>) -> anyhow::Result<Opened> {
    match r.kind {
        Kind::Raw => open_raw(r),
        Kind::Jack => open_jack(r),
        Kind::Alsa => open_alsa(r),
        Kind::Loopback => Ok(Opened {
            backend: Box::new(Loopback::new(LoopbackOptions {
                byte_ns: None,
                capacity: 1 << 16,
            })),
            facts: Facts::Loopback,
            relay: None,
            server: None,
        }),
    }
}

fn open_raw(r: &Request<'_>) -> anyhow::Result<Opened> {
    let Some(path) = r.device else {
        return Err(UsageError(
            "--backend raw needs --device PATH (see `firmtime midi ports`)".into(),
        )
        .into());
    };
    let b = RawBackend::open(
        path,
        RawOptions {
            baud: r.baud,
            rt: r.io_rt.clone(),
            ..RawOptions::default()
        },
    )?;
    let info = b.info().clone();
    Ok(Opened {
        backend: Box::new(b),
        facts: Facts::Raw {
            device: path.to_path_buf(),
            info,
        },
        relay: None,
        server: None,
    })
}

/// Where the audio port goes: `audio_out`, else the physical playback
/// ports of a real server (none on a dummy server we started).
fn audio_connections(
    audio_out: &[String],
    server: Option<&str>,
    dummy_started: bool,
) -> Vec<String> {
    if audio_out.iter().any(|p| p == "none") {
        return Vec::new();
    }
    if !audio_out.is_empty() {
        return audio_out.to_vec();
    }
    if dummy_started {
        return Vec::new();
    }
    firmtime_jack::playback_ports(server).unwrap_or_default()
}

fn open_jack(r: &Request<'_>) -> anyhow::Result<Opened> {
    let (server_name, server) = jack_server(r.jack_server, r.jack_dummy, r.server_realtime)?;
    let mut jo = JackOptions::new(r.client);
    jo.server_name = server_name.clone();
    jo.connect_inputs = r.connect.to_vec();
    jo.connect_outputs = r.connect_out.to_vec();
    jo.audio = r.audio.map(|(synth, audio_out)| {
        let mut a = AudioOptions::new(synth);
        a.connect = audio_connections(audio_out, server_name.as_deref(), server.is_some());
        a
    });
    jo.audio_in = r.audio_in.map(|c| jack::AudioInOptions {
        connect: c.iter().filter(|p| *p != "none").cloned().collect(),
        ..jack::AudioInOptions::default()
    });
    let audio = jo.audio.clone();
    let b = JackBackend::open(jo)?;
    let relay = if r.relay {
        let mut ro = jack::RelayOptions::new("firmtime-relay");
        ro.server_name = server_name.clone();
        let relay = jack::Relay::start(ro)?;
        b.connect(&b.output_port_names()[0], relay.input_name())?;
        relay.connect(relay.output_name(), &b.input_port_names()[0])?;
        Some(relay)
    } else {
        None
    };
    let facts = Facts::Jack(JackFacts {
        server: server_name,
        client: b.client_name().to_string(),
        inputs: b.input_port_names().to_vec(),
        outputs: b.output_port_names().to_vec(),
        sample_rate: b.sample_rate(),
        buffer_size: b.buffer_size(),
        jack_clock: b.jack_clock(),
        clock_offset_ns: b.clock_offset_ns(),
        jack_library: firmtime_jack::libjack_version().unwrap_or_default(),
        audio_ports: b.audio_port_names().to_vec(),
        audio_port: b.audio_port(),
        audio,
        audio_input: b.audio_input_port_name().map(str::to_string),
    });
    Ok(Opened {
        backend: Box::new(b),
        facts,
        relay,
        server,
    })
}

#[cfg(feature = "alsa")]
fn open_alsa(r: &Request<'_>) -> anyhow::Result<Opened> {
    use firmtime_midi::alsa::{AlsaBackend, AlsaOptions};
    let b = AlsaBackend::open(AlsaOptions {
        connect_inputs: r.connect.to_vec(),
        connect_outputs: r.connect_out.to_vec(),
        rt: r.io_rt.clone(),
        ..AlsaOptions::default()
    })?;
    let info = b.info().clone();
    Ok(Opened {
        backend: Box::new(b),
        facts: Facts::Alsa(info),
        relay: None,
        server: None,
    })
}

#[cfg(not(feature = "alsa"))]
fn open_alsa(_: &Request<'_>) -> anyhow::Result<Opened> {
    anyhow::bail!("this firmtime was built without the `alsa` feature: rebuild with default features (needs libasound2-dev)")
}
