#!/usr/bin/env bash
# samples/llama_1b/bench.sh: the Llama-3.2-1B-shaped job on one GPU, paraplan's
# CUDA backend against PyTorch (eager and torch.compile), per micro-batch size:
# samples/gpt2_124m/bench.sh with this sample's job and baseline. Environment
# as there; defaults here: BATCHES "1 2 4 8", OUT out/llama_1b.
set -euo pipefail
cd "$(dirname "$0")/../.."
JOB=samples/llama_1b/job.toml BASELINE=samples/llama_1b/pytorch_baseline.py \
  OUT=${OUT:-out/llama_1b} BATCHES=${BATCHES:-"1 2 4 8"} exec bash samples/gpt2_124m/bench.sh
