#!/usr/bin/env bash
# samples/llama_tiny/run.sh: a tiny Llama end to end on a fresh Debian machine:
# install, build, tokenize the fortunes corpus, plan a single-rank job, train
# it on the CPU backend, print the validation loss beside the corpus's
# unigram entropy (what a model that ignores context reaches), and sample
# text from the checkpoint. Outputs go to out/llama_tiny/. Extra arguments go
# to `paraplan train` (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install_dependencies.sh --run
bash scripts/build.sh --run
paraplan=build/launcher/paraplan
out=out/llama_tiny
rm -rf "$out/checkpoints" "$out/train.jsonl"
mkdir -p "$out"
"$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data" | tee "$out/tokenize.txt"
"$paraplan" plan --config samples/llama_tiny/job.toml --output "$out/llama_tiny.pplan"
"$paraplan" train --plan "$out/llama_tiny.pplan" --data "$out/data/train.bin" \
  --val-data "$out/data/val.bin" --checkpoint-dir "$out/checkpoints" --checkpoint-every 100 \
  --log-json "$out/train.jsonl" "$@" | tee "$out/train.txt"
echo "$(grep -o 'unigram entropy[^(]*' "$out/tokenize.txt")against the last validation loss" \
  "$(grep -o 'val_loss: [0-9.]*' "$out/train.txt" | tail -1 | cut -d' ' -f2) nats/token"
"$paraplan" sample --checkpoint "$out/checkpoints" --prompt "The " --tokens 300
