//! Audio input for taps from sound: the JACK backend's optional audio input
//! port, whose samples go to the engine side in fixed-size blocks.
//!
//! The process callback copies each cycle's samples of the port into
//! [`AudioBlock`]s (at most [`AUDIO_BLOCK`] samples each, with the frame of
//! the first sample and the cycle's times) through a preallocated SPSC ring;
//! the engine side takes them with
//! [`MidiBackend::poll_audio`](crate::MidiBackend::poll_audio) and runs its
//! onset detector on them (firmtime-tap's `onset`). A full ring drops the
//! block and counts its frames ([`AudioBlock::dropped_frames`]): nothing is
//! lost silently. **RT-safe.**: no allocation, lock or print in the callback.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use firmtime_jack::CycleTimes;
use jack::{AudioIn, Port, ProcessScope};
use rtrb::{Consumer, Producer, RingBuffer};

/// Most samples in one [`AudioBlock`]: a longer cycle is split.
pub const AUDIO_BLOCK: usize = 1024;

/// Options of the audio input port ([`JackOptions::audio_in`](super::JackOptions::audio_in)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioInOptions {
    /// The port's short name (default `audio_in`).
    pub port: String,
    /// Full names of ports (`client:port`) to connect to it.
    pub connect: Vec<String>,
    /// Capacity of the ring, in blocks (default 512: 10.9 s at 48 kHz).
    pub blocks: usize,
}

impl Default for AudioInOptions {
    fn default() -> Self {
        AudioInOptions {
            port: "audio_in".into(),
            connect: Vec::new(),
            blocks: 512,
        }
    }
}

/// Samples of the audio input from one cycle (or part of one).
#[derive(Debug, Clone, Copy)]
pub struct AudioBlock {
    /// The frame of `samples[0]`.
    pub frame: u64,
    /// The times of the cycle the samples came in (frame → CLOCK_MONOTONIC ns
    /// with [`CycleTimes::frame_to_ns`]).
    pub cycle: CycleTimes,
    /// The server's sample rate, Hz.
    pub sample_rate: u32,
    /// Frames dropped so far because the ring was full (cumulative).
    pub dropped_frames: u64,
    /// Valid samples in `samples`.
    pub len: u32,
    /// The samples (`len` of them).
    pub samples: [f32; AUDIO_BLOCK],
}

impl AudioBlock {
    /// The valid samples.
    pub fn samples(&self) -> &[f32] {
        &self.samples[..(self.len as usize).min(AUDIO_BLOCK)]
    }
}

/// The callback's side of the audio input.
pub(super) struct AudioInPart {
    pub(super) port: Port<AudioIn>,
    tx: Producer<AudioBlock>,
    dropped: Arc<AtomicU64>,
    sample_rate: u32,
}

/// The engine's side of the audio input.
#[derive(Debug)]
pub(super) struct AudioInEnd {
    rx: Consumer<AudioBlock>,
}

pub(super) fn new_audio_in(
    port: Port<AudioIn>,
    blocks: usize,
    sample_rate: u32,
) -> (AudioInPart, AudioInEnd) {
    let (tx, rx) = RingBuffer::new(blocks.max(1));
    (
        AudioInPart {
            port,
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
            sample_rate,
        },
        AudioInEnd { rx },
    )
}

impl AudioInPart {
    /// Queues the port's samples of this cycle. **RT-safe.**
    pub(super) fn cycle(&mut self, cycle: &CycleTimes, ps: &ProcessScope) {
        let s = self.port.as_slice(ps);
        let n = (cycle.n_frames as usize).min(s.len());
        push_blocks(
            &mut self.tx,
            &self.dropped,
            self.sample_rate,
            cycle,
            &s[..n],
        );
    }
}

/// The body of [`AudioInPart::push`], over a plain ring. **RT-safe.**
fn push_blocks(
    tx: &mut Producer<AudioBlock>,
    dropped: &AtomicU64,
    sample_rate: u32,
    cycle: &CycleTimes,
    samples: &[f32],
) {
    let mut frame = cycle.frame;
    for chunk in samples.chunks(AUDIO_BLOCK) {
        let n = chunk.len();
        match tx.write_chunk_uninit(1) {
            Ok(mut w) => {
                let (a, _) = w.as_mut_slices();
                let slot = a[0].as_mut_ptr();
                // SAFETY: `slot` points to one uninitialised AudioBlock in the
                // ring; every field is written before commit, the samples
                // beyond `n` are zeroed.
                unsafe {
                    std::ptr::addr_of_mut!((*slot).frame).write(frame);
                    std::ptr::addr_of_mut!((*slot).cycle).write(*cycle);
                    std::ptr::addr_of_mut!((*slot).sample_rate).write(sample_rate);
                    std::ptr::addr_of_mut!((*slot).dropped_frames)
                        .write(dropped.load(Ordering::Relaxed));
                    std::ptr::addr_of_mut!((*slot).len).write(n as u32);
                    let s = std::ptr::addr_of_mut!((*slot).samples) as *mut f32;
                    std::ptr::copy_nonoverlapping(chunk.as_ptr(), s, n);
                    std::ptr::write_bytes(s.add(n), 0, AUDIO_BLOCK - n);
                    w.commit_all();
                }
            }
            Err(_) => {
                dropped.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        frame += n as u64;
    }
}

impl AudioInEnd {
    /// Calls `f` for each queued block, oldest first. **RT-safe.**
    pub(super) fn poll(&mut self, f: &mut dyn FnMut(&AudioBlock)) -> usize {
        let mut n = 0;
        while let Ok(r) = self.rx.read_chunk(1) {
            let (a, _) = r.as_slices();
            f(&a[0]);
            r.commit_all();
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_their_frames_split_long_cycles_and_count_what_a_full_ring_drops() {
        let (mut tx, rx) = RingBuffer::<AudioBlock>::new(3);
        let dropped = AtomicU64::new(0);
        let samples: Vec<f32> = (0..2500).map(|i| i as f32).collect();
        let c = CycleTimes {
            frame: 1000,
            n_frames: 2500,
            start_ns: 1_000_000,
            next_ns: 53_083_333,
        };
        assert_no_alloc::assert_no_alloc(|| {
            push_blocks(&mut tx, &dropped, 48_000, &c, &samples);
            // The ring holds 3 blocks: a second cycle's 3 blocks are dropped.
            push_blocks(&mut tx, &dropped, 48_000, &c, &samples);
        });
        assert_eq!(dropped.load(Ordering::Relaxed), 2500);
        let mut end = AudioInEnd { rx };
        let mut got = Vec::with_capacity(8);
        assert_no_alloc::assert_no_alloc(|| {
            end.poll(&mut |b| {
                let s = b.samples();
                got.push((b.frame, b.len, s[0], s[s.len() - 1], b.dropped_frames));
            })
        });
        assert_eq!(
            got,
            [
                (1000, 1024, 0.0, 1023.0, 0),
                (2024, 1024, 1024.0, 2047.0, 0),
                (3048, 452, 2048.0, 2499.0, 0),
            ]
        );
        assert!(end.rx.is_empty());
    }
}
