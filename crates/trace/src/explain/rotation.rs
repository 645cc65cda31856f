//! One explaining session per interval of a long-running consumer
//! (`watch`): each interval's measuring buffers flag into their own
//! session ([`Rotation::flags`]); once every buffer bound to a session is
//! back ([`Rotation::hand_in`]), that session is finished and its record
//! taken out ([`Rotation::take_done`]) for attribution, while the next
//! interval's session already runs in storage an earlier one left
//! ([`Pool`]: two storages for the whole run, not a fresh one per
//! interval, issue 29 item 5).
//!
//! Not touched at a deadline: the measuring threads see only the
//! [`Flags`] of their session (RT-safe); starting, finishing and the
//! bookkeeping run on the consumer's ordinary thread.

use super::{Config, Flags, Pool, Recorded, Session};
use crate::error::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A session and the buffers bound to it still out.
#[derive(Debug)]
struct Live {
    session: Session,
    outstanding: usize,
}

/// The explaining sessions of a run that starts one per interval, keyed by
/// the interval (the consumer's tag), their drainers' storage shared
/// through one [`Pool`]. Two are live at a boundary: the next interval's
/// starts before the last one's buffers are all back.
#[derive(Debug)]
pub struct Rotation {
    config: Config,
    traced_comm: String,
    pool: Pool,
    live: BTreeMap<u64, Live>,
}

impl Rotation {
    /// No session yet: each interval's is started with `config`, recording
    /// the threads whose comm matches the glob `traced_comm`
    /// ([`Session::start_pooled`]).
    pub fn new(config: Config, traced_comm: &str) -> Rotation {
        Rotation {
            config,
            traced_comm: traced_comm.to_string(),
            pool: Pool::new(),
            live: BTreeMap::new(),
        }
    }

    /// Starts interval `interval`'s session in the storage of a finished
    /// one where the pool has it; `buffers` bound to it must come back
    /// ([`Rotation::hand_in`]) before it is finished. A session already
    /// live for `interval` is replaced (dropped: its storage goes back to
    /// the pool).
    ///
    /// # Errors
    /// As [`Session::start`]; nothing is live for `interval` then.
    pub fn start(&mut self, interval: u64, buffers: usize) -> Result<()> {
        self.live.remove(&interval);
        let session = Session::start_pooled(&self.config, &self.traced_comm, &self.pool)?;
        self.live.insert(
            interval,
            Live {
                session,
                outstanding: buffers,
            },
        );
        Ok(())
    }

    /// Where the buffers of `interval` flag their late wake-ups
    /// ([`super::Notes::flagging`]); `None` when no session runs for it.
    pub fn flags(&self, interval: u64) -> Option<Arc<Flags>> {
        self.live.get(&interval).map(|l| l.session.flags())
    }

    /// One buffer bound to `interval`'s session came back (none live: nothing).
    pub fn hand_in(&mut self, interval: u64) {
        if let Some(l) = self.live.get_mut(&interval) {
            l.outstanding = l.outstanding.saturating_sub(1);
        }
    }

    /// Finishes `interval`'s session once every buffer bound to it is back
    /// and hands over what it recorded (its storage goes back to the pool
    /// through [`Recorded::lease`] once [`super::explain`] attributed it);
    /// `None` while buffers are out or no session runs for it.
    pub fn take_done(&mut self, interval: u64) -> Option<Result<Recorded>> {
        if !self.live.get(&interval).is_some_and(|l| l.outstanding == 0) {
            return None;
        }
        self.live.remove(&interval).map(|l| l.session.finish())
    }

    /// Drops the sessions of intervals before `interval` still waiting for
    /// a buffer (one merged into a later interval never comes back): their
    /// intervals go unexplained, their storage goes back to the pool.
    pub fn drop_before(&mut self, interval: u64) {
        let later = self.live.split_off(&interval);
        self.live = later;
    }

    /// The intervals whose sessions run, in order.
    pub fn live(&self) -> Vec<u64> {
        self.live.keys().copied().collect()
    }

    /// The pool the sessions' storage comes from and goes back to.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::super::{explain, this_machine, Window, WokenBy};
    use super::*;

    fn usable() -> bool {
        match super::super::available() {
            Ok(()) => true,
            Err(why) => {
                firmtime_rt::testing::skip(why);
                false
            }
        }
    }

    /// `watch`'s kind of session, smaller: the pending queues are still
    /// the most of its storage.
    fn config() -> Config {
        Config {
            worst: 16,
            max_events: 10_000,
            pending_events: 0,
            max_windows: 64,
            buffer_kb: 256,
            woken_by: WokenBy::OwnTimer,
            ..Config::default()
        }
    }

    /// A window only interval `i` flags (its own CPU-0 span).
    fn window(i: u64) -> Window {
        Window::span(0, 1_000_000 * (i + 1), 1_000_000 * (i + 1) + 500)
    }

    #[test]
    fn each_interval_gets_exactly_the_windows_its_buffers_flagged() {
        if !usable() {
            return;
        }
        let mut r = Rotation::new(config(), "ft-rotation*");
        r.start(0, 2).expect("interval 0");
        r.flags(0).expect("flags of 0").push(window(0));
        // The next interval starts before the last one's buffers are back.
        r.start(1, 2).expect("interval 1");
        r.flags(1).expect("flags of 1").push(window(1));
        assert_eq!(r.live(), vec![0, 1]);
        assert!(r.take_done(0).is_none(), "two buffers of 0 are out");
        r.hand_in(0);
        assert!(r.take_done(0).is_none(), "one buffer of 0 is out");
        r.hand_in(0);
        let rec = r.take_done(0).expect("0 is done").expect("finish");
        assert_eq!(rec.windows, vec![window(0)]);
        assert!(rec.evicted.is_empty());
        assert_eq!(r.live(), vec![1], "only 0 was finished");
        assert!(r.take_done(0).is_none(), "0 is handed over once");
        drop(explain(rec, &[], &this_machine()));
        r.hand_in(1);
        r.hand_in(1);
        let rec = r.take_done(1).expect("1 is done").expect("finish");
        assert_eq!(rec.windows, vec![window(1)]);
        assert!(r.live().is_empty());
    }

    #[test]
    fn sessions_rotated_for_many_intervals_reuse_two_storages() {
        if !usable() {
            return;
        }
        let mut r = Rotation::new(config(), "ft-rotation*");
        let machine = this_machine();
        r.start(0, 1).expect("interval 0");
        let mut bytes = Vec::new();
        for i in 1..=12u64 {
            // As watch does: the next interval's session, then the last
            // one's buffer back, its record attributed.
            r.start(i, 1).expect("next interval");
            r.flags(i - 1).expect("live").push(window(i - 1));
            r.hand_in(i - 1);
            let rec = r.take_done(i - 1).expect("done").expect("finish");
            assert_eq!(rec.windows, vec![window(i - 1)], "interval {}", i - 1);
            drop(explain(rec, &[], &machine));
            assert_eq!(r.pool().spare(), 1, "interval {i}: one storage waits");
            bytes.push(r.pool().spare_bytes());
        }
        assert!(bytes[0] > 0, "the storage came back to the pool");
        // Interval 1's session made the second storage (interval 0's was
        // in use); from then on the two take turns: not one byte more.
        assert!(
            bytes.iter().all(|&b| b == bytes[0]),
            "the storage grew over the rotations: {bytes:?}"
        );
        // A session dropped with a buffer still out gives its storage back.
        r.drop_before(13);
        assert!(r.live().is_empty());
        assert_eq!(r.pool().spare(), 2);
        assert_eq!(r.pool().spare_bytes(), bytes[0] * 2);
    }
}
