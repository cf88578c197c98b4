#!/usr/bin/env bash
# Before/after on one GPU in one run: builds this tree and another source
# tree of cleave (OLD_SRC, e.g. `git archive REV | tar -x -C DIR`), makes
# the 8B-shape bf16 model once, and runs the same cleave bench lines with
# each build, alternating, so both see the same GPU state.
# usage: bench/run_compare.sh OLD_SRC [MODELS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
models=${2:-/tmp/cleave-models}
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j "$(nproc)" --target cleave-cli >/dev/null
cmake -S "$old" -B build-old -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-old -j "$(nproc)" --target cleave-cli >/dev/null
mkdir -p "$models"
m="$models/llama-8b-bf16.gguf"
[ -f "$m" ] || build-gpu/cleave gen --preset 8b --type bf16 -o "$m"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "## $(date -u +%Y-%m-%d)"
for round in 1 2; do
  for b in build-old build-gpu; do
    echo "### $b (round $round)"
    "$b/cleave" bench -m "$m" --device cuda:0 -p 512,4096 -n 128 -r 3 2>&1 | grep -E '^\|'
  done
done
