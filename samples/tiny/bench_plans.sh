#!/usr/bin/env bash
# samples/tiny/bench_plans.sh: the tiny GPT under several plans on this machine
# (1, 2, 4 and 8 ranks): median step time over steps 3..N, global tokens/s, and
# the loss at the last step (the same for every plan). Expects a built tree
# (bash scripts/build.sh) and prints a table; outputs in out/bench-plans/.
set -euo pipefail
cd "$(dirname "$0")/../.."
paraplan=build/launcher/paraplan
out=out/bench-plans
steps=${STEPS:-8}
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
[ -f "$out/data/train.bin" ] || "$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data" >/dev/null
printf '%-22s %5s %12s %12s %10s\n' plan ranks "step (s)" "tokens/s" "loss"
# name pp dp tp zero
while read -r name pp dp tp zero; do
  world=$((pp * dp * tp))
  "$paraplan" plan --config samples/tiny/job.toml --output "$out/$name.pplan" \
    --planner.world_size "$world" --planner.pipeline_nstages "$pp" \
    --planner.data_parallel_degree "$dp" --planner.tensor_parallel_degree "$tp" \
    --planner.zero_stage "$zero" --training.micro_batch_size 4 \
    >/dev/null </dev/null
  rm -f "$out/$name.jsonl"
  "$paraplan" launch --plan "$out/$name.pplan" -- train --data "$out/data/train.bin" \
    --steps "$steps" --log-json "$out/$name.jsonl" >"$out/$name.log" 2>&1 </dev/null
  python3 - "$out/$name.jsonl" "$name" "$world" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
step = statistics.median(r["step_seconds"] for r in rows[2:])
tokens = rows[-1]["tps"] * int(sys.argv[3])  # tps is per device
print("%-22s %5s %12.3f %12.0f %10.6f" % (sys.argv[2], sys.argv[3], step, tokens, rows[-1]["loss"]))
PY
done <<'PLANS'
single 1 1 1 0
dp2 1 2 1 0
pp2 2 1 1 0
tp2 1 1 2 0
pp2_tp2 2 1 2 0
dp4_zero1 1 4 1 1
pp4 4 1 1 0
pp2_dp2_tp2_zero1 2 2 2 1
PLANS
