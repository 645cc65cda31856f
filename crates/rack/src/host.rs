//! `firmtime rack` as a JACK client: audio ports for the chain's inputs and
//! outputs, the [`Engine`] in the process callback, xruns counted through
//! JACK's xrun callback, dropped cycles counted from gaps in the frame
//! counter (PipeWire never calls the xrun callback), and DSP load from
//! `jack_cpu_load`. The client
//! opens and activates through firmtime-jack (never starting a server).
//!
//! # Real-time contract
//! [`RackHost::start`] opens the client, builds the engine at the server's
//! rate and buffer size, registers ports, activates and connects. The
//! process callback copies port buffers into the engine, runs
//! [`Engine::process`] and copies the result out: no allocation, lock or
//! print (the engine's own contract); the frame-gap check is arithmetic and
//! one atomic add. The xrun callback only bumps an atomic.

use crate::engine::{build, Engine, EngineCounters, EngineCounts, RackControl, RackStats};
use crate::error::{Error, ErrorKind, Result};
use crate::file::RackFile;
use firmtime_jack::FrameGaps;
use firmtime_ladspa::Scan;
use firmtime_rt::clock::monotonic_ns;
use jack::{
    AudioIn, AudioOut, Client, ClientStatus, Control, NotificationHandler, Port, ProcessHandler,
    ProcessScope,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Reads a running rack's counters from any thread ([`RackHost::metrics`]).
#[derive(Debug, Clone)]
pub struct RackMetrics {
    engine: EngineCounters,
    xruns: Arc<AtomicU64>,
    frame_gaps: Arc<AtomicU64>,
}

/// A rack's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RackCounts {
    /// The engine's.
    pub engine: EngineCounts,
    /// Xruns the server reported.
    pub xruns: u64,
    /// Cycles the server dropped, seen as gaps in the frame counter.
    pub frame_gaps: u64,
}

impl RackMetrics {
    /// The counters now.
    pub fn snapshot(&self) -> RackCounts {
        RackCounts {
            engine: self.engine.snapshot(),
            xruns: self.xruns.load(Ordering::Relaxed),
            frame_gaps: self.frame_gaps.load(Ordering::Relaxed),
        }
    }
}

/// Where and how to run a rack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostOptions {
    /// JACK server name; `None` = the default server.
    pub server_name: Option<String>,
    /// Client name; `None` = the file's `client`.
    pub client_name: Option<String>,
    /// Ports to connect the inputs from (replaces the file's `connect_in` when non-empty).
    pub connect_in: Vec<String>,
    /// Ports to connect the outputs to (replaces the file's `connect_out` when non-empty).
    pub connect_out: Vec<String>,
}

/// A firmtime-jack error as this crate's [`ErrorKind::Jack`], same message.
fn jack_error(e: firmtime_jack::Error) -> Error {
    Error::new(ErrorKind::Jack, e.message())
}

/// Opens a JACK client on `server` (or the default), never starting a server.
fn open_client(name: &str, server: Option<&str>) -> Result<Client> {
    firmtime_jack::open_client(name, server).map_err(jack_error)
}

struct Notifier {
    xruns: Arc<AtomicU64>,
    shutdown: Arc<AtomicBool>,
}

impl NotificationHandler for Notifier {
    unsafe fn shutdown(&mut self, _status: ClientStatus, _reason: &str) {
        self.shutdown.store(true, Ordering::Release);
    }

    fn xrun(&mut self, _: &Client) -> Control {
        self.xruns.fetch_add(1, Ordering::Relaxed);
        Control::Continue
    }
}

struct Process {
    engine: Engine,
    ins: Vec<Port<AudioIn>>,
    outs: Vec<Port<AudioOut>>,
    gaps: FrameGaps,
    frame_gaps: Arc<AtomicU64>,
}

impl ProcessHandler for Process {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        let start = monotonic_ns();
        if self.gaps.observe(ps.last_frame_time(), ps.n_frames()) {
            self.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        let n = ps.n_frames() as usize;
        let m = n.min(self.engine.block_size());
        for (c, p) in self.ins.iter().enumerate() {
            let src = p.as_slice(ps);
            self.engine.input_mut(c)[..m].copy_from_slice(&src[..m]);
        }
        self.engine.process(n, start);
        for (c, p) in self.outs.iter_mut().enumerate() {
            let dst = p.as_mut_slice(ps);
            if n > m {
                dst.fill(0.0);
            } else {
                dst.copy_from_slice(&self.engine.output(c)[..n]);
            }
        }
        Control::Continue
    }
}

/// A running rack: the active JACK client and its controller.
pub struct RackHost {
    client: Option<jack::AsyncClient<Notifier, Process>>,
    control: Option<RackControl>,
    xruns: Arc<AtomicU64>,
    frame_gaps: Arc<AtomicU64>,
    shutdown: Arc<AtomicBool>,
    sample_rate: u32,
    block_size: usize,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

impl std::fmt::Debug for RackHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RackHost")
            .field("sample_rate", &self.sample_rate)
            .field("block_size", &self.block_size)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl RackHost {
    /// Opens a JACK client, builds the rack at the server's sample rate and
    /// buffer size, registers `in_N`/`out_N` audio ports, activates, and
    /// connects the ports asked for.
    ///
    /// # Errors
    /// [`ErrorKind::Jack`] when no server answers, a port cannot be
    /// registered or connected (the message names both ports); else what
    /// [`build`] returns.
    pub fn start(file: &RackFile, scan: &Scan, opts: &HostOptions) -> Result<RackHost> {
        let name = opts.client_name.as_deref().unwrap_or(&file.client);
        let client = open_client(name, opts.server_name.as_deref())?;
        let sample_rate = client.sample_rate() as u32;
        let block_size = client.buffer_size() as usize;
        let (engine, control) = build(file, scan, sample_rate, block_size)?;
        let jack_err =
            |e: jack::Error, what: String| Error::new(ErrorKind::Jack, format!("{what}: {e}"));
        let mut ins = Vec::with_capacity(engine.input_channels());
        for c in 0..engine.input_channels() {
            let n = format!("in_{}", c + 1);
            ins.push(
                client
                    .register_port(&n, AudioIn::default())
                    .map_err(|e| jack_err(e, format!("cannot register port {n}")))?,
            );
        }
        let mut outs = Vec::with_capacity(engine.output_channels());
        for c in 0..engine.output_channels() {
            let n = format!("out_{}", c + 1);
            outs.push(
                client
                    .register_port(&n, AudioOut::default())
                    .map_err(|e| jack_err(e, format!("cannot register port {n}")))?,
            );
        }
        let full =
            |p: &dyn Fn() -> std::result::Result<String, jack::Error>| p().unwrap_or_default();
        let inputs: Vec<String> = ins.iter().map(|p| full(&|| p.name())).collect();
        let outputs: Vec<String> = outs.iter().map(|p| full(&|| p.name())).collect();
        let xruns = Arc::new(AtomicU64::new(0));
        let frame_gaps = Arc::new(AtomicU64::new(0));
        let shutdown = Arc::new(AtomicBool::new(false));
        let notifier = Notifier {
            xruns: Arc::clone(&xruns),
            shutdown: Arc::clone(&shutdown),
        };
        let active = firmtime_jack::activate(
            client,
            notifier,
            Process {
                engine,
                ins,
                outs,
                gaps: FrameGaps::default(),
                frame_gaps: Arc::clone(&frame_gaps),
            },
            "the JACK client",
        )
        .map_err(jack_error)?;
        let host = RackHost {
            client: Some(active),
            control: Some(control),
            xruns,
            frame_gaps,
            shutdown,
            sample_rate,
            block_size,
            inputs,
            outputs,
        };
        let cin = if opts.connect_in.is_empty() {
            &file.connect_in
        } else {
            &opts.connect_in
        };
        let cout = if opts.connect_out.is_empty() {
            &file.connect_out
        } else {
            &opts.connect_out
        };
        let c = host.client.as_ref().expect("active").as_client();
        // firmtime-jack's connect names the closest ports when one is mistyped.
        for (src, dst) in cin.iter().zip(&host.inputs) {
            firmtime_jack::connect(c, src, dst).map_err(jack_error)?;
        }
        for (src, dst) in host.outputs.iter().zip(cout) {
            firmtime_jack::connect(c, src, dst).map_err(jack_error)?;
        }
        Ok(host)
    }

    /// The controller: set controls, read counters.
    pub fn control(&mut self) -> &mut RackControl {
        self.control.as_mut().expect("control lives until stop")
    }

    /// A reader of the rack's counters (the engine's, xruns, frame gaps)
    /// for another thread: atomic loads only, never waiting for the
    /// process callback.
    pub fn metrics(&mut self) -> RackMetrics {
        RackMetrics {
            engine: self.control().counters(),
            xruns: Arc::clone(&self.xruns),
            frame_gaps: Arc::clone(&self.frame_gaps),
        }
    }

    /// Xruns the server reported since the client was activated.
    pub fn xruns(&self) -> u64 {
        self.xruns.load(Ordering::Relaxed)
    }

    /// Cycles the server dropped since the client was activated, seen as
    /// gaps in the frame counter ([`FrameGaps`]): the count that works on
    /// PipeWire, which never reports xruns.
    pub fn frame_gaps(&self) -> u64 {
        self.frame_gaps.load(Ordering::Relaxed)
    }

    /// The server's DSP load, percent (`jack_cpu_load`).
    pub fn cpu_load(&self) -> f32 {
        self.client
            .as_ref()
            .map_or(0.0, |c| c.as_client().cpu_load())
    }

    /// True once the server shut the client down.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Sample rate of the server.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Frames per period.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Full names of the input ports (`client:in_N`).
    pub fn input_ports(&self) -> &[String] {
        &self.inputs
    }

    /// Full names of the output ports (`client:out_N`).
    pub fn output_ports(&self) -> &[String] {
        &self.outputs
    }

    /// Deactivates the client, closes remote sessions and returns the final counters.
    pub fn stop(mut self) -> RackStats {
        self.shutdown_now()
    }

    fn shutdown_now(&mut self) -> RackStats {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
        match self.control.take() {
            Some(ctl) => {
                let s = ctl.stats();
                ctl.close();
                s
            }
            None => RackStats {
                cycles: 0,
                oversize: 0,
                overruns: 0,
                controls_applied: 0,
                controls_dropped: 0,
                stages: Vec::new(),
            },
        }
    }
}

impl Drop for RackHost {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}
