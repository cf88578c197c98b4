#!/usr/bin/env bash
# `cleave serve` as a process: its key read from --api-key-file, the port
# from --port-file; answers over HTTP (Python's http.client), the key
# required but not on /health, a foreign Host refused, a prompt's BOS as
# the vocabulary says (the answer equals `cleave run`'s greedy text), and
# SIGINT ends it cleanly. The flags vLLM and llama-server users type: the
# model as the first argument, -a twice, --served-model-name, --max-model-len
# (a slot's cells), -fa on and -cb taken, -fa off, -nocb and --embedding
# refused, --help exits 0, an unknown flag ends with its error as the last
# line and exit 1.
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
fail=0
"$cli" serve --help >"$tmp/help.out" 2>&1 || { echo "FAIL: --help exits $?"; fail=1; }
grep -q -- "--served-model-name" "$tmp/help.out" || { echo "FAIL: --help lacks --served-model-name"; fail=1; }
"$cli" serve "$m" --no-such-flag 2>"$tmp/bad.err"
rc=$?
last=$(tail -n 1 "$tmp/bad.err")
if [ $rc -ne 1 ] || [ "$(wc -l <"$tmp/bad.err")" -gt 4 ] || [[ "$last" != *"unknown option '--no-such-flag'"* ]]; then
  echo "FAIL: an unknown flag: exit $rc, last line '$last'"; cat "$tmp/bad.err"; fail=1
fi
for refused in "-fa off" "--flash-attn off" "-nocb" "--embedding" "--embeddings" "--copy-prompt-cells sometimes"; do
  # shellcheck disable=SC2086
  "$cli" serve "$m" $refused --port 0 2>"$tmp/refused.err"
  rc=$?
  flag=${refused%% *}
  if [ $rc -eq 0 ] || ! grep -q -- "$flag" "$tmp/refused.err"; then
    echo "FAIL: '$refused' not refused naming it: exit $rc"; cat "$tmp/refused.err"; fail=1
  fi
done
"$cli" serve "$m" -c 1024 --max-model-len 256 -np 2 --port 0 2>"$tmp/disagree.err"
if [ $? -eq 0 ] || ! grep -q "disagree" "$tmp/disagree.err"; then
  echo "FAIL: -c and --max-model-len that disagree"; cat "$tmp/disagree.err"; fail=1
fi
ref=$("$cli" run -m "$m" -p "Once upon a time" -n 12 --temp 0 -t 1 2>/dev/null)
printf 'sesame\nnot this line\n' >"$tmp/key"
rm -f "$tmp/port"
# the model first (vLLM's way); --max-model-len 256 with -np 2 is -c 512
"$cli" serve "$m" --port 0 --port-file "$tmp/port" --api-key-file "$tmp/key" -t 1 --max-model-len 256 -np 2 \
  -a main -a second -fa on -cb --threads-http 2 --timeout 20 --metrics --slots --quiet 2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 1 1200); do [ -s "$tmp/port" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$tmp/port" ]; then echo "FAIL: the server did not start"; cat "$tmp/serve.err"; kill $pid 2>/dev/null; exit 1; fi
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
s, b = req("GET", "/v1/models", headers=key)
ids = [m["id"] for m in json.loads(b)["data"]] if s == 200 else None
if ids != ["main", "second"]: bad.append("-a twice: /v1/models %d %s" % (s, b))
s, b = req("POST", "/v1/completions", {"model": "second", "prompt": "Once", "max_tokens": 2}, key)
if s != 200: bad.append("the second alias: %d %s" % (s, b))
s, b = req("POST", "/v1/completions", {"model": "stories.gguf", "prompt": "Once", "max_tokens": 2}, key)
if s != 200: bad.append("the file's name as the model: %d %s" % (s, b))
s, b = req("POST", "/v1/completions", {"model": "other", "prompt": "Once", "max_tokens": 2}, key)
if s != 404 or "model_not_found" not in b: bad.append("an unknown model: %d %s" % (s, b))
s, b = req("GET", "/props", headers=key)
p = json.loads(b) if s == 200 else {}
if p.get("total_slots") != 2 or p.get("default_generation_settings", {}).get("n_ctx") != 256:
    bad.append("--max-model-len 256 -np 2: /props %d %s" % (s, b))
s, b = req("GET", "/metrics", headers=key)
if s != 200 or "cleave:requests_total" not in b: bad.append("--metrics: %d" % s)
s, b = req("GET", "/slots", headers=key)
if s != 200 or len(json.loads(b)) != 2: bad.append("--slots: %d %s" % (s, b))
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
# vLLM's --served-model-name takes several names at once; -m as llama-server has it
# and --chat-template-file: a Jinja template of its own renders the chats
rm -f "$tmp/port"
cat >"$tmp/tmpl.jinja" <<'JINJA'
{%- if messages[0]['role'] != 'user' %}{{ raise_exception("the first message must be the user's") }}{% endif %}
{%- if messages[0]['content'] == 'long' %}{% for i in range(900) %}0123456789{% endfor %}{% endif %}
{%- for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] | trim }}
{% endfor %}
{%- if add_generation_prompt %}[ASSISTANT] {% endif %}
JINJA
"$cli" serve -m "$m" --served-model-name alpha beta --port 0 --port-file "$tmp/port" -t 1 -c 256 --quiet \
  --chat-template-file "$tmp/tmpl.jinja" 2>"$tmp/serve2.err" &
pid=$!
for _ in $(seq 1 1200); do [ -s "$tmp/port" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$tmp/port" ]; then
  echo "FAIL: the second server did not start"; cat "$tmp/serve2.err"; fail=1
else
  python3 - "$(cat "$tmp/port")" <<'PY' || fail=1
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=120)
c.request("GET", "/v1/models")
r = c.getresponse()
ids = [m["id"] for m in json.loads(r.read())["data"]]
bad = []
if ids != ["alpha", "beta"]:
    bad.append("--served-model-name alpha beta: %s" % ids)
def post(path, body):
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())
s, b = post("/apply-template", {"messages": [{"role": "user", "content": "  hi  "}]})
if s != 200 or b.get("prompt") != "[USER] hi\n[ASSISTANT] ":
    bad.append("--chat-template-file's rendering: %d %r" % (s, b))
# a text longer than the server's first guess of its size renders again, whole
s, b = post("/apply-template", {"messages": [{"role": "user", "content": "long"}]})
if s != 200 or b.get("prompt") != "0123456789" * 900 + "[USER] long\n[ASSISTANT] ":
    bad.append("a 9000-byte rendering: %d %r" % (s, str(b)[:200]))
s, b = post("/v1/chat/completions", {"messages": [{"role": "system", "content": "x"}], "max_tokens": 2})
if s != 400 or "the first message must be the user's" not in b["error"]["message"]:
    bad.append("the template's raise_exception: %d %r" % (s, b))
s, b = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
if s != 200: bad.append("a chat through the file's template: %d %r" % (s, b))
c.request("GET", "/props")
p = json.loads(c.getresponse().read())
if "raise_exception" not in p.get("chat_template", "") or "given" not in p.get("chat_template_source", ""):
    bad.append("/props' chat template: %r" % {k: p.get(k) for k in ("chat_template", "chat_template_source")})
for x in bad: print("FAIL:", x)
sys.exit(1 if bad else 0)
PY
fi
kill -INT $pid 2>/dev/null
wait $pid
[ $fail -eq 0 ] && echo "cli_serve: all checks passed"
exit $fail
