//! `firmtime net experiment`: Lago's Figures 5–8 on JACK's dummy backend
//! (docs/METHODOLOGY.md, "Distributed LADSPA experiments").

use crate::rack::plugin_dirs;
use crate::Outcome;
use anyhow::{bail, Context};
use clap::Args;
use firmtime_ladspa::Scan;
use firmtime_rack::experiment::{self, Setup, Timing};
use firmtime_rt::process::{self, Target};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `firmtime net experiment`
#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// Fewer points and shorter steps (about a minute).
    #[arg(long)]
    quick: bool,
    /// Directory for report.md, results.json, fig5.png … fig8.png, the
    /// workers' logs (workerN.log) and the waste_time plugin's log of each
    /// local point (waste_time-figF-RATEhz-FRAMES.csv; nothing goes to /tmp).
    #[arg(long)]
    out: PathBuf,
    /// More plugin directories to search for waste_time (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ladspa_path: Vec<PathBuf>,
    /// Also write results.json's content as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `firmtime net worker` children on loopback, stopped (SIGTERM, then
/// SIGKILL) and reaped on drop.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        process::stop_all(&mut self.0, Target::Process, Duration::from_secs(3));
    }
}

fn spawn_workers(
    n: usize,
    log_dir: &std::path::Path,
) -> anyhow::Result<(Workers, Vec<SocketAddr>)> {
    let exe = std::env::current_exe().context("locating the firmtime binary")?;
    let mut workers = Workers(Vec::new());
    let mut addrs = Vec::new();
    for k in 0..n {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let log = std::fs::File::create(log_dir.join(format!("worker{}.log", k + 1)))?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "net",
            "worker",
            "--listen",
            &addr.to_string(),
            "--priority",
            "fifo:70",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        // The worker dies with us, even if we are SIGKILLed.
        process::die_with_parent(&mut cmd, libc::SIGTERM);
        workers
            .0
            .push(cmd.spawn().context("starting `firmtime net worker`")?);
        addrs.push(addr);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for a in &addrs {
        while TcpStream::connect_timeout(a, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                bail!("worker {a} did not start listening within 10 s (see its log in the --out directory)");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok((workers, addrs))
}

/// Runs `firmtime net experiment`.
pub fn run(a: ExperimentArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        crate::args::check_output_file("--json", p)?;
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let scan = Scan::dirs(&plugin_dirs(&a.ladspa_path));
    if scan.find("waste_time").is_err() {
        bail!(
            "the waste_time plugin was not found next to firmtime or in LADSPA_PATH: build it \
             (cargo build --release -p firmtime-plugin-waste-time) or pass --ladspa-path DIR"
        );
    }
    let points = experiment::plan(a.quick);
    let needed = points
        .iter()
        .map(|p| match p.placement {
            experiment::Placement::Remote { workers, .. } => workers,
            experiment::Placement::Local => 0,
        })
        .max()
        .unwrap_or(0);
    let (workers, addrs) = spawn_workers(needed, &a.out)?;
    eprintln!(
        "firmtime net experiment: {} points, {} workers on loopback (sleep mode: emulates separate machines on this machine's shared cores)",
        points.len(),
        addrs.len()
    );
    let setup = Setup {
        scan: &scan,
        workers: addrs,
        timing: if a.quick {
            Timing::quick()
        } else {
            Timing::full()
        },
        log_dir: &a.out,
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = experiment::run(&points, &setup, a.quick, &command, &mut |l| {
        eprintln!("{l}")
    })?;
    drop(workers);
    experiment::write_report(&report, &a.out)?;
    if let Some(p) = &a.json {
        crate::args::write_json(p, &report)?;
    }
    let _redirect = crate::args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    println!(
        "| Figure | Rate | Period | Placement | Idle xruns | Usable | Central user | Central sys |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for p in &report.points {
        let s = p.steps.iter().rev().find(|s| s.passed).or(p.steps.last());
        println!(
            "| {} | {} | {} ({:.2} ms) | {} | {} | {} | {} | {} |",
            p.spec.figure,
            p.spec.rate,
            p.spec.period_frames,
            p.period_ms,
            match p.spec.placement {
                experiment::Placement::Local => "local".to_string(),
                experiment::Placement::Remote { workers, window } =>
                    format!("{workers} w, window {window}"),
            },
            p.baseline_xruns,
            match (p.spec.fixed, p.usable_fraction) {
                (Some(f), _) => format!("fixed {:.0} %", f * 100.0),
                (None, Some(u)) => format!("{:.0} %", u * 100.0),
                (None, None) => "none".into(),
            },
            s.map_or("-".into(), |s| format!("{:.1} %", s.central_user * 100.0)),
            s.map_or("-".into(), |s| format!("{:.1} %", s.central_sys * 100.0)),
        );
    }
    println!(
        "wrote {}/report.md, results.json, fig5.png … fig8.png, waste_time-*.csv ({} s)",
        a.out.display(),
        report.ended_unix_s.saturating_sub(report.started_unix_s)
    );
    Ok(Outcome::Ok)
}
