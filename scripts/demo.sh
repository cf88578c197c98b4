#!/usr/bin/env bash
# The main job on a fresh machine: build cleave, import the stories260K
# llama2.c model into GGUF and stream a greedy story on the CPU. Without the
# shared models folder it generates a small random model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# the CUDA backend only where a GPU is: compiling its sources takes minutes
# on a small machine (the tests, scripts/test.sh, still compile them)
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
scripts/build.sh build -DCLEAVE_CUDA=$cuda
models=${CLEAVE_MODELS:-../shared/models}
mkdir -p build/models
if [ -f "$models/stories260K.bin" ] && [ -f "$models/tok512.bin" ]; then
  build/cleave convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" \
    -o build/models/stories260K.gguf
  build/cleave run -m build/models/stories260K.gguf -p "Once upon a time" -n 200 --temp 0
else
  echo "cleave: $models/stories260K.bin not found; running a generated random model instead" >&2
  build/cleave gen --preset tiny --type f32 -o build/models/tiny.gguf
  build/cleave run -m build/models/tiny.gguf -p "hello" -n 64 --temp 0
fi
