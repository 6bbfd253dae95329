#!/usr/bin/env bash
# Installs everything Prism needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 python3-yaml
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev libsimdjson-dev libcli11-dev libcpp-httplib-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev
  coinor-libclp-dev coinor-libcbc-dev
  clang libclang-rt-dev lld
  mmdebstrap buildah  # the container image from Debian packages (tools/image, docs/image.md)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool lints every /metrics output in the tests (docs/metrics.md; they skip only that check
# without it). Debian ships it only inside the `prometheus` server package (96 MB installed, and
# on a systemd host it starts a Prometheus server), so just its promtool (48 MB, libc only) is
# taken from that package into /usr/local/bin.
if ! command -v promtool >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    $SUDO apt-get update -qq
    (cd "$tmp" && apt-get download prometheus >/dev/null)
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  $SUDO install -m 0755 "$tmp/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$tmp"
fi

# node and cel-js evaluate the shipped ValidatingAdmissionPolicy's CEL in node_policy_test
# (docs/rbac.md); cel-js is pinned by tests/e2e/cel/package-lock.json (node >= 20.19).
if ! command -v node >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
cel_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/e2e/cel"
if [[ ! -d "$cel_dir/node_modules/@marcbachmann/cel-js" ]]; then
  npm ci --prefix "$cel_dir" --no-audit --no-fund --loglevel=error
fi
