//! `--explain`: attribution on synthetic traces (every category), the
//! RT-safe notes, and induced causes on this machine (root and tracefs; else
//! skipped with the reason): a SCHED_FIFO hog at a higher priority, a UDP
//! flood on loopback (NET_RX softirq), and a thread without locked memory
//! that page-faults. Asserted: the cause's category and name, never timings.

use firmtime_lab::cyclic::{self, Config};
use firmtime_lab::measure::Silent;
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::periodic::{Periodic, Tick};
use firmtime_rt::sched::{self, Policy};
use firmtime_trace::explain::attribute::{attribute, Category, Machine, Timeline, Wakeup};
use firmtime_trace::explain::{self, Notes, Outlier};
use firmtime_trace::raw::{Event, EventKind, IDLE_EXIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The induced-cause tests perturb the measured CPU: one at a time.
pub(crate) static INDUCED: Mutex<()> = Mutex::new(());

pub(crate) const TID: i32 = 500;

pub(crate) fn ev(t: u64, kind: EventKind) -> Event {
    Event {
        time_ns: t,
        cpu: 1,
        kind,
        ..Event::ZERO
    }
}

/// `e` recorded while `pid` was on the CPU (its common_pid).
pub(crate) fn on(pid: i32, e: Event) -> Event {
    Event { pid, ..e }
}

pub(crate) fn comm(s: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..s.len()].copy_from_slice(s.as_bytes());
    c
}

/// `prev` (comm, prio) leaves CPU 1 for `next` (prio).
pub(crate) fn switch(
    t: u64,
    prev: i32,
    prev_comm: &str,
    prev_prio: i32,
    next: i32,
    next_prio: i32,
) -> Event {
    Event {
        pid: prev,
        prev_pid: prev,
        next_pid: next,
        prev_state: 1,
        arg: u64::from(prev_prio as u32) | (u64::from(next_prio as u32) << 32),
        comm: comm(prev_comm),
        ..ev(t, EventKind::Switch)
    }
}

pub(crate) fn wakeup(t: u64) -> Event {
    Event {
        prev_pid: TID,
        next_pid: 1,
        comm: comm("measured"),
        ..ev(t, EventKind::Wakeup)
    }
}

pub(crate) fn late(deadline: u64, wake: u64) -> Wakeup {
    Wakeup {
        cpu: 1,
        tid: TID,
        deadline_ns: deadline,
        wake_ns: wake,
        slack_ns: 0,
        period_ns: 1_000_000,
    }
}

pub(crate) fn bare_metal() -> Machine {
    Machine {
        on_vm: false,
        preempt_model: "voluntary".into(),
        virtualization: Some("none".into()),
        idle_exit_max_ns: None,
    }
}

#[test]
fn a_higher_priority_task_is_named_with_its_priority() {
    // 10 µs: the thread sleeps, "hog" (RT 90 = kernel prio 9) runs; the
    // timer fires at D, the wake-up is queued; hog runs until D + 800 µs.
    let d = 1_000_000;
    let events = vec![
        switch(10_000, TID, "measured", 19, 42, 9),
        on(42, ev(d + 2_000, EventKind::LocalTimer)),
        on(42, wakeup(d + 3_000)),
        on(42, ev(d + 4_000, EventKind::LocalTimerExit)),
        switch(d + 800_000, 42, "hog", 9, TID, 19),
        on(TID, ev(d + 900_000, EventKind::LocalTimer)),
    ];
    let tl = Timeline::new(events);
    let c = attribute(&tl, &late(d, d + 805_000), &bare_metal());
    assert_eq!(c.category, Category::Task);
    assert_eq!(c.name, "hog");
    assert!(c.detail.contains("higher priority"), "{}", c.detail);
    assert!(c.detail.contains("RT priority 90"), "{}", c.detail);
}

#[test]
fn a_softirq_and_an_irq_are_named() {
    let d = 1_000_000;
    let mut irq = ev(d + 6_000, EventKind::IrqEntry);
    irq.prev_pid = 24;
    irq.comm = comm("virtio0-input.0");
    let mut irq_exit = ev(d + 106_000, EventKind::IrqExit);
    irq_exit.prev_pid = 24;
    let mut soft = ev(d + 106_500, EventKind::SoftirqEntry);
    soft.prev_pid = 3;
    let mut soft_exit = ev(d + 700_000, EventKind::SoftirqExit);
    soft_exit.prev_pid = 3;
    let events = vec![
        switch(10_000, TID, "measured", 19, 77, 120),
        on(77, ev(d + 1_000, EventKind::LocalTimer)),
        on(77, wakeup(d + 2_000)),
        on(77, ev(d + 3_000, EventKind::LocalTimerExit)),
        on(77, irq),
        on(77, irq_exit),
        on(77, soft),
        on(77, soft_exit),
        switch(d + 710_000, 77, "sender", 120, TID, 19),
        on(TID, ev(d + 900_000, EventKind::LocalTimer)),
    ];
    let tl = Timeline::new(events);
    let c = attribute(&tl, &late(d, d + 712_000), &bare_metal());
    assert_eq!(c.category, Category::Softirq);
    assert_eq!(c.name, "NET_RX");
    let irq_part = c.parts.iter().find(|p| p.category == Category::Irq);
    assert!(
        irq_part.is_some_and(|p| p.name == "virtio0-input.0"),
        "{:?}",
        c.parts
    );
}

#[test]
fn a_late_timer_on_a_vm_is_the_vm_and_on_bare_metal_idle_exit() {
    let d = 1_000_000;
    let mut idle = ev(20_000, EventKind::CpuIdle);
    idle.arg = 1;
    let mut idle_exit = ev(d + 2_000_000, EventKind::CpuIdle);
    idle_exit.arg = IDLE_EXIT;
    let events = vec![
        switch(10_000, TID, "measured", 19, 0, 120),
        idle,
        idle_exit,
        ev(d + 2_000_100, EventKind::LocalTimer),
        wakeup(d + 2_001_000),
        ev(d + 2_002_000, EventKind::LocalTimerExit),
        switch(d + 2_005_000, 0, "swapper/1", 120, TID, 19),
        ev(d + 3_000_000, EventKind::LocalTimer),
    ];
    let tl = Timeline::new(events);
    let w = late(d, d + 2_006_000);
    let vm = Machine {
        on_vm: true,
        preempt_model: "full".into(),
        virtualization: Some("kvm".into()),
        idle_exit_max_ns: None,
    };
    assert_eq!(attribute(&tl, &w, &vm).category, Category::Vm);
    assert_eq!(
        attribute(&tl, &w, &bare_metal()).category,
        Category::IdleExit
    );
}

#[test]
fn an_overrunning_thread_with_page_faults_is_itself() {
    let d = 2_000_000;
    let mut events = vec![switch(1_000_000, 0, "swapper/1", 120, TID, 120)];
    for k in 0..50 {
        let mut f = ev(1_100_000 + k * 30_000, EventKind::PageFault);
        f.pid = TID;
        events.push(f);
    }
    events.push(switch(d + 600_000, TID, "measured", 120, 0, 120));
    events.push(ev(d + 700_000, EventKind::LocalTimer));
    let tl = Timeline::new(events);
    let c = attribute(&tl, &late(d, d + 500_000), &bare_metal());
    assert_eq!(c.category, Category::SelfThread);
    assert_eq!(c.name, "page faults");
    assert!(c.detail.contains("page faults"), "{}", c.detail);
}

#[test]
fn a_wake_up_outside_the_trace_is_unknown_never_hidden() {
    let tl = Timeline::new(vec![switch(10_000, TID, "measured", 19, 0, 120)]);
    let c = attribute(&tl, &late(1_000_000, 1_500_000), &bare_metal());
    assert_eq!(c.category, Category::Unknown);
    assert!(c.detail.contains("does not cover"), "{}", c.detail);
}

/// The VM scenario of the test above: the timer interrupt comes 2 ms late
/// with no event in the guest on CPU 1 between deadline and wake-up.
pub(crate) fn a_silent_gap(d: u64) -> (Vec<Event>, Wakeup) {
    let events = vec![
        switch(10_000, TID, "measured", 19, 0, 120),
        ev(d + 2_000_100, EventKind::LocalTimer),
        ev(d + 2_002_000, EventKind::LocalTimerExit),
        switch(d + 2_005_000, 0, "swapper/1", 120, TID, 19),
        ev(d + 3_000_000, EventKind::LocalTimer),
    ];
    (events, late(d, d + 2_006_000))
}

fn a_loss(cpu: u16, from_ns: u64, to_ns: u64, events: u64) -> firmtime_trace::loss::Loss {
    firmtime_trace::loss::Loss {
        cpu,
        from_ns,
        to_ns,
        events,
        counted: true,
    }
}

#[test]
fn a_wake_up_whose_span_lost_events_is_unknown_never_the_vm() {
    // Issue 29: a hole in the trace looks exactly like "no event in the
    // guest", and was blamed on the VM. With the kernel's loss located in
    // the span, the cause is unknown and says how many events were lost.
    let d = 5_000_000;
    let vm = Machine {
        on_vm: true,
        preempt_model: "full".into(),
        virtualization: Some("kvm".into()),
        idle_exit_max_ns: None,
    };
    let (events, w) = a_silent_gap(d);
    let tl = Timeline::new(events.clone()).with_losses(vec![a_loss(
        1,
        d + 500_000,
        d + 1_900_000,
        4242,
    )]);
    let c = attribute(&tl, &w, &vm);
    assert_eq!(c.category, Category::Unknown, "{c:?}");
    assert_eq!(c.name, firmtime_trace::explain::attribute::TRACE_LOST);
    assert_eq!(c.lost_events, Some(4242));
    assert!(
        c.detail.contains("lost 4242 events on CPU 1"),
        "{}",
        c.detail
    );
    assert!(!c.detail.contains("VM"), "{}", c.detail);
    assert_eq!(
        explain::cause_words(c.category, &c.name),
        "unknown (trace lost events)"
    );
    // A hole before the switch the attribution starts from (and before
    // the period whose page faults it counts), after the wake-up, or on
    // the other CPU leaves the span complete: attributed.
    for other in [
        a_loss(1, 1_000, 9_000, 10),
        a_loss(1, d + 2_007_000, d + 2_500_000, 10),
        a_loss(0, d, d + 2_000_000, 10),
    ] {
        let tl = Timeline::new(events.clone()).with_losses(vec![other]);
        let c = attribute(&tl, &w, &vm);
        assert_eq!(c.category, Category::Vm, "{other:?}: {c:?}");
        assert_eq!(c.lost_events, None);
    }
    // A loss whose count the page did not hold still refuses.
    let tl = Timeline::new(events).with_losses(vec![a_loss(1, d, d + 1_000, 0)]);
    let c = attribute(&tl, &w, &vm);
    assert_eq!((c.category, c.lost_events), (Category::Unknown, Some(0)));
    assert!(c.detail.contains("count not recorded"), "{}", c.detail);
    // A count shared out from the CPU's stats is said to be an estimate.
    let mut shared = a_loss(1, d, d + 1_000, 7);
    shared.counted = false;
    let tl = Timeline::new(a_silent_gap(d).0).with_losses(vec![shared]);
    let c = attribute(&tl, &w, &vm);
    assert!(c.detail.contains("lost about 7 events"), "{}", c.detail);
}

#[test]
fn an_explanation_with_lost_events_counts_its_unknowns_and_never_claims_all_explained() {
    // Two wake-ups on CPU 1, one whose span lost events: 1 of 2 explained,
    // the summary and coverage lines say why the other is not.
    let d1 = 1_000_000;
    let d2 = 10_000_000;
    let (mut events, _) = a_silent_gap(d1);
    let (more, _) = a_silent_gap(d2);
    events.extend(more);
    let window = explain::Window::span(1, 0, 20_000_000);
    let rec = explain::Recorded {
        capture: firmtime_trace::tracefs::Capture {
            events,
            ..Default::default()
        },
        windows: vec![window],
        evicted: Vec::new(),
        flags_lost: 0,
        events_enabled: vec![EventKind::Switch, EventKind::LocalTimer],
        lost: 300,
        instance_removed: true,
        steal_ns: Vec::new(),
        drainer_held_ns: 0,
        losses: vec![a_loss(1, d2 + 100_000, d2 + 200_000, 300)],
        capture_setup: explain::CaptureSetup::default(),
        names: Default::default(),
        lease: None,
    };
    let note = |index: u64, deadline_ns: u64| explain::Note {
        index,
        deadline_ns,
        wake_ns: deadline_ns + 2_006_000,
        latency_ns: 2_006_000,
        missed: 1,
        cpu: 1,
    };
    let target = explain::Target {
        thread: 0,
        cpu: 1,
        tid: TID,
        period_ns: 1_000_000,
        slack_ns: 0,
        threshold_ns: 0,
        notes: vec![note(1, d1), note(10, d2)],
        missing_not_kept: 0,
        missed: 2,
    };
    let vm = Machine {
        on_vm: true,
        preempt_model: "full".into(),
        virtualization: Some("kvm".into()),
        idle_exit_max_ns: None,
    };
    let e = explain::explain(rec, &[target], &vm);
    assert_eq!((e.missed, e.missed_explained), (2, 1));
    assert_eq!((e.worst, e.worst_explained), (2, 1));
    assert_eq!(e.unknown_lost, 1);
    let lost = e.outliers.iter().find(|o| o.index == 10).unwrap();
    assert_eq!(lost.cause.lost_events, Some(300));
    assert_eq!(
        e.traced(10).map(|t| t.words),
        Some("unknown (trace lost 300 events)".to_string())
    );
    assert_eq!(e.traced(1).map(|t| t.category), Some("vm".to_string()));
    assert!(
        e.coverage() == "1 of 2 deadline misses and 1 of the 2 worst wake-ups have a cause",
        "{}",
        e.coverage()
    );
    assert!(
        e.summary().contains("unknown (trace lost events)"),
        "{}",
        e.summary()
    );
    assert!(
        e.summary().ends_with(
            "; 1 of 2 outliers unknown because the trace lost events in their spans (300 events \
             lost in all)"
        ),
        "{}",
        e.summary()
    );
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["unknown_lost"], 1);
    assert_eq!(json["losses"][0]["events"], 300);
    for o in json["outliers"].as_array().unwrap() {
        let want = if o["index"] == 10 {
            serde_json::json!(300)
        } else {
            serde_json::Value::Null
        };
        assert_eq!(o["cause"]["lost_events"], want, "{o}");
    }
}

#[test]
fn each_category_key_is_its_json_name_and_names_it_back() {
    for c in Category::ALL {
        assert_eq!(serde_json::to_value(c).unwrap(), c.key(), "{c:?}");
        assert_eq!(Category::from_key(c.key()), Some(c));
    }
}

fn tick(index: u64, latency_ns: i64, missed: u64) -> Tick {
    Tick {
        index,
        deadline_ns: index * 1_000_000,
        wake_ns: (index * 1_000_000).saturating_add_signed(latency_ns),
        latency_ns,
        missed,
    }
}

#[test]
fn notes_keep_the_worst_without_allocating() {
    let mut n = Notes::new(4);
    let lat = [5, 90, 3, 70, 1, 200, 60, 80, 2_000_000, 4];
    assert_no_alloc::assert_no_alloc(|| {
        for (i, &l) in lat.iter().enumerate() {
            n.offer(&tick(i as u64, l, u64::from(l > 1_000_000) * 2));
        }
    });
    let kept: Vec<i64> = n.sorted().iter().map(|x| x.latency_ns).collect();
    assert_eq!(kept, vec![2_000_000, 200, 90, 80]);
    assert_eq!(n.missing_not_kept(), 0);
    assert!(!Notes::default().enabled());

    // Flagging only the top so far, the missed and those above a threshold
    // allocates nothing either (the top-K and the flag ring are made before).
    let flags = std::sync::Arc::new(explain::Flags::new(64));
    let mut f = Notes::flagging(8, std::sync::Arc::clone(&flags), 1, 2_000_000)
        .flag_only(3, Some(1_500_000));
    assert_no_alloc::assert_no_alloc(|| {
        for (i, &l) in lat.iter().enumerate() {
            f.offer(&tick(i as u64, l, u64::from(l > 1_000_000) * 2));
        }
    });
    let mut next = 0;
    let mut flagged = Vec::new();
    flags.read(&mut next, &mut |w| flagged.push(w.latency_ns));
    // 5, 90, 3 fill the top-3; 70, 200 and 80 enter it; 2,000,000 enters
    // it, missed and is above the threshold; 1, 60 and 4 are noted, not
    // flagged.
    assert_eq!(flagged, [5, 90, 3, 70, 200, 80, 2_000_000]);
    assert_eq!(f.unflagged(), 3);

    // Announcing the next deadline to the drainer is one store, no allocation.
    assert_eq!(
        flags.next_due(),
        None,
        "a lane taken but no deadline announced"
    );
    assert_no_alloc::assert_no_alloc(|| f.sleeping_until(7_000));
    assert_eq!(flags.next_due(), Some(7_000));
}

#[test]
fn drainer_waits_for_the_earliest_deadline_announced_until_its_thread_is_done() {
    let flags = std::sync::Arc::new(explain::Flags::new(8));
    let a = Notes::flagging(4, std::sync::Arc::clone(&flags), 0, 1_000_000);
    let b = Notes::flagging(4, std::sync::Arc::clone(&flags), 1, 1_000_000);
    // Notes without flags announce nothing (and cannot fail).
    Notes::new(4).sleeping_until(1);
    assert_eq!(flags.next_due(), None);
    a.sleeping_until(5_000);
    b.sleeping_until(3_000);
    assert_eq!(
        flags.next_due(),
        Some(3_000),
        "the earliest of both threads"
    );
    b.sleeping_until(9_000);
    assert_eq!(
        flags.next_due(),
        Some(5_000),
        "b woke and announced its next"
    );
    a.done();
    assert_eq!(
        flags.next_due(),
        Some(9_000),
        "a finished: only b is waited for"
    );
    b.done();
    assert_eq!(flags.next_due(), None);
    // Lanes run out after explain::LANES threads: the rest are not waited for.
    let more: Vec<Notes> = (0..explain::LANES)
        .map(|i| Notes::flagging(1, std::sync::Arc::clone(&flags), i, 1_000_000))
        .collect();
    for (i, n) in more.iter().enumerate() {
        n.sleeping_until(100_000 + i as u64);
    }
    // The first LANES − 2 got a lane (a and b hold two), the last two did not.
    assert_eq!(flags.next_due(), Some(100_000));
    for n in &more[..explain::LANES - 2] {
        n.done();
    }
    assert_eq!(
        flags.next_due(),
        None,
        "threads without a lane are not waited for"
    );
}

// ---- induced causes, on this machine ----

#[test]
fn the_explaining_instance_records_only_the_measured_cpus_and_filtered_faults() {
    // Issue 29: the instance's tracing_cpumask and event filters are in
    // effect in the kernel (read back), and a CPU not measured writes no
    // event while busy.
    if !usable() {
        return;
    }
    let cpus = sched::online_cpus();
    if cpus.len() < 2 {
        firmtime_rt::testing::skip("a CPU left out of the mask needs two CPUs");
        return;
    }
    let (measured, other) = (cpus[cpus.len() - 1], cpus[0]);
    let inst = explain::instance_on(
        1024,
        "ft-no-such*",
        explain::WokenBy::OwnTimer,
        Some(&[measured]),
    )
    .expect("instance");
    assert_eq!(inst.cpumask().expect("cpumask"), vec![measured]);
    if inst.events.contains(&EventKind::PageFault) {
        let f = inst.filter("exceptions/page_fault_user").expect("filter");
        assert!(f.contains("comm") && f.contains("ft-no-such"), "{f}");
    }
    assert_eq!(inst.filter("sched/sched_switch").expect("filter"), "none");
    inst.set_on(true).expect("on");
    // Switches and page faults on both CPUs for 200 ms.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for cpu in [measured, other] {
            let stop = &stop;
            s.spawn(move || {
                let _ = sched::set_affinity(&[cpu]);
                while !stop.load(Ordering::Relaxed) {
                    let v = vec![1u8; 1 << 20];
                    std::hint::black_box(&v);
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
    });
    inst.set_on(false).expect("off");
    let done = AtomicBool::new(true);
    let cap =
        firmtime_trace::tracefs::drain(&inst, &cpus, 1_000_000, Duration::from_millis(1), &done)
            .expect("drain");
    let on = |c: usize| {
        cap.events
            .iter()
            .filter(|e| usize::from(e.cpu) == c)
            .count()
    };
    assert!(on(measured) > 0, "no event on the measured CPU {measured}");
    assert_eq!(on(other), 0, "events of CPU {other}, outside the mask");
    // The filter holds: no page fault of a thread not named ft-no-such*.
    assert_eq!(
        cap.events
            .iter()
            .filter(|e| e.kind == EventKind::PageFault)
            .count(),
        0
    );
    assert!(inst.remove());
}

#[test]
fn a_buffer_that_overflows_locates_its_lost_events_and_counts_them_once() {
    // A 64 KiB buffer drained every 500 ms while two threads yield to each
    // other on one CPU: the kernel overwrites pages. Each loss is located
    // on that CPU (the page flags), and the losses add up to `lost` (the
    // page counts and `stats` count the same events: not added).
    if !usable() {
        return;
    }
    let measured = victim_cpu();
    let cfg = explain::Config {
        buffer_kb: 64,
        drain_interval_ns: 500_000_000,
        drain_interval_max_ns: 500_000_000,
        cpus: Some(vec![measured]),
        woken_by: explain::WokenBy::OwnTimer,
        ..explain::Config::default()
    };
    let (rec, t0, t1) = firmtime_rt::testing::until_checked(3, |_| {
        let session = explain::Session::start(&cfg, "ft-nothing*").expect("session");
        let t0 = monotonic_ns();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                let stop = &stop;
                s.spawn(move || {
                    let _ = sched::set_affinity(&[measured]);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(1200));
            stop.store(true, Ordering::Relaxed);
        });
        let rec = session.finish().expect("finish");
        if rec.lost == 0 {
            return firmtime_rt::testing::Attempt::Waived(
                "the kernel lost no event: nothing to locate".into(),
            );
        }
        firmtime_rt::testing::Attempt::Checked((rec, t0, monotonic_ns()))
    });
    assert!(
        !rec.losses.is_empty(),
        "lost {} but no loss located",
        rec.lost
    );
    assert!(
        rec.losses.iter().all(|l| usize::from(l.cpu) == measured),
        "{:?}",
        rec.losses
    );
    assert_eq!(
        rec.losses.iter().map(|l| l.events).sum::<u64>(),
        rec.lost,
        "{:?}",
        rec.losses
    );
    let located: Vec<_> = rec.losses.iter().filter(|l| l.to_ns != u64::MAX).collect();
    assert!(!located.is_empty(), "{:?}", rec.losses);
    for l in located {
        assert!(
            l.from_ns <= l.to_ns && l.to_ns >= t0 && l.to_ns <= t1,
            "{l:?} outside {t0}..{t1}"
        );
    }
}

#[test]
fn a_session_masks_its_cpus_sizes_its_buffer_from_the_rate_and_follows_thread_ids() {
    if !usable() {
        return;
    }
    let measured = victim_cpu();
    let cfg = explain::Config {
        cpus: Some(vec![measured]),
        size_from_rate: true,
        woken_by: explain::WokenBy::OwnTimer,
        ..explain::Config::default()
    };
    let session = explain::Session::start(&cfg, "ft-follow*").expect("session");
    let me = sched::current_tid();
    session.follow(&[me, me + 1]).expect("follow");
    let rec = session.finish().expect("finish");
    let c = &rec.capture_setup;
    assert_eq!(c.cpus, vec![measured]);
    assert!(c.filtered);
    assert_eq!(
        c.buffer_kb,
        firmtime_trace::tracefs::buffer_kb_for_rate(c.rate_bytes_per_s, cfg.buffer_kb),
        "{c:?}"
    );
    if rec.events_enabled.contains(&EventKind::PageFault) {
        let want = format!(
            "exceptions/page_fault_user: common_pid == {me} || common_pid == {}",
            me + 1
        );
        assert!(c.filters.contains(&want), "{:?}", c.filters);
    }
    assert!(rec.instance_removed);
}

#[test]
fn sessions_started_one_per_interval_reuse_one_storage_from_their_pool() {
    // Issue 29 item 5: `watch` started a fresh session per interval, each
    // drainer allocating ~38 MiB anew. From a pool, the second session
    // takes the first one's buffers (the pool is empty while it runs) and
    // gives back as many bytes, no more.
    if !usable() {
        return;
    }
    let cfg = explain::Config {
        max_events: 200_000,
        buffer_kb: 1024,
        woken_by: explain::WokenBy::OwnTimer,
        ..explain::Config::default()
    };
    let pool = explain::Pool::new();
    let interval = |pool: &explain::Pool| {
        let session = explain::Session::start_pooled(&cfg, "ft-pooled*", pool).expect("session");
        let during = pool.spare();
        let rec = session.finish().expect("finish");
        assert!(rec.lease.is_some());
        let _ = explain::explain(rec, &[], &explain::this_machine());
        during
    };
    assert_eq!(interval(&pool), 0);
    assert_eq!(pool.spare(), 1, "the first session's buffers came back");
    let bytes = pool.spare_bytes();
    assert!(
        bytes > 20 << 20,
        "{bytes} bytes: the pending queues are pooled"
    );
    assert_eq!(
        interval(&pool),
        0,
        "the second session took the pooled buffers"
    );
    assert_eq!(pool.spare(), 1);
    assert_eq!(
        pool.spare_bytes(),
        bytes,
        "the second session allocated more"
    );
    // A session dropped unfinished gives its buffers back too.
    let s = explain::Session::start_pooled(&cfg, "ft-pooled*", &pool).expect("session");
    assert_eq!(pool.spare(), 0);
    drop(s);
    assert_eq!(pool.spare(), 1);
    assert_eq!(pool.spare_bytes(), bytes);
}

pub(crate) fn usable() -> bool {
    match explain::available() {
        Ok(()) => true,
        Err(why) => {
            firmtime_rt::testing::skip(why);
            false
        }
    }
}

/// The CPU to disturb: the last online one (CPU 1 here).
pub(crate) fn victim_cpu() -> usize {
    *sched::online_cpus().last().unwrap_or(&0)
}

/// Outliers above `floor_ns`, excluding those the VM's own steal caused
/// (this machine is a VM shared with other builds: its spikes are real
/// outliers, but not the induced ones).
fn induced(outliers: &[Outlier], floor_ns: i64) -> Vec<&Outlier> {
    outliers
        .iter()
        .filter(|o| o.latency_ns >= floor_ns && o.cause.category != Category::Vm)
        .collect()
}

/// Every outlier's breakdown adds up to its lateness, exactly (issue 29).
fn parts_add_up(outliers: &[Outlier]) {
    for o in outliers {
        assert_eq!(
            explain::breakdown::sum_ns(&o.cause.breakdown),
            o.latency_ns.max(0) as u64,
            "{:#?}",
            o.cause
        );
    }
}

fn show(v: &[&Outlier]) -> String {
    v.iter()
        .map(|o| {
            format!(
                "{} µs {} {}: {}",
                o.latency_ns / 1000,
                o.cause.category.name(),
                o.cause.name,
                o.cause.detail
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn cyclic_on(cpu: usize, above_ns: u64, duration_ns: u64) -> Config {
    Config {
        interval_ns: 1_000_000,
        duration_ns,
        policy: Policy::Fifo { priority: 80 },
        cpus: Some(vec![cpu]),
        mlock: true,
        explain: Some(explain::Config {
            above_ns: Some(above_ns),
            max_events: 1_000_000,
            ..explain::Config::default()
        }),
        ..Config::default()
    }
}

#[test]
fn induced_a_fifo_hog_at_a_higher_priority_is_named() {
    let _g = INDUCED.lock().unwrap_or_else(|e| e.into_inner());
    if !usable() {
        return;
    }
    let cpu = victim_cpu();
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("ft-hog".into())
            .spawn_scoped(s, || {
                // Bursts of 3 ms every 25 ms, at a higher priority than the thread.
                fifo_hog(cpu, 3_000_000, Duration::from_millis(22), &stop);
            })
            .expect("start the hog");
        let r = cyclic::run(&cyclic_on(cpu, 1_000_000, 2_000_000_000), &mut Silent);
        stop.store(true, Ordering::Relaxed);
        r
    })
    .expect("cyclic run");
    let e = result.explain.expect("explained");
    let v = induced(&e.outliers, 1_000_000);
    assert!(v.len() >= 5, "the hog made few outliers:\n{}", show(&v));
    let named = v
        .iter()
        .filter(|o| o.cause.category == Category::Task && o.cause.name == "ft-hog")
        .count();
    // Most, judged with the sample's size: a plain 80 % of as few as 5
    // outliers failed by chance (3 of 5 from a hog named 90 % of the time:
    // 8 % of runs); the Wilson bound fails 0 or 1 of 5, or 4 of 10.
    firmtime_rt::testing::assert_rate_at_least(
        named as u64,
        v.len() as u64,
        0.8,
        format_args!("outliers naming the hog:\n{}", show(&v)),
    );
    // Each outlier put on the hog says why it could run: its priority. (The
    // worst outlier need not be the hog's: on a non-preemptible kernel in a
    // VM another task can hold the CPU longer than a 3 ms burst.)
    assert!(
        v.iter()
            .filter(|o| o.cause.name == "ft-hog")
            .all(|o| o.cause.detail.contains("at a higher priority")),
        "{}",
        show(&v)
    );
}

/// `n` UDP sockets bound to one port on all addresses (SO_REUSEADDR): a
/// broadcast to that port is delivered to each. Returns the port and fds.
pub(crate) fn broadcast_receivers(n: usize) -> (u16, Vec<i32>) {
    let mut port = 0u16;
    let mut fds = Vec::new();
    for _ in 0..n {
        // SAFETY: plain socket calls on a fresh fd with valid, sized arguments.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            assert!(fd >= 0, "socket");
            let one: libc::c_int = 1;
            let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&one as *const libc::c_int).cast(),
                len,
            );
            let mut a: libc::sockaddr_in = std::mem::zeroed();
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = port.to_be();
            let alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(
                libc::bind(fd, (&a as *const libc::sockaddr_in).cast(), alen),
                0,
                "bind"
            );
            if port == 0 {
                let mut b: libc::sockaddr_in = std::mem::zeroed();
                let mut blen = alen;
                libc::getsockname(fd, (&mut b as *mut libc::sockaddr_in).cast(), &mut blen);
                port = u16::from_be(b.sin_port);
            }
            fds.push(fd);
        }
    }
    (port, fds)
}

/// Runs on the calling thread, pinned to `cpu` at SCHED_FIFO 90, bursts
/// of `burst_ns` spinning with `pause` between them, until `stop`.
pub(crate) fn fifo_hog(cpu: usize, burst_ns: u64, pause: Duration, stop: &AtomicBool) {
    sched::set_affinity(&[cpu]).expect("pin the hog");
    sched::set_current_thread(&Policy::Fifo { priority: 90 }).expect("FIFO 90");
    while !stop.load(Ordering::Relaxed) {
        let until = monotonic_ns() + burst_ns;
        while monotonic_ns() < until {
            std::hint::spin_loop();
        }
        std::thread::sleep(pause);
    }
}

/// A private anonymous mapping whose pages fault on every touch after
/// [`Faulting::fault_all`] gives them back (memory not locked).
pub(crate) struct Faulting {
    p: *mut libc::c_void,
    len: usize,
}

impl Faulting {
    pub(crate) fn new(len: usize) -> Faulting {
        // SAFETY: a fresh private anonymous mapping, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Faulting { p, len }
    }

    /// Gives the pages back, then touches them all again: every touch is a
    /// page fault.
    pub(crate) fn fault_all(&mut self) {
        self.give_back();
        self.touch_all_then(|| {});
    }

    /// Gives the pages back (the next touch of each is a page fault).
    pub(crate) fn give_back(&mut self) {
        self.give_back_then(self.len, || {});
    }

    /// Gives the pages back `chunk` bytes at a time, calling `each` after
    /// each chunk.
    pub(crate) fn give_back_then(&mut self, chunk: usize, mut each: impl FnMut()) {
        for off in (0..self.len).step_by(chunk) {
            let n = chunk.min(self.len - off);
            // SAFETY: off..off+n lies in the mapping made in new().
            unsafe { libc::madvise((self.p as *mut u8).add(off).cast(), n, libc::MADV_DONTNEED) };
            each();
        }
    }

    /// Touches every page, calling `each` after each one.
    pub(crate) fn touch_all_then(&mut self, mut each: impl FnMut()) {
        for off in (0..self.len).step_by(4096) {
            // SAFETY: off < len, inside the writable mapping.
            unsafe { std::ptr::write_volatile((self.p as *mut u8).add(off), 1) };
            each();
        }
    }
}

impl Drop for Faulting {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in new(), once.
        unsafe { libc::munmap(self.p, self.len) };
    }
}

/// Restores a sysfs value when dropped.
pub(crate) struct Restore(pub(crate) std::path::PathBuf, pub(crate) String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

#[test]
fn induced_a_udp_flood_is_named_as_net_rx_softirq() {
    let _g = INDUCED.lock().unwrap_or_else(|e| e.into_inner());
    if !usable() {
        return;
    }
    let cpus = sched::online_cpus();
    let (Some(&sender), Some(&cpu)) = (cpus.first(), cpus.last()) else {
        return;
    };
    if sender == cpu {
        firmtime_rt::testing::skip("a UDP flood steered to another CPU needs two CPUs");
        return;
    }
    // Loopback packets are received on the sending CPU unless RPS steers
    // them: for the test, lo's receive processing (NET_RX softirq) goes to
    // the measured CPU; the old setting is restored on any exit.
    let rps = std::path::PathBuf::from("/sys/class/net/lo/queues/rx-0/rps_cpus");
    let Ok(old) = std::fs::read_to_string(&rps) else {
        firmtime_rt::testing::skip(format!("no RPS on lo ({})", rps.display()));
        return;
    };
    let _restore = Restore(rps.clone(), old.trim().to_string());
    if std::fs::write(&rps, format!("{:x}", 1u64 << cpu)).is_err() {
        firmtime_rt::testing::skip(format!("cannot steer lo's packets to CPU {cpu}"));
        return;
    }
    // Broadcast to 64 sockets sharing one port: the NET_RX softirq
    // delivers each packet 64 times, so its runs are long.
    let (port, socks) = broadcast_receivers(64);
    let to = std::net::SocketAddr::from(([127, 255, 255, 255], port));
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let _ = sched::set_affinity(&[sender]);
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
                tx.set_broadcast(true).expect("broadcast");
                let buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    let _ = tx.send_to(&buf, to);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        let r = cyclic::run(&cyclic_on(cpu, 100_000, 2_000_000_000), &mut Silent);
        stop.store(true, Ordering::Relaxed);
        r
    })
    .expect("cyclic run");
    for fd in socks {
        // SAFETY: fd is a socket opened by broadcast_receivers, closed once.
        unsafe { libc::close(fd) };
    }
    let e = result.explain.expect("explained");
    parts_add_up(&e.outliers);
    let v = induced(&e.outliers, 100_000);
    let net = v
        .iter()
        .filter(|o| o.cause.category == Category::Softirq && o.cause.name == "NET_RX")
        .count();
    eprintln!("UDP flood: {}", e.summary());
    // Most, not all: the other tasks sharing this CPU (a shared VM under
    // parallel builds) make their own outliers in the same run.
    // At least 3, and 60 % judged with the sample's size (Wilson bound:
    // 3 of 5 passes, 3 of 15 or 5 of 20 fails).
    assert!(
        net >= 3,
        "{net} of {} named the NET_RX softirq:\n{}",
        v.len(),
        show(&v)
    );
    firmtime_rt::testing::assert_rate_at_least(
        net as u64,
        v.len() as u64,
        0.6,
        format_args!("outliers naming the NET_RX softirq:\n{}", show(&v)),
    );
}

#[test]
fn induced_page_faults_without_mlock_are_the_thread_itself() {
    let _g = INDUCED.lock().unwrap_or_else(|e| e.into_inner());
    if !usable() {
        return;
    }
    let cpu = victim_cpu();
    let cfg = explain::Config {
        above_ns: Some(500_000),
        max_events: 1_000_000,
        ..explain::Config::default()
    };
    let session = explain::Session::start(&cfg, "ft-faulter*").expect("trace");
    let flags = session.flags();
    let (tid, notes) = std::thread::Builder::new()
        .name("ft-faulter".into())
        .spawn(move || {
            sched::set_affinity(&[cpu]).expect("pin");
            // Real-time, so the tasks of tests running beside it do not
            // preempt it: its own page faults are what makes it late.
            sched::set_current_thread(&Policy::Fifo { priority: 70 }).expect("FIFO 70");
            let _ = firmtime_rt::memory::unlock_all();
            let mut notes = Notes::flagging(256, flags, cpu, explain::lookback_ns(1_000_000));
            let mut pages = Faulting::new(8 << 20);
            let mut sleeper =
                firmtime_rt::sleep::open(firmtime_rt::sleep::Mechanism::ClockNanosleep)
                    .expect("sleeper");
            let mut periodic =
                Periodic::try_new(monotonic_ns() + 1_000_000, 1_000_000).expect("periodic");
            for _ in 0..300 {
                let Ok(t) = periodic.wait(&mut *sleeper) else {
                    break;
                };
                notes.offer(&t);
                pages.fault_all();
            }
            (sched::current_tid(), notes)
        })
        .expect("start")
        .join()
        .expect("faulter");
    let rec = session.finish().expect("finish");
    let target = explain::Target {
        thread: 0,
        cpu,
        tid,
        period_ns: 1_000_000,
        slack_ns: sched::timer_slack().unwrap_or(50_000),
        threshold_ns: 500_000,
        notes: notes.sorted(),
        missing_not_kept: notes.missing_not_kept(),
        missed: 0,
    };
    let e = explain::explain(rec, &[target], &explain::this_machine());
    parts_add_up(&e.outliers);
    let v = induced(&e.outliers, 500_000);
    eprintln!(
        "page faults: {} ({} trace events lost)",
        e.summary(),
        e.lost
    );
    assert!(v.len() >= 5, "few outliers:\n{}", show(&v));
    // Faulting 8 MB in takes longer than the 1 ms period (3–4 ms here), so
    // every late wake-up comes while the thread is still in its previous
    // cycle: the cause is the thread itself. Its label depends on the
    // trace, not on the product: "page faults" when the window's faults were
    // recorded, "still running" when the kernel dropped them (a loaded
    // machine: with four CPU hogs beside this test the kernel lost 250,000
    // to 450,000 events and 44 to 80 of 256 outliers were "still running";
    // idle, none lost and all 255 "page faults"). So the claim checked every
    // time is the category, and the label when the trace lost nothing.
    let own: Vec<&&Outlier> = v
        .iter()
        .filter(|o| o.cause.category == Category::SelfThread)
        .collect();
    // "Most": other tasks on this shared VM still get a few (2 of 256 under
    // four hogs). 80 % judged with the sample's size (Wilson bound,
    // firmtime_rt::testing::assert_rate_at_least): at least 5 outliers,
    // and 0 or 1 of 5 fails.
    firmtime_rt::testing::assert_rate_at_least(
        own.len() as u64,
        v.len() as u64,
        0.8,
        format_args!("outliers put on the thread itself:\n{}", show(&v)),
    );
    if e.lost == 0 && e.dropped == 0 && e.windows_evicted == 0 {
        // Every window kept whole: each of the thread's late wake-ups has
        // its cycle's faults in it (the cycle began after the previous
        // deadline, at most a period before this one).
        let unnamed: Vec<&&&Outlier> = own
            .iter()
            .filter(|o| o.cause.name != "page faults")
            .collect();
        assert!(
            unnamed.is_empty(),
            "{} of {} of the thread's own outliers do not name its page faults:\n{}",
            unnamed.len(),
            own.len(),
            show(&v)
        );
    } else {
        firmtime_rt::testing::waive(format!(
            "the label \"page faults\" not checked: the kernel lost {} trace events, \
             {} events and {} windows dropped for want of room (the category was checked)",
            e.lost, e.dropped, e.windows_evicted
        ));
    }
}

#[test]
fn flagged_windows_keep_their_events_and_let_the_rest_go() {
    use explain::{Flags, Keeper};
    let flags = Flags::new(4);
    let mut k = Keeper::new(100, 100, 1_000_000);
    let at = |t: u64, cpu: u16| Event {
        cpu,
        ..ev(t, EventKind::LocalTimer)
    };
    // Events 0..10 ms on CPUs 0 and 1; a window on CPU 1 flagged late.
    for i in 0..10 {
        k.take(at(i * 1_000_000, 0), &flags);
        k.take(at(i * 1_000_000 + 1, 1), &flags);
        k.settle(&flags, false);
        if i == 6 {
            flags.push(explain::Window::span(1, 4_500_000, 6_500_000));
        }
    }
    k.settle(&flags, true);
    let kept: Vec<(u16, u64)> = k.store.iter().map(|e| (e.cpu, e.time_ns)).collect();
    // Only CPU 1's events inside the window survive: the older ones were
    // let go before the flag came (beyond the 1 ms horizon), none of CPU 0.
    assert!(
        kept.iter()
            .all(|&(c, t)| c == 1 && (4_500_000..=6_500_000).contains(&t)),
        "{kept:?}"
    );
    assert!(kept.contains(&(1, 6_000_001)), "{kept:?}");
    assert_eq!(k.windows.len(), 1);
    assert_eq!(k.flags_lost, 0);
}

/// Undecided events pushed out of a full pending queue were let go
/// uncounted: a window later flagged over them was explained from what was
/// left. They are a hole in that CPU's trace now, given as a loss.
#[test]
fn events_pushed_out_of_a_full_pending_queue_are_a_counted_hole_in_that_cpus_trace() {
    use explain::{Flags, Keeper};
    let flags = Flags::new(4);
    // 4 undecided events per CPU, held 1 s: nothing can be let go as old.
    let mut k = Keeper::new(4, 100, 1_000_000_000);
    let at = |t: u64, cpu: u16| Event {
        cpu,
        ..ev(t, EventKind::LocalTimer)
    };
    for i in 0..10u64 {
        k.take(at(1_000 + i * 100, 1), &flags);
    }
    k.take(at(5_000, 0), &flags);
    assert_eq!(k.overflowed(), 6, "10 events into a queue of 4");
    let losses = k.overflow_losses();
    assert_eq!(losses.len(), 1, "{losses:?}");
    let l = losses[0];
    assert_eq!((l.cpu, l.from_ns, l.to_ns, l.events), (1, 1_000, 1_500, 6));
    assert!(l.counted);
    // A wake-up whose window covers the hole is not explained from the rest.
    assert_eq!(
        firmtime_trace::loss::lost_in(&losses, 1, 1_200, 1_300),
        (6, 1)
    );
    assert_eq!(
        firmtime_trace::loss::lost_in(&losses, 1, 1_600, 2_000),
        (0, 0)
    );
    assert_eq!(
        firmtime_trace::loss::lost_in(&losses, 0, 1_000, 2_000),
        (0, 0)
    );
}

/// A window flagged for a wake-up at `wake` due at `deadline` on CPU 1,
/// with a lookback of 2 ms.
fn flagged(deadline: u64, wake: u64) -> explain::Window {
    explain::Window {
        cpu: 1,
        start_ns: deadline - 2_000_000,
        end_ns: wake + 50_000,
        deadline_ns: deadline,
        latency_ns: (wake - deadline) as i64,
    }
}

#[test]
fn a_window_is_kept_from_the_last_switch_before_its_deadline_and_faults_from_its_lookback() {
    use explain::{Flags, Keeper};
    let flags = Flags::new(8);
    let mut k = Keeper::new(1000, 1000, 100_000_000);
    // CPU 1: a timer interrupt every 100 µs, switches at 7.2 and 9.5 ms,
    // the measured thread's page fault at 8.0 ms; deadline 10 ms, woke 10.4 ms.
    // Taken in time order, as a CPU's ring buffer gives them.
    let mut events: Vec<Event> = (50..=120u64)
        .map(|i| ev(i * 100_000, EventKind::LocalTimer))
        .collect();
    events.push(switch(7_200_000, 7, "a", 120, 8, 120));
    events.push(switch(9_500_000, 8, "b", 120, 9, 120));
    events.push(on(TID, ev(8_000_000, EventKind::PageFault)));
    events.sort_by_key(|e| e.time_ns);
    for e in events {
        k.take(e, &flags);
    }
    flags.push(flagged(10_000_000, 10_400_000));
    k.settle(&flags, true);
    let mut kept: Vec<(u64, EventKind)> = k.store.iter().map(|e| (e.time_ns, e.kind)).collect();
    kept.sort_by_key(|k| k.0);
    assert_eq!(kept[0], (8_000_000, EventKind::PageFault), "{kept:?}");
    assert_eq!(kept[1], (9_500_000, EventKind::LocalTimer), "{kept:?}");
    assert_eq!(kept[2], (9_500_000, EventKind::Switch), "{kept:?}");
    // 9.5 .. 10.45 ms: 10 timer events, the switch and the fault.
    assert_eq!(kept.len(), 12, "{kept:?}");
    assert_eq!((k.dropped, k.windows_evicted), (0, 0));
}

#[test]
fn a_full_store_drops_the_least_late_window_whole_never_a_later_one() {
    use explain::{Flags, Keeper};
    let flags = Flags::new(8);
    let mut k = Keeper::new(10_000, 25, 1_000_000_000);
    // Three windows on CPU 1, 10 events each (a switch at each deadline,
    // then a timer every 100 µs), latencies 0.9, 0.3 and 0.6 ms; room for 25.
    for (n, (d, late)) in [
        (10_000_000u64, 900_000u64),
        (20_000_000, 300_000),
        (30_000_000, 600_000),
    ]
    .into_iter()
    .enumerate()
    {
        k.take(switch(d - 1_000, 7, "a", 120, 8, 120), &flags);
        for i in 1..10 {
            k.take(ev(d + i * 100_000, EventKind::LocalTimer), &flags);
        }
        flags.push(explain::Window {
            end_ns: d + 950_000,
            ..flagged(d, d + late)
        });
        k.settle(&flags, n == 2);
    }
    let (store, kept, evicted) = k.into_windows();
    assert_eq!(store.len(), 20);
    let lat = |w: &[explain::Window]| w.iter().map(|w| w.latency_ns).collect::<Vec<_>>();
    assert_eq!(lat(&kept), [900_000, 600_000]);
    assert_eq!(lat(&evicted), [300_000]);
    // The evicted wake-up is unknown and says why; a kept one is not.
    let tl = Timeline::with_windows(store, kept, evicted);
    let c = attribute(&tl, &late(20_000_000, 20_300_000), &bare_metal());
    assert_eq!(c.category, Category::Unknown);
    assert!(
        c.detail.contains("dropped for want of room"),
        "{}",
        c.detail
    );
    let c = attribute(&tl, &late(30_000_000, 30_600_000), &bare_metal());
    assert_ne!(c.category, Category::Unknown, "{}", c.detail);
}

#[test]
fn a_flag_ring_that_overflows_counts_what_it_lost() {
    let flags = explain::Flags::new(4);
    assert_no_alloc::assert_no_alloc(|| {
        for i in 0..10u64 {
            flags.push(explain::Window::span(0, i, i + 1));
        }
    });
    let mut next = 0;
    let mut got = Vec::new();
    let lost = flags.read(&mut next, &mut |w| got.push(w.start_ns));
    assert_eq!(lost, 6);
    assert_eq!(got, vec![6, 7, 8, 9]);
}

#[test]
fn induced_lost_events_leave_their_wake_ups_unknown_and_no_cause_over_a_hole() {
    // Issue 29: a trace that loses events under load (here a 64 KiB buffer,
    // recorded as before: every CPU, and two threads yielding to each other
    // on the measured CPU) must not name a cause over a hole: every outlier
    // with a cause has no loss between its deadline and its wake-up on its
    // CPU, those whose span lost events are `unknown (trace lost …)`, and
    // the summary says how many.
    let _g = INDUCED.lock().unwrap_or_else(|e| e.into_inner());
    if !usable() {
        return;
    }
    let cpu = victim_cpu();
    let mut config = cyclic_on(cpu, 100_000, 2_000_000_000);
    config.policy = Policy::Other { nice: 0 };
    if let Some(e) = config.explain.as_mut() {
        e.buffer_kb = 64;
        e.unfiltered = true;
    }
    let e = firmtime_rt::testing::until_checked(3, |_| {
        let stop = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            for _ in 0..2 {
                let stop = &stop;
                s.spawn(move || {
                    let _ = sched::set_affinity(&[cpu]);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                });
            }
            let r = cyclic::run(&config, &mut Silent);
            stop.store(true, Ordering::Relaxed);
            r
        });
        let e = r.expect("cyclic").explain.expect("explained");
        if e.unknown_lost == 0 {
            return firmtime_rt::testing::Attempt::Waived(format!(
                "no outlier's span lost events (lost {}, {} outliers)",
                e.lost,
                e.outliers.len()
            ));
        }
        firmtime_rt::testing::Attempt::Checked(e)
    });
    assert!(e.lost > 0);
    for o in &e.outliers {
        let wake = o.deadline_ns + u64::try_from(o.latency_ns.max(0)).unwrap_or(0);
        let (lost, holes) = firmtime_trace::loss::lost_in(&e.losses, o.cpu, o.deadline_ns, wake);
        if o.cause.category != Category::Unknown {
            assert_eq!(holes, 0, "a cause over a hole of {lost} events: {o:?}");
        }
        if o.cause.lost_events.is_some() {
            assert_eq!(o.cause.category, Category::Unknown, "{o:?}");
        }
    }
    assert!(
        e.summary().contains(&format!(
            "{} of {} outliers unknown because the trace lost events",
            e.unknown_lost,
            e.outliers.len()
        )),
        "{}",
        e.summary()
    );
}

#[test]
fn a_long_idle_stretch_on_a_vm_beyond_its_idle_states_exit_is_a_host_stall() {
    // Issue 29 item 3: a 30 ms stall after the timer fired on time, the CPU
    // idle, was "idle exit: the idle CPU was slow to wake" on a VM whose
    // deepest idle state exits in 1 µs (haltpoll). Bounded by that exit
    // latency (plus the wake-up path's margin), the rest is the host.
    let d = 1_000_000;
    let events = vec![
        switch(10_000, TID, "measured", 19, 0, 120),
        ev(d + 1_000, EventKind::LocalTimer),
        ev(d + 3_000, EventKind::LocalTimerExit),
        switch(d + 30_000_000, 0, "swapper/1", 120, TID, 19),
        on(TID, ev(d + 31_000_000, EventKind::LocalTimer)),
    ];
    let tl = Timeline::new(events);
    let w = late(d, d + 30_001_000);
    let vm = |bound: Option<u64>| Machine {
        on_vm: true,
        preempt_model: "full".into(),
        virtualization: Some("kvm".into()),
        idle_exit_max_ns: bound,
    };
    let c = attribute(&tl, &w, &vm(Some(1_000)));
    assert_eq!(c.category, Category::Vm, "{c:?}");
    assert_eq!(c.name, "vCPU not running");
    assert!(
        c.detail.contains("stayed idle") && c.detail.contains("host stall"),
        "{}",
        c.detail
    );
    let idle = c
        .parts
        .iter()
        .find(|p| p.category == Category::IdleExit)
        .map(|p| p.ns);
    assert_eq!(idle, Some(1_000 + explain::attribute::IDLE_EXIT_MARGIN_NS));
    assert_eq!(c.parts.iter().map(|p| p.ns).sum::<u64>(), 30_001_000);
    // Unknown idle states, or bare metal: idle exit as before.
    assert_eq!(attribute(&tl, &w, &vm(None)).category, Category::IdleExit);
    let metal = Machine {
        idle_exit_max_ns: Some(1_000),
        ..bare_metal()
    };
    assert_eq!(attribute(&tl, &w, &metal).category, Category::IdleExit);
    // A short idle exit within the bound stays idle exit.
    let events = vec![
        switch(10_000, TID, "measured", 19, 0, 120),
        ev(d + 1_000, EventKind::LocalTimer),
        ev(d + 3_000, EventKind::LocalTimerExit),
        switch(d + 15_000, 0, "swapper/1", 120, TID, 19),
        on(TID, ev(d + 1_000_000, EventKind::LocalTimer)),
    ];
    let c = attribute(
        &Timeline::new(events),
        &late(d, d + 16_000),
        &vm(Some(1_000)),
    );
    assert_eq!(c.category, Category::IdleExit, "{c:?}");
}

#[test]
fn the_deepest_enabled_idle_states_exit_latency_is_read_from_cpuidle() {
    let dir = std::env::temp_dir().join(format!("ft-cpuidle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (cpu, state, latency, disable) in [
        (0, 0, "0", "0"),
        (0, 1, "1", "0"),
        (1, 1, "2", "0"),
        (1, 2, "500", "1"),
    ] {
        let p = dir.join(format!("cpu{cpu}/cpuidle/state{state}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("latency"), latency).unwrap();
        std::fs::write(p.join("disable"), disable).unwrap();
    }
    std::fs::create_dir_all(dir.join("cpufreq")).unwrap();
    // The disabled 500 µs state does not count: 2 µs.
    assert_eq!(explain::idle_exit_max_ns(&dir), Some(2_000));
    assert_eq!(explain::idle_exit_max_ns(&dir.join("none")), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
