//! `firmtime load`: run one bounded load generator in this process.
//!
//! Lab commands start these as child processes (`firmtime_lab::load::LoadSet`);
//! they are also useful alone, to load a machine while something else runs.

use crate::args::{self, UsageError};
use crate::Outcome;
use firmtime_lab::load::{
    self as lab, format_duration, format_size, human_size, LoadReport, LoadSpec,
};
use firmtime_rt::units;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// Which generator to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// --hogs threads doing continuous arithmetic (Finney 2001: 3 hogs).
    Cpu,
    /// --workers threads busy --percent of every --period, asleep the rest.
    Duty,
    /// write + fsync --chunk bytes at a time to a file of at most --size in
    /// TMPDIR, rewriting from the start (the file is unlinked at once).
    Disk,
    /// allocate --size bytes once and keep writing to every page.
    Memory,
    /// --pairs UDP ping-pong socket pairs on 127.0.0.1 (loopback only).
    Net,
    /// Varoquaux (2006)'s mix: UDP ping-pong + hashing /dev/urandom + disk writes.
    Stress,
}

/// Arguments of `firmtime load`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    firmtime load cpu --hogs 3 --duration 60s\n  \
    firmtime load duty --percent 8 --period 10ms --workers 8\n  \
    firmtime load disk --size 512MiB\n  \
    firmtime load stress --duration 5min --json stress.json\n\n\
    Lab commands take the same loads as short specs (--load SPEC): cpu:3, duty:50%@10ms,workers=2,\n\
    disk:64MiB,chunk=1MiB, memory:256MiB, net:2, stress.")]
pub struct LoadArgs {
    /// The load to generate.
    #[arg(value_enum)]
    pub kind: Kind,

    /// cpu: number of hog threads, 1 to 256 [default: 3].
    #[arg(long, value_name = "N", value_parser = count(LoadSpec::HOGS))]
    pub hogs: Option<u32>,

    /// duty: busy share of each period in percent, 1 to 100 [default: 50].
    #[arg(long, value_name = "P", value_parser = percent)]
    pub percent: Option<u8>,

    /// duty: period length, 100us to 10s [default: 10ms].
    #[arg(long, value_name = "D", value_parser = period)]
    pub period: Option<Duration>,

    /// duty: number of threads, 1 to 256 [default: 1].
    #[arg(long, value_name = "N", value_parser = count(LoadSpec::WORKERS))]
    pub workers: Option<u32>,

    /// disk: bound on the file size, 64KiB to 64GiB [default: 64MiB];
    /// memory: working-set size, 4KiB to 1TiB [default: 256MiB].
    #[arg(long, value_name = "S", value_parser = args::size)]
    pub size: Option<u64>,

    /// disk: bytes per write + fsync, 4KiB to 64MiB and at most --size [default: 1MiB].
    #[arg(long, value_name = "S", value_parser = args::size)]
    pub chunk: Option<u64>,

    /// net: number of socket pairs (two threads each), 1 to 64 [default: 1].
    #[arg(long, value_name = "N", value_parser = count(LoadSpec::PAIRS))]
    pub pairs: Option<u32>,

    /// How long to run, 1ms to 24h. SIGINT or SIGTERM ends the run earlier
    /// (cleanly: the report is still written).
    #[arg(long, value_name = "D", default_value = "10s", value_parser = duration)]
    pub duration: Duration,

    /// Write the report as JSON to PATH (`-` or a bare --json: stdout, instead of the summary line).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
}

fn count(range: RangeInclusive<u32>) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |s: &str| {
        let n: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a whole number"))?;
        u32::try_from(n)
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                format!(
                    "{n} is out of range: valid is {} to {}",
                    range.start(),
                    range.end()
                )
            })
    }
}

fn percent(s: &str) -> Result<u8, String> {
    let r = &LoadSpec::PERCENT;
    let n: u64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of percent"))?;
    u8::try_from(n)
        .ok()
        .filter(|n| r.contains(n))
        .ok_or_else(|| format!("{n} is out of range: valid is {} to {}", r.start(), r.end()))
}

fn duration_in(s: &str, r: &RangeInclusive<Duration>) -> Result<Duration, String> {
    let d = args::duration(s)?;
    if r.contains(&d) {
        Ok(d)
    } else {
        Err(format!(
            "{} is out of range: valid is {} to {}",
            s.trim(),
            format_duration(*r.start()),
            format_duration(*r.end())
        ))
    }
}

fn period(s: &str) -> Result<Duration, String> {
    duration_in(s, &LoadSpec::PERIOD)
}

fn duration(s: &str) -> Result<Duration, String> {
    duration_in(s, &LoadSpec::DURATION)
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

fn size_in(flag: &str, kind: &str, v: u64, r: &RangeInclusive<u64>) -> anyhow::Result<u64> {
    if r.contains(&v) {
        Ok(v)
    } else {
        Err(usage(format!(
            "{flag} {} is out of range for {kind}: valid is {} to {}",
            format_size(v),
            format_size(*r.start()),
            format_size(*r.end())
        )))
    }
}

/// Builds the spec, refusing flags that do not apply to the chosen kind.
fn spec(a: &LoadArgs) -> anyhow::Result<LoadSpec> {
    let kind = kind_name(a.kind);
    let given: [(&str, bool, &[Kind]); 7] = [
        ("--hogs", a.hogs.is_some(), &[Kind::Cpu]),
        ("--percent", a.percent.is_some(), &[Kind::Duty]),
        ("--period", a.period.is_some(), &[Kind::Duty]),
        ("--workers", a.workers.is_some(), &[Kind::Duty]),
        ("--size", a.size.is_some(), &[Kind::Disk, Kind::Memory]),
        ("--chunk", a.chunk.is_some(), &[Kind::Disk]),
        ("--pairs", a.pairs.is_some(), &[Kind::Net]),
    ];
    for (flag, set, kinds) in given {
        if set && !kinds.contains(&a.kind) {
            let names: Vec<String> = kinds.iter().map(|&k| kind_name(k)).collect();
            return Err(usage(format!(
                "{flag} does not apply to '{kind}' (only to {})",
                names.join(" and ")
            )));
        }
    }
    let spec = match a.kind {
        Kind::Cpu => LoadSpec::Cpu {
            hogs: a.hogs.unwrap_or(LoadSpec::DEFAULT_HOGS),
        },
        Kind::Duty => LoadSpec::Duty {
            percent: a.percent.unwrap_or(LoadSpec::DEFAULT_PERCENT),
            period: a.period.unwrap_or(LoadSpec::DEFAULT_PERIOD),
            workers: a.workers.unwrap_or(1),
        },
        Kind::Disk => {
            let file_size = size_in(
                "--size",
                "disk",
                a.size.unwrap_or(LoadSpec::DEFAULT_DISK_SIZE),
                &LoadSpec::DISK_SIZE,
            )?;
            let chunk = size_in(
                "--chunk",
                "disk",
                a.chunk.unwrap_or(LoadSpec::DEFAULT_CHUNK.min(file_size)),
                &LoadSpec::CHUNK,
            )?;
            if chunk > file_size {
                return Err(usage(format!(
                    "--chunk {} is larger than --size {}: use a chunk of at most the file size",
                    format_size(chunk),
                    format_size(file_size)
                )));
            }
            LoadSpec::Disk { file_size, chunk }
        }
        Kind::Memory => LoadSpec::Memory {
            bytes: size_in(
                "--size",
                "memory",
                a.size.unwrap_or(LoadSpec::DEFAULT_MEMORY),
                &LoadSpec::MEMORY,
            )?,
        },
        Kind::Net => LoadSpec::Net {
            pairs: a.pairs.unwrap_or(1),
        },
        Kind::Stress => LoadSpec::Stress,
    };
    // Every range was checked above; this catches any the flags missed.
    spec.validate().map_err(|e| usage(e.to_string()))?;
    Ok(spec)
}

/// One line saying what was done.
fn summary(r: &LoadReport) -> String {
    let mut parts = vec![format!("{} threads", r.threads)];
    let mut add = |n: u64, what: String| {
        if n > 0 {
            parts.push(what);
        }
    };
    add(r.iterations, format!("{} iterations", r.iterations));
    add(
        r.periods,
        format!(
            "{} periods ({} missed), busy {}",
            r.periods,
            r.missed_periods,
            units::format_duration(Duration::from_nanos(r.busy_ns))
        ),
    );
    add(
        r.bytes_written,
        format!(
            "{} written with {} fsyncs{}",
            human_size(r.bytes_written),
            r.fsyncs,
            if r.on_tmpfs {
                " (on tmpfs: RAM, not disk)"
            } else {
                ""
            }
        ),
    );
    add(
        r.bytes_hashed,
        format!("{} hashed", human_size(r.bytes_hashed)),
    );
    add(
        r.pages,
        format!("{} pages, {} page writes", r.pages, r.pages_touched),
    );
    add(
        r.round_trips + r.lost_datagrams,
        format!(
            "{} UDP round trips ({} lost)",
            r.round_trips, r.lost_datagrams
        ),
    );
    format!(
        "load {}: ran {}{}: {}",
        r.spec,
        units::format_duration(Duration::from_nanos(r.elapsed_ns)),
        if r.stopped {
            " (stopped by signal)"
        } else {
            ""
        },
        parts.join(", ")
    )
}

/// Runs `firmtime load`.
pub fn run(a: LoadArgs) -> anyhow::Result<Outcome> {
    let spec = spec(&a)?;
    let stop = crate::signals::catch(crate::signals::Repeat::Ends)?;
    let report = lab::run_generator(&spec, a.duration, stop)?;
    match &a.json {
        Some(p) if p.as_os_str() == "-" => {}
        _ => println!("{}", summary(&report)),
    }
    if let Some(p) = &a.json {
        args::write_json(p, &report)?;
    }
    Ok(Outcome::Ok)
}

/// A kind as its flag value spells it (`cpu`, `stress`, …).
fn kind_name(k: Kind) -> String {
    clap::ValueEnum::to_possible_value(&k).map_or_else(String::new, |v| v.get_name().to_string())
}
