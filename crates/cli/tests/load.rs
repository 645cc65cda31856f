//! `firmtime load` as a process, and `LoadSet` supervising such processes:
//! bounded runs exit 0, signals end them cleanly, nothing is left behind,
//! bad input exits 2 naming the flag and its range.
//!
//! A second test binary of the cli crate (tests/cli.rs belongs to `doctor`).

mod common;

use common::{assert_exit, assert_usage_errors, firmtime, TestDir, EXE};
use firmtime_lab::load::{LoadReport, LoadSet, LoadSpec};
use firmtime_lab::ErrorKind;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Waits (bounded, as a hang guard only) until `pid` catches SIGINT,
/// SIGTERM and SIGHUP.
fn wait_for_handlers(pid: u32) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("SigCgt:")).unwrap();
        let mask = u64::from_str_radix(line[7..].trim(), 16).unwrap();
        let bit = |s: libc::c_int| mask & (1 << (s - 1)) != 0;
        if bit(libc::SIGINT) && bit(libc::SIGTERM) && bit(libc::SIGHUP) {
            return;
        }
        assert!(
            Instant::now() < until,
            "pid {pid} never installed its handlers"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for `child` with a generous hang guard; kills it if the guard trips.
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > until {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("child {} did not exit after the signal", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn assert_reaped(pid: u32) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "load child {pid} is still alive or a zombie"
    );
    // SAFETY: waitpid with WNOHANG and a null status pointer is always safe.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    assert_eq!(rc, -1, "pid {pid} was not reaped");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ECHILD)
    );
}

#[test]
fn bounded_cpu_load_exits_0_by_itself_with_its_report() {
    let out = firmtime(&[
        "load",
        "cpu",
        "--hogs",
        "2",
        "--duration",
        "300ms",
        "--json",
        "-",
    ]);
    assert_exit(&out, 0, &[]);
    let r: LoadReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.spec, LoadSpec::Cpu { hogs: 2 });
    assert_eq!(r.threads, 2);
    assert!(r.iterations > 0);
    assert!(!r.stopped);
}

#[test]
fn summary_line_names_the_load_and_the_work() {
    let out = firmtime(&["load", "net", "--duration", "100ms"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with("load net:1: ran "), "{text}");
    assert!(text.contains("UDP round trips"), "{text}");
}

fn signal_ends_disk_load_cleanly(sig: libc::c_int, name: &str) {
    let dir = TestDir::new(name);
    let json = dir.0.join("report.json");
    let mut child = Command::new(EXE)
        .args(["load", "disk", "--size", "1MiB", "--chunk", "64KiB"])
        .args(["--duration", "10min", "--json"])
        .arg(&json)
        .env("TMPDIR", &dir.0)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_handlers(child.id());
    assert_eq!(common::kill(child.id(), sig), 0);
    let st = wait_bounded(&mut child);
    assert_eq!(st.code(), Some(0), "{name} ends the load with status 0");
    let r: LoadReport = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(r.stopped, "the report says the signal stopped it");
    let scratch = r.temp_dir.expect("disk names its temp dir");
    assert!(scratch.starts_with(&dir.0), "TMPDIR chose the directory");
    assert_eq!(dir.entries(), vec![json], "only the report is left");
}

#[test]
fn sigterm_ends_disk_load_with_status_0_and_no_file() {
    signal_ends_disk_load_cleanly(libc::SIGTERM, "sigterm");
}

#[test]
fn sigint_ends_disk_load_with_status_0_and_no_file() {
    signal_ends_disk_load_cleanly(libc::SIGINT, "sigint");
}

/// Issue 20, item 7: a closing terminal (SIGHUP) stops as Ctrl-C does.
#[test]
fn sighup_ends_disk_load_with_status_0_and_no_file() {
    signal_ends_disk_load_cleanly(libc::SIGHUP, "sighup");
}

#[test]
fn out_of_range_flags_exit_2_naming_flag_and_range() {
    assert_usage_errors(
        "load",
        &[
            ("duty --percent 0", &["--percent", "valid is 1 to 100"]),
            ("duty --percent 150", &["--percent", "valid is 1 to 100"]),
            ("cpu --duration 0s", &["--duration", "valid is 1ms to 24h"]),
            ("cpu --hogs 0", &["--hogs", "valid is 1 to 256"]),
            ("duty --period 1h", &["--period", "valid is 100us to 10s"]),
            ("disk --size 1KiB", &["--size", "valid is 64KiB to 64GiB"]),
            (
                "disk --size 1MiB --chunk 2MiB",
                &["--chunk", "larger than --size"],
            ),
            ("cpu --percent 5", &["--percent", "only to duty"]),
            ("gpu", &["gpu"]),
        ],
    );
}

#[test]
fn load_set_stops_and_reaps_children_and_collects_reports() {
    let specs = [LoadSpec::Cpu { hogs: 1 }, LoadSpec::Net { pairs: 1 }];
    let mut set = LoadSet::spawn(Path::new(EXE), &specs, Duration::from_secs(600)).unwrap();
    assert_eq!(set.len(), 2);
    set.check().unwrap();
    let pids = set.pids();
    let outcomes = set.stop();
    assert_eq!(outcomes.len(), 2);
    for (o, spec) in outcomes.iter().zip(&specs) {
        assert_eq!(&o.spec, spec);
        assert!(o.success(), "{o:?}");
        assert!(!o.killed && !o.early, "{o:?}");
        assert!(
            o.report.as_ref().unwrap().stopped,
            "SIGTERM stopped it: {o:?}"
        );
    }
    for pid in pids {
        assert_reaped(pid);
    }
    // Stopping again returns the same outcomes.
    assert_eq!(set.stop(), outcomes);
}

#[test]
fn load_set_dropped_early_leaves_no_child() {
    let specs = [LoadSpec::Cpu { hogs: 1 }, LoadSpec::Stress];
    let pids;
    {
        let set = LoadSet::spawn(Path::new(EXE), &specs, Duration::from_secs(600)).unwrap();
        pids = set.pids();
        for &pid in &pids {
            assert!(Path::new(&format!("/proc/{pid}")).exists());
        }
    }
    for pid in pids {
        assert_reaped(pid);
    }
}

#[test]
fn load_set_runs_bounded_children_to_their_end() {
    let specs = [LoadSpec::Memory { bytes: 1 << 20 }];
    let mut set = LoadSet::spawn(Path::new(EXE), &specs, Duration::from_millis(200)).unwrap();
    let pid = set.pids()[0];
    let o = set.wait();
    assert_eq!(o.len(), 1);
    assert!(o[0].success(), "{:?}", o[0]);
    let r = o[0].report.as_ref().unwrap();
    assert!(!r.stopped, "it ended at its duration");
    assert!(r.pages > 0 && r.pages_touched >= r.pages);
    assert_reaped(pid);
}

#[test]
fn load_set_reports_a_child_that_fails_to_start() {
    // /bin/false exits 1 at once: the set must say which child and how it ended.
    let e = LoadSet::spawn(
        Path::new("/bin/false"),
        &[LoadSpec::Cpu { hogs: 1 }],
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Load);
    assert!(e.message().contains("'cpu:1'"), "{e}");
    assert!(e.message().contains("exited with status 1"), "{e}");
}

#[test]
fn load_set_reports_a_child_that_dies_early() {
    let mut set = LoadSet::spawn(
        Path::new(EXE),
        &[LoadSpec::Cpu { hogs: 1 }],
        Duration::from_secs(600),
    )
    .unwrap();
    let pid = set.pids()[0];
    // SAFETY: kill has no memory-safety preconditions; the child is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    let until = Instant::now() + Duration::from_secs(30);
    let e = loop {
        match set.check() {
            Err(e) => break e,
            Ok(()) => {
                assert!(Instant::now() < until, "check never saw the dead child");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    assert_eq!(e.kind(), ErrorKind::Load);
    assert!(e.message().contains("'cpu:1'"), "{e}");
    assert!(e.message().contains("killed by signal 9"), "{e}");
    let o = set.stop();
    assert!(o[0].early && !o[0].success(), "{o:?}");
    assert_eq!(o[0].signal, Some(libc::SIGKILL));
    assert_reaped(pid);
}

#[test]
fn invalid_spec_is_refused_before_any_child_starts() {
    let spec = LoadSpec::Duty {
        percent: 0,
        period: Duration::from_millis(10),
        workers: 1,
    };
    let e = LoadSet::spawn(Path::new(EXE), &[spec], Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("valid is 1% to 100%"), "{e}");
}

/// Field `n` (1-based, as in proc(5)) of /proc/<pid>/stat.
fn stat_field(pid: u32, n: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesized command name start at field 3.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(n - 3).unwrap().parse().unwrap()
}

#[test]
fn children_of_an_rt_parent_run_at_sched_other_nice_0() {
    // Make this test thread SCHED_FIFO 1 and nice -5 while it spawns.
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param; 0 is this thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        firmtime_rt::testing::skip("SCHED_FIFO refused (needs root or an rtprio limit)");
        return;
    }
    // SAFETY: gettid and setpriority have no memory-safety preconditions.
    let tid = unsafe { libc::gettid() } as libc::id_t;
    // SAFETY: as above.
    let niced = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, -5) } == 0;
    let set = LoadSet::spawn(
        Path::new(EXE),
        &[LoadSpec::Cpu { hogs: 1 }],
        Duration::from_secs(600),
    );
    let normal = libc::sched_param { sched_priority: 0 };
    // SAFETY: `normal` is a valid sched_param; 0 is this thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &normal) };
    // SAFETY: as above.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 0) };
    let mut set = set.unwrap();
    let pid = set.pids()[0];
    assert_eq!(stat_field(pid, 41), i64::from(libc::SCHED_OTHER), "policy");
    assert_eq!(stat_field(pid, 40), 0, "rt_priority");
    if niced {
        assert_eq!(stat_field(pid, 19), 0, "nice");
    }
    assert!(set.stop()[0].success());
    assert_reaped(pid);
}

/// Parent side of `kill_9_of_the_parent_kills_its_load_children`: starts a
/// load set, prints its children's pids, then waits to be killed.
#[test]
#[ignore = "run only as a child process of kill_9_of_the_parent_kills_its_load_children"]
fn pdeathsig_parent() {
    let set = LoadSet::spawn(
        Path::new(EXE),
        &[LoadSpec::Cpu { hogs: 1 }, LoadSpec::Net { pairs: 1 }],
        Duration::from_secs(600),
    )
    .unwrap();
    let pids: Vec<String> = set.pids().iter().map(|p| p.to_string()).collect();
    println!("PIDS {}", pids.join(" "));
    // Bounded, so a broken outer test cannot leave this running for long.
    std::thread::sleep(Duration::from_secs(60));
    drop(set);
}

#[test]
fn kill_9_of_the_parent_kills_its_load_children() {
    use std::io::BufRead;
    let me = std::env::current_exe().unwrap();
    let mut parent = Command::new(me)
        .args(["--exact", "pdeathsig_parent", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(parent.stdout.take().unwrap()).lines();
    let pids: Vec<u32> = loop {
        let line = lines
            .next()
            .expect("the parent printed its children")
            .unwrap();
        // libtest prints "test pdeathsig_parent ... " on the same line.
        if let Some(at) = line.find("PIDS ") {
            break line[at + 5..]
                .split(' ')
                .map(|p| p.parse().unwrap())
                .collect();
        }
    };
    assert_eq!(pids.len(), 2);
    parent.kill().unwrap(); // SIGKILL: no Drop runs in the parent
    parent.wait().unwrap();
    // The kernel SIGKILLs the orphans; init reaps them. Gone, or at worst a zombie.
    let until = Instant::now() + Duration::from_secs(30);
    for pid in pids {
        loop {
            let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => true,
                Ok(s) => s[s.rfind(')').unwrap() + 2..].starts_with('Z'),
            };
            if gone {
                break;
            }
            assert!(
                Instant::now() < until,
                "load child {pid} outlived its parent"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
