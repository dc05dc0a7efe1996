"""`mlperf-vllm evaluate`: score an accuracy log against the MLPerf targets.

Building the parser imports no scoring code (NLTK, ROUGE): every `mlperf-vllm` command builds it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evaluation.accuracy_log import TOKEN_DTYPES
from evaluation.targets import ACCURACY_LEVELS, known_benchmarks
from harness.cli.common import EXIT_ERROR, strict_code
from harness.cli.flags import add_mlflow_arguments, tracking_config
from harness.errors import UsageError


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--benchmark",
        required=True,
        choices=known_benchmarks(),
        help="benchmark whose accuracy targets apply",
    )
    parser.add_argument(
        "--accuracy-log",
        required=True,
        type=Path,
        help="mlperf_log_accuracy.json of an accuracy run",
    )
    parser.add_argument(
        "--dataset",
        required=True,
        type=Path,
        help="the dataset the run used (with its reference outputs)",
    )
    parser.add_argument(
        "--tokenizer",
        required=True,
        type=Path,
        help="local folder of the model's tokenizer (usually the model folder)",
    )
    parser.add_argument(
        "--dtype",
        choices=tuple(TOKEN_DTYPES),
        default="int32",
        help="integer type of the token ids in the log (default: int32, what the SUT sends)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="folder for accuracy.json and accuracy.txt (default: the accuracy log's folder)",
    )
    parser.add_argument(
        "--accuracy-level",
        choices=ACCURACY_LEVELS,
        default="99",
        help="accuracy target: 99 (all benchmarks) or 99.9 (llama2-70b)",
    )
    parser.add_argument(
        "--nltk-data",
        type=Path,
        default=None,
        help="NLTK data folder holding tokenizers/punkt_tab (default: one on $NLTK_DATA, "
        "else the packaged model)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="scoring processes (default: one per CPU core for large logs)",
    )


def add_parser(sub) -> None:
    ev = sub.add_parser("evaluate", help="score an accuracy log against the MLPerf targets")
    add_evaluate_arguments(ev)
    ev.add_argument("--allow-pickle", action="store_true")
    add_mlflow_arguments(ev)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from evaluation import EvaluationError, evaluate
    from harness import tracking
    from harness.benchmarks import get_benchmark
    from harness.datasets import load_dataset

    try:
        bench = get_benchmark(args.benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    dataset = load_dataset(args.dataset, bench, allow_pickle=args.allow_pickle, need_targets=True)
    cfg = tracking_config(args)
    tracking.check_reachable(cfg)
    with tracking.tracked_run(cfg, f"evaluate {args.benchmark}") as trk:
        try:
            ev = evaluate(
                bench.accuracy_preset or bench.name,
                args.accuracy_log,
                dataset.frame,
                str(args.tokenizer),
                dtype=args.dtype,
                output_dir=args.output,
                accuracy_level=args.accuracy_level,
                nltk_data=args.nltk_data,
                workers=args.workers,
            )
        except EvaluationError as exc:
            raise UsageError(str(exc)) from None
        print(ev.table())
        try:
            tracking.log_evaluation(
                trk,
                benchmark=args.benchmark,
                accuracy_log=args.accuracy_log,
                dataset=args.dataset,
                tokenizer=args.tokenizer,
                dtype=args.dtype,
                accuracy_level=args.accuracy_level,
                output_dir=ev.paths.accuracy_json.parent,
                metrics=ev.metrics,
                passed=ev.passed,
            )
        except Exception as exc:  # the reports are on disk; say so and fail the command
            trk.logging_error = f"{type(exc).__name__}: {exc}"
            print(
                f"error: MLflow logging to {cfg.uri} failed ({trk.logging_error}); "
                f"accuracy.json is in {ev.paths.accuracy_json.parent}",
                file=sys.stderr,
            )
    if trk.logging_error:
        return EXIT_ERROR
    return strict_code(args, None, {"verdict": "PASS" if ev.verdict.passed else "FAIL"})
