//! Integration tests for firmtime-lab.

// RT closures run under `assert_no_alloc`: an allocation aborts the test binary.
#[cfg(debug_assertions)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

mod load;
