#!/usr/bin/env bash
# Installs what building and testing cleave needs on Debian 12 (as root).
# Quiet and quick when everything is already there.
set -euo pipefail
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# Optional: cJSON for the Hugging Face import; the build works without it.
if [ ! -f /usr/include/cjson/cJSON.h ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends libcjson-dev; } ||
    echo "cleave: could not install libcjson-dev; building without the Hugging Face import" >&2
fi
# Optional: xxhash (header only) for sequence states; the build works without it.
if [ ! -f /usr/include/xxhash.h ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends libxxhash-dev; } ||
    echo "cleave: could not install libxxhash-dev; building without sequence states" >&2
fi
# Optional: PCRE2 for byte-level BPE tokenizers; the build works without it.
if [ ! -f /usr/include/pcre2.h ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends libpcre2-dev; } ||
    echo "cleave: could not install libpcre2-dev; building without BPE tokenizers" >&2
fi
