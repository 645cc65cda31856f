//! What a running trial shows to a watcher on another thread: the live
//! status line of `firmtime tap run` on a terminal.
//!
//! # Real-time contract
//!
//! The engine only stores into relaxed atomics ([`LiveStatus`] is
//! allocated with the engine, before any trial); the watcher only loads
//! them. Nothing here locks or allocates on the engine's side.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use firmtime_midi::LossCause;

/// Counters of the trial running now, updated by the engine every pass.
#[derive(Debug, Default)]
pub struct LiveStatus {
    running: AtomicBool,
    start_ns: AtomicU64,
    keystrokes: AtomicU64,
    beats: AtomicU64,
    late_outputs: AtomicU64,
    xruns: AtomicU64,
    before_start: AtomicU64,
    /// [`LossCause::to_bits`] of the loss that ended the trial; 0: none.
    input_lost: AtomicU32,
}

/// One reading of a [`LiveStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveSnapshot {
    /// A trial is running.
    pub running: bool,
    /// Its start, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Keystrokes (key presses) so far.
    pub keystrokes: u64,
    /// Metronome beats scheduled so far.
    pub beats: u64,
    /// Outputs later than the threshold so far.
    pub late_outputs: u64,
    /// The backend's xruns since the trial started.
    pub xruns: u64,
    /// Input stamped before the trial's start, dropped.
    pub before_start: u64,
    /// The input's loss that ended the trial, once seen.
    pub input_lost: Option<LossCause>,
}

impl LiveStatus {
    /// A trial starts at `start_ns`: counters back to 0. **RT-safe.**
    pub fn begin(&self, start_ns: u64) {
        self.start_ns.store(start_ns, Ordering::Relaxed);
        self.keystrokes.store(0, Ordering::Relaxed);
        self.beats.store(0, Ordering::Relaxed);
        self.late_outputs.store(0, Ordering::Relaxed);
        self.xruns.store(0, Ordering::Relaxed);
        self.before_start.store(0, Ordering::Relaxed);
        self.input_lost.store(0, Ordering::Relaxed);
        self.running.store(true, Ordering::Release);
    }

    /// The counters now. **RT-safe.**
    pub fn update(&self, keystrokes: u32, beats: u32, late_outputs: u64, xruns: u64) {
        self.keystrokes
            .store(u64::from(keystrokes), Ordering::Relaxed);
        self.beats.store(u64::from(beats), Ordering::Relaxed);
        self.late_outputs.store(late_outputs, Ordering::Relaxed);
        self.xruns.store(xruns, Ordering::Relaxed);
    }

    /// Input dropped for coming before the start, and the input's loss
    /// once seen. **RT-safe.**
    pub fn update_input(&self, before_start: u64, lost: Option<LossCause>) {
        self.before_start.store(before_start, Ordering::Relaxed);
        self.input_lost
            .store(lost.map_or(0, LossCause::to_bits), Ordering::Relaxed);
    }

    /// The trial ended. **RT-safe.**
    pub fn end(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// What the watcher shows. **RT-safe.**
    pub fn read(&self) -> LiveSnapshot {
        LiveSnapshot {
            running: self.running.load(Ordering::Acquire),
            start_ns: self.start_ns.load(Ordering::Relaxed),
            keystrokes: self.keystrokes.load(Ordering::Relaxed),
            beats: self.beats.load(Ordering::Relaxed),
            late_outputs: self.late_outputs.load(Ordering::Relaxed),
            xruns: self.xruns.load(Ordering::Relaxed),
            before_start: self.before_start.load(Ordering::Relaxed),
            input_lost: LossCause::from_bits(self.input_lost.load(Ordering::Relaxed)),
        }
    }
}

/// Elapsed time as `m:ss`.
fn clock(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!("{}:{:02}", s / 60, s % 60)
}

/// The live line of trial `trial` of `of` (`name`) at `now_ns`: elapsed and
/// (when the experiment ends after a known time) remaining time, taps and
/// beats (out of the end's counts when it has them), late outputs, xruns;
/// input dropped for coming before the start (when there was any) and an
/// input loss (`INPUT LOST: …`, first, so a narrow terminal keeps it).
pub fn status_line(
    trial: u32,
    of: u32,
    name: &str,
    end: &crate::TrialEnd,
    s: &LiveSnapshot,
    now_ns: u64,
) -> String {
    let elapsed = now_ns.saturating_sub(s.start_ns);
    // The counts first and the name last: a narrow terminal cuts the end.
    let mut line = String::new();
    if let Some(c) = s.input_lost {
        line.push_str(&format!("INPUT LOST ({}) | ", c.words()));
    }
    line.push_str(&format!("trial {trial}/{of} {}", clock(elapsed)));
    if let Some(d) = end.duration_ms {
        let left = (d.us() * 1000).saturating_sub(elapsed);
        let other_end = end.keystrokes.is_some() || end.beats.is_some();
        line.push_str(&format!(
            ", {}{} left",
            if other_end { "up to " } else { "" },
            clock(left + 999_999_999)
        ));
    }
    let of_n = |n: u64, end: Option<u32>| match end {
        Some(e) => format!("{n}/{e}"),
        None => n.to_string(),
    };
    line.push_str(&format!(
        " | taps heard {} | beats {} | late outputs {} | xruns {}",
        of_n(s.keystrokes, end.keystrokes),
        of_n(s.beats, end.beats),
        s.late_outputs,
        s.xruns
    ));
    if s.before_start > 0 {
        line.push_str(&format!(" | {} before the start dropped", s.before_start));
    }
    if !name.is_empty() {
        line.push_str(" | ");
        line.push_str(name);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Ms;

    #[test]
    fn the_line_counts_up_and_time_down() {
        let live = LiveStatus::default();
        assert!(!live.read().running);
        live.begin(1_000_000_000);
        live.update(14, 7, 1, 2);
        let s = live.read();
        assert!(s.running);
        let end = crate::TrialEnd {
            keystrokes: Some(42),
            beats: None,
            duration_ms: Some(Ms::from_ms(60_000)),
        };
        let line = status_line(2, 5, "sync", &end, &s, 13_500_000_000);
        assert_eq!(
            line,
            "trial 2/5 0:12, up to 0:48 left | taps heard 14/42 | beats 7 | late outputs 1 | xruns 2 | sync"
        );
        // Input before the start and a loss of the input are named.
        live.update_input(12, Some(LossCause::ClientGone));
        let line = status_line(2, 5, "sync", &end, &live.read(), 13_500_000_000);
        assert_eq!(
            line,
            "INPUT LOST (the client feeding the input went away) | trial 2/5 0:12, up to 0:48 left | \
             taps heard 14/42 | beats 7 | late outputs 1 | xruns 2 | 12 before the start dropped | sync"
        );
        live.end();
        assert!(!live.read().running);
        // A later trial starts from zero.
        live.begin(5);
        let s = live.read();
        assert_eq!((s.keystrokes, s.before_start, s.input_lost), (0, 0, None));
    }
}
