#!/usr/bin/env bash
# Builds firmtime's plugins and installs them: the LADSPA libraries into a
# LADSPA path (default /usr/local/lib/ladspa, or $1), and the LV2 bundle
# (the same libraries plus Turtle written by `firmtime ladspa lv2-bundle`)
# into $LV2_BUNDLE (default /usr/local/lib/lv2/firmtime.lv2). run.sh and
# test.sh call it after setup.sh; it needs write access to the directories
# (root) and skips otherwise.
#
# The bundle describes the proxy's plugins as its configuration presents
# them now ($FIRMTIME_PROXY_CONFIG, else ~/.config/firmtime/proxy.toml of
# the user running this): run it again, or `firmtime ladspa lv2-bundle`,
# after changing that file (docs/LV2.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
DEST="${1:-/usr/local/lib/ladspa}"
LV2_BUNDLE="${LV2_BUNDLE:-/usr/local/lib/lv2/firmtime.lv2}"
TARGET="${CARGO_TARGET_DIR:-target}"
say() { echo "install-plugins: $*" >&2; }
cargo build --release --locked -p firmtime-plugin-proxy -p firmtime-plugin-waste-time -p firmtime >&2
if ! mkdir -p "$DEST" 2>/dev/null || [ ! -w "$DEST" ]; then
  say "cannot write $DEST: not installing (run as root, or give a directory and add it to LADSPA_PATH)"
  exit 0
fi
install -m 0644 "$TARGET/release/libfirmtime_proxy.so" "$DEST/firmtime_proxy.so"
install -m 0644 "$TARGET/release/libfirmtime_waste_time.so" "$DEST/firmtime_waste_time.so"
say "installed firmtime_proxy.so and firmtime_waste_time.so into $DEST"
if ! mkdir -p "$LV2_BUNDLE" 2>/dev/null || [ ! -w "$LV2_BUNDLE" ]; then
  say "cannot write $LV2_BUNDLE: no LV2 bundle (run as root, or set LV2_BUNDLE=~/.lv2/firmtime.lv2)"
  exit 0
fi
"$TARGET/release/firmtime" ladspa lv2-bundle "$LV2_BUNDLE" \
  "$DEST/firmtime_proxy.so" "$DEST/firmtime_waste_time.so" >/dev/null
