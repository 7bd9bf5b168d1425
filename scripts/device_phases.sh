# device_phases.sh: the phases of scripts/device_check.sh, one function each,
# and the CPU reference losses the losses phase holds the GPU to
# (prepare_references, run by device_bundle.sh and by a rehearsal). Sourced,
# never run. Each phase_* runs in its own bash under the phase's time limit and
# writes only into "$work/<phase>/"; the variables it reads (build, paraplan,
# python, work, rehearse) are exported by device_check.sh. A phase's exit
# status says whether its own commands ended well (0) or not; the state the
# table gives it (ok, failed, flaky, absent, none ran, ...) is device_states.py's,
# read from the files the phase left (its logs and records), never from the
# status alone.

# The device the checks run on: cuda, or cpu when rehearsing.
device_backend() { if [ "$rehearse" = 1 ]; then echo cpu; else echo cuda; fi; }

# The loss cases' `paraplan plan` arguments, at GPT-2 124M's widths (full) or
# narrowed for a rehearsal on 2 CPU cores (small). 2 layers, seq 1024, vocab
# 50,304, bf16, micro-batch 2, one warm-up step of the learning rate so the
# 5 steps move the weights.
loss_case_arguments() {
  local name=$1 size=$2 common="--training.micro_batch_size 2 --training.global_batch_size 2"
  common="$common --training.warmup_steps 1 --model.num_layers 2 --model.dtype bfloat16"
  local narrow=""
  case $name in
    gpt2)
      [ "$size" = small ] && narrow="--model.d_model 64 --model.num_heads 4 --model.seq_len 64"
      echo "--config samples/gpt2_124m/job.toml $common $narrow"
      ;;
    llama)
      # Grouped KV: 12 query heads share 4 KV heads (head_dim 64).
      local widths="--model.d_model 768 --model.num_heads 12 --model.num_kv_heads 4"
      widths="$widths --model.ffn_size 2048 --model.seq_len 1024 --model.vocab_size 50304"
      [ "$size" = small ] && widths="--model.d_model 64 --model.num_heads 4 --model.num_kv_heads 2
        --model.ffn_size 128 --model.seq_len 64 --model.vocab_size 50304"
      echo "--config samples/llama_1b/job.toml $common $widths"
      ;;
    sanitized_step)
      # One small step for compute-sanitizer: bf16 tensor-core attention (head_dim 64),
      # the loss at the full vocabulary.
      echo "--config samples/gpt2_124m/job.toml $common --model.num_layers 1 --model.d_model 256
        --model.num_heads 4 --model.seq_len 256 --training.micro_batch_size 1
        --training.global_batch_size 1"
      ;;
  esac
}
loss_cases="gpt2 llama"
loss_steps=5

# prepare_references DIR full|small: a token file (the repository's READMEs,
# byte-level), each loss case's plan and its CPU-backend losses, and the
# sanitized step's plan, into DIR.
prepare_references() {
  local dir=$1 size=$2 name
  mkdir -p "$dir" || return 1
  find . -name README.md -not -path './build*' -not -path './.cache/*' -not -path './.device/*' |
    LC_ALL=C sort | xargs cat >"$dir/corpus.txt"
  "$paraplan" tokenize --input "$dir/corpus.txt" --output "$dir/data" >"$dir/tokenize.log" 2>&1 ||
    { cat "$dir/tokenize.log"; return 1; }
  for name in $loss_cases sanitized_step; do
    # shellcheck disable=SC2046  # the arguments are words
    "$paraplan" plan $(loss_case_arguments "$name" "$size") --output "$dir/$name.pplan" \
      >"$dir/$name.plan.log" 2>&1 || { cat "$dir/$name.plan.log"; return 1; }
  done
  for name in $loss_cases; do
    local begin=$SECONDS
    "$paraplan" train --plan "$dir/$name.pplan" --data "$dir/data/train.bin" --steps "$loss_steps" \
      --backend cpu --log-json "$dir/$name.cpu.jsonl" >"$dir/$name.cpu.log" 2>&1 ||
      { cat "$dir/$name.cpu.log"; return 1; }
    echo "prepare_references: $name on the CPU backend, $loss_steps steps in" \
      "$((SECONDS - begin)) s" >&2
  done
}

# ---- a: facts ---------------------------------------------------------------------------------
# One "key: value" line each (device_summary.py reads them).
phase_facts() {
  local facts=$work/facts/facts.txt probe=$work/facts/probe
  mkdir -p "$probe"
  fact() { printf '%s: %s\n' "$1" "$2" >>"$facts"; }
  fact commit "$(cat .device/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null; then
    fact gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
      --format=csv,noheader 2>&1 | head -1)"
  else
    fact gpu "absent (no nvidia-smi)"
  fi
  ldd "$paraplan" >"$probe/ldd.txt" 2>&1
  local library path missing
  for library in libcudart libcublas libcublasLt libnccl libmpi libopenblas libcudnn; do
    path=$(awk -v lib="$library.so" 'index($1, lib) == 1 && $3 ~ /^\// {print $3; exit}' \
      "$probe/ldd.txt")
    # cuBLAS, cuDNN and OpenBLAS are opened on first use (kernels/cuda/
    # cublas_library.h, cudnn_library.h, kernels/cpu/openblas_library.h),
    # not linked: the one the library path gives.
    if [ -z "$path" ] && [[ $library == libcublas* || $library == libopenblas ||
      $library == libcudnn ]]; then
      local folder
      for folder in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
        path=$(ls "$folder/$library".so.[0-9]* 2>/dev/null | head -1)
        [ -n "$path" ] && break
      done
      [ -n "$path" ] && path="$(realpath "$path" 2>/dev/null || echo "$path") (opened on first use)"
    elif [ -n "$path" ]; then
      path=$(realpath "$path" 2>/dev/null || echo "$path")
    fi
    fact "$library" "${path:-not linked}"
  done
  missing=$(grep -c "not found" "$probe/ldd.txt")
  fact ldd_missing "$missing$([ "$missing" != 0 ] && echo ": $(grep 'not found' "$probe/ldd.txt" |
    awk '{print $1}' | tr '\n' ' ')")"
  fact pytorch "$("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda,
    "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")' 2>&1 |
    tail -1)"
  fact cmake "$(ctest --version 2>&1 | head -1)"
  # Each tool run for real on one small op test: present is not the same as working.
  # A test that launches kernels (FactoryAndMemoryRoundTrip only copies: ncu
  # then profiles nothing and looked broken).
  local op_test=$build/kernels/cuda_ops_test filter='Storage/CudaOps.GeluMatchesCpu/float32'
  local tool
  for tool in ncu compute-sanitizer; do
    if ! command -v "$tool" >/dev/null; then
      fact "$tool" "absent"
      continue
    fi
    if [ ! -x "$op_test" ]; then
      fact "$tool" "present, not tried (no $op_test)"
      continue
    fi
    if [ "$tool" = ncu ]; then
      timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$op_test" --gtest_filter="$filter" >"$probe/ncu.txt" 2>&1
      if grep -q 'gpu__time_duration' "$probe/ncu.txt"; then
        fact ncu "works ($(ncu --version | tail -1))"
      else
        fact ncu "does not work: $(grep -m1 -i 'error\|warn' "$probe/ncu.txt" || tail -1 "$probe/ncu.txt")"
      fi
    else
      timeout 60 compute-sanitizer --tool memcheck "$op_test" --gtest_filter="$filter" \
        >"$probe/compute-sanitizer.txt" 2>&1
      if grep -q 'ERROR SUMMARY: 0 errors' "$probe/compute-sanitizer.txt" &&
        ! grep -q 'SKIPPED' "$probe/compute-sanitizer.txt"; then
        fact compute-sanitizer "works ($(compute-sanitizer --version | tail -1))"
      else
        fact compute-sanitizer "does not work: $(grep -m1 -i 'error\|skipped' \
          "$probe/compute-sanitizer.txt" || tail -1 "$probe/compute-sanitizer.txt")"
      fi
    fi
  done
  cat "$facts"
}

# ---- b: tests ---------------------------------------------------------------------------------
# Returns 0 when ctest passed, 3 when every failure passed on its rerun
# (flaky), else ctest's status. device_states.py decides the state from the
# logs: a rerun that skips is a failure, a run where nothing passed is none ran.
phase_tests() {
  local dir=$work/tests regex='Cuda|cuda|Nccl' rc rerun_rc
  mkdir -p "$dir/dumps"
  # Passing tests' output whole (ctest keeps 1 KB by default): their
  # "[ compare ]" lines are the measured errors of every tolerance, and a
  # GTEST_SKIP (reported as passed) is told apart there. A regex that matches
  # nothing is an error, not a pass (--no-tests=error).
  ctest --test-dir "$build" -R "$regex" --no-tests=error --timeout 60 -j 4 --output-on-failure \
    --test-output-size-passed 1048576 --test-output-size-failed 4194304 \
    --output-junit "$dir/junit.xml" >"$dir/tests.log" 2>&1
  rc=$?
  tail -3 "$dir/tests.log"
  [ "$rc" = 0 ] && return 0
  # No test ran (none matched, or ctest stopped first): nothing to rerun.
  grep -q 'Test *#[0-9]*:' "$dir/tests.log" || return "$rc"
  # Once more, each kernel's fault reported at its own launch.
  CUDA_LAUNCH_BLOCKING=1 ctest --test-dir "$build" --rerun-failed --no-tests=error --timeout 60 \
    --output-on-failure --test-output-size-passed 1048576 --output-junit "$dir/junit-rerun.xml" \
    >"$dir/rerun.log" 2>&1
  rerun_rc=$?
  tail -3 "$dir/rerun.log"
  # Flaky only when every failure passed alone: one that skips on its rerun
  # (ctest's Skipped, or a GTEST_SKIP that ctest counts as passed) proved nothing.
  if [ "$rerun_rc" = 0 ] && ! grep -q '\*\*\*Skipped\|\*\*\*Not Run' "$dir/rerun.log" &&
    ! grep -q '\[  PASSED  \] 0 tests' "$dir/junit-rerun.xml" 2>/dev/null; then
    return 3 # the summary quotes the first run
  fi
  return "$rc"
}

# ---- c: compute-sanitizer ---------------------------------------------------------------------
# Memcheck's errors change the exit status only with --error-exitcode; racecheck's
# hazards may not: device_states.py also reads each report's summary lines
# ("ERROR SUMMARY: N errors", "RACECHECK SUMMARY: N hazards displayed").
sanitizer_error_exit=86
# sanitize NAME TOOL LIMIT COMMAND...: one process under the tool, its report in
# NAME.log, the program's output in NAME.out, one line in results.txt:
# "NAME: exit RC ..." or "NAME: absent WHY".
sanitize() {
  local name=$1 tool=$2 limit=$3 dir=$work/sanitizer
  shift 3
  if [ ! -x "$1" ]; then
    echo "$name: absent (no $1)" | tee -a "$dir/results.txt"
    return
  fi
  rm -f "$dir/$name.log"
  timeout --kill-after=5 "$limit" compute-sanitizer --tool "$tool" --print-limit 20 \
    --error-exitcode "$sanitizer_error_exit" --log-file "$dir/$name.log" "$@" \
    >"$dir/$name.out" 2>&1
  local rc=$? finished="" summaries
  # A test program stopped at its limit says how far it got.
  grep -q '^\[==========\]' "$dir/$name.out" && finished=", $(grep -c \
    '^\[       OK \]\|^\[  FAILED  \] [A-Z]' "$dir/$name.out") test(s) finished"
  summaries=$(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$dir/$name.log" 2>/dev/null |
    sed 's/^=* *//' | paste -sd ';' - | sed 's/;/; /g')
  echo "$name: exit $rc$([ "$rc" = 124 ] && echo " (limit ${limit} s)")$finished" \
    "(${summaries:-no summary line})" | tee -a "$dir/results.txt"
}
phase_sanitizer() {
  local dir=$work/sanitizer references
  if [ "$rehearse" = 1 ] || ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer absent: $([ "$rehearse" = 1 ] && echo 'no GPU (rehearsal)' ||
      echo 'not on PATH')" | tee "$dir/results.txt"
    return 0
  fi
  : >"$dir/results.txt"
  references=$(reference_dir)
  # cuDNN's tests are left out: the CPU references at GPT-2's width, the
  # graphs' build and a re-executed child (the fallback's) do not fit 60 s
  # under memcheck; the own kernels' are all there.
  sanitize memcheck_ops memcheck 60 "$build/kernels/cuda_ops_test" --gtest_filter='-*Cudnn*'
  # cuDNN's SDPA over paraplan's strided layouts, one small test.
  sanitize memcheck_cudnn memcheck 40 "$build/kernels/cuda_ops_test" \
    --gtest_filter='CudaCudnnAttention.OverwriteEqualsAccumulateIntoZeros'
  sanitize memcheck_step memcheck 40 "$paraplan" train --plan "$references/sanitized_step.pplan" \
    --data "$references/data/train.bin" --steps 1 --backend cuda
  # racecheck tracks every shared-memory access. On an H100 (2026-11-27):
  # the tensor-core test 16 s, the bf16 FMA kernels' test 40 s (fp32's 43 s,
  # the same kernels, left out), norms and losses 3 s in all; 0 hazards.
  sanitize racecheck_attention racecheck 80 "$build/kernels/cuda_ops_test" \
    --gtest_filter='CudaAttentionTensorCore.MatchesCpuInBfloat16:Storage/CudaAttention.MatchesCpu/bfloat16'
  sanitize racecheck_norms_losses racecheck 45 "$build/kernels/cuda_ops_test" \
    --gtest_filter='*orm*:*oss*:*Softmax*:-*ttention*'
  # Any run that did not exit 0, lacks its summary or counted an error or hazard.
  ! grep -q ': exit [^0]\|no summary line\|[1-9][0-9]* \(error\|hazard\|warning\)' \
    "$dir/results.txt"
}

# ---- d: losses on the device against the CPU backend -------------------------------------------
reference_dir() {
  if [ "$rehearse" = 1 ]; then echo "$work/references"; else echo "$PWD/.device/reference"; fi
}
phase_losses() {
  local dir=$work/losses references name
  references=$(reference_dir)
  if [ "$rehearse" = 1 ] && [ ! -f "$references/gpt2.cpu.jsonl" ]; then
    prepare_references "$references" small || return 1
  fi
  for name in $loss_cases; do
    cp "$references/$name.cpu.jsonl" "$dir/" 2>/dev/null ||
      echo "no CPU reference for $name in $references"
    "$paraplan" train --plan "$references/$name.pplan" --data "$references/data/train.bin" \
      --steps "$loss_steps" --backend "$(device_backend)" --log-json "$dir/$name.device.jsonl" \
      >"$dir/$name.device.log" 2>&1 || echo "$name: paraplan train failed (see $name.device.log)"
  done
  python3 scripts/device_summary.py --compare-losses "$dir" $loss_cases
}

# ---- e: throughput against PyTorch and llm.c ----------------------------------------------------
# Each run's record in runs.txt, one line each: "NAME exit RC batches B..." or
# "NAME absent WHY" (device_states.py gives each its own state; bench.sh
# exits 0 even when a run fails, so the state is read from the JSON it left).
# GLOBAL_BATCH: sequences per optimizer step for every system (each micro-batch
# of BATCHES accumulated to it); COMPILE_BATCHES: torch.compile's micro-batches
# (default the first); LLMC: llm.c's train_gpt2cu (default the bundle's,
# .device/llmc/train_gpt2cu, from LLMC_BUILD=... scripts/device_bundle.sh).
# Each run's cap grows with its number of micro-batches; BENCH_SECONDS raises
# the phase's (device_check.sh).
phase_bench() {
  local dir=$work/bench batches=${BATCHES:-8} first steps=10 warmup=3 backend=cuda plan_args=""
  first=${batches%% *}
  if [ "$rehearse" = 1 ]; then
    steps=2 warmup=1 backend=cpu batches=2 first=2
    plan_args="--model.num_layers 2 --model.d_model 64 --model.num_heads 4 --model.seq_len 64"
  fi
  local bench="bash samples/gpt2_124m/bench.sh" mode limit extra mode_batches llmc
  llmc=${LLMC:-$PWD/.device/llmc/train_gpt2cu}
  export OUT=$dir PARAPLAN=$paraplan PYTHON=$python STEPS=$steps WARMUP=$warmup BACKEND=$backend
  export PLAN_ARGS=$plan_args LLMC_DATA=$work/llmc_data
  : >"$dir/runs.txt"
  for mode in paraplan llmc eager compile; do
    mode_batches=$batches
    case $mode in
      paraplan) limit=60 extra=30 ;;
      eager) limit=40 extra=20 ;;
      compile) limit=100 extra=60 mode_batches=${COMPILE_BATCHES:-$first} ;;
      llmc) limit=60 extra=30 ;;
    esac
    if [ "$mode" = llmc ] && { [ "$rehearse" = 1 ] || [ ! -x "$llmc" ]; }; then
      echo "llmc absent $([ "$rehearse" = 1 ] && echo 'no GPU (rehearsal)' || echo "no $llmc" \
        "(LLMC_BUILD=DIR bash scripts/device_bundle.sh bundles it)")" >>"$dir/runs.txt"
      continue
    fi
    LLMC=$llmc bench_run "$dir" "$mode" "$mode_batches" "$limit" "$extra" $bench
  done
  bench_switches "$dir" "$first" $bench
  tail -4 "$dir/compile.log"
  bench_runs_ok "$dir" "$batches" '^llmc absent '
}

# bench_switches DIR B COMMAND...: the before of each before/after, paraplan's
# replay again at micro-batch B with each of SWITCHES ("VAR=VALUE ...", e.g.
# "PARAPLAN_CUDA_OVERLAP=0 PARAPLAN_CUDA_FUSED_GEMMS=0"; none by default), in
# DIR/switch_<VAR>_<VALUE>/ with the switch in switch.txt and its record in
# its own runs.txt (device_states.py judges each as a paraplan run).
bench_switches() {
  local dir=$1 b=$2 switch sub
  shift 2
  for switch in ${SWITCHES:-}; do
    sub=$dir/switch_${switch//=/_}
    mkdir -p "$sub"
    echo "$switch" >"$sub/switch.txt"
    OUT=$sub MODES=paraplan BATCHES=$b timeout 60 env "$switch" "$@" >"$sub/paraplan.log" 2>&1
    echo "paraplan exit $? batches $b" >"$sub/runs.txt"
  done
}

# bench_run DIR MODE BATCHES LIMIT EXTRA COMMAND...: one mode of a bench script
# (MODES, BATCHES) under LIMIT seconds plus EXTRA per micro-batch size past the
# first, its log in DIR/MODE.log and its record in DIR/runs.txt.
bench_run() {
  local dir=$1 mode=$2 batches=$3 limit=$4 extra=$5
  shift 5
  limit=$((limit + extra * ($(wc -w <<<"$batches") - 1)))
  MODES=$mode BATCHES=$batches timeout "$limit" "$@" >"$dir/$mode.log" 2>&1
  echo "$mode exit $? batches $batches" >>"$dir/runs.txt"
}

# bench_runs_ok DIR BATCHES ALLOWED: every paraplan micro-batch left its JSON
# and every run exited 0 (or its record matches the grep pattern ALLOWED).
bench_runs_ok() {
  local dir=$1 b
  cat "$dir/runs.txt"
  for b in $2; do [ -f "$dir/b$b.paraplan.json" ] || return 1; done
  ! grep -v " exit 0 \\|$3" "$dir/runs.txt" | grep -q .
}

# ---- e2: the Llama-3.2-1B shape against torch.compile; the planner's step and peak --------------
# samples/llama_1b/bench.sh (16 layers, d_model 2048, 32 query / 8 KV heads,
# ffn 8192, vocab 128,256, seq 2048) with MODES "paraplan compile": paraplan's
# replay at each micro-batch of LLAMA_BATCHES (default "2 4"), torch.compile of
# samples/llama_1b/pytorch_baseline.py at LLAMA_COMPILE_BATCHES (default the
# first), every run at LLAMA_GLOBAL_BATCH sequences a step (default 8). Records
# as the bench's, in runs.txt: "NAME exit RC batches B..." or "NAME absent WHY".
# A rehearsal narrows the job to a tiny Llama on the CPU backend and, as the
# bench does, still runs torch.compile (absent there: no GPU).
phase_llama() {
  local dir=$work/llama batches=${LLAMA_BATCHES:-"2 4"} steps=5 warmup=2 backend=cuda plan_args=""
  local first compile_batches
  first=${batches%% *}
  compile_batches=${LLAMA_COMPILE_BATCHES:-$first}
  if [ "$rehearse" = 1 ]; then
    steps=2 warmup=1 backend=cpu batches=2 compile_batches=2
    plan_args="--model.num_layers 2 --model.d_model 64 --model.num_heads 4 --model.num_kv_heads 2
      --model.ffn_size 128 --model.seq_len 64 --model.vocab_size 512"
  fi
  export OUT=$dir PARAPLAN=$paraplan PYTHON=$python STEPS=$steps WARMUP=$warmup BACKEND=$backend
  export PLAN_ARGS=$plan_args GLOBAL_BATCH=${LLAMA_GLOBAL_BATCH:-8}
  : >"$dir/runs.txt"
  # A replay of the 1.24B parameters spends a good part of its cap before the
  # first step: the host draws every initial weight (ParameterLayout::
  # initialize: 26 ns a parameter on one thread, ~30 s; now spread over the
  # host's cores); then 7 steps of about 0.3 s. torch.compile's first compile
  # of the model takes most of its cap.
  bench_run "$dir" paraplan "$batches" 50 40 bash samples/llama_1b/bench.sh
  bench_run "$dir" compile "$compile_batches" 100 60 bash samples/llama_1b/bench.sh
  tail -4 "$dir/paraplan.log"
  bench_runs_ok "$dir" "$batches" '^$'  # (no record may be absent)
}

# ---- f: where the step's time goes; attention against PyTorch's SDPA ----------------------------
# Records as the bench's, in runs.txt: ncu, attention (paraplan's), torch_attention.
phase_breakdown() {
  local dir=$work/breakdown plan batch=${BATCHES:-8} rc
  batch=${batch%% *}
  local shape=(--batch "$batch" --seq 1024 --heads 12 --head-dim 64 --dtype bfloat16)
  [ "$rehearse" = 1 ] && shape=(--batch 1 --seq 64 --heads 2 --head-dim 16 --dtype bfloat16)
  record() { echo "$*" | tee -a "$dir/runs.txt"; }
  : >"$dir/runs.txt"
  if [ "$rehearse" = 1 ] || ! command -v ncu >/dev/null; then
    echo "ncu not run: $([ "$rehearse" = 1 ] && echo 'no GPU (rehearsal)' || echo 'not on PATH')" \
      >"$dir/ncu.txt"
    record "ncu absent $([ "$rehearse" = 1 ] && echo 'no GPU (rehearsal)' || echo 'not on PATH')"
  else
    plan=$work/bench/b$batch.pplan
    rc=0
    if [ ! -f "$plan" ]; then
      plan=$dir/b$batch.pplan
      "$paraplan" plan --config samples/gpt2_124m/job.toml --output "$plan" \
        --training.micro_batch_size "$batch" --training.global_batch_size "$batch" \
        >"$dir/plan.log" 2>&1
      rc=$?
    fi
    echo "$batch" >"$dir/batch.txt"
    if [ "$rc" != 0 ]; then
      echo "ncu not run: paraplan plan failed (exit $rc, see plan.log)" >"$dir/ncu.txt"
      record "ncu failed paraplan plan exited $rc (see plan.log)"
    else
      # Only the measured step: replay brackets it with cudaProfilerStart/Stop.
      # --clock-control none: the card's own clocks, as the replay ran (ncu's
      # default locks them to base and made the kernels sum past the step).
      timeout 45 ncu --profile-from-start off --clock-control none \
        --metrics gpu__time_duration.sum --csv \
        --print-units base --print-kernel-base function --log-file "$dir/ncu.csv" \
        "$paraplan" replay --plan "$plan" --steps 1 --warmup 1 --backend cuda \
        >"$dir/ncu_replay.log" 2>&1
      rc=$?
      echo "ncu: exit $rc, $(grep -c gpu__time_duration "$dir/ncu.csv" 2>/dev/null) kernels" \
        >"$dir/ncu.txt"
      record "ncu exit $rc"
    fi
  fi
  if [ -x "$build/kernels/attention_bench" ]; then
    timeout 20 "$build/kernels/attention_bench" --backend "$(device_backend)" "${shape[@]}" \
      --iterations 10 --warmup 2 --json "$dir/attention_paraplan.json" \
      >"$dir/attention_paraplan.log" 2>&1
    record "attention exit $?"
  else
    record "attention absent no $build/kernels/attention_bench"
  fi
  # cuDNN's SDPA against paraplan's own kernels at GPT-2's shape and at
  # Llama's head dim 128 (grouped KV heads), each timed both ways in one run
  # (attention_bench --attention compare; kernels/cuda/attention_choice.h).
  # Files only (attention_compare_*.log, .json), not a record of runs.txt.
  if [ -x "$build/kernels/attention_bench" ] && [ "$rehearse" != 1 ]; then
    local compare_name compare_shape
    for compare_name in gpt2 llama; do
      compare_shape=("${shape[@]}")
      [ "$compare_name" = llama ] &&
        compare_shape=(--batch 2 --seq 4096 --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16)
      timeout 40 "$build/kernels/attention_bench" --backend cuda "${compare_shape[@]}" \
        --attention compare --iterations 10 --warmup 2 \
        --json "$dir/attention_compare_$compare_name.json" \
        >"$dir/attention_compare_$compare_name.log" 2>&1
      echo "attention compare $compare_name: exit $? ($(tail -1 \
        "$dir/attention_compare_$compare_name.log"))"
    done
  fi
  # Context parallelism's ring blocks per rank against the whole sequence:
  # Llama 3 8B's attention at 32k over cp 4 (a rehearsal: a small shape).
  local ring_shape=(--seq 32768 --heads 32 --kv-heads 8 --head-dim 128)
  [ "$rehearse" = 1 ] && ring_shape=(--seq 256 --heads 2 --kv-heads 1 --head-dim 16)
  if [ -x "$build/kernels/attention_block_bench" ]; then
    timeout 40 "$build/kernels/attention_block_bench" --backend "$(device_backend)" \
      "${ring_shape[@]}" --context 4 --iterations 2 --repeats 3 \
      >"$dir/ring_attention.log" 2>&1
    record "ring_attention exit $?"
  fi
  timeout 40 "$python" scripts/device_attention_torch.py "${shape[@]}" --iterations 10 \
    --warmup 2 --json "$dir/attention_torch.json" >"$dir/attention_torch.log" 2>&1
  record "torch_attention exit $?"
  ! grep -q ' exit [^0]\|^[a-z_]* failed ' "$dir/runs.txt"
}
