//! Real LADSPA plugins run by a worker for a remote master (Lago §6–7).
//!
//! A master (the `firmtime_proxy` LADSPA plugin, or any program) first asks
//! a worker to [`describe`] a plugin: the worker finds it in its
//! allow-listed directories ([`PluginAllowList`]) and answers a
//! [`PluginDescription`] (name, label, ID, ports and range hints). The
//! master then sets up a stream whose [`crate::control::Setup`] carries a
//! [`PluginSetup`]: the worker instantiates the plugin once for that stream
//! and runs it in the stream's callback ([`PluginHost::run`]).
//!
//! The stream's layout follows from the description ([`PluginDescription::layout`]):
//!
//! | block | type | direction | length |
//! |---|---|---|---|
//! | one per audio input port, in port order | f32 | to-worker | max frames |
//! | frames in this period | i32 | to-worker | 1 |
//! | control input values, in port order (if any) | f32 | to-worker | control inputs |
//! | one per audio output port, in port order | f32 | from-worker | max frames |
//! | frames processed | i32 | from-worker | 1 |
//! | control output values (if any) | f32 | from-worker | control outputs |
//!
//! Audio inputs come first so that the middleware's dry late policy pairs
//! the k-th audio output with the k-th audio input (pass-through).
//!
//! Only masters that authenticate with the worker's key get plugins, and
//! only plugins whose library lies in an allow-listed directory: a plugin
//! named by path (`/x/lib.so:label`) is refused before anything is loaded.
//! Every library file is checked before it is mapped (real path inside an
//! allowed directory, regular file, sane owner and mode), only the library
//! asked for is loaded, and the directory scan is cached
//! ([`firmtime_ladspa::allowed`]).
//!
//! # RT contract
//! [`PluginHost::new`] allocates and instantiates; [`PluginHost::run`] is
//! **RT-safe** (copies and the plugin's own `run()`). Everything else is
//! control plane: it allocates, loads libraries and blocks on TCP.

use crate::block::{BlockId, BlockSet, Direction as BlockDir, Layout};
use crate::control::{refused, Conn, Reply, Request};
use crate::error::{Error, ErrorKind, Result};
use crate::wire::Key;
use firmtime_ladspa::{AllowedDirs, Direction, Instance, Plugin, PluginInfo, PortKind};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest block a plugin stream may carry per period, in frames.
pub const MAX_FRAMES: u32 = 65_536;
/// Lowest sample rate a plugin stream may be set up at, in Hz.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// Highest sample rate a plugin stream may be set up at, in Hz.
pub const MAX_SAMPLE_RATE: u32 = 768_000;

/// One port of a remote plugin, as the worker describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemotePort {
    /// The plugin's name for it.
    pub name: String,
    /// An input (else an output).
    pub input: bool,
    /// An audio port (else a control port).
    pub audio: bool,
    /// The raw `LADSPA_PortRangeHintDescriptor`.
    pub hint: i32,
    /// `LowerBound` as stored.
    pub lower: f32,
    /// `UpperBound` as stored.
    pub upper: f32,
}

/// A remote plugin's description: what a proxy needs to present it to a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginDescription {
    /// `UniqueID` on the worker.
    pub unique_id: u64,
    /// `Label`.
    pub label: String,
    /// `Name`.
    pub name: String,
    /// `Maker`.
    pub maker: String,
    /// `Copyright`.
    pub copyright: String,
    /// Raw `LADSPA_Properties`.
    pub properties: i32,
    /// Every port, in index order.
    pub ports: Vec<RemotePort>,
}

/// The plugin part of a stream's setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginSetup {
    /// The plugin: label, unique ID, or `LIBRARY:LABEL` (a file name in an
    /// allow-listed directory; paths are refused).
    pub plugin: String,
    /// Sample rate the instance is created at.
    pub sample_rate: u32,
    /// Largest frames per period (the audio blocks' length).
    pub max_frames: u32,
    /// The ports the master expects; the setup is refused if the worker's
    /// plugin has others (a different version, or another plugin).
    pub ports: Vec<RemotePort>,
}

impl PluginDescription {
    /// Copies a host-side [`PluginInfo`].
    pub fn from_info(info: &PluginInfo) -> Self {
        let properties = i32::from(info.properties.realtime)
            | i32::from(info.properties.inplace_broken) << 1
            | i32::from(info.properties.hard_rt_capable) << 2;
        Self {
            unique_id: info.unique_id,
            label: info.label.clone(),
            name: info.name.clone(),
            maker: info.maker.clone(),
            copyright: info.copyright.clone(),
            properties,
            ports: info
                .ports
                .iter()
                .map(|p| RemotePort {
                    name: p.name.clone(),
                    input: p.direction == Direction::Input,
                    audio: p.kind == PortKind::Audio,
                    hint: p.hints.raw,
                    lower: p.hints.raw_bounds.0,
                    upper: p.hints.raw_bounds.1,
                })
                .collect(),
        }
    }

    fn indices(&self, input: bool, audio: bool) -> Vec<usize> {
        (0..self.ports.len())
            .filter(|&i| self.ports[i].input == input && self.ports[i].audio == audio)
            .collect()
    }

    /// The stream layout for this plugin with blocks of `max_frames` (see the module docs).
    pub fn layout(&self, max_frames: u32) -> Layout {
        self.blocks(max_frames).0.layout().clone()
    }

    /// An empty [`BlockSet`] of [`Self::layout`] and the handles into it.
    ///
    /// # Panics
    /// Never for `max_frames` in 1..=[`MAX_FRAMES`] and fewer than 65535
    /// ports (the block set's limits); callers check both.
    pub fn blocks(&self, max_frames: u32) -> (BlockSet, PluginBlocks) {
        let n = max_frames.max(1) as usize;
        let mut b = BlockSet::new();
        let mut ids = PluginBlocks::default();
        let add_f32 = |b: &mut BlockSet, dir, len| b.add::<f32>(dir, len).expect("checked");
        for p in self.indices(true, true) {
            ids.audio_in
                .push((p, add_f32(&mut b, BlockDir::ToWorker, n)));
        }
        ids.frames_in = Some(b.add::<i32>(BlockDir::ToWorker, 1).expect("checked"));
        ids.control_in_ports = self.indices(true, false);
        if !ids.control_in_ports.is_empty() {
            let len = ids.control_in_ports.len();
            ids.control_in = Some(add_f32(&mut b, BlockDir::ToWorker, len));
        }
        for p in self.indices(false, true) {
            ids.audio_out
                .push((p, add_f32(&mut b, BlockDir::FromWorker, n)));
        }
        ids.frames_out = Some(b.add::<i32>(BlockDir::FromWorker, 1).expect("checked"));
        ids.control_out_ports = self.indices(false, false);
        if !ids.control_out_ports.is_empty() {
            let len = ids.control_out_ports.len();
            ids.control_out = Some(add_f32(&mut b, BlockDir::FromWorker, len));
        }
        (b, ids)
    }

    /// A short text of the port layout, e.g. `audio in, audio out, control in`.
    pub fn ports_text(ports: &[RemotePort]) -> String {
        ports
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    if p.audio { "audio" } else { "control" },
                    if p.input { "in" } else { "out" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Handles of a plugin stream's blocks, paired with the plugin's port indexes.
#[derive(Debug, Clone, Default)]
pub struct PluginBlocks {
    /// (port index, block) of each audio input.
    pub audio_in: Vec<(usize, BlockId<f32>)>,
    /// Frames of this period (one i32).
    pub frames_in: Option<BlockId<i32>>,
    /// Port indexes of the control inputs, in block order.
    pub control_in_ports: Vec<usize>,
    /// The control input values (one f32 per control input).
    pub control_in: Option<BlockId<f32>>,
    /// (port index, block) of each audio output.
    pub audio_out: Vec<(usize, BlockId<f32>)>,
    /// Frames the worker processed (one i32).
    pub frames_out: Option<BlockId<i32>>,
    /// Port indexes of the control outputs, in block order.
    pub control_out_ports: Vec<usize>,
    /// The control output values.
    pub control_out: Option<BlockId<f32>>,
}

/// The directories a worker loads plugins from, and nothing else.
///
/// Every file is checked before it is `dlopen`-ed (real path directly in an
/// allowed directory, regular file, owned by root or the worker's user, not
/// group- or world-writable), `LIBRARY:LABEL` loads only that library, and
/// the index that labels and IDs need is built once and rebuilt only when a
/// directory changes: see [`firmtime_ladspa::allowed`]. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct PluginAllowList {
    allowed: AllowedDirs,
}

impl PluginAllowList {
    /// An allow-list of `dirs` (each must exist).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming a directory that does not exist.
    pub fn new(dirs: &[PathBuf]) -> Result<Self> {
        let allowed = AllowedDirs::new(dirs).map_err(|e| Error::invalid(e.message()))?;
        Ok(Self { allowed })
    }

    /// The directories (canonical).
    pub fn dirs(&self) -> &[PathBuf] {
        self.allowed.dirs()
    }

    /// Whether the list is empty (the worker serves no plugins).
    pub fn is_empty(&self) -> bool {
        self.dirs().is_empty()
    }

    /// Libraries `dlopen`-ed so far (the scan is cached: requests for
    /// plugins already indexed load nothing).
    pub fn loads(&self) -> u64 {
        self.allowed.loads()
    }

    /// Finds `spec` (label, ID, or `LIBRARY:LABEL`) in the allowed directories.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] for a spec naming a path (checked
    /// before anything is loaded) or a library outside the directories or
    /// failing a check (also before loading);
    /// [`ErrorKind::InvalidInput`] when no allowed library has it (the
    /// message lists the directories and the files refused).
    pub fn find(&self, spec: &str) -> Result<Plugin> {
        if self.is_empty() {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                "this worker serves no plugins: start it with --plugin-dir DIR".to_string(),
            ));
        }
        if spec.contains('/') {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "plugin '{}' names a path: this worker loads plugins only from its \
                     allow-listed directories ({}); name the plugin by label, ID or LIBRARY:LABEL",
                    firmtime_ladspa::shown(spec),
                    self.dirs_text()
                ),
            ));
        }
        self.allowed.find(spec).map_err(|e| match e.kind() {
            firmtime_ladspa::ErrorKind::PermissionDenied => Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "plugin '{}' is refused: {} (this worker's allow-listed directories: {})",
                    firmtime_ladspa::shown(spec),
                    e.message(),
                    self.dirs_text()
                ),
            ),
            _ => Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "this worker has no plugin '{}' in its allow-listed directories ({}): {}",
                    firmtime_ladspa::shown(spec),
                    self.dirs_text(),
                    e.message()
                ),
            ),
        })
    }

    /// Whether `library` lies directly in an allowed directory (symlinks resolved).
    pub fn allows(&self, library: &Path) -> bool {
        library
            .canonicalize()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .is_some_and(|parent| self.dirs().contains(&parent))
    }

    fn dirs_text(&self) -> String {
        self.dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One plugin instance serving one stream on a worker.
#[derive(Debug)]
pub struct PluginHost {
    instance: Instance,
    ids: PluginBlocks,
    max_frames: usize,
    /// (lowest, highest) accepted value of each control input, in block order.
    bounds: Vec<(f32, f32)>,
    refusals: std::sync::Arc<ControlRefusals>,
}

/// Control values a [`PluginHost`] refused: not finite, or outside the
/// port's LADSPA bounds. The data thread counts them; another thread reads
/// them (atomics only).
#[derive(Debug)]
pub struct ControlRefusals {
    count: std::sync::atomic::AtomicU64,
    last_index: std::sync::atomic::AtomicUsize,
    last_bits: std::sync::atomic::AtomicU32,
    /// (port name, lowest, highest) of each control input, in block order.
    ports: Vec<(String, f32, f32)>,
}

impl ControlRefusals {
    /// Values refused so far.
    pub fn count(&self) -> u64 {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The latest refusal in words: which port, the value, the valid range.
    pub fn last_text(&self) -> Option<String> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.count() == 0 {
            return None;
        }
        let (name, lo, hi) = self.ports.get(self.last_index.load(Relaxed))?;
        let v = f32::from_bits(self.last_bits.load(Relaxed));
        Some(format!(
            "control input '{name}' = {v} refused (the previous value is kept): the valid \
             range is a finite number from {lo} to {hi}"
        ))
    }
}

impl PluginHost {
    /// Checks `setup` against `plugin` and `layout`, instantiates and activates the plugin.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the rate or block size is out of
    /// range, the expected ports differ from the plugin's (the message
    /// lists both), or the layout is not the one the ports imply; the
    /// plugin refused to instantiate.
    pub fn new(plugin: &Plugin, setup: &PluginSetup, layout: &Layout) -> Result<Self> {
        if setup.sample_rate == 0 || !(1..=MAX_FRAMES).contains(&setup.max_frames) {
            return Err(Error::invalid(format!(
                "plugin stream: sample rate {} and max frames {} must be ≥ 1 and ≤ {MAX_FRAMES} frames",
                setup.sample_rate, setup.max_frames
            )));
        }
        let desc = PluginDescription::from_info(plugin.info());
        let same = desc.ports.len() == setup.ports.len()
            && desc
                .ports
                .iter()
                .zip(&setup.ports)
                .all(|(a, b)| a.input == b.input && a.audio == b.audio);
        if !same {
            return Err(Error::invalid(format!(
                "mismatched port layout: the master expects plugin '{}' to have ports [{}] but \
                 '{}' on this worker has [{}]; refresh the master's description (delete the \
                 proxy's cache) or install the same plugin on both sides",
                setup.plugin,
                PluginDescription::ports_text(&setup.ports),
                desc.label,
                PluginDescription::ports_text(&desc.ports)
            )));
        }
        let (blocks, ids) = desc.blocks(setup.max_frames);
        if blocks.layout() != layout {
            return Err(Error::invalid(format!(
                "the stream's layout does not match plugin '{}' with {} frames per period: \
                 build it with PluginDescription::layout",
                desc.label, setup.max_frames
            )));
        }
        let mut instance = plugin
            .instantiate(setup.sample_rate, setup.max_frames as usize)
            .map_err(|e| Error::invalid(e.message().to_string()))?;
        instance.activate();
        let rate = setup.sample_rate as f32;
        let ports: Vec<(String, f32, f32)> = ids
            .control_in_ports
            .iter()
            .map(|&p| {
                let info = &plugin.info().ports[p];
                let (lo, hi) = info.hints.bounds(rate);
                (
                    info.name.clone(),
                    lo.filter(|v| v.is_finite()).unwrap_or(f32::MIN),
                    hi.filter(|v| v.is_finite()).unwrap_or(f32::MAX),
                )
            })
            .collect();
        Ok(Self {
            instance,
            bounds: ports.iter().map(|&(_, lo, hi)| (lo, hi)).collect(),
            refusals: std::sync::Arc::new(ControlRefusals {
                count: Default::default(),
                last_index: Default::default(),
                last_bits: Default::default(),
                ports,
            }),
            ids,
            max_frames: setup.max_frames as usize,
        })
    }

    /// The control values this host refused (shared with the reporting thread).
    pub fn refusals(&self) -> std::sync::Arc<ControlRefusals> {
        self.refusals.clone()
    }

    /// Runs the plugin on one period's blocks: sets the control inputs
    /// (a value that is not finite or lies outside the port's LADSPA bounds
    /// is refused and counted, and the port keeps its previous value),
    /// copies the audio in, runs `frames` (clamped to the max), copies the
    /// audio and control outputs back (zeros past `frames`). **RT-safe.**
    pub fn run(&mut self, b: &mut BlockSet) {
        let ids = &self.ids;
        let n = ids
            .frames_in
            .map_or(0, |f| b.get(f)[0])
            .clamp(0, self.max_frames as i32) as usize;
        if let Some(c) = ids.control_in {
            for (k, &port) in ids.control_in_ports.iter().enumerate() {
                let v = b.get(c)[k];
                let (lo, hi) = self.bounds[k];
                // NaN fails both comparisons; ±inf lies outside every finite range.
                if v.is_finite() && v >= lo && v <= hi {
                    let _ = self.instance.set_control(port, v);
                } else {
                    use std::sync::atomic::Ordering::Relaxed;
                    self.refusals.last_index.store(k, Relaxed);
                    self.refusals.last_bits.store(v.to_bits(), Relaxed);
                    self.refusals.count.fetch_add(1, Relaxed);
                }
            }
        }
        for &(port, id) in &ids.audio_in {
            if let Some(buf) = self.instance.audio_mut(port) {
                buf[..n].copy_from_slice(&b.get(id)[..n]);
            }
        }
        let ok = self.instance.run(n).is_ok();
        for &(port, id) in &ids.audio_out {
            let out = b.get_mut(id);
            match self.instance.audio(port) {
                Some(buf) if ok => {
                    out[..n].copy_from_slice(&buf[..n]);
                    out[n..].fill(0.0);
                }
                _ => out.fill(0.0),
            }
        }
        if let Some(f) = ids.frames_out {
            b.get_mut(f)[0] = if ok { n as i32 } else { 0 };
        }
        if let Some(c) = ids.control_out {
            for (k, &port) in ids.control_out_ports.iter().enumerate() {
                b.get_mut(c)[k] = self.instance.control(port).unwrap_or(0.0);
            }
        }
    }
}

/// Asks the worker at `addr` to describe plugin `spec` (its own connection).
///
/// # Errors
/// As [`Conn::connect`]; the worker refused (no such plugin, not allowed,
/// no key: the message is the worker's).
pub fn describe(
    addr: SocketAddr,
    key: Option<Key>,
    spec: &str,
    timeout: Duration,
) -> Result<PluginDescription> {
    let mut c = Conn::connect(addr, key, timeout)?;
    c.send(&Request::Describe {
        plugin: spec.to_string(),
    })?;
    let r = match c.recv::<Reply>()? {
        Reply::Plugin(d) => Ok(d),
        Reply::Error { message } => Err(refused(addr, &message)),
        other => Err(Error::invalid(format!(
            "the worker at {addr} answered describe with {other}"
        ))),
    };
    let _ = c.send(&Request::Close);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Flow;

    fn port(input: bool, audio: bool) -> RemotePort {
        RemotePort {
            name: "p".into(),
            input,
            audio,
            hint: 0,
            lower: 0.0,
            upper: 0.0,
        }
    }

    #[test]
    fn layout_puts_audio_inputs_first_and_pairs_dry_outputs() {
        let d = PluginDescription {
            unique_id: 1,
            label: "x".into(),
            name: "x".into(),
            maker: String::new(),
            copyright: String::new(),
            properties: 0,
            ports: vec![
                port(true, false),
                port(true, true),
                port(false, true),
                port(false, false),
            ],
        };
        let (b, ids) = d.blocks(64);
        assert_eq!(ids.audio_in[0].0, 1);
        assert_eq!(ids.audio_in[0].1.index(), 0);
        assert_eq!(ids.frames_in.unwrap().index(), 1);
        assert_eq!(ids.control_in_ports, vec![0]);
        assert_eq!(ids.audio_out[0], (2, ids.audio_out[0].1));
        assert_eq!(ids.audio_out[0].1.index(), 3);
        assert_eq!(ids.control_out_ports, vec![3]);
        // 64 audio + 1 frames + 1 control, each 4 bytes.
        assert_eq!(b.payload_len(Flow::ToWorker), 66 * 4);
        assert_eq!(b.payload_len(Flow::FromWorker), 66 * 4);
        assert_eq!(
            crate::master::LatePolicy::default_for(b.layout()),
            crate::master::LatePolicy::Dry
        );
        assert_eq!(
            PluginDescription::ports_text(&d.ports),
            "control in, audio in, audio out, control out"
        );
    }

    #[test]
    fn allow_list_refuses_paths_before_loading() {
        let a = PluginAllowList::new(&[std::env::temp_dir()]).unwrap();
        let e = a.find("/usr/lib/ladspa/amp.so:amp_mono").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.message().contains("names a path"), "{e}");
        let e = PluginAllowList::default().find("amp_mono").unwrap_err();
        assert!(e.message().contains("--plugin-dir"), "{e}");
        let e = PluginAllowList::new(&[PathBuf::from("/nonexistent-dir-x")]).unwrap_err();
        assert!(e.message().contains("/nonexistent-dir-x"), "{e}");
    }

    /// Regression (sibling of issue 28's 500 KB label): a master's plugin
    /// spec was echoed in full in the worker's refusal.
    #[test]
    fn a_long_plugin_spec_is_cut_in_the_refusal() {
        let dir = std::env::temp_dir().join(format!("ft-remote-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = PluginAllowList::new(std::slice::from_ref(&dir)).unwrap();
        for spec in ["x".repeat(500_000), format!("/{}", "y".repeat(500_000))] {
            let e = a.find(&spec).unwrap_err();
            assert!(e.message().len() < 2_000, "{} bytes", e.message().len());
            assert!(
                e.message().contains("(500000 bytes)") || e.message().contains("(500001 bytes)"),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
