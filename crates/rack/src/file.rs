//! The rack file: a TOML description of a plugin chain, each stage local or
//! remote. The format is in docs/RACK.md; `examples/rack-*.toml` are samples.
//!
//! ```toml
//! client = "rack"                  # JACK client name
//! connect_in = ["system:capture_1"]
//! connect_out = ["system:playback_1"]
//! deadline = 0.9                   # remote stages wait at most this fraction of the period
//!
//! [[stage]]
//! name = "gain"
//! plugin = "amp_mono"              # label, unique ID or FILE:LABEL
//! controls = { Gain = 0.5 }
//!
//! [[stage]]
//! name = "far"
//! work = { fraction = 0.5, mode = "sleep" }   # the worker's built-in waste_time
//! remote = { worker = "127.0.0.1:7700", window = 1 }
//! # a hot standby: remote = { worker = "…", standby = "10.0.0.3:7700" }
//! ```
//!
//! A stage is one of three kinds: a local plugin (`plugin`), a remote real
//! plugin (`plugin` and `remote`: the worker hosts it), or the worker's
//! built-in load (`work` and `remote`: copy plus a hold of a fraction of
//! the period, which emulates `waste_time` on the worker).
//!
//! Every error names the file, line and column.
//!
//! Not for the RT path: parsing allocates.

use crate::error::{Error, ErrorKind, Result};
use firmtime_net::{Work, WorkMode};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A line and column in a rack file, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub col: usize,
}

impl Pos {
    /// The position of byte `offset` in `text`.
    pub fn of(text: &str, offset: usize) -> Pos {
        let offset = offset.min(text.len());
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line,
            col: before[start..].chars().count() + 1,
        }
    }
}

/// Where a remote stage runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteSpec {
    /// `host:port` of a `firmtime net worker`.
    pub worker: String,
    /// Pre-shared key file; `None` = unauthenticated.
    pub key_file: Option<PathBuf>,
    /// Periods between sending a block and using its result: 0, 1 or 2.
    pub window: u8,
    /// Encrypt the session's data plane (ChaCha20-Poly1305 with per-session
    /// keys derived from the key file, as `net bench --encrypt`); needs
    /// `key_file`. docs/NET.md, "Encryption".
    pub encrypt: bool,
    /// A hot standby worker, `host:port` (`standby = "…"`): it runs the
    /// same stream (every block mirrored) and serves when the worker misses
    /// a deadline or dies. docs/NET.md, "Hot standby"; docs/RACK.md.
    pub standby: Option<String>,
}

/// What a stage runs.
#[derive(Debug, Clone, PartialEq)]
pub enum StageKind {
    /// A LADSPA plugin (label, unique ID or `FILE:LABEL`), local or on the worker.
    Plugin(String),
    /// The worker's built-in load: copy each channel and hold the block for
    /// `work.fraction` of the period (remote only).
    Work {
        /// Fraction and mode (spin or sleep).
        work: Work,
        /// Audio channels; `None` = as many as the previous stage outputs (1 first).
        channels: Option<usize>,
    },
}

/// One stage of a rack.
#[derive(Debug, Clone, PartialEq)]
pub struct StageSpec {
    /// Unique name (default `stageN`, from 1), used by `stage.port = value`.
    pub name: String,
    /// What it runs.
    pub kind: StageKind,
    /// Control values by port name (or port index as text), in file order.
    pub controls: Vec<(String, f32)>,
    /// `Some` for a remote stage.
    pub remote: Option<RemoteSpec>,
    /// Where the stage starts in the file.
    pub at: Pos,
}

/// A parsed rack file.
#[derive(Debug, Clone, PartialEq)]
pub struct RackFile {
    /// Where it came from (a path, or a name for text), for messages.
    pub origin: String,
    /// JACK client name.
    pub client: String,
    /// Ports to connect the rack's inputs from, in channel order.
    pub connect_in: Vec<String>,
    /// Ports to connect the rack's outputs to, in channel order.
    pub connect_out: Vec<String>,
    /// Fraction of the period remote stages wait for results (0.05 to 1).
    pub deadline: f64,
    /// The chain, in order.
    pub stages: Vec<StageSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    client: Option<String>,
    #[serde(default)]
    connect_in: Vec<String>,
    #[serde(default)]
    connect_out: Vec<String>,
    deadline: Option<Spanned<f64>>,
    #[serde(default)]
    stage: Vec<Spanned<RawStage>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    name: Option<Spanned<String>>,
    plugin: Option<String>,
    work: Option<Spanned<RawWork>>,
    channels: Option<Spanned<usize>>,
    #[serde(default)]
    controls: BTreeMap<String, Spanned<f32>>,
    remote: Option<Spanned<RawRemote>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWork {
    fraction: f64,
    #[serde(default = "default_mode")]
    mode: String,
}

fn default_mode() -> String {
    "sleep".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    worker: String,
    key_file: Option<PathBuf>,
    #[serde(default = "default_window")]
    window: Spanned<i64>,
    #[serde(default)]
    encrypt: Option<Spanned<bool>>,
    standby: Option<Spanned<String>>,
}

fn default_window() -> Spanned<i64> {
    // A default has no place in the file; 0..0 points at its start.
    Spanned::new(0..0, 1)
}

impl RackFile {
    /// Reads and parses the rack file at `path`.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] when it cannot be read; else as [`RackFile::parse`].
    pub fn load(path: &Path) -> Result<RackFile> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read rack file {}: {e}", path.display()),
            )
        })?;
        RackFile::parse(&text, &path.display().to_string())
    }

    /// Parses rack-file text; `origin` names it in messages.
    ///
    /// # Errors
    /// [`ErrorKind::Parse`], the message starting `ORIGIN:LINE:COL:`, for
    /// invalid TOML, an unknown key, a wrong type, a stage that is neither
    /// or both of `plugin` and `work`, `work` without `remote`, a window
    /// outside 0–2, a deadline outside 0.05–1, a bad work mode, a duplicate
    /// stage name, or no stage at all.
    pub fn parse(text: &str, origin: &str) -> Result<RackFile> {
        let err = |offset: usize, msg: &str| {
            let p = Pos::of(text, offset);
            Error::new(
                ErrorKind::Parse,
                format!("{origin}:{}:{}: {msg}", p.line, p.col),
            )
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            err(at, e.message().trim())
        })?;
        let deadline = match raw.deadline {
            None => 0.9,
            Some(d) => {
                let v = *d.get_ref();
                if !(0.05..=1.0).contains(&v) {
                    return Err(err(
                        d.span().start,
                        &format!("deadline {v} is out of range: give 0.05 to 1 (a fraction of the period)"),
                    ));
                }
                v
            }
        };
        if raw.stage.is_empty() {
            return Err(err(
                text.len(),
                "the rack has no stage: add at least one [[stage]] with plugin = \"LABEL\"",
            ));
        }
        let mut stages: Vec<StageSpec> = Vec::with_capacity(raw.stage.len());
        for (k, st) in raw.stage.into_iter().enumerate() {
            let start = st.span().start;
            let st = st.into_inner();
            let name = match st.name {
                Some(n) => {
                    let v = n.get_ref().clone();
                    if v.is_empty() || v.contains(['.', '=', ' ']) {
                        return Err(err(
                            n.span().start,
                            &format!(
                                "stage name {v:?} must be non-empty, without '.', '=' or spaces"
                            ),
                        ));
                    }
                    if stages.iter().any(|s| s.name == v) {
                        return Err(err(
                            n.span().start,
                            &format!(
                                "stage name {v:?} is used twice: give each stage its own name"
                            ),
                        ));
                    }
                    v
                }
                None => format!("stage{}", k + 1),
            };
            // TOML spells inf and nan; neither is a control value (NaN
            // passes every range comparison, inf any open range).
            let mut controls = Vec::with_capacity(st.controls.len());
            for (port, v) in st.controls {
                let x = *v.get_ref();
                if !x.is_finite() {
                    return Err(err(
                        v.span().start,
                        &format!(
                            "control {port:?} = {x} is not a finite number: give a value in the port's range"
                        ),
                    ));
                }
                controls.push((port, x));
            }
            let remote = match st.remote {
                None => None,
                Some(r) => {
                    let r = r.into_inner();
                    let w = *r.window.get_ref();
                    if !(0..=2).contains(&w) {
                        return Err(err(
                            r.window.span().start,
                            &format!("window {w} is out of range: give 0, 1 or 2 periods"),
                        ));
                    }
                    let encrypt = match r.encrypt {
                        Some(e) if *e.get_ref() && r.key_file.is_none() => {
                            return Err(err(
                                e.span().start,
                                "encrypt = true needs key_file: the session keys that encrypt \
                                 the audio derive from the key the worker has (its --key FILE)",
                            ));
                        }
                        Some(e) => *e.get_ref(),
                        None => false,
                    };
                    let standby = match r.standby {
                        Some(s) if s.get_ref().trim() == r.worker.trim() => {
                            return Err(err(
                                s.span().start,
                                &format!(
                                    "standby = {:?} is the worker itself: give a second \
                                     worker (HOST:PORT) that holds the same plugin",
                                    s.get_ref()
                                ),
                            ));
                        }
                        s => s.map(Spanned::into_inner),
                    };
                    Some(RemoteSpec {
                        worker: r.worker,
                        key_file: r.key_file,
                        window: w as u8,
                        encrypt,
                        standby,
                    })
                }
            };
            let kind = match (st.plugin, st.work) {
                (Some(p), None) => {
                    if let Some(c) = &st.channels {
                        return Err(err(
                            c.span().start,
                            "channels is for work stages: a plugin's ports fix its channels",
                        ));
                    }
                    StageKind::Plugin(p)
                }
                (None, Some(w)) => {
                    let at = w.span().start;
                    let w = w.into_inner();
                    let mode: WorkMode = w
                        .mode
                        .parse()
                        .map_err(|e: firmtime_net::Error| err(at, &e.to_string()))?;
                    let work = Work {
                        fraction: w.fraction,
                        mode,
                    };
                    work.validate()
                        .map_err(|e| err(at, &e.to_string()))?;
                    if remote.is_none() {
                        return Err(err(
                            at,
                            &format!(
                                "stage {name:?}: work is the worker's built-in load and needs \
                                 remote = {{ worker = \"HOST:PORT\" }}; for a local load use \
                                 plugin = \"waste_time\""
                            ),
                        ));
                    }
                    let channels = match st.channels {
                        Some(c) if *c.get_ref() == 0 || *c.get_ref() > crate::MAX_CHANNELS => {
                            return Err(err(
                                c.span().start,
                                &format!("channels must be 1 to {}", crate::MAX_CHANNELS),
                            ))
                        }
                        c => c.map(Spanned::into_inner),
                    };
                    StageKind::Work { work, channels }
                }
                (None, None) => {
                    return Err(err(
                        start,
                        &format!("stage {name:?} has neither plugin = \"LABEL\" nor work = {{ fraction = F }}"),
                    ))
                }
                (Some(_), Some(w)) => {
                    return Err(err(
                        w.span().start,
                        &format!("stage {name:?} has both plugin and work: give one"),
                    ))
                }
            };
            stages.push(StageSpec {
                name,
                kind,
                controls,
                remote,
                at: Pos::of(text, start),
            });
        }
        Ok(RackFile {
            origin: origin.to_string(),
            client: raw.client.unwrap_or_else(|| "firmtime-rack".into()),
            connect_in: raw.connect_in,
            connect_out: raw.connect_out,
            deadline,
            stages,
        })
    }

    /// `ORIGIN:LINE:COL` of stage `k`, for messages about it.
    pub fn where_stage(&self, k: usize) -> String {
        let at = self.stages.get(k).map(|s| s.at).unwrap_or_default();
        format!("{}:{}:{}", self.origin, at.line, at.col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        let e = RackFile::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Parse);
        e.message().to_string()
    }

    #[test]
    /// Regression (sibling of issue 28's `ladspa apply amp_mono inf`): TOML's
    /// inf and nan were taken as control values (NaN passes every range check).
    fn non_finite_controls_are_refused_with_their_place() {
        for v in ["inf", "-inf", "nan", "+inf"] {
            let m = parse_err(&format!(
                "[[stage]]\nplugin = \"amp_mono\"\ncontrols = {{ Gain = {v} }}\n"
            ));
            assert!(m.starts_with("t.toml:3:"), "{m}");
            assert!(m.contains("control \"Gain\""), "{m}");
            assert!(m.contains("not a finite number"), "{m}");
        }
        let f = RackFile::parse(
            "[[stage]]\nplugin = \"amp_mono\"\ncontrols = { Gain = 2.5 }\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(f.stages[0].controls, vec![("Gain".to_string(), 2.5)]);
    }

    #[test]
    fn a_standby_is_read_beside_the_worker_and_may_not_be_the_worker() {
        let f = RackFile::parse(
            "[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\", standby = \"g:2\" }\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            f.stages[0].remote.as_ref().unwrap().standby.as_deref(),
            Some("g:2")
        );
        let f = RackFile::parse(
            "[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\" }\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(f.stages[0].remote.as_ref().unwrap().standby, None);
        let m = parse_err(
            "[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\", standby = \"h:1\" }\n",
        );
        assert!(m.starts_with("t.toml:3:"), "{m}");
        assert!(m.contains("is the worker itself"), "{m}");
    }

    #[test]
    fn parses_a_local_and_a_remote_stage() {
        let f = RackFile::parse(
            "client = \"r\"\nconnect_out = [\"a:b\"]\n\n[[stage]]\nplugin = \"amp_mono\"\ncontrols = { Gain = 0.5 }\n\n[[stage]]\nname = \"far\"\nwork = { fraction = 0.25 }\nremote = { worker = \"127.0.0.1:7700\", window = 2 }\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(f.client, "r");
        assert_eq!(f.deadline, 0.9);
        assert_eq!(f.connect_out, vec!["a:b".to_string()]);
        assert_eq!(f.stages.len(), 2);
        assert_eq!(f.stages[0].name, "stage1");
        assert_eq!(f.stages[0].kind, StageKind::Plugin("amp_mono".into()));
        assert_eq!(f.stages[0].controls, vec![("Gain".to_string(), 0.5)]);
        assert_eq!(f.stages[0].at, Pos { line: 4, col: 1 });
        assert_eq!(f.stages[1].name, "far");
        assert_eq!(
            f.stages[1].kind,
            StageKind::Work {
                work: Work {
                    fraction: 0.25,
                    mode: WorkMode::Sleep
                },
                channels: None
            }
        );
        assert_eq!(f.stages[1].remote.as_ref().unwrap().window, 2);
        assert_eq!(f.where_stage(1), "t.toml:8:1");
    }

    #[test]
    fn toml_syntax_error_has_line_and_column() {
        let m = parse_err("[[stage]]\nplugin = \"amp\nname = 3\n");
        assert!(m.starts_with("t.toml:2:"), "{m}");
    }

    #[test]
    fn unknown_key_is_located() {
        let m = parse_err("[[stage]]\nplugin = \"amp_mono\"\n  gain = 1.0\n");
        assert!(m.starts_with("t.toml:3:3: unknown field `gain`"), "{m}");
    }

    #[test]
    fn wrong_type_is_located() {
        let m = parse_err("[[stage]]\nplugin = \"a\"\ncontrols = { Gain = \"loud\" }\n");
        assert!(m.starts_with("t.toml:3:"), "{m}");
    }

    #[test]
    fn window_out_of_range_points_at_the_value() {
        let m = parse_err("[[stage]]\nplugin = \"a\"\nremote = { worker = \"h:1\", window = 3 }\n");
        assert_eq!(
            m,
            "t.toml:3:37: window 3 is out of range: give 0, 1 or 2 periods"
        );
    }

    #[test]
    fn stage_without_plugin_or_work() {
        let m = parse_err("deadline = 0.5\n\n[[stage]]\nname = \"x\"\n");
        assert!(m.starts_with("t.toml:3:1: stage \"x\" has neither"), "{m}");
    }

    #[test]
    fn work_needs_remote() {
        let m = parse_err("[[stage]]\nwork = { fraction = 0.5 }\n");
        assert!(
            m.starts_with("t.toml:2:8: stage \"stage1\": work is"),
            "{m}"
        );
    }

    #[test]
    fn bad_work_mode_and_fraction() {
        let m = parse_err(
            "[[stage]]\nwork = { fraction = 0.5, mode = \"nap\" }\nremote = { worker = \"h:1\" }\n",
        );
        assert!(m.contains("work mode 'nap' is unknown"), "{m}");
        let m = parse_err("[[stage]]\nwork = { fraction = 9.0 }\nremote = { worker = \"h:1\" }\n");
        assert!(
            m.starts_with("t.toml:2:8: work fraction 9 is out of range"),
            "{m}"
        );
    }

    #[test]
    fn duplicate_names_and_deadline() {
        let m = parse_err(
            "[[stage]]\nname = \"a\"\nplugin = \"x\"\n[[stage]]\nname = \"a\"\nplugin = \"y\"\n",
        );
        assert!(
            m.starts_with("t.toml:5:8: stage name \"a\" is used twice"),
            "{m}"
        );
        let m = parse_err("deadline = 2.0\n[[stage]]\nplugin = \"x\"\n");
        assert!(
            m.starts_with("t.toml:1:12: deadline 2 is out of range"),
            "{m}"
        );
    }

    #[test]
    fn empty_rack() {
        let m = parse_err("client = \"x\"\n");
        assert!(m.contains("the rack has no stage"), "{m}");
    }
}
