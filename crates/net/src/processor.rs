//! The built-in processing a `firmtime net worker` applies to a stream: a
//! deterministic [`Transform`] of the blocks plus a [`Work`] hold, Lago's
//! `waste_time` benchmark load.
//!
//! A master chooses both in session setup ([`crate::control::Setup`]); the
//! work fraction can change during a session (`set_work`), which is how
//! `firmtime net bench --ramp` raises the load. The same [`Processor`] runs
//! locally in tests, so a remote result can be compared bit for bit.
//!
//! # RT contract
//! [`Processor::new`] allocates. [`Processor::run`] is **RT-safe**: no
//! allocation, no lock; in [`WorkMode::Sleep`] it sleeps in
//! `clock_nanosleep` until the hold is over, in [`WorkMode::Spin`] it
//! busy-waits on the vDSO clock.

use crate::block::{BlockSet, Direction, Layout};
use crate::error::{Error, Result};
use crate::sample::{Sample, SampleType};
use crate::worker::Answer;
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::sleep::clock_nanosleep_abs;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the worker computes from the input blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transform {
    /// The k-th output-only block gets the k-th input-only block of the same
    /// type and length (zeros if there is none); `Both` blocks come back unchanged.
    #[default]
    Copy,
    /// As [`Transform::Copy`], negated: `-x` for floats, two's-complement
    /// wrapping negation for integers (`u8` too). `Both` blocks are negated in place.
    Negate,
}

/// How the worker holds a block (Lago's `waste_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkMode {
    /// No hold: answer as soon as the transform is done.
    #[default]
    None,
    /// Busy-wait: uses the CPU, as Lago's `waste_time` plugin did.
    Spin,
    /// Sleep: holds the block without CPU, which emulates workers on separate
    /// machines when several share one machine's cores.
    Sleep,
}

impl std::str::FromStr for WorkMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(WorkMode::None),
            "spin" => Ok(WorkMode::Spin),
            "sleep" => Ok(WorkMode::Sleep),
            _ => Err(Error::invalid(format!(
                "work mode '{s}' is unknown: use spin, sleep or none"
            ))),
        }
    }
}

/// The hold per block: `fraction` of the stream's period, by `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Work {
    /// Fraction of the period to hold each block, 0 to 4 (above 1 the worker cannot keep up).
    pub fraction: f64,
    /// Spin, sleep or none.
    pub mode: WorkMode,
}

impl Work {
    /// Checks the fraction.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if the
    /// fraction is not a number in 0..=4.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=4.0).contains(&self.fraction) {
            return Err(Error::invalid(format!(
                "work fraction {} is out of range: give 0 to 4 (1 = the whole period)",
                self.fraction
            )));
        }
        Ok(())
    }

    /// Checks the fraction ([`Self::validate`]) and the hold it makes with a
    /// period of `period_ns`: a spin hold runs on the worker's shared data
    /// thread, so it may last at most [`MAX_SPIN_HOLD_NS`].
    ///
    /// # Errors
    /// As [`Self::validate`]; a spin hold above [`MAX_SPIN_HOLD_NS`].
    pub fn validate_for(&self, period_ns: u64) -> Result<()> {
        self.validate()?;
        let hold = self.hold_ns(period_ns);
        if self.mode == WorkMode::Spin && hold > MAX_SPIN_HOLD_NS {
            return Err(Error::invalid(format!(
                "work: a spin hold of {hold} ns (fraction {} × period {period_ns} ns) is above the \
                 worker's cap of {MAX_SPIN_HOLD_NS} ns (spin holds run on its shared data thread): \
                 give a smaller fraction or use mode sleep",
                self.fraction
            )));
        }
        Ok(())
    }

    /// The hold per block for a period of `period_ns`, in ns (0 for mode none).
    pub fn hold_ns(&self, period_ns: u64) -> u64 {
        match self.mode {
            WorkMode::None => 0,
            // Saturating float-to-int cast; the fraction is checked finite and ≤ 4.
            _ => (self.fraction * period_ns as f64) as u64,
        }
    }
}

/// Shortest period a session may set up (1 µs).
pub const MIN_PERIOD_NS: u64 = 1_000;
/// Longest period a session may set up (1 s).
pub const MAX_PERIOD_NS: u64 = 1_000_000_000;
/// Longest spin hold per block (50 ms): spin holds run on the worker's one
/// data thread, so this bounds what one session can take from the others.
/// Sleep holds never occupy the data thread (the result is sent when the
/// hold is over) and are bounded by 4 × [`MAX_PERIOD_NS`].
pub const MAX_SPIN_HOLD_NS: u64 = 50_000_000;

/// A worker's processing of one stream: transform, then hold. The work can
/// be changed from another thread through [`WorkHandle`].
#[derive(Debug)]
pub struct Processor {
    transform: Transform,
    period_ns: u64,
    work: Arc<AtomicWork>,
    pairs: Vec<(usize, Option<usize>)>,
    both: Vec<usize>,
}

/// The work setting shared between a [`Processor`] and its [`WorkHandle`].
#[derive(Debug, Default)]
struct AtomicWork {
    fraction_bits: AtomicU64,
    mode: AtomicU64,
}

impl AtomicWork {
    fn store(&self, w: Work) {
        self.fraction_bits
            .store(w.fraction.to_bits(), Ordering::Relaxed);
        self.mode.store(w.mode as u64, Ordering::Relaxed);
    }
    fn load(&self) -> Work {
        Work {
            fraction: f64::from_bits(self.fraction_bits.load(Ordering::Relaxed)),
            mode: match self.mode.load(Ordering::Relaxed) {
                1 => WorkMode::Spin,
                2 => WorkMode::Sleep,
                _ => WorkMode::None,
            },
        }
    }
}

/// Changes a [`Processor`]'s work from another thread.
#[derive(Debug, Clone)]
pub struct WorkHandle(Arc<AtomicWork>, u64);

impl WorkHandle {
    /// Sets the hold for the following blocks.
    ///
    /// # Errors
    /// As [`Work::validate_for`] with the processor's period.
    pub fn set(&self, work: Work) -> Result<()> {
        work.validate_for(self.1)?;
        self.0.store(work);
        Ok(())
    }

    /// The hold in force.
    pub fn get(&self) -> Work {
        self.0.load()
    }
}

impl Processor {
    /// A processor for `layout` with a period of `period_ns` (the unit of the work fraction).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid layout or work.
    pub fn new(layout: &Layout, transform: Transform, work: Work, period_ns: u64) -> Result<Self> {
        layout.validate()?;
        work.validate()?;
        let pairs = layout.dry_pairs();
        let both = (0..layout.blocks.len())
            .filter(|&i| layout.blocks[i].dir == Direction::Both)
            .collect();
        let shared = Arc::new(AtomicWork::default());
        shared.store(work);
        Ok(Self {
            transform,
            period_ns,
            work: shared,
            pairs,
            both,
        })
    }

    /// A handle that changes the work of this processor.
    pub fn work_handle(&self) -> WorkHandle {
        WorkHandle(self.work.clone(), self.period_ns)
    }

    /// Transforms the blocks, then holds for the work fraction of the period
    /// (measured from the call). **RT-safe.**
    pub fn run(&self, blocks: &mut BlockSet) {
        let start = monotonic_ns();
        self.transform(blocks);
        let work = self.work.load();
        let hold = (work.fraction * self.period_ns as f64) as u64;
        let until = start.saturating_add(hold);
        match work.mode {
            WorkMode::None => {}
            WorkMode::Spin => {
                while monotonic_ns() < until {
                    std::hint::spin_loop();
                }
            }
            // An error (never EINTR) only ends the hold early.
            WorkMode::Sleep => {
                let _ = clock_nanosleep_abs(until);
            }
        }
    }

    /// As [`Self::run`], for the worker's shared data thread: a sleep hold
    /// is not slept but returned as the time to send the result
    /// ([`Answer::At`]); a spin hold spins, at most [`MAX_SPIN_HOLD_NS`].
    /// **RT-safe.**
    pub fn run_held(&self, blocks: &mut BlockSet) -> Answer {
        let start = monotonic_ns();
        self.transform(blocks);
        let work = self.work.load();
        let hold = work.hold_ns(self.period_ns);
        match work.mode {
            WorkMode::None => Answer::Now,
            WorkMode::Spin => {
                let until = start.saturating_add(hold.min(MAX_SPIN_HOLD_NS));
                while monotonic_ns() < until {
                    std::hint::spin_loop();
                }
                Answer::Now
            }
            WorkMode::Sleep => Answer::At(start.saturating_add(hold)),
        }
    }

    /// Only the transform, without the hold. **RT-safe.**
    pub fn transform(&self, blocks: &mut BlockSet) {
        let neg = self.transform == Transform::Negate;
        for &(dst, src) in &self.pairs {
            let ty = blocks.layout().blocks[dst].ty;
            match ty {
                SampleType::U8 => map_pair::<u8>(blocks, src, dst, neg),
                SampleType::I16 => map_pair::<i16>(blocks, src, dst, neg),
                SampleType::I32 => map_pair::<i32>(blocks, src, dst, neg),
                SampleType::F32 => map_pair::<f32>(blocks, src, dst, neg),
                SampleType::F64 => map_pair::<f64>(blocks, src, dst, neg),
            }
        }
        if neg {
            for &i in &self.both {
                let ty = blocks.layout().blocks[i].ty;
                match ty {
                    SampleType::U8 => map_pair::<u8>(blocks, Some(i), i, true),
                    SampleType::I16 => map_pair::<i16>(blocks, Some(i), i, true),
                    SampleType::I32 => map_pair::<i32>(blocks, Some(i), i, true),
                    SampleType::F32 => map_pair::<f32>(blocks, Some(i), i, true),
                    SampleType::F64 => map_pair::<f64>(blocks, Some(i), i, true),
                }
            }
        }
    }
}

/// Negation for every sample type.
trait Negate: Sample {
    fn negate(self) -> Self;
}
impl Negate for u8 {
    fn negate(self) -> Self {
        self.wrapping_neg()
    }
}
impl Negate for i16 {
    fn negate(self) -> Self {
        self.wrapping_neg()
    }
}
impl Negate for i32 {
    fn negate(self) -> Self {
        self.wrapping_neg()
    }
}
impl Negate for f32 {
    fn negate(self) -> Self {
        -self
    }
}
impl Negate for f64 {
    fn negate(self) -> Self {
        -self
    }
}

/// `dst[i] = f(src[i])` element by element (no scratch buffer: indices only).
fn map_pair<T: Negate + Copy + Default>(
    blocks: &mut BlockSet,
    src: Option<usize>,
    dst: usize,
    neg: bool,
) {
    let Ok(d) = blocks.id::<T>(dst) else { return };
    let Some(s) = src.and_then(|s| blocks.id::<T>(s).ok()) else {
        blocks.get_mut(d).fill(T::default());
        return;
    };
    let n = blocks.get(d).len();
    for i in 0..n {
        let x = blocks.get(s)[i];
        blocks.get_mut(d)[i] = if neg { x.negate() } else { x };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negate_pairs_outputs_with_inputs_and_negates_both_blocks() {
        let mut b = BlockSet::new();
        let i = b.add::<i16>(Direction::ToWorker, 3).unwrap();
        let f = b.add::<f32>(Direction::ToWorker, 2).unwrap();
        let o = b.add::<i16>(Direction::FromWorker, 3).unwrap();
        let g = b.add::<f64>(Direction::FromWorker, 2).unwrap();
        let both = b.add::<u8>(Direction::Both, 2).unwrap();
        let p = Processor::new(b.layout(), Transform::Negate, Work::default(), 1_000_000).unwrap();
        b.get_mut(i).copy_from_slice(&[1, -2, i16::MIN]);
        b.get_mut(f).copy_from_slice(&[1.5, -0.0]);
        b.get_mut(g).copy_from_slice(&[9.0, 9.0]);
        b.get_mut(both).copy_from_slice(&[1, 0]);
        assert_no_alloc::assert_no_alloc(|| p.run(&mut b));
        assert_eq!(b.get(o), &[-1, 2, i16::MIN]);
        // The second output is f64, the second input f32: no pair, zeros.
        assert_eq!(b.get(g), &[0.0, 0.0]);
        assert_eq!(b.get(both), &[255, 0]);
    }

    #[test]
    fn copy_keeps_both_blocks_and_copies_inputs() {
        let mut b = BlockSet::new();
        let i = b.add::<f32>(Direction::ToWorker, 2).unwrap();
        let o = b.add::<f32>(Direction::FromWorker, 2).unwrap();
        let both = b.add::<i32>(Direction::Both, 1).unwrap();
        let p = Processor::new(b.layout(), Transform::Copy, Work::default(), 1_000_000).unwrap();
        b.get_mut(i).copy_from_slice(&[0.25, 7.0]);
        b.get_mut(both)[0] = -5;
        p.run(&mut b);
        assert_eq!(b.get(o), &[0.25, 7.0]);
        assert_eq!(b.get(both), &[-5]);
    }

    #[test]
    fn work_handle_changes_the_hold_and_rejects_bad_fractions() {
        let b = BlockSet::new();
        let p = Processor::new(b.layout(), Transform::Copy, Work::default(), 1_000).unwrap();
        let h = p.work_handle();
        let w = Work {
            fraction: 0.5,
            mode: WorkMode::Sleep,
        };
        h.set(w).unwrap();
        assert_eq!(h.get(), w);
        let e = h
            .set(Work {
                fraction: f64::NAN,
                mode: WorkMode::Spin,
            })
            .unwrap_err();
        assert!(e.message().contains("out of range"), "{e}");
        assert_eq!(h.get(), w);
        assert_eq!("spin".parse::<WorkMode>().unwrap(), WorkMode::Spin);
        assert!("busy".parse::<WorkMode>().is_err());
    }
}
