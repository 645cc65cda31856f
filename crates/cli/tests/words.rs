//! Every screen speaks words (issue 21, items 1 and 6): no Rust debug form
//! (`Foo { a: 1 }`, `Some(`, `None`, `ClientStatus(`, `[Fixed, Random]`,
//! a JSON object where a sentence belongs) reaches a user from any command
//! that runs here without special hardware, and JACK errors name the
//! server tried and the closest port names.

mod common;

use common::{assert_exit, firmtime, text, EXE};
use firmtime_jack::{ServerKind, TestServer};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The debug forms found in `s`, one description each (empty: none).
fn debug_forms(s: &str) -> Vec<String> {
    debug_forms_in(s, false)
}

/// As [`debug_forms`]; `json_docs`: JSON shown as documentation (a help
/// text describing `--json`'s keys) is allowed.
fn debug_forms_in(s: &str, json_docs: bool) -> Vec<String> {
    let mut found = Vec::new();
    for (no, line) in s.lines().enumerate() {
        let mut say = |what: &str| found.push(format!("line {}: {what}: {line}", no + 1));
        for needle in [
            "Some(",
            "Ok(",
            "Err(",
            "ClientStatus(",
            "String(\"",
            "Number(",
            "{\"",
            "[\"",
        ] {
            if json_docs && needle.contains('"') {
                continue;
            }
            if line.contains(needle) {
                say(needle);
            }
        }
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .collect();
        if words.contains(&"None") {
            say("None");
        }
        if struct_form(line) {
            say("a struct's debug form");
        }
        if enum_list(line) {
            say("a debug list of enum values");
        }
        if let Some(name) = enum_name(line) {
            say(&format!("the enum name {name}"));
        }
    }
    found
}

/// Our settings' enum names as `{:?}` prints them, after `: ` or `order `
/// and ending the value (`output: Audio`, `order Fixed;`).
fn enum_name(line: &str) -> Option<&'static str> {
    const NAMES: [&str; 18] = [
        "Fixed",
        "Random",
        "Audio",
        "Midi",
        "Same",
        "Transpose",
        "Map",
        "Uniform",
        "Normal",
        "List",
        "AsPlayed",
        "Jack",
        "Raw",
        "Loopback",
        "Click",
        "Tone",
        "White",
        "Pink",
    ];
    NAMES.into_iter().find(|n| {
        [": ", "order "].iter().any(|p| {
            line.match_indices(&format!("{p}{n}")).any(|(i, m)| {
                line[i + m.len()..]
                    .chars()
                    .next()
                    .map_or(true, |c| !c.is_alphanumeric())
            })
        })
    })
}

/// `Ident { field: …` (a struct's debug form) or `ident { field = …` (a
/// TOML inline table printed as a value): an identifier, ` { `, then a
/// name and `:` or ` =`.
fn struct_form(line: &str) -> bool {
    line.match_indices(" { ").any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after: String = line[i + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_empty()
            && (line[i + 3 + after.len()..].starts_with(':')
                || line[i + 3 + after.len()..].starts_with(" ="))
    })
}

/// `[Fixed, Random]`: a bracket holding CamelCase words only (not `[FAIL]`).
fn enum_list(line: &str) -> bool {
    line.match_indices('[').any(|(i, _)| {
        let Some(end) = line[i..].find(']') else {
            return false;
        };
        let inner = &line[i + 1..i + end];
        !inner.is_empty()
            && inner.split(", ").all(|w| {
                let mut c = w.chars();
                c.next().is_some_and(|f| f.is_ascii_uppercase())
                    && w.chars().all(|c| c.is_ascii_alphanumeric())
                    && w.chars().skip(1).any(|c| c.is_ascii_lowercase())
            })
    })
}

#[test]
fn the_checker_catches_debug_forms_and_lets_words_through() {
    for bad in [
        "order Fixed; backend Foo { a: 1 }",
        "status ClientStatus(FAILURE | SERVER_FAILED)",
        "value Some(3)",
        "got None",
        "kinds [Fixed, Random]",
        "backend {\"audio\":{\"click_hz\":2000.0}}",
        "inputs [\"a:in\"]",
        "feedback: channel 1, pitch { mode = \"same\" }",
        "output: Audio",
        "seed 3, order Fixed; backend loopback",
    ] {
        assert!(!debug_forms(bad).is_empty(), "missed: {bad}");
    }
    for good in [
        "[FAIL] rtprio: none (set it in limits.conf)",
        "pitch the key played; delay none (at once)",
        "ends at: 42 keystrokes or 60 s",
        "trigger 1 at beat 12: metronome → stops",
        "write stage.port = value, e.g. gain.Gain = 0.5",
        "pitch = { mode = \"same\" } in the file",
    ] {
        assert_eq!(
            debug_forms(good),
            Vec::<String>::new(),
            "false alarm: {good}"
        );
    }
}

/// Fails naming the command and every debug form in its stdout and stderr.
fn assert_words(what: &str, out: &Output) {
    let help = what.ends_with("--help");
    let mut found = debug_forms_in(&text(&out.stdout), help);
    found.extend(debug_forms_in(&text(&out.stderr), help));
    assert!(
        found.is_empty(),
        "`firmtime {what}` printed debug forms:\n{}",
        found.join("\n")
    );
}

fn run(args: &[&str]) -> Output {
    let out = firmtime(args);
    assert_words(&args.join(" "), &out);
    out
}

/// The subcommands a `--help` text lists.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// A fresh directory for one test, removed on drop (also when it fails).
fn scratch(name: &str) -> common::TestDir {
    common::TestDir::new(&format!("words-{name}"))
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("rack"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_help_text_is_words() {
    let mut queue = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = run(&args);
        assert_exit(&out, 0, &[]);
        seen += 1;
        for c in subcommands(&text(&out.stdout)) {
            let mut p = path.clone();
            p.push(c);
            queue.push(p);
        }
    }
    assert!(seen > 30, "walked only {seen} help texts");
}

#[test]
fn commands_that_run_here_speak_words() {
    run(&["doctor"]);
    let ex = examples();
    assert!(ex.len() >= 5, "{ex:?}");
    for e in &ex {
        let out = run(&["tap", "check", e.to_str().unwrap()]);
        assert!(common::assert_ok(&out).contains("experiment: "));
    }
    let out = run(&["ladspa", "list"]);
    assert_exit(&out, 0, &[]);
    let out = run(&["lab", "cyclic", "--duration", "1s"]);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{out:?}");
    let out = run(&["load", "cpu", "--duration", "1s"]);
    assert_exit(&out, 0, &[]);

    // A real (short) session on the loopback backend, and its analysis.
    let d = scratch("session");
    let exp = d.join("short.toml");
    std::fs::write(
        &exp,
        "name = \"short\"\n[metronome]\nmspb = 250\n[end]\nduration_ms = 1000\n",
    )
    .unwrap();
    let out_dir = d.join("out");
    let out = run(&[
        "tap",
        "run",
        exp.to_str().unwrap(),
        "--subject",
        "s",
        "--session",
        "1",
        "--backend",
        "loopback",
        "--no-rt",
        "--no-prompt",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let err = assert_exit(&out, 0, &[]);
    let err = err + &text(&out.stderr);
    assert!(err.contains("in the order given"), "{err}");
    assert!(
        err.contains("backend: in-process loopback"),
        "the backend in words: {err}"
    );
    let csv = out_dir.join("s-s01-t001.csv");
    let out = run(&["tap", "analyze", csv.to_str().unwrap()]);
    // A metronome-only trial has no taps: analyzed, and flagged (exit 1).
    assert_exit(&out, 1, &["FLAG s-s01-t001: no taps at all"]);
}

#[test]
fn error_paths_speak_words() {
    let d = scratch("errors");
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "[feedback]\ndelay = { mode = \"fixed\" }\n").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["tap".into(), "check".into(), bad.display().to_string()],
        vec!["tap".into(), "check".into(), "/nonexistent.toml".into()],
        vec!["tap".into(), "analyze".into(), "/nonexistent.csv".into()],
        vec!["ladspa".into(), "describe".into(), "no_such_plugin".into()],
        vec!["load".into(), "cpu".into(), "--size".into(), "1M".into()],
        vec![
            "midi".into(),
            "monitor".into(),
            "--device".into(),
            "/nonexistent".into(),
        ],
        vec![
            "lab".into(),
            "cyclic".into(),
            "--duration".into(),
            "0s".into(),
        ],
        vec!["frobnicate".into()],
    ];
    for c in &cases {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} should fail: {out:?}");
    }
}

/// `firmtime ARGS` with `$JACK_DEFAULT_SERVER` set to `server`.
fn with_default_server(server: &str, args: &[&str]) -> Output {
    let out = Command::new(EXE)
        .args(args)
        .env("JACK_DEFAULT_SERVER", server)
        .stdin(Stdio::null())
        .output()
        .expect("run firmtime");
    assert_words(&args.join(" "), &out);
    out
}

/// Regression (issue 21, item 6): `tap run` said `on "the default server"
/// (status ClientStatus(FAILURE | SERVER_FAILED))` though
/// $JACK_DEFAULT_SERVER named the server it tried.
#[test]
fn tap_run_names_the_jack_server_it_tried() {
    if !common::jack_installed("tap_run_names_the_jack_server_it_tried") {
        return;
    }
    let d = scratch("noserver");
    let exp = examples()
        .into_iter()
        .find(|p| p.ends_with("sync-continuation.toml"))
        .unwrap();
    let name = format!("firmtime-nonexistent-{}", std::process::id());
    let tap = |session: &str, extra: &[&str]| {
        let mut a = vec![
            "tap",
            "run",
            exp.to_str().unwrap(),
            "--subject",
            "s",
            "--session",
            session,
            "--no-prompt",
            "--no-rt",
            "--out",
            d.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let args = tap("1", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = with_default_server(&name, &args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the JACK server \"{name}\" (named by $JACK_DEFAULT_SERVER)"
        )),
        "{err}"
    );
    assert!(err.contains("no server of that name answered"), "{err}");
    assert!(!err.contains("the default server"), "{err}");
    // --jack-server wins over the environment, and is the name said.
    let args = tap("2", &["--jack-server", "firmtime-other-name"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = with_default_server(&name, &args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the JACK server \"firmtime-other-name\":"),
        "{err}"
    );
}

/// Regression (issue 21, item 6): `midi ports` exited 0 with no server.
#[test]
fn midi_ports_without_a_jack_server_exits_1_naming_it() {
    if !common::jack_installed("midi_ports_without_a_jack_server_exits_1_naming_it") {
        return;
    }
    let name = format!("firmtime-nonexistent-{}", std::process::id());
    // Every backend listed: the others are still shown on stdout.
    let out = with_default_server(&name, &["midi", "ports"]);
    let stdout = text(&out.stdout);
    assert_exit(&out, 1, &[&format!("server \"{name}\"")]);
    assert!(stdout.contains("raw (--backend raw"), "{stdout}");
    // JACK alone, named by flag; JSON keeps the reason in its error field.
    let out = with_default_server(
        &name,
        &[
            "midi",
            "ports",
            "--backend",
            "jack",
            "--jack-server",
            "firmtime-flag-name",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["jack"]["server"], "firmtime-flag-name");
    assert!(
        v["jack"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("\"firmtime-flag-name\"")),
        "{v}"
    );
}

/// On a real dummy jackd: the port list is words and exits 0; a mistyped
/// port gets the closest names and `firmtime midi ports`, not `jack_lsp`.
#[test]
fn a_mistyped_port_gets_the_closest_names_on_a_real_server() {
    let Some(srv) = TestServer::start_for_test(ServerKind::Jackd, 48_000, 256) else {
        firmtime_rt::testing::skip("jackd not installed (Debian: apt-get install jackd2)");
        return;
    };
    let out = common::firmtime_on(&srv, &["midi", "ports", "--jack-server", srv.name()]);
    assert_words("midi ports (dummy jackd)", &out);
    assert_exit(&out, 0, &[]);
    assert!(text(&out.stdout).contains(&format!("server \"{}\"", srv.name())));

    let d = scratch("mistyped");
    let exp = d.join("short.toml");
    std::fs::write(&exp, "name = \"short\"\n[end]\nduration_ms = 500\n").unwrap();
    let out = common::firmtime_on(
        &srv,
        &[
            "tap",
            "run",
            exp.to_str().unwrap(),
            "--subject",
            "s",
            "--session",
            "1",
            "--no-prompt",
            "--no-rt",
            "--out",
            d.to_str().unwrap(),
            "--jack-server",
            srv.name(),
            // Our own output port is `firmtime-tap:out`.
            "--connect",
            "firmtime-tap:outt",
        ],
    );
    assert_words("tap run --connect firmtime-tap:outt", &out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "there is no source port \"firmtime-tap:outt\"; did you mean \"firmtime-tap:out\"?"
        ),
        "{err}"
    );
    assert!(err.contains("`firmtime midi ports`"), "{err}");
    assert!(!err.contains("jack_lsp"), "{err}");
}
