//! `firmtime rack`: rack-file errors and a local chain on a dummy JACK server.

use std::process::{Command, Output, Stdio};

fn firmtime(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_firmtime"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("firmtime-rack-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_bad_rack_file_is_a_usage_error_with_line_and_column() {
    let p = tmp(
        "bad.toml",
        "[[stage]]\nplugin = \"amp_mono\"\nremote = { worker = \"h:1\", window = 5 }\n",
    );
    let out = firmtime(&["rack", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:3:37: window 5 is out of range", p.display())),
        "{err}"
    );
    std::fs::remove_file(p).unwrap();
}

#[test]
fn a_local_chain_runs_on_a_dummy_server() {
    if !std::path::Path::new("/usr/lib/ladspa/amp.so").exists()
        || Command::new("jackd").arg("--version").output().is_err()
    {
        eprintln!("skipping: needs ladspa-sdk and jackd2");
        return;
    }
    let p = tmp(
        "amp.toml",
        "[[stage]]\nname = \"g\"\nplugin = \"amp:amp_mono\"\ncontrols = { Gain = 0.5 }\n",
    );
    let json = std::env::temp_dir().join(format!("firmtime-rack-{}.json", std::process::id()));
    let out = firmtime(&[
        "rack",
        p.to_str().unwrap(),
        "--jack-dummy",
        "--period",
        "512",
        "--duration",
        "500ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for k in [
        "firmtime_version",
        "command",
        "rack_file",
        "xruns",
        "dsp_load_percent",
        "stats",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let cycles = v["stats"]["cycles"].as_u64().unwrap();
    assert!(cycles > 0);
    assert_eq!(v["stats"]["stages"][0]["name"], "g");
    assert_eq!(v["stats"]["stages"][0]["runs"].as_u64().unwrap(), cycles);
    std::fs::remove_file(p).unwrap();
    std::fs::remove_file(json).unwrap();
}
