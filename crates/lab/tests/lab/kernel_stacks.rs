//! `lab cyclic --kernel-stacks` on the real kernel (root, tracefs; issue 29
//! item 2): a SCHED_FIFO hog of a higher priority on the measured CPU
//! makes wake-ups late; the stack the kernel recorded when the hog gave up
//! the CPU to the measured thread is on the outlier's part of the hog, and
//! the trigger is gone from tracefs afterwards.

use crate::explain::{fifo_hog, usable, victim_cpu, INDUCED};
use firmtime_lab::cyclic::{self, Config};
use firmtime_lab::measure::Silent;
use firmtime_rt::sched::Policy;
use firmtime_trace::explain::{self, Kind};
use firmtime_trace::tracefs::{has_stack_trigger, read_text, TRACEFS};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The trace instances of this process (`firmtime-<pid>…`) in tracefs now.
fn own_instances() -> Vec<String> {
    let prefix = format!("firmtime-{}", std::process::id());
    std::fs::read_dir(Path::new(TRACEFS).join("instances"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n == &prefix || n.starts_with(&format!("{prefix}-")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kernel_stacks_of_a_fifo_hog_are_on_its_part_and_the_trigger_is_removed() {
    let _g = INDUCED.lock().unwrap_or_else(|e| e.into_inner());
    if !usable() {
        return;
    }
    let cpu = victim_cpu();
    let config = Config {
        interval_ns: 1_000_000,
        duration_ns: 2_000_000_000,
        policy: Policy::Fifo { priority: 80 },
        cpus: Some(vec![cpu]),
        mlock: true,
        explain: Some(explain::Config {
            above_ns: Some(1_000_000),
            kernel_stacks: true,
            ..explain::Config::default()
        }),
        ..Config::default()
    };
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("ft-hog".into())
            .spawn_scoped(s, || {
                // Bursts of 3 ms every 25 ms, at a higher priority than the
                // thread; between them the hog sleeps (nanosleep).
                fifo_hog(cpu, 3_000_000, Duration::from_millis(22), &stop);
            })
            .expect("start the hog");
        let r = cyclic::run(&config, &mut Silent);
        stop.store(true, Ordering::Relaxed);
        r
    })
    .expect("cyclic run");
    let tid = result
        .measured()
        .next()
        .map(|t| t.conditions.obtained.tid)
        .expect("the thread measured");
    let e = result.explain.expect("explained");
    let k = e
        .capture
        .kernel_stacks
        .clone()
        .expect("kernel_stacks asked for: the capture says what came of it");
    let line = e.stacks_line().expect("a line on the kernel stacks");
    if let Some(why) = &k.unavailable {
        // Said, never silent.
        assert!(line.contains(why.as_str()), "{line}");
        firmtime_rt::testing::skip(format!("this kernel offers no stack trigger: {why}"));
        return;
    }
    // tracefs is left clean: the trigger was removed (read back), the
    // instance is gone, no instance of this process (other tests' may run
    // meanwhile) has a stack trigger, and the global instance never had one.
    assert!(k.trigger_removed, "{k:?}");
    // Narrowed from the threads' name to their id once it was known.
    assert_eq!(
        k.trigger.as_deref(),
        Some(format!("stacktrace:unlimited if (next_pid == {tid}) && prev_pid != 0").as_str()),
        "{k:?}"
    );
    assert!(e.instance_removed);
    for name in own_instances() {
        let t = Path::new(TRACEFS)
            .join("instances")
            .join(&name)
            .join("events/sched/sched_switch/trigger");
        let text = read_text(&t).unwrap_or_default();
        assert!(!has_stack_trigger(&text), "{name}: {text}");
    }
    let global = read_text(&Path::new(TRACEFS).join("events/sched/sched_switch/trigger"))
        .expect("the global sched_switch trigger file");
    assert!(!has_stack_trigger(&global), "{global}");
    // The hog's stacks are on its parts: it gave up the CPU to the thread
    // by going to sleep, so its stack passes the kernel's nanosleep.
    let hog_stacks: Vec<&Vec<String>> = e
        .outliers
        .iter()
        .flat_map(|o| &o.cause.breakdown)
        .filter(|p| p.name == "ft-hog" && matches!(p.kind, Kind::Task | Kind::NonPreemptible))
        .filter_map(|p| p.kernel_stack.as_ref())
        .collect();
    let hog_parts = e
        .outliers
        .iter()
        .filter(|o| o.latency_ns >= 1_000_000)
        .filter(|o| o.cause.breakdown.iter().any(|p| p.name == "ft-hog"))
        .count();
    assert!(
        hog_parts >= 3,
        "the hog made few outliers ({hog_parts}): {}",
        e.summary()
    );
    assert!(
        !hog_stacks.is_empty(),
        "no stack on the hog's parts of {hog_parts} outliers; {line}"
    );
    assert!(k.recorded >= k.attached && k.attached >= hog_stacks.len() as u64);
    assert!(k.symbolized, "{k:?}");
    assert!(
        hog_stacks
            .iter()
            .any(|s| s.iter().any(|f| f.contains("nanosleep"))),
        "{hog_stacks:#?}"
    );
    // No tracing frame on top, and every frame named `function+0x…`.
    for s in &hog_stacks {
        assert!(!s[0].starts_with("trace_event_raw_event"), "{s:?}");
        assert!(s.iter().all(|f| f.contains("+0x")), "{s:?}");
    }
    // In the JSON, as the part's `kernel_stack`.
    let json = serde_json::to_value(&e).expect("json");
    let with_key = json["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .flat_map(|o| {
            o["cause"]["breakdown"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|p| p["kernel_stack"].is_array())
        .count();
    assert_eq!(with_key as u64, k.attached);
    assert_eq!(json["capture"]["kernel_stacks"]["trigger_removed"], true);
}
