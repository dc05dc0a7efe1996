"""ROUGE and sentence splitting: hand-checked cases and agreement with rouge-score / NLTK."""

from __future__ import annotations

import random

import nltk
import pytest
from rouge_score import rouge_scorer, tokenizers

from evaluation.rouge import RougeScorer, RougeTokenizer, lcs_length, lcs_reference_indices
from evaluation.sentences import SentenceSplitter

ROUGE_TYPES = ["rouge1", "rouge2", "rougeL", "rougeLsum"]


def scores(target: str, prediction: str) -> dict[str, float]:
    result = RougeScorer().score(target, prediction)
    return {key: getattr(result, key) for key in ROUGE_TYPES}


def test_hand_checked_single_sentence() -> None:
    # Tokens: the cat sat on the mat / the cat lay on the mat (3-letter words are not stemmed).
    got = scores("The cat sat on the mat.", "The cat lay on the mat.")
    assert got["rouge1"] == pytest.approx(5 / 6)  # the, the, cat, on, mat
    assert got["rouge2"] == pytest.approx(3 / 5)  # (the cat) (on the) (the mat)
    assert got["rougeL"] == pytest.approx(5 / 6)  # the cat on the mat
    assert got["rougeLsum"] == pytest.approx(5 / 6)


def test_stemming_and_case_make_tokens_equal() -> None:
    # running -> run, dogs -> dog; "dog" (3 letters) is left alone; case and punctuation vanish.
    got = scores("Running dogs!", "runs, DOG")
    assert got == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "rougeLsum": 1.0}


def test_rouge_lsum_unions_sentence_lcs_where_rouge_l_cannot() -> None:
    # Sentences swapped: the whole-text LCS is 3 of 6 tokens, but summary-level LCS matches
    # each target sentence with its moved copy.
    got = scores("a b c.\nd e f.", "d e f.\na b c.")
    assert got["rougeL"] == pytest.approx(0.5)
    assert got["rougeLsum"] == pytest.approx(1.0)
    assert got["rouge1"] == pytest.approx(1.0)
    assert got["rouge2"] == pytest.approx(4 / 5)  # (c d) and (f a) differ


def test_empty_prediction_scores_zero() -> None:
    assert scores("Some reference text here.", "") == dict.fromkeys(ROUGE_TYPES, 0.0)
    assert scores("Some reference text here.", "!!! ...") == dict.fromkeys(ROUGE_TYPES, 0.0)


def _random_text(rng: random.Random) -> str:
    # A small vocabulary forces many repeated tokens, i.e. many equally long LCSs, which is
    # where the backtrack order matters for rougeLsum.
    vocabulary = [
        "the",
        "a",
        "cat",
        "cats",
        "running",
        "runs",
        "ran",
        "police",
        "policies",
        "said",
        "U.S.",
        "2024",
        "x",
        "mat",
        "on",
        "over",
        "élan",
        "naïve",
        "don't",
        "co-operate",
    ]
    lines = []
    for _ in range(rng.randint(0, 5)):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 14))]
        lines.append(" ".join(words) + rng.choice(["", ".", "!", " ?", " ..."]))
    separator = rng.choice(["\n", "\n\n", " "])
    return separator.join(lines)


def test_agrees_with_rouge_score_exactly_on_random_texts() -> None:
    rng = random.Random(1234)
    reference = rouge_scorer.RougeScorer(ROUGE_TYPES, use_stemmer=True)
    ours = RougeScorer()
    for _ in range(600):
        target, prediction = _random_text(rng), _random_text(rng)
        expected = reference.score(target, prediction)
        got = ours.score(target, prediction)
        for key in ROUGE_TYPES:
            # Bit-identical, not approximately equal: the means are rounded to 4 decimals.
            assert getattr(got, key) == expected[key].fmeasure, (key, target, prediction)
        assert ours.rouge_l(target, prediction) == expected["rougeL"].fmeasure


def test_tokenizer_matches_rouge_score_default_tokenizer() -> None:
    rng = random.Random(7)
    reference = tokenizers.DefaultTokenizer(use_stemmer=True)
    ours = RougeTokenizer()
    for _ in range(300):
        text = _random_text(rng)
        assert ours.tokenize(text) == reference.tokenize(text)


def _table_lcs(first: list[str], second: list[str]) -> int:
    rows = [[0] * (len(second) + 1) for _ in range(len(first) + 1)]
    for i, a in enumerate(first, 1):
        for j, b in enumerate(second, 1):
            rows[i][j] = rows[i - 1][j - 1] + 1 if a == b else max(rows[i - 1][j], rows[i][j - 1])
    return rows[-1][-1]


def test_bit_parallel_lcs_equals_dynamic_programming() -> None:
    rng = random.Random(99)
    for _ in range(2000):
        first = [rng.choice("abcd") for _ in range(rng.randint(0, 40))]
        second = [rng.choice("abcde") for _ in range(rng.randint(0, 40))]
        assert lcs_length(first, second) == _table_lcs(first, second)
        assert len(lcs_reference_indices(first, second)) == _table_lcs(first, second)


def test_backtrack_reads_out_the_same_lcs_as_rouge_score() -> None:
    # Few distinct tokens: many LCSs of equal length, so the tie-breaking is exercised.
    rng = random.Random(5)
    for _ in range(3000):
        first = [rng.choice("abc") for _ in range(rng.randint(0, 25))]
        second = [rng.choice("abc") for _ in range(rng.randint(0, 25))]
        assert lcs_reference_indices(first, second) == rouge_scorer.lcs_ind(first, second)


def test_sentence_splitter_equals_nltk_sent_tokenize(
    nltk_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nltk.data, "path", [nltk_root, *nltk.data.path])
    splitter = SentenceSplitter.from_nltk_data(nltk_root)
    texts = [
        "Mr. Smith went to Washington. He met Dr. Jones at 5 p.m. on Jan. 3rd! Was it fun?",
        "The U.S. economy grew 2.5% in Q3.  Analysts said so.\nNew line here",
        "no punctuation at all",
        "",
    ]
    for text in texts:
        assert splitter.split(text) == nltk.sent_tokenize(text)
        assert splitter.postprocess(f"  {text}  ") == "\n".join(nltk.sent_tokenize(text.strip()))
