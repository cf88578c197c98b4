#!/usr/bin/env bash
# Configures and builds cleave into build/ (or $1) with extra CMake args.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" >&2
# which optional parts this build has and which it lacks (and what adds them)
cat "$dir/cleave-features.txt" >&2
