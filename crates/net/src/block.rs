//! Typed blocks of samples and the layout that describes them.
//!
//! The application registers blocks of a native [`Sample`] type, each with a
//! [`Direction`], in a [`BlockSet`] and gets a typed [`BlockId`] back; it
//! reads and writes the blocks as `&[T]` / `&mut [T]`. The set's [`Layout`]
//! (serializable) lets the control plane send the description to a worker,
//! which builds the identical set with [`BlockSet::from_layout`].
//!
//! On the wire each [`Flow`] carries the blocks of its direction (and the
//! [`Direction::Both`] blocks) concatenated in layout order, each block's
//! elements little-endian.
//!
//! # RT contract
//! Building a set allocates every block once. After that [`BlockSet::get`],
//! [`BlockSet::get_mut`], [`BlockSet::encode`], [`BlockSet::decode`] and
//! [`BlockSet::zero`] are **RT-safe**: no allocation, no lock.

use crate::error::{Error, Result};
use crate::sample::{decode_slice, encode_slice, Sample, SampleType};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;

/// Which way a block travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Input: sent to the worker each period, never written by results.
    ToWorker,
    /// Output: written by the worker's result.
    FromWorker,
    /// Sent to the worker and overwritten by its result.
    Both,
}

impl Direction {
    /// Whether a block of this direction travels in `flow`.
    pub fn carries(self, flow: Flow) -> bool {
        matches!(
            (self, flow),
            (Direction::Both, _)
                | (Direction::ToWorker, Flow::ToWorker)
                | (Direction::FromWorker, Flow::FromWorker)
        )
    }
}

/// The direction of one packet: master → worker or worker → master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flow {
    /// A period's input, sent by the master.
    ToWorker,
    /// A period's result, sent by the worker.
    FromWorker,
}

/// One block of a [`Layout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockSpec {
    /// Element type.
    #[serde(rename = "type")]
    pub ty: SampleType,
    /// Which way the block travels.
    pub dir: Direction,
    /// Number of elements.
    pub len: u32,
}

impl BlockSpec {
    /// Size of the block on the wire, in bytes.
    pub fn bytes(&self) -> usize {
        self.len as usize * self.ty.size()
    }
}

/// The description of a [`BlockSet`]: its blocks in registration order.
/// A block's id is its index here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Layout {
    /// The blocks, in order.
    pub blocks: Vec<BlockSpec>,
}

/// Largest payload a flow may carry per period (the wire's fragment count and
/// length fields bound it; see docs/WIRE.md).
pub const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

impl Layout {
    /// Each output-only block paired with the input-only block of the same
    /// rank, if type and length match: `(dst, Some(src))`, else `(dst, None)`.
    /// What "dry" audio and an echoing processor copy from.
    pub fn dry_pairs(&self) -> Vec<(usize, Option<usize>)> {
        let inputs: Vec<usize> = (0..self.blocks.len())
            .filter(|&i| self.blocks[i].dir == Direction::ToWorker)
            .collect();
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.dir == Direction::FromWorker)
            .enumerate()
            .map(|(k, (dst, spec))| {
                let src = inputs.get(k).copied().filter(|&s| {
                    let i = &self.blocks[s];
                    i.ty == spec.ty && i.len == spec.len
                });
                (dst, src)
            })
            .collect()
    }

    /// Bytes `flow` carries per period: the sizes of the blocks it carries.
    pub fn payload_len(&self, flow: Flow) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.dir.carries(flow))
            .map(BlockSpec::bytes)
            .sum()
    }

    /// Checks the layout: at most 65535 blocks, each with 1 or more elements,
    /// and each flow at most [`MAX_PAYLOAD`] bytes.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the offending block.
    pub fn validate(&self) -> Result<()> {
        if self.blocks.len() > usize::from(u16::MAX) {
            return Err(Error::invalid(format!(
                "layout has {} blocks; at most 65535 are allowed",
                self.blocks.len()
            )));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            if b.len == 0 {
                return Err(Error::invalid(format!(
                    "block {i} ({}) has length 0; give every block at least one element",
                    b.ty
                )));
            }
        }
        for flow in [Flow::ToWorker, Flow::FromWorker] {
            let n = self.payload_len(flow);
            if n > MAX_PAYLOAD {
                return Err(Error::invalid(format!(
                    "the {} blocks total {n} bytes per period; at most {MAX_PAYLOAD} are allowed",
                    match flow {
                        Flow::ToWorker => "input (to the worker)",
                        Flow::FromWorker => "result (from the worker)",
                    }
                )));
            }
        }
        Ok(())
    }
}

/// A typed handle to one block of a [`BlockSet`]. Cheap to copy.
pub struct BlockId<T> {
    index: u16,
    _t: PhantomData<fn() -> T>,
}

impl<T> BlockId<T> {
    /// The block's index in the layout.
    pub fn index(self) -> usize {
        usize::from(self.index)
    }
}

impl<T> Clone for BlockId<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for BlockId<T> {}
impl<T> PartialEq for BlockId<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl<T> Eq for BlockId<T> {}
impl<T: Sample> fmt::Debug for BlockId<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockId<{}>({})", T::TYPE, self.index)
    }
}

enum Data {
    U8(Vec<u8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

macro_rules! each_data {
    ($d:expr, $v:ident => $body:expr) => {
        match $d {
            Data::U8($v) => $body,
            Data::I16($v) => $body,
            Data::I32($v) => $body,
            Data::F32($v) => $body,
            Data::F64($v) => $body,
        }
    };
}

impl Data {
    fn new(ty: SampleType, len: usize) -> Self {
        match ty {
            SampleType::U8 => Data::U8(vec![0; len]),
            SampleType::I16 => Data::I16(vec![0; len]),
            SampleType::I32 => Data::I32(vec![0; len]),
            SampleType::F32 => Data::F32(vec![0.0; len]),
            SampleType::F64 => Data::F64(vec![0.0; len]),
        }
    }

    /// The block's elements as raw storage of `T`, if it holds `T`.
    fn as_slice<T: Sample>(&self) -> Option<&[T]> {
        fn cast<S: Sample, T: Sample>(v: &[S]) -> Option<&[T]> {
            if S::TYPE == T::TYPE {
                // SAFETY: S and T are the same type (each SampleType belongs to
                // exactly one sealed implementor), so the slice is reinterpreted
                // as itself.
                Some(unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<T>(), v.len()) })
            } else {
                None
            }
        }
        each_data!(self, v => cast::<_, T>(v))
    }

    fn as_mut_slice<T: Sample>(&mut self) -> Option<&mut [T]> {
        fn cast<S: Sample, T: Sample>(v: &mut [S]) -> Option<&mut [T]> {
            if S::TYPE == T::TYPE {
                // SAFETY: as in `as_slice`: S and T are the same type.
                Some(unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<T>(), v.len()) })
            } else {
                None
            }
        }
        each_data!(self, v => cast::<_, T>(v))
    }

    fn encode(&self, out: &mut [u8]) -> usize {
        each_data!(self, v => encode_slice(v, out))
    }

    fn decode(&mut self, bytes: &[u8]) {
        each_data!(self, v => decode_slice(bytes, v))
    }

    fn zero(&mut self) {
        each_data!(self, v => v.fill(Default::default()))
    }
}

/// A set of preallocated typed blocks exchanged with a worker each period.
pub struct BlockSet {
    layout: Layout,
    data: Vec<Data>,
}

impl fmt::Debug for BlockSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockSet")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Default for BlockSet {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockSet {
    /// An empty set.
    pub fn new() -> Self {
        Self {
            layout: Layout::default(),
            data: Vec::new(),
        }
    }

    /// Builds the set a [`Layout`] describes, every block zeroed.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if the
    /// layout is invalid (see [`Layout::validate`]).
    pub fn from_layout(layout: &Layout) -> Result<Self> {
        layout.validate()?;
        Ok(Self {
            data: layout
                .blocks
                .iter()
                .map(|b| Data::new(b.ty, b.len as usize))
                .collect(),
            layout: layout.clone(),
        })
    }

    /// Registers a zeroed block of `len` elements of `T` travelling `dir`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if `len`
    /// is 0, the set already has 65535 blocks, or the flow would exceed
    /// [`MAX_PAYLOAD`].
    pub fn add<T: Sample>(&mut self, dir: Direction, len: usize) -> Result<BlockId<T>> {
        let len32 = u32::try_from(len)
            .map_err(|_| Error::invalid(format!("block length {len} does not fit in 32 bits")))?;
        let mut layout = self.layout.clone();
        layout.blocks.push(BlockSpec {
            ty: T::TYPE,
            dir,
            len: len32,
        });
        layout.validate()?;
        let index = (layout.blocks.len() - 1) as u16;
        self.layout = layout;
        self.data.push(Data::new(T::TYPE, len));
        Ok(BlockId {
            index,
            _t: PhantomData,
        })
    }

    /// The typed handle of block `index`, checking its type.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if there
    /// is no such block or it holds another type.
    pub fn id<T: Sample>(&self, index: usize) -> Result<BlockId<T>> {
        match self.layout.blocks.get(index) {
            None => Err(Error::invalid(format!(
                "no block {index}: the layout has {} blocks",
                self.layout.blocks.len()
            ))),
            Some(b) if b.ty != T::TYPE => Err(Error::invalid(format!(
                "block {index} holds {}, not {}",
                b.ty,
                T::TYPE
            ))),
            Some(_) => Ok(BlockId {
                index: index as u16,
                _t: PhantomData,
            }),
        }
    }

    /// The layout: every block's type, direction and length, in order.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the set has no blocks.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The block's elements. **RT-safe.**
    ///
    /// # Panics
    /// If `id` came from another set whose block at that index differs in type.
    pub fn get<T: Sample>(&self, id: BlockId<T>) -> &[T] {
        self.data
            .get(id.index())
            .and_then(Data::as_slice)
            .expect("BlockId used with a BlockSet it does not belong to")
    }

    /// The block's elements, writable. **RT-safe.**
    ///
    /// # Panics
    /// If `id` came from another set whose block at that index differs in type.
    pub fn get_mut<T: Sample>(&mut self, id: BlockId<T>) -> &mut [T] {
        self.data
            .get_mut(id.index())
            .and_then(Data::as_mut_slice)
            .expect("BlockId used with a BlockSet it does not belong to")
    }

    /// Bytes `flow` carries per period.
    pub fn payload_len(&self, flow: Flow) -> usize {
        self.layout.payload_len(flow)
    }

    /// Writes the blocks `flow` carries, in layout order, little-endian, into
    /// `out`; returns the bytes written ([`Self::payload_len`]). **RT-safe.**
    ///
    /// # Panics
    /// If `out` is shorter than [`Self::payload_len`]`(flow)`.
    pub fn encode(&self, flow: Flow, out: &mut [u8]) -> usize {
        let mut at = 0;
        for (spec, data) in self.layout.blocks.iter().zip(&self.data) {
            if spec.dir.carries(flow) {
                at += data.encode(&mut out[at..]);
            }
        }
        at
    }

    /// Reads the blocks `flow` carries from `bytes` (as [`Self::encode`]
    /// wrote them). **RT-safe.**
    ///
    /// # Panics
    /// If `bytes` is shorter than [`Self::payload_len`]`(flow)`.
    pub fn decode(&mut self, flow: Flow, bytes: &[u8]) {
        let mut at = 0;
        for (spec, data) in self.layout.blocks.iter().zip(&mut self.data) {
            if spec.dir.carries(flow) {
                data.decode(&bytes[at..]);
                at += spec.bytes();
            }
        }
    }

    /// Zeroes the blocks `flow` carries. **RT-safe.**
    pub fn zero(&mut self, flow: Flow) {
        for (spec, data) in self.layout.blocks.iter().zip(&mut self.data) {
            if spec.dir.carries(flow) {
                data.zero();
            }
        }
    }

    /// Zeroes block `index`. **RT-safe.**
    pub(crate) fn zero_block(&mut self, index: usize) {
        self.data[index].zero();
    }

    /// Copies block `src` into block `dst`; both must have the same type and
    /// length (checked when the pairing was made). **RT-safe.**
    pub(crate) fn copy_block(&mut self, src: usize, dst: usize) {
        debug_assert_ne!(src, dst);
        let (a, b) = if src < dst {
            let (lo, hi) = self.data.split_at_mut(dst);
            (&lo[src], &mut hi[0])
        } else {
            let (lo, hi) = self.data.split_at_mut(src);
            (&hi[0], &mut lo[dst])
        };
        match (a, &mut *b) {
            (Data::U8(s), Data::U8(d)) => d.copy_from_slice(s),
            (Data::I16(s), Data::I16(d)) => d.copy_from_slice(s),
            (Data::I32(s), Data::I32(d)) => d.copy_from_slice(s),
            (Data::F32(s), Data::F32(d)) => d.copy_from_slice(s),
            (Data::F64(s), Data::F64(d)) => d.copy_from_slice(s),
            _ => b.zero(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_typed_and_layout_records_order() {
        let mut set = BlockSet::new();
        let a = set.add::<f32>(Direction::ToWorker, 4).unwrap();
        let b = set.add::<i16>(Direction::FromWorker, 3).unwrap();
        let c = set.add::<u8>(Direction::Both, 2).unwrap();
        assert_eq!((a.index(), b.index(), c.index()), (0, 1, 2));
        assert_eq!(set.payload_len(Flow::ToWorker), 16 + 2);
        assert_eq!(set.payload_len(Flow::FromWorker), 6 + 2);
        set.get_mut(a).copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(set.get(a), &[1.0, 2.0, 3.0, 4.0]);
        assert!(set.id::<f32>(1).is_err());
        assert!(set.id::<i16>(1).is_ok());
        assert!(set.id::<i16>(7).is_err());
        let json = serde_json::to_string(set.layout()).unwrap();
        let back: Layout = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, set.layout());
        assert!(json.contains("\"type\":\"f32\""), "{json}");
    }

    #[test]
    fn dry_pairs_match_outputs_to_inputs_by_rank_type_and_length() {
        let mut set = BlockSet::new();
        set.add::<f32>(Direction::ToWorker, 4).unwrap(); // 0
        set.add::<f32>(Direction::Both, 4).unwrap(); // 1: neither input nor output only
        set.add::<i16>(Direction::ToWorker, 4).unwrap(); // 2
        set.add::<f32>(Direction::FromWorker, 4).unwrap(); // 3 ← 0
        set.add::<f32>(Direction::FromWorker, 4).unwrap(); // 4: 2 is i16, no match
        set.add::<f32>(Direction::FromWorker, 4).unwrap(); // 5: no third input
        assert_eq!(
            set.layout().dry_pairs(),
            vec![(3, Some(0)), (4, None), (5, None)]
        );
        assert!(Layout::default().dry_pairs().is_empty());
    }

    #[test]
    fn zero_length_block_is_refused_with_reason() {
        let mut set = BlockSet::new();
        let e = set.add::<f32>(Direction::ToWorker, 0).unwrap_err();
        assert!(e.message().contains("length 0"), "{e}");
        assert!(set.is_empty());
    }

    #[test]
    fn encode_decode_between_identical_sets() {
        let mut m = BlockSet::new();
        let a = m.add::<i32>(Direction::ToWorker, 3).unwrap();
        let skip = m.add::<f64>(Direction::FromWorker, 2).unwrap();
        let c = m.add::<f64>(Direction::Both, 2).unwrap();
        m.get_mut(a).copy_from_slice(&[1, -2, 3]);
        m.get_mut(skip).copy_from_slice(&[9.0, 9.0]);
        m.get_mut(c).copy_from_slice(&[0.5, -0.25]);
        let mut w = BlockSet::from_layout(m.layout()).unwrap();
        let mut buf = vec![0u8; m.payload_len(Flow::ToWorker)];
        assert_no_alloc::assert_no_alloc(|| {
            assert_eq!(m.encode(Flow::ToWorker, &mut buf), 12 + 16);
            w.decode(Flow::ToWorker, &buf);
        });
        assert_eq!(w.get(w.id::<i32>(0).unwrap()), &[1, -2, 3]);
        assert_eq!(w.get(w.id::<f64>(1).unwrap()), &[0.0, 0.0]);
        assert_eq!(w.get(w.id::<f64>(2).unwrap()), &[0.5, -0.25]);
        assert_eq!(&buf[..4], &1i32.to_le_bytes());
        m.zero(Flow::FromWorker);
        assert_eq!(m.get(skip), &[0.0, 0.0]);
        assert_eq!(m.get(c), &[0.0, 0.0]);
        assert_eq!(m.get(a), &[1, -2, 3]);
    }

    #[test]
    fn copy_block_both_orders() {
        let mut s = BlockSet::new();
        let a = s.add::<i16>(Direction::ToWorker, 2).unwrap();
        let b = s.add::<i16>(Direction::FromWorker, 2).unwrap();
        s.get_mut(a).copy_from_slice(&[5, 6]);
        s.copy_block(0, 1);
        assert_eq!(s.get(b), &[5, 6]);
        s.get_mut(b).copy_from_slice(&[7, 8]);
        s.copy_block(1, 0);
        assert_eq!(s.get(a), &[7, 8]);
    }
}
