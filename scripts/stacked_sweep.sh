#!/usr/bin/env bash
# Stacked tuning sweep of a plan file (see scripts/plans/*.txt for the format): knobs added in
# plan order, each kept only when it helped.
#   scripts/stacked_sweep.sh PLAN [--repeats N] [--accuracy] [--output DIR] [--resume] [--keep-all]
#                         [--mlflow-uri URI] [--experiment NAME] [--no-mlflow]
source "$(dirname "$0")/_sweep.sh" stacked "$@"
