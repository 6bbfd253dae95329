#!/usr/bin/env bash
# Installs everything Prism needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 python3-yaml
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev
  coinor-libclp-dev
  clang libclang-rt-dev
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
