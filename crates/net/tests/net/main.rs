//! firmtime-net integration tests: masters and workers over loopback UDP.

// RT code runs under `assert_no_alloc`: any allocation there aborts.
#[cfg(debug_assertions)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

mod bench;
mod common;
mod exchange;
mod fuzz_corpus;
mod hostile;
mod late;
mod plugins;
mod preauth;
mod seal;
mod session;
mod soak;
mod standby;
mod streams;
