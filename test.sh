#!/usr/bin/env bash
# Sets up this machine (Debian packages, Rust), builds firmtime and runs every test.
# Tests that need real-time privileges run as root and print a skip reason otherwise.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-plugins.sh
cargo test --workspace --locked "$@"
