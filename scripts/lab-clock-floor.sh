#!/bin/sh
# Measurement-floor acceptance: `firmtime lab clock --clock monotonic` reads
# the clock within 1.10x of a minimal tight loop (median of paired rounds in
# one process). Builds in release (the bench profile) and runs
# crates/lab/benches/clock_floor.rs.
# Usage: scripts/lab-clock-floor.sh [reads [rounds]]   (default 1000000 11)
set -eu
cd "$(dirname "$0")/.."
exec cargo bench -p firmtime-lab --bench clock_floor -- "${1:-1000000}" "${2:-11}"
