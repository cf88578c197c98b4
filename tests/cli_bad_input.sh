#!/usr/bin/env bash
# The CLI on bad input: every case exits 1 or 2 with a "cleave" message on
# stderr; never a crash (a signal gives an exit code above 128, and the
# sanitizer build reports its findings as failures).
set -u
cli=$1 tmp=$3
mkdir -p "$tmp"
fail=0
"$cli" gen --preset tiny --type f32 -o "$tmp/good.gguf" 2>/dev/null || { echo "FAIL: gen"; exit 1; }

expect_error() { # label, then the command
  local label=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then
    echo "FAIL: $label: exit code $rc"; cat "$tmp/err"; fail=1
  elif ! grep -q "cleave" "$tmp/err"; then
    echo "FAIL: $label: no message"; fail=1
  elif grep -qi "sanitizer\|runtime error" "$tmp/err"; then
    echo "FAIL: $label: sanitizer report"; cat "$tmp/err"; fail=1
  else
    echo "ok: $label: $(head -n 1 "$tmp/err")"
  fi
}

head -c 100 "$tmp/good.gguf" >"$tmp/trunc.gguf"
expect_error "truncated file" "$cli" run -m "$tmp/trunc.gguf" -p hi -n 4
{ printf 'GGUX'; tail -c +5 "$tmp/good.gguf"; } >"$tmp/magic.gguf"
expect_error "wrong magic" "$cli" run -m "$tmp/magic.gguf" -p hi -n 4
{ head -c 4 "$tmp/good.gguf"; printf '\x07\x00\x00\x00'; tail -c +9 "$tmp/good.gguf"; } >"$tmp/ver.gguf"
expect_error "unsupported version" "$cli" run -m "$tmp/ver.gguf" -p hi -n 4
head -c $(( $(stat -c %s "$tmp/good.gguf") - 64 )) "$tmp/good.gguf" >"$tmp/short.gguf"
expect_error "tensor data past end" "$cli" run -m "$tmp/short.gguf" -p hi -n 4
expect_error "missing file" "$cli" run -m "$tmp/nope.gguf" -p hi -n 4
expect_error "not a model" "$cli" info "$0"
long=$(printf 'hello world %.0s' $(seq 1 400))
expect_error "prompt longer than context" "$cli" run -m "$tmp/good.gguf" -c 64 -p "$long" -n 4
expect_error "bad flag value" "$cli" run -m "$tmp/good.gguf" -n many
expect_error "unknown flag" "$cli" run -m "$tmp/good.gguf" --frobnicate
expect_error "unknown command" "$cli" frobnicate
# the server's key from a file: missing, empty, or beside --api-key
: >"$tmp/empty.key"
expect_error "--api-key-file missing" "$cli" serve -m "$tmp/good.gguf" --api-key-file "$tmp/no.key"
expect_error "--api-key-file empty" "$cli" serve -m "$tmp/good.gguf" --api-key-file "$tmp/empty.key"
# empty lists said nothing and exited 2
expect_error "logits --tokens ''" "$cli" logits -m "$tmp/good.gguf" --tokens "" -o "$tmp/l.f32"
expect_error "batched-bench -npl ''" "$cli" batched-bench -m "$tmp/good.gguf" -npl ""
expect_error "batched-bench -npl ','" "$cli" batched-bench -m "$tmp/good.gguf" -npl ","
# a FIFO as the model or the prompt file is refused at once (it waited for a writer)
mkfifo "$tmp/pipe" 2>/dev/null || true
expect_error "a FIFO as the model" timeout 60 "$cli" run -m "$tmp/pipe" -p hi -n 1
expect_error "a FIFO as the prompt file" timeout 60 "$cli" run -m "$tmp/good.gguf" -f "$tmp/pipe" -n 1
expect_error "bad llama2c checkpoint" "$cli" convert --from llama2c "$tmp/good.gguf" "$tmp/good.gguf" -o "$tmp/x.gguf"
expect_error "unknown preset" "$cli" gen --preset 3b -o "$tmp/x.gguf"
expect_error "unknown device" "$cli" run -m "$tmp/good.gguf" -p hi -n 4 --device tpu:0
expect_error "malformed device" "$cli" run -m "$tmp/good.gguf" -p hi -n 4 --device cuda:zero
expect_error "missing CUDA device" "$cli" run -m "$tmp/good.gguf" -p hi -n 4 --device cuda:7

[ $fail -eq 0 ] && echo "cli_bad_input: all checks passed"
exit $fail
