//! The drainer's gate: when it may read the ring buffers. Reading costs
//! CPU time on the measured CPUs, so the drainer keeps off them while a
//! measured thread is due (from shortly before its announced deadline
//! until it has woken), unless it is falling behind the kernel.

use super::Flags;
use crate::tracefs;
use std::sync::atomic::{AtomicBool, Ordering};

/// The drainer stops reading this long before a measured thread's
/// announced deadline (longer than it takes to read and decode a page)…
const CLEAR_BEFORE_NS: u64 = 500_000;
/// …and first looks again this long after it: past most wake-ups (the
/// median under SCHED_OTHER and the stress load is ~75 µs, p99 ~220 µs),
/// so that its own timer does not fire while the thread is waking…
const CLEAR_AFTER_NS: u64 = 200_000;
/// …then, while the thread has not yet woken and announced its next
/// deadline, sleeps this long and twice as long each time it is still
/// late…
const CLEAR_STEP_NS: u64 = 50_000;
/// …but never more than this in a row (a thread stalled for good must not
/// let the ring buffers overflow)…
const CLEAR_MAX_NS: u64 = 20_000_000;
/// …and, while the buffers have a backlog (the page just read was full:
/// the kernel has moved on to later pages), it does not wait for a thread
/// already this late, while still keeping clear of the deadlines to come.
/// A thread late again and again (SCHED_OTHER under the stress load) would
/// otherwise let it read one page per wait, and the kernel drop millions of
/// events; reading past every deadline instead (a fixed read slice after
/// each long wait) put it in the way of the threads that were on time.
/// A thread this late has already missed its deadline by something else,
/// which stays its larger cause.
const LATE_READ_NS: u64 = 2_000_000;
/// A page read this long after its first event was written means the
/// drainer is falling behind: it then reads without waiting for anyone
/// until it catches up. The default 4 MiB per CPU hold about 300 ms of the
/// stress load's events, so this leaves two thirds of the buffer spare.
const URGENT_AGE_NS: u64 = 100_000_000;

/// Keeps the drainer off the CPUs while a measured thread is due: from
/// [`CLEAR_BEFORE_NS`] before the earliest deadline announced in `flags`
/// until the thread has woken for it (see [`Flags::next_due`]); `backlog`
/// is [`tracefs::drain_with`]'s word on how far behind it is: with more
/// pages waiting, deadlines more than [`LATE_READ_NS`] past are not waited
/// for; with pages older than [`URGENT_AGE_NS`], none is. Returns the time
/// spent waiting, ns.
pub(super) fn keep_clear(flags: &Flags, stop: &AtomicBool, backlog: tracefs::Backlog) -> u64 {
    let t0 = firmtime_rt::clock::monotonic_ns();
    let (mut step, mut last_due) = (CLEAR_STEP_NS, 0);
    loop {
        let now = firmtime_rt::clock::monotonic_ns();
        if stop.load(Ordering::Relaxed) {
            return now - t0;
        }
        let due = waited_since(now, backlog).and_then(|oldest| flags.next_due_since(oldest));
        let Some(until) = clear_until(now, t0, due, &mut step, &mut last_due) else {
            return now - t0;
        };
        if firmtime_rt::sleep::clock_nanosleep_abs(until).is_err() {
            return now - t0;
        }
    }
}

/// The oldest deadline the drainer still waits for at `now`, given how far
/// behind it is: any (0) without a backlog; none (`None`) once its pages
/// are [`URGENT_AGE_NS`] old; else those less than [`LATE_READ_NS`] past.
fn waited_since(now: u64, backlog: tracefs::Backlog) -> Option<u64> {
    if backlog.age_ns >= URGENT_AGE_NS {
        None
    } else if backlog.full {
        Some(now.saturating_sub(LATE_READ_NS))
    } else {
        Some(0)
    }
}

/// Whether the drainer, waiting since `t0`, waits on at `now` for the
/// earliest deadline it still waits for (`due`), and until when; `step` is
/// the next wait past a deadline (doubled here, and back to
/// [`CLEAR_STEP_NS`] when `due` is not `last_due`: the steps of one late
/// thread must not make the drainer sleep through the next thread's
/// deadline and wake-up). `None`: read now.
fn clear_until(
    now: u64,
    t0: u64,
    due: Option<u64>,
    step: &mut u64,
    last_due: &mut u64,
) -> Option<u64> {
    let due = due?;
    if due != *last_due {
        (*step, *last_due) = (CLEAR_STEP_NS, due);
    }
    if now.saturating_sub(t0) >= CLEAR_MAX_NS || now + CLEAR_BEFORE_NS < due {
        return None;
    }
    let until = if now < due {
        due + CLEAR_AFTER_NS
    } else {
        let u = now + *step;
        *step = (*step * 2).min(CLEAR_MAX_NS);
        u
    };
    Some(until.min(t0 + CLEAR_MAX_NS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracefs::Backlog;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    #[test]
    fn the_drainer_waits_for_late_threads_only_while_it_is_not_behind() {
        let now = 1_000 * MS;
        let none = Backlog::default();
        let full = Backlog {
            full: true,
            age_ns: 5 * MS,
        };
        let urgent = Backlog {
            full: true,
            age_ns: URGENT_AGE_NS,
        };
        let flags = Flags::new(8);
        let (late, soon) = (flags.lane().unwrap(), flags.lane().unwrap());
        flags.due(late, now - 3 * MS); // woken 3 ms late: not yet
        flags.due(soon, now + 300 * US); // due in 300 µs
        let due = |b| waited_since(now, b).and_then(|o| flags.next_due_since(o));
        // Caught up: it waits for the late thread.
        assert_eq!(due(none), Some(now - 3 * MS));
        // A backlog: not for a thread 3 ms late, still for the one due.
        assert_eq!(due(full), Some(now + 300 * US));
        // Falling behind: for no one.
        assert_eq!(due(urgent), None);
        // A thread only 1 ms late is still waited for with a backlog.
        flags.due(late, now - MS);
        assert_eq!(due(full), Some(now - MS));
    }

    #[test]
    fn a_wait_ends_past_the_deadline_steps_while_late_and_never_exceeds_its_cap() {
        let t0 = 1_000 * MS;
        let (mut step, mut last) = (CLEAR_STEP_NS, 0);
        // Nothing announced, or the deadline far enough ahead: read now.
        assert_eq!(clear_until(t0, t0, None, &mut step, &mut last), None);
        assert_eq!(
            clear_until(t0, t0, Some(t0 + MS), &mut step, &mut last),
            None
        );
        // Due within 500 µs: wait until 200 µs past it.
        assert_eq!(
            clear_until(t0, t0, Some(t0 + 400 * US), &mut step, &mut last),
            Some(t0 + 600 * US)
        );
        // Past it and the thread not woken: 50 µs, then 100, 200 µs.
        let due = Some(t0);
        let now = t0 + 600 * US;
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 50 * US)
        );
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 100 * US)
        );
        assert_eq!(
            clear_until(now, t0, due, &mut step, &mut last),
            Some(now + 200 * US)
        );
        // Another thread's deadline, just passed: its steps start again.
        let other = Some(now - 10 * US);
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 50 * US)
        );
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 100 * US)
        );
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(now + 200 * US)
        );
        // Never past t0 + 20 ms, and after 20 ms of waiting it reads.
        let now = t0 + 19 * MS + 900 * US; // the next step (400 µs) would pass 20 ms
        assert_eq!(
            clear_until(now, t0, other, &mut step, &mut last),
            Some(t0 + CLEAR_MAX_NS)
        );
        assert_eq!(
            clear_until(t0 + CLEAR_MAX_NS, t0, other, &mut step, &mut last),
            None
        );
    }
}
