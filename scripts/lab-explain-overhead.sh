#!/bin/sh
# Issue 15, item 4: what the explaining trace (`lab cyclic --explain`, on by
# default in `lab all`) costs. The same alternating design as
# scripts/lab-trace-overhead.sh (crates/lab/src/quanta/overhead.rs): the sort
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
EXTRA=--explain-events LABEL="explaining trace's events" \
    exec scripts/lab-trace-overhead.sh "${1:-100}" "${2:-100ms}" "${3:-0}"
