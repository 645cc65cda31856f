#!/bin/sh
# Regenerate Lago (2004) Figures 5–8 on JACK's dummy backend in one command.
#   scripts/lago-experiments.sh [--quick] [OUT_DIR]
# Builds firmtime and the waste_time plugin (release), then runs
# `firmtime net experiment`, which starts its own jackd and workers and stops them.
set -eu
cd "$(dirname "$0")/.."
QUICK=""
if [ "${1:-}" = "--quick" ]; then QUICK="--quick"; shift; fi
OUT="${1:-lago-results}"
cargo build --release -q -p firmtime -p firmtime-plugin-waste-time
exec "${CARGO_TARGET_DIR:-target}"/release/firmtime net experiment $QUICK --out "$OUT"
