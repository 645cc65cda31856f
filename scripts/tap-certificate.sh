#!/usr/bin/env bash
# The timing certificate (issue 30, item 4; docs/TAP.md §11): N runs of
# `firmtime tap certify` on a private `jackd -d dummy` (--jack-dummy, a
# loop inside JACK), and what they measured beside what the checks expect:
#   audio loop: one period (256 frames) inside JACK;
#   MIDI stamping: probes back one period later, frame error 0, time stamps
#     within the trial's late threshold (1000 µs) of their frame's time;
#   feedback delay: each answer at its time, 0 to one frame (20.8 µs) after.
#
# Usage: scripts/tap-certificate.sh [RUNS] [EXPERIMENT.toml]
#   (default 10 runs of examples/daf.toml). Add --no-rt to FIRMTIME_ARGS
#   when real-time scheduling is not allowed. Needs jackd2 and jq; the
#   release binary is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
exp=${2:-examples/daf.toml}
for p in jackd jq; do
  command -v "$p" >/dev/null || { echo "SKIP: $p not installed (Debian: apt-get install jackd2 jq)"; exit 0; }
done
cargo build -q --release -p firmtime
bin=target/release/firmtime
tmp=$(mktemp -d -t firmtime-cert.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$runs"); do
  # shellcheck disable=SC2086
  "$bin" tap certify "$exp" --backend jack --jack-dummy --loop self ${FIRMTIME_ARGS:-} \
    --json "$tmp/$i.json" >/dev/null 2>"$tmp/$i.err" || true
  [ -s "$tmp/$i.json" ] || { echo "run $i wrote no certificate:" >&2; tail -5 "$tmp/$i.err" >&2; exit 1; }
done
jq -s -r --arg exp "$exp" '
  def pct(p): sort | .[((length - 1) * p | floor)];
  def fmt: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  . as $c
  | ($c | length) as $n
  | "timing certificate of \($exp), \($n) runs on jackd dummy (48 kHz, 256 frames), a loop inside JACK",
    "  status: \([$c[] | select(.status == "passed")] | length) passed, \([$c[] | select(.status == "failed")] | length) failed; attempts > 1 in \([$c[] | select(.midi_stamping.attempts > 1 or .audio_loop.attempts > 1)] | length) run(s); xruns or dropped cycles in \([$c[] | select((.midi_stamping.xruns + .midi_stamping.frame_gaps + (.audio_loop.xruns // 0) + (.audio_loop.frame_gaps // 0)) > 0)] | length)",
    "  audio loop     frames: \([$c[].audio_loop.frames] | unique | map(tostring) | join(", "))   (expected 256)",
    "  MIDI stamping  loop frames: \([$c[].midi_stamping.loop_frames] | unique | map(tostring) | join(", "))   (expected 256); max frame error \([$c[].midi_stamping.frame_error_max] | max)   (expected 0)",
    "                 time stamp error, max per run: p50 \([$c[].midi_stamping.stamp_error_max_us] | pct(0.5) | fmt) µs, max \([$c[].midi_stamping.stamp_error_max_us] | max | fmt) µs   (tolerance 1000 µs)",
    "  feedback delay emitted − scheduled: mean p50 \([$c[].feedback_delay.error_mean_us] | pct(0.5) | fmt) µs, max \([$c[].feedback_delay.error_max_us] | max | fmt) µs   (on time: 0 to 20.83 µs, one frame; tolerance 1000 µs); late \([$c[].feedback_delay.late] | add), early \([$c[].feedback_delay.early] | add)"
' "$tmp"/*.json
