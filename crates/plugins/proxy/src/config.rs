//! The proxy's configuration (TOML) and the pure rules that turn it into
//! descriptors: unique IDs, labels, the description cache. No FFI here.

use firmtime_net::remote::{PluginDescription, MAX_FRAMES};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Unique IDs of remote plugins live in `BASE_ID ..= BASE_ID + 0xFFFFF`.
pub const BASE_ID: u64 = 0xF0_0000;
/// Frames per exchange unless `max_block` says otherwise.
pub const DEFAULT_MAX_BLOCK: u32 = 4096;
/// Describe/connect timeout unless `connect_timeout_ms` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1000;
/// Upper bound of `connect_timeout_ms` and `deadline_ms`.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// How long an offline render waits for the worker unless `offline_wait_ms` says otherwise.
pub const DEFAULT_OFFLINE_WAIT_MS: u64 = 10_000;
/// Upper bound of `offline_wait_ms`.
pub const MAX_OFFLINE_WAIT_MS: u64 = 600_000;
/// Largest config file read (a config is a few hundred bytes).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest key file read (keys are 16 to a few hundred bytes).
pub const MAX_KEY_BYTES: u64 = 4096;
/// Largest cached description read.
pub const MAX_CACHE_BYTES: u64 = 1 << 20;
/// Longest `label` and `worker` accepted (a label is a few dozen bytes).
pub const MAX_NAME_BYTES: usize = 256;
/// Exit status of a host whose offline render the proxy failed (EX_TEMPFAIL).
pub const RENDER_FAILED_EXIT: i32 = 75;

/// What run() does when the worker cannot deliver a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `realtime` when the thread calling run() has a real-time policy
    /// (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE: JACK, PipeWire), else `offline`.
    #[default]
    Auto,
    /// A live host: never wait longer than the block lasts, fill what is
    /// missing as `late` says, count it and report the count on stderr.
    Realtime,
    /// A file render: wait for the worker (bounded by `offline_wait_ms`);
    /// when a result cannot be had, fail the render: one stderr line, and
    /// the host process ends with exit status [`RENDER_FAILED_EXIT`].
    Offline,
}

/// What a real-time host gets in place of a result that is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Late {
    /// The input itself (audio input k to output k).
    #[default]
    Dry,
    /// Silence.
    Zeros,
    /// The last result delivered (silence before the first).
    Repeat,
}

pub use firmtime_rt::fs::read_small_file;

/// Reads `key_file` under the one rule for secrets (`firmtime_rt::secret`,
/// as `net worker --key`): a regular file of at most [`MAX_KEY_BYTES`] that
/// neither the group nor the world may write, owned by root or this user.
/// Returns the key and, when others may read the file, the warning to say.
///
/// # Errors
/// The message, naming the key file and what is wrong with it.
pub fn read_key(path: &Path) -> Result<(firmtime_net::Key, Option<String>), String> {
    let (key, warning) = firmtime_net::Key::from_file(path).map_err(|e| e.to_string())?;
    Ok((key, warning.map(|w| w.to_string())))
}

/// One `[[remote]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteEntry {
    /// The worker, `host:port`.
    pub worker: String,
    /// The pre-shared key file (the worker serves plugins only with a key).
    pub key_file: Option<PathBuf>,
    /// The remote plugin: label, unique ID or `LIBRARY:LABEL`.
    pub label: String,
    /// Periods between sending a block and using its result: 0, 1 or 2.
    #[serde(default)]
    pub window: u8,
    /// How long run() waits for a result, in ms. Default: half the block's
    /// duration. Offline hosts (applyplugin) want a generous value.
    pub deadline_ms: Option<f64>,
    /// Largest frames per exchange; longer run() calls are split.
    pub max_block: Option<u32>,
    /// Timeout of describe and connect, in ms.
    pub connect_timeout_ms: Option<u64>,
    /// `auto` (default), `realtime` or `offline`: see [`Mode`].
    #[serde(default)]
    pub mode: Mode,
    /// Real-time hosts: `dry` (default), `zeros` or `repeat`: see [`Late`].
    #[serde(default)]
    pub late: Late,
    /// Offline renders: how long to wait for the worker before failing, in ms.
    pub offline_wait_ms: Option<u64>,
    /// Encrypt the session's audio (ChaCha20-Poly1305 with per-session keys
    /// derived from `key_file`, as `net bench --encrypt`); needs `key_file`.
    /// A worker started with `--encrypt` serves only such sessions.
    #[serde(default)]
    pub encrypt: bool,
    /// A hot standby worker, `host:port`, holding the same plugin: every
    /// block goes to both and the standby's result serves when the worker
    /// misses a deadline or dies (docs/NET.md, "Hot standby"). It describes
    /// the plugin when the worker cannot, and serves alone when the worker
    /// is away when the session is set up.
    pub standby: Option<String>,
}

impl RemoteEntry {
    /// Checks the values that serde cannot.
    ///
    /// # Errors
    /// A message naming the bad field and its allowed values.
    pub fn validate(&self) -> Result<(), String> {
        if self.window > 2 {
            return Err(format!("window = {}: use 0, 1 or 2", self.window));
        }
        if let Some(d) = self.deadline_ms {
            if !(d > 0.0 && d <= MAX_TIMEOUT_MS as f64) {
                return Err(format!("deadline_ms = {d}: give 0 < ms ≤ {MAX_TIMEOUT_MS}"));
            }
        }
        if let Some(t) = self.connect_timeout_ms {
            if !(1..=MAX_TIMEOUT_MS).contains(&t) {
                return Err(format!(
                    "connect_timeout_ms = {t}: give 1 to {MAX_TIMEOUT_MS}"
                ));
            }
        }
        if let Some(t) = self.offline_wait_ms {
            if !(1..=MAX_OFFLINE_WAIT_MS).contains(&t) {
                return Err(format!(
                    "offline_wait_ms = {t}: give 1 to {MAX_OFFLINE_WAIT_MS}"
                ));
            }
        }
        if let Some(m) = self.max_block {
            if !(1..=MAX_FRAMES).contains(&m) {
                return Err(format!("max_block = {m}: give 1 to {MAX_FRAMES}"));
            }
        }
        let standby = self.standby.as_deref().unwrap_or("");
        if !standby.is_empty() && standby.trim() == self.worker.trim() {
            return Err(format!(
                "standby = \"{}\" is the worker itself: give a second worker (host:port) \
                 that holds the same plugin",
                firmtime_ladspa::shown(standby)
            ));
        }
        for (key, v) in [
            ("label", &self.label),
            ("worker", &self.worker),
            ("standby", &standby.to_string()),
        ] {
            if v.len() > MAX_NAME_BYTES {
                return Err(format!(
                    "{key} = \"{}\": give at most {MAX_NAME_BYTES} bytes",
                    firmtime_ladspa::shown(v)
                ));
            }
        }
        if self.encrypt && self.key_file.is_none() {
            return Err(
                "encrypt = true needs key_file: the session keys that encrypt the audio \
                        derive from the key the worker has (its --key FILE)"
                    .into(),
            );
        }
        if self.label.is_empty() || self.label.chars().any(char::is_whitespace) {
            return Err(format!(
                "label = \"{}\": give a plugin label or ID",
                firmtime_ladspa::shown(&self.label)
            ));
        }
        Ok(())
    }

    /// `max_block` or its default.
    pub fn max_frames(&self) -> u32 {
        self.max_block.unwrap_or(DEFAULT_MAX_BLOCK)
    }

    /// `connect_timeout_ms` or its default.
    pub fn connect_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.connect_timeout_ms
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
        )
    }

    /// `offline_wait_ms` or its default.
    pub fn offline_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.offline_wait_ms.unwrap_or(DEFAULT_OFFLINE_WAIT_MS))
    }
}

/// One entry as read: good, or why not (with the label if one was there).
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A usable entry.
    Entry(RemoteEntry),
    /// An entry that cannot be used.
    Bad {
        /// Its position (1-based).
        number: usize,
        /// Its label, if it has one.
        label: Option<String>,
        /// Why.
        message: String,
    },
}

/// The config file: `FIRMTIME_PROXY_CONFIG`, else `~/.config/firmtime/proxy.toml`.
/// The flag says whether the user named it (then a missing file is an error).
pub fn config_path() -> Option<(PathBuf, bool)> {
    if let Some(p) = std::env::var_os("FIRMTIME_PROXY_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), true));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some((Path::new(&home).join(".config/firmtime/proxy.toml"), false))
}

/// Parses a config text: `[[remote]]` entries. A bad entry does not spoil the others.
///
/// # Errors
/// The text is not TOML, or `remote` is not an array of tables.
pub fn parse(text: &str) -> Result<Vec<Parsed>, String> {
    let v: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        format!(
            "not valid TOML: {}",
            e.to_string().trim().replace('\n', " ")
        )
    })?;
    if let Some(k) = v.keys().find(|k| *k != "remote") {
        return Err(format!(
            "unknown key `{k}`: the file holds only [[remote]] entries"
        ));
    }
    let Some(list) = v.get("remote") else {
        return Ok(Vec::new());
    };
    let Some(list) = list.as_array() else {
        return Err("`remote` must be an array of tables: write [[remote]]".into());
    };
    Ok(list
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let label = e.get("label").and_then(|l| l.as_str()).map(str::to_string);
            match e.clone().try_into::<RemoteEntry>() {
                Ok(r) => match r.validate() {
                    Ok(()) => Parsed::Entry(r),
                    Err(message) => Parsed::Bad {
                        number: i + 1,
                        label,
                        message,
                    },
                },
                Err(err) => Parsed::Bad {
                    number: i + 1,
                    label,
                    message: err.to_string().trim().replace('\n', " "),
                },
            }
        })
        .collect())
}

/// The proxy's unique ID for a remote plugin ID: `0xF00000 + (id mod 0x100000)`.
pub fn proxy_id(remote_id: u64) -> u64 {
    BASE_ID + (remote_id & 0xF_FFFF)
}

/// The proxy's ID for a plugin it could not describe: from an FNV-1a hash of the label.
pub fn placeholder_id(label: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    BASE_ID + (h & 0xF_FFFF)
}

/// `id`, or the next free one in the proxy's range if `taken` has it.
pub fn unique_id(id: u64, taken: &[u64]) -> u64 {
    let mut id = id;
    while taken.contains(&id) {
        id = BASE_ID + ((id - BASE_ID + 1) & 0xF_FFFF);
    }
    id
}

/// `remote_<label>` with characters hosts dislike replaced, made unique with `_2`, `_3`…
pub fn proxy_label(remote: &str, taken: &[String]) -> String {
    let clean = firmtime_ladspa::lv2::plain_name(remote);
    let base = format!("remote_{clean}");
    let mut label = base.clone();
    let mut k = 2;
    while taken.contains(&label) {
        label = format!("{base}_{k}");
        k += 1;
    }
    label
}

/// Where the description of `entry` is cached: `FIRMTIME_PROXY_CACHE`,
/// else `$XDG_CACHE_HOME/firmtime/proxy`, else `~/.cache/firmtime/proxy`.
pub fn cache_file(entry: &RemoteEntry) -> Option<PathBuf> {
    let dir = if let Some(d) = std::env::var_os("FIRMTIME_PROXY_CACHE").filter(|d| !d.is_empty()) {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Path::new(&d).join("firmtime/proxy")
    } else {
        Path::new(&std::env::var_os("HOME").filter(|h| !h.is_empty())?)
            .join(".cache/firmtime/proxy")
    };
    let name: String = format!("{}_{}", entry.worker, entry.label)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Some(dir.join(format!("{name}.json")))
}

/// Reads a cached description.
pub fn read_cache(entry: &RemoteEntry) -> Option<PluginDescription> {
    let bytes = read_small_file(&cache_file(entry)?, MAX_CACHE_BYTES, "cached description").ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a description to the cache (atomically); failures are ignored:
/// the cache only helps when the worker is away at the next load.
pub fn write_cache(entry: &RemoteEntry, d: &PluginDescription) {
    let Some(path) = cache_file(entry) else {
        return;
    };
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let Ok(json) = serde_json::to_vec_pretty(d) else {
        return;
    };
    let _ = firmtime_rt::fs::write_atomic(&path, &json);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_in_range_and_duplicates_move_on() {
        assert_eq!(proxy_id(1181), 0xF0_0000 + 1181);
        assert_eq!(proxy_id(0x12_3456), 0xF2_3456);
        assert!(proxy_id(u64::MAX) < 0x100_0000);
        assert_eq!(placeholder_id("x"), placeholder_id("x"));
        assert!(placeholder_id("lpf") < 0x100_0000);
        assert_eq!(unique_id(BASE_ID + 5, &[BASE_ID + 5]), BASE_ID + 6);
        assert_eq!(
            unique_id(BASE_ID + 0xF_FFFF, &[BASE_ID + 0xF_FFFF]),
            BASE_ID
        );
    }

    #[test]
    fn labels_are_prefixed_cleaned_and_made_unique() {
        assert_eq!(proxy_label("lpf", &[]), "remote_lpf");
        assert_eq!(proxy_label("cmt:lpf", &[]), "remote_cmt_lpf");
        let taken = vec!["remote_lpf".to_string(), "remote_lpf_2".to_string()];
        assert_eq!(proxy_label("lpf", &taken), "remote_lpf_3");
    }

    #[test]
    fn parse_keeps_good_entries_and_explains_bad_ones() {
        let text = r#"
[[remote]]
worker = "10.0.0.2:7700"
key_file = "/k"
label = "lpf"
window = 1
deadline_ms = 500

[[remote]]
worker = "10.0.0.2:7700"
label = "amp"
window = 7

[[remote]]
label = "x"
colour = "red"
"#;
        let p = parse(text).unwrap();
        assert_eq!(p.len(), 3);
        let Parsed::Entry(e) = &p[0] else {
            panic!("{p:?}")
        };
        assert_eq!(e.window, 1);
        assert_eq!(e.deadline_ms, Some(500.0));
        assert_eq!(e.max_frames(), DEFAULT_MAX_BLOCK);
        match &p[1] {
            Parsed::Bad { label, message, .. } => {
                assert_eq!(label.as_deref(), Some("amp"));
                assert!(message.contains("window = 7"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        match &p[2] {
            Parsed::Bad {
                number, message, ..
            } => {
                assert_eq!(*number, 3);
                assert!(
                    message.contains("colour") || message.contains("worker"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("[[remote]\nx")
            .unwrap_err()
            .contains("not valid TOML"));
        assert!(parse("remote = 3").unwrap_err().contains("[[remote]]"));
        assert!(parse("other = 1").unwrap_err().contains("unknown key"));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn a_standby_is_read_and_may_not_be_the_worker() {
        let text = r#"
[[remote]]
worker = "h:1"
standby = "g:2"
label = "a"

[[remote]]
worker = "h:1"
label = "b"

[[remote]]
worker = "h:1"
standby = "h:1"
label = "c"
"#;
        let p = parse(text).unwrap();
        assert!(
            matches!(&p[0], Parsed::Entry(e) if e.standby.as_deref() == Some("g:2")),
            "{p:?}"
        );
        assert!(
            matches!(&p[1], Parsed::Entry(e) if e.standby.is_none()),
            "{p:?}"
        );
        match &p[2] {
            Parsed::Bad { label, message, .. } => {
                assert_eq!(label.as_deref(), Some("c"));
                assert!(message.contains("is the worker itself"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn encrypt_is_off_by_default_and_needs_a_key_file() {
        let text = r#"
[[remote]]
worker = "h:1"
key_file = "/k"
label = "a"
encrypt = true

[[remote]]
worker = "h:1"
label = "b"

[[remote]]
worker = "h:1"
label = "c"
encrypt = true

[[remote]]
worker = "h:1"
label = "d"
encrypt = "yes"
"#;
        let p = parse(text).unwrap();
        assert!(matches!(&p[0], Parsed::Entry(e) if e.encrypt), "{p:?}");
        assert!(matches!(&p[1], Parsed::Entry(e) if !e.encrypt), "{p:?}");
        match &p[2] {
            Parsed::Bad { label, message, .. } => {
                assert_eq!(label.as_deref(), Some("c"));
                assert!(
                    message.starts_with("encrypt = true needs key_file"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        match &p[3] {
            Parsed::Bad {
                number, message, ..
            } => {
                assert_eq!(*number, 4);
                assert!(message.contains("bool"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn modes_late_policies_and_timeouts_are_checked() {
        let base = "[[remote]]\nworker = \"h:1\"\nlabel = \"lpf\"\n";
        let one = |extra: &str| parse(&format!("{base}{extra}")).unwrap().remove(0);
        let Parsed::Entry(e) = one("") else { panic!() };
        assert_eq!((e.mode, e.late), (Mode::Auto, Late::Dry));
        assert_eq!(
            e.offline_wait().as_millis(),
            u128::from(DEFAULT_OFFLINE_WAIT_MS)
        );
        let Parsed::Entry(e) =
            one("mode = \"offline\"\nlate = \"repeat\"\noffline_wait_ms = 500\n")
        else {
            panic!()
        };
        assert_eq!((e.mode, e.late), (Mode::Offline, Late::Repeat));
        assert_eq!(e.offline_wait().as_millis(), 500);
        for (extra, want) in [
            ("mode = \"live\"\n", "unknown variant `live`"),
            ("late = \"nan\"\n", "unknown variant `nan`"),
            (
                "connect_timeout_ms = 0\n",
                "connect_timeout_ms = 0: give 1 to 60000",
            ),
            ("connect_timeout_ms = 3600000\n", "give 1 to 60000"),
            (
                "offline_wait_ms = 0\n",
                "offline_wait_ms = 0: give 1 to 600000",
            ),
            (
                "deadline_ms = nan\n",
                "deadline_ms = NaN: give 0 < ms ≤ 60000",
            ),
            ("deadline_ms = 1e9\n", "give 0 < ms ≤ 60000"),
        ] {
            match one(extra) {
                Parsed::Bad { message, .. } => {
                    assert!(message.contains(want), "{extra}: {message}")
                }
                other => panic!("{extra}: {other:?}"),
            }
        }
    }

    /// Regression test for issue 20 item 6: a FIFO as config hung the host
    /// in `ladspa_descriptor`, and `/dev/zero` was read until memory ran out.
    #[test]
    fn only_small_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("ftproxy-cfg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens it: a blocking open would never return.
        let e = read_small_file(&fifo, 100, "config").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_small_file(Path::new("/dev/zero"), 100, "key file").unwrap_err();
        assert_eq!(
            e,
            "key file /dev/zero: not a regular file; give a regular file"
        );
        let e = read_small_file(&dir, 100, "config").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'#'; 101]).unwrap();
        let e = read_small_file(&big, 100, "config").unwrap_err();
        assert!(
            e.contains("101 bytes, more than the 100 a config may have"),
            "{e}"
        );
        std::fs::write(&big, b"[[remote]]\n").unwrap();
        assert_eq!(
            read_small_file(&big, 100, "config").unwrap(),
            b"[[remote]]\n"
        );
        let e = read_small_file(&dir.join("none"), 100, "config").unwrap_err();
        assert!(e.contains("No such file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Regression (issue 28 item 6): a `key_file` others may write (0666,
    /// 0662) was accepted silently; one others may read is now said.
    #[test]
    fn a_key_file_follows_the_secret_rule() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ftproxy-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = |mode: u32| {
            let p = dir.join(format!("k{mode:o}"));
            std::fs::write(&p, [9u8; 32]).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        for mode in [0o666, 0o662, 0o620] {
            let p = key(mode);
            let e = read_key(&p).map(|_| ()).unwrap_err();
            assert!(
                e.starts_with(&format!("key file {}", p.display())) && e.contains("may write it"),
                "{e}"
            );
        }
        let (_, w) = read_key(&key(0o644)).unwrap();
        assert!(w.unwrap().contains("readable by its group and every user"));
        let (_, w) = read_key(&key(0o600)).unwrap();
        assert_eq!(w, None);
        let e = read_key(Path::new("/dev/zero")).map(|_| ()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
