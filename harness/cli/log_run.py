"""`mlperf-vllm log-run DIR`: log a finished output folder to MLflow (again)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import EXIT_OK, add_command
from harness.cli.flags import add_mlflow_arguments, tracking_config
from harness.errors import UsageError


def add_parser(sub) -> None:
    relog = add_command(
        sub, "log-run", cmd_log_run, help="log a finished --output folder to MLflow (again)"
    )
    relog.add_argument("dir", type=Path, help="the --output folder of an `mlperf-vllm run`")
    relog.add_argument("--run-name", help="MLflow run name (default: benchmark scenario mode)")
    add_mlflow_arguments(relog)


def cmd_log_run(args: argparse.Namespace) -> int:
    from harness import tracking

    cfg = tracking_config(args)
    if not cfg.enabled:
        raise UsageError("log-run logs to MLflow: drop --no-mlflow")
    run, logged = tracking.relog(cfg, args.dir, name=args.run_name)
    print(
        f"logged {args.dir} as MLflow run {run.run_id} in experiment {cfg.experiment!r} "
        f"at {cfg.uri}: {logged.params} params, {logged.metrics} metrics, "
        f"{len(logged.artifacts)} files"
    )
    return EXIT_OK
