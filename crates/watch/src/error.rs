//! The watch crate's error type, declared with the one definition every
//! firmtime crate shares ([`firmtime_rt::define_error!`]).

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A parameter was out of range; the message names it and the valid range.
    InvalidInput,
    /// Real-time conditions were refused (never degraded silently).
    Realtime,
    /// The database could not be opened, read or written.
    Database,
    /// The file is not a firmtime watch database this firmtime reads: not
    /// SQLite, a SQLite file of something else, or a newer schema.
    NotWatchDatabase,
    /// Another watch writes the database (its pid named).
    InUse,
    /// Any other operating-system error.
    Io,
}

firmtime_rt::define_error! {
    /// An error from firmtime-watch: a kind and a message a user can act on.
    pub struct Error {
        kind: ErrorKind,
    }
}

firmtime_rt::error_from_io!(Error, ErrorKind::Io);

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Self::new(ErrorKind::Database, format!("database: {e}"))
    }
}

impl From<firmtime_rt::Error> for Error {
    fn from(e: firmtime_rt::Error) -> Self {
        let kind = match e.kind() {
            firmtime_rt::ErrorKind::InvalidInput => ErrorKind::InvalidInput,
            firmtime_rt::ErrorKind::RealtimeDenied
            | firmtime_rt::ErrorKind::MemlockDenied
            | firmtime_rt::ErrorKind::RtThrottled
            | firmtime_rt::ErrorKind::DeadlineRefused => ErrorKind::Realtime,
            _ => ErrorKind::Io,
        };
        Self::new(kind, e.message().to_string())
    }
}

impl From<firmtime_trace::Error> for Error {
    fn from(e: firmtime_trace::Error) -> Self {
        Self::new(ErrorKind::Io, format!("explaining trace: {}", e.message()))
    }
}

/// An [`ErrorKind::InvalidInput`] error.
pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, msg.into())
}
