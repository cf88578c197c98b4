#!/usr/bin/env bash
# Quantized models through the command line on the CPU: stories260K in
# Q4_0 and Q8_0 tells the pinned greedy story on the SIMD path and on the
# plain C path; a generated model with rows of 256 in every K-quant mix
# gives the same greedy tokens on both paths, and for Q4_K_M under the
# layer and tensor splits on 2 and 3 virtual devices, with the prompt under
# one split and generation under the other, and with a tiered KV cache;
# --mem-report shows the tensor split's shares rounded to whole blocks.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
fail=0
greedy() { "$cli" run -m "$1" -p "Once upon a time" -n "$2" --temp 0 -t 1 "${@:3}" 2>"$tmp/err"; }

models=$shared/models
if [ -f "$models/stories260K.bin" ]; then
  "$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
    >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
  # its rows of 64 are no multiple of 256: the Q6_K output falls back per tensor
  want_q4_0="Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she found a big,"
  want_q8_0="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
  for t in Q4_0 Q8_0; do
    "$cli" quantize "$tmp/stories.gguf" "$tmp/stories-$t.gguf" $t >"$tmp/q.txt" 2>&1 ||
      { echo "FAIL: quantize stories $t"; cat "$tmp/q.txt"; fail=1; continue; }
    grep -q "fallback" "$tmp/q.txt" || { echo "FAIL: $t: no fallback reported"; cat "$tmp/q.txt"; fail=1; }
    want=want_${t,,}
    simd=$(greedy "$tmp/stories-$t.gguf" 40)
    plain=$(CLEAVE_NO_SIMD=1 greedy "$tmp/stories-$t.gguf" 40)
    [ "$simd" = "${!want}" ] || { echo "FAIL: stories $t (SIMD): $simd"; fail=1; }
    [ "$plain" = "${!want}" ] || { echo "FAIL: stories $t (C): $plain"; fail=1; }
  done
else
  echo "note: $models absent, stories260K skipped"
fi

"$cli" gen --preset small --type f32 -o "$tmp/small-f32.gguf" >/dev/null 2>&1 || { echo "FAIL: gen"; exit 1; }
for t in Q2_K Q3_K_M Q4_K_S Q4_K_M Q5_K_M Q6_K IQ4_XS; do
  m=$tmp/small-$t.gguf
  "$cli" quantize "$tmp/small-f32.gguf" "$m" $t >"$tmp/q.txt" 2>&1 ||
    { echo "FAIL: quantize small $t"; cat "$tmp/q.txt"; fail=1; continue; }
  if grep -q "fallback type" "$tmp/q.txt" && ! grep -q " 0 with a fallback type" "$tmp/q.txt"; then
    echo "FAIL: $t: rows of 256 should need no fallback"; cat "$tmp/q.txt"; fail=1
  fi
  one=$(greedy "$m" 24)
  [ -n "$one" ] || { echo "FAIL: $t: no output"; cat "$tmp/err"; fail=1; continue; }
  plain=$(CLEAVE_NO_SIMD=1 greedy "$m" 24)
  [ "$plain" = "$one" ] || { echo "FAIL: $t: the C path's tokens differ"; fail=1; }
  [ $t = Q4_K_M ] || continue
  for args in "--devices cpu:2 -sm layer" "--devices cpu:3 -sm layer -ts 1,2,1" "--devices cpu:2 -sm tensor" \
              "--devices cpu:3 -sm tensor -ts 1,1,2" "--devices cpu:2 -psm layer -sm tensor" \
              "--devices cpu:2 -psm tensor -sm layer" "--kv-vram-cells 8" "--devices cpu:2 -sm tensor --kv-vram-cells 8"; do
    got=$(greedy "$m" 24 $args)
    [ "$got" = "$one" ] || { echo "FAIL: $t $args: the tokens differ"; cat "$tmp/err"; fail=1; }
  done
  # the tensor split's shares are rounded to whole blocks of o (2 kv heads
  # of 128 columns) and of down (256 rows), and --mem-report says so
  greedy "$m" 4 --devices cpu:3 -sm tensor -ts 1,1,2 --mem-report >/dev/null
  grep -q "kv heads 0-2, FFN rows 256-512 (shares rounded to 2 kv heads and 256 rows)" "$tmp/err" ||
    { echo "FAIL: $t: the rounded tensor split is not reported"; cat "$tmp/err"; fail=1; }
done
[ $fail = 0 ] && echo "quantized models: same tokens on every path, split and tier"
exit $fail
