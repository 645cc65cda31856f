//! The crate's error: a kind, a message saying what was expected, and where
//! in the file it went wrong (1-based line and column).

use std::fmt;
use std::path::Path;

/// What went wrong, broadly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The text is not valid TOML / FTAP syntax.
    Syntax,
    /// A value is out of range, a key is unknown, or a rule is broken.
    Invalid,
    /// An FTAP keyword firmtime does not know.
    UnknownKeyword,
    /// A data file (CSV/JSON) is malformed.
    Format,
    /// Reading or writing a file failed.
    Io,
    /// The MIDI backend failed (disconnected, refused an output) outside a
    /// trial (the timing certificate).
    Backend,
}

firmtime_rt::define_error! {
    /// An error with an actionable message and, for file content, a location.
    pub struct Error {
        kind: ErrorKind,
        /// 1-based line, if known.
        line: Option<usize>,
        /// 1-based column (in characters), if known.
        column: Option<usize>,
    }
    Display: custom
}

impl Error {
    /// An error at a 1-based line and column.
    pub fn at(kind: ErrorKind, line: usize, column: usize, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            line: Some(line),
            column: Some(column),
        }
    }

    /// An error at a byte offset of `text` (converted to line and column).
    pub fn at_byte(kind: ErrorKind, text: &str, byte: usize, message: impl Into<String>) -> Self {
        let (l, c) = line_col(text, byte);
        Self::at(kind, l, c, message)
    }

    /// An I/O error on `path`, saying what was being done.
    pub fn io(what: &str, path: &Path, e: &std::io::Error) -> Self {
        Self::new(
            ErrorKind::Io,
            format!("cannot {what} {}: {e}", path.display()),
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}: {}", self.message),
            (Some(l), None) => write!(f, "line {l}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// 1-based line and column (in characters) of byte offset `byte` in `text`.
pub fn line_col(text: &str, byte: usize) -> (usize, usize) {
    let mut byte = byte.min(text.len());
    while !text.is_char_boundary(byte) {
        byte -= 1;
    }
    let before = &text[..byte];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, text[start..byte].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let t = "a = 1\nbé = 2\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 6), (2, 1));
        assert_eq!(line_col(t, 9), (2, 3)); // after 'b' and the 2-byte 'é'
        assert_eq!(line_col(t, 999), (3, 1));
    }
}
