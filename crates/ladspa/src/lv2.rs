//! The same plugins as LV2: `lv2_descriptor` from the [`ExportedPlugin`]
//! a library already implements for LADSPA.
//!
//! [`export_lv2!`](crate::export_lv2) exports `lv2_descriptor`, with one
//! LV2 plugin per LADSPA descriptor of the library, at the same index:
//! URI `PREFIX + label`, the same ports in the same order (`lv2:index` =
//! LADSPA port number), and the same instance type behind them. An LV2
//! binary carries no port information: that is in the bundle's Turtle,
//! which [`crate::bundle`] writes from the LADSPA descriptors
//! (`firmtime ladspa lv2-bundle`). Control and audio ports are `float`
//! in both APIs, so `connect_port` and `run` pass straight through.
//!
//! Since a host trusts the Turtle for the port layout, a bundle written
//! for other descriptors (the proxy's ports follow its configuration and
//! the remote plugin, or its placeholder when the worker is
//! away at load and nothing is cached) would make it hand a one-float
//! control to a port the plugin reads as audio. So `instantiate` reads the
//! marker line [`PORTS_MARKER`] of the plugin's `.ttl` in `bundle_path`;
//! when it differs from the descriptor's [`port_signature`], the instance
//! passes audio through with the bundle's ports (audio input k to audio
//! output k, zeros for outputs without an input or for control outputs),
//! as the proxy's placeholder does in real time, and says once on stderr to write
//! the bundle again. Without a readable marker (not a bundle firmtime
//! wrote) it returns NULL.
//!
//! Every trampoline checks its pointers and runs inside `catch_unwind`,
//! as the LADSPA ones in [`crate::export`] do; `extension_data` offers
//! nothing.
//!
//! # Real-time contract
//! `run` adds a NULL check and a `catch_unwind` to
//! [`ExportedPlugin::run`]: it is as RT-safe as that method. The table of
//! descriptors is built at the first `lv2_descriptor` call, off the RT path.
//!
//! # Example
//! The plugin of [`crate::export`]'s example, as LADSPA and LV2:
//! ```
//! use firmtime_ladspa::export::{entry_points, ExportedPlugin};
//! use firmtime_ladspa::ffi::*;
//! use std::ffi::CStr;
//! use std::os::raw::{c_int, c_ulong};
//!
//! /// Passes its input through.
//! struct Wire;
//!
//! struct Static<T>(T);
//! // SAFETY: points to immutable 'static data only.
//! unsafe impl<T> Sync for Static<T> {}
//!
//! static PORTS: [c_int; 2] = [PORT_INPUT | PORT_AUDIO, PORT_OUTPUT | PORT_AUDIO];
//! static DESCRIPTOR: Static<LADSPA_Descriptor> = Static(LADSPA_Descriptor {
//!     UniqueID: 4_700_998,
//!     Label: c"wire".as_ptr(),
//!     PortCount: 2,
//!     PortDescriptors: PORTS.as_ptr(),
//!     ..entry_points::<Wire>()
//! });
//!
//! impl ExportedPlugin for Wire {
//!     fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
//!         (index == 0).then_some(&DESCRIPTOR.0)
//!     }
//!     fn instantiate(_: &LADSPA_Descriptor, _rate: c_ulong) -> Option<Self> {
//!         Some(Wire)
//!     }
//!     fn connect_port(&mut self, _port: usize, _data: *mut f32) {}
//!     fn run(&mut self, _frames: usize) {}
//! }
//!
//! firmtime_ladspa::export_plugin!(Wire);
//! firmtime_ladspa::export_lv2!(Wire, "urn:firmtime:example:");
//!
//! // What an LV2 host does first (the bundle's Turtle names this URI):
//! // SAFETY: any index is allowed; a non-NULL URI is a C string.
//! unsafe {
//!     let d = &*lv2_descriptor(0);
//!     assert_eq!(CStr::from_ptr(d.URI), c"urn:firmtime:example:wire");
//!     assert!(lv2_descriptor(1).is_null());
//! }
//! ```

use crate::export::ExportedPlugin;
use crate::ffi::{
    LADSPA_Descriptor, LV2_Descriptor, LV2_Feature, LV2_Handle, PORT_AUDIO, PORT_INPUT,
};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_ulong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

/// The comment line of a plugin's `.ttl` that records the port layout the
/// file was written for (followed by [`port_signature`]).
pub const PORTS_MARKER: &str = "# firmtime-ports: ";

/// The layout of ports as one line: `control in, audio in, audio out, …`,
/// from `(input, audio)` per port.
pub fn port_signature(ports: impl IntoIterator<Item = (bool, bool)>) -> String {
    ports
        .into_iter()
        .map(|(input, audio)| {
            format!(
                "{} {}",
                if audio { "audio" } else { "control" },
                if input { "in" } else { "out" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `text` with every character other than `A-Za-z0-9_-` replaced by `_`:
/// safe in file names, LV2 symbols and the labels hosts accept.
pub fn plain_name(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file name of a plugin's `.ttl` in a bundle: its URI through
/// [`plain_name`], plus `.ttl`.
pub fn ttl_file_name(uri: &str) -> String {
    format!("{}.ttl", plain_name(uri))
}

/// What a library exports as LV2, implemented by
/// [`export_lv2!`](crate::export_lv2) for a hidden type: the plugin type,
/// the URI prefix and the table of descriptors.
pub trait Lv2Export: 'static {
    /// The instance type (the library's LADSPA plugin).
    type Plugin: ExportedPlugin;
    /// URIs are this prefix followed by the LADSPA label.
    const URI_PREFIX: &'static str;
    /// The library's table, built at the first `lv2_descriptor` call.
    fn table() -> &'static Lv2Table;
}

/// One LV2 plugin: its descriptor, the LADSPA descriptor behind it, and
/// its layout. Hosts get pointers to entries of the finished table only.
struct Lv2Entry {
    descriptor: LV2_Descriptor,
    ladspa: &'static LADSPA_Descriptor,
    uri: CString,
    signature: String,
}

/// The LV2 descriptors of a library: one per LADSPA descriptor, same index.
pub struct Lv2Table(OnceLock<Vec<Lv2Entry>>);

// SAFETY: the entries are written once (OnceLock) and never mutated; their
// raw pointers point at their own CStrings and at 'static LADSPA data.
unsafe impl Sync for Lv2Table {}

impl Lv2Table {
    /// An empty table (filled at first use).
    pub const fn new() -> Self {
        Lv2Table(OnceLock::new())
    }
}

impl std::fmt::Debug for Lv2Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lv2Table")
            .field("plugins", &self.0.get().map(Vec::len))
            .finish()
    }
}

impl Default for Lv2Table {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads a C string that may be NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the call.
unsafe fn c_str(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn signature_of(d: &LADSPA_Descriptor) -> String {
    let n = d.PortCount as usize;
    if n > 0 && d.PortDescriptors.is_null() {
        return String::new();
    }
    port_signature((0..n).map(|i| {
        // SAFETY: PortDescriptors holds PortCount entries (ladspa.h).
        let p = unsafe { *d.PortDescriptors.add(i) };
        (p & PORT_INPUT != 0, p & PORT_AUDIO != 0)
    }))
}

fn entries<E: Lv2Export>() -> &'static [Lv2Entry] {
    E::table().0.get_or_init(|| {
        let mut v = Vec::new();
        while let Some(d) = E::Plugin::descriptor(v.len()) {
            // SAFETY: a descriptor's label is NULL or a static C string.
            let label = unsafe { c_str(d.Label) }.unwrap_or_else(|| format!("_{}", v.len()));
            let uri = CString::new(format!("{}{label}", E::URI_PREFIX).replace('\0', "_"))
                .unwrap_or_default();
            let mut e = Lv2Entry {
                descriptor: LV2_Descriptor {
                    URI: std::ptr::null(),
                    instantiate: Some(instantiate::<E>),
                    connect_port: Some(connect_port::<E>),
                    activate: Some(activate::<E>),
                    run: Some(run::<E>),
                    deactivate: Some(deactivate::<E>),
                    cleanup: Some(cleanup::<E>),
                    extension_data: Some(extension_data),
                },
                ladspa: d,
                signature: signature_of(d),
                uri,
            };
            // The CString's buffer does not move with the entry.
            e.descriptor.URI = e.uri.as_ptr();
            v.push(e);
        }
        v
    })
}

/// Runs `f`, turning a panic into `fallback`: a panic must never unwind
/// into the C host.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The body of `lv2_descriptor` (which [`export_lv2!`](crate::export_lv2)
/// exports): descriptor `index`, NULL past the last or on a panic.
pub fn descriptor<E: Lv2Export>(index: u32) -> *const LV2_Descriptor {
    guard(std::ptr::null(), || {
        entries::<E>()
            .get(index as usize)
            .map_or(std::ptr::null(), |e| &e.descriptor as *const _)
    })
}

/// One line on stderr: the only channel a plugin has to its user.
fn say(uri: &CStr, msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}: {msg}", uri.to_string_lossy());
}

/// The layout a bundle's `.ttl` declares for `e`: `Ok(None)` when it is
/// `e`'s own, `Ok(Some(ports))` when it differs (the message to print
/// second), `Err` when it cannot be read.
#[allow(clippy::type_complexity)]
fn declared_layout(
    e: &Lv2Entry,
    bundle: &Path,
) -> Result<Option<(Vec<(bool, bool)>, String)>, String> {
    let uri = e.uri.to_string_lossy();
    let file = bundle.join(ttl_file_name(&uri));
    let regen = "write the bundle again (firmtime ladspa lv2-bundle DIR LIBRARY.so…)";
    let text = std::fs::read_to_string(&file)
        .map_err(|err| format!("cannot read {}: {err}; {regen}", file.display()))?;
    let declared = text
        .lines()
        .find_map(|l| l.strip_prefix(PORTS_MARKER))
        .map(str::trim)
        .ok_or_else(|| {
            format!(
                "{} has no `{}` line; {regen}",
                file.display(),
                PORTS_MARKER.trim()
            )
        })?;
    if declared == e.signature {
        return Ok(None);
    }
    let ports = parse_signature(declared)
        .ok_or_else(|| format!("{}: cannot read `{declared}`; {regen}", file.display()))?;
    Ok(Some((
        ports,
        format!(
            "{} declares ports [{declared}] but the plugin now has [{}] (its configuration or \
             the remote plugin changed, or its worker was away at load with nothing cached); \
             passing audio through: {regen}",
            file.display(),
            e.signature
        ),
    )))
}

/// The inverse of [`port_signature`]; `None` for anything else.
fn parse_signature(s: &str) -> Option<Vec<(bool, bool)>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(", ")
        .map(|p| match p {
            "audio in" => Some((true, true)),
            "audio out" => Some((false, true)),
            "control in" => Some((true, false)),
            "control out" => Some((false, false)),
            _ => None,
        })
        .collect()
}

/// An instance with a bundle written for other ports: passes audio through.
struct Dry {
    /// `(input, audio)` per port, as the bundle declares them.
    ports: Vec<(bool, bool)>,
    data: Vec<*mut f32>,
}

impl Dry {
    /// **RT-safe.** Audio input k to audio output k (zeros for outputs
    /// without an input), 0 into control outputs.
    fn run(&mut self, n: usize) {
        let mut inputs = self
            .ports
            .iter()
            .zip(&self.data)
            .filter(|((input, audio), _)| *input && *audio)
            .map(|(_, d)| *d);
        for (&(input, audio), &out) in self.ports.iter().zip(&self.data) {
            if input || out.is_null() {
                continue;
            }
            if !audio {
                // SAFETY: the host connected this control output to one f32.
                unsafe { out.write(0.0) };
                continue;
            }
            match inputs.next() {
                // SAFETY: the host connected both to n samples; ptr::copy allows overlap.
                Some(i) if !i.is_null() => unsafe { std::ptr::copy(i, out, n) },
                // SAFETY: as above, for the output alone.
                _ => unsafe { std::slice::from_raw_parts_mut(out, n).fill(0.0) },
            }
        }
    }
}

/// What an LV2 handle points to.
enum Lv2Instance<P> {
    Plugin(P),
    Dry(Dry),
}

/// # Safety
/// `h` is NULL or a handle from `instantiate::<E>` not yet cleaned up.
unsafe fn instance<'a, E: Lv2Export>(h: LV2_Handle) -> Option<&'a mut Lv2Instance<E::Plugin>> {
    // SAFETY: per the contract, a non-NULL h points to a live instance.
    unsafe { (h as *mut Lv2Instance<E::Plugin>).as_mut() }
}

/// LV2 `instantiate`: NULL for a descriptor this library did not make, a
/// sample rate that is not a positive whole number of Hz within
/// `c_ulong`, a missing bundle path or marker line, a refusal of
/// [`ExportedPlugin::instantiate`] or a panic; a pass-through instance
/// for a bundle written for other ports.
///
/// # Safety
/// `descriptor` is NULL or valid; `bundle_path` is NULL or a C string.
pub unsafe extern "C" fn instantiate<E: Lv2Export>(
    descriptor: *const LV2_Descriptor,
    sample_rate: f64,
    bundle_path: *const c_char,
    _features: *const *const LV2_Feature,
) -> LV2_Handle {
    guard(std::ptr::null_mut(), || {
        let Some(e) = entries::<E>()
            .iter()
            .find(|e| std::ptr::eq(&e.descriptor, descriptor))
        else {
            return std::ptr::null_mut();
        };
        let rate = sample_rate.round();
        if !(rate >= 1.0 && rate <= u32::MAX as f64) {
            say(&e.uri, &format!("sample rate {sample_rate} is not usable"));
            return std::ptr::null_mut();
        }
        // SAFETY: per the contract.
        let Some(bundle) = (unsafe { c_str(bundle_path) }) else {
            say(&e.uri, "the host gave no bundle path");
            return std::ptr::null_mut();
        };
        let inst = match declared_layout(e, Path::new(&bundle)) {
            Err(why) => {
                say(&e.uri, &why);
                return std::ptr::null_mut();
            }
            Ok(Some((ports, why))) => {
                say(&e.uri, &why);
                let data = vec![std::ptr::null_mut(); ports.len()];
                Lv2Instance::Dry(Dry { ports, data })
            }
            Ok(None) => match E::Plugin::instantiate(e.ladspa, rate as c_ulong) {
                Some(p) => Lv2Instance::Plugin(p),
                None => return std::ptr::null_mut(),
            },
        };
        Box::into_raw(Box::new(inst)) as LV2_Handle
    })
}

/// LV2 `connect_port`; ignores a NULL handle.
///
/// # Safety
/// `h` is NULL or a live handle from [`instantiate::<E>`](instantiate).
pub unsafe extern "C" fn connect_port<E: Lv2Export>(h: LV2_Handle, port: u32, data: *mut c_void) {
    guard((), || {
        // SAFETY: per the contract.
        match unsafe { instance::<E>(h) } {
            Some(Lv2Instance::Plugin(p)) => p.connect_port(port as usize, data as *mut f32),
            Some(Lv2Instance::Dry(d)) => {
                if let Some(slot) = d.data.get_mut(port as usize) {
                    *slot = data as *mut f32;
                }
            }
            None => {}
        }
    })
}

/// LV2 `activate`; ignores a NULL handle.
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn activate<E: Lv2Export>(h: LV2_Handle) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(Lv2Instance::Plugin(p)) = unsafe { instance::<E>(h) } {
            p.activate();
        }
    })
}

/// LV2 `run`; ignores a NULL handle. As RT-safe as [`ExportedPlugin::run`].
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn run<E: Lv2Export>(h: LV2_Handle, sample_count: u32) {
    guard((), || {
        // SAFETY: per the contract.
        match unsafe { instance::<E>(h) } {
            Some(Lv2Instance::Plugin(p)) => p.run(sample_count as usize),
            Some(Lv2Instance::Dry(d)) => d.run(sample_count as usize),
            None => {}
        }
    })
}

/// LV2 `deactivate`; ignores a NULL handle.
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn deactivate<E: Lv2Export>(h: LV2_Handle) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(Lv2Instance::Plugin(p)) = unsafe { instance::<E>(h) } {
            p.deactivate();
        }
    })
}

/// LV2 `cleanup`: [`ExportedPlugin::cleanup`]; ignores a NULL handle.
///
/// # Safety
/// `h` is NULL or a live handle from [`instantiate::<E>`](instantiate),
/// never used again.
pub unsafe extern "C" fn cleanup<E: Lv2Export>(h: LV2_Handle) {
    guard((), || {
        if h.is_null() {
            return;
        }
        // SAFETY: h came from Box::into_raw in instantiate and is never used again.
        let p = unsafe { Box::from_raw(h as *mut Lv2Instance<E::Plugin>) };
        if let Lv2Instance::Plugin(p) = *p {
            p.cleanup();
        }
    })
}

/// LV2 `extension_data`: no extensions.
///
/// # Safety
/// Any pointer is accepted; it is not read.
pub unsafe extern "C" fn extension_data(_uri: *const c_char) -> *const c_void {
    std::ptr::null()
}

/// Exports a library's LV2 entry point, `lv2_descriptor`, for a type
/// implementing [`ExportedPlugin`](crate::export::ExportedPlugin): one LV2
/// plugin per LADSPA descriptor, URI `$prefix` + label. Invoke once per
/// library, beside [`export_plugin!`](crate::export_plugin). See
/// [`lv2`](crate::lv2).
#[macro_export]
macro_rules! export_lv2 {
    ($plugin:ty, $prefix:expr) => {
        /// The library's LV2 table (see `firmtime_ladspa::lv2`).
        struct FirmtimeLv2Export;

        impl $crate::lv2::Lv2Export for FirmtimeLv2Export {
            type Plugin = $plugin;
            const URI_PREFIX: &'static str = $prefix;
            fn table() -> &'static $crate::lv2::Lv2Table {
                static TABLE: $crate::lv2::Lv2Table = $crate::lv2::Lv2Table::new();
                &TABLE
            }
        }

        /// The LV2 entry point: descriptor `index` of this library, NULL
        /// past the last.
        ///
        /// # Safety
        /// Callable with any index (part of the LV2 ABI).
        #[no_mangle]
        pub unsafe extern "C" fn lv2_descriptor(index: u32) -> *const $crate::ffi::LV2_Descriptor {
            $crate::lv2::descriptor::<FirmtimeLv2Export>(index)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::entry_points;
    use crate::ffi::*;
    use std::os::raw::c_int;

    /// Doubles its input; panics on a run of 13 frames.
    struct Twice {
        ports: [*mut f32; 2],
    }

    struct Static<T>(T);
    // SAFETY: points to immutable 'static data only.
    unsafe impl<T> Sync for Static<T> {}

    static PORTS: [c_int; 2] = [PORT_INPUT | PORT_AUDIO, PORT_OUTPUT | PORT_AUDIO];
    static D: Static<LADSPA_Descriptor> = Static(LADSPA_Descriptor {
        UniqueID: 2,
        Label: c"twice".as_ptr(),
        PortCount: 2,
        PortDescriptors: PORTS.as_ptr(),
        ..entry_points::<Twice>()
    });

    impl ExportedPlugin for Twice {
        fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
            (index == 0).then_some(&D.0)
        }
        fn instantiate(_: &LADSPA_Descriptor, rate: c_ulong) -> Option<Self> {
            (rate == 44_100).then_some(Twice {
                ports: [std::ptr::null_mut(); 2],
            })
        }
        fn connect_port(&mut self, port: usize, data: *mut f32) {
            if let Some(s) = self.ports.get_mut(port) {
                *s = data;
            }
        }
        fn run(&mut self, n: usize) {
            assert_ne!(n, 13, "run panics");
            for k in 0..n {
                // SAFETY: the test connected both ports to n samples.
                unsafe { *self.ports[1].add(k) = 2.0 * *self.ports[0].add(k) };
            }
        }
    }

    crate::export_lv2!(Twice, "urn:firmtime:test:");

    /// The test bundle's directory, removed (with what is in it) on drop.
    struct Bundle(std::path::PathBuf);

    impl Drop for Bundle {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bundle(ttl: &str) -> (Bundle, CString) {
        let dir = std::env::temp_dir().join(format!("ft-lv2-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("urn_firmtime_test_twice.ttl"), ttl).unwrap();
        let c = CString::new(dir.to_str().unwrap()).unwrap();
        (Bundle(dir), c)
    }

    #[test]
    fn one_lv2_plugin_per_ladspa_descriptor() {
        // SAFETY: any index is allowed.
        let d = unsafe { &*lv2_descriptor(0) };
        // SAFETY: the URI is a C string of the table.
        assert_eq!(unsafe { CStr::from_ptr(d.URI) }, c"urn:firmtime:test:twice");
        // SAFETY: as above.
        assert!(unsafe { lv2_descriptor(1) }.is_null());
        assert_eq!(
            ttl_file_name("urn:firmtime:test:twice"),
            "urn_firmtime_test_twice.ttl"
        );
        assert_eq!(signature_of(&D.0), "audio in, audio out");
    }

    #[test]
    fn runs_checked_and_passes_audio_through_with_a_bundle_for_other_ports() {
        // SAFETY: lv2_descriptor(0) exists; handles are used as the LV2 ABI says.
        unsafe {
            let d = &*lv2_descriptor(0);
            let inst = d.instantiate.unwrap();
            let (_dir, good) = bundle("# firmtime-ports: audio in, audio out\n");
            assert!(inst(std::ptr::null(), 44_100.0, good.as_ptr(), std::ptr::null()).is_null());
            assert!(inst(d, 44_100.0, std::ptr::null(), std::ptr::null()).is_null());
            assert!(inst(d, f64::NAN, good.as_ptr(), std::ptr::null()).is_null());
            assert!(inst(d, 48_000.0, good.as_ptr(), std::ptr::null()).is_null());
            let h = inst(d, 44_100.0, good.as_ptr(), std::ptr::null());
            assert!(!h.is_null());
            let (mut i, mut o) = ([1.0f32, -0.5], [0.0f32; 2]);
            d.connect_port.unwrap()(h, 0, i.as_mut_ptr().cast());
            d.connect_port.unwrap()(h, 1, o.as_mut_ptr().cast());
            d.connect_port.unwrap()(h, 7, o.as_mut_ptr().cast());
            d.activate.unwrap()(h);
            d.run.unwrap()(h, 2);
            assert_eq!(o, [2.0, -1.0]);
            d.run.unwrap()(h, 13); // panics inside, caught
            d.run.unwrap()(std::ptr::null_mut(), 2);
            d.deactivate.unwrap()(h);
            d.cleanup.unwrap()(h);
            d.cleanup.unwrap()(std::ptr::null_mut());
            assert!(d.extension_data.unwrap()(c"urn:x".as_ptr()).is_null());
            // A bundle for other ports: a pass-through with the bundle's ports.
            let (_dir, stale) =
                bundle("# firmtime-ports: control in, audio in, audio out, control out\n");
            let e = &entries::<FirmtimeLv2Export>()[0];
            let (ports, why) = declared_layout(e, Path::new(stale.to_str().unwrap()))
                .unwrap()
                .unwrap();
            assert_eq!(
                ports,
                [(true, false), (true, true), (false, true), (false, false)]
            );
            assert!(
                why.contains("declares ports [control in, audio in, audio out, control out] but the plugin now has [audio in, audio out]"),
                "{why}"
            );
            let h = inst(d, 44_100.0, stale.as_ptr(), std::ptr::null());
            assert!(!h.is_null());
            let (mut c, mut i, mut o, mut l) = (5.0f32, [1.0f32, -0.5], [9.0f32; 2], 7.0f32);
            for (k, p) in [&mut c as *mut f32, i.as_mut_ptr(), o.as_mut_ptr(), &mut l]
                .into_iter()
                .enumerate()
            {
                d.connect_port.unwrap()(h, k as u32, p.cast());
            }
            d.activate.unwrap()(h);
            assert_no_alloc::assert_no_alloc(|| d.run.unwrap()(h, 2));
            assert_eq!((o, l, c), ([1.0, -0.5], 0.0, 5.0));
            d.cleanup.unwrap()(h);
            let (_dir, none) = bundle("@prefix lv2: <http://lv2plug.in/ns/lv2core#> .\n");
            let why = declared_layout(e, Path::new(none.to_str().unwrap())).unwrap_err();
            assert!(why.contains("has no `# firmtime-ports:` line"), "{why}");
            assert!(inst(d, 44_100.0, none.as_ptr(), std::ptr::null()).is_null());
            assert_eq!(parse_signature("audio in, midi out"), None);
            assert_eq!(parse_signature(""), Some(vec![]));
        }
    }
}
