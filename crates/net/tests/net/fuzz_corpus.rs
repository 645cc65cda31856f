//! The `decode` and `control` fuzz targets' corpora, replayed on stable in
//! every test run.
//!
//! The fuzz crate (crates/net/fuzz) is outside the workspace and needs
//! nightly to fuzz; its targets' bodies live in crates/net/fuzz/src/, included
//! here by `#[path]`, so this test compiles and runs exactly the code the
//! fuzzer runs, over every stored input: the committed seeds
//! (crates/net/fuzz/seeds/TARGET, written from [`decode_seeds`] and
//! [`control_seeds`]) and, when present, the local corpus a fuzzing run left
//! in crates/net/fuzz/corpus/TARGET.

use std::path::{Path, PathBuf};

use firmtime_net::control::{
    mac_input, parse_request, worker_greeting, Request, Role, Setup, GREETING, PROTOCOL,
};
use firmtime_net::{Encoder, Key, Transform, Work, WorkMode};

#[path = "../../fuzz/src/control.rs"]
mod control;
#[path = "../../fuzz/src/decode.rs"]
mod decode;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Every file of the seed corpus and of the local corpus (if any), by path.
fn stored_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    firmtime_rt::testing::fuzz_inputs(&fuzz_dir(), target)
}

/// Runs `check` on `data`, naming `path` when it panics.
fn replay<T>(target: &str, path: &Path, data: &[u8], check: impl Fn(&[u8]) -> T) -> T {
    firmtime_rt::testing::fuzz_replay(target, path, data, check)
}

/// The committed seeds of `target` are exactly `seeds` (so they follow the
/// wire and control formats); `FIRMTIME_WRITE_SEEDS=1` writes them first.
fn assert_seeds_stored(target: &str, seeds: &[(String, Vec<u8>)]) {
    let dir = fuzz_dir().join("seeds").join(target);
    if std::env::var_os("FIRMTIME_WRITE_SEEDS").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in seeds {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
    for (name, data) in seeds {
        let path = dir.join(name);
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (FIRMTIME_WRITE_SEEDS=1 writes it)", path.display())
        });
        assert!(
            stored == *data,
            "{} differs from its seed (FIRMTIME_WRITE_SEEDS=1 rewrites it)",
            path.display()
        );
    }
}

// ------------------------------------------------------------------ decode

/// One period's datagrams from an encoder, as the target reads them: the
/// selector byte, then the datagrams joined by the separator.
fn datagrams(sel: u8, key: Option<Key>, seq: u64, indices: &[usize]) -> Vec<u8> {
    let total = decode::total_of(sel);
    let payload: Vec<u8> = (0..total).map(|i| (i % 200) as u8).collect();
    let enc = Encoder::new(0, decode::flow_of(sel), 20, key).unwrap();
    let mut out = vec![sel];
    for (k, &i) in indices.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(&decode::SEPARATOR);
        }
        let mut buf = vec![0; enc.max_datagram()];
        let n = enc.encode(&mut buf, seq, &payload, i);
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// The `decode` seed corpus: whole periods with and without a key in both
/// flows, and invalid ones (a fragment missing, repeated, cut short, the
/// wrong key, a bad magic or version, another stream's length).
fn decode_seeds() -> Vec<(String, Vec<u8>)> {
    let key = || Some(Key::new(decode::KEY).unwrap());
    let to_worker = 4 << 1; // 52 bytes: 3 fragments of at most 20
    let keyed = to_worker | 1;
    let from_worker = 0x80 | 2 << 1; // 858 bytes, 43 fragments
    let all = |sel: u8| (0..decode::total_of(sel).div_ceil(20)).collect::<Vec<_>>();
    let mut bad_magic = datagrams(to_worker, None, 1, &[0]);
    bad_magic[1] ^= 0x20;
    let mut bad_version = datagrams(to_worker, None, 1, &[0]);
    bad_version[5] = bad_version[5].wrapping_add(1);
    let mut cut = datagrams(to_worker, None, 1, &all(to_worker));
    cut.truncate(cut.len() - 5);
    vec![
        ("empty".into(), vec![]),
        ("selector-only".into(), vec![to_worker]),
        (
            "period".into(),
            datagrams(to_worker, None, 1, &all(to_worker)),
        ),
        (
            "period-reversed".into(),
            datagrams(to_worker, None, 1, &[2, 1, 0]),
        ),
        (
            "period-keyed".into(),
            datagrams(keyed, key(), 7, &all(keyed)),
        ),
        (
            "period-from-worker".into(),
            datagrams(from_worker, None, 3, &all(from_worker)),
        ),
        (
            "fragment-missing".into(),
            datagrams(to_worker, None, 1, &[0, 2]),
        ),
        (
            "fragment-repeated".into(),
            datagrams(to_worker, None, 1, &[0, 0, 1, 1, 2, 2]),
        ),
        ("last-datagram-cut".into(), cut),
        (
            "keyed-without-key".into(),
            datagrams(to_worker, key(), 1, &all(to_worker)),
        ),
        (
            "unkeyed-with-key".into(),
            datagrams(keyed, None, 1, &all(keyed)),
        ),
        ("bad-magic".into(), bad_magic),
        ("bad-version".into(), bad_version),
        ("other-length".into(), {
            let mut d = datagrams(to_worker, None, 1, &all(to_worker));
            d[0] = 5 << 1; // the receiver expects 65 bytes
            d
        }),
    ]
}

#[test]
fn every_stored_input_of_the_decode_fuzz_target_passes_its_checks() {
    let inputs = stored_inputs("decode");
    let seeds = decode_seeds();
    assert!(
        inputs.len() >= seeds.len(),
        "{} stored inputs, {} seeds",
        inputs.len(),
        seeds.len()
    );
    let mut total = decode::Seen::default();
    for (path, data) in &inputs {
        let seen = replay("decode", path, data, decode::check);
        total.decoded += seen.decoded;
        total.accepted += seen.accepted;
        total.completed += seen.completed;
    }
    // The corpus reaches the decoder's accept path and completes periods.
    assert!(
        total.completed > 0 && total.accepted > total.completed,
        "{total:?}"
    );
}

#[test]
fn the_decode_seed_corpus_holds_every_generated_seed() {
    let seeds = decode_seeds();
    // What each seed is for: whole periods complete, broken ones do not.
    let completed = |name: &str| {
        let (_, data) = seeds.iter().find(|(n, _)| n == name).unwrap();
        decode::check(data).completed
    };
    for name in [
        "period",
        "period-reversed",
        "period-keyed",
        "period-from-worker",
    ] {
        assert_eq!(completed(name), 1, "{name}");
    }
    for name in [
        "fragment-missing",
        "last-datagram-cut",
        "keyed-without-key",
        "bad-magic",
    ] {
        assert_eq!(completed(name), 0, "{name}");
    }
    assert_seeds_stored("decode", &seeds);
}

// ----------------------------------------------------------------- control

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lines as a master would send them with selector `sel`: line `n`'s tag is
/// right for the target's nonces (under its key when `sel` is odd).
fn lines(sel: u8, lines: &[&str]) -> Vec<u8> {
    tagged_lines(sel, lines, 0)
}

/// As [`lines`], with line `n` tagged as line `n + shift` (wrong unless 0).
fn tagged_lines(sel: u8, lines: &[&str], shift: u64) -> Vec<u8> {
    let key = (sel & 1 == 1).then(|| Key::new(control::KEY).unwrap());
    let (worker, master) = control::nonces_of(sel);
    let mut out = vec![sel];
    for (n, json) in lines.iter().enumerate() {
        if n > 0 {
            out.push(b'\n');
        }
        let tag = match &key {
            Some(k) => hex(&k.tag(&mac_input(
                Role::Master,
                &worker,
                &master,
                n as u64 + shift,
                json.as_bytes(),
            ))),
            None => "-".to_string(),
        };
        out.extend_from_slice(format!("{tag} {json}").as_bytes());
    }
    out
}

fn setup_json(period_ns: u64) -> String {
    serde_json::to_string(&Request::Setup(Setup {
        stream_id: 7,
        data_port: 9000,
        layout: firmtime_net::discovery::layout(),
        window: 1,
        period_ns,
        transform: Transform::Negate,
        work: Work {
            fraction: 0.5,
            mode: WorkMode::Sleep,
        },
        plugin: None,
    }))
    .unwrap()
}

/// The `control` seed corpus: greetings, every request kind with right tags
/// (with and without a key), and invalid lines (wrong tags, a setup out of
/// range, cut JSON, unknown types, bytes that are not UTF-8).
fn control_seeds() -> Vec<(String, Vec<u8>)> {
    let setup = setup_json(1_000_000);
    let requests = [
        setup.as_str(),
        r#"{"type":"set_work","work":{"fraction":0.25,"mode":"spin"}}"#,
        r#"{"type":"ping","n":42}"#,
        r#"{"type":"stats"}"#,
        r#"{"type":"describe","plugin":"amp_mono"}"#,
        r#"{"type":"close"}"#,
    ];
    let greeting = format!("{GREETING} {PROTOCOL} {}", hex(&[0xab; 32]));
    let worker = worker_greeting(&[0xcd; 32], true);
    vec![
        ("empty".into(), vec![]),
        (
            "greetings".into(),
            [&[0u8][..], greeting.as_bytes(), b"\n", worker.as_bytes()].concat(),
        ),
        ("requests".into(), lines(0, &requests)),
        ("requests-keyed".into(), lines(1, &requests)),
        (
            "requests-keyed-wrong-tag".into(),
            tagged_lines(1, &requests, 1),
        ),
        (
            "setup-out-of-range".into(),
            lines(0, &[&setup_json(999), &setup_json(u64::MAX)]),
        ),
        ("setup-cut".into(), lines(0, &[&setup[..setup.len() / 2]])),
        (
            "unknown-type".into(),
            lines(0, &[r#"{"type":"reboot"}"#, "not json", ""]),
        ),
        (
            "not-utf8".into(),
            vec![
                0, b'-', b' ', 0xff, 0xfe, b'{', b'\n', b'-', b' ', b'{', b'}',
            ],
        ),
    ]
}

#[test]
fn every_stored_input_of_the_control_fuzz_target_passes_its_checks() {
    let inputs = stored_inputs("control");
    let seeds = control_seeds();
    assert!(
        inputs.len() >= seeds.len(),
        "{} stored inputs, {} seeds",
        inputs.len(),
        seeds.len()
    );
    let mut total = control::Seen::default();
    for (path, data) in &inputs {
        let seen = replay("control", path, data, control::check);
        total.greetings += seen.greetings;
        total.keyed_macs_ok += seen.keyed_macs_ok;
        total.requests += seen.requests;
        total.refused += seen.refused;
    }
    // The corpus reaches greetings, keyed MACs, accepted and refused requests.
    assert!(
        total.greetings > 0 && total.keyed_macs_ok > 0 && total.requests > 0 && total.refused > 0,
        "{total:?}"
    );
}

#[test]
fn the_control_seed_corpus_holds_every_generated_seed() {
    let seeds = control_seeds();
    let seen = |name: &str| {
        let (_, data) = seeds.iter().find(|(n, _)| n == name).unwrap();
        control::check(data)
    };
    // What each seed is for: every request parses and, keyed, every tag is
    // right; the wrong tags fail; the setups out of range are refused.
    assert!(parse_request(&setup_json(1_000_000)).is_ok());
    assert_eq!(seen("requests").requests, 6);
    assert_eq!(seen("requests-keyed").keyed_macs_ok, 6);
    assert_eq!(seen("requests-keyed-wrong-tag").keyed_macs_ok, 0);
    assert_eq!(seen("setup-out-of-range").refused, 2);
    assert_eq!(seen("greetings").greetings, 2);
    assert_seeds_stored("control", &seeds);
}
