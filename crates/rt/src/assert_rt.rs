//! Checking real-time paths where they run: the opt-in `assert-rt` feature.
//!
//! [`no_alloc`] runs a closure that must not allocate — a JACK process
//! callback, an engine period, the net master's `process`. With the
//! `assert-rt` feature of firmtime-rt on, it runs the closure under
//! [`assert_no_alloc`](https://docs.rs/assert_no_alloc), and an allocation
//! or deallocation inside it aborts the program with a message; without the
//! feature it is a plain call that costs nothing.
//!
//! The check only sees allocations when the *binary's* global allocator is
//! `assert_no_alloc::AllocDisabler` (re-exported here as `AllocDisabler`
//! under the feature): binaries and test binaries that want it install it
//! under the same feature:
//!
//! ```ignore
//! #[cfg(feature = "assert-rt")]
//! #[global_allocator]
//! static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;
//! ```
//!
//! Without that allocator, [`no_alloc`] runs the closure unchecked. Like
//! `assert_no_alloc` itself, the check is active in debug builds only
//! (release builds skip it).
//!
//! Library crates forward the feature (`assert-rt = ["firmtime-rt/assert-rt"]`)
//! and wrap their RT entry points:
//!
//! ```
//! fn process(buf: &mut [f32]) {
//!     firmtime_rt::assert_rt::no_alloc(|| buf.iter_mut().for_each(|x| *x *= 0.5));
//! }
//! let mut b = [1.0_f32; 4];
//! process(&mut b);
//! assert_eq!(b, [0.5; 4]);
//! ```

#[cfg(feature = "assert-rt")]
pub use assert_no_alloc::AllocDisabler;

/// Runs `f`; with the `assert-rt` feature, under `assert_no_alloc`, so an
/// allocation inside `f` aborts (when the global allocator is
/// `AllocDisabler`). **RT-safe.**
#[inline]
pub fn no_alloc<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "assert-rt")]
    {
        assert_no_alloc::assert_no_alloc(f)
    }
    #[cfg(not(feature = "assert-rt"))]
    {
        f()
    }
}

/// Runs `f` with allocation allowed again, inside a [`no_alloc`] region
/// (for a path that allocates only on a rare, reported failure). Without
/// the `assert-rt` feature a plain call.
#[inline]
pub fn permit_alloc<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "assert-rt")]
    {
        assert_no_alloc::permit_alloc(f)
    }
    #[cfg(not(feature = "assert-rt"))]
    {
        f()
    }
}

/// True when this build checks [`no_alloc`] regions (the `assert-rt`
/// feature is on and this is a debug build).
pub const ENABLED: bool = cfg!(all(feature = "assert-rt", debug_assertions));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_the_closure_and_returns_its_value() {
        let mut n = 0;
        assert_eq!(
            no_alloc(|| {
                n += 1;
                n * 2
            }),
            2
        );
        let v = no_alloc(|| permit_alloc(|| vec![1, 2, 3]));
        assert_eq!(v.len(), 3);
    }
}
