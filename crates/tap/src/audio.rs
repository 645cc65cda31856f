//! Audio output for experiments: what the JACK synth
//! ([`firmtime_midi::jack::audio`]) must render for an experiment, and
//! which backend port each kind of output goes to.
//!
//! With `[output] device = "audio"` feedback and metronome notes are
//! rendered as a click or a tone starting at their exact frame (no MIDI
//! sound module and its hidden delay); with `[masking] source = "audio"`
//! masking noise is a continuous bed, switched on and off like the MIDI
//! masking note (by `masking.on` and triggers), rendered by the synth on
//! the masking channel. The session opens one backend for all its trials, so
//! [`session_synth`] asks every experiment of a session for the same sound.
//!
//! # Real-time contract
//!
//! Setup only: these functions run before the trial and may allocate.

use firmtime_midi::jack::{NoiseColor, Sound, SynthOptions};
use firmtime_midi::PortIndex;

use crate::engine::EngineOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::experiment::{Device, Experiment};
use crate::params::{MaskNoise, MaskSource};

/// True when `e` needs the JACK synth: audio output or audio masking.
pub fn needs_audio(e: &Experiment) -> bool {
    e.output.device == Device::Audio || e.masking.source == MaskSource::Audio
}

/// The synth settings `e` asks for; `None` when it needs no audio.
///
/// # Errors
/// [`ErrorKind::Invalid`] when the masking channel (whose notes the synth
/// turns into noise) is also a feedback or metronome channel of audio output.
pub fn synth_options(e: &Experiment) -> Result<Option<SynthOptions>> {
    if !needs_audio(e) {
        return Ok(None);
    }
    let noise_channel = (e.masking.source == MaskSource::Audio).then(|| e.masking.channel.midi());
    if let (Some(nc), Device::Audio) = (noise_channel, e.output.device) {
        let mut used = vec![e.metronome.channel];
        used.extend(e.metronome.pattern_channels.as_slice().iter().copied());
        used.extend(e.feedback.on.then_some(e.feedback.channel));
        used.extend(e.feedback2.on.then_some(e.feedback2.channel));
        if used.iter().any(|c| c.midi() == nc) {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "[masking] channel {} is also a feedback or metronome channel: with audio output \
                     its notes would switch the noise; give masking its own channel",
                    nc + 1
                ),
            ));
        }
    }
    Ok(Some(SynthOptions {
        sound: match e.output.sound {
            crate::experiment::Sound::Click => Sound::Click,
            crate::experiment::Sound::Tone => Sound::Tone,
        },
        level_dbfs: e.output.level_dbfs,
        noise_channel,
        noise: match e.masking.noise {
            MaskNoise::White => NoiseColor::White,
            MaskNoise::Pink => NoiseColor::Pink,
        },
        noise_level_dbfs: e.masking.level_dbfs,
        ..SynthOptions::default()
    }))
}

/// The synth settings for replaying a trial of `e` through audio
/// (`firmtime tap replay --audio`): `e`'s `[output]` sound and level (a
/// click at −6 dBFS without an experiment), and its masking notes rendered
/// as `[masking]` noise (colour and level) whatever its masking source,
/// unless the masking channel is also a feedback or metronome channel.
pub fn replay_synth(e: Option<&Experiment>) -> SynthOptions {
    let Some(e) = e else {
        return SynthOptions::default();
    };
    let nc = e.masking.channel.midi();
    let mut used = vec![e.metronome.channel];
    used.extend(e.metronome.pattern_channels.as_slice().iter().copied());
    used.extend(e.feedback.on.then_some(e.feedback.channel));
    used.extend(e.feedback2.on.then_some(e.feedback2.channel));
    let shared = used.iter().any(|c| c.midi() == nc);
    SynthOptions {
        sound: match e.output.sound {
            crate::experiment::Sound::Click => Sound::Click,
            crate::experiment::Sound::Tone => Sound::Tone,
        },
        level_dbfs: e.output.level_dbfs,
        noise_channel: (!shared).then_some(nc),
        noise: match e.masking.noise {
            MaskNoise::White => NoiseColor::White,
            MaskNoise::Pink => NoiseColor::Pink,
        },
        noise_level_dbfs: e.masking.level_dbfs,
        ..SynthOptions::default()
    }
}

/// The one synth setting for a session of experiments (`None`: no audio).
///
/// # Errors
/// As [`synth_options`], and [`ErrorKind::Invalid`] when two experiments
/// ask for different sounds (the backend opens once per session).
pub fn session_synth<'a>(
    exps: impl IntoIterator<Item = &'a Experiment>,
) -> Result<Option<SynthOptions>> {
    let mut chosen: Option<(SynthOptions, &str)> = None;
    for e in exps {
        let Some(s) = synth_options(e)? else {
            continue;
        };
        match &mut chosen {
            None => chosen = Some((s, &e.name)),
            Some((c, name)) => {
                // Noise only in one of them is fine: merge it in.
                if c.noise_channel.is_none() {
                    c.noise_channel = s.noise_channel;
                    c.noise_level_dbfs = s.noise_level_dbfs;
                    c.noise = s.noise;
                }
                let differs = c.sound != s.sound
                    || c.level_dbfs != s.level_dbfs
                    || (s.noise_channel.is_some()
                        && (c.noise_channel != s.noise_channel
                            || c.noise_level_dbfs != s.noise_level_dbfs
                            || c.noise != s.noise));
                if differs {
                    return Err(Error::new(
                        ErrorKind::Invalid,
                        format!(
                            "experiments {name:?} and {:?} ask for different audio ([output] sound / \
                             level_dbfs, [masking] channel / level_dbfs / noise); one session plays one sound: \
                             run them in separate sessions",
                            e.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(chosen.map(|(s, _)| s))
}

/// Routes `e`'s outputs: feedback and metronome to `audio_port` when its
/// output device is audio, else to `midi_port`; audio masking to
/// `audio_port`, MIDI masking to `midi_port`.
///
/// # Errors
/// [`ErrorKind::Invalid`] when `e` needs audio and `audio_port` is `None`
/// (the backend has no synth: use the JACK backend), or needs MIDI output
/// and `midi_port` is `None`.
pub fn route(
    opts: &mut EngineOptions,
    e: &Experiment,
    midi_port: Option<PortIndex>,
    audio_port: Option<PortIndex>,
) -> Result<()> {
    let need = |p: Option<PortIndex>, what: &str| {
        p.ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                format!("experiment {:?} needs {what}", e.name),
            )
        })
    };
    let audio_msg = "audio output, which only the JACK backend renders (--backend jack)";
    opts.output_port = match e.output.device {
        Device::Audio => need(audio_port, audio_msg)?,
        Device::Midi => need(midi_port, "a MIDI output port")?,
    };
    opts.audio_masking = e.masking.source == MaskSource::Audio;
    opts.masking_port = Some(match e.masking.source {
        MaskSource::Audio => need(audio_port, audio_msg)?,
        MaskSource::Midi => need(midi_port, "a MIDI output port for the masking note")?,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(extra: &str) -> Experiment {
        Experiment::from_toml(&format!("name = \"a\"\n{extra}\n[end]\nkeystrokes = 4\n")).unwrap()
    }

    #[test]
    fn midi_experiment_needs_no_synth_and_routes_to_midi() {
        let e = exp("");
        assert!(synth_options(&e).unwrap().is_none());
        let mut o = EngineOptions::default();
        route(&mut o, &e, Some(0), None).unwrap();
        assert_eq!(
            (o.output_port, o.masking_port, o.audio_masking),
            (0, Some(0), false)
        );
    }

    #[test]
    fn audio_tone_with_audio_masking() {
        let e = exp(
            "[output]\ndevice = \"audio\"\nsound = \"tone\"\nlevel_dbfs = -12\n\
             [masking]\nsource = \"audio\"\nlevel_dbfs = -30\n",
        );
        let s = synth_options(&e).unwrap().unwrap();
        assert_eq!(s.sound, Sound::Tone);
        assert_eq!(s.level_dbfs, -12.0);
        assert_eq!(s.noise_channel, Some(15), "masking channel 16 by default");
        assert_eq!(s.noise_level_dbfs, -30.0);
        let mut o = EngineOptions::default();
        route(&mut o, &e, Some(0), Some(1)).unwrap();
        assert_eq!(
            (o.output_port, o.masking_port, o.audio_masking),
            (1, Some(1), true)
        );
        let err = route(&mut o, &e, Some(0), None).unwrap_err();
        assert!(err.to_string().contains("--backend jack"), "{err}");
    }

    #[test]
    fn pink_noise_reaches_the_synth_options() {
        let e = exp("[masking]\nsource = \"audio\"\nnoise = \"pink\"\n");
        assert_eq!(e.masking.noise, MaskNoise::Pink);
        let s = synth_options(&e).unwrap().unwrap();
        assert_eq!(s.noise, NoiseColor::Pink);
        assert_eq!(s.noise_channel, Some(15));
        let white = exp("[masking]\nsource = \"audio\"\n");
        assert_eq!(
            synth_options(&white).unwrap().unwrap().noise,
            NoiseColor::White,
            "white by default"
        );
        let err = session_synth([&e, &white]).unwrap_err();
        assert!(err.to_string().contains("noise"), "{err}");
    }

    #[test]
    fn unknown_noise_colour_is_an_error_with_line_and_column() {
        let err = Experiment::from_toml(
            "name = \"a\"\n[masking]\nsource = \"audio\"\nnoise = \"brown\"\n[end]\nkeystrokes = 4\n",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 4"), "{msg}");
        assert!(msg.contains("column"), "{msg}");
        assert!(msg.contains("brown") || msg.contains("white"), "{msg}");
    }

    #[test]
    fn replay_synth_renders_masking_as_noise_unless_its_channel_is_shared() {
        assert_eq!(replay_synth(None), SynthOptions::default());
        let e = exp("[output]\nsound = \"tone\"\n[masking]\nnoise = \"pink\"\nlevel_dbfs = -30\n");
        let s = replay_synth(Some(&e));
        assert_eq!(
            (s.sound, s.noise_channel, s.noise, s.noise_level_dbfs),
            (Sound::Tone, Some(15), NoiseColor::Pink, -30.0)
        );
        let shared = exp("[feedback]\nchannel = 16\n[masking]\n");
        assert_eq!(replay_synth(Some(&shared)).noise_channel, None);
    }

    #[test]
    fn masking_channel_shared_with_feedback_is_refused() {
        let e = exp(
            "[output]\ndevice = \"audio\"\n[feedback]\nchannel = 16\n[masking]\nsource = \"audio\"\n",
        );
        let err = synth_options(&e).unwrap_err();
        assert!(err.to_string().contains("channel 16"), "{err}");
    }

    #[test]
    fn a_session_plays_one_sound() {
        let a = exp("[output]\ndevice = \"audio\"\n");
        let b = exp("[output]\ndevice = \"audio\"\nsound = \"tone\"\n");
        let m = exp("[masking]\nsource = \"audio\"\n");
        assert!(session_synth([&a, &b]).is_err());
        let s = session_synth([&a, &m]).unwrap().unwrap();
        assert_eq!((s.sound, s.noise_channel), (Sound::Click, Some(15)));
        assert!(session_synth([&exp("")]).unwrap().is_none());
    }
}
