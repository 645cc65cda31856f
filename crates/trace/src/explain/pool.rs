//! Storage shared by the sessions of one long-running consumer: `watch`
//! starts an explaining session per interval, and each session's drainer
//! needs tens of megabytes (the CPUs' pending queues and the store of kept
//! events, [`Storage`]). Allocated anew per interval, glibc kept the freed
//! arenas and `mlockall` locked them (issue 29: RSS 61 → 104 MB). A
//! [`Pool`] hands a finished session's buffers to the next one instead:
//! [`super::Session::start_pooled`] takes them, [`super::Session::finish`]
//! returns all but the kept events in [`super::Recorded::lease`], and
//! [`super::explain`] returns those once attributed (a session dropped
//! unfinished returns everything).

use super::window::Storage;
use std::sync::{Arc, Mutex, PoisonError};

/// Buffers of finished sessions waiting for the next one. Cloning shares
/// the pool. Not touched at a deadline (the drainer and the attribution
/// are ordinary threads): a mutex is fine.
#[derive(Debug, Clone, Default)]
pub struct Pool(Arc<Mutex<Vec<Storage>>>);

impl Pool {
    /// An empty pool: the first session allocates.
    pub fn new() -> Pool {
        Pool::default()
    }

    /// The largest spare storage, or an empty one (the keeper allocates).
    pub fn take(&self) -> Storage {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let best = (0..v.len()).max_by_key(|&i| v[i].bytes());
        best.map(|i| v.swap_remove(i)).unwrap_or_default()
    }

    /// Keeps `s` for a later session.
    pub fn give(&self, s: Storage) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(s);
    }

    /// Storages waiting (at most the sessions that overlapped).
    pub fn spare(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Bytes held by the storages waiting.
    pub fn spare_bytes(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(Storage::bytes)
            .sum()
    }
}

/// A finished session's buffers on their way back to their [`Pool`]:
/// returned when dropped, with the store of kept events if
/// [`Lease::give_store`] got it back first.
#[derive(Debug)]
pub struct Lease {
    pool: Pool,
    storage: Option<Storage>,
}

impl Lease {
    pub(crate) fn new(pool: Pool, storage: Storage) -> Lease {
        Lease {
            pool,
            storage: Some(storage),
        }
    }

    /// Hands back the store of kept events (after attribution).
    pub fn give_store(&mut self, store: Vec<crate::raw::Event>) {
        if let Some(s) = &mut self.storage {
            s.give_store(store);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(s) = self.storage.take() {
            self.pool.give(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::Keeper;
    use super::*;
    use crate::raw::{Event, EventKind};

    fn switch(cpu: u16, t: u64) -> Event {
        Event {
            cpu,
            time_ns: t,
            kind: EventKind::Switch,
            ..Event::ZERO
        }
    }

    /// One interval's keeper: events on two CPUs, a window on each, its
    /// buffers back in `pool` as a session leaves them (the store after
    /// attribution).
    fn interval(pool: &Pool) -> (Vec<usize>, usize) {
        let flags = crate::explain::Flags::new(64);
        let mut k = Keeper::reusing(1_000, 500, 1_000_000_000, pool.take());
        k.reserve_cpus(2);
        for i in 0..300u64 {
            k.take(switch((i % 2) as u16, 1_000 + i * 10), &flags);
        }
        flags.push(crate::explain::Window::span(1, 1_000, 2_000));
        k.settle(&flags, true);
        assert!(!k.store.is_empty(), "the window kept events");
        let (store, _kept, _evicted, mut rest) = k.into_parts();
        rest.give_store(store);
        let seen = (rest.addresses(), rest.bytes());
        let mut lease = Lease::new(pool.clone(), rest);
        lease.give_store(Vec::new()); // a smaller store never replaces it
        drop(lease);
        seen
    }

    #[test]
    fn the_second_interval_reuses_the_first_ones_storage() {
        let pool = Pool::new();
        let (first, bytes) = interval(&pool);
        assert_eq!(pool.spare(), 1);
        assert_eq!(pool.spare_bytes(), bytes);
        // The pending queues (two CPUs), the store, its owners and the
        // window list: same addresses, no more bytes.
        assert_eq!(first.len(), 5);
        let (second, bytes2) = interval(&pool);
        assert_eq!(second, first, "the second interval allocated anew");
        assert_eq!(bytes2, bytes);
        assert_eq!(pool.spare(), 1);
    }

    #[test]
    fn a_pooled_keeper_bounds_its_store_by_the_asked_size_not_the_reused_capacity() {
        // A store reused from a larger session must not hold more events
        // than this session's `max_events`.
        let pool = Pool::new();
        let mut big = Keeper::new(10, 1_000, 1).into_parts();
        big.3.give_store(big.0);
        pool.give(big.3);
        let flags = crate::explain::Flags::new(64);
        let mut k = Keeper::reusing(10_000, 25, 1_000_000_000, pool.take());
        for i in 0..100u64 {
            k.take(switch(0, 1_000 + i), &flags);
        }
        flags.push(crate::explain::Window::span(0, 1_000, 1_100));
        k.settle(&flags, true);
        // 100 events in one window, room for 25: dropped whole (with the
        // reused store's room for 1,000 it would have been kept).
        assert!(pool.take().bytes() == 0, "the one storage was taken");
        assert_eq!(k.store.len(), 0);
        assert_eq!(k.windows_evicted, 1);
        assert_eq!(k.dropped, 100);
    }
}
