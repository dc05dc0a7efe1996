"""A real tiny-model accuracy log, scored by evaluate() and by `mlperf-vllm evaluate`.

The log is the session's `offline_smoke_run` (conftest: the CLI in its own process, 24 samples,
scored by the run itself with the packaged punkt model); it is scored here and compared with the
reference recipe computed directly with rouge-score and NLTK. `make-tiny-model` and
`make-dataset` write the very model and dataset that run used.

Time budget: 70 s: no engine of its own (the shared run is counted in test_tracking_mlflow's
budget), three `evaluate` commands, bench/real_small_report.py (three more), `make-tiny-model`
and `make-dataset`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nltk
import numpy as np
import pandas as pd
import pytest
from rouge_score import rouge_scorer

from evaluation import evaluate

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 24
METRIC_KEYS = (
    "rouge1",
    "rouge2",
    "rougeL",
    "rougeLsum",
    "gen_len",
    "gen_num",
    "gen_tok_len",
    "tokens_per_sample",
)


def harness_cli(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    # No NLTK_DATA: the CLI scores with the packaged punkt model, as on a user's machine.
    env = {k: v for k, v in os.environ.items() if k != "NLTK_DATA"}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(REPO),
        check=False,
    )


def checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def accuracy_run(offline_smoke_run, tiny_model, tiny_dataset) -> dict[str, Path]:
    log = offline_smoke_run.accuracy_log
    assert log.is_file(), f"no mlperf_log_accuracy.json under {offline_smoke_run.out}"
    return {
        "model": tiny_model,
        "dataset": tiny_dataset,
        "log": log,
        "root": offline_smoke_run.out,
    }


def test_cli_writes_the_sessions_tiny_model_and_dataset(tiny_model, tiny_dataset, tmp_path):
    """`mlperf-vllm make-tiny-model` / `make-dataset` (seeded) write the same files as the
    session's fixtures, which build them in process."""
    from safetensors.torch import load_file

    from tests.conftest import TINY_DATASET_SEED, TINY_SAMPLES

    model, dataset = tmp_path / "model", tmp_path / "cnn.json"
    assert "tiny model written to" in checked(harness_cli("make-tiny-model", str(model))).stdout
    made = checked(
        harness_cli(
            "make-dataset",
            "--benchmark",
            "llama3_1-8b",
            "--tokenizer",
            str(model),
            "--out",
            str(dataset),
            "--samples",
            str(TINY_SAMPLES),
            "--seed",
            str(TINY_DATASET_SEED),
        )
    )
    assert f"{TINY_SAMPLES} samples written to" in made.stdout
    for name in ("config.json", "generation_config.json", "tokenizer.json"):
        assert (model / name).read_text() == (tiny_model / name).read_text(), name
    ours, theirs = (
        load_file(model / "model.safetensors"),
        load_file(tiny_model / "model.safetensors"),
    )
    assert ours.keys() == theirs.keys()
    assert all(ours[k].equal(theirs[k]) for k in ours)
    assert json.loads(dataset.read_text()) == json.loads(tiny_dataset.read_text())


def reference_recipe(
    log: Path, labels: list[str], tokenizer_dir: Path, nltk_root: str
) -> dict[str, float]:
    """The reference CNN/DailyMail computation, straight from rouge-score and NLTK."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    seen, token_ids, wanted = set(), [], []
    for entry in json.loads(log.read_text()):
        if entry["qsl_idx"] not in seen:
            seen.add(entry["qsl_idx"])
            token_ids.append(np.frombuffer(bytes.fromhex(entry["data"]), np.int32).tolist())
            wanted.append(labels[entry["qsl_idx"]])
    nltk.data.path.insert(0, nltk_root)
    try:
        texts = tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        preds = ["\n".join(nltk.sent_tokenize(t.strip())) for t in texts]
        refs = ["\n".join(nltk.sent_tokenize(t.strip())) for t in wanted]
    finally:
        nltk.data.path.remove(nltk_root)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    scores = [scorer.score(r, p) for r, p in zip(refs, preds, strict=True)]
    result = {
        k: float(round(np.mean([s[k].fmeasure for s in scores]) * 100, 4))
        for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")
    }
    result.update(gen_len=sum(map(len, preds)), gen_num=len(preds))
    return result


def test_real_accuracy_log_scores_like_the_reference(
    accuracy_run: dict[str, Path], tmp_path: Path, nltk_root: str
) -> None:
    frame = pd.read_json(accuracy_run["dataset"])
    result = evaluate(
        "llama3_1-8b",
        accuracy_run["log"],
        frame,
        accuracy_run["model"],
        output_dir=tmp_path,  # the packaged punkt model: the reference below uses NLTK's files
    )
    assert result.metrics["gen_num"] == SAMPLES
    expected = reference_recipe(
        accuracy_run["log"], frame["output"].tolist(), accuracy_run["model"], nltk_root
    )
    assert {k: result.metrics[k] for k in expected} == expected
    saved = json.loads((tmp_path / "accuracy.json").read_text())
    assert all(key in saved for key in METRIC_KEYS)
    # The run evaluated its own log automatically, with the same numbers.
    automatic = accuracy_run["log"].parent / "accuracy.json"
    assert automatic.is_file()
    assert {k: json.loads(automatic.read_text())[k] for k in METRIC_KEYS} == {
        k: saved[k] for k in METRIC_KEYS
    }


def test_cli_evaluate_writes_reports(accuracy_run: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = checked(
        harness_cli(
            "evaluate",
            "--benchmark",
            "llama3_1-8b",
            "--accuracy-log",
            str(accuracy_run["log"]),
            "--dataset",
            str(accuracy_run["dataset"]),
            "--tokenizer",
            str(accuracy_run["model"]),
            "--output",
            str(out),
            "--no-mlflow",
        )
    )
    saved = json.loads((out / "accuracy.json").read_text())
    assert all(key in saved for key in METRIC_KEYS)
    assert saved["gen_num"] == SAMPLES
    assert "rougeLsum" in result.stdout and ("PASS" in result.stdout or "FAIL" in result.stdout)
    assert (out / "accuracy.txt").read_text().rstrip().splitlines()[-1].startswith("hash=")


def test_cli_evaluate_strict_exits_3_on_fail(accuracy_run: dict[str, Path], tmp_path: Path) -> None:
    """The tiny model's summaries FAIL by design: evaluate says so and exits 0, and with
    --strict exits 3 (as run --strict), with the reports written either way."""
    args = [
        "evaluate",
        "--benchmark",
        "llama3_1-8b",
        "--accuracy-log",
        str(accuracy_run["log"]),
        "--dataset",
        str(accuracy_run["dataset"]),
        "--tokenizer",
        str(accuracy_run["model"]),
        "--output",
        str(tmp_path / "eval"),
        "--no-mlflow",
    ]
    result = harness_cli(*args, "--strict")
    assert json.loads((tmp_path / "eval" / "accuracy.json").read_text())["passed"] is False
    assert result.returncode == 3, result.stderr
    assert "FAIL" in result.stdout


@pytest.mark.parametrize("problem", ["truncated log", "missing punkt"])
def test_cli_bad_input_exits_2_with_one_line(
    accuracy_run: dict[str, Path], tmp_path: Path, problem: str, nltk_root: str
) -> None:
    log, nltk_dir = accuracy_run["log"], nltk_root
    if problem == "truncated log":
        log = tmp_path / "mlperf_log_accuracy.json"
        text = accuracy_run["log"].read_text()
        log.write_text(text[: len(text) // 2])
    else:
        nltk_dir = str(tmp_path / "empty_nltk_data")
        Path(nltk_dir).mkdir()
    result = harness_cli(
        "evaluate",
        "--benchmark",
        "llama3_1-8b",
        "--accuracy-log",
        str(log),
        "--dataset",
        str(accuracy_run["dataset"]),
        "--tokenizer",
        str(accuracy_run["model"]),
        "--output",
        str(tmp_path / "eval"),
        "--nltk-data",
        nltk_dir,
        "--no-mlflow",
    )
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1
    assert ("truncated JSON" if problem == "truncated log" else "punkt_tab") in message


def test_real_small_report_compares_logs_token_for_token(accuracy_run, tmp_path: Path) -> None:
    """bench/real_small_report.py (the GPU vs CPU accuracy comparison of the real small model):
    the same log twice agrees in every sample; a copy with one sample cut by a token differs in
    exactly that one, and its ROUGE comes from `mlperf-vllm evaluate` like the run's own."""
    log = accuracy_run["log"]
    entries = json.loads(log.read_text())
    first = min(e["qsl_idx"] for e in entries)
    cut = [dict(e) for e in entries]
    for e in cut:
        if e["qsl_idx"] == first:
            assert len(e["data"]) > 8, "the first sample has one token: nothing to cut"
            e["data"] = e["data"][:-8]  # one int32 token less
    other = tmp_path / "cut.json"
    other.write_text(json.dumps(cut))
    # every sample cut to its first token: far outside a 99% window of the run's ROUGE
    first_only = tmp_path / "first_only.json"
    first_only.write_text(json.dumps([{**e, "data": e["data"][:8]} for e in entries]))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "real_small_report.py"),
            "--dataset",
            str(accuracy_run["dataset"]),
            "--model",
            str(accuracy_run["model"]),
            f"run={log}",
            f"again={log}",
            f"cut={other}",
            f"first_only={first_only}",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "NLTK_DATA"},
        cwd=str(REPO),
        check=False,
    )
    checked(proc)
    doc = json.loads(report.read_text())
    runs = doc["runs"]
    assert doc["reference"] == "run"
    assert runs["run"]["samples"] == runs["cut"]["samples"] == SAMPLES
    assert runs["again"]["same_tokens_as_reference"] == 1.0
    assert runs["cut"]["same_tokens_as_reference"] == pytest.approx((SAMPLES - 1) / SAMPLES)
    own = json.loads((log.parent / "accuracy.json").read_text())
    for key in ("rouge1", "rougeLsum", "gen_len"):
        assert runs["run"][key] == pytest.approx(own[key]), key
    assert runs["again"]["rougeLsum_rel"] == 0.0
    # the 99% window: every ROUGE score within 1% of the reference's, else OUTSIDE
    assert runs["again"]["within_99_of_reference"] is True
    assert runs["first_only"]["within_99_of_reference"] is False
    assert runs["first_only"]["rouge1_rel"] < -0.01
    assert "(OUTSIDE 99%)" in proc.stdout
    assert 0.0 <= runs["run"]["eos_share"] <= 1.0
    assert "| cut | 24 |" in proc.stdout and "95.8%" in proc.stdout  # 23 of 24 equal
