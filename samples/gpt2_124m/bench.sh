#!/usr/bin/env bash
# samples/gpt2_124m/bench.sh: training throughput on one GPU, paraplan's CUDA
# backend against PyTorch (eager and torch.compile), for several micro-batch
# sizes: GPT-2 124M by default, any sample's job and baseline with JOB and
# BASELINE (samples/llama_1b/bench.sh sets them). For each size B: plan the
# job with micro-batch B and global batch B (one micro-batch per step), or
# GLOBAL_BATCH sequences a step (B's gradients accumulated: the same global
# batch for every B and every system), `paraplan replay` it on the CUDA
# backend (STEPS timed steps after WARMUP), run the PyTorch baseline in both
# modes and, with LLMC, llm.c (llmc_run.py), then print one table. Expects a
# CUDA build (bash scripts/build.sh on a machine with nvcc) and PyTorch with
# CUDA for python3.
# Environment: DTYPE (bfloat16: bf16 mixed precision on both sides, PyTorch
# with bf16 autocast; float32: fp32 storage with TF32 GEMMs on both sides),
# BATCHES ("1 2 4 8 16"), STEPS (20), WARMUP (3), PARAPLAN
# (build/launcher/paraplan), PYTHON (python3), OUT (out/gpt2_124m),
# TORCH_ARGS (extra baseline flags, e.g. "--attention manual"), JOB
# (samples/gpt2_124m/job.toml), BASELINE (samples/gpt2_124m/pytorch_baseline.py),
# MODES (which runs: "paraplan eager compile", and llmc when LLMC is set),
# BACKEND (paraplan's: cuda), PLAN_ARGS (extra `paraplan plan` overrides, e.g.
# "--model.num_layers 2"), GLOBAL_BATCH (sequences per optimizer step, a
# multiple of each B; default B), LLMC (llm.c's train_gpt2cu from
# scripts/llmc_build.sh: mode llmc, GPT-2 124M and bf16 only), LLMC_ARGS (more
# train_gpt2cu flags), LLMC_DATA (its token shards' folder, made when missing;
# default $OUT/llmc_data). Outputs and logs in $OUT: b<B>.<mode>.json and .log.
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
llmc=${LLMC:-}
modes=" ${MODES:-paraplan eager compile${llmc:+ llmc}} "
backend=${BACKEND:-cuda}
plan_args=${PLAN_ARGS:-}
global_batch=${GLOBAL_BATCH:-}
llmc_data=${LLMC_DATA:-$out/llmc_data}
mkdir -p "$out"
for b in $batches; do
  if [ -n "$global_batch" ] && [ $((global_batch % b)) != 0 ]; then
    echo "bench.sh: GLOBAL_BATCH $global_batch is not a multiple of the micro-batch $b" >&2
    exit 2
  fi
done

for b in $batches; do
  echo "== micro-batch $b${global_batch:+, global batch $global_batch}" >&2
  g=${global_batch:-$b}
  # The baselines take the accumulation flag only when asked (BASELINE may lack it).
  torch_global=()
  [ -n "$global_batch" ] && torch_global=(--global-batch-size "$g")
  # A failed run (out of memory, say) leaves its JSON missing, shown as "-".
  if [[ $modes == *" paraplan "* ]]; then
    rm -f "$out/b$b.paraplan.json"
    # shellcheck disable=SC2086  # PLAN_ARGS is a list of overrides
    if "$paraplan" plan --config "$job" --output "$out/b$b.pplan" \
      --training.micro_batch_size "$b" --training.global_batch_size "$g" --model.dtype "$dtype" \
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
      "${torch_global[@]}" >"$out/b$b.$mode.log" 2>&1 </dev/null ||
      echo "pytorch $mode failed for B=$b: see $out/b$b.$mode.log" >&2
  done
  if [[ $modes == *" llmc "* ]]; then
    rm -f "$out/b$b.llmc.json"
    if [ -z "$llmc" ] || [ "$dtype" != bfloat16 ]; then
      echo "llm.c not run for B=$b: $([ -z "$llmc" ] && echo 'LLMC (train_gpt2cu) not set' ||
        echo 'built for bf16 only')" | tee "$out/b$b.llmc.log" >&2
    else
      "$python" samples/gpt2_124m/llmc_run.py --binary "$llmc" --batch-size "$b" --global-batch "$g" \
        --steps "$steps" --warmup "$warmup" --data "$llmc_data" --extra "${LLMC_ARGS:-}" \
        --json "$out/b$b.llmc.json" >"$out/b$b.llmc.log" 2>&1 </dev/null ||
        echo "llm.c failed for B=$b: see $out/b$b.llmc.log" >&2
    fi
  fi
done

"$python" - "$out" "$peak_tflops" "${global_batch:-}" $batches <<'PY'
import json, os, sys

out, peak, global_batch, batches = sys.argv[1], float(sys.argv[2]) * 1e12, sys.argv[3], sys.argv[4:]
# paraplan's MFU as its replay measures it: model FLOPs per token as the
# planner counts them (planner/cost/model_counts.h), against the job's cluster peak
# (the H100 SXM dense peak of the precision: bf16 989, TF32 494.5 TFLOP/s).
# Beside llm.c: llm.c's count, 6N + 6LCT with N = 124,475,904 (GPT-2 124M, vocabulary
# padded to 50,304), for every system.
LLMC_FLOPS_PER_TOKEN = 6 * 124475904 + 6 * 12 * 768 * 1024

def load(path, *keys):
    try:
        with open(path) as f:
            value = json.load(f)
        for key in keys:
            value = value[key]
        return None if value is None else float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None

def fmt(value, spec):
    return "-" if value is None else format(value, spec)

def figures(b, mode):
    if mode == "paraplan":
        path = os.path.join(out, "b%s.paraplan.json" % b)
        memory = load(path, "peak_memory_bytes", "measured")
        return (load(path, "tokens_per_second_measured"),
                None if memory is None else memory / 2**30)
    path = os.path.join(out, "b%s.%s.json" % (b, mode))
    return load(path, "tokens_per_second"), load(path, "peak_memory_gib")

print("%5s %15s %6s %18s %20s %14s %6s" % ("micro", "paraplan tok/s", "MFU", "torch eager tok/s",
                                           "torch.compile tok/s", "llm.c tok/s", "ratio"))
for b in batches:
    ours, eager, compiled, llmc = (figures(b, m)[0] for m in ("paraplan", "eager", "compile", "llmc"))
    mfu = load(os.path.join(out, "b%s.paraplan.json" % b), "mfu", "measured")
    mfu = None if mfu is None else 100 * mfu
    best_torch = compiled if compiled is not None else eager
    ratio = None if ours is None or best_torch is None else ours / best_torch
    print("%5s %15s %5s%% %18s %20s %14s %6s" % (b, fmt(ours, ",.0f"), fmt(mfu, ".1f"),
                                                 fmt(eager, ",.0f"), fmt(compiled, ",.0f"),
                                                 fmt(llmc, ",.0f"), fmt(ratio, ".2f")))
print("ratio = paraplan / torch.compile tokens/s (torch eager where compile failed); "
      "MFU against %.1f TFLOP/s (dense peak of the precision)%s" % (
          peak / 1e12, "; global batch %s sequences a step" % global_batch if global_batch else ""))
if any(figures(b, "llmc")[0] is not None for b in batches):
    print("\nbeside llm.c: MFU by llm.c's formula (6N + 6LCT = %.1f MFLOP/token, %.0f TFLOP/s), "
          "peak memory GiB" % (LLMC_FLOPS_PER_TOKEN / 1e6, peak / 1e12))
    print("%5s %14s %14s %14s" % ("micro", "paraplan", "torch.compile", "llm.c"))
    for b in batches:
        cells = []
        for mode in ("paraplan", "compile", "llmc"):
            tps, memory = figures(b, mode)
            mfu = None if tps is None else 100 * tps * LLMC_FLOPS_PER_TOKEN / peak
            cells.append("%s%% %s" % (fmt(mfu, "5.1f"), fmt(memory, "5.1f")))
        print("%5s %14s %14s %14s" % tuple([b] + cells))
    attention = [json.load(open(os.path.join(out, "b%s.llmc.json" % b))).get("attention")
                 for b in batches if figures(b, "llmc")[0] is not None]
    print("llm.c's attention: %s; memory: paraplan's tracked peak, torch's max allocated, "
          "llm.c's process use by nvidia-smi (CUDA context included)" % attention[0])
PY
