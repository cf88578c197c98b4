#!/usr/bin/env bash
# Tiered KV cache benchmark on one GPU (cuda:0): build cleave, generate the
# 8B-shape bf16 model, then at context depths of 4k, 32k, 64k and 128k
# tokens, prefill (pp512 after the depth) and decode (tg128 after the
# depth) with the whole cache in device memory and with half of it in host
# memory (--kv-vram-cells = depth / 2); and the GPU test of bit-identity
# at 4k, 20k and 40k tokens (f16 and q8_0 caches).
# Prints markdown. usage: bench/run_tiers.sh [MODELS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/cleave-models}
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCLEAVE_GPU_TESTS=ON >/dev/null
cmake --build build-gpu -j "$(nproc)" >/dev/null
B=build-gpu/cleave
M=$models/llama-8b-bf16.gguf
mkdir -p "$models"
[ -f "$M" ] || $B gen --preset 8b --type bf16 -o "$M" >/dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "## $(date -u +%Y-%m-%d)"
echo "### bit-identity"
CLEAVE_TIERS_MODEL=$M build-gpu/tests/gpu/test_gpu_tiers 2>&1 | grep -aE "identical|DIFFERENT|checks|FAIL"
echo "### depth"
for d in 4096 32768 65536 131072; do
  for cells in all $((d / 2)); do
    echo "#### depth $d, --kv-vram-cells $cells"
    $B bench -m "$M" --device cuda:0 -b 4096 -d $d -p 512 -n 128 -r 2 --kv-vram-cells $cells 2>&1 |
      grep -aE '^\| llama|rror'
  done
done
