//! Writing a LADSPA plugin in Rust: the C entry points, once.
//!
//! A plugin library implements [`ExportedPlugin`] for its instance type and
//! invokes [`export_plugin!`](crate::export_plugin) once. The macro exports
//! `ladspa_descriptor`; [`entry_points`] fills a descriptor's function
//! pointers with this module's `extern "C"` trampolines (`instantiate`,
//! `connect_port`, `activate`, `run`, `deactivate`, `cleanup`). Every
//! trampoline checks its pointers — a NULL handle or descriptor, or a
//! sample rate of 0, does nothing or returns NULL — and runs the plugin's
//! code inside `catch_unwind`, so a panic never crosses into the C host (it
//! does nothing, or returns NULL, instead).
//!
//! # Real-time contract
//! The `run` trampoline adds a NULL check and a `catch_unwind` (free when
//! nothing panics) to the plugin's [`ExportedPlugin::run`]: it is as
//! RT-safe as that method.
//!
//! # Example
//! ```
//! use firmtime_ladspa::export::{entry_points, ExportedPlugin};
//! use firmtime_ladspa::ffi::*;
//! use std::os::raw::{c_char, c_int, c_ulong};
//!
//! /// Halves its input.
//! struct Half {
//!     ports: [*mut f32; 2],
//! }
//!
//! struct Static<T>(T);
//! // SAFETY: points to immutable 'static data only.
//! unsafe impl<T> Sync for Static<T> {}
//!
//! static PORTS: [c_int; 2] = [PORT_INPUT | PORT_AUDIO, PORT_OUTPUT | PORT_AUDIO];
//! static NAMES: Static<[*const c_char; 2]> = Static([c"In".as_ptr(), c"Out".as_ptr()]);
//! static HINTS: [LADSPA_PortRangeHint; 2] = [LADSPA_PortRangeHint {
//!     HintDescriptor: 0,
//!     LowerBound: 0.0,
//!     UpperBound: 0.0,
//! }; 2];
//! static DESCRIPTOR: Static<LADSPA_Descriptor> = Static(LADSPA_Descriptor {
//!     UniqueID: 4_700_999,
//!     Label: c"half".as_ptr(),
//!     Properties: PROPERTY_HARD_RT_CAPABLE,
//!     Name: c"Half".as_ptr(),
//!     Maker: c"nobody".as_ptr(),
//!     Copyright: c"None".as_ptr(),
//!     PortCount: 2,
//!     PortDescriptors: PORTS.as_ptr(),
//!     PortNames: NAMES.0.as_ptr(),
//!     PortRangeHints: HINTS.as_ptr(),
//!     ImplementationData: std::ptr::null_mut(),
//!     ..entry_points::<Half>()
//! });
//!
//! impl ExportedPlugin for Half {
//!     fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
//!         (index == 0).then_some(&DESCRIPTOR.0)
//!     }
//!     fn instantiate(_: &LADSPA_Descriptor, _rate: c_ulong) -> Option<Self> {
//!         Some(Half { ports: [std::ptr::null_mut(); 2] })
//!     }
//!     fn connect_port(&mut self, port: usize, data: *mut f32) {
//!         if let Some(slot) = self.ports.get_mut(port) {
//!             *slot = data;
//!         }
//!     }
//!     fn run(&mut self, n: usize) {
//!         let [i, o] = self.ports;
//!         if i.is_null() || o.is_null() {
//!             return;
//!         }
//!         for k in 0..n {
//!             // SAFETY: the host connected both ports to at least n samples.
//!             unsafe { *o.add(k) = *i.add(k) * 0.5 };
//!         }
//!     }
//! }
//!
//! firmtime_ladspa::export_plugin!(Half);
//!
//! // What a host does:
//! // SAFETY: any index is allowed.
//! let d = unsafe { &*ladspa_descriptor(0) };
//! // SAFETY: `d` came from ladspa_descriptor; the buffers outlive the instance.
//! unsafe {
//!     let h = d.instantiate.unwrap()(d, 48_000);
//!     let (mut inp, mut out) = ([1.0f32, -2.0], [0.0f32; 2]);
//!     d.connect_port.unwrap()(h, 0, inp.as_mut_ptr());
//!     d.connect_port.unwrap()(h, 1, out.as_mut_ptr());
//!     d.run.unwrap()(h, 2);
//!     d.cleanup.unwrap()(h);
//!     assert_eq!(out, [0.5, -1.0]);
//! }
//! ```

use crate::ffi::{LADSPA_Data, LADSPA_Descriptor, LADSPA_Handle};
use std::os::raw::c_ulong;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A LADSPA plugin implemented in Rust: one value per instance, plus the
/// library's descriptors. The exported C functions call these methods
/// with checked pointers and inside `catch_unwind`.
pub trait ExportedPlugin: Sized + 'static {
    /// Whether the descriptors get an `activate` function (calling
    /// [`ExportedPlugin::activate`]); `true` unless overridden.
    const HAS_ACTIVATE: bool = true;
    /// Whether the descriptors get a `deactivate` function (calling
    /// [`ExportedPlugin::deactivate`]); `true` unless overridden.
    const HAS_DEACTIVATE: bool = true;

    /// Descriptor number `index` of this library, or `None` past the last
    /// (`ladspa_descriptor`). Descriptors live as long as the process.
    fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor>;

    /// A new instance of `descriptor` (one this library returned, as the
    /// host promises) at `sample_rate` (never 0); `None` makes
    /// `instantiate` return NULL. May allocate and block.
    fn instantiate(descriptor: &LADSPA_Descriptor, sample_rate: c_ulong) -> Option<Self>;

    /// Connects `port` to `data` (the host's buffer, or one value for a
    /// control port), or ignores a port number out of range.
    fn connect_port(&mut self, port: usize, data: *mut LADSPA_Data);

    /// Resets the instance before (a new round of) runs.
    fn activate(&mut self) {}

    /// Processes `frames` frames. On the host's real-time path: must not
    /// allocate, lock, print or block.
    fn run(&mut self, frames: usize);

    /// Ends a round of runs.
    fn deactivate(&mut self) {}

    /// Frees the instance (`cleanup`): by default drops it.
    fn cleanup(self) {}
}

/// A descriptor holding only `P`'s entry points (`instantiate`,
/// `connect_port`, `activate`/`deactivate` as [`ExportedPlugin::HAS_ACTIVATE`]
/// and [`ExportedPlugin::HAS_DEACTIVATE`] say, `run`, `cleanup`; no
/// `run_adding`), every other field NULL or 0: fill those in with struct
/// update syntax (`LADSPA_Descriptor { UniqueID: …, ..entry_points::<P>() }`).
pub const fn entry_points<P: ExportedPlugin>() -> LADSPA_Descriptor {
    LADSPA_Descriptor {
        UniqueID: 0,
        Label: std::ptr::null(),
        Properties: 0,
        Name: std::ptr::null(),
        Maker: std::ptr::null(),
        Copyright: std::ptr::null(),
        PortCount: 0,
        PortDescriptors: std::ptr::null(),
        PortNames: std::ptr::null(),
        PortRangeHints: std::ptr::null(),
        ImplementationData: std::ptr::null_mut(),
        instantiate: Some(instantiate::<P>),
        connect_port: Some(connect_port::<P>),
        activate: if P::HAS_ACTIVATE {
            Some(activate::<P>)
        } else {
            None
        },
        run: Some(run::<P>),
        run_adding: None,
        set_run_adding_gain: None,
        deactivate: if P::HAS_DEACTIVATE {
            Some(deactivate::<P>)
        } else {
            None
        },
        cleanup: Some(cleanup::<P>),
    }
}

/// Runs `f`, turning a panic into `fallback`: a panic must never unwind
/// into the C host.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The body of `ladspa_descriptor` (which [`export_plugin!`](crate::export_plugin)
/// exports): `P`'s descriptor `index`, or NULL past the last or on a panic.
pub fn descriptor<P: ExportedPlugin>(index: c_ulong) -> *const LADSPA_Descriptor {
    guard(std::ptr::null(), || {
        P::descriptor(index as usize).map_or(std::ptr::null(), |d| d as *const _)
    })
}

/// # Safety
/// `h` is NULL or a handle from `instantiate::<P>` not yet cleaned up.
unsafe fn instance<'a, P: ExportedPlugin>(h: LADSPA_Handle) -> Option<&'a mut P> {
    // SAFETY: per the contract, a non-NULL h points to a live P.
    unsafe { (h as *mut P).as_mut() }
}

/// LADSPA `instantiate`: NULL for a NULL descriptor, a sample rate of 0, a
/// refusal of [`ExportedPlugin::instantiate`] or a panic.
///
/// # Safety
/// `descriptor` is NULL or valid (the host passes one `ladspa_descriptor`
/// returned).
pub unsafe extern "C" fn instantiate<P: ExportedPlugin>(
    descriptor: *const LADSPA_Descriptor,
    sample_rate: c_ulong,
) -> LADSPA_Handle {
    guard(std::ptr::null_mut(), || {
        // SAFETY: per the contract, a non-NULL descriptor is valid.
        let Some(d) = (unsafe { descriptor.as_ref() }) else {
            return std::ptr::null_mut();
        };
        if sample_rate == 0 {
            return std::ptr::null_mut();
        }
        P::instantiate(d, sample_rate).map_or(std::ptr::null_mut(), |p| {
            Box::into_raw(Box::new(p)) as LADSPA_Handle
        })
    })
}

/// LADSPA `connect_port`; ignores a NULL handle.
///
/// # Safety
/// `h` is NULL or a live handle from [`instantiate::<P>`](instantiate).
pub unsafe extern "C" fn connect_port<P: ExportedPlugin>(
    h: LADSPA_Handle,
    port: c_ulong,
    data: *mut LADSPA_Data,
) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(p) = unsafe { instance::<P>(h) } {
            p.connect_port(port as usize, data);
        }
    })
}

/// LADSPA `activate`; ignores a NULL handle.
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn activate<P: ExportedPlugin>(h: LADSPA_Handle) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(p) = unsafe { instance::<P>(h) } {
            p.activate();
        }
    })
}

/// LADSPA `run`; ignores a NULL handle. As RT-safe as [`ExportedPlugin::run`].
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn run<P: ExportedPlugin>(h: LADSPA_Handle, sample_count: c_ulong) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(p) = unsafe { instance::<P>(h) } {
            p.run(sample_count as usize);
        }
    })
}

/// LADSPA `deactivate`; ignores a NULL handle.
///
/// # Safety
/// As [`connect_port`].
pub unsafe extern "C" fn deactivate<P: ExportedPlugin>(h: LADSPA_Handle) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(p) = unsafe { instance::<P>(h) } {
            p.deactivate();
        }
    })
}

/// LADSPA `cleanup`: [`ExportedPlugin::cleanup`], then the handle is gone;
/// ignores a NULL handle.
///
/// # Safety
/// `h` is NULL or a live handle from [`instantiate::<P>`](instantiate),
/// never used again.
pub unsafe extern "C" fn cleanup<P: ExportedPlugin>(h: LADSPA_Handle) {
    guard((), || {
        if h.is_null() {
            return;
        }
        // SAFETY: h came from Box::into_raw in instantiate and is never used again.
        let p = unsafe { Box::from_raw(h as *mut P) };
        p.cleanup();
    })
}

/// Exports a LADSPA plugin library's entry point, `ladspa_descriptor`,
/// for a type implementing [`ExportedPlugin`](crate::export::ExportedPlugin);
/// its descriptors get their other entry points from
/// [`entry_points`](crate::export::entry_points). Invoke once per library
/// (a `cdylib`). See [`export`](crate::export) for an example.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// The LADSPA entry point: descriptor `index` of this library, NULL
        /// past the last.
        ///
        /// # Safety
        /// Callable with any index (part of the LADSPA ABI).
        #[no_mangle]
        pub unsafe extern "C" fn ladspa_descriptor(
            index: ::std::os::raw::c_ulong,
        ) -> *const $crate::ffi::LADSPA_Descriptor {
            $crate::export::descriptor::<$plugin>(index)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    static DROPS: AtomicU32 = AtomicU32::new(0);

    /// Panics on run; counts cleanups.
    struct Grumpy {
        port: *mut f32,
    }

    struct Static<T>(T);
    // SAFETY: the descriptor holds no pointer to mutable data.
    unsafe impl<T> Sync for Static<T> {}

    static D: Static<LADSPA_Descriptor> = Static(LADSPA_Descriptor {
        UniqueID: 1,
        ..entry_points::<Grumpy>()
    });

    impl ExportedPlugin for Grumpy {
        const HAS_DEACTIVATE: bool = false;
        fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
            (index == 0).then_some(&D.0)
        }
        fn instantiate(_: &LADSPA_Descriptor, rate: c_ulong) -> Option<Self> {
            (rate != 1).then_some(Grumpy {
                port: std::ptr::null_mut(),
            })
        }
        fn connect_port(&mut self, port: usize, data: *mut f32) {
            if port == 0 {
                self.port = data;
            }
        }
        fn run(&mut self, _frames: usize) {
            panic!("run panics");
        }
        fn cleanup(self) {
            DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn descriptors_past_the_last_are_null() {
        assert!(std::ptr::eq(descriptor::<Grumpy>(0), &D.0));
        assert!(descriptor::<Grumpy>(1).is_null());
        assert!(D.0.activate.is_some());
        assert!(D.0.deactivate.is_none());
        assert!(D.0.run_adding.is_none() && D.0.set_run_adding_gain.is_none());
    }

    #[test]
    fn null_pointers_and_refusals_are_ignored() {
        // SAFETY: NULL handles and descriptors are what these must tolerate.
        unsafe {
            connect_port::<Grumpy>(std::ptr::null_mut(), 0, std::ptr::null_mut());
            activate::<Grumpy>(std::ptr::null_mut());
            run::<Grumpy>(std::ptr::null_mut(), 64);
            deactivate::<Grumpy>(std::ptr::null_mut());
            cleanup::<Grumpy>(std::ptr::null_mut());
            assert!(instantiate::<Grumpy>(std::ptr::null(), 48_000).is_null());
            assert!(instantiate::<Grumpy>(&D.0, 0).is_null());
            assert!(instantiate::<Grumpy>(&D.0, 1).is_null());
        }
    }

    #[test]
    fn a_panic_stays_inside_the_plugin() {
        // SAFETY: a live handle from instantiate, cleaned up once.
        unsafe {
            let h = instantiate::<Grumpy>(&D.0, 48_000);
            assert!(!h.is_null());
            let mut x = 0.0f32;
            connect_port::<Grumpy>(h, 0, &mut x);
            connect_port::<Grumpy>(h, 99, &mut x);
            activate::<Grumpy>(h);
            run::<Grumpy>(h, 64);
            let before = DROPS.load(Ordering::Relaxed);
            cleanup::<Grumpy>(h);
            assert_eq!(DROPS.load(Ordering::Relaxed), before + 1);
        }
    }
}
