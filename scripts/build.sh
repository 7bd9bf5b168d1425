#!/usr/bin/env bash
# build.sh [--run] [cmake options]: configure and build paraplan into build/.
# Without --run: everything, the tests included (what test.sh runs). With
# --run: only the paraplan program, and on a first configure without the
# tests, so a fresh machine builds what a run needs and nothing else (a
# build/ configured before keeps its options). The CUDA backend is built when
# nvcc is found and a GPU is visible; -DPARAPLAN_CUDA=ON builds it without a
# GPU, -DPARAPLAN_CUDA=OFF never.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--run" ]; then
  shift
  if [ ! -f build/CMakeCache.txt ] || [ $# -gt 0 ]; then
    testing=()
    [ -f build/CMakeCache.txt ] || testing=(-DBUILD_TESTING=OFF)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${testing[@]}" "$@"
  fi
  cmake --build build -j "$(nproc)" --target paraplan
  exit 0
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON "$@"
cmake --build build -j "$(nproc)"
