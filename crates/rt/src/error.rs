//! The crate's error type, and the one definition every firmtime crate's
//! error type is built from ([`define_error!`](crate::define_error)).
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

crate::define_os_error! {
    /// An error from firmtime-rt: a kind, an actionable message and the OS error number if any.
    pub struct Error {
        kind: ErrorKind,
        invalid: InvalidInput,
    }
}

impl Error {
    /// Builds an [`ErrorKind::Io`] error from the calling thread's `errno`,
    /// prefixed with what was being done.
    pub fn last_os(what: &str) -> Self {
        let e = std::io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(0);
        Self::with_errno(ErrorKind::Io, format!("{what}: {e}"), errno)
    }
}

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

/// Declares a crate's error type: `struct $Name { kind, message, extra… }`
/// with `new(kind, message)`, `kind()`, `message()`, a getter per extra
/// field, `Display` (the message alone), `std::error::Error`, and the
/// crate's `Result<T, E = $Name>` alias.
///
/// Every firmtime library crate declares its `Error` with this macro, so all
/// of them behave alike and differ only in their `ErrorKind` (which each
/// crate declares itself, `#[non_exhaustive]` and `Copy`) and in the
/// constructors they add in their own `impl` block. The fields are private
/// to the module that invokes the macro, so those constructors can build
/// the struct directly.
///
/// Extra fields (each `Copy` and `Default`; `None` in [`new`](Error::new))
/// are listed after `kind`, each with the doc of its getter. Ending the
/// invocation with `Display: custom` leaves `Display` to the crate (for
/// example to prefix a file position); otherwise it writes the message.
///
/// ```
/// /// What went wrong.
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// #[non_exhaustive]
/// pub enum ErrorKind {
///     /// A bad argument.
///     InvalidInput,
/// }
///
/// firmtime_rt::define_error! {
///     /// An error from this crate: a kind and a message a user can act on.
///     pub struct Error {
///         kind: ErrorKind,
///         /// The OS error number, if any.
///         errno: Option<i32>,
///     }
/// }
///
/// fn check(n: u32) -> Result<u32> {
///     if n == 0 {
///         return Err(Error::new(ErrorKind::InvalidInput, "n must be at least 1"));
///     }
///     Ok(n)
/// }
/// let e = check(0).unwrap_err();
/// assert_eq!((e.kind(), e.errno()), (ErrorKind::InvalidInput, None));
/// assert_eq!(e.to_string(), "n must be at least 1");
/// ```
#[macro_export]
macro_rules! define_error {
    (
        @struct $(#[$meta:meta])* $vis:vis struct $Name:ident {
            kind: $Kind:ty $(, $(#[$fmeta:meta])* $field:ident: $fty:ty)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        $vis struct $Name {
            kind: $Kind,
            message: ::std::string::String,
            $($field: $fty,)*
        }

        impl $Name {
            /// Builds an error of `kind` with a message a user can act on.
            pub fn new(kind: $Kind, message: impl ::std::convert::Into<::std::string::String>) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    $($field: ::std::default::Default::default(),)*
                }
            }

            /// What went wrong, to match on.
            pub fn kind(&self) -> $Kind {
                self.kind
            }

            /// The message, without the kind.
            pub fn message(&self) -> &str {
                &self.message
            }

            $(
                $(#[$fmeta])*
                pub fn $field(&self) -> $fty {
                    self.$field
                }
            )*
        }

        impl ::std::error::Error for $Name {}

        /// `Result` with this crate's error type.
        pub type Result<T, E = $Name> = ::std::result::Result<T, E>;
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $Name:ident {
            kind: $Kind:ty
            $(, $(#[$fmeta:meta])* $field:ident: $fty:ty)* $(,)?
        }
    ) => {
        $crate::define_error! {
            @struct $(#[$meta])* $vis struct $Name { kind: $Kind $(, $(#[$fmeta])* $field: $fty)* }
        }

        impl ::std::fmt::Display for $Name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.message)
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $Name:ident {
            kind: $Kind:ty
            $(, $(#[$fmeta:meta])* $field:ident: $fty:ty)* $(,)?
        }
        Display: custom
    ) => {
        $crate::define_error! {
            @struct $(#[$meta])* $vis struct $Name { kind: $Kind $(, $(#[$fmeta])* $field: $fty)* }
        }
    };
}

/// Implements `From<std::io::Error>` for a crate's error type `$Name` (from
/// [`define_error!`](crate::define_error)): kind `$Kind::$Io`, the I/O
/// error's message. One definition of the conversion the crates without an
/// errno field share.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// #[non_exhaustive]
/// pub enum ErrorKind {
///     /// An operating-system error.
///     Io,
/// }
/// firmtime_rt::define_error! {
///     /// An error.
///     pub struct Error {
///         kind: ErrorKind,
///     }
/// }
/// firmtime_rt::error_from_io!(Error, ErrorKind::Io);
/// let e = Error::from(std::io::Error::other("disk on fire"));
/// assert_eq!((e.kind(), e.message()), (ErrorKind::Io, "disk on fire"));
/// ```
#[macro_export]
macro_rules! error_from_io {
    ($Name:ident, $Kind:ident :: $Io:ident) => {
        impl ::std::convert::From<::std::io::Error> for $Name {
            fn from(e: ::std::io::Error) -> Self {
                Self::new($Kind::$Io, e.to_string())
            }
        }
    };
}

/// Declares a crate's error type that carries the OS error number it came
/// from: [`define_error!`](crate::define_error) with the extra field `errno:
/// Option<i32>` (getter `errno()`), plus the two constructors every such
/// crate has: `invalid(message)` (kind `$Kind::$Invalid`, no errno) and
/// `with_errno(kind, message, errno)`. One definition for firmtime-rt,
/// firmtime-midi and firmtime-net, which had a copy each.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// #[non_exhaustive]
/// pub enum ErrorKind {
///     /// A bad argument.
///     InvalidInput,
///     /// An operating-system error.
///     Io,
/// }
/// firmtime_rt::define_os_error! {
///     /// An error.
///     pub struct Error {
///         kind: ErrorKind,
///         invalid: InvalidInput,
///     }
/// }
/// let e = Error::invalid("--rate must be 1 to 10");
/// assert_eq!((e.kind(), e.errno()), (ErrorKind::InvalidInput, None));
/// let e = Error::with_errno(ErrorKind::Io, "opening /dev/x: no such device", 19);
/// assert_eq!((e.kind(), e.errno(), e.message()), (ErrorKind::Io, Some(19), "opening /dev/x: no such device"));
/// ```
#[macro_export]
macro_rules! define_os_error {
    (
        $(#[$meta:meta])*
        $vis:vis struct $Name:ident {
            kind: $Kind:ident,
            invalid: $Invalid:ident $(,)?
        }
    ) => {
        $crate::define_error! {
            $(#[$meta])*
            $vis struct $Name {
                kind: $Kind,
                /// The OS error number this error came from, if any.
                errno: ::std::option::Option<i32>,
            }
        }

        impl $Name {
            /// Builds an error that carries the OS error number it came from.
            pub fn with_errno(
                kind: $Kind,
                message: impl ::std::convert::Into<::std::string::String>,
                errno: i32,
            ) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    errno: ::std::option::Option::Some(errno),
                }
            }

            #[doc = concat!("Builds an [`", stringify!($Kind), "::", stringify!($Invalid), "`] error.")]
            pub fn invalid(message: impl ::std::convert::Into<::std::string::String>) -> Self {
                Self::new($Kind::$Invalid, message)
            }
        }
    };
}
