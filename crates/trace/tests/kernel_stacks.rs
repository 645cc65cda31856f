//! Kernel stacks of `--kernel-stacks` (issue 29 item 2): the
//! `ftrace:kernel_stack` records a `stacktrace` trigger writes, decoded
//! from ring-buffer pages captured on this project's development kernel
//! (6.18, `tests/data/kernel_stack/`: the binary pages of CPU 1 and the
//! kernel's own text of the same buffer, with `sym-addr`), and their
//! symbolization from kallsyms text.

use firmtime_trace::explain::stacks::{self, Stack};
use firmtime_trace::raw::{Decoder, Event, EventKind, Format};
use std::collections::HashMap;

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kernel_stack")
        .join(name)
}

fn text(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

fn decoder() -> Decoder {
    let mut d = Decoder::new(
        &text("header_page"),
        &[(
            EventKind::Switch,
            Format::parse(&text("sched_switch.format")).unwrap(),
        )],
    )
    .unwrap();
    d.add(
        EventKind::KernelStack,
        &Format::parse(&text("kernel_stack.format")).unwrap(),
    )
    .unwrap();
    d
}

fn decode(d: &Decoder, raw: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    for page in raw.chunks(d.page_size()) {
        d.decode_page(page, 1, &mut |e| out.push(e));
    }
    out
}

/// The kernel's text of each `<stack trace>`: the task's pid and the
/// addresses (`=> func <ffffffff8120abcd>`), in order.
fn text_stacks() -> Vec<(i32, Vec<u64>)> {
    let mut v: Vec<(i32, Vec<u64>)> = Vec::new();
    let mut open = false;
    for l in text("trace.txt").lines() {
        if l.contains("<stack trace>") {
            let head = l.split('[').next().unwrap().trim();
            let pid = head.rsplit('-').next().unwrap().parse().unwrap();
            v.push((pid, Vec::new()));
            open = true;
        } else if let (true, Some(rest)) = (open, l.trim().strip_prefix("=> ")) {
            let hex = rest.rsplit('<').next().unwrap().trim_end_matches('>');
            v.last_mut()
                .unwrap()
                .1
                .push(u64::from_str_radix(hex, 16).unwrap());
        } else {
            open = false;
        }
    }
    v
}

#[test]
fn captured_kernel_stack_records_decode_to_the_addresses_the_kernel_printed() {
    let d = decoder();
    let raw = std::fs::read(data("cpu1.raw")).unwrap();
    let mut events = decode(&d, &raw);
    let want = text_stacks();
    assert!(want.len() >= 3, "the fixture holds {} stacks", want.len());
    assert!(
        want.iter().any(|(_, a)| a.len() > 8),
        "the fixture has a stack longer than the format's declared caller[8]"
    );
    let got = stacks::take_stacks(&mut events);
    let got: Vec<(i32, Vec<u64>)> = got.into_iter().map(|s| (s.pid, s.addrs)).collect();
    assert_eq!(got, want);
    // What is left is the switches, in order, none of the frames.
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e.kind == EventKind::Switch));
}

#[test]
fn each_captured_stack_follows_the_switch_that_wrote_it() {
    let d = decoder();
    let mut events = decode(&d, &std::fs::read(data("cpu1.raw")).unwrap());
    let switches: Vec<Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::Switch)
        .copied()
        .collect();
    let got = stacks::take_stacks(&mut events);
    for s in &got {
        // The trigger's filter: a switch to `sleep` from a task other
        // than idle; the stack is the task switched out.
        let sw = switches
            .iter()
            .rfind(|e| e.time_ns <= s.time_ns)
            .expect("a switch before the stack");
        assert_eq!(
            (sw.prev_pid, sw.next_pid),
            (s.pid, s.next_pid),
            "stack at {}",
            s.time_ns
        );
        assert_ne!(s.pid, 0);
        // The task switched in is the trigger's `sleep`: named so where
        // it leaves the CPU again.
        let out: Vec<&str> = switches
            .iter()
            .filter(|e| e.prev_pid == s.next_pid)
            .map(Event::comm_str)
            .collect();
        assert!(
            !out.is_empty() && out.iter().all(|c| *c == "sleep"),
            "{out:?}"
        );
    }
}

/// A page with a switch and one stack record of `frames` addresses whose
/// `size` says `claimed`, built the way the kernel lays it out (the
/// record's length rounded to 4 bytes in the header's `array[0]`).
fn page_with_stack(frames: &[u64], claimed: i32) -> Vec<u8> {
    let d = decoder();
    let stack_id = Format::parse(&text("kernel_stack.format")).unwrap().id;
    let switch_id = Format::parse(&text("sched_switch.format")).unwrap().id;
    let mut data = Vec::new();
    // A sched_switch: 64 bytes, type_len 16, delta 5.
    let mut sw = vec![0u8; 64];
    sw[0..2].copy_from_slice(&switch_id.to_le_bytes());
    sw[4..8].copy_from_slice(&42i32.to_le_bytes());
    sw[8..11].copy_from_slice(b"hog");
    sw[24..28].copy_from_slice(&42i32.to_le_bytes());
    sw[28..32].copy_from_slice(&120i32.to_le_bytes());
    sw[40..44].copy_from_slice(b"meas");
    sw[56..60].copy_from_slice(&7i32.to_le_bytes());
    sw[60..64].copy_from_slice(&19i32.to_le_bytes());
    data.extend_from_slice(&((5u32 << 5) | 16).to_le_bytes());
    data.extend_from_slice(&sw);
    // The stack: 16 bytes of header and size, then the addresses.
    let mut st = vec![0u8; 16];
    st[0..2].copy_from_slice(&stack_id.to_le_bytes());
    st[4..8].copy_from_slice(&42i32.to_le_bytes());
    st[8..12].copy_from_slice(&claimed.to_le_bytes());
    for a in frames {
        st.extend_from_slice(&a.to_le_bytes());
    }
    // type_len 0: array[0] holds the length including itself.
    data.extend_from_slice(&(1u32 << 5).to_le_bytes());
    data.extend_from_slice(&(st.len() as u32 + 4).to_le_bytes());
    data.extend_from_slice(&st);
    let mut page = vec![0u8; d.page_size()];
    page[0..8].copy_from_slice(&1_000u64.to_le_bytes());
    page[8..16].copy_from_slice(&(data.len() as u64).to_le_bytes());
    page[16..16 + data.len()].copy_from_slice(&data);
    page
}

#[test]
fn a_stack_record_gives_one_event_per_frame_as_many_as_it_holds() {
    let d = decoder();
    let frames: Vec<u64> = (0..12).map(|i| 0xffff_ffff_8100_0000 + i * 0x10).collect();
    let mut events = Vec::new();
    let info = d.decode_page(&page_with_stack(&frames, 12), 1, &mut |e| events.push(e));
    assert_eq!((info.events, info.other), (2, 0));
    assert_eq!(events.len(), 13);
    assert_eq!(events[0].kind, EventKind::Switch);
    for (i, e) in events[1..].iter().enumerate() {
        assert_eq!(e.kind, EventKind::KernelStack);
        assert_eq!((e.pid, e.prev_pid, e.next_pid), (42, i as i32, 12));
        assert_eq!(e.arg, frames[i]);
        assert_eq!((e.time_ns, e.cpu), (1_005 + 1, 1));
    }
    let got = stacks::take_stacks(&mut events);
    assert_eq!(
        got,
        vec![Stack {
            cpu: 1,
            time_ns: 1_006,
            pid: 42,
            next_pid: 7,
            addrs: frames.clone()
        }]
    );
    // A size beyond what the record holds is cut at the record's end,
    // never read past it.
    let mut cut = Vec::new();
    d.decode_page(&page_with_stack(&frames[..3], 50), 1, &mut |e| cut.push(e));
    assert_eq!(
        cut.iter()
            .filter(|e| e.kind == EventKind::KernelStack)
            .map(|e| e.arg)
            .collect::<Vec<_>>(),
        frames[..3]
    );
    // More frames than STACK_FRAMES_MAX are cut there.
    let deep: Vec<u64> = (0..40).map(|i| 0x1000 + i).collect();
    let mut n = 0;
    d.decode_page(&page_with_stack(&deep, 40), 1, &mut |e| {
        n += usize::from(e.kind == EventKind::KernelStack)
    });
    assert_eq!(n, firmtime_trace::raw::STACK_FRAMES_MAX);
}

#[test]
fn addresses_are_named_from_kallsyms_text_and_the_tracing_frames_left_out() {
    let kallsyms = "\
ffffffff813a2300 t trace_event_raw_event_sched_switch
ffffffff8139bb40 T __traceiter_sched_switch
ffffffff821fa6c0 t __schedule
ffffffff821fb620 T schedule
ffffffff8143d400 T do_futex
ffffffff8143d500 d some_data
ffffffffc0a01000 t my_fn\t[my_module]
0000000000000000 T hidden_one
";
    let addrs = [
        0xffff_ffff_813a_23c5,
        0xffff_ffff_8139_bb71,
        0xffff_ffff_821f_acd8,
        0xffff_ffff_821f_b643,
        0xffff_ffff_8143_d52d, // past some_data (not text): do_futex's
        0xffff_ffff_c0a0_1010,
        0x10, // below every symbol
    ];
    let names = stacks::symbolize(kallsyms, &addrs);
    assert_eq!(names[&0xffff_ffff_821f_b643], "schedule+0x23");
    assert_eq!(names[&0xffff_ffff_8143_d52d], "do_futex+0x12d");
    assert_eq!(names[&0xffff_ffff_c0a0_1010], "my_fn+0x10 [my_module]");
    assert!(!names.contains_key(&0x10));
    assert_eq!(
        stacks::frames(&addrs, &names),
        vec![
            "__schedule+0x618",
            "schedule+0x23",
            "do_futex+0x12d",
            "my_fn+0x10 [my_module]",
            "0x10"
        ]
    );
    // Hidden addresses (kptr_restrict: all zero) name nothing.
    let hidden = "0000000000000000 T schedule\n0000000000000000 t __schedule\n";
    assert!(stacks::symbolize(hidden, &addrs).is_empty());
}

#[test]
fn a_stack_goes_on_the_part_of_the_task_it_belongs_to_and_is_shown_in_words() {
    use firmtime_trace::explain::{breakdown::Share, Category, Cause, Kind, Outlier};
    let part = |kind: Kind, pid: i32, ns: u64| {
        let mut s = Share::remainder(ns, "x");
        s.kind = kind;
        s.pid = Some(pid);
        s.name = format!("task{pid}");
        s
    };
    let outlier = |cpu: usize, deadline_ns: u64, parts: Vec<Share>| Outlier {
        thread: 0,
        cpu,
        index: 0,
        deadline_ns,
        latency_ns: 100_000,
        missed: 0,
        cause: Cause {
            category: Category::Task,
            name: "task42".into(),
            ns: 90_000,
            detail: "task task42 ran".into(),
            parts: Vec::new(),
            breakdown: parts,
            timer_fired_ns: None,
            lost_events: None,
        },
    };
    let mut outliers = vec![
        // The stack's task has a task and a non-preemptible part: the
        // latter gets it.
        outlier(
            1,
            1_000_000,
            vec![
                part(Kind::Task, 42, 60_000),
                part(Kind::NonPreemptible, 42, 30_000),
            ],
        ),
        // The stack is another task's: nothing attached.
        outlier(1, 2_000_000, vec![part(Kind::Task, 43, 90_000)]),
        // On another CPU: no stack there.
        outlier(0, 1_000_000, vec![part(Kind::Task, 42, 90_000)]),
    ];
    let stack = |time_ns: u64, pid: i32, next_pid: i32| Stack {
        cpu: 1,
        time_ns,
        pid,
        next_pid,
        addrs: vec![1, 2, 3],
    };
    let stacks_seen = vec![
        stack(1_050_000, 99, 7), // an older one in the span: not the last
        stack(1_090_000, 42, 7), // the switch to the thread (tid 7)
        stack(1_095_000, 42, 8), // to another thread
        stack(1_200_000, 42, 7), // after the wake-up
        stack(2_050_000, 44, 7), // the second outlier's: task 44
    ];
    let names: HashMap<u64, String> = [
        (1, "__schedule+0x618".to_string()),
        (2, "schedule+0x23".to_string()),
        (3, "do_nanosleep+0x5e".to_string()),
    ]
    .into();
    let n = stacks::attach(&mut outliers, &stacks_seen, &|_| Some(7), &names);
    assert_eq!(n, 1);
    let want = Some(vec![
        "__schedule+0x618".to_string(),
        "schedule+0x23".into(),
        "do_nanosleep+0x5e".into(),
    ]);
    assert_eq!(outliers[0].cause.breakdown[1].kernel_stack, want);
    assert_eq!(outliers[0].cause.breakdown[0].kernel_stack, None);
    assert!(outliers[1..].iter().all(|o| o
        .cause
        .breakdown
        .iter()
        .all(|p| p.kernel_stack.is_none())));
    assert_eq!(
        stacks::largest_stack_words(&outliers[0].cause.breakdown).as_deref(),
        Some("kernel stack of task42 (pid 42): schedule+0x23 ← do_nanosleep+0x5e")
    );
    let words = firmtime_trace::explain::with_parts(&outliers[0].cause);
    assert!(
        words.ends_with("; kernel stack of task42 (pid 42): schedule+0x23 ← do_nanosleep+0x5e"),
        "{words}"
    );
}

#[test]
fn a_trigger_file_lists_a_stacktrace_trigger_only_when_one_is_set() {
    use firmtime_trace::tracefs::has_stack_trigger;
    assert!(!has_stack_trigger(
        "# Available triggers:\n# traceon traceoff stacktrace enable_event disable_event\n"
    ));
    assert!(has_stack_trigger(
        "stacktrace:unlimited if next_comm ~ \"firmtime-cycl*\" && prev_pid != 0\n"
    ));
}

#[test]
fn what_kernel_stacks_did_is_said_in_words_unavailable_included() {
    use firmtime_trace::explain::{stacks_words, KernelStacks};
    let on = KernelStacks {
        trigger: Some("stacktrace:unlimited if next_comm ~ \"x*\" && prev_pid != 0".into()),
        trigger_removed: true,
        recorded: 12,
        attached: 9,
        symbolized: true,
        ..KernelStacks::default()
    };
    assert_eq!(
        stacks_words(&on),
        "kernel stacks: 12 recorded, 9 on outliers' task or non-preemptible parts (trigger \
         `stacktrace:unlimited if next_comm ~ \"x*\" && prev_pid != 0`, removed at the end)"
    );
    let left = KernelStacks {
        trigger_removed: false,
        symbolized: false,
        ..on.clone()
    };
    let w = stacks_words(&left);
    assert!(w.contains("NOT removed"), "{w}");
    assert!(w.ends_with("(/proc/kallsyms hidden: kptr_restrict)"), "{w}");
    let off = KernelStacks {
        unavailable: Some(
            "this kernel offers no `stacktrace` trigger on sched/sched_switch".into(),
        ),
        trigger_removed: true,
        ..KernelStacks::default()
    };
    assert_eq!(
        stacks_words(&off),
        "kernel stacks: none — this kernel offers no `stacktrace` trigger on sched/sched_switch"
    );
}

#[test]
fn a_kernel_that_does_not_offer_the_trigger_or_refuses_it_is_said_and_nothing_is_left_set() {
    use firmtime_trace::explain::{self, WokenBy};
    use firmtime_trace::tracefs::has_stack_trigger;
    use firmtime_trace::ErrorKind;
    if let Err(why) = explain::available() {
        firmtime_rt::testing::skip(why);
        return;
    }
    let mut inst = explain::instance(64, "ft-nostack*", WokenBy::OwnTimer).expect("instance");
    // No such event: no trigger file.
    let e = inst
        .add_stack_trigger("sched/no_such_event", "prev_pid != 0")
        .expect_err("no trigger file");
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.message().contains("offers no event triggers")
            && e.message().contains("sched/no_such_event/trigger"),
        "{}",
        e.message()
    );
    // A filter the kernel refuses (no such field): said with its words,
    // and nothing set.
    let e = inst
        .add_stack_trigger("sched/sched_switch", "no_such_field == 1")
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.message().contains("refused the trigger") && e.message().contains("no_such_field == 1"),
        "{}",
        e.message()
    );
    let file = inst.path().join("events/sched/sched_switch/trigger");
    let text = firmtime_trace::tracefs::read_text(&file).expect("trigger file");
    assert!(!has_stack_trigger(&text), "{text}");
    // The session's own set-up: a kernel that offers it gets the trigger
    // back as the kernel reads it, and removing it leaves none.
    let k = explain::stacks::set_up(&mut inst, "ft-nostack*");
    assert_eq!(k.unavailable, None, "{k:?}");
    assert_eq!(
        k.trigger.as_deref(),
        Some("stacktrace:unlimited if next_comm ~ \"ft-nostack*\" && prev_pid != 0")
    );
    assert!(has_stack_trigger(
        &firmtime_trace::tracefs::read_text(&file).unwrap()
    ));
    // Narrowed to thread ids: the kernel holds one stacktrace trigger per
    // event, so the name's is replaced; a refused filter puts it back.
    let by_id = inst
        .replace_stack_trigger(
            "sched/sched_switch",
            &explain::stacks::tid_filter(&[41, 42]),
        )
        .expect("replaced");
    assert_eq!(
        by_id,
        "stacktrace:unlimited if (next_pid == 41 || next_pid == 42) && prev_pid != 0"
    );
    assert!(inst
        .replace_stack_trigger("sched/sched_switch", "no_such_field == 1")
        .is_err());
    assert_eq!(
        inst.stack_trigger("sched/sched_switch").as_deref(),
        Some(by_id.as_str())
    );
    assert!(inst.remove_triggers());
    assert!(!has_stack_trigger(
        &firmtime_trace::tracefs::read_text(&file).unwrap()
    ));
    assert!(inst.remove());
}
