//! `firmtime_proxy`: a LADSPA plugin that presents plugins running on
//! remote `firmtime net worker`s to any LADSPA host (Lago 2004 §6).
//!
//! At the first `ladspa_descriptor` call it reads its configuration (TOML,
//! `FIRMTIME_PROXY_CONFIG` or `~/.config/firmtime/proxy.toml`, see
//! [`config`]) and asks each worker to describe its plugin. It then
//! presents, per `[[remote]]` entry, a descriptor with the remote plugin's
//! ports and hints, label `remote_<label>`, name `remote: <name>`, unique
//! ID `0xF00000 + (remote ID mod 0x100000)` ([`config::proxy_id`]), and one
//! more port: `latency`, an output control reporting `window × min(n,
//! max_block)` samples for a run of `n` frames (default 0, for hosts such
//! as sox that want a value for every control port).
//!
//! If a worker cannot describe its plugin at load (away, wrong key, no such
//! plugin, not allowed), the proxy says why in one line on stderr and
//! presents the description cached from the last successful load; without
//! one, a placeholder (`Input`, `Output`, `latency`) that passes audio
//! through, named `remote: <label> (unavailable)`. A host's list never
//! silently loses an entry.
//!
//! Each instance sets up its own session (a background thread connects and
//! reconnects; run() never waits for it). run(n) splits `n` into exchanges
//! of at most `max_block` frames; each sends the audio and control inputs
//! and writes the result of the exchange `window` exchanges earlier, or —
//! worker away, late, or before the first `window` results — the input
//! itself (dry pass-through).
//!
//! # Real-time contract
//! instantiate allocates everything. run() does not allocate, lock or
//! print; it waits for a result no longer than the deadline (`deadline_ms`,
//! default half the block's duration) and not at all while the worker is
//! known to be away. The C entry points come from
//! [`firmtime_ladspa::export_plugin!`]: every one checks its pointers and
//! runs inside `catch_unwind`, so a panic never crosses into the C host.
//!
//! The library is an LV2 plugin as well ([`firmtime_ladspa::export_lv2!`]):
//! `lv2_descriptor` gives `urn:firmtime:proxy:<label>` per descriptor, with
//! the same ports and instances; the bundle's Turtle comes from `firmtime
//! ladspa lv2-bundle` (docs/LV2.md).

#![deny(missing_docs)]

pub mod config;

use config::{Parsed, RemoteEntry};
use firmtime_ladspa::export::{entry_points, ExportedPlugin};
use firmtime_ladspa::ffi::*;
use firmtime_net::remote::{describe, PluginBlocks, PluginDescription, PluginSetup, RemotePort};
use firmtime_net::{connect, Deadline, Key, LatePolicy, Link, Master, Outcome, SessionConfig};
use std::ffi::CString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::raw::{c_char, c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// One line on stderr: the only channel a plugin has to its user.
fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "firmtime_proxy: {msg}");
}

/// One presented plugin. Leaked at load: descriptors live as long as the process.
struct Entry {
    descriptor: LADSPA_Descriptor,
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
    e.key_file
        .as_ref()
        .map(|p| Key::from_file(p).map_err(|err| err.to_string()))
        .transpose()
}

/// Asks the worker for the description; the reason in one line if it cannot.
fn fetch(e: &RemoteEntry) -> Result<PluginDescription, String> {
    let addr = resolve(&e.worker)?;
    let key = key_of(e)?;
    let t = Duration::from_millis(
        e.connect_timeout_ms
            .unwrap_or(config::DEFAULT_CONNECT_TIMEOUT_MS),
    );
    describe(addr, key, &e.label, t).map_err(|err| err.to_string())
}

fn load() -> Entries {
    let Some((path, named)) = config::config_path() else {
        return Entries(Vec::new());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            if named || path.exists() {
                say(&format!(
                    "cannot read config {}: {e}; no remote plugins are presented",
                    path.display()
                ));
            }
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
                let l = label.unwrap_or_else(|| format!("entry{number}"));
                say(&format!(
                    "config {} entry {number} ({l}): {message}; presenting remote_{l} as a \
                     pass-through placeholder",
                    path.display()
                ));
                let name = format!("remote: {l} (unavailable: bad config)");
                let id = config::placeholder_id(&l);
                (None, None, l, name, id)
            }
            Parsed::Entry(e) => match fetch(&e) {
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
                            "{} on {}: {why}; presenting its cached description: audio passes \
                             through until the worker serves it",
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
                            "{} on {}: {why}; no cached description, presenting a pass-through \
                             placeholder (1 in, 1 out)",
                            e.label, e.worker
                        ));
                        let l = e.label.clone();
                        let n = format!("remote: {l} (unavailable)");
                        let i = config::placeholder_id(&l);
                        (None, None, l, n, i)
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

struct Handoff {
    ready: AtomicPtr<Remote>,
    stop: AtomicBool,
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

struct Proxy {
    entry: &'static Entry,
    rate: f64,
    /// Host buffers, one per presented port, then latency.
    ports: Vec<*mut f32>,
    ids: PluginBlocks,
    /// Index of the latency port.
    latency_port: usize,
    defaults: Vec<f32>,
    window: u64,
    max_frames: usize,
    deadline_ns: Option<u64>,
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

fn connector(
    cfg: RemoteEntry,
    desc: PluginDescription,
    rate: u32,
    handoff: Arc<Handoff>,
) -> impl FnOnce() {
    move || {
        let mut last: Option<String> = None;
        while !handoff.stop.load(Ordering::Acquire) {
            let r = (|| -> Result<Remote, String> {
                let addr = resolve(&cfg.worker)?;
                let max = cfg.max_frames();
                let period_ns = (f64::from(max) / f64::from(rate) * 1e9) as u64;
                let mut sc = SessionConfig::new(addr, period_ns.max(1));
                sc.key = key_of(&cfg)?;
                sc.window = cfg.window;
                sc.late_policy = Some(LatePolicy::Dry);
                sc.timeout = Duration::from_millis(
                    cfg.connect_timeout_ms
                        .unwrap_or(config::DEFAULT_CONNECT_TIMEOUT_MS),
                );
                sc.plugin = Some(PluginSetup {
                    plugin: cfg.label.clone(),
                    sample_rate: rate,
                    max_frames: max,
                    ports: desc.ports.clone(),
                });
                let (blocks, _) = desc.blocks(max);
                let (master, link) = connect(sc, blocks).map_err(|e| e.to_string())?;
                Ok(Remote { master, link })
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
                    return;
                }
                Err(why) => {
                    if last.as_deref() != Some(why.as_str()) {
                        say(&format!(
                            "{} on {}: {why}; passing audio through (dry) and retrying every second",
                            cfg.label, cfg.worker
                        ));
                        last = Some(why);
                    }
                    for _ in 0..20 {
                        if handoff.stop.load(Ordering::Acquire) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }
}

impl Proxy {
    fn new(entry: &'static Entry, rate: u32) -> Self {
        let handoff = Arc::new(Handoff {
            ready: AtomicPtr::new(std::ptr::null_mut()),
            stop: AtomicBool::new(false),
        });
        let (ids, max_frames, window, deadline_ns) = match (&entry.cfg, &entry.remote) {
            (Some(c), Some(d)) => (
                d.blocks(c.max_frames()).1,
                c.max_frames() as usize,
                u64::from(c.window),
                c.deadline_ms.map(|ms| (ms * 1e6) as u64),
            ),
            _ => (PluginBlocks::default(), 0, 0, None),
        };
        let thread = match (&entry.cfg, &entry.remote) {
            (Some(c), Some(d)) => std::thread::Builder::new()
                .name("ft-proxy-connect".into())
                .spawn(connector(c.clone(), d.clone(), rate, handoff.clone()))
                .ok(),
            _ => None,
        };
        // instantiate may block (ladspa.h): give the first connection its
        // timeout, so that offline hosts process from the first frame.
        if let (Some(c), Some(_)) = (&entry.cfg, &thread) {
            let t = c
                .connect_timeout_ms
                .unwrap_or(config::DEFAULT_CONNECT_TIMEOUT_MS)
                + 100;
            let end = std::time::Instant::now() + Duration::from_millis(t);
            while handoff.ready.load(Ordering::Acquire).is_null() && std::time::Instant::now() < end
            {
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
            window,
            max_frames,
            deadline_ns,
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
                Some(inp) if !inp.is_null() => {
                    // SAFETY: the host connected both to ≥ off + n samples; ptr::copy allows overlap.
                    unsafe { std::ptr::copy(inp.add(off), out.add(off), n) }
                }
                // SAFETY: as above, for the output alone.
                _ => unsafe { std::slice::from_raw_parts_mut(out.add(off), n).fill(0.0) },
            }
        }
    }

    /// **RT-safe.**
    fn run(&mut self, n: usize) {
        let lat = self.ports[self.latency_port];
        if !lat.is_null() {
            // The delay is `window` exchanges, and a run longer than
            // max_block is split into exchanges of max_block frames.
            let frames = n.min(self.max_frames) as u64;
            // SAFETY: the host connected the latency port to one f32.
            unsafe { lat.write((self.window * frames) as f32) };
        }
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
        let connected = self.remote.as_ref().is_some_and(|r| r.link.connected());
        if !connected || self.max_frames == 0 {
            return self.dry(0, n);
        }
        let mut off = 0;
        while off < n {
            let c = (n - off).min(self.max_frames);
            self.exchange(off, c);
            off += c;
        }
    }

    fn exchange(&mut self, off: usize, c: usize) {
        let Some(r) = self.remote.as_mut() else {
            return;
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
        let deadline = self
            .deadline_ns
            .unwrap_or((c as f64 / self.rate * 0.5e9) as u64);
        let rep = r.master.process(Deadline::After(deadline));
        let b = r.master.blocks();
        let done = match (rep.outcome, ids.frames_out) {
            (Outcome::Delivered, Some(f)) => (b.get(f)[0].max(0) as usize).min(c),
            _ => c,
        };
        for &(port, id) in &ids.audio_out {
            let dst = self.ports[port];
            if dst.is_null() {
                continue;
            }
            // SAFETY: the host connected this audio output to ≥ off + c samples.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.add(off), c) };
            out[..done].copy_from_slice(&b.get(id)[..done]);
            out[done..].fill(0.0);
        }
        if rep.outcome == Outcome::Delivered {
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
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.handoff.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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
        let lat = self.ports[self.latency_port];
        if !lat.is_null() {
            // SAFETY: the host connected the latency port to one f32.
            unsafe { lat.write(0.0) };
        }
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
    }
}

// Unit tests run RT code under `assert_no_alloc`: any allocation aborts.
#[cfg(all(test, debug_assertions))]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;
