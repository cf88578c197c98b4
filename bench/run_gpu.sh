#!/usr/bin/env bash
# GPU benchmark in one run on a CUDA machine: build cleave, generate the
# 8B-shape models (bf16, q8_0), run cleave bench, print markdown tables:
# pp512 / pp4096 / tg128 in batches of 512 (llama-bench's default ubatch),
# pp4096 as one 4096-token batch, and bf16 at 16k and 32k tokens of depth.
# About 4 minutes on one H200.
# usage: bench/run_gpu.sh [MODELS_DIR] [extra cleave bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/cleave-models}
shift || true
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j "$(nproc)" --target cleave-cli >/dev/null
mkdir -p "$models"
for t in bf16 q8_0; do
  [ -f "$models/llama-8b-$t.gguf" ] || build-gpu/cleave gen --preset 8b --type $t -o "$models/llama-8b-$t.gguf"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "## $(date -u +%Y-%m-%d)"
bench() { build-gpu/cleave bench "$@" 2>&1 | grep -E '^\||GB/s|TFLOP/s'; }
for t in bf16 q8_0; do
  bench -m "$models/llama-8b-$t.gguf" --device cuda:0 -p 512,4096 -n 128 -r 3 "$@"
  bench -m "$models/llama-8b-$t.gguf" --device cuda:0 -p 4096 -n 0 -b 4096 -r 3 "$@" | grep -v -- '---\|model'
done
# attention at depth: 16k and 32k tokens already in the cache (filled in
# batches of 4096; the measured pp512 is one 512-token batch)
bench -m "$models/llama-8b-bf16.gguf" --device cuda:0 -p 512 -n 128 -d 16384,32768 -b 4096 -r 2 "$@" |
  grep -v -- '---\|model'
