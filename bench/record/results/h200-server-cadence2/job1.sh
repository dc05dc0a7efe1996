#!/usr/bin/env bash
# Machine 1 of the seventh session (issue 32, Server past 0.95 of Offline): the OfflineSUT on the
# tuned Offline line, then our Server SUT's trials with more sequences than 512 and the 0xK cadence,
# each line on one warm engine (policies switched live), CUDA graphs captured up to the line's seqs.
cd "$(dirname "$0")/.."
OUT=${OUT:?}
WARMUP=300 STACK="--max-num-seqs 512 --max-num-batched-tokens 65536" bash bench/gpu.sh offline-2k
for seqs in 640 768; do
  pols=0x4,0x3; [ "$seqs" = 768 ] && pols=0x4
  mkdir -p "$OUT/s$seqs"
  OUT=$OUT/s$seqs SIDES=sut RATES=54,56 TRIAL_S=60 OFFLINE_N=1000 POLICIES=$pols \
    bash bench/gpu.sh vs-raw Server --engine-arg max_num_seqs=$seqs \
    --engine-arg max_num_batched_tokens=65536 \
    --engine-arg "compilation_config={\"max_cudagraph_capture_size\":$seqs}"
done
