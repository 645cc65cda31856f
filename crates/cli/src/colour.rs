//! Colour for status words on a terminal (`[FAIL]` red, `[warn]` yellow,
//! `[pass]` and `ok` green), never in a pipe or a file, and never when
//! `NO_COLOR` is set to anything non-empty (no-color.org) or `TERM=dumb`.

use std::io::IsTerminal;

/// A colour of a status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hue {
    /// Failed.
    Red,
    /// A warning.
    Yellow,
    /// Passed.
    Green,
}

/// Whether to colour what goes to stdout, from the process's environment.
pub fn stdout() -> bool {
    decide(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

/// Colour only on a terminal, without a non-empty `NO_COLOR`, and not on a dumb terminal.
pub fn decide(
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    terminal && no_color.map_or(true, |v| v.is_empty()) && term.map_or(true, |t| t != "dumb")
}

/// `text` in `hue` when `on`, else `text` unchanged.
pub fn paint(text: &str, hue: Hue, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let code = match hue {
        Hue::Red => "1;31",
        Hue::Yellow => "33",
        Hue::Green => "32",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color_or_a_dumb_term() {
        let xterm = Some(OsStr::new("xterm-256color"));
        assert!(decide(true, None, xterm));
        assert!(
            decide(true, Some(OsStr::new("")), xterm),
            "empty NO_COLOR is unset"
        );
        assert!(!decide(true, Some(OsStr::new("1")), xterm));
        assert!(!decide(false, None, xterm), "a pipe or a file");
        assert!(!decide(true, None, Some(OsStr::new("dumb"))));
        assert!(decide(true, None, None));
    }

    #[test]
    fn paint_wraps_in_sgr_only_when_on() {
        assert_eq!(paint("[FAIL]", Hue::Red, true), "\x1b[1;31m[FAIL]\x1b[0m");
        assert_eq!(paint("[pass]", Hue::Green, true), "\x1b[32m[pass]\x1b[0m");
        assert_eq!(paint("[warn]", Hue::Yellow, false), "[warn]");
    }
}
