#!/usr/bin/env bash
# cleave chat / cleave run -cnv through a pipe: turns read from stdin in
# the chat template, each answer on stdout followed by a newline, the KV
# cache kept across turns (the second turn decodes only what follows the
# cached prefix), /exit and the end of input leave with exit 0; -p as the
# first message, -sys, -e; the first answer equal to run --chat's.
set -u
cli=$1 shared=$2 tmp=$3
mkdir -p "$tmp"
models=$shared/models
if [ ! -f "$models/stories260K.bin" ]; then echo "skipped: $models absent"; exit 77; fi
"$cli" convert --from llama2c "$models/stories260K.bin" "$models/tok512.bin" -o "$tmp/stories.gguf" 2>/dev/null ||
  { echo "FAIL: convert"; exit 1; }
m=$tmp/stories.gguf
fail=0
chat() { "$cli" chat -m "$m" --chat-template chatml -n 16 --temp 0 "$@"; }
turn_stat() { # turn, field (prompt|reused|decoded), stderr file
  sed -n "s/^cleave: turn $1: \([0-9]*\) prompt tokens, \([0-9]*\) reused from the cache, \([0-9]*\) decoded$/\1 \2 \3/p" "$3" |
    awk -v f="$2" '{ print f == "prompt" ? $1 : f == "reused" ? $2 : $3 }'
}

# two turns: the second reuses the cache
printf 'Hello\nTell me a story\n' | chat >"$tmp/two.out" 2>"$tmp/two.err"
rc=$?
p2=$(turn_stat 2 prompt "$tmp/two.err"); r2=$(turn_stat 2 reused "$tmp/two.err"); d2=$(turn_stat 2 decoded "$tmp/two.err")
if [ $rc -ne 0 ] || [ -z "$p2" ]; then
  echo "FAIL: two turns: exit $rc"; cat "$tmp/two.err"; fail=1
elif [ "$d2" -ge "$p2" ] || [ "$r2" -eq 0 ] || [ $((r2 + d2)) -ne "$p2" ]; then
  echo "FAIL: turn 2 should decode only past the cached prefix: $p2 tokens, $r2 reused, $d2 decoded"; fail=1
fi
[ "$(turn_stat 1 reused "$tmp/two.err")" = 0 ] || { echo "FAIL: turn 1 reused tokens of nothing"; fail=1; }

# cleave run -cnv is the same thing
printf 'Hello\nTell me a story\n' | "$cli" run -cnv -m "$m" --chat-template chatml -n 16 --temp 0 >"$tmp/cnv.out" 2>/dev/null
cmp -s "$tmp/two.out" "$tmp/cnv.out" || { echo "FAIL: run -cnv differs from chat"; fail=1; }

# turn 1 is run --chat's greedy answer to the same rendered prompt
run1=$("$cli" run -m "$m" --chat-template chatml -p "Hello" -n 16 --temp 0 2>/dev/null; echo x)
chat1=$(printf 'Hello\n' | chat 2>/dev/null; echo x)
[ "$run1" = "$chat1" ] || { echo "FAIL: turn 1 differs from run --chat"; printf '%s\n---\n%s\n' "$run1" "$chat1"; fail=1; }

# /exit leaves (exit 0, no second turn); so does the end of input, a last line without its newline taken
printf 'Hello\n/exit\nNever asked\n' | chat >/dev/null 2>"$tmp/exit.err"
rc=$?
[ $rc -eq 0 ] && grep -q "^cleave: turn 1:" "$tmp/exit.err" && ! grep -q "^cleave: turn 2:" "$tmp/exit.err" ||
  { echo "FAIL: /exit: exit $rc"; cat "$tmp/exit.err"; fail=1; }
printf 'Hello' | chat >/dev/null 2>"$tmp/eof.err"
rc=$?
[ $rc -eq 0 ] && grep -q "^cleave: turn 1: " "$tmp/eof.err" || { echo "FAIL: EOF after a line: exit $rc"; fail=1; }
chat </dev/null >"$tmp/empty.out" 2>"$tmp/empty.err"
rc=$?
[ $rc -eq 0 ] && [ ! -s "$tmp/empty.out" ] || { echo "FAIL: empty input: exit $rc"; cat "$tmp/empty.err"; fail=1; }

# -p: the first message, then stdin's
printf 'Tell me a story\n' | chat -p Hello >"$tmp/p.out" 2>"$tmp/p.err"
cmp -s "$tmp/p.out" "$tmp/two.out" || { echo "FAIL: -p Hello then a line differs from two lines"; fail=1; }

# -sys: a system message first (as run --chat -sys renders it)
run_sys=$("$cli" run -m "$m" --chat-template chatml -sys "You tell stories" -p "Hello" -n 16 --temp 0 2>/dev/null; echo x)
chat_sys=$(printf 'Hello\n' | chat -sys "You tell stories" 2>"$tmp/sys.err"; echo x)
[ "$run_sys" = "$chat_sys" ] || { echo "FAIL: -sys: turn 1 differs from run --chat -sys"; fail=1; }
p_sys=$(turn_stat 1 prompt "$tmp/sys.err"); p_plain=$(turn_stat 1 prompt "$tmp/two.err")
[ -n "$p_sys" ] && [ "$p_sys" -gt "$p_plain" ] || { echo "FAIL: -sys added no tokens ($p_sys vs $p_plain)"; fail=1; }

# -e: \n in -p and in stdin's lines is a newline
nl=$'Hello\nthere'
want=$("$cli" run -m "$m" --chat-template chatml -p "$nl" -n 16 --temp 0 2>/dev/null; echo x)
got=$(chat -e -p 'Hello\nthere' </dev/null 2>/dev/null; echo x)
[ "$want" = "$got" ] || { echo "FAIL: -e -p"; fail=1; }
got=$(printf '%s\n' 'Hello\nthere' | chat -e 2>/dev/null; echo x)
[ "$want" = "$got" ] || { echo "FAIL: -e on a line of stdin"; fail=1; }
# without -e a backslash stays text
want=$("$cli" run -m "$m" --chat-template chatml -p 'Hello\nthere' -n 16 --temp 0 2>/dev/null; echo x)
got=$(printf '%s\n' 'Hello\nthere' | chat 2>/dev/null; echo x)
[ "$want" = "$got" ] || { echo "FAIL: without -e"; fail=1; }

# sampling: -s repeats a conversation
a=$(printf 'Hello\nMore\n' | chat --temp 1 -s 9 2>/dev/null)
b=$(printf 'Hello\nMore\n' | chat --temp 1 -s 9 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: -s 9 twice differs"; fail=1; }

# a model without a chat template, and none asked: chatml, as llama.cpp falls back, saying so
printf 'Hello\n' | "$cli" chat -m "$m" -n 4 >/dev/null 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "chat template: chatml (built in; the model has none)" "$tmp/err" ||
  { echo "FAIL: no template: not the chatml fallback"; cat "$tmp/err"; fail=1; }
# a Jinja template from a file renders the conversation (here chatml's own Jinja)
printf '%s' "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}" >"$tmp/chatml.jinja"
j=$(printf 'Hello\n' | "$cli" chat -m "$m" -n 8 --temp 0 --chat-template-file "$tmp/chatml.jinja" 2>"$tmp/err")
c=$(printf 'Hello\n' | "$cli" chat -m "$m" -n 8 --temp 0 --chat-template chatml 2>/dev/null)
[ -n "$j" ] && [ "$j" = "$c" ] && grep -q "chat template: the given template (Jinja" "$tmp/err" ||
  { echo "FAIL: --chat-template-file: '$j' against chatml's '$c'"; cat "$tmp/err"; fail=1; }
# a template that raises: its message, exit 1
printf '%s' "{{ raise_exception('only one message, please') }}" >"$tmp/raise.jinja"
printf 'Hello\n' | "$cli" chat -m "$m" -n 4 --chat-template-file "$tmp/raise.jinja" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "only one message, please" "$tmp/err" || { echo "FAIL: raise_exception"; cat "$tmp/err"; fail=1; }
# a conversation that outgrows the context stops with a message
printf 'Hello\nTell me a story\nAnd another\n' | chat -c 64 -n 24 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "use a larger -c" "$tmp/err" || { echo "FAIL: a full context"; cat "$tmp/err"; fail=1; }

[ $fail -eq 0 ] && echo "cli_chat: all checks passed"
exit $fail
