#!/usr/bin/env bash
# Many sequences and long contexts, 8B bf16 on one GPU, cleave beside
# llama.cpp in the same run (bench/RESULTS.md, "Many sequences and long
# contexts"). Build both first with `bench/run_quant.sh build LLAMA_SRC`
# (it also makes the 8B bf16 file), then:
#   bench/run_batched.sh [MODELS_DIR]
# prints batched decode of 1, 8, 16 and 32 sequences and pp512 / tg128 at a
# depth of 32768 for both tools, then cleave with q/k/v and gate/up placed
# apart (CLEAVE_NO_JOIN=1), its decode attention switched
# to the 16-byte vector kernel (CLEAVE_DECODE_ATTN=vec) and its sampling kept on
# the host (CLEAVE_HOST_SAMPLING=1, for cleave run) to compare; the
# correctness checks of the same kernels first (about 4 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/cleave-models}
export LD_LIBRARY_PATH=$PWD/build-llama/bin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
L=build-llama/bin
C=build-gpu/cleave
f=$models/llama-8b-bf16.gguf
cmake --build build-gpu -j 4 --target test_backend_ops test_decode_sample >/dev/null
build-gpu/tests/test_backend_ops --device cuda:0 --filter attention,sample | tail -1
build-gpu/tests/test_decode_sample --device cuda:0 | tail -1
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bb="-c 21504 -npp 512 -ntg 128 -npl 1,8,16,32"
echo "## cleave batched-bench $bb"
$C batched-bench -m "$f" --device cuda:0 $bb 2>&1 | grep -E '^\|'
echo "## llama-batched-bench $bb"
$L/llama-batched-bench -m "$f" -ngl 99 -fa on -b 2048 -ub 512 $bb 2>&1 | grep -E '^\|'
echo "## cleave bench -p 512 -n 128 -d 32768"
$C bench -m "$f" --device cuda:0 -p 512 -n 128 -d 32768 -b 4096 -r 2 2>&1 | grep -E '^\|'
echo "## llama-bench -p 512 -n 128 -d 32768"
$L/llama-bench -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -d 32768 -r 2 -o md 2>&1 | grep -E '^\|'
echo "## cleave, CLEAVE_NO_JOIN=1"
CLEAVE_NO_JOIN=1 $C batched-bench -m "$f" --device cuda:0 $bb 2>&1 | grep -E '^\|  *512'
echo "## cleave, CLEAVE_DECODE_ATTN=vec"
CLEAVE_DECODE_ATTN=vec $C batched-bench -m "$f" --device cuda:0 $bb 2>&1 | grep -E '^\|  *512'
CLEAVE_DECODE_ATTN=vec $C bench -m "$f" --device cuda:0 -p 0 -n 128 -d 32768 -b 4096 -r 2 2>&1 | grep -E '^\| llama'
echo "## cleave run, 128 tokens at the default sampling, device and host draws"
for host in 0 1; do
  CLEAVE_HOST_SAMPLING=$host $C run -m "$f" --device cuda:0 -p "Once upon a time" -n 128 --seed 1 2>&1 >/dev/null |
    grep -E 'generation:' | sed "s/^/CLEAVE_HOST_SAMPLING=$host /"
done
echo "## cleave serve -np 32, bench/serve_load.py -c 1,32 -p 512 -g 128 -r 2"
$C serve -m "$f" --device cuda:0 -np 32 -c 32768 -b 2048 --port 8080 >/dev/null 2>&1 &
sp=$!
for _ in $(seq 60); do
  sleep 2
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health')" 2>/dev/null && break
done
python3 bench/serve_load.py --url http://127.0.0.1:8080 -c 1,32 -p 512 -g 128 -r 2 --temp 0
kill $sp; wait $sp || true
