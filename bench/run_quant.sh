#!/usr/bin/env bash
# Quantized GGUFs on one GPU, cleave beside llama.cpp on the same files in
# the same run. Two steps, so each fits a 10-minute window:
#   bench/run_quant.sh build LLAMA_SRC [MODELS_DIR]
#       builds cleave and llama.cpp (in parallel), makes the 8B-shape bf16
#       model with `cleave gen` (about 7 minutes on 16 cores);
#   bench/run_quant.sh run [MODELS_DIR]
#       quantizes it with llama-quantize (Q4_K_M, Q6_K, Q4_0) and with
#       `cleave quantize` (Q4_K_M), then runs llama-bench and cleave bench on
#       every file (each tool on the other's file too), and batched decode
#       on Q4_K_M; prints markdown tables (about 8 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1
shift
if [ "$step" = build ]; then
  src=$1
  models=${2:-/tmp/cleave-models}
  llama_log=$(mktemp)
  (cmake -S "$src" -B build-llama -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON \
     -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$llama_log" 2>&1 &&
   cmake --build build-llama -j "$(nproc)" --target llama-bench llama-batched-bench llama-quantize \
     >>"$llama_log" 2>&1) &
  llama=$!
  # shellcheck disable=SC2086 # extra configure flags, word-split on purpose
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release ${CLEAVE_CMAKE_ARGS:-} >/dev/null
  cmake --build build-gpu -j 4 --target cleave-cli >/dev/null
  mkdir -p "$models"
  [ -f "$models/llama-8b-bf16.gguf" ] || build-gpu/cleave gen --preset 8b --type bf16 -o "$models/llama-8b-bf16.gguf"
  wait $llama || { tail -30 "$llama_log"; exit 1; }
  echo "built cleave and llama.cpp"
  exit 0
fi

models=${1:-/tmp/cleave-models}
export LD_LIBRARY_PATH=$PWD/build-llama/bin:${LD_LIBRARY_PATH:-}
L=build-llama/bin
C=build-gpu/cleave
f16=$models/llama-8b-bf16.gguf
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "## $(date -u +%Y-%m-%d)"
for t in Q4_K_M Q6_K Q4_0; do
  [ -f "$models/llama-8b-$t.llama.gguf" ] ||
    /usr/bin/time -f "llama-quantize $t: %e s" $L/llama-quantize "$f16" "$models/llama-8b-$t.llama.gguf" $t \
      "$(nproc)" >/dev/null 2>"$models/q.log" || { tail "$models/q.log"; exit 1; }
  tail -1 "$models/q.log"
done
[ -f "$models/llama-8b-Q4_K_M.cleave.gguf" ] ||
  /usr/bin/time -f "cleave quantize Q4_K_M: %e s" $C quantize "$f16" "$models/llama-8b-Q4_K_M.cleave.gguf" q4_K_M \
    -t "$(nproc)" 2>&1 | tail -3
ls -l "$models"/*.gguf
for f in "$models"/llama-8b-Q4_K_M.llama.gguf "$models"/llama-8b-Q4_K_M.cleave.gguf \
         "$models"/llama-8b-Q6_K.llama.gguf "$models"/llama-8b-Q4_0.llama.gguf; do
  echo "### $(basename "$f")"
  echo "llama.cpp:"
  $L/llama-bench -m "$f" -ngl 99 -fa 1 -p 4096 -n 128 -r 3 -o md 2>&1 | grep -E '^\|' || true
  echo "cleave:"
  $C bench -m "$f" --device cuda:0 -p 4096 -n 128 -r 3 2>&1 | grep -E '^\||rror' || true
done
f=$models/llama-8b-Q4_K_M.llama.gguf
echo "### batched decode, $(basename "$f")"
echo "llama.cpp:"
$L/llama-batched-bench -m "$f" -ngl 99 -fa on -c 21504 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32 2>&1 |
  grep -E '^\|' || true
echo "cleave:"
$C batched-bench -m "$f" --device cuda:0 -c 21504 -npp 512 -ntg 128 -npl 1,8,32 2>&1 | grep -E '^\||rror' || true
