#!/usr/bin/env bash
# GPU-free dry run of tools/gpu-check/run.sh (registered with CTest): stand-ins for nvidia-smi and
# nvcc, the fake libcuda.so.1 / libnvidia-ml.so.1 instead of a driver, and a prebuilt library, so
# the script's plumbing, parsing and report are exercised on every CI run. The launch-overhead row
# is not judged here (the fake's launch is far cheaper than a real one).
# Usage: dry_run_test.sh BUILD_DIR FAKE_GPU_DIR
set -euo pipefail
BUILD_DIR=$1
FAKE_GPU_DIR=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d /tmp/prism-gpu-check-dry.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"
cat >"$TMP/bin/nvidia-smi" <<'SMI'
#!/bin/sh
case "$*" in
  *compute_cap*) echo "9.0" ;;
  *mig.mode*) echo "Disabled" ;;
  *) echo "NVIDIA H200 (fake), 580.00, 143771 MiB" ;;
esac
SMI
cat >"$TMP/bin/nvcc" <<'NVCC'
#!/bin/sh
# Writes an (empty) output file; the fake driver's cuModuleLoad only needs it to exist.
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then : >"$2"; exit 0; fi
  shift
done
exit 1
NVCC
# No torch in the dry run: a python3 that cannot import it, whatever the machine has.
cat >"$TMP/bin/python3" <<'PY'
#!/bin/sh
exit 1
PY
chmod +x "$TMP/bin/"*
export PATH="$TMP/bin:$PATH"
export LD_LIBRARY_PATH="$FAKE_GPU_DIR"
export PRISM_FAKE_GPU_STATE="$TMP/gpu.state"
set +e
OUT=$("$HERE/run.sh" --build-dir "$BUILD_DIR" 2>&1)
set -e
echo "$OUT"
check() {
  if ! grep -Eq "$1" <<<"$OUT"; then
    echo "dry run: expected a line matching: $1" >&2
    exit 1
  fi
}
check '^driver API, 4 GiB limit +PASS'
check '^PyTorch, 4 GiB limit +SKIP'
check '^launch overhead +(PASS|FAIL) +native [0-9.]+ ns/launch'
check '^SM share, 30 % limit +PASS +achieved 0\.[23]'
echo "dry run passed"
