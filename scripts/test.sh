#!/usr/bin/env bash
# The whole test suite: a warnings-as-errors build with every test, then the
# same tests under AddressSanitizer + UndefinedBehaviorSanitizer. CUDA
# sources compile when nvcc is present; GPU tests (tests/gpu) run only on a
# GPU machine, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

echo "== build (warnings are errors) =="
scripts/build.sh build -DCLEAVE_WERROR=ON
echo "== tests =="
(cd build && ctest --output-on-failure -j "$jobs")

echo "== build with AddressSanitizer + UndefinedBehaviorSanitizer =="
scripts/build.sh build-asan -DCLEAVE_WERROR=ON -DCLEAVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLEAVE_CUDA=OFF
echo "== tests under sanitizers =="
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs")
