//! [`JackBackend`]: the engine side of the JACK MIDI backend, and its options.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use firmtime_jack::{
    activate, connect, deactivate, jack_clock_offset, open_client, port_names, FrameExtender,
    FrameGaps, JackClock,
};
use jack::{AudioIn, AudioOut, Client, MidiIn, MidiOut, Port};

use super::audio::{self, AudioOptions, AudioStats, Synth};
use super::audio_in::{self, AudioBlock, AudioInEnd, AudioInOptions};
use super::process::{new_core, AudioPart, Notifier, Process, Shared};
use super::MAX_PORTS;
use crate::backend::{
    BackendError, BackendKind, BackendStats, EngineEnds, InputEvent, InputLoss, LossCause,
    MidiBackend, OutputEvent, PortIndex, SentEvent,
};
use crate::error::{Error, ErrorKind};

/// Options for [`JackBackend::open`].
#[derive(Debug, Clone, PartialEq)]
pub struct JackOptions {
    /// The JACK server to connect to; `None`: `$JACK_DEFAULT_SERVER` or "default".
    /// A server is never started implicitly (see [`firmtime_jack::DummyServer`]).
    pub server_name: Option<String>,
    /// The client name (JACK may append `-01` etc. if it is taken).
    pub client_name: String,
    /// Short names of the MIDI input ports to register (at most [`MAX_PORTS`]).
    pub inputs: Vec<String>,
    /// Short names of the MIDI output ports to register (at most [`MAX_PORTS`]).
    pub outputs: Vec<String>,
    /// Full names of ports (`client:port`) to connect to our inputs: entry
    /// `i` goes to input `i`, entries past the last input to the last input.
    pub connect_inputs: Vec<String>,
    /// Full names of ports to connect our outputs to: entry `i` from output
    /// `i`, entries past the last output from the last output.
    pub connect_outputs: Vec<String>,
    /// Capacity of each ring (input, output, sent reports) and of the
    /// pending-output queue, in events.
    pub queue_capacity: usize,
    /// Audio output (see [`audio`]): `Some` adds audio port(s) and one more
    /// output index, [`JackBackend::audio_port`], whose note messages are
    /// rendered as sound at their frame.
    pub audio: Option<AudioOptions>,
    /// Audio input (see [`audio_in`]): `Some` adds a mono audio input port
    /// whose samples the engine side takes with [`MidiBackend::poll_audio`].
    /// It is watched as the MIDI inputs are: its last connection removed
    /// or the client feeding it gone is an input loss
    /// ([`MidiBackend::input_loss`]).
    pub audio_in: Option<AudioInOptions>,
}

impl JackOptions {
    /// A client named `client_name` on the default server, with one input
    /// `in` and one output `out`, no connections, queues of 4096 events.
    pub fn new(client_name: impl Into<String>) -> Self {
        JackOptions {
            server_name: None,
            client_name: client_name.into(),
            inputs: vec!["in".into()],
            outputs: vec!["out".into()],
            connect_inputs: Vec::new(),
            connect_outputs: Vec::new(),
            queue_capacity: 4096,
            audio: None,
            audio_in: None,
        }
    }
}

/// A JACK MIDI client: the engine side of the JACK backend.
///
/// Drop it (or call [`JackBackend::close`]) to deactivate and close the client.
pub struct JackBackend {
    client: Option<jack::AsyncClient<Notifier, Process>>,
    ends: EngineEnds,
    shared: Arc<Shared>,
    n_outputs: usize,
    input_names: Vec<String>,
    output_names: Vec<String>,
    audio_names: Vec<String>,
    audio_port: Option<PortIndex>,
    audio_counters: Option<Arc<audio::AudioCounters>>,
    audio_in: Option<AudioInEnd>,
    audio_in_name: Option<String>,
    client_name: String,
    sample_rate: u32,
    buffer_size: u32,
    clock_offset_ns: i64,
    jack_clock: JackClock,
    /// The process cycles seen at the engine side's last look, when that
    /// count last moved, and when it last looked ([`JackBackend::watch_cycles`]).
    seen_cycles: u64,
    cycle_moved_ns: u64,
    looked_ns: u64,
}

/// A server that runs no process cycle for this long while the engine side
/// keeps looking is gone ([`LossCause::ServerStopped`]): PipeWire's JACK
/// does not tell its clients when the server is killed.
pub const STALL_NS: u64 = 1_000_000_000;

impl fmt::Debug for JackBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JackBackend")
            .field("client_name", &self.client_name)
            .field("inputs", &self.input_names)
            .field("outputs", &self.output_names)
            .field("sample_rate", &self.sample_rate)
            .field("clock_offset_ns", &self.clock_offset_ns)
            .finish_non_exhaustive()
    }
}

fn check_ports(what: &str, names: &[String]) -> Result<(), Error> {
    if names.len() > MAX_PORTS {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} MIDI {what} ports asked for; at most {MAX_PORTS}",
                names.len()
            ),
        ));
    }
    Ok(())
}

impl JackBackend {
    /// Opens the client, registers its MIDI ports, activates it and makes
    /// the connections asked for.
    ///
    /// # Errors
    /// [`ErrorKind::NotInstalled`] without libjack;
    /// [`ErrorKind::ServerUnavailable`] when no server runs under that
    /// name; [`ErrorKind::Port`] when a port cannot be registered or
    /// connected; [`ErrorKind::InvalidInput`] for more than
    /// [`MAX_PORTS`] ports or a zero queue capacity.
    pub fn open(options: JackOptions) -> Result<Self, Error> {
        check_ports("input", &options.inputs)?;
        check_ports("output", &options.outputs)?;
        if options.queue_capacity == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "JACK queue capacity must be at least 1 event",
            ));
        }
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let reg_err = |name: &str, e: jack::Error| {
            Error::new(
                ErrorKind::Port,
                format!("cannot register JACK MIDI port {name:?}: {e}"),
            )
        };
        let mut ins = Vec::with_capacity(options.inputs.len());
        for name in &options.inputs {
            ins.push(
                client
                    .register_port(name, MidiIn::default())
                    .map_err(|e| reg_err(name, e))?,
            );
        }
        let mut outs = Vec::with_capacity(options.outputs.len());
        for name in &options.outputs {
            outs.push(
                client
                    .register_port(name, MidiOut::default())
                    .map_err(|e| reg_err(name, e))?,
            );
        }
        let input_names = port_names(&ins)?;
        let output_names = port_names(&outs)?;
        let sample_rate = client.sample_rate();
        let audio =
            match &options.audio {
                None => None,
                Some(a) => {
                    if a.ports.is_empty() || a.ports.len() > audio::MAX_AUDIO_PORTS {
                        return Err(Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{} audio ports asked for; 1 to {} (all carry the same sound)",
                                a.ports.len(),
                                audio::MAX_AUDIO_PORTS
                            ),
                        ));
                    }
                    let synth = Synth::new(a.synth, sample_rate)?;
                    let mut ports = Vec::with_capacity(a.ports.len());
                    for name in &a.ports {
                        ports.push(client.register_port(name, AudioOut::default()).map_err(
                            |e| {
                                Error::new(
                                    ErrorKind::Port,
                                    format!("cannot register JACK audio port {name:?}: {e}"),
                                )
                            },
                        )?);
                    }
                    Some(AudioPart {
                        synth,
                        ports,
                        index: options.outputs.len() as PortIndex,
                    })
                }
            };
        let audio_names = match &audio {
            Some(a) => port_names(&a.ports)?,
            None => Vec::new(),
        };
        let audio_port = audio.as_ref().map(|a| a.index);
        let audio_counters = audio.as_ref().map(|a| a.synth.counters());
        let mut audio_in_handle = None;
        let (audio_in_part, audio_in_end, audio_in_name) = match &options.audio_in {
            None => (None, None, None),
            Some(o) => {
                let port = client
                    .register_port(&o.port, AudioIn::default())
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::Port,
                            format!("cannot register JACK audio input port {:?}: {e}", o.port),
                        )
                    })?;
                let name = port_names(std::slice::from_ref(&port))?.remove(0);
                audio_in_handle = Some(port.clone_unowned());
                let (part, end) = audio_in::new_audio_in(port, o.blocks, sample_rate);
                (Some(part), Some(end), Some(name))
            }
        };
        let (clock_offset_ns, jack_clock) = jack_clock_offset(&client);
        let client_name = client.name().to_string();
        let buffer_size = client.buffer_size();
        let (core, ends, shared) = new_core(options.queue_capacity);
        // The audio input is watched as the MIDI inputs are: a source that
        // goes away mid-trial is an input loss (issue 30).
        let mut input_handles: Vec<Port<jack::Unowned>> =
            ins.iter().map(Port::clone_unowned).collect();
        let mut watched_names = input_names.clone();
        if let (Some(h), Some(n)) = (audio_in_handle, &audio_in_name) {
            input_handles.push(h);
            watched_names.push(n.clone());
        }
        let process = Process {
            core,
            ins,
            outs,
            audio,
            audio_in: audio_in_part,
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            clock_offset_ns,
        };
        let notifier = Notifier::new(Arc::clone(&shared), input_handles, watched_names);
        let active = activate(client, notifier, process, "JACK client")?;
        let backend = JackBackend {
            client: Some(active),
            ends,
            shared,
            n_outputs: options.outputs.len() + usize::from(audio_port.is_some()),
            input_names,
            output_names,
            audio_names,
            audio_port,
            audio_counters,
            audio_in: audio_in_end,
            audio_in_name,
            client_name,
            sample_rate,
            buffer_size,
            clock_offset_ns,
            jack_clock,
            seen_cycles: 0,
            cycle_moved_ns: 0,
            looked_ns: 0,
        };
        let c = backend.jack_client();
        for (i, src) in options.connect_inputs.iter().enumerate() {
            if let Some(dst) = backend
                .input_names
                .get(i.min(backend.input_names.len().saturating_sub(1)))
            {
                connect(c, src, dst)?;
            }
        }
        for (i, dst) in options.connect_outputs.iter().enumerate() {
            if let Some(src) = backend
                .output_names
                .get(i.min(backend.output_names.len().saturating_sub(1)))
            {
                connect(c, src, dst)?;
            }
        }
        if let Some(a) = &options.audio {
            for (i, dst) in a.connect.iter().enumerate() {
                let n = backend.audio_names.len();
                connect(c, &backend.audio_names[i.min(n - 1)], dst)?;
            }
        }
        if let (Some(o), Some(dst)) = (&options.audio_in, &backend.audio_in_name) {
            for src in &o.connect {
                connect(c, src, dst)?;
            }
        }
        Ok(backend)
    }

    /// The audio input port's full name, when one was asked for.
    pub fn audio_input_port_name(&self) -> Option<&str> {
        self.audio_in_name.as_deref()
    }

    fn jack_client(&self) -> &Client {
        self.client
            .as_ref()
            .map(jack::AsyncClient::as_client)
            .expect("client is Some until close or drop")
    }

    /// The client's name as JACK registered it.
    pub fn client_name(&self) -> &str {
        &self.client_name
    }

    /// Full names (`client:port`) of the input ports, by [`PortIndex`].
    pub fn input_port_names(&self) -> &[String] {
        &self.input_names
    }

    /// Full names (`client:port`) of the output ports, by [`PortIndex`].
    pub fn output_port_names(&self) -> &[String] {
        &self.output_names
    }

    /// The output index whose note messages the synth renders as audio
    /// (one past the MIDI outputs), when audio was asked for. **RT-safe.**
    pub fn audio_port(&self) -> Option<PortIndex> {
        self.audio_port
    }

    /// Full names of the audio output ports (empty without audio).
    pub fn audio_port_names(&self) -> &[String] {
        &self.audio_names
    }

    /// The synth's counters (`None` without audio). **RT-safe.**
    pub fn audio_stats(&self) -> Option<AudioStats> {
        self.audio_counters.as_ref().map(|c| c.stats())
    }

    /// The server's sample rate, Hz.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// The server's period (frames per cycle) when the client opened.
    pub fn buffer_size(&self) -> u32 {
        self.buffer_size
    }

    /// What is added to JACK time (µs × 1000) to get CLOCK_MONOTONIC ns;
    /// 0 when JACK's clock is CLOCK_MONOTONIC.
    pub fn clock_offset_ns(&self) -> i64 {
        self.clock_offset_ns
    }

    /// The clock JACK's times are on.
    pub fn jack_clock(&self) -> JackClock {
        self.jack_clock
    }

    /// The server's frame counter now (32 bits, wraps), from a non-RT thread.
    pub fn frame_time(&self) -> u32 {
        self.jack_client().frame_time()
    }

    /// Process cycles run so far. **RT-safe.**
    pub fn cycles(&self) -> u64 {
        self.shared.cycles.load(Ordering::Relaxed)
    }

    /// Sent reports lost because [`MidiBackend::poll_sent`] was not called
    /// often enough (the events themselves went out). **RT-safe.**
    pub fn sent_reports_dropped(&self) -> u64 {
        self.shared.reports_dropped.load(Ordering::Relaxed)
    }

    /// Connects two ports by full name (any clients), e.g. to wire other
    /// clients to this one after opening.
    ///
    /// # Errors
    /// [`ErrorKind::Port`] when either port does not exist or the
    /// connection is refused.
    pub fn connect(&self, src: &str, dst: &str) -> Result<(), Error> {
        Ok(connect(self.jack_client(), src, dst)?)
    }

    /// Marks the server gone ([`LossCause::ServerStopped`], at the last
    /// cycle seen) when it ran no cycle for [`STALL_NS`] while the engine
    /// side kept looking; a look after a longer pause (between trials)
    /// starts the count afresh. **RT-safe.**
    fn watch_cycles(&mut self) {
        let now = firmtime_rt::clock::monotonic_ns();
        let cycles = self.shared.cycles.load(Ordering::Relaxed);
        let link = &self.shared.link;
        if cycles != self.seen_cycles || now.saturating_sub(self.looked_ns) > STALL_NS / 4 {
            self.seen_cycles = cycles;
            self.cycle_moved_ns = now;
        } else if now.saturating_sub(self.cycle_moved_ns) > STALL_NS
            && !link.shutdown.load(Ordering::Acquire)
        {
            link.loss
                .lose(LossCause::ServerStopped, self.cycle_moved_ns);
            link.shutdown.store(true, Ordering::Release);
        }
        self.looked_ns = now;
    }

    /// Deactivates and closes the client.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when JACK refuses to deactivate it (it is closed anyway).
    pub fn close(mut self) -> Result<(), Error> {
        self.deactivate()
    }

    fn deactivate(&mut self) -> Result<(), Error> {
        match self.client.take() {
            Some(c) => Ok(deactivate(c, "JACK client").map(|_| ())?),
            None => Ok(()),
        }
    }
}

impl Drop for JackBackend {
    fn drop(&mut self) {
        let _ = self.deactivate();
    }
}

impl MidiBackend for JackBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Jack
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        self.watch_cycles();
        self.ends.poll_input(&self.shared.link, f)
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        self.watch_cycles();
        self.ends.wait(&self.shared.link, deadline_ns)
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        if usize::from(ev.port) >= self.n_outputs {
            return Err(BackendError::NoSuchPort(ev.port));
        }
        self.ends.send(&self.shared.link, ev)
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        self.ends.poll_sent(f)
    }

    fn stats(&self) -> BackendStats {
        self.shared.link.counters.snapshot()
    }

    fn input_loss(&self) -> Option<InputLoss> {
        self.shared.link.loss.get()
    }

    fn poll_audio(&mut self, f: &mut dyn FnMut(&AudioBlock)) -> usize {
        match self.audio_in.as_mut() {
            Some(a) => a.poll(f),
            None => 0,
        }
    }

    fn describe_input_loss(&self) -> Option<String> {
        self.shared.link.loss.detail()
    }
}
