//! Integration tests for firmtime-rt. Tests that need privileges print a
//! skip reason and return when they are missing.

// RT closures run under `assert_no_alloc`: an allocation aborts the test binary.
#[cfg(debug_assertions)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

mod clock;
mod common;
mod eventlog;
mod periodic;
mod runaway;
mod sched;
mod sleep;
mod system;
