#!/usr/bin/env bash
# Fuzzes one target of crates/net/fuzz or crates/midi/fuzz for a while, on
# nightly, without cargo-fuzz: the same coverage instrumentation
# (`cargo fuzz build` without sanitizers), built in target/fuzz-nightly.
# New inputs go to crates/CRATE/fuzz/corpus/TARGET (not committed; the stable
# replay in ./test.sh runs them too while they are there); a failing input
# goes to crates/CRATE/fuzz/artifacts/TARGET/ and the script exits non-zero.
#
# Usage: scripts/fuzz.sh CRATE TARGET [SECONDS]   e.g. scripts/fuzz.sh net decode 60
# Targets: net decode, net control, midi parse.
set -euo pipefail
cd "$(dirname "$0")/.."
crate=${1:?usage: scripts/fuzz.sh CRATE TARGET [SECONDS]}
target=${2:?usage: scripts/fuzz.sh CRATE TARGET [SECONDS]}
seconds=${3:-60}
fuzz=crates/$crate/fuzz
[ -f "$fuzz/fuzz_targets/$target.rs" ] || {
  echo "no fuzz target $fuzz/fuzz_targets/$target.rs" >&2
  exit 2
}
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
# --target keeps the flags off build scripts, which are not linked with libFuzzer.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
  cargo +nightly build --release --manifest-path "$fuzz/Cargo.toml" --target "$triple" \
  --target-dir target/fuzz-nightly --bin "$target"
mkdir -p "$fuzz/corpus/$target" "$fuzz/artifacts/$target"
exec "target/fuzz-nightly/$triple/release/$target" "$fuzz/corpus/$target" "$fuzz/seeds/$target" \
  -max_total_time="$seconds" -artifact_prefix="$fuzz/artifacts/$target/"
