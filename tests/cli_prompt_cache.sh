#!/usr/bin/env bash
# --prompt-cache: a second run of the same prompt processes none of it and
# tells the same story; a longer prompt processes only its new tokens; the
# cache saved under one placement serves another; a corrupt or foreign
# cache is said and not used, the story unchanged; --prompt-cache-ro never
# writes.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
  >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
m=$tmp/stories.gguf
fail=0
pc=$tmp/cache.bin
rm -f "$pc"
run() { "$cli" run -m "$m" -n 80 --temp 0 -t 1 "$@"; }
ref=$(run -p "Once upon a time" 2>/dev/null)
ref_long=$(run -p "Once upon a time there was a cat" 2>/dev/null)

got=$(run -p "Once upon a time" --prompt-cache "$pc" --devices cpu:2 -sm layer 2>"$tmp/err")
if grep -q "no xxhash" "$tmp/err"; then echo "skipped: this build has no sequence states (xxhash)"; exit 77; fi
if [ "$got" != "$ref" ] || [ ! -s "$pc" ]; then echo "FAIL: first run with a cache"; cat "$tmp/err"; fail=1; fi
got=$(run -p "Once upon a time" --prompt-cache "$pc" --devices cpu:3 -sm tensor 2>"$tmp/err")
if [ "$got" != "$ref" ] || ! grep -q "prompt: *0 tokens processed, [0-9]* restored" "$tmp/err"; then
  echo "FAIL: the same prompt again (saved under layer, restored under tensor)"; cat "$tmp/err"; fail=1
fi
before=$(sha256sum < "$pc")
got=$(run -p "Once upon a time there was a cat" --prompt-cache "$pc" --prompt-cache-ro 2>"$tmp/err")
if [ "$got" != "$ref_long" ] || ! grep -qE "prompt: *[1-9][0-9]* tokens processed, [0-9]+ restored" "$tmp/err" ||
   [ "$(sha256sum < "$pc")" != "$before" ]; then
  echo "FAIL: a longer prompt, read-only"; cat "$tmp/err"; fail=1
fi
got=$(run -p "Once upon a time" --prompt-cache "$pc" --kv-vram-cells 0 2>"$tmp/err")
if [ "$got" != "$ref" ] || ! grep -q "restored from the cache" "$tmp/err"; then
  echo "FAIL: restored into a tiered cache"; cat "$tmp/err"; fail=1
fi
# another prompt: not used, then replaced
got=$(run -p "The dog" --prompt-cache "$pc" 2>"$tmp/err")
if [ "$got" != "$(run -p "The dog" 2>/dev/null)" ] || ! grep -q "not used: it holds another prompt" "$tmp/err"; then
  echo "FAIL: another prompt's cache"; cat "$tmp/err"; fail=1
fi
# corrupt: one byte flipped
run -p "Once upon a time" --prompt-cache "$pc" >/dev/null 2>&1
python3 - "$pc" <<'PY' 2>/dev/null || printf '\x55' | dd of="$pc" bs=1 seek=200 conv=notrunc 2>/dev/null
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[200] ^= 0x10
open(p, "wb").write(b)
PY
got=$(run -p "Once upon a time" --prompt-cache "$pc" --prompt-cache-ro 2>"$tmp/err")
if [ "$got" != "$ref" ] || ! grep -q "not used: state: checksum mismatch" "$tmp/err"; then
  echo "FAIL: a corrupt cache"; cat "$tmp/err"; fail=1
fi
# another model's cache
"$cli" gen --preset tiny --arch llama -o "$tmp/other.gguf" >/dev/null 2>&1
"$cli" run -m "$tmp/other.gguf" -p "Once upon a time" -n 4 --temp 0 --prompt-cache "$tmp/other.bin" >/dev/null 2>&1
got=$(run -p "Once upon a time" --prompt-cache "$tmp/other.bin" --prompt-cache-ro 2>"$tmp/err")
if [ "$got" != "$ref" ] || ! grep -q "not used: state: saved from another model" "$tmp/err"; then
  echo "FAIL: another model's cache"; cat "$tmp/err"; fail=1
fi

[ $fail -eq 0 ] && echo "cli_prompt_cache: all checks passed"
exit $fail
