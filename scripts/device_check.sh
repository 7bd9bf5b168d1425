#!/usr/bin/env bash
# device_check.sh: everything a short GPU window must return, in one call that
# ends by its own deadline, each phase's results in $OUT as soon as it ends.
#
#   bash scripts/device_check.sh                  # on the GPU machine (bundle carried)
#   bash scripts/device_check.sh --rehearse       # here, no GPU: every phase's plumbing
#   bash scripts/device_check.sh --prepare DIR    # the CPU reference losses (device_bundle.sh)
#
# Phases, in this order unless --phases names others (their functions are in
# scripts/device_phases.sh):
#   facts      GPU, driver, the CUDA runtime, cuBLAS(Lt) and NCCL loaded, PyTorch,
#              whether ncu and compute-sanitizer work, ldd of paraplan, the bundle's commit
#   tests      every CUDA and NCCL test, 60 s each, JUnit; failures rerun once with
#              CUDA_LAUNCH_BLOCKING=1; failing comparisons dumped (PARAPLAN_TEST_DUMP_DIR)
#   sanitizer  compute-sanitizer memcheck over the op tests and one training step,
#              racecheck over attention, the norms and the losses
#   losses     GPT-2 124M's and a grouped-KV Llama's widths (2 layers, seq 1024, vocab
#              50,304, bf16, 5 steps) on the GPU against the CPU backend's losses
#   bench      GPT-2 124M bf16 throughput: paraplan replay (per component, measured
#              against predicted), PyTorch eager, torch.compile, llm.c where bundled
#              (scripts/llmc_build.sh); each step's loss; MFU by llm.c's formula
#   llama      the Llama-3.2-1B shape (samples/llama_1b) bf16: paraplan replay at two
#              micro-batches against torch.compile at one global batch, tokens/s and MFU
#              by the planner's count; each replay's step and peak memory against the plan's
#   breakdown  a step's kernels by ncu (GEMMs / attention / the rest / host gaps), and
#              paraplan's attention against PyTorch's SDPA backends at GPT-2's shapes,
#              and cuDNN's SDPA against paraplan's own kernels (GPT-2's, Llama's head dim)
# After every phase the summary table (scripts/device_summary.py) is rewritten,
# so a call stopped at any point returns what it finished. The table gives each
# phase (and each run of bench and breakdown, each sanitizer run) a state: ok,
# failed, flaky, timeout, absent, none ran or not run (scripts/README.md); the
# check exits 0 only when its verdict is ok: every phase asked for is ok (in a
# rehearsal the GPU's tools and PyTorch may be absent).
#
# Options and environment:
#   --seconds N      the whole check's deadline (default 470 on a GPU, 300 rehearsing)
#   --phases "..."   which phases, in which order
#   OUT              results folder (the device tool's; else out/device or out/device-rehearsal)
#   PARAPLAN_BUILD   build folder (build-device on a GPU, from the bundle; build rehearsing)
#   BATCHES          bench micro-batch sizes (default "8"; compile runs at the first only,
#                    COMPILE_BATCHES names others)
#   GLOBAL_BATCH     bench sequences per optimizer step, each micro-batch accumulated to it
#                    (default: the micro-batch, one per step)
#   LLMC             llm.c's train_gpt2cu (default .device/llmc/, bundled by device_bundle.sh)
#   BENCH_SECONDS    the bench phase's cap (default 150)
#   SWITCHES         the befores of before/afters: paraplan's bench replay again at the first
#                    micro-batch under each "VAR=VALUE" (e.g. "PARAPLAN_CUDA_OVERLAP=0
#                    PARAPLAN_CUDA_FUSED_GEMMS=0 PARAPLAN_CUDA_ATTENTION=own PARAPLAN_CUDA_GRAPHS=1"),
#                    up to 60 s each
#   LLAMA_BATCHES    the llama phase's micro-batch sizes (default "2 4"; torch.compile at the
#                    first only, LLAMA_COMPILE_BATCHES names others)
#   LLAMA_GLOBAL_BATCH  its sequences per optimizer step, for every run (default 8)
#   LLAMA_SECONDS    the llama phase's cap (default 190)
# At most 8 files come back from the device tool: OUT holds summary.txt and one
# archive per phase (seven phases: eight files, the limit; an eighth phase needs
# its files in another phase's archive).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -uo/p' "$0" | sed -n 's/^# \{0,1\}//p'; }
rehearse=0 seconds="" prepare_dir=""
phases="facts tests sanitizer losses bench llama breakdown"
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) rehearse=1 ;;
    --seconds) seconds=${2:-}; shift ;;
    --phases) phases=${2:-}; shift ;;
    --prepare) prepare_dir=${2:-}; shift ;;
    -h | --help) usage; exit 0 ;;
    *)
      echo "device_check.sh: unknown argument '$1'; use --rehearse, --seconds N, --phases" \
        "\"facts tests sanitizer losses bench llama breakdown\", or --prepare DIR" >&2
      exit 2
      ;;
  esac
  shift
done
for phase in $phases; do
  case " facts tests sanitizer losses bench llama breakdown " in
    *" $phase "*) ;;
    *)
      echo "device_check.sh: --phases: unknown phase '$phase'; the phases are facts tests" \
        "sanitizer losses bench llama breakdown" >&2
      exit 2
      ;;
  esac
done
if [ -n "$seconds" ] && ! [[ $seconds =~ ^[0-9]+$ ]]; then
  echo "device_check.sh: --seconds must be a whole number of seconds, got '$seconds'" >&2
  exit 2
fi
for cap in BENCH_SECONDS LLAMA_SECONDS; do
  if ! [[ ${!cap:-0} =~ ^[0-9]+$ ]]; then
    echo "device_check.sh: $cap must be a whole number of seconds, got '${!cap}'" >&2
    exit 2
  fi
done

# shellcheck source=scripts/device_phases.sh
source scripts/device_phases.sh

if [ -n "$prepare_dir" ]; then
  build=${PARAPLAN_BUILD:-build-device}
  paraplan=$build/launcher/paraplan
  prepare_references "$prepare_dir" full
  exit $?
fi

if [ "$rehearse" = 1 ]; then
  build=${PARAPLAN_BUILD:-build}
  out=${OUT:-out/device-rehearsal}
  seconds=${seconds:-300}
  python=python3
else
  # shellcheck source=scripts/device_env.sh
  source scripts/device_env.sh || exit 1
  build=${PARAPLAN_BUILD:-build-device}
  out=${OUT:-out/device}
  seconds=${seconds:-470}
  # PyTorch runs with the machine's own libraries, not the bundle's.
  python=$(mktemp)
  printf '#!/bin/sh\nLD_LIBRARY_PATH="$PARAPLAN_SYSTEM_LD_LIBRARY_PATH" exec python3 "$@"\n' \
    >"$python" && chmod +x "$python"
fi
paraplan=$build/launcher/paraplan
if [ ! -x "$paraplan" ]; then
  echo "device_check.sh: $paraplan not found: build first (scripts/build.sh, or carry the" \
    "bundle of scripts/device_bundle.sh)" >&2
  exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.tar.gz "$out/summary.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What the summary holds the check to: which phases, on a GPU or rehearsed.
printf 'mode: %s\nphases: %s\n' "$([ "$rehearse" = 1 ] && echo rehearsal || echo device)" \
  "$phases" >"$work/check.txt"
start=$(date +%s)
deadline=$((start + seconds))
export PARAPLAN_TEST_DUMP_DIR="$work/tests/dumps"

# run_phase NAME CAP: the phase's function under the smaller of its cap and the
# time left (less 10 s for the summary), its files packed into OUT at once.
# progress.txt gets one line: NAME ended|timeout|skipped SECONDS exit RC ...;
# the phase's state is the summary's (phase_state).
run_phase() {
  local name=$1 cap=$2 left limit begin rc
  left=$((deadline - $(date +%s) - 10))
  limit=$((cap < left ? cap : left))
  mkdir -p "$work/$name"
  if [ "$limit" -lt 5 ]; then
    echo "$name skipped 0 no time left before the deadline" >>"$work/progress.txt"
    echo "== $name: skipped, no time left" >&2
    return
  fi
  begin=$(date +%s)
  echo "== $name (at most ${limit} s)" >&2
  timeout --kill-after=5 "$limit" bash -c "source scripts/device_phases.sh && phase_$name" \
    >"$work/$name/phase.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - begin)) outcome=ended
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then outcome=timeout; fi
  echo "$name $outcome $took exit $rc (limit $limit s)" >>"$work/progress.txt"
  tar -C "$work" -czf "$out/$name.tar.gz" "$name" 2>/dev/null
  write_summary
  echo "== $name: $(phase_state "$name") in ${took} s" >&2
}
write_summary() {
  "$python" scripts/device_summary.py "$work" >"$out/summary.txt" 2>&1 ||
    python3 scripts/device_summary.py "$work" >"$out/summary.txt" 2>&1
}
# A phase's state as the table gives it ("  NAME  STATE  SECONDS s ..."), or "unknown".
phase_state() {
  local state
  state=$(sed -n "s/^  $1  *\([a-z][a-z ]*[a-z]\)  *[0-9-][0-9]* s .*/\1/p" "$out/summary.txt" |
    head -1)
  echo "${state:-unknown (see summary.txt)}"
}

export build paraplan python work rehearse
for phase in $phases; do
  case $phase in
    facts) run_phase facts 45 ;;
    tests) run_phase tests 150 ;;
    sanitizer) run_phase sanitizer 160 ;;
    losses) run_phase losses 70 ;;
    bench) run_phase bench "${BENCH_SECONDS:-150}" ;;
    llama) run_phase llama "${LLAMA_SECONDS:-190}" ;;
    breakdown) run_phase breakdown 75 ;;
  esac
done
write_summary
cat "$out/summary.txt"
# ok only when the summary's verdict is: every phase asked for ran and passed.
status=1
grep -q '^verdict: ok' "$out/summary.txt" && status=0
echo "device_check.sh: exit $status after $(($(date +%s) - start)) s; results in $out"
exit "$status"
