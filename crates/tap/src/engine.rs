//! The trial engine: one loop over a [`MidiBackend`] that timestamps
//! keystrokes, answers them with feedback, plays the metronome, fires
//! triggers and ends the trial (FTAP's main loop, Finney 2001).
//!
//! Each pass of the loop ("the output routine", as FTAP timed it):
//!
//! 1. ticks the [`SchedDiag`] (interval between passes: FTAP's diagnostic);
//! 2. collects the backend's reports of outputs that went out and stores
//!    their actual times (and frames) beside the intended ones;
//! 3. takes every input event (input stamped before the trial's start is
//!    dropped there, before the trial's state sees it, and counted in
//!    [`TrialOutcome::input_before_start`]: it is no keystroke, gets no
//!    feedback and advances no keystroke count; so is the release of a key
//!    pressed before the start; input stamped after the trial's end — known
//!    once an end condition is met or the duration has passed — is dropped
//!    likewise, counted in [`TrialOutcome::input_after_end`]): a key press
//!    is keystroke *k*; each feedback channel whose key range holds the key
//!    sends its note at
//!    `input time + delay` (scheduled with [`OutputEvent::at_ns`], so the
//!    backend places it exactly — JACK to the frame); a release is fed back
//!    with the delay and pitch of its press; then keystroke triggers and the
//!    keystroke end condition are checked (a trigger at keystroke *k* changes
//!    the feedback of keystrokes after *k*);
//! 4. fires elapsed-time triggers;
//! 5. schedules the metronome [`EngineOptions::lookahead_ns`] ahead: each
//!    beat is sent with its exact time; a beat trigger fires when its beat is
//!    scheduled, so a tempo change or a stop takes effect from the next beat;
//! 6. checks the end conditions, the stop flag (Ctrl-C) and the backend's
//!    [`MidiBackend::input_loss`]: an input source gone during the trial (a
//!    JACK port disconnected, its client gone, the server or device gone)
//!    ends the trial at the moment of the loss, incomplete
//!    ([`EndReason::InputLost`], [`TrialOutcome::input_loss`]);
//! 7. blocks in [`MidiBackend::wait`] until input arrives, the next beat is
//!    due, or [`EngineOptions::pause_ns`] (FTAP's 0.49 ms) has passed — the
//!    loop never spins, so at SCHED_FIFO it cannot lock the machine.
//!
//! After the end, sounding notes get their note-off and the engine waits
//! (at most [`EngineOptions::drain_ns`]) for every output's report. Then it
//! records the `end` event, last: its intended time is the moment the trial
//! ended (its end condition, or the stop flag), its actual time the later of
//! that moment and the last output's, so that no row of the data follows it
//! (beats handed over [`EngineOptions::lookahead_ns`] ahead still go out
//! after a stop, and are kept before it).
//!
//! # JACK latency and the minimum feedback delay
//!
//! A JACK input event is stamped at its frame but reaches the engine after
//! its cycle has run, one period later at least; the output then goes out in
//! a later cycle. Feedback intended at `input + delay` is on time only if
//! `delay` is longer than about two periods (at 48 kHz, 256 frames: 10.7 ms;
//! 64 frames: 2.7 ms). A shorter delay goes out at the start of the next
//! cycle and counts as late ([`TrialOutcome::late_outputs`]).
//!
//! # Real-time contract
//!
//! [`Engine::new`] allocates and touches every buffer: the event storage
//! (capacity from [`EngineOptions::event_capacity`], events beyond it are
//! counted in [`TrialOutcome::events_dropped`]) and beside it the record of
//! how each output was handed over ([`crate::late::Handover`]), the input
//! batch and the diagnostic's samples; the notes of the loop's wake-ups
//! ([`Engine::set_notes`]) are allocated by their maker before the trial.
//! [`Engine::run`] is **RT-safe.**: it never
//! allocates, locks, prints, or blocks except in [`MidiBackend::wait`]; test
//! builds check it with `assert_no_alloc`. Converting and writing the
//! events ([`Engine::data_events`]) runs after the trial.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use firmtime_midi::diag::{DiagReport, SchedDiag, DEFAULT_LIMIT_NS};
use firmtime_midi::{
    BackendError, BackendStats, InputEvent, InputLoss, LossCause, MidiBackend, MidiMessage,
    OutputEvent, PortIndex, SentEvent,
};
use firmtime_rt::clock::monotonic_ns;

use crate::data::{self, EventKind, NoteData, SelfChecks};
use crate::experiment::{Experiment, InputSource, TrialEnd, Trigger, TriggerAt, MAX_TRIGGERS};
use crate::late::{Handover, LateOutput};
use crate::live::LiveStatus;
use crate::onset::{Onset, OnsetDetector};
use crate::params::{MaskSource, NoteLength, Params, Setting};
use firmtime_rt::outliers::Notes;
use firmtime_rt::rng::Rng;

/// FTAP's safety pause: the longest the loop blocks between passes.
pub const DEFAULT_PAUSE_NS: u64 = 490_000;
/// Most input events taken in one pass; more are counted as overruns.
pub const INPUT_BATCH: usize = 1024;
/// Bounds of the event storage [`EngineOptions::for_experiment`] chooses.
pub const MIN_EVENTS: usize = 4096;
/// See [`MIN_EVENTS`].
pub const MAX_EVENTS: usize = 1 << 21;
/// An audio tap has no release: feedback to it with `duration = as_played`
/// lasts this long.
pub const AUDIO_TAP_NOTE_NS: u64 = 100_000_000;
/// Most onsets taken from the audio input in one pass; more are counted.
const ONSET_BATCH: usize = 256;
/// The event kind of each feedback voice (FTAP's two feedback channels).
const FEEDBACK_KINDS: [EventKind; 2] = [EventKind::Feedback, EventKind::Feedback2];

/// How the engine runs a trial (everything but the experiment itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Seed of the generator behind random pitch and delay.
    pub seed: u64,
    /// The backend output port feedback and metronome notes go to (with
    /// JACK audio output: [`JackBackend::audio_port`](firmtime_midi::jack::JackBackend::audio_port)).
    pub output_port: PortIndex,
    /// The port the masking note goes to; `None`: [`EngineOptions::output_port`].
    pub masking_port: Option<PortIndex>,
    /// The backend renders audio masking noise: masking with
    /// `source = "audio"` is played as a note on the masking channel of
    /// the masking port, which the JACK synth turns into noise
    /// ([`SynthOptions::noise_channel`](firmtime_midi::jack::SynthOptions::noise_channel)).
    /// False: such masking is not played.
    pub audio_masking: bool,
    /// Input channels (bit `c` = MIDI channel `c + 1`) whose note messages
    /// are keystrokes; others are ignored. `u16::MAX`: all.
    pub input_channels: u16,
    /// Longest block between passes of the loop (FTAP: 0.49 ms).
    pub pause_ns: u64,
    /// How far ahead metronome beats are handed to the backend.
    pub lookahead_ns: u64,
    /// Time from the trial's start to its first metronome beat.
    pub first_beat_ns: u64,
    /// An output whose actual time is later than intended by more than this
    /// counts as late.
    pub late_threshold_us: u64,
    /// Events the trial can store; more are counted, not stored.
    pub event_capacity: usize,
    /// Loop intervals kept for percentiles (beyond: counted in the mean and max only).
    pub diag_samples: usize,
    /// Longest wait after the end for outputs still queued to be reported.
    pub drain_ns: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            output_port: 0,
            masking_port: None,
            audio_masking: false,
            input_channels: u16::MAX,
            pause_ns: DEFAULT_PAUSE_NS,
            lookahead_ns: 50_000_000,
            first_beat_ns: 100_000_000,
            late_threshold_us: 1000,
            event_capacity: MIN_EVENTS,
            diag_samples: 1 << 16,
            drain_ns: 2_000_000_000,
        }
    }
}

impl EngineOptions {
    /// Options sized for `e`: storage for its longest plausible trial
    /// (its duration, or its beats, else 10 minutes) at 20 keystrokes per
    /// second with two feedback channels, plus its metronome; intervals for
    /// a loop pass every [`DEFAULT_PAUSE_NS`].
    pub fn for_experiment(e: &Experiment, seed: u64) -> Self {
        let beat_us = e.metronome.mspb.us().max(1);
        let dur_us = e
            .end
            .duration_ms
            .map(|d| d.us())
            .or(e.end.beats.map(|b| u64::from(b) * beat_us + 1_000_000))
            .unwrap_or(600_000_000);
        let secs = dur_us.div_ceil(1_000_000) + 1;
        let per_sec = 20 * 6 + 2 * 1_000_000 / beat_us.min(1_000_000) + 2;
        let keys = e.end.keystrokes.map_or(0, |k| u64::from(k) * 6);
        let cap = (secs * per_sec + keys + 64 + 4 * MAX_TRIGGERS as u64)
            .clamp(MIN_EVENTS as u64, MAX_EVENTS as u64) as usize;
        let diag = (secs * 2100).min(4_000_000) as usize;
        Self {
            seed,
            event_capacity: cap,
            diag_samples: diag,
            ..Self::default()
        }
    }
}

/// One event of a trial as the engine stores it: nanoseconds and frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialEvent {
    /// What it is.
    pub kind: EventKind,
    /// Keystroke number (input, feedback), beat number (metronome), trigger
    /// id, or 0 (masking); for `end`, 0 by condition, 1 interrupted.
    pub index: u32,
    /// When an output or trigger was scheduled, CLOCK_MONOTONIC ns.
    pub intended_ns: Option<u64>,
    /// When it happened (input stamp, output sent); `None` for an output
    /// not (yet) reported by the backend.
    pub actual_ns: Option<u64>,
    /// The backend's frame (JACK) of an input or output.
    pub frame: Option<u64>,
    /// The note, for MIDI events.
    pub note: Option<NoteData>,
}

const EMPTY: TrialEvent = TrialEvent {
    kind: EventKind::End,
    index: 0,
    intended_ns: None,
    actual_ns: None,
    frame: None,
    note: None,
};

/// Why a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// An `[end]` condition was reached.
    Condition,
    /// A trigger with `end = true` fired (its id).
    Trigger(u16),
    /// The stop flag was raised (Ctrl-C): the trial is incomplete.
    Interrupted,
    /// The backend went away: the trial is incomplete.
    Disconnected,
    /// The input's source went away while the backend stayed (a JACK port
    /// disconnected or its client gone): the trial is incomplete; the cause
    /// and time are in [`TrialOutcome::input_loss`].
    InputLost,
}

/// What a trial did, besides its events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialOutcome {
    /// Start of the trial (time 0 of its data), CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// When the end was reached, CLOCK_MONOTONIC ns.
    pub end_ns: u64,
    /// Why it ended.
    pub reason: EndReason,
    /// Keystrokes (key presses).
    pub keystrokes: u32,
    /// Metronome beats scheduled (rests included).
    pub beats: u32,
    /// Outputs later than intended by more than the threshold.
    pub late_outputs: u64,
    /// The threshold, µs.
    pub late_threshold_us: u64,
    /// The largest actual − intended of any output, ns.
    pub max_lateness_ns: u64,
    /// Outputs sent whose report had not come back when the drain ended
    /// (left out of the data).
    pub unreported: u64,
    /// Outputs the backend refused (queue full).
    pub send_failures: u64,
    /// Input events lost: the backend's drops plus batch overflow.
    pub input_overruns: u64,
    /// Events not stored because the storage was full.
    pub events_dropped: u64,
    /// The backend's counters over this trial.
    pub backend: BackendStats,
    /// The loop-interval diagnostic.
    pub diag: DiagReport,
    /// Input events stamped before the trial's start (a keyboard already
    /// playing when the trial was started), and releases of keys pressed
    /// before it: dropped, not trial data, counted here.
    pub input_before_start: u64,
    /// Input events stamped after the trial's end (a tap after the last
    /// keystroke the end condition counts, after the duration, or arriving
    /// while the last outputs are drained), audio onsets included: dropped,
    /// not trial data, counted here.
    pub input_after_end: u64,
    /// How the input was lost, for a trial that ended
    /// [`EndReason::InputLost`] or [`EndReason::Disconnected`] (`t_ns`: when
    /// the backend learnt of it).
    pub input_loss: Option<InputLoss>,
}

impl TrialOutcome {
    /// True if the trial did not reach its end (Ctrl-C, disconnection).
    pub fn incomplete(&self) -> bool {
        matches!(
            self.reason,
            EndReason::Interrupted | EndReason::Disconnected | EndReason::InputLost
        )
    }

    /// The self-checks for the sidecar, without the causes of late
    /// outputs ([`SelfChecks::with_late`]).
    pub fn self_checks(&self) -> SelfChecks {
        SelfChecks {
            output_interval_mean_us: self.diag.mean_ns / 1000.0,
            output_interval_max_us: self.diag.max_ns / 1000,
            late_outputs: self.late_outputs,
            late_threshold_us: self.late_threshold_us,
            xruns: self.backend.xruns,
            frame_gaps: self.backend.frame_gaps,
            input_overruns: self.input_overruns,
            events_dropped: self.events_dropped,
            input_before_start: self.input_before_start,
            input_after_end: self.input_after_end,
            input_malformed: self.backend.malformed,
            outputs_refused: self.send_failures,
            outputs_unreported: self.unreported,
            ..SelfChecks::default()
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    channel: u8,
    note: u8,
    delay_ns: u64,
    keystroke: u32,
    at_ns: u64,
}

/// Runs trials of one experiment. Create it once (it allocates), then
/// [`Engine::run`] any number of trials; each run starts from the
/// experiment's parameters and reuses the memory.
#[derive(Debug)]
pub struct Engine {
    opts: EngineOptions,
    initial: Params,
    end: TrialEnd,
    triggers: [Trigger; MAX_TRIGGERS],
    n_triggers: usize,
    // Per-trial state.
    params: Params,
    fired: [bool; MAX_TRIGGERS],
    rng: Rng,
    events: Vec<TrialEvent>,
    inbuf: Vec<InputEvent>,
    sentbuf: Vec<SentEvent>,
    reports_lost: u64,
    in_overflow: u64,
    diag: SchedDiag,
    held: [[Option<Held>; 128]; 2],
    press_index: [u32; 128],
    masking_on: bool,
    start_ns: u64,
    keystrokes: u32,
    beats: u32,
    next_beat_ns: u64,
    beats_done: bool,
    dur_end_ns: Option<u64>,
    end_at: Option<(u64, EndReason)>,
    ended: Option<(u64, EndReason)>,
    outstanding: u64,
    last_at_ns: u64,
    late: u64,
    max_late_ns: u64,
    dropped: u64,
    send_failures: u64,
    disconnected: bool,
    /// How each recorded event was handed over (outputs; others default),
    /// index for index with `events`.
    handed: Vec<Handover>,
    /// The loop's wake-ups, for the explaining trace (capacity 0: none).
    notes: Notes,
    /// The current pass, when it was due and when it woke.
    pass: u64,
    pass_due_ns: u64,
    pass_wake_ns: u64,
    /// The stamp of the input whose feedback is being sent.
    answering: Option<u64>,
    /// What a watcher shows while the trial runs ([`Engine::live`]).
    live: Arc<LiveStatus>,
    /// When the live counters are next published.
    live_next_ns: u64,
    /// Input stamped before the start (and releases of keys pressed before it).
    before_start: u64,
    /// Input stamped after the trial's end (see [`TrialOutcome::input_after_end`]).
    after_end: u64,
    /// Losses of the backend's input that do not end this trial (those
    /// before its start, but one still going on).
    loss0: u32,
    /// The loss that ended the trial.
    loss: Option<InputLoss>,
    /// Taps from sound: the detector and what it found (`None`: MIDI input;
    /// boxed: the detector's history would make every engine larger).
    audio: Option<Box<AudioTaps>>,
}

/// One tap detected in the audio input, as the engine recorded it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioTap {
    /// Its keystroke number (the `index` of its `input` row).
    pub keystroke: u32,
    /// The frame of its onset (the backend's frame counter).
    pub onset_frame: u64,
    /// Its peak level, dBFS.
    pub peak_dbfs: f32,
    /// The detector's confidence: the envelope's peak above the noise floor, dB.
    pub confidence_db: f32,
    /// The onset's time, CLOCK_MONOTONIC ns.
    pub t_ns: u64,
}

/// What the audio input did in a trial (the sidecar's `audio_input`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioInputReport {
    /// The detector's settings.
    pub settings: crate::onset::OnsetSettings,
    /// The sample rate the detector ran at, Hz (0: no audio came).
    pub sample_rate: u32,
    /// Taps detected during the trial (each a keystroke).
    pub taps: u64,
    /// Onsets stamped before the trial's start (dropped, not trial data).
    pub before_start: u64,
    /// Taps not stored (storage or batch full).
    pub taps_dropped: u64,
    /// Audio frames the backend dropped during the trial (its ring full).
    pub frames_dropped: u64,
    /// Audio frames the detector took during the trial.
    pub frames: u64,
    /// Restarts of the detector during the trial (a gap in the frames): each
    /// is a warm-up without detection.
    pub restarts: u64,
    /// The noise floor at the trial's end, dBFS.
    pub floor_dbfs: f64,
}

/// The engine's audio-tap state, all allocated in [`Engine::new`].
#[derive(Debug)]
struct AudioTaps {
    /// Sounds are keystrokes (`audio`), or evidence beside MIDI (`midi+audio`).
    keystrokes: bool,
    detector: OnsetDetector,
    channel0: u8,
    note: u8,
    taps: Vec<AudioTap>,
    onsets: Vec<(Onset, u64)>,
    report: AudioInputReport,
    dropped_seen: u64,
    restarts0: u64,
}

/// An audio tap's velocity from its peak: −60 dBFS → 1 … 0 dBFS → 127, linear in dB. **RT-safe.**
pub fn tap_velocity(peak_dbfs: f32) -> u8 {
    let v = 1.0 + 126.0 * (peak_dbfs + 60.0) / 60.0;
    if v.is_finite() {
        v.round().clamp(1.0, 127.0) as u8
    } else {
        1
    }
}

/// After an input loss, how long the engine waits before it reads the
/// loss's final cause: JACK tells a client's exit first as its ports'
/// disconnection, then as its unregistration.
const LOSS_SETTLE_NS: u64 = 100_000_000;

/// True for a note message on one of `channels` (a keystroke or release). **RT-safe.**
fn is_key(msg: &MidiMessage, channels: u16) -> bool {
    match *msg {
        MidiMessage::NoteOn { channel, .. } | MidiMessage::NoteOff { channel, .. } => {
            bits_contains(channels, channel)
        }
        _ => false,
    }
}

/// How often the live counters are published.
const LIVE_EVERY_NS: u64 = 50_000_000;

fn bits_contains(mask: u16, channel0: u8) -> bool {
    channel0 < 16 && mask & (1 << channel0) != 0
}

fn sub_stats(a: BackendStats, b: BackendStats) -> BackendStats {
    BackendStats {
        received: a.received.saturating_sub(b.received),
        sent: a.sent.saturating_sub(b.sent),
        input_dropped: a.input_dropped.saturating_sub(b.input_dropped),
        output_dropped: a.output_dropped.saturating_sub(b.output_dropped),
        late_outputs: a.late_outputs.saturating_sub(b.late_outputs),
        malformed: a.malformed.saturating_sub(b.malformed),
        xruns: a.xruns.saturating_sub(b.xruns),
        frame_gaps: a.frame_gaps.saturating_sub(b.frame_gaps),
    }
}

impl Engine {
    /// An engine for `e`, with every buffer allocated and touched.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Invalid`] if the experiment has more than
    /// [`MAX_TRIGGERS`] triggers, or the event capacity is 0 or above
    /// [`MAX_EVENTS`].
    pub fn new(e: &Experiment, opts: EngineOptions) -> crate::Result<Self> {
        if e.triggers.len() > MAX_TRIGGERS {
            return Err(crate::Error::new(
                crate::ErrorKind::Invalid,
                format!("{} triggers: at most {MAX_TRIGGERS}", e.triggers.len()),
            ));
        }
        if opts.event_capacity == 0 || opts.event_capacity > MAX_EVENTS {
            return Err(crate::Error::new(
                crate::ErrorKind::Invalid,
                format!(
                    "event capacity must be 1–{MAX_EVENTS}, got {}",
                    opts.event_capacity
                ),
            ));
        }
        let mut triggers = [Trigger::default(); MAX_TRIGGERS];
        triggers[..e.triggers.len()].copy_from_slice(&e.triggers);
        // Touch every page now so the trial takes no page faults.
        let mut events = vec![EMPTY; opts.event_capacity];
        events.clear();
        let mut handed = vec![Handover::default(); opts.event_capacity];
        handed.clear();
        let mut inbuf = vec![
            InputEvent {
                t_ns: 0,
                frame: None,
                port: 0,
                msg: MidiMessage::Reset,
            };
            INPUT_BATCH
        ];
        inbuf.clear();
        let mut sentbuf = vec![
            SentEvent {
                intended_ns: None,
                actual_ns: 0,
                frame: None,
                port: 0,
                msg: MidiMessage::Reset,
                tag: 0,
            };
            INPUT_BATCH
        ];
        sentbuf.clear();
        let audio = match e.input.source {
            InputSource::Midi => None,
            InputSource::Audio | InputSource::MidiAudio => Some(Box::new(AudioTaps {
                keystrokes: e.input.source == InputSource::Audio,
                detector: OnsetDetector::new(e.input.onset_settings(), 48_000)?,
                channel0: e.input.channel.saturating_sub(1),
                note: e.input.note,
                taps: Vec::with_capacity(opts.event_capacity / 2 + 16),
                onsets: Vec::with_capacity(ONSET_BATCH),
                report: AudioInputReport {
                    settings: e.input.onset_settings(),
                    sample_rate: 0,
                    taps: 0,
                    before_start: 0,
                    taps_dropped: 0,
                    frames_dropped: 0,
                    frames: 0,
                    restarts: 0,
                    floor_dbfs: f64::NEG_INFINITY,
                },
                dropped_seen: 0,
                restarts0: 0,
            })),
        };
        let mut diag = SchedDiag::new(DEFAULT_LIMIT_NS, opts.diag_samples);
        for i in 0..opts.diag_samples as u64 {
            diag.tick(i);
        }
        diag.reset();
        Ok(Self {
            opts,
            initial: e.params(),
            end: e.end,
            triggers,
            n_triggers: e.triggers.len(),
            params: e.params(),
            fired: [false; MAX_TRIGGERS],
            rng: Rng::new(opts.seed),
            events,
            inbuf,
            sentbuf,
            reports_lost: 0,
            in_overflow: 0,
            diag,
            held: [[None; 128]; 2],
            press_index: [0; 128],
            masking_on: false,
            start_ns: 0,
            keystrokes: 0,
            beats: 0,
            next_beat_ns: 0,
            beats_done: false,
            dur_end_ns: None,
            end_at: None,
            ended: None,
            outstanding: 0,
            last_at_ns: 0,
            late: 0,
            max_late_ns: 0,
            dropped: 0,
            send_failures: 0,
            disconnected: false,
            handed,
            notes: Notes::new(0),
            pass: 0,
            pass_due_ns: 0,
            pass_wake_ns: 0,
            answering: None,
            live: Arc::new(LiveStatus::default()),
            live_next_ns: 0,
            before_start: 0,
            after_end: 0,
            loss0: 0,
            loss: None,
            audio,
        })
    }

    /// The taps detected in the audio input in the last trial (empty for
    /// MIDI input). Allocates: call it after the trial.
    pub fn audio_taps(&self) -> Vec<AudioTap> {
        self.audio
            .as_ref()
            .map_or_else(Vec::new, |a| a.taps.clone())
    }

    /// True when keystrokes are MIDI, paired with sounds after the trial
    /// (`[input] source = "midi+audio"`).
    pub fn pairs_midi_with_sound(&self) -> bool {
        self.audio.as_ref().is_some_and(|a| !a.keystrokes)
    }

    /// The start of the last trial, CLOCK_MONOTONIC ns.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// What the audio input did in the last trial; `None` for MIDI input.
    pub fn audio_report(&self) -> Option<AudioInputReport> {
        self.audio.as_ref().map(|a| a.report)
    }

    /// Takes the audio input's blocks, runs the onset detector on them and
    /// makes each onset at or after the start a keystroke. **RT-safe.**
    fn poll_audio(&mut self, b: &mut dyn MidiBackend) {
        let Some(mut a) = self.audio.take() else {
            return;
        };
        a.onsets.clear();
        let mut lost = 0u64;
        {
            let AudioTaps {
                detector,
                onsets,
                report,
                dropped_seen,
                ..
            } = &mut *a;
            b.poll_audio(&mut |blk| {
                if blk.sample_rate != detector.sample_rate() {
                    if let Ok(d) = OnsetDetector::new(detector.settings(), blk.sample_rate) {
                        *detector = d;
                    }
                }
                report.sample_rate = blk.sample_rate;
                report.frames_dropped += blk.dropped_frames.saturating_sub(*dropped_seen);
                *dropped_seen = blk.dropped_frames.max(*dropped_seen);
                report.frames += u64::from(blk.len);
                let cycle = blk.cycle;
                detector.process(blk.frame, blk.samples(), &mut |o| {
                    push_or_count(onsets, &mut lost, (o, cycle.frame_to_ns(o.frame)));
                });
            });
        }
        a.report.taps_dropped += lost;
        a.report.restarts = a.detector.restarts().saturating_sub(a.restarts0);
        a.report.floor_dbfs = a.detector.floor_dbfs();
        for i in 0..a.onsets.len() {
            let (o, t) = a.onsets[i];
            if t < self.start_ns {
                a.report.before_start += 1;
                continue;
            }
            if self.ended.is_some() || self.trial_end_ns().is_some_and(|end| t > end) {
                self.after_end += 1;
                continue;
            }
            if !a.keystrokes {
                // midi+audio: the sound is evidence, paired after the trial.
                a.report.taps += 1;
                let tap = AudioTap {
                    keystroke: 0,
                    onset_frame: o.frame,
                    peak_dbfs: o.peak_dbfs,
                    confidence_db: o.confidence_db,
                    t_ns: t,
                };
                if a.taps.len() < a.taps.capacity() {
                    a.taps.push(tap);
                } else {
                    a.report.taps_dropped += 1;
                }
                continue;
            }
            let k0 = self.keystrokes;
            let n = usize::from(a.note & 0x7f);
            self.press(
                b,
                t,
                Some(o.frame),
                a.channel0,
                a.note,
                tap_velocity(o.peak_dbfs),
            );
            if self.keystrokes == k0 {
                continue;
            }
            a.report.taps += 1;
            let tap = AudioTap {
                keystroke: self.keystrokes,
                onset_frame: o.frame,
                peak_dbfs: o.peak_dbfs,
                confidence_db: o.confidence_db,
                t_ns: t,
            };
            if a.taps.len() < a.taps.capacity() {
                a.taps.push(tap);
            } else {
                a.report.taps_dropped += 1;
            }
            // No release comes: the feedback note ends after AUDIO_TAP_NOTE_NS.
            self.answering = Some(t);
            for (v, kind) in FEEDBACK_KINDS.into_iter().enumerate() {
                if let Some(h) = self.held[v][n].take() {
                    let off = h.at_ns + AUDIO_TAP_NOTE_NS;
                    self.out(b, kind, h.keystroke, off, h.channel, h.note, 0, false);
                }
            }
            self.answering = None;
        }
        self.audio = Some(a);
    }

    /// The counters of the running trial, for a watcher on another thread
    /// (the live status line); the engine stores into them with relaxed
    /// atomics, at most every 50 ms.
    pub fn live(&self) -> Arc<LiveStatus> {
        Arc::clone(&self.live)
    }

    /// The options the engine runs with.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// Sets the seed for the next trial's random feedback. **RT-safe.**
    pub fn set_seed(&mut self, seed: u64) {
        self.opts.seed = seed;
    }

    /// The events of the last trial, in the order they were recorded.
    pub fn events(&self) -> &[TrialEvent] {
        &self.events
    }

    /// The parameters as the last trial left them (after its triggers).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Notes every wake-up of the loop into `notes` from the next trial on
    /// (the explaining trace's: `firmtime_trace::explain::LoopWatch::notes`),
    /// under the index of its pass (see [`crate::late`]); a pass is due at
    /// the deadline of the wait before it. [`Notes::new`]`(0)` (the
    /// default) notes nothing.
    pub fn set_notes(&mut self, notes: Notes) {
        self.notes = notes;
    }

    /// The notes of the last trial; the engine notes nothing after this
    /// until [`Engine::set_notes`].
    pub fn take_notes(&mut self) -> Notes {
        std::mem::replace(&mut self.notes, Notes::new(0))
    }

    /// The outputs of the last trial later than its threshold, with how
    /// they were handed over, for [`crate::late::report`].
    pub fn late_outputs(&self) -> Vec<LateOutput> {
        let threshold_ns = self.opts.late_threshold_us * 1000;
        self.events
            .iter()
            .zip(&self.handed)
            .filter_map(|(e, h)| {
                let (intended_ns, actual_ns) = (e.intended_ns?, e.actual_ns?);
                let output = !matches!(
                    e.kind,
                    EventKind::Input | EventKind::Trigger | EventKind::End
                );
                (output && actual_ns.saturating_sub(intended_ns) > threshold_ns).then_some(
                    LateOutput {
                        kind: e.kind,
                        index: e.index,
                        intended_ns,
                        actual_ns,
                        handover: *h,
                    },
                )
            })
            .collect()
    }

    /// The loop's interval diagnostic of the last trial (with its kept samples).
    pub fn diag(&self) -> &SchedDiag {
        &self.diag
    }

    /// The last trial's events as CSV rows: times in µs since its start,
    /// sorted by actual time (ties: in recording order); outputs never
    /// reported are left out (counted in [`TrialOutcome::unreported`]).
    pub fn data_events(&self) -> Vec<data::Event> {
        let rel = |t: u64| (i128::from(t) - i128::from(self.start_ns)).div_euclid(1000) as i64;
        let mut v: Vec<data::Event> = self
            .events
            .iter()
            .filter_map(|e| {
                Some(data::Event {
                    kind: e.kind,
                    index: e.index,
                    intended_us: e.intended_ns.map(rel),
                    actual_us: rel(e.actual_ns?),
                    note: e.note,
                })
            })
            .collect();
        v.sort_by_key(|e| e.actual_us);
        v
    }

    fn reset(&mut self, now: u64) {
        self.params = self.initial;
        self.fired = [false; MAX_TRIGGERS];
        self.rng = Rng::new(self.opts.seed);
        self.events.clear();
        self.inbuf.clear();
        self.in_overflow = 0;
        self.reports_lost = 0;
        self.diag.reset();
        self.held = [[None; 128]; 2];
        self.press_index = [0; 128];
        self.masking_on = false;
        self.start_ns = now;
        self.keystrokes = 0;
        self.beats = 0;
        self.next_beat_ns = now + self.opts.first_beat_ns;
        self.beats_done = false;
        self.dur_end_ns = self.end.duration_ms.map(|d| now + d.us() * 1000);
        self.end_at = None;
        self.ended = None;
        self.outstanding = 0;
        self.last_at_ns = now;
        self.late = 0;
        self.max_late_ns = 0;
        self.dropped = 0;
        self.send_failures = 0;
        self.disconnected = false;
        self.handed.clear();
        self.pass = 0;
        self.pass_due_ns = now;
        self.pass_wake_ns = now;
        self.answering = None;
        self.before_start = 0;
        self.after_end = 0;
        self.loss = None;
        if let Some(a) = self.audio.as_mut() {
            a.taps.clear();
            a.onsets.clear();
            a.restarts0 = a.detector.restarts();
            let settings = a.report.settings;
            a.report = AudioInputReport {
                settings,
                sample_rate: a.detector.sample_rate(),
                taps: 0,
                before_start: 0,
                taps_dropped: 0,
                frames_dropped: 0,
                frames: 0,
                restarts: 0,
                floor_dbfs: a.detector.floor_dbfs(),
            };
        }
    }

    /// Records a key press (`on`) or release as an input event. **RT-safe.**
    #[allow(clippy::too_many_arguments)]
    fn record_input(
        &mut self,
        keystroke: u32,
        t: u64,
        frame: Option<u64>,
        channel: u8,
        note: u8,
        velocity: u8,
        on: bool,
    ) {
        let _ = self.record(TrialEvent {
            kind: EventKind::Input,
            index: keystroke,
            intended_ns: None,
            actual_ns: Some(t),
            frame,
            note: Some(NoteData {
                channel: channel + 1,
                note,
                velocity,
                on,
            }),
        });
    }

    /// Stores `ev` and returns its index, or counts it as dropped when the
    /// storage is full. The last slot is kept for the `end` row.
    fn record(&mut self, ev: TrialEvent) -> Option<u32> {
        let room = self.events.capacity().min(self.handed.capacity());
        let reserved = usize::from(ev.kind != EventKind::End);
        if self.events.len() + reserved < room {
            self.events.push(ev);
            self.handed.push(Handover::default());
            Some((self.events.len() - 1) as u32)
        } else {
            self.dropped += 1;
            None
        }
    }

    /// Sends one note to the output port and records it. **RT-safe.**
    #[allow(clippy::too_many_arguments)]
    fn out(
        &mut self,
        b: &mut dyn MidiBackend,
        kind: EventKind,
        index: u32,
        at_ns: u64,
        channel0: u8,
        note: u8,
        velocity: u8,
        on: bool,
    ) {
        let port = self.opts.output_port;
        self.out_to(b, port, kind, index, at_ns, channel0, note, velocity, on);
    }

    /// Sends one note to `port` and records it. **RT-safe.**
    #[allow(clippy::too_many_arguments)]
    fn out_to(
        &mut self,
        b: &mut dyn MidiBackend,
        port: PortIndex,
        kind: EventKind,
        index: u32,
        at_ns: u64,
        channel0: u8,
        note: u8,
        velocity: u8,
        on: bool,
    ) {
        let msg = if on {
            MidiMessage::NoteOn {
                channel: channel0,
                note,
                velocity,
            }
        } else {
            MidiMessage::NoteOff {
                channel: channel0,
                note,
                velocity,
            }
        };
        let tag = self.record(TrialEvent {
            kind,
            index,
            intended_ns: Some(at_ns),
            actual_ns: None,
            frame: None,
            note: Some(NoteData {
                channel: channel0 + 1,
                note,
                velocity,
                on,
            }),
        });
        let ev = OutputEvent {
            at_ns: Some(at_ns),
            port,
            msg,
            tag: tag.unwrap_or(u32::MAX),
        };
        if let Some(t) = tag {
            self.handed[t as usize] = Handover {
                handed_ns: monotonic_ns(),
                pass: self.pass,
                due_ns: self.pass_due_ns,
                wake_ns: self.pass_wake_ns,
                input_ns: self.answering,
            };
        }
        match b.send(ev) {
            Ok(()) => {
                self.outstanding += 1;
                self.last_at_ns = self.last_at_ns.max(at_ns);
            }
            Err(e) => {
                self.send_failures += 1;
                if e == BackendError::Disconnected {
                    self.disconnected = true;
                }
                if let Some(t) = tag {
                    // Never went out: not a row of the data.
                    self.events[t as usize].actual_ns = None;
                    self.events[t as usize].intended_ns = None;
                }
            }
        }
    }

    fn on_sent(&mut self, s: SentEvent) {
        let i = s.tag as usize;
        let Some(e) = self.events.get_mut(i) else {
            return;
        };
        if e.actual_ns.is_some() || e.intended_ns.is_none() || e.kind == EventKind::Input {
            return; // not one of ours (e.g. a test's own output)
        }
        e.actual_ns = Some(s.actual_ns);
        e.frame = s.frame;
        self.outstanding = self.outstanding.saturating_sub(1);
        if let Some(at) = e.intended_ns {
            let late = s.actual_ns.saturating_sub(at);
            self.max_late_ns = self.max_late_ns.max(late);
            if late > self.opts.late_threshold_us * 1000 {
                self.late += 1;
            }
        }
    }

    fn poll_sent(&mut self, b: &mut dyn MidiBackend) {
        let mut buf = std::mem::take(&mut self.sentbuf);
        buf.clear();
        let mut lost = 0u64;
        b.poll_sent(&mut |s| push_or_count(&mut buf, &mut lost, s));
        self.reports_lost += lost;
        for &s in buf.iter() {
            self.on_sent(s);
        }
        self.sentbuf = buf;
    }

    fn fire_trigger(&mut self, b: &mut dyn MidiBackend, i: usize, intended_ns: u64, now: u64) {
        self.fired[i] = true;
        let t = self.triggers[i];
        let metro_was_on = self.params.metronome.on;
        for s in t.settings.as_slice() {
            self.params.apply(s);
            if let Setting::MaskingOn(_) = s {
                self.update_masking(b, now);
            }
        }
        if !metro_was_on && self.params.metronome.on {
            self.next_beat_ns = self.next_beat_ns.max(now + self.opts.lookahead_ns);
        }
        let _ = self.record(TrialEvent {
            kind: EventKind::Trigger,
            index: u32::from(t.id),
            intended_ns: Some(intended_ns),
            actual_ns: Some(now),
            frame: None,
            note: None,
        });
        if t.end && self.end_at.is_none() {
            self.end_at = Some((intended_ns, EndReason::Trigger(t.id)));
        }
    }

    fn fire_due(&mut self, b: &mut dyn MidiBackend, at: fn(TriggerAt) -> bool, intended_ns: u64) {
        let elapsed_us = monotonic_ns().saturating_sub(self.start_ns) / 1000;
        for i in 0..self.n_triggers {
            let t = self.triggers[i];
            if !self.fired[i] && at(t.at) && t.at.reached(self.keystrokes, elapsed_us, self.beats) {
                let now = monotonic_ns();
                let when = match t.at {
                    TriggerAt::Elapsed(ms) => self.start_ns + ms.us() * 1000,
                    _ => intended_ns,
                };
                self.fire_trigger(b, i, when, now);
            }
        }
    }

    fn update_masking(&mut self, b: &mut dyn MidiBackend, now: u64) {
        let m = self.params.masking;
        let want = m.on && (m.source == MaskSource::Midi || self.opts.audio_masking);
        if want != self.masking_on {
            self.masking_on = want;
            let v = if want { m.velocity.get() } else { 0 };
            let port = self.opts.masking_port.unwrap_or(self.opts.output_port);
            self.out_to(
                b,
                port,
                EventKind::Masking,
                0,
                now,
                m.channel.midi(),
                m.note.get(),
                v,
                want,
            );
        }
    }

    fn on_input(&mut self, b: &mut dyn MidiBackend, ev: InputEvent) {
        let (channel, note, velocity, press) = match ev.msg {
            MidiMessage::NoteOn {
                channel,
                note,
                velocity,
            } if velocity > 0 => (channel, note, velocity, true),
            MidiMessage::NoteOn { channel, note, .. } => (channel, note, 0, false),
            MidiMessage::NoteOff {
                channel,
                note,
                velocity,
            } => (channel, note, velocity, false),
            _ => return,
        };
        if !bits_contains(self.opts.input_channels, channel)
            || self.ended.is_some()
            || self.audio.as_ref().is_some_and(|a| a.keystrokes)
        {
            // (With audio input, keystrokes come from the sound only.)
            return;
        }
        let t = ev.t_ns;
        if self.trial_end_ns().is_some_and(|end| t > end) {
            // After the end (the end condition was met earlier in this
            // batch, or the duration passed before this pass): not trial data.
            self.after_end += 1;
            return;
        }
        if press {
            self.press(b, t, ev.frame, channel, note, velocity);
        } else {
            self.release(b, t, ev.frame, channel, note, velocity);
        }
    }

    /// A key press (or an audio tap) at `t`: keystroke *k*, its feedback,
    /// keystroke triggers and the keystroke end. **RT-safe.**
    fn press(
        &mut self,
        b: &mut dyn MidiBackend,
        t: u64,
        frame: Option<u64>,
        channel: u8,
        note: u8,
        velocity: u8,
    ) {
        let n = usize::from(note & 0x7f);
        self.keystrokes += 1;
        let k = self.keystrokes;
        self.press_index[n] = k;
        self.record_input(k, t, frame, channel, note, velocity, true);
        self.answering = Some(t);
        for (v, kind) in FEEDBACK_KINDS.into_iter().enumerate() {
            let fb = self.params.feedback[v];
            if !fb.on || !fb.keys.contains(note) {
                continue;
            }
            let delay_ns = fb.delay.sample_us(u64::from(k - 1), &mut self.rng) * 1000;
            let pitch = fb.pitch.apply(note, &mut self.rng);
            let vel = fb.velocity.apply(velocity);
            let at = t + delay_ns;
            let ch = fb.channel.midi();
            if let Some(h) = self.held[v][n].take() {
                // Pressed again without a release: end the old note first.
                let off = at.max(h.at_ns);
                self.out(b, kind, h.keystroke, off, h.channel, h.note, 0, false);
            }
            self.out(b, kind, k, at, ch, pitch, vel, true);
            match fb.duration {
                NoteLength::Fixed { ms } => {
                    self.out(b, kind, k, at + ms.us() * 1000, ch, pitch, 0, false);
                }
                NoteLength::AsPlayed => {
                    self.held[v][n] = Some(Held {
                        channel: ch,
                        note: pitch,
                        delay_ns,
                        keystroke: k,
                        at_ns: at,
                    });
                }
            }
        }
        self.answering = None;
        self.fire_due(b, |a| matches!(a, TriggerAt::Keystroke(_)), t);
        if self.end.keystrokes.is_some_and(|e| k >= e) && self.end_at.is_none() {
            self.end_at = Some((t, EndReason::Condition));
        }
    }

    /// A key release at `t`. **RT-safe.**
    fn release(
        &mut self,
        b: &mut dyn MidiBackend,
        t: u64,
        frame: Option<u64>,
        channel: u8,
        note: u8,
        velocity: u8,
    ) {
        let n = usize::from(note & 0x7f);
        let k = self.press_index[n];
        if k == 0 {
            // Its press came before the trial's start: not trial data either.
            self.before_start += 1;
            return;
        }
        self.record_input(k, t, frame, channel, note, velocity, false);
        self.answering = Some(t);
        for (v, kind) in FEEDBACK_KINDS.into_iter().enumerate() {
            if let Some(h) = self.held[v][n].take() {
                let at = (t + h.delay_ns).max(h.at_ns);
                self.out(b, kind, h.keystroke, at, h.channel, h.note, 0, false);
            }
        }
        self.answering = None;
    }

    fn schedule_metronome(&mut self, b: &mut dyn MidiBackend, now: u64) {
        if !self.params.metronome.on {
            // Stopped: a restart begins a lookahead after the trigger.
            self.next_beat_ns = self.next_beat_ns.max(now + self.opts.lookahead_ns);
            return;
        }
        while !self.beats_done
            && self.params.metronome.on
            && self.next_beat_ns <= now + self.opts.lookahead_ns
        {
            let m = self.params.metronome;
            let at = self.next_beat_ns;
            if self.dur_end_ns.is_some_and(|d| at >= d) {
                // No beat at or after the trial's known end.
                self.beats_done = true;
                break;
            }
            let beat = m.beat(u64::from(self.beats));
            self.beats += 1;
            let k = self.beats;
            if let Some(vel) = beat.velocity {
                let ch = beat.channel.midi();
                self.out(b, EventKind::Metronome, k, at, ch, beat.note, vel, true);
                let off = at + m.length_ms.us() * 1000;
                self.out(b, EventKind::Metronome, k, off, ch, beat.note, 0, false);
            }
            self.fire_due(b, |a| matches!(a, TriggerAt::Beat(_)), at);
            if self.end.beats.is_some_and(|e| k >= e) {
                self.beats_done = true;
                if self.end_at.is_none() {
                    self.end_at = Some((at, EndReason::Condition));
                }
            }
            self.next_beat_ns = at + self.params.metronome.mspb.us() * 1000;
        }
    }

    fn poll_input(&mut self, b: &mut dyn MidiBackend) -> Result<(), BackendError> {
        let mut inbuf = std::mem::take(&mut self.inbuf);
        inbuf.clear();
        let mut overflow = 0u64;
        let (start, channels) = (self.start_ns, self.opts.input_channels);
        let mut early = 0u64;
        // Input stamped before the start is dropped here, before it can
        // take a batch slot or reach the trial's state.
        let r = b.poll_input(&mut |ev| {
            if ev.t_ns < start {
                early += u64::from(is_key(&ev.msg, channels));
            } else {
                push_or_count(&mut inbuf, &mut overflow, ev);
            }
        });
        self.in_overflow += overflow;
        self.before_start += early;
        for &ev in inbuf.iter() {
            self.on_input(b, ev);
        }
        self.inbuf = inbuf;
        r.map(|_| ())
    }

    /// Runs one trial on `backend` until an end condition, an end trigger,
    /// `stop` (Ctrl-C: the trial is then incomplete) or the backend's
    /// disconnection. **RT-safe.**
    ///
    /// # Errors
    /// None today: a disconnection ends the trial (reported in
    /// [`TrialOutcome::reason`]) so that what was recorded is kept; the
    /// `Result` is for backend errors a future backend cannot recover from.
    pub fn run(
        &mut self,
        backend: &mut dyn MidiBackend,
        stop: &AtomicBool,
    ) -> Result<TrialOutcome, BackendError> {
        // Under the `assert-rt` feature an allocation in the trial aborts.
        firmtime_rt::assert_rt::no_alloc(|| self.run_trial(backend, stop))
    }

    /// The body of [`Engine::run`]. **RT-safe.**
    fn run_trial(
        &mut self,
        backend: &mut dyn MidiBackend,
        stop: &AtomicBool,
    ) -> Result<TrialOutcome, BackendError> {
        let b = backend;
        let stats0 = b.stats();
        // Reports of a previous trial's last outputs are not this trial's.
        b.poll_sent(&mut |_| {});
        let t0 = monotonic_ns();
        self.reset(t0);
        // A loss still going on (the keyboard went between trials) ends this
        // trial at once; else only one after this moment does.
        self.loss0 = b.input_loss().map_or(0, |l| l.count - u32::from(l.ongoing));
        self.live.begin(t0);
        self.live_next_ns = t0;
        self.update_masking(b, t0);
        let dur_end = self.dur_end_ns;
        loop {
            let now = monotonic_ns();
            self.diag.tick(now);
            self.pass_wake_ns = now;
            if self.notes.enabled() && self.pass > 0 {
                let cpu = firmtime_rt::sched::current_cpu();
                self.notes
                    .offer_on(cpu, self.pass, self.pass_due_ns, now, 0);
            }
            self.poll_sent(b);
            if self.poll_input(b).is_err() || self.disconnected {
                self.loss = Some(self.new_loss(b).unwrap_or(InputLoss {
                    cause: LossCause::Disconnected,
                    t_ns: now,
                    count: 0,
                    ongoing: true,
                }));
                self.ended = Some((now, EndReason::Disconnected));
                break;
            }
            self.poll_audio(b);
            if let Some(l) = self.new_loss(b) {
                self.loss = Some(l);
                self.ended = Some((l.t_ns.clamp(t0, now), EndReason::InputLost));
                break;
            }
            let now = monotonic_ns();
            if now >= self.live_next_ns {
                self.publish(b, stats0);
                self.live_next_ns = now + LIVE_EVERY_NS;
            }
            self.fire_due(b, |a| matches!(a, TriggerAt::Elapsed(_)), now);
            self.schedule_metronome(b, now);
            if let Some(d) = dur_end {
                if now >= d && self.end_at.is_none() {
                    self.end_at = Some((d, EndReason::Condition));
                }
            }
            if let Some((at, why)) = self.end_at {
                if now >= at {
                    self.ended = Some((at, why));
                    break;
                }
            }
            if stop.load(Ordering::Relaxed) {
                self.ended = Some((now, EndReason::Interrupted));
                break;
            }
            let mut deadline = now + self.opts.pause_ns;
            if self.params.metronome.on && !self.beats_done {
                deadline = deadline.min(
                    self.next_beat_ns
                        .saturating_sub(self.opts.lookahead_ns)
                        .max(now),
                );
            }
            if let Some((at, _)) = self.end_at {
                deadline = deadline.min(at);
            }
            self.pass_due_ns = deadline;
            self.pass += 1;
            if b.wait(deadline).is_err() {
                let now = monotonic_ns();
                self.loss = Some(self.new_loss(b).unwrap_or(InputLoss {
                    cause: LossCause::Disconnected,
                    t_ns: now,
                    count: 0,
                    ongoing: true,
                }));
                self.ended = Some((now, EndReason::Disconnected));
                break;
            }
        }
        let (end_ns, reason) = self.ended.unwrap_or((monotonic_ns(), EndReason::Condition));
        let now = monotonic_ns();
        let end_ns = end_ns.min(now);
        if reason != EndReason::Disconnected {
            self.silence(b, now);
            self.drain(b, now);
        }
        if reason == EndReason::InputLost {
            self.settle_loss(b, now);
        }
        // The end row is the trial's last: it is stamped when the last of its
        // outputs went out (the metronome's lookahead, a feedback delay or a
        // note-off may reach past the moment the trial was ended), and says
        // that moment as its intended time.
        let last_ns = self
            .events
            .iter()
            .filter_map(|e| e.actual_ns)
            .fold(end_ns, u64::max);
        let _ = self.record(TrialEvent {
            kind: EventKind::End,
            index: u32::from(matches!(
                reason,
                EndReason::Interrupted | EndReason::Disconnected | EndReason::InputLost
            )),
            intended_ns: Some(end_ns),
            actual_ns: Some(last_ns),
            frame: None,
            note: None,
        });
        let backend_stats = sub_stats(b.stats(), stats0);
        self.publish(b, stats0);
        self.live.end();
        Ok(TrialOutcome {
            start_ns: t0,
            end_ns,
            reason,
            keystrokes: self.keystrokes,
            beats: self.beats,
            late_outputs: self.late,
            late_threshold_us: self.opts.late_threshold_us,
            max_lateness_ns: self.max_late_ns,
            unreported: self.outstanding,
            send_failures: self.send_failures,
            input_overruns: backend_stats.input_dropped + self.in_overflow,
            events_dropped: self.dropped,
            backend: backend_stats,
            diag: self.diag.report(),
            input_before_start: self.before_start,
            input_after_end: self.after_end,
            input_loss: self.loss,
        })
    }

    /// When the trial ends, once that is known: the end condition or
    /// trigger met, or the duration's end. **RT-safe.**
    fn trial_end_ns(&self) -> Option<u64> {
        match (self.end_at.map(|(at, _)| at), self.dur_end_ns) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }

    /// The backend's input loss, if one happened since the trial started or
    /// is still going on. **RT-safe.**
    fn new_loss(&self, b: &dyn MidiBackend) -> Option<InputLoss> {
        b.input_loss().filter(|l| l.count > self.loss0)
    }

    /// Waits until [`LOSS_SETTLE_NS`] after the loss was seen (dropping
    /// input) and takes the backend's final account of its cause. **RT-safe.**
    fn settle_loss(&mut self, b: &mut dyn MidiBackend, seen_ns: u64) {
        let until = seen_ns + LOSS_SETTLE_NS;
        let channels = self.opts.input_channels;
        while monotonic_ns() < until {
            let mut late = 0u64;
            let _ = b.poll_input(&mut |ev| late += u64::from(is_key(&ev.msg, channels)));
            self.after_end += late;
            if b.wait(until).is_err() {
                break;
            }
        }
        if let (Some(seen), Some(now)) = (self.loss.as_mut(), b.input_loss()) {
            if now.count == seen.count {
                seen.cause = now.cause;
            }
        }
    }

    /// Publishes the live counters. **RT-safe.**
    fn publish(&self, b: &dyn MidiBackend, stats0: BackendStats) {
        let xruns = b.stats().xruns.saturating_sub(stats0.xruns);
        self.live
            .update(self.keystrokes, self.beats, self.late, xruns);
        self.live
            .update_input(self.before_start, self.loss.map(|l| l.cause));
    }

    /// Note-offs for every feedback note still held, and the masking note.
    fn silence(&mut self, b: &mut dyn MidiBackend, now: u64) {
        for (v, kind) in FEEDBACK_KINDS.into_iter().enumerate() {
            for n in 0..128 {
                if let Some(h) = self.held[v][n].take() {
                    let at = now.max(h.at_ns);
                    self.out(b, kind, h.keystroke, at, h.channel, h.note, 0, false);
                }
            }
        }
        if self.masking_on {
            self.params.masking.on = false;
            self.update_masking(b, now);
        }
    }

    /// Waits for the reports of outputs still queued (bounded).
    fn drain(&mut self, b: &mut dyn MidiBackend, now: u64) {
        let limit = now + self.opts.drain_ns;
        let until = (self.last_at_ns + 100_000_000).min(limit);
        loop {
            self.poll_sent(b);
            let t = monotonic_ns();
            if self.outstanding == 0 || t >= until {
                break;
            }
            // Input after the end is not part of the trial: counted, dropped.
            let channels = self.opts.input_channels;
            let mut late = 0u64;
            let _ = b.poll_input(&mut |ev| late += u64::from(is_key(&ev.msg, channels)));
            self.after_end += late;
            if b.wait((t + 2_000_000).min(until)).is_err() {
                break;
            }
        }
    }
}

/// Appends `item` to `buf` while it has room (its capacity is fixed before
/// the trial), else counts it in `lost`. **RT-safe.**
fn push_or_count<T>(buf: &mut Vec<T>, lost: &mut u64, item: T) {
    if buf.len() < buf.capacity() {
        buf.push(item);
    } else {
        *lost += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmtime_midi::loopback::{Loopback, LoopbackOptions};

    fn exp(text: &str) -> Experiment {
        Experiment::from_toml(text).unwrap()
    }

    #[test]
    fn capacity_bounds_hold() {
        let e = exp("[end]\nkeystrokes = 3\n");
        let o = EngineOptions::for_experiment(&e, 7);
        assert!(o.event_capacity >= MIN_EVENTS && o.event_capacity <= MAX_EVENTS);
        assert_eq!(o.seed, 7);
    }

    #[test]
    fn metronome_only_trial_beats_at_mspb_without_allocating() {
        let e = exp("[metronome]\nmspb = 20\nlength_ms = 5\n[end]\nbeats = 5\n");
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.first_beat_ns = 10_000_000;
        o.lookahead_ns = 5_000_000;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut lb, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.beats, 5);
        let ons: Vec<u64> = eng
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Metronome && e.note.unwrap().on)
            .map(|e| e.intended_ns.unwrap() - out.start_ns)
            .collect();
        assert_eq!(
            ons,
            [10_000_000, 30_000_000, 50_000_000, 70_000_000, 90_000_000]
        );
        // The loopback sends at the intended time or later, never earlier.
        for e in eng
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Metronome)
        {
            assert!(e.actual_ns.unwrap() >= e.intended_ns.unwrap());
        }
        assert_eq!(out.unreported, 0);
    }

    fn on(ch: u8, note: u8) -> MidiMessage {
        MidiMessage::NoteOn {
            channel: ch,
            note,
            velocity: 90,
        }
    }

    /// Queues taps on channel 16 into the loopback so they come back as
    /// input at exactly `at`; returns their times.
    fn queue_taps(lb: &mut Loopback, first_ns: u64, gap_ns: u64, notes: &[u8]) -> Vec<u64> {
        let t0 = monotonic_ns() + first_ns;
        notes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let at = t0 + i as u64 * gap_ns;
                lb.send(OutputEvent {
                    at_ns: Some(at),
                    port: 0,
                    msg: on(15, n),
                    tag: 0x8000_0000 + i as u32,
                })
                .unwrap();
                at
            })
            .collect()
    }

    #[test]
    fn feedback_split_keyboard_and_keystroke_trigger() {
        let e = exp(r#"
[feedback]
keys = [0, 71]
pitch = { mode = "transpose", semitones = 12 }
velocity = { mode = "fixed", velocity = 64 }
duration = { mode = "fixed", ms = 30 }
delay = { mode = "fixed", ms = 20 }
[feedback2]
channel = 3
keys = [72, 127]
[end]
keystrokes = 5
[[trigger]]
keystroke = 3
set.feedback.delay = { mode = "none" }
"#);
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let taps = queue_taps(&mut lb, 30_000_000, 40_000_000, &[60, 80, 60, 60, 60]);
        let live = eng.live();
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut lb, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.keystrokes, 5);
        // The watcher's counters end as the outcome does (published at the
        // end under the same no-allocation check).
        let seen = live.read();
        assert!(!seen.running);
        assert_eq!(seen.keystrokes, 5);
        assert_eq!(seen.start_ns, out.start_ns);
        assert_eq!(seen.late_outputs, out.late_outputs);
        let ev = eng.events();
        let inputs: Vec<(u32, u64)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Input)
            .map(|e| (e.index, e.actual_ns.unwrap()))
            .collect();
        let want: Vec<(u32, u64)> = taps
            .iter()
            .enumerate()
            .map(|(i, &t)| (i as u32 + 1, t))
            .collect();
        assert_eq!(inputs, want, "input stamps are the taps' times");
        // Feedback 1: keystrokes 1, 3 delayed 20 ms (trigger at 3 acts after it), 4, 5 at once.
        let fb: Vec<(u32, u64, u8, u8, bool)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Feedback)
            .map(|e| {
                let n = e.note.unwrap();
                (
                    e.index,
                    e.intended_ns.unwrap() - taps[e.index as usize - 1],
                    n.note,
                    n.velocity,
                    n.on,
                )
            })
            .collect();
        assert_eq!(
            fb,
            [
                (1, 20_000_000, 72, 64, true),
                (1, 50_000_000, 72, 0, false),
                (3, 20_000_000, 72, 64, true),
                (3, 50_000_000, 72, 0, false),
                (4, 0, 72, 64, true),
                (4, 30_000_000, 72, 0, false),
                (5, 0, 72, 64, true),
                (5, 30_000_000, 72, 0, false),
            ]
        );
        // Feedback 2 answers only the key in its range, on channel 3, as played.
        let fb2: Vec<(u32, u8, u8, bool)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Feedback2)
            .map(|e| {
                let n = e.note.unwrap();
                (e.index, n.channel, n.note, n.on)
            })
            .collect();
        assert_eq!(
            fb2,
            [(2, 3, 80, true), (2, 3, 80, false)],
            "held note silenced at the end"
        );
        let trig: Vec<(u32, u64)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Trigger)
            .map(|e| (e.index, e.intended_ns.unwrap()))
            .collect();
        assert_eq!(trig, [(1, taps[2])]);
        assert_eq!(eng.params().feedback[0].delay, crate::params::Delay::None);
        assert_eq!(out.unreported, 0);
        assert_eq!(out.events_dropped, 0);
        // CSV rows: every output reported, times relative to the start.
        let rows = eng.data_events();
        assert!(rows
            .iter()
            .any(|r| r.kind == EventKind::End && r.index == 0));
        let first = rows.iter().find(|r| r.kind == EventKind::Input).unwrap();
        assert_eq!(first.actual_us, ((taps[0] - out.start_ns) / 1000) as i64);
    }

    #[test]
    fn stop_flag_ends_trial_incomplete_and_storage_overflow_is_counted() {
        let e = exp("[metronome]\nmspb = 10\n[end]\nduration_ms = 60000\n");
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.event_capacity = 8;
        o.first_beat_ns = 0;
        o.input_channels = 0;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let out = run_stopped_after(&mut eng, &mut lb, 200);
        assert_eq!(out.reason, EndReason::Interrupted);
        assert!(out.incomplete());
        assert_eq!(eng.events().len(), 8);
        assert!(out.events_dropped > 0);
        assert!(
            out.beats >= 10,
            "about 20 beats in 200 ms, got {}",
            out.beats
        );
        assert_eq!(out.self_checks().events_dropped, out.events_dropped);
    }

    /// Outputs the backend refused never went out and are no rows: the
    /// sidecar counts them (they were counted only in the outcome).
    #[test]
    fn outputs_the_backend_refused_are_counted_in_the_self_checks() {
        let e = exp("[metronome]\nmspb = 10\nlength_ms = 200\n[end]\nbeats = 6\n");
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.first_beat_ns = 0;
        o.input_channels = 0;
        let mut eng = Engine::new(&e, o).unwrap();
        // Room for 2 queued outputs: the 200-ms note-offs pile up.
        let mut lb = Loopback::new(LoopbackOptions {
            capacity: 2,
            ..LoopbackOptions::default()
        });
        let stop = AtomicBool::new(false);
        let out = eng.run(&mut lb, &stop).unwrap();
        assert!(out.send_failures > 0, "{out:?}");
        let sc = out.self_checks();
        assert_eq!(sc.outputs_refused, out.send_failures);
        assert_eq!(sc.outputs_unreported, out.unreported);
        let rows = eng.data_events();
        let sent = rows
            .iter()
            .filter(|r| r.kind == EventKind::Metronome)
            .count() as u64;
        assert_eq!(
            sent + out.send_failures + out.unreported,
            12,
            "6 beats on and off: rows, refused or unreported"
        );
    }

    /// Regression: a stopped trial's end row came before the metronome beats
    /// already handed over within the lookahead (two metronome rows 42 ms
    /// after the end row).
    #[test]
    fn nothing_follows_the_end_row_of_a_stopped_trial() {
        let e = exp("[metronome]\nmspb = 10\nlength_ms = 5\n[end]\nduration_ms = 60000\n");
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.first_beat_ns = 0;
        o.lookahead_ns = 50_000_000;
        o.input_channels = 0;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let out = run_stopped_after(&mut eng, &mut lb, 150);
        assert_eq!(out.reason, EndReason::Interrupted);
        assert_eq!(out.unreported, 0, "every handed-over beat was reported");
        let rows = eng.data_events();
        let end = rows.last().unwrap();
        assert_eq!((end.kind, end.index), (EventKind::End, 1), "{rows:?}");
        assert_eq!(rows.iter().filter(|r| r.kind == EventKind::End).count(), 1);
        let stopped_us = end.intended_us.unwrap();
        assert_eq!(stopped_us, ((out.end_ns - out.start_ns) / 1000) as i64);
        // The lookahead had beats scheduled past the stop: they are rows
        // before the end row, which is stamped at the last of them.
        let after_stop: Vec<&data::Event> = rows
            .iter()
            .filter(|r| r.kind == EventKind::Metronome && r.intended_us.unwrap() > stopped_us)
            .collect();
        assert!(
            !after_stop.is_empty(),
            "no beat was queued past the stop: {rows:?}"
        );
        let last_out = rows[..rows.len() - 1]
            .iter()
            .map(|r| r.actual_us)
            .max()
            .unwrap();
        assert!(end.actual_us >= last_out && end.actual_us >= stopped_us);
        // Every beat that sounded was also ended.
        let ons = rows
            .iter()
            .filter(|r| r.kind == EventKind::Metronome && r.note.unwrap().on)
            .count();
        let offs = rows
            .iter()
            .filter(|r| r.kind == EventKind::Metronome && !r.note.unwrap().on)
            .count();
        assert_eq!(ons, offs);
    }

    /// Regression (issue 28, item 1): with a keyboard already playing when
    /// the trial started, its queued input became keystrokes 1, 2, … with
    /// negative times, got feedback at once, and advanced keystroke
    /// triggers and the keystroke end. Input stamped before the start is
    /// dropped and counted, and so is the release of a key pressed before it.
    #[test]
    fn input_stamped_before_the_start_is_dropped_counted_and_gets_no_feedback() {
        let e = exp(r#"
[feedback]
delay = { mode = "fixed", ms = 20 }
duration = { mode = "fixed", ms = 10 }
[end]
keystrokes = 3
[[trigger]]
keystroke = 2
set.feedback.delay = { mode = "none" }
"#);
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        // Five taps (press and release) played 60–20 ms before the start:
        // queued in the backend, stamped in the past.
        let early0 = monotonic_ns() - 60_000_000;
        for i in 0..5u32 {
            let at = early0 + u64::from(i) * 10_000_000;
            for (j, msg) in [on(15, 60 + i as u8), off(15, 60 + i as u8)]
                .into_iter()
                .enumerate()
            {
                lb.send(OutputEvent {
                    at_ns: Some(at + j as u64 * 2_000_000),
                    port: 0,
                    msg,
                    tag: 0x4000_0000 + 2 * i + j as u32,
                })
                .unwrap();
            }
        }
        // A sixth key pressed before the start is released after it.
        lb.send(OutputEvent {
            at_ns: Some(early0 + 55_000_000),
            port: 0,
            msg: on(15, 70),
            tag: 0x4000_0100,
        })
        .unwrap();
        lb.send(OutputEvent {
            at_ns: Some(monotonic_ns() + 15_000_000),
            port: 0,
            msg: off(15, 70),
            tag: 0x4000_0101,
        })
        .unwrap();
        let taps = queue_taps(&mut lb, 30_000_000, 40_000_000, &[64, 65, 66]);
        let live = eng.live();
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut lb, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.keystrokes, 3, "only the taps after the start count");
        assert_eq!(
            out.input_before_start, 12,
            "6 presses and 5 releases before the start, and the release of the sixth after it"
        );
        assert_eq!(out.self_checks().input_before_start, 12);
        assert_eq!(live.read().before_start, 12, "named in the live line");
        let ev = eng.events();
        let inputs: Vec<(u32, u64, bool)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Input)
            .map(|e| (e.index, e.actual_ns.unwrap(), e.note.unwrap().on))
            .collect();
        let want: Vec<(u32, u64, bool)> = taps
            .iter()
            .enumerate()
            .map(|(i, &t)| (i as u32 + 1, t, true))
            .collect();
        assert_eq!(
            inputs, want,
            "the trial's inputs are the taps after its start"
        );
        // Feedback answers keystrokes 1–3 only, never before the start:
        // keystroke 1 delayed 20 ms, 2 (the trigger acts after it) too, 3 at once.
        let fb: Vec<(u32, u64)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Feedback && e.note.unwrap().on)
            .map(|e| (e.index, e.intended_ns.unwrap() - taps[e.index as usize - 1]))
            .collect();
        assert_eq!(fb, [(1, 20_000_000), (2, 20_000_000), (3, 0)]);
        let trig: Vec<(u32, u64)> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Trigger)
            .map(|e| (e.index, e.intended_ns.unwrap()))
            .collect();
        assert_eq!(
            trig,
            [(1, taps[1])],
            "the keystroke trigger fired at keystroke 2"
        );
        assert!(eng.data_events().iter().all(|r| r.actual_us >= 0));
    }

    /// Taps stamped after the keystroke that ends the trial, taken in the
    /// same pass (a fast double tap on the last keystroke): not trial data.
    /// Before, they became keystrokes 4 and 5 with feedback.
    #[test]
    fn input_stamped_after_the_end_is_dropped_counted_and_gets_no_feedback() {
        let e = exp(r#"
[feedback]
delay = { mode = "fixed", ms = 20 }
duration = { mode = "fixed", ms = 10 }
[end]
keystrokes = 3
"#);
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let t0 = monotonic_ns() + 20_000_000;
        // Keystrokes 1 and 2, then 3, and two more 1 ns and 2 ns after the
        // third: all three are due in the one pass that takes the third.
        for (i, at) in [0, 10_000_000, 20_000_000, 20_000_001, 20_000_002u64]
            .into_iter()
            .enumerate()
        {
            lb.send(OutputEvent {
                at_ns: Some(t0 + at),
                port: 0,
                msg: on(15, 60 + i as u8),
                tag: 0x8000_0000 + i as u32,
            })
            .unwrap();
        }
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut lb, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.keystrokes, 3, "the end condition's three keystrokes");
        assert_eq!(out.input_after_end, 2, "the two taps after the third");
        assert_eq!(out.self_checks().input_after_end, 2);
        let ev = eng.events();
        let inputs: Vec<u32> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Input)
            .map(|e| e.index)
            .collect();
        assert_eq!(inputs, [1, 2, 3]);
        let fb: Vec<u32> = ev
            .iter()
            .filter(|e| e.kind == EventKind::Feedback && e.note.unwrap().on)
            .map(|e| e.index)
            .collect();
        assert_eq!(fb, [1, 2, 3], "feedback for the trial's keystrokes only");
    }

    fn off(ch: u8, note: u8) -> MidiMessage {
        MidiMessage::NoteOff {
            channel: ch,
            note,
            velocity: 0,
        }
    }

    /// Runs `eng` on `lb` (allocation-free) until a stop flag set after
    /// `ms` milliseconds ends it.
    fn run_stopped_after(eng: &mut Engine, lb: &mut Loopback, ms: u64) -> TrialOutcome {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                stop.store(true, Ordering::Relaxed);
            });
            assert_no_alloc::assert_no_alloc(|| eng.run(lb, &stop)).unwrap()
        })
    }

    /// The [`MidiBackend`] methods a test backend passes on to its
    /// loopback `lb` unchanged.
    macro_rules! through_loopback {
        () => {
            fn kind(&self) -> firmtime_midi::BackendKind {
                self.lb.kind()
            }
            fn poll_input(&mut self, f: &mut dyn FnMut(InputEvent)) -> Result<usize, BackendError> {
                self.lb.poll_input(f)
            }
            fn wait(&mut self, deadline_ns: u64) -> Result<(), BackendError> {
                self.lb.wait(deadline_ns)
            }
            fn send(&mut self, ev: OutputEvent) -> Result<(), BackendError> {
                self.lb.send(ev)
            }
            fn poll_sent(&mut self, f: &mut dyn FnMut(SentEvent)) -> usize {
                self.lb.poll_sent(f)
            }
            fn stats(&self) -> BackendStats {
                self.lb.stats()
            }
        };
    }

    /// A loopback whose input is lost (`loss`) from `at_ns` on, as a JACK
    /// port's disconnection would be seen.
    struct LosesInput {
        lb: Loopback,
        at_ns: u64,
        loss: InputLoss,
    }

    impl MidiBackend for LosesInput {
        through_loopback!();
        fn input_loss(&self) -> Option<InputLoss> {
            (monotonic_ns() >= self.at_ns).then_some(self.loss)
        }
    }

    /// A loopback with an audio input playing `samples` from frame
    /// `frame0`, at 48 kHz in real time from `t0_ns`, in blocks of 256.
    struct AudioFeed {
        lb: Loopback,
        samples: Vec<f32>,
        frame0: u64,
        t0_ns: u64,
        next: usize,
    }

    impl MidiBackend for AudioFeed {
        through_loopback!();
        fn poll_audio(&mut self, f: &mut dyn FnMut(&firmtime_midi::jack::AudioBlock)) -> usize {
            let now = monotonic_ns();
            let ns = |i: usize| self.t0_ns + (i as u64 * 1_000_000_000) / 48_000;
            let mut n = 0;
            while self.next + 256 <= self.samples.len() && ns(self.next + 256) <= now {
                let i = self.next;
                let mut blk = firmtime_midi::jack::AudioBlock {
                    frame: self.frame0 + i as u64,
                    cycle: firmtime_jack::CycleTimes {
                        frame: self.frame0 + i as u64,
                        n_frames: 256,
                        start_ns: ns(i),
                        next_ns: ns(i + 256),
                    },
                    sample_rate: 48_000,
                    dropped_frames: 0,
                    len: 256,
                    samples: [0.0; firmtime_midi::jack::AUDIO_BLOCK],
                };
                blk.samples[..256].copy_from_slice(&self.samples[i..i + 256]);
                f(&blk);
                self.next += 256;
                n += 1;
            }
            n
        }
    }

    /// Issue 30: taps detected in an audio input are keystrokes at their
    /// onset's time, with feedback, counts and the keystroke end, and
    /// the trial allocates nothing.
    #[test]
    fn audio_taps_are_keystrokes_at_their_onsets_with_feedback_without_allocating() {
        use crate::onset::synthetic::{score, track, Noise, TrackSpec};
        let e = exp("[input]\nsource = \"audio\"\nnote = 64\n\
            [feedback]\ndelay = { mode = \"fixed\", ms = 30 }\n[end]\nkeystrokes = 12\n");
        let t = track(&TrackSpec {
            taps: 12,
            seed: 5,
            lead_ms: 300.0,
            interval_ms: (120.0, 200.0),
            snr_db: Some(20.0),
            noise: Noise::Pink,
            ..TrackSpec::default()
        });
        let o = EngineOptions::for_experiment(&e, 1);
        let mut eng = Engine::new(&e, o).unwrap();
        // The audio began 150 ms before the trial (the detector's warm-up
        // and a tap-free stretch before the start).
        let frame0 = 7_000_000;
        let t0_ns = monotonic_ns() - 150_000_000;
        let mut b = AudioFeed {
            lb: Loopback::new(LoopbackOptions::default()),
            samples: t.samples.clone(),
            frame0,
            t0_ns,
            next: 0,
        };
        // MIDI input is no keystroke with an audio input.
        b.lb.send(OutputEvent {
            at_ns: None,
            port: 0,
            msg: on(0, 60),
            tag: 0x8000_0000,
        })
        .unwrap();
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut b, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.keystrokes, 12);
        let ev = eng.events();
        let inputs: Vec<&TrialEvent> = ev.iter().filter(|e| e.kind == EventKind::Input).collect();
        assert_eq!(inputs.len(), 12, "one press row per tap, no release rows");
        let frames: Vec<u64> = inputs.iter().map(|e| e.frame.unwrap() - frame0).collect();
        let sc = score(&t.onsets, &frames, 480);
        assert_eq!((sc.hits, sc.misses, sc.false_taps), (12, 0, 0));
        assert!(sc.errors.iter().all(|e| e.abs() <= 24), "{:?}", sc.errors);
        for (k, e) in inputs.iter().enumerate() {
            assert_eq!(e.index, k as u32 + 1);
            let f = e.frame.unwrap() - frame0;
            // The onset frame's time (to the rounding of the cycle's interpolation).
            let want = t0_ns + f * 1_000_000_000 / 48_000;
            assert!(e.actual_ns.unwrap().abs_diff(want) <= 2, "{e:?} vs {want}");
            assert_eq!(
                e.note.map(|n| (n.channel, n.note, n.on)),
                Some((1, 64, true))
            );
            let fb: Vec<&TrialEvent> = ev
                .iter()
                .filter(|x| x.kind == EventKind::Feedback && x.index == e.index)
                .collect();
            assert_eq!(fb.len(), 2, "note-on and its note-off");
            let at = e.actual_ns.unwrap() + 30_000_000;
            assert_eq!(fb[0].intended_ns, Some(at));
            assert_eq!(fb[1].intended_ns, Some(at + AUDIO_TAP_NOTE_NS));
        }
        let taps = eng.audio_taps();
        assert_eq!(taps.len(), 12);
        assert!(taps
            .iter()
            .all(|t| t.confidence_db >= 12.0 && t.peak_dbfs < 0.0));
        let r = eng.audio_report().unwrap();
        assert_eq!(
            (r.taps, r.before_start, r.taps_dropped, r.frames_dropped),
            (12, 0, 0, 0)
        );
        assert_eq!(r.sample_rate, 48_000);
        // The CSV of such a trial: the extra columns on the taps' rows.
        let rows = eng.data_events();
        let data: Vec<data::AudioTapData> = taps.into_iter().map(Into::into).collect();
        let mut csv = Vec::new();
        data::write_csv_audio(&mut csv, &rows, &data).unwrap();
        let text = String::from_utf8(csv).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(data::CSV_HEADER_AUDIO));
        let first = lines.find(|l| l.starts_with("input,1,")).unwrap();
        let f = data[0].onset_frame;
        assert!(first.contains(",1,64,"), "{first}");
        assert!(first.contains(&format!(",audio,{f},")), "{first}");
        assert!(text
            .lines()
            .filter(|l| l.starts_with("feedback,"))
            .all(|l| l.ends_with(",,,,")));
        // And it reads back as a trial (extra columns ignored).
        assert_eq!(data::read_csv(&text).unwrap().len(), rows.len());
    }

    /// Issue 30 item 2: with `midi+audio` the MIDI presses are the
    /// keystrokes and each is paired with its sound: the pad's delay per
    /// tap, a dropped MIDI hit and a doubled one flagged.
    #[test]
    fn midi_paired_with_sound_measures_the_pad_delay_and_flags_dropped_and_doubled_hits() {
        use crate::onset::synthetic::{track, Noise, TrackSpec};
        let e = exp("[input]\nsource = \"midi+audio\"\n[end]\nduration_ms = 2600\n");
        let t = track(&TrackSpec {
            taps: 10,
            seed: 9,
            lead_ms: 300.0,
            interval_ms: (150.0, 200.0),
            snr_db: Some(20.0),
            noise: Noise::Pink,
            ..TrackSpec::default()
        });
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        let mut eng = Engine::new(&e, o).unwrap();
        let t0_ns = monotonic_ns() - 150_000_000;
        let mut b = AudioFeed {
            lb: Loopback::new(LoopbackOptions::default()),
            samples: t.samples.clone(),
            frame0: 0,
            t0_ns,
            next: 0,
        };
        // The pad's MIDI: 9 ms after each sound; the 3rd dropped, the 6th doubled.
        for (i, &f) in t.onsets.iter().enumerate() {
            let at = t0_ns + f * 1_000_000_000 / 48_000 + 9_000_000;
            let copies: &[u64] = match i {
                2 => &[],
                5 => &[0, 4_000_000],
                _ => &[0],
            };
            for &d in copies {
                b.lb.send(OutputEvent {
                    at_ns: Some(at + d),
                    port: 0,
                    msg: on(15, 60),
                    tag: 0x8000_0000,
                })
                .unwrap();
            }
        }
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut b, &stop)).unwrap();
        assert_eq!(out.keystrokes, 10, "MIDI presses are the keystrokes");
        let rows = crate::session::trial_rows(&eng);
        let p = rows.pairing.expect("a pairing");
        assert_eq!(
            (
                p.midi_presses,
                p.sounds,
                p.paired,
                p.midi_without_sound,
                p.sounds_without_midi
            ),
            (10, 10, 9, 1, 1),
            "{p:?}"
        );
        let med = p.pad_delay_median_us.unwrap();
        assert!((med - 9000.0).abs() <= 500.0, "pad delay median {med} µs");
        let x = rows.extras.unwrap();
        let flags: Vec<(&str, u32, &str)> = rows
            .events
            .iter()
            .zip(&x)
            .filter_map(|(e, x)| x.flag.map(|f| (e.kind.as_str(), e.index, f)))
            .collect();
        // The dropped hit: the 3rd sound pairs with no keystroke; the
        // doubled hit: keystroke 6 (the 5th's second press) has no sound.
        assert_eq!(flags, [("sound", 0, "no_midi"), ("input", 6, "no_sound")]);
        assert_eq!(rows.events.last().map(|e| e.kind), Some(EventKind::End));
        let sounds = rows
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Sound)
            .count();
        assert_eq!(sounds, 10);
    }

    const SYNC: &str = "[feedback]\ndelay = { mode = \"fixed\", ms = 5 }\n\
        [metronome]\nmspb = 50\nlength_ms = 5\n[end]\nduration_ms = 60000\nkeystrokes = 1000\n";

    /// Regression (issue 28, item 2): a keyboard gone mid-trial went
    /// unnoticed (the trial ran to its end condition, complete). The
    /// backend's input loss ends the trial at the moment of the loss,
    /// incomplete, with the cause; held outputs are still ended.
    #[test]
    fn an_input_lost_mid_trial_ends_it_incomplete_at_the_loss_with_its_cause() {
        let e = exp(SYNC);
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        o.first_beat_ns = 0;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let taps = queue_taps(&mut lb, 30_000_000, 40_000_000, &[60, 61, 62]);
        let at_ns = taps[2] + 40_000_000;
        let mut b = LosesInput {
            lb,
            at_ns,
            loss: InputLoss {
                cause: LossCause::PortDisconnected,
                t_ns: at_ns,
                count: 1,
                ongoing: true,
            },
        };
        let live = eng.live();
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut b, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::InputLost);
        assert!(out.incomplete());
        assert_eq!(out.keystrokes, 3);
        assert_eq!(out.end_ns, at_ns, "the trial ends at the loss");
        assert_eq!(
            out.input_loss.map(|l| (l.cause, l.t_ns)),
            Some((LossCause::PortDisconnected, at_ns))
        );
        assert_eq!(live.read().input_lost, Some(LossCause::PortDisconnected));
        let rows = eng.data_events();
        let end = rows.last().unwrap();
        assert_eq!(
            (end.kind, end.index),
            (EventKind::End, 1),
            "flagged incomplete: {rows:?}"
        );
        assert_eq!(
            end.intended_us,
            Some(((at_ns - out.start_ns) / 1000) as i64)
        );
        // Every metronome note that sounded was ended.
        let beats = |on: bool| {
            rows.iter()
                .filter(|r| r.kind == EventKind::Metronome && r.note.unwrap().on == on)
                .count()
        };
        assert_eq!(beats(true), beats(false));
    }

    /// A loss still going on when a trial starts (the keyboard went between
    /// trials) ends it at once; one that was over (the port connected
    /// again) does not.
    #[test]
    fn a_loss_still_going_on_at_the_start_ends_the_trial_at_once_a_past_one_does_not() {
        let e = exp("[end]\nduration_ms = 300\n");
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.input_channels = 1 << 15;
        let mut eng = Engine::new(&e, o).unwrap();
        let before = monotonic_ns() - 1_000_000_000;
        let loss = InputLoss {
            cause: LossCause::ClientGone,
            t_ns: before,
            count: 2,
            ongoing: true,
        };
        let mut b = LosesInput {
            lb: Loopback::new(LoopbackOptions::default()),
            at_ns: 0,
            loss,
        };
        let stop = AtomicBool::new(false);
        let out = eng.run(&mut b, &stop).unwrap();
        assert_eq!(out.reason, EndReason::InputLost);
        assert_eq!(out.end_ns, out.start_ns, "ended at its start");
        assert_eq!(out.input_loss, Some(loss));
        b.loss.ongoing = false;
        let out = eng.run(&mut b, &stop).unwrap();
        assert_eq!(out.reason, EndReason::Condition);
        assert_eq!(out.input_loss, None);
    }

    #[test]
    fn beat_trigger_changes_tempo_and_stops_metronome_then_elapsed_trigger_ends() {
        let e = exp(r#"
[metronome]
mspb = 20
pattern = ["accent", "beat", "rest"]
[end]
duration_ms = 2000
[[trigger]]
beat = 3
set.metronome.mspb = 10
[[trigger]]
beat = 6
set.metronome.on = false
[[trigger]]
id = 9
elapsed_ms = 300
end = true
"#);
        let mut o = EngineOptions::for_experiment(&e, 1);
        o.first_beat_ns = 20_000_000;
        o.lookahead_ns = 5_000_000;
        o.input_channels = 0;
        let mut eng = Engine::new(&e, o).unwrap();
        let mut lb = Loopback::new(LoopbackOptions::default());
        let stop = AtomicBool::new(false);
        let out = assert_no_alloc::assert_no_alloc(|| eng.run(&mut lb, &stop)).unwrap();
        assert_eq!(out.reason, EndReason::Trigger(9));
        assert_eq!(out.end_ns - out.start_ns, 300_000_000);
        assert_eq!(out.beats, 6);
        let beats: Vec<(u32, u64, u8)> = eng
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Metronome && e.note.unwrap().on)
            .map(|e| {
                (
                    e.index,
                    (e.intended_ns.unwrap() - out.start_ns) / 1_000_000,
                    e.note.unwrap().velocity,
                )
            })
            .collect();
        // Beats 1–3 every 20 ms, then every 10 ms; beats 3 and 6 are rests.
        assert_eq!(
            beats,
            [(1, 20, 127), (2, 40, 100), (4, 70, 127), (5, 80, 100)]
        );
        let trig: Vec<u32> = eng
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Trigger)
            .map(|e| e.index)
            .collect();
        assert_eq!(trig, [1, 2, 9]);
    }
}
