//! The bench loop against an in-process worker: with the `assert-rt`
//! feature its per-period bookkeeping (notes, late records) runs under
//! `assert_no_alloc`, and every late period is accounted for by a cause.

use crate::common::localhost;
use firmtime_net::bench::{self, BenchConfig};
use firmtime_net::late::Side;
use firmtime_net::*;
use firmtime_rt::outliers::Notes;
use firmtime_rt::sched::Policy;
use std::time::Duration;

#[test]
fn every_late_period_of_a_slow_worker_is_recorded_and_classified() {
    let mut sc = ServerConfig::new(localhost());
    sc.data_policy = Some(Policy::Other { nice: 0 });
    let srv = WorkerServer::start(sc).unwrap();
    let mut cfg = BenchConfig::new(vec![srv.local_addr()]);
    // 5.3 ms periods, each block held 1.5 periods: every result is late.
    cfg.period_frames = 256;
    cfg.window = 0;
    cfg.work = Work {
        fraction: 1.5,
        mode: WorkMode::Sleep,
    };
    cfg.duration = Duration::from_millis(300);
    cfg.rt.policy = Policy::Other { nice: 0 };
    cfg.rt.mlock = false;
    let mut notes = Notes::new(16);
    let r = bench::run(&cfg, &mut notes, &mut |_| {}).unwrap();
    assert!(r.late * 10 >= r.periods * 8, "{r:?}");
    assert_eq!(r.late_not_recorded, 0);
    let periods: u64 = r.late_causes.iter().map(|c| c.periods).sum();
    let missed: u64 = r.late_causes.iter().map(|c| c.missed).sum();
    assert_eq!((periods, missed), (r.late, r.missed), "{:?}", r.late_causes);
    assert_eq!(
        r.late_items.len() as u64,
        r.late + r.late_items.iter().filter(|c| c.record.missed > 0).count() as u64
    );
    // The loop offered its passes to the notes.
    assert_eq!(notes.sorted().len(), 16);
    // A slow worker is on its side whenever the master sent on time.
    let worker: u64 = r
        .late_causes
        .iter()
        .filter(|c| c.side == Side::WorkerOrNetwork)
        .map(|c| c.periods)
        .sum();
    assert!(worker * 10 >= r.late * 8, "{:?}", r.late_causes);
}
