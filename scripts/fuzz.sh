#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser with libFuzzer (tests/fuzz): the
# GGUF reader and model loader, the llama2.c and Hugging Face importers,
# the sequence-state reader, the SentencePiece and BPE tokenizers, the
# chat templates' Jinja interpreter and the server's request parser.
# Builds them with clang (AddressSanitizer + UndefinedBehaviorSanitizer),
# seeds each from files cleave makes, the shared models and templates, replays the inputs that once crashed
# (tests/fuzz/regressions/HARNESS/), then fuzzes each for SECONDS (default
# 30) and prints executions per second. A crash, sanitizer report, leak or
# hang fails the script; its input lands in build-fuzz/crashes/ (add it to
# the regressions once fixed).
# usage: scripts/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${CLEAVE_FUZZ_SECONDS:-30}}
if ! command -v clang >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
    >/dev/null 2>&1; then
  echo "cleave fuzz: clang or libFuzzer's runtime not found (apt-get install clang libclang-rt-14-dev):" \
       "fuzzing skipped" >&2
  exit 0
fi
b=build-fuzz
echo "== fuzz: build (clang, libFuzzer, ASan + UBSan) =="
CC=clang cmake -S . -B "$b" -DCLEAVE_FUZZ=ON -DCLEAVE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
cmake --build "$b" -j "$(nproc)" --target fuzzers cleave-cli >/dev/null || exit 1
fz=$b/tests/fuzz cli=$b/cleave seeds=$b/fuzz-seeds shared=${CLEAVE_SHARED_DIR:-../shared}
rm -rf "$seeds"
mkdir -p "$seeds"/{gguf,llama2c,hf,state,tokenizer,tokenizer_bpe,jinja,serve_parse} "$b/crashes"

# seeds: files cleave makes, the shared models and vocabularies, request bodies
"$cli" gen --preset tiny --type f32 -o "$seeds/gguf/tiny-f32.gguf" >/dev/null 2>&1
"$cli" gen --preset tiny --arch qwen3moe --type q8_0 -o "$seeds/gguf/tiny-moe-q8_0.gguf" >/dev/null 2>&1
"$cli" gen --preset tiny --arch llama --type f16 --seed 42 -o "$seeds/tiny.gguf" >/dev/null 2>&1 &&
  "$cli" run -m "$seeds/tiny.gguf" -p "hello there" -n 2 -t 1 --prompt-cache "$seeds/state/hello.state" \
    >/dev/null 2>&1
rm -f "$seeds/tiny.gguf"
if [ -f "$shared/models/stories260K.bin" ] && [ -f "$shared/models/tok512.bin" ]; then
  python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); t=open(sys.argv[2],"rb").read();
sys.stdout.buffer.write(struct.pack("<I",len(b))+b+t)' "$shared/models/stories260K.bin" \
    "$shared/models/tok512.bin" >"$seeds/llama2c/stories260K"
fi
python3 - "$seeds/hf/tiny" <<'PY'
import json, struct, sys
cfg = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                  "vocab_size": 16, "rms_norm_eps": 1e-5, "max_position_embeddings": 32}).encode()
shapes = {"model.embed_tokens.weight": [16, 8], "model.norm.weight": [8], "lm_head.weight": [16, 8],
          "model.layers.0.input_layernorm.weight": [8], "model.layers.0.post_attention_layernorm.weight": [8],
          "model.layers.0.self_attn.q_proj.weight": [8, 8], "model.layers.0.self_attn.k_proj.weight": [4, 8],
          "model.layers.0.self_attn.v_proj.weight": [4, 8], "model.layers.0.self_attn.o_proj.weight": [8, 8],
          "model.layers.0.mlp.gate_proj.weight": [16, 8], "model.layers.0.mlp.up_proj.weight": [16, 8],
          "model.layers.0.mlp.down_proj.weight": [8, 16]}
head, off, data = {}, 0, b""
for name, shape in shapes.items():
    n = 1
    for d in shape: n *= d
    head[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n]}
    data += struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)])
    off += 4 * n
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
st = struct.pack("<Q", len(h)) + h + data
open(sys.argv[1], "wb").write(struct.pack("<I", len(cfg)) + cfg + st)
PY
for v in llama-spm:tokenizer gpt-2:tokenizer_bpe; do
  f=$shared/vocab/ggml-vocab-${v%%:*}.gguf.inp
  [ -f "$f" ] && { printf '\x02'; head -c 4096 "$f"; } >"$seeds/${v##*:}/inp"
done
# chat templates: the shared models' own, and a few small ones of every construct
[ -d "$shared/templates" ] && cp "$shared"/templates/*.jinja "$seeds/jinja/" 2>/dev/null
printf '%s' "{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}{% set ns.n = ns.n + 1 %}{{ loop.index }}{{ m.content | trim | tojson }}{% endfor %}{{ ns.n }}" >"$seeds/jinja/loop"
printf '%s' "{% macro f(x, y='d') %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ 'a,b'.split(',') | join('-') }}{{ [3,1] | sort }}{{ 'abc'[::-1] }}" >"$seeds/jinja/macro"
printf '%s' "  {%- if add_generation_prompt -%}{{ bos_token }}{% else %}{{ raise_exception('no') }}{% endif %}{# c #}{% raw %}{{ x }}{% endraw %}" >"$seeds/jinja/ws"
printf '\x00{"prompt":"Once upon a time","max_tokens":8,"stop":["\\n","end"],"temperature":0.5}' >"$seeds/serve_parse/c"
printf '\x01{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true}' >"$seeds/serve_parse/chat"
printf '\x00{"prompt":[1,2,3],"seed":7,"stream_options":{"include_usage":true}}' >"$seeds/serve_parse/ids"

fail=0
printf '%-20s %12s %10s %8s\n' harness executions "exec/s" corpus
for h in gguf llama2c hf state tokenizer tokenizer_bpe jinja serve_parse; do
  exe=$fz/fuzz_$h
  if [ ! -x "$exe" ]; then echo "fuzz_$h: not built here (an optional part missing): skipped"; continue; fi
  if [[ $h == tokenizer* ]] && [ ! -s "$seeds/$h/inp" ]; then
    echo "fuzz_$h: its vocabulary is absent ($shared/vocab): skipped"; continue
  fi
  reg=tests/fuzz/regressions/$h
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
    if ! "$exe" "$reg"/* >"$b/fuzz_$h.regressions.log" 2>&1; then
      echo "FAIL: fuzz_$h: an input of $reg crashes again"; tail -30 "$b/fuzz_$h.regressions.log"; fail=1; continue
    fi
  fi
  corpus=$b/corpus/$h
  mkdir -p "$corpus"
  # no -max_len: libFuzzer takes the largest seed's, so whole models stay whole
  "$exe" -max_total_time="$secs" -print_final_stats=1 -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$b/crashes/$h-" "$corpus" "$seeds/$h" >"$b/fuzz_$h.log" 2>&1
  rc=$?
  execs=$(grep -o 'number_of_executed_units: [0-9]*' "$b/fuzz_$h.log" | grep -o '[0-9]*$')
  rate=$(grep -o 'average_exec_per_sec: *[0-9]*' "$b/fuzz_$h.log" | grep -o '[0-9]*$')
  printf '%-20s %12s %10s %8s\n' "fuzz_$h" "${execs:-?}" "${rate:-?}" "$(ls "$corpus" | wc -l)"
  if [ $rc -ne 0 ]; then
    echo "FAIL: fuzz_$h (exit $rc); the input is in $b/crashes/:"; grep -E "ERROR|SUMMARY|runtime error" "$b/fuzz_$h.log" | head -5
    fail=1
  fi
done
exit $fail
