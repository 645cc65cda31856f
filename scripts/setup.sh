#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test firmtime.
# Idempotent: installs only missing packages, and Rust only when cargo is absent.
# Run as root (or with sudo available). Prints what it does on stderr.
set -euo pipefail

say() { echo "setup: $*" >&2; }

# Debian packages firmtime builds against or starts in its tests.
PACKAGES=(
  build-essential pkg-config ca-certificates curl
  jackd2 libjack-jackd2-dev   # JACK (dummy backend in tests; doctor checks it)
  pipewire pipewire-jack      # PipeWire's JACK: tests start a private headless daemon, never a user's
  libasound2-dev              # ALSA sequencer backend (firmtime-midi feature `alsa`, default)
  rt-tests                    # cyclictest, the reference for `firmtime lab cyclic`
  iproute2 nftables           # network namespaces and loss injection in net tests
  ladspa-sdk swh-plugins cmt  # LADSPA host tests
  ecasound                    # a real-time LADSPA host (scripts/ladspa-proxy-ecasound.sh)
  sox                         # another LADSPA host the proxy tests run
  lilv-utils                  # lv2apply, lv2info, lv2ls: the LV2 host of the LV2 tests
  ardour                      # Ardour 7: ardour7-lua runs the proxy's DAW tests headless (crates/cli/tests/ardour.rs)
  fonts-dejavu-core           # the font firmtime loads to label its PNG plots
  jq python3                  # the acceptance scripts in scripts/ read firmtime's JSON
  python3-pandas r-base-core  # START.md's pandas and R analysis snippets, run by the tests
  r-cran-readr                # readr::write_csv, one of the writers a trial CSV must survive (tests)
  prometheus                  # watch's metrics scraped by a real Prometheus; promtool checks metrics and rules (tests)
  sqlite3 libsqlite3-dev      # watch's database (rusqlite links the system SQLite); sqlite3 to query it
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    say "not root and no sudo: install these yourself: ${PACKAGES[*]}"; fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # jackd2 asks whether to enable realtime limits for the audio group: yes.
  echo "jackd2 jackd/tweak_rt_limits boolean true" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  say "Debian packages present"
fi

# Rust: use what is installed; otherwise install a toolchain with rustup.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  say "cargo not found: installing Rust with rustup (stable, minimal + rustfmt, clippy)"
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal -c rustfmt -c clippy >&2
fi
say "$(cargo --version)"
