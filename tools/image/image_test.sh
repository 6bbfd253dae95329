#!/usr/bin/env bash
# CTest image_build_test (label `image`): builds the image from Debian packages out of BUILD_DIR
# with tools/image/build.sh, which runs the smoke test inside it, then deletes it. Needs root,
# mmdebstrap and buildah (tools/setup.sh installs them); without them it is skipped (exit 77)
# with the reason, except in CI (CI=true), where it fails instead. The image is tagged
# localhost/prism-image-test:<version>, never the name deploy/ pulls, so that it does not replace
# an image built for a cluster.
# Usage: tools/image/image_test.sh BUILD_DIR
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: tools/image/image_test.sh BUILD_DIR" >&2; exit 2; }
BUILD_DIR=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
missing=()
[[ $(id -u) -eq 0 ]] || missing+=("root")
for tool in mmdebstrap buildah; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "image_test: needs ${missing[*]} (tools/setup.sh installs mmdebstrap and buildah; run as root)"
  if [[ ${CI:-} == true ]]; then
    echo "image_test: CI=true: failing instead of skipping" >&2
    exit 1
  fi
  exit 77
fi
tag="localhost/prism-image-test:$("$BUILD_DIR/apps/prism/prism" version | cut -d' ' -f2)"
trap 'buildah rmi "$tag" >/dev/null 2>&1 || true' EXIT
start=$SECONDS
"$HERE/build.sh" --build-dir "$BUILD_DIR" --tag "$tag"
echo "image_test: built and smoke-tested in $((SECONDS - start)) s"
