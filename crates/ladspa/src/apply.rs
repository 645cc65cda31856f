//! Offline processing: a WAV file through a [`Chain`] into another WAV file,
//! as `applyplugin` does. WAV I/O is hound's. Not RT (file I/O).
//!
//! Sample conversion matches `applyplugin` (libsndfile) bit for bit on
//! 16-bit files: integer PCM in is scaled by 1/2^(bits-1); 16-bit out is
//! `trunc(x · 2^31) >> 16`, i.e. libsndfile's float → int32 → int16 path,
//! except that values beyond full scale clip instead of wrapping.

use crate::chain::{Chain, Stage};
use crate::error::{Error, ErrorKind, Result};
use serde::Serialize;
use std::path::Path;

/// The sample format of the output file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// 16-bit PCM for integer input, 32-bit float for float input.
    Same,
    /// 16-bit PCM (what `applyplugin` always writes).
    Int16,
    /// 32-bit IEEE float.
    Float32,
}

/// How [`apply`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyOptions {
    /// Frames per run() call.
    pub block_size: usize,
    /// Seconds of silence fed after the input ends (`applyplugin -s`), so
    /// reverbs and delays can ring out.
    pub decay_seconds: f32,
    /// Output sample format.
    pub format: OutputFormat,
    /// Compensate the latency the plugins report (as `sox ladspa -l`
    /// does): drop that many leading output frames and run that many more
    /// frames of silence at the end, so that the output lines up with the
    /// input to the last frame. Off: the output is late by the latency,
    /// as `applyplugin` writes it.
    pub compensate_latency: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            block_size: 2048,
            decay_seconds: 0.0,
            format: OutputFormat::Same,
            compensate_latency: true,
        }
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApplyReport {
    /// Sample rate of both files.
    pub sample_rate: u32,
    /// Channels read.
    pub input_channels: usize,
    /// Channels written.
    pub output_channels: usize,
    /// Frames read.
    pub input_frames: u64,
    /// Frames written (input plus decay).
    pub output_frames: u64,
    /// Largest absolute output sample before conversion (1.0 = full scale).
    pub peak: f32,
    /// Output samples beyond full scale, clipped in a 16-bit file.
    pub clipped: u64,
    /// Output format written.
    pub format: OutputFormat,
    /// The latency the chain reported after its first run, in frames.
    pub latency_frames: u64,
    /// Whether it was compensated ([`ApplyOptions::compensate_latency`]).
    pub latency_compensated: bool,
}

/// Converts one float sample to 16-bit PCM as libsndfile does for
/// `applyplugin` (float → int32 by truncation → int16 by arithmetic
/// shift), clipping at full scale.
pub fn to_i16(x: f32) -> i16 {
    // `as i32` saturates (and maps NaN to 0): clipping, not C's wrap-around.
    (((x * 2_147_483_648.0) as i32) >> 16) as i16
}

fn io(path: &Path, what: &str, e: hound::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// The sample rate of a WAV file, to resolve sample-rate-relative
/// controls before [`apply`].
///
/// # Errors
/// [`ErrorKind::Io`] when the file cannot be read as WAV.
pub fn wav_sample_rate(path: &Path) -> Result<u32> {
    hound::WavReader::open(path)
        .map(|r| r.spec().sample_rate)
        .map_err(|e| io(path, "read WAV file", e))
}

/// Writes interleaved 16-bit samples as a WAV file, the input [`apply`]
/// and `applyplugin` read: for test signals and fixtures.
///
/// # Errors
/// [`ErrorKind::Io`] when the file cannot be created or written.
pub fn write_wav_i16(path: &Path, channels: u16, sample_rate: u32, samples: &[i16]) -> Result<()> {
    let spec = hound::WavSpec {
        channels,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).map_err(|e| io(path, "create", e))?;
    for &s in samples {
        w.write_sample(s).map_err(|e| io(path, "write", e))?;
    }
    w.finalize().map_err(|e| io(path, "write", e))
}

/// Runs `stages` over the WAV file `input` and writes `output`.
///
/// The first plugin's audio inputs take the file's channels in order and
/// the last plugin's audio outputs become the output's channels.
///
/// # Errors
/// [`ErrorKind::Io`] for unreadable or unwritable files (the message says
/// which); [`ErrorKind::Mismatch`] when the file's channel count differs
/// from the first plugin's audio inputs; [`ErrorKind::InvalidInput`] for a
/// zero block size; anything [`Chain::new`] returns.
pub fn apply(
    input: &Path,
    output: &Path,
    stages: &[Stage],
    opts: &ApplyOptions,
) -> Result<ApplyReport> {
    if opts.block_size == 0 {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "block size must be at least 1 frame",
        ));
    }
    let mut reader = hound::WavReader::open(input).map_err(|e| io(input, "read WAV file", e))?;
    let spec = reader.spec();
    let channels = spec.channels as usize;
    let mut chain = Chain::new(stages, spec.sample_rate, opts.block_size)?;
    if chain.input_channels() != channels {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "{} has {channels} channel(s) but the first plugin, {}, has {} audio input(s); \
                 use a plugin with {channels} input(s) (e.g. a mono plugin for a mono file)",
                input.display(),
                stages[0].plugin.info().label,
                chain.input_channels()
            ),
        ));
    }
    let format = match (opts.format, spec.sample_format) {
        (OutputFormat::Same, hound::SampleFormat::Float) => OutputFormat::Float32,
        (OutputFormat::Same, hound::SampleFormat::Int) => OutputFormat::Int16,
        (f, _) => f,
    };
    let out_channels = chain.output_channels();
    let out_spec = hound::WavSpec {
        channels: out_channels as u16,
        sample_rate: spec.sample_rate,
        bits_per_sample: if format == OutputFormat::Float32 {
            32
        } else {
            16
        },
        sample_format: if format == OutputFormat::Float32 {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let mut writer =
        hound::WavWriter::create(output, out_spec).map_err(|e| io(output, "create", e))?;
    let input_frames = u64::from(reader.duration());
    let decay =
        (f64::from(opts.decay_seconds.max(0.0)) * f64::from(spec.sample_rate)).round() as u64;
    let output_frames = input_frames + decay;
    let scale = match spec.sample_format {
        hound::SampleFormat::Int => 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32,
        hound::SampleFormat::Float => 1.0,
    };
    let is_float = spec.sample_format == hound::SampleFormat::Float;
    let (mut done, mut peak, mut clipped) = (0u64, 0f32, 0u64);
    // Read after the first run (as sox does): the frames to drop at the
    // start and to run on at the end.
    let mut latency: Option<u64> = None;
    let mut dropped = 0u64;
    while done < output_frames + latency.unwrap_or(0) {
        let frames =
            (output_frames + latency.unwrap_or(0) - done).min(opts.block_size as u64) as usize;
        let from_file = input_frames.saturating_sub(done).min(frames as u64) as usize;
        for f in 0..frames {
            for ch in 0..channels {
                let v = if f < from_file {
                    // samples() resumes where the last iterator stopped.
                    if is_float {
                        reader.samples::<f32>().next()
                    } else {
                        reader
                            .samples::<i32>()
                            .next()
                            .map(|r| r.map(|i| i as f32 * scale))
                    }
                    .unwrap_or(Ok(0.0))
                    .map_err(|e| io(input, "read samples of", e))?
                } else {
                    0.0
                };
                chain.input_mut(ch)[f] = v;
            }
        }
        chain
            .process(frames)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("processing failed: {e}")))?;
        let skip = *latency.get_or_insert_with(|| {
            if opts.compensate_latency {
                chain.latency()
            } else {
                0
            }
        });
        let mut first = 0;
        while dropped < skip && first < frames {
            dropped += 1;
            first += 1;
        }
        for f in first..frames {
            for ch in 0..out_channels {
                let x = chain.output(ch)[f];
                peak = peak.max(x.abs());
                let r = if format == OutputFormat::Float32 {
                    writer.write_sample(x)
                } else {
                    clipped += u64::from(!(-1.0..1.0).contains(&x));
                    writer.write_sample(to_i16(x))
                };
                r.map_err(|e| io(output, "write", e))?;
            }
        }
        done += frames as u64;
    }
    writer.finalize().map_err(|e| io(output, "finish", e))?;
    Ok(ApplyReport {
        sample_rate: spec.sample_rate,
        input_channels: channels,
        output_channels: out_channels,
        input_frames,
        output_frames,
        peak,
        clipped,
        format,
        latency_frames: if opts.compensate_latency {
            latency.unwrap_or(0)
        } else {
            chain.latency()
        },
        latency_compensated: opts.compensate_latency,
    })
}

#[cfg(test)]
mod tests {
    use super::to_i16;

    #[test]
    fn to_i16_floors_like_libsndfile_and_clips() {
        // Values applyplugin produced from 16-bit input times 0.5 (checked by hand).
        assert_eq!(to_i16(-1.0 / 32768.0 * 0.5), -1);
        assert_eq!(to_i16(3.0 / 32768.0 * 0.5), 1);
        assert_eq!(to_i16(-12345.0 / 32768.0 * 0.5), -6173);
        assert_eq!(to_i16(32767.0 / 32768.0), 32767);
        assert_eq!(to_i16(-1.0), -32768);
        assert_eq!(to_i16(1.0), 32767);
        assert_eq!(to_i16(3.0), 32767);
        assert_eq!(to_i16(-3.0), -32768);
        assert_eq!(to_i16(f32::NAN), 0);
    }
}
