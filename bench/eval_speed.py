"""Speed of the CNN/DailyMail scorer: evaluation.scoring vs rouge-score called serially.

Generates N synthetic prediction/target pairs of CNN/DailyMail summary length (50-100
words, several sentences, Zipf-distributed English-like words so the stemmer and the
sentence splitter have realistic work), then times

* ours: ``evaluation.scoring.score_summaries`` (sentence split + ROUGE, over processes);
* serial reference path: ``nltk.sent_tokenize`` postprocessing + ``rouge_score.RougeScorer``
  (rouge1, rouge2, rougeL, rougeLsum, use_stemmer=True), one sample after another, which is
  what the reference CNN/DailyMail script runs;

checks that the four means agree to 4 decimals, and prints seconds and the ratio.

    python bench/eval_speed.py [--samples 13368] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.scoring import mean_percent_rounded, score_summaries  # noqa: E402
from evaluation.sentences import (  # noqa: E402
    find_punkt,
    packaged_punkt_parameters,
    write_punkt_tab,
)

STEMS = (
    "report",
    "govern",
    "polic",
    "elect",
    "announc",
    "investig",
    "develop",
    "protest",
    "nation",
    "support",
    "offic",
    "minist",
    "court",
    "charg",
    "hospit",
    "famil",
    "player",
    "season",
    "market",
    "compan",
    "scien",
    "research",
    "climat",
    "weather",
    "storm",
    "vote",
    "campaign",
    "witness",
    "attack",
    "defend",
    "presid",
    "council",
    "train",
    "educat",
    "student",
    "teach",
    "build",
    "destroy",
    "rescu",
    "travel",
    "celebrat",
)
SUFFIXES = ("", "s", "ed", "ing", "ation", "ers", "ly", "ment", "ful", "ness", "ive", "al")
FUNCTION_WORDS = (
    "the",
    "a",
    "of",
    "to",
    "in",
    "and",
    "on",
    "for",
    "was",
    "is",
    "that",
    "with",
    "he",
    "she",
    "it",
    "at",
    "by",
    "from",
    "has",
    "have",
    "were",
    "after",
    "said",
    "but",
    "its",
)


def make_vocabulary(rng: random.Random, size: int) -> list[str]:
    words = set()
    while len(words) < size:
        stem = rng.choice(STEMS) + "".join(
            rng.choice("aeioulnrst") for _ in range(rng.randint(0, 3))
        )
        words.add(stem + rng.choice(SUFFIXES))
    return sorted(words)


def make_summary(rng: random.Random, vocabulary: list[str], weights: list[float]) -> str:
    n_words = rng.randint(50, 100)
    sentences, words_left = [], n_words
    while words_left > 0:
        length = min(words_left, rng.randint(8, 25))
        content = rng.choices(vocabulary, weights=weights, k=length)
        words = [w if rng.random() > 0.4 else rng.choice(FUNCTION_WORDS) for w in content]
        if rng.random() < 0.2:
            words[rng.randrange(length)] = str(rng.randint(2, 2024))
        if rng.random() < 0.1:
            words.insert(0, rng.choice(("Mr.", "Dr.", "U.S.", "Sen.")))
        sentence = " ".join(words)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".....!?"))
        words_left -= length
    return " ".join(sentences)


def make_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    vocabulary = make_vocabulary(rng, 20000)
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    rng.shuffle(vocabulary)
    targets, predictions = [], []
    for _ in range(n):
        target = make_summary(rng, vocabulary, weights)
        # A prediction shares roughly half its words with the target, in a similar order.
        words = target.split()
        kept = [
            w if rng.random() < 0.55 else rng.choices(vocabulary, weights=weights)[0] for w in words
        ]
        cut = rng.randint(len(kept) // 2, len(kept))
        predictions.append(" ".join(kept[:cut]) + ".")
        targets.append(target)
    return predictions, targets


def score_with_rouge_score_serially(
    predictions: list[str], targets: list[str], nltk_root: str
) -> dict[str, float]:
    import nltk
    from rouge_score import rouge_scorer

    nltk.data.path.insert(0, nltk_root)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    columns: dict[str, list[float]] = {k: [] for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    for prediction, target in zip(predictions, targets, strict=True):
        prediction = "\n".join(nltk.sent_tokenize(prediction.strip()))
        target = "\n".join(nltk.sent_tokenize(target.strip()))
        scores = scorer.score(target, prediction)
        for key, column in columns.items():
            column.append(scores[key].fmeasure)
    return {key: mean_percent_rounded(column) for key, column in columns.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=13368)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-serial", action="store_true", help="time ours only")
    args = parser.parse_args()

    punkt = find_punkt(None)
    punkt.load()  # fail fast on unreadable punkt data
    # nltk.sent_tokenize (the serial reference) reads an NLTK data folder: NLTK_DATA's, or
    # the packaged model written out in NLTK's format.
    nltk_root = punkt.nltk_data_root or str(
        write_punkt_tab(packaged_punkt_parameters(), tempfile.mkdtemp(prefix="nltk-"))
    )
    predictions, targets = make_pairs(args.samples, args.seed)
    words = sum(len(t.split()) for t in targets) / len(targets)
    print(f"{args.samples} pairs, {words:.1f} words per target, {args.workers} workers")

    start = time.perf_counter()
    scores = score_summaries(predictions, targets, punkt=punkt, workers=args.workers)
    ours_s = time.perf_counter() - start
    ours = {
        "rouge1": mean_percent_rounded(scores.rouge1),
        "rouge2": mean_percent_rounded(scores.rouge2),
        "rougeL": mean_percent_rounded(scores.rougeL),
        "rougeLsum": mean_percent_rounded(scores.rougeLsum),
    }
    print(f"ours:                    {ours_s:8.2f} s  {ours}")
    if args.skip_serial:
        return
    start = time.perf_counter()
    reference = score_with_rouge_score_serially(predictions, targets, nltk_root)
    serial_s = time.perf_counter() - start
    print(f"rouge-score, serial:     {serial_s:8.2f} s  {reference}")
    print(f"speed-up: {serial_s / ours_s:.2f}x; means equal: {ours == reference}")


if __name__ == "__main__":
    main()
