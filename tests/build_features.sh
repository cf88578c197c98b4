#!/usr/bin/env bash
# A build says which optional parts it has and which it lacks
# (build/cleave-features.txt, printed by scripts/build.sh after building):
# a CUDA-less configure lists the CUDA backend as left out, every part
# once, each in one of the two lines.
# usage: build_features.sh SOURCE_DIR TMP_DIR
set -uo pipefail
src=$1 tmp=$2/build_features
rm -rf "$tmp"
if ! cmake -S "$src" -B "$tmp" -DCLEAVE_CUDA=OFF >"$tmp.log" 2>&1; then
  echo "FAIL: configure"; cat "$tmp.log"; exit 1
fi
f=$tmp/cleave-features.txt
fail=0
[ -f "$f" ] || { echo "FAIL: no $f"; exit 1; }
cat "$f"
grep -q '^cleave: built without: .*CUDA backend (asked off: CLEAVE_CUDA=OFF)' "$f" ||
  { echo "FAIL: the CUDA backend is not listed as left out"; fail=1; }
for part in "Hugging Face import" "BPE tokenizers" "sequence states" "cleave serve"; do
  n=$(grep -o "$part" "$f" | wc -l)
  [ "$n" -eq 1 ] || { echo "FAIL: '$part' listed $n times"; fail=1; }
done
rm -rf "$tmp" "$tmp.log"
[ $fail -eq 0 ] && echo "build_features: all checks passed"
exit $fail
