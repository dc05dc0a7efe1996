#!/usr/bin/env bash
# machine 2: the 405B-width accuracy log, then Server trials on one engine (our SUT under LoadGen)
# It ran as .gpu-stage/job405*.sh on the device; from here it runs at the repository root.
cd "$(dirname "$0")/../../.."
source .gpu-stage/bin/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH VLLM_LOGGING_LEVEL=WARNING
STACK="--max-num-seqs 256 --max-num-batched-tokens 2048" MODE=accuracy N405=24 bash bench/gpu.sh offline-405b
mkdir -p /tmp/gpu-bench
D=/tmp/gpu-bench/profile_longmix_230_d41d8cd9.parquet
[ -f $D ] || python3 bench/profile_dataset.py --profile longmix --model bench/models/llama31_405b_16l --samples 230 --targets --out $D
python3 bench/server_vs_raw.py --scenario Server --benchmark llama3_1-405b --model bench/models/llama31_405b_16l \
  --dataset $D --engine-arg load_format=dummy --engine-arg skip_tokenizer_init=true \
  --engine-arg max_model_len=22016 --engine-arg quantization=fp8 --engine-arg kv_cache_dtype=fp8 \
  --engine-arg max_num_seqs=256 --engine-arg max_num_batched_tokens=2048 --ignore-eos --max-tokens 685 \
  --duration-s ${TRIAL_S:-240} --rates ${RATES:-0.30,0.36,0.42} --sides sut --json $OUT/vsraw_405b_server.json 2>&1 \
  | grep --line-buffered -E "^(engine|Offline|prefill|best|policy|  |.*[Ee]rror|Traceback)" | tee $OUT/vsraw_405b_server.log
