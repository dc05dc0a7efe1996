#!/usr/bin/env bash
# Isolation tuning sweep of a plan file (see scripts/plans/*.txt for the format): the baseline,
# then each knob alone on top of it.
#   scripts/isolation_sweep.sh PLAN [--repeats N] [--accuracy] [--output DIR] [--resume]
#                         [--mlflow-uri URI] [--experiment NAME] [--no-mlflow]
source "$(dirname "$0")/_sweep.sh" isolation "$@"
