//! Analysis of trials: inter-tap intervals (ITIs), asynchronies to the
//! metronome, missing and double taps, continuation drift and the
//! Wing–Kristofferson (1973) decomposition.
//!
//! Definitions (also in `docs/TAP.md`):
//! - A tap is an `input` note-on with velocity > 0. A tap less than
//!   `debounce_us` after the previous accepted tap is a *double tap*
//!   (drum pads double-trigger) and is dropped.
//! - The synchronization phase lasts until half an inter-beat interval (the
//!   median beat-to-beat time) after the last sounding metronome beat; later
//!   taps are in the continuation phase. Without a metronome every tap is
//!   continuation.
//! - Each beat is matched to the nearest tap within ± half an inter-beat
//!   interval; asynchrony = tap − beat (negative = tap early). A beat with
//!   no tap there is a *missing* tap.
//! - An ITI belongs to the phase of the tap that ends it. In continuation,
//!   an ITI longer than `gap_factor` × the reference interval (the
//!   inter-beat interval, else the median ITI) counts round(ITI / ref) − 1
//!   missing taps and is left out of the statistics.
//! - Drift: least-squares slope of the kept ITIs against their order, µs per interval.
//! - Taps with negative times (before the trial's start: files recorded
//!   before firmtime dropped such input) are left out, and the trial is
//!   flagged: they had feedback and counted for keystroke triggers.
//! - A trial is *flagged* ([`TrialAnalysis::flags`]) when it has no tap at
//!   all; when its synchronization phase has no tap although two or more
//!   beats sounded; and when its continuation phase has no tap although
//!   the trial went on for two inter-beat intervals or more after the
//!   synchronization phase (its `end` row, else its last event). A keyboard
//!   that went silent or away gives such a phase; its figures ("0 taps, 0
//!   missing") are not a result.
//! - Wing–Kristofferson: with γ(0) the ITI variance and γ(1) the lag-1
//!   autocovariance (both with denominator n − 1), motor variance = −γ(1) and
//!   clock variance = γ(0) + 2γ(1). The model predicts −γ(0)/2 ≤ γ(1) ≤ 0;
//!   outside that `model_holds` is false and the figures should not be read
//!   as variances.
//!
//! # Real-time contract
//!
//! None: analysis runs after trials and allocates.

use crate::data::{Event, EventKind};
use serde::Serialize;
use std::fmt::Write as _;

/// Analysis settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnalysisConfig {
    /// Taps closer than this to the previous tap are double taps, µs.
    pub debounce_us: i64,
    /// A continuation ITI above this multiple of the reference interval is a gap.
    pub gap_factor: f64,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            debounce_us: 50_000,
            gap_factor: 1.5,
        }
    }
}

/// A trial phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// With the metronome.
    Synchronization,
    /// After it stopped.
    Continuation,
}

impl Phase {
    /// The CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Synchronization => "synchronization",
            Phase::Continuation => "continuation",
        }
    }
}

/// One accepted tap.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tap {
    /// 1-based among accepted taps.
    pub number: u32,
    /// Time, µs since trial start.
    pub time_us: i64,
    /// Phase.
    pub phase: Phase,
    /// Interval since the previous accepted tap, µs.
    pub iti_us: Option<i64>,
    /// True if that interval was a gap (missing taps) and left out of statistics.
    pub gap: bool,
    /// Tap − matched beat, µs.
    pub asynchrony_us: Option<i64>,
}

/// The Wing–Kristofferson decomposition of one ITI series (µs²).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WingKristofferson {
    /// Intervals used.
    pub n: usize,
    /// γ(0): ITI variance.
    pub iti_var: f64,
    /// γ(1): lag-1 autocovariance.
    pub acov1: f64,
    /// γ(0) + 2γ(1).
    pub clock_var: f64,
    /// −γ(1).
    pub motor_var: f64,
    /// −γ(0)/2 ≤ γ(1) ≤ 0.
    pub model_holds: bool,
}

/// Statistics of one phase.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PhaseStats {
    /// Which phase.
    pub phase: Phase,
    /// Accepted taps in it.
    pub taps: usize,
    /// Taps dropped as double taps.
    pub double_taps: usize,
    /// ITIs kept (gaps left out).
    pub itis: usize,
    /// Mean ITI, µs.
    pub iti_mean_us: Option<f64>,
    /// SD of ITI, µs.
    pub iti_sd_us: Option<f64>,
    /// Asynchronies (synchronization only).
    pub asynchronies: usize,
    /// Mean asynchrony, µs.
    pub async_mean_us: Option<f64>,
    /// SD of asynchrony, µs.
    pub async_sd_us: Option<f64>,
    /// Missing taps.
    pub missing: usize,
    /// ITI slope, µs per interval.
    pub drift_us_per_iti: Option<f64>,
    /// Wing–Kristofferson decomposition of the kept ITIs (≥ 3 needed).
    pub wk: Option<WingKristofferson>,
}

/// Something about a trial that makes its figures no result: a phase with
/// no input where input was expected (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Flag {
    /// The phase concerned; `None`: the whole trial.
    pub phase: Option<Phase>,
    /// What is wrong, in words.
    pub message: String,
}

/// Everything computed for one trial.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrialAnalysis {
    /// Accepted taps.
    pub taps: Vec<Tap>,
    /// Taps dropped as double taps.
    pub double_taps: usize,
    /// Metronome beats heard.
    pub beats: usize,
    /// Median inter-beat interval, µs.
    pub ibi_us: Option<i64>,
    /// Synchronization then continuation.
    pub phases: [PhaseStats; 2],
    /// Phases with no input where input was expected; empty when none.
    pub flags: Vec<Flag>,
}

/// Mean and sample SD (n − 1); None for fewer than 2 values.
pub fn mean_sd(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.len() < 2 {
        return None;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64;
    Some((m, v.sqrt()))
}

/// Least-squares slope of `ys` against 0, 1, 2, …; None for fewer than 2.
pub fn slope(ys: &[f64]) -> Option<f64> {
    let n = ys.len();
    if n < 2 {
        return None;
    }
    let xm = (n - 1) as f64 / 2.0;
    let ym = ys.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        let dx = i as f64 - xm;
        sxy += dx * (y - ym);
        sxx += dx * dx;
    }
    Some(sxy / sxx)
}

/// The Wing–Kristofferson decomposition of an ITI series; None for fewer than 3.
pub fn wing_kristofferson(itis: &[f64]) -> Option<WingKristofferson> {
    let n = itis.len();
    if n < 3 {
        return None;
    }
    let m = itis.iter().sum::<f64>() / n as f64;
    let var = itis.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
    let acov1 = itis
        .windows(2)
        .map(|w| (w[0] - m) * (w[1] - m))
        .sum::<f64>()
        / (n - 1) as f64;
    Some(WingKristofferson {
        n,
        iti_var: var,
        acov1,
        clock_var: var + 2.0 * acov1,
        motor_var: -acov1,
        model_holds: acov1 <= 0.0 && acov1 >= -var / 2.0,
    })
}

fn median(mut xs: Vec<i64>) -> Option<i64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_unstable();
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2
    })
}

fn is_onset(e: &Event, kind: EventKind) -> bool {
    e.kind == kind && e.note.is_some_and(|n| n.on && n.velocity > 0)
}

/// Analyzes one trial's events.
pub fn analyze(events: &[Event], cfg: &AnalysisConfig) -> TrialAnalysis {
    // Taps before the trial's start (negative times) are no trial data: a
    // keyboard already playing, recorded by firmtime before it dropped such
    // input (issue 28). Left out, and the trial flagged.
    let early = events
        .iter()
        .filter(|e| is_onset(e, EventKind::Input) && e.actual_us < 0)
        .count();
    let mut raw: Vec<i64> = events
        .iter()
        .filter(|e| is_onset(e, EventKind::Input) && e.actual_us >= 0)
        .map(|e| e.actual_us)
        .collect();
    raw.sort_unstable();
    let mut beats: Vec<i64> = events
        .iter()
        .filter(|e| is_onset(e, EventKind::Metronome))
        .map(|e| e.actual_us)
        .collect();
    beats.sort_unstable();

    let mut times = Vec::with_capacity(raw.len());
    let mut doubles = Vec::new();
    for t in raw {
        match times.last() {
            Some(&prev) if t - prev < cfg.debounce_us => doubles.push(t),
            _ => times.push(t),
        }
    }

    let ibi = median(beats.windows(2).map(|w| w[1] - w[0]).collect());
    let sync_end = beats.last().map(|&b| b + ibi.unwrap_or(0) / 2);
    let phase_of = |t: i64| match sync_end {
        Some(end) if t <= end => Phase::Synchronization,
        _ => Phase::Continuation,
    };

    let mut taps: Vec<Tap> = times
        .iter()
        .enumerate()
        .map(|(i, &t)| Tap {
            number: i as u32 + 1,
            time_us: t,
            phase: phase_of(t),
            iti_us: (i > 0).then(|| t - times[i - 1]),
            gap: false,
            asynchrony_us: None,
        })
        .collect();

    // Asynchronies: nearest tap within ± half an inter-beat interval.
    let mut missing_sync = 0;
    let half = ibi.map(|i| i / 2);
    for &b in &beats {
        let window = half.unwrap_or(cfg.debounce_us.max(1));
        let lo = times.partition_point(|&t| t < b - window);
        let hi = times.partition_point(|&t| t <= b + window);
        let best = (lo..hi).min_by_key(|&i| (times[i] - b).abs());
        match best {
            Some(i) if taps[i].asynchrony_us.is_none() => {
                taps[i].asynchrony_us = Some(times[i] - b)
            }
            _ => missing_sync += 1,
        }
    }

    // Gaps in continuation.
    let cont_itis: Vec<i64> = taps
        .iter()
        .filter(|t| t.phase == Phase::Continuation)
        .filter_map(|t| t.iti_us)
        .collect();
    let reference = ibi.or_else(|| median(cont_itis));
    let mut missing_cont = 0;
    if let Some(r) = reference.filter(|&r| r > 0) {
        for t in taps.iter_mut().filter(|t| t.phase == Phase::Continuation) {
            if let Some(iti) = t.iti_us {
                if iti as f64 > cfg.gap_factor * r as f64 {
                    t.gap = true;
                    missing_cont += ((iti as f64 / r as f64).round() as usize)
                        .saturating_sub(1)
                        .max(1);
                }
            }
        }
    }

    let stats = |phase: Phase, missing: usize| {
        let in_phase: Vec<&Tap> = taps.iter().filter(|t| t.phase == phase).collect();
        let itis: Vec<f64> = in_phase
            .iter()
            .filter(|t| !t.gap)
            .filter_map(|t| t.iti_us.map(|x| x as f64))
            .collect();
        let asyncs: Vec<f64> = in_phase
            .iter()
            .filter_map(|t| t.asynchrony_us.map(|x| x as f64))
            .collect();
        let (im, isd) = mean_sd(&itis).map_or((None, None), |(m, s)| (Some(m), Some(s)));
        let (am, asd) = mean_sd(&asyncs).map_or((None, None), |(m, s)| (Some(m), Some(s)));
        PhaseStats {
            phase,
            taps: in_phase.len(),
            double_taps: doubles.iter().filter(|&&t| phase_of(t) == phase).count(),
            itis: itis.len(),
            iti_mean_us: im,
            iti_sd_us: isd,
            asynchronies: asyncs.len(),
            async_mean_us: am,
            async_sd_us: asd,
            missing,
            drift_us_per_iti: slope(&itis),
            wk: wing_kristofferson(&itis),
        }
    };
    let phases = [
        stats(Phase::Synchronization, missing_sync),
        stats(Phase::Continuation, missing_cont),
    ];
    let end_us = events
        .iter()
        .filter(|e| e.kind == EventKind::End)
        .map(|e| e.intended_us.unwrap_or(e.actual_us))
        .max()
        .or_else(|| events.iter().map(|e| e.actual_us).max());
    let mut flags = empty_phases(&phases, &beats, ibi, sync_end, end_us);
    if early > 0 {
        flags.insert(
            0,
            Flag {
                phase: None,
                message: format!(
                    "{early} taps before the trial's start (negative times: a keyboard already \
                     playing, recorded by a firmtime that kept such input) left out; they got \
                     feedback and counted for keystroke triggers and the keystroke end"
                ),
            },
        );
    }
    TrialAnalysis {
        double_taps: doubles.len(),
        taps,
        beats: beats.len(),
        ibi_us: ibi,
        phases,
        flags,
    }
}

/// The flags of a trial: no tap at all; no tap in a synchronization phase
/// with two beats or more; no tap in a continuation phase that lasted two
/// inter-beat intervals or more (`end_us`: the trial's end).
fn empty_phases(
    phases: &[PhaseStats; 2],
    beats: &[i64],
    ibi: Option<i64>,
    sync_end: Option<i64>,
    end_us: Option<i64>,
) -> Vec<Flag> {
    let s = |us: i64| us as f64 / 1e6;
    let [sync, cont] = phases;
    if sync.taps + cont.taps + sync.double_taps + cont.double_taps == 0 {
        return vec![Flag {
            phase: None,
            message: "no taps at all: was the keyboard connected and playing?".into(),
        }];
    }
    let mut flags = Vec::new();
    if sync.taps == 0 && beats.len() >= 2 {
        flags.push(Flag {
            phase: Some(Phase::Synchronization),
            message: format!(
                "no taps while {} metronome beats sounded ({:.3}–{:.3} s)",
                beats.len(),
                s(beats[0]),
                s(beats[beats.len() - 1])
            ),
        });
    }
    if let (Some(from), Some(ibi), Some(end)) = (sync_end, ibi, end_us) {
        if cont.taps == 0 && ibi > 0 && end - from >= 2 * ibi {
            flags.push(Flag {
                phase: Some(Phase::Continuation),
                message: format!(
                    "no taps in the {:.3} s the trial went on after the metronome ({:.3}–{:.3} s)",
                    s(end - from),
                    s(from),
                    s(end)
                ),
            });
        }
    }
    flags
}

/// Header of [`summary_csv`].
pub const SUMMARY_HEADER: &str = "trial,phase,taps,double_taps,missing,itis,iti_mean_us,iti_sd_us,asynchronies,async_mean_us,async_sd_us,drift_us_per_iti,wk_n,iti_var_us2,acov1_us2,clock_var_us2,motor_var_us2,wk_model_holds";

/// A measure with 3 decimals (nanoseconds, for values in µs), as written
/// in [`summary_csv`]; `None` stays an empty field.
fn r3(v: Option<f64>) -> Option<String> {
    v.map(|v| format!("{v:.3}"))
}

/// One row of [`summary_csv`]: the header is these field names.
#[derive(Serialize)]
struct SummaryRow<'a> {
    trial: &'a str,
    phase: &'static str,
    taps: usize,
    double_taps: usize,
    missing: usize,
    itis: usize,
    iti_mean_us: Option<String>,
    iti_sd_us: Option<String>,
    asynchronies: usize,
    async_mean_us: Option<String>,
    async_sd_us: Option<String>,
    drift_us_per_iti: Option<String>,
    wk_n: Option<usize>,
    iti_var_us2: Option<String>,
    acov1_us2: Option<String>,
    clock_var_us2: Option<String>,
    motor_var_us2: Option<String>,
    wk_model_holds: Option<u8>,
}

/// One summary CSV for many trials: a row per trial and phase. A `trial`
/// name with a comma or quote is quoted (RFC 4180), as pandas and R read it.
pub fn summary_csv(trials: &[(String, TrialAnalysis)]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    if trials.iter().all(|(_, a)| a.phases.is_empty()) {
        let _ = w.write_record(SUMMARY_HEADER.split(','));
    }
    for (name, a) in trials {
        for p in &a.phases {
            // Writing to memory cannot fail.
            let _ = w.serialize(SummaryRow {
                trial: name,
                phase: p.phase.as_str(),
                taps: p.taps,
                double_taps: p.double_taps,
                missing: p.missing,
                itis: p.itis,
                iti_mean_us: r3(p.iti_mean_us),
                iti_sd_us: r3(p.iti_sd_us),
                asynchronies: p.asynchronies,
                async_mean_us: r3(p.async_mean_us),
                async_sd_us: r3(p.async_sd_us),
                drift_us_per_iti: r3(p.drift_us_per_iti),
                wk_n: p.wk.map(|w| w.n),
                iti_var_us2: r3(p.wk.map(|w| w.iti_var)),
                acov1_us2: r3(p.wk.map(|w| w.acov1)),
                clock_var_us2: r3(p.wk.map(|w| w.clock_var)),
                motor_var_us2: r3(p.wk.map(|w| w.motor_var)),
                wk_model_holds: p.wk.map(|w| u8::from(w.model_holds)),
            });
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// Header of [`taps_csv`].
pub const TAPS_HEADER: &str = "tap,time_us,phase,iti_us,gap,asynchrony_us";

/// Per-tap CSV of one trial.
pub fn taps_csv(a: &TrialAnalysis) -> String {
    let mut s = String::from(TAPS_HEADER);
    s.push('\n');
    for t in &a.taps {
        let _ = write!(s, "{},{},{},", t.number, t.time_us, t.phase.as_str());
        if let Some(i) = t.iti_us {
            let _ = write!(s, "{i}");
        }
        let _ = write!(s, ",{},", u8::from(t.gap));
        if let Some(x) = t.asynchrony_us {
            let _ = write!(s, "{x}");
        }
        s.push('\n');
    }
    s
}
