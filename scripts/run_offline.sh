#!/usr/bin/env bash
# Offline performance + accuracy for one benchmark, compliant settings.
#   MODEL=/models/Llama-3.1-8B-Instruct DATASET=/data/cnn_eval.json scripts/run_offline.sh llama3_1-8b [vLLM flags...]
set -euo pipefail
source "$(dirname "$0")/_common.sh"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
BENCH=${1:?usage: run_offline.sh BENCHMARK [engine flags...]}; shift
need MODEL "checkpoint folder"; need DATASET "preprocessed dataset file"
OUTDIR=${OUTDIR:-runs/$BENCH/offline}
run_cmd "${MLPERF_VLLM[@]}" run --benchmark "$BENCH" --scenario Offline --mode both \
  --model "$MODEL" --dataset "$DATASET" --output "$OUTDIR" \
  --user-conf "${USER_CONF:-$ROOT/user_confs/$BENCH/offline.conf}" "$@"
