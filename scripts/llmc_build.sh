#!/usr/bin/env bash
# llmc_build.sh: builds llm.c's GPT-2 trainer (train_gpt2cu), the peer that
# samples/gpt2_124m/bench.sh's mode llmc measures, for sm_90 (H100/H200), from
# a copy of llm.c kept OUTSIDE this repository at a pinned commit. Needs nvcc
# (no GPU: compiling only); bf16, no MPI, no NCCL.
#
#   bash scripts/llmc_build.sh [--fetch-frontend] [--no-cudnn] LLMC_SOURCE OUT_DIR
#
# LLMC_SOURCE: a git directory holding the pinned commit (a bare or mirror
# repository, or a checkout's .git; the commit's tree is exported with git
# archive), or a source folder already checked out (its HEAD must be the pinned
# commit when it is a git checkout; a plain folder is built as it is, its commit
# written as unverified). LLMC_COMMIT=<sha> accepts another commit.
# OUT_DIR gets src/ (the exported tree, patched once: patch_source),
# train_gpt2cu, llmc_build.txt (commit, cudnn yes/no and why, nvcc, the make
# command, seconds, size, the libraries it needs) and build.log; after a cuDNN
# build also train_gpt2cu_kernels, llm.c's own attention, for a GPU machine
# without libcudnn. Carry it there with LLMC_BUILD=OUT_DIR bash
# scripts/device_bundle.sh (samples/gpt2_124m/bench.sh's mode llmc runs it).
#
# cuDNN attention (USE_CUDNN=1) is tried first, and only when cudnn.h, libcudnn
# and the cuDNN frontend's headers are all found: CUDNN_FRONTEND_PATH, then
# ~/cudnn-frontend/include, then the PyPI package nvidia-cudnn-frontend
# (installed, or with --fetch-frontend its pinned wheel downloaded into
# OUT_DIR and unpacked, never installed), then CUDA's include folders; cudnn.h
# and libcudnn in CUDA's folders, ldconfig's cache or the nvidia-cudnn-cu12/13
# wheels. If it is not found or its build fails: llm.c's own attention kernels
# (USE_CUDNN=0), and llmc_build.txt says why. --no-cudnn skips the attempt.
set -uo pipefail

# The commit measured (karpathy/llm.c master, 2025-05-10, "Merge pull request #801").
PINNED_COMMIT=f1e2ace651495b74ae22d45d1723443fd00ecd3a
# The cuDNN frontend's headers: this version compiled llmc/cudnn_att.cpp at the
# pinned commit with nvcc 13.0 (one deprecation warning, set_is_inference).
FRONTEND_VERSION=1.32.0

usage() { sed -n '2,/^set -uo/p' "$0" | sed -n 's/^# \{0,1\}//p'; }
fail() { echo "llmc_build.sh: $*" >&2; exit 1; }

fetch_frontend=0 try_cudnn=1 positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fetch-frontend) fetch_frontend=1 ;;
    --no-cudnn) try_cudnn=0 ;;
    -h | --help) usage; exit 0 ;;
    -*) fail "unknown option '$1' (see --help)" ;;
    *) positional+=("$1") ;;
  esac
  shift
done
[ ${#positional[@]} = 2 ] || { usage >&2; exit 2; }
source_arg=${positional[0]} out=${positional[1]}
want_commit=${LLMC_COMMIT:-$PINNED_COMMIT}
command -v nvcc >/dev/null || fail "nvcc not on PATH (CUDA's compiler is needed, no GPU)"
out=$(realpath -m "$out")

# OUT_DIR must not put llm.c's source into this repository's commits.
repo=$(cd "$(dirname "$0")/.." && pwd)
case "$out/" in
  "$repo"/*)
    git -C "$repo" check-ignore -q "$out" ||
      fail "$out is inside this repository and not ignored: llm.c's source must stay out of it"
    ;;
esac
mkdir -p "$out" || fail "cannot create $out"

# export_source: OUT/src holds the tree to build; sets commit and source_kind.
export_source() {
  rm -rf "$out/src"
  mkdir -p "$out/src"
  if [ -f "$source_arg/train_gpt2.cu" ]; then
    if commit=$(git -C "$source_arg" rev-parse HEAD 2>/dev/null); then
      [ "$commit" = "$want_commit" ] ||
        fail "$source_arg is at $commit, not the pinned $want_commit (LLMC_COMMIT=<sha> to accept it)"
      git -C "$source_arg" diff --quiet HEAD -- 2>/dev/null ||
        fail "$source_arg has uncommitted changes: build from a clean checkout"
      source_kind=checkout
    else
      commit=unverified source_kind=plain-folder
    fi
    cp -a "$source_arg/." "$out/src/" && rm -rf "$out/src/.git" "$out/src/build" ||
      fail "copying $source_arg failed"
    return
  fi
  git --git-dir="$source_arg" cat-file -e "$want_commit^{commit}" 2>/dev/null ||
    fail "$source_arg is neither an llm.c source folder nor a git directory holding $want_commit"
  git --git-dir="$source_arg" archive "$want_commit" | tar -x -C "$out/src" ||
    fail "git archive of $want_commit failed"
  commit=$want_commit source_kind=git-archive
}

# patch_source: the one change made to llm.c. On an out-of-memory cudaMalloc of
# the optimizer state, cudaMallocConditionallyManaged falls back to managed
# memory advised to the CPU; that call does not compile with CUDA 13
# (cudaMemAdvise takes a cudaMemLocation), and managed memory beyond what the
# card has free can hang a shared GPU (the device tool's README). Patched: the
# out-of-memory error stops the run instead. Nothing on the measured path changes.
PATCH_NOTE="llmc/cuda_utils.cuh: no managed-memory fallback (an out-of-memory cudaMalloc exits)"
patch_source() {
  local file=$out/src/llmc/cuda_utils.cuh
  grep -q 'cudaMallocManaged(out, bytes)' "$file" || fail "$file: the managed fallback to patch is not there"
  sed -i -e 's|cudaCheck_(cudaMallocManaged(out, bytes), file, line);|cudaCheck_(err, file, line); // paraplan: no managed fallback|' \
    -e '/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation/d' "$file"
  ! grep -q 'cudaMallocManaged(out\|cudaMemAdvise(\*out' "$file" || fail "$file: patching failed"
}

# Folders where CUDA and the nvidia-* wheels keep headers (include) or libraries (lib).
cuda_dirs() {
  local kind=$1 nvcc_root
  nvcc_root=$(dirname "$(dirname "$(command -v nvcc)")")
  if [ "$kind" = include ]; then
    printf '%s\n' "$nvcc_root/include" /usr/local/cuda/include "$nvcc_root/targets/x86_64-linux/include" \
      /usr/include /usr/include/x86_64-linux-gnu
  else
    printf '%s\n' "$nvcc_root/lib64" "$nvcc_root/lib" "$nvcc_root/targets/x86_64-linux/lib" \
      /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu
    ldconfig -p 2>/dev/null | awk '/libcudnn\.so/ {sub(/\/[^\/]*$/, "", $NF); print $NF}' | sort -u || true
  fi
  python3 -c 'import nvidia, os
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        print(os.path.join(p, d, "'"$kind"'"))' 2>/dev/null || true
}
# The first folder of the list on stdin holding FILE. It reads the whole list:
# stopping early would end the writer with SIGPIPE, a failure under pipefail.
first_with() {
  local dir found=""
  while IFS= read -r dir; do
    [ -z "$found" ] && [ -e "$dir/$1" ] && found=$dir
  done
  [ -n "$found" ] && echo "$found"
}

frontend_dir() {
  local found
  for found in "${CUDNN_FRONTEND_PATH:-}" "$HOME/cudnn-frontend/include" "$out/cudnn-frontend/include"; do
    [ -n "$found" ] && [ -f "$found/cudnn_frontend.h" ] && { echo "$found"; return 0; }
  done
  found=$(python3 -c 'import importlib.metadata as m
print(m.distribution("nvidia-cudnn-frontend").locate_file("include"))' 2>/dev/null)
  [ -n "$found" ] && [ -f "$found/cudnn_frontend.h" ] && { echo "$found"; return 0; }
  if [ "$fetch_frontend" = 1 ]; then
    rm -rf "$out/cudnn-frontend" && mkdir -p "$out/cudnn-frontend"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$out/cudnn-frontend" \
      "nvidia-cudnn-frontend==$FRONTEND_VERSION" >&2 &&
      python3 -m zipfile -e "$out"/cudnn-frontend/nvidia_cudnn_frontend-*.whl "$out/cudnn-frontend/wheel" &&
      mv "$out/cudnn-frontend/wheel/include" "$out/cudnn-frontend/include" &&
      rm -rf "$out/cudnn-frontend/wheel" "$out"/cudnn-frontend/*.whl &&
      { echo "$out/cudnn-frontend/include"; return 0; }
    echo "llmc_build.sh: downloading nvidia-cudnn-frontend==$FRONTEND_VERSION failed" >&2
  fi
  cuda_dirs include | first_with cudnn_frontend.h
}

# cudnn_setup: sets cudnn_why, and when all three are found frontend, cudnn_include, cudnn_lib, cudnn_link.
cudnn_setup() {
  frontend="" cudnn_include="" cudnn_lib="" cudnn_link=""
  if [ "$try_cudnn" = 0 ]; then cudnn_why="not tried (--no-cudnn)"; return 1; fi
  frontend=$(frontend_dir) ||
    { cudnn_why="no cuDNN frontend headers (cudnn_frontend.h; --fetch-frontend downloads them)"; return 1; }
  cudnn_include=$(cuda_dirs include | first_with cudnn.h) || { cudnn_why="no cudnn.h"; return 1; }
  if cudnn_lib=$(cuda_dirs lib | first_with libcudnn.so); then
    cudnn_link="-L$cudnn_lib -lcudnn"
  elif cudnn_lib=$(cuda_dirs lib | first_with libcudnn.so.9); then
    cudnn_link="-L$cudnn_lib -l:libcudnn.so.9"
  else
    cudnn_why="no libcudnn.so"; return 1
  fi
  local version
  version=$(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) / {printf "%s%s", sep, $3; sep="."}' \
    "$cudnn_include/cudnn_version.h" 2>/dev/null)
  cudnn_why="frontend $frontend; cuDNN ${version:-?} headers $cudnn_include, library $cudnn_lib"
}

# run_make USE_CUDNN: llm.c's own Makefile, its link line replaced (below); into build.log.
run_make() {
  local use=$1 ldflags="-lcublas -lcublasLt" includes=""
  # mfu.h uses NVML only where nvml.h is found; the Makefile links -lnvidia-ml
  # regardless, which fails where CUDA's toolkit has no NVML (as here).
  if echo '#include <nvml.h>' | nvcc -x cu -E - >/dev/null 2>&1; then
    ldflags="$ldflags -lnvidia-ml"
  fi
  if [ "$use" = 1 ]; then
    ln -sfn "$(dirname "$frontend")" "$out/src/cudnn-frontend" # the Makefile's test for it
    ldflags="$ldflags $cudnn_link"
    # Newer frontends compile some engines at run time with NVRTC.
    grep -rqs nvrtcCreateProgram "$frontend" && ldflags="$ldflags -lnvrtc"
    includes="-I$frontend -I$cudnn_include"
  fi
  make_command=(make -C "$out/src" train_gpt2cu GPU_COMPUTE_CAPABILITY=90 NO_MULTI_GPU=1
    NO_USE_MPI=1 PRECISION=BF16 USE_CUDNN="$use" CUDNN_FRONTEND_PATH="$frontend"
    "NVCC_LDFLAGS=$ldflags" "NVCC_INCLUDES=$includes")
  rm -f "$out/src/train_gpt2cu" "$out/src/build"/*.o
  echo "== USE_CUDNN=$use: ${make_command[*]}" >>"$out/build.log"
  nice "${make_command[@]}" >>"$out/build.log" 2>&1 && [ -x "$out/src/train_gpt2cu" ]
}

# needs FILE: the shared libraries it needs beyond the base system.
needs() {
  ldd "$1" 2>/dev/null | awk '$2 == "=>" {print $1}' |
    grep -v 'libc\.so\|libm\.so\|libgcc\|libstdc\|ld-linux\|libdl\|librt\|libpthread' | tr '\n' ' '
}

export_source
patch_source
: >"$out/build.log"
rm -f "$out/train_gpt2cu" "$out/train_gpt2cu_kernels"
begin=$(date +%s)
cudnn=no
if cudnn_setup; then
  if run_make 1; then
    cudnn=yes
    cudnn_make=("${make_command[@]}")
    cp "$out/src/train_gpt2cu" "$out/train_gpt2cu"
  else
    cudnn_why="the cuDNN build failed ($(grep -m1 -i 'error' "$out/build.log" | cut -c1-160)); $cudnn_why"
  fi
fi
cudnn_seconds=$(($(date +%s) - begin))
# llm.c's own kernels: the binary when cuDNN is not built, else the fallback
# the bench runs where the GPU machine has no libcudnn (a few seconds more).
run_make 0 || { tail -20 "$out/build.log" >&2; fail "make train_gpt2cu failed (see $out/build.log)"; }
if [ "$cudnn" = yes ]; then
  cp "$out/src/train_gpt2cu" "$out/train_gpt2cu_kernels"
  make_command=("${cudnn_make[@]}")
else
  cp "$out/src/train_gpt2cu" "$out/train_gpt2cu"
fi
{
  echo "commit: $commit"
  echo "source: $source_arg ($source_kind)"
  echo "attention: $([ "$cudnn" = yes ] && echo cudnn || echo llm.c kernels)"
  echo "cudnn: $cudnn"
  echo "cudnn_why: $cudnn_why"
  echo "patched: $PATCH_NOTE"
  echo "nvcc: $(nvcc --version | tail -2 | head -1)"
  echo "make: ${make_command[*]}"
  echo "seconds: $(($(date +%s) - begin))$([ "$cudnn" = yes ] && echo " ($cudnn_seconds with cuDNN)")"
  echo "size_bytes: $(stat -c %s "$out/train_gpt2cu")"
  echo "needs: $(needs "$out/train_gpt2cu")"
  [ "$cudnn" = yes ] && echo "fallback: train_gpt2cu_kernels (USE_CUDNN=0, $(stat -c %s \
    "$out/train_gpt2cu_kernels") bytes, needs $(needs "$out/train_gpt2cu_kernels"))"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
} >"$out/llmc_build.txt"
cat "$out/llmc_build.txt"
