//! firmtime-lab integration tests: one binary, one module per area.

// RT closures run under `assert_no_alloc`: any allocation inside aborts.
#[cfg(debug_assertions)]
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

mod billing;
mod breakdown;
mod clockread;
mod cyclic;
mod doctor;
mod explain;
mod frames;
mod independent;
mod interrupts;
mod kernel_stacks;
mod load;
mod measurement;
mod messages;
mod output;
mod overhead;
mod plot;
mod sizes;
mod stats;
mod suspend;
mod tails;
mod trace;
mod verdict;

/// SIGALRM belongs to the whole process: tests that install a SIGALRM handler
/// (the tails worker) or need SIGALRM free (the setitimer sleeper) take this.
pub static SIGALRM: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Path of a fixture in `crates/lab/tests/data/`.
pub fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The message of the [`ErrorKind::InvalidInput`](firmtime_lab::ErrorKind)
/// error `config` is refused with (panics if it is accepted).
pub fn invalid_message(config: &impl firmtime_lab::measurement::Validate) -> String {
    let e = config.validate().unwrap_err();
    assert_eq!(e.kind(), firmtime_lab::ErrorKind::InvalidInput, "{e}");
    e.message().to_string()
}
