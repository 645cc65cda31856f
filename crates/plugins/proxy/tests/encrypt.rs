//! The proxy with an encrypted data plane (`encrypt = true`, issue 32 item
//! 3), in a real host: `applyplugin` (ladspa-sdk) renders a file through
//! `firmtime_proxy.so` with a worker (in this process, a
//! [`WorkerServer`]) that serves only encrypted sessions
//! (`require_encrypt`, `net worker --encrypt`: it refuses every other
//! setup, so a render that comes out processed was encrypted). Checked:
//! the file is byte for byte the one `applyplugin` writes running the
//! plugin itself; a config without `encrypt` is refused with the worker's
//! words and the render fails (exit 75) instead of writing the dry input;
//! an encrypting proxy works with a keyed worker that also serves plaintext.
//!
//! The host runs as a child with its own `FIRMTIME_PROXY_CONFIG` (the
//! proxy reads its configuration once per process).

use firmtime_net::remote::PluginAllowList;
use firmtime_net::{Key, ServerConfig, WorkerServer};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LADSPA: &str = "/usr/lib/ladspa";
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

/// A scratch directory, removed on drop.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("ftproxy-enc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn have_tools() -> bool {
    let missing: Vec<&str> = ["/usr/bin/applyplugin", "/usr/lib/ladspa/amp.so"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        firmtime_rt::testing::skip(format!(
            "{missing:?} not installed (apt install ladspa-sdk)"
        ));
    }
    missing.is_empty()
}

/// Builds the proxy library (the profile of this test binary) and copies it
/// to `dir/firmtime_proxy.so`.
fn install_proxy(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/PROFILE/deps/encrypt-HASH
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["build", "-q", "-p", "firmtime-plugin-proxy"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        c.arg("--release");
    }
    assert!(
        c.status().unwrap().success(),
        "building firmtime-plugin-proxy"
    );
    let so = dir.join("firmtime_proxy.so");
    std::fs::copy(profile_dir.join("libfirmtime_proxy.so"), &so).unwrap();
    so
}

/// A keyed worker on a free loopback port serving /usr/lib/ladspa.
fn worker(require_encrypt: bool) -> WorkerServer {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.key = Some(Key::new(KEY).unwrap());
    cfg.plugins = PluginAllowList::new(&[PathBuf::from(LADSPA)]).unwrap();
    cfg.require_encrypt = require_encrypt;
    WorkerServer::start(cfg).unwrap()
}

/// A 16-bit mono WAV of two sines, `frames` long.
fn wav(path: &Path, frames: usize) {
    let x: Vec<i16> = (0..frames)
        .map(|i| (12_000.0 * (i as f64 * 0.05).sin() + 3_000.0 * (i as f64 * 0.31).sin()) as i16)
        .collect();
    firmtime_ladspa::apply::write_wav_i16(path, 1, 48_000, &x).unwrap();
}

/// `applyplugin IN OUT LIBRARY LABEL 0.5` with the proxy's config; the output.
fn applyplugin(dir: &Path, cfg: &str, input: &Path, out: &Path, lib: &Path, label: &str) -> Output {
    let conf = dir.join("proxy.toml");
    std::fs::write(&conf, cfg).unwrap();
    let out = Command::new("applyplugin")
        .arg(input)
        .arg(out)
        .arg(lib)
        .args([label, "0.5"])
        .env("LADSPA_PATH", dir)
        .env("FIRMTIME_PROXY_CONFIG", &conf)
        .env("FIRMTIME_PROXY_CACHE", dir.join("cache"))
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some(),
        "applyplugin was killed by a signal: {out:?}"
    );
    out
}

fn entry(worker: &WorkerServer, key: &Path, extra: &str) -> String {
    format!(
        "[[remote]]\nworker = \"{}\"\nkey_file = \"{}\"\nlabel = \"amp_mono\"\nwindow = 0\n\
         deadline_ms = 5000\nconnect_timeout_ms = 2000\noffline_wait_ms = 700\n{extra}",
        worker.local_addr(),
        key.display()
    )
}

#[test]
fn applyplugin_through_an_encrypting_proxy_is_byte_exact_and_a_plaintext_one_is_refused() {
    if !have_tools() {
        return;
    }
    let dir = tmp("exact");
    let d = &dir.0;
    let so = install_proxy(d);
    let key = d.join("net.key");
    std::fs::write(&key, KEY).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let input = d.join("in.wav");
    // Not a multiple of applyplugin's 2048-frame blocks: the last run is shorter.
    wav(&input, 48_000 + 123);
    let direct = d.join("direct.wav");
    let out = applyplugin(
        d,
        "",
        &input,
        &direct,
        &Path::new(LADSPA).join("amp.so"),
        "amp_mono",
    );
    assert!(out.status.success(), "{out:?}");
    let want = std::fs::read(&direct).unwrap();
    assert_ne!(
        want,
        std::fs::read(&input).unwrap(),
        "the plugin changes the file"
    );

    let enc = worker(true);
    let addr = enc.local_addr().to_string();
    // Encrypting proxy, encrypting worker: the plugin's file, byte for byte.
    let proxied = d.join("proxied.wav");
    let out = applyplugin(
        d,
        &entry(&enc, &key, "encrypt = true\n"),
        &input,
        &proxied,
        &so,
        "remote_amp_mono",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        std::fs::read(&proxied).unwrap() == want,
        "the encrypted render differs from the plugin's own"
    );

    // A proxy that does not encrypt: refused in the worker's words, and the
    // render fails rather than write the input.
    let plain = d.join("plain.wav");
    for extra in ["", "encrypt = false\n"] {
        let _ = std::fs::remove_file(&plain);
        let out = applyplugin(
            d,
            &entry(&enc, &key, extra),
            &input,
            &plain,
            &so,
            "remote_amp_mono",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "{extra:?}: {err}");
        let refused: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("serves only encrypted sessions"))
            .collect();
        assert_eq!(refused.len(), 1, "{extra:?}: {err}");
        assert!(
            refused[0].starts_with(&format!("firmtime_proxy: amp_mono on {addr}: "))
                && refused[0].contains("set `encrypt = true`"),
            "{}",
            refused[0]
        );
        assert!(err.contains("offline render failed"), "{err}");
        if let Ok(bytes) = std::fs::read(&plain) {
            assert!(
                bytes != std::fs::read(&input).unwrap(),
                "the dry input was written"
            );
        }
    }
    enc.stop();

    // A keyed worker without require_encrypt serves an encrypting proxy too.
    let both = worker(false);
    let proxied = d.join("both.wav");
    let out = applyplugin(
        d,
        &entry(&both, &key, "encrypt = true\n"),
        &input,
        &proxied,
        &so,
        "remote_amp_mono",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::read(&proxied).unwrap() == want);
    both.stop();
}

#[test]
fn encrypt_without_a_key_file_is_refused_naming_the_entry() {
    if !have_tools() {
        return;
    }
    let dir = tmp("nokey");
    let d = &dir.0;
    let so = install_proxy(d);
    let input = d.join("in.wav");
    wav(&input, 4096);
    let cfg = "[[remote]]\nworker = \"127.0.0.1:9\"\nlabel = \"amp_mono\"\nencrypt = true\n";
    let out = applyplugin(d, cfg, &input, &d.join("out.wav"), &so, "remote_amp_mono");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("encrypt = true needs key_file"), "{err}");
}
