#!/usr/bin/env bash
# Two-GPU benchmark in one run (cuda:0 and cuda:1): build cleave, generate
# the 8B-shape bf16 model, then
#  - cleave bench per split mode (one GPU, layer, tensor) over prompt
#    lengths 512..16384, tg128, and tg128 after 4096 tokens of context;
#    prompts run as 4096-token passes, the layer split pipelines them in
#    512-token micro-batches;
#  - the same with peer access disabled (CLEAVE_NO_P2P=1: hand-offs staged
#    through pinned host memory, the all-reduce through mapped host memory,
#    as on a PCIe box without P2P);
#  - cleave batched-bench -npp 2048 -ntg 128 -npl 1,2,4,8 per mode;
#  - the all-reduce alone (cleave-allreduce), with and without P2P;
#  - the memory report of a run per mode beside nvidia-smi's reading.
# Prints markdown; bench/plot_gpu2.py draws the prompt-length plot from it.
# usage: bench/run_gpu2.sh [MODELS_DIR] [extra cleave bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/cleave-models}
shift || true
export NCCL_NVLS_ENABLE=0
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j "$(nproc)" --target cleave-cli cleave-allreduce >/dev/null
B=build-gpu/cleave
M=$models/llama-8b-bf16.gguf
mkdir -p "$models"
[ -f "$M" ] || $B gen --preset 8b --type bf16 -o "$M" >/dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m | head -3
echo "## $(date -u +%Y-%m-%d)"
D="--devices cuda:0,cuda:1"
PP=512,1024,2048,4096,8192,16384
bench() { $B bench -m "$M" -r 3 -b 4096 "$@" 2>&1 | grep -E '^\| llama|rror'; }
echo "### one GPU"; bench --device cuda:0 -p $PP -n 128 "$@"
bench --device cuda:0 -p 0 -n 128 -d 4096 "$@"
echo "### layer"; bench $D -sm layer -ub 512 -p $PP -n 128 "$@"
bench $D -sm layer -p 0 -n 128 -d 4096 "$@"
echo "### tensor"; bench $D -sm tensor -p $PP -n 128 "$@"
bench $D -sm tensor -p 0 -n 128 -d 4096 "$@"
# no P2P: cleave's copies and all-reduce through host memory, NCCL too
export_nop2p() { CLEAVE_NO_P2P=1 NCCL_P2P_DISABLE=1 "$@"; }
echo "### layer, no P2P"; export_nop2p bench $D -sm layer -ub 512 -p 4096,16384 -n 128 "$@"
echo "### tensor, no P2P"; export_nop2p bench $D -sm tensor -p 4096,16384 -n 128 "$@"
for place in "--device cuda:0" "$D -sm layer -ub 512" "$D -sm tensor"; do
  echo "### batched-bench, $place"
  $B batched-bench -m "$M" $place -npp 2048 -ntg 128 -npl 1,2,4,8 2>&1 | grep -E '^\|  |rror'
done
echo "### all-reduce"
build-gpu/cleave-allreduce 0 1
CLEAVE_NO_P2P=1 NCCL_P2P_DISABLE=1 build-gpu/cleave-allreduce 0 1
echo "#### without NCCL"; CLEAVE_NCCL=0 build-gpu/cleave-allreduce 0 1
echo "#### every sum through NCCL"; CLEAVE_NCCL_MIN_KB=0 build-gpu/cleave-allreduce 0 1
echo "### memory"
for mode in layer tensor; do
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 50 > /tmp/cleave-smi.txt &
  smi=$!
  $B run -m "$M" $D -sm $mode -c 8192 -p "hello" -n 64 --temp 0 --mem-report 2>&1 >/dev/null | grep -E "peak|rror"
  sleep 0.2; kill $smi
  python3 -c "
m = {}
for l in open('/tmp/cleave-smi.txt'):
    i, u = (int(x) for x in l.split(','))
    m[i] = max(m.get(i, 0), u)
print('$mode: nvidia-smi memory.used peak MiB', m)"
done
