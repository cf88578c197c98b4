#!/usr/bin/env bash
# cleave gen --shapes-only: the file a generation writes, with the weights
# a hole of zeros. The same length and `cleave info` as the generated
# file; a preset larger than a test machine's disk (70B bf16, 131 GiB)
# written in no time and previewed on H200-sized budgets over 2, 4 and 8
# devices; the zero weights run; a tensor split's cut per device, and the
# note where a part cuts into fewer units than there are devices.
set -u
cli=$1 tmp=$3
mkdir -p "$tmp"
fail=0

"$cli" gen --preset tiny8 --type q8_0 -o "$tmp/full.gguf" >/dev/null 2>&1 || { echo "FAIL: gen"; exit 1; }
"$cli" gen --preset tiny8 --type q8_0 --shapes-only -o "$tmp/shapes.gguf" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: gen --shapes-only"; cat "$tmp/err"; exit 1; }
full=$(stat -c %s "$tmp/full.gguf") shapes=$(stat -c %s "$tmp/shapes.gguf")
[ "$full" = "$shapes" ] || { echo "FAIL: --shapes-only wrote $shapes bytes, the full file has $full"; fail=1; }
"$cli" info "$tmp/full.gguf" | sed 1d >"$tmp/full.txt"
"$cli" info "$tmp/shapes.gguf" | sed 1d >"$tmp/shapes.txt"
if ! grep -q "blk.7.ffn_down.weight" "$tmp/full.txt" || ! cmp -s "$tmp/full.txt" "$tmp/shapes.txt"; then
  echo "FAIL: info differs between the generated file and its shapes"; diff "$tmp/full.txt" "$tmp/shapes.txt"
  fail=1
fi
# the weights are zeros: the two files differ past the header, the shapes
# file's bytes after it are all zero
python3 - "$tmp/full.gguf" "$tmp/shapes.gguf" <<'PYEOF' || fail=1
import sys
a, b = (open(p, 'rb').read() for p in sys.argv[1:3])
at = next(i for i in range(len(a)) if a[i] != b[i])
if any(b[at:]) or at < 4096:
    print(f"FAIL: the shapes file differs from the generated one at byte {at} and is not zero after it")
    sys.exit(1)
PYEOF
out=$("$cli" run -m "$tmp/shapes.gguf" -p "hello" -n 4 --temp 0 2>"$tmp/err") ||
  { echo "FAIL: a run of zero weights"; cat "$tmp/err"; fail=1; }

# 70B bf16 as a preview: the full length in no time, few blocks on disk
# where the file system keeps holes
big=$tmp/70b.gguf
"$cli" gen --preset 70b --type bf16 --shapes-only -o "$big" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: gen --preset 70b --shapes-only"; cat "$tmp/err"; exit 1; }
size=$(stat -c %s "$big") blocks=$(stat -c %b "$big")
[ "$size" -gt 140000000000 ] || { echo "FAIL: 70B bf16 shapes: $size bytes"; fail=1; }
[ $((blocks * 512)) -lt $((size / 100)) ] ||
  echo "note: this file system gave the hole $((blocks * 512)) bytes of disk"
for n in 2 4 8; do
  budgets=$(printf '143000%.0s,' $(seq "$n")); budgets=${budgets%,}
  "$cli" info "$big" --devices "cpu:$n" --vram-budget "$budgets" -c 8192 -psm layer -sm tensor \
    --link-gbs 390 >"$tmp/info$n.txt" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^switch to generation: peak .* -> fits$" "$tmp/info$n.txt" ||
     ! grep -qE "^  layer, then tensor +8192$" "$tmp/info$n.txt" ||
     [ "$(grep -cE "^  cpu:[0-9]+ +[0-9.]+ " "$tmp/info$n.txt")" -ne $((2 * n)) ]; then
    echo "FAIL: 70B bf16 on $n devices of 143000 MiB: exit $rc"; cat "$tmp/info$n.txt" "$tmp/err"; fail=1
  fi
done
# one device cannot hold it with a context of 8192: none fits less
grep -qE "^  none +[0-9]+$" "$tmp/info2.txt" && [ "$(awk '/^  none / {print $2}' "$tmp/info2.txt")" -lt 8192 ] ||
  { echo "FAIL: one 143000 MiB device should not hold 70B bf16 with 8192 cells"; cat "$tmp/info2.txt"; fail=1; }
rm -f "$big"

# a tensor split's cut per device: tiny8's 8 kv heads and 256 FFN rows over
# two devices, and Qwen3-30B-A3B's 768-row experts in Q4_K's 256-column
# blocks over 8: three devices hold FFN rows, and info says so
"$cli" info "$tmp/shapes.gguf" --devices cpu:2 -sm tensor >"$tmp/cut.txt" 2>&1
grep -q "^  kv heads (of 8, in units of 1): cpu:0 4, cpu:1 4$" "$tmp/cut.txt" &&
  grep -q "^  FFN rows (of 256, in units of 32): cpu:0 128, cpu:1 128$" "$tmp/cut.txt" && ! grep -q "note:" "$tmp/cut.txt" ||
  { echo "FAIL: tiny8's cut over two devices"; cat "$tmp/cut.txt"; fail=1; }
"$cli" gen --preset qwen3-30b-a3b --type Q4_K_M --shapes-only -o "$tmp/moe.gguf" >/dev/null 2>&1 || fail=1
"$cli" info "$tmp/moe.gguf" --devices cpu:8 -sm tensor -c 4096 >"$tmp/cut.txt" 2>&1
grep -q "^  FFN rows (of 768, in units of 256): cpu:0 256, cpu:1 256, cpu:2 256, cpu:3 0," "$tmp/cut.txt" &&
  grep -q "^  note: the FFN cuts into 3 units of 256 rows .* so 5 devices with a share hold no FFN rows" "$tmp/cut.txt" &&
  grep -q "^  note: 4 kv heads in units of 1 leave 4 devices with a share without attention" "$tmp/cut.txt" ||
  { echo "FAIL: Qwen3-30B-A3B's cut over 8 devices"; cat "$tmp/cut.txt"; fail=1; }
rm -f "$tmp/moe.gguf"

[ $fail -eq 0 ] && echo "cli_gen_shapes: all checks passed"
exit $fail
