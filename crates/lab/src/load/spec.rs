//! [`LoadSpec`]: which load to generate, its parameters, their valid ranges,
//! and the short text form users type (`cpu:3`, `duty:50%@10ms`, `disk:64MiB`).
//!
//! Pure logic: no I/O.

use crate::check;
use crate::error::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One load generator and its parameters.
///
/// Text form (parsed by [`FromStr`], produced by [`fmt::Display`]; the two
/// round-trip):
///
/// | text | meaning |
/// |---|---|
/// | `cpu`, `cpu:3` | N threads doing continuous arithmetic (Finney 2001 used 3) |
/// | `duty`, `duty:50%`, `duty:50%@10ms`, `duty:50%@10ms,workers=2` | busy P % of each period, asleep the rest |
/// | `disk`, `disk:64MiB`, `disk:64MiB,chunk=1MiB` | write + fsync a bounded file, rewriting from the start |
/// | `memory`, `memory:256MiB` | keep touching every page of a working set |
/// | `net`, `net:2` | UDP ping-pong pairs on 127.0.0.1 |
/// | `stress` | Varoquaux (2006)'s mix: net + hashing random data + disk writes |
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoadSpec {
    /// `hogs` threads doing continuous arithmetic, never sleeping.
    Cpu {
        /// Number of threads, in [`LoadSpec::HOGS`].
        hogs: u32,
    },
    /// `workers` threads each busy `percent` % of every `period`, asleep the rest.
    Duty {
        /// Busy share of each period, in [`LoadSpec::PERCENT`].
        percent: u8,
        /// Length of one period, in [`LoadSpec::PERIOD`].
        #[serde(rename = "period_ns", with = "duration_ns")]
        period: Duration,
        /// Number of threads, in [`LoadSpec::WORKERS`].
        workers: u32,
    },
    /// Writes `chunk` bytes at a time, each followed by fsync, to a file that
    /// never grows past `file_size` (writing restarts at offset 0).
    Disk {
        /// Bound on the file's size, in [`LoadSpec::DISK_SIZE`].
        file_size: u64,
        /// Bytes per write + fsync, in [`LoadSpec::CHUNK`] and at most `file_size`.
        chunk: u64,
    },
    /// Allocates `bytes` once and keeps writing to each of its pages.
    Memory {
        /// Working-set size, in [`LoadSpec::MEMORY`].
        bytes: u64,
    },
    /// `pairs` pairs of UDP sockets on 127.0.0.1 bouncing a datagram back and forth.
    Net {
        /// Number of socket pairs (two threads each), in [`LoadSpec::PAIRS`].
        pairs: u32,
    },
    /// Varoquaux's stress mix: one UDP ping-pong pair, one thread hashing
    /// data read from /dev/urandom, one thread writing + fsyncing a
    /// [`LoadSpec::DEFAULT_DISK_SIZE`] file.
    Stress,
}

/// Serde helper: a [`Duration`] as whole nanoseconds.
mod duration_ns {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

impl LoadSpec {
    /// Valid number of CPU hogs.
    pub const HOGS: RangeInclusive<u32> = 1..=256;
    /// Hogs of a bare `cpu`: Finney (2001)'s "3 simultaneous normal-priority
    /// programs doing continuous arithmetic".
    pub const DEFAULT_HOGS: u32 = 3;
    /// Valid busy percentage of a duty-cycle load.
    pub const PERCENT: RangeInclusive<u8> = 1..=100;
    /// Busy percentage of a bare `duty`.
    pub const DEFAULT_PERCENT: u8 = 50;
    /// Valid duty-cycle period.
    pub const PERIOD: RangeInclusive<Duration> =
        Duration::from_micros(100)..=Duration::from_secs(10);
    /// Period of a `duty` without `@PERIOD`.
    pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);
    /// Valid number of duty-cycle threads.
    pub const WORKERS: RangeInclusive<u32> = 1..=256;
    /// Valid bound on the disk load's file size.
    pub const DISK_SIZE: RangeInclusive<u64> = 64 * KIB..=64 * GIB;
    /// File size of a bare `disk` (and of `stress`).
    pub const DEFAULT_DISK_SIZE: u64 = 64 * MIB;
    /// Valid bytes per write + fsync.
    pub const CHUNK: RangeInclusive<u64> = 4 * KIB..=64 * MIB;
    /// Bytes per write + fsync when `chunk=` is not given (dd's `bs=1M`).
    pub const DEFAULT_CHUNK: u64 = MIB;
    /// Valid memory working-set size.
    pub const MEMORY: RangeInclusive<u64> = 4 * KIB..=1 << 40;
    /// Working set of a bare `memory`.
    pub const DEFAULT_MEMORY: u64 = 256 * MIB;
    /// Valid number of UDP ping-pong pairs.
    pub const PAIRS: RangeInclusive<u32> = 1..=64;
    /// Valid `--duration` of any load.
    pub const DURATION: RangeInclusive<Duration> =
        Duration::from_millis(1)..=Duration::from_secs(24 * 3600);

    /// The generator's name: `cpu`, `duty`, `disk`, `memory`, `net` or `stress`.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadSpec::Cpu { .. } => "cpu",
            LoadSpec::Duty { .. } => "duty",
            LoadSpec::Disk { .. } => "disk",
            LoadSpec::Memory { .. } => "memory",
            LoadSpec::Net { .. } => "net",
            LoadSpec::Stress => "stress",
        }
    }

    /// Checks every parameter against its valid range.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the parameter and its valid range.
    pub fn validate(&self) -> Result<()> {
        match *self {
            LoadSpec::Cpu { hogs } => check::in_range("cpu hogs", hogs, &Self::HOGS),
            LoadSpec::Duty {
                percent,
                period,
                workers,
            } => {
                check::in_range_as("duty percent", percent, &Self::PERCENT, |v| format!("{v}%"))?;
                check::in_range_as("duty period", period, &Self::PERIOD, format_duration)?;
                check::in_range("duty workers", workers, &Self::WORKERS)
            }
            LoadSpec::Disk { file_size, chunk } => {
                check::in_range_as("disk file size", file_size, &Self::DISK_SIZE, format_size)?;
                check::in_range_as("disk chunk", chunk, &Self::CHUNK, format_size)?;
                if chunk > file_size {
                    return Err(invalid(format!(
                        "disk chunk {} is larger than the file size {}: use a chunk of at most the file size",
                        format_size(chunk),
                        format_size(file_size)
                    )));
                }
                Ok(())
            }
            LoadSpec::Memory { bytes } => {
                check::in_range_as("memory size", bytes, &Self::MEMORY, format_size)
            }
            LoadSpec::Net { pairs } => check::in_range("net pairs", pairs, &Self::PAIRS),
            LoadSpec::Stress => Ok(()),
        }
    }

    /// The arguments that make `firmtime load` run this spec, after the
    /// `load` word: e.g. `["duty", "--percent", "50", "--period", "10ms", "--workers", "1"]`.
    pub fn to_cli_args(&self) -> Vec<String> {
        let mut v = vec![self.kind().to_string()];
        let mut push = |flag: &str, value: String| {
            v.push(flag.to_string());
            v.push(value);
        };
        match *self {
            LoadSpec::Cpu { hogs } => push("--hogs", hogs.to_string()),
            LoadSpec::Duty {
                percent,
                period,
                workers,
            } => {
                push("--percent", percent.to_string());
                push("--period", format_duration(period));
                push("--workers", workers.to_string());
            }
            LoadSpec::Disk { file_size, chunk } => {
                push("--size", format_size(file_size));
                push("--chunk", format_size(chunk));
            }
            LoadSpec::Memory { bytes } => push("--size", format_size(bytes)),
            LoadSpec::Net { pairs } => push("--pairs", pairs.to_string()),
            LoadSpec::Stress => {}
        }
        v
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg)
}

/// Checks a load's duration against [`LoadSpec::DURATION`].
pub(crate) fn check_duration(duration: Duration) -> Result<()> {
    check::in_range_as(
        "load duration",
        duration,
        &LoadSpec::DURATION,
        format_duration,
    )
}

/// Formats a size exactly, with the largest binary unit that divides it.
pub fn format_size(bytes: u64) -> String {
    for (unit, f) in [("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes >= f && bytes % f == 0 {
            return format!("{}{unit}", bytes / f);
        }
    }
    format!("{bytes}B")
}

/// Formats a size for people, rounded to 3 significant decimals:
/// `512B`, `64KiB`, `25.81MiB`, `22.9GiB`.
pub fn human_size(bytes: u64) -> String {
    for (unit, f) in [("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes >= f {
            let s = format!("{:.2}", bytes as f64 / f as f64);
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{unit}");
        }
    }
    format!("{bytes}B")
}

/// Formats a duration exactly, with the largest unit that divides it.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, f) in [
        ("h", 3_600_000_000_000u128),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns >= f && ns % f == 0 {
            return format!("{}{unit}", ns / f);
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for LoadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LoadSpec::Cpu { hogs } => write!(f, "cpu:{hogs}"),
            LoadSpec::Duty {
                percent,
                period,
                workers,
            } => {
                write!(f, "duty:{percent}%@{}", format_duration(period))?;
                if workers != 1 {
                    write!(f, ",workers={workers}")?;
                }
                Ok(())
            }
            LoadSpec::Disk { file_size, chunk } => {
                write!(f, "disk:{}", format_size(file_size))?;
                if chunk != Self::DEFAULT_CHUNK {
                    write!(f, ",chunk={}", format_size(chunk))?;
                }
                Ok(())
            }
            LoadSpec::Memory { bytes } => write!(f, "memory:{}", format_size(bytes)),
            LoadSpec::Net { pairs } => write!(f, "net:{pairs}"),
            LoadSpec::Stress => f.write_str("stress"),
        }
    }
}

const SYNTAX: &str = "cpu[:HOGS], duty[:P%[@PERIOD]][,workers=N], disk[:SIZE][,chunk=SIZE], memory[:SIZE], net[:PAIRS] or stress";

impl FromStr for LoadSpec {
    type Err = Error;

    /// Parses the text form (see [`LoadSpec`]) and validates the ranges.
    fn from_str(text: &str) -> Result<Self> {
        let t = text.trim();
        let (head, options) = match t.split_once(',') {
            Some((h, o)) => (h, Some(o)),
            None => (t, None),
        };
        let (kind, arg) = match head.split_once(':') {
            Some((k, a)) => (k.trim(), Some(a.trim())),
            None => (head.trim(), None),
        };
        let mut opts: Vec<(&str, &str)> = Vec::new();
        if let Some(o) = options {
            for item in o.split(',') {
                let (k, v) = item.split_once('=').ok_or_else(|| {
                    invalid(format!(
                        "load '{text}': option '{item}' is not KEY=VALUE (e.g. workers=2, chunk=1MiB)"
                    ))
                })?;
                opts.push((k.trim(), v.trim()));
            }
        }
        let allowed: &[&str] = match kind {
            "duty" => &["workers"],
            "disk" => &["chunk"],
            _ => &[],
        };
        if let Some((k, _)) = opts.iter().find(|(k, _)| !allowed.contains(k)) {
            return Err(invalid(format!(
                "load '{text}': unknown option '{k}' for {kind} (expected {SYNTAX})"
            )));
        }
        let opt = |name: &str| opts.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let num = |what: &str, s: &str| -> Result<u64> {
            s.parse::<u64>()
                .map_err(|_| invalid(format!("load '{text}': {what} '{s}' is not a whole number")))
        };
        let size = |what: &str, s: &str| -> Result<u64> {
            firmtime_rt::units::parse_size(s)
                .map_err(|e| invalid(format!("load '{text}': {what}: {}", e.message())))
        };
        let small = |what: &str, s: &str| -> Result<u32> {
            Ok(u32::try_from(num(what, s)?).unwrap_or(u32::MAX))
        };
        let spec = match kind {
            "cpu" => LoadSpec::Cpu {
                hogs: arg.map_or(Ok(Self::DEFAULT_HOGS), |a| small("hogs", a))?,
            },
            "duty" => {
                let (p, period) = match arg {
                    None => (None, None),
                    Some(a) => match a.split_once('@') {
                        Some((p, d)) => (Some(p), Some(d)),
                        None => (Some(a), None),
                    },
                };
                let percent = match p {
                    None => Self::DEFAULT_PERCENT,
                    Some(p) => {
                        let digits = p.trim().trim_end_matches('%');
                        let n = num("percent", digits)?;
                        check::in_range_as("duty percent", n, &(1..=100), |v| format!("{v}%"))
                            .map_err(|e| invalid(format!("load '{text}': {}", e.message())))?;
                        n as u8
                    }
                };
                let period = match period {
                    None => Self::DEFAULT_PERIOD,
                    Some(d) => firmtime_rt::units::parse_duration(d)
                        .map_err(|e| invalid(format!("load '{text}': period: {}", e.message())))?,
                };
                let workers = opt("workers").map_or(Ok(1), |w| small("workers", w))?;
                LoadSpec::Duty {
                    percent,
                    period,
                    workers,
                }
            }
            "disk" => LoadSpec::Disk {
                file_size: arg.map_or(Ok(Self::DEFAULT_DISK_SIZE), |a| size("file size", a))?,
                chunk: opt("chunk").map_or(Ok(Self::DEFAULT_CHUNK), |c| size("chunk", c))?,
            },
            "memory" => LoadSpec::Memory {
                bytes: arg.map_or(Ok(Self::DEFAULT_MEMORY), |a| size("size", a))?,
            },
            "net" => LoadSpec::Net {
                pairs: arg.map_or(Ok(1), |a| small("pairs", a))?,
            },
            "stress" if arg.is_none() => LoadSpec::Stress,
            "stress" => {
                return Err(invalid(format!(
                    "load '{text}': stress takes no parameter (it is Varoquaux's fixed mix)"
                )))
            }
            _ => return Err(invalid(format!("unknown load '{text}': expected {SYNTAX}"))),
        };
        spec.validate()
            .map_err(|e| invalid(format!("load '{text}': {}", e.message())))?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> LoadSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_kind_parses_with_defaults() {
        assert_eq!(p("cpu"), LoadSpec::Cpu { hogs: 3 });
        assert_eq!(p("cpu:2"), LoadSpec::Cpu { hogs: 2 });
        assert_eq!(
            p("duty"),
            LoadSpec::Duty {
                percent: 50,
                period: Duration::from_millis(10),
                workers: 1
            }
        );
        assert_eq!(
            p("duty:25%@2ms,workers=4"),
            LoadSpec::Duty {
                percent: 25,
                period: Duration::from_millis(2),
                workers: 4
            }
        );
        assert_eq!(
            p("disk:1MiB,chunk=64KiB"),
            LoadSpec::Disk {
                file_size: MIB,
                chunk: 64 * KIB
            }
        );
        assert_eq!(p("memory:8MiB"), LoadSpec::Memory { bytes: 8 * MIB });
        assert_eq!(p("net"), LoadSpec::Net { pairs: 1 });
        assert_eq!(p("stress"), LoadSpec::Stress);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "cpu:3",
            "duty:50%@10ms",
            "duty:7%@1500us,workers=3",
            "disk:64MiB",
            "disk:100KiB,chunk=4KiB",
            "memory:256MiB",
            "memory:5000B",
            "net:2",
            "stress",
        ] {
            assert_eq!(p(s).to_string(), s);
            assert_eq!(p(&p(s).to_string()), p(s));
        }
    }

    #[test]
    fn out_of_range_names_the_parameter_and_range() {
        let e = "duty:0%".parse::<LoadSpec>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(
            e.message()
                .contains("percent 0% is out of range: valid is 1% to 100%"),
            "{e}"
        );
        let e = "duty:150%".parse::<LoadSpec>().unwrap_err();
        assert!(
            e.message().contains(
                "load 'duty:150%': duty percent 150% is out of range: valid is 1% to 100%"
            ),
            "{e}"
        );
        let e = "cpu:0".parse::<LoadSpec>().unwrap_err();
        assert!(
            e.message()
                .contains("hogs 0 is out of range: valid is 1 to 256"),
            "{e}"
        );
        let e = "disk:1MiB,chunk=2MiB".parse::<LoadSpec>().unwrap_err();
        assert!(e.message().contains("larger than the file size"), "{e}");
        let e = "duty:50%@10us".parse::<LoadSpec>().unwrap_err();
        assert!(e.message().contains("valid is 100us to 10s"), "{e}");
    }

    #[test]
    fn unknown_kinds_and_options_list_the_syntax() {
        let e = "gpu:3".parse::<LoadSpec>().unwrap_err();
        assert!(e.message().contains("unknown load 'gpu:3'"), "{e}");
        assert!(e.message().contains("stress"), "{e}");
        let e = "cpu:3,workers=2".parse::<LoadSpec>().unwrap_err();
        assert!(
            e.message().contains("unknown option 'workers' for cpu"),
            "{e}"
        );
        let e = "stress:2".parse::<LoadSpec>().unwrap_err();
        assert!(e.message().contains("no parameter"), "{e}");
    }

    #[test]
    fn cli_args_name_every_parameter() {
        assert_eq!(
            p("duty:20%@5ms,workers=2").to_cli_args(),
            [
                "duty",
                "--percent",
                "20",
                "--period",
                "5ms",
                "--workers",
                "2"
            ]
        );
        assert_eq!(
            p("disk:1MiB").to_cli_args(),
            ["disk", "--size", "1MiB", "--chunk", "1MiB"]
        );
        assert_eq!(p("stress").to_cli_args(), ["stress"]);
    }

    #[test]
    fn sizes_format_exactly_for_specs_and_rounded_for_people() {
        assert_eq!(format_size(64 * MIB), "64MiB");
        assert_eq!(format_size(1536 * KIB), "1536KiB");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(human_size(1536 * KIB), "1.5MiB");
        assert_eq!(human_size(GIB + GIB / 3), "1.33GiB");
        assert_eq!(human_size(512), "512B");
    }

    #[test]
    fn json_has_kind_tag_and_period_in_ns() {
        let v = serde_json::to_value(p("duty:50%@10ms")).unwrap();
        assert_eq!(v["kind"], "duty");
        assert_eq!(v["period_ns"], 10_000_000);
        let back: LoadSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, p("duty:50%@10ms"));
    }
}
