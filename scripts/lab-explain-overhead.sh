#!/bin/sh
# Issue 15, item 4: what the explaining trace (`lab cyclic --explain`, on by
# default in `lab all`) costs. The same alternating design as
# scripts/lab-trace-overhead.sh (crates/lab/src/trace/overhead.rs): the sort
# benchmark with the typist and player beside it and the drainer, pinned to
# one CPU, in one continuous run cut into slices; between slices the
# explaining trace's events (sched_switch, local_timer_entry/exit,
# irq_handler_entry/exit, softirq_entry/exit, cpu_idle, and the filtered
# sched_wakeup and page_fault_user) are enabled or disabled, in the order
# on/off, off/on, … Prints the median on/off throughput ratio of the pairs
# with its 95 % interval. Target: within 5 %.
#
# The drainer here keeps every event (a pessimistic case): under
# `--explain` it keeps only windows around late wake-ups.
#
# Usage: sudo scripts/lab-explain-overhead.sh [PAIRS] [SLICE] [RATES]
#        (default 100 pairs of 100ms at rate 0 — this kernel's own tick; about 25 s)
set -eu
cd "$(dirname "$0")/.."
PAIRS=${1:-100}
SLICE=${2:-100ms}
RATES=${3:-0}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p firmtime
OUT=$(mktemp /tmp/firmtime-explain-overhead.XXXXXX.json)
trap 'rm -f "$OUT"' EXIT
"$TARGET/release/firmtime" lab trace --overhead --explain-events --pairs "$PAIRS" \
    --slice "$SLICE" --rates "$RATES" --json "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
k = r["kernel"]
print()
print("SETUP: kernel %s, HZ=%s, clocksource %s, preempt %s; CPU %d; %d pairs of %.0f ms per rate; sort array %d u32; explaining trace's events"
      % (k["release"], k["config_hz"], k["clocksource"], k["preempt_model"], r["cpu"],
         r["config"]["pairs"], r["config"]["slice_ns"] / 1e6, r["sort_len"]))
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
print("ACCEPTANCE (rate 0, target <= 5%%): %s"
      % {True: "met", False: "NOT met", None: "undecided (the interval straddles 5 %, too few pairs, or rate 0 not run: see the verdict)"}[r["within_target"]])
PY
