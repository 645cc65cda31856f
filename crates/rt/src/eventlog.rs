//! An RT-safe event log and a preallocated sample recorder.
//!
//! [`event_log`] splits a bounded single-producer single-consumer ring
//! (rtrb) into an [`EventWriter`] for the real-time thread and an
//! [`EventReader`] for a non-RT drainer. When the ring is full an event is
//! dropped and counted — never blocked on, never silently lost.
//!
//! [`Recorder`] is the other shape of result storage: a fixed-capacity
//! store for a measured loop whose samples are read after the loop ends
//! (FTAP keeps a trial's data in RAM and writes it afterwards). It never
//! grows; samples beyond its capacity are counted as overflow.
//!
//! # RT contract
//! All storage is allocated — and its pages touched, so the loop takes no
//! page faults — when the log or recorder is created. After that,
//! [`EventWriter::push`] and [`Recorder::push`] are **RT-safe**: no
//! allocation, no lock, no system call; a full buffer costs one atomic
//! increment.
//!
//! ```
//! use firmtime_rt::eventlog::event_log;
//! let (mut w, mut r) = event_log::<u64>(2);
//! assert!(w.push(1) && w.push(2));
//! assert!(!w.push(3)); // full: dropped and counted
//! let mut got = Vec::new();
//! r.drain(|e| got.push(e));
//! assert_eq!((got, r.pushed(), r.dropped()), (vec![1, 2], 2, 1));
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Default)]
struct Counters {
    pushed: AtomicU64,
    dropped: AtomicU64,
}

/// Creates an event log holding up to `capacity` undrained events.
///
/// The ring's memory is allocated and touched here, so the RT side takes no
/// page faults on first use.
pub fn event_log<T: Copy + Send>(capacity: usize) -> (EventWriter<T>, EventReader<T>) {
    let (mut producer, consumer) = rtrb::RingBuffer::new(capacity);
    if let Ok(mut chunk) = producer.write_chunk_uninit(capacity) {
        let (a, b) = chunk.as_mut_slices();
        for s in [a, b] {
            // SAFETY: the slots are valid, writable, uninitialised memory of
            // `s.len()` elements; zero bytes are written only to fault the
            // pages in. The chunk is dropped uncommitted, so no slot is ever
            // read as a `T`.
            unsafe { std::ptr::write_bytes(s.as_mut_ptr(), 0, s.len()) };
        }
    }
    let counters = Arc::new(Counters::default());
    (
        EventWriter {
            producer,
            counters: Arc::clone(&counters),
        },
        EventReader {
            consumer,
            counters,
            drained: 0,
        },
    )
}

/// The real-time side of an [`event_log`].
pub struct EventWriter<T> {
    producer: rtrb::Producer<T>,
    counters: Arc<Counters>,
}

impl<T: Copy + Send> EventWriter<T> {
    /// Appends an event; returns false (and counts a drop) if the log is
    /// full. **RT-safe.**
    #[inline]
    pub fn push(&mut self, event: T) -> bool {
        match self.producer.push(event) {
            Ok(()) => {
                self.counters.pushed.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Events accepted so far. **RT-safe.**
    pub fn pushed(&self) -> u64 {
        self.counters.pushed.load(Ordering::Relaxed)
    }

    /// Events dropped because the log was full. **RT-safe.**
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// How many undrained events the log holds at most.
    pub fn capacity(&self) -> usize {
        self.producer.buffer().capacity()
    }
}

impl<T> fmt::Debug for EventWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("capacity", &self.producer.buffer().capacity())
            .field("counters", &self.counters)
            .finish()
    }
}

/// The non-RT side of an [`event_log`].
pub struct EventReader<T> {
    consumer: rtrb::Consumer<T>,
    counters: Arc<Counters>,
    drained: u64,
}

impl<T: Copy + Send> EventReader<T> {
    /// Hands every event currently in the log to `f`, oldest first, and
    /// returns how many. Does not wait for more. Never blocks the writer.
    pub fn drain(&mut self, mut f: impl FnMut(T)) -> usize {
        let n = self.consumer.slots();
        let Ok(chunk) = self.consumer.read_chunk(n) else {
            return 0;
        };
        let (a, b) = chunk.as_slices();
        for &e in a.iter().chain(b) {
            f(e);
        }
        chunk.commit_all();
        self.drained += n as u64;
        n
    }

    /// Events the writer has accepted so far (exact once the writer has
    /// stopped pushing).
    pub fn pushed(&self) -> u64 {
        self.counters.pushed.load(Ordering::Relaxed)
    }

    /// Events the writer dropped because the log was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Events handed out by [`EventReader::drain`] so far.
    pub fn drained(&self) -> u64 {
        self.drained
    }

    /// True once the [`EventWriter`] has been dropped: after a final
    /// [`EventReader::drain`], no more events will come.
    pub fn is_abandoned(&self) -> bool {
        self.consumer.is_abandoned()
    }
}

impl<T> fmt::Debug for EventReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventReader")
            .field("capacity", &self.consumer.buffer().capacity())
            .field("counters", &self.counters)
            .field("drained", &self.drained)
            .finish()
    }
}

/// A fixed-capacity, preallocated sample store for a measured loop.
#[derive(Debug, Clone)]
pub struct Recorder<T: Copy> {
    samples: Vec<T>,
    limit: usize,
    overflow: u64,
}

impl<T: Copy> Recorder<T> {
    /// Allocates room for `n` samples and touches every page of it.
    pub fn with_capacity(n: usize) -> Self {
        let mut samples = Vec::with_capacity(n);
        let spare = samples.spare_capacity_mut();
        // SAFETY: the spare capacity is valid, writable, uninitialised memory
        // of `spare.len()` elements; zero bytes fault the pages in and are
        // never read as `T` (the length stays 0).
        unsafe { std::ptr::write_bytes(spare.as_mut_ptr(), 0, spare.len()) };
        Self {
            samples,
            limit: n,
            overflow: 0,
        }
    }

    /// Stores a sample; returns false (and counts an overflow) when full.
    /// Never grows. **RT-safe.**
    #[inline]
    pub fn push(&mut self, sample: T) -> bool {
        if self.samples.len() < self.limit {
            self.samples.push(sample);
            true
        } else {
            self.overflow += 1;
            false
        }
    }

    /// The samples stored so far, in order.
    pub fn as_slice(&self) -> &[T] {
        &self.samples
    }

    /// Number of samples stored.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when no sample is stored.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// How many samples fit.
    pub fn capacity(&self) -> usize {
        self.limit
    }

    /// Samples refused because the recorder was full.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// Forgets the samples and the overflow count, keeping the memory. **RT-safe.**
    pub fn clear(&mut self) {
        self.samples.clear();
        self.overflow = 0;
    }

    /// The samples as a `Vec` (for the non-RT side, after the loop).
    pub fn into_vec(self) -> Vec<T> {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_never_grows_and_counts_overflow() {
        let mut r = Recorder::<u32>::with_capacity(3);
        assert_no_alloc::assert_no_alloc(|| {
            for i in 0..5 {
                r.push(i);
            }
        });
        assert_eq!(r.as_slice(), &[0, 1, 2]);
        assert_eq!((r.len(), r.capacity(), r.overflow()), (3, 3, 2));
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.overflow(), 0);
        assert!(r.push(9));
        assert_eq!(r.into_vec(), vec![9]);
    }

    #[test]
    fn zero_capacity_recorder_refuses_everything() {
        let mut r = Recorder::<u8>::with_capacity(0);
        assert!(!r.push(1));
        assert_eq!(r.overflow(), 1);
    }

    #[test]
    fn zero_capacity_log_drops_everything() {
        let (mut w, mut r) = event_log::<u8>(0);
        assert!(!w.push(1));
        assert_eq!(r.drain(|_| panic!("nothing to drain")), 0);
        assert_eq!((r.pushed(), r.dropped()), (0, 1));
    }
}
