//! cyclictest/rt-tests formats: byte-for-byte against real cyclictest
//! output captured from rt-tests (tests/data/cyclictest-*), round trips,
//! RT safety of recording, status line.

use firmtime_lab::output::{
    cyclictest_status_line, parse_cyclictest_histogram, rt_tests_timestamp,
    write_cyclictest_histogram, write_rt_tests_json, RtTestsHeader, StatusLine, ThreadHist,
};
use firmtime_lab::ErrorKind;
use firmtime_rt::system::{PreemptModel, SystemInfo};

use crate::data;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

/// The part of cyclictest's stdout that is the histogram (it first prints
/// `# /dev/cpu_dma_latency set to 0us`).
fn histogram_part(text: &str) -> &str {
    &text[text.find("# Histogram").expect("fixture has a histogram")..]
}

fn write_text(threads: &[ThreadHist], sum: bool) -> String {
    let mut out = Vec::new();
    write_cyclictest_histogram(&mut out, threads, sum).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn real_cyclictest_histograms_are_reproduced_byte_for_byte() {
    for name in [
        "cyclictest-h50-t2.txt",
        "cyclictest-H40-t2.txt",
        "cyclictest-h3-others.txt",
    ] {
        let text = fixture(name);
        let parsed = parse_cyclictest_histogram(&text).unwrap();
        assert_eq!(
            write_text(&parsed.threads, parsed.sum_column),
            histogram_part(&text),
            "{name}"
        );
    }
}

#[test]
fn real_cyclictest_histogram_is_parsed_correctly() {
    let p = parse_cyclictest_histogram(&fixture("cyclictest-h50-t2.txt")).unwrap();
    assert!(!p.sum_column);
    assert_eq!(p.threads.len(), 2);
    let t0 = &p.threads[0];
    assert_eq!(t0.buckets.len(), 50);
    assert_eq!(t0.total(), 2992);
    assert_eq!(t0.overflows, 7);
    assert_eq!(t0.cycles, 2999);
    assert_eq!(t0.buckets[4], 10);
    assert_eq!(t0.buckets[5], 110);
    assert_eq!(t0.buckets[47], 2);
    assert_eq!((t0.min_us, t0.max_us), (4, 1458));
    assert_eq!(t0.avg_us() as i64, 10);
    assert_eq!(
        t0.overflow_cycles,
        vec![679, 753, 882, 1017, 2407, 2601, 2881]
    );
    assert_eq!(p.threads[1].overflow_cycles.len(), 14);

    let h = parse_cyclictest_histogram(&fixture("cyclictest-H40-t2.txt")).unwrap();
    assert!(h.sum_column);
    assert_eq!(h.threads.len(), 2);
    assert_eq!(h.threads[0].total() + h.threads[1].total(), 600);

    let o = parse_cyclictest_histogram(&fixture("cyclictest-h3-others.txt")).unwrap();
    assert_eq!(o.threads[0].overflows, 100);
    assert_eq!(o.threads[0].overflow_cycles, vec![0, 1, 2]);
}

/// The JSON and the text fixture come from the same cyclictest run: the
/// counts parsed from the text, written as rt-tests JSON, must give the
/// real JSON file byte for byte.
#[test]
fn real_rt_tests_json_is_reproduced_from_the_same_counts() {
    let real = fixture("cyclictest-h50-t2.json");
    let v: serde_json::Value = serde_json::from_str(&real).unwrap();
    let mut threads = parse_cyclictest_histogram(&fixture("cyclictest-h50-t2.txt"))
        .unwrap()
        .threads;
    for (i, t) in threads.iter_mut().enumerate() {
        let jt = &v["thread"][i.to_string()];
        // The text has only the truncated average; take the JSON's.
        t.sum_us = jt["avg"].as_f64().unwrap() * t.cycles as f64;
        t.cpu = jt["cpu"].as_i64().unwrap() as i32;
        t.node = jt["node"].as_i64().unwrap() as i32;
        assert_eq!(jt["cycles"].as_u64(), Some(t.cycles));
    }
    let s = |k: &str| v[k].as_str().unwrap().to_owned();
    let si = &v["sysinfo"];
    let ss = |k: &str| si[k].as_str().unwrap().to_owned();
    let header = RtTestsHeader {
        cmdline: s("cmdline:"),
        version: s("rt_test_version:"),
        start_time: s("start_time"),
        end_time: s("end_time"),
        return_code: v["return_code"].as_i64().unwrap() as i32,
        sysinfo: system_info(
            &ss("nodename"),
            &ss("release"),
            &ss("version"),
            &ss("machine"),
            si["realtime"] == 1,
        ),
    };
    assert_eq!(ss("sysname"), "Linux");
    let mut out = Vec::new();
    write_rt_tests_json(&mut out, &header, &threads).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), real);
}

#[test]
fn recording_follows_cyclictest_rules_and_does_not_allocate() {
    let mut t = ThreadHist::new(10).unwrap();
    let samples: [i64; 7] = [999, 1_000, 9_999, 10_000, -1_500, 250_000, 3_000];
    assert_no_alloc::assert_no_alloc(|| {
        for s in samples {
            t.record_ns(s);
        }
        // Far more overflows than the log holds: counted, not logged.
        for _ in 0..100 {
            t.record_us(11);
        }
    });
    assert_eq!(t.cycles, 107);
    assert_eq!(t.buckets[0], 1);
    assert_eq!(t.buckets[1], 1);
    assert_eq!(t.buckets[9], 1);
    assert_eq!(t.buckets[3], 1);
    assert_eq!(t.total(), 4);
    assert_eq!(t.underflows, 1);
    assert_eq!(t.overflows, 102);
    assert_eq!(t.overflow_cycles, vec![3, 5, 7, 8, 9, 10, 11, 12, 13, 14]);
    assert_eq!((t.min_us, t.max_us, t.act_us), (-1, 250, 11));

    let text = write_text(std::slice::from_ref(&t), false);
    assert!(text.contains("# Histogram Underflows: 00001\n"), "{text}");
    assert!(
        text.contains("# Thread 0: 00003 00005 00007 00008 00009 00010 00011 00012 00013 00014 # 00092 others\n"),
        "{text}"
    );
    assert!(text.contains("# Min Latencies: -0001\n"), "{text}");
    let back = parse_cyclictest_histogram(&text).unwrap();
    assert_eq!(back.threads[0].buckets, t.buckets);
    assert_eq!(back.threads[0].underflows, 1);
    assert_eq!(back.threads[0].cycles, t.cycles);
    assert_eq!(back.threads[0].overflow_cycles, t.overflow_cycles);
}

#[test]
fn sum_column_round_trips() {
    let mut a = ThreadHist::new(5).unwrap();
    let mut b = ThreadHist::new(5).unwrap();
    for us in [0, 1, 1, 4, 7] {
        a.record_us(us);
    }
    for us in [2, 2, 3] {
        b.record_us(us);
    }
    let text = write_text(&[a.clone(), b.clone()], true);
    assert!(
        text.starts_with("# Histogram\n000000 000001\t000000\t000001\n"),
        "{text}"
    );
    assert!(
        text.contains("# Total: 000000004 000000003 000000007\n"),
        "{text}"
    );
    assert!(
        text.contains("# Max Latencies: 00007 00003 00007\n"),
        "{text}"
    );
    assert!(
        text.contains("# Histogram Overflows: 00001 00000 00001\n"),
        "{text}"
    );
    assert!(
        text.ends_with("# Thread 0: 00004\n# Thread 1:\n\n"),
        "{text}"
    );
    let back = parse_cyclictest_histogram(&text).unwrap();
    assert!(back.sum_column);
    assert_eq!(back.threads[0].buckets, a.buckets);
    assert_eq!(back.threads[1].buckets, b.buckets);
    assert_eq!(write_text(&back.threads, true), text);
}

#[test]
fn bad_inputs_give_actionable_errors() {
    let e = ThreadHist::new(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("at least 1 bucket"), "{e}");

    let e = write_cyclictest_histogram(&mut Vec::new(), &[], false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let (a, b) = (ThreadHist::new(3).unwrap(), ThreadHist::new(4).unwrap());
    let e = write_cyclictest_histogram(&mut Vec::new(), &[a, b], false).unwrap_err();
    assert!(e.message().contains("same number of buckets"), "{e}");

    let e = parse_cyclictest_histogram("# Histogram\n000000 00x001\n").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().starts_with("line 2 "), "{e}");
    let e = parse_cyclictest_histogram("# Histogram\n000000 000001\n").unwrap_err();
    assert!(e.message().contains("Min Latencies"), "{e}");
}

#[test]
fn status_line_matches_cyclictest() {
    let line = StatusLine {
        thread: 0,
        tid: 1234,
        prio: 80,
        interval_us: 1000,
        cycles: 1000,
        min_us: 5,
        act_us: 10,
        avg_us: 12,
        max_us: 100,
    };
    assert_eq!(
        cyclictest_status_line(&line),
        "T: 0 ( 1234) P:80 I:1000 C:   1000 Min:      5 Act:   10 Avg:   12 Max:     100"
    );
    let mut t = ThreadHist::new(100).unwrap();
    for us in [4, 20, 9] {
        t.record_us(us);
    }
    assert_eq!(
        t.status_line(1, 77, 99, 500).to_string(),
        "T: 1 (   77) P:99 I:500 C:      3 Min:      4 Act:    9 Avg:   11 Max:      20"
    );
}

/// This machine's report with the rt-tests `sysinfo` fields set as given.
fn system_info(
    nodename: &str,
    release: &str,
    version: &str,
    machine: &str,
    realtime: bool,
) -> SystemInfo {
    let mut s = SystemInfo::collect();
    s.hostname = Some(nodename.to_owned());
    s.kernel_release = release.to_owned();
    s.kernel_version = version.to_owned();
    s.arch = machine.to_owned();
    s.preempt_model = if realtime {
        PreemptModel::Rt
    } else {
        PreemptModel::Voluntary
    };
    s
}

#[test]
fn sysinfo_and_timestamp_describe_this_machine() {
    let mut json = Vec::new();
    let header = RtTestsHeader {
        cmdline: String::new(),
        version: String::new(),
        start_time: String::new(),
        end_time: String::new(),
        return_code: 0,
        sysinfo: SystemInfo::collect(),
    };
    write_rt_tests_json(&mut json, &header, &[]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let si = &v["sysinfo"];
    assert_eq!(si["sysname"], "Linux");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(si["release"], release.trim());
    let nodename = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(si["nodename"], nodename.trim());
    let realtime = std::fs::read("/sys/kernel/realtime").is_ok_and(|b| b.first() == Some(&b'1'));
    assert_eq!(si["realtime"], u8::from(realtime));
    // 10^9 s after the epoch is 2001-09-09 01:46:40 UTC: September 2001 in
    // every time zone.
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    let s = rt_tests_timestamp(t);
    assert!(s.contains(" Sep 2001 "), "{s}");
    let b = s.as_bytes();
    assert_eq!(s.len(), 31, "{s}");
    assert_eq!((b[3], b[4], b[25]), (b',', b' ', b' '), "{s}");
    assert!(b[26] == b'+' || b[26] == b'-', "{s}");
}
