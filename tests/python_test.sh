#!/usr/bin/env bash
# Runs a test written in Python after checking that python3 and the
# modules it needs are there: by default numpy and the gguf package (the
# independent reference of ggml's formats); with --jinja2 first, Python's
# jinja2 (the reference of chat templates). A missing one fails the test
# with the way to install it: these tests must not pass by not running.
# usage: python_test.sh [--jinja2] SCRIPT.py ARGS...
set -u
if ! command -v python3 >/dev/null 2>&1; then
  echo "FAIL: python3 is missing: apt-get install python3 python3-numpy python3-pip python3-jinja2," \
       "then pip3 install --break-system-packages gguf (or run scripts/deps.sh as root)" >&2
  exit 1
fi
if [ "${1:-}" = "--jinja2" ]; then
  shift
  if ! python3 -c 'import jinja2' 2>/dev/null; then
    echo "FAIL: the python module jinja2 is needed: apt-get install python3-jinja2" \
         "(or run scripts/deps.sh as root)" >&2
    exit 1
  fi
  exec python3 "$@"
fi
if ! python3 -c 'import numpy, gguf' 2>/dev/null; then
  echo "FAIL: the python modules numpy and gguf are needed: apt-get install python3-numpy" \
       "python3-pip, then pip3 install --break-system-packages gguf (or run scripts/deps.sh as root)" >&2
  exit 1
fi
exec python3 "$@"
