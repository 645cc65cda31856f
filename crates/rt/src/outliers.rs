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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The CPU.
    pub cpu: u16,
    /// First instant kept.
    pub start_ns: u64,
    /// Last instant kept.
    pub end_ns: u64,
}

#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    cpu: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
}

/// A lock-free multi-producer ring of flagged windows, read by the drainer.
#[derive(Debug)]
pub struct Flags {
    slots: Box<[Slot]>,
    head: AtomicU64,
}

impl Flags {
    /// A ring of `n` slots (allocated here, never again).
    pub fn new(n: usize) -> Flags {
        Flags {
            slots: (0..n.max(1)).map(|_| Slot::default()).collect(),
            head: AtomicU64::new(0),
        }
    }

    /// Flags `[start_ns, end_ns]` of `cpu`. **RT-safe**: one atomic
    /// fetch-add and four stores; a drainer that falls a whole ring behind
    /// loses the oldest flags (counted by [`Flags::read`]).
    #[inline]
    pub fn push(&self, cpu: u16, start_ns: u64, end_ns: u64) {
        let i = self.head.fetch_add(1, Ordering::AcqRel);
        let s = &self.slots[(i % self.slots.len() as u64) as usize];
        s.cpu.store(u64::from(cpu), Ordering::Relaxed);
        s.start.store(start_ns, Ordering::Relaxed);
        s.end.store(end_ns, Ordering::Relaxed);
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
            flags: Some(flags),
            cpu: cpu as u16,
            lookback_ns,
            ..Notes::new(cap)
        }
    }

    #[inline]
    fn flag(&self, n: &Note) {
        if let Some(f) = &self.flags {
            f.push(
                n.cpu,
                n.deadline_ns.saturating_sub(self.lookback_ns),
                n.wake_ns + 50_000,
            );
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
            let len = self.heap.len();
            let mut i = 0;
            loop {
                let (l, r) = (2 * i + 1, 2 * i + 2);
                let mut m = i;
                if l < len && self.heap[l].latency_ns < self.heap[m].latency_ns {
                    m = l;
                }
                if r < len && self.heap[r].latency_ns < self.heap[m].latency_ns {
                    m = r;
                }
                if m == i {
                    break;
                }
                self.heap.swap(i, m);
                i = m;
            }
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
                    end_ns: 60_500
                },
                Window {
                    cpu: 0,
                    start_ns: 19_000,
                    end_ns: 70_100
                },
                Window {
                    cpu: 1,
                    start_ns: 39_000,
                    end_ns: 99_000
                },
            ]
        );
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
            f.push(0, i, i + 1);
        }
        let mut next = 0;
        let mut seen = Vec::new();
        assert_eq!(f.read(&mut next, &mut |w| seen.push(w.start_ns)), 3);
        assert_eq!(seen, [3, 4]);
    }
}
