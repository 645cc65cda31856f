//! Why a `tap run` output was late, seen from the engine.
//!
//! The engine records, for each output it hands to the backend, a
//! [`Handover`]: when it was handed over, the loop pass that handed it, when
//! that pass was due and when it woke, and — for feedback — the stamp of the
//! input it answers (plain copies into storage allocated with the trial's
//! events). After the trial every late output (actual − intended above the
//! trial's threshold) is classified from those times and the backend's
//! timing ([`BackendTiming`]), and the engine's late wake-ups are named from
//! the explaining trace when there is one ([`report`]).
//!
//! # The rule
//! A backend needs an output some *lead* before its time: JACK one period
//! (the process callback that places an output at its frame runs when the
//! period holding that frame begins); the raw backend's I/O thread and the
//! loopback none (an output handed over within [`ON_TIME_NS`] of its time
//! still counts as in time there). A late output is then
//!
//! * **backend** side (`backend`) when it was handed over at least the lead
//!   before its time: the backend placed it late (a late or dropped cycle,
//!   an xrun, a late I/O thread);
//! * **engine** side when it was handed over later, and the pass that handed
//!   it woke more than [`ON_TIME_NS`] after it was due, by enough that an
//!   on-time wake-up would have handed it over in time: the explaining trace
//!   names what delayed that wake-up (a task, an interrupt, the VM…), or
//!   `not_traced`;
//! * **setup** when the experiment asks for less than the backend can do:
//!   feedback whose delay is shorter than the backend's minimum
//!   (`delay_too_short`; JACK: two periods, since the input is seen after the
//!   cycle that carried it and the answer goes out in a later one), or an
//!   output due the moment it was handed over (`immediate`: masking switched
//!   on or off, the note-offs at the trial's end), which goes out with the
//!   backend's next cycle;
//! * (input stamped before the trial started, queued while the session got
//!   ready, is dropped by the engine and gets no feedback: older sidecars
//!   name its late answers `before_start`);
//! * **backend** side (`input_late`) for feedback with a delay the backend can
//!   meet, handed over late by an engine that woke on time: its input reached
//!   the engine late;
//! * **unknown** otherwise (counted, never hidden).
//!
//! An engine delay shorter than its pause (0.49 ms) after an input arrived
//! cannot be told from a late delivery of that input: the pass is due at its
//! timeout, not at the input's arrival.

use crate::data::EventKind;
use firmtime_rt::outliers::{fmt_late, TraceCoverage, TracedCause};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Within this the engine counts as on time (a wake-up after its due time,
/// a handover after the time a lead-free backend needs it).
pub const ON_TIME_NS: u64 = 100_000;

/// How one output was handed to the backend (recorded by the engine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handover {
    /// When the engine handed it over, CLOCK_MONOTONIC ns.
    pub handed_ns: u64,
    /// The loop pass that handed it (counted from 0 in each trial): the
    /// index the pass's wake-up was noted under.
    pub pass: u64,
    /// When that pass was due: the deadline of the wait before it, ns.
    pub due_ns: u64,
    /// When that pass woke, ns.
    pub wake_ns: u64,
    /// Feedback: the stamp of the input it answers, ns.
    pub input_ns: Option<u64>,
}

impl Handover {
    /// How late the pass woke, ns (0 when it woke early: input arrived).
    pub fn wake_late_ns(&self) -> u64 {
        self.wake_ns.saturating_sub(self.due_ns)
    }
}

/// One late output of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateOutput {
    /// What it is.
    pub kind: EventKind,
    /// Its keystroke, beat or 0.
    pub index: u32,
    /// When it was due, ns.
    pub intended_ns: u64,
    /// When it went out, ns.
    pub actual_ns: u64,
    /// How the engine handed it over.
    pub handover: Handover,
}

impl LateOutput {
    /// actual − intended, ns.
    pub fn late_ns(&self) -> u64 {
        self.actual_ns.saturating_sub(self.intended_ns)
    }
}

/// What the backend needs, for [`classify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTiming {
    /// How long before its time an output must be handed over, ns.
    pub lead_ns: u64,
    /// The shortest feedback delay the backend can meet, ns.
    pub min_feedback_ns: u64,
    /// Where the figures come from, in words (`JACK, 256 frames at 48000 Hz`).
    pub what: String,
}

impl BackendTiming {
    /// JACK at `frames` per period and `rate` Hz: one period of lead, two
    /// periods of minimum feedback delay.
    pub fn jack(rate: u32, frames: u32) -> BackendTiming {
        let period = u64::from(frames) * 1_000_000_000 / u64::from(rate.max(1));
        BackendTiming {
            lead_ns: period,
            min_feedback_ns: 2 * period,
            what: format!("JACK, {frames} frames at {rate} Hz"),
        }
    }

    /// A backend that writes each output at its time from a thread of its
    /// own (raw), or the loopback: no lead, no minimum.
    pub fn at_once(what: &str) -> BackendTiming {
        BackendTiming {
            lead_ns: 0,
            min_feedback_ns: 0,
            what: what.into(),
        }
    }
}

/// Who made an output late.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The experiment asks for less than the backend can do.
    Setup,
    /// The engine's loop woke late.
    Engine,
    /// The backend placed it, or delivered its input, late.
    Backend,
    /// Cannot say from the times.
    #[default]
    Unknown,
}

impl Side {
    /// In plain words.
    pub fn words(self) -> &'static str {
        match self {
            Side::Setup => "setup",
            Side::Engine => "engine late",
            Side::Backend => "backend side",
            Side::Unknown => "unknown",
        }
    }
}

/// The class of a late output by the rule of the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Handed over in time; the backend placed it late.
    Backend,
    /// The handing pass woke late, and that made it late.
    EngineWokeLate,
    /// Feedback with a delay below the backend's minimum.
    DelayTooShort,
    /// Due the moment it was handed over, on a backend with a lead.
    Immediate,
    /// Feedback whose input reached an on-time engine late.
    InputLate,
    /// None of the above.
    Unknown,
}

/// Classifies one late output (pure; see the [module docs](self)).
pub fn classify(o: &LateOutput, t: &BackendTiming) -> Class {
    let h = &o.handover;
    let grace = if t.lead_ns == 0 { ON_TIME_NS } else { 0 };
    let in_time = |handed: u64| handed + t.lead_ns <= o.intended_ns + grace;
    if in_time(h.handed_ns) {
        return Class::Backend;
    }
    let wake_late = h.wake_late_ns();
    if wake_late > ON_TIME_NS && in_time(h.handed_ns.saturating_sub(wake_late)) {
        return Class::EngineWokeLate;
    }
    match h.input_ns {
        Some(s) if o.intended_ns.saturating_sub(s) < t.min_feedback_ns => Class::DelayTooShort,
        Some(_) => Class::InputLate,
        None if t.lead_ns > 0 && o.intended_ns <= h.handed_ns => Class::Immediate,
        None => Class::Unknown,
    }
}

/// Late outputs sharing a cause (`self_checks.late_causes` in a trial's sidecar).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateCause {
    /// `setup`, `engine`, `backend` or `unknown`.
    pub side: Side,
    /// `delay_too_short`, `immediate`, `backend`, `input_late`, `unknown`
    /// (`before_start` in sidecars written before input before the start
    /// was dropped);
    /// engine side: the trace's category (`task`, `irq`, `softirq`, `vm`,
    /// `self`, `idle_exit`, `irqs_off`, `slack`, `unknown`) or `not_traced`.
    pub category: String,
    /// Its name (the task's comm, the interrupt, …), or empty.
    pub name: String,
    /// In words.
    pub cause: String,
    /// Late outputs.
    pub outputs: u64,
    /// The latest of them: actual − intended, ns.
    pub worst_ns: u64,
    /// The latest one's figures, in one sentence.
    pub detail: String,
}

/// The late outputs of a trial by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LateReport {
    /// By cause, most outputs first.
    pub causes: Vec<LateCause>,
    /// Late outputs with a cause ([`is_explained`]).
    pub explained: u64,
    /// What the explaining trace covered, when it ran.
    pub trace: Option<TraceCoverage>,
}

/// Whether a category names a cause (not `unknown` or `not_traced`).
pub fn is_explained(category: &str) -> bool {
    !matches!(category, "unknown" | "not_traced")
}

/// The passes whose late wake-ups made outputs late, with how late they
/// woke: what the explaining trace should explain.
pub fn engine_wakes<'a>(
    outputs: &'a [LateOutput],
    t: &'a BackendTiming,
) -> impl Iterator<Item = (u64, i64)> + 'a {
    outputs
        .iter()
        .filter(|o| classify(o, t) == Class::EngineWokeLate)
        .map(|o| (o.handover.pass, o.handover.wake_late_ns() as i64))
}

/// What to say before a session about `e` on a backend with timing `t`:
/// one line per feedback channel whose delay can be shorter than the
/// backend's minimum, as the trial starts or as a trigger sets it (its
/// answers will be late: `delay_too_short`).
pub fn delay_warnings(e: &crate::Experiment, t: &BackendTiming) -> Vec<String> {
    use crate::params::{Delay, Setting};
    let mut out = Vec::new();
    let mut check = |voice: usize, d: &Delay, when: &str| {
        let min_ns = d.min_us() * 1000;
        if min_ns < t.min_feedback_ns {
            let table = if voice == 0 { "feedback" } else { "feedback2" };
            out.push(format!(
                "[{table}] delay{when} can be {}, under the backend's minimum {} ({}): \
                 those answers will be late by up to a period (delay_too_short)",
                fmt_late(min_ns),
                fmt_late(t.min_feedback_ns),
                t.what
            ));
        }
    };
    let p = e.params();
    for (v, fb) in p.feedback.iter().enumerate() {
        if fb.on {
            check(v, &fb.delay, "");
        }
    }
    for trig in &e.triggers {
        for s in trig.settings.as_slice() {
            if let Setting::FeedbackDelay(voice, d) = s {
                check(voice.index(), d, &format!(" set by trigger {}", trig.id));
            }
        }
    }
    out
}

struct One {
    side: Side,
    category: String,
    name: String,
    words: String,
    detail: String,
}

fn handed_words(o: &LateOutput) -> String {
    let (h, i) = (o.handover.handed_ns, o.intended_ns);
    if h <= i {
        format!("{} before its time", fmt_late(i - h))
    } else {
        format!("{} after its time", fmt_late(h - i))
    }
}

fn name_one(
    o: &LateOutput,
    t: &BackendTiming,
    dropped: (u64, u64),
    trace: Option<&dyn Fn(u64) -> Option<TracedCause>>,
) -> One {
    let h = &o.handover;
    let late = fmt_late(o.late_ns());
    let one = |side: Side, category: &str, words: &str, detail: String| One {
        side,
        category: category.into(),
        name: String::new(),
        words: words.into(),
        detail,
    };
    match classify(o, t) {
        Class::Backend => {
            let (xruns, gaps) = dropped;
            let trial = if xruns + gaps > 0 {
                format!("; this trial had {xruns} xrun(s) and {gaps} dropped cycle(s)")
            } else {
                String::new()
            };
            one(
                Side::Backend,
                "backend",
                "the backend placed it late",
                format!(
                    "handed over {} ({}), it went out {late} late: the backend placed it \
                     late{trial}",
                    handed_words(o),
                    t.what
                ),
            )
        }
        Class::DelayTooShort => one(
            Side::Setup,
            "delay_too_short",
            "feedback delay shorter than the backend's minimum",
            format!(
                "due {} after its input (the feedback delay, plus the note's length for a \
                 note-off), under the backend's minimum {} ({}: the input is seen after the \
                 cycle that carried it, the answer goes out in a later one): {late} late",
                fmt_late(o.intended_ns.saturating_sub(h.input_ns.unwrap_or(0))),
                fmt_late(t.min_feedback_ns),
                t.what
            ),
        ),
        Class::Immediate => one(
            Side::Setup,
            "immediate",
            "due at once, out with the next cycle",
            format!(
                "due the moment it was handed over ({} {}), it went out with the backend's \
                 next cycle ({}): {late} late",
                o.kind.as_str(),
                o.index,
                t.what
            ),
        ),
        Class::InputLate => {
            let s = h.input_ns.unwrap_or(h.handed_ns);
            one(
                Side::Backend,
                "input_late",
                "the input reached the engine late",
                format!(
                    "the engine woke on time ({} late) but saw the input {} after its stamp, \
                     with a delay of {} ({}): {late} late",
                    fmt_late(h.wake_late_ns()),
                    fmt_late(h.handed_ns.saturating_sub(s)),
                    fmt_late(o.intended_ns.saturating_sub(s)),
                    t.what
                ),
            )
        }
        Class::Unknown => one(
            Side::Unknown,
            "unknown",
            "unknown",
            format!(
                "handed over {} by an engine that woke on time ({} late): {late} late",
                handed_words(o),
                fmt_late(h.wake_late_ns())
            ),
        ),
        Class::EngineWokeLate => {
            let what = format!(
                "the engine woke {} late and handed it over {}: {late} late",
                fmt_late(h.wake_late_ns()),
                handed_words(o)
            );
            match trace.map(|f| f(h.pass)) {
                None => one(
                    Side::Engine,
                    "not_traced",
                    "the engine woke late (not traced)",
                    format!("{what}; not traced"),
                ),
                Some(Some(c)) => One {
                    side: Side::Engine,
                    category: c.category,
                    name: c.name,
                    words: c.words,
                    detail: format!("{what}: {}", c.detail),
                },
                Some(None) => one(
                    Side::Engine,
                    "unknown",
                    "the engine woke late (not among the traced wake-ups)",
                    format!("{what}; its wake-up was not among those the trace explained"),
                ),
            }
        }
    }
}

/// Groups the late `outputs` of a trial by cause, most first. `dropped`:
/// the trial's (xruns, dropped cycles), named beside backend-side causes;
/// `trace` names the cause of an engine wake-up from its pass (`None`: not
/// traced).
pub fn report(
    outputs: &[LateOutput],
    t: &BackendTiming,
    dropped: (u64, u64),
    trace: Option<&dyn Fn(u64) -> Option<TracedCause>>,
) -> LateReport {
    let mut v: Vec<LateCause> = Vec::new();
    let mut explained = 0;
    for o in outputs {
        let one = name_one(o, t, dropped, trace);
        if is_explained(&one.category) {
            explained += 1;
        }
        let k = match v
            .iter()
            .position(|k| k.side == one.side && k.category == one.category && k.name == one.name)
        {
            Some(k) => k,
            None => {
                v.push(LateCause {
                    side: one.side,
                    category: one.category.clone(),
                    name: one.name.clone(),
                    cause: one.words.clone(),
                    ..LateCause::default()
                });
                v.len() - 1
            }
        };
        let k = &mut v[k];
        k.outputs += 1;
        if o.late_ns() >= k.worst_ns || k.detail.is_empty() {
            k.worst_ns = o.late_ns();
            k.detail = one.detail;
        }
    }
    v.sort_by(|a, b| b.outputs.cmp(&a.outputs).then(b.worst_ns.cmp(&a.worst_ns)));
    LateReport {
        causes: v,
        explained,
        trace: None,
    }
}

/// One line naming the causes: `late 76 (> 1000 µs): 74 feedback delay
/// shorter than the backend's minimum (worst 9.81 ms), 2 due at once, out
/// with the next cycle (worst 5.06 ms); 76 of 76 have a cause`.
pub fn summary(causes: &[LateCause], late: u64, threshold_us: u64, explained: u64) -> String {
    let mut s = format!("late {late} (> {threshold_us} µs)");
    if late == 0 || causes.is_empty() {
        // None late, or a sidecar from before the causes were recorded.
        return s;
    }
    let parts: Vec<String> = causes
        .iter()
        .map(|c| {
            let side = match c.side {
                Side::Engine if is_explained(&c.category) => "engine late: ",
                _ => "",
            };
            format!(
                "{} {side}{} (worst {})",
                c.outputs,
                c.cause,
                fmt_late(c.worst_ns)
            )
        })
        .collect();
    let _ = write!(
        s,
        ": {}; {explained} of {late} have a cause",
        parts.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JACK at 48 kHz, 256 frames: 5.33 ms lead, 10.67 ms minimum.
    fn jack() -> BackendTiming {
        BackendTiming::jack(48_000, 256)
    }

    const MS: u64 = 1_000_000;

    /// Feedback to an input stamped at 100 ms, due `delay` later, handed
    /// over at `handed` by a pass due at `due` that woke at `wake`, out at
    /// `actual` (all ms after 0).
    fn fb(delay: f64, handed: f64, due: f64, wake: f64, actual: f64) -> LateOutput {
        let ns = |ms: f64| (ms * 1e6) as u64;
        LateOutput {
            kind: EventKind::Feedback,
            index: 1,
            intended_ns: ns(100.0 + delay),
            actual_ns: ns(actual),
            handover: Handover {
                handed_ns: ns(handed),
                pass: 7,
                due_ns: ns(due),
                wake_ns: ns(wake),
                input_ns: Some(100 * MS),
            },
        }
    }

    #[test]
    fn feedback_shorter_than_two_jack_periods_is_the_setup() {
        // No delay: seen 5.5 ms after the tap, out 10.6 ms late.
        let o = fb(0.0, 105.5, 105.6, 105.5, 110.6);
        assert_eq!(classify(&o, &jack()), Class::DelayTooShort);
        // 8 ms is still under 10.67 ms.
        let o = fb(8.0, 105.5, 105.6, 105.5, 110.6);
        assert_eq!(classify(&o, &jack()), Class::DelayTooShort);
        // 30 ms, handed over with an on-time engine 24.5 ms early: the
        // backend placed it late.
        let o = fb(30.0, 105.5, 105.6, 105.5, 135.0);
        assert_eq!(classify(&o, &jack()), Class::Backend);
    }

    #[test]
    fn an_engine_that_woke_late_is_named_when_an_on_time_wake_would_have_been_in_time() {
        // 20 ms delay, the pass due at 105 woke at 116: handed at 116.1,
        // 4 ms before its time (less than the 5.33 ms lead); on time it
        // would have handed it at 105.1.
        let o = fb(20.0, 116.1, 105.0, 116.0, 121.3);
        assert_eq!(classify(&o, &jack()), Class::EngineWokeLate);
        // A late wake-up that an on-time one would not have saved: the
        // delay is too short anyway.
        let o = fb(3.0, 106.1, 105.0, 106.0, 110.6);
        assert_eq!(classify(&o, &jack()), Class::DelayTooShort);
        // On time, 20 ms delay, handed late: the input came late.
        let o = fb(20.0, 117.0, 117.5, 116.9, 121.3);
        assert_eq!(classify(&o, &jack()), Class::InputLate);
        // The same at the trial's first pass: input before the start never
        // gets here (the engine drops it), so it is the same cause.
        let mut first = o;
        first.handover.pass = 0;
        assert_eq!(classify(&first, &jack()), Class::InputLate);
    }

    #[test]
    fn an_output_due_at_once_is_the_setup_on_jack_and_the_backend_without_lead() {
        let o = LateOutput {
            kind: EventKind::Masking,
            index: 0,
            intended_ns: 50 * MS,
            actual_ns: 55 * MS,
            handover: Handover {
                handed_ns: 50 * MS + 2_000,
                pass: 0,
                due_ns: 50 * MS,
                wake_ns: 50 * MS,
                input_ns: None,
            },
        };
        assert_eq!(classify(&o, &jack()), Class::Immediate);
        let raw = BackendTiming::at_once("raw");
        assert_eq!(classify(&o, &raw), Class::Backend);
        // Handed over well after its time with no late wake: unknown.
        let mut m = o;
        m.handover.handed_ns = 52 * MS;
        assert_eq!(classify(&m, &raw), Class::Unknown);
    }

    #[test]
    fn a_delay_under_the_minimum_is_said_before_the_session() {
        let e = crate::Experiment::from_toml(
            "[end]\nkeystrokes = 10\n[feedback]\ndelay = { mode = \"fixed\", ms = 5 }\n\
             [[trigger]]\nkeystroke = 3\nset.feedback.delay = { mode = \"uniform\", min_ms = 20, max_ms = 40 }\n\
             [[trigger]]\nkeystroke = 6\nset.feedback.delay = { mode = \"list\", ms = [30, 2] }\n",
        )
        .unwrap();
        let w = delay_warnings(&e, &jack());
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].starts_with("[feedback] delay can be 5.00 ms, under the backend's minimum 10.67 ms (JACK, 256 frames at 48000 Hz)"),
            "{}",
            w[0]
        );
        assert!(
            w[1].starts_with("[feedback] delay set by trigger 2 can be 2.00 ms"),
            "{}",
            w[1]
        );
        assert!(delay_warnings(&e, &BackendTiming::at_once("raw")).is_empty());
    }

    #[test]
    fn the_report_names_the_trace_for_the_engine_and_counts_coverage() {
        let short = fb(0.0, 105.5, 105.6, 105.5, 110.6);
        let hog = fb(20.0, 116.1, 105.0, 116.0, 121.3);
        let placed = fb(30.0, 105.5, 105.6, 105.5, 135.0);
        let mut untraced = hog;
        untraced.handover.pass = 9;
        let outputs = [short, short, hog, placed, untraced];
        let lookup = |pass: u64| {
            (pass == 7).then(|| TracedCause {
                category: "task".into(),
                name: "ft-hog".into(),
                words: "task ft-hog".into(),
                ns: 10_900_000,
                detail: "ft-hog ran 10.9 ms at a higher priority".into(),
            })
        };
        let r = report(&outputs, &jack(), (2, 1), Some(&lookup));
        assert_eq!(r.causes[0].category, "delay_too_short");
        assert_eq!(r.causes[0].outputs, 2);
        assert_eq!(r.causes[0].side, Side::Setup);
        let hogs = r.causes.iter().find(|c| c.name == "ft-hog").unwrap();
        assert_eq!((hogs.side, hogs.outputs), (Side::Engine, 1));
        assert!(
            hogs.detail
                .starts_with("the engine woke 11.00 ms late and handed it over")
                && hogs.detail.ends_with("at a higher priority"),
            "{}",
            hogs.detail
        );
        let b = r.causes.iter().find(|c| c.category == "backend").unwrap();
        assert!(b.detail.ends_with("1 dropped cycle(s)"), "{}", b.detail);
        // The pass the trace did not explain is unknown: 4 of 5.
        assert_eq!(r.explained, 4);
        let line = summary(&r.causes, 5, 1000, r.explained);
        assert!(
            line.starts_with(
                "late 5 (> 1000 µs): 2 feedback delay shorter than the backend's minimum \
                 (worst 10.60 ms), 1 the backend placed it late (worst 5.00 ms), 1 engine \
                 late: task ft-hog (worst 1.30 ms), 1 the engine woke late (not among the \
                 traced wake-ups) (worst 1.30 ms)"
            ),
            "{line}"
        );
        assert!(line.ends_with("; 4 of 5 have a cause"), "{line}");

        // Without the trace the engine's side is classified, not named.
        let r = report(&outputs, &jack(), (0, 0), None);
        assert_eq!(r.explained, 3);
        let n = r
            .causes
            .iter()
            .find(|c| c.category == "not_traced")
            .unwrap();
        assert_eq!(n.outputs, 2);
        assert_eq!(summary(&[], 0, 1000, 0), "late 0 (> 1000 µs)");
        assert_eq!(summary(&[], 7, 1000, 0), "late 7 (> 1000 µs)");
    }
}
