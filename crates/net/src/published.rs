//! What a worker's data thread publishes for readers on other threads (a
//! metrics endpoint): the worker's time per period as a histogram of
//! preallocated atomic buckets, and a copy of its counters refreshed every
//! [`PUBLISH_EVERY`].
//!
//! # RT contract
//! [`PeriodTimes::record`] and [`Published::store`] are relaxed atomic
//! stores and adds into storage allocated before the loop: no allocation,
//! no lock, no system call. A reader ([`PeriodTimes::snapshot`],
//! [`Published::load`]) never makes the data thread wait; it may see one
//! period's bucket without its sum (the next read agrees again).

use crate::wire::{DropCounts, DropReason, DROP_REASONS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The histogram's bucket upper edges, ns: 50 µs … 50 ms (audio periods
/// run from about 0.3 ms to 170 ms; a worker's share is a fraction of one).
pub const PERIOD_TIME_EDGES_NS: [u64; 10] = [
    50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000,
    50_000_000,
];

/// Buckets: one per edge and one above the last.
pub const PERIOD_TIME_BUCKETS: usize = PERIOD_TIME_EDGES_NS.len() + 1;

/// How often the data thread refreshes [`Published`] (and at least after
/// each idle wait of its loop, 20 ms).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(10);

/// The worker's time per period: from the receipt of a period's last input
/// fragment to the send of its result's last fragment.
#[derive(Debug, Default)]
pub struct PeriodTimes {
    buckets: [AtomicU64; PERIOD_TIME_BUCKETS],
    sum_ns: AtomicU64,
}

/// A copy of [`PeriodTimes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeriodTimesSnapshot {
    /// Periods per bucket (not cumulative): `counts[i]` holds times above
    /// edge `i - 1` and at most edge `i` of [`PERIOD_TIME_EDGES_NS`]; the
    /// last, times above the last edge.
    pub counts: [u64; PERIOD_TIME_BUCKETS],
    /// Sum of the times, ns.
    pub sum_ns: u64,
}

impl PeriodTimesSnapshot {
    /// Periods recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The bucket of a time of `ns`. **RT-safe.**
pub fn bucket_of(ns: u64) -> usize {
    PERIOD_TIME_EDGES_NS
        .iter()
        .position(|&e| ns <= e)
        .unwrap_or(PERIOD_TIME_EDGES_NS.len())
}

impl PeriodTimes {
    /// Records one period's time. **RT-safe.**
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A copy of the buckets and the sum.
    pub fn snapshot(&self) -> PeriodTimesSnapshot {
        let mut s = PeriodTimesSnapshot {
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            ..PeriodTimesSnapshot::default()
        };
        for (c, b) in s.counts.iter_mut().zip(&self.buckets) {
            *c = b.load(Ordering::Relaxed);
        }
        s
    }
}

/// The data thread's counters since the worker started, every session's
/// together (ended sessions included, so that each only grows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataTotals {
    /// Datagrams received on the data port.
    pub datagrams: u64,
    /// Session periods processed (the callback ran).
    pub periods: u64,
    /// Session periods answered later than the master's whole budget
    /// after their last fragment arrived ([`crate::StreamOptions::late_after_ns`]).
    pub late: u64,
    /// Session periods abandoned incomplete (a fragment never came).
    pub incomplete: u64,
    /// Complete session periods given up while their session was busy.
    pub busy: u64,
    /// Discovery probes answered.
    pub probes: u64,
    /// `recv` errors on the data socket.
    pub recv_errors: u64,
    /// Result datagrams whose `send` failed.
    pub send_errors: u64,
    /// Datagrams dropped, by reason (before and after a stream was found).
    pub drops: DropCounts,
    /// Sessions being served.
    pub sessions: u64,
}

/// [`DataTotals`] in atomics: the data thread stores, anyone loads.
#[derive(Debug, Default)]
pub struct Published {
    datagrams: AtomicU64,
    periods: AtomicU64,
    late: AtomicU64,
    incomplete: AtomicU64,
    busy: AtomicU64,
    probes: AtomicU64,
    recv_errors: AtomicU64,
    send_errors: AtomicU64,
    sessions: AtomicU64,
    drops: [AtomicU64; DROP_REASONS],
}

impl Published {
    /// Stores a copy. **RT-safe.**
    pub fn store(&self, t: &DataTotals) {
        let r = Ordering::Relaxed;
        self.datagrams.store(t.datagrams, r);
        self.periods.store(t.periods, r);
        self.late.store(t.late, r);
        self.incomplete.store(t.incomplete, r);
        self.busy.store(t.busy, r);
        self.probes.store(t.probes, r);
        self.recv_errors.store(t.recv_errors, r);
        self.send_errors.store(t.send_errors, r);
        self.sessions.store(t.sessions, r);
        for (a, &reason) in self.drops.iter().zip(DropReason::ALL) {
            a.store(t.drops.get(reason), r);
        }
    }

    /// The last copy stored.
    pub fn load(&self) -> DataTotals {
        let r = Ordering::Relaxed;
        let mut drops = DropCounts::default();
        for (a, &reason) in self.drops.iter().zip(DropReason::ALL) {
            drops.add_n(reason, a.load(r));
        }
        DataTotals {
            datagrams: self.datagrams.load(r),
            periods: self.periods.load(r),
            late: self.late.load(r),
            incomplete: self.incomplete.load(r),
            busy: self.busy.load(r),
            probes: self.probes.load(r),
            recv_errors: self.recv_errors.load(r),
            send_errors: self.send_errors.load(r),
            drops,
            sessions: self.sessions.load(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fall_in_the_bucket_whose_upper_edge_holds_them() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(50_000), 0);
        assert_eq!(bucket_of(50_001), 1);
        assert_eq!(bucket_of(50_000_000), 9);
        assert_eq!(bucket_of(50_000_001), 10);
        let t = PeriodTimes::default();
        firmtime_rt::assert_rt::no_alloc(|| {
            for ns in [10_000, 60_000, 60_000, 3_000_000, 90_000_000] {
                t.record(ns);
            }
        });
        let s = t.snapshot();
        assert_eq!(s.counts, [1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(s.count(), 5);
        assert_eq!(s.sum_ns, 93_130_000);
    }

    #[test]
    fn published_totals_read_back_as_stored() {
        let mut d = DropCounts::default();
        d.add(DropReason::BadMac);
        d.add(DropReason::BadMac);
        d.add(DropReason::Stale);
        let t = DataTotals {
            datagrams: 9,
            periods: 7,
            late: 1,
            incomplete: 2,
            busy: 3,
            probes: 4,
            recv_errors: 5,
            send_errors: 6,
            drops: d,
            sessions: 1,
        };
        let p = Published::default();
        firmtime_rt::assert_rt::no_alloc(|| p.store(&t));
        assert_eq!(p.load(), t);
    }
}
