//! `firmtime doctor`: renders the checks of [`firmtime_lab::doctor`] as a
//! table on stdout, or as JSON with `--json PATH`.

use crate::Outcome;
use firmtime_lab::doctor::{self, Check, Report, Status};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `firmtime doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Write the checks and the system block as JSON to PATH (`-` or a bare --json: stdout).
    /// A file is replaced atomically, a device or FIFO written into, a symbolic link refused.
    ///
    /// Keys: {"checks": [{"id", "title", "status", "value", "fix"}, ...],
    /// "system": {...}}; see docs/DOCTOR.md.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
}

/// Runs the checks, prints the table (unless JSON goes to stdout), writes
/// JSON if asked. Failed when any check fails.
pub fn run(args: DoctorArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &args.json {
        // A link, a directory or a missing directory is named before the checks run.
        crate::args::check_output_file("--json", p)?;
    }
    // Only a client that connects tells a live server from /dev/shm leftovers.
    let jack_up = firmtime_jack::server_running(None);
    let report = doctor::run_with_jack(doctor::STEAL_SAMPLE, Some(jack_up));
    let json_to_stdout = crate::args::is_stdout(args.json.as_deref());
    if !json_to_stdout {
        print!("{}", render(&report, crate::colour::stdout()));
    }
    if let Some(p) = &args.json {
        crate::args::write_json(p, &report)?;
    }
    Ok(if report.any_failed() {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

fn tag(s: Status, colour: bool) -> String {
    use crate::colour::{paint, Hue};
    match s {
        Status::Pass => paint("[pass]", Hue::Green, colour),
        Status::Warn => paint("[warn]", Hue::Yellow, colour),
        Status::Fail => paint("[FAIL]", Hue::Red, colour),
        Status::Unknown => "[ ?? ]".to_string(),
    }
}

/// The human table: a header naming the machine, one line per check (fix on
/// the next line when not pass), then a one-line summary; status words in
/// colour when `colour`.
fn render(r: &Report, colour: bool) -> String {
    let s = &r.system;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "firmtime {} doctor on {} — Linux {} {} ({}), {} CPU{}, {}",
        s.firmtime_version,
        s.hostname.as_deref().unwrap_or("?"),
        s.kernel_release,
        s.arch,
        s.preempt_model.name(),
        s.cpus_online,
        if s.cpus_online == 1 { "" } else { "s" },
        s.cpu_model.as_deref().unwrap_or("unknown CPU"),
    );
    out.push('\n');
    let width = r.checks.iter().map(|c| c.title.len()).max().unwrap_or(0);
    for c in &r.checks {
        out.push_str(&line(c, width, colour));
    }
    let _ = writeln!(
        out,
        "\n{} pass, {} warn, {} fail, {} unknown",
        r.count(Status::Pass),
        r.count(Status::Warn),
        r.count(Status::Fail),
        r.count(Status::Unknown)
    );
    out
}

fn line(c: &Check, width: usize, colour: bool) -> String {
    let mut s = format!(
        "{} {:width$}  {}\n",
        tag(c.status, colour),
        c.title,
        c.value
    );
    if c.status != Status::Pass && !c.fix.is_empty() {
        let _ = writeln!(s, "{:indent$}fix: {}", "", c.fix, indent = 9);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, status: Status, fix: &str) -> Check {
        Check {
            id: id.into(),
            title: format!("Title {id}"),
            status,
            value: format!("value {id}"),
            fix: fix.into(),
        }
    }

    #[test]
    fn line_shows_tag_title_value_and_fix_only_when_not_pass() {
        let p = line(&check("a", Status::Pass, ""), 8, false);
        assert_eq!(p, "[pass] Title a   value a\n");
        let f = line(&check("b", Status::Fail, "do this"), 7, false);
        assert_eq!(f, "[FAIL] Title b  value b\n         fix: do this\n");
        assert!(line(&check("c", Status::Unknown, "x"), 7, false).starts_with("[ ?? ] "));
        assert!(line(&check("d", Status::Warn, "x"), 7, false).starts_with("[warn] "));
        let f = line(&check("e", Status::Fail, "do this"), 7, true);
        assert!(f.starts_with("\x1b[1;31m[FAIL]\x1b[0m Title e"), "{f:?}");
    }
}
