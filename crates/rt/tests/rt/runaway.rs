//! Runaway protection against the real kernel: a SCHED_FIFO busy loop on
//! every CPU is demoted by RLIMIT_RTTIME + SIGXCPU, and the process stays
//! responsive. The loops run in a child process so the test harness is never
//! at risk. Nothing here changes system sysctls: the test passes whether
//! `kernel.sched_rt_runtime_us` throttling is on (the default 95%) or off.

use firmtime_rt::runaway;
use firmtime_rt::sched::{self, Policy};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FIRMTIME_RUNAWAY_TEST_CHILD";
const TEST: &str = "runaway::fifo_busy_loops_on_every_cpu_are_demoted";
/// A busy loop that is not demoted within this gives up, failing the test.
const GIVE_UP: Duration = Duration::from_secs(20);

#[test]
fn fifo_busy_loops_on_every_cpu_are_demoted() {
    if std::env::var(CHILD_ENV).as_deref() == Ok("busy") {
        return busy_child();
    }
    if !crate::common::can_rt("fifo_busy_loops_on_every_cpu_are_demoted") {
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "busy")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child gives up by itself after GIVE_UP; this is the last resort.
    let deadline = Instant::now() + GIVE_UP * 3;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("runaway child did not finish: demotion or responsiveness failed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "child failed: {text}");
    assert!(
        text.contains("1 passed"),
        "child did not run the test: {text}"
    );
    let n = sched::online_cpus().len();
    assert!(
        text.contains(&format!("runaway-child demotions={n} threads={n}")),
        "{text}"
    );
}

/// What each busy thread saw.
#[derive(Debug, PartialEq)]
struct Seen {
    /// It was SCHED_FIFO 50 when it started spinning.
    was_fifo: bool,
    /// It saw itself demoted to SCHED_OTHER nice 0 while spinning.
    demoted: bool,
    /// The main thread's heartbeat advanced after the demotion.
    heartbeat_after: bool,
}

fn busy_child() {
    let guard = runaway::install(Duration::from_millis(200)).unwrap();
    let cpus = sched::online_cpus();
    let heartbeat = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let (heartbeat, finished) = (heartbeat.clone(), finished.clone());
            std::thread::spawn(move || {
                sched::set_affinity(&[cpu]).unwrap();
                sched::set_current_thread(&Policy::Fifo { priority: 50 }).unwrap();
                let was_fifo = sched::current_thread().unwrap() == Policy::Fifo { priority: 50 };
                let give_up = Instant::now() + GIVE_UP;
                let mut seen = Seen {
                    was_fifo,
                    demoted: false,
                    heartbeat_after: false,
                };
                // Busy: no blocking call, only the policy check (a syscall
                // that never sleeps) and the vDSO clock.
                let mut beat_at_demotion = 0;
                while Instant::now() < give_up {
                    // SAFETY: sched_getscheduler is a plain system call.
                    let policy = unsafe { libc::sched_getscheduler(0) };
                    if !seen.demoted && policy == libc::SCHED_OTHER {
                        seen.demoted = true;
                        beat_at_demotion = heartbeat.load(Ordering::SeqCst);
                    }
                    if seen.demoted && heartbeat.load(Ordering::SeqCst) > beat_at_demotion {
                        seen.heartbeat_after = true;
                        break;
                    }
                }
                seen.demoted &= sched::current_thread().unwrap() == Policy::Other { nice: 0 };
                finished.fetch_add(1, Ordering::SeqCst);
                seen
            })
        })
        .collect();
    // The SCHED_OTHER main thread: its heartbeat only advances if it gets CPU.
    while finished.load(Ordering::SeqCst) < cpus.len() {
        heartbeat.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1));
    }
    let seen: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (cpu, s) in cpus.iter().zip(&seen) {
        assert_eq!(
            s,
            &Seen {
                was_fifo: true,
                demoted: true,
                heartbeat_after: true
            },
            "busy thread on CPU {cpu}"
        );
    }
    let demoted = guard.demotions();
    assert_eq!(demoted, cpus.len() as u64);
    assert_eq!(runaway::demotions(), demoted);
    drop(guard);
    println!("runaway-child demotions={demoted} threads={}", seen.len());
}
