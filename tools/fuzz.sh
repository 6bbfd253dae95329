#!/usr/bin/env bash
# Builds the libFuzzer targets under fuzz/ (clang, -fsanitize=fuzzer,address,undefined, in
# build/fuzz) and runs each for a while from its seed corpus (docs/fuzzing.md).
# Usage: tools/fuzz.sh [seconds-per-target] [target...]     (default 60 s, every target)
# Env: JOBS (build parallelism, and targets run at once), FUZZ_CC / FUZZ_CXX (default clang /
#      clang++), FUZZ_ARGS (extra libFuzzer flags). Exit status 1 when any target crashed, hung or leaked;
#      the reproducer is in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
JOBS=${JOBS:-$(nproc)}
BUILD=build/fuzz
FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# Line tables are enough for symbolized stacks and keep the clang build short in CI.
FLAGS+=" -fno-omit-frame-pointer -gline-tables-only -O1"

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_COMPILER="${FUZZ_CC:-clang}" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DPRISM_FUZZ=ON -DPRISM_BUILD_BENCHMARKS=OFF -DPRISM_WERROR=OFF >/dev/null

if (($# > 0)); then
  targets=("$@")
  # Only what the named targets need (the intercept ones build in a minute, not the whole tree).
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
else
  targets=()
  for f in fuzz/*_fuzzer.cc; do targets+=("$(basename "$f" .cc)"); done
  cmake --build "$BUILD" -j "$JOBS" --target prism_fuzzers
fi

mkdir -p "$BUILD/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target per CPU at a time (JOBS): each libFuzzer run is a single process, and CI's fuzz step
# is then its seconds times the targets over the CPUs, not times the targets.
run_target() {
  local t=$1
  # New inputs go to the work corpus in build/; the seeds under fuzz/corpus stay as committed.
  local work="$BUILD/corpus/$t" log="$BUILD/$t.log" result
  mkdir -p "$work"
  # -timeout: an input running longer is a hang. -rss_limit_mb / -malloc_limit_mb: one input
  # allocating more is a memory blow-up (the decoders' inputs are at most a few MB).
  if "$BUILD/fuzz/$t" "$work" "fuzz/corpus/$t" -max_total_time="$SECONDS_PER_TARGET" \
      -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" ${FUZZ_ARGS:-} \
      >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log)"
  fi
  echo "$result" >"$BUILD/$t.result"
}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  rm -f "$BUILD/$t.result"
  run_target "$t" &
done
wait
failed=()
printf '%-30s %12s %8s %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  log="$BUILD/$t.log"
  result=$(cat "$BUILD/$t.result" 2>/dev/null || echo "FAILED (no result; see $log)")
  [[ $result == ok ]] || failed+=("$t")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  printf '%-30s %12s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
done
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  for t in "${failed[@]}"; do
    grep -m3 -E "ERROR: |SUMMARY: |fuzz property|Test unit written" "$BUILD/$t.log" >&2 || true
  done
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets clean"
