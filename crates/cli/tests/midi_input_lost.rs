//! `firmtime midi monitor` when its input's source goes away (issue 28,
//! item 2's sibling): a private jackd and jack_midiseq as the keyboard,
//! killed mid-run.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{text, EXE};
use firmtime_jack::{ServerKind, TestServer};

/// Regression (issue 28, siblings of item 2): a keyboard killed during
/// `midi monitor` went unnoticed (exit 0, `end_reason: duration`). The
/// monitor runs to its end, keeps every event, and says INPUT LOST: stderr,
/// `input_lost` in its JSON, exit status 1.
#[test]
fn monitor_says_when_its_keyboard_is_killed_and_exits_1() {
    if !firmtime_jack::program_on_path("jack_midiseq") {
        return firmtime_rt::testing::skip(
            "jack_midiseq not installed (Debian: apt-get install jackd2)",
        );
    }
    let Some(srv) = TestServer::start_for_test(ServerKind::Jackd, 48_000, 256) else {
        return firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
    };
    let mut keys = srv
        .client_env(&mut Command::new("jack_midiseq"))
        .args(["keys", "4800", "0", "60", "1200"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !firmtime_jack::list_ports(Some(srv.name()))
        .is_ok_and(|ps| ps.iter().any(|p| p.name == "keys:out"))
    {
        assert!(Instant::now() < deadline, "keys:out never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let child = srv
        .client_env(&mut Command::new(EXE))
        .args([
            "midi",
            "monitor",
            "--backend",
            "jack",
            "--jack-server",
            srv.name(),
            "--connect",
            "keys:out",
            "--no-rt",
            "--duration",
            "2s",
            "--json",
            "-",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    keys.kill().unwrap();
    keys.wait().unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["end_reason"], "duration", "the monitor ran to its end");
    assert!(
        !v["events"].as_array().unwrap().is_empty(),
        "the keyboard played before it went: {v}"
    );
    let lost = &v["input_lost"];
    assert_eq!(lost["cause"], "client_gone", "{v}");
    assert_eq!(lost["losses"], 1);
    assert_eq!(lost["restored"], false);
    assert!(
        lost["words"]
            .as_str()
            .unwrap()
            .contains("keys:out no longer feeds firmtime-monitor:in"),
        "{lost}"
    );
    assert!(err.contains("firmtime: INPUT LOST at "), "{err}");
    // Every event came before the loss.
    let at = lost["t_rel_ns"].as_u64().unwrap();
    assert!(v["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["t_rel_ns"].as_u64().unwrap() <= at));
}
