"""``evaluate``: accuracy log + dataset + tokenizer -> metrics, verdict, accuracy.json/.txt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.accuracy_log import read_accuracy_log
from evaluation.errors import EvaluationError
from evaluation.longbench import pool_row_scores
from evaluation.report import ReportPaths, verdict_table, write_reports
from evaluation.scoring import (
    mean_percent_rounded,
    resolve_workers,
    score_longbench,
    score_summaries,
)
from evaluation.sentences import find_punkt
from evaluation.targets import AccuracyTargets, Verdict, judge, preset, targets_for
from harness.benchmarks import AccuracySpec, Benchmark
from harness.datasets import file_sha256

if TYPE_CHECKING:
    import pandas as pd
    from transformers import PreTrainedTokenizerBase

# Token ids are decoded in blocks: one batch_decode call per block keeps the Rust tokenizer
# busy without holding the ids of the whole log.
DECODE_BLOCK = 1024


@dataclass(frozen=True)
class EvaluationResult:
    """Metrics (flat names as in the reference scripts), verdict and written files."""

    benchmark: str
    targets: AccuracyTargets
    metrics: dict[str, float | int]
    verdict: Verdict
    paths: ReportPaths
    accuracy_log_sha256: str

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def table(self) -> str:
        return verdict_table(self.targets, self.metrics, self.verdict)


@dataclass(frozen=True)
class DecodedLog:
    qsl_indices: tuple[int, ...]
    predictions: tuple[str, ...]
    generated_tokens: int


def evaluate(
    benchmark: str,
    accuracy_log: str | Path,
    dataset: pd.DataFrame,
    tokenizer: str | Path | PreTrainedTokenizerBase,
    *,
    dtype: str = "int32",
    output_dir: str | Path | None = None,
    accuracy_level: str = "99",
    nltk_data: str | Path | None = None,
    workers: int | None = None,
) -> EvaluationResult:
    """Score an accuracy log like the MLCommons reference and judge it like the checker.

    Writes ``accuracy.json`` and ``accuracy.txt`` into ``output_dir`` (default: the log's
    folder). Bad input raises EvaluationError with a one-line message.
    """
    targets = targets_for(benchmark, accuracy_level)
    bench = preset(benchmark)
    spec = bench.accuracy
    log_path = Path(accuracy_log)
    labels = _dataset_column(dataset, bench.schema.target_column, benchmark, spec)
    kinds = (
        _dataset_column(dataset, "metric", benchmark, spec) if spec.scoring == "longbench" else []
    )
    punkt = find_punkt(nltk_data)
    text_tokenizer = load_tokenizer(tokenizer)

    decoded = decode_accuracy_log(log_path, text_tokenizer, dtype=dtype, dataset_size=len(labels))
    if not decoded.predictions:
        raise EvaluationError(
            f"accuracy log {log_path} holds no samples: re-run the test in accuracy mode"
        )
    sample_targets = [_label(labels, index, bench) for index in decoded.qsl_indices]
    n_workers = resolve_workers(workers, len(decoded.predictions))

    metrics: dict[str, float | int]
    rows_per_metric: dict[str, int] | None = None  # the 405B mix: rows each pooled metric saw
    if spec.scoring == "summary":
        scores = score_summaries(
            decoded.predictions, sample_targets, punkt=punkt, workers=n_workers
        )
        metrics = {
            "rouge1": mean_percent_rounded(scores.rouge1),
            "rouge2": mean_percent_rounded(scores.rouge2),
            "rougeL": mean_percent_rounded(scores.rougeL),
            "rougeLsum": mean_percent_rounded(scores.rougeLsum),
        }
        prediction_chars = scores.prediction_chars
    else:
        sample_kinds = [str(kinds[index]) for index in decoded.qsl_indices]
        longbench = score_longbench(
            decoded.predictions,
            sample_targets,
            sample_kinds,
            punkt=punkt,
            workers=n_workers,
        )
        metrics = dict(pool_row_scores(longbench.rows))
        rows_per_metric = {m: sum(r.metric == m for r in longbench.rows) for m in metrics}
        prediction_chars = longbench.prediction_chars
    metrics.update(length_metrics(prediction_chars, decoded.generated_tokens))

    # On a subset (a demo, a quick check) a total such as gen_len is judged against the
    # window scaled to the samples scored; the whole dataset is judged as the checker does.
    targets = targets.for_samples(len(decoded.predictions))
    verdict = judge(targets, metrics)
    log_sha256 = file_sha256(log_path)
    paths = write_reports(
        Path(output_dir) if output_dir is not None else log_path.parent,
        style=spec.report_style,
        targets=targets,
        metrics=metrics,
        verdict=verdict,
        accuracy_log=log_path,
        log_sha256=log_sha256,
        rows_per_metric=rows_per_metric,
    )
    return EvaluationResult(benchmark, targets, metrics, verdict, paths, log_sha256)


def length_metrics(
    prediction_chars: Sequence[int], generated_tokens: int
) -> dict[str, float | int]:
    """gen_len: characters of all postprocessed predictions (sentences joined by newlines, as
    the reference measures them); tokens_per_sample: mean generated tokens, 1 decimal."""
    gen_num = len(prediction_chars)
    return {
        "gen_len": int(sum(prediction_chars)),
        "gen_num": gen_num,
        "gen_tok_len": int(generated_tokens),
        "tokens_per_sample": round(generated_tokens / gen_num, 1),
    }


def load_tokenizer(tokenizer: str | Path | PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from transformers import AutoTokenizer

    try:
        # local_files_only: certification must not fetch anything at run time.
        return AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
    except (OSError, ValueError) as error:
        first_line = next((ln for ln in str(error).splitlines() if ln.strip()), "")
        raise EvaluationError(
            f"cannot load a tokenizer from {tokenizer} ({first_line.strip()[:160]}): pass "
            "--tokenizer the model's local folder (the one the run used)"
        ) from None


def decode_accuracy_log(
    log_path: Path, tokenizer: PreTrainedTokenizerBase, *, dtype: str, dataset_size: int
) -> DecodedLog:
    """Stream the log, dedupe it and detokenize with ``skip_special_tokens=True``.

    An id outside the tokenizer's vocabulary is refused: a fast tokenizer drops it silently,
    so a log decoded with another model's (smaller) tokenizer would score as empty text.
    """
    vocab = len(tokenizer)
    indices: list[int] = []
    predictions: list[str] = []
    block: list[list[int]] = []
    generated_tokens = 0
    for sample in read_accuracy_log(log_path, dtype=dtype, dataset_size=dataset_size):
        indices.append(sample.qsl_idx)
        ids = sample.token_ids
        outside = ids[(ids >= vocab) | (ids < 0)]
        if len(outside):
            bad = int(outside[0])
            raise EvaluationError(
                f"accuracy log {log_path}: qsl_idx {sample.qsl_idx} holds token id {bad}, outside "
                f"the tokenizer's vocabulary of {vocab}: pass --tokenizer the model's own "
                "tokenizer and the --dtype the SUT wrote"
            )
        generated_tokens += len(ids)
        block.append(sample.token_ids.tolist())
        if len(block) >= DECODE_BLOCK:
            predictions.extend(_decode_block(tokenizer, block, indices, log_path))
            block = []
    if block:
        predictions.extend(_decode_block(tokenizer, block, indices, log_path))
    return DecodedLog(tuple(indices), tuple(predictions), generated_tokens)


def _decode_block(
    tokenizer: PreTrainedTokenizerBase,
    block: list[list[int]],
    indices: list[int],
    log_path: Path,
) -> list[str]:
    try:
        return list(tokenizer.batch_decode(block, skip_special_tokens=True))
    except (OverflowError, ValueError, TypeError, IndexError) as error:
        first = indices[len(indices) - len(block)]
        raise EvaluationError(
            f"accuracy log {log_path}: token ids from qsl_idx {first} on do not decode with "
            f"this tokenizer ({type(error).__name__}): pass the model's tokenizer and the "
            "--dtype the SUT wrote"
        ) from None


def _dataset_column(dataset: Any, column: str, benchmark: str, spec: AccuracySpec) -> list[Any]:
    if column not in getattr(dataset, "columns", ()):
        present = ", ".join(map(str, getattr(dataset, "columns", ()))) or "none"
        raise EvaluationError(
            f"dataset has no {column!r} column (columns: {present}): pass {spec.dataset_hint}, "
            f"the {benchmark} dataset with reference outputs"
        )
    # Rows are addressed by position: LoadGen's qsl_idx is the row's position in the QSL,
    # which the harness builds from this frame in order. (The reference indexes by label,
    # which is the same on its datasets' RangeIndex.)
    return list(dataset[column].tolist())


def _label(labels: Sequence[Any], index: int, bench: Benchmark) -> str:
    value = labels[index]
    if not isinstance(value, str):
        raise EvaluationError(
            f"dataset row {index} has no text in column {bench.schema.target_column!r} "
            f"(found {type(value).__name__}): pass {bench.accuracy.dataset_hint} with reference "
            "outputs"
        )
    return value
