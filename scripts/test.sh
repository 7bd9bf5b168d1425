#!/usr/bin/env bash
# test.sh: install dependencies, build, and run the whole test suite with ctest;
# then a second, sanitized build with clang (ASan + UBSan, every report fatal,
# no CUDA) of the file-format readers' unit tests and the fuzz targets, each
# target run for PARAPLAN_FUZZ_SECONDS (default 5) seconds (fuzz/README.md).
# Between the two, the GPU device check's rehearsal (scripts/device_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_dependencies.sh
# The run command configures without the tests (build.sh --run); so must
# every CUDA setting, or a newcomer's first command stops at a CMake error
# (a CMake line naming a test target outside BUILD_TESTING). Configure only:
# seconds, and that slip shows at configure time.
mkdir -p build-without-tests
for cuda in OFF ON; do
  if ! cmake -S . -B "build-without-tests/cuda-$cuda" -G Ninja -DBUILD_TESTING=OFF \
      -DPARAPLAN_CUDA="$cuda" -DCMAKE_CUDA_ARCHITECTURES=90 >"build-without-tests/cuda-$cuda.log" 2>&1; then
    cat "build-without-tests/cuda-$cuda.log"
    echo "test.sh: configuring with BUILD_TESTING=OFF and PARAPLAN_CUDA=$cuda failed (above)" >&2
    exit 1
  fi
done
# The CUDA code is compiled (it has no GPU to run on here) for one
# architecture, the one the GPU bundle builds: the default two compile every
# kernel twice. cuDNN's SDPA with it, from the frontend's headers on PyPI;
# where PyPI cannot be reached the build goes on without it (CMake says so).
bash scripts/fetch_cudnn_frontend.sh ||
  echo "test.sh: no cuDNN frontend headers: cuDNN's SDPA is not compiled in this build" >&2
bash scripts/build.sh -DPARAPLAN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${PARAPLAN_CUDA_ARCHITECTURES:-90}"
# Multi-rank tests start mpirun; as root Open MPI needs explicit consent.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j "$(nproc)"

# The GPU window's check, rehearsed on the CPU backend (small shapes, the
# tools a GPU needs reported as absent), so a slip in the script or its
# summary cannot cost a window; then its table is checked for figures, and
# each phase's states (ok only for what ran and passed) on made-up windows.
bash scripts/device_check.sh --rehearse --seconds 300
PARAPLAN_REHEARSAL_OUT=out/device-rehearsal python3 scripts/device_summary_test.py
python3 scripts/device_states_test.py
python3 scripts/device_phases_test.py
# llm.c beside paraplan: its token shards, its output's parser, its state (no GPU, no llm.c).
python3 scripts/llmc_test.py

# The sanitized build: the unit tests of the readers of files a user gives
# (common's bounded reader, the plan and model limits in schema, token
# shards, checkpoints) and every fuzz target, which drive every reader (the
# job config, constraints, profile and hostfile too). The planner's, model's
# and launcher's own tests run in the main build only: built sanitized they
# would cost CI a minute and a half.
sanitized_tests=(common_test schema_test data_test tokenizer_test checkpoint_test)
fuzz_targets=(plan_fuzzer job_config_fuzzer partition_constraints_fuzzer token_shard_fuzzer
              safetensors_fuzzer safetensors_index_fuzzer hf_config_fuzzer train_state_fuzzer
              profile_fuzzer hostfile_fuzzer tokenizer_fuzzer eval_set_fuzzer parquet_fuzzer)
# -O0 compiles a third faster than -O1; the tests and the short fuzz runs
# need no speed.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O0 -gline-tables-only" \
  -DPARAPLAN_CUDA=OFF -DPARAPLAN_SANITIZE=ON -DPARAPLAN_FUZZ_SECONDS="${PARAPLAN_FUZZ_SECONDS:-5}"
cmake --build build-sanitize -j "$(nproc)" --target "${sanitized_tests[@]}" "${fuzz_targets[@]}"
labels=$(IFS='|'; echo "^(fuzz|${sanitized_tests[*]})\$")
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -L "$labels"
