#!/usr/bin/env bash
# Two, four and eight GPUs: the split modes, the switch between them and
# llama.cpp beside cleave on the same files in the same run. Sections, so
# each fits a 10-minute window of a machine's time:
#   bench/run_multi.sh build LLAMA_SRC   build cleave (build-gpu, with
#       cleave-peercopy and cleave-allreduce) and llama.cpp (build-llama)
#   bench/run_multi.sh SECTION [MODELS_DIR]   markdown on stdout:
#     check   correctness first: every split on all the GPUs against one
#             (tests/gpu/test_gpu_splits), each phase's placement and the
#             switch's peak and copies as previewed (tests/test_phases)
#     peer    the link: cleave-peercopy over every pair and a ring, the
#             all-reduce alone (cleave-allreduce); writes MODELS_DIR/link-gbs
#             (both ways at once, devices 0 and 1), which later sections
#             set the switch against
#     dense2  8B bf16 on 2 GPUs: pp4096 and tg128 under none, layer
#             (512-token micro-batches) and tensor, llama-bench the same
#     psm32   32B-shape Q5_K_M on 2 GPUs: pp4096/tg128 per mode; one request
#             of 58,248 prompt + 128 generated tokens under layer, tensor and
#             -psm layer -sm tensor (wall clock, switch against its limit);
#             the policy's choice from calibrated rates; the requests again
#             without P2P (CLEAVE_NO_P2P=1: a PCIe box)
#     moe2    Qwen3-30B-A3B Q4_K_M and gpt-oss-120b MXFP4 on 2 GPUs, per mode
#     scale   70B-shape Q4_K_M (and bf16 where the disk holds it) and 32B on
#             2, 4 and 8 GPUs (those present): pp4096, tg128, batched-bench
#             -npl 1..32, memory per device, the switch's time and limit
# Each cleave or llama.cpp line loads its model anew: the scale section
# loads a model 11 times per GPU count (5 lines per split and the switch),
# 33 loads of 131 GiB for 70B bf16, so split it over calls with
# SCALE="70b Q4_K_M" (one "preset type" per call) and COUNTS="4 8".
# DRY=1 runs every section on virtual CPU devices with tiny models, short
# prompts and no llama.cpp: the script's own check, not a benchmark.
# bench/plot_multi.py draws the scale section's output.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
step=${1:?usage: bench/run_multi.sh build LLAMA_SRC | check|peer|dense2|psm32|moe2|scale [MODELS_DIR]}
shift
if [ "$step" = build ]; then
  src=$1
  log=$(mktemp)
  (cmake -S "$src" -B build-llama -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON \
     -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$log" 2>&1 &&
   cmake --build build-llama -j "$(nproc)" --target llama-bench llama-batched-bench >>"$log" 2>&1) &
  llama=$!
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCLEAVE_GPU_TESTS=ON >/dev/null
  cmake --build build-gpu -j 4 --target cleave-cli cleave-peercopy cleave-allreduce test_gpu_splits test_phases \
    >/dev/null
  wait $llama || { tail -30 "$log"; exit 1; }
  echo "built cleave and llama.cpp"
  exit 0
fi

models=${1:-/tmp/cleave-models}
mkdir -p "$models"
dry=${DRY:-0}
export LD_LIBRARY_PATH=$PWD/build-llama/bin:${LD_LIBRARY_PATH:-}
L=build-llama/bin
C=${CLEAVE:-build-gpu/cleave}
tools=$(dirname "$C")
if [ "$dry" = 1 ]; then
  n_gpus=8 pp=64 tg=8 long=256 reps=1
else
  n_gpus=$(nvidia-smi -L | wc -l) pp=4096 tg=128 long=58248 reps=3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
echo "## $step, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# The devices of n GPUs (cleave's list) and llama.cpp's view of them.
devs() { if [ "$dry" = 1 ]; then echo "cpu:$1"; else seq -s, -f 'cuda:%g' 0 $(($1 - 1)); fi; }
visible() { seq -s, 0 $(($1 - 1)); }
one() { if [ "$dry" = 1 ]; then echo cpu; else echo cuda:0; fi; }

# A model of a preset and type, made once (dry: tiny shapes of its kind).
model() {
  local preset=$1 type=$2 arch=() f
  if [ "$dry" = 1 ]; then
    type=q8_0
    case $preset in
      qwen3-30b-a3b) preset=tiny arch=(--arch qwen3moe) ;;
      gpt-oss-*) preset=tiny arch=(--arch gpt-oss) ;;
      *) preset=tiny8 ;;
    esac
  fi
  f=$models/$preset${arch[1]:+-${arch[1]}}-$type.gguf
  [ -f "$f" ] || $C gen --preset "$preset" "${arch[@]}" --type "$type" -o "$f" >/dev/null 2>&1 ||
    { echo "gen $preset $type failed" >&2; exit 1; }
  echo "$f"
}

# cleave bench and llama-bench on n GPUs under a mode (none: one GPU).
both_bench() {
  local f=$1 n=$2 mode=$3 extra=()
  [ "$mode" = layer ] && extra=(-ub 512)
  echo "cleave, $n GPUs, $mode:"
  if [ "$mode" = none ]; then $C bench -m "$f" --device "$(one)" -p $pp -n $tg -r $reps 2>&1 | grep -E '^\| [^-]|rror' || true
  else $C bench -m "$f" --devices "$(devs "$n")" -sm "$mode" "${extra[@]}" -p $pp -n $tg -r $reps 2>&1 | grep -E '^\| [^-]|rror' || true
  fi
  [ "$dry" = 1 ] && return 0
  echo "llama.cpp, $n GPUs, $mode:"
  CUDA_VISIBLE_DEVICES=$(visible "$n") $L/llama-bench -m "$f" -ngl 99 -fa 1 -sm "$mode" -p $pp -n $tg -r $reps -o md 2>&1 |
    grep -E '^\| [^-]|rror' || true
}

link_gbs() { cat "$models/link-gbs" 2>/dev/null || echo 390; }

# One request of `long` prompt + tg tokens under each plan, the switch set
# against its limit at the measured link rate.
requests() {
  local f=$1 n=$2
  for plan in "-sm layer -ub 512" "-sm tensor" "-psm layer -sm tensor -ub 512"; do
    # shellcheck disable=SC2086 # the plan's flags, word-split on purpose
    $C bench-psm -m "$f" --devices "$(devs "$n")" $plan -p $long -n $tg --link-gbs "$(link_gbs)" 2>&1 |
      grep -E '^\| [^-]|^switch |rror' | grep -v '^| plan' || true
  done
}

case $step in
check)
  if [ "$dry" = 1 ]; then "$tools/tests/test_phases" cpu:2 cpu 2>&1 | tail -1
  else
    "$tools/tests/gpu/test_gpu_splits" "$(devs "$n_gpus")" 2>&1 | tail -1
    "$tools/tests/test_phases" cuda:0,cuda:1 cuda:0 2>&1 | tail -1
  fi ;;
peer)
  [ "$dry" = 1 ] || nvidia-smi topo -m | head -$((n_gpus + 1))
  "$tools/cleave-peercopy" "$(devs "$n_gpus")" "$([ "$dry" = 1 ] && echo 8 || echo 1024)" | tee "$models/peer.txt"
  # both ways at once between devices 0 and 1: the rate a 2-device switch copies at
  awk -F'|' 'NR > 4 && /^\| / {gsub(/ /, "", $4); print $4; exit}' "$models/peer.txt" >"$models/link-gbs"
  echo "link rate for the switch's limit: $(link_gbs) GB/s"
  if [ "$dry" != 1 ]; then
    "$tools/cleave-allreduce" $(seq 0 $((n_gpus - 1)))
    CLEAVE_NO_P2P=1 NCCL_P2P_DISABLE=1 "$tools/cleave-allreduce" 0 1
  fi ;;
dense2)
  f=$(model 8b bf16)
  for mode in none layer tensor; do both_bench "$f" 2 $mode; done
  echo "### without P2P"
  for mode in layer tensor; do CLEAVE_NO_P2P=1 NCCL_P2P_DISABLE=1 both_bench "$f" 2 $mode; done ;;
psm32)
  f=$(model 32b Q5_K_M)
  for mode in none layer tensor; do both_bench "$f" 2 $mode; done
  echo "### one request of $long + $tg tokens"
  echo "| plan | prompt | generated | load s | prefill s | pp tok/s | switch s | switch GB | generation s | tg tok/s | wall s |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  requests "$f" 2
  echo "### the policy: calibrated rates, its choice and every plan's time"
  $C calibrate -m "$f" --devices "$(devs 2)" --pp "$pp,$long" --depths "$tg,$long" -o "$models/rates.txt" \
    >/dev/null 2>&1 || echo "calibrate failed"
  $C bench-psm -m "$f" --devices "$(devs 2)" --grid-pp $long --grid-tg $tg --psm-rates "$models/rates.txt" 2>&1 |
    grep -E '^\||rror' || true
  echo "### without P2P (CLEAVE_NO_P2P=1)"
  CLEAVE_NO_P2P=1 NCCL_P2P_DISABLE=1 requests "$f" 2 ;;
moe2)
  for spec in "qwen3-30b-a3b Q4_K_M" "gpt-oss-120b MXFP4_MOE"; do
    # shellcheck disable=SC2086 # preset and type
    f=$(model $spec)
    echo "### $spec"
    for mode in layer tensor; do both_bench "$f" 2 $mode; done
    echo "| plan | prompt | generated | load s | prefill s | pp tok/s | switch s | switch GB | generation s | tg tok/s | wall s |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    $C bench-psm -m "$f" --devices "$(devs 2)" -psm layer -sm tensor -ub 512 -p $pp -n $tg --link-gbs "$(link_gbs)" 2>&1 |
      grep -E '^\| [^-]|^switch |rror' | grep -v '^| plan' || true
  done ;;
scale)
  specs=("70b Q4_K_M" "32b Q5_K_M")
  # 70B bf16 is 131 GiB: only where the disk holds it beside the others
  [ "$dry" = 1 ] || [ "$(df --output=avail -BG "$models" | tail -1 | tr -dc 0-9)" -lt 180 ] || specs+=("70b bf16")
  [ -z "${SCALE:-}" ] || specs=("$SCALE")
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086 # preset and type
    f=$(model $spec)
    for n in ${COUNTS:-2 4 8}; do
      [ "$n" -le "$n_gpus" ] || continue
      echo "### $spec, $n GPUs"
      for mode in layer tensor; do
        both_bench "$f" "$n" $mode
        echo "batched-bench, $mode:"
        $C batched-bench -m "$f" --devices "$(devs "$n")" -sm $mode -npp 512 -ntg $tg -npl 1,2,4,8,16,32 2>&1 |
          grep -E '^\|  |rror' || true
        if [ "$dry" != 1 ]; then
          echo "llama.cpp batched-bench, $mode:"
          CUDA_VISIBLE_DEVICES=$(visible "$n") $L/llama-batched-bench -m "$f" -ngl 99 -fa on -sm $mode \
            -npp 512 -ntg $tg -npl 1,2,4,8,16,32 2>&1 | grep -E '^\|  ' || true
        fi
        echo "memory per device, $mode:"
        $C run -m "$f" --devices "$(devs "$n")" -sm $mode -c 8192 -p hello -n 8 --temp 0 --mem-report 2>&1 >/dev/null |
          grep -E "^cleave: +(cuda|cpu)[:0-9]* +planned|peak|rror" || true
      done
      echo "the switch, $n GPUs:"
      $C bench-psm -m "$f" --devices "$(devs "$n")" -psm layer -sm tensor -ub 512 -p $pp -n $tg --link-gbs "$(link_gbs)" 2>&1 |
        grep -E '^\| [^-]|^switch |rror' | grep -v '^| plan' || true
    done
  done
  [ "$n_gpus" -ge 8 ] || echo "(fewer than 8 GPUs here: the larger counts were not run)" ;;
*) echo "unknown section $step" >&2; exit 2 ;;
esac
