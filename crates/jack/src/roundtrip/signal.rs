//! The round trip's test signal and its detection: pure arithmetic, no
//! JACK, unit-tested on made-up captures.
//!
//! The signal is a maximum-length sequence (MLS) of order
//! [`MLS_ORDER`]: 4095 samples of ±level, played once per burst. Its
//! aperiodic autocorrelation is one sharp peak with small, symmetric side
//! lobes, so the matched filter (cross-correlation of the capture with the
//! sequence) peaks at the lag where the burst came back, to the frame.
//! [`Correlator`] computes that correlation with a radix-2 FFT.
//!
//! # Real-time contract
//!
//! None of this runs on the RT path: it allocates, and it runs after the
//! capture is over.

/// Order of the MLS: the burst is `2^MLS_ORDER − 1` samples long.
pub const MLS_ORDER: u32 = 12;

/// Length of one burst in frames (4095).
pub const MLS_LEN: usize = (1 << MLS_ORDER) - 1;

/// The least normalized correlation (0..1) that counts as the burst coming
/// back. Uncorrelated noise reaches about `1/sqrt(4095)` = 0.016; a digital
/// loop gives 1.0; an analog cable with a little noise and filtering 0.5–0.99.
pub const DETECTION_THRESHOLD: f64 = 0.3;

/// Feedback taps of a maximal-length Galois LFSR per order (bit `k-1` set
/// for the term `x^k`; primitive polynomials from the standard tables).
fn taps(order: u32) -> Option<u32> {
    Some(match order {
        4 => 0x9,
        8 => 0xB8,
        10 => 0x240,
        12 => 0xE08,
        14 => 0x3802,
        16 => 0xB400,
        _ => return None,
    })
}

/// The maximum-length sequence of `order` (4, 8, 10, 12, 14 or 16) as ±1.0,
/// `2^order − 1` values.
///
/// # Panics
/// For an order without a tap table entry.
pub fn mls(order: u32) -> Vec<f32> {
    let taps = taps(order).expect("MLS order 4, 8, 10, 12, 14 or 16");
    let len = (1usize << order) - 1;
    let mut state: u32 = 1;
    (0..len)
        .map(|_| {
            let bit = state & 1;
            state >>= 1;
            if bit == 1 {
                state ^= taps;
            }
            if bit == 1 {
                1.0
            } else {
                -1.0
            }
        })
        .collect()
}

/// One complex number of the FFT.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct C {
    re: f64,
    im: f64,
}

impl C {
    fn mul(self, o: C) -> C {
        C {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }
    fn conj(self) -> C {
        C {
            re: self.re,
            im: -self.im,
        }
    }
}

/// In-place iterative radix-2 FFT (`inverse`: unscaled inverse transform).
/// `a.len()` must be a power of two.
fn fft(a: &mut [C], inverse: bool) {
    let n = a.len();
    debug_assert!(n.is_power_of_two());
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            a.swap(i, j);
        }
    }
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut len = 2;
    while len <= n {
        let ang = sign * 2.0 * std::f64::consts::PI / len as f64;
        let w = C {
            re: ang.cos(),
            im: ang.sin(),
        };
        for chunk in a.chunks_mut(len) {
            let mut wk = C { re: 1.0, im: 0.0 };
            let (lo, hi) = chunk.split_at_mut(len / 2);
            for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                let t = y.mul(wk);
                *y = C {
                    re: x.re - t.re,
                    im: x.im - t.im,
                };
                *x = C {
                    re: x.re + t.re,
                    im: x.im + t.im,
                };
                wk = wk.mul(w);
            }
        }
        len <<= 1;
    }
}

/// Where one burst came back, as [`Correlator::detect`] found it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Detection {
    /// The lag of the correlation peak in frames: the round trip.
    pub frames: u64,
    /// Parabolic interpolation around the peak, in frames (−0.5..0.5): an
    /// estimate of the part of the delay below one frame (analog paths).
    pub sub_frame: f64,
    /// Normalized correlation at the peak (0..1; 1: an exact copy came back).
    pub correlation: f64,
    /// The burst came back inverted (the peak is negative).
    pub inverted: bool,
    /// Level of what came back relative to what was played, dB.
    pub gain_db: f64,
}

/// Cross-correlates captures with the reference sequence to find where a
/// burst came back.
#[derive(Debug, Clone)]
pub struct Correlator {
    /// Conjugated FFT of the zero-padded reference.
    reference: Vec<C>,
    /// Energy of the reference.
    energy: f64,
    /// Reference length.
    len: usize,
    /// Largest lag searched.
    max_lag: usize,
}

impl Correlator {
    /// A correlator for `reference` (the ±1 sequence) that searches lags
    /// `0..=max_lag` in windows of [`Correlator::window_len`] samples.
    pub fn new(reference: &[f32], max_lag: usize) -> Self {
        let len = reference.len();
        let n = (max_lag + len).next_power_of_two();
        let mut r = vec![C::default(); n];
        for (d, &s) in r.iter_mut().zip(reference) {
            d.re = f64::from(s);
        }
        fft(&mut r, false);
        for x in &mut r {
            *x = x.conj();
        }
        Correlator {
            reference: r,
            energy: reference.iter().map(|&s| f64::from(s).powi(2)).sum(),
            len,
            max_lag,
        }
    }

    /// The capture window [`Correlator::detect`] takes: `max_lag + len` samples.
    pub fn window_len(&self) -> usize {
        self.max_lag + self.len
    }

    /// The correlation `c[k] = Σ reference[n] · window[k + n]` for `k` in
    /// `0..=max_lag` (a window shorter than [`Correlator::window_len`] is
    /// taken as zero-padded).
    pub fn correlate(&self, window: &[f32]) -> Vec<f64> {
        let n = self.reference.len();
        let mut x = vec![C::default(); n];
        for (d, &s) in x.iter_mut().zip(window.iter().take(self.window_len())) {
            d.re = f64::from(s);
        }
        fft(&mut x, false);
        for (a, b) in x.iter_mut().zip(&self.reference) {
            *a = a.mul(*b);
        }
        fft(&mut x, true);
        x.iter()
            .take(self.max_lag + 1)
            .map(|c| c.re / n as f64)
            .collect()
    }

    /// Where the reference, played at `level` (linear amplitude), came back
    /// in `window`; `None` when the normalized correlation at the peak is
    /// below [`DETECTION_THRESHOLD`] (nothing, or noise, came back).
    pub fn detect(&self, window: &[f32], level: f64) -> Option<Detection> {
        let c = self.correlate(window);
        let (k, peak) = c
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
            .map(|(k, &v)| (k, v))?;
        let seg = window.get(k..).unwrap_or(&[]);
        let seg_energy: f64 = seg
            .iter()
            .take(self.len)
            .map(|&s| f64::from(s).powi(2))
            .sum();
        if seg_energy <= 0.0 || self.energy <= 0.0 {
            return None;
        }
        let correlation = peak.abs() / (self.energy * seg_energy).sqrt();
        if !correlation.is_finite() || correlation < DETECTION_THRESHOLD {
            return None;
        }
        let sub_frame = if k > 0 && k < c.len() - 1 {
            let (a, b, d) = (c[k - 1].abs(), c[k].abs(), c[k + 1].abs());
            let den = a - 2.0 * b + d;
            if den.abs() > f64::EPSILON * b {
                (0.5 * (a - d) / den).clamp(-0.5, 0.5)
            } else {
                0.0
            }
        } else {
            0.0
        };
        let gain = peak.abs() / self.energy / level.max(f64::MIN_POSITIVE);
        Some(Detection {
            frames: k as u64,
            sub_frame,
            correlation,
            inverted: peak < 0.0,
            gain_db: 20.0 * gain.log10(),
        })
    }
}

/// The most common value of `lags` and how many times it occurs (the
/// smallest such value on a tie); `None` for an empty list.
pub fn mode(lags: impl IntoIterator<Item = u64>) -> Option<(u64, usize)> {
    let mut v: Vec<u64> = lags.into_iter().collect();
    v.sort_unstable();
    let mut best: Option<(u64, usize)> = None;
    for run in v.chunk_by(|a, b| a == b) {
        if best.map_or(true, |(_, n)| run.len() > n) {
            best = Some((run[0], run.len()));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mls_is_maximal_and_balanced() {
        for order in [4, 8, 10, 12, 14, 16] {
            let s = mls(order);
            let len = (1usize << order) - 1;
            assert_eq!(s.len(), len);
            let ones = s.iter().filter(|&&x| x > 0.0).count();
            // A maximal sequence has 2^(n-1) ones and 2^(n-1) - 1 zeros.
            assert_eq!(ones, 1 << (order - 1), "order {order}");
            // Periodic autocorrelation is len at 0 and -1 at every other lag.
            for lag in [1, 2, 3, len / 2, len - 1] {
                let r: f64 = (0..len)
                    .map(|i| f64::from(s[i]) * f64::from(s[(i + lag) % len]))
                    .sum();
                assert_eq!(r, -1.0, "order {order} lag {lag}");
            }
        }
    }

    #[test]
    fn fft_correlation_equals_the_direct_sum() {
        let s = mls(8);
        let mut w = vec![0.0f32; 300 + s.len()];
        for (i, x) in w.iter_mut().enumerate() {
            *x = ((i * 7919) % 101) as f32 / 50.0 - 1.0;
        }
        let c = Correlator::new(&s, 300);
        let fast = c.correlate(&w);
        assert_eq!(fast.len(), 301);
        for (k, f) in fast.iter().enumerate() {
            let direct: f64 = s
                .iter()
                .enumerate()
                .map(|(n, &r)| f64::from(r) * f64::from(w[k + n]))
                .sum();
            assert!((f - direct).abs() < 1e-6, "lag {k}: {f} vs {direct}");
        }
    }

    /// A capture holding the sequence at `level`, `delay` frames in.
    fn capture(delay: usize, level: f32, max_lag: usize) -> Vec<f32> {
        let s = mls(MLS_ORDER);
        let mut w = vec![0.0f32; max_lag + s.len()];
        for (i, &x) in s.iter().enumerate() {
            if let Some(d) = w.get_mut(delay + i) {
                *d = level * x;
            }
        }
        w
    }

    #[test]
    fn a_delayed_copy_is_found_at_its_exact_lag() {
        let max_lag = 3000;
        let c = Correlator::new(&mls(MLS_ORDER), max_lag);
        for delay in [0, 1, 255, 256, 1024, 2999, 3000] {
            let d = c.detect(&capture(delay, 0.25, max_lag), 0.25).unwrap();
            assert_eq!(d.frames, delay as u64);
            assert!(d.sub_frame.abs() < 1e-6, "{d:?}");
            assert!((d.correlation - 1.0).abs() < 1e-9, "{d:?}");
            assert!(d.gain_db.abs() < 1e-6, "{d:?}");
            assert!(!d.inverted);
        }
    }

    #[test]
    fn an_inverted_quieter_noisy_copy_is_found_and_reported_as_such() {
        let max_lag = 2000;
        let c = Correlator::new(&mls(MLS_ORDER), max_lag);
        let mut w = capture(700, -0.05, max_lag);
        // Deterministic noise at about -30 dBFS.
        let mut seed: u32 = 12345;
        for x in &mut w {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *x += ((seed >> 8) as f32 / (1 << 24) as f32 - 0.5) * 0.1;
        }
        let d = c.detect(&w, 0.25).unwrap();
        assert_eq!(d.frames, 700);
        assert!(d.inverted);
        assert!(
            (d.gain_db - 20.0 * (0.05f64 / 0.25).log10()).abs() < 0.5,
            "{d:?}"
        );
        assert!(d.correlation > DETECTION_THRESHOLD && d.correlation < 1.0);
    }

    #[test]
    fn silence_or_noise_is_not_a_detection() {
        let max_lag = 1000;
        let c = Correlator::new(&mls(MLS_ORDER), max_lag);
        assert_eq!(c.detect(&vec![0.0; c.window_len()], 0.25), None);
        let mut seed: u32 = 99;
        let noise: Vec<f32> = (0..c.window_len())
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect();
        assert_eq!(c.detect(&noise, 0.25), None);
    }

    #[test]
    fn mode_picks_the_most_common_lag() {
        assert_eq!(mode([]), None);
        assert_eq!(mode([256, 512, 256, 256, 0]), Some((256, 3)));
        assert_eq!(mode([5, 3]), Some((3, 1)));
    }
}
