//! One vocabulary across commands (docs/VOCABULARY.md): walks the `--help`
//! of every command and fails when a concept is spelled two ways, when a
//! known synonym shows up, or when an old spelling no longer parses.

mod common;

use common::{text, EXE};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// A concept, the one flag that names it, the value names its forms may show
/// in `--help`, and spellings that must not be visible anywhere (the old ones
/// are hidden aliases; the others are synonyms a new flag must not pick).
struct Concept {
    concept: &'static str,
    flag: &'static str,
    values: &'static [&'static str],
    synonyms: &'static [&'static str],
}

const CONCEPTS: &[Concept] = &[
    Concept {
        concept: "CPU(s) a loop is pinned to",
        flag: "--cpu",
        values: &["N", "LIST"],
        synonyms: &["--cpus", "--cpu-list", "--affinity", "--pin"],
    },
    Concept {
        concept: "scheduling (policy and real-time priority) of the command's thread",
        flag: "--priority",
        values: &["PRIORITY"],
        synonyms: &[
            "--fifo-priority",
            "--rr-priority",
            "--rt-priority",
            "--prio",
            "--sched",
        ],
    },
    Concept {
        concept: "scheduling policy measured as a condition",
        flag: "--policy",
        values: &["POLICY", "LIST"],
        synonyms: &["--policies", "--sched-policy"],
    },
    Concept {
        concept: "sleep mechanism",
        flag: "--sleeper",
        values: &["MECHANISM", "LIST"],
        synonyms: &["--sleepers", "--mechanism", "--mechanisms"],
    },
    Concept {
        concept: "measured values per condition or cell",
        flag: "--samples",
        values: &["N"],
        synonyms: &["--calls", "--count", "--loops", "--iterations"],
    },
    Concept {
        concept: "repetitions of a whole measurement",
        flag: "--repeats",
        values: &["N"],
        synonyms: &["--reps", "--repetitions", "--runs"],
    },
    Concept {
        concept: "how long a run, a cell or a step lasts",
        flag: "--duration",
        values: &["D"],
        synonyms: &["--cell", "--time", "--length", "--secs", "--seconds"],
    },
    Concept {
        concept: "the sleep intervals asked for (lab sleep's list); never a period or a storage interval",
        flag: "--interval",
        values: &["LIST"],
        synonyms: &["--intervals"],
    },
    Concept {
        concept: "how often watch stores an interval (the storage interval)",
        flag: "--store-every",
        values: &["D"],
        synonyms: &["--store-interval", "--flush-every", "--save-every"],
    },
    Concept {
        concept: "JACK server name",
        flag: "--jack-server",
        values: &["NAME"],
        synonyms: &["--server"],
    },
    Concept {
        concept: "a port connected to our input",
        flag: "--connect",
        values: &["PORT"],
        synonyms: &["--connect-in", "--input-port", "--in-port"],
    },
    Concept {
        concept: "our output connected to a port",
        flag: "--connect-out",
        values: &["PORT"],
        synonyms: &["--output-port", "--out-port"],
    },
    Concept {
        concept: "frames per JACK/audio period",
        flag: "--period-frames",
        values: &["FRAMES", "PERIOD_FRAMES"],
        synonyms: &["--frames", "--buffer-frames", "--nframes"],
    },
    Concept {
        concept: "period of something periodic: the wake-ups (lab cyclic, watch), a duty-cycle load (load); always a duration",
        flag: "--period",
        values: &["D"],
        synonyms: &["--wakeup-period", "--cycle"],
    },
    Concept {
        concept: "how a loop waits (poll or spin)",
        flag: "--wait-mode",
        values: &["MODE"],
        synonyms: &[],
    },
    Concept {
        concept: "loads run during a measurement",
        flag: "--load",
        values: &["SPEC"],
        synonyms: &["--loads"],
    },
    Concept {
        concept: "time between status lines",
        flag: "--status-every",
        values: &["D"],
        synonyms: &["--status-interval", "--report-every"],
    },
    Concept {
        concept: "double-tap debounce",
        flag: "--debounce",
        values: &["D"],
        synonyms: &["--debounce-ms"],
    },
    Concept {
        concept: "machine-readable output",
        flag: "--json",
        values: &["[<PATH>]"],
        synonyms: &["--json-out", "--output-json", "--format-json"],
    },
];

/// Flags that take a duration: their value is `D` (units), never a bare number.
const DURATION_FLAGS: &[&str] = &[
    "--alarm",
    "--debounce",
    "--decay",
    "--dma-latency",
    "--duration",
    "--explain-above",
    "--login-grace",
    "--margin",
    "--max-delay",
    "--max-latency",
    "--metrics-linger",
    "--slice",
    "--status-every",
    "--step-duration",
    "--store-every",
    "--timeout",
    "--timer-slack",
    "--wait",
];

/// A flag name that is a synonym of a concept above but means something
/// else in one command (docs/VOCABULARY.md says why).
const OTHER_MEANING: &[(&str, &str)] = &[];

/// Every old spelling, given as it was, with a value: it must still parse
/// (`--help` after it answers 0 only when every argument before it parsed).
const OLD_SPELLINGS: &[(&str, &[&str])] = &[
    ("lab cyclic", &["--cpus", "0"]),
    ("lab cyclic", &["--dma-latency", "0"]),
    ("lab cyclic", &["--priority", "80"]),
    ("lab clock", &["--fifo-priority", "80"]),
    ("lab clock", &["--calls", "1000"]),
    ("lab sleep", &["--mechanisms", "nanosleep,timerfd"]),
    ("lab sleep", &["--intervals", "100us,1ms"]),
    ("lab sleep", &["--priority", "80"]),
    ("lab frames", &["--sleepers", "clock_nanosleep,poll"]),
    ("lab frames", &["--policies", "other,fifo:80"]),
    ("lab frames", &["--loads", "none,cpu:2"]),
    ("lab overhead", &["--reps", "5"]),
    ("lab overhead", &["--priority", "fifo:80"]),
    ("lab interrupts", &["--cell", "1s"]),
    ("lab interrupts", &["--priority", "80"]),
    ("lab tails", &["--priority", "50"]),
    ("lab trace", &["--pairs", "30"]),
    ("midi monitor", &["--priority", "80"]),
    ("midi loop", &["--priority", "80"]),
    (
        "tap run x.toml --subject s --session 1",
        &["--priority", "70"],
    ),
    ("tap replay x.csv", &["--priority", "70"]),
    ("tap analyze x.csv", &["--debounce-ms", "50"]),
    ("net worker", &["--priority", "fifo:70"]),
    (
        "net bench --workers 127.0.0.1:7700",
        &["--priority", "fifo:80"],
    ),
    ("net bench --workers 127.0.0.1:7700", &["--wait", "spin"]),
    ("rack x.toml", &["--server", "default"]),
    (
        "rack x.toml",
        &["--connect-in", "system:capture_1,system:capture_2"],
    ),
    ("rack x.toml", &["--period", "256"]),
    ("rack x.toml", &["--status-every", "1"]),
    ("ladspa apply in.wav out.wav", &["-s", "2"]),
    ("ladspa apply in.wav out.wav", &["--decay", "2"]),
    ("lab cyclic", &["--interval", "1ms"]),
    ("watch", &["--interval", "30s"]),
];

/// The new forms every command now also takes.
const NEW_FORMS: &[(&str, &[&str])] = &[
    ("lab cyclic", &["--cpu", "0"]),
    ("lab cyclic", &["--priority", "rr:50"]),
    ("lab cyclic", &["--priority", "other"]),
    ("lab cyclic", &["--dma-latency", "0us"]),
    ("lab clock", &["--priority", "fifo:80"]),
    ("lab sleep", &["--priority", "fifo:80"]),
    (
        "lab sleep",
        &["--sleeper", "nanosleep", "--sleeper", "timerfd"],
    ),
    ("lab interrupts", &["--priority", "fifo:80"]),
    ("lab tails", &["--priority", "rr:50"]),
    ("lab overhead", &["--priority", "80"]),
    ("midi monitor", &["--priority", "fifo:80"]),
    (
        "tap run x.toml --subject s --session 1",
        &["--priority", "fifo:70"],
    ),
    ("net worker", &["--priority", "70"]),
    (
        "net bench --workers 127.0.0.1:7700",
        &["--priority", "rr:80"],
    ),
    ("rack x.toml", &["--jack-server", "default"]),
    ("rack x.toml", &["--connect", "a", "--connect", "b"]),
    ("rack x.toml", &["--period-frames", "256"]),
    ("rack x.toml", &["--status-every", "500ms"]),
    ("tap analyze x.csv", &["--debounce", "50ms"]),
    ("ladspa apply in.wav out.wav", &["--decay", "2s"]),
    ("lab cyclic", &["--period", "1ms"]),
    ("watch", &["--period", "10ms", "--store-every", "30s"]),
];

/// `firmtime PATH… --help`'s text (exit status 0 asserted).
fn help(path: &[&str]) -> String {
    let out = Command::new(EXE)
        .args(path)
        .arg("--help")
        .output()
        .expect("run firmtime");
    assert!(
        out.status.success(),
        "firmtime {} --help: {:?}\n{}",
        path.join(" "),
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The visible flags of one help text: (name, value form).
fn flags(help: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for line in help.lines() {
        // Flag lines start at column 2 (`-s, --x`) or 6 (`--x`); wrapped
        // descriptions are indented further.
        let rest = if let Some(r) = line.strip_prefix("      --") {
            r
        } else if line.len() > 6 && line.starts_with("  -") && &line[4..6] == ", " {
            match line[6..].strip_prefix("--") {
                Some(r) => r,
                None => continue,
            }
        } else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let name = format!("--{}", words.next().unwrap_or(""));
        let value = words
            .next()
            .filter(|w| w.starts_with('<') || w.starts_with("[<"))
            .map(|w| w.trim_start_matches('<').trim_end_matches('>').to_string())
            .unwrap_or_default();
        v.push((name, value));
    }
    v
}

/// The subcommands a help text lists.
fn subcommands(help: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with(' ') {
                break;
            }
            let Some(r) = line.strip_prefix("  ") else {
                continue;
            };
            if r.starts_with(' ') {
                continue; // a wrapped description
            }
            let name = r.split_whitespace().next().unwrap_or("");
            if name != "help" && !name.is_empty() {
                v.push(name.to_string());
            }
        }
    }
    v
}

/// Every command (its path) with its visible flags, by walking `--help`.
fn every_command() -> BTreeMap<String, Vec<(String, String)>> {
    let mut all = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&p);
        for s in subcommands(&h) {
            let mut q = path.clone();
            q.push(s);
            todo.push(q);
        }
        all.insert(path.join(" "), flags(&h));
    }
    all
}

#[test]
fn every_command_spells_each_concept_one_way() {
    let all = every_command();
    assert!(
        all.len() >= 35,
        "the walk found only {} commands: {:?}",
        all.len(),
        all.keys()
    );
    let mut problems = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (cmd, flags) in &all {
        for (name, value) in flags {
            if let Some(c) = CONCEPTS.iter().find(|c| c.flag == name) {
                seen.insert(c.flag);
                if !c.values.contains(&value.as_str()) {
                    problems.push(format!(
                        "`{cmd}` shows {name} <{value}>; {} takes {:?}",
                        c.concept, c.values
                    ));
                }
            }
            for c in CONCEPTS {
                if c.synonyms.contains(&name.as_str())
                    && !OTHER_MEANING.contains(&(cmd.as_str(), name.as_str()))
                {
                    problems.push(format!(
                        "`{cmd}` shows {name}: a second spelling of {} (the flag is {})",
                        c.concept, c.flag
                    ));
                }
            }
            let unit_in_name = ["-ms", "-us", "-ns", "-secs", "-seconds", "-sec"]
                .iter()
                .any(|u| name.ends_with(u));
            if unit_in_name {
                problems.push(format!(
                    "`{cmd}` shows {name}: a duration takes units in its value, not its name"
                ));
            }
            if DURATION_FLAGS.contains(&name.as_str()) && value != "D" {
                problems.push(format!(
                    "`{cmd}` shows {name} <{value}>: a duration shows as <D> (with units)"
                ));
            }
        }
    }
    for c in CONCEPTS {
        if !seen.contains(c.flag) {
            problems.push(format!(
                "{} ({}) is used by no command: stale table",
                c.flag, c.concept
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `--interval` was the wake-up period in `lab cyclic` and the storage
/// interval in `watch`, whose wake-up period was `--period`: one word, two
/// meanings. Each word now has one: the wake-up period is `--period` in
/// both, the storage interval `--store-every`; the old `--interval` of each
/// stays as a hidden alias that means what it meant there.
#[test]
fn the_wakeup_period_and_the_storage_interval_have_one_word_each() {
    let all = every_command();
    let shows = |cmd: &str, flag: &str| {
        all.get(cmd)
            .unwrap_or_else(|| panic!("no command {cmd}"))
            .iter()
            .any(|(n, _)| n == flag)
    };
    for cmd in ["lab cyclic", "watch"] {
        assert!(shows(cmd, "--period"), "{cmd} --period");
        assert!(!shows(cmd, "--interval"), "{cmd} still shows --interval");
    }
    assert!(shows("watch", "--store-every"));
    let periods: Vec<&String> = all
        .iter()
        .filter(|(_, f)| f.iter().any(|(n, _)| n == "--period"))
        .map(|(c, _)| c)
        .collect();
    assert_eq!(
        periods,
        ["lab cyclic", "load", "watch"],
        "who shows --period"
    );
    // The old spellings mean what they meant: watch's the storage interval
    // (checked by the range its error names), lab cyclic's the period.
    let out = Command::new(EXE)
        .args([
            "watch",
            "--db",
            "/tmp/never-written.db",
            "--interval",
            "500ms",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--store-every 500ms is out of range: valid is 1s to 1h"),
        "{}",
        text(&out.stderr)
    );
    assert!(!std::path::Path::new("/tmp/never-written.db").exists());
}

#[test]
fn every_json_flag_has_one_form() {
    for (cmd, flags) in every_command() {
        for (name, value) in flags {
            if name == "--json" {
                assert_eq!(value, "[<PATH>]", "`{cmd}` --json");
            }
        }
    }
}

/// `firmtime CMD ARGS --help`: status and stderr.
fn parses(cmd: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(EXE)
        .args(cmd.split_whitespace())
        .args(args)
        .arg("--help")
        .output()
        .expect("run firmtime");
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn every_old_spelling_still_parses_and_stays_hidden() {
    for (cmd, args) in OLD_SPELLINGS {
        let (ok, stdout, stderr) = parses(cmd, args);
        assert!(
            ok,
            "`firmtime {cmd} {}` no longer parses:\n{stderr}",
            args.join(" ")
        );
        let flag = args[0];
        let shown = flags(&stdout).iter().any(|(n, _)| n == flag);
        let renamed = !["--priority", "--decay", "--dma-latency", "--status-every"].contains(&flag);
        if renamed && flag.starts_with("--") {
            assert!(!shown, "`firmtime {cmd} --help` still shows the old {flag}");
        }
    }
    // The walk is not vacuous: an unknown flag is refused the same way.
    let (ok, _, stderr) = parses("lab cyclic", &["--cpuz", "0"]);
    assert!(!ok && stderr.contains("--cpuz"), "{stderr}");
    let (ok, _, stderr) = parses("lab cyclic", &["--priority", "fifo:0"]);
    assert!(!ok && stderr.contains("--priority"), "{stderr}");
}

#[test]
fn every_new_form_parses() {
    for (cmd, args) in NEW_FORMS {
        let (ok, _, stderr) = parses(cmd, args);
        assert!(
            ok,
            "`firmtime {cmd} {}` does not parse:\n{stderr}",
            args.join(" ")
        );
    }
}

#[test]
fn the_docs_table_lists_every_flag_and_old_spelling() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/VOCABULARY.md"
    ))
    .expect("docs/VOCABULARY.md");
    for c in CONCEPTS {
        assert!(
            doc.contains(&format!("`{}", c.flag)),
            "VOCABULARY.md lacks {}",
            c.flag
        );
    }
    for (cmd, args) in OLD_SPELLINGS {
        let old = args[0];
        if old.starts_with("--") && !doc.contains(&format!("`{old}")) {
            panic!("VOCABULARY.md lacks the old spelling {old} (of `{cmd}`)");
        }
    }
}
