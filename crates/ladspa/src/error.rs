//! The crate's error: a kind to match on and a message a user can act on.
//! Not for the RT path: [`crate::RunError`] is the small `Copy` error there.

/// What went wrong, for callers that react differently to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No plugin with that label or ID, or no such library file.
    NotFound,
    /// `dlopen` failed or the library has no `ladspa_descriptor`.
    LoadFailed,
    /// A descriptor breaks the LADSPA rules (NULL fields, bad port flags).
    InvalidDescriptor,
    /// The plugin's `instantiate` returned NULL.
    InstantiateFailed,
    /// Wrong number of control values, a value outside a port's range, or
    /// a control without a value and without a default.
    InvalidControl,
    /// Plugins or files that cannot be wired together (channel counts).
    Mismatch,
    /// Bad argument (zero block size, zero sample rate).
    InvalidInput,
    /// Reading or writing an audio file failed.
    Io,
    /// A library outside the allowed directories, or a file that fails the
    /// checks made before loading ([`crate::allowed`]).
    PermissionDenied,
}

firmtime_rt::define_error! {
    /// An error with a message that says what happened and how to fix it.
    pub struct Error {
        kind: ErrorKind,
    }
}
