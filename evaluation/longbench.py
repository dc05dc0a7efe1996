"""Per-row metrics of the Llama 3.1 405B accuracy set and how they are pooled.

The 405B dataset mixes tasks; each row names its metric in the ``metric`` column:
``rouge`` (summarization: rougeL F-measure x 100), ``niah_em`` (needle-in-a-haystack UUID
retrieval, the RULER string-match score) and ``qa_em`` (question answering, label
alternatives separated by ``|``). Both EM kinds report ``exact_match``; the accuracy figures
are the mean rougeL over ``rouge`` rows and the mean exact_match over all EM rows.

Semantics follow the MLCommons reference evaluation, quirks included (they decide the
certified number), each marked below.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evaluation.errors import EvaluationError
from evaluation.rouge import RougeScorer

# Five groups of word characters (8-4-4-4-12), as the reference matches UUIDs; \w also
# matches letters outside hex and underscores, which the reference accepts too.
UUID_PATTERN = re.compile(r"\w{8}-\w{4}-\w{4}-\w{4}-\w{12}")
ANSWER_PREFIX = "Answer: "

METRIC_KINDS: tuple[str, ...] = ("rouge", "niah_em", "qa_em")


def niah_exact_match(label: str, prediction: str) -> float:
    """Needle-in-a-haystack score (0..100), rounded to 2 decimals per row like the reference.

    Reference quirk kept: the i-th UUID of the prediction is paired with the i-th UUID of
    the label, and a pair scores the fraction of the label UUID's *characters* that occur
    anywhere in the predicted UUID (the RULER helper it borrows expects lists of strings but
    is handed strings). The sum is divided by the number of predicted UUIDs. A prediction
    without a UUID scores 0.
    """
    label_uuids = UUID_PATTERN.findall(label)
    predicted_uuids = UUID_PATTERN.findall(prediction)
    if not predicted_uuids:
        return 0.0
    total = 0.0
    # Unequal counts: pairs stop at the shorter list, as zip does in the reference.
    for predicted, expected in zip(predicted_uuids, label_uuids, strict=False):
        lowered = predicted.lower()
        total += sum(1.0 if char.lower() in lowered else 0.0 for char in expected) / len(expected)
    return round(total / len(predicted_uuids) * 100, 2)


def qa_exact_match(label: str, prediction: str) -> float:
    """Question-answering match: 100.0 or 0.0.

    The answer is the text after the last ``"Answer: "`` when the prediction has one, else
    the whole prediction. It matches when it is a substring of the label, or when any
    ``|``-separated label alternative, lowercased without whitespace, is a substring of the
    answer lowercased without whitespace.
    """
    answer = prediction
    cut = prediction.rfind(ANSWER_PREFIX)
    if cut != -1:
        answer = prediction[cut + len(ANSWER_PREFIX) :]
    if answer in label:
        return 100.0
    normalized_answer = _squash(answer)
    return (
        100.0 if any(_squash(option) in normalized_answer for option in label.split("|")) else 0.0
    )


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


@dataclass(frozen=True)
class RowScore:
    """One row's score under its reported metric name (rougeL or exact_match), 0..100."""

    metric: str
    value: float


def score_row(kind: str, label: str, prediction: str, scorer: RougeScorer) -> RowScore:
    if kind == "rouge":
        return RowScore("rougeL", 100 * scorer.rouge_l(label, prediction))
    if kind == "niah_em":
        return RowScore("exact_match", niah_exact_match(label, prediction))
    if kind == "qa_em":
        return RowScore("exact_match", qa_exact_match(label, prediction))
    raise EvaluationError(
        f"unknown 405B row metric {kind!r}: the dataset's metric column must hold one of "
        f"{', '.join(METRIC_KINDS)}"
    )


def pool_row_scores(rows: Sequence[RowScore]) -> dict[str, float]:
    """Mean per reported metric, metrics in order of first appearance.

    The reference puts each row's one-key dict into a DataFrame (other metrics NaN) and takes
    ``describe()``'s mean, i.e. pandas' NaN-skipping mean: the column summed with missing
    rows as 0.0, divided by the rows present. The same array and sum order are used here so
    the float is the same, not only its first 4 decimals.
    """
    order: list[str] = []
    for row in rows:
        if row.metric not in order:
            order.append(row.metric)
    pooled: dict[str, float] = {}
    for metric in order:
        column = np.array([row.value if row.metric == metric else 0.0 for row in rows])
        present = sum(1 for row in rows if row.metric == metric)
        pooled[metric] = float(column.sum(dtype=np.float64) / present)
    return pooled
