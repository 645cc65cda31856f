//! One private server of either kind, so a test body runs unchanged against
//! jackd2's dummy driver and against PipeWire's JACK.
//!
//! A process uses one libjack (the first loaded), so a test binary picks
//! one [`ServerKind`] for all its tests: [`TestServer::start_for_test`]
//! with [`ServerKind::PipeWire`] selects PipeWire's libjack
//! ([`use_pipewire_libjack`]) before anything else touches JACK.
//!
//! Not for the RT path.

use std::process::Command;

use crate::pipewire::{use_pipewire_libjack, PipeWireServer};
use crate::server::{program_on_path, without_pipewire_jack_dir, DummyServer};

/// Which JACK server implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// jackd2's `jackd -d dummy` ([`DummyServer`]).
    Jackd,
    /// PipeWire with a timer driver, through pipewire-jack ([`PipeWireServer`]).
    PipeWire,
}

impl ServerKind {
    /// "jackd2" or "PipeWire", for messages and tables.
    pub fn label(self) -> &'static str {
        match self {
            ServerKind::Jackd => "jackd2",
            ServerKind::PipeWire => "PipeWire",
        }
    }

    /// What to install when this kind is missing (Debian).
    pub fn install_hint(self) -> &'static str {
        match self {
            ServerKind::Jackd => "apt-get install jackd2",
            ServerKind::PipeWire => "apt-get install pipewire pipewire-jack",
        }
    }
}

/// A private server of either [`ServerKind`]; dropping it stops it.
#[derive(Debug)]
pub enum TestServer {
    /// A private `jackd -d dummy`.
    Jackd(DummyServer),
    /// A private headless PipeWire.
    PipeWire(PipeWireServer),
}

impl TestServer {
    /// For test suites: a private server of `kind` at `rate` Hz and `period`
    /// frames (real-time scheduling when root), see
    /// [`DummyServer::start_for_test`] and [`PipeWireServer::start_for_test`];
    /// for PipeWire this process's libjack becomes PipeWire's first.
    /// `None` when that kind is not installed (the test then skips, saying
    /// [`ServerKind::install_hint`]).
    ///
    /// # Panics
    /// When the server is installed but does not start, or when PipeWire is
    /// asked for after jackd2's libjack was loaded in this process.
    pub fn start_for_test(kind: ServerKind, rate: u32, period: u32) -> Option<Self> {
        match kind {
            ServerKind::Jackd => DummyServer::start_for_test(rate, period).map(TestServer::Jackd),
            ServerKind::PipeWire => {
                if !program_on_path("pipewire") {
                    return None;
                }
                match use_pipewire_libjack() {
                    Ok(_) => {}
                    Err(e) if e.kind() == crate::ErrorKind::NotInstalled => return None,
                    Err(e) => panic!("{e}"),
                }
                PipeWireServer::start_for_test(rate, period).map(TestServer::PipeWire)
            }
        }
    }

    /// Which kind it is.
    pub fn kind(&self) -> ServerKind {
        match self {
            TestServer::Jackd(_) => ServerKind::Jackd,
            TestServer::PipeWire(_) => ServerKind::PipeWire,
        }
    }

    /// The server name clients pass to connect (a socket path for PipeWire).
    pub fn name(&self) -> &str {
        match self {
            TestServer::Jackd(s) => s.name(),
            TestServer::PipeWire(s) => s.name(),
        }
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        match self {
            TestServer::Jackd(s) => s.log_tail(lines),
            TestServer::PipeWire(s) => s.log_tail(lines),
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        match self {
            TestServer::Jackd(s) => s.pid(),
            TestServer::PipeWire(s) => s.pid(),
        }
    }

    /// Sets up `cmd`, a JACK client program (`jack_lsp`, `jack_midiseq`,
    /// firmtime), to load the right libjack and reach this server when it
    /// is not told the server name: `JACK_DEFAULT_SERVER` for jackd,
    /// [`PipeWireServer::client_env`] for PipeWire.
    pub fn client_env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        match self {
            TestServer::Jackd(s) => {
                without_pipewire_jack_dir(cmd);
                cmd.env("JACK_DEFAULT_SERVER", s.name())
            }
            TestServer::PipeWire(s) => s.client_env(cmd),
        }
    }
}
