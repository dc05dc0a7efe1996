"""A Server sweep whose figure is each config's sustained capacity, on the tiny model, logged to
a real MLflow server: every repeat is an `mlperf-vllm calibrate` search on the config's one
engine (no confirmation), with an accuracy run of the config beside it (`--accuracy`).

What must hold: each row's figure is the highest target its own calibration passed (read from
that calibration's files, not from the sweep's bookkeeping); the knob's engine differs from the
baseline's in the knob's key alone, as the calibration's engine resolved it, so the confounding
guard passes; no row is called VALID or safe to ship (trials are not runs of the submission's
length); the report, CSV and MLflow say "capacity QPS", never tokens/s.

Time budget: 240 s: two calibrations (one engine each: an Offline test and up to three short
trials) and two accuracy runs of 24 samples (measured alone: 200 s).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.sweep.repeat import CAPACITY_VALIDITY
from tests.conftest import cli

pytestmark = [pytest.mark.e2e, pytest.mark.mlflow]


def test_a_server_sweep_ranks_configs_by_their_sustained_capacity(
    tiny_model, tiny_dataset, mlflow_server_uri, tmp_path
):
    plan = tmp_path / "server_capacity.txt"
    plan.write_text(
        "benchmark llama3_1-8b\nscenario Server\n"
        f"model {tiny_model}\ndataset {tiny_dataset}\n"
        "user_conf user_confs/smoke/server.conf\nmax_tokens 16\nignore_eos yes\n"
        "baseline --engine-arg max_num_seqs=4 --engine-arg enforce_eager=true\n"
        "knob seqs8 --engine-arg max_num_seqs=8\n"
    )
    out = tmp_path / "sweep"
    proc = cli(
        *("sweep", str(plan), "--repeats", "1", "--output", str(out), "--accuracy"),
        # three trials: the first at 0.9 of the engine's own Offline rate, then up by bisection,
        # or down by x0.8 where the other xdist worker's engines slow this 2-core machine
        *("--trials", "3", "--trial-s", "6", "--measure-samples", "48"),
        *("--mlflow-uri", mlflow_server_uri, "--experiment", "capacity-sweep"),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    with open(out / "sweep.csv") as fh:
        rows = {r["config"]: r for r in csv.DictReader(fh)}
    assert list(rows) == ["baseline", "seqs8"]
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["figure"] == "capacity"
    assert meta["calibrate_args"] == ["--trials", "3", "--trial-s", "6", "--measure-samples", "48"]

    for name, seqs in (("baseline", 4), ("seqs8", 8)):
        row = rows[name]
        rep = Path(row["output_dir"]) / "rep1"
        cal = json.loads((rep / "calibration.json").read_text())
        # the figure is what this config's own search passed, under its own Offline ceiling
        assert cal["highest_passing_qps"] > 0
        assert float(row["tps_median"]) == pytest.approx(cal["highest_passing_qps"], abs=0.01)
        assert cal["highest_passing_qps"] < cal["offline_samples_per_second"]
        passed = [t for t in cal["trials"] if t["passed"]]
        assert max(t["target_qps"] for t in passed) == cal["highest_passing_qps"]
        assert (rep / "trials").is_dir() and not list(rep.glob("confirm-*"))  # no 600 s run
        # the engine the calibration ran, as it resolved it
        assert cal["run"]["engine_resolved_args"]["max_num_seqs"] == seqs
        assert cal["run"]["scenario"] == "Server" and cal["run"]["dataset_sha256"]
        assert row["figure"] == "capacity QPS" and row["status"] == "ok", row
        assert row["confounded"] == ""
        assert row["validity"] == CAPACITY_VALIDITY and row["safe_to_ship"] == "no"
        assert f"validity {CAPACITY_VALIDITY}" in row["why_not_safe"]
        # the accuracy run of the same config, beside the calibration
        acc = json.loads((rep / "accuracy" / "result.json").read_text())
        assert acc["mode"] == "accuracy" and acc["scenario"] == "Server"
        assert acc["engine_args"]["max_num_seqs"] == seqs
        assert row["accuracy"] == acc["accuracy"]["verdict"] in ("PASS", "FAIL")
        assert row["usd_per_million_tokens"] == ""  # QPS is not tokens/s: no price per token

    md = (out / "sweep.md").read_text()
    assert "capacity QPS median" in md and "tok/s" not in md and "tokens/s median" not in md
    assert "Figure (Server): capacity, the highest target QPS" in md
    assert "no row is VALID or safe to ship" in md

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server_uri)
    parent = meta["mlflow_parent_run_id"]
    exp = client.get_run(parent).info.experiment_id
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")
    assert {c.info.run_name for c in children} == {"baseline", "seqs8"}
    for c in children:
        row = rows[c.info.run_name]
        assert c.data.metrics["sweep.capacity_qps_median"] == pytest.approx(
            float(row["tps_median"]), abs=0.01
        )
        assert "sweep.tps_median" not in c.data.metrics
        assert c.data.tags["sweep.validity"] == CAPACITY_VALIDITY
