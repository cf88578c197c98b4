#!/usr/bin/env bash
# CPU benchmark: cleave bench on stories260K and on generated 1B-shape
# models (f16, q8_0), optionally beside llama.cpp's llama-bench on the same
# files, plus the memory bandwidth that bounds decode.
# usage: bench/run_cpu.sh BUILD_DIR MODELS_DIR [LLAMA_BENCH]
set -euo pipefail
build=$1 models=$2 llama_bench=${3:-}
cd "$(dirname "$0")/.."
mkdir -p "$models"
shared=${CLEAVE_MODELS:-../shared/models}
[ -f "$models/stories260K.gguf" ] ||
  "$build/cleave" convert --from llama2c "$shared/stories260K.bin" "$shared/tok512.bin" -o "$models/stories260K.gguf"
for t in f16 q8_0; do
  [ -f "$models/llama-1b-$t.gguf" ] || "$build/cleave" gen --preset 1b --type $t -o "$models/llama-1b-$t.gguf"
done
cc -O3 -pthread bench/membw.c -o "$build/membw"
threads=$(nproc)
echo "## $(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $threads threads"
"$build/membw" "$threads" 2048
echo
echo '### cleave'
"$build/cleave" bench -m "$models/stories260K.gguf" -p 128,512 -n 128 -r 5 -t "$threads"
for t in f16 q8_0; do
  "$build/cleave" bench -m "$models/llama-1b-$t.gguf" -p 512 -n 128 -r 3 -t "$threads" | tail -n +3
done
if [ -n "$llama_bench" ]; then
  echo
  echo '### llama.cpp (llama-bench, CPU)'
  "$llama_bench" -m "$models/stories260K.gguf" -p 128,512 -n 128 -r 5 -t "$threads"
  for t in f16 q8_0; do
    "$llama_bench" -m "$models/llama-1b-$t.gguf" -p 512 -n 128 -r 3 -t "$threads" | tail -n +3
  done
fi
