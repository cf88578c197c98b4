#!/usr/bin/env bash
# `cleave serve` as a process: its key read from --api-key-file, the port
# from --port-file; answers over HTTP (Python's http.client), the key
# required but not on /health, a foreign Host refused, a prompt's BOS as
# the vocabulary says (the answer equals `cleave run`'s greedy text), and
# SIGINT ends it cleanly.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
if "$cli" serve 2>&1 | grep -q "this build has no server"; then echo "skipped: no server in this build"; exit 77; fi
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" \
  >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
m=$tmp/stories.gguf
ref=$("$cli" run -m "$m" -p "Once upon a time" -n 12 --temp 0 -t 1 2>/dev/null)
printf 'sesame\nnot this line\n' >"$tmp/key"
rm -f "$tmp/port"
"$cli" serve -m "$m" --port 0 --port-file "$tmp/port" --api-key-file "$tmp/key" -t 1 -c 512 --quiet \
  2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 1 1200); do [ -s "$tmp/port" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$tmp/port" ]; then echo "FAIL: the server did not start"; cat "$tmp/serve.err"; kill $pid 2>/dev/null; exit 1; fi
fail=0
REF="$ref" python3 - "$(cat "$tmp/port")" <<'PY' || fail=1
import http.client, json, os, sys
port = int(sys.argv[1])
def req(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read().decode()
bad = []
s, _ = req("GET", "/health")
if s != 200: bad.append("health without a key: %d" % s)
s, _ = req("GET", "/v1/models")
if s != 401: bad.append("models without the key: %d" % s)
s, _ = req("GET", "/v1/models", headers={"Authorization": "Bearer not this line"})
if s != 401: bad.append("the key file's second line taken as the key: %d" % s)
key = {"Authorization": "Bearer sesame", "Content-Type": "application/json"}
s, b = req("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}, key)
text = json.loads(b)["choices"][0]["text"] if s == 200 else None
if s != 200 or "Once upon a time" + text != os.environ["REF"]:
    bad.append("the answer: %d %r against run's %r" % (s, text, os.environ["REF"]))
s, b = req("GET", "/health", headers={"Host": "evil.example"})
if s != 403 or "forbidden_host" not in b: bad.append("a foreign Host: %d %s" % (s, b))
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
kill -INT $pid
for _ in $(seq 1 1200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then echo "FAIL: SIGINT did not stop the server"; kill -9 $pid; fail=1; fi
wait $pid
rc=$?
if [ $rc -ne 0 ] || ! grep -q "interrupted: stopping" "$tmp/serve.err"; then
  echo "FAIL: the server's exit: $rc"; cat "$tmp/serve.err"; fail=1
fi
[ $fail -eq 0 ] && echo "cli_serve: all checks passed"
exit $fail
