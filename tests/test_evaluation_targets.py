"""Targets and verdict: the checker's values, inclusive bounds, accuracy.txt that it parses."""

from __future__ import annotations

import math
import re

import pytest

from evaluation.errors import EvaluationError
from evaluation.report import accuracy_txt
from evaluation.targets import judge, known_benchmarks, targets_for

# The checker matches each accuracy.txt line with these forms: ROUGE values may be quoted,
# gen_len / tokens_per_sample / exact_match follow exactly one whitespace character.
CHECKER_FORMS = {
    "rouge1": r"'rouge1':\s+'?([\d.]+)'?",
    "rouge2": r"'rouge2':\s+'?([\d.]+)'?",
    "rougeL": r"'rougeL':\s+'?([\d.]+)'?",
    "rougeLsum": r"'rougeLsum':\s+'?([\d.]+)'?",
    "gen_len": r"'gen_len':\s([\d.]+)",
    "tokens_per_sample": r"'tokens_per_sample':\s([\d.]+)",
    "exact_match": r"'exact_match':\s([\d.]+)",
}
HASH_FORM = r"^hash=(\w+)$"


def checker_verdict(text: str, benchmark: str, level: str = "99") -> bool:
    """What the checker concludes from accuracy.txt: every target seen and >= its bound,
    nothing above an upper limit, and a hash line."""
    targets = targets_for(benchmark, level)
    ok, hash_seen = True, False
    for target in targets.metrics:
        found = [
            m.group(1)
            for line in text.splitlines()
            if (m := re.search(CHECKER_FORMS[target.metric], line))
        ]
        if not found:
            return False
        value = float(found[0])
        ok &= value >= target.lower_bound
        if target.upper_bound is not None:
            ok &= value <= target.upper_bound
    hash_seen = any(re.match(HASH_FORM, line) for line in text.splitlines())
    return ok and hash_seen


def test_reference_values_of_each_benchmark() -> None:
    t = {m.metric: m for m in targets_for("llama3_1-8b").metrics}
    assert (t["rouge1"].reference, t["rougeLsum"].reference, t["gen_len"].reference) == (
        38.7792,
        35.793,
        8167644,
    )
    assert t["rouge2"].lower_bound == 15.9075 * 0.99
    assert t["gen_len"].lower_bound == 8167644 * 0.9
    assert t["gen_len"].upper_bound == 8167644 * 1.1
    edge = {m.metric: m.reference for m in targets_for("llama3_1-8b-edge").metrics}
    assert edge == {
        "rouge1": 39.06,
        "rouge2": 16.1147,
        "rougeL": 24.6375,
        "rougeLsum": 36.124,
        "gen_len": 3051113,
    }
    orca = {m.metric: m for m in targets_for("llama2-70b", "99.9").metrics}
    assert orca["rougeL"].lower_bound == 28.6162 * 0.999
    assert orca["tokens_per_sample"].lower_bound == 294.45 * 0.9
    assert orca["tokens_per_sample"].upper_bound == 294.45 * 1.1
    assert targets_for("llama2-70b").checker_model == "llama2-70b-99"
    big = {m.metric: m for m in targets_for("llama3_1-405b").metrics}
    assert big["rougeL"].lower_bound == 21.6666 * 0.99
    assert big["exact_match"].lower_bound == 90.1335 * 0.99
    assert big["tokens_per_sample"].upper_bound == 684.68 * 1.1
    assert targets_for("llama2-70b-interactive").metrics == targets_for("llama2-70b").metrics
    assert targets_for("llama3_1-405b-interactive").metrics == targets_for("llama3_1-405b").metrics


STYLES = {
    "llama3_1-8b": "cnn_dailymail",
    "llama3_1-8b-edge": "cnn_dailymail",
    "llama2-70b": "open_orca",
    "llama3_1-405b": "longbench",
}


def passing_metrics(benchmark: str, level: str) -> dict[str, float | int]:
    """Every checked metric at its reference value, plus the other reported keys."""
    metrics: dict[str, float | int] = {"rougeL": 50.0, "exact_match": 95.0}
    if STYLES[benchmark] != "longbench":
        metrics.update({"rouge1": 50.0, "rouge2": 50.0, "rougeLsum": 50.0})
    metrics.update(
        {"gen_len": 1000, "gen_num": 10, "gen_tok_len": 2000, "tokens_per_sample": 200.0}
    )
    for target in targets_for(benchmark, level).metrics:
        metrics[target.metric] = target.reference
    return metrics


@pytest.mark.parametrize(
    ("benchmark", "level"),
    [
        ("llama3_1-8b", "99"),
        ("llama3_1-8b-edge", "99"),
        ("llama2-70b", "99"),
        ("llama2-70b", "99.9"),
        ("llama3_1-405b", "99"),
    ],
)
def test_bounds_are_inclusive_like_the_checker(benchmark: str, level: str) -> None:
    targets = targets_for(benchmark, level)
    assert judge(targets, passing_metrics(benchmark, level)).passed
    for target in targets.metrics:
        cases = [(target.lower_bound, True), (math.nextafter(target.lower_bound, -math.inf), False)]
        if target.upper_bound is not None:
            cases += [
                (target.upper_bound, True),
                (math.nextafter(target.upper_bound, math.inf), False),
            ]
        for value, should_pass in cases:
            metrics = passing_metrics(benchmark, level)
            metrics[target.metric] = value
            verdict = judge(targets, metrics)
            check = next(c for c in verdict.checks if c.target is target)
            assert check.passed is should_pass, (target.metric, value)
            assert verdict.passed is should_pass
            # Floats print as their shortest repr, so the checker reads back the same value
            # and reaches the same verdict from accuracy.txt.
            text = accuracy_txt(STYLES[benchmark], metrics, "ab" * 32)
            assert checker_verdict(text, benchmark, level) is should_pass, (target.metric, value)


def test_missing_metric_fails() -> None:
    verdict = judge(targets_for("llama3_1-405b"), {"rougeL": 30.0, "tokens_per_sample": 684.68})
    assert not verdict.passed
    failed = [c.target.metric for c in verdict.checks if not c.passed]
    assert failed == ["exact_match"]


def test_unknown_benchmark_lists_the_known_ones() -> None:
    with pytest.raises(EvaluationError) as raised:
        targets_for("llama3-70b")
    message = str(raised.value)
    assert "\n" not in message
    for name in known_benchmarks():
        assert name in message


def test_99_9_exists_only_for_llama2_70b() -> None:
    with pytest.raises(EvaluationError, match="--accuracy-level 99"):
        targets_for("llama3_1-8b", "99.9")


def test_accuracy_txt_is_the_reference_dict_in_plain_numbers() -> None:
    import numpy as np

    metrics = {
        "rouge1": 38.9012,
        "rouge2": 16.0,
        "rougeL": 24.6,
        "rougeLsum": 36.0,
        "gen_len": np.int64(8167644),
        "gen_num": 13368,
        "gen_tok_len": 1,
        "tokens_per_sample": 1.0,
    }
    text = accuracy_txt("cnn_dailymail", metrics, "0f" * 32)
    assert (
        "{'rouge1': '38.9012', 'rouge2': '16.0', 'rougeL': '24.6', 'rougeLsum': '36.0', "
        "'gen_len': 8167644, 'gen_num': 13368}"
    ) in text
    assert "np." not in text
    assert text.rstrip("\n").splitlines()[-1] == "hash=" + "0f" * 32
    assert checker_verdict(text, "llama3_1-8b")


def test_gen_len_window_scales_to_a_subset_and_not_on_the_whole_dataset() -> None:
    full = targets_for("llama3_1-8b")
    assert full.for_samples(13368) == full
    subset = {m.metric: m for m in full.for_samples(48).metrics}
    gen_len = subset["gen_len"]
    assert gen_len.reference == pytest.approx(8167644 * 48 / 13368)  # ~611 characters/sample
    assert gen_len.scaled_from == 8167644 and "scaled" in gen_len.describe()
    assert subset["rouge1"] == {m.metric: m for m in full.metrics}["rouge1"]  # means unchanged
    rouge = {"rouge1": 40.0, "rouge2": 17.0, "rougeL": 25.0, "rougeLsum": 36.0}
    # 48 summaries of ~600 characters: FAIL against the whole dataset's total, PASS scaled.
    metrics = {**rouge, "gen_len": 48 * 600}
    assert not judge(full, metrics).passed
    assert judge(full.for_samples(48), metrics).passed
    assert not judge(full.for_samples(48), {**rouge, "gen_len": 48 * 400}).passed
    edge = {m.metric: m for m in targets_for("llama3_1-8b-edge").for_samples(500).metrics}
    assert edge["gen_len"].reference == pytest.approx(3051113 / 10)
