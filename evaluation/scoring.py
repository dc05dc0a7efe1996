"""Scoring of decoded predictions, chunked over worker processes.

Sentence splitting and ROUGE dominate the run time and are independent per sample, so
the samples are cut into contiguous chunks and each chunk is scored in a worker process.
Chunks carry plain strings and return plain numbers; results come back in sample order,
which keeps every mean's summation order (and so its float) independent of the worker count.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from evaluation.longbench import RowScore, score_row
from evaluation.rouge import RougeScorer
from evaluation.sentences import PunktSource, SentenceSplitter

# Below this many samples the worker start-up (an interpreter and NLTK per process) costs
# more than it saves, so automatic sizing scores in-process.
MIN_SAMPLES_FOR_PROCESSES = 512
CHUNKS_PER_WORKER = 4

ChunkT = TypeVar("ChunkT")
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class SummaryChunk:
    """Raw predictions and targets of CNN/DailyMail or OpenOrca samples."""

    punkt: PunktSource
    predictions: tuple[str, ...]
    targets: tuple[str, ...]


@dataclass(frozen=True)
class SummaryScores:
    """Per-sample F-measures (0..1) and postprocessed prediction lengths, in sample order."""

    rouge1: tuple[float, ...]
    rouge2: tuple[float, ...]
    rougeL: tuple[float, ...]  # noqa: N815 - the metric's published name
    rougeLsum: tuple[float, ...]  # noqa: N815
    prediction_chars: tuple[int, ...]


@dataclass(frozen=True)
class LongBenchChunk:
    """Raw predictions, targets and per-row metric kinds of 405B samples."""

    punkt: PunktSource
    predictions: tuple[str, ...]
    targets: tuple[str, ...]
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class LongBenchScores:
    rows: tuple[RowScore, ...]
    prediction_chars: tuple[int, ...]


def score_summary_chunk(chunk: SummaryChunk) -> SummaryScores:
    splitter = SentenceSplitter.from_source(chunk.punkt)
    scorer = RougeScorer()
    rouge1, rouge2, rouge_l, rouge_lsum, lengths = [], [], [], [], []
    for prediction, target in zip(chunk.predictions, chunk.targets, strict=True):
        prediction = splitter.postprocess(prediction)
        scores = scorer.score(splitter.postprocess(target), prediction)
        rouge1.append(scores.rouge1)
        rouge2.append(scores.rouge2)
        rouge_l.append(scores.rougeL)
        rouge_lsum.append(scores.rougeLsum)
        lengths.append(len(prediction))
    return SummaryScores(
        tuple(rouge1), tuple(rouge2), tuple(rouge_l), tuple(rouge_lsum), tuple(lengths)
    )


def score_longbench_chunk(chunk: LongBenchChunk) -> LongBenchScores:
    splitter = SentenceSplitter.from_source(chunk.punkt)
    scorer = RougeScorer()
    rows = []
    lengths = []
    for prediction, target, kind in zip(chunk.predictions, chunk.targets, chunk.kinds, strict=True):
        # The reference applies the ROUGE postprocessing (strip, one sentence per line) to
        # every row before any metric, EM rows included; it can matter for "Answer: ".
        prediction = splitter.postprocess(prediction)
        rows.append(score_row(kind, splitter.postprocess(target), prediction, scorer))
        lengths.append(len(prediction))
    return LongBenchScores(tuple(rows), tuple(lengths))


def resolve_workers(workers: int | None, n_samples: int) -> int:
    """Explicit counts are honoured; automatic sizing uses every core for large inputs."""
    if workers is not None:
        return max(1, workers)
    if n_samples < MIN_SAMPLES_FOR_PROCESSES:
        return 1
    return os.cpu_count() or 1


def chunk_bounds(n_items: int, n_chunks: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) ranges of near-equal size covering range(n_items)."""
    n_chunks = max(1, min(n_chunks, n_items))
    base, extra = divmod(n_items, n_chunks)
    bounds = []
    start = 0
    for index in range(n_chunks):
        stop = start + base + (1 if index < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def map_chunks(
    function: Callable[[ChunkT], ResultT], chunks: Sequence[ChunkT], workers: int
) -> list[ResultT]:
    """``[function(c) for c in chunks]``, over ``workers`` processes when more than one.

    Workers are spawned, not forked: the caller may hold engine threads or a Rust tokenizer
    thread pool, which a fork would copy in an undefined state.
    """
    if workers <= 1 or len(chunks) <= 1:
        return [function(chunk) for chunk in chunks]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=context) as pool:
        return list(pool.map(function, chunks))


def score_summaries(
    predictions: Sequence[str], targets: Sequence[str], *, punkt: PunktSource, workers: int
) -> SummaryScores:
    bounds = chunk_bounds(len(predictions), workers * CHUNKS_PER_WORKER if workers > 1 else 1)
    chunks = [SummaryChunk(punkt, tuple(predictions[a:b]), tuple(targets[a:b])) for a, b in bounds]
    parts = map_chunks(score_summary_chunk, chunks, workers)
    return SummaryScores(
        rouge1=tuple(value for part in parts for value in part.rouge1),
        rouge2=tuple(value for part in parts for value in part.rouge2),
        rougeL=tuple(value for part in parts for value in part.rougeL),
        rougeLsum=tuple(value for part in parts for value in part.rougeLsum),
        prediction_chars=tuple(length for part in parts for length in part.prediction_chars),
    )


def score_longbench(
    predictions: Sequence[str],
    targets: Sequence[str],
    kinds: Sequence[str],
    *,
    punkt: PunktSource,
    workers: int,
) -> LongBenchScores:
    bounds = chunk_bounds(len(predictions), workers * CHUNKS_PER_WORKER if workers > 1 else 1)
    chunks = [
        LongBenchChunk(punkt, tuple(predictions[a:b]), tuple(targets[a:b]), tuple(kinds[a:b]))
        for a, b in bounds
    ]
    parts = map_chunks(score_longbench_chunk, chunks, workers)
    return LongBenchScores(
        tuple(row for part in parts for row in part.rows),
        tuple(length for part in parts for length in part.prediction_chars),
    )


def mean_percent_rounded(fmeasures: Sequence[float]) -> float:
    """Mean F-measure x 100 rounded to 4 decimals, as the reference computes it.

    ``round(np.mean(v) * 100, 4)`` on a numpy float rounds with numpy's scaled-rint, not
    Python's correctly rounded decimal ``round``; the two can differ on the 4th decimal of
    a tie, so numpy's is used.
    """
    return float(np.round(np.mean(np.asarray(fmeasures, dtype=np.float64)) * 100, 4))
