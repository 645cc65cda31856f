//! The lab's error type, declared with the one definition every firmtime
//! crate shares ([`firmtime_rt::define_error!`]).

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

firmtime_rt::define_error! {
    /// An error from firmtime-lab: a kind and a message a user can act on.
    pub struct Error {
        kind: ErrorKind,
    }
}

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

impl From<firmtime_trace::Error> for Error {
    fn from(e: firmtime_trace::Error) -> Self {
        use firmtime_trace::ErrorKind as K;
        let kind = match e.kind() {
            K::InvalidInput => ErrorKind::InvalidInput,
            K::Unavailable => ErrorKind::Unavailable,
            _ => ErrorKind::Io,
        };
        Self::new(kind, e.message())
    }
}

firmtime_rt::error_from_io!(Error, ErrorKind::Io);
