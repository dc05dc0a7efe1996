#!/usr/bin/env bash
# certify.sh [--dry-run] [--round ROUND] [--accuracy-level 99|99.9] BENCHMARK SCENARIO: calibrate,
# performance, accuracy, TEST06, package, check, then one verdict table. Every step is an
# `mlperf-vllm` command; the table says which one failed and where its logs are. READY only
# when every step passed and every rule of the submission check holds for the whole tree
# (a datacenter LLM needs Offline plus Server or Interactive: certify each into the same
# SUBMISSION_ROOT). ROUND defaults to the newest round that has the benchmark, the accuracy
# level to the one that round accepts (v6.1: 99.9 for llama2-70b, 99 for the others).
#
#   MODEL=/models/Llama-3.1-8B-Instruct DATASET=/data/cnn_eval.json SYSTEM=1xH200_vLLM \
#   SUBMITTER=MyOrg scripts/certify.sh llama3_1-8b Offline
#
# Up front, in a dry run too: `mlperf-vllm rounds --benchmark B --scenario S` (a table lookup:
# no engine, nothing written) names the round, refuses a benchmark or scenario it does not
# accept (exit 2, with the ones it takes), says whether TEST06 applies and whether the
# installed LoadGen can make the round's results.
#
# --dry-run (first argument, or DRY_RUN=1) prints every step's command instead of running it,
# quoted so it can be pasted, each after a `# STEP (log: FILE)` comment; it writes nothing and
# exits 0. Nothing is ever eval'ed. Every step is printed as if the ones before it passed: the
# runs read the conf calibrate would write ($OUT/calibrate/user.conf).
#
# The steps: calibrate (Server / Interactive: --confirm --confirm-passes 2, a target held by two
# full-length runs in a row; Offline: one measurement; SingleStream: none, LoadGen issues each
# query when the one before completes, so the shipped conf is used), performance, accuracy,
# test06-run and test06 (for the rounds that ask TEST06 of the benchmark), package, check.
# Every run and the calibration are logged to MLflow, as any `mlperf-vllm run` is.
#
# Environment:
#   MODEL, DATASET       required
#   SYSTEM, SUBMITTER    submission folder names (default: $(hostname), local)
#   OUT                  working folder (default: runs/certify/BENCHMARK-SCENARIO)
#   SUBMISSION_ROOT      where the submission tree goes (default: $OUT/submission)
#   MLPERF_VLLM          the CLI, split into words (e.g. ".venv/bin/python -m harness.cli");
#                        default as in the other scripts (_common.sh): .venv/bin/mlperf-vllm,
#                        else mlperf-vllm on the PATH, else python3 -m harness.cli
#   RUN_ARGS             extra flags for every run (engine flags: --max-num-seqs 512 ...)
#                        or --engine-line LINES: the measured line for BENCHMARK.SCENARIO from a
#                        folder of them (user_confs/engines/h200), for calibrate and every run
#   CALIBRATE_ARGS       extra flags for calibrate (--min-duration 5 for a CPU demo)
#   CONFIRM_PASSES       Server / Interactive: full-length runs in a row that must hold the
#                        target (default 2: one held run can be luck, bench/record/RESULTS.md)
#   USER_CONF            skip calibration and use this conf
#   MLFLOW_ARGS          MLflow flags for calibrate and every run (--mlflow-uri URI,
#                        --experiment NAME, or --no-mlflow); default: the CLI's own
#   SUBMISSION_FLAG      --submission (default) refuses non-compliant settings; set it empty
#                        for a demo on the tiny model
#   PACKAGE_ARGS         extra flags for package (--system-field cooling=air ...)
set -u -o pipefail
CLI_OVERRIDE=${MLPERF_VLLM:-}  # _common.sh sets MLPERF_VLLM (an array): keep the user's choice
source "$(dirname "$0")/_common.sh"  # MLPERF_VLLM, ROOT, DRY_RUN, run_cmd
[ -z "$CLI_OVERRIDE" ] || read -r -a MLPERF_VLLM <<<"$CLI_OVERRIDE"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
is_dry() { [ "$DRY_RUN" = 1 ]; }

usage() {
  echo "usage: $0 [--dry-run] [--round ROUND] [--accuracy-level 99|99.9] BENCHMARK SCENARIO" \
    "  (MODEL=... DATASET=... in the environment)" >&2
  exit 2
}
ROUND_ARGS=()
LEVEL_ARGS=()  # none: every command takes the level the round accepts
while [ $# -gt 0 ]; do
  case $1 in
    --round) [ $# -ge 2 ] || usage; ROUND_ARGS=(--round "$2"); shift 2 ;;
    --accuracy-level) [ $# -ge 2 ] || usage; LEVEL_ARGS=(--accuracy-level "$2"); shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
BENCHMARK=$1
SCENARIO=$2
: "${MODEL:?set MODEL to the checkpoint folder}"
: "${DATASET:?set DATASET to the preprocessed dataset file}"
SYSTEM=${SYSTEM:-$(hostname -s)}
SUBMITTER=${SUBMITTER:-local}
OUT=${OUT:-runs/certify/${BENCHMARK}-${SCENARIO}}
SUBMISSION_ROOT=${SUBMISSION_ROOT:-$OUT/submission}
RUN_ARGS=${RUN_ARGS:-}
CALIBRATE_ARGS=${CALIBRATE_ARGS:-}
PACKAGE_ARGS=${PACKAGE_ARGS:-}
MLFLOW_ARGS=${MLFLOW_ARGS:-}
CONFIRM_PASSES=${CONFIRM_PASSES:-2}
SUBMISSION_FLAG=${SUBMISSION_FLAG---submission}
AUDIT=$ROOT/user_confs/audit/TEST06.config

# The round, before anything runs (a dry run asks it too: it is a table lookup that starts and
# writes nothing): a benchmark or scenario the round does not accept is refused here.
ROUNDS_CMD=("${MLPERF_VLLM[@]}" rounds --benchmark "$BENCHMARK" --scenario "$SCENARIO"
  "${LEVEL_ARGS[@]}" "${ROUND_ARGS[@]}")
ROUNDS_OUT=$("${ROUNDS_CMD[@]}" 2>&1) || { echo "$ROUNDS_OUT" >&2; exit 2; }
ROUND_NOTE=$(head -n1 <<<"$ROUNDS_OUT")
NEEDS_TEST06=1
grep -q "; no TEST06" <<<"$ROUNDS_OUT" && NEEDS_TEST06=0
# A round whose RNG seeds the installed LoadGen does not carry (the 405B's v6.0 under 6.0.17):
# every --submission run would be refused after its engine started; refuse it here instead.
if [ -n "$SUBMISSION_FLAG" ] && grep -q "refuses its runs" <<<"$ROUNDS_OUT"; then
  echo "error: $(grep -m1 '^LoadGen: ' <<<"$ROUNDS_OUT" | cut -c10-)" \
    "(or set SUBMISSION_FLAG= for a run that is no submission result)" >&2
  exit 2
fi
if is_dry; then
  echo "# rounds: the round and accuracy level every step uses (a round without $BENCHMARK $SCENARIO stops here)"
  run_cmd "${ROUNDS_CMD[@]}"
  sed 's/^/#   /' <<<"$ROUNDS_OUT"
  echo "# dry run: $BENCHMARK $SCENARIO for $ROUND_NOTE; nothing below runs, nothing is written"
else
  echo "== $BENCHMARK $SCENARIO for $ROUND_NOTE"
  tail -n +2 <<<"$ROUNDS_OUT" | sed 's/^/   /'
  mkdir -p "$OUT"
fi
ROUND_ARGS+=("${LEVEL_ARGS[@]}")

declare -a STEPS=() VERDICTS=() DETAILS=()
record() { STEPS+=("$1"); VERDICTS+=("$2"); DETAILS+=("$3"); }

# step NAME LOGFILE CMD...: run, keep the output in LOGFILE, record PASS/FAIL (exit code).
# A dry run prints the command (run_cmd) after a comment naming the step and its log.
step() {
  local name=$1 log=$2; shift 2
  if is_dry; then
    echo "# $name (log: $log)"
    run_cmd "$@"
    record "$name" "DRY RUN" "$log"
    return 0
  fi
  echo "== $name: $*"
  "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    record "$name" PASS "$log"
    return 0
  fi
  record "$name" "FAIL (exit $rc)" "$(grep -m1 '^error:' "$log" || tail -n1 "$log")"
  return $rc
}

# shellcheck disable=SC2086  # RUN_ARGS etc. are word lists on purpose
run_mode() {  # run_mode NAME OUTDIR MODE [extra...]
  local name=$1 dir=$2 mode=$3; shift 3
  step "$name" "$OUT/$name.log" "${MLPERF_VLLM[@]}" run --benchmark "$BENCHMARK" --scenario "$SCENARIO" \
    --mode "$mode" --model "$MODEL" --dataset "$DATASET" --output "$dir" \
    --user-conf "$CONF" --no-progress "${ROUND_ARGS[@]}" $MLFLOW_ARGS $RUN_ARGS "$@"
}

json_field() {  # json_field FILE python-expression-over-r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null || echo "?"
}

finish() {
  if is_dry; then
    local i printed=()
    for i in "${!STEPS[@]}"; do [ "${VERDICTS[$i]}" = SKIPPED ] || printed+=("${STEPS[$i]}"); done
    echo "# dry run: ${#printed[@]} steps printed (${printed[*]}); nothing ran"
    exit 0
  fi
  echo
  printf '%-12s %-16s %s\n' STEP VERDICT DETAIL
  local i failed=0
  for i in "${!STEPS[@]}"; do
    printf '%-12s %-16s %s\n' "${STEPS[$i]}" "${VERDICTS[$i]}" "${DETAILS[$i]}"
    case "${VERDICTS[$i]}" in PASS | SKIPPED) ;; *) failed=1 ;; esac
  done
  echo
  if [ $failed -eq 0 ]; then
    echo "VERDICT: READY  $BENCHMARK $SCENARIO -> $SUBMISSION_ROOT ($ROUND_NOTE)"
  else
    echo "VERDICT: NOT READY  $BENCHMARK $SCENARIO (see the failed step's log in $OUT; $ROUND_NOTE)"
  fi
  exit $failed
}

# 1. calibrate
SCENARIO_LC=$(tr '[:upper:]' '[:lower:]' <<<"$SCENARIO")
if [ -n "${USER_CONF:-}" ]; then
  CONF=$USER_CONF
  record calibrate "SKIPPED" "USER_CONF=$CONF"
  is_dry && echo "# calibrate: skipped, every run below reads USER_CONF=$CONF"
elif [ "$SCENARIO_LC" = singlestream ]; then
  # SingleStream has no rate to find: LoadGen issues each query when the one before completes
  # and the run lasts >= 600 s and >= its query count whatever the system's speed.
  CONF=$ROOT/user_confs/$BENCHMARK/singlestream.conf
  record calibrate "SKIPPED" "SingleStream needs no target; $CONF"
  is_dry && echo "# calibrate: skipped (SingleStream has no target to find), every run below reads $CONF"
else
  # Server / Interactive: the written target must have held for runs of the conf's full
  # min_duration (calibrate --confirm steps down until CONFIRM_PASSES in a row do), not only in
  # short trials: one held run can be luck (51.993 QPS held once on one H200 host, then failed
  # twice on another).
  CONFIRM=()
  [ "$SCENARIO_LC" = offline ] || CONFIRM=(--confirm --confirm-passes "$CONFIRM_PASSES")
  # shellcheck disable=SC2086
  if step calibrate "$OUT/calibrate.log" "${MLPERF_VLLM[@]}" calibrate --benchmark "$BENCHMARK" \
      --scenario "$SCENARIO" --model "$MODEL" --dataset "$DATASET" --output "$OUT/calibrate" \
      "${CONFIRM[@]}" $MLFLOW_ARGS $CALIBRATE_ARGS $RUN_ARGS; then
    CONF=$OUT/calibrate/user.conf
    if is_dry; then
      echo "# calibrate would write the target QPS into $CONF; every run below reads that conf"
    else
      DETAILS[${#DETAILS[@]}-1]="$(grep -m1 -E '^[^#].*\.target_qps = ' "$CONF")"
    fi
  else
    finish
  fi
fi

# 2. performance and 3. accuracy (separate runs: each LoadGen test in its own process)
# shellcheck disable=SC2086
if run_mode performance "$OUT/performance" performance $SUBMISSION_FLAG && ! is_dry; then
  R=$OUT/performance/result.json
  V=$(json_field "$R" "r['performance']['validity']")
  NC=$(json_field "$R" "', '.join(r.get('not_compliant') or [])")
  DETAILS[${#DETAILS[@]}-1]="$V, $(json_field "$R" "round(r['performance']['tokens_per_second'] or 0, 1)") tok/s $(json_field "$R" "'; '.join(r['performance']['invalid_reasons'])")"
  if [ "$V" != VALID ]; then
    VERDICTS[${#VERDICTS[@]}-1]="FAIL ($V)"
  elif [ -n "$NC" ]; then  # e.g. a smoke conf's min_duration: VALID, but not a submission result
    VERDICTS[${#VERDICTS[@]}-1]="NOT COMPLIANT"
    DETAILS[${#DETAILS[@]}-1]="VALID as a smoke run only; not a submission result: $NC"
  fi
fi
# shellcheck disable=SC2086
if run_mode accuracy "$OUT/accuracy" accuracy $SUBMISSION_FLAG && ! is_dry; then
  R=$OUT/accuracy/result.json
  A=$(json_field "$R" "r['accuracy'].get('verdict')")
  if [ "$A" = None ]; then  # not scored: say why (e.g. NLTK data missing)
    VERDICTS[${#VERDICTS[@]}-1]="FAIL (not scored)"
    DETAILS[${#DETAILS[@]}-1]="not scored: $(json_field "$R" "r['accuracy'].get('evaluation_error')")"
  else
    [ "$A" = PASS ] || VERDICTS[${#VERDICTS[@]}-1]="FAIL"
    DETAILS[${#DETAILS[@]}-1]="accuracy $A ($OUT/accuracy/accuracy/accuracy.txt)"
  fi
fi

# 4. TEST06 (where the round asks it of the benchmark): a performance-mode run under the audit
# config, then the three checks
TEST06_ARGS=()
if [ "$NEEDS_TEST06" = 0 ]; then
  record test06 "SKIPPED" "the round asks no TEST06 of $BENCHMARK"
  is_dry && echo "# test06: skipped, the round asks no TEST06 of $BENCHMARK"
elif run_mode test06-run "$OUT/TEST06" performance --audit-config "$AUDIT"; then
  TEST06_ARGS=(--test06 "$OUT/TEST06")
  step test06 "$OUT/test06-check.log" "${MLPERF_VLLM[@]}" compliance test06 \
    --log-dir "$OUT/TEST06/performance" --model "$MODEL" --output "$OUT/TEST06" --strict
else
  TEST06_ARGS=(--test06 "$OUT/TEST06")
fi

# 5. package (accuracy from its own run) and 6. the local submission checks
# shellcheck disable=SC2086
step package "$OUT/package.log" "${MLPERF_VLLM[@]}" package --run "$OUT/performance" \
  --accuracy-run "$OUT/accuracy" "${TEST06_ARGS[@]}" --system "$SYSTEM" \
  --submitter "$SUBMITTER" --output "$SUBMISSION_ROOT" "${ROUND_ARGS[@]}" $PACKAGE_ARGS \
  && step check "$OUT/check.log" "${MLPERF_VLLM[@]}" check-submission "$SUBMISSION_ROOT" \
    --benchmark "$BENCHMARK" --scenario "$SCENARIO" "${ROUND_ARGS[@]}"
is_dry || [ "${VERDICTS[${#VERDICTS[@]}-1]}" = PASS ] || DETAILS[${#DETAILS[@]}-1]="$(tail -n1 "$OUT/check.log" 2>/dev/null || echo "see $OUT/package.log")"
finish
