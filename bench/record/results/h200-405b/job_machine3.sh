#!/usr/bin/env bash
# machine 3: the 405B-width Offline run again (its files), then one Server run at TARGET for
# mlperf.conf's 600 s and 459 queries (LoadGen's early stopping minimum), 230 prompts x 2 passes
# It ran as .gpu-stage/job405*.sh on the device; from here it runs at the repository root.
cd "$(dirname "$0")/../../.."
export STACK="--max-num-seqs 256 --max-num-batched-tokens 2048"
N405=100 bash bench/gpu.sh offline-405b
N405=230 MINQ=459 bash bench/gpu.sh confirm-405b Server ${TARGET:-0.45} --engine-stats
