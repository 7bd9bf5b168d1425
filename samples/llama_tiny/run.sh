#!/usr/bin/env bash
# samples/llama_tiny/run.sh: a tiny Llama end to end on a fresh Debian machine:
# install, build, tokenize the fortunes corpus, plan a single-rank job, train
# it on the CPU backend, print the validation loss beside the corpus's
# unigram entropy (what a model that ignores context reaches), and sample
# text from the checkpoint. Outputs go to out/llama_tiny/. Extra arguments go
# to `paraplan train` (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install_dependencies.sh
bash scripts/build.sh
paraplan=build/launcher/paraplan
out=out/llama_tiny
rm -rf "$out/checkpoints" "$out/train.jsonl"
mkdir -p "$out"
"$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data"
"$paraplan" plan --config samples/llama_tiny/job.toml --output "$out/llama_tiny.pplan"
"$paraplan" train --plan "$out/llama_tiny.pplan" --data "$out/data/train.bin" \
  --val-data "$out/data/val.bin" --checkpoint-dir "$out/checkpoints" --checkpoint-every 100 \
  --log-json "$out/train.jsonl" "$@"
/usr/bin/python3 - "$out/data/train.bin" "$out/train.jsonl" <<'PY'
import json, sys
import numpy as np
tokens = np.fromfile(sys.argv[1], dtype="<u2", offset=1024)
p = np.bincount(tokens, minlength=256) / len(tokens)
entropy = float(-(p[p > 0] * np.log(p[p > 0])).sum())
lines = [json.loads(line) for line in open(sys.argv[2])]
evals = [(line["step"], line["val_loss"]) for line in lines if "val_loss" in line]
print("validation loss by step: " + ", ".join("%d: %.3f" % e for e in evals))
print("unigram entropy of the corpus: %.3f nats/byte; last validation loss %.3f; "
      "tokens/s (last step) %.0f" % (entropy, evals[-1][1], lines[-1]["tps"]))
PY
"$paraplan" sample --checkpoint "$out/checkpoints" --prompt "The " --tokens 300
