"""Llama 3.1 405B row metrics and their pooling, on crafted rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from rouge_score import rouge_scorer

from evaluation.errors import EvaluationError
from evaluation.longbench import (
    RowScore,
    niah_exact_match,
    pool_row_scores,
    qa_exact_match,
    score_row,
)
from evaluation.rouge import RougeScorer

NEEDLE = "3f2b8c1a-9d4e-4b7a-8c2d-1e5f6a7b8c9d"
OTHER = "a1b2c3d4-e5f6-4711-8899-aabbccddeeff"


def test_niah_exact_uuid_scores_100() -> None:
    assert niah_exact_match(f"The special magic number is {NEEDLE}.", f"It is {NEEDLE}") == 100.0


def test_niah_without_predicted_uuid_scores_0() -> None:
    assert niah_exact_match(NEEDLE, "I could not find the magic number.") == 0.0


def test_niah_scores_label_characters_found_in_predicted_uuid() -> None:
    # Pairs are scored by the share of the label UUID's characters that occur anywhere in
    # the predicted UUID (the reference's behaviour): OTHER contains a-f, 0-9 and "-"
    # but not every character of NEEDLE? Compute it by hand below.
    label_chars = list(NEEDLE)
    found = sum(1 for char in label_chars if char in OTHER)
    expected = round(found / len(label_chars) * 100, 2)
    assert niah_exact_match(NEEDLE, OTHER) == expected
    # A "UUID" of letters the needle lacks scores below 100.
    stranger = "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"
    assert niah_exact_match(NEEDLE, stranger) == round(4 / 36 * 100, 2)  # only the 4 dashes


def test_niah_divides_by_predicted_uuid_count() -> None:
    # Two predicted UUIDs, one label UUID: one pair scores 100, divided by 2 predictions.
    assert niah_exact_match(NEEDLE, f"{NEEDLE} or maybe {OTHER}") == 50.0
    # Two labels, two predictions, both right: 100.
    assert niah_exact_match(f"{NEEDLE} {OTHER}", f"{NEEDLE}, {OTHER}") == 100.0


def test_niah_is_case_insensitive() -> None:
    assert niah_exact_match(NEEDLE, NEEDLE.upper()) == 100.0


def test_qa_takes_text_after_last_answer_prefix() -> None:
    prediction = "Answer: Paris is wrong. Let me think. Answer: Lyon"
    assert qa_exact_match("Lyon", prediction) == 100.0
    assert qa_exact_match("Paris", prediction) == 0.0


def test_qa_label_alternatives_are_pipe_separated_and_whitespace_insensitive() -> None:
    label = "New York City|NYC|the Big Apple"
    assert qa_exact_match(label, "I believe it is newyork city.") == 100.0
    assert qa_exact_match(label, "Answer: The BIG apple") == 100.0
    assert qa_exact_match(label, "Answer: Boston") == 0.0


def test_qa_answer_contained_in_label_matches() -> None:
    # The answer itself being a substring of the label is a match (before normalization).
    assert qa_exact_match("George Washington", "Answer: Washington") == 100.0
    # ... but only exactly: case differs and no alternative is inside the answer.
    assert qa_exact_match("George Washington", "Answer: washington") == 0.0


def test_rouge_row_is_rouge_l_times_100() -> None:
    reference = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    label, prediction = "The quick brown fox jumps.", "A quick brown dog jumped."
    row = score_row("rouge", label, prediction, RougeScorer())
    assert row == RowScore("rougeL", 100 * reference.score(label, prediction)["rougeL"].fmeasure)


def test_unknown_row_metric_is_a_clear_error() -> None:
    with pytest.raises(EvaluationError, match="unknown 405B row metric 'bleu'"):
        score_row("bleu", "a", "b", RougeScorer())


def test_pooling_equals_pandas_describe_mean_of_row_dicts() -> None:
    rows = [
        RowScore("exact_match", 100.0),
        RowScore("rougeL", 21.123456789),
        RowScore("exact_match", 0.0),
        RowScore("rougeL", 33.3333333333),
        RowScore("exact_match", 97.22),
        RowScore("rougeL", 0.1),
    ]
    pooled = pool_row_scores(rows)
    frame = pd.DataFrame({"accuracy": [{row.metric: row.value} for row in rows]})
    expected = frame.accuracy.apply(pd.Series).describe().loc["mean"].to_dict()
    assert list(pooled) == list(expected) == ["exact_match", "rougeL"]
    for key, value in expected.items():
        assert pooled[key] == value
    assert math.isclose(pooled["exact_match"], (100.0 + 0.0 + 97.22) / 3)
