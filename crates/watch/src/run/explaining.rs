//! `watch`'s side of the explaining trace: one session per interval
//! ([`explain::Rotation`], in the storage of an earlier one), the notes
//! each buffer flags into its interval's session, and the causes of an
//! interval's worst wake-ups once every buffer bound to its session is
//! back.

use super::lanes::{Group, Lanes};
use super::{interval_lost, stored_cause, Config, Event, Grid};
use crate::error::{Error, Result};
use crate::store::Wakeup;
use firmtime_rt::outliers::Notes;
use firmtime_trace::explain;
use std::collections::{BTreeMap, BTreeSet};

/// The explaining session of each interval: `watch`'s kind.
fn session_config(worst: usize, cpus: &[usize], housekeeping: &[usize]) -> explain::Config {
    explain::Config {
        worst,
        // Only the watched CPUs' events are written (`tracing_cpumask`).
        cpus: Some(cpus.to_vec()),
        // The first session's ring buffers from a 200 ms probe of the
        // rate, each later one's from the rate its predecessor measured
        // (`explain::Rotation`); `buffer_kb` is the least.
        size_from_rate: true,
        // With the writer and the metrics endpoint (`--housekeeping-cpu`).
        drainer_cpus: Some(housekeeping.to_vec()),
        // Windows are short (a few periods); a modest store per interval
        // (~3.4 MB) and the least pending queues (32,768 events a CPU,
        // 300 ms at ~100,000 events/s; more is a counted hole, never a
        // guess): RSS <= 40 MB with two sessions live (issue 31 item 2).
        max_events: 50_000,
        pending_events: 0,
        // The windows its threads flag: the worst few so far, the missed
        // deadlines (more are counted as flags lost).
        max_windows: 16_384,
        buffer_kb: 1024,
        // Its threads wake only by their own timer.
        woken_by: explain::WokenBy::OwnTimer,
        // A quiet machine's buffers fill slowly: one pass a second then,
        // not fifty (the drainer's wake-ups were most of the trace's cost).
        drain_interval_max_ns: 1_000_000_000,
        ..explain::Config::default()
    }
}

/// Sessions live at once: the one of the interval being measured and the
/// one of the interval before it, still being read. A third would decode
/// the same events again while the writer is behind (and hold a storage
/// more); its interval goes unexplained instead, with a notice.
const MAX_LIVE_SESSIONS: usize = 2;

/// What the trace said of one group, by buffer (its place in the group).
pub(super) struct Found {
    /// The stored causes of the explained wake-ups, by `(buffer, index)`.
    pub(super) causes: BTreeMap<(usize, u64), Wakeup>,
    /// Whether the buffer's session was attributed.
    pub(super) explained: Vec<bool>,
    /// Events the kernel lost in the buffer's interval (attributed only).
    pub(super) lost: Vec<Option<u64>>,
}

/// The explaining trace of a run (when it runs).
pub(super) struct Explaining {
    rotation: explain::Rotation,
    tracing: bool,
    worst: usize,
    period_ns: u64,
    lookback_ns: u64,
    top: usize,
    machine: explain::Machine,
}

impl Explaining {
    /// No session yet; `tracing`: whether `--explain` decided to run.
    pub(super) fn new(config: &Config, tracing: bool, housekeeping: &[usize]) -> Explaining {
        let per_interval = config.interval_ns / config.period_ns;
        Explaining {
            rotation: explain::Rotation::new(
                session_config(config.worst, &config.selected_cpus(), housekeeping),
                "firmtime-watch*",
            ),
            tracing,
            worst: config.worst,
            period_ns: config.period_ns,
            lookback_ns: explain::lookback_ns(config.period_ns),
            top: explain::flag_top(per_interval, config.worst),
            machine: explain::this_machine(),
        }
    }

    /// Starts interval 0's session, bound to `buffers` (before the threads
    /// start).
    ///
    /// # Errors
    /// When the trace does not start: the run does not either.
    pub(super) fn start_first(&mut self, buffers: usize) -> Result<()> {
        if self.tracing {
            self.rotation.start(0, buffers)?;
        }
        Ok(())
    }

    /// Starts interval `tag`'s session, bound to `buffers`; one that does
    /// not start is a notice, and its interval goes unexplained.
    pub(super) fn start_next(&mut self, tag: u64, buffers: usize, events: &mut dyn FnMut(Event)) {
        if !self.tracing {
            return;
        }
        let before = self.rotation.buffer_kb();
        match self.rotation.start_bounded(tag, buffers, MAX_LIVE_SESSIONS) {
            Ok(true) => {}
            Ok(false) => {
                events(Event::Notice(format!(
                    "interval {tag}: not explained: the traces of intervals {} are still being \
                     read (this machine writes trace events faster than watch decodes them)",
                    self.rotation
                        .live()
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" and ")
                )));
                return;
            }
            Err(e) => {
                events(Event::Notice(format!(
                    "interval {tag}: the explaining trace did not start: {}",
                    Error::from(e).message()
                )));
                return;
            }
        }
        let after = self.rotation.buffer_kb();
        if let (Some(a), Some(b)) = (before, after) {
            if a != b {
                events(Event::Notice(format!(
                    "interval {tag}: the explaining trace's ring buffers {a} → {b} KiB a CPU \
                     (sized from the event rate of the interval before)"
                )));
            }
        }
    }

    /// The notes of a buffer of interval `tag` on `cpu`: flagging into its
    /// session where one runs.
    pub(super) fn notes(&self, tag: u64, cpu: usize) -> Notes {
        match self.rotation.flags(tag) {
            Some(flags) => {
                Notes::flagging(self.worst, flags, cpu, self.lookback_ns).flag_only(self.top, None)
            }
            None => Notes::new(self.worst),
        }
    }

    /// The causes of the group's worst wake-ups: each buffer is handed
    /// back to its session, and each session whose buffers are all back
    /// is finished and attributed with those buffers (a failed one is a
    /// notice). Sessions of intervals before the group's that still wait
    /// for a merged buffer are dropped: their intervals go unexplained.
    pub(super) fn attribute(
        &mut self,
        group: &Group,
        lanes: &Lanes,
        grid: &Grid,
        events: &mut dyn FnMut(Event),
    ) -> Found {
        let n = group.buffers.len();
        let mut found = Found {
            causes: BTreeMap::new(),
            explained: vec![false; n],
            lost: vec![None; n],
        };
        for (_, b) in &group.buffers {
            self.rotation.hand_in(b.tag);
        }
        let tags: BTreeSet<u64> = group.buffers.iter().map(|(_, b)| b.tag).collect();
        for tag in tags {
            match self.rotation.take_done(tag) {
                None => {}
                Some(Ok(rec)) => self.explain(rec, tag, group, lanes, grid, &mut found),
                Some(Err(e)) => events(Event::Notice(format!(
                    "interval {}: the explaining trace failed: {}",
                    group.seq,
                    e.message()
                ))),
            }
        }
        self.rotation.drop_before(group.seq);
        found
    }

    /// Attributes the wake-ups the group's buffers bound to `tag` noted
    /// from that session's record, and counts the events the kernel lost
    /// in each buffer's interval.
    fn explain(
        &self,
        rec: explain::Recorded,
        tag: u64,
        group: &Group,
        lanes: &Lanes,
        grid: &Grid,
        found: &mut Found,
    ) {
        let targets: Vec<explain::Target> = group
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, (_, b))| b.tag == tag)
            .map(|(k, (i, b))| {
                let lane = lanes.lane(*i);
                let max = b.max_ns.max(0);
                explain::Target {
                    thread: k,
                    cpu: lane.cpu,
                    tid: lane.tid,
                    period_ns: self.period_ns,
                    slack_ns: lane.slack_ns,
                    threshold_ns: b.hist.quantile(0.999, max).unwrap_or(0),
                    notes: b.notes.sorted(),
                    missing_not_kept: b.notes.missing_not_kept(),
                    missed: b.missed,
                }
            })
            .collect();
        for tg in &targets {
            found.explained[tg.thread] = true;
            let (a, z) = grid.span(&group.buffers[tg.thread].1);
            found.lost[tg.thread] = Some(interval_lost(
                &rec.losses,
                tg.cpu,
                a.saturating_sub(self.lookback_ns),
                z,
            ));
        }
        let ex = explain::explain(rec, &targets, &self.machine);
        for o in &ex.outliers {
            found.causes.insert(
                (o.thread, o.index),
                stored_cause(
                    &o.cause,
                    grid.unix_of(o.deadline_ns),
                    o.latency_ns,
                    o.missed,
                ),
            );
        }
    }
}
