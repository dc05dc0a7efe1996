#!/usr/bin/env bash
# Machine 2: the 600 s Server run of the 512 / 65,536 line with the cadence 0x2 at 51.7 QPS (0.952
# of machine 1's OfflineSUT), then this machine's OfflineSUT on the tuned Offline line.
cd "$(dirname "$0")/.."
WARMUP=300 bash bench/gpu.sh confirm Server "${TARGET:-51.7}" 0x2 --max-num-seqs 512 \
  --max-num-batched-tokens 65536 --engine-stats
WARMUP=300 STACK="--max-num-seqs 512 --max-num-batched-tokens 65536" bash bench/gpu.sh offline-2k
