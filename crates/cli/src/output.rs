//! Standard output and error that never panic. The crate root shadows
//! `print!`/`println!` and `eprint!`/`eprintln!` with these, for the whole
//! binary:
//!
//! - stdout closed by its reader (`firmtime ladspa list | head -1`): the
//!   program ends quietly with status 0, as ripgrep does, instead of std's
//!   panic "failed printing to stdout" (status 101). SIGPIPE stays ignored
//!   (Rust's default), so a socket or a child's pipe that closes is an error
//!   where it is written, never the death of a worker;
//! - stdout failing otherwise (a full disk): one line on stderr, status 1;
//! - stderr failing (a closed terminal after SIGHUP, `2>&1 | head`): the
//!   diagnostic is dropped; the run goes on and still writes its data.

use std::io::Write;

/// Writes `args` to stdout (see the module docs for a closed pipe).
pub fn print(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        stdout_failed(&e);
    }
}

/// Writes `args` to stderr, dropping it if stderr is gone.
pub fn eprint(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Ends the program after stdout failed: quietly (status 0) on a closed
/// pipe, with a message (status 1) otherwise.
pub fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprint(format_args!("firmtime: error: writing to stdout: {e}\n"));
    std::process::exit(1);
}
