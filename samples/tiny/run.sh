#!/usr/bin/env bash
# samples/tiny/run.sh: the main job end to end on a fresh Debian machine:
# install, build, tokenize the fortunes corpus, plan a single-rank job, train
# the tiny GPT (validation loss against the corpus's unigram entropy), and
# sample text from its checkpoint. Outputs go to out/tiny/.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install_dependencies.sh
bash scripts/build.sh
paraplan=build/launcher/paraplan
out=out/tiny
rm -rf "$out/checkpoints"
mkdir -p "$out"
"$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data"
"$paraplan" plan --config samples/tiny/job.toml --output "$out/tiny.pplan"
"$paraplan" train --plan "$out/tiny.pplan" --data "$out/data/train.bin" \
  --val-data "$out/data/val.bin" --checkpoint-dir "$out/checkpoints" --checkpoint-every 100 \
  --log-json "$out/train.jsonl" "$@"
"$paraplan" sample --checkpoint "$out/checkpoints" --prompt "The " --tokens 300
