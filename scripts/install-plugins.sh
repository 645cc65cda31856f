#!/usr/bin/env bash
# Builds firmtime's LADSPA plugins and installs them into a LADSPA path
# (default /usr/local/lib/ladspa, or $1). run.sh and test.sh call it after
# setup.sh; it needs write access to the directory (root) and skips otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
DEST="${1:-/usr/local/lib/ladspa}"
say() { echo "install-plugins: $*" >&2; }
cargo build --release --locked -p firmtime-plugin-proxy -p firmtime-plugin-waste-time >&2
if ! mkdir -p "$DEST" 2>/dev/null || [ ! -w "$DEST" ]; then
  say "cannot write $DEST: not installing (run as root, or give a directory and add it to LADSPA_PATH)"
  exit 0
fi
install -m 0644 target/release/libfirmtime_proxy.so "$DEST/firmtime_proxy.so"
install -m 0644 target/release/libfirmtime_waste_time.so "$DEST/firmtime_waste_time.so"
say "installed firmtime_proxy.so and firmtime_waste_time.so into $DEST"
