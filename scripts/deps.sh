#!/usr/bin/env bash
# Installs what building and testing cleave needs on Debian 12 (as root).
# Quiet and quick when everything is already there.
set -euo pipefail
# another apt (an unattended upgrade) may hold the lock: wait for it up to
# 10 minutes instead of failing and building without a part
apt_wait=(-o DPkg::Lock::Timeout=600)
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ctest >/dev/null 2>&1 || need+=(cmake)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "cleave: missing ${need[*]}; run as root or install them with apt-get" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get "${apt_wait[@]}" update -qq
  apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${need[@]}"
fi
# Optional libraries: each missing one is installed when we are root on a
# Debian-like system; the build works without it, losing one feature.
optional() { # header package feature
  [ -f "$1" ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get "${apt_wait[@]}" update -qq && apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "$2"; } &&
      return 0
  fi
  echo "cleave: could not install $2; building without $3" >&2
}
optional /usr/include/cjson/cJSON.h libcjson-dev "the Hugging Face import and the server"
optional /usr/include/xxhash.h libxxhash-dev "sequence states"
optional /usr/include/pcre2.h libpcre2-dev "BPE tokenizers"
optional /usr/include/microhttpd.h libmicrohttpd-dev "the server (cleave serve)"
# clang with libFuzzer's runtime: scripts/fuzz.sh (without it the fuzzing is skipped, saying so)
if ! command -v clang >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
    >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get "${apt_wait[@]}" update -qq &&
      apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends clang libclang-rt-14-dev; } ||
      echo "cleave: could not install clang and libclang-rt-14-dev; the fuzzing will be skipped" >&2
  fi
fi
# Python 3 with numpy and the gguf package: the quantization tests check
# cleave's block formats and quantized files against gguf's independent
# implementation (without them those tests fail and say so).
if ! python3 -c 'import numpy, gguf' >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get "${apt_wait[@]}" update -qq &&
      apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends python3 python3-numpy python3-pip &&
      pip3 install -q --break-system-packages gguf; } ||
      echo "cleave: could not install python3-numpy and gguf; the quantization tests will fail" >&2
  else
    echo "cleave: python3 with numpy and gguf missing (apt-get install python3-numpy python3-pip;" \
         "pip3 install --break-system-packages gguf); the quantization tests will fail" >&2
  fi
fi
# The openai Python client: tests/cli_serve_openai.sh drives cleave serve
# with it, as its users do (without it that test fails and says so).
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v pip3 >/dev/null 2>&1; then
    pip3 install -q --break-system-packages openai ||
      echo "cleave: could not install the openai package; the server's client test will fail" >&2
  else
    echo "cleave: python3's openai package missing (pip3 install --break-system-packages openai);" \
         "the server's client test will fail" >&2
  fi
fi
# Python's jinja2: the chat-template test renders every shared template with
# it and with cleave's interpreter and compares the bytes (without it that
# test fails and says so).
if ! python3 -c 'import jinja2' >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get "${apt_wait[@]}" update -qq &&
      apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends python3 python3-jinja2; } ||
      echo "cleave: could not install python3-jinja2; the chat-template test will fail" >&2
  else
    echo "cleave: python3 with jinja2 missing (apt-get install python3-jinja2); the chat-template test will fail" >&2
  fi
fi
