#!/usr/bin/env bash
# samples/tiny/schedule_bubbles.sh: every pipeline schedule kind replayed on
# 4 CPU ranks (pp 4, the tiny job of replay_job.toml with 8 layers so every
# kind, interleaved v=2, ZB-V and DualPipe-V included, fits), the bubble
# measured beside the one the plan predicts. Per kind: a fresh profile of this machine with 4
# processes, the plan with that profile and the schedule fixed, and its
# replay through `paraplan launch`; the table gives the step and each
# stage's waiting (the bubble, and waiting for a slower stage or a core)
# per step, predicted and measured, mean over the stages. These 2 shared
# cores run 4 ranks, so the waits include core sharing; compare kinds
# within one run. Outputs go to out/schedule-bubbles/ (OUT to change).
#
# Environment: SKIP_BUILD=1 uses an existing build/; PARAPLAN=path another
# binary; STEPS (default 5) measured steps after 2 warm-up; KINDS to pick
# (default "1f1b gpipe interleaved zb-h1 zb-v dualpipe-v").
set -euo pipefail
cd "$(dirname "$0")/../.."
source samples/tiny/bench_env.sh out/schedule-bubbles
job=samples/tiny/replay_job.toml
steps=${STEPS:-5}
reports=()
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $paraplan"
for kind in ${KINDS:-1f1b gpipe interleaved zb-h1 zb-v dualpipe-v}; do
  chunks=0
  [ "$kind" = interleaved ] && chunks=2
  args=(--model.num_layers 8 --planner.world_size 4 --planner.pipeline_nstages 4
    --planner.tensor_parallel_degree 1 --planner.data_parallel_degree 1
    --training.micro_batch_size 2 --planner.pipeline_scheduler "$kind"
    --planner.pipeline_virtual_stages "$chunks")
  run="$out/$kind"
  rm -rf "$run.profile"
  "$paraplan" profile --config "$job" --profile-dir "$run.profile" "${args[@]}" \
    </dev/null >"$run.profile.log" 2>&1 || { cat "$run.profile.log"; exit 1; }
  "$paraplan" plan --config "$job" --output "$run.pplan" --planner.profile_dir "$run.profile" \
    "${args[@]}" </dev/null >"$run.plan.log" || { cat "$run.plan.log"; exit 1; }
  "$paraplan" launch --plan "$run.pplan" -- replay --steps "$steps" --warmup 2 \
    --report "$run.json" </dev/null >"$run.replay.log" 2>&1 || { cat "$run.replay.log"; exit 1; }
  reports+=("$kind=$run.json")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "${reports[@]}" <<'PY' | tee "$out/table.txt"
import json, sys
print(f"{'schedule':<12} {'step predicted':>15} {'step measured':>14} "
      f"{'wait predicted':>15} {'wait measured':>14}  (ms per step; wait: mean over stages)")
for arg in sys.argv[1:]:
    kind, path = arg.split("=", 1)
    report = json.load(open(path))
    stages = report["stages"]
    wait = [sum(s["per_step"]["wait"][k] for s in stages) / len(stages)
            for k in ("predicted", "measured")]
    step = report["step_seconds"]
    print(f"{kind:<12} {1e3 * step['predicted']:>15.2f} {1e3 * step['measured']:>14.2f} "
          f"{1e3 * wait[0]:>15.2f} {1e3 * wait[1]:>14.2f}")
PY
