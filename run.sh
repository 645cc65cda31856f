#!/usr/bin/env bash
# Sets up this machine (Debian packages, Rust), builds firmtime and runs the main job.
# Extra arguments replace the default job: ./run.sh lab cyclic --duration 10s
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p firmtime >&2
scripts/install-plugins.sh
if [ $# -eq 0 ]; then set -- lab all --quick --out firmtime-report; fi
exec "${CARGO_TARGET_DIR:-target}"/release/firmtime "$@"
