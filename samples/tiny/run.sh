#!/usr/bin/env bash
# samples/tiny/run.sh: the main job end to end on a fresh Debian machine:
# install what a run needs and build the paraplan program (nothing of the
# tests), tokenize the fortunes corpus, plan a single-rank job, train the tiny
# GPT (shuffled samples, its validation loss beside the corpus's unigram
# entropy), and sample text from its checkpoint. Outputs go to out/tiny/.
# Extra arguments go to `paraplan train` (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install_dependencies.sh --run
bash scripts/build.sh --run
paraplan=build/launcher/paraplan
out=out/tiny
rm -rf "$out/checkpoints"
mkdir -p "$out"
"$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data" | tee "$out/tokenize.txt"
# job.toml's [data] names out/tiny/data/{train,val}.bin, relative to here.
"$paraplan" plan --config samples/tiny/job.toml --output "$out/tiny.pplan"
"$paraplan" train --plan "$out/tiny.pplan" --checkpoint-dir "$out/checkpoints" \
  --checkpoint-every 100 --log-json "$out/train.jsonl" "$@" | tee "$out/train.txt"
echo "$(grep -o 'unigram entropy[^(]*' "$out/tokenize.txt")against the last validation loss" \
  "$(grep -o 'val_loss: [0-9.]*' "$out/train.txt" | tail -1 | cut -d' ' -f2) nats/token"
"$paraplan" sample --checkpoint "$out/checkpoints" --prompt "The " --tokens 300
