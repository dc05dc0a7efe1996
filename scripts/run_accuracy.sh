#!/usr/bin/env bash
# Accuracy only (every sample once) and its evaluation against the MLPerf targets.
#   MODEL=... DATASET=... scripts/run_accuracy.sh llama3_1-8b [Offline|Server|Interactive] [flags...]
# Server / Interactive need --user-conf (with the target_qps) or --target-qps among the flags.
set -euo pipefail
source "$(dirname "$0")/_common.sh"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
BENCH=${1:?usage: run_accuracy.sh BENCHMARK [SCENARIO] [engine flags...]}; shift
SCENARIO=Offline
case "${1:-}" in Offline|Server|Interactive|SingleStream) SCENARIO=$1; shift ;; esac
need MODEL "checkpoint folder"; need DATASET "preprocessed dataset file"
# Server / Interactive accuracy issues every sample once at the conf's target_qps: without a
# conf that sets one, LoadGen's default of 1 QPS makes the 8B's 13,368 samples a 3.7 h run.
if [ "$SCENARIO" != Offline ] && [ "$SCENARIO" != SingleStream ]; then
  rate_given=0
  for arg in "$@"; do
    case $arg in --user-conf | --user-conf=* | --target-qps | --target-qps=*) rate_given=1 ;; esac
  done
  if [ $rate_given = 0 ]; then
    echo "error: $SCENARIO accuracy issues every sample at the conf's target_qps (LoadGen's" \
      "default is 1 QPS: the 8B's 13,368 samples would take 3.7 h): pass --user-conf (calibrate's, or the" \
      "performance run's) or --target-qps N, or run the accuracy in Offline" >&2
    exit 2
  fi
fi
OUTDIR=${OUTDIR:-runs/$BENCH/accuracy-$(echo "$SCENARIO" | tr '[:upper:]' '[:lower:]')}
run_cmd "${MLPERF_VLLM[@]}" run --benchmark "$BENCH" --scenario "$SCENARIO" --mode accuracy \
  --model "$MODEL" --dataset "$DATASET" --output "$OUTDIR" --strict "$@"
