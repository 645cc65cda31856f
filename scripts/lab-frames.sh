#!/bin/sh
# Frame-pacing acceptance (issue 8, §3): a 60 fps Xine-like player under
# SCHED_FIFO 80 with clock_nanosleep, 2 CPU hogs, 30 s, achieves >= 59.9 fps.
# Prints the table, then the acceptance figure and PASS/FAIL (exit 1 on FAIL).
# Needs root or an rtprio limit (SCHED_FIFO). Builds in release.
# Usage: scripts/lab-frames.sh [duration]   (default 30s)
set -eu
cd "$(dirname "$0")/.."
cargo build --release -q -p firmtime
json=$(mktemp /tmp/firmtime-lab-frames.XXXXXX.json)
trap 'rm -f "$json"' EXIT
# `lab frames` exits 1 on a dropped-frame-free but partial run too; judge below.
./target/release/firmtime lab frames --fps 60 --duration "${1:-30s}" \
    --sleepers clock_nanosleep --policies fifo:80 --loads cpu:2 --json "$json" || true
out=$(jq -r '
  .result as $r
  | ($r.cells[0].result) as $c
  | if $c.status != "measured" then
      "FAIL: cell skipped: \($c.reason)"
    else
      "acceptance: \($c.desired_fps) fps desired, \($c.achieved_fps * 1000 | round / 1000) fps achieved (\($c.shown) of \($c.played) frames shown, \($c.dropped) dropped, longest run \($c.longest_drop_run)); lateness p99 \(($c.lateness.p99_ns // 0) / 1000 | round) us, max \(($c.lateness.max_ns // 0) / 1000 | round) us; obtained \($c.conditions.obtained.policy.policy) \($c.conditions.obtained.priority)\n"
      + "machine: kernel \($r.machine.kernel_release), HZ=\($r.machine.config_hz), clocksource \($r.machine.clocksource), preempt \($r.machine.preempt_model)\n"
      + (if ($c.achieved_fps >= 59.9 and ($r.partial | not)) then "PASS: achieved >= 59.9 fps" else "FAIL: achieved < 59.9 fps or partial run" end)
    end' "$json")
printf '%s\n' "$out"
case "$out" in
*"PASS:"*) exit 0 ;;
*) exit 1 ;;
esac
