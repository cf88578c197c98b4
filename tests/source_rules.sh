#!/usr/bin/env bash
# Rules of the source tree that a compiler does not check:
# - every heap allocation in the library goes through base/mem (mem_alloc,
#   mem_calloc, mem_realloc, mem_strdup), so a failure is an error with a
#   message, never a crash;
# - no file reads the environment but base/options.c (one documented
#   struct of switches);
# - nothing outside src/backend/ looks into a device's tables: calls go
#   through the be_* wrappers and be_has (tests may build a device's
#   tables themselves);
# - user-given paths are opened for reading through base/file (a FIFO or
#   device is refused instead of waited on).
# usage: source_rules.sh SOURCE_DIR
set -uo pipefail
cd "$1"
fail=0
rule() { # what, matches
  if [ -n "$2" ]; then
    echo "FAIL: $1:"
    echo "$2"
    fail=1
  else
    echo "ok: $1"
  fi
}
rule "direct allocator calls in src/ (use base/mem.h)" \
  "$(grep -rnE '\b(malloc|calloc|realloc|strdup|strndup|aligned_alloc|posix_memalign)\s*\(' src \
     --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | grep -v '^src/base/mem\.c:')"
rule "getenv outside src/base/options.c" \
  "$(grep -rn 'getenv\s*(' src --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' |
     grep -v '^src/base/options\.c:')"
rule "device tables read outside src/backend/ (use be_* and be_has)" \
  "$(grep -rn --include='*.c' --include='*.h' --include='*.cu' -e '->ops->' src tools bench | grep -v '^src/backend/')"
rule "files opened for reading outside src/base/file.c (use file_open_read: a FIFO would hang)" \
  "$(grep -rnE 'fopen\s*\([^;]*"r|\bopen\s*\([^;]*O_RDONLY' src tools --include='*.c' |
     grep -v '^src/base/file\.c:' | grep -v '"/proc/')"
exit $fail
