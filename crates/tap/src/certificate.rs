//! The timing certificate of a session (issue 30, item 4): a self-test of
//! the paths the experiment uses, taken before the session's first trial
//! (or by `firmtime tap certify`) and kept with every trial — the
//! sidecar's `certificate`, the CSV's `certificate` rows and the `.abs`
//! header — so that a reviewer reading only a data file can see how well
//! it was timed (docs/TAP.md §11).
//!
//! Three checks, each `passed`, `failed` or `not_tested` with the reason:
//!
//! - **audio loop** ([`AudioLoopCheck`]): a test signal played out and
//!   found again on an input (the `audio roundtrip` machinery of
//!   firmtime-jack, run by the CLI): inside JACK (a connection from the
//!   certificate's output to its input: the server's graph) or through a
//!   cable from the audio output back to a capture port. Its latency is
//!   the certificate's `loop_latency_frames`.
//! - **MIDI stamping** ([`MidiStampingCheck`]): notes sent at known frames
//!   through a MIDI loop come back on the input; each input's frame and
//!   time stamp are compared with the frame it was sent at and the
//!   backend's frame clock ([`probe`]).
//! - **feedback delay** ([`FeedbackDelayCheck`]): each returned probe is
//!   answered as a keystroke would be, at its time plus the session's
//!   feedback delay, on the port the experiment's feedback goes to (MIDI,
//!   or the audio synth's port); the time it was scheduled for is compared
//!   with the time the backend reports it went out ([`probe`]).
//!
//! # Real-time contract
//!
//! None of this runs during a trial: [`probe`] allocates its bookkeeping
//! before it sends anything and runs before the session's first trial.

use serde::{Deserialize, Serialize};

use firmtime_midi::{MidiBackend, MidiMessage, OutputEvent, PortIndex};

use crate::error::{Error, ErrorKind, Result};
use crate::Experiment;

/// Version of the certificate's layout.
pub const VERSION: u32 = 1;

/// The CSV `index` of each check's `certificate` row.
pub const ROW_AUDIO_LOOP: u32 = 1;
/// See [`ROW_AUDIO_LOOP`].
pub const ROW_MIDI_STAMPING: u32 = 2;
/// See [`ROW_AUDIO_LOOP`].
pub const ROW_FEEDBACK_DELAY: u32 = 3;

/// Most probes [`probe`] sends (their notes are 0–63, feedback 64–127).
pub const MAX_PROBES: u32 = 64;

/// A check's (or the certificate's) verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Tested, within its tolerance.
    Passed,
    /// Tested, outside its tolerance (the `why` says how).
    Failed,
    /// Could not be tested here (the `why` says why).
    NotTested,
}

impl Status {
    /// `passed`, `failed`, `not tested`.
    pub fn words(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "FAILED",
            Status::NotTested => "not tested",
        }
    }
}

/// The audio loop: a test signal out and back in (`audio roundtrip`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AudioLoopCheck {
    /// Verdict.
    pub status: Status,
    /// Why it failed or was not tested; `null` when it passed.
    pub why: Option<String>,
    /// The path measured, in words (`inside JACK: A -> B`, or through the
    /// playback ports, a cable and a capture port).
    pub path: Option<String>,
    /// The round trip, frames.
    pub frames: Option<u64>,
    /// The round trip, ms.
    pub ms: Option<f64>,
    /// What it should be when known (a loop inside JACK: one period), frames.
    pub expected_frames: Option<u64>,
    /// Test bursts played.
    pub bursts: Option<u32>,
    /// Bursts that came back at `frames`.
    pub agreeing: Option<u32>,
    /// Bursts near an xrun or a dropped cycle (not trusted when others are).
    #[serde(default)]
    pub disturbed: Option<u32>,
    /// JACK's playback latency of the output (max), frames.
    pub playback_latency_frames: Option<u32>,
    /// JACK's capture latency of the input (max), frames.
    pub capture_latency_frames: Option<u32>,
    /// `frames` − (playback + capture latency): what the loop adds beyond
    /// what JACK reports, frames.
    pub extra_frames: Option<i64>,
    /// Xruns during the measurement.
    pub xruns: Option<u64>,
    /// Dropped cycles during the measurement.
    pub frame_gaps: Option<u64>,
    /// Measurements made: one disturbed by xruns or dropped cycles that
    /// failed is made again (at most 3); the last is kept.
    #[serde(default)]
    pub attempts: u32,
}

impl AudioLoopCheck {
    /// A check not run, for `why`.
    pub fn not_tested(why: impl Into<String>) -> Self {
        AudioLoopCheck {
            status: Status::NotTested,
            why: Some(why.into()),
            path: None,
            frames: None,
            ms: None,
            expected_frames: None,
            bursts: None,
            agreeing: None,
            disturbed: None,
            playback_latency_frames: None,
            capture_latency_frames: None,
            extra_frames: None,
            xruns: None,
            frame_gaps: None,
            attempts: 0,
        }
    }
}

/// MIDI stamping against the backend's frame clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MidiStampingCheck {
    /// Verdict.
    pub status: Status,
    /// Why it failed or was not tested; `null` when it passed.
    pub why: Option<String>,
    /// The loop the probes went through, in words.
    pub path: Option<String>,
    /// Probe notes sent.
    pub probes: u32,
    /// Probes that came back on the input.
    pub returned: u32,
    /// Frames from a probe's output frame to its input frame (the value
    /// most probes had).
    pub loop_frames: Option<u64>,
    /// What it should be: one period (a loop inside JACK's graph delivers
    /// in the next cycle), frames.
    pub expected_frames: Option<u64>,
    /// Largest |input frame − output frame − expected|, frames.
    pub frame_error_max: Option<u64>,
    /// Largest |input time stamp − (output time + the loop's frames at the
    /// sample rate)|: how far the backend's time stamps stray from its
    /// frame clock, µs.
    pub stamp_error_max_us: Option<f64>,
    /// Mean of the same, signed, µs.
    pub stamp_error_mean_us: Option<f64>,
    /// The tolerance of `stamp_error_max_us`: the trial's late threshold
    /// (1000 µs), the accuracy its self-checks hold outputs to, µs. (A
    /// dummy server's cycle times follow its wake-ups, so a loaded machine
    /// shows tens to hundreds of µs here; a sound card's, filtered by
    /// JACK's DLL, a few.)
    pub tolerance_us: Option<f64>,
    /// Xruns the backend saw during the probes (this attempt).
    #[serde(default)]
    pub xruns: u64,
    /// Dropped cycles it saw during them.
    #[serde(default)]
    pub frame_gaps: u64,
    /// Probe runs made: a run disturbed by xruns or dropped cycles that
    /// failed is run again (at most 3); the last is kept.
    #[serde(default)]
    pub attempts: u32,
}

impl MidiStampingCheck {
    /// A check not run, for `why`.
    pub fn not_tested(why: impl Into<String>) -> Self {
        MidiStampingCheck {
            status: Status::NotTested,
            why: Some(why.into()),
            path: None,
            probes: 0,
            returned: 0,
            loop_frames: None,
            expected_frames: None,
            frame_error_max: None,
            stamp_error_max_us: None,
            stamp_error_mean_us: None,
            tolerance_us: None,
            xruns: 0,
            frame_gaps: 0,
            attempts: 0,
        }
    }
}

/// The feedback delay as scheduled against as emitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeedbackDelayCheck {
    /// Verdict.
    pub status: Status,
    /// Why it failed or was not tested; `null` when it passed.
    pub why: Option<String>,
    /// Where the feedback went (`MIDI`, `audio (the synth's port)`).
    pub output: Option<String>,
    /// The delays used, ms (distinct, ascending; at most 8 listed).
    pub delays_ms: Vec<f64>,
    /// Feedback outputs scheduled (one per returned probe).
    pub scheduled: u32,
    /// Those the backend reported sent.
    pub emitted: u32,
    /// Those that went out more than `tolerance_us` after their time.
    pub late: u32,
    /// Those that went out before their time (more than 1 µs).
    pub early: u32,
    /// Mean of emitted − scheduled, µs.
    pub error_mean_us: Option<f64>,
    /// Largest emitted − scheduled, µs.
    pub error_max_us: Option<f64>,
    /// How late an output may go out and still count as on time: the
    /// trial's late threshold (1000 µs), as its self-checks count late
    /// outputs, µs.
    pub tolerance_us: f64,
    /// The shortest feedback delay the backend can meet, ms.
    pub minimum_delay_ms: f64,
    /// Xruns the backend saw during the probes (this attempt).
    #[serde(default)]
    pub xruns: u64,
    /// Dropped cycles it saw during them.
    #[serde(default)]
    pub frame_gaps: u64,
    /// Probe runs made (as [`MidiStampingCheck::attempts`]).
    #[serde(default)]
    pub attempts: u32,
}

impl FeedbackDelayCheck {
    /// A check not run, for `why`.
    pub fn not_tested(why: impl Into<String>) -> Self {
        FeedbackDelayCheck {
            status: Status::NotTested,
            why: Some(why.into()),
            output: None,
            delays_ms: Vec::new(),
            scheduled: 0,
            emitted: 0,
            late: 0,
            early: 0,
            error_mean_us: None,
            error_max_us: None,
            tolerance_us: 0.0,
            minimum_delay_ms: 0.0,
            xruns: 0,
            frame_gaps: 0,
            attempts: 0,
        }
    }
}

/// The timing certificate: the sidecar's `certificate` (docs/TAP.md §11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// [`VERSION`].
    pub version: u32,
    /// False when no certificate was taken (`--no-certify`): every check is
    /// `not_tested` and `not_tested` says why.
    pub certified: bool,
    /// Passed: every check that could be tested passed (at least one was);
    /// failed: one failed; not_tested: none could be tested.
    pub status: Status,
    /// When it was taken: `before the session` or `by tap certify`.
    pub taken: String,
    /// The time it was taken, UTC (RFC 3339); `null` when not taken.
    pub at: Option<String>,
    /// The backend, in words.
    pub backend: String,
    /// The backend's sample rate (JACK), Hz.
    pub sample_rate: Option<u32>,
    /// Its period (JACK), frames.
    pub period: Option<u32>,
    /// The audio loop's latency, frames (`null`: not measured).
    pub loop_latency_frames: Option<u64>,
    /// The same, ms.
    pub loop_latency_ms: Option<f64>,
    /// The audio loop.
    pub audio_loop: AudioLoopCheck,
    /// MIDI stamping against the frame clock.
    pub midi_stamping: MidiStampingCheck,
    /// The feedback delay, scheduled against emitted.
    pub feedback_delay: FeedbackDelayCheck,
    /// What could not be tested and why, one sentence each.
    pub not_tested: Vec<String>,
}

impl Certificate {
    /// A certificate of the three checks (its status, loop latency and
    /// `not_tested` list follow from them).
    pub fn new(
        taken: impl Into<String>,
        at: Option<String>,
        backend: impl Into<String>,
        clock: Option<FrameClock>,
        audio_loop: AudioLoopCheck,
        midi_stamping: MidiStampingCheck,
        feedback_delay: FeedbackDelayCheck,
    ) -> Self {
        let statuses = [
            audio_loop.status,
            midi_stamping.status,
            feedback_delay.status,
        ];
        let status = if statuses.contains(&Status::Failed) {
            Status::Failed
        } else if statuses.contains(&Status::Passed) {
            Status::Passed
        } else {
            Status::NotTested
        };
        let mut not_tested = Vec::new();
        for (what, s, why) in [
            ("audio loop", audio_loop.status, &audio_loop.why),
            ("MIDI stamping", midi_stamping.status, &midi_stamping.why),
            ("feedback delay", feedback_delay.status, &feedback_delay.why),
        ] {
            if s == Status::NotTested {
                not_tested.push(format!(
                    "{what}: {}",
                    why.as_deref().unwrap_or("no reason given")
                ));
            }
        }
        Certificate {
            version: VERSION,
            certified: true,
            status,
            taken: taken.into(),
            at,
            backend: backend.into(),
            sample_rate: clock.map(|c| c.sample_rate),
            period: clock.map(|c| c.period),
            loop_latency_frames: audio_loop
                .frames
                .filter(|_| audio_loop.status == Status::Passed),
            loop_latency_ms: audio_loop
                .ms
                .filter(|_| audio_loop.status == Status::Passed),
            audio_loop,
            midi_stamping,
            feedback_delay,
            not_tested,
        }
    }

    /// No certificate taken, for `why` (e.g. `not certified, by request
    /// (--no-certify)`).
    pub fn not_taken(why: &str, backend: impl Into<String>) -> Self {
        Certificate {
            version: VERSION,
            certified: false,
            status: Status::NotTested,
            taken: "not taken".into(),
            at: None,
            backend: backend.into(),
            sample_rate: None,
            period: None,
            loop_latency_frames: None,
            loop_latency_ms: None,
            audio_loop: AudioLoopCheck::not_tested(why),
            midi_stamping: MidiStampingCheck::not_tested(why),
            feedback_delay: FeedbackDelayCheck::not_tested(why),
            not_tested: vec![format!("everything: {why}")],
        }
    }

    /// The certificate in words: a heading and one line per check (and
    /// what could not be tested), for stderr, `tap analyze` and the `.abs`
    /// header.
    pub fn lines(&self) -> Vec<String> {
        if !self.certified {
            return vec![format!(
                "timing certificate: none — {}",
                self.audio_loop.why.as_deref().unwrap_or("not taken")
            )];
        }
        let mut v = vec![format!(
            "timing certificate ({}{}; {}): {}",
            self.taken,
            self.at
                .as_ref()
                .map_or(String::new(), |t| format!(" at {t}")),
            self.backend,
            match self.status {
                Status::Passed => "PASSED",
                Status::Failed => "FAILED",
                Status::NotTested => "nothing could be tested",
            }
        )];
        let a = &self.audio_loop;
        v.push(format!(
            "  audio loop: {}{}",
            a.status.words(),
            match (a.frames, a.ms) {
                (Some(f), Some(ms)) => format!(
                    ": {f} frames ({ms:.3} ms){} through {}; {} of {} bursts agree ({} disturbed), {} xruns, {} dropped cycles{}",
                    a.expected_frames
                        .map_or(String::new(), |e| format!(" (expected {e})")),
                    a.path.as_deref().unwrap_or("?"),
                    a.agreeing.unwrap_or(0),
                    a.bursts.unwrap_or(0),
                    a.disturbed.unwrap_or(0),
                    a.xruns.unwrap_or(0),
                    a.frame_gaps.unwrap_or(0),
                    a.why.as_ref().map_or(String::new(), |w| format!(" — {w}")),
                ),
                _ => format!(" — {}", a.why.as_deref().unwrap_or("")),
            }
        ));
        if a.attempts > 1 {
            if let Some(l) = v.last_mut() {
                l.push_str(&format!(" ({} attempts, the last kept)", a.attempts));
            }
        }
        let m = &self.midi_stamping;
        v.push(format!(
            "  MIDI stamping: {}{}",
            m.status.words(),
            match (m.loop_frames, m.stamp_error_max_us) {
                (Some(l), Some(e)) => format!(
                    ": {} of {} probes back {l} frames after they went out{}, max frame error {}, max time stamp error {e:.2} µs (tolerance {:.2} µs) through {}{}",
                    m.returned,
                    m.probes,
                    m.expected_frames
                        .map_or(String::new(), |x| format!(" (expected {x})")),
                    m.frame_error_max.unwrap_or(0),
                    m.tolerance_us.unwrap_or(0.0),
                    m.path.as_deref().unwrap_or("?"),
                    m.why.as_ref().map_or(String::new(), |w| format!(" — {w}")),
                ),
                _ => format!(" — {}", m.why.as_deref().unwrap_or("")),
            }
        ));
        if let Some(l) = v.last_mut() {
            l.push_str(&disturbance(m.xruns, m.frame_gaps, m.attempts));
        }
        let f = &self.feedback_delay;
        v.push(format!(
            "  feedback delay: {}{}",
            f.status.words(),
            match (f.error_mean_us, f.error_max_us) {
                (Some(mean), Some(max)) => format!(
                    ": {} of {} scheduled at {} ms went out to {} {mean:.1} µs after their time on average, at most {max:.1} µs (tolerance {:.1} µs); {} late, {} early{}",
                    f.emitted,
                    f.scheduled,
                    list_ms(&f.delays_ms),
                    f.output.as_deref().unwrap_or("?"),
                    f.tolerance_us,
                    f.late,
                    f.early,
                    f.why.as_ref().map_or(String::new(), |w| format!(" — {w}")),
                ),
                _ => format!(" — {}", f.why.as_deref().unwrap_or("")),
            }
        ));
        v
    }

    /// The certificate in one line (`tap analyze`'s JSON, the live line).
    pub fn summary(&self) -> String {
        if !self.certified {
            return format!(
                "timing certificate: none — {}",
                self.audio_loop.why.as_deref().unwrap_or("not taken")
            );
        }
        format!(
            "timing certificate {}: audio loop {}{}, MIDI stamping {}, feedback delay {}",
            match self.status {
                Status::Passed => "passed",
                Status::Failed => "FAILED",
                Status::NotTested => "(nothing tested)",
            },
            self.audio_loop.status.words(),
            self.loop_latency_ms
                .map_or(String::new(), |ms| format!(" ({ms:.3} ms)")),
            self.midi_stamping.status.words(),
            self.feedback_delay.status.words(),
        )
    }

    /// Its rows in the trial CSV (kind `certificate`): one per check that
    /// was tested, in check order.
    pub fn csv_rows(&self) -> Vec<CertificateRow> {
        let mut rows = Vec::new();
        let us = |frames: u64| -> Option<i64> {
            let rate = f64::from(self.sample_rate?);
            Some((frames as f64 * 1e6 / rate).round() as i64)
        };
        let a = &self.audio_loop;
        if a.status != Status::NotTested {
            if let Some(ms) = a.ms {
                rows.push(CertificateRow {
                    check: ROW_AUDIO_LOOP,
                    expected_us: a.expected_frames.and_then(us),
                    measured_us: (ms * 1000.0).round() as i64,
                    passed: a.status == Status::Passed,
                });
            }
        }
        let m = &self.midi_stamping;
        if m.status != Status::NotTested {
            if let (Some(l), Some(e)) = (m.loop_frames, m.stamp_error_max_us) {
                rows.push(CertificateRow {
                    check: ROW_MIDI_STAMPING,
                    expected_us: m.expected_frames.and_then(us),
                    measured_us: us(l).map_or(0, |v| v + e.round() as i64),
                    passed: m.status == Status::Passed,
                });
            }
        }
        let f = &self.feedback_delay;
        if f.status != Status::NotTested {
            if let Some(max) = f.error_max_us {
                let d = f.delays_ms.last().copied().unwrap_or(0.0) * 1000.0;
                rows.push(CertificateRow {
                    check: ROW_FEEDBACK_DELAY,
                    expected_us: Some(d.round() as i64),
                    measured_us: (d + max).round() as i64,
                    passed: f.status == Status::Passed,
                });
            }
        }
        rows
    }
}

/// `; N xruns, M dropped cycles (K attempts)` when any (empty otherwise).
fn disturbance(xruns: u64, gaps: u64, attempts: u32) -> String {
    let mut s = String::new();
    if xruns + gaps > 0 {
        s.push_str(&format!("; {xruns} xruns, {gaps} dropped cycles"));
    }
    if attempts > 1 {
        s.push_str(&format!(" ({attempts} attempts, the last kept)"));
    }
    s
}

/// `a, b or c` of delays in ms.
fn list_ms(v: &[f64]) -> String {
    let s: Vec<String> = v.iter().map(|d| format!("{d:.3}")).collect();
    match s.len() {
        0 => "-".into(),
        1 => s[0].clone(),
        n => format!("{} or {}", s[..n - 1].join(", "), s[n - 1]),
    }
}

/// One `certificate` row of the trial CSV (docs/TAP.md §11): `index` is
/// the check (1 audio loop, 2 MIDI stamping, 3 feedback delay),
/// `intended_us` what was expected, `actual_us` what was measured, `on` 1
/// passed / 0 failed; the other columns empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertificateRow {
    /// [`ROW_AUDIO_LOOP`], [`ROW_MIDI_STAMPING`] or [`ROW_FEEDBACK_DELAY`].
    pub check: u32,
    /// Audio loop: what the loop should take (one period inside JACK), µs;
    /// MIDI: one period, µs; feedback: the scheduled delay, µs. `None`: not known.
    pub expected_us: Option<i64>,
    /// Audio loop: the measured round trip, µs; MIDI: a probe's return
    /// time with the largest time-stamp error, µs; feedback: the delay
    /// as emitted by the latest output, µs.
    pub measured_us: i64,
    /// The check passed.
    pub passed: bool,
}

impl CertificateRow {
    /// The check's name.
    pub fn name(&self) -> &'static str {
        match self.check {
            ROW_AUDIO_LOOP => "audio loop",
            ROW_MIDI_STAMPING => "MIDI stamping",
            ROW_FEEDBACK_DELAY => "feedback delay",
            _ => "unknown check",
        }
    }

    /// The CSV fields of the row, `columns` wide.
    pub fn fields(&self, columns: usize) -> Vec<String> {
        let mut f = vec![String::new(); columns.max(8)];
        f[0] = "certificate".into();
        f[1] = self.check.to_string();
        f[2] = self.expected_us.map(|v| v.to_string()).unwrap_or_default();
        f[3] = self.measured_us.to_string();
        f[7] = u8::from(self.passed).to_string();
        f
    }
}

/// A certificate as a trial file holds it: the sidecar's, else the CSV's
/// rows (figures only), else none.
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    /// The sidecar's `certificate`.
    Sidecar(Box<Certificate>),
    /// No sidecar certificate, but `certificate` rows in the CSV.
    Rows(Vec<CertificateRow>),
    /// None: a file from before firmtime took certificates (or no sidecar).
    None,
}

impl Recorded {
    /// One line for `tap analyze`.
    pub fn summary(&self) -> String {
        match self {
            Recorded::Sidecar(c) => c.summary(),
            Recorded::Rows(rows) => format!(
                "timing certificate (from the CSV's rows; no sidecar): {}",
                rows.iter()
                    .map(|r| format!(
                        "{} {} (expected {} µs, measured {} µs)",
                        r.name(),
                        if r.passed { "passed" } else { "FAILED" },
                        r.expected_us.map_or("-".into(), |v| v.to_string()),
                        r.measured_us
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Recorded::None => "no timing certificate (recorded before firmtime took one)".into(),
        }
    }
}

/// A backend's frame clock: JACK's sample rate and period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameClock {
    /// Hz.
    pub sample_rate: u32,
    /// Frames per period.
    pub period: u32,
}

impl FrameClock {
    /// One frame, ns.
    pub fn frame_ns(self) -> f64 {
        1e9 / f64::from(self.sample_rate.max(1))
    }
}

/// How a returned probe is answered: as a keystroke of an experiment would be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackPlan {
    /// The delay, ns.
    pub delay_ns: u64,
    /// The output port (MIDI, or the synth's).
    pub port: PortIndex,
    /// The channel, 0–15.
    pub channel: u8,
}

/// What [`probe`] does.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbePlan {
    /// The MIDI output whose notes come back on the input.
    pub probe_port: PortIndex,
    /// Probes to send (1..=[`MAX_PROBES`]).
    pub probes: u32,
    /// Time between probes, ns.
    pub spacing_ns: u64,
    /// Probe *k* is answered with `feedback[k % len]`; empty: no feedback.
    pub feedback: Vec<FeedbackPlan>,
    /// The backend's frame clock (`None`: it has none; stamping is not tested).
    pub clock: Option<FrameClock>,
    /// Why stamping is not tested without a frame clock.
    pub no_clock_why: String,
    /// The loop the probes go through, in words.
    pub path: String,
    /// Where the feedback goes, in words.
    pub feedback_output: String,
    /// An output later than this after its time is late, ns.
    pub tolerance_ns: u64,
    /// A time stamp further than this from its frame's time fails the
    /// stamping check, ns.
    pub stamp_tolerance_ns: u64,
    /// The shortest feedback delay the backend can meet, ns.
    pub minimum_delay_ns: u64,
}

/// The feedback plans of `experiments` for `probes` probes: each
/// experiment with feedback (its first feedback channel that is on)
/// answers probes in turn with delays drawn as in a trial (seeded by
/// `seed`), on `port_of(experiment)` (its MIDI or audio output).
pub fn feedback_plans(
    experiments: &[&Experiment],
    probes: u32,
    seed: u64,
    port_of: &dyn Fn(&Experiment) -> PortIndex,
) -> Vec<FeedbackPlan> {
    let with: Vec<(&Experiment, crate::Feedback)> = experiments
        .iter()
        .filter_map(|e| {
            let p = e.params();
            p.feedback.iter().find(|f| f.on).map(|f| (*e, *f))
        })
        .collect();
    if with.is_empty() {
        return Vec::new();
    }
    let mut rng = crate::Rng::new(seed);
    (0..probes)
        .map(|k| {
            let (e, f) = &with[k as usize % with.len()];
            FeedbackPlan {
                delay_ns: f.delay.sample_us(u64::from(k), &mut rng) * 1000,
                port: port_of(e),
                channel: f.channel.midi(),
            }
        })
        .collect()
}

const TAG_PROBE: u32 = 0x1000;
const TAG_PROBE_OFF: u32 = 0x2000;
const TAG_FEEDBACK: u32 = 0x3000;
const TAG_FEEDBACK_OFF: u32 = 0x4000;
/// The probes' channel (16).
const PROBE_CHANNEL: u8 = 15;

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResult {
    /// MIDI stamping.
    pub midi: MidiStampingCheck,
    /// The feedback delay.
    pub feedback: FeedbackDelayCheck,
}

impl ProbeResult {
    /// Neither check failed.
    pub fn passed(&self) -> bool {
        self.midi.status != Status::Failed && self.feedback.status != Status::Failed
    }

    /// The backend saw xruns or dropped cycles during the probes.
    pub fn disturbed(&self) -> bool {
        self.midi.xruns + self.midi.frame_gaps > 0
    }
}

/// [`probe`] up to `attempts` times, until a run passes or is not
/// disturbed by xruns or dropped cycles (those move JACK's frame clock
/// against time: a failure then says more about that moment than about the
/// path); the last run is kept, its `attempts` set.
///
/// # Errors
/// As [`probe`].
pub fn probe_attempts(
    backend: &mut dyn MidiBackend,
    plan: &ProbePlan,
    attempts: u32,
) -> Result<ProbeResult> {
    let mut n = 0;
    loop {
        n += 1;
        let mut r = probe(backend, plan)?;
        r.midi.attempts = n;
        r.feedback.attempts = n;
        if r.passed() || !r.disturbed() || n >= attempts.max(1) {
            return Ok(r);
        }
    }
}

/// Sends `plan.probes` note-ons (channel 16, notes 0…) 100 ms from now,
/// `spacing_ns` apart, on a MIDI output whose notes come back on the
/// backend's input; answers each returned probe as a keystroke (feedback
/// at its input time + the delay, notes 64…); and compares frames and
/// times (see the module docs). Returns after every probe and answer is
/// accounted for, or 1 s after the last was due.
///
/// # Errors
/// [`ErrorKind::Invalid`] for a plan out of range; [`ErrorKind::Backend`]
/// when the backend disconnects or refuses an output.
pub fn probe(backend: &mut dyn MidiBackend, plan: &ProbePlan) -> Result<ProbeResult> {
    if !(1..=MAX_PROBES).contains(&plan.probes) || plan.spacing_ns == 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!(
                "certificate: {} probes {} ns apart (1–{MAX_PROBES} probes, spacing > 0)",
                plan.probes, plan.spacing_ns
            ),
        ));
    }
    let backend_err = |what: &str, e: firmtime_midi::BackendError| {
        Error::new(ErrorKind::Backend, format!("certificate: {what}: {e}"))
    };
    let n = plan.probes as usize;
    let now = firmtime_rt::clock::monotonic_ns();
    let t0 = now + 100_000_000;
    // Drain what is queued: it is no probe.
    let _ = backend.poll_input(&mut |_| {});
    backend.poll_sent(&mut |_| {});
    let mut sent: Vec<Option<(u64, Option<u64>)>> = vec![None; n];
    let mut back: Vec<Option<(u64, Option<u64>)>> = vec![None; n];
    let mut fb_due: Vec<Option<u64>> = vec![None; n];
    let mut fb_sent: Vec<Option<u64>> = vec![None; n];
    let stats0 = backend.stats();
    for k in 0..n {
        let at = t0 + k as u64 * plan.spacing_ns;
        for (tag, at, msg) in [
            (
                TAG_PROBE,
                at,
                MidiMessage::NoteOn {
                    channel: PROBE_CHANNEL,
                    note: k as u8,
                    velocity: 64,
                },
            ),
            (
                TAG_PROBE_OFF,
                at + 5_000_000,
                MidiMessage::NoteOff {
                    channel: PROBE_CHANNEL,
                    note: k as u8,
                    velocity: 0,
                },
            ),
        ] {
            backend
                .send(OutputEvent {
                    at_ns: Some(at),
                    port: plan.probe_port,
                    msg,
                    tag: tag | k as u32,
                })
                .map_err(|e| backend_err("sending a probe", e))?;
        }
    }
    let max_delay = plan.feedback.iter().map(|f| f.delay_ns).max().unwrap_or(0);
    let deadline = t0 + n as u64 * plan.spacing_ns + max_delay + 100_000_000 + 1_000_000_000;
    let mut failure = None;
    loop {
        let now = firmtime_rt::clock::monotonic_ns();
        let done = (0..n).all(|k| {
            sent[k].is_some()
                && back[k].is_some()
                && (plan.feedback.is_empty() || fb_sent[k].is_some())
        });
        if done || now >= deadline {
            break;
        }
        if let Err(e) = backend.wait((now + 1_000_000).min(deadline)) {
            failure = Some(backend_err("waiting", e));
            break;
        }
        let mut answers = Vec::new();
        let polled = backend.poll_input(&mut |ev| {
            if let MidiMessage::NoteOn {
                channel,
                note,
                velocity,
            } = ev.msg
            {
                let k = usize::from(note);
                if channel == PROBE_CHANNEL && velocity > 0 && k < n && back[k].is_none() {
                    back[k] = Some((ev.t_ns, ev.frame));
                    answers.push((k, ev.t_ns));
                }
            }
        });
        if let Err(e) = polled {
            failure = Some(backend_err("reading the input", e));
            break;
        }
        for (k, t) in answers {
            let Some(f) = plan.feedback.get(k % plan.feedback.len().max(1)).copied() else {
                continue;
            };
            let at = t + f.delay_ns;
            fb_due[k] = Some(at);
            let note = 64 + k as u8;
            for (tag, at, msg) in [
                (
                    TAG_FEEDBACK,
                    at,
                    MidiMessage::NoteOn {
                        channel: f.channel,
                        note,
                        velocity: 100,
                    },
                ),
                (
                    TAG_FEEDBACK_OFF,
                    at + 20_000_000,
                    MidiMessage::NoteOff {
                        channel: f.channel,
                        note,
                        velocity: 0,
                    },
                ),
            ] {
                backend
                    .send(OutputEvent {
                        at_ns: Some(at),
                        port: f.port,
                        msg,
                        tag: tag | k as u32,
                    })
                    .map_err(|e| backend_err("sending feedback", e))?;
            }
        }
        backend.poll_sent(&mut |s| {
            let k = (s.tag & 0xfff) as usize;
            if k >= n {
                return;
            }
            match s.tag & !0xfff {
                TAG_PROBE => sent[k] = Some((s.actual_ns, s.frame)),
                TAG_FEEDBACK => fb_sent[k] = Some(s.actual_ns),
                _ => {}
            }
        });
    }
    if let Some(e) = failure {
        return Err(e);
    }
    // Let the note-offs go out before the backend is used again.
    let quiet = firmtime_rt::clock::monotonic_ns() + 50_000_000;
    while firmtime_rt::clock::monotonic_ns() < quiet {
        let _ = backend.wait(quiet);
        let _ = backend.poll_input(&mut |_| {});
        backend.poll_sent(&mut |_| {});
    }
    let stats = backend.stats();
    let xruns = stats.xruns.saturating_sub(stats0.xruns);
    let frame_gaps = stats.frame_gaps.saturating_sub(stats0.frame_gaps);
    let mut midi = stamping(plan, &sent, &back);
    let mut fb = feedback(plan, &back, &fb_due, &fb_sent);
    for (status, why) in [(midi.status, &mut midi.why), (fb.status, &mut fb.why)] {
        if status == Status::Failed && xruns + frame_gaps > 0 {
            if let Some(w) = why.as_mut() {
                w.push_str(&format!(
                    " ({xruns} xruns and {frame_gaps} dropped cycles during the probes)"
                ));
            }
        }
    }
    midi.xruns = xruns;
    midi.frame_gaps = frame_gaps;
    midi.attempts = 1;
    fb.xruns = xruns;
    fb.frame_gaps = frame_gaps;
    fb.attempts = 1;
    Ok(ProbeResult { midi, feedback: fb })
}

/// The MIDI stamping check from each probe's output and input (time, frame).
fn stamping(
    plan: &ProbePlan,
    sent: &[Option<(u64, Option<u64>)>],
    back: &[Option<(u64, Option<u64>)>],
) -> MidiStampingCheck {
    let returned = back.iter().filter(|b| b.is_some()).count() as u32;
    let Some(clock) = plan.clock else {
        return MidiStampingCheck {
            probes: plan.probes,
            returned,
            path: Some(plan.path.clone()),
            ..MidiStampingCheck::not_tested(plan.no_clock_why.clone())
        };
    };
    let pairs: Vec<(i64, f64)> = sent
        .iter()
        .zip(back)
        .filter_map(|(s, b)| {
            let ((st, Some(sf)), (bt, Some(bf))) = ((*s)?, (*b)?) else {
                return None;
            };
            let frames = bf as i64 - sf as i64;
            let err_ns = bt as f64 - st as f64 - frames as f64 * clock.frame_ns();
            Some((frames, err_ns))
        })
        .collect();
    let expected = u64::from(clock.period);
    let tolerance_us = plan.stamp_tolerance_ns as f64 / 1000.0;
    let mut check = MidiStampingCheck {
        status: Status::Failed,
        why: None,
        path: Some(plan.path.clone()),
        probes: plan.probes,
        returned,
        loop_frames: None,
        expected_frames: Some(expected),
        frame_error_max: None,
        stamp_error_max_us: None,
        stamp_error_mean_us: None,
        tolerance_us: Some(tolerance_us),
        ..MidiStampingCheck::not_tested("")
    };
    if pairs.is_empty() {
        check.why = Some(format!(
            "none of {} probes came back with its frames through {} (is the loop connected?)",
            plan.probes, plan.path
        ));
        return check;
    }
    let mut counts = std::collections::BTreeMap::new();
    for (f, _) in &pairs {
        *counts.entry(*f).or_insert(0u32) += 1;
    }
    let mode = counts
        .iter()
        .max_by_key(|(f, c)| (**c, -**f))
        .map_or(0, |(f, _)| *f);
    let frame_err = pairs
        .iter()
        .map(|(f, _)| (f - expected as i64).unsigned_abs())
        .max()
        .unwrap_or(0);
    let max_us = pairs.iter().map(|(_, e)| e.abs()).fold(0.0, f64::max) / 1000.0;
    let mean_us = pairs.iter().map(|(_, e)| e).sum::<f64>() / pairs.len() as f64 / 1000.0;
    check.loop_frames = Some(mode.max(0) as u64);
    check.frame_error_max = Some(frame_err);
    check.stamp_error_max_us = Some(max_us);
    check.stamp_error_mean_us = Some(mean_us);
    let mut why = Vec::new();
    if returned < plan.probes {
        why.push(format!(
            "{} of {} probes did not come back",
            plan.probes - returned,
            plan.probes
        ));
    }
    if frame_err > 0 {
        why.push(format!(
            "a probe came back {frame_err} frame(s) off the expected {expected}"
        ));
    }
    if max_us > tolerance_us {
        why.push(format!(
            "a time stamp strayed {max_us:.2} µs from its frame's time (tolerance {tolerance_us:.2} µs)"
        ));
    }
    if why.is_empty() {
        check.status = Status::Passed;
    } else {
        check.why = Some(why.join("; "));
    }
    check
}

/// The feedback check from each returned probe's answer: due and sent times.
fn feedback(
    plan: &ProbePlan,
    back: &[Option<(u64, Option<u64>)>],
    due: &[Option<u64>],
    sent: &[Option<u64>],
) -> FeedbackDelayCheck {
    let tolerance_us = plan.tolerance_ns as f64 / 1000.0;
    let minimum_delay_ms = plan.minimum_delay_ns as f64 / 1e6;
    if plan.feedback.is_empty() {
        return FeedbackDelayCheck {
            tolerance_us,
            minimum_delay_ms,
            ..FeedbackDelayCheck::not_tested(
                "no experiment of this session feeds keystrokes back ([feedback] is off)",
            )
        };
    }
    let mut delays: Vec<u64> = plan.feedback.iter().map(|f| f.delay_ns).collect();
    delays.sort_unstable();
    delays.dedup();
    let errors: Vec<i64> = due
        .iter()
        .zip(sent)
        .filter_map(|(d, s)| Some(s.as_ref().copied()? as i64 - d.as_ref().copied()? as i64))
        .collect();
    let scheduled = due.iter().filter(|d| d.is_some()).count() as u32;
    let emitted = errors.len() as u32;
    let late = errors
        .iter()
        .filter(|&&e| e as f64 > plan.tolerance_ns as f64)
        .count() as u32;
    let early = errors.iter().filter(|&&e| e < -1000).count() as u32;
    let mut check = FeedbackDelayCheck {
        status: Status::Failed,
        why: None,
        output: Some(plan.feedback_output.clone()),
        delays_ms: delays.iter().take(8).map(|&d| d as f64 / 1e6).collect(),
        scheduled,
        emitted,
        late,
        early,
        error_mean_us: (!errors.is_empty())
            .then(|| errors.iter().sum::<i64>() as f64 / errors.len() as f64 / 1000.0),
        error_max_us: errors.iter().max().map(|&e| e as f64 / 1000.0),
        tolerance_us,
        minimum_delay_ms,
        ..FeedbackDelayCheck::not_tested("")
    };
    let returned = back.iter().filter(|b| b.is_some()).count() as u32;
    let mut why = Vec::new();
    if scheduled == 0 {
        why.push(format!(
            "no probe came back to be answered ({returned} of {} returned)",
            plan.probes
        ));
    }
    if emitted < scheduled {
        why.push(format!(
            "{} of {scheduled} feedback outputs were not reported sent",
            scheduled - emitted
        ));
    }
    if late > 0 {
        let short = delays.iter().any(|&d| d < plan.minimum_delay_ns);
        why.push(format!(
            "{late} of {emitted} went out more than {tolerance_us:.1} µs after their time (worst {:.3} ms){}",
            check.error_max_us.unwrap_or(0.0) / 1000.0,
            if short {
                format!(
                    ": a delay is under the backend's minimum {minimum_delay_ms:.3} ms (docs/TAP.md §5, \"JACK latency\")"
                )
            } else {
                String::new()
            }
        ));
    }
    if early > 0 {
        why.push(format!("{early} of {emitted} went out before their time"));
    }
    if why.is_empty() {
        check.status = Status::Passed;
    } else {
        check.why = Some(why.join("; "));
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmtime_midi::loopback::{Loopback, LoopbackOptions};

    fn plan(feedback: Vec<FeedbackPlan>, clock: Option<FrameClock>) -> ProbePlan {
        ProbePlan {
            probe_port: 0,
            probes: 8,
            spacing_ns: 10_000_000,
            feedback,
            clock,
            no_clock_why: "the loopback backend has no frame clock".into(),
            path: "in-process loopback".into(),
            feedback_output: "MIDI".into(),
            tolerance_ns: 1_000_000,
            stamp_tolerance_ns: 1_000_000,
            minimum_delay_ns: 0,
        }
    }

    #[test]
    fn probes_through_the_loopback_come_back_and_feedback_goes_out_at_its_time() {
        let mut b = Loopback::new(LoopbackOptions::default());
        let fb = vec![FeedbackPlan {
            delay_ns: 20_000_000,
            port: 0,
            channel: 0,
        }];
        let r = probe(&mut b, &plan(fb, None)).unwrap();
        assert_eq!(r.midi.status, Status::NotTested);
        assert_eq!(r.midi.returned, 8);
        assert_eq!(
            r.midi.why.as_deref(),
            Some("the loopback backend has no frame clock")
        );
        let f = &r.feedback;
        assert_eq!(
            (f.scheduled, f.emitted, f.late, f.early),
            (8, 8, 0, 0),
            "{f:?}"
        );
        assert_eq!(f.status, Status::Passed, "{f:?}");
        assert_eq!(f.delays_ms, [20.0]);
    }

    #[test]
    fn without_feedback_the_feedback_check_says_why_it_was_not_tested() {
        let mut b = Loopback::new(LoopbackOptions::default());
        let r = probe(&mut b, &plan(Vec::new(), None)).unwrap();
        assert_eq!(r.feedback.status, Status::NotTested);
        assert!(r.feedback.why.unwrap().contains("[feedback] is off"));
    }

    #[test]
    fn a_certificate_lists_what_was_not_tested_and_its_rows_what_was() {
        let fb = FeedbackDelayCheck {
            status: Status::Passed,
            why: None,
            output: Some("MIDI".into()),
            delays_ms: vec![30.0],
            scheduled: 4,
            emitted: 4,
            late: 0,
            early: 0,
            error_mean_us: Some(10.0),
            error_max_us: Some(20.0),
            tolerance_us: 20.8,
            minimum_delay_ms: 10.667,
            ..FeedbackDelayCheck::not_tested("")
        };
        let c = Certificate::new(
            "by tap certify",
            None,
            "JACK",
            Some(FrameClock {
                sample_rate: 48_000,
                period: 256,
            }),
            AudioLoopCheck::not_tested("no loop"),
            MidiStampingCheck::not_tested("no clock"),
            fb,
        );
        assert_eq!(c.status, Status::Passed);
        assert_eq!(
            c.not_tested,
            ["audio loop: no loop", "MIDI stamping: no clock"]
        );
        assert_eq!(c.loop_latency_frames, None);
        let rows = c.csv_rows();
        assert_eq!(
            rows,
            [CertificateRow {
                check: ROW_FEEDBACK_DELAY,
                expected_us: Some(30_000),
                measured_us: 30_020,
                passed: true
            }]
        );
        assert_eq!(
            rows[0].fields(8).join(","),
            "certificate,3,30000,30020,,,,1"
        );
        let lines = c.lines();
        assert!(lines[0].contains("PASSED"), "{lines:?}");
        assert!(
            lines[1].contains("audio loop: not tested — no loop"),
            "{lines:?}"
        );
        let n = Certificate::not_taken("not certified, by request (--no-certify)", "JACK");
        assert!(!n.certified);
        assert_eq!(n.status, Status::NotTested);
        assert!(n.csv_rows().is_empty());
        assert_eq!(
            n.summary(),
            "timing certificate: none — not certified, by request (--no-certify)"
        );
    }
}
