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
  ctest --preset "$preset" -j "$JOBS"
}
run_preset dev
if [[ "${1:-}" != "--no-asan" ]]; then
  run_preset asan
fi
echo "=== all tests passed ==="
