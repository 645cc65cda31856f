//! `firmtime net worker|bench|discover|stats`: the distributed block
//! exchange (Lago's middleware) from the command line. See docs/NET.md.

use crate::args::{self, UsageError};
use crate::Outcome;
use anyhow::Context;
use clap::builder::TypedValueParser;
use clap::{Args, Subcommand};
use firmtime_net::bench::{self, BenchConfig, BenchReport, Ramp};
use firmtime_net::{
    discovery, Key, ServerConfig, ServerEvent, Startups, WaitMode, Work, WorkMode, WorkerServer,
};
use firmtime_rt::outliers::Notes;
use firmtime_rt::sched::Policy;
use firmtime_trace::explain::{self, LoopThread};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `firmtime net …`
#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Serve sessions: TCP control and UDP data on one address and port.
    ///
    /// Runs until SIGINT, SIGTERM or SIGHUP. Logs sessions to stderr.
    ///
    /// Before a connection authenticates (its first message's MAC verified)
    /// it gets no thread and a few KiB: one thread reads every pending
    /// handshake, each must finish within --login-grace, and at most
    /// --max-startups FULL are pending (the oldest dropped early, as sshd's
    /// MaxStartups). Authenticated connections, sessions and their buffer
    /// memory are capped too (--max-connections, --max-sessions,
    /// --max-memory), with or without a key. Without --key the worker
    /// listens only on loopback unless given --insecure-no-key.
    /// See docs/NET.md, "Before authentication".
    Worker(WorkerArgs),
    /// Drive one master per worker from a periodic SCHED_FIFO loop and report late periods.
    ///
    /// Each worker holds each block for --work of the period (spin or sleep).
    /// --ramp raises the fraction step by step and reports the usable
    /// fraction: the largest with at most 0.1 % late periods.
    ///
    /// Each late period and missed loop deadline gets a cause seen from the
    /// master: master late (it sent the block too late) or worker or network
    /// side (it sent on time), and, where tracefs is usable (root), what
    /// made the master's wake-up late (a task, an interrupt, the VM…).
    /// See docs/NET.md.
    Bench(BenchArgs),
    /// Find workers by a UDP probe (broadcast or unicast) to their port.
    Discover(DiscoverArgs),
    /// Print a worker's counters: sessions and periods (served now, and since
    /// the worker started), late and lost periods, datagrams, drops by reason,
    /// refusals, and the kernel's drops (at the worker's socket, and in its
    /// whole network namespace). Every figure is the JSON's of the same name
    /// (`--json`; see docs/NET.md).
    Stats(StatsArgs),
    /// Reproduce Lago's Figures 5–8 (waste_time, local and remote) on JACK's dummy backend.
    Experiment(crate::netexp::ExperimentArgs),
}

/// `firmtime net worker`
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address and port for both TCP control and UDP data (0.0.0.0 receives discovery broadcasts).
    #[arg(long, default_value = "0.0.0.0:7700")]
    listen: SocketAddr,
    /// Pre-shared key file (at least 16 random bytes; a regular file of at
    /// most 4 KiB that neither its group nor every user may write, owned by
    /// root or you; a warning if others may read it: chmod 600). Without it the
    /// worker is unauthenticated and listens only on a loopback address (see
    /// --insecure-no-key).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Without --key, listen on a non-loopback address anyway: anyone who
    /// reaches the port can then run sessions on this machine.
    #[arg(long)]
    insecure_no_key: bool,
    /// Whole-handshake deadline: a connection that has not sent its greeting
    /// and an authenticated first message this long after connecting is
    /// dropped, however many bytes it trickles (sshd's LoginGraceTime, 120s there).
    #[arg(long, value_name = "D", default_value = "10s", value_parser = args::duration)]
    login_grace: Duration,
    /// Cap on unauthenticated connections, START:RATE:FULL (sshd's
    /// MaxStartups): from START pending, each new connection drops the oldest
    /// pending one with probability RATE %, rising to 100 % at FULL.
    /// One number N means N:100:N.
    #[arg(long, default_value = "10:30:100", value_parser = startups)]
    max_startups: Startups,
    /// Authenticated control connections at once (sessions, stats, describe);
    /// one more is refused with an error.
    #[arg(long, default_value_t = firmtime_net::server::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|v| v as usize))]
    max_connections: usize,
    /// Sessions (streams) at once; one more setup is refused with an error.
    #[arg(long, default_value_t = firmtime_net::server::DEFAULT_MAX_SESSIONS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|v| v as usize))]
    max_sessions: usize,
    /// Stream buffer memory of all sessions together (64KiB…; a 64-frame
    /// stereo f32 session needs about 66 KiB, the largest layout ~450 MiB);
    /// a setup that would exceed it is refused with an error.
    #[arg(long, default_value = "256MiB", value_parser = max_memory)]
    max_memory: u64,
    /// Scheduling of the data thread: fifo:P, rr:P or other; a bare P means fifo:P.
    /// 70, below the 80 of the loops that drive a worker (net bench, a JACK client)
    /// when both run on one machine.
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:70", value_parser = args::priority)]
    priority: Policy,
    /// Path MTU for results, bytes (68–65535; the smallest usable depends on --key).
    #[arg(long, default_value_t = 1500, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(68..=65_535))]
    mtu: usize,
    /// Serve the LADSPA plugins of this directory to authenticated masters
    /// (repeatable; needs --key). Plugins elsewhere are never loaded, nor
    /// files that resolve outside DIR, are not regular, are owned by
    /// another user than root or this one, or are group/world-writable.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Serve only masters that encrypt the data plane (ChaCha20-Poly1305,
    /// keys derived per session from --key; needs --key). Without it the
    /// worker encrypts the sessions whose master asks (--encrypt there) and
    /// serves the others as before. See docs/NET.md, "Encryption".
    #[arg(long)]
    encrypt: bool,
    #[command(flatten)]
    metrics: crate::exposition::MetricsArgs,
}

/// `firmtime net bench`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Worker addresses, comma-separated (host:port).
    #[arg(long, value_delimiter = ',', required = true)]
    workers: Vec<String>,
    /// Hot standby workers, comma-separated (host:port): the k-th runs the
    /// k-th worker's stream too (every block is sent to both) and the
    /// master serves from it when the worker misses a deadline or is gone
    /// (killed, unreachable). At most one per worker. The JSON reports
    /// `from_standby`, `takeovers` and `mismatched` (see docs/NET.md, "Hot standby").
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT")]
    standby: Vec<String>,
    /// Pre-shared key file (the worker's; a regular file others may not write).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Encrypt every data-plane datagram (ChaCha20-Poly1305, keys derived
    /// per session from --key; needs --key). A worker that cannot is an
    /// error, never a plaintext fallback. The JSON says "encrypt": true.
    #[arg(long)]
    encrypt: bool,
    /// Frames per period (16–8192).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(args::PERIOD_FRAMES))]
    period_frames: u32,
    /// Sample rate in Hz (1000–768000).
    #[arg(long, default_value_t = 48_000, value_parser = clap::value_parser!(u32).range(args::SAMPLE_RATES))]
    rate: u32,
    /// Periods between sending a block and using its result: 0, 1 or 2.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=2))]
    window: u8,
    /// Fraction of the period each worker holds each block (the first step with --ramp): 0–4.
    #[arg(long, default_value_t = 0.0, value_parser = args::float_in(0.0, 4.0, ""))]
    work: f64,
    /// spin (busy-wait, uses CPU), sleep (no CPU: emulates separate machines) or none.
    #[arg(long, default_value = "sleep")]
    work_mode: String,
    /// Counted time without --ramp.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = args::duration)]
    duration: Duration,
    /// Raise the work fraction step by step, from --work to --ramp-to.
    #[arg(long)]
    ramp: bool,
    /// Last fraction of the ramp: 0–4.
    #[arg(long, default_value_t = 1.0, value_parser = args::float_in(0.0, 4.0, ""))]
    ramp_to: f64,
    /// Step of the ramp: more than 0, up to 4.
    #[arg(long, default_value_t = 0.05, value_parser = args::float_above(0.0, 4.0, ""))]
    ramp_step: f64,
    /// Counted time per step of the ramp.
    #[arg(long, value_name = "D", default_value = "3s", value_parser = args::duration)]
    step_duration: Duration,
    /// Deadline inside the period, as a fraction of it: 0.05–1.
    #[arg(long, default_value_t = 1.0, value_parser = args::float_in(0.05, 1.0, ""))]
    deadline: f64,
    /// How the master waits for results: poll (sleeps) or spin.
    #[arg(
        long = "wait-mode",
        alias = "wait",
        value_name = "MODE",
        default_value = "poll"
    )]
    wait: String,
    /// Scheduling of the loop: fifo:P, rr:P or other; a bare P means fifo:P.
    #[arg(long, value_name = "PRIORITY", default_value = "fifo:80", value_parser = args::priority)]
    priority: Policy,
    /// Pin the loop to this CPU (default: not pinned).
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    #[command(flatten)]
    explain: args::ExplainArgs,
    /// Write the report as JSON here (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `firmtime net discover`
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    /// Where to probe: broadcast or worker addresses with the workers' port, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "255.255.255.255:7700")]
    to: Vec<SocketAddr>,
    /// Pre-shared key file (workers with a key answer only keyed probes; a
    /// regular file others may not write).
    #[arg(long)]
    key: Option<PathBuf>,
    /// How long to collect answers.
    #[arg(long, value_name = "D", default_value = "500ms", value_parser = args::duration)]
    wait: Duration,
    /// Write the workers that answered as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `firmtime net stats`
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The worker's address.
    #[arg(long)]
    worker: String,
    /// Pre-shared key file (the worker's; a regular file others may not write).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Write the counters as JSON to PATH (`-` or a bare --json: stdout,
    /// instead of the words; with a file the words are printed too, from the
    /// same answer).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// The worker's bounds from its flags; refuses a keyless worker on a
/// non-loopback address without --insecure-no-key.
fn set_limits(cfg: &mut ServerConfig, a: &WorkerArgs) -> Result<(), UsageError> {
    cfg.insecure_no_key = a.insecure_no_key;
    cfg.gate.login_grace = a.login_grace;
    cfg.gate.startups = a.max_startups;
    cfg.max_connections = a.max_connections;
    cfg.max_sessions = a.max_sessions;
    cfg.max_memory = a.max_memory;
    cfg.validate().map_err(|e| UsageError(e.to_string()))
}

/// clap value parser for `--max-startups`.
fn startups(text: &str) -> Result<Startups, String> {
    text.parse::<Startups>().map_err(|e| e.to_string())
}

/// clap value parser for `--max-memory`: a size from 64 KiB.
fn max_memory(text: &str) -> Result<u64, String> {
    let n = args::size(text)?;
    if n < 64 << 10 {
        return Err(format!("{text} is less than 64KiB (one small session)"));
    }
    Ok(n)
}

/// The key of `--key FILE` (the one rule for secrets, `firmtime_rt::secret`);
/// says on stderr when others may read the file.
pub(crate) fn key(path: &Option<PathBuf>) -> anyhow::Result<Option<Key>> {
    let Some(p) = path else {
        return Ok(None);
    };
    let (key, warning) = Key::from_file(p).map_err(anyhow::Error::from)?;
    if let Some(w) = warning {
        eprintln!("firmtime: warning: --key: {w}");
    }
    Ok(Some(key))
}

fn resolve(text: &str) -> anyhow::Result<SocketAddr> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| UsageError(format!("'{text}' is not a host:port address")).into())
}

/// Runs `firmtime net …`.
pub fn run(c: NetCommand) -> anyhow::Result<Outcome> {
    match c {
        NetCommand::Worker(a) => worker(a),
        NetCommand::Bench(a) => bench_cmd(a),
        NetCommand::Discover(a) => discover(a),
        NetCommand::Stats(a) => stats(a),
        NetCommand::Experiment(a) => crate::netexp::run(a),
    }
}

fn worker(a: WorkerArgs) -> anyhow::Result<Outcome> {
    let mut cfg = ServerConfig::new(a.listen);
    cfg.key = key(&a.key)?;
    if a.encrypt && cfg.key.is_none() {
        return Err(UsageError(
            "--encrypt needs --key FILE: the session keys that encrypt the data plane derive \
             from the pre-shared key"
                .into(),
        )
        .into());
    }
    cfg.require_encrypt = a.encrypt;
    set_limits(&mut cfg, &a)?;
    cfg.mtu = a.mtu;
    cfg.data_policy = Some(a.priority);
    if !a.plugin_dirs.is_empty() {
        if cfg.key.is_none() {
            return Err(UsageError(
                "--plugin-dir needs --key FILE: plugins are served only to authenticated masters"
                    .into(),
            )
            .into());
        }
        cfg.plugins = firmtime_net::remote::PluginAllowList::new(&a.plugin_dirs)
            .map_err(|e| UsageError(e.to_string()))?;
    }
    let plugin_dirs = cfg.plugins.dirs().to_vec();
    let metrics = a.metrics.prepare()?;
    let stop = crate::signals::catch(crate::signals::Repeat::Ends)?;
    let server = WorkerServer::start(cfg)?;
    let source = server.metrics();
    let _endpoint = metrics.serve("firmtime net worker", move || {
        crate::exposition::worker_text(&source)
    })?;
    while !stop.load(Ordering::Relaxed) {
        let Ok(e) = server.events().recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        match e {
            ServerEvent::Listening {
                addr,
                authenticated,
            } => {
                eprintln!(
                    "firmtime net worker: listening on {addr} (TCP control, UDP data){}",
                    if authenticated {
                        ", key required"
                    } else {
                        " — UNAUTHENTICATED: no --key, anyone who reaches this port can set up sessions"
                    }
                );
                if a.encrypt {
                    eprintln!("data plane: encrypted sessions only (--encrypt)");
                }
                if !plugin_dirs.is_empty() {
                    let d: Vec<String> = plugin_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect();
                    eprintln!("serving LADSPA plugins from {}", d.join(", "));
                }
                eprintln!(
                    "ready realtime_ns={}",
                    firmtime_rt::clock::gettimeofday_ns()
                );
            }
            ServerEvent::SessionOpened {
                peer,
                stream_id,
                layout,
            } => eprintln!(
                "session from {peer}: stream {stream_id}, {} blocks",
                layout.blocks.len()
            ),
            ServerEvent::SessionClosed {
                peer,
                stream_id,
                reason,
            } => eprintln!("session from {peer}: stream {stream_id} ended: {reason}"),
            ServerEvent::Refused { peer, message } => eprintln!("refused {peer}: {message}"),
            ServerEvent::DataError { message } => eprintln!("data socket: {message}"),
            ServerEvent::PreAuthDropped(g) => eprintln!(
                "dropped unauthenticated connections: {} at the --login-grace deadline, {} early \
                 (--max-startups), {} not the protocol; {} pending",
                g.timed_out, g.early_dropped, g.malformed, g.pending
            ),
            ServerEvent::SessionCutOff {
                peer,
                stream_id,
                message,
            } => eprintln!("session from {peer}: stream {stream_id}: {message}"),
            ServerEvent::ControlRefused {
                peer,
                stream_id,
                message,
            } => eprintln!("session from {peer}: stream {stream_id}: {message}"),
        }
    }
    server.stop();
    eprintln!("firmtime net worker: stopped");
    Ok(Outcome::Ok)
}

fn bench_cmd(a: BenchArgs) -> anyhow::Result<Outcome> {
    let workers = a
        .workers
        .iter()
        .map(|w| resolve(w))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mode: WorkMode = a
        .work_mode
        .parse()
        .map_err(|e: firmtime_net::Error| UsageError(e.to_string()))?;
    let wait = match a.wait.as_str() {
        "poll" => WaitMode::Poll,
        "spin" => WaitMode::Spin,
        w => return Err(UsageError(format!("--wait {w}: use poll or spin")).into()),
    };
    let standby = a
        .standby
        .iter()
        .map(|w| resolve(w))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if standby.len() > workers.len() {
        return Err(UsageError(format!(
            "--standby: {} standbys for {} workers: give at most one per worker (the k-th \
             standby serves the k-th of --workers)",
            standby.len(),
            workers.len()
        ))
        .into());
    }
    let mut cfg = BenchConfig::new(workers);
    cfg.standby = standby;
    cfg.key = key(&a.key)?;
    if a.encrypt && cfg.key.is_none() {
        return Err(UsageError(
            "--encrypt needs --key FILE (the worker's): the session keys that encrypt the data \
             plane derive from it"
                .into(),
        )
        .into());
    }
    cfg.encrypt = a.encrypt;
    cfg.period_frames = a.period_frames;
    cfg.rate = a.rate;
    cfg.window = a.window;
    cfg.work = Work {
        fraction: a.work,
        mode,
    };
    cfg.work.validate().map_err(|e| UsageError(e.to_string()))?;
    cfg.duration = a.duration;
    cfg.deadline_fraction = a.deadline;
    cfg.wait = wait;
    cfg.rt.policy = a.priority;
    if a.ramp {
        cfg.ramp = Some(Ramp {
            from: a.work,
            to: a.ramp_to,
            step: a.ramp_step,
            step_duration: a.step_duration,
            stop_after_failures: 3,
        });
    }
    if let Some(c) = a.cpu {
        cfg.rt.cpus = Some(args::pin_to(c)?);
    }
    let watch = a.explain.start(LOOP_COMM)?;
    let period_ns = cfg.period_ns();
    let mut notes = watch
        .as_ref()
        .map_or_else(|| Notes::new(0), |w| w.notes(period_ns));
    // The loop runs on its own named thread, so that the trace follows it by name.
    let (r, notes, tid, slack_ns) = std::thread::Builder::new()
        .name(LOOP_COMM.into())
        .spawn(move || {
            let tid = firmtime_rt::sched::current_tid();
            let slack_ns = firmtime_rt::sched::timer_slack().unwrap_or(50_000);
            let r = bench::run(&cfg, &mut notes, &mut |line| eprintln!("{line}"));
            (r, notes, tid, slack_ns)
        })
        .context("starting the bench loop's thread")?
        .join()
        .map_err(|_| anyhow::anyhow!("the bench loop panicked"))?;
    let mut r = r?;
    if let Some(w) = watch {
        explain_late(
            &mut r,
            w,
            LoopThread {
                tid,
                period_ns,
                slack_ns,
                threshold_ns: 0,
                missed: 0,
            },
            &notes,
        );
    }
    let quiet_stdout = args::is_stdout(a.json.as_deref());
    if !quiet_stdout {
        println!(
            "{} worker(s), window {}, {} frames @ {} Hz ({:.3} ms), work mode {}",
            r.workers.len(),
            r.window,
            r.period_frames,
            r.rate,
            r.period_ns as f64 / 1e6,
            r.work_mode
        );
        println!(
            "periods {}  late {}  missed {}  lost {}  reordered {}  late fraction {:.4} %",
            r.periods,
            r.late,
            r.missed,
            r.lost,
            r.reordered,
            r.late_fraction * 100.0
        );
        println!(
            "rtt p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            r.rtt_p50_ns as f64 / 1e6,
            r.rtt_p99_ns as f64 / 1e6,
            r.rtt_max_ns as f64 / 1e6
        );
        println!(
            "usable fraction {}  master CPU {:.2} % ({:.2} % per worker)",
            usable_text(&r, a.ramp),
            r.master_cpu_fraction * 100.0,
            r.master_cpu_fraction_per_worker * 100.0
        );
        if r.workers.iter().any(|w| w.standby.is_some()) {
            println!(
                "standby: {} results delivered from standbys, {} takeovers, {} not bit-exact",
                r.from_standby, r.takeovers, r.mismatched
            );
        }
        println!("{}", r.late_summary());
        for c in r.late_causes.iter().take(5) {
            println!("  {}: {}", c.cause, c.detail);
        }
        if let Some(t) = &r.trace {
            println!(
                "trace: {} of the master's {} worst wake-ups attributed; {} events kept, {} dropped, {} lost",
                t.wakeups_explained, t.wakeups, t.events, t.dropped, t.lost
            );
        }
    }
    if let Some(p) = &a.json {
        args::write_json(p, &r).with_context(|| format!("writing {}", p.display()))?;
    }
    // Without --ramp the one step decides (usable_fraction is not measured).
    Ok(if r.steps.iter().any(|s| s.usable) {
        Outcome::Ok
    } else {
        Outcome::Failed
    })
}

/// The bench loop thread's name, which the explaining trace follows.
const LOOP_COMM: &str = "ft-net-bench";

/// Names the master's late wake-ups in `r` from the explaining trace `w`
/// kept around the loop thread (`thread` without threshold and misses:
/// they come from `r`). A trace that fails leaves `r` as it was.
fn explain_late(r: &mut BenchReport, w: explain::LoopWatch, thread: LoopThread, notes: &Notes) {
    // Explain exactly the wake-ups that made periods late (and the 10 worst).
    let thread = LoopThread {
        missed: r.missed,
        ..thread
    };
    let wakes = r.master_wakes().map(|(_, l)| l);
    let Some(e) = args::explain_loop(w, thread, notes, wakes) else {
        return;
    };
    r.explain_late(Some(&|pass| e.traced(pass)));
    r.trace = Some(e.coverage_counts());
}

/// The bench's usable fraction as printed: a percentage, `none`, or, without
/// `--ramp` (one fixed fraction), that it was not measured.
fn usable_text(r: &bench::BenchReport, ramp: bool) -> String {
    match (ramp, r.usable_fraction) {
        (false, _) => "not measured (no --ramp)".to_string(),
        (true, Some(u)) => format!("{:.1} %", u * 100.0),
        (true, None) => "none".to_string(),
    }
}

fn discover(a: DiscoverArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let found = discovery::discover(&a.to, key(&a.key)?, a.wait)?;
    if let Some(p) = &a.json {
        let workers: Vec<_> = found
            .iter()
            .map(|f| {
                serde_json::json!({
                    "addr": f.addr,
                    "sessions": f.sessions,
                    "rtt_ns": u64::try_from(f.rtt.as_nanos()).unwrap_or(u64::MAX),
                })
            })
            .collect();
        args::write_json(p, &serde_json::json!({ "workers": workers }))?;
    }
    let _redirect = args::StdoutToStderr::when_json_on_stdout(a.json.as_deref())?;
    for f in &found {
        println!(
            "{}  sessions {}  rtt {:.3} ms",
            f.addr,
            f.sessions,
            f.rtt.as_secs_f64() * 1e3
        );
    }
    if found.is_empty() {
        eprintln!("no worker answered (workers must listen on 0.0.0.0 to hear broadcasts)");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

fn stats(a: StatsArgs) -> anyhow::Result<Outcome> {
    let addr = resolve(&a.worker)?;
    let r = firmtime_net::control::query_stats(addr, key(&a.key)?, Duration::from_secs(2))?;
    if let Some(p) = &a.json {
        args::write_json(p, &r)?;
    }
    // With the JSON in a file, the words of the same answer go to stdout too.
    if !args::is_stdout(a.json.as_deref()) {
        print!("{}", stats_text(&a.worker, &r));
    }
    Ok(Outcome::Ok)
}

/// `net stats` for a reader: one figure a line, from the same rows as the
/// JSON ([`WorkerReport::rows`](firmtime_net::control::WorkerReport::rows)),
/// parts (the drops by reason, the lost periods by kind) indented under
/// their sum.
fn stats_text(worker: &str, r: &firmtime_net::control::WorkerReport) -> String {
    let rows = r.rows();
    let label = |row: &firmtime_net::control::ReportRow| {
        if row.part {
            format!("  {}", row.label)
        } else {
            row.label.clone()
        }
    };
    let width = rows
        .iter()
        .map(|row| label(row).chars().count())
        .max()
        .unwrap_or(0);
    let mut s = format!("worker {worker}\n");
    for row in &rows {
        let value = row
            .value
            .map_or_else(|| "not readable".to_string(), |n| n.to_string());
        let note = if row.note.is_empty() {
            String::new()
        } else {
            format!(" {}", row.note)
        };
        s += &format!("  {:<width$}  {value}{note}\n", label(row));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Worker {
        #[command(flatten)]
        a: WorkerArgs,
    }

    fn parse(args: &[&str]) -> Result<WorkerArgs, String> {
        Worker::try_parse_from(std::iter::once("worker").chain(args.iter().copied()))
            .map(|w| w.a)
            .map_err(|e| e.to_string())
    }

    fn limits(args: &[&str], key: Option<Key>) -> Result<ServerConfig, String> {
        let a = parse(args)?;
        let mut cfg = ServerConfig::new(a.listen);
        cfg.key = key;
        set_limits(&mut cfg, &a).map_err(|e| e.0)?;
        Ok(cfg)
    }

    #[test]
    fn worker_bounds_default_to_sshd_like_values() {
        let c = limits(&["--listen", "127.0.0.1:7700"], None).unwrap();
        assert_eq!(c.gate.login_grace, Duration::from_secs(10));
        assert_eq!(c.gate.startups, Startups::DEFAULT);
        assert_eq!(c.max_connections, 128);
        assert_eq!(c.max_sessions, 64);
        assert_eq!(c.max_memory, 256 << 20);
        assert!(!c.insecure_no_key);
        let c = limits(
            &[
                "--listen",
                "127.0.0.1:7700",
                "--login-grace",
                "2s",
                "--max-startups",
                "5:50:20",
                "--max-connections",
                "3",
                "--max-sessions",
                "2",
                "--max-memory",
                "1MiB",
            ],
            None,
        )
        .unwrap();
        assert_eq!(c.gate.login_grace, Duration::from_secs(2));
        assert_eq!(c.gate.startups.to_string(), "5:50:20");
        assert_eq!((c.max_connections, c.max_sessions), (3, 2));
        assert_eq!(c.max_memory, 1 << 20);
    }

    #[test]
    fn bad_worker_bounds_are_usage_errors_naming_the_flag_and_range() {
        let e = parse(&["--max-startups", "20:30:10"]).unwrap_err();
        assert!(
            e.contains("--max-startups") && e.contains("START ≤ FULL"),
            "{e}"
        );
        let e = parse(&["--max-memory", "1KiB"]).unwrap_err();
        assert!(e.contains("--max-memory") && e.contains("64KiB"), "{e}");
        let e = parse(&["--max-sessions", "0"]).unwrap_err();
        assert!(e.contains("--max-sessions"), "{e}");
        let e = parse(&["--max-connections", "0"]).unwrap_err();
        assert!(e.contains("--max-connections"), "{e}");
        let e = limits(&["--listen", "127.0.0.1:1", "--login-grace", "0s"], None).unwrap_err();
        assert!(e.contains("login-grace"), "{e}");
    }

    #[test]
    fn a_keyless_worker_on_a_non_loopback_address_needs_insecure_no_key() {
        for listen in ["0.0.0.0:7700", "10.1.2.3:7700", "[::]:7700"] {
            let e = limits(&["--listen", listen], None).unwrap_err();
            assert!(
                e.contains("--key FILE") && e.contains("--insecure-no-key"),
                "{e}"
            );
            assert!(e.contains(listen), "{e}");
            limits(&["--listen", listen, "--insecure-no-key"], None).unwrap();
            limits(&["--listen", listen], Some(Key::new(&[1; 32]).unwrap())).unwrap();
        }
        for listen in ["127.0.0.1:7700", "127.9.9.9:7700", "[::1]:7700"] {
            limits(&["--listen", listen], None).unwrap();
        }
    }
}
