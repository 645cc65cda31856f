#!/bin/sh
# Issue 8, acceptance figure 1: what scheduler tracing costs. Runs the sort
# benchmark (an array of half the L2, re-initialized and sorted repeatedly,
# with the typist and player workloads beside it so there are switches to
# record) in pairs of runs with `lab trace`'s tracefs instance on and off,
# interleaved (on/off, off/on, …), and prints the median on/off throughput
# ratio. Target: within 5 %; the paper's klogger: 0.63–1.18 %.
#
# Usage: sudo scripts/lab-trace-overhead.sh [PAIRS] [RUN]   (default 7 pairs of 2s)
set -eu
cd "$(dirname "$0")/.."
PAIRS=${1:-7}
RUN=${2:-2s}
cargo build --release -q -p firmtime
OUT=$(mktemp /tmp/firmtime-trace-overhead.XXXXXX.json)
trap 'rm -f "$OUT"' EXIT
target/release/firmtime lab trace --overhead --pairs "$PAIRS" --run "$RUN" --json "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
k = r["kernel"]
ratios = [p["ratio"] for p in r["pairs"]]
print()
print("SETUP: kernel %s, HZ=%s, clocksource %s, preempt %s; %d pairs of %.1fs; sort array %d u32"
      % (k["release"], k["config_hz"], k["clocksource"], k["preempt_model"],
         len(ratios), r["config"]["run_ns"] / 1e9, r["sort_len"]))
print("pair ratios (on/off): " + " ".join("%.4f" % x for x in ratios))
print("median ratio %.4f -> trace overhead %.2f%% (target <= 5%%: %s; klogger 0.63-1.18%%)"
      % (r["median_ratio"], r["overhead_percent"], "met" if r["within_target"] else "NOT met"))
PY
