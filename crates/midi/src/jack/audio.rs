//! Audio output for the JACK backend: note messages rendered as a click or a
//! tone starting at their exact frame, plus a masking-noise bed.
//!
//! A MIDI sound module adds a delay of its own (over 1 ms, Schultz 2019) that
//! the researcher cannot see. With [`AudioOptions`] in
//! [`JackOptions::audio`](super::JackOptions::audio) the
//! [`JackBackend`](super::JackBackend) gets one more output "port" (index
//! [`JackBackend::audio_port`](super::JackBackend::audio_port)): messages
//! sent to it are scheduled exactly like MIDI output (intended ns → frame
//! through the cycle's times; a frame already passed goes out at offset 0 and
//! counts as late) and then, instead of being written to a MIDI buffer, start
//! a sound at that frame of the JACK audio port(s). The
//! [`SentEvent`](crate::SentEvent) of each message carries that frame: the
//! onset of the sound.
//!
//! The [`Synth`] renders, for each Note On:
//!
//! - [`Sound::Click`]: a cosine burst of [`SynthOptions::click_hz`] under a
//!   `(1 − n/L)³` window of [`SynthOptions::click_ms`]: full amplitude at its
//!   first sample (a sharp, sample-accurate onset) decaying smoothly to 0.
//!   Note Off is ignored.
//! - [`Sound::Tone`]: a sinusoid (cosine phase) at the note's equal-tempered frequency (A4 = 440
//!   Hz), sounding from Note On until Note Off, with raised-cosine attack and
//!   release of [`SynthOptions::ramp_ms`] (no clicks at either end).
//!
//! Velocity scales amplitude linearly; velocity 127 peaks at
//! [`SynthOptions::level_dbfs`]. Note messages on
//! [`SynthOptions::noise_channel`] instead switch masking noise (white or
//! pink, [`NoiseColor`]) on and off at its own level, faded in and out over
//! the ramp. All voices and noise are mixed to one signal, copied to every
//! audio port, and clipped to ±1.
//!
//! # Real-time contract
//!
//! [`Synth::new`] allocates its fixed voice pool; [`Synth::queue`] and
//! [`Synth::render`] are **RT-safe.**: no allocation, no locks, no
//! printing. When every voice sounds, a new note steals the oldest
//! (counted in [`AudioStats::stolen`]); more than [`MAX_CYCLE_EVENTS`]
//! messages in one cycle are refused (the backend counts them as dropped).

use std::f64::consts::TAU;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firmtime_rt::rng::{Pink, Rng};
use jack::{AudioIn, Client, Control, Port, ProcessScope};

use crate::error::{Error, ErrorKind};
use crate::{parse_message, MidiMessage};
use firmtime_jack::{
    activate, connect, deactivate, jack_clock_offset, open_client, port_name, read_cycle_times,
    FrameExtender, FrameGaps, XrunNotifier,
};

/// Most note messages the synth takes in one process cycle.
pub const MAX_CYCLE_EVENTS: usize = 256;
/// Most audio ports (all carry the same mono signal).
pub const MAX_AUDIO_PORTS: usize = 8;

/// What a Note On sounds like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sound {
    /// A short windowed burst with a sharp onset.
    #[default]
    Click,
    /// A sine at the note's pitch, as long as the note is held.
    Tone,
}

/// Spectrum of the masking noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoiseColor {
    /// Flat spectrum.
    #[default]
    White,
    /// −3 dB per octave (Paul Kellet's filter).
    Pink,
}

/// How the [`Synth`] sounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthOptions {
    /// Click or tone.
    pub sound: Sound,
    /// Peak level of a velocity-127 note, dBFS (≤ 0).
    pub level_dbfs: f32,
    /// Length of a click, ms.
    pub click_ms: f32,
    /// Carrier frequency of a click, Hz.
    pub click_hz: f32,
    /// Attack and release of a tone and fade of the noise, ms.
    pub ramp_ms: f32,
    /// Voices that can sound at once (≥ 1).
    pub voices: usize,
    /// MIDI channel (0-based) whose notes switch masking noise; `None`: no noise.
    pub noise_channel: Option<u8>,
    /// Spectrum of the noise.
    pub noise: NoiseColor,
    /// Level of the noise, dBFS RMS of white noise (≤ 0).
    pub noise_level_dbfs: f32,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            sound: Sound::Click,
            level_dbfs: -6.0,
            click_ms: 5.0,
            click_hz: 2000.0,
            ramp_ms: 2.0,
            voices: 32,
            noise_channel: None,
            noise: NoiseColor::White,
            noise_level_dbfs: -20.0,
        }
    }
}

impl SynthOptions {
    /// Checks the values.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the bad value.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::new(ErrorKind::InvalidInput, m));
        let level_ok = |x: f32| (-120.0..=0.0).contains(&x);
        if !level_ok(self.level_dbfs) || !level_ok(self.noise_level_dbfs) {
            return bad(format!(
                "audio levels must be −120…0 dBFS, got {} and {}",
                self.level_dbfs, self.noise_level_dbfs
            ));
        }
        if !(self.click_ms > 0.0 && self.click_ms <= 1000.0) {
            return bad(format!(
                "click length must be 0–1000 ms, got {}",
                self.click_ms
            ));
        }
        if !(self.click_hz > 0.0 && self.click_hz < 20_000.0) {
            return bad(format!(
                "click frequency must be 0–20000 Hz, got {}",
                self.click_hz
            ));
        }
        if !(self.ramp_ms > 0.0 && self.ramp_ms <= 100.0) {
            return bad(format!("ramp must be 0–100 ms, got {}", self.ramp_ms));
        }
        if self.voices == 0 || self.voices > 1024 {
            return bad(format!("voices must be 1–1024, got {}", self.voices));
        }
        if self.noise_channel.is_some_and(|c| c > 15) {
            return bad("noise channel must be 0–15 (MIDI channels 1–16)".into());
        }
        Ok(())
    }
}

/// The audio part of [`JackOptions`](super::JackOptions).
#[derive(Debug, Clone, PartialEq)]
pub struct AudioOptions {
    /// Short names of the audio output ports (1 to [`MAX_AUDIO_PORTS`]); all
    /// carry the same signal.
    pub ports: Vec<String>,
    /// Full names of ports to connect to: entry `i` from port `i`, entries
    /// past the last port from the last port (so one port can feed both
    /// `system:playback_1` and `system:playback_2`).
    pub connect: Vec<String>,
    /// The sound.
    pub synth: SynthOptions,
}

impl AudioOptions {
    /// One port `audio`, no connections, `synth`.
    pub fn new(synth: SynthOptions) -> Self {
        AudioOptions {
            ports: vec!["audio".into()],
            connect: Vec::new(),
            synth,
        }
    }
}

/// The synth's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AudioStats {
    /// Sounds started (Note Ons outside the noise channel).
    pub onsets: u64,
    /// Voices cut off because every voice was sounding.
    pub stolen: u64,
    /// Samples clipped to ±1.
    pub clipped: u64,
}

#[derive(Debug, Default)]
pub(crate) struct AudioCounters {
    onsets: AtomicU64,
    stolen: AtomicU64,
    clipped: AtomicU64,
}

impl AudioCounters {
    pub(crate) fn stats(&self) -> AudioStats {
        AudioStats {
            onsets: self.onsets.load(Ordering::Relaxed),
            stolen: self.stolen.load(Ordering::Relaxed),
            clipped: self.clipped.load(Ordering::Relaxed),
        }
    }
}

/// The equal-tempered frequency of MIDI note `note` (69 = A4 = 440 Hz).
///
/// **RT-safe.**
pub fn note_hz(note: u8) -> f64 {
    440.0 * ((f64::from(note) - 69.0) / 12.0).exp2()
}

fn db_to_amp(db: f32) -> f32 {
    10f32.powf(db / 20.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Free,
    /// Sounding; `n` samples since onset.
    On,
    /// Releasing; `k` samples into the release.
    Release,
}

#[derive(Debug, Clone, Copy)]
struct Voice {
    stage: Stage,
    channel: u8,
    note: u8,
    amp: f32,
    phase: f64,
    dphase: f64,
    n: u32,
    k: u32,
    rel_from: f32,
    age: u64,
}

const FREE: Voice = Voice {
    stage: Stage::Free,
    channel: 0,
    note: 0,
    amp: 0.0,
    phase: 0.0,
    dphase: 0.0,
    n: 0,
    k: 0,
    rel_from: 0.0,
    age: 0,
};

/// Renders note messages as audio, each starting at its frame offset in the
/// cycle. Pure: plain buffers in, no JACK calls, so it is tested without a
/// server and under `assert_no_alloc`.
pub struct Synth {
    opts: SynthOptions,
    amp127: f32,
    noise_amp: f32,
    click_len: u32,
    ramp: u32,
    click_dphase: f64,
    rate: f64,
    voices: Vec<Voice>,
    events: [(u32, MidiMessage); MAX_CYCLE_EVENTS],
    n_events: usize,
    next_age: u64,
    noise_on: bool,
    noise_gain: f32,
    rng: Rng,
    pink: Pink<f32>,
    counters: Arc<AudioCounters>,
}

impl fmt::Debug for Synth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Synth")
            .field("opts", &self.opts)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl Synth {
    /// A synth at `sample_rate` Hz with its voice pool allocated.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for bad options or a zero sample rate.
    pub fn new(opts: SynthOptions, sample_rate: u32) -> Result<Self, Error> {
        opts.check()?;
        if sample_rate == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "sample rate must be > 0",
            ));
        }
        let rate = f64::from(sample_rate);
        let samples = |ms: f32| ((f64::from(ms) * rate / 1000.0).round() as u32).max(1);
        Ok(Synth {
            opts,
            amp127: db_to_amp(opts.level_dbfs),
            noise_amp: db_to_amp(opts.noise_level_dbfs),
            click_len: samples(opts.click_ms),
            ramp: samples(opts.ramp_ms),
            click_dphase: TAU * f64::from(opts.click_hz) / rate,
            rate,
            voices: vec![FREE; opts.voices],
            events: [(0, MidiMessage::Reset); MAX_CYCLE_EVENTS],
            n_events: 0,
            next_age: 0,
            noise_on: false,
            noise_gain: 0.0,
            rng: Rng::new(0),
            pink: Pink::default(),
            counters: Arc::default(),
        })
    }

    /// The options.
    pub fn options(&self) -> &SynthOptions {
        &self.opts
    }

    /// Counters so far. **RT-safe.**
    pub fn stats(&self) -> AudioStats {
        self.counters.stats()
    }

    pub(crate) fn counters(&self) -> Arc<AudioCounters> {
        Arc::clone(&self.counters)
    }

    /// Length of a click in samples.
    pub fn click_len(&self) -> u32 {
        self.click_len
    }

    /// Length of a tone's attack and of its release, in samples.
    pub fn ramp_len(&self) -> u32 {
        self.ramp
    }

    /// Queues a MIDI message (raw bytes) at `offset` frames into the next
    /// [`Synth::render`]; only Note On / Note Off matter, other messages are
    /// accepted and ignored. Offsets should come in non-decreasing order (a
    /// smaller one is moved up to the last). False when
    /// [`MAX_CYCLE_EVENTS`] messages are already queued or the bytes are
    /// not a MIDI message.
    ///
    /// **RT-safe.**
    pub fn queue(&mut self, offset: u32, bytes: &[u8]) -> bool {
        let Ok(msg) = parse_message(bytes) else {
            return false;
        };
        self.queue_msg(offset, msg)
    }

    /// As [`Synth::queue`], with a parsed message. **RT-safe.**
    pub fn queue_msg(&mut self, offset: u32, msg: MidiMessage) -> bool {
        if self.n_events >= MAX_CYCLE_EVENTS {
            return false;
        }
        let offset = match self.n_events {
            0 => offset,
            n => offset.max(self.events[n - 1].0),
        };
        self.events[self.n_events] = (offset, msg);
        self.n_events += 1;
        true
    }

    /// Renders one cycle into `out` (overwritten), applying the queued
    /// messages at their offsets (an offset past the end applies after the
    /// last sample), then clears the queue.
    ///
    /// **RT-safe.**
    pub fn render(&mut self, out: &mut [f32]) {
        let len = out.len();
        let mut pos = 0usize;
        for i in 0..self.n_events {
            let (offset, msg) = self.events[i];
            let at = (offset as usize).min(len);
            self.render_span(&mut out[pos..at]);
            pos = at;
            self.apply(msg);
        }
        self.n_events = 0;
        self.render_span(&mut out[pos..]);
    }

    fn apply(&mut self, msg: MidiMessage) {
        let (channel, note, velocity, on) = match msg {
            MidiMessage::NoteOn {
                channel,
                note,
                velocity,
            } => (channel, note, velocity, velocity > 0),
            MidiMessage::NoteOff { channel, note, .. } => (channel, note, 0, false),
            _ => return,
        };
        if self.opts.noise_channel == Some(channel) {
            self.noise_on = on;
            return;
        }
        if !on {
            if self.opts.sound == Sound::Tone {
                for v in &mut self.voices {
                    if v.stage == Stage::On && v.channel == channel && v.note == note {
                        v.rel_from = attack_env(v.n, self.ramp);
                        v.stage = Stage::Release;
                        v.k = 0;
                    }
                }
            }
            return;
        }
        // A free voice, else the oldest (stolen).
        let idx = match self.voices.iter().position(|v| v.stage == Stage::Free) {
            Some(i) => i,
            None => {
                self.counters.stolen.fetch_add(1, Ordering::Relaxed);
                let mut best = 0;
                for (i, v) in self.voices.iter().enumerate() {
                    if v.age < self.voices[best].age {
                        best = i;
                    }
                }
                best
            }
        };
        self.counters.onsets.fetch_add(1, Ordering::Relaxed);
        let dphase = match self.opts.sound {
            Sound::Click => self.click_dphase,
            Sound::Tone => TAU * note_hz(note) / self.rate,
        };
        self.voices[idx] = Voice {
            stage: Stage::On,
            channel,
            note,
            amp: self.amp127 * f32::from(velocity.min(127)) / 127.0,
            phase: 0.0,
            dphase,
            n: 0,
            k: 0,
            rel_from: 0.0,
            age: self.next_age,
        };
        self.next_age += 1;
    }

    fn render_span(&mut self, out: &mut [f32]) {
        out.fill(0.0);
        let (ramp, click_len, sound) = (self.ramp, self.click_len, self.opts.sound);
        for v in &mut self.voices {
            if v.stage == Stage::Free {
                continue;
            }
            for s in out.iter_mut() {
                let env = match (sound, v.stage) {
                    (Sound::Click, _) => {
                        if v.n >= click_len {
                            v.stage = Stage::Free;
                            break;
                        }
                        let x = 1.0 - v.n as f32 / click_len as f32;
                        x * x * x
                    }
                    (Sound::Tone, Stage::Release) => {
                        if v.k >= ramp {
                            v.stage = Stage::Free;
                            break;
                        }
                        let e = v.rel_from * release_env(v.k, ramp);
                        v.k += 1;
                        e
                    }
                    _ => attack_env(v.n, ramp),
                };
                // Cosine carrier: the first sample of a sound is never 0.
                *s += v.amp * env * v.phase.cos() as f32;
                v.n = v.n.saturating_add(1);
                v.phase += v.dphase;
                if v.phase >= TAU {
                    v.phase -= TAU;
                }
            }
        }
        if self.noise_on || self.noise_gain > 0.0 {
            let step = 1.0 / ramp as f32;
            for s in out.iter_mut() {
                self.noise_gain = if self.noise_on {
                    (self.noise_gain + step).min(1.0)
                } else {
                    (self.noise_gain - step).max(0.0)
                };
                let w = self.white();
                let x = match self.opts.noise {
                    NoiseColor::White => w,
                    NoiseColor::Pink => self.pink(w),
                };
                *s += self.noise_amp * self.noise_gain * x;
            }
        }
        for s in out.iter_mut() {
            if s.abs() > 1.0 {
                *s = s.clamp(-1.0, 1.0);
                self.counters.clipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Uniform white noise with unit RMS (firmtime-rt's seeded [`Rng`]).
    fn white(&mut self) -> f32 {
        let u = (self.rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        // Uniform on [−√3, √3] has RMS 1.
        (2.0 * u - 1.0) * 1.732_050_8
    }

    /// Paul Kellet's refined pink filter, scaled to about unit RMS.
    fn pink(&mut self, w: f32) -> f32 {
        self.pink.next(w) * 0.334
    }
}

/// Raised-cosine attack: > 0 at its first sample, 1 from sample `ramp − 1` on.
fn attack_env(n: u32, ramp: u32) -> f32 {
    if n + 1 >= ramp {
        1.0
    } else {
        0.5 * (1.0 - (std::f32::consts::PI * (n + 1) as f32 / ramp as f32).cos())
    }
}

/// Raised-cosine release: 0 at sample `ramp − 1`.
fn release_env(k: u32, ramp: u32) -> f32 {
    0.5 * (1.0 + (std::f32::consts::PI * (k + 1) as f32 / ramp as f32).cos())
}

// ------------------------------------------------------------- recorder

/// Options for [`OnsetRecorder::start`].
#[derive(Debug, Clone, PartialEq)]
pub struct RecorderOptions {
    /// The JACK server; `None`: the default server.
    pub server_name: Option<String>,
    /// The recorder's client name.
    pub client_name: String,
    /// Full names of the audio ports to connect to the recorder's input.
    pub connect_from: Vec<String>,
    /// A sample whose magnitude exceeds this is sound.
    pub threshold: f32,
    /// Frames of silence (all samples ≤ threshold) that must precede an onset.
    pub min_gap: u32,
    /// Most onsets kept; more are counted in [`RecorderReport::dropped`].
    pub capacity: usize,
}

impl RecorderOptions {
    /// Client `client_name` on the default server, threshold 1e-6 (any
    /// sound at all), a gap of 64 frames, room for 65 536 onsets.
    pub fn new(client_name: impl Into<String>) -> Self {
        RecorderOptions {
            server_name: None,
            client_name: client_name.into(),
            connect_from: Vec::new(),
            threshold: 1e-6,
            min_gap: 64,
            capacity: 1 << 16,
        }
    }
}

/// What an [`OnsetRecorder`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderReport {
    /// Absolute frame of each onset: the first sample above the threshold
    /// after at least `min_gap` silent frames.
    pub onsets: Vec<u64>,
    /// Onsets not kept (capacity full).
    pub dropped: u64,
    /// Server xruns while it ran.
    pub xruns: u64,
    /// Cycles the server dropped while it ran, seen as gaps in the frame
    /// counter ([`firmtime_jack::FrameGaps`]; PipeWire reports no xruns).
    pub frame_gaps: u64,
    /// Process cycles it ran.
    pub cycles: u64,
}

#[derive(Debug, Default)]
struct RecShared {
    xruns: AtomicU64,
    frame_gaps: AtomicU64,
    cycles: AtomicU64,
    armed: AtomicBool,
}

/// The recorder's callback core, over plain buffers. **RT-safe.**
#[derive(Debug)]
pub(crate) struct OnsetCore {
    threshold: f32,
    min_gap: u32,
    silent: u32,
    onsets: Vec<u64>,
    dropped: u64,
}

impl OnsetCore {
    pub(crate) fn new(threshold: f32, min_gap: u32, capacity: usize) -> Self {
        OnsetCore {
            threshold,
            min_gap,
            // Sound already playing when recording starts is not an onset.
            silent: 0,
            onsets: Vec::with_capacity(capacity),
            dropped: 0,
        }
    }

    /// Scans one cycle's samples starting at absolute frame `frame`. **RT-safe.**
    pub(crate) fn scan(&mut self, frame: u64, samples: &[f32]) {
        for (i, s) in samples.iter().enumerate() {
            if s.abs() > self.threshold {
                if self.silent >= self.min_gap {
                    if self.onsets.len() < self.onsets.capacity() {
                        self.onsets.push(frame + i as u64);
                    } else {
                        self.dropped += 1;
                    }
                }
                self.silent = 0;
            } else {
                self.silent = self.silent.saturating_add(1);
            }
        }
    }
}

struct RecProcess {
    core: OnsetCore,
    port: Port<AudioIn>,
    ext: FrameExtender,
    gaps: FrameGaps,
    shared: Arc<RecShared>,
}

impl jack::ProcessHandler for RecProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| self.cycle(ps))
    }
}

impl RecProcess {
    /// One process cycle. **RT-safe.**
    fn cycle(&mut self, ps: &ProcessScope) -> Control {
        let cycle = read_cycle_times(ps, &mut self.ext, 0);
        if self.gaps.observe_cycle(&cycle) {
            self.shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        if self.shared.armed.load(Ordering::Acquire) {
            self.core.scan(cycle.frame, self.port.as_slice(ps));
        }
        self.shared.cycles.fetch_add(1, Ordering::Relaxed);
        Control::Continue
    }
}

/// A JACK client that listens to audio and notes the frame of every onset:
/// the ground truth for audio output, as [`Tapper`](super::Tapper) is for
/// MIDI input. Frames are the server's, shared by every client.
pub struct OnsetRecorder {
    client: Option<jack::AsyncClient<XrunNotifier<RecShared>, RecProcess>>,
    shared: Arc<RecShared>,
    port_name: String,
}

impl fmt::Debug for OnsetRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnsetRecorder")
            .field("port_name", &self.port_name)
            .finish_non_exhaustive()
    }
}

impl OnsetRecorder {
    /// Opens the client with one audio input `in`, activates it, connects
    /// `connect_from` to it and starts listening.
    ///
    /// # Errors
    /// As [`JackBackend::open`](super::JackBackend::open).
    pub fn start(options: RecorderOptions) -> Result<Self, Error> {
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let port = client
            .register_port("in", AudioIn::default())
            .map_err(|e| {
                Error::new(
                    ErrorKind::Port,
                    format!("cannot register JACK audio port \"in\": {e}"),
                )
            })?;
        let port_name = port_name(&port)?;
        // Frames only: the offset is not needed, but measuring it keeps the
        // process-wide clock map warm for other clients.
        let _ = jack_clock_offset(&client);
        let shared = Arc::new(RecShared::default());
        let process = RecProcess {
            core: OnsetCore::new(options.threshold, options.min_gap, options.capacity),
            port,
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            shared: Arc::clone(&shared),
        };
        let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
        let active = activate(client, notifier, process, "JACK client")?;
        for src in &options.connect_from {
            connect(active.as_client(), src, &port_name)?;
        }
        shared.armed.store(true, Ordering::Release);
        Ok(OnsetRecorder {
            client: Some(active),
            shared,
            port_name,
        })
    }

    /// Full name of the recorder's input port.
    pub fn port_name(&self) -> &str {
        &self.port_name
    }

    /// Lets `settle` pass (so the last sound's cycle has run), closes the
    /// client and returns what it heard.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when the client cannot be deactivated.
    pub fn finish(mut self, settle: Duration) -> Result<RecorderReport, Error> {
        let until = Instant::now() + settle;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        let client = self
            .client
            .take()
            .expect("client is Some until finish or drop");
        let (_, _, process) = deactivate(client, "JACK client")?;
        Ok(RecorderReport {
            onsets: process.core.onsets,
            dropped: process.core.dropped,
            xruns: self.shared.xruns.load(Ordering::Relaxed),
            frame_gaps: self.shared.frame_gaps.load(Ordering::Relaxed),
            cycles: self.shared.cycles.load(Ordering::Relaxed),
        })
    }
}

impl Drop for OnsetRecorder {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 48_000;

    fn on(ch: u8, note: u8, vel: u8) -> [u8; 3] {
        [0x90 | ch, note, vel]
    }

    fn off(ch: u8, note: u8) -> [u8; 3] {
        [0x80 | ch, note, 0]
    }

    fn synth(sound: Sound) -> Synth {
        Synth::new(
            SynthOptions {
                sound,
                ..SynthOptions::default()
            },
            RATE,
        )
        .unwrap()
    }

    /// Renders `cycles` cycles of `n` frames; `events` are (absolute frame, bytes).
    fn render(s: &mut Synth, n: usize, cycles: usize, events: &[(usize, [u8; 3])]) -> Vec<f32> {
        let mut out = vec![0f32; n * cycles];
        assert_no_alloc::assert_no_alloc(|| {
            for (c, buf) in out.chunks_mut(n).enumerate() {
                for (f, b) in events {
                    if f / n == c {
                        assert!(s.queue((f % n) as u32, b));
                    }
                }
                s.render(buf);
            }
        });
        out
    }

    fn first_nonzero(x: &[f32]) -> Option<usize> {
        x.iter().position(|s| *s != 0.0)
    }

    #[test]
    fn click_starts_at_its_exact_frame() {
        for f in [0usize, 1, 77, 255, 256, 300, 1000] {
            let mut s = synth(Sound::Click);
            let out = render(&mut s, 256, 6, &[(f, on(0, 60, 127))]);
            assert_eq!(first_nonzero(&out), Some(f), "click queued at frame {f}");
            // Full level on the first sample: a threshold detector sees frame f.
            assert!((out[f] - db_to_amp(-6.0)).abs() < 1e-6);
            // It ends after click_len samples.
            let len = s.click_len() as usize;
            assert_eq!(len, 240, "5 ms at 48 kHz");
            assert!(out[f + len..].iter().all(|x| *x == 0.0));
            assert!(out[f + len - 1] != 0.0 || out[f + len - 2] != 0.0);
            assert_eq!(s.stats().onsets, 1);
        }
    }

    #[test]
    fn velocity_scales_amplitude_and_note_off_does_not_cut_a_click() {
        let mut s = synth(Sound::Click);
        let out = render(&mut s, 128, 4, &[(10, on(0, 60, 64)), (12, off(0, 60))]);
        let want = db_to_amp(-6.0) * 64.0 / 127.0;
        assert!((out[10] - want).abs() < 1e-6);
        assert!(out[100] != 0.0, "the click goes on after its Note Off");
    }

    #[test]
    fn tone_has_its_pitch_and_its_note_length() {
        let mut s = synth(Sound::Tone);
        let (start, len) = (37usize, 4800usize); // 100 ms
        let out = render(
            &mut s,
            256,
            24,
            &[(start, on(0, 69, 100)), (start + len, off(0, 69))],
        );
        let ramp = s.ramp_len() as usize;
        assert_eq!(ramp, 96, "2 ms at 48 kHz");
        assert_eq!(first_nonzero(&out), Some(start));
        // Sounds until the Note Off, then ramp − 1 release samples, then silence.
        let last = out.iter().rposition(|x| *x != 0.0).unwrap();
        assert_eq!(last, start + len + ramp - 2);
        // 440 Hz over 100 ms: 88 sign changes (±1 for where the window falls).
        let body = &out[start..start + len];
        let crossings = body
            .windows(2)
            .filter(|w| (w[0] >= 0.0) != (w[1] >= 0.0))
            .count();
        assert!((87..=89).contains(&crossings), "{crossings} zero crossings");
        // Attack: rising from a small first sample to full level.
        let peak = body.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(out[start] > 0.0 && out[start] < 0.01 * peak);
        assert!((peak - db_to_amp(-6.0) * 100.0 / 127.0).abs() < 1e-3);
    }

    #[test]
    fn note_hz_is_equal_tempered() {
        assert_eq!(note_hz(69), 440.0);
        assert!((note_hz(60) - 261.6256).abs() < 1e-3);
        assert_eq!(note_hz(81), 880.0);
    }

    #[test]
    fn full_pool_steals_the_oldest_and_counts() {
        let mut s = Synth::new(
            SynthOptions {
                sound: Sound::Tone,
                voices: 2,
                ..SynthOptions::default()
            },
            RATE,
        )
        .unwrap();
        let ev = [
            (0, on(0, 60, 100)),
            (5, on(0, 64, 100)),
            (9, on(0, 67, 100)),
            (20, off(0, 60)), // already stolen: nothing to release
        ];
        render(&mut s, 64, 2, &ev);
        let st = s.stats();
        assert_eq!((st.onsets, st.stolen), (3, 1));
        let notes: Vec<u8> = s
            .voices
            .iter()
            .filter(|v| v.stage == Stage::On)
            .map(|v| v.note)
            .collect();
        assert_eq!(notes, [67, 64], "note 60 (oldest) was stolen");
    }

    #[test]
    fn queue_refuses_beyond_capacity_and_garbage() {
        let mut s = synth(Sound::Click);
        assert!(!s.queue(0, &[0x3c]), "no status byte");
        for i in 0..MAX_CYCLE_EVENTS {
            assert!(s.queue(i as u32, &on(0, 60, 1)));
        }
        assert!(!s.queue(0, &on(0, 60, 1)));
        let mut buf = [0f32; 512];
        assert_no_alloc::assert_no_alloc(|| s.render(&mut buf));
        assert!(s.queue(0, &on(0, 60, 1)), "queue empty again after render");
    }

    #[test]
    fn masking_noise_follows_its_channel_at_its_level() {
        for color in [NoiseColor::White, NoiseColor::Pink] {
            let mut s = Synth::new(
                SynthOptions {
                    noise_channel: Some(15),
                    noise: color,
                    noise_level_dbfs: -20.0,
                    ..SynthOptions::default()
                },
                RATE,
            )
            .unwrap();
            let n = 48_000;
            let out = render(&mut s, 256, 250, &[(100, on(15, 60, 1)), (n, off(15, 60))]);
            assert!(out[..100].iter().all(|x| *x == 0.0));
            assert!(out[100] != 0.0, "noise starts at its frame");
            let body = &out[1000..n - 1000];
            let rms = (body.iter().map(|x| x * x).sum::<f32>() / body.len() as f32).sqrt();
            let db = 20.0 * rms.log10();
            assert!((db - -20.0).abs() < 2.0, "{color:?}: {db} dBFS RMS");
            assert!(out[n + 96..].iter().all(|x| *x == 0.0), "faded out");
            assert_eq!(s.stats().onsets, 0, "noise is not an onset");
        }
    }

    #[test]
    fn onset_core_finds_onsets_after_silence_only() {
        let mut c = OnsetCore::new(1e-6, 4, 8);
        let mut x = [0f32; 64];
        x[0] = 0.5; // playing when recording started: not an onset
        x[10] = 0.5;
        x[11] = -0.5;
        x[13] = 0.5; // gap of 1: same sound
        x[30] = 0.1;
        assert_no_alloc::assert_no_alloc(|| c.scan(1000, &x));
        assert_eq!(c.onsets, [1010, 1030]);
        let mut y = [0f32; 8];
        y[2] = 1.0;
        c.scan(1064, &y);
        assert_eq!(c.onsets, [1010, 1030, 1066], "onsets across cycles");
    }

    #[test]
    fn bad_options_are_refused_with_the_value() {
        let e = Synth::new(
            SynthOptions {
                voices: 0,
                ..SynthOptions::default()
            },
            RATE,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("voices must be 1–1024, got 0"),
            "{e}"
        );
        let e = Synth::new(
            SynthOptions {
                level_dbfs: 3.0,
                ..SynthOptions::default()
            },
            RATE,
        )
        .unwrap_err();
        assert!(e.to_string().contains("−120…0"), "{e}");
    }
}
