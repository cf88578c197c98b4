#!/usr/bin/env bash
# End to end on a real trained model: import stories260K from llama2.c's
# format, generate 200 tokens greedily from BOS alone, and compare with the
# reference text from llama2.c's own test suite. Also checks that a GGUF
# written by llama.cpp's converter loads and generates.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi

fail=0
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
  || { echo "FAIL: convert"; exit 1; }

expected='Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily'"'"'s mom said, "Lily, let'"'"'s go to the park." Lily was sad and didn'"'"'t know what to do. She said, "I want to play with your ball, but I can'"'"'t find it."
Lily was sad and didn'"'"'t know what to do. She said, "I'"'"'m sorry, Lily. I didn'"'"'t know what to do."
Lily didn'"'"'t want to help her mom, so she'

for t in 1 2; do
  got=$("$cli" run -m "$tmp/stories.gguf" -p "" -n 200 --temp 0 -t $t 2>"$tmp/run.err")
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: run exited $rc"; cat "$tmp/run.err"; fail=1; continue; fi
  if [ "$got" != "$expected" ]; then
    echo "FAIL: threads=$t: output differs from llama2.c's reference"
    diff <(printf '%s\n' "$expected") <(printf '%s\n' "$got")
    fail=1
  fi
done
# f32 KV cache must give the same greedy text on this model
got=$("$cli" run -m "$tmp/stories.gguf" -p "" -n 200 --temp 0 -ctk f32 2>/dev/null)
[ "$got" = "$expected" ] || { echo "FAIL: f32 KV cache output differs"; fail=1; }

# A prompt is echoed, then continued
got=$("$cli" run -m "$tmp/stories.gguf" -p "Once upon a time" -n 20 --temp 0 2>/dev/null)
case "$got" in "Once upon a time, there was a little girl"*) ;; *) echo "FAIL: prompt run: $got"; fail=1;; esac

# Sampling with a seed is reproducible
a=$("$cli" run -m "$tmp/stories.gguf" -p "Lily" -n 40 --temp 0.9 --seed 7 2>/dev/null)
b=$("$cli" run -m "$tmp/stories.gguf" -p "Lily" -n 40 --temp 0.9 --seed 7 2>/dev/null)
[ "$a" = "$b" ] || { echo "FAIL: same seed, different text"; fail=1; }

tiny=$models/llama-2-tiny-random.gguf
if [ -f "$tiny" ]; then
  "$cli" run -m "$tiny" -p "Hello world" -n 16 --temp 0 >"$tmp/tiny.out" 2>"$tmp/tiny.err" \
    || { echo "FAIL: llama-2-tiny-random.gguf"; cat "$tmp/tiny.err"; fail=1; }
  "$cli" info "$tiny" >/dev/null || { echo "FAIL: info on llama-2-tiny-random.gguf"; fail=1; }
fi
"$cli" bench -m "$tmp/stories.gguf" -p 64 -n 16 -d 0,32 -r 1 >"$tmp/bench.md" || { echo "FAIL: bench"; fail=1; }
grep -q '| pp64 |' "$tmp/bench.md" && grep -q '| tg16 |' "$tmp/bench.md" &&
  grep -q '| tg16 @ d32 |' "$tmp/bench.md" || { echo "FAIL: bench table"; cat "$tmp/bench.md"; fail=1; }

[ $fail -eq 0 ] && echo "cli_stories: all checks passed"
exit $fail
