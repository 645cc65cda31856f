//! The crate's one setup-time error, for every backend.
//!
//! Opening a device, setting its baud rate, starting a backend's real-time
//! thread, connecting to a JACK server or starting a dummy one, opening the
//! ALSA sequencer: these return [`Error`], a [`ErrorKind`] to match on and a message
//! a user can act on (what failed, why, how to fix it). Nothing on the
//! real-time path builds one (it allocates); the engine side of a backend
//! returns the small `Copy` [`BackendError`](crate::BackendError) instead.

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was out of range or does not apply; the message names it.
    InvalidInput,
    /// The device does not exist (or vanished before it could be used).
    NotPresent,
    /// Permission to the device was denied.
    PermissionDenied,
    /// The device or its driver cannot do what was asked (e.g. a serial
    /// driver without custom baud rates).
    Unsupported,
    /// Real-time scheduling or memory locking was refused; the message says
    /// which privilege is missing and how to grant it.
    Realtime,
    /// Any other operating-system error.
    Io,
    /// A library or program the backend needs is not installed (libjack,
    /// `jackd`, the ALSA sequencer's kernel module); the message says what to install.
    NotInstalled,
    /// No server with that name is running, or it refused the client
    /// (JACK); the message says how to start one.
    ServerUnavailable,
    /// A server firmtime started itself (a dummy `jackd`) would not start;
    /// the message quotes its log.
    ServerFailed,
    /// A port could not be registered, found or connected; the message names it.
    Port,
    /// Any other failure reported by a backend's library (JACK, ALSA).
    Backend,
}

firmtime_rt::define_os_error! {
    /// An error from firmtime-midi: a kind, an actionable message and the OS
    /// error number if there was one.
    pub struct Error {
        kind: ErrorKind,
        invalid: InvalidInput,
    }
}

impl Error {
    /// Builds an error from an OS error number, choosing the kind from it
    /// (`ENOENT`/`ENODEV`/`ENXIO` → [`ErrorKind::NotPresent`], `EACCES`/`EPERM`
    /// → [`ErrorKind::PermissionDenied`], else [`ErrorKind::Io`]); `what` says
    /// what was being done, `fix` (may be empty) how to fix it.
    pub fn from_errno(errno: i32, what: &str, fix: &str) -> Self {
        let kind = match errno {
            libc::ENOENT | libc::ENODEV | libc::ENXIO => ErrorKind::NotPresent,
            libc::EACCES | libc::EPERM => ErrorKind::PermissionDenied,
            _ => ErrorKind::Io,
        };
        let os = std::io::Error::from_raw_os_error(errno);
        let message = if fix.is_empty() {
            format!("{what}: {os}")
        } else {
            format!("{what}: {os}. {fix}")
        };
        Self::with_errno(kind, message, errno)
    }

    /// As [`Error::from_errno`] with the calling thread's `errno`.
    pub fn last_os(what: &str, fix: &str) -> Self {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Self::from_errno(errno, what, fix)
    }
}

impl From<firmtime_rt::Error> for Error {
    fn from(e: firmtime_rt::Error) -> Self {
        use firmtime_rt::error::ErrorKind as Rt;
        let kind = match e.kind() {
            Rt::InvalidInput => ErrorKind::InvalidInput,
            Rt::RealtimeDenied | Rt::MemlockDenied | Rt::RtThrottled | Rt::DeadlineRefused => {
                ErrorKind::Realtime
            }
            Rt::NotPresent => ErrorKind::NotPresent,
            Rt::PermissionDenied => ErrorKind::PermissionDenied,
            _ => ErrorKind::Io,
        };
        Self {
            kind,
            message: e.message().to_string(),
            errno: e.errno(),
        }
    }
}

impl From<firmtime_jack::Error> for Error {
    fn from(e: firmtime_jack::Error) -> Self {
        use firmtime_jack::ErrorKind as Jack;
        let kind = match e.kind() {
            Jack::InvalidInput => ErrorKind::InvalidInput,
            Jack::NotInstalled => ErrorKind::NotInstalled,
            Jack::ServerUnavailable => ErrorKind::ServerUnavailable,
            Jack::ServerFailed => ErrorKind::ServerFailed,
            Jack::Port => ErrorKind::Port,
            Jack::Backend => ErrorKind::Backend,
            _ => ErrorKind::Io,
        };
        Self::new(kind, e.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_picks_the_kind_and_keeps_the_fix() {
        let e = Error::from_errno(
            libc::ENOENT,
            "opening /dev/midi9",
            "Run `firmtime midi ports`.",
        );
        assert_eq!(e.kind(), ErrorKind::NotPresent);
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(e.message().starts_with("opening /dev/midi9: "), "{e}");
        assert!(e.message().ends_with("Run `firmtime midi ports`."), "{e}");
        assert_eq!(
            Error::from_errno(libc::EACCES, "x", "").kind(),
            ErrorKind::PermissionDenied
        );
        assert_eq!(Error::from_errno(libc::EIO, "x", "").kind(), ErrorKind::Io);
    }

    #[test]
    fn rt_errors_keep_their_message() {
        let rt = firmtime_rt::Error::new(
            firmtime_rt::error::ErrorKind::RealtimeDenied,
            "SCHED_FIFO refused: add rtprio",
        );
        let e = Error::from(rt);
        assert_eq!(e.kind(), ErrorKind::Realtime);
        assert_eq!(e.to_string(), "SCHED_FIFO refused: add rtprio");
    }
}
