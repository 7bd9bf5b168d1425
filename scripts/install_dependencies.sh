#!/usr/bin/env bash
# install_dependencies.sh [--run]: the Debian packages paraplan builds and runs
# with, and (without --run) everything the tests use too. --run installs only
# what building and running the paraplan program and the samples' corpus
# need: the first run of a sample on a fresh machine waits for nothing else.
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail
run_only=0
[ "${1:-}" = "--run" ] && run_only=1
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libflatbuffers-dev flatbuffers-compiler
  libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libopenblas-dev
  coinor-libcbc-dev
  fortunes fortunes-min
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3-numpy
  python3-torch python3-venv
  # the multi-host test bed (tests/testbed.sh): namespaces, veth, a bridge, sshd
  iproute2 openssh-server openssh-client
)
[ "$run_only" = 1 ] || packages+=("${test_packages[@]}")
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

[ "$run_only" = 1 ] && exit 0

# The Hugging Face interchange tests (tests/hugging_face_test.cc): Debian's
# PyTorch (above), and transformers and safetensors from PyPI, pinned to
# versions that support torch 1.13, in a venv that sees the system packages.
hf_venv="$(cd "$(dirname "$0")/.." && pwd)/.cache/hf-venv"
# TensorBoard's reader checks `train --tensorboard-dir` (tests/tensorboard_test.cc).
if ! "$hf_venv/bin/python" -c "import torch, transformers, safetensors, tensorboard" 2>/dev/null; then
  echo "installing transformers, safetensors and tensorboard into $hf_venv"
  /usr/bin/python3 -m venv --system-site-packages "$hf_venv"
  "$hf_venv/bin/pip" install --quiet --disable-pip-version-check \
    transformers==4.44.2 safetensors==0.4.5 tensorboard==2.14.0
fi
