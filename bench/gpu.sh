#!/usr/bin/env bash
# GPU measurements on one machine, in one command per part, with dummy weights (no checkpoint):
#   bench/gpu.sh offline   raw engine vs our Offline SUT under LoadGen vs the reference pattern,
#                          Llama-3.1-8B BF16 and FP8 + FP8 KV cache
#   bench/gpu.sh server    our Server SUT at increasing QPS (TTFT 2000 / TPOT 100 ms) and
#                          Interactive (500 / 30 ms) vs the one-query-at-a-time pattern
#   bench/gpu.sh all       both
# Needs vLLM on the machine: on the lent offline GPU machine, stage it first with the gpu-stage
# kit (its README: two commands), then run this with `.gpu-stage/bin` sent along. Results go to
# $OUT (or bench/gpu-out) as logs and JSON; bench/RESULTS.md records what was measured.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -f .gpu-stage/bin/env.sh ]; then source .gpu-stage/bin/env.sh; fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
OUT=${OUT:-bench/gpu-out}; mkdir -p "$OUT"
MODEL=${MODEL:-.gpu-stage/bin/llama31_8b_dummy}
SAMPLES=${SAMPLES:-1000}
REPEATS=${REPEATS:-2}
DUMMY=(--engine-arg load_format=dummy --engine-arg skip_tokenizer_init=true
       --engine-arg max_model_len=4096)
FP8=(--engine-arg quantization=fp8 --engine-arg kv_cache_dtype=fp8)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import vllm, mlperf_loadgen; print('vllm', vllm.__version__)" | tee -a "$OUT/gpu.txt"

offline() {  # name, extra args...
  local name=$1; shift
  python3 bench/offline_overhead.py --model "$MODEL" --random-prompts 870 --samples "$SAMPLES" \
    --repeats "$REPEATS" --reference-once --ignore-eos "${DUMMY[@]}" "$@" --json "$OUT/offline_$name.json" \
    2>&1 | grep -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" | tee "$OUT/offline_$name.log"
}

server() {  # name, extra args...
  local name=$1; shift
  python3 bench/server_capacity.py --model "$MODEL" --random-prompts 870 "${DUMMY[@]}" \
    --ignore-eos "$@" --json "$OUT/server_$name.json" \
    2>&1 | grep -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" | tee "$OUT/server_$name.log"
}

case "${1:-all}" in
  offline) offline bf16; offline fp8 "${FP8[@]}" ;;
  offline-bf16) offline bf16 ;;
  offline-fp8) offline fp8 "${FP8[@]}" ;;
  server) server fp8 "${FP8[@]}" ;;
  all) offline bf16; offline fp8 "${FP8[@]}"; server fp8 "${FP8[@]}" ;;
  *) echo "usage: $0 {offline|offline-bf16|offline-fp8|server|all}" >&2; exit 2 ;;
esac
