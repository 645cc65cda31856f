//! `firmtime rack FILE`: run a chain of LADSPA plugins, local or remote, as
//! a JACK client (docs/RACK.md).

use crate::args::{self, Outcome, UsageError};
use anyhow::Context;
use clap::Args;
use firmtime_jack::{DummyOptions, DummyServer};
use firmtime_ladspa::{search_path, Scan};
use firmtime_rack::{ErrorKind, HostOptions, RackFile, RackHost};
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `firmtime rack`
#[derive(Debug, Args)]
pub struct RackArgs {
    /// The rack file (TOML; see docs/RACK.md and examples/rack-*.toml).
    file: PathBuf,
    /// Start a private `jackd -d dummy` server for the rack (no sound card needed).
    #[arg(long)]
    jack_dummy: bool,
    /// Sample rate of the --jack-dummy server (1000–768000 Hz).
    #[arg(long, default_value_t = 48_000, value_parser = clap::value_parser!(u32).range(args::SAMPLE_RATES))]
    rate: u32,
    /// Frames per period of the --jack-dummy server (16–8192).
    #[arg(long = "period-frames", alias = "period", value_name = "FRAMES", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(args::PERIOD_FRAMES))]
    period: u32,
    /// JACK: the server name (default: $JACK_DEFAULT_SERVER or "default").
    #[arg(long = "jack-server", alias = "server", value_name = "NAME")]
    server: Option<String>,
    /// JACK client name (default: the file's `client`).
    #[arg(long)]
    client: Option<String>,
    /// Connect this port to the rack's next input, in channel order; repeatable
    /// (or comma-separated).
    #[arg(
        long = "connect",
        alias = "connect-in",
        value_name = "PORT",
        value_delimiter = ','
    )]
    connect_in: Vec<String>,
    /// Connect the rack's next output to this port, in channel order; repeatable
    /// (or comma-separated).
    #[arg(long, value_name = "PORT", value_delimiter = ',')]
    connect_out: Vec<String>,
    /// More plugin directories to search before LADSPA_PATH (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ladspa_path: Vec<PathBuf>,
    /// Stop after this long (default: run until SIGINT, SIGTERM or SIGHUP).
    #[arg(long, value_name = "D", value_parser = args::duration)]
    duration: Option<Duration>,
    /// Time between status lines on stderr, e.g. 1s or 500ms (0s = none; up to 24h).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = args::duration_or_secs_upto(Duration::from_secs(86_400), "24h"))]
    status_every: Duration,
    /// Write the final counters as JSON here (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Read control commands (`stage.port = value`, one a line) from stdin
    /// even when it is not a terminal (a pipe, a file). Without it, commands
    /// are read only from a terminal: whatever else is on stdin (another
    /// program's messages) is never taken for a command.
    #[arg(long)]
    commands_from_stdin: bool,
    #[command(flatten)]
    metrics: crate::exposition::MetricsArgs,
}

/// The longest command line kept; the rest of a longer line is discarded
/// (a pipe may send anything, of any length).
const MAX_COMMAND_LINE: usize = 4096;

/// The next line of `r` (without its newline, lossy UTF-8), at most
/// [`MAX_COMMAND_LINE`] bytes of it kept; `None` at the end.
fn command_line(r: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut any = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        any = true;
        let (part, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let room = MAX_COMMAND_LINE.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let ended = done > part.len();
        r.consume(done);
        if ended {
            break;
        }
    }
    Ok(any.then(|| String::from_utf8_lossy(&line).into_owned()))
}

/// Whether `rack` reads control commands from stdin: from a terminal, or
/// from anything with `--commands-from-stdin`.
fn reads_commands(stdin_is_terminal: bool, commands_from_stdin: bool) -> bool {
    stdin_is_terminal || commands_from_stdin
}

/// Plugin directories: --ladspa-path, the directory of this binary (where
/// cargo puts the plugins firmtime builds), then LADSPA_PATH.
pub fn plugin_dirs(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = extra.to_vec();
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        dirs.push(d);
    }
    dirs.extend(search_path());
    dirs
}

/// Runs `firmtime rack`.
pub fn run(a: RackArgs) -> anyhow::Result<Outcome> {
    let file = RackFile::load(&a.file).map_err(|e| -> anyhow::Error {
        if e.kind() == ErrorKind::Parse {
            UsageError(e.to_string()).into()
        } else {
            e.into()
        }
    })?;
    let metrics = a.metrics.prepare()?;
    let stop = crate::signals::catch(crate::signals::Repeat::Ends)?;
    let server = if a.jack_dummy {
        let mut o = DummyOptions::new();
        o.rate = a.rate;
        o.period = a.period;
        o.realtime = true;
        let s = DummyServer::start(o).context("starting the dummy JACK server")?;
        eprintln!(
            "firmtime rack: private dummy JACK server {} ({} Hz, {} frames)",
            s.name(),
            a.rate,
            a.period
        );
        Some(s)
    } else {
        None
    };
    let scan = Scan::dirs(&plugin_dirs(&a.ladspa_path));
    let opts = HostOptions {
        server_name: server
            .as_ref()
            .map(|s| s.name().to_string())
            .or(a.server.clone()),
        client_name: a.client.clone(),
        connect_in: a.connect_in.clone(),
        connect_out: a.connect_out.clone(),
    };
    let mut host = RackHost::start(&file, &scan, &opts)?;
    for w in host.control().warnings() {
        eprintln!("firmtime: warning: {w}");
    }
    let source = host.metrics();
    let endpoint = metrics.serve("firmtime rack", move || {
        crate::exposition::rack_text(&source)
    })?;
    eprintln!(
        "firmtime rack: {} Hz, {} frames ({:.2} ms); inputs {}, outputs {}",
        host.sample_rate(),
        host.block_size(),
        host.block_size() as f64 * 1000.0 / f64::from(host.sample_rate()),
        port_list(host.input_ports()),
        port_list(host.output_ports())
    );
    let rate = f64::from(host.sample_rate());
    for s in host.control().stages() {
        let ctl: Vec<String> = s
            .controls
            .iter()
            .map(|(n, _, v)| format!("{n}={v}"))
            .collect();
        let latency = if s.latency_frames > 0 {
            format!(
                ", latency {} frames ({:.2} ms)",
                s.latency_frames,
                s.latency_frames as f64 * 1000.0 / rate
            )
        } else {
            String::new()
        };
        eprintln!(
            "  stage {}: {} [{}]{latency}",
            s.name,
            s.description,
            ctl.join(", ")
        );
    }
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdin_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if reads_commands(stdin_is_terminal, a.commands_from_stdin) {
        eprintln!("firmtime rack: type `stage.port = value` to change a control; SIGINT stops");
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            while let Ok(Some(line)) = command_line(&mut stdin) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    } else {
        // Not a terminal: its lines may be anything (libjack's messages in a
        // pipeline), never commands unless asked.
        drop(tx);
        eprintln!(
            "firmtime rack: stdin is not a terminal: no control commands are read from it \
             (--commands-from-stdin reads them); SIGINT stops"
        );
    }
    let started = Instant::now();
    let mut last_status = Instant::now();
    while !stop.load(Ordering::Relaxed) && !host.is_shut_down() {
        if a.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                let line = line.trim();
                if !line.is_empty() && !line.starts_with('#') {
                    match host.control().apply_line(line) {
                        Ok((s, p, v)) => eprintln!("set {s}.{p} = {v}"),
                        Err(e) => eprintln!("firmtime rack: {e}"),
                    }
                }
            }
            // No commands (not read, or stdin ended): wait as the receive would have.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !a.status_every.is_zero() && last_status.elapsed() >= a.status_every {
            last_status = Instant::now();
            let st = host.control().stats();
            let stages: Vec<String> = st
                .stages
                .iter()
                .map(|s| {
                    format!(
                        "{} {:.0}/{:.0} µs{}",
                        s.name,
                        s.mean_ns as f64 / 1e3,
                        s.max_ns as f64 / 1e3,
                        if s.late > 0 {
                            format!(" {} late", s.late)
                        } else {
                            String::new()
                        }
                    )
                })
                .collect();
            eprintln!(
                "cycles {} xruns {} DSP {:.1} % | {}",
                st.cycles,
                host.xruns(),
                host.cpu_load(),
                stages.join(" | ")
            );
        }
    }
    let xruns = host.xruns();
    let frame_gaps = host.frame_gaps();
    let dsp = host.cpu_load();
    let shut = host.is_shut_down();
    drop(endpoint);
    let stats = host.stop();
    drop(server);
    let out = serde_json::json!({
        "firmtime_version": env!("CARGO_PKG_VERSION"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rack_file": a.file.display().to_string(),
        "xruns": xruns,
        "frame_gaps": frame_gaps,
        "jack_library": firmtime_jack::libjack_version(),
        "dsp_load_percent": dsp,
        "server_shut_down": shut,
        "stats": stats,
    });
    if let Some(p) = &a.json {
        args::write_json(p, &out)?;
    }
    // With the JSON on stdout, the summary goes to stderr so stdout stays JSON.
    let json_on_stdout = args::is_stdout(a.json.as_deref());
    let say = |line: String| {
        if json_on_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say(format!(
        "firmtime rack: {} cycles, {} xruns and {} frame gaps (counted, not failures), {} oversize, {} control changes",
        stats.cycles, xruns, frame_gaps, stats.oversize, stats.controls_applied
    ));
    for s in &stats.stages {
        say(format!(
            "  {}: {} runs, mean {:.1} µs, max {:.1} µs, {} late{}, latency {} frames{}",
            s.name,
            s.runs,
            s.mean_ns as f64 / 1e3,
            s.max_ns as f64 / 1e3,
            s.late,
            if s.away > 0 {
                format!(" ({} with the worker away: dry without waiting)", s.away)
            } else {
                String::new()
            },
            s.latency_frames,
            match &s.standby {
                Some(sb) => format!(
                    ", standby {sb}: {} from the standby, {} takeover(s)",
                    s.from_standby, s.takeovers
                ),
                None => String::new(),
            }
        ));
    }
    Ok(if shut { Outcome::Failed } else { Outcome::Ok })
}

/// Port names for a message: `a, b` or `none`.
fn port_list<S: AsRef<str>>(ports: &[S]) -> String {
    if ports.is_empty() {
        "none".to_string()
    } else {
        ports
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Rack {
        #[command(flatten)]
        a: RackArgs,
    }

    /// Regression (issue 28 item 5): with stdin not a terminal, libjack's
    /// messages were parsed as control commands.
    #[test]
    fn commands_are_read_from_a_terminal_or_when_asked() {
        let a = Rack::try_parse_from(["rack", "r.toml"]).unwrap().a;
        assert!(!a.commands_from_stdin);
        assert!(!reads_commands(false, a.commands_from_stdin));
        assert!(reads_commands(true, a.commands_from_stdin));
        let a = Rack::try_parse_from(["rack", "r.toml", "--commands-from-stdin"])
            .unwrap()
            .a;
        assert!(reads_commands(false, a.commands_from_stdin));
    }

    #[test]
    fn command_lines_are_read_whole_up_to_the_cap_and_the_rest_discarded() {
        let long = "x".repeat(3 * MAX_COMMAND_LINE);
        let text = format!("g.Gain = 0.5\n{long}\nlast");
        // A tiny buffer: lines span many fills.
        let mut r = std::io::BufReader::with_capacity(7, text.as_bytes());
        assert_eq!(
            command_line(&mut r).unwrap().as_deref(),
            Some("g.Gain = 0.5")
        );
        assert_eq!(
            command_line(&mut r).unwrap(),
            Some("x".repeat(MAX_COMMAND_LINE))
        );
        assert_eq!(command_line(&mut r).unwrap().as_deref(), Some("last"));
        assert_eq!(command_line(&mut r).unwrap(), None);
    }
}
