#!/usr/bin/env bash
# samples/tiny/replay_accuracy.sh: the planner's predictions against replayed
# measurements on the CPU backend. Profiles this machine for the tiny job
# (replay_job.toml) with 4 and 8 processes at once, plans it under several
# meshes with that profile, replays each plan through `paraplan launch` and
# prints one row per plan: predicted and measured step time, the error, and
# peak memory measured against predicted. Outputs go to out/replay-accuracy/.
# Set SKIP_BUILD=1 to use an existing build/.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SKIP_BUILD:-}" ]; then
  bash scripts/install_dependencies.sh
  bash scripts/build.sh
fi
paraplan=build/launcher/paraplan
out=out/replay-accuracy
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
job=samples/tiny/replay_job.toml
profile_dir="$out/profile"
steps=${STEPS:-5}

for world in 4 8; do
  "$paraplan" profile --config "$job" --profile-dir "$profile_dir" --planner.world_size "$world" \
    </dev/null | tail -1
done

# name world pp tp dp zero micro-batch
plans=(
  "dp4 4 1 1 4 0 8"
  "dp4-zero1 4 1 1 4 1 8"
  "tp2-dp2 4 1 2 2 0 8"
  "pp2-dp2 4 2 1 2 0 4"
  "pp2-tp2 4 2 2 1 0 4"
  "pp4 4 4 1 1 0 4"
  "tp4 4 1 4 1 0 8"
  "dp8-zero1 8 1 1 8 1 4"
  "pp2-dp2-tp2 8 2 2 2 1 4"
)
printf '%-14s | %5s | %10s | %10s | %7s | %9s | %9s | %s\n' plan ranks "pred s" "meas s" error \
  "pred MiB" "meas MiB" "memory ok"
for entry in "${plans[@]}"; do
  read -r name world pp tp dp zero micro <<<"$entry"
  plan="$out/$name.pplan"
  "$paraplan" plan --config "$job" --output "$plan" --planner.profile_dir "$profile_dir" \
    --planner.world_size "$world" --planner.pipeline_nstages "$pp" \
    --planner.tensor_parallel_degree "$tp" --planner.data_parallel_degree "$dp" \
    --planner.zero_stage "$zero" --training.micro_batch_size "$micro" \
    </dev/null >"$out/$name.plan.log"
  "$paraplan" launch --plan "$plan" -- replay --steps "$steps" --warmup 2 \
    --report "$out/$name.json" --trace "$out/$name.trace.json" --timeline "$out/$name.svg" \
    </dev/null >"$out/$name.replay.log"
  python3 - "$out/$name.json" "$name" "$world" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, m = r["step_seconds"], r["peak_memory_bytes"]
print("%-14s | %5s | %10.4f | %10.4f | %+6.1f%% | %9.2f | %9.2f | %s" % (
    sys.argv[2], sys.argv[3], s["predicted"], s["measured"], 100 * s["error"],
    m["predicted"] / 2**20, m["measured"] / 2**20,
    "yes" if r["memory_within_prediction"] else "NO"))
PY
done
