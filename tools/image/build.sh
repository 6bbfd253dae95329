#!/usr/bin/env bash
# Builds the Prism container image from Debian packages alone, without a Docker engine or an image
# registry: the same image the Dockerfile describes (docs/image.md).
#
#   1. tools/image/packages.sh --check: runtime-packages.txt is exactly what the binaries need;
#   2. tools/image/stage.sh: the build's prism and libprism-vgpu.so, debug info stripped;
#   3. mmdebstrap: a Debian 12 minbase root filesystem, slimmed like debian:12-slim (no docs, man
#      pages or locales), with runtime-packages.txt, the payload and tools/image/finish-rootfs.sh;
#   4. buildah: the root filesystem committed as one layer, with the Dockerfile's entrypoint,
#      command and labels;
#   5. tools/image/smoke-test.sh inside the committed image (unless --no-smoke).
#
# Usage: tools/image/build.sh [--build-dir DIR] [--tag NAME] [--archive FILE] [--no-smoke]
#   --build-dir  a configured and built CMake build directory (default build/release) with the
#                targets prism and prism_vgpu, plus prism_vgpu_probe and prism_fake_cuda for the
#                smoke test
#   --tag        the image name (default ghcr.io/prism-gpu/prism:<version of the build>, the name
#                deploy/ and the chart reference)
#   --archive    also write the image as a docker-archive tarball (docker load, kind load
#                image-archive, ctr images import)
# Environment: PRISM_IMAGE_DEB_CACHE, where downloaded .debs are kept between runs (default
# /var/cache/prism-image/debs); PRISM_IMAGE_SOURCES, apt source files (one-line .list or deb822
# .sources) to build from instead of this machine's Debian 12 sources.
#
# Needs root (mmdebstrap's root mode, buildah's storage), mmdebstrap, buildah, binutils. The
# packages come from the apt sources this machine uses: nothing else is contacted.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tools/image"
# The repository deploy/kustomization.yaml and charts/prism/values.yaml name (checked by
# tools/image/definition_test.sh).
REPOSITORY=ghcr.io/prism-gpu/prism
SUITE=bookworm

build_dir="$ROOT/build/release"
tag=""
archive=""
smoke=1
while (($#)); do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    --no-smoke) smoke=0; shift ;;
    *) sed -n '/^# Usage/,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)
log() { echo "=== image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (mmdebstrap's root mode and buildah's storage need it)"
for tool in mmdebstrap buildah objcopy; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install mmdebstrap buildah binutils)"
done
[[ -x $build_dir/apps/prism/prism ]] || die "$build_dir/apps/prism/prism is missing: build the prism target"

# The version the build stamped (CMake's project version; the commit if PRISM_BUILD_COMMIT was set).
version_line=$("$build_dir/apps/prism/prism" version)
[[ $version_line =~ ^prism\ ([0-9]+\.[0-9]+\.[0-9]+)(\ \(commit\ ([0-9a-f]+(-dirty)?)\))?$ ]] ||
  die "unexpected \`prism version\` output: $version_line"
version=${BASH_REMATCH[1]}
commit=${BASH_REMATCH[3]}
[[ -n $tag ]] || tag="$REPOSITORY:$version"
[[ -n $commit ]] ||
  echo "image: note: this build names no commit (configure with -DPRISM_BUILD_COMMIT=\$(git rev-parse --short=12 HEAD) to stamp one)"

work=$(mktemp -d /tmp/prism-image.XXXXXX)
ctr=""
cleanup() {
  [[ -n $ctr ]] && buildah rm "$ctr" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

log "runtime packages against $build_dir's binaries"
"$HERE/packages.sh" --check "$build_dir"
mapfile -t packages < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$HERE/runtime-packages.txt")

log "payload"
"$HERE/stage.sh" "$build_dir" "$work/payload"
mkdir -p "$work/setup"
cp "$HERE/finish-rootfs.sh" "$HERE/runtime-packages.txt" "$work/setup/"

# This machine's apt sources for Debian 12: every deb822 stanza or one-line entry whose suite is
# bookworm, bookworm-updates or bookworm-security, written out as files for mmdebstrap (which
# takes a sources file as a mirror argument). Other repositories the machine may have configured
# are left out of the image.
sources=()
if [[ -n ${PRISM_IMAGE_SOURCES:-} ]]; then
  read -r -a sources <<<"$PRISM_IMAGE_SOURCES"
else
  n=0
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    n=$((n + 1))
    if [[ $f == *.sources ]]; then
      out="$work/host-$n.sources"
      awk -v RS= -v ORS='\n\n' -v suite="$SUITE" '
        { keep = 0; enabled = 1
          n = split($0, lines, "\n")
          for (i = 1; i <= n; i++) {
            if (lines[i] ~ /^Suites:/) {
              m = split(substr(lines[i], 8), s, /[ \t]+/)
              for (j = 1; j <= m; j++) if (s[j] ~ "^" suite "(-updates|-security)?$") keep = 1
            }
            if (lines[i] ~ /^Enabled:[ \t]*no/) enabled = 0
          }
          if (keep && enabled) print }' "$f" >"$out"
    else
      out="$work/host-$n.list"
      # "deb [options] URI SUITE COMPONENTS...": the options dropped, the suite is the third word.
      awk -v suite="$SUITE" '
        $1 == "deb" { line = $0; sub(/\[[^]]*\]/, "", line); split(line, w, /[ \t]+/)
                      if (w[3] ~ "^" suite "(-updates|-security)?$") print }' "$f" >"$out"
    fi
    if [[ -s $out ]]; then sources+=("$out"); else rm -f "$out"; fi
  done
fi
((${#sources[@]})) || die "no apt source for Debian 12 ($SUITE) on this machine; set PRISM_IMAGE_SOURCES"

cache=${PRISM_IMAGE_DEB_CACHE:-/var/cache/prism-image/debs}
mkdir -p "$cache"
log "root filesystem: mmdebstrap $SUITE minbase + ${#packages[@]} packages (.deb cache $cache)"
start=$SECONDS
# merged-usr: the /usr symlinks made directly, as debootstrap and the debian:12 images do, instead
# of the usrmerge package and the 50 MB of perl it pulls in. The dpkg path filters are
# debian:12-slim's (debuerreotype's slimify): documentation, man pages
# and translations are not installed; copyright files stay. The .deb cache is synced in before the
# download and out after the install (mmdebstrap(1), "sync-in"), hence essential/unlink skipped.
mmdebstrap --quiet --mode=root --variant=minbase --format=directory \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --dpkgopt='path-exclude=/usr/share/linda/*' \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --skip=essential/unlink \
  --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
  --setup-hook="sync-in $cache /var/cache/apt/archives/" \
  --customize-hook="sync-out /var/cache/apt/archives $cache" \
  --customize-hook='mkdir -p "$1/tmp/prism-image"' \
  --customize-hook="sync-in $work/setup /tmp/prism-image" \
  --customize-hook='chroot "$1" sh /tmp/prism-image/finish-rootfs.sh' \
  --customize-hook="sync-in $work/payload /" \
  "$SUITE" "$work/rootfs" "${sources[@]}"
echo "image: $(find "$cache" -maxdepth 1 -name '*.deb' | wc -l) .debs in the cache"
log "root filesystem: $(du -sh "$work/rootfs" | cut -f1) in $((SECONDS - start)) s"

log "commit $tag"
ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
tar -C "$work/rootfs" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
buildah umount "$ctr" >/dev/null
# Keep in step with the Dockerfile's ENTRYPOINT, CMD, ENV and LABELs (definition_test.sh).
buildah config \
  --entrypoint '["/usr/local/bin/prism"]' \
  --cmd '["--help"]' \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --workingdir / \
  --label org.opencontainers.image.title=prism \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.revision="$commit" \
  --label org.opencontainers.image.base.name=debian:12-slim \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$tag" >/dev/null
ctr=""

if ((smoke)); then
  "$HERE/smoke-test.sh" "$tag" "$build_dir" "$version_line"
fi
if [[ -n $archive ]]; then
  log "archive $archive"
  rm -f "$archive"
  buildah push --quiet "$tag" "docker-archive:$archive:$tag"
fi
log "built $tag ($(buildah images --format '{{.Size}}' "$tag" | head -n1))"
