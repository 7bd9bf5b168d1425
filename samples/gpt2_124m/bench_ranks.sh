#!/usr/bin/env bash
# samples/gpt2_124m/bench_ranks.sh: step time of GPT-2 124M for 1, 2 and 4
# ranks on ONE GPU (issue 6's staged path: ranks that share a GPU talk MPI
# through pinned host memory, since NCCL refuses them). For each rank count N:
# plan job.toml as N data-parallel replicas of micro-batch B (global batch
# N x B, devices_per_node N, the GPU's memory split N ways), replay it under
# mpirun with the CUDA backend, and print the measured step time, tokens/s,
# the measured gradient reduction per step and the transport the log names.
# On the staged path nothing hides behind backward (its MPI calls block); on
# separate GPUs (NCCL) the buckets overlap backward.
# Expects a CUDA build (scripts/build.sh on the GPU machine) and Open MPI.
# Environment: RANKS ("1 2 4"), MICRO_BATCH (4), STEPS (10), WARMUP (2),
# PARAPLAN (build/launcher/paraplan), OUT (out/gpt2_124m_ranks), MPIRUN_ARGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
paraplan=${PARAPLAN:-build/launcher/paraplan}
out=${OUT:-out/gpt2_124m_ranks}
ranks=${RANKS:-"1 2 4"}
micro_batch=${MICRO_BATCH:-4}
steps=${STEPS:-10}
warmup=${WARMUP:-2}
mkdir -p "$out"

for n in $ranks; do
  echo "== $n rank(s) on one GPU" >&2
  rm -f "$out/n$n.json"
  memory=$(awk -v n="$n" 'BEGIN { printf "%.1f", 78 / n }')
  if "$paraplan" plan --config samples/gpt2_124m/job.toml --output "$out/n$n.pplan" \
    --planner.world_size "$n" --planner.data_parallel_degree "$n" \
    --cluster.devices_per_node "$n" --cluster.device_memory_gb "$memory" \
    --planner.memory_constraint "$memory" \
    --training.micro_batch_size "$micro_batch" \
    --training.global_batch_size $((n * micro_batch)) >"$out/n$n.plan.log" 2>&1 </dev/null; then
    # shellcheck disable=SC2086  # MPIRUN_ARGS is a list of flags
    "$paraplan" launch --plan "$out/n$n.pplan" ${MPIRUN_ARGS:-} -- replay --backend cuda \
      --steps "$steps" --warmup "$warmup" --report "$out/n$n.json" >"$out/n$n.replay.log" 2>&1 \
      </dev/null || echo "replay failed for $n ranks: see $out/n$n.replay.log" >&2
  else
    echo "plan failed for $n ranks: see $out/n$n.plan.log" >&2
  fi
done

python3 - "$out" $ranks <<'PY'
import json, os, sys

out, ranks = sys.argv[1], sys.argv[2:]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

print("%5s %12s %12s %16s %s" % ("ranks", "step s", "tokens/s", "reduction s", "transport"))
for n in ranks:
    report = load(os.path.join(out, "n%s.json" % n))
    log = os.path.join(out, "n%s.replay.log" % n)
    transport = "-"
    if os.path.exists(log):
        for line in open(log):
            if "transport:" in line:
                transport = line.split("transport:", 1)[1].strip()
    if report is None:
        print("%5s %12s %12s %16s %s" % (n, "-", "-", "-", transport))
        continue
    stages = report.get("stages", [{}])
    reduction = max(s.get("gradient_reduction", {}).get("measured", 0) for s in stages)
    print("%5s %12.4f %12.0f %16.4f %s" % (n, report["step_seconds_measured"],
                                         report["tokens_per_second_measured"], reduction,
                                         transport))
print("tokens/s for the whole job (all ranks share the one GPU); reduction = the slowest "
      "stage's measured gradient reduction per step")
PY
