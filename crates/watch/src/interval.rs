//! The RT side of `watch`: one periodic loop per CPU that records each
//! wake-up into the buffer of the current interval and, at each interval
//! boundary, hands the full buffer to the writer and takes an empty one.
//!
//! Buffers travel between the loop and the writer through two SPSC rings
//! (rtrb): `free` (writer → loop: cleared buffers, their notes set up for
//! the next interval) and `full` (loop → writer). A buffer is a `Box`, so
//! a swap moves a pointer.
//!
//! # RT contract
//! [`WatchLoop::run`] is **RT-safe**: it waits for the next deadline,
//! records into the preallocated [`Interval`], and at a boundary pops and
//! pushes boxes through rings allocated before the loop. It never
//! allocates, locks or prints. When the writer is late and no empty buffer
//! is waiting, the loop keeps recording into the current one: that
//! interval then spans several (its `merged` count says how many), nothing
//! is lost.

use crate::hist::Hist;
use firmtime_rt::outliers::Notes;
use firmtime_rt::periodic::{Periodic, Tick};
use firmtime_rt::sleep::Sleeper;
use firmtime_rt::Errno;
use rtrb::{Consumer, Producer};
use std::sync::atomic::{AtomicBool, Ordering};

/// What one loop measured in one interval, in storage allocated up front.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Interval number: deadlines `seq·n … (seq + 1)·n − 1` of the grid.
    pub seq: u64,
    /// Boundaries passed without a free buffer: this buffer holds that many
    /// more intervals than one.
    pub merged: u64,
    /// First deadline of the interval (grid index).
    pub first_index: u64,
    /// Wake-ups measured.
    pub count: u64,
    /// Deadlines that passed while the thread was late.
    pub missed: u64,
    /// Smallest latency, ns (`i64::MAX` when empty).
    pub min_ns: i64,
    /// Largest latency, ns (`i64::MIN` when empty).
    pub max_ns: i64,
    /// Sum of latencies, ns.
    pub sum_ns: i64,
    /// CLOCK_MONOTONIC ns of the last wake-up.
    pub last_wake_ns: u64,
    /// True for the last, cut-short interval of a run that was stopped.
    pub partial: bool,
    /// The writer's tag: which explaining session the notes flag into.
    pub tag: u64,
    /// The latency histogram.
    pub hist: Hist,
    /// The worst wake-ups (and, with the explaining trace, their windows flagged).
    pub notes: Notes,
    /// The loop thread's own CPU time (CLOCK_THREAD_CPUTIME_ID) when this
    /// buffer became current, ns.
    pub cpu_start_ns: u64,
    /// The loop thread's CPU time while this buffer was current, ns (set
    /// when it is handed over).
    pub own_cpu_ns: u64,
}

impl Interval {
    /// An empty buffer keeping the worst `worst` wake-ups.
    pub fn new(worst: usize) -> Interval {
        Interval {
            seq: 0,
            merged: 0,
            first_index: 0,
            count: 0,
            missed: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            sum_ns: 0,
            last_wake_ns: 0,
            partial: false,
            tag: 0,
            hist: Hist::new(),
            notes: Notes::new(worst),
            cpu_start_ns: 0,
            own_cpu_ns: 0,
        }
    }

    /// Empties the buffer for reuse (the caller sets new notes).
    pub fn clear(&mut self) {
        self.seq = 0;
        self.merged = 0;
        self.first_index = 0;
        self.count = 0;
        self.missed = 0;
        self.min_ns = i64::MAX;
        self.max_ns = i64::MIN;
        self.sum_ns = 0;
        self.last_wake_ns = 0;
        self.partial = false;
        self.tag = 0;
        self.cpu_start_ns = 0;
        self.own_cpu_ns = 0;
        self.hist.clear();
    }

    /// Records one wake-up. **RT-safe.**
    #[inline]
    pub fn record(&mut self, t: &Tick) {
        let l = t.latency_ns;
        self.count += 1;
        self.missed += t.missed;
        self.min_ns = self.min_ns.min(l);
        self.max_ns = self.max_ns.max(l);
        self.sum_ns = self.sum_ns.saturating_add(l);
        self.last_wake_ns = t.wake_ns;
        self.hist.record(l);
        self.notes.offer(t);
    }
}

/// Why [`WatchLoop::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// The run's deadlines are done.
    Done,
    /// The stop flag was set.
    Stopped,
    /// The sleeper failed.
    Failed(Errno),
}

/// One CPU's loop: the current buffer and the two rings.
#[derive(Debug)]
pub struct WatchLoop {
    cur: Option<Box<Interval>>,
    free: Consumer<Box<Interval>>,
    full: Producer<Box<Interval>>,
    per_interval: u64,
    /// Buffers the loop could not hand over (ring full): never expected,
    /// counted.
    pub handover_failed: u64,
}

impl WatchLoop {
    /// A loop starting with buffer `first` (interval 0), swapping every
    /// `per_interval` deadlines.
    pub fn new(
        mut first: Box<Interval>,
        free: Consumer<Box<Interval>>,
        full: Producer<Box<Interval>>,
        per_interval: u64,
    ) -> WatchLoop {
        first.seq = 0;
        first.first_index = 0;
        WatchLoop {
            cur: Some(first),
            free,
            full,
            per_interval: per_interval.max(1),
            handover_failed: 0,
        }
    }

    /// Hands the current buffer to the writer if an empty one is waiting
    /// (or `last`: then without taking one). **RT-safe.**
    #[inline]
    fn swap(&mut self, next_index: u64, last: bool) {
        if self.full.slots() == 0 {
            if let Some(c) = self.cur.as_mut() {
                c.merged += 1;
            }
            return;
        }
        // One clock_gettime per boundary (a syscall, no allocation).
        let cpu_now = thread_cpu_ns();
        let fresh = if last {
            None
        } else {
            match self.free.pop() {
                Ok(mut f) => {
                    f.seq = next_index / self.per_interval;
                    f.first_index = next_index;
                    f.cpu_start_ns = cpu_now;
                    Some(f)
                }
                Err(_) => {
                    if let Some(c) = self.cur.as_mut() {
                        c.merged += 1;
                    }
                    return;
                }
            }
        };
        if let Some(mut done) = std::mem::replace(&mut self.cur, fresh) {
            done.own_cpu_ns = cpu_now.saturating_sub(done.cpu_start_ns);
            if let Err(rtrb::PushError::Full(back)) = self.full.push(done) {
                // Not reached (slots checked above); keep the data.
                self.handover_failed += 1;
                if self.cur.is_none() {
                    self.cur = Some(back);
                } else {
                    std::mem::forget(back);
                }
            }
        }
    }

    /// Waits for the deadlines of `periodic` until index `deadlines`
    /// (`u64::MAX`: until stopped) or `stop`, recording each wake-up into
    /// the current interval and swapping buffers at each boundary; the
    /// last buffer is handed over marked partial. **RT-safe.**
    pub fn run<S: Sleeper + ?Sized>(
        &mut self,
        sleeper: &mut S,
        periodic: &mut Periodic,
        deadlines: u64,
        stop: &AtomicBool,
    ) -> LoopEnd {
        let mut boundary = self.per_interval;
        if let Some(c) = self.cur.as_mut() {
            c.cpu_start_ns = thread_cpu_ns();
        }
        let end = loop {
            if periodic.next_index() >= deadlines {
                break LoopEnd::Done;
            }
            if stop.load(Ordering::Relaxed) {
                break LoopEnd::Stopped;
            }
            let Some(cur) = self.cur.as_mut() else {
                break LoopEnd::Stopped;
            };
            cur.notes.sleeping_until(periodic.next_deadline_ns());
            match periodic.wait(sleeper) {
                Ok(tick) => cur.record(&tick),
                Err(e) => break LoopEnd::Failed(e),
            }
            let next = periodic.next_index();
            if next >= boundary && next < deadlines {
                self.swap(next, false);
                boundary = (next / self.per_interval + 1) * self.per_interval;
            }
        };
        if let Some(c) = self.cur.as_mut() {
            c.notes.done();
            c.partial = end != LoopEnd::Done || periodic.next_index() % self.per_interval != 0;
        }
        self.swap(periodic.next_index(), true);
        end
    }
}

/// The calling thread's CPU time, ns. **RT-safe** (one syscall).
#[inline]
fn thread_cpu_ns() -> u64 {
    firmtime_rt::clock::read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Rings for one loop: `(free producer, free consumer, full producer, full
/// consumer)`, each holding `slots` buffers.
#[allow(clippy::type_complexity)]
pub fn rings(
    slots: usize,
) -> (
    Producer<Box<Interval>>,
    Consumer<Box<Interval>>,
    Producer<Box<Interval>>,
    Consumer<Box<Interval>>,
) {
    let (fp, fc) = rtrb::RingBuffer::new(slots);
    let (up, uc) = rtrb::RingBuffer::new(slots);
    (fp, fc, up, uc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleeper that "wakes" at given offsets after each deadline.
    struct Scripted {
        lates: Vec<u64>,
        i: usize,
    }

    impl Sleeper for Scripted {
        fn sleep_until(&mut self, deadline_ns: u64) -> Result<u64, Errno> {
            let l = self.lates[self.i % self.lates.len()];
            self.i += 1;
            Ok(deadline_ns + l)
        }
        fn mechanism(&self) -> firmtime_rt::sleep::Mechanism {
            firmtime_rt::sleep::Mechanism::ClockNanosleep
        }
    }

    #[test]
    fn every_wakeup_lands_in_exactly_one_interval() {
        let (mut fp, fc, up, mut uc) = rings(4);
        for _ in 0..3 {
            fp.push(Box::new(Interval::new(4))).unwrap();
        }
        let mut lp = WatchLoop::new(Box::new(Interval::new(4)), fc, up, 10);
        // Period 1 ms; one wake-up 3.5 ms late passes 3 deadlines.
        let mut lates = vec![10_000; 25];
        lates[12] = 3_500_000;
        let mut s = Scripted { lates, i: 0 };
        let mut p = Periodic::new(1_000_000, 1_000_000);
        let stop = AtomicBool::new(false);
        let end = assert_no_alloc::assert_no_alloc(|| lp.run(&mut s, &mut p, 35, &stop));
        assert_eq!(end, LoopEnd::Done);
        let mut got = Vec::new();
        while let Ok(b) = uc.pop() {
            got.push(b);
        }
        assert_eq!(got.iter().map(|b| b.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(
            got.iter().map(|b| b.count + b.missed).sum::<u64>(),
            35,
            "ticks + missed cover every deadline"
        );
        assert_eq!(got[1].missed, 3);
        assert_eq!(got[1].max_ns, 3_500_000);
        assert_eq!(got[0].count, 10);
        assert_eq!(got[0].hist.total(), 10);
        assert!(!got[2].partial);
        assert!(got[3].partial, "the last 5 deadlines are half an interval");
        assert_eq!(got.iter().map(|b| b.merged).sum::<u64>(), 0);
        // Each buffer's CPU time starts where the previous one's ended.
        for w in got.windows(2) {
            assert_eq!(w[0].cpu_start_ns + w[0].own_cpu_ns, w[1].cpu_start_ns);
        }
        assert!(got[0].cpu_start_ns > 0, "the thread's CPU clock was read");
    }

    #[test]
    fn without_a_free_buffer_intervals_merge_and_nothing_is_lost() {
        let (_fp, fc, up, mut uc) = rings(4);
        let mut lp = WatchLoop::new(Box::new(Interval::new(4)), fc, up, 10);
        let mut s = Scripted {
            lates: vec![1_000],
            i: 0,
        };
        let mut p = Periodic::new(1_000_000, 1_000_000);
        let stop = AtomicBool::new(false);
        lp.run(&mut s, &mut p, 30, &stop);
        let b = uc.pop().unwrap();
        assert_eq!((b.seq, b.count, b.merged), (0, 30, 2));
        assert!(uc.pop().is_err());
    }
}
