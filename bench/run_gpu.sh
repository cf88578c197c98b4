#!/usr/bin/env bash
# GPU benchmark in one run on a CUDA machine: build cleave, generate the
# 8B-shape models (bf16, q8_0), run cleave bench (pp512, pp4096, tg128, and
# at 16k and 32k tokens of depth), print markdown tables. About 3 minutes on
# one H200.
# usage: bench/run_gpu.sh [MODELS_DIR] [extra cleave bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/cleave-models}
shift || true
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j "$(nproc)" >/dev/null
mkdir -p "$models"
for t in bf16 q8_0; do
  [ -f "$models/llama-8b-$t.gguf" ] || build-gpu/cleave gen --preset 8b --type $t -o "$models/llama-8b-$t.gguf"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "## $(date -u +%Y-%m-%d)"
for t in bf16 q8_0; do
  build-gpu/cleave bench -m "$models/llama-8b-$t.gguf" --device cuda:0 -p 512,4096 -n 128 -r 3 "$@"
done
# attention at depth: 16k and 32k tokens already in the cache
build-gpu/cleave bench -m "$models/llama-8b-bf16.gguf" --device cuda:0 -p 512 -n 128 \
  -d 16384,32768 -r 2 "$@" | tail -n +3
