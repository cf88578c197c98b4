#!/usr/bin/env bash
# The split modes through the command line on virtual CPU devices: the
# greedy story is the same on one device, under the layer split and under
# the tensor split (one device left out), and with the prompt under one
# mode and generation under another (-psm, and --psm-policy auto from
# `cleave calibrate`'s rates); bad split flags exit 2 and plans
# that cannot fit exit 1, each with a message; --mem-report and
# batched-bench print what they promise, and so does the step trace.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
  >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
m=$tmp/stories.gguf
fail=0

one=$("$cli" run -m "$m" -p "Once upon a time" -n 120 --temp 0 -t 1 2>/dev/null)
[ -n "$one" ] || { echo "FAIL: no output on one device"; fail=1; }
for args in "--devices cpu:2 -sm layer" "--devices cpu:3 -sm layer -ts 1,2,1" \
            "--devices cpu:2 -sm layer -b 4 -ub 2" \
            "--devices cpu:2 -sm tensor" "--devices cpu:3 -sm tensor -ts 1,0,2"; do
  got=$("$cli" run -m "$m" -p "Once upon a time" -n 120 --temp 0 -t 1 $args 2>"$tmp/err")
  if [ "$got" != "$one" ]; then echo "FAIL: $args: the story differs"; cat "$tmp/err"; fail=1; fi
done

# -psm: the prompt under one split mode, generation under the other, the
# same story; a switch the budgets cannot hold warns and goes on
for args in "-psm layer -sm tensor" "-psm tensor -sm layer" "-psm none -sm tensor"; do
  got=$("$cli" run -m "$m" -p "Once upon a time" -n 120 --temp 0 -t 1 --devices cpu:2 $args 2>"$tmp/err")
  if [ "$got" != "$one" ]; then echo "FAIL: $args: the story differs"; cat "$tmp/err"; fail=1; fi
  if ! grep -q "switched from" "$tmp/err"; then echo "FAIL: $args: no switch reported"; cat "$tmp/err"; fail=1; fi
done
got=$("$cli" run -m "$m" -p "Once upon a time" -n 120 --temp 0 -t 1 --devices cpu:2 -psm layer -sm tensor \
      --vram-budget 3.0,3.0 --fit off 2>"$tmp/err")
if [ "$got" != "$one" ] || ! grep -q "warning: the switch from layer to tensor split cannot happen" "$tmp/err"; then
  echo "FAIL: a switch past the budgets should warn and finish in layer mode"; cat "$tmp/err"; fail=1
fi

# --psm-policy auto: rates from `cleave calibrate`, a decision printed,
# the same story whatever it decides
"$cli" calibrate -m "$m" --devices cpu:2 -t 1 --pp 16,64 --depths 16,64 -o "$tmp/rates.txt" 2>"$tmp/err"
if [ $? -ne 0 ] || ! head -1 "$tmp/rates.txt" | grep -q "cleave-psm-rates 1" ||
   [ "$(grep -c '^pp \|^tg \|^switch ' "$tmp/rates.txt")" -ne 10 ]; then
  echo "FAIL: calibrate"; cat "$tmp/err" "$tmp/rates.txt"; fail=1
fi
got=$("$cli" run -m "$m" -p "Once upon a time" -n 120 --temp 0 -t 1 --devices cpu:2 --psm-policy auto \
      --psm-rates "$tmp/rates.txt" 2>"$tmp/err")
if [ "$got" != "$one" ] || ! grep -q "psm policy for .* tokens: " "$tmp/err"; then
  echo "FAIL: --psm-policy auto"; cat "$tmp/err"; fail=1
fi

# -np: several sequences in one context, their prompts arriving apart;
# the gate switches only when every active sequence is in one phase, and
# keeps a mode --np-dwell steps; every sequence tells the same story
ref=$("$cli" run -m "$m" -p "Once upon a time" -n 60 --temp 0 -t 1 2>/dev/null)
np_check() { # np_check SWITCHES ARGS...: every sequence's text is ref, SWITCHES switches
  local want=$1; shift
  "$cli" run -m "$m" -p "Once upon a time" -n 60 --temp 0 -t 1 --devices cpu:2 "$@" >"$tmp/np.txt" 2>"$tmp/err"
  local seqs bad
  seqs=$(grep -c '^\[sequence ' "$tmp/np.txt")
  bad=$(awk -v ref="$ref" '/^\[sequence /{if (n) { if (t != ref) b++ } n++; t=""; next}
        {t = t (t == "" && !started[n] ? "" : "\n") $0; started[n]=1}
        END {if (t != ref) b++; print b + 0}' "$tmp/np.txt")
  if [ "$bad" -ne 0 ] || [ "$seqs" -lt 2 ] || [ "$(grep -c 'switched to the' "$tmp/err")" -ne "$want" ]; then
    echo "FAIL: -np $*: $bad of $seqs stories differ, or not $want switches"; cat "$tmp/np.txt" "$tmp/err"; fail=1
  fi
}
np_check 1 -np 3 -psm layer -sm tensor
np_check 1 -np 3 --np-stagger 5 -psm layer -sm tensor   # the later prompts run in tensor, mixed
np_check 3 -np 2 --np-stagger 100 -psm layer -sm tensor # alone again: back to layer, kept 8 steps
if ! grep -q "step 108: switched to the tensor" "$tmp/err"; then
  echo "FAIL: --np-dwell: the switch back to tensor should wait 8 steps"; cat "$tmp/err"; fail=1
fi
np_check 1 -np 2 -psm tensor -sm layer
np_check 0 -np 2 -sm tensor
"$cli" run -m "$m" -p "Once upon a time" -n 300 -c 512 -t 1 -np 2 >/dev/null 2>"$tmp/err"
if [ $? -ne 1 ] || ! grep -q "needs 2 x (.* prompt + 300 generated) cells; the context holds 512" "$tmp/err"; then
  echo "FAIL: -np past the context should say so"; cat "$tmp/err"; fail=1
fi

# bench-psm: one request per plan, and a grid with the policy's choices
out=$("$cli" bench-psm -m "$m" --devices cpu:2 -t 1 -psm layer -sm tensor -p 64 -n 8 2>"$tmp/err")
if ! printf '%s\n' "$out" | grep -qE '^\| layer, then tensor \| 64 \| 8 \| ' || ! grep -q "^switch: " "$tmp/err"; then
  echo "FAIL: bench-psm, one request"; printf '%s\n' "$out"; cat "$tmp/err"; fail=1
fi
out=$("$cli" bench-psm -m "$m" --devices cpu:2 -t 1 --grid-pp 16,64 --grid-tg 4,16 \
      --psm-rates "$tmp/rates.txt" --csv "$tmp/grid.csv" 2>"$tmp/err")
# the policy's choice comes from measured rates, so any plan: one this grid
# timed, or tensor-then-layer, which it times only with --control
rows=$(printf '%s\n' "$out" |
  grep -cE '^\| (16|64) \| (4|16) \| .* \| ((layer|tensor|layer, then tensor) \| [0-9.]+ \| [0-9.]+|\(tensor, then layer: untimed\) \| \|) \|$')
if [ "$rows" -ne 4 ] || [ "$(wc -l < "$tmp/grid.csv")" -ne 13 ]; then
  echo "FAIL: bench-psm grid"; printf '%s\n' "$out"; cat "$tmp/err" "$tmp/grid.csv"; fail=1
fi
# answers shorter than the warm-up's 16 tokens: its context is the longest request's
out=$("$cli" bench-psm -m "$m" --devices cpu:2 -t 1 --grid-pp 32 --grid-tg 4 2>"$tmp/err")
if ! printf '%s\n' "$out" | grep -qE '^\| 32 \| 4 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| - \| \| \|$'; then
  echo "FAIL: bench-psm grid of 4 generated tokens"; printf '%s\n' "$out"; cat "$tmp/err"; fail=1
fi
"$cli" bench-psm -m "$m" --devices cpu:2 --grid-pp 16 >/dev/null 2>"$tmp/err"
if [ $? -ne 1 ] || ! grep -q "needs both --grid-pp and --grid-tg" "$tmp/err"; then
  echo "FAIL: bench-psm should refuse half a grid"; cat "$tmp/err"; fail=1
fi

expect() { # expect CODE PATTERN ARGS...: exit code and a message on stderr
  local code=$1 pat=$2; shift 2
  "$cli" run -m "$m" -p "x" -n 2 "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne "$code" ] || ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL: $* -> exit $rc (want $code), stderr:"; cat "$tmp/err"; fail=1
  fi
}
expect 1 "expected none, layer or tensor" --devices cpu:2 -sm diagonal
# -pts is the prefill phase's shares: it needs -psm with another mode than -sm
expect 1 "-pts" --devices cpu:2 -pts 1,1
expect 1 "-pts" --devices cpu:2 -psm tensor -sm tensor -pts 1,1
expect 1 "numbers >= 0" --devices cpu:2 -sm layer -ts 1,x
expect 1 "3 split shares for 2 devices" --devices cpu:2 -sm tensor -ts 1,1,1
expect 1 "device 0 needs" --devices cpu:2 -sm layer --vram-budget 0.01,0.01 --fit off
expect 1 "nothing fits" --devices cpu:2 -sm layer --vram-budget 0.01,0.01
expect 1 "cpu:N needs N" --devices cpu:0
expect 1 "needs --psm-rates" --devices cpu:2 --psm-policy auto
expect 1 "expected off, always or auto" --devices cpu:2 --psm-policy sometimes
echo "not rates" > "$tmp/bad-rates.txt"
expect 1 "is not a rates file" --devices cpu:2 --psm-policy auto --psm-rates "$tmp/bad-rates.txt"

"$cli" run -m "$m" -p "x" -n 4 --devices cpu:2 -sm layer --mem-report >/dev/null 2>"$tmp/err"
if [ "$(grep -c 'planned .*peak' "$tmp/err")" -ne 2 ]; then
  echo "FAIL: --mem-report should print planned and peak bytes for both devices"; cat "$tmp/err"; fail=1
fi

out=$("$cli" batched-bench -m "$m" -npp 16 -ntg 4 -npl 1,2 -t 1 --devices cpu:2 -sm tensor 2>"$tmp/err")
rows=$(printf '%s\n' "$out" | grep -cE '^\| +16 \| +4 \| +[12] \|')
if [ "$rows" -ne 2 ]; then echo "FAIL: batched-bench rows"; printf '%s\n' "$out"; cat "$tmp/err"; fail=1; fi

# CLEAVE_STEP_TRACE: the passes of each batch size counted (the warm-up's
# two one-token steps and the test's four; four steps of two sequences)
CLEAVE_STEP_TRACE=1 "$cli" batched-bench -m "$m" -npp 16 -ntg 4 -npl 1,2 -t 1 >/dev/null 2>"$tmp/err"
if ! grep -q "^cleave step trace (cpu)" "$tmp/err" || ! grep -qE "^  1  6 \(0\)( +[0-9.]+){4}$" "$tmp/err" ||
   ! grep -qE "^  2  4 \(0\)( +[0-9.]+){4}$" "$tmp/err"; then
  echo "FAIL: CLEAVE_STEP_TRACE table"; cat "$tmp/err"; fail=1
fi

[ $fail -eq 0 ] && echo "cli_split: all checks passed"
exit $fail
