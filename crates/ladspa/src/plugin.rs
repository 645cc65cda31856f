//! Plugin libraries, descriptors turned into owned descriptions, and
//! instances that own their port buffers.
//!
//! A [`Library`] is loaded once, checked descriptor by descriptor, and
//! shared through an `Arc`: every [`Plugin`] and [`Instance`] holds one, so
//! the shared object stays mapped while anything made from it lives.
//!
//! # Real-time contract
//! [`Instance::new`] allocates every buffer and connects every port once.
//! After that [`Instance::run`], [`Instance::run_adding`],
//! [`Instance::set_control`] and the buffer accessors never allocate, lock,
//! print or block (the plugin's own code aside), and fail with a small
//! `Copy` [`RunError`].

use crate::error::{Error, ErrorKind, Result};
use crate::ffi;
use serde::Serialize;
use std::ffi::CStr;
use std::os::raw::{c_char, c_ulong, c_void};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// Descriptor indexes past this are not asked for: a library that never
/// returns NULL would otherwise loop forever.
const MAX_DESCRIPTORS: c_ulong = 4096;
/// More ports than this is taken for a corrupt descriptor.
const MAX_PORTS: c_ulong = 4096;

/// Plugin-wide properties (`LADSPA_PROPERTY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Properties {
    /// Has a real-time dependency; output must not be cached or delayed.
    pub realtime: bool,
    /// Breaks when an input and an output share a buffer.
    pub inplace_broken: bool,
    /// run() is fit for hard real time (no malloc, no blocking).
    pub hard_rt_capable: bool,
}

/// Which way data flows through a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Host to plugin.
    Input,
    /// Plugin to host.
    Output,
}

/// What a port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// One value per run() call.
    Control,
    /// One block of samples per run() call.
    Audio,
}

/// The default a port asks for (`LADSPA_HINT_DEFAULT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultHint {
    /// No default given.
    None,
    /// The lower bound.
    Minimum,
    /// Three quarters of the way to the lower bound.
    Low,
    /// Half way.
    Middle,
    /// Three quarters of the way to the upper bound.
    High,
    /// The upper bound.
    Maximum,
    /// 0.
    Zero,
    /// 1.
    One,
    /// 100.
    Hundred,
    /// 440 (concert A).
    A440,
}

/// A port's range hints, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hints {
    /// The raw `LADSPA_PortRangeHintDescriptor`.
    pub raw: i32,
    /// Lower bound as written (times the sample rate when `sample_rate`).
    pub lower: Option<f32>,
    /// Upper bound as written (times the sample rate when `sample_rate`).
    pub upper: Option<f32>,
    /// A boolean: `<= 0` off, `> 0` on.
    pub toggled: bool,
    /// Bounds are multiples of the sample rate.
    pub sample_rate: bool,
    /// Best shown on a logarithmic scale.
    pub logarithmic: bool,
    /// Integer values.
    pub integer: bool,
    /// The default asked for.
    pub default: DefaultHint,
    /// `LowerBound` and `UpperBound` as stored, flags or not.
    pub raw_bounds: (f32, f32),
}

impl Hints {
    /// Decodes a raw range hint.
    pub fn from_raw(hint: ffi::LADSPA_PortRangeHint) -> Self {
        let d = hint.HintDescriptor;
        let default = match d & ffi::HINT_DEFAULT_MASK {
            ffi::HINT_DEFAULT_MINIMUM => DefaultHint::Minimum,
            ffi::HINT_DEFAULT_LOW => DefaultHint::Low,
            ffi::HINT_DEFAULT_MIDDLE => DefaultHint::Middle,
            ffi::HINT_DEFAULT_HIGH => DefaultHint::High,
            ffi::HINT_DEFAULT_MAXIMUM => DefaultHint::Maximum,
            ffi::HINT_DEFAULT_0 => DefaultHint::Zero,
            ffi::HINT_DEFAULT_1 => DefaultHint::One,
            ffi::HINT_DEFAULT_100 => DefaultHint::Hundred,
            ffi::HINT_DEFAULT_440 => DefaultHint::A440,
            _ => DefaultHint::None,
        };
        Self {
            raw: d,
            lower: (d & ffi::HINT_BOUNDED_BELOW != 0).then_some(hint.LowerBound),
            upper: (d & ffi::HINT_BOUNDED_ABOVE != 0).then_some(hint.UpperBound),
            toggled: d & ffi::HINT_TOGGLED != 0,
            sample_rate: d & ffi::HINT_SAMPLE_RATE != 0,
            logarithmic: d & ffi::HINT_LOGARITHMIC != 0,
            integer: d & ffi::HINT_INTEGER != 0,
            default,
            raw_bounds: (hint.LowerBound, hint.UpperBound),
        }
    }

    /// The bounds in real units at `sample_rate` (multiplied when the
    /// port has the sample-rate hint).
    pub fn bounds(&self, sample_rate: f32) -> (Option<f32>, Option<f32>) {
        let k = if self.sample_rate { sample_rate } else { 1.0 };
        (self.lower.map(|v| v * k), self.upper.map(|v| v * k))
    }

    /// The default value at `sample_rate`, computed as `ladspa.h`
    /// specifies: bound-based defaults use the bounds (times the sample
    /// rate when hinted), low/middle/high interpolate geometrically for
    /// logarithmic ports, and the result is rounded for integer ports.
    /// A zero bound makes the geometric mean 0, as the formula says (and
    /// analyseplugin prints); a logarithmic port with a negative bound
    /// interpolates linearly, since the logarithm is undefined there. Like analyseplugin,
    /// the bound fields are used even when a plugin forgot to set the
    /// matching `BOUNDED` flag (cmt's `track_max_peak` does). `None` when
    /// there is no default.
    pub fn default_value(&self, sample_rate: f32) -> Option<f32> {
        let k = if self.sample_rate { sample_rate } else { 1.0 };
        let (lo, hi) = (Some(self.raw_bounds.0 * k), Some(self.raw_bounds.1 * k));
        let mix = |w_lo: f32| -> Option<f32> {
            let (l, h) = (lo?, hi?);
            Some(if self.logarithmic && l >= 0.0 && h >= 0.0 {
                (l.ln() * w_lo + h.ln() * (1.0 - w_lo)).exp()
            } else {
                l * w_lo + h * (1.0 - w_lo)
            })
        };
        let v = match self.default {
            DefaultHint::None => return None,
            DefaultHint::Minimum => lo?,
            DefaultHint::Low => mix(0.75)?,
            DefaultHint::Middle => mix(0.5)?,
            DefaultHint::High => mix(0.25)?,
            DefaultHint::Maximum => hi?,
            DefaultHint::Zero => 0.0,
            DefaultHint::One => 1.0,
            DefaultHint::Hundred => 100.0,
            DefaultHint::A440 => 440.0,
        };
        Some(if self.integer { v.round() } else { v })
    }
}

/// One port of a plugin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortInfo {
    /// Index passed to `connect_port`.
    pub index: usize,
    /// The plugin's name for it.
    pub name: String,
    /// Input or output.
    pub direction: Direction,
    /// Control or audio.
    pub kind: PortKind,
    /// Range hints.
    pub hints: Hints,
}

impl PortInfo {
    /// True for control inputs: the values a user gives on the command line.
    pub fn is_control_input(&self) -> bool {
        self.kind == PortKind::Control && self.direction == Direction::Input
    }

    /// The range in real units as text, e.g. `-70 to 70` or `0 to ...`.
    pub fn range_text(&self, sample_rate: f32) -> String {
        let (lo, hi) = self.hints.bounds(sample_rate);
        let f = |v: Option<f32>| v.map_or("...".to_string(), |v| format!("{v}"));
        format!("{} to {}", f(lo), f(hi))
    }
}

/// An owned description of one plugin type, copied out of its descriptor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginInfo {
    /// `UniqueID`.
    pub unique_id: u64,
    /// `Label`, unique within the library.
    pub label: String,
    /// `Name`.
    pub name: String,
    /// `Maker` (empty when the plugin gave NULL).
    pub maker: String,
    /// `Copyright` (empty when the plugin gave NULL).
    pub copyright: String,
    /// Plugin-wide properties.
    pub properties: Properties,
    /// Every port, in index order.
    pub ports: Vec<PortInfo>,
    /// The plugin has `activate`.
    pub has_activate: bool,
    /// The plugin has `deactivate`.
    pub has_deactivate: bool,
    /// The plugin has `run_adding` and `set_run_adding_gain`.
    pub has_run_adding: bool,
    /// The library file it came from.
    pub library: PathBuf,
    /// Its index in the library's `ladspa_descriptor`.
    pub index: usize,
}

impl PluginInfo {
    /// Ports of `kind` and `direction`, in index order.
    pub fn ports_of(&self, kind: PortKind, direction: Direction) -> Vec<&PortInfo> {
        self.ports
            .iter()
            .filter(|p| p.kind == kind && p.direction == direction)
            .collect()
    }

    /// Resolves the control values a user gave, in control-input port
    /// order, into one value per control input: missing trailing values
    /// take the port's default at `sample_rate`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidControl`] when more values are given than the
    /// plugin has control inputs, a missing value's port has no default,
    /// a value is not finite (NaN, ±inf), or (with `check_range`) a value lies outside the
    /// port's bounds. Each message names the port and its range.
    pub fn resolve_controls(
        &self,
        given: &[f32],
        sample_rate: f32,
        check_range: bool,
    ) -> Result<Vec<f32>> {
        let inputs: Vec<&PortInfo> = self.ports.iter().filter(|p| p.is_control_input()).collect();
        let list = || {
            inputs
                .iter()
                .map(|p| format!("\"{}\" ({})", p.name, p.range_text(sample_rate)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if given.len() > inputs.len() {
            return Err(Error::new(
                ErrorKind::InvalidControl,
                format!(
                    "plugin {} takes {} control value(s) but {} were given; its controls in order: {}",
                    self.label,
                    inputs.len(),
                    given.len(),
                    if inputs.is_empty() { "none".to_string() } else { list() }
                ),
            ));
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (i, port) in inputs.iter().enumerate() {
            let v = match given.get(i) {
                Some(&v) => v,
                None => port.hints.default_value(sample_rate).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidControl,
                        format!(
                            "plugin {}: control \"{}\" (number {}, range {}) has no default; give a value for it",
                            self.label,
                            port.name,
                            i + 1,
                            port.range_text(sample_rate)
                        ),
                    )
                })?,
            };
            // `inf`, `1e999` (which parses as inf) and NaN reach no plugin:
            // no port's range holds them, even with the range check off.
            if !v.is_finite() {
                return Err(Error::new(
                    ErrorKind::InvalidControl,
                    format!(
                        "plugin {}: control \"{}\" = {v} is not a finite number; give a value \
                         in its range {}",
                        self.label,
                        port.name,
                        port.range_text(sample_rate)
                    ),
                ));
            }
            if check_range && given.get(i).is_some() {
                let (lo, hi) = port.hints.bounds(sample_rate);
                if lo.is_some_and(|lo| v < lo) || hi.is_some_and(|hi| v > hi) {
                    return Err(Error::new(
                        ErrorKind::InvalidControl,
                        format!(
                            "plugin {}: control \"{}\" = {v} is outside its range {}; \
                             give a value in range (or pass --no-range-check to send it anyway)",
                            self.label,
                            port.name,
                            port.range_text(sample_rate)
                        ),
                    ));
                }
            }
            out.push(v);
        }
        Ok(out)
    }
}

struct Entry {
    descriptor: NonNull<ffi::LADSPA_Descriptor>,
    info: PluginInfo,
}

/// A loaded plugin library: its descriptors, checked and described.
pub struct Library {
    path: PathBuf,
    entries: Vec<Entry>,
    skipped: Vec<String>,
    // Declared after the descriptors' owners so it is dropped after them:
    // descriptors point into it.
    _lib: libloading::Library,
    // Closed after dlclose: see `load_as`.
    _fd: Option<std::fs::File>,
}

// SAFETY: descriptors are immutable data owned by the loaded library; the
// LADSPA API lets hosts read them and call instantiate from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; nothing in a Library is mutated after load.
unsafe impl Sync for Library {}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("plugins", &self.entries.len())
            .field("skipped", &self.skipped)
            .finish()
    }
}

/// Reads a C string the plugin handed out, if it is not NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Checks one descriptor and copies it into a [`PluginInfo`].
///
/// # Safety
/// `d` points to a descriptor of a library that is still loaded.
unsafe fn describe(d: &ffi::LADSPA_Descriptor, path: &Path, index: usize) -> Result<PluginInfo> {
    let bad = |what: &str| {
        Error::new(
            ErrorKind::InvalidDescriptor,
            format!(
                "{} descriptor {index}: {what}; the plugin breaks the LADSPA rules and is skipped",
                path.display()
            ),
        )
    };
    // SAFETY: the descriptor's strings are static data of the loaded library.
    let label = unsafe { c_string(d.Label) }.ok_or_else(|| bad("Label is NULL"))?;
    // SAFETY: as above.
    let name = unsafe { c_string(d.Name) }.ok_or_else(|| bad("Name is NULL"))?;
    // SAFETY: as above.
    let maker = unsafe { c_string(d.Maker) }.unwrap_or_default();
    // SAFETY: as above.
    let copyright = unsafe { c_string(d.Copyright) }.unwrap_or_default();
    if d.instantiate.is_none() || d.connect_port.is_none() || d.run.is_none() {
        return Err(bad(&format!(
            "plugin {label} lacks instantiate, connect_port or run"
        )));
    }
    if d.PortCount > MAX_PORTS {
        return Err(bad(&format!("plugin {label} claims {} ports", d.PortCount)));
    }
    let count = d.PortCount as usize;
    if count > 0
        && (d.PortDescriptors.is_null() || d.PortNames.is_null() || d.PortRangeHints.is_null())
    {
        return Err(bad(&format!("plugin {label} has NULL port arrays")));
    }
    let mut ports = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the arrays are non-NULL and hold PortCount entries (ladspa.h).
        let (pd, pn, ph) = unsafe {
            (
                *d.PortDescriptors.add(i),
                *d.PortNames.add(i),
                *d.PortRangeHints.add(i),
            )
        };
        // SAFETY: port names are static NUL-terminated strings of the library.
        let pname = unsafe { c_string(pn) }.ok_or_else(|| bad(&format!("port {i} has no name")))?;
        let direction = match (pd & ffi::PORT_INPUT != 0, pd & ffi::PORT_OUTPUT != 0) {
            (true, false) => Direction::Input,
            (false, true) => Direction::Output,
            _ => {
                return Err(bad(&format!(
                    "port \"{pname}\" is not exactly one of input/output"
                )))
            }
        };
        let kind = match (pd & ffi::PORT_CONTROL != 0, pd & ffi::PORT_AUDIO != 0) {
            (true, false) => PortKind::Control,
            (false, true) => PortKind::Audio,
            _ => {
                return Err(bad(&format!(
                    "port \"{pname}\" is not exactly one of control/audio"
                )))
            }
        };
        ports.push(PortInfo {
            index: i,
            name: pname,
            direction,
            kind,
            hints: Hints::from_raw(ph),
        });
    }
    let p = d.Properties;
    Ok(PluginInfo {
        #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
        unique_id: u64::from(d.UniqueID),
        label,
        name,
        maker,
        copyright,
        properties: Properties {
            realtime: p & ffi::PROPERTY_REALTIME != 0,
            inplace_broken: p & ffi::PROPERTY_INPLACE_BROKEN != 0,
            hard_rt_capable: p & ffi::PROPERTY_HARD_RT_CAPABLE != 0,
        },
        ports,
        has_activate: d.activate.is_some(),
        has_deactivate: d.deactivate.is_some(),
        has_run_adding: d.run_adding.is_some() && d.set_run_adding_gain.is_some(),
        library: path.to_path_buf(),
        index,
    })
}

impl Library {
    /// Loads the shared object at `path` and describes every plugin in it.
    /// Descriptors that break the LADSPA rules are left out and listed by
    /// [`Library::skipped`].
    ///
    /// Loading runs the library's initialisers: load only plugin
    /// directories you trust.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] when there is no such file,
    /// [`ErrorKind::LoadFailed`] when `dlopen` fails (the message carries
    /// `dlerror`'s text) or the library exports no `ladspa_descriptor`.
    pub fn load(path: &Path) -> Result<Arc<Library>> {
        if !path.exists() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no LADSPA library at {}", path.display()),
            ));
        }
        Self::load_as(path, path, None)
    }

    /// Loads the file behind `open` (a path `dlopen` opens, e.g.
    /// `/proc/self/fd/N` for a file already opened and checked) and names
    /// it `path` in descriptions and messages. `fd`, the descriptor behind
    /// such a name, stays open until the library is unloaded: glibc matches
    /// a new `dlopen` by name first, so the number must not be reused while
    /// the library is loaded under it.
    pub(crate) fn load_as(
        open: &Path,
        path: &Path,
        fd: Option<std::fs::File>,
    ) -> Result<Arc<Library>> {
        // SAFETY: loading runs the library's initialisers; plugin libraries
        // are trusted code by the host's choice of directories (documented),
        // and a worker checks them first (`crate::allowed`).
        let lib = unsafe { libloading::Library::new(open) }.map_err(|e| {
            Error::new(
                ErrorKind::LoadFailed,
                format!(
                    "cannot load LADSPA library {}: {e}; check that it is a shared object \
                     for this architecture and that its own dependencies are installed (ldd shows them)",
                    path.display()
                ),
            )
        })?;
        // SAFETY: the symbol's type is the LADSPA_Descriptor_Function ladspa.h declares.
        let func: ffi::LADSPA_Descriptor_Function = unsafe {
            *lib.get::<ffi::LADSPA_Descriptor_Function>(ffi::DESCRIPTOR_SYMBOL)
                .map_err(|e| {
                    Error::new(
                        ErrorKind::LoadFailed,
                        format!(
                            "{} is not a LADSPA library (no ladspa_descriptor symbol: {e})",
                            path.display()
                        ),
                    )
                })?
        };
        let mut entries = Vec::new();
        let mut skipped = Vec::new();
        for i in 0..MAX_DESCRIPTORS {
            // SAFETY: ladspa_descriptor takes any index and returns NULL past the end.
            let d = unsafe { func(i) };
            let Some(d) = NonNull::new(d as *mut ffi::LADSPA_Descriptor) else {
                break;
            };
            // SAFETY: a non-NULL descriptor lives as long as the library.
            match unsafe { describe(d.as_ref(), path, i as usize) } {
                Ok(info) => entries.push(Entry {
                    descriptor: d,
                    info,
                }),
                Err(e) => skipped.push(e.to_string()),
            }
        }
        Ok(Arc::new(Library {
            path: path.to_path_buf(),
            entries,
            skipped,
            _lib: lib,
            _fd: fd,
        }))
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Descriptions of the usable plugins, in descriptor order.
    pub fn infos(&self) -> impl Iterator<Item = &PluginInfo> {
        self.entries.iter().map(|e| &e.info)
    }

    /// Why each left-out descriptor was left out.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The usable plugins, each keeping the library loaded.
    pub fn plugins(self: &Arc<Self>) -> Vec<Plugin> {
        (0..self.entries.len())
            .map(|entry| Plugin {
                library: Arc::clone(self),
                entry,
            })
            .collect()
    }
}

/// A plugin type from a loaded [`Library`]; cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    library: Arc<Library>,
    entry: usize,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("label", &self.info().label)
            .field("library", &self.library.path)
            .finish()
    }
}

impl Plugin {
    /// Its description.
    pub fn info(&self) -> &PluginInfo {
        &self.library.entries[self.entry].info
    }

    /// The library it lives in.
    pub fn library(&self) -> &Arc<Library> {
        &self.library
    }

    fn descriptor(&self) -> NonNull<ffi::LADSPA_Descriptor> {
        self.library.entries[self.entry].descriptor
    }

    /// Creates an instance running at `sample_rate` with room for blocks
    /// of up to `block_size` frames. See [`Instance::new`].
    ///
    /// # Errors
    /// As [`Instance::new`].
    pub fn instantiate(&self, sample_rate: u32, block_size: usize) -> Result<Instance> {
        Instance::new(self.clone(), sample_rate, block_size)
    }
}

/// Why an RT-path call on an [`Instance`] did nothing. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunError {
    /// More frames than the buffers hold.
    BlockTooLarge {
        /// Frames asked for.
        frames: usize,
        /// Frames the buffers hold.
        capacity: usize,
    },
    /// `activate` has not been called (or `deactivate` was).
    NotActive,
    /// The plugin has no `run_adding`/`set_run_adding_gain`.
    NoRunAdding,
    /// No port with that index, or not of the kind the call needs.
    BadPort(usize),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::BlockTooLarge { frames, capacity } => write!(
                f,
                "block of {frames} frames exceeds the {capacity} frames the buffers were made for"
            ),
            RunError::NotActive => f.write_str("instance not active: call activate() first"),
            RunError::NoRunAdding => f.write_str("plugin has no run_adding()"),
            RunError::BadPort(p) => write!(f, "port {p} does not exist or has the wrong kind"),
        }
    }
}

impl std::error::Error for RunError {}

/// A heap buffer addressed only through its raw pointer, so the plugin's
/// copy of the pointer and ours never conflict under Rust's aliasing rules.
struct RawBuf {
    ptr: NonNull<f32>,
    len: usize,
}

impl RawBuf {
    fn new(len: usize) -> Self {
        let b: Box<[f32]> = vec![0.0; len.max(1)].into_boxed_slice();
        let len = b.len();
        // SAFETY: Box::into_raw never returns NULL.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b) as *mut f32) };
        Self { ptr, len }
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from Box::into_raw of a Box<[f32]> of len.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ))
        });
    }
}

/// A running plugin instance that owns one buffer per port: a block of
/// `block_size` samples per audio port, one value per control port. All
/// are connected once at creation; control inputs start at their defaults
/// (0 when a port has none).
///
/// Dropping it deactivates (if active) and cleans up the instance, then
/// frees the buffers.
pub struct Instance {
    plugin: Plugin,
    descriptor: NonNull<ffi::LADSPA_Descriptor>,
    handle: NonNull<c_void>,
    ports: Vec<RawBuf>,
    block_size: usize,
    active: bool,
}

// SAFETY: LADSPA instances may be created on one thread and run on another
// (every host's audio thread does this); Instance is not Sync, so calls on
// one instance never run concurrently.
unsafe impl Send for Instance {}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("plugin", &self.plugin)
            .field("block_size", &self.block_size)
            .field("active", &self.active)
            .finish()
    }
}

impl Instance {
    /// Instantiates `plugin` at `sample_rate`, allocates and connects a
    /// buffer for every port, and sets control inputs to their defaults.
    /// Not active yet: call [`Instance::activate`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a zero sample rate or block size;
    /// [`ErrorKind::InstantiateFailed`] when the plugin returns NULL.
    pub fn new(plugin: Plugin, sample_rate: u32, block_size: usize) -> Result<Instance> {
        if sample_rate == 0 || block_size == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "sample rate and block size must both be at least 1",
            ));
        }
        let descriptor = plugin.descriptor();
        // SAFETY: the descriptor lives as long as the library, which `plugin` keeps loaded.
        let d = unsafe { descriptor.as_ref() };
        let instantiate = d.instantiate.expect("checked at load");
        // SAFETY: instantiate is the plugin's own function, given its own descriptor.
        let handle = unsafe { instantiate(descriptor.as_ptr(), sample_rate as c_ulong) };
        let handle = NonNull::new(handle).ok_or_else(|| {
            Error::new(
                ErrorKind::InstantiateFailed,
                format!(
                    "plugin {} ({}) refused to instantiate at {sample_rate} Hz (instantiate returned NULL)",
                    plugin.info().label,
                    plugin.library.path.display()
                ),
            )
        })?;
        let info = plugin.info();
        let mut ports = Vec::with_capacity(info.ports.len());
        for p in &info.ports {
            let buf = RawBuf::new(match p.kind {
                PortKind::Audio => block_size,
                PortKind::Control => 1,
            });
            if p.is_control_input() {
                let v = p.hints.default_value(sample_rate as f32).unwrap_or(0.0);
                // SAFETY: buf holds at least one f32.
                unsafe { buf.ptr.as_ptr().write(v) };
            }
            ports.push(buf);
        }
        let mut inst = Instance {
            plugin: plugin.clone(),
            descriptor,
            handle,
            ports,
            block_size,
            active: false,
        };
        let connect = d.connect_port.expect("checked at load");
        for (i, buf) in inst.ports.iter().enumerate() {
            // SAFETY: a live handle of this descriptor; the buffer outlives the
            // instance (freed after cleanup in Drop) and is large enough for the port.
            unsafe { connect(handle.as_ptr(), i as c_ulong, buf.ptr.as_ptr()) };
        }
        inst.active = false;
        Ok(inst)
    }

    fn d(&self) -> &ffi::LADSPA_Descriptor {
        // SAFETY: self.plugin keeps the library, and so the descriptor, alive.
        unsafe { self.descriptor.as_ref() }
    }

    /// The plugin this is an instance of.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The largest block [`Instance::run`] accepts.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// True between [`Instance::activate`] and [`Instance::deactivate`].
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Calls the plugin's `activate` (if it has one). Does nothing when active.
    pub fn activate(&mut self) {
        if self.active {
            return;
        }
        if let Some(f) = self.d().activate {
            // SAFETY: live handle; ladspa.h allows activate once before run.
            unsafe { f(self.handle.as_ptr()) };
        }
        self.active = true;
    }

    /// Calls the plugin's `deactivate` (if it has one). Does nothing when not active.
    pub fn deactivate(&mut self) {
        if !self.active {
            return;
        }
        if let Some(f) = self.d().deactivate {
            // SAFETY: live, active handle.
            unsafe { f(self.handle.as_ptr()) };
        }
        self.active = false;
    }

    fn port(&self, port: usize, kind: PortKind) -> Result<&RawBuf, RunError> {
        match self.plugin.info().ports.get(port) {
            Some(p) if p.kind == kind => Ok(&self.ports[port]),
            _ => Err(RunError::BadPort(port)),
        }
    }

    /// Sets a control port's value (inputs are what the plugin reads).
    /// **RT-safe.**
    ///
    /// # Errors
    /// [`RunError::BadPort`] when `port` is not a control port.
    pub fn set_control(&mut self, port: usize, value: f32) -> Result<(), RunError> {
        let b = self.port(port, PortKind::Control)?;
        // SAFETY: the buffer holds one f32; no plugin call runs concurrently (&mut self).
        unsafe { b.ptr.as_ptr().write(value) };
        Ok(())
    }

    /// A control port's current value (outputs are what the plugin wrote).
    /// **RT-safe.**
    pub fn control(&self, port: usize) -> Option<f32> {
        let b = self.port(port, PortKind::Control).ok()?;
        // SAFETY: the buffer holds one f32; the plugin writes only inside run (&mut self).
        Some(unsafe { b.ptr.as_ptr().read() })
    }

    /// An audio port's whole buffer (`block_size` samples). **RT-safe.**
    pub fn audio(&self, port: usize) -> Option<&[f32]> {
        let b = self.port(port, PortKind::Audio).ok()?;
        // SAFETY: a live allocation of block_size floats; the plugin only
        // touches it inside run(), which needs &mut self.
        Some(unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), self.block_size) })
    }

    /// An audio port's whole buffer, to fill inputs. **RT-safe.**
    pub fn audio_mut(&mut self, port: usize) -> Option<&mut [f32]> {
        let b = self.port(port, PortKind::Audio).ok()?;
        // SAFETY: as in audio(); &mut self makes this the only reference.
        Some(unsafe { std::slice::from_raw_parts_mut(b.ptr.as_ptr(), self.block_size) })
    }

    fn check(&self, frames: usize) -> Result<(), RunError> {
        if frames > self.block_size {
            return Err(RunError::BlockTooLarge {
                frames,
                capacity: self.block_size,
            });
        }
        if !self.active {
            return Err(RunError::NotActive);
        }
        Ok(())
    }

    /// Runs the plugin on the first `frames` samples of each audio buffer,
    /// overwriting the outputs. **RT-safe** (as far as the plugin's run() is).
    ///
    /// # Errors
    /// [`RunError::BlockTooLarge`] or [`RunError::NotActive`]; the plugin is
    /// not called then.
    pub fn run(&mut self, frames: usize) -> Result<(), RunError> {
        self.check(frames)?;
        let run = self.d().run.expect("checked at load");
        // SAFETY: live, active handle; every port is connected to a buffer of
        // at least `frames` samples (checked above).
        unsafe { run(self.handle.as_ptr(), frames as c_ulong) };
        Ok(())
    }

    /// Runs the plugin adding its gain-scaled output to what the output
    /// buffers hold. **RT-safe** (as far as the plugin's run_adding() is).
    ///
    /// # Errors
    /// [`RunError::NoRunAdding`], [`RunError::BlockTooLarge`] or [`RunError::NotActive`].
    pub fn run_adding(&mut self, frames: usize) -> Result<(), RunError> {
        let f = self.d().run_adding.ok_or(RunError::NoRunAdding)?;
        if self.d().set_run_adding_gain.is_none() {
            return Err(RunError::NoRunAdding);
        }
        self.check(frames)?;
        // SAFETY: as in run().
        unsafe { f(self.handle.as_ptr(), frames as c_ulong) };
        Ok(())
    }

    /// Sets the gain [`Instance::run_adding`] scales by. **RT-safe.**
    ///
    /// # Errors
    /// [`RunError::NoRunAdding`] when the plugin has no run_adding().
    pub fn set_run_adding_gain(&mut self, gain: f32) -> Result<(), RunError> {
        let d = self.d();
        match (d.run_adding, d.set_run_adding_gain) {
            (Some(_), Some(f)) => {
                // SAFETY: live handle; the plugin provides both functions.
                unsafe { f(self.handle.as_ptr(), gain) };
                Ok(())
            }
            _ => Err(RunError::NoRunAdding),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.deactivate();
        if let Some(cleanup) = self.d().cleanup {
            // SAFETY: live, inactive handle, never used again.
            unsafe { cleanup(self.handle.as_ptr()) };
        }
        // The port buffers are freed after this, when `ports` drops.
    }
}
