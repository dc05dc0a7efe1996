#!/usr/bin/env bash
# Machine 1, second job: `calibrate --confirm` of our Server SUT on the line SEQS seqs, 65,536
# tokens per step, CUDA graphs to SEQS, cadence POL; trials from START, one confirmation run.
cd "$(dirname "$0")/.."
SEQS=${SEQS:?} POL=${POL:-0x4} START=${START:?}
STACK="--max-num-seqs $SEQS --max-num-batched-tokens 65536" bash bench/gpu.sh calibrate-server \
  --engine-arg "compilation_config={\"max_cudagraph_capture_size\":$SEQS}" \
  --prefill-policy "$POL" --warmup-samples 300 --start-qps "$START" --trials 4 --precision 0.01 \
  --backoff "${BACKOFF:-0.02}" --confirm-runs 1 --engine-stats
