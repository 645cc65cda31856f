//! The crate's error: a kind to match on and a message that says what went
//! wrong and how to fix it ([`firmtime_rt::define_error!`]: `new`, `kind`,
//! `message`, Display = the message, and `Result`).

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A rack file that is not valid TOML or not a valid rack (the message
    /// starts with `FILE:LINE:COL`).
    Parse,
    /// A value out of range or inconsistent with the rest.
    InvalidInput,
    /// A plugin is missing, or its ports do not fit the chain.
    Plugin,
    /// A remote stage could not be set up or changed.
    Remote,
    /// The JACK server or a port refused.
    Jack,
    /// Reading or writing a file failed.
    Io,
}

firmtime_rt::define_error! {
    /// An error with an actionable message.
    pub struct Error {
        kind: ErrorKind,
    }
}

impl From<firmtime_ladspa::Error> for Error {
    fn from(e: firmtime_ladspa::Error) -> Self {
        Error::new(ErrorKind::Plugin, e.message())
    }
}

impl From<firmtime_net::Error> for Error {
    fn from(e: firmtime_net::Error) -> Self {
        Error::new(ErrorKind::Remote, e.to_string())
    }
}
