#!/usr/bin/env bash
# Tiered KV cache benchmark: build cleave, generate the 8B-shape bf16 model,
# then at context depths of 4k, 32k, 64k and 128k tokens on one GPU
# (cuda:0), prefill (pp512 and pp4096 after the depth) and decode (tg128
# after the depth) with the whole cache in device memory and with half of
# it in host memory (--kv-vram-cells = depth / 2); the same at 64k under a
# tensor split over two GPUs when there are two; the GPU test of
# bit-identity at 4k, 20k and 40k tokens (f16 and q8_0 caches); and the
# largest context for the 8B and 70B shapes (q8_0 weights) on one GPU, in
# one tier and tiered. Prints markdown; bench/plot_tiers.py draws it.
# usage: bench/run_tiers.sh [MODELS_DIR]   (the 70B file needs ~75 GB)
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
bench() { # devices-args label depth cells reps
  local devs=$1 label=$2 d=$3 cells=$4 reps=$5
  echo "#### ${label}depth $d, --kv-vram-cells $cells"
  $B bench -m "$M" $devs -b 4096 -d "$d" -p 512,4096 -n 128 -r "$reps" --kv-vram-cells "$cells" 2>&1 |
    grep -aE '^\| |rror'
}
for d in 4096 32768 65536 131072; do
  reps=2
  [ "$d" -gt 32768 ] && reps=1
  for cells in all $((d / 2)); do bench "--device cuda:0" "" $d $cells $reps; done
done
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for cells in all 32768; do bench "--devices cuda:0,cuda:1 -sm tensor" "2x tensor " 65536 $cells 1; done
fi
echo "### bit-identity"
CLEAVE_TIERS_MODEL=$M build-gpu/tests/gpu/test_gpu_tiers 2>&1 | grep -aE "identical|DIFFERENT|same|checks|FAIL"
echo "### largest context"
for p in 8b 70b; do
  Q=$models/llama-$p-q8_0.gguf
  [ -f "$Q" ] || $B gen --preset $p --type q8_0 -o "$Q" >/dev/null 2>&1
  for tier in "" "--kv-vram-cells auto"; do
    echo "#### $p q8_0 $tier"
    $B run -m "$Q" --device cuda:0 -c 8000000 -p "Once upon a time" -n 16 --temp 0 --mem-report $tier 2>&1 |
      grep -aE 'context|tiers|planned|prompt:|generation:|rror'
  done
done
