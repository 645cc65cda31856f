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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jack::{AudioOut, Client, Control, MidiOut, Port, ProcessScope, RawMidi};

use firmtime_jack::{
    activate, connect, deactivate, jack_clock_offset, open_client, port_name, read_cycle_times,
    CycleTimes, FrameExtender, FrameGaps, XrunNotifier,
};

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

#[derive(Debug)]
struct PlayerShared {
    armed: AtomicBool,
    start_frame: AtomicU64,
    /// Samples played so far.
    played: AtomicU64,
    xruns: AtomicU64,
    frame_gaps: AtomicU64,
    /// MIDI messages that could not be written (port buffer full).
    midi_dropped: AtomicU64,
}

/// The player's process core over plain values.
#[derive(Debug)]
struct PlayerCore {
    signal: Vec<f32>,
    base: Option<u64>,
    lead: u64,
    shared: Arc<PlayerShared>,
    /// MIDI messages at frame offsets from the same start, sorted.
    midi: Vec<Tap>,
    next_midi: usize,
}

impl PlayerCore {
    /// Fills `out` (the cycle's buffer) with the signal's samples of this
    /// cycle, silence elsewhere. **RT-safe.**
    fn render(&mut self, cycle: &CycleTimes, out: &mut [f32]) {
        out.fill(0.0);
        let base = match self.base {
            Some(b) => b,
            None if self.shared.armed.load(Ordering::Acquire) => {
                let b = cycle.frame + self.lead;
                self.base = Some(b);
                self.shared.start_frame.store(b, Ordering::Release);
                b
            }
            None => return,
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
        self.shared.played.store(done, Ordering::Release);
    }

    /// Writes the MIDI messages due in this cycle through `write(offset,
    /// bytes)` (after [`PlayerCore::render`] fixed the start). **RT-safe.**
    fn midi(&mut self, cycle: &CycleTimes, write: &mut dyn FnMut(u32, &[u8]) -> bool) {
        let Some(base) = self.base else { return };
        let end = cycle.end_frame();
        while let Some(tap) = self.midi.get(self.next_midi) {
            let frame = base + tap.offset;
            if frame >= end {
                break;
            }
            self.next_midi += 1;
            let mut buf = [0u8; 3];
            let n = tap.msg.encode(&mut buf);
            let at = frame.max(cycle.frame) - cycle.frame;
            if n == 0 || !write(at as u32, &buf[..n]) {
                self.shared.midi_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct PlayerProcess {
    core: PlayerCore,
    port: Port<AudioOut>,
    midi_port: Option<Port<MidiOut>>,
    ext: FrameExtender,
    gaps: FrameGaps,
    clock_offset_ns: i64,
}

impl jack::ProcessHandler for PlayerProcess {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        // Under the `assert-rt` feature an allocation here aborts.
        firmtime_rt::assert_rt::no_alloc(|| {
            let cycle = read_cycle_times(ps, &mut self.ext, self.clock_offset_ns);
            if self.gaps.observe_cycle(&cycle) {
                self.core.shared.frame_gaps.fetch_add(1, Ordering::Relaxed);
            }
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
    client: Option<jack::AsyncClient<XrunNotifier<PlayerShared>, PlayerProcess>>,
    shared: Arc<PlayerShared>,
    len: u64,
    port_name: String,
}

impl fmt::Debug for AudioPlayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AudioPlayer")
            .field("port_name", &self.port_name)
            .field("len", &self.len)
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
        mut midi: Vec<Tap>,
        midi_to: &[String],
    ) -> Result<Self, Error> {
        let client = open_client(&options.client_name, options.server_name.as_deref())?;
        midi.sort_by_key(|t| t.offset);
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
        let (clock_offset_ns, _) = jack_clock_offset(&client);
        let len = signal.len() as u64;
        let shared = Arc::new(PlayerShared {
            armed: AtomicBool::new(false),
            start_frame: AtomicU64::new(u64::MAX),
            played: AtomicU64::new(0),
            xruns: AtomicU64::new(0),
            frame_gaps: AtomicU64::new(0),
            midi_dropped: AtomicU64::new(0),
        });
        let process = PlayerProcess {
            core: PlayerCore {
                signal,
                base: None,
                lead: options.lead_frames,
                shared: Arc::clone(&shared),
                midi,
                next_midi: 0,
            },
            port,
            midi_port,
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            clock_offset_ns,
        };
        let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
        let active = activate(client, notifier, process, "JACK client")?;
        for dst in &options.connect_to {
            connect(active.as_client(), &port_name, dst)?;
        }
        if let Some(m) = &midi_name {
            for dst in midi_to {
                connect(active.as_client(), m, dst)?;
            }
        }
        shared.armed.store(true, Ordering::Release);
        Ok(AudioPlayer {
            client: Some(active),
            shared,
            len,
            port_name,
        })
    }

    /// Full name of the player's output port.
    pub fn port_name(&self) -> &str {
        &self.port_name
    }

    /// The frame of the signal's sample 0, once the first armed cycle has run.
    pub fn start_frame(&self) -> Option<u64> {
        match self.shared.start_frame.load(Ordering::Acquire) {
            u64::MAX => None,
            f => Some(f),
        }
    }

    /// Samples played so far.
    pub fn played(&self) -> u64 {
        self.shared.played.load(Ordering::Acquire)
    }

    /// Waits until the whole signal has gone out or `timeout` has passed,
    /// closes the client and returns the report.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when the client cannot be deactivated.
    pub fn finish(mut self, timeout: Duration) -> Result<PlayerReport, Error> {
        let deadline = Instant::now() + timeout;
        while self.played() < self.len && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let complete = self.played() >= self.len;
        if let Some(client) = self.client.take() {
            deactivate(client, "JACK client")?;
        }
        Ok(PlayerReport {
            start_frame: self.start_frame(),
            complete,
            xruns: self.shared.xruns.load(Ordering::Relaxed),
            frame_gaps: self.shared.frame_gaps.load(Ordering::Relaxed),
            midi_dropped: self.shared.midi_dropped.load(Ordering::Relaxed),
        })
    }
}

impl Drop for AudioPlayer {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.deactivate();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_starts_at_the_first_armed_cycle_plus_the_lead_across_cycles() {
        let shared = Arc::new(PlayerShared {
            armed: AtomicBool::new(false),
            start_frame: AtomicU64::new(u64::MAX),
            played: AtomicU64::new(0),
            xruns: AtomicU64::new(0),
            frame_gaps: AtomicU64::new(0),
            midi_dropped: AtomicU64::new(0),
        });
        let mut core = PlayerCore {
            signal: (1..=300).map(|i| i as f32).collect(),
            base: None,
            lead: 100,
            shared: Arc::clone(&shared),
            midi: Vec::new(),
            next_midi: 0,
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
        assert_eq!(shared.played.load(Ordering::Relaxed), 300);
    }
}
