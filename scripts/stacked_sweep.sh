#!/usr/bin/env bash
# Stacked tuning sweep of a plan file (see scripts/plans/*.txt for the format).
#   scripts/stacked_sweep.sh PLAN [--repeats N] [--accuracy] [--output DIR] [--resume] [--keep-all]
#                         [--mlflow-uri URI] [--experiment NAME] [--no-mlflow]
# A thin wrapper: everything happens in `mlperf-vllm sweep --kind stacked`.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 PLAN [--repeats N] [--accuracy] [--output DIR] [--resume] [--keep-all]" >&2
  exit 2
fi
if command -v mlperf-vllm >/dev/null 2>&1; then
  exec mlperf-vllm sweep --kind stacked "$@"
fi
exec "${PYTHON:-python3}" -m harness.cli sweep --kind stacked "$@"
