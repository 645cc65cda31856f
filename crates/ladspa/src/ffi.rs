//! Raw LADSPA 1.1 declarations, written from the ABI that `ladspa.h`
//! documents (ladspa-sdk 1.17). Nothing here is safe to call directly: the
//! host in [`crate::plugin`] checks every pointer before it uses one, and
//! plugins written in Rust (`crates/plugins/*`) build these structs
//! statically.
//!
//! `unsigned long` is `c_ulong` and `int` is `c_int` exactly as the header
//! has them, so the layout matches C on every Linux target.

#![allow(non_camel_case_types, non_snake_case)]

use std::os::raw::{c_char, c_int, c_ulong, c_void};

/// `LADSPA_Data`: every sample and control value is a 32-bit float.
pub type LADSPA_Data = f32;
/// `LADSPA_Properties`: OR of the `PROPERTY_*` flags.
pub type LADSPA_Properties = c_int;
/// `LADSPA_PortDescriptor`: OR of the `PORT_*` flags.
pub type LADSPA_PortDescriptor = c_int;
/// `LADSPA_PortRangeHintDescriptor`: OR of the `HINT_*` flags.
pub type LADSPA_PortRangeHintDescriptor = c_int;
/// `LADSPA_Handle`: an opaque plugin instance.
pub type LADSPA_Handle = *mut c_void;

/// The plugin has a real-time dependency (e.g. listens to a MIDI device).
pub const PROPERTY_REALTIME: c_int = 0x1;
/// The plugin fails when an input and an output share one buffer.
pub const PROPERTY_INPLACE_BROKEN: c_int = 0x2;
/// The plugin's run() does not allocate, block or call outside libc/libm.
pub const PROPERTY_HARD_RT_CAPABLE: c_int = 0x4;

/// Port is an input.
pub const PORT_INPUT: c_int = 0x1;
/// Port is an output.
pub const PORT_OUTPUT: c_int = 0x2;
/// Port carries one control value.
pub const PORT_CONTROL: c_int = 0x4;
/// Port carries a block of audio.
pub const PORT_AUDIO: c_int = 0x8;

/// `LowerBound` is meaningful.
pub const HINT_BOUNDED_BELOW: c_int = 0x1;
/// `UpperBound` is meaningful.
pub const HINT_BOUNDED_ABOVE: c_int = 0x2;
/// Boolean: `<= 0` is off, `> 0` is on.
pub const HINT_TOGGLED: c_int = 0x4;
/// Bounds are multiples of the sample rate.
pub const HINT_SAMPLE_RATE: c_int = 0x8;
/// Best shown on a logarithmic scale.
pub const HINT_LOGARITHMIC: c_int = 0x10;
/// Integer values; bounds are slightly wider than the integer range.
pub const HINT_INTEGER: c_int = 0x20;
/// Mask of the default-value field.
pub const HINT_DEFAULT_MASK: c_int = 0x3C0;
/// No default.
pub const HINT_DEFAULT_NONE: c_int = 0x0;
/// Default: the lower bound.
pub const HINT_DEFAULT_MINIMUM: c_int = 0x40;
/// Default: 75 % lower + 25 % upper (geometric when logarithmic).
pub const HINT_DEFAULT_LOW: c_int = 0x80;
/// Default: midway (geometric when logarithmic).
pub const HINT_DEFAULT_MIDDLE: c_int = 0xC0;
/// Default: 25 % lower + 75 % upper (geometric when logarithmic).
pub const HINT_DEFAULT_HIGH: c_int = 0x100;
/// Default: the upper bound.
pub const HINT_DEFAULT_MAXIMUM: c_int = 0x140;
/// Default: 0.
pub const HINT_DEFAULT_0: c_int = 0x200;
/// Default: 1.
pub const HINT_DEFAULT_1: c_int = 0x240;
/// Default: 100.
pub const HINT_DEFAULT_100: c_int = 0x280;
/// Default: 440 (concert A).
pub const HINT_DEFAULT_440: c_int = 0x2C0;

/// `LADSPA_PortRangeHint`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LADSPA_PortRangeHint {
    /// OR of the `HINT_*` flags.
    pub HintDescriptor: LADSPA_PortRangeHintDescriptor,
    /// Inclusive lower bound, when `HINT_BOUNDED_BELOW`.
    pub LowerBound: LADSPA_Data,
    /// Inclusive upper bound, when `HINT_BOUNDED_ABOVE`.
    pub UpperBound: LADSPA_Data,
}

/// `LADSPA_Descriptor`: one plugin type in a library.
#[repr(C)]
#[derive(Debug)]
pub struct LADSPA_Descriptor {
    /// Globally unique ID (hosts may assume `< 0x1000000`).
    pub UniqueID: c_ulong,
    /// Unique, case-sensitive label within the library; no white space.
    pub Label: *const c_char,
    /// OR of the `PROPERTY_*` flags.
    pub Properties: LADSPA_Properties,
    /// Human-readable name.
    pub Name: *const c_char,
    /// Maker; may be empty but not NULL.
    pub Maker: *const c_char,
    /// Copyright; "None" when none applies.
    pub Copyright: *const c_char,
    /// Number of ports (inputs and outputs).
    pub PortCount: c_ulong,
    /// `PortCount` port descriptors.
    pub PortDescriptors: *const LADSPA_PortDescriptor,
    /// `PortCount` NUL-terminated port names.
    pub PortNames: *const *const c_char,
    /// `PortCount` range hints.
    pub PortRangeHints: *const LADSPA_PortRangeHint,
    /// The plugin's own data; hosts must not touch it.
    pub ImplementationData: *mut c_void,
    /// Creates an instance; returns NULL on failure.
    pub instantiate: Option<
        unsafe extern "C" fn(
            descriptor: *const LADSPA_Descriptor,
            sample_rate: c_ulong,
        ) -> LADSPA_Handle,
    >,
    /// Points a port at host memory (an array for audio, one value for control).
    pub connect_port: Option<
        unsafe extern "C" fn(instance: LADSPA_Handle, port: c_ulong, data: *mut LADSPA_Data),
    >,
    /// Resets state; optional (NULL when there is nothing to do).
    pub activate: Option<unsafe extern "C" fn(instance: LADSPA_Handle)>,
    /// Processes `sample_count` frames, writing the outputs.
    pub run: Option<unsafe extern "C" fn(instance: LADSPA_Handle, sample_count: c_ulong)>,
    /// Like `run`, but adds gain-scaled output to the buffers; optional.
    pub run_adding: Option<unsafe extern "C" fn(instance: LADSPA_Handle, sample_count: c_ulong)>,
    /// Sets the `run_adding` gain; present exactly when `run_adding` is.
    pub set_run_adding_gain:
        Option<unsafe extern "C" fn(instance: LADSPA_Handle, gain: LADSPA_Data)>,
    /// Counterpart of `activate`; optional.
    pub deactivate: Option<unsafe extern "C" fn(instance: LADSPA_Handle)>,
    /// Destroys the instance.
    pub cleanup: Option<unsafe extern "C" fn(instance: LADSPA_Handle)>,
}

/// `LADSPA_Descriptor_Function`: the `ladspa_descriptor` symbol every
/// plugin library exports. Indexes from 0; NULL past the last plugin.
pub type LADSPA_Descriptor_Function =
    unsafe extern "C" fn(index: c_ulong) -> *const LADSPA_Descriptor;

/// The name of the symbol a plugin library exports.
pub const DESCRIPTOR_SYMBOL: &[u8] = b"ladspa_descriptor\0";

// --- LV2 core (`lv2/core/lv2.h`, LV2 1.18): the part firmtime's plugins
// export. Port types, ranges and hints live in the bundle's Turtle files,
// not in the binary (see `crate::lv2`).

/// `LV2_Handle`: an opaque plugin instance.
pub type LV2_Handle = *mut c_void;

/// `LV2_Feature`: a host feature offered at instantiate.
#[repr(C)]
#[derive(Debug)]
pub struct LV2_Feature {
    /// The feature's URI.
    pub URI: *const c_char,
    /// Its data (feature-specific; may be NULL).
    pub data: *mut c_void,
}

/// `LV2_Descriptor`: one plugin type in an LV2 binary.
#[repr(C)]
#[derive(Debug)]
pub struct LV2_Descriptor {
    /// The plugin's URI, as in the bundle's Turtle.
    pub URI: *const c_char,
    /// Creates an instance; NULL on failure.
    pub instantiate: Option<
        unsafe extern "C" fn(
            descriptor: *const LV2_Descriptor,
            sample_rate: f64,
            bundle_path: *const c_char,
            features: *const *const LV2_Feature,
        ) -> LV2_Handle,
    >,
    /// Points port `port` (its `lv2:index`) at host memory.
    pub connect_port:
        Option<unsafe extern "C" fn(instance: LV2_Handle, port: u32, data_location: *mut c_void)>,
    /// Resets state before runs.
    pub activate: Option<unsafe extern "C" fn(instance: LV2_Handle)>,
    /// Processes `sample_count` frames.
    pub run: Option<unsafe extern "C" fn(instance: LV2_Handle, sample_count: u32)>,
    /// Counterpart of `activate`.
    pub deactivate: Option<unsafe extern "C" fn(instance: LV2_Handle)>,
    /// Destroys the instance.
    pub cleanup: Option<unsafe extern "C" fn(instance: LV2_Handle)>,
    /// Extension interfaces by URI; NULL for none.
    pub extension_data: Option<unsafe extern "C" fn(uri: *const c_char) -> *const c_void>,
}

/// `LV2_Descriptor_Function`: the `lv2_descriptor` symbol of an LV2 binary.
/// Indexes from 0; NULL past the last plugin.
pub type LV2_Descriptor_Function = unsafe extern "C" fn(index: u32) -> *const LV2_Descriptor;

/// The name of the symbol an LV2 binary exports.
pub const LV2_DESCRIPTOR_SYMBOL: &[u8] = b"lv2_descriptor\0";
