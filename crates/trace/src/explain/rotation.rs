//! One explaining session per interval of a long-running consumer
//! (`watch`): each interval's measuring buffers flag into their own
//! session ([`Rotation::flags`]); once every buffer bound to a session is
//! back ([`Rotation::hand_in`]), that session is finished and its record
//! taken out ([`Rotation::take_done`]) for attribution, while the next
//! interval's session already runs in storage an earlier one left
//! ([`Pool`]: two storages for the whole run, not a fresh one per
//! interval, issue 29 item 5).
//!
//! Each session's ring buffers are sized from the event rate the one
//! before it measured ([`next_buffer_kb`]): room for two seconds of it,
//! twice the last size after a loss, never below the configured size. The
//! first session probes the rate ([`Config::size_from_rate`]).
//!
//! Not touched at a deadline: the measuring threads see only the
//! [`Flags`] of their session (RT-safe); starting, finishing and the
//! bookkeeping run on the consumer's ordinary thread.

use super::{Config, Flags, Pool, Recorded, Session};
use crate::error::Result;
use crate::tracefs;
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
    /// The ring buffer per CPU of the last session started, KiB.
    buffer_kb: Option<u32>,
}

/// The ring buffer per CPU, KiB, of a session that follows one whose
/// busiest CPU wrote `rate_bytes_per_s` into a buffer of `last_kb` and
/// `lost` events (or not): two seconds of the rate
/// ([`tracefs::buffer_kb_for_rate`]), at least twice `last_kb` after a loss
/// (the rate is an interval's mean; a loss says a burst went above it), at
/// least `min_kb`, at most [`tracefs::BUFFER_MAX_KB`].
pub fn next_buffer_kb(rate_bytes_per_s: u64, lost: bool, last_kb: u32, min_kb: u32) -> u32 {
    let kb = tracefs::buffer_kb_for_rate(rate_bytes_per_s, min_kb);
    if lost {
        kb.max(last_kb.saturating_mul(2).min(tracefs::BUFFER_MAX_KB))
    } else {
        kb
    }
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
            buffer_kb: None,
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
        // Sized from the latest session's rate; the first probes its own.
        let config = match self.live.values().next_back() {
            Some(last) => {
                let (rate, lost) = last.session.written_rate();
                Config {
                    buffer_kb: next_buffer_kb(
                        rate,
                        lost,
                        last.session.buffer_kb(),
                        self.config.buffer_kb,
                    ),
                    size_from_rate: false,
                    ..self.config.clone()
                }
            }
            None => self.config.clone(),
        };
        let session = Session::start_pooled(&config, &self.traced_comm, &self.pool)?;
        self.buffer_kb = Some(session.buffer_kb());
        self.live.insert(
            interval,
            Live {
                session,
                outstanding: buffers,
            },
        );
        Ok(())
    }

    /// Like [`Rotation::start`], unless `max_live` sessions are live
    /// already: then nothing starts and `Ok(false)` says so (that interval
    /// goes unexplained). A consumer that fell behind — its sessions
    /// finished later than new ones start, each one decoding the same
    /// flood of events — would otherwise pile them up, and with them the
    /// work that made it fall behind and a storage each.
    ///
    /// # Errors
    /// As [`Session::start`].
    pub fn start_bounded(
        &mut self,
        interval: u64,
        buffers: usize,
        max_live: usize,
    ) -> Result<bool> {
        if self.live.len() >= max_live && !self.live.contains_key(&interval) {
            return Ok(false);
        }
        self.start(interval, buffers).map(|()| true)
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

    /// The ring buffer per CPU of the last session started, KiB (`None`
    /// before the first).
    pub fn buffer_kb(&self) -> Option<u32> {
        self.buffer_kb
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
    fn the_next_buffer_holds_two_seconds_of_the_rate_and_doubles_after_a_loss() {
        // 1 MiB/s: 2 MiB.
        assert_eq!(next_buffer_kb(1 << 20, false, 1024, 1024), 2048);
        // A quiet interval: back to the least.
        assert_eq!(next_buffer_kb(1000, false, 8192, 1024), 1024);
        // A loss at a low mean rate: twice the last size.
        assert_eq!(next_buffer_kb(1000, true, 4096, 1024), 8192);
        // A loss at a high rate: the rate's size when it is larger.
        assert_eq!(next_buffer_kb(16 << 20, true, 4096, 1024), 32_768);
        // Never beyond the cap.
        assert_eq!(
            next_buffer_kb(0, true, tracefs::BUFFER_MAX_KB, 1024),
            tracefs::BUFFER_MAX_KB
        );
        assert_eq!(
            next_buffer_kb(u64::MAX, false, 1024, 1024),
            tracefs::BUFFER_MAX_KB
        );
    }

    #[test]
    fn a_session_after_a_switch_flood_gets_a_ring_buffer_sized_from_it() {
        if !usable() {
            return;
        }
        let cpu = *firmtime_rt::sched::online_cpus().last().expect("a CPU");
        let mut r = Rotation::new(
            Config {
                cpus: Some(vec![cpu]),
                ..config()
            },
            "ft-rotation*",
        );
        r.start(0, 1).expect("interval 0");
        assert_eq!(r.buffer_kb(), Some(256), "no probe asked: as configured");
        // Two threads on one CPU handing a token back and forth: a context
        // switch each way, tens of thousands a second, for 400 ms.
        let (a_tx, a_rx) = std::sync::mpsc::sync_channel::<()>(0);
        let (b_tx, b_rx) = std::sync::mpsc::sync_channel::<()>(0);
        let until = std::time::Instant::now() + std::time::Duration::from_millis(400);
        std::thread::scope(|s| {
            s.spawn(move || {
                let _ = firmtime_rt::sched::set_affinity(&[cpu]);
                while b_rx.recv().is_ok() {
                    if a_tx.send(()).is_err() {
                        break;
                    }
                }
            });
            let _ = firmtime_rt::sched::set_affinity(&[cpu]);
            while std::time::Instant::now() < until {
                if b_tx.send(()).is_err() || a_rx.recv().is_err() {
                    break;
                }
            }
            drop(b_tx);
        });
        let (rate, _) = r
            .live
            .values()
            .next_back()
            .expect("live")
            .session
            .written_rate();
        r.start(1, 1).expect("interval 1");
        let kb = r.buffer_kb().expect("started");
        assert!(
            rate > 256 * 1024,
            "a switch flood writes more than 256 KiB/s: {rate} B/s"
        );
        // The rate went on between the reading above and the start: the
        // size is at least what that reading gave.
        assert!(
            kb >= tracefs::buffer_kb_for_rate(rate, 256) / 2 && kb > 256,
            "{kb} KiB after {rate} B/s"
        );
        r.hand_in(0);
        drop(r.take_done(0));
        r.hand_in(1);
        drop(r.take_done(1));
    }

    #[test]
    fn no_third_session_starts_while_two_are_live() {
        if !usable() {
            return;
        }
        let mut r = Rotation::new(config(), "ft-rotation*");
        assert!(r.start_bounded(0, 1, 2).expect("interval 0"));
        assert!(r.start_bounded(1, 1, 2).expect("interval 1"));
        assert!(!r.start_bounded(2, 1, 2).expect("refused, no error"));
        assert_eq!(r.live(), vec![0, 1], "nothing started for 2");
        assert!(r.flags(2).is_none(), "interval 2 flags nowhere");
        r.hand_in(0);
        let rec = r.take_done(0).expect("0 is done").expect("finish");
        drop(explain(rec, &[], &this_machine()));
        assert!(r.start_bounded(3, 1, 2).expect("interval 3"));
        assert_eq!(r.live(), vec![1, 3]);
        assert_eq!(r.pool().spare() + r.live().len(), 2, "two storages in all");
        for i in [1, 3] {
            r.hand_in(i);
            drop(r.take_done(i));
        }
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
