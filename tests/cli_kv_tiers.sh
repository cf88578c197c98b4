#!/usr/bin/env bash
# The tiered KV cache (--kv-vram-cells) on virtual CPU devices: with the
# first N cells of every layer in "device" memory and the rest in "host"
# memory, read through the staging buffer, the 256 greedy tokens are the
# same bytes as with the cache in one tier (sha256), for N = 0, 1, below,
# at and above the prompt's length and n_ctx - 1, under the split modes
# (the layer split also as a pipeline of micro-batches),
# through a split-mode switch, with a q8_0 cache whose rows straddle the
# tiers' boundary, and with N chosen to fit a budget (auto); a host part
# over the host memory allowed is refused, or fit shrinks the context.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
fail=0
sha() { sha256sum | cut -d' ' -f1; }
prompt="$tmp/prompt.txt"
for i in $(seq 12); do printf 'Once upon a time there was a little dog named Max who liked to run. '; done > "$prompt"

if [ -f "$models/stories260K.bin" ]; then
  "$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
    >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
  m=$tmp/stories.gguf
  ref=$("$cli" run -m "$m" -f "$prompt" -n 256 --temp 0 -t 1 -c 512 2>/dev/null | sha)
  n_prompt=$("$cli" run -m "$m" -f "$prompt" -n 1 --temp 0 -t 1 -c 512 2>&1 >/dev/null | sed -n 's/^prompt: *\([0-9]*\) tokens.*/\1/p')
  [ -n "$n_prompt" ] || { echo "FAIL: no prompt length"; exit 1; }
  for args in "" "--devices cpu:2 -sm layer" "--devices cpu:2 -sm layer -ub 32" "--devices cpu:2 -sm tensor" \
              "--devices cpu:3 -sm tensor -ts 1,0,2" "--devices cpu:2 -psm layer -sm tensor" \
              "--devices cpu:2 -psm tensor -sm layer"; do
    for n in 0 1 128 "$n_prompt" 400 511; do
      got=$("$cli" run -m "$m" -f "$prompt" -n 256 --temp 0 -t 1 -c 512 --kv-vram-cells "$n" $args 2>"$tmp/err" | sha)
      if [ "$got" != "$ref" ] || ! grep -q "KV cache in two tiers" "$tmp/err"; then
        echo "FAIL: --kv-vram-cells $n $args: not the one-tier story, or no tiers reported"; cat "$tmp/err"; fail=1
      fi
    done
  done
  # the most that fits a budget: tiers, the same story
  got=$("$cli" run -m "$m" -f "$prompt" -n 256 --temp 0 -t 1 -c 16384 --kv-vram-cells auto --vram-budget 8 --fit off 2>"$tmp/err" | sha)
  ref16=$("$cli" run -m "$m" -f "$prompt" -n 256 --temp 0 -t 1 -c 16384 2>/dev/null | sha)
  if [ "$got" != "$ref16" ] || ! grep -q "of 16384 cells of each layer in device memory (asked auto" "$tmp/err"; then
    echo "FAIL: --kv-vram-cells auto"; cat "$tmp/err"; fail=1
  fi
  # all of it fits: one tier, nothing said
  "$cli" run -m "$m" -f "$prompt" -n 8 --temp 0 -t 1 -c 512 --kv-vram-cells auto --vram-budget 64 --fit off >/dev/null 2>"$tmp/err"
  if grep -q "two tiers" "$tmp/err"; then echo "FAIL: auto tiered a cache that fits"; cat "$tmp/err"; fail=1; fi
else
  echo "stories260K absent: its cases skipped"
fi

# a q8_0 cache: 68-byte rows, so the page-sized head ends inside a row
"$cli" gen --preset tiny --arch qwen3 -o "$tmp/qwen3.gguf" >/dev/null 2>&1 || { echo "FAIL: gen"; exit 1; }
q=$tmp/qwen3.gguf
ref=$("$cli" run -m "$q" -p "hello world" -n 256 --temp 0 -t 1 -c 512 -ctk q8_0 2>/dev/null | sha)
for args in "" "--devices cpu:2 -sm tensor" "--devices cpu:2 -psm layer -sm tensor"; do
  for n in 0 70 300; do
    got=$("$cli" run -m "$q" -p "hello world" -n 256 --temp 0 -t 1 -c 512 -ctk q8_0 --kv-vram-cells "$n" $args 2>"$tmp/err" | sha)
    if [ "$got" != "$ref" ]; then echo "FAIL: q8_0 --kv-vram-cells $n $args"; cat "$tmp/err"; fail=1; fi
  done
done

# mixtures of experts (routing, experts; gpt-oss's window of 8 and sinks):
# the same bytes with the cache in two tiers, under the splits and a switch
for arch in qwen3moe gpt-oss; do
  "$cli" gen --preset tiny --arch $arch -o "$tmp/$arch.gguf" >/dev/null 2>&1 || { echo "FAIL: gen $arch"; exit 1; }
  e=$tmp/$arch.gguf
  ref=$("$cli" run -m "$e" -p "hello world" -n 200 --temp 0 -t 1 -c 512 2>/dev/null | sha)
  for args in "" "--devices cpu:2 -sm tensor" "--devices cpu:2 -psm layer -sm tensor"; do
    for n in 0 70; do
      got=$("$cli" run -m "$e" -p "hello world" -n 200 --temp 0 -t 1 -c 512 --kv-vram-cells "$n" $args 2>"$tmp/err" | sha)
      if [ "$got" != "$ref" ]; then echo "FAIL: $arch --kv-vram-cells $n $args"; cat "$tmp/err"; fail=1; fi
    done
  done
done

# bench at a depth, tiered: a row per test and depth, each run starting
# from the same filled cache
out=$("$cli" bench -m "$q" -p 16 -n 4 -d 0,100 -r 2 -t 1 --kv-vram-cells 0 2>"$tmp/err")
rows=$(printf '%s\n' "$out" | grep -cE '^\| .* \| (pp16|tg4)( @ d100)? \| [0-9.]+ ± ')
if [ "$rows" -ne 4 ] || ! printf '%s\n' "$out" | grep -q 'tg4 @ d100'; then
  echo "FAIL: bench -d 0,100 tiered"; printf '%s\n' "$out"; cat "$tmp/err"; fail=1
fi

# a host part larger than the host memory allowed: refused up front with
# what it needs, or (--fit) a context that fits
CLEAVE_HOST_BUDGET_MIB=1 "$cli" run -m "$q" -p "x" -n 2 -c 65536 --kv-vram-cells 0 --fit off >/dev/null 2>"$tmp/err"
if [ $? -ne 1 ] || ! grep -q "host part needs .* MiB of pinned host memory but 1.0 MiB" "$tmp/err"; then
  echo "FAIL: a host part over the host budget should be refused"; cat "$tmp/err"; fail=1
fi
CLEAVE_HOST_BUDGET_MIB=1 "$cli" run -m "$q" -p "x" -n 2 -c 65536 --kv-vram-cells 0 --mem-report >/dev/null 2>"$tmp/err"
if [ $? -ne 0 ] || grep -q "65536 cells" "$tmp/err"; then
  echo "FAIL: --fit should shrink the context to the host budget"; cat "$tmp/err"; fail=1
fi

# bad values
for v in -3 x; do
  "$cli" run -m "$q" -p "x" -n 2 --kv-vram-cells "$v" >/dev/null 2>"$tmp/err"
  if [ $? -ne 1 ] || ! grep -q "kv-vram-cells" "$tmp/err"; then
    echo "FAIL: --kv-vram-cells $v should be refused"; cat "$tmp/err"; fail=1
  fi
done

[ $fail -eq 0 ] && echo "cli_kv_tiers: all checks passed"
exit $fail
