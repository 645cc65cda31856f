//! The crate's error type.
//!
//! Setup-time functions (building a [`BlockSet`](crate::BlockSet), binding
//! sockets, adding streams) return [`Error`]: a [`ErrorKind`] to match on and
//! a message that says what was wrong and how to fix it. The per-period
//! functions ([`Master::process`](crate::Master::process)) never build an
//! [`Error`]: they count what went wrong instead.

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was out of range or malformed; the message names it and the valid range.
    InvalidInput,
    /// Permission to bind or use a socket was denied.
    PermissionDenied,
    /// Any other operating-system error (bind, connect, socket options).
    Io,
}

firmtime_rt::define_os_error! {
    /// An error from firmtime-net: a kind, an actionable message and the OS error number if any.
    pub struct Error {
        kind: ErrorKind,
        invalid: InvalidInput,
    }
}

impl Error {
    /// Builds an error from an I/O error, prefixed with what was being done.
    pub fn io(what: &str, e: std::io::Error) -> Self {
        let kind = if e.kind() == std::io::ErrorKind::PermissionDenied {
            ErrorKind::PermissionDenied
        } else {
            ErrorKind::Io
        };
        Self {
            kind,
            message: format!("{what}: {e}"),
            errno: e.raw_os_error(),
        }
    }
}
