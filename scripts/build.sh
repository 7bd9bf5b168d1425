#!/usr/bin/env bash
# build.sh: configure and build paraplan into build/ (CUDA parts when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
