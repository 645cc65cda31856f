//! Where the kernel lost trace events, in time: so that a late wake-up
//! whose trace has a hole gets no cause rather than a wrong one.
//!
//! A CPU's ring buffer loses events when its writer laps the reader
//! (overwrite mode: the oldest pages are overwritten, the CPU's `overrun`
//! count in `per_cpu/cpuN/stats` grows). The kernel tells the reader on the
//! first page it reads after the hole: that page's commit word carries the
//! `RB_MISSED_EVENTS` flag and, when the page has room, the count
//! ([`crate::raw::PageInfo::missed_flag`], [`crate::raw::PageInfo::missed`]).
//! The lost events lie between the last event read from that CPU before the
//! page and the page's time stamp: one [`Loss`]. [`reconcile`] then squares
//! the located counts with the per-CPU `stats` at the end (a count the page
//! did not hold; anything not located at all covers the whole session of
//! that CPU: no window of it can be trusted). Pure code, unit-tested.

use serde::Serialize;

/// Events lost on one CPU between two instants (trace clock, ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Loss {
    /// The CPU whose buffer lost them.
    pub cpu: u16,
    /// The last event read from that CPU before the hole (0: none).
    pub from_ns: u64,
    /// The time stamp of the first page read after it (`u64::MAX` for a
    /// loss that could not be located: the whole session).
    pub to_ns: u64,
    /// How many events (0 while the page did not hold the count and
    /// [`reconcile`] had none to give it).
    pub events: u64,
    /// The page held the count (false: it came from `stats`, or is unknown).
    pub counted: bool,
}

impl Loss {
    /// True when this loss may hide events of `cpu` in `[a, b]`.
    pub fn overlaps(&self, cpu: usize, a: u64, b: u64) -> bool {
        usize::from(self.cpu) == cpu && self.from_ns <= b && self.to_ns >= a
    }
}

/// Losses that may hide events of `cpu` in `[a, b]`: `(events, losses)`;
/// `(0, 0)` when the trace of that span is complete.
pub fn lost_in(losses: &[Loss], cpu: usize, a: u64, b: u64) -> (u64, usize) {
    losses
        .iter()
        .filter(|l| l.overlaps(cpu, a, b))
        .fold((0, 0), |(n, k), l| (n + l.events, k + 1))
}

/// Events lost on any CPU in `[a, b]` (e.g. one `watch` interval): the
/// losses that overlap it, counted whole.
pub fn lost_between(losses: &[Loss], a: u64, b: u64) -> u64 {
    losses
        .iter()
        .filter(|l| l.from_ns <= b && l.to_ns >= a)
        .map(|l| l.events)
        .sum()
}

/// Losses recorded by the drainer, in storage allocated before it starts
/// (at most [`LossLog::CAPACITY`]; past that a CPU's new loss widens its
/// last one, which stays conservative: a wider hole; never forgotten).
#[derive(Debug, Clone)]
pub struct LossLog {
    /// The losses, per CPU in time order.
    pub losses: Vec<Loss>,
}

impl Default for LossLog {
    fn default() -> Self {
        Self::new()
    }
}

impl LossLog {
    /// Losses held before they are merged.
    pub const CAPACITY: usize = 4096;

    /// An empty log with its storage allocated.
    pub fn new() -> LossLog {
        LossLog {
            losses: Vec::with_capacity(Self::CAPACITY),
        }
    }

    /// Notes a page of `cpu` flagged as following lost events: `missed`
    /// events (0: count not stored) between `from_ns` (the last event read
    /// from `cpu` before it) and `to_ns` (the page's time stamp).
    pub fn note(&mut self, cpu: u16, from_ns: u64, to_ns: u64, missed: u64) {
        let l = Loss {
            cpu,
            from_ns: from_ns.min(to_ns),
            to_ns,
            events: missed,
            counted: missed > 0,
        };
        if self.losses.len() < Self::CAPACITY {
            self.losses.push(l);
        } else if let Some(last) = self.losses.iter_mut().rev().find(|x| x.cpu == cpu) {
            last.from_ns = last.from_ns.min(l.from_ns);
            last.to_ns = last.to_ns.max(l.to_ns);
            last.events += l.events;
            last.counted &= l.counted;
        } else {
            // Full of other CPUs' losses: this CPU's first one still goes
            // in (the drainer is not real-time code; this is rare).
            self.losses.push(l);
        }
    }
}

/// Squares located losses with the kernel's per-CPU counts at the end
/// (`stats`: `(cpu, overrun + dropped)`): per CPU, what `stats` counts
/// beyond the located counts goes to the located losses without a count
/// (shared evenly, the remainder to the first), or, when there is none, to
/// a loss over the whole session of that CPU. Returns the events lost per
/// the larger of the two readings, summed over CPUs (the page counts and
/// `stats` count the same events: they are not added).
pub fn reconcile(losses: &mut Vec<Loss>, stats: &[(usize, u64)]) -> u64 {
    let mut total = 0;
    let mut cpus: Vec<usize> = stats.iter().map(|&(c, _)| c).collect();
    for l in losses.iter() {
        if !cpus.contains(&usize::from(l.cpu)) {
            cpus.push(usize::from(l.cpu));
        }
    }
    for cpu in cpus {
        let counted: u64 = losses
            .iter()
            .filter(|l| usize::from(l.cpu) == cpu)
            .map(|l| l.events)
            .sum();
        let kernel = stats
            .iter()
            .filter(|&&(c, _)| c == cpu)
            .map(|&(_, n)| n)
            .sum::<u64>();
        total += counted.max(kernel);
        let rest = kernel.saturating_sub(counted);
        if rest == 0 {
            continue;
        }
        let blank: Vec<usize> = losses
            .iter()
            .enumerate()
            .filter(|(_, l)| usize::from(l.cpu) == cpu && l.events == 0)
            .map(|(i, _)| i)
            .collect();
        if blank.is_empty() {
            losses.push(Loss {
                cpu: u16::try_from(cpu).unwrap_or(u16::MAX),
                from_ns: 0,
                to_ns: u64::MAX,
                events: rest,
                counted: false,
            });
        } else {
            let k = blank.len() as u64;
            for (j, &i) in blank.iter().enumerate() {
                losses[i].events = rest / k + if j == 0 { rest % k } else { 0 };
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(cpu: u16, from_ns: u64, to_ns: u64, events: u64) -> Loss {
        Loss {
            cpu,
            from_ns,
            to_ns,
            events,
            counted: events > 0,
        }
    }

    #[test]
    fn a_loss_maps_to_the_windows_of_its_cpu_that_overlap_its_hole_only() {
        let ls = [loss(1, 1_000, 2_000, 50), loss(1, 5_000, 6_000, 7)];
        // Inside, across either edge, and holding the whole hole.
        assert_eq!(lost_in(&ls, 1, 1_500, 1_600), (50, 1));
        assert_eq!(lost_in(&ls, 1, 500, 1_000), (50, 1));
        assert_eq!(lost_in(&ls, 1, 2_000, 3_000), (50, 1));
        assert_eq!(lost_in(&ls, 1, 0, 10_000), (57, 2));
        // Between the holes, before and after: complete.
        assert_eq!(lost_in(&ls, 1, 2_001, 4_999), (0, 0));
        assert_eq!(lost_in(&ls, 1, 0, 999), (0, 0));
        assert_eq!(lost_in(&ls, 1, 6_001, 9_000), (0, 0));
        // Another CPU's window at the same time: complete.
        assert_eq!(lost_in(&ls, 0, 1_500, 1_600), (0, 0));
        // An interval of watch: any CPU.
        assert_eq!(lost_between(&ls, 1_900, 5_100), 57);
        assert_eq!(lost_between(&ls, 2_100, 4_900), 0);
    }

    #[test]
    fn the_drainer_log_widens_rather_than_forgets_when_full() {
        let mut log = LossLog::new();
        for i in 0..LossLog::CAPACITY as u64 {
            log.note(0, i * 10, i * 10 + 5, 1);
        }
        assert_eq!(log.losses.len(), LossLog::CAPACITY);
        log.note(0, 1_000_000, 1_000_100, 3);
        assert_eq!(log.losses.len(), LossLog::CAPACITY);
        let last = log.losses.last().unwrap();
        assert_eq!((last.to_ns, last.events), (1_000_100, 4));
        assert_eq!(lost_in(&log.losses, 0, 1_000_050, 1_000_060).0, 4);
        // A CPU with no loss yet still gets its own, past the capacity.
        log.note(1, 7, 9, 2);
        assert_eq!(lost_in(&log.losses, 1, 8, 8), (2, 1));
        assert_eq!(lost_in(&log.losses, 0, 1_000_050, 1_000_060).0, 4);
        // A flagged page without its count: a loss of unknown size.
        let mut log = LossLog::new();
        log.note(0, 100, 50, 0);
        assert_eq!(log.losses[0], loss(0, 50, 50, 0));
        assert!(!log.losses[0].counted);
    }

    #[test]
    fn reconcile_gives_stats_counts_to_uncounted_holes_or_the_whole_session_and_never_adds_twice() {
        // CPU 0: the pages counted 40 of the 100 stats counts; two holes
        // without a count share the 60. CPU 1: pages and stats agree.
        // CPU 2: stats count 5 that no page located: the whole session.
        let mut ls = vec![
            loss(0, 10, 20, 40),
            loss(0, 30, 40, 0),
            loss(0, 50, 60, 0),
            loss(1, 10, 20, 9),
        ];
        let total = reconcile(&mut ls, &[(0, 100), (1, 9), (2, 5)]);
        assert_eq!(total, 100 + 9 + 5);
        assert_eq!(ls[1].events + ls[2].events, 60);
        assert_eq!(ls[3].events, 9);
        let whole = ls.iter().find(|l| l.cpu == 2).unwrap();
        assert_eq!((whole.from_ns, whole.to_ns, whole.events), (0, u64::MAX, 5));
        assert_eq!(lost_in(&ls, 2, 1, 2), (5, 1));
        // Pages counted more than stats (stats read before the last
        // pages): the larger, once.
        let mut ls = vec![loss(0, 10, 20, 70)];
        assert_eq!(reconcile(&mut ls, &[(0, 50)]), 70);
        assert_eq!(ls.len(), 1);
        // Nothing lost: nothing added.
        let mut ls = Vec::new();
        assert_eq!(reconcile(&mut ls, &[(0, 0), (1, 0)]), 0);
        assert!(ls.is_empty());
    }
}
