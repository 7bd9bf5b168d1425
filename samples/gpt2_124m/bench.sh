#!/usr/bin/env bash
# samples/gpt2_124m/bench.sh: training throughput on one GPU, paraplan's CUDA
# backend against PyTorch (eager and torch.compile), for several micro-batch
# sizes: GPT-2 124M by default, any sample's job and baseline with JOB and
# BASELINE (samples/llama_1b/bench.sh sets them). For each size B: plan the
# job with micro-batch and global batch B (one micro-batch per step),
# `paraplan replay` it on the CUDA backend (STEPS timed steps after WARMUP),
# run the PyTorch baseline in both modes, then print one table. Expects a CUDA
# build (bash scripts/build.sh on a machine with nvcc) and PyTorch with CUDA
# for python3.
# Environment: DTYPE (bfloat16: bf16 mixed precision on both sides, PyTorch
# with bf16 autocast; float32: fp32 storage with TF32 GEMMs on both sides),
# BATCHES ("1 2 4 8 16"), STEPS (20), WARMUP (3), PARAPLAN
# (build/launcher/paraplan), PYTHON (python3), OUT (out/gpt2_124m),
# TORCH_ARGS (extra baseline flags, e.g. "--attention manual"), JOB
# (samples/gpt2_124m/job.toml), BASELINE (samples/gpt2_124m/pytorch_baseline.py),
# MODES (which runs: "paraplan eager compile"), BACKEND (paraplan's: cuda),
# PLAN_ARGS (extra `paraplan plan` overrides, e.g. "--model.num_layers 2").
# Outputs and logs in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
paraplan=${PARAPLAN:-build/launcher/paraplan}
python=${PYTHON:-python3}
out=${OUT:-out/gpt2_124m}
job=${JOB:-samples/gpt2_124m/job.toml}
baseline=${BASELINE:-samples/gpt2_124m/pytorch_baseline.py}
batches=${BATCHES:-"1 2 4 8 16"}
dtype=${DTYPE:-bfloat16}
case "$dtype" in
  bfloat16) torch_precision="--bf16" peak_tflops=989.0 ;;
  float32) torch_precision="" peak_tflops=494.5 ;;
  *) echo "bench.sh: DTYPE must be bfloat16 or float32, got '$dtype'" >&2; exit 2 ;;
esac
steps=${STEPS:-20}
warmup=${WARMUP:-3}
torch_args=${TORCH_ARGS:-}
modes=" ${MODES:-paraplan eager compile} "
backend=${BACKEND:-cuda}
plan_args=${PLAN_ARGS:-}
mkdir -p "$out"

for b in $batches; do
  echo "== micro-batch $b" >&2
  # A failed run (out of memory, say) leaves its JSON missing, shown as "-".
  if [[ $modes == *" paraplan "* ]]; then
    rm -f "$out/b$b.paraplan.json"
    # shellcheck disable=SC2086  # PLAN_ARGS is a list of overrides
    if "$paraplan" plan --config "$job" --output "$out/b$b.pplan" \
      --training.micro_batch_size "$b" --training.global_batch_size "$b" --model.dtype "$dtype" \
      $plan_args >"$out/b$b.plan.log" 2>&1 </dev/null; then
      "$paraplan" replay --plan "$out/b$b.pplan" --steps "$steps" --warmup "$warmup" \
        --backend "$backend" --report "$out/b$b.paraplan.json" >"$out/b$b.replay.log" 2>&1 \
        </dev/null || echo "paraplan replay failed for B=$b: see $out/b$b.replay.log" >&2
    else
      echo "paraplan plan failed for B=$b: see $out/b$b.plan.log" >&2
    fi
  fi
  for mode in eager compile; do
    [[ $modes == *" $mode "* ]] || continue
    rm -f "$out/b$b.$mode.json"
    # shellcheck disable=SC2086  # TORCH_ARGS is a list of flags
    "$python" "$baseline" --batch-size "$b" --steps "$steps" \
      --warmup "$warmup" --mode "$mode" --json "$out/b$b.$mode.json" $torch_precision $torch_args \
      >"$out/b$b.$mode.log" 2>&1 </dev/null ||
      echo "pytorch $mode failed for B=$b: see $out/b$b.$mode.log" >&2
  done
done

"$python" - "$out" "$peak_tflops" $batches <<'PY'
import json, os, sys

out, peak, batches = sys.argv[1], float(sys.argv[2]) * 1e12, sys.argv[3:]
# paraplan's MFU as its replay measures it: model FLOPs per token as the
# planner counts them (planner/cost/model_counts.h), against the job's cluster peak
# (the H100 SXM dense peak of the precision: bf16 989, TF32 494.5 TFLOP/s).

def load(path, *keys):
    try:
        with open(path) as f:
            value = json.load(f)
        for key in keys:
            value = value[key]
        return float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None

def fmt(value, spec):
    return "-" if value is None else format(value, spec)

print("%5s %15s %6s %18s %20s %6s" % ("micro", "paraplan tok/s", "MFU",
                                      "torch eager tok/s", "torch.compile tok/s", "ratio"))
for b in batches:
    ours = load(os.path.join(out, "b%s.paraplan.json" % b), "tokens_per_second_measured")
    eager = load(os.path.join(out, "b%s.eager.json" % b), "tokens_per_second")
    compiled = load(os.path.join(out, "b%s.compile.json" % b), "tokens_per_second")
    mfu = load(os.path.join(out, "b%s.paraplan.json" % b), "mfu", "measured")
    mfu = None if mfu is None else 100 * mfu
    best_torch = compiled if compiled is not None else eager
    ratio = None if ours is None or best_torch is None else ours / best_torch
    print("%5s %15s %5s%% %18s %20s %6s" % (b, fmt(ours, ",.0f"), fmt(mfu, ".1f"),
                                            fmt(eager, ",.0f"), fmt(compiled, ",.0f"),
                                            fmt(ratio, ".2f")))
print("ratio = paraplan / torch.compile tokens/s (torch eager where compile failed); "
      "MFU against %.1f TFLOP/s (dense peak of the precision)" % (peak / 1e12))
PY
