//! The plots' error type, declared with the one definition every firmtime
//! crate shares ([`firmtime_rt::define_error!`]).

/// What went wrong, in a form a caller can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Nothing to plot, or a parameter out of range; the message says which.
    InvalidInput,
    /// The font is missing or unusable; the message says what to install.
    Unavailable,
    /// The PNG could not be written; the message names the file.
    Output,
}

firmtime_rt::define_error! {
    /// An error from firmtime-plot: a kind and a message a user can act on.
    pub struct Error {
        kind: ErrorKind,
    }
}
