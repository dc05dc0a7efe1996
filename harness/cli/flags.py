"""Flags several commands share, and the one way a command's flags become its typed request.

Below the CLI nothing reads an argparse namespace (tests/test_layering.py): each command
turns its flags into a frozen request or config here, in the CLI, and hands that down.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

from harness.errors import UsageError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from harness.submission.rounds import RoundChoice
    from harness.tracking import TrackingConfig

Request = TypeVar("Request", bound="DataclassInstance")


def request_from_flags(cls: type[Request], args: argparse.Namespace, **given: Any) -> Request:
    """A frozen dataclass `cls` with each field taken from the flag whose dest has its name,
    unless `given` (values the command computes: a resolved path, the unparsed engine flags).
    A field that neither supplies is a mistake in the command, caught by its first use."""
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in given and not hasattr(args, n)]
    if missing:
        raise TypeError(f"{cls.__name__}: no flag or value for {', '.join(missing)}")
    values = {n: given[n] if n in given else getattr(args, n) for n in names}
    return cls(**values)


# --------------------------------------------------------------------------- MLflow


def add_mlflow_arguments(p: argparse.ArgumentParser, experiment: str | None = None) -> None:
    p.add_argument(
        "--mlflow-uri",
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
        "else sqlite:///mlflow.db in the working directory)",
    )
    p.add_argument(
        "--experiment",
        default=experiment,
        help="MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else mlperf-vllm)",
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")


def tracking_config(
    args: argparse.Namespace, default_experiment: str | None = None
) -> TrackingConfig:
    """The flags of `add_mlflow_arguments` as the tracking layer's config; `default_experiment`:
    the command's own (else the tracking layer's)."""
    from harness import tracking
    from harness.tracking.store import DEFAULT_EXPERIMENT

    return tracking.resolve_tracking(
        args.mlflow_uri,
        args.experiment,
        enabled=not args.no_mlflow,
        default_experiment=default_experiment or DEFAULT_EXPERIMENT,
    )


# --------------------------------------------------------------------------- submission round


def add_round_argument(p: argparse.ArgumentParser) -> None:
    from harness.submission.rounds import ROUND_NAMES

    p.add_argument(
        "--round",
        choices=ROUND_NAMES,
        help="MLPerf submission round whose rules apply (seeds, model folders, scenarios); "
        "default: the newest round that has the benchmark",
    )


def add_accuracy_level_argument(p: argparse.ArgumentParser, with_round: bool = True) -> None:
    """--accuracy-level, default None: the level the round accepts for the benchmark, resolved
    by `accuracy_level_of` (one rule for every command)."""
    from evaluation.targets import ACCURACY_LEVELS

    p.add_argument(
        "--accuracy-level",
        choices=ACCURACY_LEVELS,
        help="accuracy target: 99 or 99.9 (llama2-70b); default: the level the "
        + (
            "round (--round, else the newest round with the benchmark)"
            if with_round
            else "newest round with the benchmark"
        )
        + " accepts (v6.1: 99.9 for llama2-70b, 99 for the others)",
    )


def accuracy_level_of(args: argparse.Namespace, benchmark: str) -> str:
    """The run's accuracy level: --accuracy-level, else the one its round accepts."""
    from harness.submission.rounds import accuracy_level_for

    return accuracy_level_for(benchmark, getattr(args, "round", None), args.accuracy_level)


def choose_round_for(args: argparse.Namespace, benchmark: str) -> RoundChoice:
    """The submission round of --round and --accuracy-level, checked before anything else
    happens (exit 2 if refused)."""
    from harness.benchmarks import get_benchmark
    from harness.submission.rounds import choose_round

    try:
        get_benchmark(benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    return choose_round(args.round, benchmark, args.accuracy_level)
