//! Tap onsets from sound: a causal onset detector for a contact microphone,
//! a piezo or a drum pad's audio (experiment files' `[input] source =
//! "audio"`, docs/TAP.md §1 and §10).
//!
//! [`OnsetDetector::process`] takes the samples of an audio input block by
//! block, each block with the frame of its first sample, and reports every
//! tap it finds as an [`Onset`] whose `frame` is the **sample** where the
//! tap starts, not the block it was seen in. Per sample:
//!
//! 1. a one-pole high-pass at [`HIGHPASS_HZ`] removes DC, hum and handling
//!    rumble (a tap's attack is broadband and passes);
//! 2. the envelope is the mean square of that signal through a one-pole
//!    smoother of [`ENVELOPE_MS`] (a short-window energy);
//! 3. the noise floor is the minimum, over the last [`FLOOR_MS`] (in
//!    [`FLOOR_PARTS`] parts), of the same energy smoothed over
//!    [`FLOOR_SMOOTH_MS`] ("minimum statistics"): a tap, far shorter, does
//!    not raise it; a lasting rise of the background does within
//!    [`FLOOR_MS`] (its start is one onset); a fall at once. It is never
//!    below [`FLOOR_MIN_DBFS`] (digital silence); the first [`WARMUP_MS`]
//!    after a start or a gap in the frames only learn it (their mean);
//! 4. a tap is detected when the envelope rises `threshold_db` above the
//!    floor, the refractory period of the previous tap has passed, and the
//!    envelope has been below the threshold since that tap (so a long ring
//!    is one tap);
//! 5. during the next [`PEAK_MS`] the peak is found; then the onset is
//!    refined backwards: the first sample, from [`LOOKBACK_MS`] before the
//!    detection up to the peak, whose high-passed magnitude reaches
//!    [`ONSET_FRACTION`] of the peak and [`ONSET_NOISE_SIGMAS`] times the
//!    floor's RMS. An onset is thus reported [`PEAK_MS`] after it is seen.
//!
//! The detector is `Copy`-free but fixed-size: [`OnsetDetector::new`]
//! checks the settings; nothing else allocates. [`OnsetDetector::process`]
//! is **RT-safe.** (no allocation, lock or print; tested under
//! `assert_no_alloc`). [`synthetic`] makes test signals with known onsets.

use crate::error::{Error, ErrorKind, Result};

/// High-pass corner before the envelope, Hz.
pub const HIGHPASS_HZ: f64 = 1000.0;
/// Time constant of the envelope (mean square), ms.
pub const ENVELOPE_MS: f64 = 0.25;
/// The noise floor is the minimum of the smoothed energy over this long, ms.
pub const FLOOR_MS: f64 = 1000.0;
/// … taken in this many parts (the window slides by one part).
pub const FLOOR_PARTS: usize = 10;
/// Time constant of the energy the floor is the minimum of, ms.
pub const FLOOR_SMOOTH_MS: f64 = 20.0;
/// Learning time of the floor after a start or a gap, ms (no detection).
pub const WARMUP_MS: f64 = 50.0;
/// The floor is never taken below this level (mean square, dBFS).
pub const FLOOR_MIN_DBFS: f64 = -100.0;
/// How long after the detection the peak is looked for, ms: the onset is
/// reported this late.
pub const PEAK_MS: f64 = 2.0;
/// How far before the detection the onset is looked for, ms.
pub const LOOKBACK_MS: f64 = 2.0;
/// The onset is the first sample reaching this fraction of the peak.
pub const ONSET_FRACTION: f32 = 0.25;
/// … and this many times the floor's RMS.
pub const ONSET_NOISE_SIGMAS: f32 = 4.5;
/// Default `threshold_db`: the envelope's rise above the noise floor.
pub const DEFAULT_THRESHOLD_DB: f64 = 12.0;
/// Default `refractory_ms`: no second tap this soon after one.
pub const DEFAULT_REFRACTORY_MS: f64 = 60.0;
/// Valid `threshold_db`.
pub const THRESHOLD_DB_RANGE: (f64, f64) = (3.0, 60.0);
/// Valid `refractory_ms`.
pub const REFRACTORY_MS_RANGE: (f64, f64) = (5.0, 2000.0);
/// Valid sample rates, Hz.
pub const SAMPLE_RATE_RANGE: (u32, u32) = (8_000, 384_000);

/// History of high-passed magnitudes kept for the backward search, samples
/// (a power of two; covers [`LOOKBACK_MS`] + [`PEAK_MS`] up to 384 kHz).
const HISTORY: usize = 2048;

/// The detector's settings, as the experiment file gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnsetSettings {
    /// The envelope must rise this far above the noise floor, dB.
    pub threshold_db: f64,
    /// No second tap within this long of a tap's onset, ms.
    pub refractory_ms: f64,
}

impl Default for OnsetSettings {
    fn default() -> Self {
        OnsetSettings {
            threshold_db: DEFAULT_THRESHOLD_DB,
            refractory_ms: DEFAULT_REFRACTORY_MS,
        }
    }
}

impl OnsetSettings {
    /// Checks both settings against their ranges; the error names the key,
    /// the range and the value.
    ///
    /// # Errors
    /// [`ErrorKind::Invalid`] for a value out of range or not finite.
    pub fn check(&self) -> Result<()> {
        let bad = |key: &str, (lo, hi): (f64, f64), v: f64, unit: &str| {
            Error::new(
                ErrorKind::Invalid,
                format!("input.{key} must be {lo}–{hi} {unit}, got {v}"),
            )
        };
        let inside = |(lo, hi): (f64, f64), v: f64| v.is_finite() && v >= lo && v <= hi;
        if !inside(THRESHOLD_DB_RANGE, self.threshold_db) {
            return Err(bad(
                "threshold_db",
                THRESHOLD_DB_RANGE,
                self.threshold_db,
                "dB above the noise floor",
            ));
        }
        if !inside(REFRACTORY_MS_RANGE, self.refractory_ms) {
            return Err(bad(
                "refractory_ms",
                REFRACTORY_MS_RANGE,
                self.refractory_ms,
                "ms",
            ));
        }
        Ok(())
    }
}

/// One detected tap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Onset {
    /// The frame of the tap's first sample (refined backwards, see the module).
    pub frame: u64,
    /// The frame at which it was detected (threshold crossed).
    pub detected_frame: u64,
    /// The largest input magnitude within [`PEAK_MS`] of the detection, linear (1 = full scale).
    pub peak: f32,
    /// The same in dBFS.
    pub peak_dbfs: f32,
    /// The detector's confidence: the envelope's peak above the noise floor, dB.
    pub confidence_db: f32,
    /// The noise floor at the detection (mean square of the high-passed input), dBFS.
    pub floor_dbfs: f32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Learning the floor until this frame.
    Warmup(u64),
    /// Waiting for a tap.
    Idle,
    /// A tap detected at `trig`: looking for its peak until `until`.
    Peak {
        trig: u64,
        until: u64,
        peak_y: f32,
        peak_at: u64,
        peak_x: f32,
        peak_env: f64,
        floor: f64,
    },
}

/// The causal onset detector (see the module).
#[derive(Debug, Clone)]
pub struct OnsetDetector {
    settings: OnsetSettings,
    sample_rate: u32,
    hp_a: f32,
    env_a: f64,
    floor_a: f64,
    smooth_a: f64,
    part_len: u64,
    floor_min: f64,
    thr: f64,
    refractory: u64,
    warmup: u64,
    peak_len: u64,
    lookback: u64,
    // State.
    next_frame: Option<u64>,
    first_frame: u64,
    hp_x: f32,
    hp_y: f32,
    env: f64,
    smooth: f64,
    part_min: f64,
    part_left: u64,
    mins: [f64; FLOOR_PARTS],
    mins_at: usize,
    floor: f64,
    state: State,
    ready_at: u64,
    armed: bool,
    hist: [f32; HISTORY],
    onsets: u64,
    restarts: u64,
}

fn one_pole(ms: f64, rate: u32) -> f64 {
    1.0 - (-1000.0 / (ms * f64::from(rate))).exp()
}

fn frames(ms: f64, rate: u32) -> u64 {
    (ms * f64::from(rate) / 1000.0).round().max(1.0) as u64
}

/// `x` (a level, 1 = full scale) in dB; −inf for 0.
pub fn db(x: f64) -> f64 {
    20.0 * x.log10()
}

impl OnsetDetector {
    /// A detector for `sample_rate`.
    ///
    /// # Errors
    /// [`ErrorKind::Invalid`] for settings out of range ([`OnsetSettings::check`])
    /// or a sample rate outside [`SAMPLE_RATE_RANGE`].
    pub fn new(settings: OnsetSettings, sample_rate: u32) -> Result<Self> {
        settings.check()?;
        if sample_rate < SAMPLE_RATE_RANGE.0 || sample_rate > SAMPLE_RATE_RANGE.1 {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "onset detection needs a sample rate of {}–{} Hz, got {sample_rate}",
                    SAMPLE_RATE_RANGE.0, SAMPLE_RATE_RANGE.1
                ),
            ));
        }
        let rc = 1.0 / (2.0 * std::f64::consts::PI * HIGHPASS_HZ);
        let dt = 1.0 / f64::from(sample_rate);
        Ok(OnsetDetector {
            settings,
            sample_rate,
            hp_a: (rc / (rc + dt)) as f32,
            env_a: one_pole(ENVELOPE_MS, sample_rate),
            floor_a: one_pole(FLOOR_MS, sample_rate),
            smooth_a: one_pole(FLOOR_SMOOTH_MS, sample_rate),
            part_len: frames(FLOOR_MS / FLOOR_PARTS as f64, sample_rate),
            floor_min: 10f64.powf(FLOOR_MIN_DBFS / 10.0),
            thr: 10f64.powf(settings.threshold_db / 10.0),
            refractory: frames(settings.refractory_ms, sample_rate),
            warmup: frames(WARMUP_MS, sample_rate),
            peak_len: frames(PEAK_MS, sample_rate),
            lookback: frames(LOOKBACK_MS, sample_rate),
            next_frame: None,
            first_frame: 0,
            hp_x: 0.0,
            hp_y: 0.0,
            env: 0.0,
            smooth: 0.0,
            part_min: f64::INFINITY,
            part_left: 0,
            mins: [f64::INFINITY; FLOOR_PARTS],
            mins_at: 0,
            floor: 0.0,
            state: State::Idle,
            ready_at: 0,
            armed: true,
            hist: [0.0; HISTORY],
            onsets: 0,
            restarts: 0,
        })
    }

    /// The settings it runs with.
    pub fn settings(&self) -> OnsetSettings {
        self.settings
    }

    /// The sample rate it was made for.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Onsets reported so far.
    pub fn onsets(&self) -> u64 {
        self.onsets
    }

    /// Restarts: blocks whose first frame did not follow the previous
    /// block's last (dropped audio); each
    /// starts a new warm-up, as the first block does (not counted).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The noise floor now (mean square of the high-passed input), dBFS.
    pub fn floor_dbfs(&self) -> f64 {
        10.0 * self.floor.max(self.floor_min).log10()
    }

    /// Forgets everything: the next block starts a warm-up. **RT-safe.**
    pub fn reset(&mut self) {
        self.next_frame = None;
    }

    fn restart(&mut self, frame: u64) {
        if self.next_frame.is_some() {
            self.restarts += 1;
        }
        self.first_frame = frame;
        self.hp_x = 0.0;
        self.hp_y = 0.0;
        self.env = 0.0;
        self.smooth = 0.0;
        self.part_min = f64::INFINITY;
        self.part_left = self.part_len;
        self.mins = [f64::INFINITY; FLOOR_PARTS];
        self.mins_at = 0;
        self.floor = 0.0;
        self.state = State::Warmup(frame + self.warmup);
        self.ready_at = 0;
        self.armed = true;
    }

    /// Takes one block of samples whose first is at `first_frame`, and
    /// calls `found` for each onset completed in it (in frame order). A
    /// block that does not follow the previous one restarts the detector.
    /// **RT-safe.**
    pub fn process(&mut self, first_frame: u64, samples: &[f32], found: &mut dyn FnMut(Onset)) {
        if self.next_frame != Some(first_frame) {
            self.restart(first_frame);
        }
        let mut frame = first_frame;
        for &x in samples {
            self.sample(frame, x, found);
            frame += 1;
        }
        self.next_frame = Some(frame);
    }

    fn sample(&mut self, n: u64, x: f32, found: &mut dyn FnMut(Onset)) {
        let x = if x.is_finite() { x } else { 0.0 };
        let y = self.hp_a * (self.hp_y + x - self.hp_x);
        self.hp_x = x;
        self.hp_y = y;
        let ay = y.abs();
        self.hist[(n as usize) & (HISTORY - 1)] = ay;
        let p = f64::from(y) * f64::from(y);
        self.env += self.env_a * (p - self.env);
        self.smooth += self.smooth_a * (p - self.smooth);
        let floor = self.floor.max(self.floor_min);
        let above = self.env > floor * self.thr;
        if !matches!(self.state, State::Warmup(_)) {
            self.update_floor();
        }
        match self.state {
            State::Warmup(until) => {
                // Learn fast at first: the floor is the mean square so far.
                let k = (n - self.first_frame + 1) as f64;
                self.floor += (p - self.floor) / k.min(1.0 / self.floor_a);
                if n + 1 >= until {
                    self.state = State::Idle;
                    self.armed = !above;
                    // The minima start from the warm-up's mean.
                    self.mins = [self.floor; FLOOR_PARTS];
                    self.smooth = self.floor;
                    self.part_min = f64::INFINITY;
                    self.part_left = self.part_len;
                }
            }
            State::Idle => {
                if !above {
                    self.armed = true;
                }
                if above && self.armed && n >= self.ready_at {
                    self.state = State::Peak {
                        trig: n,
                        until: n + self.peak_len,
                        peak_y: ay,
                        peak_at: n,
                        peak_x: x.abs(),
                        peak_env: self.env,
                        floor,
                    };
                    self.armed = false;
                }
            }
            State::Peak {
                trig,
                until,
                mut peak_y,
                mut peak_at,
                mut peak_x,
                mut peak_env,
                floor,
            } => {
                if ay > peak_y {
                    peak_y = ay;
                    peak_at = n;
                }
                peak_x = peak_x.max(x.abs());
                peak_env = peak_env.max(self.env);
                if n + 1 >= until {
                    let onset = self.refine(trig, peak_at, peak_y, floor);
                    self.onsets += 1;
                    self.ready_at = onset + self.refractory;
                    self.state = State::Idle;
                    found(Onset {
                        frame: onset,
                        detected_frame: trig,
                        peak: peak_x,
                        peak_dbfs: db(f64::from(peak_x)) as f32,
                        confidence_db: (10.0 * (peak_env / floor).log10()) as f32,
                        floor_dbfs: (10.0 * floor.log10()) as f32,
                    });
                } else {
                    self.state = State::Peak {
                        trig,
                        until,
                        peak_y,
                        peak_at,
                        peak_x,
                        peak_env,
                        floor,
                    };
                }
            }
        }
    }

    /// Minimum statistics: the floor is the least smoothed energy of the
    /// last [`FLOOR_PARTS`] parts and the current one. **RT-safe.**
    fn update_floor(&mut self) {
        self.part_min = self.part_min.min(self.smooth);
        self.part_left = self.part_left.saturating_sub(1);
        if self.part_left == 0 {
            self.mins[self.mins_at] = self.part_min;
            self.mins_at = (self.mins_at + 1) % FLOOR_PARTS;
            self.part_min = f64::INFINITY;
            self.part_left = self.part_len;
        }
        let m = self.mins.iter().fold(self.part_min, |a, &b| a.min(b));
        if m.is_finite() {
            self.floor = m;
        }
    }

    /// The first sample from the lookback up to the peak whose magnitude
    /// reaches the onset level. **RT-safe.**
    fn refine(&self, trig: u64, peak_at: u64, peak_y: f32, floor: f64) -> u64 {
        let level = (ONSET_FRACTION * peak_y).max(ONSET_NOISE_SIGMAS * floor.sqrt() as f32);
        let oldest = peak_at
            .saturating_sub(HISTORY as u64 - 1)
            .max(self.first_frame);
        // Not before the previous tap's refractory end either.
        let lo = trig
            .saturating_sub(self.lookback)
            .max(oldest)
            .max(self.ready_at.min(trig));
        (lo..=peak_at)
            .find(|&m| self.hist[(m as usize) & (HISTORY - 1)] >= level)
            .unwrap_or(peak_at)
    }
}

/// Test signals with known onsets: decaying noise bursts ("taps") in white
/// or pink noise at a given SNR, from a seeded generator.
pub mod synthetic {
    use firmtime_rt::rng::{Pink, Rng};

    /// The background noise's colour.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Noise {
        /// Flat spectrum.
        White,
        /// −3 dB per octave (Paul Kellet's filter).
        Pink,
    }

    /// How a track is made.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct TrackSpec {
        /// Generator seed.
        pub seed: u64,
        /// Hz.
        pub sample_rate: u32,
        /// Number of taps.
        pub taps: usize,
        /// Silence (noise only) before the first tap, ms.
        pub lead_ms: f64,
        /// Inter-tap intervals are uniform in this range, ms.
        pub interval_ms: (f64, f64),
        /// The burst's peak envelope (its first sample's RMS), linear.
        pub amplitude: f64,
        /// Decay time constant of the burst, ms.
        pub decay_ms: f64,
        /// Length of the burst, ms.
        pub length_ms: f64,
        /// SNR, dB: the burst's power over its first [`SNR_WINDOW_MS`]
        /// against the noise's power (both unfiltered); `None`: no noise.
        pub snr_db: Option<f64>,
        /// The noise's colour.
        pub noise: Noise,
    }

    /// The window over which a burst's power is taken for the SNR, ms.
    pub const SNR_WINDOW_MS: f64 = 10.0;

    impl Default for TrackSpec {
        fn default() -> Self {
            TrackSpec {
                seed: 1,
                sample_rate: 48_000,
                taps: 100,
                lead_ms: 200.0,
                interval_ms: (150.0, 600.0),
                amplitude: 0.3,
                decay_ms: 5.0,
                length_ms: 40.0,
                snr_db: Some(20.0),
                noise: Noise::Pink,
            }
        }
    }

    /// A track: the samples and the frame of each tap's first sample.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Track {
        /// Samples, starting at frame 0.
        pub samples: Vec<f32>,
        /// Each tap's first frame, ascending.
        pub onsets: Vec<u64>,
        /// The noise's RMS (0 without noise).
        pub noise_rms: f64,
    }

    /// The burst's mean power over [`SNR_WINDOW_MS`] for a peak envelope `a`.
    pub fn burst_power(a: f64, decay_ms: f64, length_ms: f64) -> f64 {
        let t = SNR_WINDOW_MS.min(length_ms);
        a * a * (decay_ms / 2.0) / t * (1.0 - (-2.0 * t / decay_ms).exp())
    }

    fn uniform(rng: &mut Rng) -> f64 {
        rng.next_f64()
    }

    /// Makes a track (allocates; not for the RT path).
    pub fn track(spec: &TrackSpec) -> Track {
        let sr = f64::from(spec.sample_rate);
        let ms = |m: f64| (m * sr / 1000.0).round() as u64;
        let mut rng = Rng::new(spec.seed);
        let mut onsets = Vec::with_capacity(spec.taps);
        let mut t = ms(spec.lead_ms);
        for _ in 0..spec.taps {
            onsets.push(t);
            let (lo, hi) = spec.interval_ms;
            t += ms(lo + (hi - lo) * uniform(&mut rng));
        }
        let len = (t + ms(spec.length_ms)) as usize;
        let mut samples = vec![0f32; len];
        let blen = ms(spec.length_ms) as usize;
        let decay = spec.decay_ms * sr / 1000.0;
        for &o in &onsets {
            for i in 0..blen {
                let env = spec.amplitude * (-(i as f64) / decay).exp();
                samples[o as usize + i] += (env * rng.next_normal()) as f32;
            }
        }
        let mut noise_rms = 0.0;
        if let Some(snr) = spec.snr_db {
            let mut noise = vec![0f64; len];
            let mut pink = Pink::<f64>::default();
            for v in noise.iter_mut() {
                let w = rng.next_normal();
                *v = match spec.noise {
                    Noise::White => w,
                    Noise::Pink => pink.next(w),
                };
            }
            let rms = (noise.iter().map(|v| v * v).sum::<f64>() / len.max(1) as f64).sqrt();
            let p = burst_power(spec.amplitude, spec.decay_ms, spec.length_ms);
            noise_rms = (p / 10f64.powf(snr / 10.0)).sqrt();
            let k = if rms > 0.0 { noise_rms / rms } else { 0.0 };
            for (s, v) in samples.iter_mut().zip(&noise) {
                *s += (v * k) as f32;
            }
        }
        Track {
            samples,
            onsets,
            noise_rms,
        }
    }

    /// Detections matched to the truth: each true onset takes the nearest
    /// unmatched detection within `tolerance` frames.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub struct Score {
        /// True onsets found.
        pub hits: usize,
        /// True onsets not found.
        pub misses: usize,
        /// Detections matching no true onset.
        pub false_taps: usize,
        /// Detected − true frame of each hit.
        pub errors: Vec<i64>,
    }

    impl Score {
        /// F1 = 2 hits / (2 hits + misses + false taps).
        pub fn f1(&self) -> f64 {
            let d = 2 * self.hits + self.misses + self.false_taps;
            if d == 0 {
                1.0
            } else {
                2.0 * self.hits as f64 / d as f64
            }
        }
    }

    /// Scores `found` (ascending frames) against `truth` (ascending).
    pub fn score(truth: &[u64], found: &[u64], tolerance: u64) -> Score {
        let mut used = vec![false; found.len()];
        let mut s = Score::default();
        for &t in truth {
            let best = found
                .iter()
                .enumerate()
                .filter(|&(i, &f)| !used[i] && f.abs_diff(t) <= tolerance)
                .min_by_key(|&(_, &f)| f.abs_diff(t));
            match best {
                Some((i, &f)) => {
                    used[i] = true;
                    s.hits += 1;
                    s.errors.push(f as i64 - t as i64);
                }
                None => s.misses += 1,
            }
        }
        s.false_taps = used.iter().filter(|u| !**u).count();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::synthetic::{score, track, Noise, TrackSpec};
    use super::*;

    fn detect(samples: &[f32], block: usize, settings: OnsetSettings) -> Vec<Onset> {
        let mut d = OnsetDetector::new(settings, 48_000).unwrap();
        let mut out = Vec::with_capacity(4096);
        for (i, b) in samples.chunks(block).enumerate() {
            let first = (i * block) as u64;
            assert_no_alloc::assert_no_alloc(|| {
                d.process(first, b, &mut |o| {
                    if out.len() < out.capacity() {
                        out.push(o);
                    }
                })
            });
        }
        out
    }

    fn frames_of(v: &[Onset]) -> Vec<u64> {
        v.iter().map(|o| o.frame).collect()
    }

    #[test]
    fn settings_out_of_range_name_the_key_and_the_range() {
        let e = OnsetSettings {
            threshold_db: 1.0,
            ..OnsetSettings::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("input.threshold_db must be 3–60"), "{e}");
        assert!(e.contains("got 1"), "{e}");
        let e = OnsetSettings {
            refractory_ms: f64::NAN,
            ..OnsetSettings::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("input.refractory_ms must be 5–2000 ms"), "{e}");
        let e = OnsetDetector::new(OnsetSettings::default(), 1000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("8000–384000 Hz, got 1000"), "{e}");
    }

    #[test]
    fn a_click_in_silence_is_found_at_its_exact_sample_whatever_the_block() {
        // Digital silence, then single-sample steps of decaying bursts.
        let spec = TrackSpec {
            taps: 20,
            snr_db: None,
            ..TrackSpec::default()
        };
        let t = track(&spec);
        for block in [1, 64, 256, 1000] {
            let found = detect(&t.samples, block, OnsetSettings::default());
            let s = score(&t.onsets, &frames_of(&found), 480);
            assert_eq!(
                (s.hits, s.misses, s.false_taps),
                (20, 0, 0),
                "block {block}"
            );
            // Without noise the burst's first sample is above a quarter of
            // the peak in most taps; never more than a few samples late.
            assert!(
                s.errors.iter().all(|&e| (0..=8).contains(&e)),
                "block {block}: {:?}",
                s.errors
            );
        }
    }

    #[test]
    fn same_onsets_for_every_block_size() {
        let t = track(&TrackSpec {
            taps: 30,
            snr_db: Some(20.0),
            seed: 7,
            ..TrackSpec::default()
        });
        let a = detect(&t.samples, 1, OnsetSettings::default());
        for block in [32, 256, 4096] {
            assert_eq!(
                detect(&t.samples, block, OnsetSettings::default()),
                a,
                "block {block}"
            );
        }
    }

    #[test]
    fn every_tap_found_within_24_frames_in_pink_noise_at_20_db() {
        let t = track(&TrackSpec {
            taps: 200,
            snr_db: Some(20.0),
            noise: Noise::Pink,
            seed: 11,
            ..TrackSpec::default()
        });
        let found = detect(&t.samples, 256, OnsetSettings::default());
        let s = score(&t.onsets, &frames_of(&found), 480);
        assert_eq!((s.hits, s.misses, s.false_taps), (200, 0, 0));
        let worst = s.errors.iter().map(|e| e.abs()).max().unwrap();
        assert!(worst <= 24, "worst onset error {worst} frames");
        assert!(found.iter().all(|o| o.confidence_db >= 12.0));
    }

    #[test]
    fn noise_alone_gives_no_tap_and_a_floor_at_its_level() {
        let t = track(&TrackSpec {
            taps: 0,
            lead_ms: 5000.0,
            snr_db: Some(0.0),
            noise: Noise::White,
            ..TrackSpec::default()
        });
        let mut d = OnsetDetector::new(OnsetSettings::default(), 48_000).unwrap();
        let mut n = 0;
        d.process(0, &t.samples, &mut |_| n += 1);
        assert_eq!(n, 0);
        // White noise through the 1 kHz high-pass keeps ~96 % of its power;
        // the minimum of its smoothed energy lies a little below its mean.
        let want = 20.0 * t.noise_rms.log10();
        let got = d.floor_dbfs();
        assert!(got > want - 2.5 && got < want + 0.5, "{got} vs {want}");
    }

    #[test]
    fn a_lasting_rise_of_the_background_is_one_onset_then_taps_are_found_again() {
        // Silence, then pink noise from 0.5 s on (one onset: the noise's
        // start; the floor follows it within FLOOR_MS), then taps from 1.8 s on.
        let t = track(&TrackSpec {
            taps: 10,
            lead_ms: 1300.0,
            snr_db: Some(20.0),
            seed: 3,
            ..TrackSpec::default()
        });
        let mut s = vec![0f32; 24_000];
        s.extend_from_slice(&t.samples);
        let found = detect(&s, 256, OnsetSettings::default());
        let frames = frames_of(&found);
        assert_eq!(frames.len(), 11, "{frames:?}");
        assert!(frames[0].abs_diff(24_000) <= 8, "{frames:?}");
        let truth: Vec<u64> = t.onsets.iter().map(|o| o + 24_000).collect();
        let sc = score(&truth, &frames[1..], 480);
        assert_eq!((sc.hits, sc.misses, sc.false_taps), (10, 0, 0));
    }

    #[test]
    fn refractory_period_merges_a_double_strike_and_a_gap_restarts() {
        let mut s = vec![0f32; 48_000];
        // Two strikes 20 ms apart (a pad's double trigger), one 200 ms later.
        for &o in &[9600usize, 10_560, 19_200] {
            for i in 0..480 {
                s[o + i] = 0.5 * (-(i as f32) / 240.0).exp() * if i % 2 == 0 { 1.0 } else { -1.0 };
            }
        }
        let found = detect(&s, 128, OnsetSettings::default());
        assert_eq!(frames_of(&found), [9600, 19_200]);
        let found = detect(
            &s,
            128,
            OnsetSettings {
                refractory_ms: 10.0,
                ..OnsetSettings::default()
            },
        );
        assert_eq!(frames_of(&found), [9600, 10_560, 19_200]);
        // Blocks that skip frames restart the warm-up: a tap inside it is not reported.
        let mut d = OnsetDetector::new(OnsetSettings::default(), 48_000).unwrap();
        let mut got = Vec::new();
        d.process(0, &s[..9000], &mut |o| got.push(o.frame));
        d.process(9500, &s[9500..], &mut |o| got.push(o.frame));
        // (the tap inside the warm-up raised the floor learnt there: the
        // later tap's onset level is higher, a sample later at most)
        assert_eq!(got.len(), 1, "{got:?}");
        assert!((19_200..=19_201).contains(&got[0]), "{got:?}");
        assert_eq!(d.restarts(), 1, "the gap (the first block is no restart)");
    }
}
