#!/usr/bin/env bash
# The Debian packages a build's image payload needs at run time, derived from the binaries: every
# shared library `prism` and libprism-vgpu.so name (DT_NEEDED, not what those libraries need in
# turn: apt brings that), located where this machine's loader finds it (ldd) and mapped to the
# package that owns it (dpkg -S).
#
#   tools/image/packages.sh BUILD_DIR            prints the derived list, one package a line
#   tools/image/packages.sh --check BUILD_DIR    fails, naming the difference, unless the derived
#                                                list is exactly tools/image/runtime-packages.txt
#
# Run on the machine that built BUILD_DIR (Debian 12, the build's -dev packages installed): the
# libraries are looked up there. A library no package owns (a local build in /usr/local, say) is
# an error: the image could not install it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIST="$HERE/runtime-packages.txt"

usage() {
  echo "usage: tools/image/packages.sh [--check] BUILD_DIR" >&2
  exit 2
}
check=0
[[ ${1:-} == --check ]] && { check=1; shift; }
[[ $# -eq 1 ]] || usage
BUILD_DIR=$1
BINARIES=("$BUILD_DIR/apps/prism/prism" "$BUILD_DIR/src/intercept/libprism-vgpu.so")
for b in "${BINARIES[@]}"; do
  [[ -f $b ]] || { echo "packages.sh: $b is missing: build the prism and prism_vgpu targets" >&2; exit 1; }
done
for tool in readelf ldd dpkg-query; do
  command -v "$tool" >/dev/null || { echo "packages.sh: $tool is required" >&2; exit 1; }
done

# The package owning PATH. Debian 12 merged /lib into /usr/lib, but dpkg records each file under
# the directory its package ships it in, so both spellings are tried, for the path and for what
# its symlinks resolve to.
owner() {
  local path=$1 base candidate pkg
  for base in "$path" "$(readlink -f "$path")"; do
    for candidate in "$base" "${base#/usr}" "/usr$base"; do
      if pkg=$(dpkg-query -S "$candidate" 2>/dev/null); then
        # "pkg:arch: /path" or "pkg: /path"; diversions ("diversion by ...") are not owners.
        pkg=$(grep -v '^diversion' <<<"$pkg" | head -n1 | cut -d: -f1)
        [[ -n $pkg ]] && { echo "$pkg"; return 0; }
      fi
    done
  done
  return 1
}

derive() {
  local binary soname path
  for binary in "${BINARIES[@]}"; do
    local resolved
    resolved=$(ldd "$binary")
    while read -r soname; do
      # ldd prints "soname => /path (addr)", or "/path (addr)" for the dynamic loader itself.
      path=$(awk -v s="$soname" '$1 == s && $2 == "=>" { print $3 } $1 ~ "/" s "$" { print $1 }' \
               <<<"$resolved" | head -n1)
      if [[ -z $path || $path == "not" ]]; then
        echo "packages.sh: $binary needs $soname, which this machine's loader does not find" >&2
        return 1
      fi
      if ! owner "$path"; then
        echo "packages.sh: no Debian package owns $path ($soname, needed by $binary)" >&2
        return 1
      fi
    done < <(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done | sort -u
}

derived=$(derive)
if ((!check)); then
  echo "$derived"
  exit 0
fi
listed=$(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$LIST" | sort -u)
if [[ $derived != "$listed" ]]; then
  echo "packages.sh: tools/image/runtime-packages.txt disagrees with what $BUILD_DIR's binaries need:" >&2
  comm -23 <(echo "$derived") <(echo "$listed") | sed 's/^/  needed, not listed: /' >&2
  comm -13 <(echo "$derived") <(echo "$listed") | sed 's/^/  listed, not needed: /' >&2
  exit 1
fi
echo "packages.sh: runtime-packages.txt matches $BUILD_DIR's binaries ($(wc -l <<<"$derived") packages)"
