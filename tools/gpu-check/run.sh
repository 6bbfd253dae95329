#!/usr/bin/env bash
# tools/gpu-check/run.sh: checks libprism-vgpu on a machine with an NVIDIA GPU, in under 5 minutes,
# and prints a table. Needs: the NVIDIA driver (nvidia-smi), a C++ compiler and CMake; nvcc for the
# kernel checks and python3 with torch for the PyTorch check (each skipped, and reported, when
# missing). Builds only the interception library (-DPRISM_INTERCEPT_ONLY=ON), so Abseil, gtest
# etc. are not needed.
#
# It only READS the GPU's settings (nvidia-smi --query-gpu): it never changes modes, clocks, MIG,
# persistence or compute mode, and never resets the GPU.
#
# Usage: tools/gpu-check/run.sh [--gpu N] [--keep] [--build-dir DIR]
#   --gpu N          the GPU to use (default 0; via CUDA_VISIBLE_DEVICES)
#   --keep           keep the work directory (build, logs)
#   --build-dir DIR  use libprism-vgpu.so and prism_vgpu_probe from an existing build of this repo
#                    instead of building (the GPU-free dry-run test uses this)
# Exit status: 0 if every check passed or was skipped, 1 if one failed, 2 if it could not run.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GPU=0
KEEP=0
BUILD_DIR=""
while (($#)); do
  case "$1" in
    --gpu) GPU=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done

die() { echo "gpu-check: $*" >&2; exit 2; }
WORK=$(mktemp -d /tmp/prism-gpu-check.XXXXXX) || die "cannot create a work directory"
cleanup() { if ((KEEP)); then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
LOG=$WORK/log.txt
: >"$LOG"

RESULTS=()
FAILED=0
record() {  # name status detail
  RESULTS+=("$1|$2|$3")
  [[ $2 == FAIL ]] && FAILED=1
  printf '[%s] %s: %s\n' "$2" "$1" "$3" >>"$LOG"
}
# field TEXT PREFIX KEY: the value of KEY= on the first line starting with PREFIX.
field() { printf '%s\n' "$1" | awk -v p="$2" -v k="$3" 'index($0, p) == 1 {
  for (i = 1; i <= NF; ++i) if (index($i, k "=") == 1) { print substr($i, length(k) + 2); exit } }'; }
GiB=$((1 << 30))

# ---- 0. Preconditions (read-only) --------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 ||
  die "nvidia-smi not found: run this on a machine with an NVIDIA GPU and its driver"
QUERY=$(timeout 30 nvidia-smi -i "$GPU" --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader 2>&1) || die "nvidia-smi cannot query GPU $GPU: $QUERY"
IFS=',' read -r GPU_NAME DRIVER MEMORY <<<"$QUERY"
GPU_NAME=$(echo "$GPU_NAME" | xargs); DRIVER=$(echo "$DRIVER" | xargs)
MEMORY=$(echo "$MEMORY" | xargs)
# Older nvidia-smi versions lack these fields: then nvcc targets the GPU it finds itself.
CC=$(timeout 30 nvidia-smi -i "$GPU" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  xargs) || CC=""
[[ $CC =~ ^[0-9]+\.[0-9]+$ ]] || CC=""
MIG=$(timeout 30 nvidia-smi -i "$GPU" --query-gpu=mig.mode.current --format=csv,noheader \
  2>/dev/null | xargs) || MIG="unknown"
echo "GPU $GPU: $GPU_NAME, driver $DRIVER, $MEMORY, compute capability $CC, MIG $MIG"
[[ $MIG == Enabled ]] && echo "note: MIG is enabled on GPU $GPU; the checks run on what CUDA sees"
command -v cmake >/dev/null 2>&1 || die "cmake not found"
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || die "no C++ compiler (c++/g++)"
NVCC=$(command -v nvcc || true)
[[ -z $NVCC && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
export CUDA_VISIBLE_DEVICES=$GPU
# Nothing from the caller's environment may change what is measured.
unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT GPU_CORE_UTILIZATION_POLICY CUDA_DISABLE_CONTROL \
  LD_PRELOAD PRISM_VGPU_REAL_LIBCUDA PRISM_VGPU_REAL_NVML

# ---- 1. Build ------------------------------------------------------------------------------------
if [[ -z $BUILD_DIR ]]; then
  GENERATOR=()
  command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
  echo "building libprism-vgpu (log: $LOG)..."
  if ! timeout 180 cmake -S "$ROOT" -B "$WORK/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DPRISM_INTERCEPT_ONLY=ON -DPRISM_BUILD_BENCHMARKS=OFF >>"$LOG" 2>&1 ||
     ! timeout 240 cmake --build "$WORK/build" -j "$(nproc)" --target prism_vgpu prism_vgpu_probe \
      >>"$LOG" 2>&1; then
    tail -30 "$LOG" >&2
    die "the build failed (see above)"
  fi
  BUILD_DIR=$WORK/build
fi
LIB=$BUILD_DIR/src/intercept/libprism-vgpu.so
PROBE=$BUILD_DIR/src/intercept/prism_vgpu_probe
[[ -f $LIB && -x $PROBE ]] || die "the build did not produce $LIB and $PROBE"

KERNELS=""
if [[ -n $NVCC ]]; then
  if [[ -n $CC ]]; then
    SM=${CC//./}
    ARCH=(-gencode "arch=compute_$SM,code=[sm_$SM,compute_$SM]")
  else
    SM=native
    ARCH=(-arch=native)
  fi
  if timeout 120 "$NVCC" -fatbin "${ARCH[@]}" -o "$WORK/kernels.fatbin" \
      "$ROOT/tools/gpu-check/kernels.cu" >>"$LOG" 2>&1; then
    KERNELS=$WORK/kernels.fatbin
  else
    record "build kernels" FAIL "nvcc failed for sm_$SM (see log: a CUDA 13 nvcc needs driver >= 580)"
  fi
fi

# ---- 2. Driver-API program with a 4 GiB limit -------------------------------------------------------
NATIVE=$(timeout 60 "$PROBE" init totalmem 2>>"$LOG")
PHYSICAL=$(field "$NATIVE" totalmem bytes)
OUT=$(timeout 60 env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-api" \
  CUDA_DEVICE_MEMORY_LIMIT=4g "$PROBE" init meminfo totalmem nvmlmem alloc 3g alloc 2g free 0 \
  alloc 2g 2>>"$LOG")
echo "$OUT" >>"$LOG"
TOTAL=$(field "$OUT" meminfo total); TOTALMEM=$(field "$OUT" totalmem bytes)
NVML_TOTAL=$(field "$OUT" nvmlmem total)
ALLOCS=$(printf '%s\n' "$OUT" | grep '^alloc' | tr '\n' ' ')
if [[ $TOTAL == $((4 * GiB)) && $TOTALMEM == $((4 * GiB)) && $NVML_TOTAL == $((4 * GiB)) &&
      $ALLOCS == "alloc ok id=0 alloc err=2 alloc ok id=1 " ]]; then
  record "driver API, 4 GiB limit" PASS "cuMemGetInfo/cuDeviceTotalMem/NVML total = 4 GiB (physical $PHYSICAL); 3 GiB ok, +2 GiB OOM, ok after free"
else
  record "driver API, 4 GiB limit" FAIL "total=$TOTAL totalmem=$TOTALMEM nvml=$NVML_TOTAL allocs: $ALLOCS"
fi

# ---- 3. PyTorch with a 4 GiB limit ---------------------------------------------------------------
if command -v python3 >/dev/null 2>&1 && timeout 120 python3 -c "import torch" >>"$LOG" 2>&1; then
  OUT=$(timeout 150 env CUDA_DEVICE_MEMORY_LIMIT=4g PRISM_CHECK_LIMIT_BYTES=$((4 * GiB)) \
    LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-torch" \
    python3 "$ROOT/tools/gpu-check/torch_check.py" 2>>"$LOG")
  RC=$?
  echo "$OUT" >>"$LOG"
  MEMTOTAL=$(printf '%s\n' "$OUT" | sed -n 's/^mem_get_info_total=//p')
  OVER=$(printf '%s\n' "$OUT" | sed -n 's/^over_limit_allocation=//p')
  if ((RC == 0)); then
    record "PyTorch, 4 GiB limit" PASS "mem_get_info total=$MEMTOTAL; 3 GiB tensor ok; +2 GiB -> $OVER"
  else
    record "PyTorch, 4 GiB limit" FAIL "rc=$RC mem_get_info total=$MEMTOTAL over-limit: ${OVER:-?} (see log)"
  fi
else
  record "PyTorch, 4 GiB limit" SKIP "python3 with torch not available"
fi

if [[ -z $KERNELS ]]; then
  record "launch overhead" SKIP "no nvcc to build the kernels"
  record "SM share, 30 % limit" SKIP "no nvcc to build the kernels"
else
  # ---- 4. Launch-bound loop: empty kernels, native vs under the library -------------------------
  N=200000
  best() { sort -g | head -1; }
  NATIVE_NS=$(for i in 1 2 3; do timeout 60 "$PROBE" --module="$KERNELS" init launches $N 2>>"$LOG" |
    awk -F'ns_per_launch=' '/^launches/ {split($2, a, " "); print a[1]}'; done | best)
  LIB_NS=$(for i in 1 2 3; do timeout 60 env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-l$i" \
    CUDA_DEVICE_MEMORY_LIMIT=4g "$PROBE" --module="$KERNELS" init launches $N 2>>"$LOG" |
    awk -F'ns_per_launch=' '/^launches/ {split($2, a, " "); print a[1]}'; done | best)
  SM_NS=$(for i in 1 2 3; do timeout 60 env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-s$i" \
    CUDA_DEVICE_SM_LIMIT=50 "$PROBE" --module="$KERNELS" init launches $N 2>>"$LOG" |
    awk -F'ns_per_launch=' '/^launches/ {split($2, a, " "); print a[1]}'; done | best)
  if [[ -n $NATIVE_NS && -n $LIB_NS && -n $SM_NS ]]; then
    RATIO=$(awk -v a="$LIB_NS" -v b="$NATIVE_NS" 'BEGIN { printf "%.3f", a / b }')
    SM_RATIO=$(awk -v a="$SM_NS" -v b="$NATIVE_NS" 'BEGIN { printf "%.3f", a / b }')
    STATUS=$(awk -v r="$RATIO" 'BEGIN { print (r <= 1.05) ? "PASS" : "FAIL" }')
    record "launch overhead" "$STATUS" "native ${NATIVE_NS} ns/launch, library ${LIB_NS} (x$RATIO), with idle SM limit ${SM_NS} (x$SM_RATIO); goal <= 1.05"
  else
    record "launch overhead" FAIL "launch loop did not run (see log)"
  fi

  # ---- 5. SM share of a compute-bound kernel under a 30 % limit ------------------------------------
  SPIN_NS=2000000  # Each launch: one wave of blocks busy for 2 ms.
  SOLO=$(timeout 60 "$PROBE" --module="$KERNELS" init spin 4 $SPIN_NS 2>>"$LOG")
  LIMITED=$(timeout 60 env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-sm" \
    CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY=force \
    "$PROBE" --module="$KERNELS" init spin 12 $SPIN_NS 2>>"$LOG")
  echo "$SOLO" >>"$LOG"; echo "$LIMITED" >>"$LOG"
  R0=$(field "$SOLO" spin tail_rate); R1=$(field "$LIMITED" spin tail_rate)
  if [[ -n $R0 && -n $R1 ]] && awk -v a="$R0" 'BEGIN { exit !(a > 0) }'; then
    SHARE=$(awk -v a="$R1" -v b="$R0" 'BEGIN { printf "%.3f", a / b }')
    STATUS=$(awk -v s="$SHARE" 'BEGIN { d = s - 0.30; if (d < 0) d = -d; print (d <= 0.07) ? "PASS" : "FAIL" }')
    record "SM share, 30 % limit" "$STATUS" "achieved $SHARE of the solo rate ($R1 vs $R0 launches/s, second half of 12 s); goal 0.30 +/- 0.07"
  else
    record "SM share, 30 % limit" FAIL "spin loop did not run (see log)"
  fi
fi

# ---- Report ---------------------------------------------------------------------------------------
echo
printf '%-26s %-5s %s\n' "CHECK" "RESULT" "DETAIL"
printf '%-26s %-5s %s\n' "--------------------------" "------" "------"
for row in "${RESULTS[@]}"; do
  IFS='|' read -r name status detail <<<"$row"
  printf '%-26s %-6s %s\n' "$name" "$status" "$detail"
done
echo
echo "GPU: $GPU_NAME, driver $DRIVER; library: $LIB"
exit $FAILED
