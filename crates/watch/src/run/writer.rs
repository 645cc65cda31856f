//! The writer's steps between intervals (this, non-RT, thread): handing
//! out the next interval's buffers, and for each interval group written:
//! watch's own CPU time, the rows, the budget notice, the store and the
//! metrics; at the end, the run's end in the database.

use super::explaining::{Explaining, Found};
use super::lanes::{Group, Lanes};
use super::{cap_notice, over_budget, process_cpu_ns, shared_cpu_ns, unix_now_ns};
use super::{Config, Event, Summary};
use crate::error::{Error, Result};
use crate::interval::Interval;
use crate::metrics::Totals;
use crate::state;
use crate::store::{CpuInterval, MachineState, Store, Wakeup};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::Errno;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The wake-up grid of a run: its first deadline (CLOCK_MONOTONIC ns)
/// and the Unix time of a monotonic instant, fixed once at the start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    /// The first deadline.
    pub(super) t0: u64,
    /// Unix ns minus CLOCK_MONOTONIC ns.
    pub(super) offset: i64,
    /// `--period`, ns.
    pub(super) period_ns: u64,
    /// `--store-every`, ns.
    pub(super) interval_ns: u64,
}

impl Grid {
    /// The Unix time of monotonic instant `mono`, ns.
    pub(super) fn unix_of(&self, mono: u64) -> i64 {
        mono as i64 + self.offset
    }

    /// Where interval `seq` starts, CLOCK_MONOTONIC ns.
    fn interval_start(&self, seq: u64) -> u64 {
        self.t0 + seq * self.interval_ns
    }

    /// The interval under way at CLOCK_MONOTONIC instant `mono` (0 before
    /// the first).
    fn interval_at(&self, mono: u64) -> u64 {
        mono.saturating_sub(self.t0) / self.interval_ns.max(1)
    }

    /// The span of a buffer's interval, CLOCK_MONOTONIC ns: its first
    /// deadline to its end (the last wake-up of a cut-short one).
    pub(super) fn span(&self, b: &Interval) -> (u64, u64) {
        let start = self.t0 + b.first_index * self.period_ns;
        let end = if b.partial {
            b.last_wake_ns.max(start)
        } else {
            self.t0 + (b.seq + 1 + b.merged) * self.interval_ns
        };
        (start, end)
    }
}

/// What `/proc` and sysfs said of the machine at the start (stored with
/// every interval's state).
pub(super) struct MachineFacts {
    preempt0: String,
    virt: String,
}

impl MachineFacts {
    /// Reads them now.
    pub(super) fn read() -> MachineFacts {
        let sys = firmtime_rt::system::SystemInfo::collect();
        MachineFacts {
            preempt0: sys.preempt_model.name().to_string(),
            virt: sys
                .virtualization
                .clone()
                .unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The CPU-time counters at the last interval written: steal per watched
/// CPU, the process's, the metrics endpoint's.
struct CpuUsage {
    steal: Vec<u64>,
    process: u64,
    endpoint: u64,
}

/// What watch used of the CPUs in one interval group.
struct Cost {
    /// Steal per lane since the last group, ns.
    steal: Vec<u64>,
    /// The process's CPU time outside the loops and the endpoint, per
    /// loop ([`shared_cpu_ns`]).
    share: u64,
}

impl CpuUsage {
    /// The counters now, at the start of the run.
    fn start(cpus: &[usize]) -> CpuUsage {
        let steal = state::steal_ns(cpus);
        let process = process_cpu_ns();
        let endpoint = crate::metrics::endpoint_cpu_ns();
        CpuUsage {
            steal,
            process,
            endpoint,
        }
    }

    /// What was used since the last group (`own`: each loop's own CPU
    /// time in it), and the counters now.
    fn take(&mut self, cpus: &[usize], own: impl Iterator<Item = u64>) -> Cost {
        let steal_now = state::steal_ns(cpus);
        // The endpoint's counter first: what it adds after the process's
        // reading is left for the next interval, never subtracted twice.
        let endpoint_now = crate::metrics::endpoint_cpu_ns();
        let process_now = process_cpu_ns();
        let share = shared_cpu_ns(
            process_now.saturating_sub(self.process),
            endpoint_now.saturating_sub(self.endpoint),
            own,
        );
        let steal = steal_now
            .iter()
            .zip(&self.steal)
            .map(|(now, prev)| now.saturating_sub(*prev))
            .collect();
        *self = CpuUsage {
            steal: steal_now,
            process: process_now,
            endpoint: endpoint_now,
        };
        Cost { steal, share }
    }
}

/// The writer's state from interval to interval.
pub(super) struct Writer<'a> {
    config: &'a Config,
    cpus: &'a [usize],
    grid: Grid,
    store: Store,
    run_id: i64,
    totals: Option<Arc<Mutex<Totals>>>,
    machine: MachineFacts,
    /// How long before an interval starts its buffers are handed out.
    lead: u64,
    /// Buffers for intervals up to this one are out.
    prepared: u64,
    usage: CpuUsage,
    /// The last interval an over-budget notice was given for.
    budget_noticed: Option<u64>,
    stored: u64,
    db_error: Option<Error>,
}

/// Where the writer stores and counts: the run's row in the database and
/// the metrics' totals.
pub(super) struct Sink {
    /// The database.
    pub(super) store: Store,
    /// The run's id in it.
    pub(super) run_id: i64,
    /// The metrics endpoint's totals, if served.
    pub(super) totals: Option<Arc<Mutex<Totals>>>,
}

impl<'a> Writer<'a> {
    /// Ready for interval 0 (whose buffers the threads started with).
    pub(super) fn new(
        config: &'a Config,
        cpus: &'a [usize],
        grid: Grid,
        sink: Sink,
        machine: MachineFacts,
    ) -> Writer<'a> {
        Writer {
            config,
            cpus,
            grid,
            store: sink.store,
            run_id: sink.run_id,
            totals: sink.totals,
            machine,
            lead: (config.interval_ns / 2).min(3_000_000_000),
            prepared: 0,
            usage: CpuUsage::start(cpus),
            budget_noticed: None,
            stored: 0,
            db_error: None,
        }
    }

    /// Shortly before the next interval starts (`lead` ahead), starts its
    /// explaining session and hands each thread an emptied buffer bound
    /// to it. Not while a lane has no spare: its loop keeps recording into
    /// the current buffer (merged), nothing is lost.
    pub(super) fn hand_out_next(
        &mut self,
        lanes: &mut Lanes,
        trace: &mut Explaining,
        events: &mut dyn FnMut(Event),
    ) {
        let now = monotonic_ns();
        // A buffer handed out now is taken at the next boundary: it holds
        // the interval after the one under way, whatever was prepared
        // before. After the writer fell behind (the threads then recorded
        // on into their buffers, merged), counting from the last one
        // prepared would bind every later buffer and session to the
        // interval before the one it records, for the rest of the run.
        let next = (self.prepared + 1).max(self.grid.interval_at(now) + 1);
        if lanes.all_ended()
            || now + self.lead < self.grid.interval_start(next)
            || !lanes.have_spares()
        {
            return;
        }
        trace.start_next(next, lanes.len(), events);
        lanes.hand_out(next, |cpu| trace.notes(next, cpu));
        self.prepared = next;
    }

    /// Writes one interval group: the causes of its worst wake-ups, what
    /// watch used of the CPUs, the rows, the budget notice, the store and
    /// the metrics; then its buffers go back to their lanes.
    pub(super) fn write(
        &mut self,
        group: Group,
        lanes: &mut Lanes,
        trace: &mut Explaining,
        stop: &AtomicBool,
        events: &mut dyn FnMut(Event),
    ) {
        let found = trace.attribute(&group, lanes, &self.grid, events);
        let own = group.buffers.iter().map(|(_, b)| b.own_cpu_ns);
        let cost = self.usage.take(self.cpus, own);
        let rows = self.rows(&group, lanes, found, &cost);
        self.check_budget(group.seq, &rows, events);
        self.store(rows, stop, events);
        lanes.give_back(group);
        // What the interval's attribution and store allocated and freed,
        // glibc keeps for later, and mlockall keeps resident: give the free
        // pages back (issue 31 item 2). No measuring thread allocates, so
        // the arena's lock taken here delays none of them.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
    }

    /// One row per buffer of the group: its figures, its worst wake-ups
    /// (with the trace's causes where it found them), steal and the CPU
    /// time watch used.
    fn rows(&self, group: &Group, lanes: &Lanes, found: Found, cost: &Cost) -> Vec<CpuInterval> {
        let Found {
            mut causes,
            explained,
            lost,
        } = found;
        let (grid, period_ns) = (&self.grid, self.config.period_ns);
        let mut rows = Vec::with_capacity(group.buffers.len());
        for (k, (i, b)) in group.buffers.iter().enumerate() {
            let wakeups = b
                .notes
                .sorted()
                .into_iter()
                .map(|n| {
                    causes.remove(&(k, n.index)).unwrap_or(Wakeup {
                        deadline_unix_ns: grid.unix_of(n.deadline_ns),
                        latency_ns: n.latency_ns,
                        missed: n.missed,
                        ..Wakeup::default()
                    })
                })
                .collect();
            let (_, end_mono) = grid.span(b);
            rows.push(CpuInterval {
                seq: b.seq,
                cpu: lanes.lane(*i).cpu,
                start_unix_ns: grid.unix_of(grid.t0 + b.first_index * period_ns),
                end_unix_ns: grid.unix_of(end_mono),
                period_ns,
                count: b.count,
                missed: b.missed,
                min_ns: (b.count > 0).then_some(b.min_ns),
                max_ns: (b.count > 0).then_some(b.max_ns),
                mean_ns: (b.count > 0).then(|| b.sum_ns as f64 / b.count as f64),
                p99_ns: b.hist.quantile(0.99, b.max_ns),
                p999_ns: b.hist.quantile(0.999, b.max_ns),
                steal_ns: cost.steal[*i],
                partial: b.partial,
                merged: b.merged,
                explained: explained[k],
                histogram: b.hist.sparse(),
                wakeups,
                watch_cpu_ns: Some(b.own_cpu_ns + cost.share),
                trace_lost_events: lost[k],
            });
        }
        rows
    }

    /// Over budget ([`over_budget`]): a notice at the first such interval,
    /// then at most once an hour.
    fn check_budget(&mut self, seq: u64, rows: &[CpuInterval], events: &mut dyn FnMut(Event)) {
        let hour = 3_600_000_000_000u64.div_ceil(self.config.interval_ns);
        if self.budget_noticed.map_or(true, |s| seq >= s + hour) {
            if let Some(n) = over_budget(rows, self.config) {
                events(Event::Notice(n));
                self.budget_noticed = Some(seq);
            }
        }
    }

    /// Stores the rows with the machine's state in one transaction, counts
    /// them in the metrics, hands them to the caller and prunes what the
    /// retention and the size cap say. A database error stops the
    /// measuring (what cannot be stored must not pile up) and ends the run.
    fn store(
        &mut self,
        mut rows: Vec<CpuInterval>,
        stop: &AtomicBool,
        events: &mut dyn FnMut(Event),
    ) {
        let st: MachineState = state::read(self.cpus, &self.machine.preempt0, &self.machine.virt);
        match self
            .store
            .store_interval(self.run_id, unix_now_ns(), &st, &mut rows)
        {
            Ok(_) => {
                self.stored += 1;
                self.count_in_metrics(&rows);
                events(Event::Stored(rows));
                self.prune(events);
            }
            Err(e) => {
                stop.store(true, Ordering::SeqCst);
                self.db_error.get_or_insert(e);
            }
        }
    }

    /// Adds the stored rows to the metrics' totals.
    fn count_in_metrics(&self, rows: &[CpuInterval]) {
        if let Some(t) = &self.totals {
            let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
            for r in rows {
                t.add(r);
            }
        }
    }

    /// Deletes and rolls up what the retention and the size cap say, with
    /// a notice of what the cap did.
    fn prune(&mut self, events: &mut dyn FnMut(Event)) {
        match self.store.maintain(unix_now_ns(), &self.config.retention()) {
            Ok(m) => {
                if m.deleted > 0 {
                    events(Event::Pruned(m.deleted));
                }
                if m.cap_rolled + m.cap_dropped > 0 {
                    events(Event::Notice(cap_notice(&m, self.config)));
                }
            }
            Err(e) => events(Event::Notice(format!("pruning failed: {}", e.message()))),
        }
    }

    /// Ends the run in the database with its reason (the database error,
    /// the sleeper's failure, stopped, or the duration reached).
    ///
    /// # Errors
    /// The database error that ended the run (intervals already stored stay).
    pub(super) fn end(mut self, failed: Option<Errno>, stopped: bool) -> Result<Summary> {
        let reason = match (&self.db_error, failed, stopped) {
            (Some(e), _, _) => format!("database error: {}", e.message()),
            (None, Some(e), _) => format!("the sleeper failed: {e}"),
            (None, None, true) => "stopped".to_string(),
            (None, None, false) => "duration reached".to_string(),
        };
        let _ = self.store.end_run(self.run_id, unix_now_ns(), &reason);
        if let Some(e) = self.db_error.take() {
            return Err(e);
        }
        Ok(Summary {
            run_id: self.run_id,
            intervals: self.stored,
            stopped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_under_way_is_counted_from_the_grid() {
        let g = Grid {
            t0: 1_000,
            offset: 0,
            period_ns: 10,
            interval_ns: 100,
        };
        assert_eq!(g.interval_at(0), 0, "before the first");
        assert_eq!(g.interval_at(1_000), 0);
        assert_eq!(g.interval_at(1_099), 0);
        assert_eq!(g.interval_at(1_100), 1);
        assert_eq!(g.interval_at(1_000 + 100 * 57 + 3), 57);
        assert_eq!(g.interval_start(g.interval_at(5_432) + 1), 5_500);
    }
}
