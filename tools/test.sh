#!/usr/bin/env bash
# Builds Prism and runs every test that needs no GPU: first a debug build, then
# the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, then each
# libFuzzer target briefly from its seed corpus (tools/fuzz.sh, docs/fuzzing.md;
# FUZZ_SECONDS per target, default 15; skipped without clang).
# Usage: tools/test.sh [--no-asan] [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
run_preset() {
  local preset=$1
  echo "=== ${preset}: configure + build ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$JOBS"
  echo "=== ${preset}: test ==="
  # A few tests measure achieved GPU-time shares on the fake GPU in real time; on an
  # overloaded machine they can miss their tolerance once. Retrying (up to 3 runs)
  # keeps CI meaningful: a real regression fails every run.
  ctest --preset "$preset" -j "$JOBS" --repeat until-pass:3
}
asan=1
fuzz=1
for arg in "$@"; do
  case "$arg" in
    --no-asan) asan=0 ;;
    --no-fuzz) fuzz=0 ;;
    *) echo "usage: tools/test.sh [--no-asan] [--no-fuzz]" >&2; exit 2 ;;
  esac
done
run_preset dev
if ((asan)); then
  run_preset asan
fi
if ((fuzz)); then
  if command -v "${FUZZ_CXX:-clang++}" >/dev/null; then
    echo "=== fuzz: ${FUZZ_SECONDS:-15} s per target ==="
    # A fixed seed makes this step a regression gate: CI replays the mutation sequence that
    # passed here, instead of failing a change on a new finding unrelated to it. Open-ended
    # exploration is tools/fuzz.sh without a seed (docs/fuzzing.md).
    FUZZ_ARGS="${FUZZ_ARGS:--seed=1}" tools/fuzz.sh "${FUZZ_SECONDS:-15}"
  else
    echo "=== fuzz: skipped (no clang++; tools/setup.sh installs it) ==="
  fi
fi
echo "=== all tests passed ==="
