//! The crate's one setup-time error.
//!
//! Loading libjack, opening a client, registering or connecting a port,
//! starting a dummy server: these return [`Error`], an [`ErrorKind`] to
//! match on and a message a user can act on (what failed, why, how to fix
//! it). Nothing on the real-time path builds one (it allocates).

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was out of range or does not apply; the message names it.
    InvalidInput,
    /// A library or program JACK needs is not installed (libjack, `jackd`,
    /// `jack_wait`); the message says what to install.
    NotInstalled,
    /// No server with that name is running, or it refused the client; the
    /// message says how to start one.
    ServerUnavailable,
    /// A server firmtime started itself (a dummy `jackd`) would not start;
    /// the message quotes its log.
    ServerFailed,
    /// A port could not be registered, found or connected; the message names it.
    Port,
    /// Any other failure reported by libjack (activating, deactivating).
    Backend,
    /// An operating-system error (e.g. creating the dummy server's log).
    Io,
    /// A measurement's test signal did not come back (the audio round trip
    /// with nothing, or a muted path, between its ports); the message names
    /// the ports and how to connect them.
    NoSignal,
}

firmtime_rt::define_error! {
    /// An error from firmtime-jack: a kind and an actionable message.
    pub struct Error {
        kind: ErrorKind,
    }
}
