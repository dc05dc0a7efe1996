"""`mlperf-vllm evaluate`: score an accuracy log against the MLPerf targets.

Building the parser imports no scoring code (NLTK, ROUGE): every `mlperf-vllm` command builds it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evaluation.token_types import TOKEN_DTYPES
from harness.cli.common import EXIT_ERROR, add_command, strict_code
from harness.cli.flags import (
    accuracy_level_of,
    add_accuracy_level_argument,
    add_benchmark_argument,
    add_mlflow_arguments,
    tracking_config,
)
from harness.errors import UsageError


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    add_benchmark_argument(parser, what="benchmark whose accuracy targets apply")
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
        "--overwrite",
        action="store_true",
        help="replace an accuracy.json in the output folder that scores another log or dataset",
    )
    add_accuracy_level_argument(parser, with_round=False)
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
    ev = add_command(
        sub, "evaluate", cmd_evaluate, help="score an accuracy log against the MLPerf targets"
    )
    add_evaluate_arguments(ev)
    ev.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow loading a .pkl dataset (unpickling runs code from the file)",
    )
    ev.add_argument(
        "--strict", action="store_true", help="exit 3 when the accuracy FAILs (as run --strict)"
    )
    add_mlflow_arguments(ev)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from harness.folder_lock import one_writer

    out_dir = args.output if args.output is not None else args.accuracy_log.parent
    with one_writer(out_dir, "--output"):  # checks the folder first, as every writer's lock
        return _evaluate(args)


def _evaluate(args: argparse.Namespace) -> int:
    from evaluation import EvaluationError, evaluate
    from harness import tracking
    from harness.benchmarks import get_benchmark
    from harness.datasets import load_dataset

    try:
        bench = get_benchmark(args.benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    level = accuracy_level_of(args, args.benchmark)
    out_dir = args.output if args.output is not None else args.accuracy_log.parent
    if not args.tokenizer.is_dir():
        raise UsageError(
            f"tokenizer {args.tokenizer} is not a folder: pass --tokenizer the model's local "
            "folder (the one the run used)"
        )
    dataset = load_dataset(args.dataset, bench, allow_pickle=args.allow_pickle, need_targets=True)
    for note in earlier_scores(args.accuracy_log, args.dataset, out_dir, args.overwrite):
        print(f"warning: {note}", flush=True)
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
                accuracy_level=level,
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
                accuracy_level=level,
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


def earlier_scores(log: Path, dataset: Path, out_dir: Path, overwrite: bool) -> list[str]:
    """Refuse (UsageError) to replace scores this evaluation has no business replacing: the
    accuracy.json of another log, or a run's own scores with ones against another dataset than
    the run recorded. With `overwrite`, or when the scores go elsewhere, say it in a warning."""
    import json

    from harness.datasets import file_sha256
    from harness.run.record.result import RESULT_FILE, RunResult

    notes: list[str] = []
    if not log.is_file():
        return notes  # the evaluation says so, in its words
    force = "pass --output another folder, or --overwrite to replace them"
    run_dir = log.parent.parent
    run = RunResult.read(run_dir / RESULT_FILE) if log.parent.name == "accuracy" else None
    if run is not None and run.dataset_sha256 and dataset.is_file():
        digest = file_sha256(dataset)
        if digest != run.dataset_sha256:
            what = (
                f"the run in {run_dir} used dataset {run.dataset} (sha256 "
                f"{run.dataset_sha256[:12]}...), --dataset {dataset} is another file (sha256 "
                f"{digest[:12]}...)"
            )
            if out_dir.resolve() == log.parent.resolve() and not overwrite:
                raise UsageError(
                    f"{what}: its scores would replace the run's accuracy.json with scores "
                    f"against other references; pass the run's dataset, or {force}"
                )
            notes.append(f"{what}: scoring against it anyway")
    existing = out_dir / "accuracy.json"
    if existing.is_file():
        try:
            recorded = json.loads(existing.read_text(encoding="utf-8")).get("accuracy_log_sha256")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if recorded != file_sha256(log):
            what = (
                f"{existing} holds the scores of another accuracy log"
                if recorded
                else f"{existing} is not an accuracy.json of ours"
            )
            if not overwrite:
                raise UsageError(f"{what}: {force}")
            notes.append(f"{what}: replacing it (--overwrite)")
    return notes
