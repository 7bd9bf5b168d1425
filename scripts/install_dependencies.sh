#!/usr/bin/env bash
# install_dependencies.sh: the Debian packages paraplan builds and runs with.
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libflatbuffers-dev flatbuffers-compiler
  libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  coinor-libcbc-dev
  fortunes fortunes-min
  python3-numpy
)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
