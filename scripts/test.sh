#!/usr/bin/env bash
# The whole test suite: a warnings-as-errors build with every test, then the
# same tests under AddressSanitizer + UndefinedBehaviorSanitizer, then
# libFuzzer on every parser (scripts/fuzz.sh, 30 s each). CUDA
# sources compile when nvcc is present; GPU tests (tests/gpu) run only on a
# GPU machine, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

# Both halves run whatever the first gives, so a failure in one does not
# hide the other's; the script fails if either did.
plain=0
sanitized=0
echo "== build (warnings are errors) =="
if scripts/build.sh build -DCLEAVE_WERROR=ON -DCLEAVE_CUDA=AUTO; then
  echo "== tests =="
  (cd build && ctest --output-on-failure -j "$jobs") || plain=$?
else
  plain=$?
fi

echo "== build with AddressSanitizer + UndefinedBehaviorSanitizer =="
if scripts/build.sh build-asan -DCLEAVE_WERROR=ON -DCLEAVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLEAVE_CUDA=OFF; then
  echo "== tests under sanitizers =="
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs") || sanitized=$?
else
  sanitized=$?
fi

# coverage-guided fuzzing of every parser, CLEAVE_FUZZ_SECONDS (30) each
fuzzed=0
scripts/fuzz.sh || fuzzed=$?

if [ "$plain" -ne 0 ] || [ "$sanitized" -ne 0 ] || [ "$fuzzed" -ne 0 ]; then
  echo "FAILED: tests $([ "$plain" -ne 0 ] && echo "(plain build: $plain) ")$([ "$sanitized" -ne 0 ] && echo "(sanitizer build: $sanitized) ")$([ "$fuzzed" -ne 0 ] && echo "(fuzzing: $fuzzed)")"
  exit 1
fi
echo "== all tests passed, plain and under sanitizers, and the fuzzers found nothing =="
