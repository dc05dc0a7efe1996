#!/usr/bin/env bash
# GPU measurements on one machine, in one command per part, with dummy weights (no checkpoint):
#   bench/gpu.sh offline   raw engine vs our Offline SUT under LoadGen vs the reference pattern,
#                          Llama-3.1-8B BF16 and FP8 + FP8 KV cache
#   bench/gpu.sh server    our Server SUT at increasing QPS (TTFT 2000 / TPOT 100 ms) and
#                          Interactive (500 / 30 ms) vs the one-query-at-a-time pattern
#   bench/gpu.sh scale-8b  (2 GPUs) Llama-3.1-8B FP8 on one GPU, DP 2 and TP 2, via `mlperf-vllm run`
#   bench/gpu.sh offline-70b [run args]  Llama-2-70B FP8 + FP8 KV on one GPU, OpenOrca's length
#                          profile with its output lengths (--output-lengths), N70 samples
#                          (default 24,576: the submission's query) through `mlperf-vllm run`
#   bench/gpu.sh sweep-70b [sweep args]  `mlperf-vllm sweep` of the 70B's Offline plan on one GPU
#                          (scripts/plans/llama2_70b_offline_h200.txt), N70 samples (default 1,000)
#   bench/gpu.sh calibrate-70b SCENARIO [calibrate args]  llama2-70b's Server or Interactive
#                          target by `calibrate --confirm` on OpenOrca's length profile, one GPU
#   bench/gpu.sh confirm-70b SCENARIO TARGET [run args]  one 600 s run of llama2-70b at TARGET QPS
#   bench/gpu.sh ray-70b   (4 GPUs) Llama-2-70B TP 2 x PP 2 over a two-node Ray cluster on the
#                          host, beside TP 4 on one node; a node lost mid-run (the part's header)
#   bench/gpu.sh tp2-70b   (2 GPUs) Llama-2-70B FP8, TP 2, via `mlperf-vllm run`
#   bench/gpu.sh tp8-405b  (8 GPUs) Llama-3.1-405B FP8, TP 8, the 405B mix's length profile
#                          (bench/models/llama31_405b_dummy: 126 layers, hidden 16384, 128/8 heads),
#                          N405 samples (default 800, ~20 minutes: start it with `detach`)
#   bench/gpu.sh offline-405b [run args]  one GPU: the 405B's width at 16 layers (one TP 8 GPU's
#                          share, bench/models/llama31_405b_16l) on the mix's length profile; MODE=
#                          accuracy: the accuracy log, scored on a CPU machine (the part's header)
#   bench/gpu.sh 405b-chain TP [run args]  (TP GPUs) the 405B with FP8-serialized dummy weights:
#                          Offline >= 600 s, Server, the accuracy path, one engine each (its header)
#   bench/gpu.sh confirm-405b SCENARIO TARGET [run args]  one 600 s run of it at TARGET QPS
#   bench/gpu.sh calibrate-405b SCENARIO [calibrate args]  its Server or Interactive search
#   bench/gpu.sh offline-full  Llama-3.1-8B FP8 Offline via `mlperf-vllm run` at the real query size:
#                          13,368 prompts (CNN/DailyMail length profile, mean input 870), 128
#                          output tokens, min_duration 0; then the quicker 2,000-prompt run used
#                          to rank configs (`offline-2k` alone). Engine flags for both: $STACK
#                          (default: vLLM's defaults), e.g.
#                          STACK="--max-num-seqs 512 --max-num-batched-tokens 65536"
#                          SUT options: WARMUP=N (untimed warm-up of N prompts before the test),
#                          ORDER=longest-first|shortest-first (samples to the engine by prompt
#                          length), PRICE=DOLLARS (adds $ per million output tokens)
#   bench/gpu.sh vs-raw SCENARIO [--engine-arg K=V ...]   the raw AsyncLLM under Poisson arrivals
#                          against our SUT under LoadGen, one engine, same rates and prompts
#                          (bench/server_vs_raw.py); RATES, POLICIES (prefill policies
#                          CAP[xEVERY[@MS]], live on the one engine), SUT_POLICIES (e.g.
#                          1536,best), SIDES (sut: our SUT alone, no raw replay), TRIAL_S
#   bench/gpu.sh confirm SCENARIO TARGET POLICY [run args]  one `mlperf-vllm run` at TARGET QPS for
#                          the conf's full min_duration (600 s) with --prefill-policy POLICY
#   bench/gpu.sh study SCENARIO [--engine-arg K=V ...] [-- RUN ARGS]  vs-raw, then `confirm` of
#                          the best policy at BACKOFF (0.95) x the rate where its SUT p99s reach
#                          the limits (else its best pass); RUN ARGS (--engine-stats, say) go to
#                          the confirmation alone, WARMUP=N to its warm-up (the bench has its own)
#   bench/gpu.sh parallel "PART ARGS" ...  (several GPUs) one part per GPU at once, each in its own
#                          $OUT/gpuI, TMPDIR and compile caches (the part's header)
#   bench/gpu.sh detach PART [args]   start a part in its own session (outlives the call; the
#                          machine must stay held), output under $HOME/gpu-job; `collect` (WAIT=S
#                          first) prints its progress and copies its files to $OUT (a folder as one .tgz)
#   bench/gpu.sh real-small PART [args]  bench/real_small.sh's parts (the real small model:
#                          accuracy, EOS, FP8, TEST06), e.g. `detach real-small serve Server 300`
#   bench/gpu.sh dp-8b SCENARIO ROUTING TARGET [calibrate args]  (N GPUs, CUDA_VISIBLE_DEVICES)
#                          Llama-3.1-8B on DP N engines behind one SUT, ROUTING ours|vllm
#                          (--dp-routing): `calibrate` on engines/h200/'s line for SCENARIO ($LINES
#                          another folder of lines), engine stats on: the N-engine Offline bound (MEASURE,
#                          default 1,000 x N samples), then one trial of TRIAL_S (default 600)
#                          at TARGET QPS, on SAMPLES (default 2,000 x N) random prompts, 128 out
#   bench/gpu.sh dp-8b-rounds SERVER_QPS INTERACTIVE_QPS  (4 GPUs) two rounds of dp-8b side by
#                          side, ours on GPUs 0-1 and vLLM's routing on 2-3, same prompts and
#                          rate: Server, then Interactive (each round in $OUT/<scenario>);
#                          TRIAL_S_<Scenario> a round's trial length (default TRIAL_S, 600)
#   bench/gpu.sh dp-8b-all  (4 GPUs) the host's Offline (DP 2 beside two single engines), then
#                          dp-8b-rounds at SERVER_FRAC / INTERACTIVE_FRAC x 2 x one engine's rate
#   bench/gpu.sh host-dp4  (4 GPUs) the host path: one engine's Offline per GPU, then Server on DP 4
#                          at 0.96 of it behind --frontend per-engine for 600 s, its process tree
#                          profiled, then the stand-in host-path bench on the CPUs (the part's header)
#   bench/gpu.sh step-8b   (one GPU) the 8B engine step: Offline with the line, with linear_backend=torch
#                          and profiled, then Server 0.94 / Interactive 0.85 profiled and Server levers at
#                          0.96 (768 sequences, a 16k prefill cap), one after another (the part's header)
#   bench/gpu.sh all       offline + server
#   bench/gpu.sh probe     vLLM's own defaults (scheduler, compilation, fusion passes) as JSON
#   bench/gpu.sh tune NAME [KEY=VALUE ...]   one engine config, FP8 + FP8 KV: a cold pass, then
#                          warm passes per sample order (bench/engine_tuning.py; ORDERS, SAMPLES)
#   bench/gpu.sh full NAME [run args ...]    the submission-size Offline query (13,368 samples,
#                          CNN/DailyMail length profile) through `mlperf-vllm run`
# Needs vLLM on the machine: on the lent offline GPU machine, stage it first with the gpu-stage
# kit (its README: two commands), then run this with `.gpu-stage/bin` sent along (once this tree
# no longer fits beside the kit's 62 MB pieces in a 64 MiB call, send the pieces of
# bench/device/stage_pieces.sh instead: `cut` here, `recv` there, one call per piece). Results go
# to $OUT (or bench/gpu-out) as logs and JSON; bench/record/RESULTS.md records what was measured.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -f .gpu-stage/bin/env.sh ]; then source .gpu-stage/bin/env.sh; fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
OUT=${OUT:-bench/gpu-out}; mkdir -p "$OUT"
MODEL=${MODEL:-.gpu-stage/bin/llama31_8b_dummy}
SAMPLES=${SAMPLES:-1000}
BENCHMARK=${BENCHMARK:-llama3_1-8b}
REPEATS=${REPEATS:-2}
# calibrate-*/confirm: output cap, and PROFILE=openorca|cnn_dailymail (bench/profile_dataset.py;
# PROFILE_ARGS: its flags) for the benchmark's prompt and output lengths instead of random
# prompts of one output length
MAXTOK=${MAXTOK:-128}
MAXLEN405=${MAXLEN405:-22016}  # the 405B parts' max_model_len: 20,000-token prompts + 2,000 out
DUMMY=(--engine-arg load_format=dummy --engine-arg skip_tokenizer_init=true
       --engine-arg max_model_len="${MAXLEN8B:-4096}")  # MAXLEN8B: CPU dry runs on the tiny model
FP8=(--engine-arg quantization=fp8 --engine-arg kv_cache_dtype=fp8)
[ -n "${NO_FP8:-}" ] && FP8=()  # CPU dry runs of a part

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import vllm, mlperf_loadgen; print('vllm', vllm.__version__)" | tee -a "$OUT/gpu.txt"

offline() {  # name, extra args...
  local name=$1; shift
  python3 bench/offline_overhead.py --model "$MODEL" --random-prompts 870 --samples "$SAMPLES" \
    --repeats "$REPEATS" --reference-once --ignore-eos "${DUMMY[@]}" "$@" --json "$OUT/offline_$name.json" \
    2>&1 | grep -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" | tee "$OUT/offline_$name.log"
}

server() {  # name, extra args... (engine flags as --engine-arg KEY=VALUE; RATES=a,b fixes the
  local name=$1; shift  # targets, else a search bounded by the same engine's Offline rate)
  local rates=(); [ -n "${RATES:-}" ] && rates=(--rates "$RATES")
  python3 bench/server_capacity.py --model "$MODEL" --random-prompts 870 --samples 2000 \
    "${DUMMY[@]}" --ignore-eos --max-tokens 128 --duration-s "${TRIAL_S:-60}" \
    --offline-samples 2000 --warmup-samples 300 "${rates[@]}" "$@" --json "$OUT/server_$name.json" \
    2>&1 | grep -E "^(engine|warm|Offline|  |sustained|.*[Ee]rror)" | tee "$OUT/server_$name.log"
}

# `mlperf-vllm calibrate --confirm` on the random-prompt set: trials on one engine, then the
# written target run for the conf's full min_duration (600 s), stepping down until one holds.
cli_calibrate() {  # scenario, run args... (NO_CONFIRM=1: the trials alone, no 600 s run)
  local scenario=$1; shift
  local work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"
  local confirm=(--confirm); [ -n "${NO_CONFIRM:-}" ] && confirm=()
  pick_dataset "$MODEL" "${MEAN:-870}"
  python3 -m harness.cli calibrate --benchmark "$BENCHMARK" --scenario "$scenario" \
    --model "$MODEL" --dataset "$DATA" --output "$work/calibrate_$scenario" "${confirm[@]}" \
    --measure-samples "${MEASURE:-2000}" --trial-s "${TRIAL_S:-60}" --ignore-eos --max-tokens "$MAXTOK" \
    "${LENGTHS[@]}" "${DUMMY[@]}" "$@" 2>&1 | grep --line-buffered -E "calibrate|error|Error" | tee "$OUT/calibrate_$scenario.log"
  cp "$work/calibrate_$scenario/user.conf" "$OUT/calibrate_$scenario.conf" 2>/dev/null
  cp "$work/calibrate_$scenario/calibration.json" "$OUT/calibrate_$scenario.json" 2>/dev/null
  # the trials' LoadGen logs and pictures (the per-query trace aside)
  [ -d "$work/calibrate_$scenario/trials" ] && tar czf "$OUT/calibrate_${scenario}_trials.tgz" \
    -C "$work/calibrate_$scenario" --exclude=mlperf_log_trace.json --exclude='*.lock' trials
  local d; for d in "$work/calibrate_$scenario"/confirm-*/; do
    [ -d "$d" ] && keep_run "$d" "confirm_${scenario}_$(basename "$d")"; done
  [ -f "$work/calibrate_$scenario/calibration.json" ]  # the part's status: its record exists
}

keep_run() {  # run folder, tag: its LoadGen summary and detail log, picture and result.json to $OUT/TAG_*
  cp "$1/performance/mlperf_log_summary.txt" "$OUT/$2_summary.txt" 2>/dev/null
  cp "$1/performance/mlperf_log_detail.txt" "$OUT/$2_detail.txt" 2>/dev/null
  cp "$1/timeline.png" "$OUT/$2_timeline.png" 2>/dev/null
  cp "$1/accuracy/mlperf_log_accuracy.json" "$OUT/$2_accuracy_log.json" 2>/dev/null
  # the part's status: whether the run left its result (an Offline run has no timeline and a
  # performance run no accuracy log; `parallel` counts the parts that failed)
  cp "$1/result.json" "$OUT/$2_result.json" 2>/dev/null
  # `run --profile`: the window's summary and vLLM's kernel table of rank 0 (not the traces)
  cp "$1/profile/summary.json" "$OUT/$2_profile.json" 2>/dev/null
  local t; for t in "$1"/profile/*rank0*profiler_out*.txt "$1"/profile/*profiler_out_0.txt \
      "$1"/profile/engine0/*profiler_out*.txt; do  # engine0/: --frontend per-engine
    [ -f "$t" ] && cp "$t" "$OUT/$2_profiler_out.txt"; done
  return 0  # what a run left is the part's status (its result.json), not the last copy's
}

random_dataset() {  # model, mean input length -> path of a JSON set of $SAMPLES prompts
  local model=$1 mean=$2 work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"
  local data="$work/data_${mean}_${SAMPLES}.json"
  [ -f "$data" ] || python3 -c "
import json, sys; from pathlib import Path; from bench.offline_overhead import random_prompts
p = random_prompts(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), seed=5)
Path(sys.argv[4]).write_text(json.dumps([{'tok_input': x} for x in p]))" \
    "$model" "$SAMPLES" "$mean" "$data"
  echo "$data"
}

# Sets DATA (the dataset's path) and LENGTHS (--output-lengths of the profile's output lengths,
# empty for random prompts): $PROFILE's length profile, else $SAMPLES random prompts of MEAN.
pick_dataset() {  # model, mean input length
  LENGTHS=()
  if [ -n "${PROFILE:-}" ]; then
    DATA=$(profile_dataset "$1"); LENGTHS=(--output-lengths tok_output_len)
  else
    DATA=$(random_dataset "$1" "$2")
  fi
}

profile_dataset() {  # model -> path of a set of $SAMPLES prompts and output lengths (and targets) with
  local model=$1 work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"  # $PROFILE's length profile
  local extra=(); read -r -a extra <<< "${PROFILE_ARGS:-}"  # e.g. "--output-max 48" (CPU dry runs)
  local tag; tag=$(printf '%s' "${PROFILE_ARGS:-}" | md5sum | cut -c1-8)
  local ext=json; [ "$PROFILE" = longmix ] && ext=parquet  # the mix: ~9,400 tokens a prompt
  local data="$work/profile_${PROFILE}_${SAMPLES}_$tag.$ext"
  [ -f "$data" ] || python3 bench/profile_dataset.py --profile "$PROFILE" --model "$model" --targets \
    --samples "$SAMPLES" "${extra[@]}" --out "$data" | tee -a "$OUT/datasets.txt" >&2
  echo "$data"
}

# One LoadGen Offline run through `mlperf-vllm run` (the real CLI), on random prompts, under
# the preset $BENCHMARK (default llama3_1-8b; the 70B and 405B parts set theirs).
cli_offline() {  # name, model, mean input length, max tokens, run args...
  local name=$1 model=$2 mean=$3 maxtok=$4; shift 4
  local work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"
  local conf="$work/offline_all.conf"
  pick_dataset "$model" "$mean"  # with $PROFILE: the benchmark's output lengths, not $maxtok each
  offline_conf "$SAMPLES" > "$conf"
  local mode=(--mode "${MODE:-performance}")  # MODE=accuracy: the log only (scored elsewhere),
  if [ "${MODE:-performance}" != performance ]; then  # each output to $maxtok (`run` refuses
    mode+=(--no-evaluate); LENGTHS=()                 # --output-lengths in accuracy mode)
  fi
  python3 -m harness.cli run --benchmark "$BENCHMARK" --scenario Offline "${mode[@]}" \
    --model "$model" --dataset "$DATA" --output "$work/run_$name" --user-conf "$conf" \
    --no-mlflow --no-progress --ignore-eos --max-tokens "$maxtok" "${LENGTHS[@]}" "${DUMMY[@]}" \
    "${SUT_OPTS[@]}" "$@" 2>&1 | grep -E "validity|tokens/s|samples|duration|warm-up|cost|profile:|error|Error" \
    | sed "s/^/[$name] /" \
    | tee "$OUT/run_$name.log"
  keep_run "$work/run_$name" "run_$name"
}

# The 405B parts' Offline run: the mix's length profile, FP8 + FP8 KV, max_model_len $MAXLEN405
offline_405b() {  # name, model, samples, run args...
  local name=$1 model=$2 n=$3; shift 3
  BENCHMARK=llama3_1-405b PROFILE=longmix SAMPLES=$n cli_offline "${name}_${TAG}$n" "$model" 0 2000 \
    "${FP8[@]}" --engine-arg max_model_len="$MAXLEN405" "${STACK_ARGS[@]}" "$@"
}

# One Offline query of the whole set, each prompt once; no min duration (throughput study, not a
# submission run) unless MIN_MS sets one (a 600 s run shorter than the rules' query).
offline_conf() {  # samples -> a user.conf on stdout
  # OFFLINE_QPS: LoadGen issues max(min_query_count, 1.1 x target_qps x min_duration) samples, so
  # a run with a min duration and fewer samples than 660 x target_qps needs it under 1
  printf '*.Offline.min_duration = %s\n*.Offline.min_query_count = %s\n*.Offline.target_qps = %s\n' \
    "${MIN_MS:-0}" "$1" "${OFFLINE_QPS:-1}"
}

tune() {  # name, KEY=VALUE engine args...
  local name=$1; shift
  local extra=(); for kv in "$@"; do extra+=(--engine-arg "$kv"); done
  python3 bench/engine_tuning.py --model "$MODEL" --samples "$SAMPLES" --name "$name" \
    --orders "${ORDERS:-arrival,longest-first}" --repeats "$REPEATS" \
    --engine-arg load_format=dummy --engine-arg skip_tokenizer_init=true \
    --engine-arg max_model_len=4096 --engine-arg quantization=fp8 --engine-arg kv_cache_dtype=fp8 \
    "${extra[@]}" --json "$OUT/tune.jsonl" 2>&1 \
    | grep -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" | tee "$OUT/tune_$name.log" \
    | grep -E '"summary"|"cold"|Error|error' | cut -c1-400
}

vs_raw() {  # scenario, engine args...
  local scenario=$1; shift
  local pol=(); [ -n "${POLICIES:-}" ] && pol+=(--policies "$POLICIES")
  [ -n "${SUT_POLICIES:-}" ] && pol+=(--sut-policies "$SUT_POLICIES")
  [ -n "${SIDES:-}" ] && pol+=(--sides "$SIDES")
  python3 bench/server_vs_raw.py --scenario "$scenario" --model "$MODEL" --random-prompts "${MEAN:-870}" \
    --samples 2000 "${DUMMY[@]}" "${FP8[@]}" --ignore-eos --max-tokens 128 \
    --duration-s "${TRIAL_S:-30}" --rates "${RATES:?set RATES=a,b}" --warmup-samples 300 \
    --offline-samples "${OFFLINE_N:-1000}" "${pol[@]}" "$@" --json "$OUT/vsraw_$scenario.json" \
    2>&1 | grep --line-buffered -E "^(engine|Offline|prefill|best|policy|  |.*[Ee]rror|Traceback)" \
    | tee "$OUT/vsraw_$scenario.log"
}

# One `mlperf-vllm run` at a fixed target for the conf's full min_duration (mlperf.conf: 600 s).
# CONFIRM_N: the dataset's size. LoadGen pads a Server run to whole passes over it (equal
# issue), so a 600 s run lasts ceil(600 x TARGET / N) x N / TARGET s: pick N to end near 600.
# POLICY "-": no --prefill-policy (vLLM's own scheduler).
cli_confirm() {  # scenario, target QPS, prefill policy, run args...
  local scenario=$1 target=$2 policy=$3; shift 3
  local work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"
  local pol=(); [ "$policy" != - ] && pol=(--prefill-policy "$policy")
  SAMPLES=${CONFIRM_N:-2000} pick_dataset "$MODEL" "${MEAN:-870}"
  local name=$BENCHMARK; [ "$scenario" = Interactive ] && name=$BENCHMARK-interactive
  local conf="$work/confirm_$scenario.conf" out="$work/confirm_${scenario}_$target"
  printf '%s.Server.target_qps = %s\n' "$name" "$target" > "$conf"
  # CPU dry runs only: a shorter run than mlperf.conf's 600 s
  [ -n "${CONFIRM_MS:-}" ] && printf '*.Server.min_duration = %s\n' "$CONFIRM_MS" >> "$conf"
  # MINQ: LoadGen's early stopping certifies a p99 only from 459 queries (662 with one over a
  # limit); a slow benchmark's 600 s at its target issues fewer (the 405B at ~0.5 QPS: 300)
  [ -n "${MINQ:-}" ] && printf '%s.Server.min_query_count = %s\n' "$name" "$MINQ" >> "$conf"
  python3 -m harness.cli run --benchmark "$BENCHMARK" --scenario "$scenario" --mode performance \
    --model "$MODEL" --dataset "$DATA" --output "$out" --user-conf "$conf" --overwrite \
    --no-mlflow --no-progress --ignore-eos --max-tokens "$MAXTOK" "${LENGTHS[@]}" "${DUMMY[@]}" \
    "${FP8[@]}" "${pol[@]}" "${SUT_OPTS[@]}" "$@" 2>&1 | grep --line-buffered -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" \
    | tee "$OUT/confirm_$scenario.log" | grep -E "validity|VALID|TTFT|TPOT|samples|kept|LoadGen will|warm-up|error|Error"
  keep_run "$out" "confirm_$scenario"
}

study() {  # scenario, engine args... [-- run-only args]: vs-raw, then confirm the best policy
  local scenario=$1; shift
  local engine=() only=()  # flags after `--` go to the confirmation's run alone (the bench
  while [ $# -gt 0 ]; do   # refuses `run` flags such as --engine-stats)
    if [ "$1" = -- ]; then shift; only=("$@"); break; fi
    engine+=("$1"); shift
  done
  set -- "${engine[@]}"
  vs_raw "$scenario" "$@"
  local pick; pick=$(python3 - "$OUT/vsraw_$scenario.json" "${BACKOFF:-0.95}" <<'PY'
import json, sys
doc, backoff = json.load(open(sys.argv[1])), float(sys.argv[2])
rows = {(c["policy"], c["side"]): c for c in doc.get("capacity", [])}
sut = [c for (p, s), c in rows.items() if s == "sut" and (c["crossing"] or c["best_pass"])]
def target(c):
    return round(c["crossing"] * backoff, 2) if c["crossing"] else c["best_pass"]
best = max(sut, key=target, default=None)
print(f"{best['policy']} {target(best)}" if best else "none 0")
PY
)
  echo "study: confirm with policy/target: $pick" | tee -a "$OUT/vsraw_$scenario.log"
  read -r policy target <<< "$pick"
  if [ -z "${policy:-}" ] || [ "$policy" = none ]; then echo "study: no policy passed"; return 1; fi
  cli_confirm "$scenario" "$target" "$policy" "$@" "${only[@]}"
}

probe() {
  python3 - <<'PY' 2>&1 | grep -v -E "^(INFO|DEBUG|WARNING)" | tee "$OUT/probe.txt"
import dataclasses, json, vllm
from vllm.config import CompilationConfig, SchedulerConfig
print("vllm", vllm.__version__)
for cls in (CompilationConfig, SchedulerConfig):
    try:
        fields = {f.name: repr(f.default)[:80] for f in dataclasses.fields(cls)}
    except TypeError:
        fields = {k: repr(v)[:80] for k, v in getattr(cls, "model_fields", {}).items()}
    print(cls.__name__, json.dumps(fields))
try:
    from vllm.config import PassConfig
    print("PassConfig", json.dumps({f.name: repr(f.default)[:60] for f in dataclasses.fields(PassConfig)}))
except Exception as exc:
    print("PassConfig?", exc)
from vllm.engine.arg_utils import EngineArgs
print("EngineArgs", sorted(f.name for f in dataclasses.fields(EngineArgs)))
PY
}
# Options of our SUT for cli_offline runs (see the header).
SUT_OPTS=()
[ -n "${WARMUP:-}" ] && SUT_OPTS+=(--warmup-samples "$WARMUP")
[ -n "${ORDER:-}" ] && SUT_OPTS+=(--offline-order "$ORDER")
[ -n "${PRICE:-}" ] && SUT_OPTS+=(--price-per-hour "$PRICE")
read -r -a STACK_ARGS <<< "${STACK:-}"
TAG=${TAG:-${WARMUP:+warm${WARMUP}_}${ORDER:+${ORDER}_}}

case "${1:-all}" in
  scale-8b)  # 2 GPUs: one GPU, DP 2, TP 2 for Llama-3.1-8B FP8 + FP8 KV
    CUDA_VISIBLE_DEVICES=0 cli_offline 8b_fp8_1gpu "$MODEL" 870 128 "${FP8[@]}"
    cli_offline 8b_fp8_dp2 "$MODEL" 870 128 "${FP8[@]}" --data-parallel-size 2
    cli_offline 8b_fp8_tp2 "$MODEL" 870 128 "${FP8[@]}" --tensor-parallel-size 2 ;;
  tp8-405b)  # 8 GPUs: Llama-3.1-405B FP8 + FP8 KV, TP 8, on the mix's length profile (as
    # offline-405b), N405 samples in one query (default 800: ~20 minutes at the ~0.6-0.75/s the
    # one-H200 stand-in forecasts, inside a lent machine's 30; the benchmark's 8,313 take 3-4
    # hours, an owned machine's run): longer than a call, so `bash bench/gpu.sh detach
    # tp8-405b`, then `WAIT=540 bash bench/gpu.sh collect` in the calls after; engine flags $STACK
    shift; offline_405b "405b_fp8_tp8" "${MODEL405:-bench/models/llama31_405b_dummy}" \
      "${N405:-800}" --tensor-parallel-size 8 "$@" ;;
  405b-chain)  # TP GPUs (CUDA_VISIBLE_DEVICES): Llama-3.1-405B with FP8-serialized dummy weights
    # (built in FP8 from the start: MODEL405, default bench/models/llama31_405b_fp8, all 126
    # layers, for TP 4 on 4 x H200; bench/models/llama31_405b_63l_fp8 at TP 2 does one TP 4 GPU's
    # work on each of 2 GPUs), one engine start per step:
    #   1. Offline, one query of N_OFF samples (default 260) of the mix's profile for MIN_MS
    #      (default 600,000): VALID but for the query size when it lasts >= 600 s; line STACK_OFF
    #   2. Server at FRAC (default 0.4) x step 1's samples/s for SERVER_MS (default 240,000) and
    #      1.3 x the queries that issues (one pass over that many samples: the count, not the
    #      duration, ends the run, so LoadGen pads no second pass), engine stats on; line
    #      STACK_SRV (default 512 tokens a step: the 405B's 175 ms TPOT limit at this per-GPU
    #      share, bench/record/RESULTS.md)
    #   3. the accuracy path: MODE=accuracy on N_ACC samples (default 16), outputs to 2,000
    # Each step in $OUT/offline, server, accuracy; STEPS (default "1 2 3") picks some
    shift; tp=${1:?tensor parallel size}; shift; base=$OUT
    model=${MODEL405:-bench/models/llama31_405b_fp8}
    off=${STACK_OFF:---max-num-seqs 256 --max-num-batched-tokens 2048}
    srv=${STACK_SRV:---max-num-seqs 256 --max-num-batched-tokens 512}
    n=${N_OFF:-260}; min_ms=${MIN_MS:-600000}
    for step in ${STEPS:-1 2 3}; do
      case $step in
        1) qps=$(awk -v n="$n" -v ms="$min_ms" 'BEGIN { q = ms ? n / (1.1 * ms / 1000) : 1;
             printf "%.4f", q < 1 ? q : 1 }')
           OUT=$base/offline MODEL405=$model MIN_MS=$min_ms OFFLINE_QPS=$qps N405=$n STACK=$off \
             bash bench/gpu.sh offline-405b --tensor-parallel-size "$tp" "$@" ;;
        2) read -r q m < <(python3 - "$base/offline" "${FRAC:-0.4}" "${SERVER_MS:-240000}" <<'PY'
import glob, json, math, sys
rate = [json.load(open(f))["performance"]["samples_per_second"]
        for f in glob.glob(sys.argv[1] + "/run_*_result.json")]
q = round(float(sys.argv[2]) * rate[0], 3) if rate else 0
print(q, max(2, math.ceil(1.3 * q * float(sys.argv[3]) / 1000)))
PY
)
           echo "405b-chain: Server at $q QPS, $m samples"
           [ "${m:-0}" -gt 0 ] && [ "$q" != 0 ] || { echo "405b-chain: no Offline rate"; continue; }
           OUT=$base/server MODEL405=$model CONFIRM_MS=${SERVER_MS:-240000} MINQ=$m N405=$m \
             STACK=$srv bash bench/gpu.sh confirm-405b Server "$q" --tensor-parallel-size "$tp" \
             --engine-stats "$@" ;;
        3) OUT=$base/accuracy MODEL405=$model MODE=accuracy N405=${N_ACC:-16} STACK=$off \
             bash bench/gpu.sh offline-405b --tensor-parallel-size "$tp" "$@" ;;
      esac
      echo "405b-chain: step $step done"
    done ;;
  offline-405b)  # one GPU: the 405B's full width at 16 layers (bench/models/llama31_405b_16l:
    # one TP 8 GPU's share of the real model, bench/memory_plan.py), FP8 + FP8 KV, on the 405B
    # mix's length profile (PROFILE longmix of bench/profile_dataset.py: prompts to 20,000
    # tokens, outputs mean 684.68 to 2,000; its dataset carries the mix's targets and per-row
    # metrics), N405 samples (default 200) in one query, max_model_len 22,016 (20,000 + 2,000,
    # whole 16-token blocks); engine flags $STACK and any given; MODEL405 for CPU dry runs.
    # MODE=accuracy: outputs of max_tokens (2,000; `run` cuts no accuracy output short), so fewer
    # samples (N405=50); the accuracy log comes back as run_*_accuracy_log.json; on a CPU machine,
    #   python bench/profile_dataset.py --profile longmix --model bench/models/llama31_405b_16l \
    #     --samples N405 --targets --tokenizer-out TOK --out DATA   (the same file, one seed)
    #   mlperf-vllm evaluate --benchmark llama3_1-405b --accuracy-log LOG --dataset DATA --tokenizer TOK
    shift; m405=${MODEL405:-bench/models/llama31_405b_16l}
    offline_405b "405b_$(basename "$m405")_${MODE:-perf}" "$m405" "${N405:-200}" "$@" ;;
  confirm-405b)  # one GPU: one run of offline-405b's model and profile in SCENARIO at TARGET
    # QPS (the 405B's limits: Server TTFT 6,000 / TPOT 175 ms) for 600 s and MINQ queries
    # (default 662: early stopping's count with one query over a limit; 1,324 s at 0.5 QPS),
    # N405 samples (default 331: two whole passes); POLICY as confirm
    shift; sc=${1:?scenario: Server or Interactive}; tq=${2:?target QPS}; shift 2
    BENCHMARK=llama3_1-405b MODEL=${MODEL405:-bench/models/llama31_405b_16l} PROFILE=longmix \
      MAXTOK=2000 CONFIRM_N=${N405:-331} MINQ=${MINQ:-662} cli_confirm "$sc" "$tq" "${POLICY:--}" \
      --engine-arg max_model_len="$MAXLEN405" "${STACK_ARGS[@]}" "$@" ;;
  calibrate-405b)  # one GPU: `calibrate` of offline-405b's model and profile in SCENARIO, trials
    # of TRIAL_S (default 300 s), N405 samples (default 300; MEASURE of them, default 100, for
    # the Offline bound); NO_CONFIRM=1 the trials alone
    shift; sc=${1:?scenario: Server or Interactive}; shift
    BENCHMARK=llama3_1-405b MODEL=${MODEL405:-bench/models/llama31_405b_16l} PROFILE=longmix \
      MAXTOK=2000 SAMPLES=${N405:-300} MEASURE=${MEASURE:-100} TRIAL_S=${TRIAL_S:-300} \
      cli_calibrate "$sc" "${FP8[@]}" --engine-arg max_model_len="$MAXLEN405" "${STACK_ARGS[@]}" "$@" ;;
  offline-70b)  # one GPU: Llama-2-70B FP8 + FP8 KV on OpenOrca's length profile (inputs mean 308,
    # outputs mean 294.45 up to 1,024: bench/profile_dataset.py), N70 samples (default the
    # submission's 24,576) in one query; engine flags $STACK and any given; MODEL70 for CPU dry runs;
    # max_model_len 2,048 (1,024 in + 1,024 out) as in the sweep. A 600 s run of the rules' length
    # but not its query size: MIN_MS=600000 N70=<1.1 x 600 x samples/s>
    shift; n=${N70:-24576}
    BENCHMARK=llama2-70b PROFILE=openorca SAMPLES=$n cli_offline "70b_fp8_${TAG}$n" \
      "${MODEL70:-.gpu-stage/bin/llama2_70b_dummy}" 0 1024 "${FP8[@]}" \
      --engine-arg max_model_len=2048 "${STACK_ARGS[@]}" "$@" ;;
  sweep-70b)  # one GPU: `mlperf-vllm sweep` of scripts/plans/llama2_70b_offline_h200.txt (PLAN70
    # another plan; KIND isolation|stacked; REPEATS) on N70 samples (default 1,000) of OpenOrca's
    # length profile, one query each, no min duration; the sweep folder goes to $OUT/sweep_70b.
    # NO_FP8 (CPU dry runs): the plan without its FP8 lines, engines eager
    shift; n=${N70:-1000}; model=${MODEL70:-.gpu-stage/bin/llama2_70b_dummy}
    work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"
    plan=${PLAN70:-scripts/plans/llama2_70b_offline_h200.txt}
    if [ -n "${NO_FP8:-}" ]; then
      grep -v -E "quantization=fp8|kv_cache_dtype=fp8" "$plan" > "$work/plan70.txt"
      echo "baseline --engine-arg enforce_eager=true" >> "$work/plan70.txt"; plan=$work/plan70.txt
    fi
    SAMPLES=$n PROFILE=openorca pick_dataset "$model" 0
    conf="$work/sweep70.conf"; offline_conf "$n" > "$conf"
    MODEL=$model DATASET=$DATA USER_CONF=$conf python3 -m harness.cli sweep "$plan" \
      --kind "${KIND:-isolation}" --repeats "$REPEATS" --no-mlflow --output "$OUT/sweep_70b" \
      --config-timeout "${CONFIG_S:-900}" "$@" 2>&1 \
      | grep --line-buffered -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG|WARNING)" \
      | tee "$OUT/sweep_70b.log" ;;
  calibrate-70b)  # one GPU: `calibrate --confirm` of llama2-70b in SCENARIO (Server|Interactive) on
    # OpenOrca's length profile (N70 samples, default 1,000: LoadGen pads the confirmation to
    # whole passes over them; MEASURE of them for the Offline bound), FP8 + FP8 KV,
    # max_model_len 2,048, engine flags $STACK and any given. Trials of TRIAL_S (default 240 s:
    # a 70B sample takes 10-60 s near capacity, and a trial needs several in its steady part)
    shift; sc=${1:?scenario: Server or Interactive}; shift
    BENCHMARK=llama2-70b MODEL=${MODEL70:-.gpu-stage/bin/llama2_70b_dummy} PROFILE=openorca \
      MAXTOK=1024 SAMPLES=${N70:-1000} TRIAL_S=${TRIAL_S:-240} cli_calibrate "$sc" "${FP8[@]}" \
      --engine-arg max_model_len=2048 "${STACK_ARGS[@]}" "$@" ;;
  confirm-70b)  # one GPU: one 600 s `mlperf-vllm run` of llama2-70b in SCENARIO at TARGET QPS on
    # OpenOrca's profile (N70 samples, default 1,000), FP8 + FP8 KV, max_model_len 2,048, engine
    # flags $STACK and any given (--warmup-samples N: each warm-up sample runs to its length);
    # POLICY a --prefill-policy (default "-": vLLM's own scheduler)
    shift; sc=${1:?scenario: Server or Interactive}; tq=${2:?target QPS}; shift 2
    BENCHMARK=llama2-70b MODEL=${MODEL70:-.gpu-stage/bin/llama2_70b_dummy} PROFILE=openorca \
      MAXTOK=1024 CONFIRM_N=${N70:-1000} cli_confirm "$sc" "$tq" "${POLICY:--}" \
      --engine-arg max_model_len=2048 "${STACK_ARGS[@]}" "$@" ;;
  layout-70b)  # one layout of Llama-2-70B (CUDA_VISIBLE_DEVICES, parallel flags as args): one
    # engine start, its Offline rate through the streaming SUT on MEASURE samples (default N70),
    # then TRIALS (default 2) trials of SCENARIO (default Interactive) of TRIAL_S (default 120 s)
    # from FRAC (default 0.5) x that rate (`calibrate --start-fraction`, no confirmation);
    # N70 samples (default 1,000) of OpenOrca's profile; engine flags $STACK and any given
    shift; sc=${SCENARIO:-Interactive}
    NO_CONFIRM=1 MEASURE=${MEASURE:-${N70:-1000}} TRIAL_S=${TRIAL_S:-120} bash bench/gpu.sh \
      calibrate-70b "$sc" --start-fraction "${FRAC:-0.5}" --trials "${TRIALS:-2}" "$@" ;;
  layouts-70b)  # 4 GPUs (H200s: a TP 1 70B needs their memory): Llama-2-70B per layout, per GPU,
    # on one host. ROUNDS (default "1 2"):
    #   1: on GPUs 0-1, a 600 s Interactive run of TP 2 at IQ600 QPS (default 10; --warmup-samples
    #      100, N600 samples, default 2,000); beside it on GPUs 2-3, TP 2 three times in a row:
    #      layout-70b (2 x M samples), the Offline SUT on N2 samples (default 1,200) profiled over
    #      PROFILE_OFF (default 20@600), an Interactive run of INT_MS (default 90,000) at IQ
    #      (default the layout's first trial) profiled over PROFILE_INT (default 20@1500)
    #   2: TP 4 on GPUs 0-3 (layout-70b, 4 x M)
    # M (default 400); STACK applies to every engine
    shift; base=$OUT; m=${M:-400}
    for r in ${ROUNDS:-1 2}; do
      case $r in
        1) TMPDIR=${TMPDIR:-/tmp}/r1a OUT=$base/round1/confirm bash bench/gpu.sh parallel \
             "CUDA_VISIBLE_DEVICES=0,1 N70=${N600:-2000} confirm-70b Interactive ${IQ600:-10} --tensor-parallel-size 2 --warmup-samples 100" &
           first=$!
           ( export TMPDIR=${TMPDIR:-/tmp}/r1b  # one compile cache for the three TP 2 engines
             OUT=$base/round1/tp2 bash bench/gpu.sh parallel \
               "CUDA_VISIBLE_DEVICES=2,3 N70=$((2 * m)) layout-70b --tensor-parallel-size 2"
             OUT=$base/round1/tp2-offline bash bench/gpu.sh parallel \
               "CUDA_VISIBLE_DEVICES=2,3 N70=${N2:-1200} offline-70b --tensor-parallel-size 2 --profile ${PROFILE_OFF:-20@600}"
             iq=${IQ:-$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["trials"][0]["target_qps"])' \
               "$base/round1/tp2/gpu0/calibrate_Interactive.json")}
             echo "layouts-70b: the profiled Interactive run at $iq QPS"
             OUT=$base/round1/tp2-interactive bash bench/gpu.sh parallel \
               "CUDA_VISIBLE_DEVICES=2,3 CONFIRM_MS=${INT_MS:-90000} N70=$((2 * m)) confirm-70b Interactive $iq --tensor-parallel-size 2 --profile ${PROFILE_INT:-20@1500}"
           ) &
           wait "$first" $! ;;
        2) OUT=$base/round2 bash bench/gpu.sh parallel \
             "CUDA_VISIBLE_DEVICES=0,1,2,3 N70=$((4 * m)) layout-70b --tensor-parallel-size 4" ;;
      esac
      echo "layouts-70b: round $r done"
    done ;;
  ray-70b)  # 4 GPUs: Llama-2-70B FP8 + FP8 KV over a two-node Ray cluster on this one host (the
    # runbook's own commands, scripts/multinode.sh: ray-head on GPUs 0-1 at 127.0.0.1, ray-worker
    # on GPUs 2-3 at 127.0.0.2, ray-check), TP 2 x PP 2 (RAY_LAYOUT) with vLLM's Ray executor,
    # beside TP 4 on one node with its multiprocessing executor (MP_LAYOUT). STEPS (default
    # "up ray-off ray-cal fault down mp-off mp-cal"), each in $OUT/STEP:
    #   up       the cluster (OBJECT_STORE_BYTES per node, default 4 GB; GPUS_PER_NODE 2)
    #   ray-off  `run` Offline of N_OFF samples (default 1,600) of OpenOrca's profile: VALID, the
    #            cluster block in result.json
    #   ray-cal  layout-70b Server: the Offline bound on MEASURE (default 800), then TRIALS
    #            (default 2) trials of TRIAL_S (default 90) from FRAC (default 0.5) of it
    #   fault    a Server `run` at FAULT_QPS (default 4) whose second node's raylet is killed
    #            FAULT_AFTER s (default 30) into LoadGen's issuing (bench/ray_fault.py)
    #   down     ray stop
    #   mp-off, mp-cal  the same two on MP_LAYOUT (GPUs 0-3, no Ray)
    # STACK defaults to --gpu-memory-utilization 0.85 for both layouts: at vLLM's 0.9 the PP
    # stage's first 16,384-token step ran out of memory on 80 GB cards (bench/record/RESULTS.md).
    # The raylets run in the directory they were started from: a second `detach` (which
    # replaces $HOME/gpu-job/repo) needs `up` again, or every Ray worker dies at its start.
    # CPU dry runs: RAY_LAYOUT="--tensor-parallel-size 2", GPUS_PER_NODE=1, the tests' Ray
    # platform plugin on PYTHONPATH (tests/test_ray_e2e.py), RAY_CHECK=layout (ray-check of
    # RAY_LAYOUT instead of the 70b-2node recipe)
    shift; base=$OUT; head=${HEAD_NODE:-127.0.0.1}; second=${SECOND_NODE:-127.0.0.2}
    export STACK=${STACK---gpu-memory-utilization 0.85}; read -r -a STACK_ARGS <<< "$STACK"
    [ -d "$HOME/site/bin" ] && export PATH=$HOME/site/bin:$PATH  # bench/device/stage_pieces.sh's `ray`
    export RAY_USAGE_STATS_ENABLED=0
    read -r -a ray_layout <<< "${RAY_LAYOUT:---tensor-parallel-size 2 --pipeline-parallel-size 2}"
    ray_layout+=(--distributed-executor-backend ray)
    read -r -a mp_layout <<< "${MP_LAYOUT:---tensor-parallel-size 4}"
    g=${GPUS_PER_NODE:-2}; all=${ALL_GPUS:-0,1,2,3}
    gpus_a=$(echo "$all" | cut -d, -f1-"$g"); gpus_b=$(echo "$all" | cut -d, -f$((g + 1))-$((2 * g)))
    n=${N_OFF:-1600}
    ray_env=(RAY_ADDRESS="$head:6379" VLLM_HOST_IP="$head")
    tmp0=${TMPDIR:-/tmp}
    for step in ${STEPS:-up ray-off ray-cal fault down mp-off mp-cal}; do
      # each step its own work folder (run folders, datasets); compile caches stay shared
      export TMPDIR=$tmp0/$step; mkdir -p "$TMPDIR"
      echo "ray-70b: step $step ($(date +%T))"; mkdir -p "$base/$step"
      case $step in
        up) ray stop --force > /dev/null 2>&1
            env CUDA_VISIBLE_DEVICES="$gpus_a" NODE_IP="$head" GPUS_PER_NODE="$g" \
              OBJECT_STORE_BYTES="${OBJECT_STORE_BYTES:-4000000000}" \
              bash scripts/multinode.sh ray-head 2>&1 | tail -n 5 | tee "$base/up/head.log"
            env CUDA_VISIBLE_DEVICES="$gpus_b" NODE_IP="$second" HEAD_IP="$head" GPUS_PER_NODE="$g" \
              OBJECT_STORE_BYTES="${OBJECT_STORE_BYTES:-4000000000}" \
              bash scripts/multinode.sh ray-worker 2>&1 | tail -n 5 | tee "$base/up/worker.log"
            if [ "${RAY_CHECK:-recipe}" = recipe ]; then
              env "${ray_env[@]}" bash scripts/multinode.sh ray-check 70b-2node 2>&1 | tee "$base/up/ray-check.txt"
            else
              env "${ray_env[@]}" python3 -m harness.cli ray-check "${ray_layout[@]:0:${#ray_layout[@]}-2}" \
                --nodes 2 2>&1 | tee "$base/up/ray-check.txt"
            fi ;;
        ray-off) env "${ray_env[@]}" OUT="$base/$step" N70=$n bash bench/gpu.sh offline-70b "${ray_layout[@]}"
                 # the whole run folder (its trace aside), for `mlperf-vllm log-run` elsewhere
                 tar czf "$base/$step/run_folder.tgz" -C "${TMPDIR:-/tmp}/gpu-bench" \
                   --exclude=mlperf_log_trace.json --exclude=.mlperf-vllm.lock "run_70b_fp8_${TAG:-}$n" ;;
        ray-cal) env "${ray_env[@]}" OUT="$base/$step" SCENARIO=Server N70=$n MEASURE=${MEASURE:-800} \
                   TRIALS=${TRIALS:-2} TRIAL_S=${TRIAL_S:-90} FRAC=${FRAC:-0.5} \
                   bash bench/gpu.sh layout-70b "${ray_layout[@]}" ;;
        fault)
          ( export "${ray_env[@]}"; OUT=$base/$step; BENCHMARK=llama2-70b PROFILE=openorca SAMPLES=$n
            model=${MODEL70:-.gpu-stage/bin/llama2_70b_dummy}
            work=${TMPDIR:-/tmp}/gpu-bench; mkdir -p "$work"; rm -rf "$work/fault"
            pick_dataset "$model" 0
            printf 'llama2-70b.Server.target_qps = %s\n' "${FAULT_QPS:-4}" > "$work/fault.conf"
            python3 bench/ray_fault.py --node-ip "$second" --after "${FAULT_AFTER:-30}" \
              --out "$work/fault" --json "$OUT/fault.json" -- \
              python3 -m harness.cli run --benchmark llama2-70b --scenario Server --mode performance \
              --model "$model" --dataset "$DATA" --output "$work/fault" --user-conf "$work/fault.conf" \
              --no-mlflow --no-progress --ignore-eos --max-tokens 1024 "${LENGTHS[@]}" "${DUMMY[@]}" \
              "${FP8[@]}" --engine-arg max_model_len=2048 "${STACK_ARGS[@]}" "${ray_layout[@]}"
            cp "$work/fault/result.json" "$OUT/fault_result.json" 2>/dev/null
            cp "$work/fault/engine.log" "$OUT/fault_engine.log" 2>/dev/null; true ) ;;
        down) ray stop --force 2>&1 | tail -n 2 ;;
        mp-off) CUDA_VISIBLE_DEVICES=$all OUT="$base/$step" N70=$n bash bench/gpu.sh offline-70b "${mp_layout[@]}" ;;
        mp-cal) CUDA_VISIBLE_DEVICES=$all OUT="$base/$step" SCENARIO=Server N70=$n MEASURE=${MEASURE:-800} \
                  TRIALS=${TRIALS:-2} TRIAL_S=${TRIAL_S:-90} FRAC=${FRAC:-0.5} \
                  bash bench/gpu.sh layout-70b "${mp_layout[@]}" ;;
        *) echo "ray-70b: unknown step $step" ;;
      esac
      echo "ray-70b: step $step done ($(date +%T))"
    done ;;
  tp2-70b)   # 2 GPUs: Llama-2-70B FP8 + FP8 KV, TP 2; OpenOrca-like input, its mean output length
    BENCHMARK=llama2-70b cli_offline 70b_fp8_tp2 .gpu-stage/bin/llama2_70b_dummy 300 294 "${FP8[@]}" \
      --tensor-parallel-size 2 ;;
  offline-full)  # the submission's query size, then the config-ranking size
    SAMPLES=13368 cli_offline "8b_fp8_${TAG}full" "$MODEL" 870 128 "${FP8[@]}" "${STACK_ARGS[@]}"
    SAMPLES=2000 cli_offline "8b_fp8_${TAG}2k" "$MODEL" 870 128 "${FP8[@]}" "${STACK_ARGS[@]}" ;;
  offline-2k)
    SAMPLES=2000 cli_offline "8b_fp8_${TAG}2k" "$MODEL" 870 128 "${FP8[@]}" "${STACK_ARGS[@]}" ;;
  offline) offline bf16; offline fp8 "${FP8[@]}" ;;
  offline-bf16) offline bf16 ;;
  offline-fp8) offline fp8 "${FP8[@]}" ;;
  server) shift; server "fp8${TAG:+_$TAG}" "${FP8[@]}" "${STACK_ARGS[@]}" "$@" ;;
  interactive) shift; server "fp8_interactive${TAG:+_$TAG}" --scenario Interactive "${FP8[@]}" \
      "${STACK_ARGS[@]}" "$@" ;;
  calibrate-server) shift; SAMPLES=2000 cli_calibrate Server "${FP8[@]}" "${STACK_ARGS[@]}" "$@" ;;
  calibrate-interactive) shift; SAMPLES=2000 cli_calibrate Interactive "${FP8[@]}" \
      "${STACK_ARGS[@]}" "$@" ;;
  vs-raw) shift; vs_raw "$@" ;;
  dp-8b)
    shift; sc=${1:?scenario}; routing=${2:?routing: ours or vllm}; tq=${3:?target QPS}; shift 3
    gpus=${CUDA_VISIBLE_DEVICES:-0}; n=$(( $(printf '%s' "$gpus" | tr -cd , | wc -c) + 1 ))
    SAMPLES=${SAMPLES:-$((2000 * n))} MEASURE=${MEASURE:-$((1000 * n))} TRIAL_S=${TRIAL_S:-600} \
      NO_CONFIRM=1 cli_calibrate "$sc" --engine-line "${LINES:-user_confs/engines/h200}" \
      --data-parallel-size "$n" --dp-routing "$routing" --start-qps "$tq" --trials 1 \
      --engine-stats "$@" ;;
  offline-n)  # Llama-3.1-8B FP8 Offline through `mlperf-vllm run`, SAMPLES random
    # prompts of mean 870, 128 out, one query (SAMPLES: gpu.sh's default, 1,000); NAME tags the
    # files, run args follow
    shift; name=$1; shift; cli_offline "8b_fp8_$name" "$MODEL" "${MEAN:-870}" "$MAXTOK" "${FP8[@]}" "$@" ;;
  dp-8b-all)  # 4 GPUs: the same host's Offline first (DP 2 with our router on GPUs 0-1, one
    # engine on each of GPUs 2 and 3, engines/h200/'s Offline line = the Server line's batch), then
    # dp-8b-rounds at SERVER_FRAC (default 0.96) and INTERACTIVE_FRAC (0.85) x 2 x the mean
    # one-engine samples/s, the same rate on both pairs
    shift; base=$OUT; line=${LINES:-user_confs/engines/h200}
    OUT=$base/Offline STAGGER_S=1 bash bench/gpu.sh parallel \
      "CUDA_VISIBLE_DEVICES=0,1 SAMPLES=4000 offline-n dp2 --engine-line $line --data-parallel-size 2" \
      "CUDA_VISIBLE_DEVICES=2 offline-n one --engine-line $line" \
      "CUDA_VISIBLE_DEVICES=3 offline-n one --engine-line $line"
    read -r sq iq < <(python3 - "$base/Offline" "${SERVER_FRAC:-0.96}" "${INTERACTIVE_FRAC:-0.85}" <<'PY'
import glob, json, sys
rates = [json.load(open(f))["performance"]["samples_per_second"]
         for f in sorted(glob.glob(sys.argv[1] + "/gpu[12]/run_8b_fp8_one_result.json"))]
per = sum(rates) / len(rates)
print(round(float(sys.argv[2]) * 2 * per, 2), round(float(sys.argv[3]) * 2 * per, 2))
PY
)
    echo "dp-8b-all: one engine's Offline on this host -> Server $sq, Interactive $iq QPS (2 engines)"
    [ -n "$sq" ] || exit 1
    OUT=$base bash bench/gpu.sh dp-8b-rounds "$sq" "$iq" ;;
  host-dp4)  # 4 GPUs (the host path): one engine's Offline on each GPU (2,000 prompts, the
    # Offline line), then Server on DP 4 at SERVER_FRAC (0.96) x 4 x their mean samples/s with
    # --frontend FRONTEND (per-engine), engine stats on, for the conf's 600 s (CONFIRM_MS: less,
    # CPU dry runs); the run's process tree profiled PROFILE_S (60) s from PROFILE_AT (240) s
    # after its LoadGen starts (bench/host_profile.py, py-spy on PATH, PROFILE_HZ 50); then, with
    # HOST_BENCH set, bench/host_path.py $HOST_BENCH on the host's CPUs (stand-in engines)
    shift; base=$OUT; line=${LINES:-user_confs/engines/h200}; n=${ENGINES:-4}
    specs=(); for _ in $(seq 1 "$n"); do specs+=("SAMPLES=${OFFLINE_N:-2000} offline-n one --engine-line $line"); done
    OUT=$base/Offline STAGGER_S=1 bash bench/gpu.sh parallel "${specs[@]}"
    sq=$(python3 - "$base/Offline" "${SERVER_FRAC:-0.96}" "$n" <<'PY'
import glob, json, sys
rates = [json.load(open(f))["performance"]["samples_per_second"]
         for f in sorted(glob.glob(sys.argv[1] + "/gpu*/run_8b_fp8_one_result.json"))]
print(round(float(sys.argv[2]) * int(sys.argv[3]) * sum(rates) / len(rates), 2) if rates else "")
PY
)
    [ -n "$sq" ] || { echo "host-dp4: no Offline result"; exit 1; }
    echo "host-dp4: one engine's Offline on this host -> Server $sq QPS on $n engines ($(date +%T))"
    mkdir -p "$base/Server" "$base/profile"
    ( wait_for_run() { for _ in $(seq 1 900); do
          pid=$(pgrep -f -n "harness.cli run .*confirm_Server") && [ -f "$1" ] && \
            grep -q generated_query_count "$1" 2>/dev/null && return 0; sleep 1; done; return 1; }
      wait_for_run "${TMPDIR:-/tmp}/gpu-bench/confirm_Server_$sq/performance/mlperf_log_detail.txt" && \
      sleep "${PROFILE_AT:-240}" && \
      python3 bench/host_profile.py --pid "$(pgrep -f -n "harness.cli run .*confirm_Server")" \
        --duration "${PROFILE_S:-60}" --rate "${PROFILE_HZ:-50}" --out "$base/profile" \
        > "$base/profile/host_profile.log" 2>&1 ) &
    prof=$!
    OUT=$base/Server CONFIRM_N=${CONFIRM_N:-2000} bash bench/gpu.sh confirm Server "$sq" - \
      --engine-line "$line" --data-parallel-size "$n" --frontend "${FRONTEND:-per-engine}" --engine-stats
    wait "$prof"
    if [ -n "${HOST_BENCH:-}" ]; then
      read -r -a hb <<< "$HOST_BENCH"
      python3 bench/host_path.py "${hb[@]}" --out "${TMPDIR:-/tmp}/host-path" \
        --json "$base/host_path.json" 2>&1 | tee "$base/host_path.log"
    fi ;;
  step-8b)  # one GPU (the 8B engine step), runs one after another, each in $OUT/<name>, the
    # engine lines of LINES (user_confs/engines/h200): 1. Offline on OFFLINE_N (2,000) prompts:
    # the line, the line with --linear-backend torch, the line profiled (PROF_OFF steps@skip,
    # 20@150); R = the first one's samples/s; 2. Server at SERVER_FRAC (0.94) x R and
    # Interactive at INTERACTIVE_FRAC (0.85) x R for STEP_MS (120,000) each, profiled
    # (PROF_SERVER 30@1000, PROF_INTERACTIVE 30@2000), engine stats on; 3. Server at LEVER_FRAC
    # (0.96) x R on the line, with 768 sequences (graphs to 768), and with the prefill capped
    # at 16,384 tokens a step (16384x4), STEP_MS each. STEPS picks and orders the runs.
    shift; base=$OUT; line=${LINES:-user_confs/engines/h200}; step_ms=${STEP_MS:-120000}
    rate() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['performance']['samples_per_second'])" \
      "$base/off_base/run_8b_fp8_base_result.json" 2>/dev/null; }
    at() { python3 -c "import sys; print(round(float(sys.argv[1]) * float(sys.argv[2]), 2))" "$1" "$2"; }
    for step in ${STEPS:-off_base off_torch off_prof srv_prof int_prof srv_base srv_seqs768 srv_cap16k}; do
      echo "step-8b: $step ($(date +%T))"
      r=$(rate); if [ -z "$r" ] && [ "$step" != off_base ] && [[ $step != off_* ]]; then
        echo "step-8b: no Offline rate (off_base): skipping $step"; continue; fi
      case $step in
        off_base) OUT=$base/$step SAMPLES=${OFFLINE_N:-2000} bash bench/gpu.sh offline-n base \
                    --engine-line "$line" ;;
        off_torch) OUT=$base/$step SAMPLES=${OFFLINE_N:-2000} bash bench/gpu.sh offline-n torch \
                    --engine-line "$line" --engine-arg linear_backend=torch ;;
        off_prof) OUT=$base/$step SAMPLES=${OFFLINE_N:-2000} bash bench/gpu.sh offline-n prof \
                    --engine-line "$line" --profile "${PROF_OFF:-20@150}" ;;
        srv_prof) OUT=$base/$step CONFIRM_MS=$step_ms bash bench/gpu.sh confirm Server \
                    "$(at "$r" "${SERVER_FRAC:-0.94}")" - --engine-line "$line" --engine-stats \
                    --profile "${PROF_SERVER:-30@1000}" ;;
        int_prof) OUT=$base/$step CONFIRM_MS=$step_ms bash bench/gpu.sh confirm Interactive \
                    "$(at "$r" "${INTERACTIVE_FRAC:-0.85}")" - --engine-line "$line" --engine-stats \
                    --profile "${PROF_INTERACTIVE:-30@2000}" ;;
        srv_base) OUT=$base/$step CONFIRM_MS=$step_ms bash bench/gpu.sh confirm Server \
                    "$(at "$r" "${LEVER_FRAC:-0.96}")" - --engine-line "$line" --engine-stats ;;
        srv_seqs768) OUT=$base/$step CONFIRM_MS=$step_ms bash bench/gpu.sh confirm Server \
                    "$(at "$r" "${LEVER_FRAC:-0.96}")" - --engine-line "$line" --engine-stats \
                    --engine-arg max_num_seqs=768 \
                    --engine-arg 'compilation_config={"max_cudagraph_capture_size":768}' ;;
        srv_cap16k) OUT=$base/$step CONFIRM_MS=$step_ms bash bench/gpu.sh confirm Server \
                    "$(at "$r" "${LEVER_FRAC:-0.96}")" 16384x4 --engine-line "$line" --engine-stats ;;
        *) echo "step-8b: unknown step $step" ;;
      esac
      echo "step-8b: $step done, exit $? ($(date +%T))"
    done ;;
  dp-8b-rounds)
    shift; sq=${1:?Server QPS}; iq=${2:?Interactive QPS}; base=$OUT
    for round in "Server $sq" "Interactive $iq"; do
      read -r sc tq <<< "$round"
      ts_var=TRIAL_S_$sc; ts=${!ts_var:-${TRIAL_S:-600}}  # e.g. TRIAL_S_Interactive=420
      OUT=$base/$sc STAGGER_S=${STAGGER_S:-2} bash bench/gpu.sh parallel \
        "CUDA_VISIBLE_DEVICES=0,1 TRIAL_S=$ts dp-8b $sc ours $tq" \
        "CUDA_VISIBLE_DEVICES=2,3 TRIAL_S=$ts dp-8b $sc vllm $tq"
    done ;;
  real-small) shift; bash bench/real_small.sh "$@" ;;  # the real small model (its header)
  confirm) shift; cli_confirm "$@" ;;
  study) shift; study "$@" ;;
  detach)  # copy the tree aside (a later call replaces this one), start PART in its own session
    shift; job=$HOME/gpu-job; rm -rf "$job"; mkdir -p "$job/out"
    cp -a . "$job/repo" || exit 1
    (cd "$job/repo" && OUT=$job/out setsid nohup bash -c \
      'bash bench/gpu.sh "$@"; echo "exit $?" > "$HOME/gpu-job/done"' _ "$@" \
      > "$job/job.log" 2>&1 < /dev/null &)
    sleep 2; echo "detached: $*; log $job/job.log" ;;
  parallel)  # several GPUs: one part per GPU at once, each given as one quoted word "[VAR=VALUE
    # ...] PART [ARGS]" (GPU i runs the i-th); each part writes to $OUT/gpuI (its log part.log) with
    # its own TMPDIR and compile caches, starts STAGGER_S (default 20) after the one before, and the
    # exit code is the number of parts that failed. Words split on blanks (no quoting inside a
    # part, no eval). E.g. a 70B Offline denominator beside two
    # Server targets: parallel "MIN_MS=600000 N70=6600 offline-70b" "N70=1100 confirm-70b Server 8.85"
    shift; i=0; pids=()
    for spec in "$@"; do
      read -r -a words <<< "$spec"; vars=()
      while [ ${#words[@]} -gt 0 ] && [[ ${words[0]} =~ ^[A-Z][A-Z0-9_]*= ]]; do
        vars+=("${words[0]}"); words=("${words[@]:1}"); done
      d=$OUT/gpu$i; t=${TMPDIR:-/tmp}/gpu$i; mkdir -p "$d" "$t"
      echo "parallel: GPU $i: ${vars[*]} ${words[*]}" | tee "$d/part.log"
      env CUDA_VISIBLE_DEVICES=$i OUT="$d" TMPDIR="$t" VLLM_CACHE_ROOT="$t/vllm-cache" \
        TORCHINDUCTOR_CACHE_DIR="$t/inductor" TRITON_CACHE_DIR="$t/triton" "${vars[@]}" \
        bash bench/gpu.sh "${words[@]}" >> "$d/part.log" 2>&1 &
      pids+=($!); i=$((i + 1))
      [ "$i" -lt $# ] && sleep "${STAGGER_S:-20}"
    done
    failed=0; i=0
    for p in "${pids[@]}"; do
      wait "$p"; rc=$?; [ "$rc" -ne 0 ] && failed=$((failed + 1))
      echo "parallel: GPU $i exit $rc"; i=$((i + 1))
    done
    exit "$failed" ;;
  collect)
    job=$HOME/gpu-job; sleep "${WAIT:-0}"
    noise="^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG|WARNING)"  # vLLM's own log lines
    grep -v -E "$noise" "$job/job.log" | tail -n 60
    for f in "$job"/out/*/part.log; do  # a `parallel` job's parts
      [ -f "$f" ] && { echo "== $f"; grep -v -E "$noise" "$f" | tail -n 12; }
    done
    # the whole job in one .tgz (the device returns at most 8 files): its log and its files
    tar czf "$OUT/job.tgz" --exclude=mlperf_log_trace.json --exclude=.mlperf-vllm.lock \
      -C "$job" job.log out 2>/dev/null
    # and, where they fit beside it, files as they are and a folder (a sweep's) as one .tgz
    if [ "$(ls "$job"/out | wc -l)" -gt 6 ]; then ls "$job"/out
    else
      for f in "$job"/out/*; do
        if [ -d "$f" ]; then
          tar czf "$OUT/$(basename "$f").tgz" -C "$job/out" --exclude=mlperf_log_trace.json \
            --exclude=.mlperf-vllm.lock "$(basename "$f")"
        else cp "$f" "$OUT/" 2>/dev/null; fi
      done
    fi
    if [ -f "$job/done" ]; then echo "job: finished, $(cat "$job/done")"; else echo "job: running"; fi ;;
  probe) probe ;;
  tune) shift; tune "$@" ;;
  full) shift; name=$1; shift; SAMPLES=13368 cli_offline "full_$name" "$MODEL" 870 128 "$@" ;;
  all) offline bf16; offline fp8 "${FP8[@]}"; server fp8 "${FP8[@]}" "${STACK_ARGS[@]}" ;;
  *) echo "usage: $0 {offline|offline-bf16|offline-fp8|offline-full|offline-2k|offline-70b|sweep-70b|calibrate-70b|confirm-70b|parallel|server|interactive|calibrate-server|calibrate-interactive|scale-8b|tp2-70b|tp8-405b|probe|tune|full|all}" >&2
     exit 2 ;;
esac
