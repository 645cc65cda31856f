//! Freezing the windows around late wake-ups: the measured threads flag
//! them ([`Flags`], **RT-safe**, in `firmtime_rt::outliers`), the drainer
//! keeps the events inside them ([`Keeper`]) and lets the rest go once no
//! late wake-up can need them.
//!
//! A thread flags a wake-up when it can end up explained (among its worst
//! so far, a missed deadline, above a given threshold:
//! [`super::Notes::flag_only`]), so the kept trace is bounded by the number
//! of flags, not by the run's length. Each window is kept only as long as
//! its wake-up needs: from the CPU's last context switch before the
//! deadline (what the attribution starts from) to just after the wake-up;
//! the flagged lookback bounds it, and only the measured threads' own page
//! faults and wake-ups (rare: filtered in the kernel) are kept from the
//! whole lookback. When the store is full, the windows of the least late
//! wake-ups go first, whole, never those of later ones: a window is kept
//! complete or not at all (counted in [`Keeper::windows_evicted`] and
//! [`Keeper::dropped`]).

use crate::raw::{Event, EventKind};
use firmtime_rt::outliers::{Flags, Window};
use std::collections::VecDeque;

/// The drainer's side: pending events, kept events and the windows.
///
/// Pending events are held per CPU, each CPU's in time order (its ring
/// buffer's), so a window looks only at its own span (a binary search).
/// Each event is checked once against the windows known when it arrives
/// and once against each window flagged while it is pending, so a pass
/// costs the new events and the new windows' spans, not the whole pending
/// span.
#[derive(Debug)]
pub struct Keeper {
    /// Undecided events per CPU, in time order.
    pending: Vec<VecDeque<Event>>,
    /// Per CPU: `pending[cpu][..checked[cpu]]` were checked against every window known.
    checked: Vec<usize>,
    /// Capacity of each CPU's pending queue.
    per_cpu: usize,
    /// Events the store holds at most (its capacity may be larger when it
    /// was reused: [`Storage`]).
    store_cap: usize,
    /// Events kept (inside a window).
    pub store: Vec<Event>,
    /// The window each kept event belongs to (index into `windows`).
    owner: Vec<u32>,
    /// Windows flagged, overlapping ones merged, in flag order.
    pub windows: Vec<Window>,
    /// Per window: where its kept span begins (the CPU's last context
    /// switch before its deadline, or its start).
    from: Vec<u64>,
    /// Per window: events kept.
    counts: Vec<u32>,
    /// Per window: dropped for want of room.
    evicted: Vec<bool>,
    /// Per window: the span the checked pending events were checked against.
    checked_span: Vec<Option<Span>>,
    first_active: usize,
    next_flag: u64,
    latest_ns: u64,
    keep_ns: u64,
    /// Events inside windows that were dropped for want of room (every
    /// event of an evicted window).
    pub dropped: u64,
    /// Windows dropped whole for want of room (the least late first).
    pub windows_evicted: u64,
    /// Flags overwritten before the drainer read them.
    pub flags_lost: u64,
    /// Windows that did not fit in the window list.
    pub windows_dropped: u64,
    /// Per CPU: undecided events pushed out of its full pending queue (the
    /// oldest first) as `(first's time, last's time, count)`: a hole in
    /// the trace like a kernel loss ([`Keeper::overflow_losses`]).
    overflow: Vec<(u64, u64, u64)>,
    /// Windows held at most ([`Keeper::reusing_with`]).
    max_windows: usize,
}

/// Windows a keeper can hold at most.
pub const MAX_WINDOWS: usize = 1 << 16;

/// A CPU's pending queue of `n` events, its memory touched now.
fn touched_queue(n: usize) -> VecDeque<Event> {
    let mut q: VecDeque<Event> = vec![Event::ZERO; n].into();
    q.clear();
    q
}

/// A [`Keeper`]'s buffers, emptied, for the next one ([`Keeper::reusing`]):
/// the CPUs' pending queues (most of the memory: ~26 MB), the store of
/// kept events and the window lists.
#[derive(Debug, Default)]
pub struct Storage {
    pending: Vec<VecDeque<Event>>,
    store: Vec<Event>,
    owner: Vec<u32>,
    windows: Vec<Window>,
    from: Vec<u64>,
    counts: Vec<u32>,
    evicted: Vec<bool>,
    checked_span: Vec<Option<Span>>,
}

impl Storage {
    /// Gives back the store of kept events once they are attributed
    /// ([`super::Timeline::into_events`]).
    pub fn give_store(&mut self, store: Vec<Event>) {
        if store.capacity() > self.store.capacity() {
            self.store = store;
        }
    }

    /// Bytes these buffers hold (their capacity), for a check that the
    /// next session allocates nothing new.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.pending
            .iter()
            .map(|q| q.capacity() * size_of::<Event>())
            .sum::<usize>()
            + self.store.capacity() * size_of::<Event>()
            + self.owner.capacity() * size_of::<u32>()
            + self.windows.capacity() * size_of::<Window>()
            + self.from.capacity() * size_of::<u64>()
            + self.counts.capacity() * size_of::<u32>()
            + self.evicted.capacity()
            + self.checked_span.capacity() * size_of::<Option<Span>>()
    }

    /// Where each buffer lives (the pending queues' then the store's), for
    /// a check that a reused keeper kept them.
    pub fn addresses(&self) -> Vec<usize> {
        let mut a: Vec<usize> = self
            .pending
            .iter()
            .map(|q| q.as_slices().0.as_ptr() as usize)
            .collect();
        a.push(self.store.as_ptr() as usize);
        a.push(self.owner.as_ptr() as usize);
        a.push(self.windows.as_ptr() as usize);
        a
    }
}

/// Kept from the whole flagged lookback, not only from the last switch:
/// the measured threads' page faults and wake-ups (filtered in the kernel).
fn from_lookback(kind: EventKind) -> bool {
    matches!(kind, EventKind::PageFault | EventKind::Wakeup)
}

/// What one window keeps: its CPU's events in `[from_ns, end_ns]`, and its
/// threads' own faults and wake-ups from `start_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    cpu: u16,
    start_ns: u64,
    from_ns: u64,
    end_ns: u64,
}

/// A CPU's ring buffer is in time order but for nested records a few
/// microseconds apart: a search for a span is widened by this much, and
/// each event in it still checked.
const ORDER_SLACK_NS: u64 = 1_000_000;

/// The index range of `q` (one CPU's pending events, in time order within
/// [`ORDER_SLACK_NS`]) that can hold times in `[a, b]`.
fn around(q: &VecDeque<Event>, a: u64, b: u64) -> (usize, usize) {
    let lo = q.partition_point(|e| e.time_ns < a.saturating_sub(ORDER_SLACK_NS));
    let hi = q.partition_point(|e| e.time_ns <= b.saturating_add(ORDER_SLACK_NS));
    (lo, hi.max(lo))
}

fn holds(s: Span, e: &Event) -> bool {
    s.cpu == e.cpu
        && e.time_ns <= s.end_ns
        && (e.time_ns >= s.from_ns || (from_lookback(e.kind) && e.time_ns >= s.start_ns))
}

impl Keeper {
    /// A keeper holding up to `pending` undecided events per CPU and
    /// `store` kept events; undecided events older than `keep_ns` behind
    /// the newest are let go.
    pub fn new(pending: usize, store: usize, keep_ns: u64) -> Keeper {
        Keeper::reusing(pending, store, keep_ns, Storage::default())
    }

    /// Like [`Keeper::new`], in the buffers of an earlier keeper
    /// ([`Keeper::into_parts`]): those large enough are emptied and kept,
    /// the others allocated (and touched) anew. A long-running consumer
    /// that starts a session per interval (`watch`) then allocates its tens
    /// of megabytes once, not at every interval ([`super::Pool`]).
    pub fn reusing(pending: usize, store: usize, keep_ns: u64, s: Storage) -> Keeper {
        Keeper::reusing_with(pending, store, keep_ns, MAX_WINDOWS, s)
    }

    /// [`Keeper::reusing`] holding at most `max_windows` windows (at most
    /// [`MAX_WINDOWS`]; more are counted in `windows_dropped`): ~77 bytes
    /// each, reserved up front.
    pub fn reusing_with(
        pending: usize,
        store: usize,
        keep_ns: u64,
        max_windows: usize,
        s: Storage,
    ) -> Keeper {
        let max_windows = max_windows.clamp(1, MAX_WINDOWS);
        let per_cpu = pending.max(1);
        let store_cap = store.max(1);
        // Touched when new, so the drainer never faults them in later (the
        // CPUs' pending queues: `reserve_cpus`).
        let reuse = |mut v: Vec<Event>| {
            v.clear();
            if v.capacity() < store_cap {
                v = vec![Event::ZERO; store_cap];
                v.clear();
            }
            v
        };
        let store_v = reuse(s.store);
        let mut owner = s.owner;
        owner.clear();
        if owner.capacity() < store_cap {
            owner = vec![0u32; store_cap];
            owner.clear();
        }
        let mut queues = s.pending;
        for q in &mut queues {
            q.clear();
            if q.capacity() < per_cpu {
                *q = touched_queue(per_cpu);
            }
        }
        fn emptied<T>(mut v: Vec<T>, n: usize) -> Vec<T> {
            v.clear();
            v.reserve_exact(n);
            v
        }
        let queues_len = queues.len();
        Keeper {
            checked: vec![0; queues_len],
            pending: queues,
            per_cpu,
            store_cap,
            store: store_v,
            owner,
            windows: emptied(s.windows, max_windows),
            from: emptied(s.from, max_windows),
            counts: emptied(s.counts, max_windows),
            evicted: emptied(s.evicted, max_windows),
            checked_span: emptied(s.checked_span, max_windows),
            first_active: 0,
            next_flag: 0,
            latest_ns: 0,
            keep_ns,
            dropped: 0,
            windows_evicted: 0,
            flags_lost: 0,
            windows_dropped: 0,
            overflow: vec![(0, 0, 0); queues_len],
            max_windows,
        }
    }

    /// Allocates and touches the pending queues of CPUs `0..cpus` now, so
    /// the drainer does not fault in megabytes while a measured thread is
    /// due (a CPU's queue is otherwise made when its first event comes).
    pub fn reserve_cpus(&mut self, cpus: usize) {
        while self.pending.len() < cpus {
            self.pending.push(touched_queue(self.per_cpu));
            self.checked.push(0);
            self.overflow.push((0, 0, 0));
        }
    }

    /// Takes one decoded event.
    pub fn take(&mut self, e: Event, flags: &Flags) {
        self.latest_ns = self.latest_ns.max(e.time_ns);
        let c = usize::from(e.cpu);
        self.reserve_cpus(c + 1);
        if self.pending[c].len() == self.per_cpu {
            self.settle(flags, false);
        }
        if self.pending[c].len() == self.per_cpu {
            // Still full: every pending event is recent; the oldest goes,
            // noted as a hole in this CPU's trace (a window over it must
            // not be explained from what is left).
            if let Some(old) = self.pending[c].pop_front() {
                let o = &mut self.overflow[c];
                if o.2 == 0 {
                    o.0 = old.time_ns;
                }
                o.1 = old.time_ns;
                o.2 += 1;
            }
            self.checked[c] = self.checked[c].saturating_sub(1);
        }
        self.pending[c].push_back(e);
    }

    /// The undecided events pushed out of full pending queues, per CPU, as
    /// losses (counted; one span per CPU from the first to the last pushed
    /// out, so a window anywhere in it is treated as having a hole): added
    /// to the kernel's losses, a late wake-up whose window overlaps them is
    /// "unknown (trace lost N events)", never explained from a partial
    /// trace.
    pub fn overflow_losses(&self) -> Vec<crate::loss::Loss> {
        self.overflow
            .iter()
            .enumerate()
            .filter(|(_, o)| o.2 > 0)
            .map(|(cpu, &(from_ns, to_ns, events))| crate::loss::Loss {
                cpu: u16::try_from(cpu).unwrap_or(u16::MAX),
                from_ns,
                to_ns,
                events,
                counted: true,
            })
            .collect()
    }

    /// Events pushed out of full pending queues ([`Keeper::overflow_losses`]).
    pub fn overflowed(&self) -> u64 {
        self.overflow.iter().map(|o| o.2).sum()
    }

    /// The windows kept whole, and those dropped for want of room.
    pub fn into_windows(self) -> (Vec<Event>, Vec<Window>, Vec<Window>) {
        let (store, kept, evicted, _) = self.into_parts();
        (store, kept, evicted)
    }

    /// [`Keeper::into_windows`], and the buffers for a later keeper
    /// ([`Keeper::reusing`]; the store goes back in [`Storage::give_store`]
    /// once the kept events are attributed).
    pub fn into_parts(self) -> (Vec<Event>, Vec<Window>, Vec<Window>, Storage) {
        let mut kept = Vec::new();
        let mut evicted = Vec::new();
        for (w, &ev) in self.windows.iter().zip(&self.evicted) {
            if ev {
                evicted.push(*w);
            } else {
                kept.push(*w);
            }
        }
        let (mut pending, mut owner) = (self.pending, self.owner);
        pending.iter_mut().for_each(VecDeque::clear);
        owner.clear();
        let rest = Storage {
            pending,
            store: Vec::new(),
            owner,
            windows: self.windows,
            from: self.from,
            counts: self.counts,
            evicted: self.evicted,
            checked_span: self.checked_span,
        };
        (self.store, kept, evicted, rest)
    }

    /// Where the kept span of a new window on `cpu` begins: the last
    /// context switch of that CPU in `[start, deadline)` among the pending
    /// events, else `start`.
    fn context_start(&self, w: &Window) -> u64 {
        let Some(q) = self.pending.get(usize::from(w.cpu)) else {
            return w.start_ns;
        };
        let (lo, hi) = around(q, w.start_ns, w.deadline_ns);
        q.range(lo..hi)
            .filter(|e| {
                e.kind == EventKind::Switch && e.time_ns >= w.start_ns && e.time_ns < w.deadline_ns
            })
            .map(|e| e.time_ns)
            .max()
            .unwrap_or(w.start_ns)
    }

    /// The first active window before `upto` on `e`'s CPU that holds `e`.
    fn holder(&self, e: &Event, upto: usize) -> Option<usize> {
        (self.first_active..upto).find(|&j| holds(self.span(j), e))
    }

    /// Reads new flags, keeps the pending events inside windows and lets
    /// go of those older than the horizon (all undecided ones when `last`).
    pub fn settle(&mut self, flags: &Flags, last: bool) {
        let mut fresh: Vec<Window> = Vec::new();
        self.flags_lost += flags.read(&mut self.next_flag, &mut |w| fresh.push(w));
        for w in fresh {
            let from = self.context_start(&w);
            self.add_window(w, from);
        }
        // Events already checked, against the windows flagged or widened
        // since (what a widened window held before was kept then): only
        // those inside each window's span on its CPU.
        let changed: Vec<usize> = (self.first_active..self.windows.len())
            .filter(|&j| self.checked_span[j] != Some(self.span(j)))
            .collect();
        for j in changed {
            let span = self.span(j);
            let c = usize::from(span.cpu);
            if let Some(q) = self.pending.get(c) {
                let (lo, hi) = around(q, span.start_ns, span.end_ns);
                for i in lo..hi.min(self.checked[c]) {
                    let e = self.pending[c][i];
                    let before = self.checked_span[j].is_some_and(|s| holds(s, &e));
                    if holds(span, &e) && !before && self.holder(&e, j).is_none() {
                        self.keep(e, j);
                    }
                }
            }
            self.checked_span[j] = Some(span);
        }
        // New events, against every active window of their CPU: most are
        // past every window's end (flags come after their wake-ups), one
        // comparison each.
        for c in 0..self.pending.len() {
            let mut spans: Vec<(usize, Span)> = Vec::new();
            for j in self.first_active..self.windows.len() {
                if usize::from(self.windows[j].cpu) == c {
                    spans.push((j, self.span(j)));
                }
            }
            let last_end = spans.iter().map(|(_, s)| s.end_ns).max();
            for i in self.checked[c]..self.pending[c].len() {
                let e = self.pending[c][i];
                if !last_end.is_some_and(|end| e.time_ns <= end) {
                    continue;
                }
                if let Some(&(j, _)) = spans.iter().find(|(_, s)| holds(*s, &e)) {
                    self.keep(e, j);
                }
            }
            self.checked[c] = self.pending[c].len();
        }
        let horizon = if last {
            u64::MAX
        } else {
            self.latest_ns.saturating_sub(self.keep_ns)
        };
        for c in 0..self.pending.len() {
            while self.pending[c].front().is_some_and(|e| e.time_ns < horizon) {
                self.pending[c].pop_front();
                self.checked[c] -= 1;
            }
        }
        while self.first_active < self.windows.len()
            && self.windows[self.first_active].end_ns < horizon
            && !last
        {
            self.first_active += 1;
        }
    }

    /// What window `j` keeps now.
    fn span(&self, j: usize) -> Span {
        let w = &self.windows[j];
        Span {
            cpu: w.cpu,
            start_ns: w.start_ns,
            from_ns: self.from[j],
            end_ns: w.end_ns,
        }
    }

    /// Adds a flagged window, merged into a recent one of its CPU it overlaps.
    fn add_window(&mut self, w: Window, from: u64) {
        let n = self.windows.len();
        let recent = n.saturating_sub(8).max(self.first_active.min(n));
        if let Some(j) = (recent..n).rev().find(|&j| {
            let p = &self.windows[j];
            p.cpu == w.cpu && w.start_ns <= p.end_ns && w.end_ns >= p.start_ns
        }) {
            let p = &mut self.windows[j];
            p.start_ns = p.start_ns.min(w.start_ns);
            p.end_ns = p.end_ns.max(w.end_ns);
            p.deadline_ns = p.deadline_ns.min(w.deadline_ns);
            p.latency_ns = p.latency_ns.max(w.latency_ns);
            self.from[j] = self.from[j].min(from);
        } else if n < self.max_windows {
            self.windows.push(w);
            self.from.push(from);
            self.counts.push(0);
            self.evicted.push(false);
            self.checked_span.push(None);
        } else {
            self.windows_dropped += 1;
        }
    }

    /// Keeps `e` for window `j`, making room by dropping the least late
    /// window when the store is full.
    fn keep(&mut self, e: Event, j: usize) {
        if self.evicted[j] {
            self.dropped += 1;
            return;
        }
        if self.store.len() >= self.store_cap {
            // The least late window holding events, this one included.
            let victim = (0..self.windows.len())
                .filter(|&k| self.counts[k] > 0 && !self.evicted[k])
                .min_by_key(|&k| (self.windows[k].latency_ns, k != j));
            let victim = match victim {
                Some(v) if self.windows[v].latency_ns < self.windows[j].latency_ns => v,
                _ => j,
            };
            self.evict(victim);
            if victim == j {
                self.dropped += 1;
                return;
            }
        }
        self.store.push(e);
        self.owner.push(j as u32);
        self.counts[j] += 1;
    }

    /// Drops window `k` whole.
    fn evict(&mut self, k: usize) {
        self.evicted[k] = true;
        self.windows_evicted += 1;
        self.dropped += u64::from(self.counts[k]);
        self.counts[k] = 0;
        let mut n = 0;
        for i in 0..self.store.len() {
            if self.owner[i] as usize != k {
                self.store[n] = self.store[i];
                self.owner[n] = self.owner[i];
                n += 1;
            }
        }
        self.store.truncate(n);
        self.owner.truncate(n);
    }
}
