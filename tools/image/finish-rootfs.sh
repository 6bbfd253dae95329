#!/bin/sh
# Finishes a Debian 12 root filesystem for the Prism image, run inside it (as root): the same
# steps for both image builds, so that they cannot drift (docs/image.md).
#
#   finish-rootfs.sh --apt    the Dockerfile's runtime stage: installs
#                             runtime-packages.txt (beside this script) with apt first
#   finish-rootfs.sh          tools/image/build.sh: mmdebstrap has installed the packages
#
# Then: the unprivileged user the scheduler pods run as (runAsUser 65532 in deploy/ and the
# chart; the distroless convention), so that the uid has a name and a home-less passwd entry,
# and the directory the node agent's init container copies the library from.
# POSIX sh: the base image has no bash guarantee.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--apt" ]; then
  packages=$(sed 's/#.*//' "$HERE/runtime-packages.txt" | tr -s ' \t\n' ' ')
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $packages
  apt-get clean
  rm -rf /var/lib/apt/lists/*
elif [ $# -ne 0 ]; then
  echo "usage: finish-rootfs.sh [--apt]" >&2
  exit 2
fi
if ! grep -q '^nonroot:' /etc/group; then
  echo 'nonroot:x:65532:' >>/etc/group
fi
if ! grep -q '^nonroot:' /etc/passwd; then
  echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >>/etc/passwd
fi
install -d -m 0755 /usr/local/prism/lib
