//! Freezing the windows around late wake-ups: the measured threads flag
//! them ([`Flags`], **RT-safe**, in `firmtime_rt::outliers`), the drainer
//! keeps the events inside them ([`Keeper`]) and lets the rest go once no
//! late wake-up can need them.
//!
//! A thread flags a wake-up when it enters its worst-K notes
//! ([`super::Notes`]): every wake-up that is finally explained was flagged
//! when it happened, so the kept trace is bounded by the number of flags,
//! not by the run's length.

use crate::trace::raw::Event;
pub use firmtime_rt::outliers::{Flags, Window};

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
