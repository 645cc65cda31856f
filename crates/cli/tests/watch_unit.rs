//! `watch install`'s unit as deployed (issue 31 item 6): it never points
//! into the build tree (the binary is installed at a stable path, or the
//! install is refused with the command to run), it is hardened
//! (`systemd-analyze security --offline=true` exposure at most 4.0), a flag
//! value systemd would misread is refused by name, the unit is 0644 and the
//! binary 0755 whatever the umask, and its `ExecStopPost=` step removes the
//! tracefs instance a killed run left, and no other.
//!
//! The unit is not started by these tests (this machine's PID 1 is not
//! systemd): `scripts/watch-unit-systemd.sh` starts it under a systemd of
//! its own, kills it and stops it (docs/WATCH.md, "The service").

mod common;

use common::{assert_exit, assert_ok, firmtime, is_root, text, TestDir, EXE};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The value of the unit's `key=` lines.
fn values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        let mut m = 0;
        while m < n {
            let k = fb.read(&mut bb[m..n]).unwrap();
            if k == 0 {
                return false;
            }
            m += k;
        }
        if ba[..n] != bb[..n] {
            return false;
        }
        if n == 0 {
            return fb.read(&mut bb).unwrap() == 0;
        }
    }
}

/// `install --print`'s unit for `flags`, run as `/usr/local/bin/firmtime`.
fn printed(flags: &[&str]) -> String {
    let mut args = vec![
        "watch",
        "install",
        "--print",
        "--exe",
        "/usr/local/bin/firmtime",
        "--",
    ];
    args.extend_from_slice(flags);
    assert_ok(&firmtime(&args))
}

/// Today `watch install -- --db "$(printf 'a\nb')"` exited 0 and wrote the
/// newline raw into ExecStart=, which systemd then refused (or, with
/// `ExecStartPre=…` after the newline, ran as a directive of its own).
#[test]
fn install_refuses_a_control_character_in_a_flag_value_naming_the_flag() {
    let dir = TestDir::new("watch-unit-newline");
    let unit = dir.0.join("firmtime-watch.service");
    let exe = dir.0.join("firmtime");
    for (flags, flag, what) in [
        (
            vec![
                "--db",
                "/var/lib/firmtime/a\nExecStartPre=/bin/touch /tmp/x",
            ],
            "--db",
            "a newline",
        ),
        (
            vec!["--cpu", "0", "--metrics-listen=127.0.0.1:9807\n"],
            "--metrics-listen",
            "a newline",
        ),
        (
            vec!["--db", "/var/lib/firmtime/a\rb"],
            "--db",
            "a carriage return",
        ),
        (vec!["--interval", "1min\u{1b}"], "--interval", "U+001B"),
    ] {
        let mut args = vec![
            "watch",
            "install",
            "--unit",
            unit.to_str().unwrap(),
            "--exe",
            exe.to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(&flags);
        let out = firmtime(&args);
        let err = assert_exit(&out, 2, &[&format!("watch install: {flag}: the value ")]);
        assert!(err.contains(what), "{what}: {err}");
        assert!(err.contains("ExecStart="), "{err}");
        assert!(
            dir.entries().is_empty(),
            "{flags:?} wrote {:?}",
            dir.entries()
        );
    }
}

/// Today the unit was written with write_atomic's 0666 & ~umask: 0600
/// under umask 077, a unit only root can read.
#[test]
fn install_writes_the_unit_0644_and_the_binary_0755_under_umask_077() {
    let dir = TestDir::new("watch-unit-modes");
    let unit = dir.0.join("firmtime-watch.service");
    std::fs::create_dir(dir.0.join("bin")).unwrap();
    let exe = dir.0.join("bin/firmtime");
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$0\" \"$@\"")
        .arg(EXE)
        .args(["watch", "install", "--unit"])
        .arg(&unit)
        .arg("--exe")
        .arg(&exe)
        .args(["--", "--cpu", "0"])
        .output()
        .unwrap();
    let said = assert_ok(&out);
    assert!(
        said.contains(&format!("Installed this binary as {}", exe.display())),
        "{said}"
    );
    assert_eq!(mode(&unit), 0o644, "the unit's mode");
    assert_eq!(mode(&exe), 0o755, "the binary's mode");
    assert!(
        same_bytes(Path::new(EXE), &exe),
        "the installed copy differs"
    );
    let written = std::fs::read_to_string(&unit).unwrap();
    assert_eq!(
        values(&written, "ExecStart"),
        [format!(
            "{} watch --db /var/lib/firmtime/watch.db --cpu 0",
            exe.display()
        )]
    );

    // The installed binary installs again without copying itself, as the
    // unit's binary by default (it is not in a build tree), and the unit is
    // replaced, still 0644.
    std::fs::set_permissions(&unit, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$0\" \"$@\"")
        .arg(&exe)
        .args(["watch", "install", "--unit"])
        .arg(&unit)
        .args(["--", "--cpu", "0", "--interval", "30s"])
        .output()
        .unwrap();
    let said = assert_ok(&out);
    assert!(!said.contains("Installed this binary"), "{said}");
    assert_eq!(mode(&unit), 0o644, "the replaced unit's mode");
    let written = std::fs::read_to_string(&unit).unwrap();
    assert_eq!(
        values(&written, "ExecStart"),
        [format!(
            "{} watch --db /var/lib/firmtime/watch.db --cpu 0 --interval 30s",
            exe.display()
        )]
    );
    let mut names = dir.entries();
    names.sort();
    assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
}

/// Today the unit said `ExecStart=/…/target/release/firmtime watch …`: it
/// broke at the next `cargo clean`.
#[test]
fn install_refuses_to_point_the_unit_into_the_build_tree() {
    let dir = TestDir::new("watch-unit-build-tree");
    let unit = dir.0.join("firmtime-watch.service");
    let u = unit.to_str().unwrap();
    let tree = Path::new(EXE).parent().unwrap().parent().unwrap();
    // This binary (the build's) as the default, and named with --exe.
    for args in [
        vec!["watch", "install", "--unit", u, "--", "--cpu", "0"],
        vec![
            "watch", "install", "--unit", u, "--exe", EXE, "--", "--cpu", "0",
        ],
    ] {
        let out = firmtime(&args);
        let err = assert_exit(
            &out,
            2,
            &[
                &format!(
                    "the binary {EXE} is in a cargo build tree ({})",
                    tree.display()
                ),
                &format!("`sudo {EXE} watch install --exe /usr/local/bin/firmtime -- --cpu 0`"),
            ],
        );
        assert!(!err.contains("WATCH-FLAGS"), "{err}");
        assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    }
    // --print shows the unit `--exe /usr/local/bin/firmtime` would write.
    let out = firmtime(&["watch", "install", "--print", "--", "--cpu", "0"]);
    let shown = assert_ok(&out);
    assert!(
        text(&out.stderr).contains("the unit below runs /usr/local/bin/firmtime"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        values(&shown, "ExecStart"),
        ["/usr/local/bin/firmtime watch --db /var/lib/firmtime/watch.db --cpu 0"]
    );
    assert!(!shown.contains(&tree.display().to_string()), "{shown}");
}

#[test]
fn install_refuses_paths_the_hardened_service_cannot_see() {
    for (flags, needle) in [
        (
            vec!["--db", "/root/watch.db"],
            "--db /root/watch.db: the service cannot see it (the unit has ProtectHome=yes",
        ),
        (
            vec!["--db", "watch.db"],
            "--db watch.db: a relative path; the service runs in /",
        ),
        (
            vec![
                "--metrics-listen",
                "127.0.0.1:9807",
                "--metrics-token",
                "/home/x/token",
            ],
            "--metrics-token /home/x/token: the service cannot see it",
        ),
    ] {
        let mut args = vec![
            "watch",
            "install",
            "--print",
            "--exe",
            "/usr/local/bin/firmtime",
            "--",
        ];
        args.extend_from_slice(&flags);
        assert_exit(&firmtime(&args), 2, &[needle]);
    }
    let out = firmtime(&["watch", "install", "--print", "--exe", "/home/me/firmtime"]);
    assert_exit(
        &out,
        2,
        &["--exe /home/me/firmtime: the service cannot see it"],
    );
}

/// The overall exposure `systemd-analyze security --offline=true` gives
/// the unit at `path` (its last line: `→ Overall exposure level for
/// NAME: 2.4 OK 🙂`).
fn exposure(path: &Path) -> Option<f64> {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(path)
        .output()
        .ok()?;
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let line = all
        .lines()
        .find(|l| l.contains("Overall exposure level for"))
        .unwrap_or_else(|| panic!("no exposure in systemd-analyze's output:\n{all}"));
    let figure = line
        .rsplit_once(": ")
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap();
    Some(figure.parse().unwrap_or_else(|e| panic!("{line}: {e}")))
}

/// Today's unit ran as root with every capability and the whole file
/// system: exposure 9.6 UNSAFE.
#[test]
fn the_unit_has_the_least_it_needs_and_an_exposure_of_at_most_4() {
    let dir = TestDir::new("watch-unit-exposure");
    let cases = [
        (vec!["--cpu", "0"], false, None),
        (
            vec![
                "--db",
                "/srv/firmtime db/watch.db",
                "--metrics-listen",
                "127.0.0.1:9807",
            ],
            true,
            Some("\"/srv/firmtime db\""),
        ),
    ];
    let mut figures = Vec::new();
    for (i, (flags, metrics, rw)) in cases.iter().enumerate() {
        let unit = printed(flags);
        for line in [
            "CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "StateDirectory=firmtime",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "LimitRTPRIO=99",
            "LimitMEMLOCK=infinity",
            "SystemCallFilter=@system-service",
            "ExecStopPost=-/usr/local/bin/firmtime watch clean-trace",
        ] {
            assert!(unit.lines().any(|l| l == line), "{line} missing:\n{unit}");
        }
        // Real-time scheduling and /sys (tracefs) must stay allowed.
        for key in [
            "RestrictRealtime",
            "ProtectKernelTunables",
            "ProcSubset",
            "User",
            "DynamicUser",
        ] {
            assert!(
                values(&unit, key).is_empty(),
                "{key}= would break watch:\n{unit}"
            );
        }
        assert_eq!(
            values(&unit, "ReadWritePaths"),
            rw.iter().copied().collect::<Vec<_>>()
        );
        let families = values(&unit, "RestrictAddressFamilies");
        if *metrics {
            assert_eq!(families, ["AF_UNIX AF_INET AF_INET6"]);
            assert!(values(&unit, "PrivateNetwork").is_empty());
        } else {
            assert_eq!(families, ["AF_UNIX"]);
            assert_eq!(values(&unit, "PrivateNetwork"), ["yes"]);
            assert_eq!(values(&unit, "IPAddressDeny"), ["any"]);
        }
        let path = dir.0.join(format!("firmtime-watch-{i}.service"));
        std::fs::write(&path, &unit).unwrap();
        match exposure(&path) {
            Some(e) => figures.push((flags.join(" "), e)),
            None => {
                firmtime_rt::testing::skip(
                    "systemd-analyze not installed: the unit was checked as text only",
                );
                return;
            }
        }
    }
    println!("exposure (systemd-analyze security --offline=true): {figures:?}");
    for (flags, e) in figures {
        assert!(e <= 4.0, "exposure {e} > 4.0 with `{flags}`");
    }
}

#[test]
fn a_unit_holding_the_dma_latency_may_open_that_device_and_no_other() {
    let dir = TestDir::new("watch-unit-dma");
    let unit = printed(&["--cpu", "0", "--dma-latency", "0us"]);
    assert_eq!(values(&unit, "PrivateDevices"), ["no"], "{unit}");
    assert_eq!(
        values(&unit, "DeviceAllow"),
        ["/dev/cpu_dma_latency rw"],
        "{unit}"
    );
    assert_eq!(values(&unit, "DevicePolicy"), ["closed"], "{unit}");
    let plain = printed(&["--cpu", "0"]);
    assert_eq!(values(&plain, "PrivateDevices"), ["yes"]);
    assert!(values(&plain, "DeviceAllow").is_empty(), "{plain}");
    let path = dir.0.join("firmtime-watch-dma.service");
    std::fs::write(&path, &unit).unwrap();
    match exposure(&path) {
        Some(e) => {
            println!("exposure with --dma-latency: {e}");
            assert!(e <= 4.0, "exposure {e} > 4.0 with --dma-latency");
        }
        None => firmtime_rt::testing::skip(
            "systemd-analyze not installed: the unit was checked as text only",
        ),
    }
}

/// Today a run killed with SIGKILL left `instances/firmtime-PID-explain`
/// tracing until the next start; the unit's ExecStopPost= removes it, and
/// leaves alone the instances of live processes and of other tools.
#[test]
fn the_units_stop_step_removes_only_instances_of_gone_firmtime_processes() {
    if !is_root() {
        firmtime_rt::testing::skip("clean-trace: tracefs instances need root");
        return;
    }
    let instances = Path::new("/sys/kernel/tracing/instances");
    if !instances.is_dir() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
    if !instances.is_dir() {
        firmtime_rt::testing::skip("clean-trace: no tracefs at /sys/kernel/tracing");
        return;
    }
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let me = std::process::id();
    let stale = [
        format!("firmtime-{dead}"),
        format!("firmtime-{dead}-3-explain"),
    ];
    // Kept: a live process's, another tool's, and one that looks stale but
    // is held open (a process in another pid namespace): the kernel refuses
    // its removal (EBUSY), which is not an error.
    let kept = [
        format!("firmtime-{me}-9999-explain"),
        format!("othertool-{dead}"),
        format!("firmtime-{dead}-7-explain"),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::create_dir(instances.join(name)).unwrap_or_else(|e| panic!("mkdir {name}: {e}"));
    }
    let held = std::fs::File::open(instances.join(&kept[2]).join("per_cpu/cpu0/trace_pipe_raw"))
        .expect("open the held instance's buffer");
    let unit = printed(&["--cpu", "0"]);
    let step = values(&unit, "ExecStopPost");
    assert_eq!(step.len(), 1, "{unit}");
    let words: Vec<&str> = step[0].trim_start_matches('-').split(' ').collect();
    assert_eq!(words[0], "/usr/local/bin/firmtime", "{unit}");
    let out = Command::new(EXE).args(&words[1..]).output().unwrap();
    drop(held);
    let left: Vec<bool> = stale
        .iter()
        .chain(&kept)
        .map(|n| instances.join(n).exists())
        .collect();
    for name in &kept {
        let _ = std::fs::remove_dir(instances.join(name));
    }
    for name in &stale {
        let _ = std::fs::remove_dir(instances.join(name));
    }
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(
        left,
        [false, false, true, true, true],
        "stale, stale, live, other's, held: {said}"
    );
    for name in &stale {
        assert!(
            said.contains(&format!("instances/{name} (its process is gone)")),
            "{said}"
        );
    }
}
