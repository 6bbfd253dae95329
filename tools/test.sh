#!/usr/bin/env bash
# Builds Prism and runs every test that needs no GPU: first a debug build, then
# the same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: tools/test.sh [--no-asan]
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
run_preset dev
if [[ "${1:-}" != "--no-asan" ]]; then
  run_preset asan
fi
echo "=== all tests passed ==="
