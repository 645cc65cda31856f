//! Whether a command explains its late wake-ups: `--explain auto|on|off`,
//! one type for every command that explains (`lab cyclic`, `lab all`,
//! `tap run`, `net bench`, `watch`); each has its own default.

use serde::{Deserialize, Serialize};

/// `--explain MODE` (docs/VOCABULARY.md): a bare `--explain` is `on`, the
/// old `--no-explain` is `off`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExplainMode {
    /// Where the explaining trace can run (root, tracefs); elsewhere the
    /// command says why not and measures without it.
    #[default]
    Auto,
    /// Required: the command fails, naming the reason, when it cannot run.
    On,
    /// Never.
    Off,
}

/// What an [`ExplainMode`] decides on a machine ([`ExplainMode::decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run the explaining trace.
    Run,
    /// Do not: off, or `auto` where it cannot run; why, in words.
    Skip(String),
    /// `on` where it cannot run: the command fails with this reason.
    Refuse(String),
}

impl ExplainMode {
    /// The modes' words, as `--help` and the docs show them.
    pub const WORDS: [&'static str; 3] = ["auto", "on", "off"];

    /// The word for this mode.
    pub fn word(self) -> &'static str {
        match self {
            ExplainMode::Auto => "auto",
            ExplainMode::On => "on",
            ExplainMode::Off => "off",
        }
    }

    /// Whether to run, given whether the trace can run here (`available`,
    /// asked only when it matters: [`super::available`] in the commands).
    pub fn decide(self, available: impl FnOnce() -> std::result::Result<(), String>) -> Decision {
        match self {
            ExplainMode::Off => Decision::Skip("turned off (--explain off)".into()),
            ExplainMode::Auto => match available() {
                Ok(()) => Decision::Run,
                Err(why) => Decision::Skip(why),
            },
            ExplainMode::On => match available() {
                Ok(()) => Decision::Run,
                Err(why) => Decision::Refuse(why),
            },
        }
    }
}

impl std::fmt::Display for ExplainMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

impl std::str::FromStr for ExplainMode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<ExplainMode, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ExplainMode::Auto),
            "on" => Ok(ExplainMode::On),
            "off" => Ok(ExplainMode::Off),
            other => Err(format!(
                "unknown explain mode {other:?}: valid is auto, on or off"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_back_from_its_word_and_nothing_else_parses() {
        for w in ExplainMode::WORDS {
            let m: ExplainMode = w.parse().unwrap();
            assert_eq!(m.to_string(), w);
        }
        assert_eq!("ON".parse::<ExplainMode>(), Ok(ExplainMode::On));
        let e = "yes".parse::<ExplainMode>().unwrap_err();
        assert!(
            e.contains("\"yes\"") && e.contains("auto, on or off"),
            "{e}"
        );
    }

    #[test]
    fn off_never_asks_auto_skips_where_unavailable_and_on_refuses() {
        let no = || Err::<(), _>("no tracefs".to_string());
        let yes = || Ok::<(), String>(());
        let asked = std::cell::Cell::new(false);
        let d = ExplainMode::Off.decide(|| {
            asked.set(true);
            Ok(())
        });
        assert!(matches!(d, Decision::Skip(_)) && !asked.get());
        assert_eq!(ExplainMode::Auto.decide(yes), Decision::Run);
        assert_eq!(
            ExplainMode::Auto.decide(no),
            Decision::Skip("no tracefs".into())
        );
        assert_eq!(ExplainMode::On.decide(yes), Decision::Run);
        assert_eq!(
            ExplainMode::On.decide(no),
            Decision::Refuse("no tracefs".into())
        );
    }
}
