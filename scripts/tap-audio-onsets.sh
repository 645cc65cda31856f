#!/usr/bin/env bash
# Taps from sound (issue 30, items 1 and 3): figures of the audio onset
# detector (crates/tap/src/onset.rs) against synthetic taps with known onsets
# (decaying noise bursts in pink or white noise, seeded), beside the targets:
#   F1 >= 0.99 at 10 dB SNR; |onset error| <= 24 frames (0.5 ms at 48 kHz)
#   for >= 99 % of taps.
#  (1) offline: the detector alone over 10 × 200 taps per SNR (30 … 6 dB);
#  (2) end to end through a private `jackd -d dummy` and (3) through a
#      private headless PipeWire: a player client of the tests plays the taps
#      into the engine's JACK audio input, the engine's keystroke frames are
#      compared with the played frames (N taps at 20 and at 10 dB SNR).
# SNR = the burst's power over its first 10 ms / the noise's power (the
# burst's first millisecond is about 6 dB above that average).
#
# Usage: scripts/tap-audio-onsets.sh [TAPS]   (TAPS through the servers, default 200)
# A server that is not installed prints SKIP. The taps through a server are
# played in trials of 40; a trial with xruns or dropped cycles (audio lost,
# not the detector's doing) is waived (WAIVED, counted in the line) and
# replaced, at most 3 times as many trials as needed.
set -euo pipefail
cd "$(dirname "$0")/.."
taps=${1:-200}
echo "(1) offline"
cargo run -q --release -p firmtime-tap --example onset_bench 2>/dev/null | sed 's/^/    /'
for server in engine pipewire; do
  label=$([ $server = engine ] && echo "jackd dummy" || echo "PipeWire")
  echo "($([ $server = engine ] && echo 2 || echo 3)) through $label, 48 kHz, 256 frames/period, $taps taps per SNR"
  out=$(FIRMTIME_TAP_AUDIO_TAPS=$taps cargo test -q --release -p firmtime-tap --test $server -- \
        --ignored --nocapture --test-threads=1 audio_tap_figures_through_the_server 2>&1) \
    || { echo "$out" >&2; exit 1; }
  grep -E 'SKIP|WAIVED' <<<"$out" | sed 's/^/    /' || true
  grep -E 'dB SNR: ' <<<"$out" | sed 's/^/    /; s/ | /\n        /g'
done
