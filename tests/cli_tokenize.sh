#!/usr/bin/env bash
# cleave tokenize on every shared vocabulary (its first llama.cpp case, ids
# on one line), its flags and errors; run --chat's templates and the error
# that names the fallback.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
fail=0
vocab=$shared/vocab
if [ -d "$vocab" ]; then
  for v in "$vocab"/*.gguf; do
    name=$(basename "$v")
    # the first case: the text before the first separator, the first line of ids
    awk 'BEGIN{RS="\n__ggml_vocab_test__\n"} NR==2{printf "%s", $0; exit}' "$v.inp" > "$tmp/case.txt"
    want=$(sed -n 2p "$v.out" | sed 's/^ *//; s/ *$//')
    got=$("$cli" tokenize -m "$v" -f "$tmp/case.txt" --ids --no-special --no-parse-special 2>"$tmp/err")
    if grep -q "no PCRE2" "$tmp/err"; then echo "$name skipped: this build has no PCRE2"; continue; fi
    if [ "$got" != "$want" ]; then echo "FAIL: tokenize $name: '$got' vs '$want'"; cat "$tmp/err"; fail=1; fi
  done
  spm=$vocab/ggml-vocab-llama-spm.gguf
  got=$("$cli" tokenize -m "$spm" -p "Hello <s> world" --ids 2>/dev/null)
  [ "$got" = "1 15043 29871 1 29871 3186" ] || { echo "FAIL: BOS and a parsed <s>: '$got'"; fail=1; }
  got=$("$cli" tokenize -m "$spm" -p "Hello" 2>/dev/null | tail -1)
  case "$got" in *"15043 -> 'Hello'"*) ;; *) echo "FAIL: pieces: '$got'"; fail=1 ;; esac
else
  echo "shared vocabularies absent: their cases skipped"
fi
"$cli" tokenize -p x >/dev/null 2>"$tmp/err"
if [ $? -ne 1 ] || ! grep -q "are required" "$tmp/err"; then echo "FAIL: tokenize without -m"; fail=1; fi
"$cli" tokenize -m "$tmp/none.gguf" -p x >/dev/null 2>"$tmp/err"
if [ $? -ne 1 ] || ! grep -q "loading the vocabulary" "$tmp/err"; then echo "FAIL: tokenize, no file"; cat "$tmp/err"; fail=1; fi

models=$shared/models
if [ -f "$models/stories260K.bin" ]; then
  "$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" >/dev/null 2>&1
  "$cli" run -m "$tmp/stories.gguf" -p "Hi" -n 4 --chat >/dev/null 2>"$tmp/err"
  if [ $? -ne 0 ] || ! grep -q "chat template: chatml (built in; the model has none)" "$tmp/err"; then
    echo "FAIL: --chat without a template should take and name the chatml fallback"; cat "$tmp/err"; fail=1
  fi
  for tpl in chatml llama3 mistral llama2; do
    "$cli" run -m "$tmp/stories.gguf" -p "Hi" -n 4 --temp 0 --chat-template $tpl --system "Be kind" >/dev/null 2>"$tmp/err" ||
      { echo "FAIL: --chat-template $tpl"; cat "$tmp/err"; fail=1; }
    grep -q "chat template: $tpl (built in" "$tmp/err" || { echo "FAIL: --chat-template $tpl not said"; cat "$tmp/err"; fail=1; }
  done
fi

[ $fail -eq 0 ] && echo "cli_tokenize: all checks passed"
exit $fail
