//! `watch install`: the systemd unit that runs `firmtime watch` as a
//! service (restarts on failure, logs to the journal, stops on SIGTERM).

use std::path::Path;

/// Where `watch install` writes the unit by default.
pub const UNIT_PATH: &str = "/etc/systemd/system/firmtime-watch.service";

/// Quotes one argument for systemd's `ExecStart=` (double quotes when it
/// holds a space, a quote, a backslash or a `%` specifier; `$` doubled).
pub fn quote_arg(a: &str) -> String {
    let a = a.replace('%', "%%").replace('$', "$$");
    if a.is_empty()
        || a.chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'' || c == ';')
    {
        format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        a
    }
}

/// The unit text for `exe` run with `args` (the watch flags).
pub fn unit_text(exe: &Path, args: &[String]) -> String {
    let mut cmd = quote_arg(&exe.display().to_string());
    cmd.push_str(" watch");
    for a in args {
        cmd.push(' ');
        cmd.push_str(&quote_arg(a));
    }
    format!(
        "# Written by `firmtime watch install`; `firmtime watch install --print` shows it.
[Unit]
Description=firmtime watch: long-term wake-up latency of this machine
Documentation=man:systemd.service(5)
After=local-fs.target

[Service]
Type=exec
ExecStart={cmd}
# SIGTERM stops it cleanly: the interval being measured is stored.
KillSignal=SIGTERM
TimeoutStopSec=30
Restart=on-failure
RestartSec=10
# Lines (one per interval) go to the journal: journalctl -u firmtime-watch
StandardOutput=journal
StandardError=journal
# Real-time scheduling and locked memory.
LimitRTPRIO=99
LimitMEMLOCK=infinity
StateDirectory=firmtime
Nice=0

[Install]
WantedBy=multi-user.target
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_with_spaces_and_specifiers_are_quoted() {
        assert_eq!(quote_arg("--interval"), "--interval");
        assert_eq!(
            quote_arg("/var/lib/my db.sqlite"),
            "\"/var/lib/my db.sqlite\""
        );
        assert_eq!(quote_arg("50%"), "50%%");
        assert_eq!(quote_arg("a\"b"), "\"a\\\"b\"");
        let t = unit_text(
            Path::new("/usr/local/bin/firmtime"),
            &["--db".into(), "/var/lib/firmtime/watch.db".into()],
        );
        assert!(
            t.contains(
                "\nExecStart=/usr/local/bin/firmtime watch --db /var/lib/firmtime/watch.db\n"
            ),
            "{t}"
        );
        assert!(t.contains("\nRestart=on-failure\n"));
        assert!(t.contains("\nStandardError=journal\n"));
    }
}
