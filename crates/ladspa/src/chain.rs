//! A chain of plugin instances, audio outputs of one feeding the audio
//! inputs of the next, channel by channel in port order (as `applyplugin`
//! wires them).
//!
//! # Real-time contract
//! [`Chain::new`] instantiates, connects and activates everything. After
//! that [`Chain::process`] only copies between preallocated buffers and
//! calls each plugin's run(): no allocation, no locks, no printing.

use crate::error::{Error, ErrorKind, Result};
use crate::plugin::{Direction, Instance, Plugin, PortKind, RunError};

/// One plugin in a chain and its control-input values, in port order
/// (already resolved, see [`crate::PluginInfo::resolve_controls`]).
#[derive(Debug, Clone)]
pub struct Stage {
    /// The plugin.
    pub plugin: Plugin,
    /// One value per control input, in port order.
    pub controls: Vec<f32>,
}

struct Running {
    instance: Instance,
    audio_in: Vec<usize>,
    audio_out: Vec<usize>,
}

/// Instantiated, connected and activated plugins run in order.
pub struct Chain {
    stages: Vec<Running>,
    block_size: usize,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field(
                "stages",
                &self
                    .stages
                    .iter()
                    .map(|s| s.instance.plugin().info().label.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("block_size", &self.block_size)
            .finish()
    }
}

impl Chain {
    /// Instantiates every stage at `sample_rate` with `block_size`-frame
    /// buffers, sets its controls and activates it.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an empty chain;
    /// [`ErrorKind::InvalidControl`] when a stage has the wrong number of
    /// control values; [`ErrorKind::Mismatch`] when a plugin's audio
    /// outputs do not match the next one's audio inputs, or the last has
    /// no audio outputs; and whatever [`Instance::new`] returns.
    pub fn new(stages: &[Stage], sample_rate: u32, block_size: usize) -> Result<Chain> {
        if stages.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a chain needs at least one plugin",
            ));
        }
        let mut running: Vec<Running> = Vec::with_capacity(stages.len());
        for (k, st) in stages.iter().enumerate() {
            let info = st.plugin.info();
            let ports = |kind, dir| -> Vec<usize> {
                info.ports_of(kind, dir).iter().map(|p| p.index).collect()
            };
            let audio_in = ports(PortKind::Audio, Direction::Input);
            let audio_out = ports(PortKind::Audio, Direction::Output);
            let controls = ports(PortKind::Control, Direction::Input);
            if controls.len() != st.controls.len() {
                return Err(Error::new(
                    ErrorKind::InvalidControl,
                    format!(
                        "plugin {} has {} control inputs but {} values were given",
                        info.label,
                        controls.len(),
                        st.controls.len()
                    ),
                ));
            }
            if let Some(prev) = running.last() {
                if prev.audio_out.len() != audio_in.len() {
                    return Err(Error::new(
                        ErrorKind::Mismatch,
                        format!(
                            "plugin {} has {} audio output(s) but the next plugin, {}, has {} audio input(s); \
                             chain plugins whose channel counts match",
                            stages[k - 1].plugin.info().label,
                            prev.audio_out.len(),
                            info.label,
                            audio_in.len()
                        ),
                    ));
                }
            }
            let mut instance = st.plugin.instantiate(sample_rate, block_size)?;
            for (&port, &v) in controls.iter().zip(&st.controls) {
                instance.set_control(port, v).expect("control port");
            }
            instance.activate();
            running.push(Running {
                instance,
                audio_in,
                audio_out,
            });
        }
        if running.last().is_some_and(|r| r.audio_out.is_empty()) {
            return Err(Error::new(
                ErrorKind::Mismatch,
                format!(
                    "the last plugin in the chain, {}, has no audio outputs",
                    stages[stages.len() - 1].plugin.info().label
                ),
            ));
        }
        Ok(Chain {
            stages: running,
            block_size,
        })
    }

    /// The largest block [`Chain::process`] accepts.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Audio inputs of the first plugin.
    pub fn input_channels(&self) -> usize {
        self.stages[0].audio_in.len()
    }

    /// Audio outputs of the last plugin.
    pub fn output_channels(&self) -> usize {
        self.stages[self.stages.len() - 1].audio_out.len()
    }

    /// The latency the chain reports, in frames: the sum of each plugin's
    /// control output named `latency` (the LADSPA convention; read after a
    /// run, as hosts do), non-finite or negative values counted as 0.
    pub fn latency(&self) -> u64 {
        self.stages
            .iter()
            .map(|s| {
                let info = s.instance.plugin().info();
                info.ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| {
                        p.kind == PortKind::Control
                            && p.direction == Direction::Output
                            && p.name.eq_ignore_ascii_case("latency")
                    })
                    .filter_map(|(i, _)| s.instance.control(i))
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .map(|v| v.floor() as u64)
                    .sum::<u64>()
            })
            .sum()
    }

    /// The instances, in chain order.
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.stages.iter().map(|s| &s.instance)
    }

    /// Input channel `ch`'s buffer (`block_size` samples) to fill before
    /// [`Chain::process`]. **RT-safe.**
    ///
    /// # Panics
    /// When `ch >= input_channels()`.
    pub fn input_mut(&mut self, ch: usize) -> &mut [f32] {
        let first = &mut self.stages[0];
        let port = first.audio_in[ch];
        first.instance.audio_mut(port).expect("audio port")
    }

    /// Output channel `ch`'s buffer after [`Chain::process`]. **RT-safe.**
    ///
    /// # Panics
    /// When `ch >= output_channels()`.
    pub fn output(&self, ch: usize) -> &[f32] {
        let last = &self.stages[self.stages.len() - 1];
        last.instance.audio(last.audio_out[ch]).expect("audio port")
    }

    /// Runs every plugin on `frames` frames, copying each one's outputs
    /// into the next one's inputs. **RT-safe.**
    ///
    /// # Errors
    /// [`RunError::BlockTooLarge`] when `frames > block_size()`; nothing runs then.
    pub fn process(&mut self, frames: usize) -> Result<(), RunError> {
        if frames > self.block_size {
            return Err(RunError::BlockTooLarge {
                frames,
                capacity: self.block_size,
            });
        }
        for k in 0..self.stages.len() {
            if k > 0 {
                let (done, rest) = self.stages.split_at_mut(k);
                let prev = &done[k - 1];
                let next = &mut rest[0];
                for (&o, &i) in prev.audio_out.iter().zip(&next.audio_in) {
                    let src = prev.instance.audio(o).expect("audio port");
                    let dst = next.instance.audio_mut(i).expect("audio port");
                    dst[..frames].copy_from_slice(&src[..frames]);
                }
            }
            self.stages[k].instance.run(frames)?;
        }
        Ok(())
    }
}
