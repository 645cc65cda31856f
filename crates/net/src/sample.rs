//! Native sample types and their little-endian wire encoding.
//!
//! Lago's middleware carried buffers of C's native types; here they are
//! `u8`, `i16`, `i32`, `f32` and `f64`, each a [`Sample`]. On the wire every
//! value is little-endian (`to_le_bytes`/`from_le_bytes`), so a big-endian
//! host converts and a little-endian host copies.
//!
//! # RT contract
//! [`encode_slice`] and [`decode_slice`] are **RT-safe**: no allocation, no
//! lock, a bounded loop over the slice.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The type of a block's elements, as a [`Layout`](crate::Layout) records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleType {
    /// `u8` (1 byte; C's `unsigned char`).
    U8,
    /// `i16` (2 bytes).
    I16,
    /// `i32` (4 bytes).
    I32,
    /// `f32` (4 bytes; LADSPA's and JACK's sample type).
    F32,
    /// `f64` (8 bytes).
    F64,
}

impl SampleType {
    /// Every sample type.
    pub const ALL: [SampleType; 5] = [
        SampleType::U8,
        SampleType::I16,
        SampleType::I32,
        SampleType::F32,
        SampleType::F64,
    ];

    /// Bytes per element on the wire (and in memory).
    pub fn size(self) -> usize {
        match self {
            SampleType::U8 => 1,
            SampleType::I16 => 2,
            SampleType::I32 | SampleType::F32 => 4,
            SampleType::F64 => 8,
        }
    }

    /// The name used in layouts and messages: `u8`, `i16`, `i32`, `f32`, `f64`.
    pub fn name(self) -> &'static str {
        match self {
            SampleType::U8 => "u8",
            SampleType::I16 => "i16",
            SampleType::I32 => "i32",
            SampleType::F32 => "f32",
            SampleType::F64 => "f64",
        }
    }
}

impl fmt::Display for SampleType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A native type a block can hold. Implemented for `u8`, `i16`, `i32`, `f32`, `f64` only.
pub trait Sample:
    Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// The matching [`SampleType`].
    const TYPE: SampleType;
    /// Bytes per element.
    const SIZE: usize;

    /// Writes `self` little-endian into the first [`Self::SIZE`] bytes of `out`. **RT-safe.**
    ///
    /// # Panics
    /// If `out` is shorter than [`Self::SIZE`].
    fn write_le(self, out: &mut [u8]);

    /// Reads a value from the first [`Self::SIZE`] bytes of `bytes`, little-endian. **RT-safe.**
    ///
    /// # Panics
    /// If `bytes` is shorter than [`Self::SIZE`].
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! impl_sample {
    ($t:ty, $kind:ident) => {
        impl sealed::Sealed for $t {}
        impl Sample for $t {
            const TYPE: SampleType = SampleType::$kind;
            const SIZE: usize = std::mem::size_of::<$t>();

            #[inline]
            fn write_le(self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }

            #[inline]
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}

impl_sample!(u8, U8);
impl_sample!(i16, I16);
impl_sample!(i32, I32);
impl_sample!(f32, F32);
impl_sample!(f64, F64);

/// Encodes `src` little-endian into `out`; returns the bytes written
/// (`src.len() * T::SIZE`). **RT-safe.**
///
/// # Panics
/// If `out` is shorter than `src.len() * T::SIZE`.
pub fn encode_slice<T: Sample>(src: &[T], out: &mut [u8]) -> usize {
    let n = src.len() * T::SIZE;
    for (v, chunk) in src.iter().zip(out[..n].chunks_exact_mut(T::SIZE)) {
        v.write_le(chunk);
    }
    n
}

/// Decodes `dst.len()` little-endian values from `bytes` into `dst`. **RT-safe.**
///
/// # Panics
/// If `bytes` is shorter than `dst.len() * T::SIZE`.
pub fn decode_slice<T: Sample>(bytes: &[u8], dst: &mut [T]) {
    let n = dst.len() * T::SIZE;
    for (v, chunk) in dst.iter_mut().zip(bytes[..n].chunks_exact(T::SIZE)) {
        *v = T::read_le(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Sample>(values: &[T]) {
        let mut bytes = vec![0u8; values.len() * T::SIZE];
        let mut back = vec![T::default(); values.len()];
        assert_no_alloc::assert_no_alloc(|| {
            assert_eq!(encode_slice(values, &mut bytes), values.len() * T::SIZE);
            decode_slice(&bytes, &mut back);
        });
        assert_eq!(back, values);
        assert_eq!(T::TYPE.size(), T::SIZE);
    }

    #[test]
    fn every_type_round_trips() {
        round_trip(&[0u8, 1, 127, 128, 255]);
        round_trip(&[0i16, 1, -1, i16::MIN, i16::MAX]);
        round_trip(&[0i32, -7, i32::MIN, i32::MAX]);
        round_trip(&[0.0f32, -0.5, f32::MIN_POSITIVE, f32::MAX, f32::INFINITY]);
        round_trip(&[0.0f64, -1e300, f64::EPSILON, f64::NEG_INFINITY]);
    }

    #[test]
    fn bytes_are_little_endian() {
        let mut b = [0u8; 4];
        encode_slice(&[0x0102_0304i32], &mut b);
        assert_eq!(b, [4, 3, 2, 1]);
        encode_slice(&[1.0f32], &mut b);
        assert_eq!(b, [0, 0, 0x80, 0x3f]);
        let mut v = [0i16; 2];
        decode_slice(&[0x34, 0x12, 0xff, 0xff], &mut v);
        assert_eq!(v, [0x1234, -1]);
    }

    #[test]
    fn nan_bits_survive() {
        let nan = f32::from_bits(0x7fc0_1234);
        let mut b = [0u8; 4];
        encode_slice(&[nan], &mut b);
        let mut back = [0f32];
        decode_slice(&b, &mut back);
        assert_eq!(back[0].to_bits(), 0x7fc0_1234);
    }
}
