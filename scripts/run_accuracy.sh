#!/usr/bin/env bash
# Accuracy only (every sample once) and its evaluation against the MLPerf targets.
#   MODEL=... DATASET=... scripts/run_accuracy.sh llama3_1-8b [Offline|Server|Interactive] [vLLM flags...]
set -euo pipefail
source "$(dirname "$0")/_common.sh"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
BENCH=${1:?usage: run_accuracy.sh BENCHMARK [SCENARIO] [engine flags...]}; shift
SCENARIO=Offline
case "${1:-}" in Offline|Server|Interactive|SingleStream) SCENARIO=$1; shift ;; esac
need MODEL "checkpoint folder"; need DATASET "preprocessed dataset file"
OUTDIR=${OUTDIR:-runs/$BENCH/accuracy-$(echo "$SCENARIO" | tr '[:upper:]' '[:lower:]')}
run_cmd "${MLPERF_VLLM[@]}" run --benchmark "$BENCH" --scenario "$SCENARIO" --mode accuracy \
  --model "$MODEL" --dataset "$DATASET" --output "$OUTDIR" --strict "$@"
