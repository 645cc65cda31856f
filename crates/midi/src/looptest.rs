//! FTAP's loop benchmark over any [`MidiBackend`].
//!
//! MIDI out is connected back to MIDI in (a cable, a JACK connection, the
//! [`PacedLoopback`](crate::pty::PacedLoopback), the
//! [`Loopback`](crate::loopback::Loopback)). The test primes one Note On and,
//! 1 ms later, one Note Off; every event that comes back is sent out again at
//! once. With two messages circulating the wire never idles, so the mean
//! interval between received events is the wire's message time — 0.96 ms for
//! a 3-byte message at 31.25 kbaud — plus whatever the system adds. FTAP
//! measured exactly 0.96 ms on hardware (Finney 2001).
//!
//! After `events` events have been received, re-sending stops and the test
//! waits up to [`LoopConfig::drain_ns`] for what is still in flight, so
//! `lost` (sent but never received) is exact.
//!
//! # RT contract
//!
//! [`LoopTest::new`] allocates every buffer (the arrival times of all
//! events). [`LoopTest::run`] is **RT-safe.**: it never allocates, locks or
//! prints, and blocks only in [`MidiBackend::wait`]. Test builds check it
//! with `assert_no_alloc`.

use firmtime_rt::clock::monotonic_ns;
use serde::Serialize;

use crate::backend::{BackendError, BackendStats, MidiBackend, OutputEvent};
use crate::error::{Error, Result};
use crate::raw::WIRE_BYTE_NS;
use crate::MidiMessage;

/// FTAP's default run length.
pub const DEFAULT_EVENTS: u64 = 10_000;

/// Events re-sent per wake at most; more in one batch are counted as lost.
const BATCH: usize = 256;

/// How to run the loop test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopConfig {
    /// Stop after this many events received (at least 2).
    pub events: u64,
    /// Give up after this long (ns) even if fewer events came back.
    pub timeout_ns: u64,
    /// After the last counted event, wait this long for events still in flight.
    pub drain_ns: u64,
    /// Channel of the primed notes (0..=15).
    pub channel: u8,
    /// Note number of the primed notes.
    pub note: u8,
    /// Release as Note On velocity 0 instead of Note Off. With a backend that
    /// sends running status both messages then share a status byte and take
    /// 2 bytes (640 µs) on the wire instead of 3 (960 µs).
    pub release_as_note_on: bool,
    /// Whether the backend's output uses running status (decides the wire limit).
    pub running_status: bool,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            events: DEFAULT_EVENTS,
            timeout_ns: 60_000_000_000,
            drain_ns: 200_000_000,
            channel: 0,
            note: 60,
            release_as_note_on: false,
            running_status: false,
        }
    }
}

impl LoopConfig {
    /// Bytes per message on the wire: 2 when running status applies, else 3.
    pub fn wire_bytes_per_message(&self) -> u8 {
        if self.release_as_note_on && self.running_status {
            2
        } else {
            3
        }
    }

    /// The MIDI wire limit for one message, ns (960 000 or 640 000).
    pub fn wire_limit_ns(&self) -> u64 {
        u64::from(self.wire_bytes_per_message()) * WIRE_BYTE_NS
    }
}

/// The loop test's result. Intervals are between successive received events'
/// timestamps ([`InputEvent::t_ns`](crate::InputEvent::t_ns)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoopResult {
    /// Events received and counted (at most [`LoopConfig::events`]).
    pub events_received: u64,
    /// Mean interval, ns.
    pub mean_interval_ns: f64,
    /// Sample standard deviation of the intervals, ns.
    pub sd_interval_ns: f64,
    /// Shortest interval, ns.
    pub min_interval_ns: u64,
    /// Longest interval, ns.
    pub max_interval_ns: u64,
    /// Counted events per second of the run (intervals / span).
    pub events_per_second: f64,
    /// Messages sent (primes and re-sends) that never came back.
    pub lost: u64,
    /// Messages sent, primes included.
    pub sent: u64,
    /// Events received after the count was reached (in flight when it stopped).
    pub drained: u64,
    /// Wire bytes per message the limit assumes: 3, or 2 with running status.
    pub wire_bytes_per_message: u8,
    /// The MIDI wire limit per message at 31.25 kbaud, ns: 960 000 for 3-byte
    /// messages, 640 000 for 2-byte running-status messages.
    pub wire_limit_ns: u64,
    /// `mean_interval_ns / wire_limit_ns` (1.0 is the wire's own speed).
    pub ratio_to_wire: f64,
    /// The run hit its timeout before `events` were received.
    pub timed_out: bool,
    /// The backend reported [`BackendError::Disconnected`].
    pub disconnected: bool,
    /// Events the backend could not queue for output.
    pub send_refused: u64,
}

/// A prepared loop test: storage for every arrival time, allocated once.
#[derive(Debug)]
pub struct LoopTest {
    config: LoopConfig,
    times: Vec<u64>,
    batch: Vec<MidiMessage>,
    stats: Option<BackendStats>,
}

impl LoopTest {
    /// Allocates storage for `config.events` arrival times.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for fewer
    /// than 2 events, or a channel or note out of range.
    pub fn new(config: LoopConfig) -> Result<Self> {
        if config.events < 2 {
            return Err(Error::invalid(format!(
                "loop test needs at least 2 events to measure an interval, got {}",
                config.events
            )));
        }
        if config.channel > 15 || config.note > 127 {
            return Err(Error::invalid(
                "loop test channel must be 0..=15 and note 0..=127",
            ));
        }
        let n = usize::try_from(config.events)
            .map_err(|_| Error::invalid("loop test events: too many for this machine"))?;
        Ok(Self {
            config,
            times: Vec::with_capacity(n),
            batch: Vec::with_capacity(BATCH),
            stats: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LoopConfig {
        &self.config
    }

    /// The arrival times of the counted events of the last run, ns.
    pub fn times(&self) -> &[u64] {
        &self.times
    }

    /// The backend's counters at the end of the last run.
    pub fn backend_stats(&self) -> Option<BackendStats> {
        self.stats
    }

    /// Runs the test on `backend`, whose output must come back to its input.
    ///
    /// **RT-safe.** Returns whatever was measured, also after a timeout or
    /// a disconnect (see [`LoopResult::timed_out`], [`LoopResult::disconnected`]).
    pub fn run(&mut self, backend: &mut dyn MidiBackend) -> LoopResult {
        let cfg = self.config;
        self.times.clear();
        let (ch, note) = (cfg.channel, cfg.note);
        let press = MidiMessage::NoteOn {
            channel: ch,
            note,
            velocity: 100,
        };
        let release = if cfg.release_as_note_on {
            MidiMessage::NoteOn {
                channel: ch,
                note,
                velocity: 0,
            }
        } else {
            MidiMessage::NoteOff {
                channel: ch,
                note,
                velocity: 64,
            }
        };
        // Anything left over from before is not part of this run.
        let _ = backend.poll_input(&mut |_| {});
        let t0 = monotonic_ns();
        let end = t0.saturating_add(cfg.timeout_ns);
        let mut received_total = 0u64;
        let mut timed_out = false;
        let mut tally = Tally::default();
        for (at, msg) in [(None, press), (Some(t0 + 1_000_000), release)] {
            tally.send(backend, at, msg);
        }
        let mut drain_until: Option<u64> = None;
        while !tally.disconnected {
            let counting = (self.times.len() as u64) < cfg.events;
            let now = monotonic_ns();
            match drain_until {
                Some(d) if now >= d || received_total >= tally.sent => break,
                None if now >= end => {
                    timed_out = true;
                    break;
                }
                _ => {}
            }
            self.batch.clear();
            let times = &mut self.times;
            let batch = &mut self.batch;
            let mut overflow = 0u64;
            let mut got = 0u64;
            let r = backend.poll_input(&mut |ev| {
                if ev.msg.is_realtime() || matches!(ev.msg, MidiMessage::SysEx { .. }) {
                    return;
                }
                got += 1;
                if (times.len() as u64) < cfg.events {
                    times.push(ev.t_ns);
                    if (times.len() as u64) < cfg.events {
                        if batch.len() < batch.capacity() {
                            batch.push(ev.msg);
                        } else {
                            overflow += 1;
                        }
                    }
                }
            });
            received_total += got;
            tally.refused += overflow;
            if r.is_err() {
                tally.disconnected = true;
                break;
            }
            for &msg in self.batch.iter() {
                tally.send(backend, None, msg);
            }
            if counting && self.times.len() as u64 >= cfg.events {
                drain_until = Some(monotonic_ns().saturating_add(cfg.drain_ns));
            }
            if got == 0 {
                let deadline = drain_until.unwrap_or(end);
                if backend.wait(deadline).is_err() {
                    // Disconnected: the next poll_input says so after draining.
                    if backend.poll_input(&mut |_| {}).is_err() {
                        tally.disconnected = true;
                    }
                }
            }
        }
        self.stats = Some(backend.stats());
        summarize(
            &self.times,
            &cfg,
            tally.sent,
            received_total,
            tally.refused,
            timed_out,
            tally.disconnected,
        )
    }
}

/// What the loop's sends came to, and the tag of the next one.
#[derive(Default)]
struct Tally {
    sent: u64,
    refused: u64,
    disconnected: bool,
    tag: u32,
}

impl Tally {
    /// Sends `msg` on port 0 (at `at`, or at once) and counts the outcome. **RT-safe.**
    fn send(&mut self, backend: &mut dyn MidiBackend, at: Option<u64>, msg: MidiMessage) {
        match backend.send(OutputEvent {
            at_ns: at,
            port: 0,
            msg,
            tag: self.tag,
        }) {
            Ok(()) => self.sent += 1,
            Err(BackendError::Disconnected) => self.disconnected = true,
            Err(_) => self.refused += 1,
        }
        self.tag = self.tag.wrapping_add(1);
    }
}

fn summarize(
    times: &[u64],
    cfg: &LoopConfig,
    sent: u64,
    received_total: u64,
    refused: u64,
    timed_out: bool,
    disconnected: bool,
) -> LoopResult {
    let n = times.len() as u64;
    let (mut mean, mut m2, mut min, mut max) = (0.0f64, 0.0f64, u64::MAX, 0u64);
    let mut k = 0u64;
    for w in times.windows(2) {
        let d = w[1].saturating_sub(w[0]);
        k += 1;
        let x = d as f64;
        let delta = x - mean;
        mean += delta / k as f64;
        m2 += delta * (x - mean);
        min = min.min(d);
        max = max.max(d);
    }
    let sd = if k > 1 {
        (m2 / (k - 1) as f64).sqrt()
    } else {
        0.0
    };
    let span = match (times.first(), times.last()) {
        (Some(a), Some(b)) if b > a => (b - a) as f64,
        _ => 0.0,
    };
    let limit = cfg.wire_limit_ns();
    LoopResult {
        events_received: n,
        mean_interval_ns: mean,
        sd_interval_ns: sd,
        min_interval_ns: if k == 0 { 0 } else { min },
        max_interval_ns: max,
        events_per_second: if span > 0.0 {
            k as f64 * 1e9 / span
        } else {
            0.0
        },
        lost: sent.saturating_sub(received_total),
        sent,
        drained: received_total.saturating_sub(n),
        wire_bytes_per_message: cfg.wire_bytes_per_message(),
        wire_limit_ns: limit,
        ratio_to_wire: mean / limit as f64,
        timed_out,
        disconnected,
        send_refused: refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback::{Loopback, LoopbackOptions};

    #[test]
    fn counts_exactly_n_events_over_the_loopback_without_allocating() {
        let mut lb = Loopback::new(LoopbackOptions::default());
        let mut test = LoopTest::new(LoopConfig {
            events: 1000,
            ..LoopConfig::default()
        })
        .unwrap();
        let r = assert_no_alloc::assert_no_alloc(|| test.run(&mut lb));
        assert_eq!(r.events_received, 1000);
        assert_eq!(test.times().len(), 1000);
        assert!(test.times().windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(r.lost, 0, "{r:?}");
        assert!(!r.timed_out && !r.disconnected);
        assert_eq!(r.wire_limit_ns, 960_000);
    }

    #[test]
    fn paced_loopback_runs_at_the_wire_limit() {
        // The virtual wire is exact, and two messages keep it busy: every
        // interval is one 3-byte message time.
        let mut lb = Loopback::new(LoopbackOptions {
            byte_ns: Some(WIRE_BYTE_NS),
            capacity: 16,
        });
        let mut test = LoopTest::new(LoopConfig {
            events: 50,
            ..LoopConfig::default()
        })
        .unwrap();
        let r = test.run(&mut lb);
        assert_eq!(r.events_received, 50);
        assert_eq!(r.lost, 0);
        assert_eq!(r.wire_bytes_per_message, 3);
    }

    #[test]
    fn running_status_release_uses_the_two_byte_limit() {
        let cfg = LoopConfig {
            release_as_note_on: true,
            running_status: true,
            ..LoopConfig::default()
        };
        assert_eq!(cfg.wire_limit_ns(), 640_000);
        let cfg = LoopConfig {
            running_status: true,
            ..LoopConfig::default()
        };
        assert_eq!(cfg.wire_limit_ns(), 960_000);
    }

    #[test]
    fn disconnect_ends_the_run_and_keeps_the_count() {
        let mut lb = Loopback::new(LoopbackOptions::default());
        lb.disconnect();
        let mut test = LoopTest::new(LoopConfig {
            events: 10,
            ..LoopConfig::default()
        })
        .unwrap();
        let r = test.run(&mut lb);
        assert!(r.disconnected);
        assert_eq!(r.events_received, 0);
    }

    #[test]
    fn too_few_events_is_refused() {
        let e = LoopTest::new(LoopConfig {
            events: 1,
            ..LoopConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("at least 2 events"), "{e}");
    }
}
