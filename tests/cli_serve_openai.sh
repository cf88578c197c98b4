#!/usr/bin/env bash
# `cleave serve` driven by the official openai Python client
# (tests/server/test_openai.py): the server on a free port with the
# stories260K model converted to GGUF and --chat-template chatml, waited
# for on /health, stopped with SIGINT. Without python3's openai package
# the test fails, saying how to install it: it must not pass by not running.
set -u
cli=$1 shared=$2 tmp=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
if "$cli" serve 2>&1 | grep -q "this build has no server"; then echo "skipped: no server in this build"; exit 77; fi
if ! python3 -c 'import openai' 2>/dev/null; then
  echo "FAIL: python3 with the openai package is needed: pip3 install --break-system-packages openai" \
       "(or run scripts/deps.sh as root)" >&2
  exit 1
fi
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
  >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
rm -f "$tmp/port"
"$cli" serve "$tmp/stories.gguf" -a stories --chat-template chatml --port 0 --port-file "$tmp/port" -t 1 \
  -np 2 -c 512 --quiet 2>"$tmp/serve.err" &
pid=$!
up=0
for _ in $(seq 1 1200); do
  if [ -s "$tmp/port" ] && python3 -c "import sys, urllib.request
sys.exit(urllib.request.urlopen('http://127.0.0.1:%s/health' % sys.argv[1], timeout=5).status != 200)" \
       "$(cat "$tmp/port")" 2>/dev/null; then
    up=1
    break
  fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
if [ $up -ne 1 ]; then echo "FAIL: the server did not start"; cat "$tmp/serve.err"; kill $pid 2>/dev/null; exit 1; fi
python3 "$here/server/test_openai.py" "$(cat "$tmp/port")" stories
rc=$?
kill -INT $pid
wait $pid || { echo "FAIL: the server's exit: $?"; cat "$tmp/serve.err"; rc=1; }
exit $rc
