//! The one seeded pseudo-random generator of firmtime (SplitMix64): for
//! stimulus randomization (feedback pitch and delay), load patterns,
//! jittered test inputs and synthetic data. The same seed gives the same
//! sequence on every machine, so a run can be repeated exactly.
//!
//! Plain `Copy` state; every method is **RT-safe.** Not for cryptography.
//!
//! ```
//! use firmtime_rt::rng::Rng;
//! let mut a = Rng::new(7);
//! let mut b = Rng::new(7);
//! assert_eq!(a.next_u64(), b.next_u64());
//! let x = a.next_f64();
//! assert!((0.0..1.0).contains(&x));
//! assert!(a.below(10) < 10);
//! ```

/// SplitMix64 (Steele, Lea and Flood 2014): fast, seedable, every seed
/// (0 included) gives a full-period sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// The golden-ratio increment of SplitMix64, `⌊2⁶⁴/φ⌉` (odd).
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator from a seed (any value, 0 included). **RT-safe.**
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits. **RT-safe.**
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(Self::GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 random bits. **RT-safe.**
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (0 when n is 0), by multiply-shift of the high 32
    /// bits. **RT-safe.**
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// Standard normal (Box–Muller, one value per two uniforms). **RT-safe.**
    #[inline]
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// A sample type [`Pink`] filters: `f32` (a synth's real-time noise) or
/// `f64` (synthetic test signals).
pub trait PinkSample:
    Copy
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
{
    /// The filter constant `x` in this type.
    fn constant(x: f64) -> Self;
}

impl PinkSample for f32 {
    fn constant(x: f64) -> Self {
        x as f32
    }
}

impl PinkSample for f64 {
    fn constant(x: f64) -> Self {
        x
    }
}

/// Paul Kellet's refined pink (1/f) filter over white samples, the one
/// owner of it (firmtime-midi's synth noise, firmtime-tap's synthetic
/// tracks). Its output's RMS is about 3 times the input's (× 0.334 gives
/// about unit RMS). Plain state; **RT-safe.**
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pink<T> {
    b: [T; 7],
}

impl<T: PinkSample> Pink<T> {
    /// The next pink sample from the white sample `w`. **RT-safe.**
    pub fn next(&mut self, w: T) -> T {
        let c = T::constant;
        let b = &mut self.b;
        b[0] = c(0.99886) * b[0] + w * c(0.0555179);
        b[1] = c(0.99332) * b[1] + w * c(0.0750759);
        b[2] = c(0.96900) * b[2] + w * c(0.153852);
        b[3] = c(0.86650) * b[3] + w * c(0.3104856);
        b[4] = c(0.55000) * b[4] + w * c(0.5329522);
        b[5] = c(-0.7616) * b[5] - w * c(0.0168980);
        let out = b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + w * c(0.5362);
        b[6] = w * c(0.115926);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64_sequence() {
        // Reference values of SplitMix64 (Vigna's splitmix64.c).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
        let mut r = Rng::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn derived_values_are_stable() {
        let mut r = Rng::new(42);
        assert_eq!(r.next_f64(), 0.741_564_878_771_823_3);
        assert_eq!(r.next_f64(), 0.159_910_392_876_920_1);
        let mut r = Rng::new(7);
        let v: Vec<u32> = (0..8).map(|_| r.below(10)).collect();
        assert_eq!(v, [3, 0, 9, 5, 4, 2, 4, 3]);
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut r = Rng::new(42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| r.next_normal()).collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
        assert!(m.abs() < 0.01, "mean {m}");
        assert!((v - 1.0).abs() < 0.02, "var {v}");
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::new(1);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            seen[r.below(5) as usize] = true;
        }
        assert_eq!(seen, [true; 5]);
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn methods_do_not_allocate() {
        let mut r = Rng::new(3);
        let s = assert_no_alloc::assert_no_alloc(|| {
            r.next_u64() as f64 + r.next_f64() + f64::from(r.below(9)) + r.next_normal()
        });
        assert!(s.is_finite());
    }
}
