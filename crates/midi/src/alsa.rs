//! The ALSA sequencer backend (cargo feature `alsa`, on by default).
//!
//! [`AlsaBackend::open`] opens a sequencer client named `firmtime` with one
//! input and one output port and allocates a queue. The input port asks the
//! kernel to stamp every event with the queue's **real-time** clock
//! (`timestamping`, `timestamp_real`), so an event is dated by the kernel
//! when it entered the sequencer, not when firmtime's thread got to it. The
//! queue's real time counts from its start, so the thread reads
//! `CLOCK_MONOTONIC` on both sides of starting the queue and of reading the
//! queue's status, and keeps the base: `t_ns = base + queue real time`.
//! Output with a time is scheduled on the queue at that real time (the
//! kernel sends it then); output "now" goes directly.
//!
//! Opening needs `/dev/snd/seq` (kernel module `snd-seq`); without it,
//! [`AlsaBackend::open`] and [`list_ports`] return [`ErrorKind::NotPresent`]
//! naming the device and the fix. This backend compiles without sound
//! hardware (only libasound is needed at build time); the test suite checks
//! only the refusal without `/dev/snd/seq`, so a first run on a machine with
//! the sequencer is this backend's real test.
//!
//! # Real-time contract
//!
//! The sequencer handle lives on one I/O thread, started by `open` with the
//! requested [`RtRequest`]; rings (rtrb) to and from the engine side are
//! allocated in `open`. The thread's loop allocates nothing itself (libasound
//! decodes short events in place); it blocks only in `poll` on the
//! sequencer and an eventfd. The engine side ([`MidiBackend`] methods) is
//! **RT-safe.**
//!
//! # Time of sent events
//!
//! The sequencer does not report when the kernel actually delivered a
//! scheduled event: [`SentEvent::actual_ns`] is the queue time it was
//! scheduled at, or, for output "now" and output whose time had passed, the
//! time it was handed to the kernel. An event whose time had already passed
//! when handed to the queue counts in [`BackendStats::late_outputs`].

use std::ffi::CString;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use alsa::seq::{
    Addr, ClientIter, EventType, MidiEvent, PortCap, PortInfo, PortIter, PortSubscribe, PortType,
    Seq,
};
use alsa::PollDescriptors;
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::setup::{RtConditions, RtRequest};
use rtrb::{Consumer, Producer, RingBuffer};
use serde::Serialize;

use crate::backend::{
    bump, BackendError, BackendKind, BackendStats, EngineEnds, EngineLink, InputEvent, MidiBackend,
    OutputEvent, SentEvent,
};
use crate::error::{Error, ErrorKind};
use crate::parse_message;

/// The sequencer device this backend needs.
pub const SEQ_DEVICE: &str = "/dev/snd/seq";

/// Options for [`AlsaBackend::open`].
#[derive(Debug, Clone)]
pub struct AlsaOptions {
    /// The sequencer client name.
    pub client_name: String,
    /// Ports to subscribe our input to (`client:port` numbers like `20:0`,
    /// or `client name:port name`).
    pub connect_inputs: Vec<String>,
    /// Ports to subscribe our output to.
    pub connect_outputs: Vec<String>,
    /// Real-time request for the I/O thread.
    pub rt: RtRequest,
    /// Capacity of each ring (input, output, sent reports), in events.
    pub queue_capacity: usize,
}

impl Default for AlsaOptions {
    fn default() -> Self {
        AlsaOptions {
            client_name: "firmtime".into(),
            connect_inputs: Vec::new(),
            connect_outputs: Vec::new(),
            rt: RtRequest::default(),
            queue_capacity: 4096,
        }
    }
}

/// What [`AlsaBackend::open`] obtained.
#[derive(Debug, Clone, Serialize)]
pub struct AlsaInfo {
    /// Our sequencer client number.
    pub client: i32,
    /// Our input port number.
    pub input_port: i32,
    /// Our output port number.
    pub output_port: i32,
    /// The queue whose real time stamps input and schedules output.
    pub queue: i32,
    /// CLOCK_MONOTONIC ns at the queue's real time 0.
    pub base_ns: u64,
    /// The I/O thread's real-time conditions.
    pub rt: RtConditions,
}

/// One sequencer port, as [`list_ports`] sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlsaPort {
    /// Client number.
    pub client: i32,
    /// Port number.
    pub port: i32,
    /// Client name.
    pub client_name: String,
    /// Port name.
    pub port_name: String,
    /// Others can read from it (connect it with `--connect`).
    pub readable: bool,
    /// Others can write to it (connect to it with `--connect-out`).
    pub writable: bool,
}

fn not_present() -> Error {
    Error::new(
        ErrorKind::NotPresent,
        format!(
            "ALSA sequencer not available: {SEQ_DEVICE} does not exist. Load the kernel \
             module (as root: `modprobe snd-seq`), or use --backend jack or --backend raw"
        ),
    )
}

fn alsa_err(what: &str, e: alsa::Error) -> Error {
    let errno = e.errno();
    let mut err = Error::from_errno(errno, what, "");
    if err.kind() == ErrorKind::Io {
        err = Error::new(ErrorKind::Backend, err.message().to_string());
    }
    err
}

fn open_seq(name: &str) -> Result<Seq, Error> {
    if !Path::new(SEQ_DEVICE).exists() {
        return Err(not_present());
    }
    let seq = Seq::open(None, None, true)
        .map_err(|e| alsa_err(&format!("opening the ALSA sequencer {SEQ_DEVICE}"), e))?;
    let cname = CString::new(name)
        .map_err(|_| Error::invalid(format!("ALSA client name {name:?} contains a NUL byte")))?;
    seq.set_client_name(&cname)
        .map_err(|e| alsa_err("naming the ALSA sequencer client", e))?;
    Ok(seq)
}

/// Every port of every sequencer client, like `aconnect -l`.
///
/// # Errors
/// [`ErrorKind::NotPresent`] without `/dev/snd/seq`; others when the
/// sequencer cannot be opened.
pub fn list_ports() -> Result<Vec<AlsaPort>, Error> {
    let seq = open_seq("firmtime-ports")?;
    let me = seq.client_id().unwrap_or(-1);
    let mut out = Vec::new();
    for c in ClientIter::new(&seq) {
        if c.get_client() == me {
            continue;
        }
        let client_name = c.get_name().unwrap_or("").to_string();
        for p in PortIter::new(&seq, c.get_client()) {
            let caps = p.get_capability();
            out.push(AlsaPort {
                client: p.get_client(),
                port: p.get_port(),
                client_name: client_name.clone(),
                port_name: p.get_name().unwrap_or("").to_string(),
                readable: caps.contains(PortCap::READ | PortCap::SUBS_READ),
                writable: caps.contains(PortCap::WRITE | PortCap::SUBS_WRITE),
            });
        }
    }
    Ok(out)
}

/// Resolves `20:0` or `client name:port name` (names compared exactly, then
/// as prefixes) to an address.
fn resolve(seq: &Seq, spec: &str) -> Result<Addr, Error> {
    if let Ok(a) = Addr::from_str(spec) {
        return Ok(a);
    }
    let (cn, pn) = spec.rsplit_once(':').unwrap_or((spec, ""));
    for c in ClientIter::new(seq) {
        let name = c.get_name().unwrap_or("");
        if name != cn && !name.starts_with(cn) {
            continue;
        }
        for p in PortIter::new(seq, c.get_client()) {
            let pname = p.get_name().unwrap_or("");
            if pn.is_empty() || pname == pn || pname.starts_with(pn) {
                return Ok(p.addr());
            }
        }
    }
    Err(Error::new(
        ErrorKind::Port,
        format!("no ALSA sequencer port {spec:?}: see `firmtime midi ports --backend alsa` or `aconnect -l`"),
    ))
}

#[derive(Debug, Default)]
struct Shared {
    link: EngineLink,
    stop: AtomicBool,
    errno: AtomicI32,
}

/// The engine side of the ALSA sequencer backend.
#[derive(Debug)]
pub struct AlsaBackend {
    ends: EngineEnds,
    shared: Arc<Shared>,
    wake_fd: i32,
    info: AlsaInfo,
    thread: Option<JoinHandle<()>>,
}

struct Thread {
    input_tx: Producer<InputEvent>,
    output_rx: Consumer<OutputEvent>,
    sent_tx: Producer<SentEvent>,
    shared: Arc<Shared>,
    wake_fd: i32,
}

/// Sets the I/O thread up: RT, client, ports, queue, subscriptions, base time.
fn setup(
    opts: &AlsaOptions,
) -> Result<(Seq, AlsaInfo, Option<firmtime_rt::dma::DmaLatencyGuard>), Error> {
    let rt = firmtime_rt::setup::apply(&opts.rt)?;
    let seq = open_seq(&opts.client_name)?;
    let client = seq.client_id().map_err(|e| alsa_err("ALSA client id", e))?;
    let queue = seq
        .alloc_queue()
        .map_err(|e| alsa_err("allocating an ALSA queue", e))?;
    let make_port = |name: &str, caps: PortCap, stamped: bool| -> Result<i32, Error> {
        let mut info = PortInfo::empty().map_err(|e| alsa_err("ALSA port info", e))?;
        let cname = CString::new(name).map_err(|_| Error::invalid("port name with NUL"))?;
        info.set_name(&cname);
        info.set_capability(caps);
        info.set_type(PortType::MIDI_GENERIC | PortType::APPLICATION);
        if stamped {
            info.set_timestamping(true);
            info.set_timestamp_real(true);
            info.set_timestamp_queue(queue);
        }
        seq.create_port(&info)
            .map_err(|e| alsa_err(&format!("creating ALSA port {name:?}"), e))?;
        Ok(info.get_port())
    };
    let input_port = make_port("in", PortCap::WRITE | PortCap::SUBS_WRITE, true)?;
    let output_port = make_port("out", PortCap::READ | PortCap::SUBS_READ, false)?;
    let subscribe = |sender: Addr, dest: Addr, stamp: bool| -> Result<(), Error> {
        let sub = PortSubscribe::empty().map_err(|e| alsa_err("ALSA subscription", e))?;
        sub.set_sender(sender);
        sub.set_dest(dest);
        if stamp {
            sub.set_queue(queue);
            sub.set_time_update(true);
            sub.set_time_real(true);
        }
        seq.subscribe_port(&sub).map_err(|e| {
            alsa_err(
                &format!(
                    "connecting ALSA port {}:{} to {}:{}",
                    sender.client, sender.port, dest.client, dest.port
                ),
                e,
            )
        })
    };
    for spec in &opts.connect_inputs {
        let src = resolve(&seq, spec)?;
        subscribe(
            src,
            Addr {
                client,
                port: input_port,
            },
            true,
        )?;
    }
    for spec in &opts.connect_outputs {
        let dst = resolve(&seq, spec)?;
        subscribe(
            Addr {
                client,
                port: output_port,
            },
            dst,
            false,
        )?;
    }
    // Start the queue and find its real time 0 on CLOCK_MONOTONIC: read the
    // queue's real time between two monotonic readings.
    seq.control_queue(queue, EventType::Start, 0, None)
        .map_err(|e| alsa_err("starting the ALSA queue", e))?;
    seq.drain_output()
        .map_err(|e| alsa_err("starting the ALSA queue", e))?;
    let mut best: Option<(u64, u64)> = None;
    for _ in 0..5 {
        let t0 = monotonic_ns();
        let st = seq
            .get_queue_status(queue)
            .map_err(|e| alsa_err("reading the ALSA queue's time", e))?;
        let t1 = monotonic_ns();
        let q = u64::try_from(st.get_real_time().as_nanos()).unwrap_or(u64::MAX);
        let width = t1 - t0;
        if best.map_or(true, |(w, _)| width < w) {
            best = Some((width, (t0 + width / 2).saturating_sub(q)));
        }
    }
    let base_ns = best.map_or(0, |(_, b)| b);
    let info = AlsaInfo {
        client,
        input_port,
        output_port,
        queue,
        base_ns,
        rt: rt.conditions,
    };
    Ok((seq, info, rt.guard))
}

impl Thread {
    fn run(mut self, seq: Seq, info: &AlsaInfo) {
        let Ok(mut coder) = MidiEvent::new(256) else {
            self.fail(libc::ENOMEM);
            return;
        };
        coder.enable_running_status(false);
        let mut fds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; 8];
        let n = (&seq, Some(alsa::Direction::Capture))
            .fill(&mut fds[1..])
            .unwrap_or(0);
        fds[0] = libc::pollfd {
            fd: self.wake_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let nfds = (n + 1) as libc::nfds_t;
        let mut input = seq.input();
        let mut buf = [0u8; 256];
        while !self.shared.stop.load(Ordering::Acquire) {
            // SAFETY: `fds` is a valid array of at least `nfds` pollfd.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds, 100) };
            if r < 0 {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                if e == libc::EINTR {
                    continue;
                }
                self.fail(e);
                return;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                let mut v = 0u64;
                // SAFETY: reading 8 bytes into a u64 from our own eventfd.
                unsafe { libc::read(self.wake_fd, (&mut v as *mut u64).cast(), 8) };
            }
            if fds[1..=n]
                .iter()
                .any(|f| f.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0)
            {
                self.fail(0);
                return;
            }
            // Input: everything pending, stamped by the kernel.
            let mut delivered = false;
            loop {
                match input.event_input_pending(true) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let mut ev = match input.event_input() {
                    Ok(ev) => ev,
                    Err(_) => break,
                };
                let t_ns = match ev.get_time() {
                    Some(d) => info.base_ns + u64::try_from(d.as_nanos()).unwrap_or(0),
                    None => monotonic_ns(),
                };
                let len = match coder.decode(&mut buf, &mut ev) {
                    Ok(len) => len,
                    // Not MIDI (port announcements and the like): not counted.
                    Err(_) => continue,
                };
                match parse_message(&buf[..len]) {
                    Ok(msg) => {
                        let e = InputEvent {
                            t_ns,
                            frame: None,
                            port: 0,
                            msg,
                        };
                        if self.input_tx.push(e).is_ok() {
                            delivered = true;
                        } else {
                            bump(&self.shared.link.counters.input_dropped);
                        }
                    }
                    Err(_) => bump(&self.shared.link.counters.malformed),
                }
            }
            // Output: hand everything queued to the kernel.
            let mut wrote = false;
            while let Ok(out) = self.output_rx.pop() {
                let mut bytes = [0u8; 3];
                let len = out.msg.encode(&mut bytes);
                coder.reset_encode();
                let Ok((_, Some(mut ev))) = coder.encode(&bytes[..len]) else {
                    bump(&self.shared.link.counters.output_dropped);
                    continue;
                };
                ev.set_source(info.output_port);
                ev.set_subs();
                let now = monotonic_ns();
                let mut late = false;
                let actual = match out.at_ns {
                    Some(t) if t > now => {
                        ev.schedule_real(info.queue, false, Duration::from_nanos(t - info.base_ns));
                        t
                    }
                    Some(_) => {
                        late = true;
                        ev.set_direct();
                        now
                    }
                    None => {
                        ev.set_direct();
                        now
                    }
                };
                if seq.event_output(&mut ev).is_err() {
                    bump(&self.shared.link.counters.output_dropped);
                    continue;
                }
                wrote = true;
                bump(&self.shared.link.counters.sent);
                if late {
                    bump(&self.shared.link.counters.late_outputs);
                }
                let rep = SentEvent {
                    intended_ns: out.at_ns,
                    actual_ns: actual,
                    frame: None,
                    port: out.port,
                    msg: out.msg,
                    tag: out.tag,
                };
                if self.sent_tx.push(rep).is_ok() {
                    delivered = true;
                }
            }
            if wrote && seq.drain_output().is_err() {
                bump(&self.shared.link.counters.output_dropped);
            }
            if delivered {
                self.shared.link.notify();
            }
        }
    }

    fn fail(&self, errno: i32) {
        self.shared.errno.store(errno, Ordering::Relaxed);
        self.shared
            .link
            .shut_down(crate::backend::LossCause::DeviceError(errno));
    }
}

impl AlsaBackend {
    /// Opens the sequencer client, its ports and queue on a new I/O thread
    /// and makes the connections asked for.
    ///
    /// # Errors
    /// [`ErrorKind::NotPresent`] without `/dev/snd/seq` (the message names it
    /// and says `modprobe snd-seq`); [`ErrorKind::Port`] for a port to
    /// connect that does not exist; [`ErrorKind::Realtime`] when the
    /// real-time request is refused; [`ErrorKind::InvalidInput`] for a zero
    /// queue capacity; others from the sequencer.
    pub fn open(options: AlsaOptions) -> Result<Self, Error> {
        if options.queue_capacity == 0 {
            return Err(Error::invalid(
                "ALSA queue capacity must be at least 1 event",
            ));
        }
        if !Path::new(SEQ_DEVICE).exists() {
            return Err(not_present());
        }
        let cap = options.queue_capacity;
        let (input_tx, input_rx) = RingBuffer::new(cap);
        let (output_tx, output_rx) = RingBuffer::new(cap);
        let (sent_tx, sent_rx) = RingBuffer::new(cap);
        let shared = Arc::new(Shared::default());
        // SAFETY: eventfd(2) with valid flags; the fd is checked below.
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake_fd < 0 {
            return Err(Error::last_os(
                "creating an eventfd for the ALSA thread",
                "",
            ));
        }
        let (tx, rx) = mpsc::channel();
        let thread = Thread {
            input_tx,
            output_rx,
            sent_tx,
            shared: Arc::clone(&shared),
            wake_fd,
        };
        let handle = std::thread::Builder::new()
            .name("firmtime-alsa".into())
            .spawn(move || match setup(&options) {
                Ok((seq, info, _guard)) => {
                    let _ = tx.send(Ok(info.clone()));
                    thread.run(seq, &info);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot start the ALSA thread: {e}")))?;
        let close_fd = || {
            // SAFETY: closing the eventfd we created; nobody else uses it now.
            unsafe { libc::close(wake_fd) };
        };
        match rx.recv() {
            Ok(Ok(info)) => Ok(AlsaBackend {
                ends: EngineEnds {
                    input_rx,
                    output_tx,
                    sent_rx,
                },
                shared,
                wake_fd,
                info,
                thread: Some(handle),
            }),
            Ok(Err(e)) => {
                let _ = handle.join();
                close_fd();
                Err(e)
            }
            Err(_) => {
                let _ = handle.join();
                close_fd();
                Err(Error::new(
                    ErrorKind::Backend,
                    "the ALSA thread ended during setup",
                ))
            }
        }
    }

    /// What was obtained: client, ports, queue, base time, RT conditions.
    pub fn info(&self) -> &AlsaInfo {
        &self.info
    }

    fn wake(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our own eventfd.
        unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
    }
}

impl Drop for AlsaBackend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.wake();
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        // SAFETY: the thread that polled it has ended; the fd is ours.
        unsafe { libc::close(self.wake_fd) };
    }
}

impl MidiBackend for AlsaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Alsa
    }

    fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
        self.ends.poll_input(&self.shared.link, f)
    }

    fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
        self.ends.wait(&self.shared.link, deadline_ns)
    }

    fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
        if ev.port != 0 {
            return Err(BackendError::NoSuchPort(ev.port));
        }
        self.ends.send(&self.shared.link, ev)?;
        self.wake();
        Ok(())
    }

    fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
        self.ends.poll_sent(f)
    }

    fn stats(&self) -> BackendStats {
        self.shared.link.counters.snapshot()
    }

    fn input_loss(&self) -> Option<crate::backend::InputLoss> {
        self.shared.link.loss.get()
    }
}
