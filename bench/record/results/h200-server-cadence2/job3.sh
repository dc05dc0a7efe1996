#!/usr/bin/env bash
# Machine 1, third job: the Server line (512 seqs, 65,536 tokens per step) on one warm engine,
# our SUT alone, vLLM's scheduling (0) against the cadences 0x2 and 0x4, switched live.
cd "$(dirname "$0")/.."
SIDES=sut RATES=51.5,53 TRIAL_S=60 OFFLINE_N=1000 POLICIES=0,0x2,0x4 \
  bash bench/gpu.sh vs-raw Server --engine-arg max_num_seqs=512 --engine-arg max_num_batched_tokens=65536
