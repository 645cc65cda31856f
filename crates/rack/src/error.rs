//! The crate's error: a kind to match on and a message that says what went
//! wrong and how to fix it.

use std::fmt;

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

/// An error with an actionable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

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

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
