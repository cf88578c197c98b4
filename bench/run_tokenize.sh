#!/usr/bin/env bash
# Tokenizer speed: 1 MiB of text (each vocabulary's llama.cpp test inputs,
# repeated) through `cleave tokenize` for every shared vocabulary, wall
# clock of the tokenizing (the vocabulary's load excluded), as markdown.
# usage: bench/run_tokenize.sh [SHARED_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${1:-../shared}
scripts/build.sh build >/dev/null 2>&1
echo "| vocabulary | tokenizer | bytes | tokens | ms |"
echo "| --- | --- | ---: | ---: | ---: |"
for v in "$shared"/vocab/*.gguf; do
  python3 -c "
import sys
t = open(sys.argv[1], 'rb').read().replace(b'\n__ggml_vocab_test__\n', b'\n')
n = 1 << 20
open('/tmp/cleave-1mib.txt', 'wb').write((t * (n // len(t) + 1))[:n])" "$v.inp"
  line=$(build/cleave tokenize -m "$v" -f /tmp/cleave-1mib.txt --ids --no-special --no-parse-special 2>&1 >/dev/null |
         grep -o '[0-9]* bytes -> [0-9]* tokens in [0-9.]* ms')
  read -r bytes _ _ tokens _ _ ms _ <<< "$line"
  kind=$(python3 -c "import gguf,sys; r=gguf.GGUFReader(sys.argv[1]); f=r.fields['tokenizer.ggml.model']; print(bytes(f.parts[f.data[0]]).decode())" "$v" 2>/dev/null || echo "?")
  echo "| $(basename "$v" .gguf) | $kind | $bytes | $tokens | $ms |"
done
