//! docs/START.md's three paths, tried without hardware. The blocks the page
//! marks `<!-- try: PATH -->` are turned into a bash script by
//! `scripts/start-paths.sh --emit PATH` (the one place that does it, so the
//! script and this test run the same thing) and run in a scratch
//! directory; then what they wrote is checked: the trial files against the
//! columns TAP.md documents, the analysis, the remote plugin's output
//! against the local plugin's, the cyclictest and firmtime histograms
//! (their p50 and p99 compared, over alternated runs of both). The
//! page's other claims that need no hardware are checked too: every
//! `--flag` of every `firmtime` command on it is in that command's --help,
//! and the doctor items it names exist.
//!
//! Each path skips with a printed reason when a program it needs (jackd2,
//! jq, ecasound, cyclictest…) or real-time privileges are missing. JACK
//! xruns are counted and printed, never a failure.

mod common;

use common::{assert_ok, firmtime, text, TestDir, EXE};
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn start_md() -> String {
    read(&root().join("docs/START.md"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Whether every program is installed and, if `rt`, SCHED_FIFO is allowed;
/// prints why not for `test`.
fn can_run(test: &str, programs: &[&str], rt: bool) -> bool {
    let missing: Vec<&&str> = programs.iter().filter(|p| !on_path(p)).collect();
    if !missing.is_empty() {
        firmtime_rt::testing::skip(format!(
            "{test}: {missing:?} not installed (scripts/setup.sh installs them)"
        ));
        return false;
    }
    if rt {
        let out = firmtime(&["doctor", "--json", "-"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor JSON");
        let allowed = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == "rtprio_limit" && c["status"] == "pass");
        if !allowed {
            firmtime_rt::testing::skip(format!(
                "{test}: needs real-time privileges (root or rtprio, docs/RT-SETUP.md)"
            ));
            return false;
        }
    }
    true
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The blocks of START.md tagged `try: PATH KIND` (KIND "" = the bash
/// script of the sh blocks), as `scripts/start-paths.sh --emit` gives them.
fn emit(path: &str, kind: &str, ladspa_dir: &Path) -> String {
    let out = Command::new(root().join("scripts/start-paths.sh"))
        .args(["--emit", path])
        .args((!kind.is_empty()).then_some(kind))
        .env(
            "START_JACK_SERVER",
            format!("firmtime-try-{}-{path}", std::process::id()),
        )
        .env("START_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("START_PROM_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("START_LADSPA_DIR", ladspa_dir)
        .output()
        .expect("run scripts/start-paths.sh --emit");
    let script = assert_ok(&out);
    assert!(
        script.lines().any(|l| !l.trim().is_empty()),
        "docs/START.md has no blocks tagged `try: {path} {kind}`"
    );
    script
}

/// A scratch directory where `examples` and `contrib` are the repository's.
fn scratch(name: &str) -> TestDir {
    let d = TestDir::new(name);
    std::os::unix::fs::symlink(root().join("examples"), d.0.join("examples")).unwrap();
    std::os::unix::fs::symlink(root().join("contrib"), d.0.join("contrib")).unwrap();
    d
}

/// Runs PATH's tried sh blocks in `dir` with the binary under test first on
/// PATH; asserts that they succeed and returns their output (stdout and
/// stderr together, as a user sees them). None, with a SKIP line, when
/// jackd could not start because the machine runs as many JACK servers as
/// JACK allows (other jobs' servers).
fn run_path(path: &str, dir: &Path, ladspa_dir: &Path) -> Option<String> {
    std::fs::write(dir.join("run.sh"), emit(path, "", ladspa_dir)).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg("bash run.sh > run.log 2>&1")
        .current_dir(dir)
        .env("PATH", search_path())
        .env("FIRMTIME_PROXY_CACHE", dir.join("proxy-cache"))
        .env("JACK_NO_AUDIO_RESERVATION", "1")
        .output()
        .unwrap();
    let log = read(&dir.join("run.log"));
    let jackd = std::fs::read_to_string(dir.join("jackd.log")).unwrap_or_default();
    if !out.status.success() && jackd.contains("Too many servers already active") {
        firmtime_rt::testing::skip(format!(
            "{path}: jackd: too many JACK servers already active on this machine"
        ));
        return None;
    }
    assert!(
        out.status.success(),
        "docs/START.md, try: {path}: {:?}\n{log}",
        out.status
    );
    Some(log)
}

/// PATH with the binary under test first.
fn search_path() -> std::ffi::OsString {
    let bin = Path::new(EXE).parent().unwrap();
    std::env::join_paths(
        std::iter::once(bin.to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap()
}

/// The CSV header TAP.md documents (§3, its example's first line).
fn documented_csv_header() -> String {
    let tap = read(&root().join("docs/TAP.md"));
    tap.lines()
        .find(|l| l.starts_with("kind,index,"))
        .expect("TAP.md's CSV example")
        .to_string()
}

/// The keys of the first JSON object shown in a ```json block of `doc`.
fn json_sample_keys(doc: &str) -> BTreeSet<String> {
    let start = doc.find("```json\n").expect("a json block") + 8;
    let end = start + doc[start..].find("```").unwrap();
    let v: serde_json::Value = serde_json::from_str(&doc[start..end]).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

/// A python3 that has pandas (Debian's python3-pandas serves /usr/bin/python3).
fn pandas_python() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import pandas"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Runs an analysis snippet of START.md (`program file`) in `dir`; returns
/// the asynchronies it counted and their mean, in ms. With `xruns` in the
/// trial the tapper's ITI is not the 500 ms it played (the dummy server's
/// cycles slipped): that line's figure is then waived, its form still checked.
fn run_snippet(program: &str, kind: &str, dir: &Path, xruns: u64) -> (usize, f64) {
    let file = dir.join(format!("snippet.{kind}"));
    std::fs::write(&file, emit("scientist", kind, dir)).unwrap();
    let out = Command::new(program)
        .arg(&file)
        .current_dir(dir)
        .output()
        .unwrap();
    let printed = assert_ok(&out);
    println!("{kind}: {}", printed.trim().replace('\n', "; "));
    let mut lines = printed.lines();
    let first = lines.next().unwrap();
    assert!(first.starts_with("42 taps, ITI mean "), "{printed}");
    if xruns == 0 {
        assert!(first.starts_with("42 taps, ITI mean 500."), "{printed}");
    } else {
        firmtime_rt::testing::waive(format!(
            "{kind} snippet's ITI figure ({first}): {xruns} xruns in the trial"
        ));
    }
    let words: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(
        words[1..4],
        ["asynchronies,", "mean", words[3]],
        "{printed}"
    );
    (words[0].parse().unwrap(), words[3].parse().unwrap())
}

#[test]
fn scientist_dry_run_writes_the_documented_trial_and_the_snippets_agree_with_analyze() {
    let t = "scientist_dry_run";
    if !can_run(
        t,
        &[
            "jackd",
            "jack_wait",
            "jack_lsp",
            "jack_midiseq",
            "jq",
            "ss",
            "sox",
            "ecasound",
        ],
        true,
    ) {
        return;
    }
    let d = scratch("start-scientist");
    let Some(log) = run_path("scientist", &d.0, &d.0) else {
        return;
    };
    assert!(
        log.contains("  tapper:out "),
        "ports list the tapper: {log}"
    );
    assert!(log.contains("audio-sync-continuation.toml: ok"), "{log}");

    let csv = read(&d.0.join("data/TRY-s01-t001.csv"));
    let header = documented_csv_header();
    assert_eq!(csv.lines().next().unwrap(), header);
    assert!(
        start_md().contains(&format!("```text\n{header}\n")),
        "START.md shows the header TAP.md documents"
    );
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.iter().all(|r| r.len() == 8), "8 fields in every row");
    let count = |kind: &str| rows.iter().filter(|r| r[0] == kind && r[7] == "1").count();
    assert_eq!(count("input"), 42, "the experiment ends at 42 taps");
    assert_eq!(count("metronome"), 12, "the metronome stops after 12 beats");
    let ends: Vec<&str> = rows
        .iter()
        .filter(|r| r[0] == "end")
        .map(|r| r[1])
        .collect();
    assert_eq!(ends, ["0"], "ended by its end condition");

    let side = common::read_json(&d.0.join("data/TRY-s01-t001.json"));
    // `events` counts the events; the certificate's rows (docs/TAP.md §11) are none.
    let certificate_rows = rows.iter().filter(|r| r[0] == "certificate").count();
    assert_eq!(
        side["events"].as_u64().unwrap() as usize,
        rows.len() - certificate_rows
    );
    assert_eq!(side["incomplete"], false);
    let checks = &side["self_checks"];
    assert_eq!(checks["input_overruns"], 0);
    assert_eq!(checks["events_dropped"], 0);
    let keys: BTreeSet<String> = checks.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        json_sample_keys(&start_md()),
        "START.md's self_checks"
    );
    println!(
        "trial: xruns {}, late outputs {}, loop max {} us",
        checks["xruns"], checks["late_outputs"], checks["output_interval_max_us"]
    );
    let xruns = checks["xruns"].as_u64().expect("self_checks.xruns");

    let summary = read(&d.0.join("analysis/summary.csv"));
    let phases: Vec<Vec<&str>> = summary
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let names: Vec<&str> = phases.iter().map(|r| r[1]).collect();
    assert_eq!(names, ["synchronization", "continuation"]);
    let taps: Vec<u32> = phases.iter().map(|r| r[2].parse().unwrap()).collect();
    // 12 beats; a tapper in the second half of each beat interval counts as
    // early for the next beat: its first beat is missing, its 12th tap
    // continuation.
    assert!(matches!(taps[..], [12, 30] | [11, 31]), "{taps:?}");
    let asynchronies: usize = phases[0][8].parse().unwrap();
    let async_mean_ms = phases[0][9].parse::<f64>().unwrap() / 1000.0;
    for f in [
        "TRY-s01-t001-taps.csv",
        "TRY-s01-t001-iti.png",
        "summary.png",
    ] {
        assert!(d.0.join("analysis").join(f).exists(), "{f}");
    }

    // 1.7: taps on a table, played by ecasound: every tap of the trial
    // from the sound, and the certificate with the loop inside JACK.
    let audio = common::read_json(&d.0.join("data/TRY-s02-t001.json"));
    assert_eq!(audio["audio_input"]["taps"], 42, "{audio:#}");
    assert_eq!(audio["incomplete"], false);
    assert_eq!(audio["certificate"]["taken"], "before the session");
    assert!(
        audio["certificate"]["audio_loop"]["path"]
            .as_str()
            .is_some_and(|p| p.contains("a loop inside JACK")),
        "{audio:#}"
    );

    // The pandas and R snippets compute the asynchronies firmtime does.
    let mut ran = 0;
    let agrees = |(n, mean): (usize, f64)| {
        assert_eq!(n, asynchronies, "as many asynchronies as tap analyze");
        assert!(
            (mean - async_mean_ms).abs() < 0.06,
            "{mean} vs {async_mean_ms}"
        );
    };
    if let Some(py) = pandas_python() {
        agrees(run_snippet(py, "pandas", &d.0, xruns));
        ran += 1;
    } else {
        firmtime_rt::testing::skip("python3-pandas not installed");
    }
    if on_path("Rscript") {
        agrees(run_snippet("Rscript", "R", &d.0, xruns));
        ran += 1;
    } else {
        firmtime_rt::testing::skip("r-base-core not installed");
    }
    println!("{ran} of 2 analysis snippets run");

    // The trial as pandas, R and readr write it back reads as the original.
    round_trips(&d.0, "TRY-s01-t001", &summary);
}

/// What pandas, base R and readr write from a trial CSV, each by its
/// defaults (and the variants users reach for: pandas' index kept, R's row
/// names dropped, every field quoted): `(name, program, script)` with the
/// script reading `IN` and writing `OUT`.
const WRITERS: [(&str, &str, &str); 6] = [
    (
        "pandas-to_csv-no-index",
        "pandas",
        "import pandas as pd, sys\npd.read_csv(sys.argv[1]).to_csv(sys.argv[2], index=False)\n",
    ),
    (
        "pandas-to_csv",
        "pandas",
        "import pandas as pd, sys\npd.read_csv(sys.argv[1]).to_csv(sys.argv[2])\n",
    ),
    (
        "pandas-quote-all",
        "pandas",
        "import csv, pandas as pd, sys\n\
         pd.read_csv(sys.argv[1]).to_csv(sys.argv[2], index=False, quoting=csv.QUOTE_ALL)\n",
    ),
    (
        "R-write.csv",
        "R",
        "a <- commandArgs(TRUE)\nwrite.csv(read.csv(a[1]), a[2])\n",
    ),
    (
        "R-write.csv-no-row-names",
        "R",
        "a <- commandArgs(TRUE)\nwrite.csv(read.csv(a[1]), a[2], row.names = FALSE)\n",
    ),
    (
        "readr-write_csv",
        "readr",
        "a <- commandArgs(TRUE)\n\
         readr::write_csv(readr::read_csv(a[1], show_col_types = FALSE), a[2])\n",
    ),
];

/// Writes `<stem>.csv` of `dir/data` back with each of [`WRITERS`] (its
/// JSON sidecar beside it), then checks that the events read back equal the
/// original's and that `tap analyze` of each gives `summary` (the original's).
fn round_trips(dir: &Path, stem: &str, summary: &str) {
    let original = dir.join(format!("data/{stem}.csv"));
    let events = firmtime_tap::data::read_csv(&read(&original)).expect("the original reads");
    let mut ran = Vec::new();
    for (name, tool, script) in WRITERS {
        let program = match tool {
            "pandas" => match pandas_python() {
                Some(py) => py,
                None => {
                    firmtime_rt::testing::skip("python3-pandas not installed");
                    continue;
                }
            },
            "readr"
                if !Command::new("Rscript")
                    .args(["-e", "library(readr)"])
                    .output()
                    .is_ok_and(|o| o.status.success()) =>
            {
                firmtime_rt::testing::skip("r-cran-readr not installed");
                continue;
            }
            _ if !on_path("Rscript") => {
                firmtime_rt::testing::skip("r-base-core not installed");
                continue;
            }
            _ => "Rscript",
        };
        let back = dir.join("back").join(name);
        std::fs::create_dir_all(&back).unwrap();
        let script_file = back.join("write-back");
        std::fs::write(&script_file, script).unwrap();
        let written = back.join(format!("{stem}.csv"));
        assert_ok(
            &Command::new(program)
                .arg(&script_file)
                .arg(&original)
                .arg(&written)
                .output()
                .unwrap(),
        );
        std::fs::copy(
            dir.join(format!("data/{stem}.json")),
            back.join(format!("{stem}.json")),
        )
        .unwrap();
        let text = read(&written);
        let again = firmtime_tap::data::read_csv(&text).unwrap_or_else(|e| {
            panic!(
                "{name}: {e}\n{}",
                text.lines().take(3).collect::<Vec<_>>().join("\n")
            )
        });
        assert_eq!(again, events, "{name}: the events read back differ");
        let out = back.join("analysis");
        assert_ok(&firmtime(&[
            "tap",
            "analyze",
            written.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        assert_eq!(
            read(&out.join("summary.csv")),
            summary,
            "{name}: tap analyze"
        );
        let changed = text != read(&original);
        ran.push(format!(
            "{name} ({})",
            if changed { "rewritten" } else { "same bytes" }
        ));
    }
    println!("written back and read again: {}", ran.join(", "));
}

/// A LADSPA directory holding the freshly built proxy.
fn proxy_dir(dir: &Path) -> PathBuf {
    common::install_proxy(&dir.join("ladspa"))
}

fn wav(p: &Path) -> Vec<i16> {
    hound::WavReader::open(p)
        .unwrap()
        .samples::<i16>()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn engineer_dry_run_puts_the_plugin_on_the_worker_one_block_late_and_bit_exact() {
    let t = "engineer_dry_run";
    if !can_run(t, &["jackd", "jack_wait", "ecasound", "ss"], false) {
        return;
    }
    if !Path::new("/usr/lib/ladspa/cmt.so").exists() {
        firmtime_rt::testing::skip(format!("{t}: cmt not installed (the lpf plugin)"));
        return;
    }
    let d = scratch("start-engineer");
    let lib = proxy_dir(&d.0);
    let Some(log) = run_path("engineer", &d.0, &lib) else {
        return;
    };
    let name = "Plugin Name: \"remote: Low Pass Filter (One Pole)\"";
    assert!(
        log.contains(name),
        "the name START.md gives for Ardour: {log}"
    );
    assert!(log.contains("\"latency\", output, control"), "{log}");

    // window = 1: the first ecasound block (1024 frames) is silence (the
    // latency the proxy reports), then the remote lpf's output, sample for
    // sample the local lpf's.
    let (x, y, local) = (
        wav(&d.0.join("in.wav")),
        wav(&d.0.join("out.wav")),
        wav(&d.0.join("local.wav")),
    );
    const BLOCK: usize = 1024;
    assert_eq!((x.len(), y.len()), (96_000, local.len()));
    assert!(
        y[..BLOCK].iter().all(|&v| v == 0),
        "the first block is silence"
    );
    assert!(
        y[BLOCK..] == local[..local.len() - BLOCK],
        "one block late, bit-exact"
    );
    assert_ne!(y, x, "filtered");

    // `net stats` while ecasound played live on JACK: one session, periods.
    let at = log.find("\"datagrams\"").expect("net stats in the output");
    let open = log[..at].rfind('{').unwrap();
    let stats: serde_json::Value = serde_json::Deserializer::from_str(&log[open..])
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(stats["sessions"], 1, "{stats}");
    assert!(stats["periods"].as_u64().unwrap() > 100, "{stats}");
    let worker = read(&d.0.join("worker.log"));
    let sessions = worker
        .lines()
        .filter(|l| l.starts_with("session from") && l.ends_with("blocks"))
        .count();
    assert!(sessions >= 2, "files and live: {worker}");
    let xruns = read(&d.0.join("jackd.log"))
        .matches("JackEngine::XRun")
        .count();
    println!(
        "live: {} periods remote, jackd logged {xruns} xruns",
        stats["periods"]
    );
}

/// The `q` quantile of the pooled histograms (1 µs buckets; negative
/// samples below the first bucket, overflows above the last), in µs.
fn hist_quantile(hists: &[&firmtime_lab::output::ThreadHist], q: f64) -> u64 {
    let buckets = hists.iter().map(|h| h.buckets.len()).max().unwrap_or(0);
    let mut counts = vec![0u64; buckets];
    let (mut under, mut over) = (0, 0);
    for h in hists {
        for (i, c) in h.buckets.iter().enumerate() {
            counts[i] += c;
        }
        under += h.underflows;
        over += h.overflows;
    }
    let n = under + over + counts.iter().sum::<u64>();
    assert!(n > 0, "empty histograms");
    let rank = ((q * n as f64).ceil() as u64).max(1);
    let mut seen = under;
    if seen >= rank {
        return 0;
    }
    for (us, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return us as u64;
        }
    }
    buckets as u64
}

/// Whether two latencies of the same machine and settings agree within
/// `factor` or `slack_us`, whichever is looser.
fn close(a: u64, b: u64, factor: u64, slack_us: u64) -> bool {
    let (lo, hi) = (a.min(b), a.max(b));
    hi <= lo * factor || hi - lo <= slack_us
}

#[test]
fn rt_dry_run_lab_cyclic_and_cyclictest_agree_on_p50_and_p99() {
    let t = "rt_dry_run";
    if !can_run(t, &["cyclictest"], true) {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        firmtime_rt::testing::skip(format!(
            "{t}: START.md pins to CPU 1; this machine has one CPU"
        ));
        return;
    }
    let d = scratch("start-rt");
    if run_path("rt", &d.0, &d.0).is_none() {
        return;
    }
    let ft = common::read_json(&d.0.join("ft.json"));
    assert_eq!(ft["kind"], "lab-cyclic");
    let th = &ft["result"]["threads"][0];
    assert_eq!(th["status"], "measured");
    assert_eq!(th["cpu"], 1);
    let ticks = th["ticks"].as_u64().unwrap();
    assert_eq!(ticks + th["missed"].as_u64().unwrap(), 5000, "5 s at 1 ms");
    assert_eq!(th["conditions"]["obtained"]["policy"]["policy"], "fifo");
    let rt = common::read_json(&d.0.join("ft.rt.json"));
    assert_eq!(rt["thread"]["0"]["cycles"], ticks);
    let ct = common::read_json(&d.0.join("ct.rt.json"));
    let cycles = ct["thread"]["0"]["cycles"].as_u64().unwrap();
    assert!((4000..=5000).contains(&cycles), "cyclictest: {cycles}");

    // The page's two commands again, in the other order (cyclictest first):
    // ft, ct, ct, ft, so a drift of the machine's load over the 20 s
    // weighs on both tools alike.
    let script = emit("rt", "", &d.0);
    let line = |prefix: &str| {
        script
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in START.md's rt path:\n{script}"))
            .to_string()
    };
    let again = format!(
        "set -euo pipefail\n{}\n{}\n",
        line("cyclictest ").replace("ct.", "ct2."),
        line("firmtime lab cyclic ").replace("ft.", "ft2.")
    );
    std::fs::write(d.0.join("again.sh"), again).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg("bash again.sh > again.log 2>&1")
        .current_dir(&d.0)
        .env("PATH", search_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rt path again: {:?}\n{}",
        out.status,
        read(&d.0.join("again.log"))
    );

    // Both -h histograms in cyclictest's format, 1000 µs buckets, holding
    // every wake-up of their run.
    let hist = |f: &str| {
        let h = read(&d.0.join(f));
        let parsed = firmtime_lab::output::parse_cyclictest_histogram(&h)
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(parsed.threads.len(), 1, "{f}");
        parsed.threads.into_iter().next().unwrap()
    };
    let (ft1, ft2, ct1, ct2) = (
        hist("ft.hist"),
        hist("ft2.hist"),
        hist("ct.hist"),
        hist("ct2.hist"),
    );
    assert_eq!(ft1.cycles, ticks, "ft.hist holds every wake-up");
    assert_eq!(ct1.cycles, cycles, "ct.hist holds every cycle");
    for h in [&ft1, &ft2, &ct1, &ct2] {
        assert_eq!(h.buckets.len(), 1000);
    }
    let (fts, cts) = ([&ft1, &ft2], [&ct1, &ct2]);
    let (ft50, ct50) = (hist_quantile(&fts, 0.5), hist_quantile(&cts, 0.5));
    let (ft99, ct99) = (hist_quantile(&fts, 0.99), hist_quantile(&cts, 0.99));
    let figures = format!(
        "lab cyclic: {} wake-ups, p50 {ft50} µs, p99 {ft99} µs, max {} µs, {} missed; \
         cyclictest: {} cycles, p50 {ct50} µs, p99 {ct99} µs, max {} µs",
        ft1.cycles + ft2.cycles,
        ft1.max_us.max(ft2.max_us),
        th["missed"],
        ct1.cycles + ct2.cycles,
        ct1.max_us.max(ct2.max_us),
    );
    println!("{figures}");
    // Same machine, same settings, alternated: the medians measure the same
    // wake-up path (tens of µs here) and must agree within a factor of 3 or
    // 50 µs, whichever is looser. That is loose for two measurements of
    // one thing, and tight against what would be a bug: latency against
    // the wrong deadline (a period, 1000 µs, off), timer slack left on (50
    // µs more on every wake-up), a unit mistaken (×1000).
    assert!(
        close(ft50, ct50, 3, 50),
        "p50 disagrees (factor 3 or 50 µs): {figures}"
    );
    // The tail: p99, not the maximum. This VM's hypervisor takes the vCPU
    // away for 1–5 ms about 4 times per 10,000 wake-ups (START.md's
    // figures), so one run's maximum is 40 µs or 5 ms by chance; p99 (the
    // 100th worst of ~10,000 per tool) is beyond those spikes. Within an
    // order of magnitude or 500 µs: the tail moves with the other builds on
    // the machine more than the median does.
    assert!(
        close(ft99, ct99, 10, 500),
        "p99 disagrees (factor 10 or 500 µs): {figures}"
    );
}

/// The sh code blocks of `doc`, continuation lines joined, comments cut.
fn sh_lines(doc: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    let mut heredoc: Option<String> = None;
    let mut cont = String::new();
    for l in doc.lines() {
        if !in_sh {
            in_sh = l.trim_start() == "```sh";
            continue;
        }
        if l.trim_start().starts_with("```") {
            in_sh = false;
            continue;
        }
        if let Some(eof) = &heredoc {
            if l == eof {
                heredoc = None;
            }
            continue;
        }
        if let Some(i) = l.find("<<") {
            let eof = l[i + 2..].trim_start_matches(['-', '\'']);
            heredoc = Some(eof.split(['\'', ' ']).next().unwrap().to_string());
        }
        let code = l.split(" #").next().unwrap().trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            cont.push_str(head);
            continue;
        }
        cont.push_str(code);
        lines.push(std::mem::take(&mut cont));
    }
    lines
}

/// `firmtime ARGS --help` as text, and the subcommands it lists.
fn help(chain: &[&str]) -> (String, Vec<String>) {
    let mut args = chain.to_vec();
    args.push("--help");
    let h = assert_ok(&firmtime(&args));
    let subs = h
        .split("Commands:")
        .nth(1)
        .map(|s| {
            s.lines()
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .filter(|l| !l.starts_with("   "))
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (h, subs)
}

#[test]
fn every_firmtime_flag_on_the_page_is_in_its_help() {
    let doc = start_md();
    let mut checked = 0;
    for line in sh_lines(&doc) {
        for part in line.split("&&") {
            let words: Vec<&str> = part.split_whitespace().collect();
            // `firmtime` as the command, not as an argument (`-p firmtime`).
            if words.first() != Some(&"firmtime") {
                continue;
            }
            let at = 0;
            let mut chain: Vec<&str> = Vec::new();
            let (mut h, mut subs) = help(&chain);
            for w in &words[at + 1..] {
                if subs.iter().any(|s| s == w) {
                    chain.push(w);
                    (h, subs) = help(&chain);
                } else {
                    break;
                }
            }
            assert!(!chain.is_empty(), "no subcommand in `{part}`");
            for w in &words[at + 1..] {
                if *w == "--" {
                    // `watch install … -- WATCH-FLAGS`: the flags of `watch`.
                    if chain != ["watch", "install"] {
                        break;
                    }
                    h = help(&["watch"]).0;
                    continue;
                }
                if let Some(flag) = w.strip_prefix("--") {
                    let flag = format!("--{}", flag.split('=').next().unwrap());
                    let listed = h
                        .lines()
                        .any(|l| l.split([' ', ',', '<', '=']).any(|t| t == flag));
                    assert!(
                        listed,
                        "`firmtime {}` has no {flag} (START.md: `{part}`)",
                        chain.join(" ")
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked >= 25,
        "only {checked} flags found: is START.md parsed right?"
    );
    println!("{checked} flags of firmtime commands in START.md are in --help");
}

#[test]
fn the_doctor_items_the_page_names_exist_and_ports_list_without_hardware() {
    let out = firmtime(&["doctor", "--json", "-"]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let titles: BTreeSet<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["title"].as_str().unwrap())
        .collect();
    let doc = start_md();
    let section = &doc[doc.find("### 1.1").unwrap()..doc.find("### 1.2").unwrap()];
    let mut named = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap().trim_start_matches("| ");
        for title in cell.split(", ") {
            let title = title.trim_matches('`');
            assert!(
                titles.contains(title),
                "doctor has no item '{title}': {titles:?}"
            );
            named += 1;
        }
    }
    assert!(named >= 6, "{named} items named");
    // Every backend is listed; the status says whether JACK answered.
    let out = firmtime(&["midi", "ports"]);
    let ports = text(&out.stdout);
    // Fails only when libjack is there and no server answers.
    let jack_down = firmtime_jack::list_ports(None)
        .is_err_and(|e| e.kind() != firmtime_jack::ErrorKind::NotInstalled);
    assert_eq!(
        out.status.code(),
        Some(i32::from(jack_down)),
        "JACK down: {jack_down}\n{ports}{}",
        text(&out.stderr)
    );
    if jack_down {
        assert!(text(&out.stderr).contains("no JACK ports listed"));
    }
    for backend in [
        "raw (--backend raw",
        "jack (--backend jack",
        "alsa (--backend alsa",
    ] {
        assert!(ports.contains(backend), "{ports}");
    }
}

#[test]
fn fleet_dry_run_watch_its_report_the_unit_prometheus_and_the_alerts() {
    let t = "fleet_dry_run";
    let needs = [
        "prometheus",
        "promtool",
        "curl",
        "jq",
        "systemd-analyze",
        "ss",
    ];
    if !can_run(t, &needs, true) {
        return;
    }
    let d = scratch("start-fleet");
    let Some(log) = run_path("fleet", &d.0, &d.0) else {
        return;
    };
    // 4.1: 8 s of 10 ms wake-ups on CPU 0: every deadline a wake-up or a miss.
    let rep = common::read_json(&d.0.join("watch-report/report.json"));
    let (count, missed) = (
        rep["count"].as_u64().unwrap(),
        rep["missed"].as_u64().unwrap(),
    );
    assert_eq!(count + missed, 800, "{rep}");
    assert!(
        log.lines()
            .any(|l| (l.starts_with("fine: ") || l.starts_with("NOT fine: "))
                && l.ends_with("8s of the last 1h watched on CPU 0")),
        "watch check's line: {log}"
    );
    // 4.2: the unit runs the stable path, hardened; its exposure.
    let unit = read(&d.0.join("firmtime-watch.service"));
    assert!(
        unit.contains("\nExecStart=/usr/local/bin/firmtime watch --db /var/lib/firmtime/watch.db --metrics-listen 0.0.0.0:9807\n"),
        "{unit}"
    );
    let exposure: f64 = log
        .lines()
        .find_map(|l| l.strip_prefix("→ Overall exposure level for firmtime-watch.service: "))
        .and_then(|r| r.split(' ').next())
        .expect("systemd-analyze's figure in the log")
        .parse()
        .unwrap();
    assert!(exposure <= 4.0, "exposure {exposure}");
    // 4.3: Prometheus scraped this watch (the address the harness gave it).
    let script = read(&d.0.join("run.sh"));
    let addr = script
        .split("--metrics-listen ")
        .filter_map(|r| r.split(' ').next())
        .find(|a| a.starts_with("127.0.0.1:"))
        .expect("the watch serving metrics on loopback");
    let w = common::read_json(&d.0.join("wakeups.json"));
    let series = w["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{w}");
    assert_eq!(series[0]["metric"]["job"], "firmtime-watch");
    assert_eq!(series[0]["metric"]["instance"], addr);
    let scraped: f64 = series[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(scraped > 0.0, "{w}");
    // 4.4: the rule tests pass, Prometheus lists every alert of the file,
    // and the dashboard's panels are the file's.
    assert!(
        log.contains("Unit Testing:  contrib/prometheus/firmtime-watch.rules.test.yml\n  SUCCESS"),
        "{log}"
    );
    let rules = read(&root().join("contrib/prometheus/firmtime-watch.rules.yml"));
    let mut alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let mut listed: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("Firmtime"))
        .filter_map(|l| l.split(": ").next())
        .collect();
    alerts.sort_unstable();
    listed.sort_unstable();
    assert!(!alerts.is_empty());
    assert_eq!(listed, alerts, "{log}");
    let dash: serde_json::Value =
        serde_json::from_str(&read(&root().join("contrib/grafana/firmtime-watch.json"))).unwrap();
    for p in dash["panels"].as_array().unwrap() {
        let title = format!("  {}", p["title"].as_str().unwrap());
        assert!(log.lines().any(|l| l == title), "{title}: {log}");
    }
    println!(
        "watch: {count} wake-ups, {missed} missed; unit exposure {exposure}; Prometheus scraped {scraped} wake-ups; alerts {listed:?}"
    );
}
