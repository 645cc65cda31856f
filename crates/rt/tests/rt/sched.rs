//! Scheduling, affinity, timer slack, memory locking and `setup::apply`
//! against the real kernel. Each test changes only threads it spawns;
//! memory locking is process-wide, so those tests hold `MEMORY`.

use firmtime_rt::dma::DmaLatencyGuard;
use firmtime_rt::memory;
use firmtime_rt::privileges::{Limit, Privileges};
use firmtime_rt::sched::{self, Policy};
use firmtime_rt::setup::{self, RtRequest};
use firmtime_rt::ErrorKind;
use std::process::Command;
use std::sync::Mutex;

/// Serialises the tests that lock or unlock process memory.
static MEMORY: Mutex<()> = Mutex::new(());

/// Environment variable that turns a test into its child-process role.
const CHILD_ENV: &str = "FIRMTIME_SCHED_TEST_CHILD";

fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().expect("test thread panicked")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn every_policy_is_set_and_read_back() {
    let mut policies = vec![
        Policy::Other { nice: 0 },
        Policy::Other { nice: 7 },
        Policy::Batch { nice: 5 },
        Policy::Idle,
    ];
    if crate::common::can_rt("RT part of every_policy_is_set_and_read_back") {
        policies.extend([
            Policy::Other { nice: -5 },
            Policy::Fifo { priority: 10 },
            Policy::Rr { priority: 20 },
            Policy::Fifo { priority: 99 },
            Policy::Deadline {
                runtime_ns: 100_000,
                deadline_ns: 1_000_000,
                period_ns: 1_000_000,
            },
        ]);
    }
    for p in policies {
        let (set, got, nice) = on_thread(move || {
            let set = sched::set_current_thread(&p);
            let got = sched::current_thread().unwrap();
            let nice = sched::current_nice().unwrap();
            // Leave SCHED_DEADLINE before exiting, as a well-behaved thread does.
            sched::demote_current_thread().unwrap();
            (set, got, nice)
        });
        set.unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(got, p, "read back after setting {p}");
        if let Some(n) = p.nice() {
            assert_eq!(nice, n, "getpriority after {p}");
        }
    }
}

#[test]
fn rt_priority_keeps_the_nice_value() {
    if !crate::common::can_rt("rt_priority_keeps_the_nice_value") {
        return;
    }
    let (policy, nice) = on_thread(|| {
        sched::set_current_thread(&Policy::Other { nice: 3 }).unwrap();
        sched::set_current_thread(&Policy::Rr { priority: 5 }).unwrap();
        let r = (
            sched::current_thread().unwrap(),
            sched::current_nice().unwrap(),
        );
        sched::demote_current_thread().unwrap();
        r
    });
    assert_eq!(policy, Policy::Rr { priority: 5 });
    assert_eq!(nice, 3);
}

#[test]
fn invalid_policies_are_refused_before_the_kernel_sees_them() {
    let e = on_thread(|| sched::set_current_thread(&Policy::Fifo { priority: 0 })).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("1-99"), "{e}");
    let e = on_thread(|| sched::set_current_thread(&Policy::Other { nice: 30 })).unwrap_err();
    assert!(e.message().contains("-20..19"), "{e}");
}

#[test]
fn demote_is_rt_safe_and_lands_on_other_nice_0() {
    if !crate::common::can_rt("demote_is_rt_safe_and_lands_on_other_nice_0") {
        return;
    }
    let (r, got, nice) = on_thread(|| {
        sched::set_current_thread(&Policy::Other { nice: -3 }).unwrap();
        sched::set_current_thread(&Policy::Fifo { priority: 10 }).unwrap();
        let r = assert_no_alloc::assert_no_alloc(sched::demote_current_thread);
        (
            r,
            sched::current_thread().unwrap(),
            sched::current_nice().unwrap(),
        )
    });
    r.unwrap();
    assert_eq!(got, Policy::Other { nice: 0 });
    assert_eq!(nice, 0);
}

#[test]
fn affinity_pins_to_each_online_cpu() {
    // The CPUs this process may use (all online ones unless run under taskset).
    let allowed = sched::affinity().unwrap();
    assert!(!allowed.is_empty());
    assert!(allowed.iter().all(|c| sched::online_cpus().contains(c)));
    for cpu in allowed.clone() {
        let (mask, running_on) = on_thread(move || {
            sched::set_affinity(&[cpu]).unwrap();
            std::thread::yield_now();
            // SAFETY: sched_getcpu has no preconditions.
            let on = unsafe { libc::sched_getcpu() };
            (sched::affinity().unwrap(), on)
        });
        assert_eq!(mask, vec![cpu]);
        assert_eq!(running_on, cpu as i32);
    }
    let all = on_thread(sched::affinity).unwrap();
    assert_eq!(all, allowed, "a fresh thread inherits the full mask");
    let e = on_thread(|| sched::set_affinity(&[4000])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn timer_slack_round_trips() {
    let got = on_thread(|| {
        let default = sched::timer_slack().unwrap();
        let mut seen = Vec::new();
        for ns in [1, 1000, 123_456, default] {
            sched::set_timer_slack(ns).unwrap();
            seen.push((ns, sched::timer_slack().unwrap()));
        }
        seen
    });
    for (asked, read) in got {
        assert_eq!(asked, read);
    }
}

#[test]
fn mlockall_locks_and_unlock_releases() {
    let _m = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        firmtime_rt::testing::skip("needs root (RLIMIT_MEMLOCK is usually too small)");
        return;
    }
    on_thread(|| memory::lock_all(256 * 1024)).unwrap();
    assert_eq!(memory::is_locked(), Some(true));
    assert!(memory::locked_kib().unwrap() >= 256);
    memory::unlock_all().unwrap();
    assert_eq!(memory::is_locked(), Some(false));
}

/// `(size, locked, rss)` in KiB of each mapping of `path` in this process.
fn mappings_of(path: &std::path::Path) -> Vec<(u64, u64, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let path = path.to_string_lossy();
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    let mut ours = false;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            ours = line.ends_with(path.as_ref());
            if ours {
                out.push((0, 0, 0));
            }
            continue;
        }
        let v: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        if let (true, Some(m)) = (ours, out.last_mut()) {
            match first {
                "Size:" => m.0 = v,
                "Locked:" => m.1 = v,
                "Rss:" => m.2 = v,
                _ => {}
            }
        }
    }
    out
}

#[test]
fn unwinding_tables_leave_the_lock_and_a_panic_still_unwinds() {
    let _m = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        firmtime_rt::testing::skip("needs root (RLIMIT_MEMLOCK is usually too small)");
        return;
    }
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    on_thread(|| memory::lock_all(0)).unwrap();
    let unlocked = |m: &[(u64, u64, u64)]| -> Vec<(u64, u64, u64)> {
        m.iter()
            .copied()
            .filter(|&(size, locked, _)| size > 0 && locked == 0)
            .collect()
    };
    let before = mappings_of(&exe);
    // libgcc_s: linked by every Rust program for unwinding, read only then.
    let got = memory::unlock_unused(&["libgcc_s.so"]);
    let after = mappings_of(&exe);
    // What was dropped must come back when used: a panic unwinds through
    // the tables, caught here with its message.
    let caught = std::panic::catch_unwind(|| panic!("unwound after the drop"));
    memory::unlock_all().unwrap();
    let got = got.unwrap();
    assert!(unlocked(&before).is_empty(), "all locked first: {before:?}");
    assert!(
        got.unwind_bytes >= 64 * 1024,
        "this test binary's .eh_frame is larger than that: {got:?}"
    );
    assert!(got.library_bytes > 0, "libgcc_s's text: {got:?}");
    // The tables are mappings of their own now (the kernel splits a
    // mapping where the lock ends), unlocked and not resident: as many
    // KiB as were said.
    let dropped = unlocked(&after);
    assert!(!dropped.is_empty(), "{after:?}");
    assert!(dropped.iter().all(|&(_, _, rss)| rss == 0), "{after:?}");
    assert_eq!(
        dropped.iter().map(|&(size, _, _)| size).sum::<u64>(),
        (got.unwind_bytes / 1024) as u64,
        "{after:?}"
    );
    let msg = caught.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"unwound after the drop"));
}

#[test]
fn apply_report_equals_the_request_when_root() {
    let _m = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        firmtime_rt::testing::skip("needs root");
        return;
    }
    let cpu = *sched::affinity().unwrap().last().unwrap();
    let req = RtRequest {
        policy: Policy::Fifo { priority: 30 },
        mlock: true,
        prefault_stack: 64 * 1024,
        cpus: Some(vec![cpu]),
        timer_slack_ns: Some(1000),
        dma_latency_us: std::path::Path::new(firmtime_rt::dma::DEVICE)
            .exists()
            .then_some(0),
        allow_downgrade: false,
    };
    let req2 = req.clone();
    let (setup, tid) = on_thread(move || {
        let s = setup::apply(&req2);
        sched::demote_current_thread().unwrap();
        (s, sched::current_tid())
    });
    let setup = setup.unwrap();
    memory::unlock_all().unwrap();
    let c = &setup.conditions;
    assert!(c.matches_request(), "{:?}", c.mismatches());
    assert_eq!(c.requested, req);
    assert!(c.downgrades.is_empty());
    assert_eq!(c.obtained.policy, Policy::Fifo { priority: 30 });
    assert_eq!(c.obtained.priority, 30);
    assert_eq!(c.obtained.cpus, vec![cpu]);
    assert_eq!(c.obtained.memory_locked, Some(true));
    assert_eq!(c.obtained.tid, tid);
    assert_eq!(setup.guard.is_some(), req.dma_latency_us.is_some());
    if req.dma_latency_us.is_some() {
        assert_eq!(c.obtained.dma_latency_us, Some(0));
    }
    let json = serde_json::to_string(c).unwrap();
    let back: setup::RtConditions = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, c);
}

#[test]
fn apply_default_changes_nothing() {
    let (before, setup) = on_thread(|| {
        (
            setup::observe().unwrap(),
            setup::apply(&RtRequest::default()),
        )
    });
    let setup = setup.unwrap();
    let o = &setup.conditions.obtained;
    assert!(
        setup.conditions.matches_request(),
        "{:?}",
        setup.conditions.mismatches()
    );
    assert_eq!(o.policy, before.policy);
    assert_eq!(o.cpus, before.cpus);
    assert_eq!(o.timer_slack_ns, before.timer_slack_ns);
    assert!(setup.guard.is_none());
}

/// A SCHED_DEADLINE thread must be allowed on every CPU of its root domain,
/// so pinning it to one CPU of several makes the kernel refuse: a real
/// refusal that a root test can provoke without touching sysctls.
#[test]
fn apply_refusal_restores_the_thread_and_downgrade_is_recorded() {
    if !is_root() || sched::online_cpus().len() < 2 {
        firmtime_rt::testing::skip("needs root and 2 CPUs");
        return;
    }
    let dl = Policy::Deadline {
        runtime_ns: 100_000,
        deadline_ns: 1_000_000,
        period_ns: 1_000_000,
    };
    let req = RtRequest {
        policy: dl,
        cpus: Some(vec![0]),
        timer_slack_ns: Some(1),
        ..Default::default()
    };
    let req2 = req.clone();
    let (before, r, after) = on_thread(move || {
        let before = setup::observe().unwrap();
        let r = setup::apply(&req2);
        (before, r, setup::observe().unwrap())
    });
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineRefused, "{e}");
    assert!(e.message().contains("affinity"), "{e}");
    assert_eq!(after.policy, before.policy);
    assert_eq!(after.cpus, before.cpus);
    assert_eq!(after.timer_slack_ns, before.timer_slack_ns);

    let req = RtRequest {
        allow_downgrade: true,
        ..req
    };
    let s = on_thread(move || setup::apply(&req)).unwrap();
    let c = &s.conditions;
    assert_eq!(c.downgrades.len(), 1, "{:?}", c.downgrades);
    let d = &c.downgrades[0];
    assert_eq!(d.what, "policy");
    assert_eq!(d.asked, dl.to_string());
    assert_eq!(d.got, "other:-20", "root may take the strongest nice");
    assert!(d.reason.contains("affinity"), "{}", d.reason);
    assert_eq!(c.obtained.policy, Policy::Other { nice: -20 });
    assert!(!c.matches_request());
}

#[test]
fn privileges_read_matches_the_kernel() {
    let p = Privileges::read();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(p.euid, unsafe { libc::geteuid() });
    let sysctl = |n: &str| -> Option<i64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{n}"))
            .ok()
            .map(|s| s.trim().parse().unwrap())
    };
    assert_eq!(p.sched_rt_runtime_us, sysctl("sched_rt_runtime_us"));
    assert_eq!(p.sched_rt_period_us, sysctl("sched_rt_period_us"));
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid, owned struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut l) }, 0);
    assert_eq!(p.rtprio_soft, Limit::from_raw(l.rlim_cur));
    assert_eq!(p.rtprio_hard, Limit::from_raw(l.rlim_max));
    assert!(p.vm_size_bytes.unwrap() > 0);
}

#[test]
fn dma_latency_guard_holds_and_releases() {
    if !is_root() {
        firmtime_rt::testing::skip("needs root");
        return;
    }
    match DmaLatencyGuard::hold(0) {
        Err(e) if e.kind() == ErrorKind::NotPresent => {
            firmtime_rt::testing::skip_device("/dev/cpu_dma_latency", e);
        }
        Err(e) => panic!("{e}"),
        Ok(g) => {
            assert_eq!(g.requested_us(), 0);
            assert_eq!(g.effective_us().unwrap(), 0);
            drop(g);
        }
    }
}

/// Re-runs `test` (its full name) of this binary in a child process with
/// `CHILD_ENV=role`, and returns its combined output after asserting it passed.
pub fn run_child(test: &str, env: &str, role: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env, role)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child {test} failed: {text}");
    assert!(
        text.contains("1 passed"),
        "child did not run {test}: {text}"
    );
    text
}

/// Drops to uid/gid 65534 with RLIMIT_RTPRIO 0 and a small RLIMIT_MEMLOCK in
/// a child process, and checks each refusal's kind and message.
#[test]
fn denied_realtime_is_explained_in_a_child() {
    if std::env::var(CHILD_ENV).as_deref() == Ok("denied") {
        return denied_child();
    }
    if !is_root() {
        firmtime_rt::testing::skip("needs root to drop privileges");
        return;
    }
    let out = run_child(
        "sched::denied_realtime_is_explained_in_a_child",
        CHILD_ENV,
        "denied",
    );
    assert!(out.contains("denied-child-done"), "{out}");
}

fn denied_child() {
    let set = |res, v: u64| {
        let l = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit reads a valid struct.
        assert_eq!(unsafe { libc::setrlimit(res, &l) }, 0);
    };
    set(libc::RLIMIT_RTPRIO, 0);
    set(libc::RLIMIT_MEMLOCK, 64 * 1024);
    set(libc::RLIMIT_NICE, 0);
    // SAFETY: plain system calls; glibc applies them to every thread.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    let p = Privileges::read();
    assert!(!p.has_sys_nice() && !p.has_ipc_lock(), "{p:?}");

    let e = on_thread(|| sched::set_current_thread(&Policy::Fifo { priority: 50 })).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RealtimeDenied, "{e}");
    for needle in ["RLIMIT_RTPRIO", "CAP_SYS_NICE", "rtprio 95", "setcap"] {
        assert!(e.message().contains(needle), "{needle}: {e}");
    }
    assert_eq!(e.errno(), Some(libc::EPERM));

    let e = on_thread(|| {
        sched::set_current_thread(&Policy::Deadline {
            runtime_ns: 100_000,
            deadline_ns: 1_000_000,
            period_ns: 1_000_000,
        })
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RealtimeDenied, "{e}");

    let e = on_thread(|| sched::set_current_thread(&Policy::Other { nice: -5 })).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.message().contains("RLIMIT_NICE"), "{e}");

    let e = memory::lock_all(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MemlockDenied, "{e}");
    assert!(e.message().contains("RLIMIT_MEMLOCK is 65536 bytes"), "{e}");
    assert!(e.message().contains("memlock unlimited"), "{e}");

    if std::path::Path::new(firmtime_rt::dma::DEVICE).exists() {
        let e = DmaLatencyGuard::hold(0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    }

    // Refused without allow_downgrade: an error, and the thread unchanged.
    let strict = RtRequest {
        policy: Policy::Fifo { priority: 50 },
        timer_slack_ns: Some(1),
        ..Default::default()
    };
    let (r, before, after) = on_thread(move || {
        let before = setup::observe().unwrap();
        (setup::apply(&strict), before, setup::observe().unwrap())
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::RealtimeDenied);
    assert_eq!(after.policy, before.policy);
    assert_eq!(after.timer_slack_ns, before.timer_slack_ns);

    // With allow_downgrade: recorded, never silent.
    let lenient = RtRequest {
        policy: Policy::Fifo { priority: 50 },
        mlock: true,
        allow_downgrade: true,
        ..Default::default()
    };
    let s = on_thread(move || setup::apply(&lenient)).unwrap();
    let c = &s.conditions;
    let what: Vec<&str> = c.downgrades.iter().map(|d| d.what.as_str()).collect();
    assert_eq!(what, ["mlock", "policy"], "{:?}", c.downgrades);
    assert_eq!(c.downgrades[1].asked, "fifo:50");
    assert_eq!(c.downgrades[1].got, "other");
    assert!(c.downgrades[1].reason.contains("RLIMIT_RTPRIO"));
    assert!(c.downgrades[0].reason.contains("RLIMIT_MEMLOCK"));
    assert_eq!(c.obtained.policy, Policy::Other { nice: 0 });
    assert_eq!(c.obtained.memory_locked, Some(false));
    assert!(!c.matches_request());
    println!("denied-child-done");
}
