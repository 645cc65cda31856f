//! `--encrypt` on `net worker` and `net bench` (issue 32 item 3): an
//! encrypting bench runs against a worker that requires encryption and says
//! so in its JSON; the same worker refuses a plaintext bench with an error
//! naming the option; `--encrypt` without `--key` is a usage error on both.

mod common;

use common::{
    assert_exit, assert_usage_error, firmtime, read_json, spawn_ready, text, TmpPath, EXE,
};
use std::process::{Child, Command};

/// A keyed `firmtime net worker --encrypt` on a free loopback port, killed on drop.
struct EncryptingWorker(Child, String);

impl EncryptingWorker {
    fn start(key: &TmpPath) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(EXE);
        cmd.args(["net", "worker", "--listen", &addr, "--priority", "other"])
            .args(["--encrypt", "--key"])
            .arg(&key.0);
        Self(spawn_ready(&mut cmd), addr)
    }
}

impl Drop for EncryptingWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn key_file(name: &str) -> TmpPath {
    let key = TmpPath::new(name);
    std::fs::write(&key, [0x5au8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    key
}

#[test]
fn an_encrypting_bench_runs_and_a_plaintext_one_is_refused_by_an_encrypting_worker() {
    let key = key_file("net-encrypt.key");
    let w = EncryptingWorker::start(&key);
    let json = TmpPath::new("net-encrypt-bench.json");
    let k = key.0.to_str().unwrap();
    let common = [
        "--period-frames",
        "1024",
        "--window",
        "2",
        "--work-mode",
        "none",
        "--priority",
        "other",
        "--duration",
        "1s",
    ];
    let mut args = vec!["net", "bench", "--workers", &w.1, "--key", k, "--encrypt"];
    args.extend(common);
    args.extend(["--json", json.0.to_str().unwrap()]);
    let out = firmtime(&args);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report = read_json(&json);
    assert_eq!(report["encrypt"], true, "{report}");
    let delivered = report["workers"][0]["delivered"].as_u64().unwrap();
    assert!(delivered > 0, "no result came back encrypted: {report}");
    // The worker dropped nothing: every datagram was sealed under the session's keys.
    let stats = TmpPath::new("net-encrypt-stats.json");
    let out = firmtime(&[
        "net",
        "stats",
        "--worker",
        &w.1,
        "--key",
        k,
        "--json",
        stats.0.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = read_json(&stats);
    assert_eq!(s["dropped"], 0, "{s}");
    // Without --encrypt: refused, and the error says what to set.
    let mut args = vec!["net", "bench", "--workers", &w.1, "--key", k];
    args.extend(common);
    let out = firmtime(&args);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("only encrypted sessions") && err.contains("--encrypt"),
        "{err}"
    );
}

#[test]
fn encrypt_without_a_key_is_a_usage_error_on_worker_and_bench() {
    assert_usage_error(
        &["net", "worker", "--listen", "127.0.0.1:0", "--encrypt"],
        &["--encrypt needs --key FILE"],
    );
    let out = firmtime(&[
        "net",
        "bench",
        "--workers",
        "127.0.0.1:9",
        "--encrypt",
        "--duration",
        "1s",
    ]);
    assert_exit(&out, 2, &["--encrypt needs --key FILE"]);
}
