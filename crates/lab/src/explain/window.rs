//! Freezing the windows around late wake-ups: the measured threads flag
//! them ([`Flags`], **RT-safe**), the drainer keeps the events inside them
//! ([`Keeper`]) and lets the rest go once no late wake-up can need them.
//!
//! A thread flags a wake-up when it enters its worst-K notes
//! ([`super::Notes`]): every wake-up that is finally explained was flagged
//! when it happened. The number of flags is bounded: a top-K heap over `n`
//! wake-ups takes about K·(1 + ln(n/K)) insertions (≈1,000 for 5 s at
//! 1 kHz, ≈3,500 for a day), so the kept trace is bounded by that many
//! windows of a few milliseconds, not by the run's length.

use crate::trace::raw::Event;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The drainer's side: pending events, kept events and the windows.
#[derive(Debug)]
pub struct Keeper {
    pending: Vec<Event>,
    /// Events kept (inside a window).
    pub store: Vec<Event>,
    /// Windows flagged, overlapping ones merged, in flag order.
    pub windows: Vec<Window>,
    first_active: usize,
    next_flag: u64,
    latest_ns: u64,
    keep_ns: u64,
    /// Events inside a window that did not fit in the store.
    pub dropped: u64,
    /// Time of the first event dropped for want of room: windows past it are incomplete.
    pub full_since: Option<u64>,
    /// Flags overwritten before the drainer read them.
    pub flags_lost: u64,
    /// Windows that did not fit in the window list.
    pub windows_dropped: u64,
}

/// Windows the keeper can hold.
const MAX_WINDOWS: usize = 1 << 16;

impl Keeper {
    /// A keeper holding up to `pending` undecided and `store` kept events;
    /// undecided events older than `keep_ns` behind the newest are let go.
    pub fn new(pending: usize, store: usize, keep_ns: u64) -> Keeper {
        let zero = Event {
            time_ns: 0,
            cpu: 0,
            kind: crate::trace::raw::EventKind::Switch,
            pid: 0,
            prev_pid: 0,
            prev_state: 0,
            next_pid: 0,
            arg: 0,
            comm: [0; 16],
        };
        // Touched now, so the drainer never faults them in later.
        let mut p = vec![zero; pending.max(1)];
        p.clear();
        let mut s = vec![zero; store.max(1)];
        s.clear();
        Keeper {
            pending: p,
            store: s,
            windows: Vec::with_capacity(MAX_WINDOWS),
            first_active: 0,
            next_flag: 0,
            latest_ns: 0,
            keep_ns,
            dropped: 0,
            full_since: None,
            flags_lost: 0,
            windows_dropped: 0,
        }
    }

    /// Takes one decoded event.
    pub fn take(&mut self, e: Event, flags: &Flags) {
        self.latest_ns = self.latest_ns.max(e.time_ns);
        if self.pending.len() == self.pending.capacity() {
            self.settle(flags, false);
        }
        if self.pending.len() < self.pending.capacity() {
            self.pending.push(e);
        } else {
            // Still full: every pending event is recent; the oldest goes.
            self.pending.remove(0);
            self.pending.push(e);
        }
    }

    /// Reads new flags, keeps the pending events inside windows and lets
    /// go of those older than the horizon (all undecided ones when `last`).
    pub fn settle(&mut self, flags: &Flags, last: bool) {
        let windows = &mut self.windows;
        let mut wd = 0;
        self.flags_lost += flags.read(&mut self.next_flag, &mut |w| {
            if let Some(prev) = windows
                .iter_mut()
                .rev()
                .take(8)
                .find(|p| p.cpu == w.cpu && w.start_ns <= p.end_ns && w.end_ns >= p.start_ns)
            {
                prev.start_ns = prev.start_ns.min(w.start_ns);
                prev.end_ns = prev.end_ns.max(w.end_ns);
            } else if windows.len() < windows.capacity() {
                windows.push(w);
            } else {
                wd += 1;
            }
        });
        self.windows_dropped += wd;
        let horizon = if last {
            u64::MAX
        } else {
            self.latest_ns.saturating_sub(self.keep_ns)
        };
        let active = &self.windows[self.first_active..];
        let mut kept = 0;
        for i in 0..self.pending.len() {
            let e = self.pending[i];
            let inside = active
                .iter()
                .any(|w| w.cpu == e.cpu && w.start_ns <= e.time_ns && e.time_ns <= w.end_ns);
            if inside {
                if self.store.len() < self.store.capacity() {
                    self.store.push(e);
                } else {
                    self.dropped += 1;
                    self.full_since = Some(self.full_since.map_or(e.time_ns, |t| t.min(e.time_ns)));
                }
            } else if e.time_ns >= horizon {
                self.pending[kept] = e;
                kept += 1;
            }
        }
        self.pending.truncate(kept);
        while self.first_active < self.windows.len()
            && self.windows[self.first_active].end_ns < horizon
            && !last
        {
            self.first_active += 1;
        }
    }
}
