"""`mlperf-vllm demo --tiny` end to end: tiny model, synthetic data, Offline performance +
accuracy, evaluation, and an MLflow run in the working folder's SQLite store. (The default real
small model goes through the same run path; tests/test_small_model_e2e.py covers its behaviour.)

Time budget: 150 s: the tiny model and its tokenizer built in a fresh cache, one engine start,
the evaluation and a new SQLite MLflow store (158 s in the suite beside the other worker, where
75 s put it behind modules it outlasts).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli

pytestmark = [pytest.mark.e2e, pytest.mark.untimed]


def test_demo_runs_end_to_end_and_logs_to_the_embedded_store(tmp_path):
    env = {"MLFLOW_TRACKING_URI": "", "MLFLOW_EXPERIMENT_NAME": ""}
    proc = cli(
        "demo",
        "--cache",
        str(tmp_path / "cache"),
        "--output",
        str(tmp_path / "out"),
        "--samples",
        "16",
        "--tiny",
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "VALID" in proc.stdout and "accuracy" in proc.stdout
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "completed"
    assert result["performance"]["validity"] == "VALID"
    assert result["accuracy"]["verdict"] in ("PASS", "FAIL")  # scored, whatever the score
    assert "rougeL" in result["accuracy"]["metrics"]
    # the CPU default reached the engine: eager mode, no torch.compile at start
    resolved = result["engine_resolved_args"]
    assert resolved["enforce_eager"] is True and resolved["compilation_config"]["mode"] == 0
    assert (tmp_path / "mlflow.db").exists()
    assert "demo finished in" in proc.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("mlperf-vllm-demo")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["validity"] == "VALID"
    assert runs[0].data.params["benchmark"] == "llama3_1-8b"
