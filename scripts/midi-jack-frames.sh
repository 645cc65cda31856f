#!/usr/bin/env bash
# Acceptance figure (issue 4): MIDI taps sent at known frames through a dummy
# JACK server are recorded with 0 frames of error, by the firmtime tapper and
# by a third-party sender (jack_midiseq). Runs the JACK integration tests of
# firmtime-midi (each starts and stops its own private `jackd -d dummy`) and
# prints their frame figures:
#   firmtime tapper: N taps, max |error| = 0 frames
#   jack_midiseq: N taps, max |error| = 0 frames
# Exits non-zero if a test fails or a figure is missing (e.g. jackd not installed).
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(cargo test -p firmtime-midi --test jack -- --nocapture --test-threads=1 2>/dev/null) || {
  echo "$out" >&2
  echo "midi-jack-frames: JACK tests failed" >&2
  exit 1
}
if grep -q 'SKIP:' <<<"$out"; then
  grep -o 'SKIP:.*' <<<"$out" | sort -u >&2
  exit 1
fi
status=0
for sender in "firmtime tapper" "jack_midiseq"; do
  # libtest may print "test NAME ... " or a progress dot before the line.
  line=$(grep -o -m1 "FRAMES $sender:.*" <<<"$out" || true)
  if [ -z "$line" ]; then
    echo "midi-jack-frames: no figure for $sender" >&2
    status=1
  else
    echo "${line#FRAMES }"
  fi
done
grep -o -m1 'FRAMES scheduled output:.*' <<<"$out" | sed 's/^FRAMES //' || true
grep -o -m1 'JACK clock:.*' <<<"$out" || true
exit $status
