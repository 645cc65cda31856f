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

/// Characters of a user's string (a label, a plugin spec, a value) that an
/// error message repeats; the rest is summarised by [`shown`].
pub const SHOWN_CHARS: usize = 64;

/// A user's string as an error message repeats it: whole when it has at
/// most [`SHOWN_CHARS`] characters, else its first [`SHOWN_CHARS`] and
/// `… (N bytes)`, so that a 500 KB label makes a one-line error, not a
/// 500 KB one. Control characters are escaped (`\n` does not break the line).
pub fn shown(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if s.chars().nth(SHOWN_CHARS).is_some() {
        out.push_str(&format!("… ({} bytes)", s.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_user_strings_are_cut_to_a_line() {
        assert_eq!(shown("amp_mono"), "amp_mono");
        let exact = "x".repeat(SHOWN_CHARS);
        assert_eq!(shown(&exact), exact);
        let big = "é".repeat(250_000); // 500 000 bytes
        assert_eq!(
            shown(&big),
            format!("{}… (500000 bytes)", "é".repeat(SHOWN_CHARS))
        );
        assert_eq!(shown("a\nb\u{1b}"), "a\\nb\\u{1b}");
    }
}
