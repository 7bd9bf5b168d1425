#!/usr/bin/env bash
# test.sh: install dependencies, build, and run the whole test suite with ctest;
# then a second, sanitized build with clang (ASan + UBSan, every report fatal,
# no CUDA) of the file-format readers' unit tests and the fuzz targets, each
# target run for PARAPLAN_FUZZ_SECONDS (default 10) seconds (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_dependencies.sh
bash scripts/build.sh
# Multi-rank tests start mpirun; as root Open MPI needs explicit consent.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j "$(nproc)"

# The sanitized build: what reads files a user gives (common, schema, planner,
# data, checkpoint, model, the launcher's hostfile) and every fuzz target.
sanitized_tests=(common_test schema_test planner_test data_test checkpoint_test model_test
                 launch_test)
fuzz_targets=(plan_fuzzer job_config_fuzzer partition_constraints_fuzzer token_shard_fuzzer
              safetensors_fuzzer hf_config_fuzzer train_state_fuzzer profile_fuzzer
              hostfile_fuzzer)
# -O0 compiles a third faster than -O1; the tests and the short fuzz runs
# need no speed.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O0 -gline-tables-only" \
  -DPARAPLAN_CUDA=OFF -DPARAPLAN_SANITIZE=ON -DPARAPLAN_FUZZ_SECONDS="${PARAPLAN_FUZZ_SECONDS:-10}"
cmake --build build-sanitize -j "$(nproc)" --target "${sanitized_tests[@]}" "${fuzz_targets[@]}"
labels=$(IFS='|'; echo "^(fuzz|${sanitized_tests[*]})\$")
# The planner's search-quality oracle (400 random jobs searched exhaustively)
# reads no input; the main build runs it.
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -L "$labels" -E '^OracleTest\.'
