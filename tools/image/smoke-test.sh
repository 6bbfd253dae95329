#!/usr/bin/env bash
# Runs the Prism image's smoke test inside a built image (buildah, chroot isolation: no OCI
# runtime or Docker engine needed), on a throwaway working container:
#
#   - the image's entrypoint is /usr/local/bin/prism, as every manifest's `args:` assume;
#   - every shared library the binary and libprism-vgpu.so need resolves in the image (ldd);
#   - `prism version` prints EXPECTED_VERSION_LINE, as root and as uid 65532 (the scheduler's);
#   - `prism sim --help` runs;
#   - the tools the manifests call are there: cp (the node agent's init container), chroot (the
#     MIG manager's host commands), sh;
#   - the node agent's init container command copies the library, and the copy, preloaded into a
#     CUDA program (prism_vgpu_probe from BUILD_DIR) against the fake driver, enforces a memory
#     limit: of two 600 MiB allocations under a 1 GiB limit the second is refused before the
#     driver sees it, and the device reports 1 GiB. The same program without the library gets both
#     (so the check can fail).
#
# Usage: tools/image/smoke-test.sh IMAGE BUILD_DIR EXPECTED_VERSION_LINE
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: tools/image/smoke-test.sh IMAGE BUILD_DIR EXPECTED_VERSION_LINE" >&2; exit 2; }
IMAGE=$1
BUILD_DIR=$2
EXPECTED=$3
PROBE="$BUILD_DIR/src/intercept/prism_vgpu_probe"
FAKE_DIR="$BUILD_DIR/src/intercept/fake"
for f in "$PROBE" "$FAKE_DIR/libcuda.so.1"; do
  [[ -f $f ]] || { echo "smoke-test: $f is missing: build prism_vgpu_probe and prism_fake_cuda" >&2; exit 1; }
done

failures=0
pass() { echo "  ok: $*"; }
fail() { echo "  FAILED: $*" >&2; failures=$((failures + 1)); }

echo "=== image: smoke test of $IMAGE"
entrypoint=$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$IMAGE")
if [[ $entrypoint == '[/usr/local/bin/prism]' ]]; then
  pass "entrypoint $entrypoint"
else
  fail "entrypoint is $entrypoint, not [/usr/local/bin/prism]"
fi

ctr=$(buildah from --pull-never --quiet "$IMAGE")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
# Test tools go into the throwaway container only, never into the image.
mnt=$(buildah mount "$ctr")
install -d -m 1777 "$mnt/tmp/prism-smoke"
install -d -m 0755 "$mnt/tmp/prism-smoke/fake" "$mnt/tmp/prism-smoke/host/usr/local/prism/lib"
install -m 0755 "$PROBE" "$mnt/tmp/prism-smoke/prism_vgpu_probe"
install -m 0755 "$FAKE_DIR/libcuda.so.1" "$mnt/tmp/prism-smoke/fake/libcuda.so.1"
buildah umount "$ctr" >/dev/null
# run_in [--user U] CMD...: runs CMD in the container, stdout and stderr together into $out.
run_in() {
  local user=()
  if [[ $1 == --user ]]; then user=(--user "$2"); shift 2; fi
  out=$(buildah run --isolation chroot "${user[@]}" "$ctr" -- "$@" 2>&1)
}

if run_in ldd /usr/local/bin/prism /usr/local/prism/lib/libprism-vgpu.so && [[ $out != *"not found"* ]]; then
  pass "every shared library resolves ($(grep -c '=>' <<<"$out") entries)"
else
  fail "ldd in the image:"$'\n'"$(grep 'not found' <<<"$out" || echo "$out")"
fi

for user in 0:0 65532:65532; do
  if run_in --user "$user" /usr/local/bin/prism version && [[ $out == "$EXPECTED" ]]; then
    pass "prism version as $user: $out"
  else
    fail "prism version as $user printed '$out', expected '$EXPECTED'"
  fi
done
if run_in --user 65532:65532 id -un && [[ $out == nonroot ]]; then
  pass "uid 65532 is nonroot"
else
  fail "uid 65532 has no passwd entry: $out"
fi

if run_in /usr/local/bin/prism sim --help && [[ $out == *"--mig"* ]]; then
  pass "prism sim --help"
else
  fail "prism sim --help: $out"
fi

if run_in sh -c 'command -v cp && command -v chroot'; then
  pass "cp and chroot: $(tr '\n' ' ' <<<"$out")"
else
  fail "cp or chroot missing: $out"
fi

# The init container's command (deploy/device-plugin/daemonset.yaml), into a stand-in host dir.
if run_in cp /usr/local/prism/lib/libprism-vgpu.so /tmp/prism-smoke/host/usr/local/prism/lib/libprism-vgpu.so; then
  pass "init container's cp"
else
  fail "init container's cp: $out"
fi
lib=/tmp/prism-smoke/host/usr/local/prism/lib/libprism-vgpu.so
probe_env=(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=/tmp/prism-smoke/fake)
probe_args=(/tmp/prism-smoke/prism_vgpu_probe init alloc 600m alloc 600m meminfo counts cuMemAlloc_v2)
# A tenant's process: any uid, the library preloaded, a 1 GiB limit.
if run_in --user 1000:1000 "${probe_env[@]}" PRISM_FAKE_GPU_STATE=/tmp/prism-smoke/gpu-limited \
      CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/prism-smoke/region CUDA_DEVICE_MEMORY_LIMIT=1g \
      LD_PRELOAD="$lib" "${probe_args[@]}" &&
   grep -qx 'alloc ok id=0' <<<"$out" && grep -qx 'alloc err=2' <<<"$out" &&
   grep -q '^meminfo .* total=1073741824 ' <<<"$out" &&
   grep -qx 'counts cuMemAlloc_v2=1' <<<"$out" && grep -q '^\[prism-vgpu [0-9]*\] ' <<<"$out"; then
  pass "libprism-vgpu.so loaded and enforced a 1 GiB limit (second 600 MiB allocation refused)"
else
  fail "libprism-vgpu.so under a 1 GiB limit:"$'\n'"$out"
fi
if run_in --user 1000:1000 "${probe_env[@]}" PRISM_FAKE_GPU_STATE=/tmp/prism-smoke/gpu-unlimited \
      "${probe_args[@]}" && grep -qx 'alloc ok id=1' <<<"$out" && [[ $out != *prism-vgpu* ]]; then
  pass "without the library both allocations succeed"
else
  fail "the probe without the library:"$'\n'"$out"
fi

if ((failures)); then
  echo "=== image: smoke test FAILED ($failures checks)" >&2
  exit 1
fi
echo "=== image: smoke test passed"
