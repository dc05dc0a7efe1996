"""evaluate() end to end on crafted logs: numbers equal to the reference recipe, bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nltk
import numpy as np
import pandas as pd
import pytest
from rouge_score import rouge_scorer

from evaluation import EvaluationError, evaluate

TARGETS = [
    "Police arrested two men after the robbery. The stolen car was found on Monday.",
    "The U.S. economy grew 2.5% in the third quarter. Analysts had expected less.",
    "A new species of frog was discovered in Peru. Scientists say it is tiny.",
    "The team won the championship for the third time. Fans celebrated all night!",
    "Mr. Smith resigned on Friday. He said the decision was personal.",
    "Heavy rain caused flooding in the city. Schools were closed.",
]
PREDICTIONS = [
    "  Police arrested two men. The car was found Monday.  ",
    "The economy grew in the third quarter, analysts said. Growth was 2.5%.",
    "Scientists discovered a tiny frog in Peru.",
    "Fans celebrated as the team won the championship again.",
    "Mr. Smith resigned. He gave personal reasons on Friday.",
    "Flooding closed schools after heavy rain in the city.",
]
NEEDLE = "3f2b8c1a-9d4e-4b7a-8c2d-1e5f6a7b8c9d"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer trained here (no downloads), saved like a model folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(TARGETS + PREDICTIONS, trainer)
    folder = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>"
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)


def hex_tokens(ids: list[int], dtype: str = "int32") -> str:
    return np.asarray(ids, dtype="<i4" if dtype == "int32" else "<i8").tobytes().hex().upper()


def write_log(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps(entries, indent=0))
    return path


def log_entries(
    tokenizer, predictions: list[str], order: list[int], dtype: str = "int32"
) -> list[dict]:  # type: ignore[no-untyped-def]
    entries = []
    for seq_id, qsl_idx in enumerate(order):
        ids = tokenizer.encode(predictions[qsl_idx], add_special_tokens=False)
        ids = [tokenizer.bos_token_id, *ids, tokenizer.eos_token_id]  # skipped when decoding
        entries.append({"seq_id": seq_id, "qsl_idx": qsl_idx, "data": hex_tokens(ids, dtype)})
    return entries


def reference_recipe(tokenizer, entries: list[dict], labels: list[str], dtype: str) -> dict:  # type: ignore[no-untyped-def]
    """The reference CNN/DailyMail / OpenOrca computation, with rouge-score and NLTK directly."""
    seen, token_ids, wanted = set(), [], []
    for entry in entries:
        if entry["qsl_idx"] in seen:
            continue
        seen.add(entry["qsl_idx"])
        token_ids.append(np.frombuffer(bytes.fromhex(entry["data"]), np.dtype(dtype)))
        wanted.append(labels[entry["qsl_idx"]])
    texts = tokenizer.batch_decode([ids.tolist() for ids in token_ids], skip_special_tokens=True)
    preds = ["\n".join(nltk.sent_tokenize(t.strip())) for t in texts]
    refs = ["\n".join(nltk.sent_tokenize(t.strip())) for t in wanted]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    per_sample = [scorer.score(r, p) for r, p in zip(refs, preds, strict=True)]
    result = {
        key: float(round(np.mean([s[key].fmeasure for s in per_sample]) * 100, 4))
        for key in ("rouge1", "rouge2", "rougeL", "rougeLsum")
    }
    n_tokens = sum(len(ids) for ids in token_ids)
    result.update(
        gen_len=sum(len(p) for p in preds),
        gen_num=len(preds),
        gen_tok_len=n_tokens,
        tokens_per_sample=round(n_tokens / len(preds), 1),
    )
    return result


@pytest.fixture
def nltk_on_path(nltk_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nltk.data, "path", [nltk_root, *nltk.data.path])


@pytest.mark.parametrize("workers", [1, 2])
def test_cnn_dailymail_equals_reference_recipe(
    tmp_path: Path,
    tokenizer,
    tokenizer_dir: Path,
    nltk_root: str,
    nltk_on_path: None,  # type: ignore[no-untyped-def]
    workers: int,
) -> None:
    dataset = pd.DataFrame({"input": ["article"] * 6, "tok_input": [[1, 2]] * 6, "output": TARGETS})
    entries = log_entries(tokenizer, PREDICTIONS, [3, 0, 5, 1, 2, 4])
    # A repeat of qsl_idx 0 with other text: the first occurrence counts.
    entries.append(log_entries(tokenizer, ["Completely different words here."], [0])[0])
    log = write_log(tmp_path / "mlperf_log_accuracy.json", entries)

    result = evaluate(
        "llama3_1-8b", log, dataset, tokenizer_dir, nltk_data=nltk_root, workers=workers
    )

    expected = reference_recipe(tokenizer, entries, TARGETS, "<i4")
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum", "gen_len", "gen_num"):
        assert result.metrics[key] == expected[key], key
    assert result.metrics["gen_num"] == 6
    assert 0 < result.metrics["rouge1"] < 100
    # Six samples are far below the 8,167,644-character gen_len window: FAIL overall.
    assert not result.verdict.passed
    assert {c.target.metric for c in result.verdict.checks} == {
        "rouge1",
        "rouge2",
        "rougeL",
        "rougeLsum",
        "gen_len",
    }

    saved = json.loads((tmp_path / "accuracy.json").read_text())
    for key in (
        "rouge1",
        "rouge2",
        "rougeL",
        "rougeLsum",
        "gen_len",
        "gen_num",
        "tokens_per_sample",
    ):
        assert saved[key] == result.metrics[key]
    assert saved["passed"] is False and saved["verdict"]["gen_len"]["passed"] is False
    assert saved["verdict"]["rouge1"]["passed"] is (result.metrics["rouge1"] >= 38.7792 * 0.99)
    text = (tmp_path / "accuracy.txt").read_text()
    assert f"'rouge1': '{expected['rouge1']}'" in text
    assert f"'gen_len': {expected['gen_len']}," in text
    assert text.rstrip().splitlines()[-1] == "hash=" + hashlib.sha256(log.read_bytes()).hexdigest()
    table = result.table()
    assert "rouge1" in table and "FAIL" in table and "overall: FAIL" in table


def test_open_orca_int64_log_and_output_dir(
    tmp_path: Path,
    tokenizer,
    nltk_root: str,
    nltk_on_path: None,  # type: ignore[no-untyped-def]
) -> None:
    dataset = pd.DataFrame({"output": TARGETS})
    entries = log_entries(tokenizer, PREDICTIONS, [0, 1, 2, 3, 4, 5], dtype="int64")
    log = write_log(tmp_path / "mlperf_log_accuracy.json", entries)
    out = tmp_path / "report"

    result = evaluate(
        "llama2-70b",
        log,
        dataset,
        tokenizer,
        dtype="int64",
        output_dir=out,
        accuracy_level="99.9",
        nltk_data=nltk_root,
    )

    expected = reference_recipe(tokenizer, entries, TARGETS, "<i8")
    assert {k: result.metrics[k] for k in expected} == expected
    assert result.paths.accuracy_json == out / "accuracy.json"
    assert result.paths.accuracy_txt.is_file()
    assert result.targets.checker_model == "llama2-70b-99.9"
    text = result.paths.accuracy_txt.read_text()
    assert f"'tokens_per_sample': {expected['tokens_per_sample']}" in text
    assert not (tmp_path / "accuracy.json").exists()


def test_llama3_405b_rows_pool_like_the_reference(
    tmp_path: Path,
    tokenizer,
    nltk_root: str,
    nltk_on_path: None,  # type: ignore[no-untyped-def]
) -> None:
    labels = [
        TARGETS[0],
        f"The magic number is {NEEDLE}.",
        "Lyon|Lugdunum",
        TARGETS[2],
        f"{NEEDLE}",
        "Paris",
    ]
    kinds = ["rouge", "niah_em", "qa_em", "rouge", "niah_em", "qa_em"]
    predictions = [
        PREDICTIONS[0],
        f"It is {NEEDLE}.",
        "Answer: Paris. Answer: lyon",
        PREDICTIONS[2],
        "No number found.",
        "Answer: Marseille",
    ]
    dataset = pd.DataFrame({"gt_output": labels, "metric": kinds})
    entries = log_entries(tokenizer, predictions, [2, 0, 1, 3, 4, 5])
    log = write_log(tmp_path / "mlperf_log_accuracy.json", entries)

    result = evaluate("llama3_1-405b", log, dataset, tokenizer, nltk_data=nltk_root)

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    post = ["\n".join(nltk.sent_tokenize(t.strip())) for t in labels]
    # Row order follows the log: qa (lyon matches "Lyon" after normalization), rouge, niah...
    rows = [
        {"exact_match": 100.0},
        {
            "rougeL": 100
            * scorer.score(post[0], "\n".join(nltk.sent_tokenize(PREDICTIONS[0].strip())))[
                "rougeL"
            ].fmeasure
        },
        {"exact_match": 100.0},
        {"rougeL": 100 * scorer.score(post[3], PREDICTIONS[2])["rougeL"].fmeasure},
        {"exact_match": 0.0},
        {"exact_match": 0.0},
    ]
    expected = pd.DataFrame({"a": rows}).a.apply(pd.Series).describe().loc["mean"].to_dict()
    assert list(result.metrics)[:2] == ["exact_match", "rougeL"]
    assert result.metrics["exact_match"] == expected["exact_match"] == 50.0
    assert result.metrics["rougeL"] == expected["rougeL"]
    tokens = sum(len(bytes.fromhex(e["data"])) // 4 for e in entries)
    assert result.metrics["tokens_per_sample"] == round(tokens / 6, 1)
    assert "'exact_match': 50.0" in result.paths.accuracy_txt.read_text()


# ---------------------------------------------------------------------------- bad input


def _good_entries(tokenizer) -> list[dict]:  # type: ignore[no-untyped-def]
    return log_entries(tokenizer, PREDICTIONS, [0, 1, 2])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text, entries: text[: len(text) // 2], "is truncated JSON at byte"),
        (lambda text, entries: "", "is empty"),
        (lambda text, entries: json.dumps({"qsl_idx": 0}), "is not a JSON array"),
        (lambda text, entries: json.dumps([]), "holds no samples"),
        (
            lambda text, entries: json.dumps([{**entries[0], "data": entries[0]["data"] + "A"}]),
            "odd number of hex digits",
        ),
        (lambda text, entries: json.dumps([{**entries[0], "data": "ZZ" * 4}]), "not hexadecimal"),
        (
            lambda text, entries: json.dumps([{**entries[0], "data": entries[0]["data"] + "0000"}]),
            "not a multiple of 4",
        ),
        (
            lambda text, entries: json.dumps([{**entries[0], "qsl_idx": 6}]),
            "qsl_idx 6 is outside the dataset",
        ),
        (
            lambda text, entries: json.dumps([{**entries[0], "qsl_idx": -1}]),
            "qsl_idx -1 is outside the dataset",
        ),
        (lambda text, entries: json.dumps([{"seq_id": 0, "data": "00"}]), "no integer qsl_idx"),
    ],
)
def test_damaged_logs_are_one_line_errors(
    tmp_path: Path,
    tokenizer,
    nltk_root: str,
    damage,
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    entries = _good_entries(tokenizer)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(damage(json.dumps(entries), entries))
    dataset = pd.DataFrame({"output": TARGETS})
    with pytest.raises(EvaluationError) as raised:
        evaluate("llama3_1-8b", log, dataset, tokenizer, nltk_data=nltk_root)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "accuracy.json").exists()


def test_int64_data_read_as_int64_needs_multiple_of_8(
    tmp_path: Path,
    tokenizer,
    nltk_root: str,  # type: ignore[no-untyped-def]
) -> None:
    entries = [{"seq_id": 0, "qsl_idx": 0, "data": hex_tokens([5, 6, 7])}]  # 12 bytes
    log = write_log(tmp_path / "mlperf_log_accuracy.json", entries)
    with pytest.raises(EvaluationError, match="not a multiple of 8.*--dtype int32"):
        evaluate(
            "llama3_1-8b",
            log,
            pd.DataFrame({"output": TARGETS}),
            tokenizer,
            dtype="int64",
            nltk_data=nltk_root,
        )


def test_missing_target_column(tmp_path: Path, tokenizer, nltk_root: str) -> None:  # type: ignore[no-untyped-def]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", _good_entries(tokenizer))
    with pytest.raises(EvaluationError, match="dataset has no 'output' column"):
        evaluate(
            "llama3_1-8b", log, pd.DataFrame({"input": TARGETS}), tokenizer, nltk_data=nltk_root
        )
    with pytest.raises(EvaluationError, match="dataset has no 'metric' column"):
        evaluate(
            "llama3_1-405b",
            log,
            pd.DataFrame({"gt_output": TARGETS}),
            tokenizer,
            nltk_data=nltk_root,
        )


def test_missing_punkt_says_how_to_install(tmp_path: Path, tokenizer) -> None:  # type: ignore[no-untyped-def]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", _good_entries(tokenizer))
    empty = tmp_path / "no_nltk_data"
    empty.mkdir()
    with pytest.raises(EvaluationError) as raised:
        evaluate("llama3_1-8b", log, pd.DataFrame({"output": TARGETS}), tokenizer, nltk_data=empty)
    message = str(raised.value)
    assert "punkt_tab" in message and "--nltk-data" in message and str(empty) in message
    assert "\n" not in message


def test_missing_log_and_tokenizer(tmp_path: Path, tokenizer, nltk_root: str) -> None:  # type: ignore[no-untyped-def]
    dataset = pd.DataFrame({"output": TARGETS})
    with pytest.raises(EvaluationError, match="not found"):
        evaluate("llama3_1-8b", tmp_path / "nope.json", dataset, tokenizer, nltk_data=nltk_root)
    log = write_log(tmp_path / "mlperf_log_accuracy.json", _good_entries(tokenizer))
    with pytest.raises(EvaluationError, match="cannot load a tokenizer"):
        evaluate("llama3_1-8b", log, dataset, tmp_path / "no_model", nltk_data=nltk_root)
