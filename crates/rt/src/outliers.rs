//! The worst wake-ups of a real-time thread, kept for explaining them
//! later: each thread offers its wake-ups to [`Notes`], a worst-K heap in
//! storage allocated before the loop, and flags the window of each kept
//! wake-up in [`Flags`], a lock-free ring read by whoever keeps a trace
//! (firmtime-lab's explaining trace keeps only the events inside flagged
//! windows). Both are **RT-safe**: no allocation, no lock, no syscall.
//!
//! The owner of this concern for every loop that can be late: `lab cyclic`'s
//! measuring threads, the tap engine's loop and `net bench`'s period loop.
//! A thread pinned to a CPU gives that CPU once ([`Notes::flagging`]); one
//! that may migrate gives the CPU it woke on with each wake-up
//! ([`Notes::offer_on`], the CPU from [`crate::sched::current_cpu`]).
//!
//! The number of flags is bounded: a top-K heap over `n` wake-ups takes
//! about K·(1 + ln(n/K)) insertions (≈1,000 for 5 s at 1 kHz, ≈3,500 for a
//! day), so a trace kept by windows is bounded by that many windows of a
//! few milliseconds, not by the run's length.

use crate::periodic::Tick;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A span of one CPU's trace that is kept, CLOCK_MONOTONIC ns.
///
/// `[start_ns, end_ns]` is the most that may be kept (the lookback
/// bounded); a keeper keeps less where less explains the wake-up: from the
/// CPU's last context switch before `deadline_ns` on (firmtime-lab's
/// `Keeper`). `latency_ns` ranks windows when room runs short: the least
/// late go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The CPU.
    pub cpu: u16,
    /// First instant that may be kept.
    pub start_ns: u64,
    /// Last instant kept.
    pub end_ns: u64,
    /// The (earliest) deadline inside the window: attribution starts at
    /// the last context switch before it.
    pub deadline_ns: u64,
    /// How late the (latest) wake-up inside it was, ns.
    pub latency_ns: i64,
}

impl Window {
    /// A window of the whole span `[start_ns, end_ns]` (deadline at its
    /// start, no latency): for tests and whole-span keeping.
    pub fn span(cpu: u16, start_ns: u64, end_ns: u64) -> Window {
        Window {
            cpu,
            start_ns,
            end_ns,
            deadline_ns: start_ns,
            latency_ns: 0,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    cpu: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    deadline: AtomicU64,
    latency: AtomicU64,
}

/// A lock-free multi-producer ring of flagged windows, read by the drainer.
#[derive(Debug)]
pub struct Flags {
    slots: Box<[Slot]>,
    head: AtomicU64,
    /// Per measured thread: the deadline it sleeps towards, CLOCK_MONOTONIC
    /// ns ([`Flags::due`]); 0 = lane unused, `u64::MAX` = not sleeping on
    /// a deadline (finished). Read by the drainer to keep off the CPUs
    /// when a measured thread is due ([`Flags::next_due`]).
    lanes: Box<[AtomicU64]>,
    next_lane: AtomicU64,
}

/// Measured threads that can announce their deadlines ([`Flags::lane`]);
/// more get no lane (and are not waited for).
pub const LANES: usize = 256;

impl Flags {
    /// A ring of `n` slots (allocated here, never again).
    pub fn new(n: usize) -> Flags {
        Flags {
            slots: (0..n.max(1)).map(|_| Slot::default()).collect(),
            head: AtomicU64::new(0),
            lanes: (0..LANES).map(|_| AtomicU64::new(0)).collect(),
            next_lane: AtomicU64::new(0),
        }
    }

    /// A lane for one measured thread to announce its deadlines in
    /// ([`Flags::due`]), or `None` when all [`LANES`] are taken. Call
    /// before the loop.
    pub fn lane(&self) -> Option<usize> {
        let i = self.next_lane.fetch_add(1, Ordering::AcqRel) as usize;
        let l = self.lanes.get(i)?;
        l.store(u64::MAX, Ordering::Release);
        Some(i)
    }

    /// Announces that the thread of `lane` sleeps until `deadline_ns`
    /// (`u64::MAX`: it is done). **RT-safe**: one store.
    #[inline]
    pub fn due(&self, lane: usize, deadline_ns: u64) {
        if let Some(l) = self.lanes.get(lane) {
            l.store(deadline_ns.max(1), Ordering::Release);
        }
    }

    /// The earliest deadline a measured thread announced and has not yet
    /// woken for (one in the past: a thread late or running), or `None`.
    /// The drainer keeps off the CPUs from shortly before it until the
    /// thread has woken and announced its next.
    pub fn next_due(&self) -> Option<u64> {
        self.next_due_since(0)
    }

    /// Like [`Flags::next_due`], ignoring deadlines before `oldest_ns`
    /// (threads late that long: stalled, not about to wake).
    pub fn next_due_since(&self, oldest_ns: u64) -> Option<u64> {
        let n = (self.next_lane.load(Ordering::Acquire) as usize).min(self.lanes.len());
        self.lanes[..n]
            .iter()
            .map(|l| l.load(Ordering::Acquire))
            .filter(|&d| d != 0 && d != u64::MAX && d >= oldest_ns)
            .min()
    }

    /// Flags window `w`. **RT-safe**: one atomic fetch-add and six
    /// stores; a drainer that falls a whole ring behind loses the oldest
    /// flags (counted by [`Flags::read`]).
    #[inline]
    pub fn push(&self, w: Window) {
        let i = self.head.fetch_add(1, Ordering::AcqRel);
        let s = &self.slots[(i % self.slots.len() as u64) as usize];
        s.cpu.store(u64::from(w.cpu), Ordering::Relaxed);
        s.start.store(w.start_ns, Ordering::Relaxed);
        s.end.store(w.end_ns, Ordering::Relaxed);
        s.deadline.store(w.deadline_ns, Ordering::Relaxed);
        s.latency.store(w.latency_ns as u64, Ordering::Relaxed);
        s.seq.store(i + 1, Ordering::Release);
    }

    /// Reads the flags from `*next` on into `out`, advancing `*next` past
    /// those complete; returns how many were overwritten before being read.
    pub fn read(&self, next: &mut u64, out: &mut dyn FnMut(Window)) -> u64 {
        let head = self.head.load(Ordering::Acquire);
        let n = self.slots.len() as u64;
        let mut lost = 0;
        if head > *next + n {
            lost = head - n - *next;
            *next = head - n;
        }
        while *next < head {
            let s = &self.slots[(*next % n) as usize];
            let seq = s.seq.load(Ordering::Acquire);
            if seq < *next + 1 {
                break; // being written: next pass
            }
            let w = Window {
                cpu: s.cpu.load(Ordering::Relaxed) as u16,
                start_ns: s.start.load(Ordering::Relaxed),
                end_ns: s.end.load(Ordering::Relaxed),
                deadline_ns: s.deadline.load(Ordering::Relaxed),
                latency_ns: s.latency.load(Ordering::Relaxed) as i64,
            };
            if s.seq.load(Ordering::Acquire) != *next + 1 {
                lost += 1; // overwritten while read
            } else {
                out(w);
            }
            *next += 1;
        }
        lost
    }
}

/// One noted wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Note {
    /// Grid index of its deadline.
    pub index: u64,
    /// The deadline, CLOCK_MONOTONIC ns.
    pub deadline_ns: u64,
    /// When the thread woke, CLOCK_MONOTONIC ns.
    pub wake_ns: u64,
    /// wake − deadline, ns.
    pub latency_ns: i64,
    /// Deadlines passed while it was late.
    pub missed: u64,
    /// The CPU it woke on.
    pub cpu: u16,
}

/// How far before a deadline a flagged window starts: enough for the
/// thread's previous switch-out and the task on the CPU before it.
pub fn lookback_ns(period_ns: u64) -> u64 {
    (2 * period_ns).max(2_000_000)
}

/// The worst wake-ups of one thread, in storage allocated up front.
#[derive(Debug, Clone, Default)]
pub struct Notes {
    /// A min-heap on latency: the least late of the kept ones on top.
    heap: Vec<Note>,
    /// Where a kept wake-up's window is flagged for the drainer.
    flags: Option<Arc<Flags>>,
    cpu: u16,
    lookback_ns: u64,
    /// Wake-ups offered that missed a deadline.
    missing: u64,
    /// Of those, the ones pushed out of the heap.
    missing_dropped: u64,
    /// A min-heap of the `top` largest latencies so far ([`Notes::flag_only`]):
    /// a kept wake-up is flagged only when it enters it (or missed a
    /// deadline, or is later than `flag_above_ns`). Empty capacity: every
    /// kept wake-up is flagged.
    top: Vec<i64>,
    /// Wake-ups later than this are always flagged, ns.
    flag_above_ns: i64,
    /// Kept wake-ups not flagged (not among the top so far, on time).
    unflagged: u64,
    /// This thread's lane in `flags` for [`Notes::sleeping_until`].
    lane: Option<usize>,
}

impl Notes {
    /// Keeps the worst `cap` wake-ups (0: notes nothing).
    pub fn new(cap: usize) -> Notes {
        Notes {
            heap: Vec::with_capacity(cap),
            ..Notes::default()
        }
    }

    /// Like [`Notes::new`], and flags each kept wake-up's window
    /// `[deadline − lookback, wake + 50 µs]` on its CPU in `flags`, so a
    /// trace keeper keeps the trace around it. `cpu` is the CPU of the
    /// wake-ups offered with [`Notes::offer`] (a pinned thread's).
    pub fn flagging(cap: usize, flags: Arc<Flags>, cpu: usize, lookback_ns: u64) -> Notes {
        Notes {
            lane: flags.lane(),
            flags: Some(flags),
            cpu: cpu as u16,
            lookback_ns,
            ..Notes::new(cap)
        }
    }

    /// Flags only the kept wake-ups that can end up explained: those that
    /// enter the `top` latest so far, miss a deadline, or are later than
    /// `above_ns`. An explainer that explains each thread's worst few, its
    /// missed deadlines and those above a threshold (its p99.9, or one
    /// given) needs no other window; `top` = the worst few plus the number
    /// of wake-ups above the p99.9 (a thousandth of the run). A top-K over
    /// `n` wake-ups flags about K·(1 + ln(n/K)) of them. Allocates (call
    /// before the loop).
    pub fn flag_only(mut self, top: usize, above_ns: Option<u64>) -> Notes {
        self.top = Vec::with_capacity(top.max(1));
        self.flag_above_ns = above_ns.map_or(i64::MAX, |a| i64::try_from(a).unwrap_or(i64::MAX));
        self
    }

    /// Announces the deadline the thread is about to sleep towards, so the
    /// trace's drainer keeps off the CPUs around it ([`Flags::due`];
    /// nothing without flags). **RT-safe**: one store.
    #[inline]
    pub fn sleeping_until(&self, deadline_ns: u64) {
        if let (Some(f), Some(l)) = (&self.flags, self.lane) {
            f.due(l, deadline_ns);
        }
    }

    /// Announces that the thread sleeps on no more deadlines (its loop
    /// ended): the drainer no longer waits for it.
    pub fn done(&self) {
        self.sleeping_until(u64::MAX);
    }

    /// Kept wake-ups that were not flagged ([`Notes::flag_only`]).
    pub fn unflagged(&self) -> u64 {
        self.unflagged
    }

    /// Whether a kept wake-up gets a window; updates the top-K.
    #[inline]
    fn worth_a_window(&mut self, n: &Note) -> bool {
        let cap = self.top.capacity();
        if cap == 0 {
            return true;
        }
        let entered = if self.top.len() < cap {
            self.top.push(n.latency_ns);
            let mut i = self.top.len() - 1;
            while i > 0 {
                let p = (i - 1) / 2;
                if self.top[p] <= self.top[i] {
                    break;
                }
                self.top.swap(p, i);
                i = p;
            }
            true
        } else if n.latency_ns > self.top[0] {
            self.top[0] = n.latency_ns;
            sift_down(&mut self.top, |v| *v);
            true
        } else {
            false
        };
        entered || n.missed > 0 || n.latency_ns > self.flag_above_ns
    }

    #[inline]
    fn flag(&mut self, n: &Note) {
        if self.flags.is_none() {
            return;
        }
        if !self.worth_a_window(n) {
            self.unflagged += 1;
            return;
        }
        if let Some(f) = &self.flags {
            f.push(Window {
                cpu: n.cpu,
                start_ns: n.deadline_ns.saturating_sub(self.lookback_ns),
                end_ns: n.wake_ns + 50_000,
                deadline_ns: n.deadline_ns,
                latency_ns: n.latency_ns,
            });
        }
    }

    /// Offers one wake-up of a periodic grid, on the CPU given to
    /// [`Notes::flagging`]. **RT-safe**: never allocates (the heap never
    /// grows past its capacity), O(log cap).
    #[inline]
    pub fn offer(&mut self, t: &Tick) {
        self.offer_on(self.cpu, t.index, t.deadline_ns, t.wake_ns, t.missed);
    }

    /// Offers one wake-up of any sleeper: its `index` (the caller's count),
    /// the time it was due, the time it woke, the deadlines it passed and
    /// the CPU it woke on. **RT-safe**, as [`Notes::offer`].
    #[inline]
    pub fn offer_on(&mut self, cpu: u16, index: u64, deadline_ns: u64, wake_ns: u64, missed: u64) {
        let cap = self.heap.capacity();
        if cap == 0 {
            return;
        }
        if missed > 0 {
            self.missing += 1;
        }
        let n = Note {
            index,
            deadline_ns,
            wake_ns,
            latency_ns: wake_ns as i64 - deadline_ns as i64,
            missed,
            cpu,
        };
        if self.heap.len() < cap {
            self.flag(&n);
            self.heap.push(n);
            let mut i = self.heap.len() - 1;
            while i > 0 {
                let p = (i - 1) / 2;
                if self.heap[p].latency_ns <= self.heap[i].latency_ns {
                    break;
                }
                self.heap.swap(p, i);
                i = p;
            }
        } else if n.latency_ns > self.heap[0].latency_ns {
            if self.heap[0].missed > 0 {
                self.missing_dropped += 1;
            }
            self.flag(&n);
            self.heap[0] = n;
            sift_down(&mut self.heap, |n| n.latency_ns);
        } else if n.missed > 0 {
            self.missing_dropped += 1;
        }
    }

    /// The kept wake-ups, latest first.
    pub fn sorted(&self) -> Vec<Note> {
        let mut v = self.heap.clone();
        v.sort_by_key(|n| std::cmp::Reverse(n.latency_ns));
        v
    }

    /// Wake-ups that missed a deadline but were not kept.
    pub fn missing_not_kept(&self) -> u64 {
        self.missing_dropped
    }

    /// True when notes are being kept.
    pub fn enabled(&self) -> bool {
        self.heap.capacity() > 0
    }

    /// Wake-ups offered that missed a deadline (kept or not).
    pub fn missing(&self) -> u64 {
        self.missing
    }
}

/// Restores a min-heap (on `key`) whose root was replaced. **RT-safe**.
#[inline]
fn sift_down<T>(heap: &mut [T], key: impl Fn(&T) -> i64) {
    let len = heap.len();
    let mut i = 0;
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut m = i;
        if l < len && key(&heap[l]) < key(&heap[m]) {
            m = l;
        }
        if r < len && key(&heap[r]) < key(&heap[m]) {
            m = r;
        }
        if m == i {
            break;
        }
        heap.swap(i, m);
        i = m;
    }
}

/// What the explaining trace named as the cause of one noted wake-up, for
/// a loop that maps its wake-ups back to what they made late (`net
/// bench`'s late periods, `tap run`'s late outputs). Filled by
/// firmtime-lab's explaining trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedCause {
    /// The trace's category (`task`, `irq`, `softirq`, `vm`, `self`, …).
    pub category: String,
    /// Its name (task comm, interrupt, …).
    pub name: String,
    /// In words (`task ft-hog`).
    pub words: String,
    /// Time charged to it, ns.
    pub ns: u64,
    /// One sentence with figures.
    pub detail: String,
}

/// What the explaining trace of one loop covered (`trace` in `net bench`'s
/// JSON and in a `tap run` trial's self-checks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TraceCoverage {
    /// The loop's wake-ups the trace attributed.
    pub wakeups: u64,
    /// Of those, with a cause other than unknown.
    pub wakeups_explained: u64,
    /// Events kept around late wake-ups.
    pub events: u64,
    /// Events that did not fit in the store.
    pub dropped: u64,
    /// Events the kernel lost.
    pub lost: u64,
    /// Late wake-ups whose trace window was not kept.
    pub flags_lost: u64,
}

/// Formats a lateness: µs below a millisecond, ms with two decimals above
/// (`850 µs`, `2.90 ms`).
pub fn fmt_late(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{} µs", ns / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_worst_and_flags_each_kept_wake_up_on_its_cpu() {
        let flags = Arc::new(Flags::new(16));
        let mut n = Notes::flagging(2, Arc::clone(&flags), 1, 1000);
        n.offer_on(3, 0, 10_000, 10_500, 0); // 500, kept
        n.offer_on(0, 1, 20_000, 20_100, 0); // 100, kept
        n.offer_on(1, 2, 30_000, 30_050, 0); // 50, not kept
        n.offer_on(1, 3, 40_000, 49_000, 2); // 9000, kept, pushes out 100
        let kept = n.sorted();
        assert_eq!(kept.iter().map(|k| k.index).collect::<Vec<_>>(), [3, 0]);
        assert_eq!(kept[0].latency_ns, 9000);
        assert_eq!(kept[0].cpu, 1);
        assert_eq!(n.missing(), 1);
        assert_eq!(n.missing_not_kept(), 0);
        let mut next = 0;
        let mut seen = Vec::new();
        assert_eq!(flags.read(&mut next, &mut |w| seen.push(w)), 0);
        assert_eq!(
            seen,
            [
                Window {
                    cpu: 3,
                    start_ns: 9_000,
                    end_ns: 60_500,
                    deadline_ns: 10_000,
                    latency_ns: 500,
                },
                Window {
                    cpu: 0,
                    start_ns: 19_000,
                    end_ns: 70_100,
                    deadline_ns: 20_000,
                    latency_ns: 100,
                },
                Window {
                    cpu: 1,
                    start_ns: 39_000,
                    end_ns: 99_000,
                    deadline_ns: 40_000,
                    latency_ns: 9000,
                },
            ]
        );
    }

    #[test]
    fn flag_only_flags_the_top_so_far_the_missed_and_those_above() {
        let flags = Arc::new(Flags::new(64));
        let mut n = Notes::flagging(8, Arc::clone(&flags), 0, 1000).flag_only(2, Some(5_000));
        let lat = [100, 200, 50, 300, 150, 6_000, 120, 110];
        let missed = [0, 0, 0, 0, 0, 0, 0, 1];
        for (i, (&l, &m)) in lat.iter().zip(&missed).enumerate() {
            let d = 1_000_000 * (i as u64 + 1);
            n.offer_on(0, i as u64, d, d + l, m);
        }
        let mut next = 0;
        let mut got = Vec::new();
        flags.read(&mut next, &mut |w| got.push(w.latency_ns));
        // 100, 200 fill the top-2; 50 and 150 are below it; 300 and 6000
        // enter it; 120 does not; 110 missed a deadline.
        assert_eq!(got, [100, 200, 300, 6_000, 110]);
        assert_eq!(n.unflagged(), 3);
        assert_eq!(n.sorted().len(), 8);
    }

    #[test]
    fn a_zero_capacity_notes_nothing_and_never_allocates() {
        let mut n = Notes::new(0);
        assert!(!n.enabled());
        n.offer_on(0, 0, 0, 5, 1);
        assert!(n.sorted().is_empty());
        assert_eq!(n.missing(), 0);
    }

    #[test]
    fn a_flag_ring_that_falls_behind_counts_what_it_lost() {
        let f = Flags::new(2);
        for i in 0..5 {
            f.push(Window::span(0, i, i + 1));
        }
        let mut next = 0;
        let mut seen = Vec::new();
        assert_eq!(f.read(&mut next, &mut |w| seen.push(w.start_ns)), 3);
        assert_eq!(seen, [3, 4]);
    }
}
