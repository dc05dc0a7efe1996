# The body of isolation_sweep.sh and stacked_sweep.sh, which differ only in the sweep kind;
# sourced by them as `source _sweep.sh KIND "$@"`. A thin wrapper: everything happens in
# `mlperf-vllm sweep --kind KIND` (exec: a signal to the script reaches the sweep itself).
set -euo pipefail
KIND=$1
shift
if [ $# -lt 1 ]; then
  keep_all=""
  [ "$KIND" = stacked ] && keep_all=" [--keep-all]"
  echo "usage: $0 PLAN [--repeats N] [--accuracy] [--output DIR] [--resume]$keep_all" >&2
  exit 2
fi
# A plan's `dataset ${DATASET}` that is a pickle loads only with --allow-pickle (as multinode.sh)
pickle=(); case "${DATASET:-}" in *.pkl|*.pickle) pickle=(--allow-pickle) ;; esac
if command -v mlperf-vllm >/dev/null 2>&1; then
  exec mlperf-vllm sweep --kind "$KIND" ${pickle[@]+"${pickle[@]}"} "$@"
fi
exec "${PYTHON:-python3}" -m harness.cli sweep --kind "$KIND" ${pickle[@]+"${pickle[@]}"} "$@"
