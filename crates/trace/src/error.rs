//! The trace crate's error type, declared with the one definition every
//! firmtime crate shares ([`firmtime_rt::define_error!`]).

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A parameter was out of range; the message names it and the valid range.
    InvalidInput,
    /// Tracing is not available here (not root, no tracefs); the message says why.
    Unavailable,
    /// Any other operating-system error (tracefs refused a setting, a read failed).
    Io,
}

firmtime_rt::define_error! {
    /// An error from firmtime-trace: a kind and a message a user can act on.
    pub struct Error {
        kind: ErrorKind,
    }
}

firmtime_rt::error_from_io!(Error, ErrorKind::Io);
