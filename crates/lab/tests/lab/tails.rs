//! `lab tails`: configuration, presets, the paper's Table 6, worker outputs,
//! and one worker run in-process (correctness only: counts and conditions).

use firmtime_lab::tails::{
    self, CellSpec, Config, WorkerConfig, WorkerOutput, WorkerReport, PAPER_TABLE6,
};
use firmtime_lab::{Error, ErrorKind};
use firmtime_rt::sched::Policy;

const MS: u64 = 1_000_000;

fn invalid_message(cfg: &Config) -> String {
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    e.message().to_string()
}

#[test]
fn bad_values_are_rejected_naming_the_flag_and_range() {
    let base = Config::quick();
    let m = invalid_message(&Config {
        alarms: 0,
        ..base.clone()
    });
    assert!(m.contains("--alarms 0") && m.contains("1 to 100000"), "{m}");
    let m = invalid_message(&Config {
        max_delay_ns: MS,
        ..base.clone()
    });
    assert!(m.contains("--max-delay") && m.contains("2ms to 10s"), "{m}");
    let m = invalid_message(&Config {
        priority: 0,
        ..base.clone()
    });
    assert!(m.contains("--priority 0") && m.contains("1 to 99"), "{m}");
    let m = invalid_message(&Config {
        cells: vec![CellSpec::blk(0)],
        ..base.clone()
    });
    assert!(m.contains("--procs 0") && m.contains("1 to 64"), "{m}");
    let m = invalid_message(&Config {
        cells: vec![CellSpec::percent(150, 1, 0)],
        ..base.clone()
    });
    assert!(m.contains("--percents 150") && m.contains("1 to 99"), "{m}");
    let m = invalid_message(&Config {
        cells: vec![CellSpec::percent(4, 1, 65)],
        ..base.clone()
    });
    assert!(m.contains("--extra-cpu 65") && m.contains("0 to 64"), "{m}");
    let m = invalid_message(&Config {
        cells: vec![],
        ..base.clone()
    });
    assert!(m.contains("--procs"), "{m}");
    let m = invalid_message(&Config {
        cpu: Some(100_000),
        ..base
    });
    assert!(m.contains("--cpu 100000") && m.contains("online"), "{m}");
}

#[test]
fn presets_are_valid_and_full_is_the_papers_table() {
    let full = Config::full();
    full.validate().unwrap();
    assert_eq!(full.alarms, 500);
    assert_eq!(full.max_delay_ns, 1000 * MS);
    assert_eq!(full.cells.len(), PAPER_TABLE6.len());
    assert!(full.cells.iter().all(|c| c.paper().is_some()));
    assert_eq!(Config::default(), full);

    let quick = Config::quick();
    quick.validate().unwrap();
    let labels: Vec<String> = quick.cells.iter().map(|c| c.label()).collect();
    assert_eq!(labels, ["BLK 2", "CONT 2", "4% 2", "4% 1+2CPU"]);
    assert!(quick.alarms < full.alarms && quick.max_delay_ns < full.max_delay_ns);
    // The quick budget is 40 s; most runs take alarms × mean delay per cell.
    assert!(quick.expected_duration().as_secs() <= 20);
    assert!(quick.time_bound() > quick.expected_duration());
}

#[test]
fn matrix_covers_types_times_process_counts_in_order() {
    let cells = Config::matrix(&[1, 8], &[2, 4], &[0, 2], true, true, true).unwrap();
    let labels: Vec<String> = cells.iter().map(|c| c.label()).collect();
    assert_eq!(
        labels,
        [
            "BLK 1",
            "BLK 8",
            "CONT 1",
            "CONT 8",
            "2% 1",
            "2% 8",
            "4% 1",
            "4% 8",
            "2% 1+2CPU",
            "4% 1+2CPU"
        ]
    );
    let only_blk = Config::matrix(&[2], &[4], &[2], true, false, false).unwrap();
    assert_eq!(only_blk, [CellSpec::blk(2)]);
    let e = Config::matrix(&[2], &[100], &[], false, false, true).unwrap_err();
    assert!(e.message().contains("--percents 100"), "{e}");
}

#[test]
fn paper_table6_holds_the_published_figures() {
    let cont8 = CellSpec::cont(8).paper().unwrap();
    assert_eq!(cont8.hz100.max_us, 740_025);
    assert_eq!(cont8.hz20000.p90_us, 656);
    let hogs = CellSpec::percent(4, 1, 8).paper().unwrap();
    assert_eq!(hogs.hz100.p99_us, 170_014);
    assert_eq!(hogs.hz20000.max_us, 856);
    assert_eq!(CellSpec::percent(4, 1, 8).label(), "4% 1+8CPU");
    assert!(
        CellSpec::blk(4).paper().is_none(),
        "Table 6 shows selected rows only"
    );
    let json = serde_json::to_value(PAPER_TABLE6[0]).unwrap();
    assert_eq!(json["hz100"]["p90_us"], 5);
    assert_eq!(json["cell"]["compute_percent"], 0);
}

#[test]
fn worker_seeds_differ_per_cell_and_process_and_are_reproducible() {
    let a = tails::worker_seed(1, 0, 0);
    assert_eq!(a, tails::worker_seed(1, 0, 0));
    let all = [
        a,
        tails::worker_seed(1, 0, 1),
        tails::worker_seed(1, 1, 0),
        tails::worker_seed(2, 0, 0),
    ];
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            assert_ne!(all[i], all[j]);
        }
    }
}

#[test]
fn worker_outputs_sort_refusals_from_failures() {
    let refused = WorkerOutput::from_result(Err(Error::new(
        ErrorKind::Realtime,
        "SCHED_RR refused: grant rtprio",
    )));
    let j = serde_json::to_value(&refused).unwrap();
    assert_eq!(j["status"], "refused");
    assert_eq!(j["reason"], "SCHED_RR refused: grant rtprio");
    let failed = WorkerOutput::from_result(Err(Error::new(ErrorKind::Io, "timer_create failed")));
    assert_eq!(serde_json::to_value(&failed).unwrap()["status"], "failed");
    let back: WorkerOutput = serde_json::from_value(j).unwrap();
    assert_eq!(back, refused);
}

#[test]
fn worker_cli_args_name_every_field() {
    let wc = WorkerConfig {
        compute_percent: 4,
        alarms: 7,
        max_delay_ns: 3 * MS,
        seed: 9,
        priority: 50,
        cpu: Some(0),
        start_at_ns: 11,
        deadline_ns: 12,
    };
    let a = wc.to_cli_args().join(" ");
    assert_eq!(
        a,
        "--compute-percent 4 --alarms 7 --max-delay-ns 3000000 --seed 9 --priority 50 --start-at-ns 11 --deadline-ns 12 --cpu 0"
    );
}

fn worker(
    compute_percent: u8,
    alarms: u32,
    deadline_ns: u64,
) -> firmtime_lab::Result<WorkerReport> {
    let wc = WorkerConfig {
        compute_percent,
        alarms,
        max_delay_ns: 3 * MS,
        seed: 5,
        priority: 10,
        cpu: None,
        start_at_ns: 0,
        deadline_ns,
    };
    let _alrm = crate::SIGALRM.lock().unwrap_or_else(|e| e.into_inner());
    // Its own thread: the worker sets SCHED_RR on the thread it runs on.
    std::thread::spawn(move || tails::run_worker(&wc))
        .join()
        .unwrap()
}

#[test]
fn worker_measures_each_alarm_at_sched_rr_or_reports_the_refusal() {
    let far = firmtime_rt::clock::monotonic_ns() + 60_000 * MS;
    match worker(0, 6, far) {
        Ok(r) => {
            assert_eq!(r.latencies_ns.len(), 6);
            assert!(
                r.latencies_ns.iter().all(|&l| l >= 0),
                "{:?}",
                r.latencies_ns
            );
            assert!(!r.timed_out && !r.interrupted);
            assert_eq!(r.conditions.obtained.policy, Policy::Rr { priority: 10 });
            assert_eq!(r.conditions.obtained.memory_locked, Some(true));
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: `lim` is a valid rlimit owned by this frame.
            assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut lim) }, 0);
            let hard = (lim.rlim_max != libc::RLIM_INFINITY).then_some(lim.rlim_max);
            assert_eq!(
                r.rttime_limit_us, hard,
                "soft RLIMIT_RTTIME raised to the hard limit"
            );
            // A deadline already passed: nothing measured, flagged.
            let late = worker(100, 6, 1).unwrap();
            assert!(late.latencies_ns.is_empty() && late.timed_out);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Realtime);
            // SAFETY: geteuid has no preconditions and cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            assert!(!root, "SCHED_RR refused as root: {e}");
            firmtime_rt::testing::skip(format!("SCHED_RR refused: {e}"));
        }
    }
    let _ = firmtime_rt::memory::unlock_all();
}
