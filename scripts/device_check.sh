#!/usr/bin/env bash
# device_check.sh: the GPU checks, one device call each, on a GPU machine
# without Debian's packages. Run scripts/device_bundle.sh here first, carry
# .device, then on the GPU machine:
#
#   bash scripts/device_check.sh tests   # every CUDA and NCCL test (against the CPU backend)
#   bash scripts/device_check.sh bench   # samples/gpt2_124m/bench.sh with the bundled build
#
# Prints a short summary last; full logs go to $OUT (the device tool's
# returned folder; out/device elsewhere) as one archive per mode, since only a
# few files come back. bench takes BATCHES, STEPS, WARMUP and DTYPE as
# bench.sh does (default BATCHES "4 8 16", to fit one 10-minute call).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-tests}
out=${OUT:-out/device}
logs=$(mktemp -d)
mkdir -p "$out"
# shellcheck source=scripts/device_env.sh
source scripts/device_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader |
  tee "$logs/gpu.txt"

status=0
case "$mode" in
  tests)
    ctest --test-dir build-device -R "Cuda|cuda|Nccl" --output-on-failure -j 4 \
      >"$logs/tests.log" 2>&1 || status=$?
    grep -E "^[0-9]+% tests passed|\*\*\*Failed|\*\*\*Exception|Timeout" "$logs/tests.log"
    ;;
  bench)
    # PyTorch runs with the machine's own libraries, not the bundle's.
    printf '#!/bin/sh\nLD_LIBRARY_PATH="$PARAPLAN_SYSTEM_LD_LIBRARY_PATH" exec python3 "$@"\n' \
      >"$logs/python3" && chmod +x "$logs/python3"
    BATCHES=${BATCHES:-"4 8 16"} OUT="$logs/bench" PARAPLAN=build-device/launcher/paraplan \
      PYTHON="$logs/python3" bash samples/gpt2_124m/bench.sh >"$logs/bench.log" 2>&1 || status=$?
    tail -n 20 "$logs/bench.log"
    ;;
  *)
    echo "device_check.sh: mode must be tests or bench, got '$mode'" >&2
    exit 2
    ;;
esac
tar -C "$logs" -czf "$out/$mode-logs.tar.gz" .
rm -rf "$logs"
echo "device_check.sh $mode: exit $status; logs in $out/$mode-logs.tar.gz"
exit "$status"
