#!/usr/bin/env bash
# samples/tiny/replay_accuracy.sh: the planner's predictions against replayed
# measurements on the CPU backend, per plan and per component. For each of
# thirteen meshes of the tiny job (replay_job.toml; single rank, dp, tp, pp
# and mixed, 1 to 8 ranks) it profiles this machine for the plan's shapes with
# as many processes as the plan has ranks, plans the job with that profile and
# the mesh fixed, replays the plan through `paraplan launch` and
# prints, per plan, each stage's components (forward, backward, tensor-parallel
# transfers, pipeline transfers, gradient reduction, optimizer, waits) per
# step: predicted, measured, error and share of the step; then the step (mean
# and median of the measured steps) and peak memory; then a summary line per
# component (mean and worst absolute
# error over the plans, counting components that are at least 5% of the
# measured step); then the machine's noise: each plan is replayed a second
# time right after the first, and the two steps' difference is what a
# perfect model's error would be. Outputs go to out/replay-accuracy/ (OUT to
# change).
#
# Environment: SKIP_BUILD=1 uses an existing build/; PARAPLAN=path replays
# with another paraplan binary (e.g. a build of an older commit: its reports
# name fewer components, which the table prints as they are); STEPS (default
# 5) measured steps after 2 warm-up; ROUNDS (default 3) rounds over the plans,
# each plan profiled and replayed afresh in each (this machine's speed drifts
# by tens of percent over seconds; the table takes the median over rounds of
# each round's error); PLANS="dp4 pp2-dp2" runs a subset;
# SCHEDULER (default 1f1b, the schedule the time model was calibrated with;
# auto lets the planner choose) the pipeline schedule of every plan.
set -euo pipefail
cd "$(dirname "$0")/../.."
source samples/tiny/bench_env.sh out/replay-accuracy
job=samples/tiny/replay_job.toml
steps=${STEPS:-5}
rounds=${ROUNDS:-3}
# The schedule every plan uses (SCHEDULER=auto lets the planner choose).
scheduler=${SCHEDULER:-1f1b}

# name world pp tp dp zero micro-batch
all_plans=(
  "single 1 1 1 1 0 8"
  "dp2 2 1 1 2 0 8"
  "tp2 2 1 2 1 0 8"
  "pp2 2 2 1 1 0 4"
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
selected=()
for entry in "${all_plans[@]}"; do
  name=${entry%% *}
  if [ -z "${PLANS:-}" ] || [[ " $PLANS " == *" $name "* ]]; then selected+=("$entry"); fi
done

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $paraplan"
# Per plan: a fresh profile of this machine for the plan's shapes, measured
# with as many processes as the plan has ranks, then the plan and its replay,
# so the replay runs under the load the profile saw (this machine is shared).
reports=()
for ((round = 1; round <= rounds; ++round)); do
  for entry in "${selected[@]}"; do
    read -r name world pp tp dp zero micro <<<"$entry"
    degrees=(--planner.world_size "$world" --planner.pipeline_nstages "$pp"
      --planner.tensor_parallel_degree "$tp" --planner.data_parallel_degree "$dp"
      --planner.zero_stage "$zero" --training.micro_batch_size "$micro"
      --planner.pipeline_scheduler "$scheduler")
    run="$out/$name.round$round"
    profile_dir="$run.profile"
    rm -rf "$profile_dir"
    "$paraplan" profile --config "$job" --profile-dir "$profile_dir" "${degrees[@]}" \
      </dev/null >"$run.profile.log" 2>&1 || { cat "$run.profile.log"; exit 1; }
    "$paraplan" plan --config "$job" --output "$run.pplan" --planner.profile_dir "$profile_dir" \
      "${degrees[@]}" </dev/null >"$run.plan.log"
    "$paraplan" launch --plan "$run.pplan" -- replay --steps "$steps" --warmup 2 \
      --report "$run.json" --trace "$run.trace.json" --timeline "$run.svg" \
      </dev/null >"$run.replay.log" 2>&1 || { cat "$run.replay.log"; exit 1; }
    # The same plan again at once, no new profile: the machine's own noise.
    "$paraplan" launch --plan "$run.pplan" -- replay --steps "$steps" --warmup 2 \
      --report "$run.again.json" </dev/null >"$run.again.log" 2>&1 || { cat "$run.again.log"; exit 1; }
    reports+=("$name=$run.json" "$name@again=$run.again.json")
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 samples/tiny/replay_accuracy_table.py "${reports[@]}" | tee "$out/table.txt"
