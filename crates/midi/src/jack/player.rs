//! A simulated tapping surface: a JACK client of its own that plays a
//! prepared audio signal (tap sounds in noise) from a known frame into an
//! audio input, the ground truth for taps from sound.
//!
//! The start frame is fixed by the first process cycle after the client is
//! activated and connected: that cycle's first frame plus
//! [`PlayerOptions::lead_frames`]. Sample `i` of the signal goes out at
//! frame `start + i`; a tap at sample `o` of the signal is at frame
//! `start + o` in any client of the same server. With
//! [`AudioPlayer::start_with_midi`] it also plays MIDI messages at frames
//! counted from the same start (a drum pad's MIDI beside its sound).
//!
//! # Real-time contract
//!
//! The signal is allocated in [`AudioPlayer::start`]; the process callback
//! only copies from it and stores atomics. No allocation, no locks, no
//! printing.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use jack::{AudioOut, Client, Control, MidiOut, Port, ProcessScope, RawMidi};

use firmtime_jack::{open_client, port_name, CycleTimes};

use super::sim::{Running, Schedule, SimClock, SimShared};
use super::tapper::Tap;
use crate::error::{Error, ErrorKind};

/// Options for [`AudioPlayer::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayerOptions {
    /// The JACK server; `None`: the default server.
    pub server_name: Option<String>,
    /// The player's client name.
    pub client_name: String,
    /// Short name of its audio output port.
    pub port_name: String,
    /// Full names of the ports to connect the output to before it starts.
    pub connect_to: Vec<String>,
    /// Frames between the first cycle after arming and the signal's sample 0.
    pub lead_frames: u64,
}

impl PlayerOptions {
    /// Client `client_name` on the default server, port `out`, no
    /// connections, no lead.
    pub fn new(client_name: impl Into<String>) -> Self {
        PlayerOptions {
            server_name: None,
            client_name: client_name.into(),
            port_name: "out".into(),
            connect_to: Vec::new(),
            lead_frames: 0,
        }
    }
}

/// What [`AudioPlayer::finish`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayerReport {
    /// The absolute frame of the signal's sample 0.
    pub start_frame: Option<u64>,
    /// True when the whole signal went out before the timeout.
    pub complete: bool,
    /// Server xruns seen while the player ran.
    pub xruns: u64,
    /// Cycles the server dropped while it ran (gaps in the frame counter).
    pub frame_gaps: u64,
    /// MIDI messages that could not be written (port buffer full).
    pub midi_dropped: u64,
}

/// The player's process core over plain values: the signal, and MIDI
/// messages at frame offsets from the same start.
#[derive(Debug)]
struct PlayerCore {
    signal: Vec<f32>,
    schedule: Schedule,
}

impl PlayerCore {
    /// Fills `out` (the cycle's buffer) with the signal's samples of this
    /// cycle, silence elsewhere. **RT-safe.**
    fn render(&mut self, cycle: &CycleTimes, out: &mut [f32]) {
        out.fill(0.0);
        let Some(base) = self.schedule.start(cycle) else {
            return;
        };
        let len = self.signal.len() as u64;
        for (i, o) in out.iter_mut().enumerate() {
            let f = cycle.frame + i as u64;
            if f >= base && f - base < len {
                *o = self.signal[(f - base) as usize];
            }
        }
        let done = (cycle.frame + out.len() as u64)
            .saturating_sub(base)
            .min(len);
        self.schedule.shared.progress.store(done, Ordering::Release);
    }

    /// Writes the MIDI messages due in this cycle through `write(offset,
    /// bytes)` (after [`PlayerCore::render`] fixed the start). **RT-safe.**
    fn midi(&mut self, cycle: &CycleTimes, write: &mut dyn FnMut(u32, &[u8]) -> bool) {
        let Some(base) = self.schedule.base() else {
            return;
        };
        self.schedule.emit(cycle, base, write, &mut |_, _, _| {});
    }
}

struct PlayerProcess {
    core: PlayerCore,
    port: Port<AudioOut>,
    midi_port: Option<Port<MidiOut>>,
    clock: SimClock,
}

impl jack::ProcessHandler for PlayerProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| {
            let cycle = self.clock.read(ps, &self.core.schedule.shared);
            let out = self.port.as_mut_slice(ps);
            self.core.render(&cycle, out);
            if let Some(p) = self.midi_port.as_mut() {
                let mut w = p.writer(ps);
                self.core.midi(&cycle, &mut |time, bytes| {
                    w.write(&RawMidi { time, bytes }).is_ok()
                });
            }
            Control::Continue
        })
    }
}

/// A running player. [`AudioPlayer::finish`] waits for the end of the
/// signal; dropping it closes the client.
pub struct AudioPlayer {
    running: Running<PlayerProcess>,
}

impl fmt::Debug for AudioPlayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AudioPlayer")
            .field("port_name", &self.running.port_name)
            .field("len", &self.running.total())
            .finish_non_exhaustive()
    }
}

impl AudioPlayer {
    /// Opens the player's client, registers its output, activates it,
    /// connects it and starts the signal.
    ///
    /// # Errors
    /// No libjack, no server, or a port that cannot be registered or connected.
    pub fn start(options: PlayerOptions, signal: Vec<f32>) -> Result<Self, Error> {
        Self::start_with_midi(options, signal, Vec::new(), &[])
    }

    /// As [`AudioPlayer::start`], and plays `midi` (offsets from the same
    /// start frame, any order) on a MIDI output `midi_out` connected to
    /// `midi_to` (no MIDI port when `midi` is empty).
    ///
    /// # Errors
    /// As [`AudioPlayer::start`].
    pub fn start_with_midi(
        options: PlayerOptions,
        signal: Vec<f32>,
        midi: Vec<Tap>,
        midi_to: &[String],
    ) -> Result<Self, Error> {
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        let midi_port = if midi.is_empty() {
            None
        } else {
            Some(
                client
                    .register_port("midi_out", MidiOut::default())
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::Port,
                            format!("cannot register JACK MIDI port \"midi_out\": {e}"),
                        )
                    })?,
            )
        };
        let midi_name = match &midi_port {
            Some(p) => Some(port_name(p)?),
            None => None,
        };
        let port = client
            .register_port(&options.port_name, AudioOut::default())
            .map_err(|e| {
                Error::new(
                    ErrorKind::Port,
                    format!(
                        "cannot register JACK audio port {:?}: {e}",
                        options.port_name
                    ),
                )
            })?;
        let port_name = port_name(&port)?;
        let clock = SimClock::new(&client);
        let len = signal.len() as u64;
        let shared = SimShared::new();
        let process = PlayerProcess {
            core: PlayerCore {
                signal,
                schedule: Schedule::new(midi, options.lead_frames, Arc::clone(&shared)),
            },
            port,
            midi_port,
            clock,
        };
        let mut connections: Vec<(&str, &str)> = options
            .connect_to
            .iter()
            .map(|dst| (port_name.as_str(), dst.as_str()))
            .collect();
        if let Some(m) = &midi_name {
            connections.extend(midi_to.iter().map(|dst| (m.as_str(), dst.as_str())));
        }
        let running = Running::start(
            client,
            process,
            shared,
            len,
            port_name.clone(),
            &connections,
        )?;
        Ok(AudioPlayer { running })
    }

    /// Full name of the player's output port.
    pub fn port_name(&self) -> &str {
        &self.running.port_name
    }

    /// The frame of the signal's sample 0, once the first armed cycle has run.
    pub fn start_frame(&self) -> Option<u64> {
        self.running.shared().start_frame()
    }

    /// Samples played so far.
    pub fn played(&self) -> u64 {
        self.running.progress()
    }

    /// Waits until the whole signal has gone out or `timeout` has passed,
    /// closes the client and returns the report.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when the client cannot be deactivated.
    pub fn finish(self, timeout: Duration) -> Result<PlayerReport, Error> {
        let done = self.running.finish(timeout)?;
        Ok(PlayerReport {
            start_frame: done.start_frame,
            complete: done.complete,
            xruns: done.xruns,
            frame_gaps: done.frame_gaps,
            midi_dropped: done.dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_starts_at_the_first_armed_cycle_plus_the_lead_across_cycles() {
        let shared = SimShared::new();
        let mut core = PlayerCore {
            signal: (1..=300).map(|i| i as f32).collect(),
            schedule: Schedule::new(Vec::new(), 100, Arc::clone(&shared)),
        };
        let cyc = |k: u64| CycleTimes {
            frame: 5000 + k * 256,
            n_frames: 256,
            start_ns: 1_000_000 + k * 5_333_333,
            next_ns: 1_000_000 + (k + 1) * 5_333_333,
        };
        let mut out = [9.0f32; 256];
        core.render(&cyc(0), &mut out);
        assert!(out.iter().all(|&x| x == 0.0), "not armed: silence");
        shared.armed.store(true, Ordering::Release);
        let mut all = Vec::with_capacity(3 * 256);
        assert_no_alloc::assert_no_alloc(|| {
            for k in 1..4 {
                core.render(&cyc(k), &mut out);
                all.extend_from_slice(&out);
            }
        });
        // Armed at cycle 1 (frame 5256): sample 0 at 5356, i.e. index 100 here.
        assert_eq!(shared.start_frame.load(Ordering::Relaxed), 5356);
        assert!(all[..100].iter().all(|&x| x == 0.0));
        assert_eq!(all[100], 1.0);
        assert_eq!(all[399], 300.0);
        assert!(all[400..].iter().all(|&x| x == 0.0));
        assert_eq!(shared.progress.load(Ordering::Relaxed), 300);
    }
}
