"""Isolation and stacked sweeps of the shipped smoke plan on the tiny model, through the shell
scripts, logged to a real MLflow server: one knob is refused by the engine at start (block_size
7 parses, the CPU attention backend rejects it), the sweep goes on, and the table, CSV, PNG and
the MLflow parent/child runs agree."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow_server import mlflow_server

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "scripts" / "plans" / "smoke_cpu.txt"
CONFIGS = ["baseline", "seqs8", "kvspace2", "block7"]

pytestmark = [pytest.mark.e2e, pytest.mark.mlflow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow-sweep")) as uri:
        yield uri


@pytest.fixture(scope="module")
def small_dataset(tiny_model, tmp_path_factory) -> Path:
    from harness.assets.synthetic import build_synthetic_dataset

    out = tmp_path_factory.mktemp("sweep-data") / "cnn_12.json"
    return build_synthetic_dataset("llama3_1-8b", tiny_model, out, samples=12, seed=3)


def _script(name, *args, model, dataset, timeout=1800) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MODEL": str(model),
        "DATASET": str(dataset),
        "PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [str(REPO / "scripts" / name), str(PLAN), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _csv(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv") as fh:
        return list(csv.DictReader(fh))


def _check_mlflow(uri: str, out: Path, rows: list[dict[str, str]]) -> None:
    """The parent run and one child per config, agreeing with the CSV."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    parent_id = json.loads((out / "sweep.json").read_text())["mlflow_parent_run_id"]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep.configs"] == len(rows)
    assert parent.data.metrics["sweep.failed"] == sum(r["status"] == "failed" for r in rows)
    names = {a.path for a in client.list_artifacts(parent_id)}
    assert {"sweep.csv", "sweep.md", "sweep.png", "sweep.json", "plan.txt"} <= names
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert len(children) == len(rows)
    by_id = {c.info.run_id: c for c in children}
    for row in rows:
        child = by_id[row["mlflow_run_id"]]
        assert child.info.run_name == row["config"]
        assert child.data.tags["sweep.status"] == row["status"]
        assert child.data.tags["sweep.safe_to_ship"] == row["safe_to_ship"]
        if row["status"] == "failed":
            assert child.info.status == "FAILED"
            assert child.data.tags["sweep.error"] == row["error"]
            assert "sweep.tps_median" not in child.data.metrics
        else:
            assert child.info.status == "FINISHED"
            assert child.data.metrics["sweep.tps_median"] == pytest.approx(
                float(row["tps_median"]), abs=0.01
            )
            assert child.data.tags["sweep.validity"] == row["validity"]
            assert child.data.tags["sweep.accuracy"] == row["accuracy"]
            assert child.data.params.get("engine.block_size") != "7"
            artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
            assert "result.json" in artifacts


def _check_common(out: Path, rows: list[dict[str, str]], names: list[str]) -> None:
    assert [r["config"] for r in rows] == names
    by = {r["config"]: r for r in rows}
    bad = by[names[-1]]
    assert bad["status"] == "failed"
    # the engine's own words, not the wrappers around them
    assert "No common block size for 7" in bad["error"], bad["error"]
    assert bad["safe_to_ship"] == "no"
    for r in rows[:-1]:
        assert r["status"] == "ok", r
        assert r["validity"] == "VALID" and float(r["tps_median"]) > 0
        assert r["confounded"] == ""
    md = (out / "sweep.md").read_text()
    for r in rows:
        assert f"| {r['config']} |" in md
    assert "No common block size for 7" in md
    png = (out / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_isolation_and_stacked_sweeps(tiny_model, small_dataset, server, tmp_path):
    iso = tmp_path / "isolation"
    proc = _script(
        "isolation_sweep.sh",
        "--accuracy",
        "--repeats",  # one run per config keeps this test short; the default is 2
        "1",
        "--output",
        str(iso),
        "--mlflow-uri",
        server,
        "--experiment",
        "sweep-test",
        model=tiny_model,
        dataset=small_dataset,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = _csv(iso)
    _check_common(iso, rows, CONFIGS)
    by = {r["config"]: r for r in rows}
    # accuracy ran for every config that started (random weights: FAIL, so nothing is safe)
    for name in CONFIGS[:-1]:
        assert by[name]["accuracy"] == "FAIL"
        assert "accuracy FAIL" in by[name]["why_not_safe"]
    assert by["seqs8"]["noise_verdict"] == "single run: noise unknown"
    assert by["seqs8"]["delta_pct"] != ""
    seqs8 = json.loads((iso / "01_seqs8" / "rep1" / "result.json").read_text())
    assert seqs8["engine_args"]["max_num_seqs"] == 8
    # what the engine resolved, which the no-op rule compares knobs with
    assert seqs8["engine_resolved_args"]["max_num_seqs"] == 8
    assert "--repeats 1: no run-to-run noise is measured" in proc.stdout
    assert "VLLM_CPU_KVCACHE_SPACE=2" in (iso / "02_kvspace2" / "rep1" / "run.log").read_text()
    _check_mlflow(server, iso, rows)

    # --resume: every repeat is finished, nothing runs again
    logs = {p: p.stat().st_mtime for p in iso.glob("*/rep*/run.log")}
    again = _script(
        "isolation_sweep.sh",
        "--accuracy",
        "--repeats",  # one run per config keeps this test short; the default is 2
        "1",
        "--output",
        str(iso),
        "--resume",
        "--no-mlflow",
        model=tiny_model,
        dataset=small_dataset,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert {p: p.stat().st_mtime for p in iso.glob("*/rep*/run.log")} == logs
    assert [r["resumed"] for r in _csv(iso)] == ["1"] * len(CONFIGS)

    stacked = tmp_path / "stacked"
    proc = _script(
        "stacked_sweep.sh",
        "--repeats",
        "1",
        "--output",
        str(stacked),
        "--mlflow-uri",
        server,
        "--experiment",
        "sweep-test",
        model=tiny_model,
        dataset=small_dataset,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = _csv(stacked)
    _check_common(stacked, rows, ["baseline"] + ["+" + c for c in CONFIGS[1:]])
    by = {r["config"]: r for r in rows}
    assert by["+block7"]["kept"] == "dropped: failed"
    assert all(r["kept"] for r in rows[1:])
    assert all(r["accuracy"] == "not run" for r in rows[:-1])
    # a knob that ran after a kept one carries both: engine args differ from the baseline in
    # exactly the accumulated keys (else the guard would have marked it confounded)
    kept = [r["config"][1:] for r in rows[1:] if r["kept"].startswith("kept")]
    final = json.loads((stacked / "sweep.json").read_text())["final_stack"]
    assert final == kept
    _check_mlflow(server, stacked, rows)
