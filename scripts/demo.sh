#!/usr/bin/env bash
# The main job on a fresh machine: build cleave, import the stories260K
# llama2.c model into GGUF and stream a greedy story on the CPU. Without the
# shared models folder it generates a small random model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
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
