#!/usr/bin/env bash
# The command line's conventions, as llama.cpp users expect them: --help
# on stdout with exit 0 for every subcommand; --version with the commit
# and what is built in; a bad flag answered with a short usage and the
# error as the last line (exit 1); -s (random when omitted, printed, and
# repeatable); -ngl without a GPU running on the CPU; the default threads
# of cpu:N; a context past the model's training context warned about.
set -u
cli=$1 tmp=$3
mkdir -p "$tmp"
fail=0
m=$tmp/tiny.gguf
"$cli" gen --preset tiny -o "$m" 2>/dev/null || { echo "FAIL: gen"; exit 1; }

for c in run chat bench batched-bench bench-psm calibrate gen convert quantize info logits tokenize serve; do
  for h in --help -h; do
    "$cli" $c $h >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ] || ! head -n 1 "$tmp/out" | grep -q "^usage: cleave $c" || [ -s "$tmp/err" ]; then
      echo "FAIL: cleave $c $h: exit $rc, want 0 and the help on stdout alone"; head -n 3 "$tmp/out" "$tmp/err"
      fail=1
    fi
  done
done
for h in --help -h help; do
  "$cli" $h >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: cleave COMMAND" "$tmp/out" ||
    { echo "FAIL: cleave $h"; fail=1; }
done

for v in --version version; do
  "$cli" $v >"$tmp/out" 2>&1 || { echo "FAIL: cleave $v exited $?"; fail=1; }
  grep -qE "^cleave [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{7,}|unknown)\)$" "$tmp/out" &&
    grep -qE "^built with: cpu( |$)" "$tmp/out" ||
    { echo "FAIL: cleave $v: want the version, a commit and the backends"; cat "$tmp/out"; fail=1; }
done

# a bad flag: a short usage, the error last, exit 1
for c in run chat bench batched-bench bench-psm calibrate gen convert quantize info logits tokenize; do
  case $c in gen|convert|quantize|info) model=() ;; *) model=(-m "$m") ;; esac
  "$cli" $c "${model[@]}" --frobnicate >"$tmp/out" 2>"$tmp/err"
  rc=$?
  last=$(tail -n 1 "$tmp/err")
  if [ $rc -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ge 10 ] || [[ "$last" != "cleave $c: "*"'--frobnicate'"* ]] ||
     ! grep -q "^usage: cleave $c " "$tmp/err"; then
    echo "FAIL: cleave $c --frobnicate: exit $rc, stderr:"; cat "$tmp/err"; fail=1
  fi
done
"$cli" run -m "$m" -p hi -n >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && tail -n 1 "$tmp/err" | grep -q -- "^cleave run: -n needs a value" && grep -q "^usage: cleave run" "$tmp/err" ||
  { echo "FAIL: -n without a value"; cat "$tmp/err"; fail=1; }
"$cli" frobnicate >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && tail -n 1 "$tmp/err" | grep -q "unknown command 'frobnicate'" && [ "$(wc -l <"$tmp/err")" -lt 10 ] ||
  { echo "FAIL: unknown command"; cat "$tmp/err"; fail=1; }

# seeds: omitted, a random one printed; -s N repeats; the printed seed repeats its run
gen() { "$cli" run -m "$m" -p "Hello there" -n 24 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 "$@"; }
a=$(gen 2>"$tmp/a.err") || { echo "FAIL: run without -s"; cat "$tmp/a.err"; fail=1; }
seed=$(sed -n 's/^cleave: seed: \([0-9][0-9]*\).*/\1/p' "$tmp/a.err")
if [ -z "$seed" ]; then
  echo "FAIL: no seed printed"; cat "$tmp/a.err"; fail=1
else
  b=$(gen -s "$seed" 2>/dev/null)
  [ "$a" = "$b" ] || { echo "FAIL: the printed seed $seed does not repeat the run"; printf '%s\n%s\n' "$a" "$b"; fail=1; }
  gen -s -1 2>"$tmp/c.err" >/dev/null
  seed2=$(sed -n 's/^cleave: seed: \([0-9][0-9]*\).*/\1/p' "$tmp/c.err")
  [ -n "$seed2" ] && [ "$seed2" != "$seed" ] || { echo "FAIL: -s -1 should draw another seed ($seed, $seed2)"; fail=1; }
fi
x=$(gen -s 42 2>/dev/null); y=$(gen -s 42 2>/dev/null); z=$(gen -s 43 2>/dev/null)
[ -n "$x" ] && [ "$x" = "$y" ] || { echo "FAIL: -s 42 twice differs"; printf '%s\n%s\n' "$x" "$y"; fail=1; }
[ "$x" != "$z" ] || { echo "FAIL: -s 42 and -s 43 gave the same text at temperature 1"; fail=1; }

# -ngl N > 0 without a GPU: a warning, and the CPU's text (a build with
# CUDA on a machine with a GPU would run there: the check is for builds or
# machines without one)
if ! "$cli" --version | grep -q "cuda" || ! nvidia-smi -L >/dev/null 2>&1; then
  cpu=$("$cli" run -m "$m" -p "Hello there" -n 16 --temp 0 2>/dev/null)
  ngl=$("$cli" run -m "$m" -p "Hello there" -n 16 --temp 0 -ngl 5 2>"$tmp/err")
  rc=$?
  [ $rc -eq 0 ] && grep -q "no GPU: running on the CPU" "$tmp/err" && [ "$cpu" = "$ngl" ] ||
    { echo "FAIL: -ngl 5 without a GPU: exit $rc"; cat "$tmp/err"; fail=1; }
fi
"$cli" run -m "$m" -p "Hello there" -n 4 -ngl 0 2>"$tmp/err" >/dev/null && grep -q ", on cpu$" "$tmp/err" ||
  { echo "FAIL: -ngl 0"; cat "$tmp/err"; fail=1; }

# cpu:N without -t: the cores divided among the devices (at least 1 each)
cores=$(getconf _NPROCESSORS_ONLN)
for n in 2 3; do
  want=$((cores / n)); [ $want -lt 1 ] && want=1
  "$cli" run -m "$m" -p "Hello" -n 2 --devices cpu:$n -sm layer 2>"$tmp/err" >/dev/null
  got=$(grep -cE "^cleave: cpu:[0-9] .*, $want threads?$" "$tmp/err")
  [ "$got" -eq $n ] || { echo "FAIL: cpu:$n on $cores cores: want $want threads each"; cat "$tmp/err"; fail=1; }
done
"$cli" run -m "$m" -p "Hello" -n 2 --devices cpu:2 -sm layer -t 3 2>"$tmp/err" >/dev/null
[ "$(grep -cE "^cleave: cpu:[0-9] .*, 3 threads$" "$tmp/err")" -eq 2 ] ||
  { echo "FAIL: -t 3 should give each device 3 threads"; cat "$tmp/err"; fail=1; }

# a context past the training context: a warning naming both
"$cli" run -m "$m" -p "Hello" -n 2 2>"$tmp/err" >/dev/null
train=$(sed -n 's/.*, context \([0-9][0-9]*\), KV.*/\1/p' "$tmp/err")
grep -q "warning: the context" "$tmp/err" && { echo "FAIL: the default context warned"; fail=1; }
if [ -n "$train" ]; then
  big=$((train * 2))
  "$cli" run -m "$m" -p "Hello" -n 2 -c $big 2>"$tmp/err" >/dev/null ||
    { echo "FAIL: -c $big should run"; cat "$tmp/err"; fail=1; }
  grep -q "warning: the context of $big tokens is larger than the model's training context of $train" "$tmp/err" ||
    { echo "FAIL: -c $big over $train: no warning with both"; cat "$tmp/err"; fail=1; }
else
  echo "FAIL: no context size in run's log"; fail=1
fi

[ $fail -eq 0 ] && echo "cli_usage: all checks passed"
exit $fail
