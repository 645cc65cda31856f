//! The measuring threads of `watch` ([`WatchLoop`], one per CPU) and the
//! writer's end of their rings: starting them behind two barriers (all set
//! up, then all started on one grid), handing out and collecting their
//! buffers, grouping what they handed over by interval, and joining them.

use super::{unix_now_ns, Config, Grid, THREAD_STACK};
use crate::error::{Error, ErrorKind, Result};
use crate::interval::{rings, Interval, LoopEnd, WatchLoop};
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::outliers::Notes;
use firmtime_rt::periodic::Periodic;
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::sleep::{self, Mechanism};
use firmtime_rt::Errno;
use rtrb::{Consumer, Producer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;

/// What a thread reports once set up: its lane and the conditions it
/// obtained, or why it was refused.
type SetUp = (usize, Result<RtConditions>);

/// One measuring thread seen from the writer: its buffers, its rings and
/// what it handed over, by interval.
pub(super) struct Lane {
    /// The CPU it is pinned to.
    pub(super) cpu: usize,
    /// Its thread id (once set up).
    pub(super) tid: i32,
    /// Its timer slack, ns (once set up).
    pub(super) slack_ns: u64,
    free: Producer<Box<Interval>>,
    full: Consumer<Box<Interval>>,
    // Boxed: the buffers travel through the rings as pointers.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Interval>>,
    /// Buffers handed over, by interval, until their group is written.
    pending: BTreeMap<u64, Box<Interval>>,
    ended: Arc<AtomicBool>,
}

impl Lane {
    /// Whether its thread has ended.
    fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Ended, and every buffer it handed over collected.
    fn drained(&self) -> bool {
        self.ended() && self.full.is_empty()
    }

    /// Whether it delivered interval `seq` or a later one.
    fn reached(&self, seq: u64) -> bool {
        self.pending.range(seq..).next().is_some()
    }
}

/// One interval's buffers: one per lane that delivered it, as
/// `(lane, buffer)` (a lane whose thread ended early has none).
pub(super) struct Group {
    /// The interval.
    pub(super) seq: u64,
    /// The buffers, in lane order.
    pub(super) buffers: Vec<(usize, Box<Interval>)>,
}

/// Everything one measuring thread takes with it.
struct Measurer {
    lane: usize,
    lp: WatchLoop,
    req: RtRequest,
    period_ns: u64,
    deadlines: u64,
    stop: &'static AtomicBool,
    set_up: Sender<SetUp>,
    barrier: Arc<Barrier>,
    start_at: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
}

impl Measurer {
    /// The thread's body: takes its real-time conditions (or reports the
    /// refusal), waits at the first barrier for all to be set up and at
    /// the second for the grid's start (0: the run was aborted), then runs
    /// the loop ([`WatchLoop::run`], RT: no allocation) until the
    /// deadlines are done or `stop` is set.
    fn run(mut self) -> LoopEnd {
        let setup = setup::apply(&self.req).map_err(Error::from).and_then(|rt| {
            let sl = sleep::open(Mechanism::ClockNanosleep)?;
            Ok((rt, sl))
        });
        let (rt, mut sleeper) = match setup {
            Ok(v) => v,
            Err(e) => {
                let _ = self.set_up.send((self.lane, Err(e)));
                self.barrier.wait();
                self.barrier.wait();
                self.ended.store(true, Ordering::SeqCst);
                return LoopEnd::Stopped;
            }
        };
        let _ = self.set_up.send((self.lane, Ok(rt.conditions.clone())));
        self.barrier.wait(); // all set up
        self.barrier.wait(); // start time published (0: abort)
        let t0 = self.start_at.load(Ordering::SeqCst);
        if t0 == 0 {
            self.ended.store(true, Ordering::SeqCst);
            return LoopEnd::Stopped;
        }
        let mut p = Periodic::new(t0, self.period_ns);
        let (lp, deadlines, stop) = (&mut self.lp, self.deadlines, self.stop);
        let end =
            firmtime_rt::assert_rt::no_alloc(|| lp.run(&mut *sleeper, &mut p, deadlines, stop));
        self.ended.store(true, Ordering::SeqCst);
        end
    }
}

/// The measuring threads and their lanes.
pub(super) struct Lanes {
    lanes: Vec<Lane>,
    handles: Vec<JoinHandle<LoopEnd>>,
    barrier: Arc<Barrier>,
    start_at: Arc<AtomicU64>,
    set_up: Receiver<SetUp>,
    /// The next interval to group.
    next_seq: u64,
}

impl Lanes {
    /// Starts one measuring thread per CPU of `cpus` (pinned, memory
    /// locked, `config`'s policy, never downgraded), each with its first
    /// buffer (interval 0, notes from `notes(cpu)`) and three spares; they
    /// wait at the first barrier ([`Lanes::set_up`]).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] when a thread cannot be started.
    pub(super) fn spawn(
        config: &Config,
        cpus: &[usize],
        notes: impl Fn(usize) -> Notes,
        stop: &'static AtomicBool,
    ) -> Result<Lanes> {
        let per_interval = config.interval_ns / config.period_ns;
        let start_at = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(Barrier::new(cpus.len() + 1));
        let (tx, set_up) = std::sync::mpsc::channel::<SetUp>();
        let mut lanes = Vec::new();
        let mut handles = Vec::new();
        for (i, &cpu) in cpus.iter().enumerate() {
            let (fp, fc, up, uc) = rings(4);
            let mut first = Box::new(Interval::new(config.worst));
            first.notes = notes(cpu);
            first.tag = 0;
            let spare = (0..3)
                .map(|_| Box::new(Interval::new(config.worst)))
                .collect();
            let ended = Arc::new(AtomicBool::new(false));
            lanes.push(Lane {
                cpu,
                tid: 0,
                slack_ns: 0,
                free: fp,
                full: uc,
                spare,
                pending: BTreeMap::new(),
                ended: Arc::clone(&ended),
            });
            let m = Measurer {
                lane: i,
                lp: WatchLoop::new(first, fc, up, per_interval),
                req: RtRequest {
                    policy: config.policy,
                    mlock: true,
                    prefault_stack: 256 * 1024,
                    cpus: Some(vec![cpu]),
                    dma_latency_us: config.dma_latency_us,
                    timer_slack_ns: None,
                    allow_downgrade: false,
                },
                period_ns: config.period_ns,
                deadlines: config.deadlines(),
                stop,
                set_up: tx.clone(),
                barrier: Arc::clone(&barrier),
                start_at: Arc::clone(&start_at),
                ended,
            };
            let h = std::thread::Builder::new()
                .name(format!("firmtime-watch-{cpu}"))
                .stack_size(THREAD_STACK)
                .spawn(move || m.run())
                .map_err(|e| {
                    Error::new(ErrorKind::Io, format!("cannot start a watch thread: {e}"))
                })?;
            handles.push(h);
        }
        drop(tx);
        Ok(Lanes {
            lanes,
            handles,
            barrier,
            start_at,
            set_up,
            next_seq: 0,
        })
    }

    /// Waits until every thread is set up (the first barrier) and returns
    /// the conditions each obtained, by CPU; notes each thread's id and
    /// timer slack.
    ///
    /// # Errors
    /// [`ErrorKind::Realtime`] naming the CPU when a thread's policy or
    /// memory locking was refused: every thread is then let go and joined.
    pub(super) fn set_up(&mut self) -> Result<Vec<(usize, RtConditions)>> {
        self.barrier.wait();
        let mut conditions: Vec<(usize, RtConditions)> = Vec::new();
        let mut refused: Option<Error> = None;
        for (i, r) in self.set_up.iter().take(self.lanes.len()) {
            let lane = &mut self.lanes[i];
            match r {
                Ok(c) => {
                    lane.tid = c.obtained.tid;
                    lane.slack_ns = c.obtained.timer_slack_ns;
                    conditions.push((lane.cpu, c));
                }
                Err(e) => {
                    refused.get_or_insert(Error::new(
                        ErrorKind::Realtime,
                        format!("CPU {}: {}", lane.cpu, e.message()),
                    ));
                }
            }
        }
        conditions.sort_by_key(|(c, _)| *c);
        if let Some(e) = refused {
            self.barrier.wait();
            for h in self.handles.drain(..) {
                let _ = h.join();
            }
            return Err(e);
        }
        Ok(conditions)
    }

    /// Starts the threads (the second barrier) on a grid that begins at
    /// the next whole period; its Unix time is fixed here once
    /// (CLOCK_MONOTONIC → Unix offset).
    pub(super) fn start(&self, config: &Config) -> Grid {
        let t0 = monotonic_ns() + config.period_ns;
        let offset = unix_now_ns() - monotonic_ns() as i64;
        self.start_at.store(t0, Ordering::SeqCst);
        self.barrier.wait();
        Grid {
            t0,
            offset,
            period_ns: config.period_ns,
            interval_ns: config.interval_ns,
        }
    }

    /// The lanes, one per watched CPU.
    pub(super) fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Lane `i`.
    pub(super) fn lane(&self, i: usize) -> &Lane {
        &self.lanes[i]
    }

    /// Whether every thread has ended.
    pub(super) fn all_ended(&self) -> bool {
        self.lanes.iter().all(Lane::ended)
    }

    /// Whether every lane has a buffer to hand out.
    pub(super) fn have_spares(&self) -> bool {
        self.lanes.iter().all(|l| !l.spare.is_empty())
    }

    /// Hands each thread an emptied buffer bound to interval `tag`, its
    /// notes from `notes(cpu)` (a full ring keeps it spare).
    pub(super) fn hand_out(&mut self, tag: u64, notes: impl Fn(usize) -> Notes) {
        for l in self.lanes.iter_mut() {
            if let Some(mut b) = l.spare.pop() {
                b.clear();
                b.notes = notes(l.cpu);
                b.tag = tag;
                if let Err(rtrb::PushError::Full(b)) = l.free.push(b) {
                    l.spare.push(b);
                }
            }
        }
    }

    /// Collects what the threads handed over.
    pub(super) fn collect(&mut self) {
        for l in self.lanes.iter_mut() {
            while let Ok(b) = l.full.pop() {
                l.pending.insert(b.seq, b);
            }
        }
    }

    /// The next interval's group, once every lane has delivered it or
    /// moved past it (or ended with nothing left to collect); an interval
    /// no lane delivered (merged into a later buffer) is skipped. `None`
    /// until then.
    pub(super) fn next_group(&mut self) -> Option<Group> {
        loop {
            let seq = self.next_seq;
            let ready = self.lanes.iter().all(|l| l.reached(seq) || l.drained());
            if !ready {
                return None;
            }
            if !self.lanes.iter().any(|l| l.pending.contains_key(&seq)) {
                if self.lanes.iter().all(|l| l.drained() && !l.reached(seq)) {
                    return None;
                }
                self.next_seq += 1;
                continue;
            }
            let buffers = self
                .lanes
                .iter_mut()
                .enumerate()
                .filter_map(|(i, l)| l.pending.remove(&seq).map(|b| (i, b)))
                .collect();
            self.next_seq += 1;
            return Some(Group { seq, buffers });
        }
    }

    /// The group's buffers back to their lanes' spares.
    pub(super) fn give_back(&mut self, group: Group) {
        for (i, b) in group.buffers {
            self.lanes[i].spare.push(b);
        }
    }

    /// Whether every thread ended and everything it handed over was
    /// written: the writer's loop is over.
    pub(super) fn drained(&self) -> bool {
        self.lanes
            .iter()
            .all(|l| l.drained() && l.pending.is_empty())
    }

    /// Joins the threads: the error of the (last) one whose sleeper failed.
    pub(super) fn join(self) -> Option<Errno> {
        let mut failed = None;
        for h in self.handles {
            if let Ok(LoopEnd::Failed(e)) = h.join() {
                failed = Some(e);
            }
        }
        failed
    }
}
