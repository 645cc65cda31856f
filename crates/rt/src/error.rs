//! The crate's error type.
//!
//! Setup-time functions return [`Error`]: a [`ErrorKind`] a caller can match
//! on, and a message a user can act on (what was refused, why, how to fix it).
//! Functions on the real-time path never build an [`Error`] (it allocates);
//! they return the small `Copy` value [`Errno`] instead.

use std::fmt;

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was out of range or malformed; the message names it and the valid range.
    InvalidInput,
    /// A real-time policy or priority was refused: RLIMIT_RTPRIO too low and no CAP_SYS_NICE.
    RealtimeDenied,
    /// Memory could not be locked: RLIMIT_MEMLOCK too small and no CAP_IPC_LOCK.
    MemlockDenied,
    /// Real-time runtime is not available: kernel.sched_rt_runtime_us or an
    /// RT-group / cgroup without RT runtime.
    RtThrottled,
    /// SCHED_DEADLINE admission control refused the reservation.
    DeadlineRefused,
    /// A device or mechanism does not exist on this machine (no /dev/rtc, no invariant TSC).
    NotPresent,
    /// Permission to a file or device was denied (e.g. /dev/cpu_dma_latency without root).
    PermissionDenied,
    /// Any other operating-system error.
    Io,
}

/// An error from firmtime-rt: a kind, an actionable message and the OS error number if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    errno: Option<i32>,
}

impl Error {
    /// Builds an error of `kind` with a message a user can act on.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            errno: None,
        }
    }

    /// Builds an error that carries the OS error number it came from.
    pub fn with_errno(kind: ErrorKind, message: impl Into<String>, errno: i32) -> Self {
        Self {
            kind,
            message: message.into(),
            errno: Some(errno),
        }
    }

    /// Builds an [`ErrorKind::InvalidInput`] error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Builds an [`ErrorKind::Io`] error from the calling thread's `errno`,
    /// prefixed with what was being done.
    pub fn last_os(what: &str) -> Self {
        let e = std::io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(0);
        Self::with_errno(ErrorKind::Io, format!("{what}: {e}"), errno)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The OS error number this error came from, if any.
    pub fn errno(&self) -> Option<i32> {
        self.errno
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

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        let errno = e.raw_os_error();
        Self {
            kind: if e.kind() == std::io::ErrorKind::PermissionDenied {
                ErrorKind::PermissionDenied
            } else {
                ErrorKind::Io
            },
            message: e.to_string(),
            errno,
        }
    }
}

/// A raw OS error number, returned by **RT-safe** functions: `Copy`, never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`. **RT-safe.**
    pub fn last() -> Self {
        Self(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for Error {
    fn from(e: Errno) -> Self {
        Self::with_errno(ErrorKind::Io, e.to_string(), e.0)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
