//! The lab's error type.

use std::fmt;

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A parameter was out of range; the message names it and the valid range.
    InvalidInput,
    /// The requested real-time conditions could not be obtained.
    Realtime,
    /// A mechanism or device is not available here; the message says why.
    Unavailable,
    /// A load child process could not be started, or misbehaved.
    Load,
    /// The run was interrupted (Ctrl-C); what was measured is kept.
    Interrupted,
    /// Writing a report, plot or data file failed.
    Output,
    /// Any other operating-system error.
    Io,
}

/// An error from firmtime-lab: a kind and a message a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// Builds an error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind.
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

impl From<firmtime_rt::Error> for Error {
    fn from(e: firmtime_rt::Error) -> Self {
        use firmtime_rt::ErrorKind as K;
        let kind = match e.kind() {
            K::InvalidInput => ErrorKind::InvalidInput,
            K::RealtimeDenied | K::MemlockDenied | K::RtThrottled | K::DeadlineRefused => {
                ErrorKind::Realtime
            }
            K::NotPresent => ErrorKind::Unavailable,
            _ => ErrorKind::Io,
        };
        Self::new(kind, e.message())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
