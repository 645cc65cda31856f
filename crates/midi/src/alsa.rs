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
//! # A source that goes away
//!
//! The input port is subscribed to the System:Announce port (`0:1`) too, so
//! the sequencer tells the I/O thread when a port or client exits; it tells
//! the input port directly when a subscription to it is removed. The
//! sources feeding the input (the ports `connect_inputs` subscribed, and
//! any port subscribed to it later, e.g. with `aconnect`) are kept in a
//! fixed array (`Sources`, up to 64); when the last of them
//! goes the input is lost ([`MidiBackend::input_loss`], [`MidiBackend::describe_input_loss`]) as on JACK: its
//! subscription removed (`PORT_UNSUBSCRIBED` to our input port) is
//! [`LossCause::PortDisconnected`], its port gone (`PORT_EXIT`) or its
//! client gone (`CLIENT_EXIT`) is [`LossCause::ClientGone`] (a
//! disconnection followed by the source's exit is refined to it, as JACK
//! tells a client's exit as its ports' disconnection first), at
//! `CLOCK_MONOTONIC` when the thread read the announcement. A port
//! subscribed again restores the input. Other clients and ports coming and
//! going, and subscriptions between other ports, are ignored. This machine
//! (the one the project is developed on) has no `/dev/snd/seq`: the
//! decision (`Sources::note`) is unit-tested, the glue reading the
//! announcements has not run yet.
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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use alsa::seq::{
    Addr, ClientIter, Connect, Event, EventType, MidiEvent, PortCap, PortInfo, PortIter,
    PortSubscribe, PortType, Seq,
};
use alsa::PollDescriptors;
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::setup::{RtConditions, RtRequest};
use rtrb::{Consumer, Producer, RingBuffer};
use serde::Serialize;

use crate::backend::{
    bump, BackendError, BackendKind, BackendStats, EngineEnds, EngineLink, InputEvent, InputLoss,
    LossCause, MidiBackend, OutputEvent, SentEvent,
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

/// The most sources feeding the input that [`Sources`] tracks (a port
/// subscribed beyond them is not watched).
const MAX_SOURCES: usize = 64;

/// How a source stopped feeding the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Its subscription to our input port was removed.
    Unsubscribed,
    /// Its port exited.
    PortExit,
    /// Its client exited.
    ClientExit,
}

impl How {
    /// The loss's cause, as the JACK backend names it: a source port that
    /// no longer exists is its client gone.
    fn cause(self) -> LossCause {
        match self {
            How::Unsubscribed => LossCause::PortDisconnected,
            How::PortExit | How::ClientExit => LossCause::ClientGone,
        }
    }

    fn bits(self) -> u32 {
        match self {
            How::Unsubscribed => 1,
            How::PortExit => 2,
            How::ClientExit => 3,
        }
    }

    fn from_bits(b: u32) -> Option<Self> {
        match b {
            1 => Some(How::Unsubscribed),
            2 => Some(How::PortExit),
            3 => Some(How::ClientExit),
            _ => None,
        }
    }

    fn words(self) -> &'static str {
        match self {
            How::Unsubscribed => "disconnected",
            How::PortExit => "its port went away",
            How::ClientExit => "its client went away",
        }
    }
}

/// A sequencer announcement about ports, clients and subscriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announcement {
    /// `PORT_SUBSCRIBED`: `sender` now feeds `dest`.
    Subscribed(Connect),
    /// `PORT_UNSUBSCRIBED`: `sender` no longer feeds `dest`.
    Unsubscribed(Connect),
    /// `PORT_EXIT`: the port is gone.
    PortExit(Addr),
    /// `CLIENT_EXIT`: the client (and all its ports) is gone.
    ClientExit(i32),
}

impl Announcement {
    /// The announcement an event is, `None` for any other event (MIDI).
    /// Reads the event in place (no allocation).
    fn of(ev: &Event) -> Option<Self> {
        match ev.get_type() {
            EventType::PortSubscribed => ev.get_data::<Connect>().map(Announcement::Subscribed),
            EventType::PortUnsubscribed => ev.get_data::<Connect>().map(Announcement::Unsubscribed),
            EventType::PortExit => ev.get_data::<Addr>().map(Announcement::PortExit),
            EventType::ClientExit => ev
                .get_data::<Addr>()
                .map(|a| Announcement::ClientExit(a.client)),
            _ => None,
        }
    }
}

/// What an announcement did to the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The last source went (`Addr`): the input is lost.
    Lost(How, Addr),
    /// The source whose disconnection lost the input turned out gone.
    Refined(How),
    /// A source feeds the input again.
    Restored,
}

/// The ports feeding our input port, in a fixed array (the I/O thread's
/// loop allocates nothing), and the decision on each announcement.
#[derive(Debug, Clone)]
struct Sources {
    /// Our input port.
    ours: Addr,
    list: [Addr; MAX_SOURCES],
    len: usize,
    /// The source whose going left the input without any, and how, while
    /// the input is without a source.
    lost: Option<(Addr, How)>,
}

impl Sources {
    fn new(ours: Addr) -> Self {
        Sources {
            ours,
            list: [Addr::default(); MAX_SOURCES],
            len: 0,
            lost: None,
        }
    }

    fn contains(&self, a: Addr) -> bool {
        self.list[..self.len].contains(&a)
    }

    /// Adds a source (once; not beyond [`MAX_SOURCES`]); true if it was new.
    fn add(&mut self, a: Addr) -> bool {
        if self.contains(a) || self.len == MAX_SOURCES {
            return false;
        }
        self.list[self.len] = a;
        self.len += 1;
        true
    }

    /// Removes every source `gone` says; the last one removed, if any.
    fn remove(&mut self, gone: impl Fn(Addr) -> bool) -> Option<Addr> {
        let mut removed = None;
        let mut i = 0;
        while i < self.len {
            if gone(self.list[i]) {
                removed = Some(self.list[i]);
                self.len -= 1;
                self.list[i] = self.list[self.len];
            } else {
                i += 1;
            }
        }
        removed
    }

    /// The decision: what `a` does to the input. A source's going is a loss
    /// only when it was the last one (as on JACK); the System client's
    /// ports (the announcements themselves) are never sources; anything
    /// about other ports and clients is `None`. Pure: no I/O, no
    /// allocation.
    fn note(&mut self, a: Announcement) -> Option<Change> {
        let had = self.len > 0;
        let (how, removed) = match a {
            Announcement::Subscribed(c) => {
                if c.dest != self.ours || c.sender.client == 0 || !self.add(c.sender) {
                    return None;
                }
                return self.lost.take().map(|_| Change::Restored);
            }
            Announcement::Unsubscribed(c) => {
                if c.dest != self.ours {
                    return None;
                }
                (How::Unsubscribed, self.remove(|s| s == c.sender))
            }
            Announcement::PortExit(p) => (How::PortExit, self.remove(|s| s == p)),
            Announcement::ClientExit(cl) => (How::ClientExit, self.remove(|s| s.client == cl)),
        };
        match removed {
            Some(from) if had && self.len == 0 => {
                self.lost = Some((from, how));
                Some(Change::Lost(how, from))
            }
            Some(_) => None,
            None => {
                // The port or client of the source already gone: its exit
                // (its client's, after its port's) is the better account.
                let (from, was) = self.lost?;
                let its = match a {
                    Announcement::PortExit(p) => p == from,
                    Announcement::ClientExit(cl) => cl == from.client,
                    _ => false,
                };
                if !its || how.bits() <= was.bits() {
                    return None;
                }
                self.lost = Some((from, how));
                Some(Change::Refined(how))
            }
        }
    }
}

/// The source and how it went, packed for [`Shared::lost_from`].
fn pack(how: How, from: Addr) -> u32 {
    (how.bits() << 16) | ((from.client as u32 & 0xff) << 8) | (from.port as u32 & 0xff)
}

fn unpack(v: u32) -> Option<(How, Addr)> {
    let how = How::from_bits(v >> 16)?;
    Some((
        how,
        Addr {
            client: ((v >> 8) & 0xff) as i32,
            port: (v & 0xff) as i32,
        },
    ))
}

#[derive(Debug, Default)]
struct Shared {
    link: EngineLink,
    stop: AtomicBool,
    errno: AtomicI32,
    /// The source whose going lost the input ([`pack`]), 0 before any.
    lost_from: AtomicU32,
}

/// The engine side of the ALSA sequencer backend.
#[derive(Debug)]
pub struct AlsaBackend {
    ends: EngineEnds,
    shared: Arc<Shared>,
    wake_fd: i32,
    info: AlsaInfo,
    /// The sources subscribed at open, with their names.
    source_names: Vec<(Addr, String)>,
    /// Our input port's name (`client:in`).
    input_name: String,
    thread: Option<JoinHandle<()>>,
}

struct Thread {
    input_tx: Producer<InputEvent>,
    output_rx: Consumer<OutputEvent>,
    sent_tx: Producer<SentEvent>,
    shared: Arc<Shared>,
    wake_fd: i32,
}

/// What [`setup`] made: the I/O thread's sequencer and sources, and what the
/// engine side keeps.
struct Ready {
    seq: Seq,
    info: AlsaInfo,
    guard: Option<firmtime_rt::dma::DmaLatencyGuard>,
    sources: Sources,
    /// The sources subscribed at setup, with their names (for the loss's words).
    names: Vec<(Addr, String)>,
}

/// Sets the I/O thread up: RT, client, ports, queue, subscriptions (the
/// System:Announce port's too), base time.
fn setup(opts: &AlsaOptions) -> Result<Ready, Error> {
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
    let ours = Addr {
        client,
        port: input_port,
    };
    // Announcements first, so that no port or client exit after a source
    // was subscribed is missed.
    subscribe(Addr::system_announce(), ours, false)?;
    let mut sources = Sources::new(ours);
    let mut names = Vec::new();
    for spec in &opts.connect_inputs {
        let src = resolve(&seq, spec)?;
        subscribe(src, ours, true)?;
        sources.add(src);
        let cname = seq
            .get_any_client_info(src.client)
            .ok()
            .and_then(|c| c.get_name().ok().map(str::to_string));
        let pname = seq
            .get_any_port_info(src)
            .ok()
            .and_then(|p| p.get_name().ok().map(str::to_string));
        let name = match (cname, pname) {
            (Some(c), Some(p)) => format!("{c}:{p}"),
            _ => spec.clone(),
        };
        names.push((src, name));
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
    Ok(Ready {
        seq,
        info,
        guard: rt.guard,
        sources,
        names,
    })
}

impl Thread {
    fn run(mut self, seq: Seq, info: &AlsaInfo, mut sources: Sources) {
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
                if let Some(a) = Announcement::of(&ev) {
                    if let Some(change) = sources.note(a) {
                        self.record(change);
                        delivered = true;
                    }
                    continue;
                }
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

    /// Records what an announcement did to the input in the loss cell
    /// (atomics: allocation-free).
    fn record(&self, change: Change) {
        let loss = &self.shared.link.loss;
        match change {
            Change::Lost(how, from) => {
                self.shared
                    .lost_from
                    .store(pack(how, from), Ordering::Release);
                loss.lose(how.cause(), monotonic_ns());
            }
            Change::Refined(how) => {
                let v = self.shared.lost_from.load(Ordering::Acquire);
                if let Some((_, from)) = unpack(v) {
                    self.shared
                        .lost_from
                        .store(pack(how, from), Ordering::Release);
                }
                loss.refine(how.cause());
            }
            Change::Restored => loss.restored(),
        }
    }

    fn fail(&self, errno: i32) {
        self.shared.errno.store(errno, Ordering::Relaxed);
        // The device's error is the loss now, not a source's going.
        self.shared.lost_from.store(0, Ordering::Release);
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
                Ok(Ready {
                    seq,
                    info,
                    guard: _guard,
                    sources,
                    names,
                }) => {
                    let input_name = format!("{}:in", options.client_name);
                    let _ = tx.send(Ok((info.clone(), names, input_name)));
                    thread.run(seq, &info, sources);
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
            Ok(Ok((info, source_names, input_name))) => Ok(AlsaBackend {
                ends: EngineEnds {
                    input_rx,
                    output_tx,
                    sent_rx,
                },
                shared,
                wake_fd,
                info,
                source_names,
                input_name,
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

    fn input_loss(&self) -> Option<InputLoss> {
        self.shared.link.loss.get()
    }

    fn describe_input_loss(&self) -> Option<String> {
        self.shared.link.loss.get()?;
        let (how, from) = unpack(self.shared.lost_from.load(Ordering::Acquire))?;
        let source = match self.source_names.iter().find(|(a, _)| *a == from) {
            Some((_, name)) => format!("{name} ({}:{})", from.client, from.port),
            None => format!("ALSA port {}:{}", from.client, from.port),
        };
        Some(format!(
            "{source} no longer feeds {} ({}:{}) ({})",
            self.input_name,
            self.info.client,
            self.info.input_port,
            how.words()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: Addr = Addr {
        client: 128,
        port: 0,
    };
    const OUR_OUT: Addr = Addr {
        client: 128,
        port: 1,
    };
    const KEYS: Addr = Addr {
        client: 20,
        port: 0,
    };
    const KEYS_2: Addr = Addr {
        client: 20,
        port: 1,
    };
    const OTHER: Addr = Addr {
        client: 24,
        port: 0,
    };

    fn connect(sender: Addr, dest: Addr) -> Connect {
        Connect { sender, dest }
    }

    /// Our input fed by `from`, as after `open` with `connect_inputs`.
    fn fed_by(from: &[Addr]) -> Sources {
        let mut s = Sources::new(OURS);
        for &a in from {
            assert!(s.add(a));
        }
        s
    }

    #[test]
    fn the_only_source_unsubscribed_is_port_disconnected() {
        let mut s = fed_by(&[KEYS]);
        let c = s.note(Announcement::Unsubscribed(connect(KEYS, OURS)));
        assert_eq!(c, Some(Change::Lost(How::Unsubscribed, KEYS)));
        assert_eq!(How::Unsubscribed.cause(), LossCause::PortDisconnected);
        // The same removal told twice (to our port and to the announce
        // port's subscribers) is one loss.
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OURS))),
            None
        );
    }

    #[test]
    fn the_only_source_port_gone_is_client_gone() {
        let mut s = fed_by(&[KEYS]);
        let c = s.note(Announcement::PortExit(KEYS));
        assert_eq!(c, Some(Change::Lost(How::PortExit, KEYS)));
        assert_eq!(How::PortExit.cause(), LossCause::ClientGone);
        // Its subscription's removal, told after the port's exit: nothing more.
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OURS))),
            None
        );
        // Its client's exit: a better account, the cause unchanged.
        assert_eq!(
            s.note(Announcement::ClientExit(KEYS.client)),
            Some(Change::Refined(How::ClientExit))
        );
    }

    #[test]
    fn the_only_source_client_gone_is_client_gone() {
        let mut s = fed_by(&[KEYS]);
        let c = s.note(Announcement::ClientExit(KEYS.client));
        assert_eq!(c, Some(Change::Lost(How::ClientExit, KEYS)));
        assert_eq!(How::ClientExit.cause(), LossCause::ClientGone);
        assert_eq!(s.note(Announcement::PortExit(KEYS)), None);
    }

    #[test]
    fn a_disconnection_followed_by_the_sources_exit_is_refined_to_client_gone() {
        let mut s = fed_by(&[KEYS]);
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OURS))),
            Some(Change::Lost(How::Unsubscribed, KEYS))
        );
        assert_eq!(
            s.note(Announcement::PortExit(KEYS)),
            Some(Change::Refined(How::PortExit))
        );
        assert_eq!(
            s.note(Announcement::ClientExit(KEYS.client)),
            Some(Change::Refined(How::ClientExit))
        );
        // Nothing after the client's exit changes the account.
        assert_eq!(s.note(Announcement::PortExit(KEYS)), None);
        assert_eq!(s.note(Announcement::ClientExit(KEYS.client)), None);
    }

    #[test]
    fn a_disconnected_source_that_stays_is_not_refined_by_others_leaving() {
        let mut s = fed_by(&[KEYS]);
        s.note(Announcement::Unsubscribed(connect(KEYS, OURS)));
        assert_eq!(s.note(Announcement::PortExit(KEYS_2)), None);
        assert_eq!(s.note(Announcement::PortExit(OTHER)), None);
        assert_eq!(s.note(Announcement::ClientExit(OTHER.client)), None);
    }

    #[test]
    fn announcements_about_others_are_ignored() {
        let mut s = fed_by(&[KEYS]);
        // Subscriptions between other ports, to our output, or from a port
        // that does not feed us.
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OTHER))),
            None
        );
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(OUR_OUT, OTHER))),
            None
        );
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(OTHER, OURS))),
            None
        );
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(
                Addr::system_announce(),
                OURS
            ))),
            None
        );
        // Other ports and clients going, another port of the source's client.
        assert_eq!(s.note(Announcement::PortExit(OTHER)), None);
        assert_eq!(s.note(Announcement::PortExit(KEYS_2)), None);
        assert_eq!(s.note(Announcement::ClientExit(OTHER.client)), None);
        // The source still feeds us: its going now is the loss.
        assert_eq!(
            s.note(Announcement::PortExit(KEYS)),
            Some(Change::Lost(How::PortExit, KEYS))
        );
    }

    #[test]
    fn an_input_that_never_had_a_source_loses_nothing() {
        let mut s = fed_by(&[]);
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OURS))),
            None
        );
        assert_eq!(s.note(Announcement::PortExit(KEYS)), None);
        assert_eq!(s.note(Announcement::ClientExit(KEYS.client)), None);
    }

    #[test]
    fn only_the_last_source_going_is_a_loss() {
        let mut s = fed_by(&[KEYS, OTHER]);
        assert_eq!(s.note(Announcement::ClientExit(OTHER.client)), None);
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(KEYS, OURS))),
            Some(Change::Lost(How::Unsubscribed, KEYS))
        );
        // Two ports of one client: its exit removes both at once.
        let mut s = fed_by(&[KEYS, KEYS_2]);
        let c = s.note(Announcement::ClientExit(KEYS.client));
        assert!(
            matches!(c, Some(Change::Lost(How::ClientExit, a)) if a.client == KEYS.client),
            "{c:?}"
        );
    }

    #[test]
    fn a_port_subscribed_again_restores_the_input_and_can_be_lost_again() {
        let mut s = fed_by(&[KEYS]);
        s.note(Announcement::PortExit(KEYS));
        // The System client's ports are never sources.
        assert_eq!(
            s.note(Announcement::Subscribed(connect(
                Addr::system_announce(),
                OURS
            ))),
            None
        );
        // A subscription to another port is no source of ours.
        assert_eq!(
            s.note(Announcement::Subscribed(connect(OTHER, OUR_OUT))),
            None
        );
        assert_eq!(
            s.note(Announcement::Subscribed(connect(OTHER, OURS))),
            Some(Change::Restored)
        );
        // Told twice: restored once.
        assert_eq!(s.note(Announcement::Subscribed(connect(OTHER, OURS))), None);
        // The old source's client leaving later changes nothing.
        assert_eq!(s.note(Announcement::ClientExit(KEYS.client)), None);
        assert_eq!(
            s.note(Announcement::Unsubscribed(connect(OTHER, OURS))),
            Some(Change::Lost(How::Unsubscribed, OTHER))
        );
    }

    #[test]
    fn sources_beyond_the_array_are_not_tracked() {
        let mut s = Sources::new(OURS);
        for p in 0..MAX_SOURCES {
            let a = Addr {
                client: 30,
                port: p as i32,
            };
            assert!(s.add(a));
        }
        let extra = Addr {
            client: 31,
            port: 0,
        };
        assert!(!s.add(extra));
        assert!(!s.contains(extra));
        assert_eq!(s.len, MAX_SOURCES);
    }

    #[test]
    fn the_lost_source_survives_packing() {
        for how in [How::Unsubscribed, How::PortExit, How::ClientExit] {
            for a in [
                KEYS,
                OTHER,
                Addr {
                    client: 255,
                    port: 255,
                },
            ] {
                assert_eq!(unpack(pack(how, a)), Some((how, a)));
            }
        }
        assert_eq!(unpack(0), None);
    }
}
