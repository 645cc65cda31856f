//! `firmtime net bench` against a worker the test starts on loopback: what
//! it prints and writes about the usable fraction with and without `--ramp`.
//! The loop runs at SCHED_OTHER (`--priority other`): these tests check the
//! report, not timing. And `net stats` after a bench: its words and its
//! JSON say the same.

mod common;

use common::{assert_ok, firmtime, net_bench, take_json, tmp_path, NetWorker as Worker};
use serde_json::Value;

/// Long periods (1024 frames, 21 ms) and window 2: no period is late on a
/// busy test machine, so the one step (or some ramp step) is usable.
fn bench(worker: &Worker, json: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let mut args = vec![
        "--period-frames",
        "1024",
        "--window",
        "2",
        "--work-mode",
        "none",
        "--priority",
        "other",
    ];
    args.extend(extra);
    net_bench(worker, json, &args)
}

fn usable_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.starts_with("usable fraction "))
        .unwrap_or_else(|| panic!("no usable fraction line in:\n{stdout}"))
}

/// Issue 14: one fixed fraction printed "usable fraction 0.0 %", as if the
/// limit had been measured at 0.
#[test]
fn without_ramp_the_usable_fraction_is_not_measured() {
    let w = Worker::start();
    let (code, stdout, json) = bench(&w, "bench-plain.json", &["--duration", "1s"]);
    let line = usable_line(&stdout);
    assert!(
        line.starts_with("usable fraction not measured (no --ramp)  master CPU "),
        "{line}"
    );
    assert!(json["usable_fraction"].is_null(), "{json}");
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    // The exit status still says whether that one fraction was usable.
    let usable = steps[0]["usable"].as_bool().unwrap();
    assert_eq!(code, Some(if usable { 0 } else { 1 }), "{stdout}");
}

#[test]
fn with_ramp_the_usable_fraction_is_a_number() {
    let w = Worker::start();
    let (code, stdout, json) = bench(
        &w,
        "bench-ramp.json",
        &[
            "--ramp",
            "--work",
            "0",
            "--ramp-to",
            "0.1",
            "--ramp-step",
            "0.1",
            "--step-duration",
            "1s",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{json}");
    let usable = json["usable_fraction"].as_f64().expect("a number");
    let best = steps
        .iter()
        .filter(|s| s["usable"] == true)
        .map(|s| s["fraction"].as_f64().unwrap())
        .fold(f64::NAN, f64::max);
    assert_eq!(usable, best, "{json}");
    let line = usable_line(&stdout);
    let want = format!("usable fraction {:.1} %  master CPU ", usable * 100.0);
    assert!(line.starts_with(&want), "{line}");
}

/// The JSON figure at a row's key (`drops.REASON` inside `drops`).
fn json_at<'a>(json: &'a Value, key: &str) -> &'a Value {
    match key.strip_prefix("drops.") {
        Some(reason) => &json["drops"][reason],
        None => &json[key],
    }
}

/// Regression (issue 28 item 4): after a `net bench`, `net stats` said
/// "periods processed 0" in words while `--json` said `periods_total: 8915,
/// sessions_opened: 4`. One `net stats --json FILE` now writes the JSON and
/// prints the words of the same answer: every figure of the words equals
/// the JSON's at the key its row names, and every JSON figure is in the words.
#[test]
fn net_stats_words_and_json_agree_after_a_bench() {
    let w = Worker::start();
    let (_, _, bench) = bench(&w, "stats-bench.json", &["--duration", "1s"]);
    let path = tmp_path("net-stats-words.json");
    let out = firmtime(&[
        "net",
        "stats",
        "--worker",
        &w.1,
        "--json",
        path.to_str().unwrap(),
    ]);
    let words = assert_ok(&out);
    let json = take_json(&path);
    // The words' labels and the JSON keys they stand for, as the library pairs them.
    let report: firmtime_net::control::WorkerReport = serde_json::from_value(json.clone()).unwrap();
    let key_of: std::collections::BTreeMap<String, String> = report
        .rows()
        .into_iter()
        .map(|r| (r.label, r.key))
        .collect();
    let mut lines = words.lines();
    assert_eq!(
        lines.next(),
        Some(format!("worker {}", w.1).as_str()),
        "{words}"
    );
    let mut shown = std::collections::BTreeSet::new();
    for line in lines {
        let (label, rest) = line
            .trim()
            .split_once("  ")
            .unwrap_or_else(|| panic!("no figure in {line:?}"));
        let key = key_of
            .get(label)
            .unwrap_or_else(|| panic!("{label:?} is in the words, not in the JSON:\n{words}"));
        let value = rest.trim_start();
        let want = json_at(&json, key);
        if value.starts_with("not readable") {
            assert!(want.is_null(), "{label}: not readable, JSON {key} = {want}");
        } else {
            let n: u64 = value
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{line:?}: no number"));
            assert_eq!(
                Some(n),
                want.as_u64(),
                "{label} ({key}) in\n{words}\n{json}"
            );
        }
        assert!(shown.insert(key.clone()), "{key} shown twice:\n{words}");
    }
    // Every figure of the JSON is in the words.
    for (k, v) in json.as_object().unwrap() {
        let keys: Vec<String> = match v {
            Value::Object(m) => m.keys().map(|r| format!("{k}.{r}")).collect(),
            _ => vec![k.clone()],
        };
        for key in keys {
            assert!(
                shown.contains(&key),
                "{key} is in the JSON, not in the words:\n{words}"
            );
        }
    }
    // And the figures are the bench's: its session ended, its periods were processed.
    assert_eq!(json["sessions"], 0, "{json}");
    assert_eq!(json["periods"], 0, "{json}");
    assert!(json["sessions_opened"].as_u64().unwrap() >= 1, "{json}");
    let delivered = bench["workers"][0]["delivered"].as_u64().unwrap();
    assert!(delivered > 0, "{bench}");
    assert!(
        json["periods_total"].as_u64().unwrap() >= delivered,
        "{json}\n{bench}"
    );
    assert_eq!(
        json["lost_total"].as_u64(),
        Some(json["incomplete"].as_u64().unwrap() + json["busy"].as_u64().unwrap()),
        "{json}"
    );
}
