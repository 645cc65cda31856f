//! `firmtime_proxy`: a LADSPA plugin that presents plugins running on
//! remote `firmtime net worker`s to any LADSPA host (Lago 2004 §6).
//!
//! At the first `ladspa_descriptor` call it reads its configuration (TOML,
//! `FIRMTIME_PROXY_CONFIG` or `~/.config/firmtime/proxy.toml`, see
//! [`config`]) and asks each worker to describe its plugin. It then
//! presents, per `[[remote]]` entry, a descriptor with the remote plugin's
//! ports and hints, label `remote_<label>`, name `remote: <name>`, unique
//! ID `0xF00000 + (remote ID mod 0x100000)` ([`config::proxy_id`]), and one
//! more port: `latency`, an output control reporting `window × min(n₁,
//! max_block)` samples, `n₁` being the frames of the instance's first run:
//! constant for the instance, whatever the later runs' sizes (module `stream`;
//! default 0, for hosts such as sox that want a value for every control
//! port). The output is the remote plugin's, exactly that late.
//!
//! The entries are described all at once, each on its own thread, under
//! one deadline (the largest `connect_timeout_ms`, plus 200 ms): a host's
//! plugin scan with frozen workers lasts one timeout, not one per entry,
//! and the line for an entry that did not answer names the worker, the
//! timeout and its value.
//!
//! If a worker cannot describe its plugin at load (away, wrong key, no such
//! plugin, not allowed), the proxy says why in one line on stderr and
//! presents the description cached from the last successful load; without
//! one, a placeholder (`Input`, `Output`, `latency`) that cannot process
//! audio, named `remote: <label> (unavailable)`. A host's list never
//! silently loses an entry. The config, key and cache files are read only
//! when they are small regular files ([`config::read_small_file`]).
//!
//! Each instance sets up its own session (a background thread connects and
//! reconnects). run(n) splits `n` into exchanges of at most `min(n₁,
//! max_block)` frames; each sends the audio and control inputs, and the
//! result of the exchange `window` exchanges earlier goes to its own place
//! in the output, `latency` frames after its input. What happens when a
//! result cannot be had depends on the entry's [`config::Mode`]:
//!
//! - real time (a live host): the late policy ([`config::Late`]: dry —
//!   the input delayed by the latency —, zeros, repeat) fills the frames,
//!   they are counted, and the count
//!   goes to stderr every 5 s while it grows and at cleanup;
//! - offline (a file render): the host process ends with exit status
//!   [`config::RENDER_FAILED_EXIT`] after one line on stderr — LADSPA gives
//!   run() no error to return, and ecasound ignores a refused instantiate;
//! - auto (default): real time when the thread calling run() has a
//!   real-time scheduling policy, else offline; the first run on a
//!   real-time thread settles it (Ardour runs a plugin once on a plain
//!   thread before its audio thread does).
//!
//! # Real-time contract
//! instantiate allocates everything. In real time run() does not allocate,
//! lock or print; it waits for a result no longer than the deadline
//! (`deadline_ms`, default half the block) nor the block's own duration,
//! not at all while the worker is known to be away, and not after a late
//! result until the worker answers again. Offline, run() may wait (up to
//! `offline_wait_ms` / `deadline_ms`) and, to fail the render, prints and
//! ends the process. The C entry points come from
//! [`firmtime_ladspa::export_plugin!`]: every one checks its pointers and
//! runs inside `catch_unwind`, so a panic never crosses into the C host.
//!
//! The library is an LV2 plugin as well ([`firmtime_ladspa::export_lv2!`]):
//! `lv2_descriptor` gives `urn:firmtime:proxy:<label>` per descriptor, with
//! the same ports and instances; the bundle's Turtle comes from `firmtime
//! ladspa lv2-bundle` (docs/LV2.md).

#![deny(missing_docs)]

pub mod config;
mod stream;

use config::{Late, Mode, Parsed, RemoteEntry};
use firmtime_ladspa::export::{entry_points, ExportedPlugin};
use firmtime_ladspa::ffi::*;
use firmtime_net::remote::{describe, PluginBlocks, PluginDescription, PluginSetup, RemotePort};
use firmtime_net::{
    connect, Deadline, DropReason, Key, LatePolicy, Link, Master, Outcome, SessionConfig,
};
use std::ffi::CString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::raw::{c_char, c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stream::Stream;

/// One line on stderr: the only channel a plugin has to its user.
fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "firmtime_proxy: {msg}");
}

/// One presented plugin. Leaked at load: descriptors live as long as the process.
struct Entry {
    descriptor: LADSPA_Descriptor,
    /// The label presented (`remote_lpf`), for messages.
    label: String,
    cfg: Option<RemoteEntry>,
    /// The remote plugin's description (`None` for a placeholder).
    remote: Option<PluginDescription>,
    /// Ports as presented, without the latency port.
    ports: Vec<RemotePort>,
    _strings: Vec<CString>,
    _names: Vec<*const c_char>,
    _port_descriptors: Vec<c_int>,
    _hints: Vec<LADSPA_PortRangeHint>,
}

struct Entries(Vec<&'static Entry>);
// SAFETY: entries are immutable after load; their raw pointers point into
// the entries' own leaked, never-mutated storage.
unsafe impl Sync for Entries {}
// SAFETY: as above.
unsafe impl Send for Entries {}

static ENTRIES: OnceLock<Entries> = OnceLock::new();

fn placeholder_ports() -> Vec<RemotePort> {
    let p = |name: &str, input| RemotePort {
        name: name.into(),
        input,
        audio: true,
        hint: 0,
        lower: 0.0,
        upper: 0.0,
    };
    vec![p("Input", true), p("Output", false)]
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn build(
    cfg: Option<RemoteEntry>,
    remote: Option<PluginDescription>,
    label: String,
    name: String,
    id: u64,
) -> &'static Entry {
    let ports = remote
        .as_ref()
        .map_or_else(placeholder_ports, |d| d.ports.clone());
    let mut strings = vec![
        cstring(&label),
        cstring(&name),
        cstring(&format!(
            "firmtime proxy for {}",
            remote.as_ref().map_or("", |d| d.maker.as_str())
        )),
        cstring(remote.as_ref().map_or("None", |d| d.copyright.as_str())),
    ];
    for p in &ports {
        strings.push(cstring(&p.name));
    }
    strings.push(cstring("latency"));
    let mut port_descriptors: Vec<c_int> = ports
        .iter()
        .map(|p| {
            (if p.input { PORT_INPUT } else { PORT_OUTPUT })
                | (if p.audio { PORT_AUDIO } else { PORT_CONTROL })
        })
        .collect();
    port_descriptors.push(PORT_OUTPUT | PORT_CONTROL);
    let mut hints: Vec<LADSPA_PortRangeHint> = ports
        .iter()
        .map(|p| LADSPA_PortRangeHint {
            HintDescriptor: p.hint,
            LowerBound: p.lower,
            UpperBound: p.upper,
        })
        .collect();
    // A default, although an output needs none: sox's `ladspa` effect wants
    // a value for every control port without one, outputs included.
    hints.push(LADSPA_PortRangeHint {
        HintDescriptor: HINT_BOUNDED_BELOW | HINT_INTEGER | HINT_DEFAULT_0,
        LowerBound: 0.0,
        UpperBound: 0.0,
    });
    // CString's heap buffer does not move when the Vec holding it does.
    let names: Vec<*const c_char> = strings[4..].iter().map(|s| s.as_ptr()).collect();
    let entry = Box::leak(Box::new(Entry {
        descriptor: LADSPA_Descriptor {
            UniqueID: id as c_ulong,
            Label: strings[0].as_ptr(),
            Properties: 0,
            Name: strings[1].as_ptr(),
            Maker: strings[2].as_ptr(),
            Copyright: strings[3].as_ptr(),
            PortCount: port_descriptors.len() as c_ulong,
            PortDescriptors: port_descriptors.as_ptr(),
            PortNames: names.as_ptr(),
            PortRangeHints: hints.as_ptr(),
            ImplementationData: std::ptr::null_mut(),
            ..entry_points::<Proxy>()
        },
        label,
        cfg,
        remote,
        ports,
        _strings: strings,
        _names: names,
        _port_descriptors: port_descriptors,
        _hints: hints,
    }));
    entry.descriptor.ImplementationData = entry as *mut Entry as *mut c_void;
    entry
}

fn resolve(worker: &str) -> Result<SocketAddr, String> {
    worker
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("worker = {worker:?} is not a host:port address"))
}

fn key_of(e: &RemoteEntry) -> Result<Option<Key>, String> {
    let Some(p) = &e.key_file else {
        return Ok(None);
    };
    let (key, warning) = config::read_key(p)?;
    if let Some(w) = warning {
        say(&format!("warning: {w}"));
    }
    Ok(Some(key))
}

/// Why a description did not come in time: the worker, the timeout and its value.
fn timed_out(e: &RemoteEntry) -> String {
    timed_out_at(e, &e.worker)
}

fn timed_out_at(e: &RemoteEntry, worker: &str) -> String {
    format!(
        "no description from the worker {} within connect_timeout_ms = {} ms (it did not \
         accept the connection or did not answer: frozen, overloaded or unreachable?)",
        worker,
        e.connect_timeout().as_millis()
    )
}

/// Asks the worker for the description (its standby when the worker
/// cannot answer); the reason in one line if neither can.
fn fetch(e: &RemoteEntry) -> Result<PluginDescription, String> {
    match fetch_from(e, &e.worker) {
        Ok(d) => Ok(d),
        Err(why) => match &e.standby {
            Some(sb) => fetch_from(e, sb).map_err(|w| format!("{why}; the standby {sb}: {w}")),
            None => Err(why),
        },
    }
}

fn fetch_from(e: &RemoteEntry, worker: &str) -> Result<PluginDescription, String> {
    let addr = resolve(worker)?;
    let key = key_of(e)?;
    describe(addr, key, &e.label, e.connect_timeout()).map_err(|err| {
        // A read or connect that timed out says "Resource temporarily
        // unavailable (os error 11)": say which timeout instead.
        if matches!(err.errno(), Some(libc::EAGAIN | libc::ETIMEDOUT)) {
            timed_out_at(e, worker)
        } else {
            err.to_string()
        }
    })
}

/// Extra time, beyond an entry's `connect_timeout_ms`, that the scan waits
/// for its description (thread start-up; a describe that timed out itself).
const DESCRIBE_GRACE: Duration = Duration::from_millis(200);

/// Describes every entry at once, each on its own thread, and waits no
/// longer than the largest `connect_timeout_ms` (plus [`DESCRIBE_GRACE`])
/// for all of them: a host's plugin scan is not N × the timeout with N
/// frozen workers. An entry without an answer by its deadline gets
/// [`timed_out`]; its thread ends on its own (the connection's timeouts)
/// and its late answer is dropped.
fn describe_all(entries: &[&RemoteEntry]) -> Vec<Result<PluginDescription, String>> {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out: Vec<Option<Result<PluginDescription, String>>> = vec![None; entries.len()];
    let mut threads: Vec<Option<JoinHandle<()>>> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let (tx, e2) = (tx.clone(), (*e).clone());
        let spawned = std::thread::Builder::new()
            .name("ft-proxy-describe".into())
            .spawn(move || {
                let _ = tx.send((i, fetch(&e2)));
            });
        match spawned {
            Ok(t) => threads.push(Some(t)),
            Err(err) => {
                threads.push(None);
                out[i] = Some(Err(format!(
                    "cannot start a thread to ask the worker {}: {err}",
                    e.worker
                )));
            }
        }
    }
    drop(tx);
    loop {
        let due = entries
            .iter()
            .zip(&out)
            .filter(|(_, r)| r.is_none())
            .map(|(e, _)| start + e.connect_timeout() + DESCRIBE_GRACE)
            .max();
        let Some(due) = due else { break };
        let left = due.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, r)) => {
                // An answer after the entry's own deadline counts as none.
                let late = Instant::now() > start + entries[i].connect_timeout() + DESCRIBE_GRACE;
                out[i] = Some(if late { Err(timed_out(entries[i])) } else { r });
            }
            Err(_) => break,
        }
    }
    // Threads that answered are done (or nearly): join them. Any other
    // runs on, in this library's code, after the scan returns: the library
    // must then stay mapped even if the host unloads it.
    let mut left_running = false;
    for (t, r) in threads.iter_mut().zip(&out) {
        match (t.take(), r) {
            (Some(t), Some(_)) => {
                let _ = t.join();
            }
            (Some(_), None) => left_running = true,
            (None, _) => {}
        }
    }
    if left_running {
        pin_library();
    }
    out.into_iter()
        .zip(entries)
        .map(|(r, e)| r.unwrap_or_else(|| Err(timed_out(e))))
        .collect()
}

/// Keeps this library mapped for the rest of the process (a reference that
/// is never released, and `RTLD_NODELETE`), so that a host's `dlclose`
/// cannot unmap the code a describe thread still runs. (With glibc and
/// today's std the library stayed mapped after `dlclose` anyway — checked
/// in /proc/self/maps with a thread left behind —; this does not rely on it.)
fn pin_library() {
    // SAFETY: Dl_info is plain data; dladdr fills it for an address inside
    // this library, and dli_fname then points to a NUL-terminated path
    // owned by the loader. dlopen of that path only adds a reference.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = pin_library as *const c_void;
        if libc::dladdr(here, &mut info) != 0 && !info.dli_fname.is_null() {
            let _ = libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            );
        }
    }
}

fn load() -> Entries {
    let Some((path, named)) = config::config_path() else {
        return Entries(Vec::new());
    };
    if !named && std::fs::symlink_metadata(&path).is_err() {
        return Entries(Vec::new());
    }
    let text =
        match config::read_small_file(&path, config::MAX_CONFIG_BYTES, "config").and_then(|b| {
            String::from_utf8(b).map_err(|_| format!("config {}: not UTF-8 text", path.display()))
        }) {
            Ok(t) => t,
            Err(e) => {
                say(&format!("cannot read {e}; no remote plugins are presented"));
                return Entries(Vec::new());
            }
        };
    let parsed = match config::parse(&text) {
        Ok(p) => p,
        Err(e) => {
            say(&format!(
                "config {}: {e}; no remote plugins are presented",
                path.display()
            ));
            return Entries(Vec::new());
        }
    };
    let good: Vec<&RemoteEntry> = parsed
        .iter()
        .filter_map(|p| match p {
            Parsed::Entry(e) => Some(e),
            Parsed::Bad { .. } => None,
        })
        .collect();
    let mut described = describe_all(&good).into_iter();
    let mut labels: Vec<String> = Vec::new();
    let mut ids: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for p in parsed {
        let (cfg, remote, want_label, name, id) = match p {
            Parsed::Bad {
                number,
                label,
                message,
            } => {
                // A label too long to use (or to repeat in full) is cut.
                let l =
                    label.map_or_else(|| format!("entry{number}"), |l| firmtime_ladspa::shown(&l));
                say(&format!(
                    "config {} entry {number} ({l}): {message}; presenting remote_{l} as a \
                     pass-through placeholder",
                    path.display()
                ));
                let name = format!("remote: {l} (unavailable: bad config)");
                let id = config::placeholder_id(&l);
                (None, None, l, name, id)
            }
            Parsed::Entry(e) => match described.next().expect("one result per entry") {
                Ok(d) => {
                    config::write_cache(&e, &d);
                    let (l, n, i) = (
                        d.label.clone(),
                        format!("remote: {}", d.name),
                        config::proxy_id(d.unique_id),
                    );
                    (Some(e), Some(d), l, n, i)
                }
                Err(why) => match config::read_cache(&e) {
                    Some(d) => {
                        say(&format!(
                            "{} on {}: {why}; presenting its cached description until the worker \
                             serves it",
                            e.label, e.worker
                        ));
                        let (l, n, i) = (
                            d.label.clone(),
                            format!("remote: {}", d.name),
                            config::proxy_id(d.unique_id),
                        );
                        (Some(e), Some(d), l, n, i)
                    }
                    None => {
                        say(&format!(
                            "{} on {}: {why}; no cached description, presenting a placeholder \
                             (1 in, 1 out) that cannot process audio",
                            e.label, e.worker
                        ));
                        let l = e.label.clone();
                        let n = format!("remote: {l} (unavailable)");
                        let i = config::placeholder_id(&l);
                        // The entry stays: its mode and late policy apply to the placeholder.
                        (Some(e), None, l, n, i)
                    }
                },
            },
        };
        let label = config::proxy_label(&want_label, &labels);
        let id = config::unique_id(id, &ids);
        labels.push(label.clone());
        ids.push(id);
        out.push(build(cfg, remote, label, name, id));
    }
    Entries(out)
}

/// A live session, handed from the connecting thread to run().
struct Remote {
    master: Master,
    link: Link,
}

/// What run() and the instance's background thread share.
struct Handoff {
    ready: AtomicPtr<Remote>,
    stop: AtomicBool,
    /// Frames run() was asked for.
    frames: AtomicU64,
    /// Of those, frames the worker did not process (the late policy filled them).
    unprocessed: AtomicU64,
    /// The mode run() settled on: 0 not yet, 1 realtime, 2 offline.
    mode: AtomicU8,
    /// With a hot standby, the master's `takeovers` and `from_standby`
    /// (exchanges delivered with the standby's result), stored by run().
    takeovers: AtomicU64,
    from_standby: AtomicU64,
}

impl Drop for Handoff {
    fn drop(&mut self) {
        let p = self.ready.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: a non-null pointer here came from Box::into_raw and was not taken.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

const MODE_REALTIME: u8 = 1;
const MODE_OFFLINE: u8 = 2;
/// The background thread repeats the count of unprocessed frames at most this often.
const REPORT_EVERY: Duration = Duration::from_secs(5);

struct Proxy {
    entry: &'static Entry,
    rate: f64,
    /// Host buffers, one per presented port, then latency.
    ports: Vec<*mut f32>,
    ids: PluginBlocks,
    /// Index of the latency port.
    latency_port: usize,
    defaults: Vec<f32>,
    /// The delay line that keeps the latency constant (see [`stream`]).
    stream: Stream,
    max_frames: usize,
    deadline_ns: Option<u64>,
    /// `Auto` until a run() on a real-time thread settles it ([`mode_of_run`]).
    mode: Mode,
    late: Late,
    gate: WaitGate,
    /// Offline: the link's loss count (and its standby's) when the render
    /// began; a loss after that fails the render (the remote plugin's state
    /// went with it) unless the standby was never lost.
    losses_at_start: Option<(u64, Option<u64>)>,
    frames: u64,
    unprocessed: u64,
    remote: Option<Box<Remote>>,
    handoff: Arc<Handoff>,
    thread: Option<JoinHandle<()>>,
}

fn default_of(p: &RemotePort, rate: f32) -> f32 {
    firmtime_ladspa::Hints::from_raw(LADSPA_PortRangeHint {
        HintDescriptor: p.hint,
        LowerBound: p.lower,
        UpperBound: p.upper,
    })
    .default_value(rate)
    .unwrap_or(0.0)
}

/// Real time: whether an exchange may wait for its result. After a late
/// result it does not, until the worker answers again (a result in time or
/// late), so a frozen worker costs one wait, not one per run(). Pure: no I/O.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct WaitGate {
    /// A result was late and the worker has not answered since.
    probing: bool,
    /// [`answers`] when probing began.
    answers_at_miss: u64,
}

impl WaitGate {
    /// The wait for the next exchange: `full`, or 0 while probing. **RT-safe.**
    fn wait(&self, full: u64) -> u64 {
        if self.probing {
            0
        } else {
            full
        }
    }

    /// Takes an exchange's outcome and the [`answers`] count after it. **RT-safe.**
    fn after(&mut self, outcome: Outcome, answers: u64) {
        match outcome {
            Outcome::Delivered => self.probing = false,
            Outcome::Late if !self.probing => {
                self.probing = true;
                self.answers_at_miss = answers;
            }
            // It answers, if late: the next exchange waits again.
            Outcome::Late => self.probing = answers == self.answers_at_miss,
            Outcome::Priming => {}
        }
    }
}

/// Packets of the worker's taken in so far, in time or not: when this
/// moves, the worker is answering. **RT-safe.**
fn answers(m: &Master) -> u64 {
    let s = m.stats();
    s.delivered + s.drops.get(DropReason::AfterDeadline) + s.drops.get(DropReason::Stale)
}

/// The mode of one run() of an instance in `mode`, and the mode it keeps
/// for the next: `Auto` settles on real time at the first run on a
/// real-time thread (`realtime_thread`, asked only in `Auto`); a run on
/// another thread before that is offline and settles nothing. Ardour runs
/// every new instance once on the thread that makes it (not real-time) to
/// read its latency: settled there, as it was, a live session on JACK
/// stayed offline for good — a lost worker blocked the audio thread for
/// `deadline_ms`, then ended Ardour with exit status 75. **RT-safe.**
fn mode_of_run(mode: Mode, realtime_thread: impl FnOnce() -> bool) -> (Mode, Mode) {
    match mode {
        Mode::Auto if realtime_thread() => (Mode::Realtime, Mode::Realtime),
        Mode::Auto => (Mode::Offline, Mode::Auto),
        m => (m, m),
    }
}

/// Whether the calling thread runs under a real-time policy. **RT-safe** (one syscall).
fn thread_is_realtime() -> bool {
    const SCHED_DEADLINE: i32 = 6;
    // SAFETY: sched_getscheduler(0) asks about the calling thread; no pointers.
    let p = unsafe { libc::sched_getscheduler(0) } & !libc::SCHED_RESET_ON_FORK;
    p == libc::SCHED_FIFO || p == libc::SCHED_RR || p == SCHED_DEADLINE
}

fn late_text(late: Late) -> &'static str {
    match late {
        Late::Dry => "they hold the dry input",
        Late::Zeros => "they hold silence",
        Late::Repeat => "they repeat the last result",
    }
}

fn count_text(unprocessed: u64, frames: u64) -> String {
    let pct = if frames == 0 {
        0.0
    } else {
        unprocessed as f64 * 100.0 / frames as f64
    };
    format!("{unprocessed} of {frames} frames ({pct:.1} %)")
}

/// The instance's background thread: sets the session up (retrying every
/// second) and hands it to run(); meanwhile and after, repeats on stderr
/// how many frames the worker did not process while the count grows.
fn connector(
    label: &'static str,
    cfg: RemoteEntry,
    desc: PluginDescription,
    rate: u32,
    handoff: Arc<Handoff>,
) -> impl FnOnce() {
    move || {
        let mut last: Option<String> = None;
        let mut handed = false;
        let mut next_try = Instant::now();
        let mut next_report = Instant::now() + REPORT_EVERY;
        let mut reported = 0u64;
        let mut takeovers = 0u64;
        while !handoff.stop.load(Ordering::Acquire) {
            if !handed && Instant::now() >= next_try {
                let r = (|| -> Result<Remote, String> {
                    let addr = resolve(&cfg.worker)?;
                    let standby = match &cfg.standby {
                        Some(s) => Some(resolve(s).map_err(|e| format!("standby: {e}"))?),
                        None => None,
                    };
                    let max = cfg.max_frames();
                    let period_ns = (f64::from(max) / f64::from(rate) * 1e9) as u64;
                    let mut sc = SessionConfig::new(addr, period_ns.max(1));
                    sc.standby = standby;
                    sc.key = key_of(&cfg)?;
                    sc.window = cfg.window;
                    sc.encrypt = cfg.encrypt;
                    sc.late_policy = Some(match cfg.late {
                        Late::Dry => LatePolicy::Dry,
                        Late::Zeros => LatePolicy::Zeros,
                        Late::Repeat => LatePolicy::RepeatLast,
                    });
                    sc.timeout = cfg.connect_timeout();
                    sc.plugin = Some(PluginSetup {
                        plugin: cfg.label.clone(),
                        sample_rate: rate,
                        max_frames: max,
                        ports: desc.ports.clone(),
                    });
                    let (blocks, _) = desc.blocks(max);
                    match (connect(sc.clone(), blocks), standby) {
                        (Ok((master, link)), _) => Ok(Remote { master, link }),
                        (Err(e), Some(sb)) if e.message().starts_with("the standby") => {
                            Err(format!(
                                "standby {sb} cannot serve: {e} (the standby must be reachable, \
                                 with the same key and plugin, when the session is set up)"
                            ))
                        }
                        (Err(e), Some(sb)) => {
                            // The worker is away: the standby serves alone.
                            sc.worker = sb;
                            sc.standby = None;
                            let (master, link) = connect(sc, desc.blocks(max).0).map_err(|e2| {
                                format!("{e}; the standby {sb} cannot serve either: {e2}")
                            })?;
                            say(&format!(
                                "{} on {}: {e}; its standby {sb} serves alone (no standby \
                                 behind it until the plugin is loaded again)",
                                cfg.label, cfg.worker
                            ));
                            Ok(Remote { master, link })
                        }
                        (Err(e), None) => Err(e.to_string()),
                    }
                })();
                match r {
                    Ok(remote) => {
                        if last.is_some() {
                            say(&format!(
                                "{} on {}: connected; processing remotely",
                                cfg.label, cfg.worker
                            ));
                        }
                        let p = Box::into_raw(Box::new(remote));
                        handoff.ready.store(p, Ordering::Release);
                        handed = true;
                    }
                    Err(why) => {
                        if last.as_deref() != Some(why.as_str()) {
                            say(&format!(
                                "{} on {}: {why}; the worker cannot process audio until this is \
                                 fixed (retrying every second)",
                                cfg.label, cfg.worker
                            ));
                            last = Some(why);
                        }
                        next_try = Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            let t = handoff.takeovers.load(Ordering::Relaxed);
            if t > takeovers {
                takeovers = t;
                say(&format!(
                    "{label}: the worker {} or its standby {} missed a deadline or went away: \
                     switched to the other ({t} takeover(s) so far, {} exchanges from the \
                     standby)",
                    cfg.worker,
                    cfg.standby.as_deref().unwrap_or("-"),
                    handoff.from_standby.load(Ordering::Relaxed)
                ));
            }
            if Instant::now() >= next_report {
                next_report = Instant::now() + REPORT_EVERY;
                let u = handoff.unprocessed.load(Ordering::Relaxed);
                if u > reported && handoff.mode.load(Ordering::Relaxed) == MODE_REALTIME {
                    say(&format!(
                        "{label}: {} not processed by the worker {} so far (late or away): {}",
                        count_text(u, handoff.frames.load(Ordering::Relaxed)),
                        cfg.worker,
                        late_text(cfg.late)
                    ));
                    reported = u;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Proxy {
    fn new(entry: &'static Entry, rate: u32) -> Self {
        let handoff = Arc::new(Handoff {
            ready: AtomicPtr::new(std::ptr::null_mut()),
            stop: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            unprocessed: AtomicU64::new(0),
            mode: AtomicU8::new(0),
            takeovers: AtomicU64::new(0),
            from_standby: AtomicU64::new(0),
        });
        let (ids, max_frames, window, deadline_ns) = match (&entry.cfg, &entry.remote) {
            (Some(c), Some(d)) => (
                d.blocks(c.max_frames()).1,
                c.max_frames() as usize,
                c.window,
                c.deadline_ms.map(|ms| (ms * 1e6) as u64),
            ),
            _ => (PluginBlocks::default(), 0, 0, None),
        };
        let late = entry.cfg.as_ref().map_or(Late::Dry, |c| c.late);
        let stream = Stream::new(
            ids.audio_in.len(),
            ids.audio_out.len(),
            window,
            max_frames,
            late,
        );
        let thread = match (&entry.cfg, &entry.remote) {
            (Some(c), Some(d)) => std::thread::Builder::new()
                .name("ft-proxy-connect".into())
                .spawn(connector(
                    &entry.label,
                    c.clone(),
                    d.clone(),
                    rate,
                    handoff.clone(),
                ))
                .ok(),
            _ => None,
        };
        let mode = entry.cfg.as_ref().map_or(Mode::Auto, |c| c.mode);
        // instantiate may block (ladspa.h): give the first connection its
        // timeout (an offline render: offline_wait_ms), so that offline
        // hosts process from the first frame.
        if let (Some(c), Some(_)) = (&entry.cfg, &thread) {
            let t = if mode == Mode::Offline {
                c.offline_wait()
            } else {
                c.connect_timeout() + Duration::from_millis(100)
            };
            let end = Instant::now() + t;
            while handoff.ready.load(Ordering::Acquire).is_null() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Self {
            entry,
            rate: f64::from(rate),
            ports: vec![std::ptr::null_mut(); entry.ports.len() + 1],
            latency_port: entry.ports.len(),
            defaults: entry
                .ports
                .iter()
                .map(|p| default_of(p, rate as f32))
                .collect(),
            ids,
            stream,
            max_frames,
            deadline_ns,
            mode,
            late,
            gate: WaitGate::default(),
            losses_at_start: None,
            frames: 0,
            unprocessed: 0,
            remote: None,
            handoff,
            thread,
        }
    }

    /// Input `k` to output `k` (zeros for outputs without an input), frames `off..off + n`.
    fn dry(&self, off: usize, n: usize) {
        let audio = |input| {
            self.entry
                .ports
                .iter()
                .enumerate()
                .filter(move |(_, p)| p.audio && p.input == input)
                .map(|(i, _)| self.ports[i])
        };
        let mut ins = audio(true);
        for out in audio(false) {
            if out.is_null() {
                continue;
            }
            match ins.next() {
                Some(inp) if !inp.is_null() && self.late == Late::Dry => {
                    // SAFETY: the host connected both to ≥ off + n samples; ptr::copy allows overlap.
                    unsafe { std::ptr::copy(inp.add(off), out.add(off), n) }
                }
                // SAFETY: as above, for the output alone.
                _ => unsafe { std::slice::from_raw_parts_mut(out.add(off), n).fill(0.0) },
            }
        }
    }

    /// Counts frames the worker did not process. **RT-safe.**
    fn missed(&mut self, n: u64) {
        self.unprocessed += n;
        self.handoff
            .unprocessed
            .store(self.unprocessed, Ordering::Relaxed);
    }

    /// Ends an offline render that cannot be the remote plugin's output:
    /// LADSPA gives run() no error to return, and some hosts ignore a
    /// refused instantiate (ecasound 2.9 then writes the input unprocessed
    /// and exits 0), so the process ends with a status a script sees.
    fn fail(&self, why: &str) -> ! {
        say(&format!(
            "{}: offline render failed: {why}; the output would not be the remote plugin's, so \
             this process ends now with exit status {} (mode = \"realtime\" in the proxy's \
             config passes audio through instead, counted)",
            self.entry.label,
            config::RENDER_FAILED_EXIT
        ));
        // SAFETY: _exit ends the process at once, without running the host's
        // atexit handlers from this (foreign) thread.
        unsafe { libc::_exit(config::RENDER_FAILED_EXIT) }
    }

    /// Takes the session once the background thread has set it up. **RT-safe.**
    fn take_remote(&mut self) {
        if self.remote.is_none() {
            let p = self
                .handoff
                .ready
                .swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: p came from Box::into_raw in the connector and is taken once.
                self.remote = Some(unsafe { Box::from_raw(p) });
            }
        }
    }

    /// Writes the latency port: the session's constant latency once the
    /// first run fixed it, 0 before. **RT-safe.**
    fn write_latency(&self) {
        let lat = self.ports[self.latency_port];
        if !lat.is_null() {
            // SAFETY: the host connected the latency port to one f32.
            unsafe { lat.write(self.stream.latency().unwrap_or(0) as f32) };
        }
    }

    /// **RT-safe** in real-time mode (and in auto mode on a real-time thread).
    fn run(&mut self, n: usize) {
        // The first run fixes the exchange size and so the latency, which
        // then stays what the host read after that run (see [`stream`]).
        let block = if self.max_frames == 0 {
            n
        } else {
            self.stream.start(n)
        };
        self.write_latency();
        let (mode, settled) = mode_of_run(self.mode, thread_is_realtime);
        self.mode = settled;
        self.handoff.mode.store(
            if mode == Mode::Offline {
                MODE_OFFLINE
            } else {
                MODE_REALTIME
            },
            Ordering::Relaxed,
        );
        self.frames += n as u64;
        self.handoff.frames.store(self.frames, Ordering::Relaxed);
        self.take_remote();
        if mode == Mode::Offline {
            return self.run_offline(n, block);
        }
        if self.max_frames == 0 {
            // A placeholder: nothing can process the audio.
            self.dry(0, n);
            return self.missed(n as u64);
        }
        // With a hot standby, connected while either worker is.
        let connected = self
            .remote
            .as_ref()
            .is_some_and(|r| r.link.connected() || r.link.standby().is_some_and(Link::connected));
        let away = !connected && (self.remote.is_none() || self.late != Late::Repeat);
        let mut off = 0;
        while off < n {
            let c = (n - off).min(block);
            if away {
                // No session (yet), or the worker is known to be away: no
                // exchange, no wait; the late policy fills, aligned.
                self.take_input(off, c);
                self.give_output(off, c);
            } else {
                // Waiting longer than the block lasts is an xrun anyway; after
                // a late result, no wait until the worker answers again.
                let block_ns = (c as f64 / self.rate * 1e9) as u64;
                let full = self.deadline_ns.unwrap_or(block_ns / 2).min(block_ns);
                let wait = if connected { self.gate.wait(full) } else { 0 };
                let outcome = self.exchange(off, c, wait);
                let a = self.remote.as_ref().map_or(0, |r| answers(&r.master));
                self.gate.after(outcome, a);
            }
            off += c;
        }
    }

    /// Offline: every frame processed by the worker, or the render fails.
    fn run_offline(&mut self, n: usize, block: usize) {
        let Some(cfg) = self
            .entry
            .cfg
            .as_ref()
            .filter(|_| self.entry.remote.is_some())
        else {
            self.fail(
                "the worker did not describe the plugin when the proxy was loaded (the reason \
                 is on the line above), so nothing can process the audio",
            )
        };
        let wait = cfg.offline_wait();
        let end = Instant::now() + wait;
        loop {
            self.take_remote();
            if let Some(r) = self.remote.as_ref() {
                // With a hot standby (a full mirror) the render holds while
                // one of the two has served every block since it began.
                let sb = r.link.standby();
                let losses = (r.link.status().losses, sb.map(|s| s.status().losses));
                let start = *self.losses_at_start.get_or_insert(losses);
                let standby_lost = match (losses.1, start.1) {
                    (Some(now), Some(then)) => now > then,
                    _ => true,
                };
                if losses.0 > start.0 && standby_lost {
                    self.fail(&match &cfg.standby {
                        Some(s) if sb.is_some() => format!(
                            "the worker {} and its standby {s} both went away during the \
                             render (and the remote plugin's state with them)",
                            cfg.worker
                        ),
                        _ => format!(
                            "the worker {} went away during the render (and the remote \
                             plugin's state with it)",
                            cfg.worker
                        ),
                    })
                }
                if r.link.connected() || sb.is_some_and(Link::connected) {
                    break;
                }
            }
            if Instant::now() >= end {
                self.fail(&format!(
                    "no session with the worker {} within offline_wait_ms = {} ms",
                    cfg.worker,
                    wait.as_millis()
                ))
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let deadline = self
            .deadline_ns
            .unwrap_or(wait.as_nanos().min(u128::from(u64::MAX)) as u64);
        let mut off = 0;
        while off < n {
            let c = (n - off).min(block);
            let before = self.unprocessed;
            if self.exchange(off, c, deadline) == Outcome::Late || self.unprocessed > before {
                self.fail(&format!(
                    "no result from the worker {} within {} ms",
                    cfg.worker,
                    deadline / 1_000_000
                ))
            }
            off += c;
        }
    }

    /// Takes the host's audio inputs, frames `off..off + c`, into the stream. **RT-safe.**
    fn take_input(&mut self, off: usize, c: usize) {
        for (k, &(port, _)) in self.ids.audio_in.iter().enumerate() {
            let src = self.ports[port];
            let s = (!src.is_null()).then(|| {
                // SAFETY: the host connected this audio input to ≥ off + c samples.
                unsafe { std::slice::from_raw_parts(src.add(off), c) }
            });
            self.stream.input(k, c, s);
        }
    }

    /// Writes the stream's next `c` output frames to the host's audio
    /// outputs at `off` (the late policy fills what the worker did not
    /// deliver, counted). **RT-safe.**
    fn give_output(&mut self, off: usize, c: usize) {
        let missed = self.stream.fill_to(self.stream.pos() + c as u64);
        for (k, &(port, _)) in self.ids.audio_out.iter().enumerate() {
            let dst = self.ports[port];
            if !dst.is_null() {
                // SAFETY: the host connected this audio output to ≥ off + c
                // samples; the inputs were taken before (in-place hosts).
                self.stream.output(k, unsafe {
                    std::slice::from_raw_parts_mut(dst.add(off), c)
                });
            }
        }
        self.stream.advance(c);
        if missed > 0 {
            self.missed(missed);
        }
    }

    /// One exchange of frames `off..off + c`: sends them, places the result
    /// due (of this exchange or one `window` earlier) at its position in the
    /// stream, and gives the host the stream's next `c` frames. **RT-safe.**
    fn exchange(&mut self, off: usize, c: usize, wait_ns: u64) -> Outcome {
        self.take_input(off, c);
        let Some(r) = self.remote.as_mut() else {
            self.give_output(off, c);
            return Outcome::Late;
        };
        let ids = &self.ids;
        let b = r.master.blocks_mut();
        for &(port, id) in &ids.audio_in {
            let src = self.ports[port];
            let dst = &mut b.get_mut(id)[..c];
            if src.is_null() {
                dst.fill(0.0);
            } else {
                // SAFETY: the host connected this audio input to ≥ off + c samples.
                dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src.add(off), c) });
            }
        }
        if let Some(f) = ids.frames_in {
            b.get_mut(f)[0] = c as i32;
        }
        if let Some(cb) = ids.control_in {
            for (k, &port) in ids.control_in_ports.iter().enumerate() {
                let p = self.ports[port];
                b.get_mut(cb)[k] = if p.is_null() {
                    self.defaults[port]
                } else {
                    // SAFETY: the host connected this control input to one f32.
                    unsafe { p.read() }
                };
            }
        }
        let rep = r.master.process(Deadline::After(wait_ns));
        if r.master.standby().is_some() {
            let st = r.master.stats();
            self.handoff
                .takeovers
                .store(st.takeovers, Ordering::Relaxed);
            self.handoff
                .from_standby
                .store(st.from_standby, Ordering::Relaxed);
        }
        self.stream.sent(rep.seq, c);
        let b = r.master.blocks();
        let mut missed = 0;
        if rep.outcome == Outcome::Delivered {
            if let Some((q0, frames)) = rep.result_seq.and_then(|d| self.stream.result_range(d)) {
                // A plugin may process fewer frames than it was given: zeros after them.
                let done = ids
                    .frames_out
                    .map_or(frames, |f| (b.get(f)[0].max(0) as usize).min(frames));
                missed += self.stream.fill_to(q0);
                for (k, &(_, id)) in ids.audio_out.iter().enumerate() {
                    self.stream.put(k, q0, frames, &b.get(id)[..done]);
                }
                self.stream.mark(q0 + frames as u64);
            }
            if let Some(cb) = ids.control_out {
                for (k, &port) in ids.control_out_ports.iter().enumerate() {
                    let p = self.ports[port];
                    if !p.is_null() {
                        // SAFETY: the host connected this control output to one f32.
                        unsafe { p.write(b.get(cb)[k]) };
                    }
                }
            }
        }
        if missed > 0 {
            self.missed(missed);
        }
        self.give_output(off, c);
        rep.outcome
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.handoff.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let takeovers = self.handoff.takeovers.load(Ordering::Relaxed);
        if let (Some(c), true) = (&self.entry.cfg, takeovers > 0) {
            say(&format!(
                "{}: the standby {} served {} exchange(s) after {takeovers} takeover(s) from the \
                 worker {}",
                self.entry.label,
                c.standby.as_deref().unwrap_or("-"),
                self.handoff.from_standby.load(Ordering::Relaxed),
                c.worker
            ));
        }
        if self.unprocessed > 0 {
            let from = self.entry.cfg.as_ref().map_or_else(
                || "(no worker: the plugin was not described at load)".to_string(),
                |c| c.worker.clone(),
            );
            say(&format!(
                "{}: {} were NOT processed by the worker {from} (late or away): {}",
                self.entry.label,
                count_text(self.unprocessed, self.frames),
                late_text(self.late)
            ));
        }
    }
}

impl ExportedPlugin for Proxy {
    const HAS_DEACTIVATE: bool = false;

    /// One descriptor per `[[remote]]` entry, then none.
    fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
        let entries = ENTRIES.get_or_init(load);
        entries.0.get(index).map(|e| &e.descriptor)
    }

    fn instantiate(descriptor: &LADSPA_Descriptor, sample_rate: c_ulong) -> Option<Self> {
        let rate = u32::try_from(sample_rate).ok()?;
        let data = descriptor.ImplementationData as *const Entry;
        // Only accept descriptors this library made.
        let entry = ENTRIES.get()?.0.iter().find(|e| std::ptr::eq(**e, data))?;
        Some(Proxy::new(entry, rate))
    }

    fn connect_port(&mut self, port: usize, data: *mut LADSPA_Data) {
        if let Some(slot) = self.ports.get_mut(port) {
            *slot = data;
        }
    }

    fn activate(&mut self) {
        // 0 until the first run fixes the latency; the fixed value after.
        self.write_latency();
    }

    fn run(&mut self, frames: usize) {
        Proxy::run(self, frames);
    }
}

firmtime_ladspa::export_plugin!(Proxy);
firmtime_ladspa::export_lv2!(Proxy, "urn:firmtime:proxy:");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_handles_are_ignored() {
        let d = entry_points::<Proxy>();
        assert!(d.deactivate.is_none());
        // SAFETY: NULL handles are what these must tolerate.
        unsafe {
            d.connect_port.unwrap()(std::ptr::null_mut(), 0, std::ptr::null_mut());
            d.activate.unwrap()(std::ptr::null_mut());
            d.run.unwrap()(std::ptr::null_mut(), 64);
            d.cleanup.unwrap()(std::ptr::null_mut());
            assert!(d.instantiate.unwrap()(std::ptr::null(), 48_000).is_null());
        }
    }

    #[test]
    fn placeholder_passes_audio_through_in_place_and_reports_latency() {
        let e = build(None, None, "remote_x".into(), "remote: x".into(), 0xF0_0001);
        assert_eq!(e.descriptor.PortCount, 3);
        let mut p = Proxy::new(e, 48_000);
        // Offline (what auto picks on this thread) would end the test process.
        p.mode = Mode::Realtime;
        let mut buf = [1.0f32, -2.0, 3.0, 0.5];
        let mut out = [9.0f32; 4];
        let mut lat = 7.0f32;
        p.ports[0] = buf.as_mut_ptr();
        p.ports[1] = out.as_mut_ptr();
        p.ports[2] = &mut lat;
        assert_no_alloc::assert_no_alloc(|| p.run(4));
        assert_eq!(out, buf);
        assert_eq!(lat, 0.0);
        // In place: input and output share a buffer.
        p.ports[1] = buf.as_mut_ptr();
        p.run(4);
        assert_eq!(buf, [1.0, -2.0, 3.0, 0.5]);
        assert_eq!(
            (p.frames, p.unprocessed),
            (8, 8),
            "every frame counted as unprocessed"
        );
        assert_eq!(p.handoff.unprocessed.load(Ordering::Relaxed), 8);
    }

    /// Regression test for issue 28 item 3 at the port: the latency was
    /// `window × min(n, max_block)` for each run, so a short last block
    /// changed it. It is the first run's value for the instance, and the
    /// dry fill (no worker here, real time) is the input that much late.
    #[test]
    fn the_latency_port_keeps_the_first_runs_value_whatever_the_later_runs() {
        let text = "[[remote]]\nworker = \"127.0.0.1:9\"\nlabel = \"amp\"\nwindow = 1\n\
                    connect_timeout_ms = 1\nmode = \"realtime\"\n";
        let Parsed::Entry(cfg) = config::parse(text).unwrap().remove(0) else {
            panic!("a good entry")
        };
        let port = |name: &str, input| RemotePort {
            name: name.into(),
            input,
            audio: true,
            hint: 0,
            lower: 0.0,
            upper: 0.0,
        };
        let desc = PluginDescription {
            unique_id: 1,
            label: "amp".into(),
            name: "Amp".into(),
            maker: String::new(),
            copyright: String::new(),
            properties: 0,
            ports: vec![port("Input", true), port("Output", false)],
        };
        let e = build(
            Some(cfg),
            Some(desc),
            "remote_amp".into(),
            "remote: Amp".into(),
            0xF0_0003,
        );
        let mut p = Proxy::new(e, 48_000);
        let total = 8192 + 1808 + 1 + 4096;
        let input: Vec<f32> = (0..total).map(|i| i as f32 + 1.0).collect();
        let mut inp = vec![0.0f32; 8192];
        let mut out = vec![0.0f32; 8192];
        let mut lat = -1.0f32;
        p.ports[0] = inp.as_mut_ptr();
        p.ports[1] = out.as_mut_ptr();
        p.ports[2] = &mut lat;
        ExportedPlugin::activate(&mut p);
        assert_eq!(lat, 0.0, "not known before the first run");
        let mut got = Vec::new();
        let mut t = 0;
        for n in [8192usize, 1808, 1, 4096] {
            inp[..n].copy_from_slice(&input[t..t + n]);
            assert_no_alloc::assert_no_alloc(|| p.run(n));
            assert_eq!(lat, 4096.0, "after a run of {n}");
            got.extend_from_slice(&out[..n]);
            t += n;
        }
        assert!(got[..4096].iter().all(|&x| x == 0.0));
        assert_eq!(&got[4096..], &input[..total - 4096], "dry, 4096 late");
        assert_eq!(p.unprocessed, (total - 4096) as u64);
    }

    #[test]
    fn zeros_fill_what_the_worker_did_not_process() {
        let e = build(None, None, "remote_z".into(), "remote: z".into(), 0xF0_0002);
        let mut p = Proxy::new(e, 48_000);
        p.mode = Mode::Realtime;
        p.late = Late::Zeros;
        let mut buf = [1.0f32, -2.0, 3.0, 0.5];
        let mut out = [9.0f32; 4];
        p.ports[0] = buf.as_mut_ptr();
        p.ports[1] = out.as_mut_ptr();
        assert_no_alloc::assert_no_alloc(|| p.run(4));
        assert_eq!(out, [0.0; 4]);
        assert_eq!(p.unprocessed, 4);
    }

    #[test]
    fn after_a_late_result_exchanges_do_not_wait_until_the_worker_answers() {
        let full = 5_000_000_000; // deadline_ms = 5000, the docs' example
        let mut g = WaitGate::default();
        assert_eq!(g.wait(full), full);
        g.after(Outcome::Priming, 0);
        g.after(Outcome::Delivered, 1);
        assert_eq!(g.wait(full), full);
        // Frozen: one late result, then no waiting however many exchanges follow.
        g.after(Outcome::Late, 1);
        for _ in 0..1000 {
            assert_eq!(g.wait(full), 0);
            g.after(Outcome::Late, 1);
        }
        // A late answer arrives (counted while not waiting): wait again.
        g.after(Outcome::Late, 2);
        assert_eq!(g.wait(full), full);
        g.after(Outcome::Late, 2);
        assert_eq!(g.wait(full), 0);
        // A result in time ends probing too.
        g.after(Outcome::Delivered, 3);
        assert_eq!(g.wait(full), full);
    }

    /// Regression test (issue 32, found with Ardour): auto was settled by
    /// the first run(), which in Ardour is its latency run on a plain
    /// thread, so the proxy stayed offline in the real-time audio thread
    /// after it (`crates/cli/tests/ardour.rs`,
    /// `a_worker_killed_in_a_live_ardour_session_does_not_end_ardour`).
    #[test]
    fn auto_settles_at_the_first_run_on_a_realtime_thread_only() {
        let mut mode = Mode::Auto;
        // Runs on plain threads (Ardour's latency run; every run of sox):
        // offline, still auto.
        for _ in 0..3 {
            let (run, settled) = mode_of_run(mode, || false);
            assert_eq!((run, settled), (Mode::Offline, Mode::Auto));
            mode = settled;
        }
        // The audio thread: real time, for good.
        assert_eq!(mode_of_run(mode, || true), (Mode::Realtime, Mode::Realtime));
        // A chosen mode is kept, and the thread is not asked.
        for m in [Mode::Realtime, Mode::Offline] {
            assert_eq!(mode_of_run(m, || -> bool { panic!("asked") }), (m, m));
        }
    }

    #[test]
    fn this_test_thread_is_not_realtime() {
        // What auto mode relies on: a plain thread is SCHED_OTHER.
        assert!(!thread_is_realtime());
    }
}

// Unit tests run RT code under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
