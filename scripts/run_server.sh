#!/usr/bin/env bash
# Server (or Interactive with SCENARIO=Interactive) performance + accuracy for one benchmark.
#   MODEL=... DATASET=... scripts/run_server.sh llama3_1-8b [vLLM flags...]
set -euo pipefail
source "$(dirname "$0")/_common.sh"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
BENCH=${1:?usage: run_server.sh BENCHMARK [engine flags...]}; shift
need MODEL "checkpoint folder"; need DATASET "preprocessed dataset file"
SCENARIO=${SCENARIO:-Server}
conf_name=$(echo "$SCENARIO" | tr '[:upper:]' '[:lower:]')
OUTDIR=${OUTDIR:-runs/$BENCH/$conf_name}
run_cmd "${MLPERF_VLLM[@]}" run --benchmark "$BENCH" --scenario "$SCENARIO" --mode both \
  --model "$MODEL" --dataset "$DATASET" --output "$OUTDIR" \
  --user-conf "${USER_CONF:-$ROOT/user_confs/$BENCH/$conf_name.conf}" "$@"
