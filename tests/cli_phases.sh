#!/usr/bin/env bash
# Each phase its own placement, through the command line on two virtual
# CPU devices: `cleave info` prints both phases' tables, the switch's peak
# and why a switch cannot happen; a run whose switch cannot fit warns when
# the context is made and tells the same story in the prefill mode; -pts
# gives the prefill phase's shares and needs a -psm of another mode; and
# info's numbers are the ones the run plans (--mem-report); the switch's
# copies between the devices, predicted and made, and against a link's
# bandwidth.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" \
  -o "$tmp/stories.gguf" >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
m=$tmp/stories.gguf
fail=0
tight="--vram-budget 3.0,3.0 --fit off -psm layer -sm tensor"

one=$("$cli" run -m "$m" -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu 2>"$tmp/err")
[ -n "$one" ] || { echo "FAIL: no output on one device"; cat "$tmp/err"; fail=1; }

# info: both phases' tables (equal shares, as given: --fit off), a switch past
# the budgets at its fullest point and why, the remedy,
# and the largest context of each plan
"$cli" info "$m" --devices cpu:2 $tight >"$tmp/info.txt" 2>"$tmp/err"
rc=$?
info_bad=""
[ $rc -eq 0 ] || info_bad="$info_bad exit $rc;"
grep -q "^prefill: layer split" "$tmp/info.txt" || info_bad="$info_bad no prefill table;"
grep -q "^generation: tensor split" "$tmp/info.txt" || info_bad="$info_bad no generation table;"
header='^  device \(MiB\) +weights +KV +compute +total +budget +KV host$'
[ "$(grep -cE "$header" "$tmp/info.txt")" -eq 2 ] || info_bad="$info_bad not two table headers;"
for d in 0 1; do
  [ "$(grep -cE "^  cpu:$d( +[0-9.]+){6}$" "$tmp/info.txt")" -eq 2 ] ||
    info_bad="$info_bad cpu:$d rows;"
done
grep -qE "^switch to generation: peak cpu:0 .*-> does not fit$" "$tmp/info.txt" ||
  info_bad="$info_bad no 'does not fit';"
grep -E "^warning: the switch from layer to tensor split cannot happen" "$tmp/info.txt" |
  grep -qE -- "(-c |-ts |--kv-vram-cells)" || info_bad="$info_bad no warning with a remedy;"
grep -q "^largest context" "$tmp/info.txt" || info_bad="$info_bad no largest context;"
for plan in "none" "layer" "tensor" "layer, then tensor"; do
  grep -qE "^  $plan +[0-9]+$" "$tmp/info.txt" || info_bad="$info_bad no largest context, $plan;"
done
if [ -n "$info_bad" ]; then
  echo "FAIL: info, a switch past the budgets:$info_bad"; cat "$tmp/info.txt" "$tmp/err"; fail=1
fi

# run: the same switch warns when the context is made, before the prompt
# is in, does not switch, and the story is the one-device story
got=$("$cli" run -m "$m" -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu:2 $tight 2>"$tmp/err")
rc=$?
early="warning: the switch from layer to tensor split cannot happen.*answers are generated in"
warn=$(grep -n "$early" "$tmp/err" | head -1 | cut -d: -f1)
prompt=$(grep -n "^prompt:" "$tmp/err" | head -1 | cut -d: -f1)
if [ $rc -ne 0 ] || [ -z "$warn" ] || [ -z "$prompt" ] || [ "$warn" -ge "$prompt" ]; then
  echo "FAIL: a switch past the budgets should warn before the prompt (exit $rc, warning at line" \
       "${warn:-none}, prompt at line ${prompt:-none})"; cat "$tmp/err"; fail=1
fi
if grep -q "switched from layer to tensor" "$tmp/err"; then
  echo "FAIL: a switch that cannot fit happened"; cat "$tmp/err"; fail=1
fi
if [ "$got" != "$one" ]; then
  echo "FAIL: $tight: the story differs"; printf '%s\n---\n%s\n' "$one" "$got"; fail=1
fi

# -pts: each phase its own shares, the switch happens, the same story;
# and budgets of 3.6 and 3.0 MiB with -ts 3,1, where a tensor plan that
# charged the host communicator's buffers to the devices and held both
# placements' scratch during the switch refused the switch, and either
# fitted shares, -ts 1,3 made impossible: both now switch
for args in "-psm layer -sm tensor -ts 3,1 -pts 1,3" "-psm tensor -sm layer -pts 3,1 -ts 1,3" \
            "--vram-budget 3.6,3.0 -psm layer -sm tensor -ts 3,1" "--vram-budget 3.6,3.0 -psm layer -sm tensor"; do
  from=${args#*-psm }; from=${from%% *}
  to=${args#*-sm }; to=${to%% *}
  got=$("$cli" run -m "$m" -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu:2 $args 2>"$tmp/err")
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "switched from $from to $to" "$tmp/err"; then
    echo "FAIL: $args: exit $rc or no switch from $from to $to"; cat "$tmp/err"; fail=1
  fi
  if [ "$got" != "$one" ]; then
    echo "FAIL: $args: the story differs"; printf '%s\n---\n%s\n' "$one" "$got"; fail=1
  fi
done

# -pts without a prefill phase of its own: tests/cli_split.sh

# info's totals are what the run plans: the prefill table against the
# first memory report, the generation table against the one after the switch
"$cli" info "$m" --devices cpu:2 -psm layer -sm tensor >"$tmp/info.txt" 2>"$tmp/err" ||
  { echo "FAIL: info without budgets"; cat "$tmp/info.txt" "$tmp/err"; fail=1; }
planned=$(awk '/^prefill:/ {p = "prefill"} /^generation:/ {p = "generation"}
               /^  cpu:[0-9]+ / {print p, $1, $5}' "$tmp/info.txt")
"$cli" run -m "$m" -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu:2 -psm layer -sm tensor \
  --mem-report >/dev/null 2>"$tmp/err"
rc=$?
ran=$(awk '/^cleave: cpu:[0-9]+ +planned / {
             for (i = 1; i < NF; i++) if ($i == "planned") v = $(i + 1)
             p = n++ < 2 ? "prefill" : "generation"; print p, $2, v }' "$tmp/err")
if [ $rc -ne 0 ] || ! grep -q "switched from layer to tensor" "$tmp/err" ||
   [ "$(printf '%s\n' "$planned" | grep -c .)" -ne 4 ] ||
   [ "$(printf '%s\n' "$ran" | grep -c .)" -ne 4 ]; then
  echo "FAIL: info and --mem-report: exit $rc, or not a switch and two reports of two devices"
  printf 'info:\n%s\nrun:\n%s\n' "$planned" "$ran"; cat "$tmp/info.txt" "$tmp/err"; fail=1
else
  off=$(awk 'NR == FNR {want[$1 " " $2] = $3; next}
             {k = $1 " " $2; d = want[k] - $3
              if (!(k in want) || d > 0.1001 || d < -0.1001) print k}' \
        <(printf '%s\n' "$planned") <(printf '%s\n' "$ran"))
  if [ -n "$off" ]; then
    echo "FAIL: info and --mem-report disagree for: $off"
    printf 'info:\n%s\nrun:\n%s\n' "$planned" "$ran"; cat "$tmp/err"; fail=1
  fi
fi

# the switch's copies between the devices: info's (the context full)
# bound the run's (its cells in use) on each device; --link-gbs gives the
# least time; bench-psm's one request sets its switch against it
"$cli" info "$m" --devices cpu:2 -c 64 -psm layer -sm tensor --link-gbs 390 >"$tmp/info.txt" 2>"$tmp/err"
rc=$?
"$cli" run -m "$m" -c 64 -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu:2 -psm layer -sm tensor \
  >/dev/null 2>"$tmp/run.txt"
copies=$(awk '/^switch to generation:/ {getline; print; exit}' "$tmp/info.txt")
over=$(awk -v line="$copies" 'BEGIN {
         n = split(line, f, /[ ,\/;]+/)
         for (i = 1; i < n; i++) if (f[i] ~ /^cpu:[0-9]+$/) { out[f[i]] = f[i + 1]; inn[f[i]] = f[i + 2] } }
       /from and to other devices/ {
         d = $2; sub(/.*devices /, ""); sub(/\).*/, ""); split($0, v, /, /)
         seen++; if (!(d in out) || v[1] > inn[d] + 0.05 || v[2] > out[d] + 0.05 || v[2] <= 0) print d }
       END { if (seen != 2) print "not two devices" }' "$tmp/run.txt")
if [ $rc -ne 0 ] || ! printf '%s' "$copies" | grep -qE "^  copies \(MiB out/in, the context full\): cpu:0 [0-9.]+/[0-9.]+, cpu:1 [0-9.]+/[0-9.]+; at 390 GB/s a link, at least [0-9.]+ ms$" ||
   [ -n "$over" ]; then
  echo "FAIL: the switch's copies: info exit $rc, '$copies', run past it on: ${over:-}"
  cat "$tmp/info.txt" "$tmp/run.txt"; fail=1
fi
"$cli" bench-psm -m "$m" --devices cpu:2 -psm layer -sm tensor -p 16 -n 4 --link-gbs 390 >"$tmp/psm.txt" 2>&1 &&
  grep -qE "^switch [0-9.]+ ms; the busiest device sent or received [0-9.]+ GB from another: at 390 GB/s a link, at least [0-9.]+ ms$" "$tmp/psm.txt" ||
  { echo "FAIL: bench-psm --link-gbs"; cat "$tmp/psm.txt"; fail=1; }
for bad in 0 -5 abc; do
  if "$cli" info "$m" --devices cpu:2 -psm layer -sm tensor --link-gbs "$bad" >/dev/null 2>"$tmp/err" ||
     ! grep -q -- "--link-gbs: '$bad' is not a number" "$tmp/err"; then
    echo "FAIL: --link-gbs $bad was not refused with a message"; cat "$tmp/err"; fail=1
  fi
done

# --psm-policy auto: rates where prefilling under layer and generating
# under tensor is the fastest plan by far; it takes that switch where the
# devices hold it, and a plan without a switch where they cannot
cat >"$tmp/rates.txt" <<'EOF'
cleave-psm-rates 1
pp layer 512 20000
pp tensor 512 10
tg layer 128 100
tg tensor 128 200
switch layer 0.001 0
switch tensor 0.001 0
EOF
for budget in "" "--vram-budget 2.9,2.9"; do
  got=$("$cli" run -m "$m" -p "Once upon" -n 16 -s 1 --temp 0 --devices cpu:2 $budget \
        --psm-policy auto --psm-rates "$tmp/rates.txt" 2>"$tmp/err")
  rc=$?
  chose=$(grep "psm policy for" "$tmp/err")
  if [ -z "$budget" ]; then want="layer, then tensor"; else want="layer (predicted"; fi
  if [ $rc -ne 0 ] || [ "$got" != "$one" ] || ! printf '%s' "$chose" | grep -q ": $want"; then
    echo "FAIL: --psm-policy auto ${budget:-without budgets}: exit $rc, wanted '$want'"
    cat "$tmp/err"; fail=1
  fi
done

[ $fail -eq 0 ] && echo "cli_phases: all checks passed"
exit $fail
