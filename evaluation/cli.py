"""Arguments of ``mlperf-vllm evaluate``; the harness loads the dataset and calls evaluate().

Building the parser imports no scoring code (NLTK, ROUGE): every `mlperf-vllm` command builds it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evaluation.accuracy_log import TOKEN_DTYPES
from evaluation.targets import ACCURACY_LEVELS, known_benchmarks

if TYPE_CHECKING:
    import pandas as pd

    from evaluation.pipeline import EvaluationResult


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


def evaluate_from_args(args: argparse.Namespace, dataset: pd.DataFrame) -> EvaluationResult:
    """Run evaluate() with parsed ``add_evaluate_arguments`` options and a loaded dataset."""
    from evaluation.pipeline import evaluate

    return evaluate(
        args.benchmark,
        args.accuracy_log,
        dataset,
        args.tokenizer,
        dtype=args.dtype,
        output_dir=args.output,
        accuracy_level=args.accuracy_level,
        nltk_data=args.nltk_data,
        workers=args.workers,
    )
