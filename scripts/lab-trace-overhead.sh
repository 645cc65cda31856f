#!/bin/sh
# Issue 8, acceptance figure 1: what scheduler tracing costs. Runs the sort
# benchmark (an array of half the L2, refilled and sorted repeatedly, with the
# typist and player workloads beside it so there are switches to record, and
# the trace drainer, all pinned to one CPU) in one continuous run cut into
# slices; between slices `lab trace`'s events are enabled or disabled, in the
# order on/off, off/on, … Prints, per extra timer rate, the median on/off
# throughput ratio of the pairs with its 95 % interval. Target (at rate 0,
# this kernel's own tick): within 5 %; the paper's klogger: 0.63–1.18 %.
#
# Usage: sudo scripts/lab-trace-overhead.sh [PAIRS] [SLICE] [RATES]
#        (default 100 pairs of 100ms at rates 0,1000,20000; about 75 s)
# Env: EXTRA (more `lab trace --overhead` flags, e.g. --explain-events, as
# scripts/lab-explain-overhead.sh passes), LABEL (named in the SETUP line).
set -eu
cd "$(dirname "$0")/.."
PAIRS=${1:-100}
SLICE=${2:-100ms}
RATES=${3:-0,1000,20000}
EXTRA=${EXTRA:-}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p firmtime
OUT=$(mktemp /tmp/firmtime-trace-overhead.XXXXXX.json)
trap 'rm -f "$OUT"' EXIT
# shellcheck disable=SC2086 # EXTRA is a list of flags
"$TARGET/release/firmtime" lab trace --overhead $EXTRA --repeats "$PAIRS" --slice "$SLICE" \
    --rates "$RATES" --json "$OUT"
LABEL=${LABEL:-} python3 - "$OUT" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))["result"]
k = r["kernel"]
print()
label = os.environ.get("LABEL")
print("SETUP: kernel %s, HZ=%s, clocksource %s, preempt %s; CPU %d; %d pairs of %.0f ms per rate; sort array %d u32%s"
      % (k["release"], k["config_hz"], k["clocksource"], k["preempt_model"], r["cpu"],
         r["config"]["pairs"], r["config"]["slice_ns"] / 1e6, r["sort_len"],
         "; " + label if label else ""))
for c in r["rates"]:
    if c["status"] != "measured":
        print("rate skipped: %s" % c["reason"])
        continue
    nan = float("nan")
    lo, hi = c["overhead_ci95_percent"] or (nan, nan)
    lost = c["overhead_percent"] if c["overhead_percent"] is not None else nan
    pooled = (1 - c["pooled_ratio"]) * 100 if c["pooled_ratio"] is not None else nan
    print("extra timer %6d Hz: %d/%d pairs, %7.0f events/s, lost %6.2f%% (95%% CI %6.2f .. %6.2f%%), pooled %6.2f%%"
          % (c["rate_hz"], len(c["pairs"]), r["config"]["pairs"], c["events_per_s"], lost, lo, hi, pooled))
print("ACCEPTANCE (rate 0, target <= 5%%; klogger 0.63-1.18%%): %s"
      % {True: "met", False: "NOT met", None: "undecided (the interval straddles 5 %, too few pairs, or rate 0 not run: see the verdict)"}[r["within_target"]])
PY
