#!/usr/bin/env bash
# fetch_cudnn_frontend.sh: the cuDNN frontend's C++ headers (header-only),
# which kernels/cuda/cudnn_attention.cc builds cuDNN's SDPA graphs with, into
# .cache/cudnn-frontend/include (git-ignored), where CMake finds them
# (PARAPLAN_CUDNN_FRONTEND_INCLUDE names another folder). They come from
# PyPI's nvidia-cudnn-frontend wheel (its include/ folder; the wheel's Python
# parts are not used): `pip download`, then unzip. Nothing is installed and
# libcudnn is not fetched: paraplan opens the machine's libcudnn.so.9 at run
# time (kernels/cuda/cudnn_library.h).
#
#   bash scripts/fetch_cudnn_frontend.sh     # once; a second run does nothing
#
# PARAPLAN_CUDNN_FRONTEND_VERSION overrides the pinned version (the one the
# code was written and compiled against).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${PARAPLAN_CUDNN_FRONTEND_VERSION:-1.32.0}
destination=.cache/cudnn-frontend
if [ -f "$destination/include/cudnn_frontend.h" ] && [ "$(cat "$destination/version" 2>/dev/null)" = "$version" ]; then
  echo "fetch_cudnn_frontend.sh: cuDNN frontend $version already in $destination/include"
  exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
  echo "fetch_cudnn_frontend.sh: no python3 to run pip with" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Any of the wheels has the same headers; pip picks the one for this Python.
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$work" \
  "nvidia-cudnn-frontend==$version" >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  echo "fetch_cudnn_frontend.sh: pip could not download nvidia-cudnn-frontend==$version" >&2
  exit 1
fi
wheel=$(ls "$work"/nvidia_cudnn_frontend-*.whl)
mkdir -p "$work/unpacked"
"$python" -m zipfile -e "$wheel" "$work/unpacked"
if [ ! -f "$work/unpacked/include/cudnn_frontend.h" ]; then
  echo "fetch_cudnn_frontend.sh: $(basename "$wheel") has no include/cudnn_frontend.h" >&2
  exit 1
fi
rm -rf "$destination"
mkdir -p "$destination"
cp -r "$work/unpacked/include" "$destination/include"
echo "$version" >"$destination/version"
echo "fetch_cudnn_frontend.sh: cuDNN frontend $version headers in $destination/include" \
  "($(find "$destination/include" -type f | wc -l) files)"
