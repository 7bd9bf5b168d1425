#!/usr/bin/env bash
# samples/tiny/run_parallel.sh: the tiny GPT on 4 ranks of this machine,
# pipeline 2 x tensor 2, started through `paraplan launch` (mpirun underneath).
# Same job, same data and seed as run.sh, so the losses match its run.
# Outputs go to out/tiny-parallel/.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install_dependencies.sh --run
bash scripts/build.sh --run
paraplan=build/launcher/paraplan
out=out/tiny-parallel
rm -rf "$out/checkpoints" "$out/tensorboard"
mkdir -p "$out"
# Open MPI asks for explicit consent to run as root (containers, CI).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
"$paraplan" tokenize --input /usr/share/games/fortunes --output "$out/data"
"$paraplan" plan --config samples/tiny/job.toml --output "$out/tiny-pp2-tp2.pplan" \
  --planner.world_size 4 --planner.pipeline_nstages 2 --planner.tensor_parallel_degree 2 \
  --planner.data_parallel_degree 1
# As a cluster job would: checkpoints written in the background while training
# goes on (the last in line), only the newest two kept, TensorBoard scalars
# (`tensorboard --logdir out/tiny-parallel/tensorboard`).
"$paraplan" launch --plan "$out/tiny-pp2-tp2.pplan" -- train --data "$out/data/train.bin" \
  --val-data "$out/data/val.bin" --checkpoint-dir "$out/checkpoints" --checkpoint-every 100 \
  --checkpoint-async --checkpoint-keep-latest 2 --tensorboard-dir "$out/tensorboard" \
  --log-json "$out/train.jsonl" "$@"
"$paraplan" sample --checkpoint "$out/checkpoints" --prompt "The " --tokens 300
