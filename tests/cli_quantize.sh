#!/usr/bin/env bash
# cleave quantize end to end: every file type from f32/f16/bf16 (and q8_0)
# models, checked with the gguf package (tests/quant_model_check.py: types
# by llama.cpp's rules, metadata, alignment, values within bounds), the
# per-tensor fallback notes, gen --type with mixtures, and bad input
# (clear message, exit 1 or 2, no file left behind).
set -u
cli=$1 shared=$2 tmp=$3
here=$(dirname "$0")
mkdir -p "$tmp"
rm -f "$tmp"/*.gguf "$tmp"/*.tmp
fail=0
check() { # OUT MIX [args for the checker]
  if ! bash "$here/python_test.sh" "$here/quant_model_check.py" "$@"; then fail=1; fi
}
quantize() { # IN OUT TYPE [flags]
  if ! "$cli" quantize "$@" -t 2 2>"$tmp/err"; then
    echo "FAIL: quantize $*"; cat "$tmp/err"; fail=1; return 1
  fi
}

"$cli" gen --preset small --type f32 -o "$tmp/small-f32.gguf" 2>/dev/null || { echo "FAIL: gen"; exit 1; }
for mix in Q4_K_M Q5_K_M Q4_K_S Q5_K_S Q3_K_S Q3_K_M Q3_K_L Q2_K Q6_K Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS F16 BF16; do
  quantize "$tmp/small-f32.gguf" "$tmp/small-$mix.gguf" "$mix" && check "$tmp/small-$mix.gguf" "$mix" --src "$tmp/small-f32.gguf"
done
quantize "$tmp/small-f32.gguf" "$tmp/small-pure.gguf" q4_k --pure && check "$tmp/small-pure.gguf" Q4_K_M --pure --src "$tmp/small-f32.gguf"
grep -q "bits per weight" "$tmp/err" || { echo "FAIL: no summary"; fail=1; }

# f16 and bf16 sources; rows of 64 weights: the K types fall back, and say so
for src in f16 bf16; do
  "$cli" gen --preset tiny --type $src -o "$tmp/tiny-$src.gguf" 2>/dev/null || { echo "FAIL: gen $src"; fail=1; }
  quantize "$tmp/tiny-$src.gguf" "$tmp/tiny-$src-q4km.gguf" Q4_K_M && check "$tmp/tiny-$src-q4km.gguf" Q4_K_M --src "$tmp/tiny-$src.gguf"
done
grep -q "not whole q4_K blocks: using q5_0" "$tmp/err" || { echo "FAIL: no fallback note"; cat "$tmp/err"; fail=1; }

# q8_0 is requantized with a warning
"$cli" gen --preset small --type q8_0 -o "$tmp/small-q8.gguf" 2>/dev/null
quantize "$tmp/small-q8.gguf" "$tmp/small-q8-q4km.gguf" Q4_K_M && check "$tmp/small-q8-q4km.gguf" Q4_K_M --src "$tmp/small-q8.gguf"
grep -q "requantizing them loses precision" "$tmp/err" || { echo "FAIL: no q8_0 warning"; fail=1; }

# a downloaded-style model, when the shared data has it
if [ -f "$shared/models/llama-2-tiny-random.gguf" ]; then
  quantize "$shared/models/llama-2-tiny-random.gguf" "$tmp/l2.gguf" Q4_K_M && check "$tmp/l2.gguf" Q4_K_M --src "$shared/models/llama-2-tiny-random.gguf"
fi

# gen --type with mixtures and plain types
for t in Q4_K_M Q3_K_L Q5_K_S; do
  "$cli" gen --preset small --type $t -o "$tmp/gen-$t.gguf" 2>/dev/null || { echo "FAIL: gen --type $t"; fail=1; }
  check "$tmp/gen-$t.gguf" $t
done
# a plain type name is that type for every matrix
"$cli" gen --preset small --type q5_K -o "$tmp/gen-q5k.gguf" 2>/dev/null && check "$tmp/gen-q5k.gguf" Q5_K_M --pure
"$cli" gen --preset small --type iq4_xs -o "$tmp/gen-iq4xs.gguf" 2>/dev/null && check "$tmp/gen-iq4xs.gguf" IQ4_XS --pure

expect_error() { # label, output that must not exist, then the command
  local label=$1 out=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then
    echo "FAIL: $label: exit code $rc"; cat "$tmp/err"; fail=1
  elif ! grep -q "cleave" "$tmp/err"; then
    echo "FAIL: $label: no message"; fail=1
  elif [ -e "$out" ] || [ -e "$out.tmp" ]; then
    echo "FAIL: $label: left $out behind"; fail=1
  else
    echo "ok: $label: $(head -n 1 "$tmp/err")"
  fi
}
expect_error "missing input" "$tmp/x.gguf" "$cli" quantize "$tmp/nope.gguf" "$tmp/x.gguf" Q4_K_M
expect_error "unknown type" "$tmp/x.gguf" "$cli" quantize "$tmp/small-f32.gguf" "$tmp/x.gguf" Q4_K_X
expect_error "output not writable" "$tmp/no/such/dir/x.gguf" "$cli" quantize "$tmp/small-f32.gguf" "$tmp/no/such/dir/x.gguf" Q4_0
expect_error "quantized input" "$tmp/x.gguf" "$cli" quantize "$tmp/small-Q4_0.gguf" "$tmp/x.gguf" Q4_K_M
expect_error "not a model" "$tmp/x.gguf" "$cli" quantize "$0" "$tmp/x.gguf" Q4_K_M
expect_error "missing arguments" "$tmp/x.gguf" "$cli" quantize "$tmp/small-f32.gguf"
expect_error "bad thread count" "$tmp/x.gguf" "$cli" quantize "$tmp/small-f32.gguf" "$tmp/x.gguf" Q4_0 -t zero
expect_error "gen unknown type" "$tmp/x.gguf" "$cli" gen --preset tiny --type q9_K -o "$tmp/x.gguf"

[ $fail -eq 0 ] && echo "cli_quantize: all checks passed"
exit $fail
