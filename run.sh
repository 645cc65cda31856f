#!/usr/bin/env bash
# Sets up this machine (Debian packages, Rust), builds firmtime and runs the main job.
# Extra arguments replace the default job: ./run.sh lab cyclic --duration 10s
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p firmtime >&2
scripts/install-plugins.sh
# The default job exits 0 whatever the verdict (--exit-zero): on a noisy VM it may
# be "Not reliably", which the report explains; a measurement that failed still
# fails the job (exit 2). Without --exit-zero, lab all exits 1 on "Not reliably".
if [ $# -eq 0 ]; then set -- lab all --quick --exit-zero --out firmtime-report; fi
exec "${CARGO_TARGET_DIR:-target}"/release/firmtime "$@"
