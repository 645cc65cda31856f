//! Two kinds of evidence per tap (`[input] source = "midi+audio"`): each
//! MIDI keystroke paired with the onset of its sound, the MIDI-minus-audio
//! delay per tap (the pad's own latency, measured every trial), MIDI hits
//! without a sound (doubled or phantom) and sounds without MIDI (dropped hits).
//!
//! [`pair`] runs after the trial (it allocates). A sound pairs with a MIDI
//! press stamped from [`SOUND_AFTER_MIDI_MS`] before it to
//! [`SOUND_BEFORE_MIDI_MS`] after it (a pad's MIDI comes after its sound);
//! presses are taken in time order, each taking the earliest unpaired sound
//! in its window, so a doubled hit's second press finds none.

use serde::{Deserialize, Serialize};

/// A sound may come this long before its MIDI press, ms.
pub const SOUND_BEFORE_MIDI_MS: f64 = 50.0;
/// … or this long after it, ms.
pub const SOUND_AFTER_MIDI_MS: f64 = 10.0;

/// What [`pair`] found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pairs {
    /// For each MIDI press (in the order given), the index of its sound.
    pub sound_of_press: Vec<Option<usize>>,
    /// For each sound (in the order given), the index of its MIDI press.
    pub press_of_sound: Vec<Option<usize>>,
}

/// Pairs MIDI presses (`presses`, µs, ascending) with sound onsets
/// (`sounds`, µs, ascending).
pub fn pair(presses: &[i64], sounds: &[i64]) -> Pairs {
    let before = (SOUND_BEFORE_MIDI_MS * 1000.0) as i64;
    let after = (SOUND_AFTER_MIDI_MS * 1000.0) as i64;
    let mut p = Pairs {
        sound_of_press: vec![None; presses.len()],
        press_of_sound: vec![None; sounds.len()],
    };
    let mut first = 0;
    for (i, &t) in presses.iter().enumerate() {
        while first < sounds.len() && sounds[first] < t - before {
            first += 1;
        }
        let found = (first..sounds.len())
            .take_while(|&j| sounds[j] <= t + after)
            .find(|&j| p.press_of_sound[j].is_none());
        if let Some(j) = found {
            p.sound_of_press[i] = Some(j);
            p.press_of_sound[j] = Some(i);
        }
    }
    p
}

/// The trial's summary of the pairing: the sidecar's `pairing`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairingSummary {
    /// MIDI presses (keystrokes).
    pub midi_presses: u64,
    /// Sound onsets detected.
    pub sounds: u64,
    /// Presses paired with a sound.
    pub paired: u64,
    /// MIDI presses without a sound: doubled or phantom hits (`flag` `no_sound`).
    pub midi_without_sound: u64,
    /// Sounds without a MIDI press: dropped hits (`flag` `no_midi`).
    pub sounds_without_midi: u64,
    /// MIDI − sound of the pairs, µs: mean, sd (n − 1), median, min, max
    /// (null without pairs).
    pub pad_delay_mean_us: Option<f64>,
    /// See `pad_delay_mean_us`.
    pub pad_delay_sd_us: Option<f64>,
    /// See `pad_delay_mean_us`.
    pub pad_delay_median_us: Option<f64>,
    /// See `pad_delay_mean_us`.
    pub pad_delay_min_us: Option<i64>,
    /// See `pad_delay_mean_us`.
    pub pad_delay_max_us: Option<i64>,
    /// The pairing window: a sound from this long before its press …
    pub sound_before_midi_ms: f64,
    /// … to this long after it.
    pub sound_after_midi_ms: f64,
}

impl PairingSummary {
    /// The summary of `pairs` of `presses` and `sounds` (µs).
    pub fn of(presses: &[i64], sounds: &[i64], pairs: &Pairs) -> Self {
        let mut d: Vec<i64> = pairs
            .sound_of_press
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|j| presses[i] - sounds[j]))
            .collect();
        d.sort_unstable();
        let n = d.len();
        let mean = (n > 0).then(|| d.iter().sum::<i64>() as f64 / n as f64);
        let sd = mean.filter(|_| n > 1).map(|m| {
            (d.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        });
        let median = (n > 0).then(|| {
            if n % 2 == 1 {
                d[n / 2] as f64
            } else {
                (d[n / 2 - 1] + d[n / 2]) as f64 / 2.0
            }
        });
        PairingSummary {
            midi_presses: presses.len() as u64,
            sounds: sounds.len() as u64,
            paired: n as u64,
            midi_without_sound: (presses.len() - n) as u64,
            sounds_without_midi: pairs.press_of_sound.iter().filter(|p| p.is_none()).count() as u64,
            pad_delay_mean_us: mean,
            pad_delay_sd_us: sd,
            pad_delay_median_us: median,
            pad_delay_min_us: d.first().copied(),
            pad_delay_max_us: d.last().copied(),
            sound_before_midi_ms: SOUND_BEFORE_MIDI_MS,
            sound_after_midi_ms: SOUND_AFTER_MIDI_MS,
        }
    }

    /// One line for stderr.
    pub fn words(&self) -> String {
        format!(
            "{} MIDI hit(s), {} sound(s): {} paired, pad delay (MIDI − sound) {}; {} MIDI hit(s) without a sound (doubled or phantom), {} sound(s) without MIDI (dropped hits)",
            self.midi_presses,
            self.sounds,
            self.paired,
            match (self.pad_delay_median_us, self.pad_delay_sd_us) {
                (Some(m), Some(sd)) => format!("median {:.2} ms, sd {:.2} ms", m / 1000.0, sd / 1000.0),
                (Some(m), None) => format!("{:.2} ms", m / 1000.0),
                _ => "none".into(),
            },
            self.midi_without_sound,
            self.sounds_without_midi
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_dropped_and_doubled_midi_hits_are_paired_and_flagged() {
        // Sounds every 200 ms; MIDI 9 ms after each, but the 3rd dropped,
        // the 5th doubled (a second press 4 ms after the first), and a
        // phantom press far from any sound.
        let sounds: Vec<i64> = (0..8).map(|i| 100_000 + i * 200_000).collect();
        let mut presses = Vec::new();
        for (i, &s) in sounds.iter().enumerate() {
            match i {
                2 => {}
                4 => presses.extend([s + 9000, s + 13_000]),
                _ => presses.push(s + 9000),
            }
        }
        presses.push(1_800_000);
        let p = pair(&presses, &sounds);
        assert_eq!(p.press_of_sound[2], None, "the dropped hit's sound");
        // Presses 3 and 4 are the 5th sound's doubled hit.
        assert_eq!(p.sound_of_press[3], Some(4));
        assert_eq!(p.sound_of_press[4], None, "the doubled hit's second press");
        assert_eq!(p.sound_of_press[8], None, "the phantom");
        let s = PairingSummary::of(&presses, &sounds, &p);
        assert_eq!(
            (
                s.midi_presses,
                s.sounds,
                s.paired,
                s.midi_without_sound,
                s.sounds_without_midi
            ),
            (9, 8, 7, 2, 1)
        );
        assert_eq!(s.pad_delay_median_us, Some(9000.0));
        assert_eq!(
            (s.pad_delay_min_us, s.pad_delay_max_us),
            (Some(9000), Some(9000))
        );
        assert_eq!(s.pad_delay_sd_us, Some(0.0));
        assert!(
            s.words()
                .contains("7 paired, pad delay (MIDI − sound) median 9.00 ms"),
            "{}",
            s.words()
        );
    }

    #[test]
    fn a_sound_outside_the_window_is_not_paired() {
        let p = pair(&[100_000, 300_000], &[40_000, 311_000]);
        assert_eq!(p.sound_of_press, [None, None]);
        let p = pair(&[100_000, 300_000], &[50_000, 310_000]);
        assert_eq!(p.sound_of_press, [Some(0), Some(1)]);
    }
}
