#!/usr/bin/env bash
# device_check.sh: the GPU checks on a GPU machine without Debian's packages,
# and one summary table of them. Run scripts/device_bundle.sh here first,
# carry .device, then on the GPU machine:
#
#   bash scripts/device_check.sh          # all of the below, then the summary table
#   bash scripts/device_check.sh tests    # every CUDA and NCCL test (against the CPU backend)
#   bash scripts/device_check.sh bench    # GPT-2 124M: paraplan against PyTorch eager and compile
#   bash scripts/device_check.sh profile  # where a GPT-2 124M step's time goes (nsys, if present)
#   bash scripts/device_check.sh replay   # 2 and 4 ranks sharing the GPU: measured vs predicted
#
# Each mode prints the summary table (scripts/device_summary.py) of what it
# ran; full logs go to $OUT (the device tool's returned folder; out/device
# elsewhere) as one archive per mode, since only a few files come back. bench
# takes BATCHES, STEPS, WARMUP and DTYPE as bench.sh does (default BATCHES
# "4 8 16 32"; pass fewer to fit one 10-minute call of the device tool).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
out=${OUT:-out/device}
logs=$(mktemp -d)
mkdir -p "$out"
# shellcheck source=scripts/device_env.sh
source scripts/device_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader |
  tee "$logs/gpu.txt"

status=0
run_tests() {
  ctest --test-dir build-device -R "Cuda|cuda|Nccl" --output-on-failure -j 4 \
    >"$logs/tests.log" 2>&1 || status=$?
}
# PyTorch runs with the machine's own libraries, not the bundle's.
printf '#!/bin/sh\nLD_LIBRARY_PATH="$PARAPLAN_SYSTEM_LD_LIBRARY_PATH" exec python3 "$@"\n' \
  >"$logs/python3" && chmod +x "$logs/python3"
run_bench() {
  BATCHES=${BATCHES:-"4 8 16 32"} OUT="$logs/bench" PARAPLAN=build-device/launcher/paraplan \
    PYTHON="$logs/python3" bash samples/gpt2_124m/bench.sh >"$logs/bench.log" 2>&1 || status=$?
}
paraplan=build-device/launcher/paraplan
run_profile() {
  mkdir -p "$logs/profile"
  if ! command -v nsys >/dev/null; then
    echo "nsys not found: no kernel breakdown" >"$logs/profile/none.txt"
    return
  fi
  "$paraplan" plan --config samples/gpt2_124m/job.toml --output "$logs/profile/b16.pplan" \
    --training.micro_batch_size 16 --training.global_batch_size 16 >"$logs/profile/plan.log" 2>&1 ||
    { status=1; return; }
  local start end
  start=$(date +%s.%N)
  nsys profile --force-overwrite true -o "$logs/profile/replay" \
    "$paraplan" replay --plan "$logs/profile/b16.pplan" --steps 10 --warmup 3 --backend cuda \
    >"$logs/profile/replay.log" 2>&1 || status=$?
  end=$(date +%s.%N)
  nsys stats --report cuda_gpu_kern_sum --format csv --output "$logs/profile/kernels" \
    "$logs/profile/replay.nsys-rep" >"$logs/profile/stats.log" 2>&1 || status=$?
  mv "$logs/profile/kernels_cuda_gpu_kern_sum.csv" "$logs/profile/kernels.csv" 2>/dev/null
  # The kernels' share of the replay's measured steps; nsys adds its own start-up.
  python3 - "$logs/profile" "$start" "$end" <<'PY'
import json, re, sys
folder = sys.argv[1]
text = open(folder + "/replay.log", errors="replace").read()
step = re.search(r"step[^\n]*?measured[^\n]*?([0-9.]+) s", text)
seconds = float(step.group(1)) * 13 if step else float(sys.argv[3]) - float(sys.argv[2])
json.dump({"profiled_seconds": seconds, "what": "replay of micro-batch 16, 13 steps"},
          open(folder + "/wall.json", "w"))
PY
}
run_replay() {
  # 2 and 4 ranks on the one GPU (staged transport), tiny model: pp 2 and pp 2 x dp 2.
  mkdir -p "$logs/replay"
  for mesh in "2 1" "2 2"; do
    set -- $mesh
    local name="pp$1_dp$2"
    "$paraplan" plan --config samples/tiny/job.toml --output "$logs/replay/$name.pplan" \
      --planner.world_size $(($1 * $2)) --planner.pipeline_nstages "$1" \
      --planner.data_parallel_degree "$2" --planner.tensor_parallel_degree 1 \
      --cluster.preset h100-sxm \
      >"$logs/replay/$name.plan.log" 2>&1 || { status=1; continue; }
    "$paraplan" launch --plan "$logs/replay/$name.pplan" -- replay --backend cuda --steps 10 \
      --warmup 3 --report "$logs/replay/$name.json" >"$logs/replay/$name.log" 2>&1 || status=$?
  done
}
case "$mode" in
  tests) run_tests ;;
  bench) run_bench ;;
  profile) run_profile ;;
  replay) run_replay ;;
  all) run_tests; run_bench; run_profile; run_replay ;;
  *)
    echo "device_check.sh: mode must be all, tests, bench, profile or replay, got '$mode'" >&2
    exit 2
    ;;
esac
peak=989.0
[ "${DTYPE:-bfloat16}" = float32 ] && peak=494.5
python3 scripts/device_summary.py "$logs" "$peak" | tee "$logs/summary.txt"
tar -C "$logs" -czf "$out/$mode-logs.tar.gz" .
rm -rf "$logs"
echo "device_check.sh $mode: exit $status; logs in $out/$mode-logs.tar.gz"
exit "$status"
