#!/usr/bin/env bash
# Lays out a build's image payload under OUT_DIR, as the image holds it (docs/image.md#layout):
#
#   /usr/local/bin/prism                     the entrypoint: every component is a subcommand
#   /usr/local/prism/lib/libprism-vgpu.so    the node agent's init container copies it to the
#                                            host's /usr/local/prism/lib (deploy/device-plugin)
#
# Debug information is stripped (a dev build's prism is ~100 MB with it, ~10 MB without); the
# symbol tables stay, so a crash's stack trace still names functions. Both image builds use this
# script (the Dockerfile's build stage and tools/image/build.sh), so they ship the same files.
# Usage: tools/image/stage.sh BUILD_DIR OUT_DIR
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: tools/image/stage.sh BUILD_DIR OUT_DIR" >&2; exit 2; }
BUILD_DIR=$1
OUT=$2
PRISM="$BUILD_DIR/apps/prism/prism"
VGPU="$BUILD_DIR/src/intercept/libprism-vgpu.so"
for f in "$PRISM" "$VGPU"; do
  [[ -f $f ]] || { echo "stage.sh: $f is missing: build the prism and prism_vgpu targets" >&2; exit 1; }
done
command -v objcopy >/dev/null || { echo "stage.sh: objcopy (binutils) is required" >&2; exit 1; }
install -d -m 0755 "$OUT/usr/local/bin" "$OUT/usr/local/prism/lib"
objcopy --strip-debug "$PRISM" "$OUT/usr/local/bin/prism"
objcopy --strip-debug "$VGPU" "$OUT/usr/local/prism/lib/libprism-vgpu.so"
# Readable and runnable by any user: the scheduler runs as 65532, and containers on the host load
# the library as whatever user they run as.
chmod 0755 "$OUT/usr/local/bin/prism"
chmod 0644 "$OUT/usr/local/prism/lib/libprism-vgpu.so"
