#!/usr/bin/env bash
# The real small model (SmolLM2-135M-Instruct, as `mlperf-vllm make-small-model` makes it) through
# `mlperf-vllm run` on a GPU machine that has no model hub and takes at most 64 MiB per call:
# accuracy, EOS, FP8 and TEST06 where dummy weights cannot look. Parts:
#   here    bash bench/real_small.sh stage     the model and a 500-sample dataset in its chat
#                                              template (SAMPLES) -> .gpu-stage/small/p1 .. pN,
#                                              one xz piece of <= 50 MB each
#   device  bash bench/real_small.sh recv .gpu-stage/small/pK   one call per piece, back to back
#                                              (vLLM staged first: ../gpu-stage README); the
#                                              last piece unpacks
#   device  bash bench/real_small.sh accuracy  Offline accuracy runs, one engine each: BF16, FP8
#                                              weights, FP8 weights + FP8 KV cache (RUNS to pick);
#                                              accuracy logs and result.json to $OUT
#   device  bash bench/real_small.sh serve SCENARIO TARGET [run args]   run --mode both --test06
#                                              at TARGET QPS (mlperf.conf's min_duration unless
#                                              MIN_MS), the model's real EOS; long: start it with
#                                              `bash bench/gpu.sh detach real-small serve ...`
#   device  bash bench/real_small.sh calibrate SCENARIO [run args]   calibrate (--confirm with
#                                              CONFIRM=1) on this model
#   device  bash bench/real_small.sh all       everything after staging, for one detached job
#                                              (`bash bench/gpu.sh detach real-small all`):
#                                              accuracy, then per scenario (SCENARIOS) calibrate
#                                              --confirm at a min_duration of MIN_S (default 60:
#                                              NOT COMPLIANT, marked so in the conf) and serve at
#                                              the conf it wrote (TARGET `calibrated`); run
#                                              folders so far in $OUT/runs.tgz after each part
#   here    bash bench/real_small.sh cpu       the same samples on this CPU (float32, eager)
#   here    bash bench/real_small.sh report NAME=LOG ...   score each accuracy log and compare
#                                              them (bench/real_small_report.py; the GPU machine
#                                              has no rouge-score)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -f .gpu-stage/bin/env.sh ]; then source .gpu-stage/bin/env.sh; fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python  # here: the project venv; there: staged
OUT=${OUT:-bench/gpu-out}; mkdir -p "$OUT"
SAMPLES=${SAMPLES:-500}
STAGE=.gpu-stage/small                          # here
NAME=smollm2-135m-instruct
DATA_NAME=cnn_synthetic_smollm2_$SAMPLES.json
HOME_SMALL=${HOME_SMALL:-$HOME/small}           # device: the unpacked model and dataset
WORK=${TMPDIR:-/tmp}/real-small
BENCH=llama3_1-8b
CONF=user_confs/smoke/offline_small_model.conf  # Offline accuracy: every sample once
# ENGINE_ARGS: flags added to every run's engine, split on blanks (e.g. "--engine-arg
# enforce_eager=true" for a dry run of the parts on a CPU machine)
read -r -a EXTRA <<< "${ENGINE_ARGS:-}"

where() {  # the model and dataset: unpacked on the device, staged here
  if [ -d "$HOME_SMALL/$NAME" ]; then MODEL=$HOME_SMALL/$NAME DATA=$HOME_SMALL/$DATA_NAME
  else MODEL=$STAGE/$NAME DATA=$STAGE/$DATA_NAME; fi
  [ -f "$MODEL/config.json" ] && [ -f "$DATA" ] || { echo "no staged model/dataset ($MODEL, $DATA): run stage here, recv there" >&2; exit 2; }
}

stage() {
  mkdir -p "$STAGE"
  $PY -m harness.cli make-small-model "$STAGE/$NAME" || exit 1
  [ -f "$STAGE/$DATA_NAME" ] || $PY -m harness.cli make-dataset --benchmark $BENCH \
    --tokenizer "$STAGE/$NAME" --out "$STAGE/$DATA_NAME" --samples "$SAMPLES" --max-sentences 8 || exit 1
  rm -rf "$STAGE"/p[0-9]* "$STAGE/parts"; mkdir -p "$STAGE/parts"
  tar -C "$STAGE" -cf - "$NAME" "$DATA_NAME" | xz -T0 -6 | split -b 50000000 -d - "$STAGE/parts/small.part."
  (cd "$STAGE/parts" && sha256sum small.part.* > small.sha256)
  local i=0
  for f in "$STAGE"/parts/small.part.*; do
    i=$((i + 1)); mkdir -p "$STAGE/p$i"; mv "$f" "$STAGE/p$i/"; cp "$STAGE/parts/small.sha256" "$STAGE/p$i/"
  done
  rm -rf "$STAGE/parts"
  echo "staged $i pieces; on the device, one call each (carry .gpu-stage/bin and the piece):"
  for k in $(seq 1 "$i"); do echo "  bash bench/real_small.sh recv $STAGE/p$k"; done
}

recv() {  # device: keep a piece; unpack once all pieces the checksum file names are here
  local dir=${1:?usage: recv DIR}; mkdir -p "$HOME/small-stage"
  mv "$dir"/small.part.* "$dir"/small.sha256 "$HOME/small-stage/" || exit 1
  cd "$HOME/small-stage" || exit 1
  local want; want=$(wc -l < small.sha256)
  if [ "$(ls small.part.* | wc -l)" -lt "$want" ]; then echo "recv: $(ls small.part.* | wc -l) of $want pieces"; return 0; fi
  sha256sum -c small.sha256 || exit 1
  rm -rf "$HOME_SMALL" && mkdir -p "$HOME_SMALL" || exit 1
  if command -v xz > /dev/null; then cat small.part.* | xz -dc | tar -x -C "$HOME_SMALL" || exit 1
  else  # a machine without xz: Python's lzma reads the same stream
    cat small.part.* | python3 -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1])' "$HOME_SMALL" || exit 1
  fi
  echo "recv: unpacked into $HOME_SMALL: $(ls "$HOME_SMALL" | tr '\n' ' ')"
}

acc_run() {  # name, engine args...: one Offline accuracy run, unscored (no rouge-score there)
  local name=$1; shift; where
  local out=$WORK/acc_$name; rm -rf "$out"; mkdir -p "$WORK"
  $PY -m harness.cli run --benchmark $BENCH --scenario Offline --mode accuracy --model "$MODEL" \
    --dataset "$DATA" --output "$out" --user-conf "$CONF" --no-mlflow --no-progress --no-evaluate \
    "$@" "${EXTRA[@]}" 2>&1 | grep --line-buffered -E "validity|samples|tokens|warning: single|error|Error" | sed "s/^/[$name] /"
  cp "$out/accuracy/mlperf_log_accuracy.json" "$OUT/acc_$name.json" 2>/dev/null \
    || echo "[$name] no accuracy log ($out)"
  cp "$out/result.json" "$OUT/acc_${name}_result.json" 2>/dev/null
}

accuracy() {
  for run in ${RUNS-bf16 fp8 fp8kv}; do
    case $run in
      bf16) acc_run bf16 --engine-arg dtype=bfloat16 ;;
      fp8) acc_run fp8 --engine-arg dtype=bfloat16 --engine-arg quantization=fp8 ;;
      fp8kv) acc_run fp8kv --engine-arg dtype=bfloat16 --engine-arg quantization=fp8 --engine-arg kv_cache_dtype=fp8 ;;
      *) echo "unknown run $run (bf16, fp8, fp8kv)" >&2; return 2 ;;
    esac
  done
}

serve() {  # scenario, target QPS (or `calibrated`: the conf `calibrate` wrote), run args...:
  # performance + accuracy + TEST06 on one engine
  local scenario=${1:?scenario} target=${2:?target QPS or calibrated}; shift 2; where
  local lg=$BENCH; [ "$scenario" = Interactive ] && lg=$BENCH-interactive
  local out=$WORK/serve_${scenario}_$target conf=$WORK/serve_$scenario.conf; mkdir -p "$WORK"
  if [ "$target" = calibrated ]; then
    local written=$WORK/calibrate_$scenario/user.conf
    [ -f "$written" ] || { echo "serve: no $written: run calibrate $scenario first" >&2; return 2; }
    cp "$written" "$conf"
  else
    printf '%s.Server.target_qps = %s\n' "$lg" "$target" > "$conf"
    [ -n "${MIN_MS:-}" ] && printf '*.Server.min_duration = %s\n' "$MIN_MS" >> "$conf"
  fi
  $PY -m harness.cli run --benchmark $BENCH --scenario "$scenario" --mode both --test06 \
    --model "$MODEL" --dataset "$DATA" --output "$out" --user-conf "$conf" --overwrite --no-mlflow \
    --no-progress --no-evaluate "$@" "${EXTRA[@]}" 2>&1 | grep --line-buffered -v -E "^(\((EngineCore|Worker|MainProcess)|INFO|DEBUG)" \
    | tee "$OUT/serve_$scenario.log" | grep -E "validity|VALID|TTFT|TPOT|TEST06|samples|kept|error|Error"
  cp "$out/accuracy/mlperf_log_accuracy.json" "$OUT/serve_${scenario}_acc.json" 2>/dev/null
  cp "$out/result.json" "$OUT/serve_${scenario}_result.json" 2>/dev/null
  cp "$out/TEST06/verify_accuracy.txt" "$OUT/serve_${scenario}_test06.txt" 2>/dev/null
  keep_runs
}

keep_runs() {  # every run folder so far (LoadGen logs, timelines; no traces) as $OUT/runs.tgz
  tar czf "$OUT/runs.tgz" --exclude=mlperf_log_trace.json --exclude=.mlperf-vllm.lock \
    -C "$(dirname "$WORK")" "$(basename "$WORK")"
}

calibrate() {  # scenario, run args...
  local scenario=${1:?scenario}; shift; where
  local out=$WORK/calibrate_$scenario confirm=(); [ -n "${CONFIRM:-}" ] && confirm=(--confirm)
  rm -rf "$out"  # scratch: a repeat replaces it
  $PY -m harness.cli calibrate --benchmark $BENCH --scenario "$scenario" --model "$MODEL" \
    --dataset "$DATA" --output "$out" "${confirm[@]}" --trial-s "${TRIAL_S:-60}" "$@" "${EXTRA[@]}" 2>&1 \
    | grep --line-buffered -E "calibrate|error|Error" | tee "$OUT/calibrate_$scenario.log"
  cp "$out/user.conf" "$OUT/calibrate_$scenario.conf" 2>/dev/null
  cp "$out/calibration.json" "$OUT/calibrate_$scenario.json" 2>/dev/null
  keep_runs
}

everything() {  # device, one detached job: accuracy, then per scenario calibrate --confirm and
  # serve at the conf it wrote (also when the confirmation failed: its EOS, TEST06 and accuracy
  # still speak, and the conf says NOT CONFIRMED)
  # RUNS= (set, empty) skips the accuracy runs; CAL_Server / CAL_Interactive: more calibrate flags
  # for that scenario, split on blanks (e.g. "--start-qps 330 --backoff 0.08"; they win)
  accuracy
  for scenario in ${SCENARIOS:-Server Interactive}; do
    local var=CAL_$scenario cal=(); read -r -a cal <<< "${!var:-}"
    CONFIRM=1 calibrate "$scenario" --min-duration "${MIN_S:-60}" --trials "${TRIALS:-5}" \
      --precision "${PRECISION:-0.05}" --confirm-runs "${CONFIRM_RUNS:-2}" --trial-timeout 300 \
      "${cal[@]}"
    serve "$scenario" calibrated
  done
}

cpu() {  # the same samples on this machine (float32, eager: see RESULTS, real small model)
  where
  local out=${CPU_OUT:-runs/real-small-cpu}
  $PY -m harness.cli run --benchmark $BENCH --scenario Offline --mode accuracy --model "$MODEL" \
    --dataset "$DATA" --output "$out" --user-conf "$CONF" --no-mlflow --no-progress --no-evaluate \
    --engine-arg dtype=float32 --engine-arg enforce_eager=true "$@"
  echo "accuracy log: $out/accuracy/mlperf_log_accuracy.json"
}

case "${1:-}" in
  stage) stage ;;
  recv) shift; recv "$@" ;;
  accuracy) accuracy ;;
  serve) shift; serve "$@" ;;
  calibrate) shift; calibrate "$@" ;;
  all) everything ;;
  cpu) shift; cpu "$@" ;;
  report) shift; where; $PY bench/real_small_report.py --dataset "$DATA" --model "$MODEL" "$@" ;;
  *) echo "usage: $0 {stage|recv DIR|accuracy|serve SCENARIO TARGET|calibrate SCENARIO|all|cpu|report NAME=LOG ...}" >&2
     exit 2 ;;
esac
