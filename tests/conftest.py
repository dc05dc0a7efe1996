"""Shared fixtures: one tiny model and one synthetic dataset per test session.

Every LoadGen run goes through the real CLI in its own process (LoadGen's FromConfig reads
mlperf.conf once per process). Engine-starting work is shared where a test needs no LoadGen
process of its own, because each engine start costs ~30 s on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "user_confs" / "smoke"
# NLTK's own punkt_tab data, where a machine has it beside the clone (CI does). Tests read it
# only as the reference the packaged model is compared with, and skip or fall back without it.
SHARED_NLTK_DATA = REPO.parent / "shared" / "nltk_data"


@pytest.fixture(scope="session", autouse=True)
def _environment():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    yield


@pytest.fixture(scope="session")
def nltk_root(tmp_path_factory) -> str:
    """An NLTK data folder for reference computations with `nltk.sent_tokenize`: NLTK's own
    data where present, else the packaged model written out in NLTK's file format."""
    from evaluation.sentences import packaged_punkt_parameters, write_punkt_tab

    if (SHARED_NLTK_DATA / "tokenizers" / "punkt_tab" / "english").is_dir():
        return str(SHARED_NLTK_DATA)
    return str(write_punkt_tab(packaged_punkt_parameters(), tmp_path_factory.mktemp("nltk")))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from harness.assets.synthetic import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("assets") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_dataset(tiny_model, tmp_path_factory) -> Path:
    from harness.assets.synthetic import build_synthetic_dataset

    out = tmp_path_factory.mktemp("data") / "cnn_tiny.json"
    return build_synthetic_dataset("llama3_1-8b", tiny_model, out, samples=24, seed=1)


def cli(
    *args: str, timeout: float = 900, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m harness.cli ARGS` in its own process; output captured as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(cwd or REPO),
    )


def run_args(
    model: Path,
    dataset: Path,
    out: Path,
    conf: Path,
    *extra: str,
    benchmark: str = "llama3_1-8b",
    scenario: str = "Offline",
    mode: str = "performance",
    mlflow: bool = False,
) -> list[str]:
    """`run` arguments for a tiny-model run: no progress bar, no MLflow unless asked, `extra`."""
    return [
        "run",
        "--benchmark",
        benchmark,
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--model",
        str(model),
        "--dataset",
        str(dataset),
        "--output",
        str(out),
        "--user-conf",
        str(conf),
        *([] if mlflow else ["--no-mlflow"]),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="session")
def offline_run(tiny_model, tiny_dataset, tmp_path_factory):
    """One real Offline run (performance + accuracy) shared by the tests that inspect it."""
    out = tmp_path_factory.mktemp("offline-run")
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "offline.conf",
            # float32: the answer-per-sample check compares with a direct generation token by
            # token, and bf16 near-ties on random weights could flip with batch composition.
            "--engine-arg",
            "dtype=float32",
            mode="both",
        )
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out, proc
