"""harness.tracking without an engine: names and values, configuration, the fail-fast
reachability check, and run lifecycles (FINISHED / FAILED / KILLED / discarded, parent and
child) on the embedded SQLite store."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import SMOKE, cli, run_args
from mlflow_server import free_port

from harness import tracking
from harness.errors import UsageError
from harness.tracking import store
from harness.tracking.params import kept_up_tag


def test_sanitize_key_keeps_valid_names_and_fixes_bad_ones():
    assert (
        tracking.sanitize_key("result_99.00_percentile_latency_ns")
        == "result_99.00_percentile_latency_ns"
    )
    assert tracking.sanitize_key("engine.kv-cache dtype") == "engine.kv-cache dtype"
    assert tracking.sanitize_key("a:b{c}") == "a_b_c_"
    assert ".." not in tracking.sanitize_key("../../etc/passwd")
    assert len(tracking.sanitize_key("k" * 400)) == tracking.MAX_KEY_CHARS


def test_long_values_are_truncated_not_rejected():
    s = store._text("x" * 10_000, tracking.MAX_PARAM_CHARS)
    assert len(s) == tracking.MAX_PARAM_CHARS and s.endswith("chars]")
    assert store._text({"b": 1, "a": [1, 2]}, 100) == '{"a": [1, 2], "b": 1}'


def test_resolve_tracking_precedence(tmp_path, monkeypatch):
    """The CLI's MLflow flags, then the environment, then the defaults; the flags reach the
    tracking layer as values (harness.cli.flags), never as the CLI's namespace."""
    monkeypatch.chdir(tmp_path)
    from harness.cli import build_parser
    from harness.cli.flags import tracking_config

    parser = build_parser()
    none, _ = parser.parse_known_args(["log-run", "d"])
    names = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", tracking.PARENT_ENV)
    for name in names:
        monkeypatch.delenv(name, raising=False)
    for unset in (False, True):  # absent, then empty: both mean unset
        if unset:
            for name in names:
                monkeypatch.setenv(name, "")
        cfg = tracking_config(none)
        assert cfg.uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
        assert cfg.experiment == "mlperf-vllm" and cfg.enabled and cfg.parent_run_id is None
    for name, value in zip(names, ("http://127.0.0.1:1", "e", "abc"), strict=True):
        monkeypatch.setenv(name, value)
    cfg = tracking_config(none)
    assert (cfg.uri, cfg.experiment, cfg.parent_run_id) == ("http://127.0.0.1:1", "e", "abc")
    assert tracking_config(none, default_experiment="sweeps").experiment == "e"
    explicit, _ = parser.parse_known_args(
        ["log-run", "d", "--mlflow-uri", "http://127.0.0.1:2", "--experiment", "x", "--no-mlflow"]
    )
    cfg = tracking_config(explicit)
    assert (cfg.uri, cfg.experiment, cfg.enabled) == ("http://127.0.0.1:2", "x", False)
    cfg = tracking.resolve_tracking("http://127.0.0.1:3", None, enabled=True, environ={})
    assert (cfg.uri, cfg.experiment) == ("http://127.0.0.1:3", "mlperf-vllm")


def test_performance_metrics_names_and_units():
    perf = {
        "validity": "INVALID",
        "tokens_per_second": 10.0,
        "samples_per_second": 2.0,
        "duration_s": 3.0,
        "early_stopping_met": False,
        "metrics": {
            "result_first_token_99.00_percentile_latency_ns": 5e6,
            "result_time_per_output_token_50.00_percentile_ns": 2e5,
            "result_99.90_percentile_latency_ns": 7e9,
        },
    }
    m = tracking.performance_metrics(perf)
    assert m["valid"] == 0.0 and m["early_stopping_met"] == 0.0
    assert m["ttft_p99_ms"] == 5.0 and m["tpot_p50_ms"] == 0.2 and m["latency_p999_ms"] == 7000
    assert m["loadgen.result_first_token_99.00_percentile_latency_ns"] == 5e6
    # Offline: no verdict on the arrival rate, so neither metric nor tag
    assert "kept_up" not in m and kept_up_tag(perf) is None


@pytest.mark.parametrize(
    "kept_up, metric, tag", [(True, 1.0, "yes"), (False, 0.0, "no"), (None, None, "not judged")]
)
def test_kept_up_is_a_metric_when_judged_and_always_a_tag(kept_up, metric, tag):
    perf = {"validity": "VALID", "sustained": {"kept_up": kept_up, "reason": "r"}}
    assert tracking.performance_metrics(perf).get("kept_up") == metric
    assert kept_up_tag(perf) == tag


def test_the_host_path_is_logged_when_the_run_measured_it():
    perf = {
        "validity": "VALID",
        "in_transit": {"mean_in_transit": 32.2, "max_in_transit": 105, "share_of_in_flight": 0.015},
    }
    m = tracking.performance_metrics(perf)
    assert (m["in_transit_mean"], m["in_transit_max"], m["in_transit_share"]) == (32.2, 105, 0.015)
    assert "in_transit_mean" not in tracking.performance_metrics({"validity": "VALID"})


def test_unreachable_server_is_a_clear_error_in_seconds():
    uri = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        tracking.check_reachable(tracking.TrackingConfig(uri))
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert uri in msg and "--no-mlflow" in msg and "--mlflow-uri" in msg and "\n" not in msg


def test_sqlite_store_in_a_missing_folder_is_a_clear_error(tmp_path):
    cfg = tracking.TrackingConfig(f"sqlite:///{tmp_path}/nope/mlflow.db")
    with pytest.raises(UsageError, match="missing or not writable"):
        tracking.check_reachable(cfg)


def test_cli_run_with_unreachable_server_exits_2_before_any_engine(
    tiny_model, tiny_dataset, tmp_path
):
    uri = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = cli(
        *run_args(
            tiny_model, tiny_dataset, out, SMOKE / "offline.conf", "--mlflow-uri", uri, mlflow=True
        ),
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: MLflow tracking server " + uri), proc.stderr
    assert "Traceback" not in proc.stderr
    # No engine: nothing under --output, no vLLM log lines, and well under an engine start.
    assert not out.exists()
    assert "LLM engine" not in proc.stdout + proc.stderr
    assert elapsed < 30, elapsed


# --------------------------------------------------------------------- embedded SQLite store


@pytest.fixture()
def sqlite_cfg(tmp_path, monkeypatch) -> tracking.TrackingConfig:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    cfg = tracking.resolve_tracking(None, environ={})
    assert cfg.uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    tracking.check_reachable(cfg)
    return cfg


def _client(cfg):
    from mlflow import MlflowClient

    return MlflowClient(cfg.uri)


def test_tracked_run_lifecycles_on_the_embedded_store(sqlite_cfg, tmp_path):
    cfg = sqlite_cfg
    client = _client(cfg)
    out = tmp_path / "out"
    out.mkdir()

    with tracking.tracked_run(cfg, "ok", params={"a": 1}) as ok:
        ok.log_metrics({"tokens_per_second": 12.5})
    assert client.get_run(ok.run_id).info.status == "FINISHED"
    assert client.get_run(ok.run_id).data.params["a"] == "1"

    # A crash after the run wrote files: FAILED, error tag, the files it wrote are logged.
    with pytest.raises(RuntimeError), tracking.tracked_run(cfg, "boom", output_dir=out) as bad:
        (out / "result.json").write_text(
            json.dumps({"status": "failed", "benchmark": "llama3_1-8b", "error": "RuntimeError: x"})
        )
        (out / "performance").mkdir()
        (out / "performance" / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
        raise RuntimeError("engine died")
    run = client.get_run(bad.run_id)
    assert run.info.status == "FAILED"
    assert "engine died" in run.data.tags["error"]
    assert run.data.params["benchmark"] == "llama3_1-8b"
    names = {a.path for a in client.list_artifacts(bad.run_id)}
    assert {"result.json", "environment.json", "performance"} <= names

    with pytest.raises(KeyboardInterrupt), tracking.tracked_run(cfg, "ctrl-c") as killed:
        raise KeyboardInterrupt
    assert client.get_run(killed.run_id).info.status == "KILLED"

    # Bad input before anything ran: no FAILED husk left in the run list.
    with pytest.raises(UsageError), tracking.tracked_run(cfg, "typo") as typo:
        raise UsageError("model x does not exist")
    assert client.get_run(typo.run_id).info.lifecycle_stage == "deleted"


def test_stale_files_of_an_earlier_run_are_not_logged(sqlite_cfg, tmp_path):
    out = tmp_path / "out"
    (out / "accuracy").mkdir(parents=True)
    old = out / "accuracy" / "accuracy.json"
    old.write_text(json.dumps({"rouge1": 1.0, "passed": False}))
    past = time.time() - 3600
    os.utime(old, (past, past))
    with tracking.tracked_run(sqlite_cfg, "fresh", output_dir=out) as run:
        (out / "result.json").write_text(json.dumps({"status": "completed"}))
    client = _client(sqlite_cfg)
    data = client.get_run(run.run_id).data
    assert "rouge1" not in data.metrics and "accuracy_verdict" not in data.tags
    assert "accuracy" not in {a.path for a in client.list_artifacts(run.run_id)}


def test_sweep_parent_and_children(sqlite_cfg):
    client = _client(sqlite_cfg)
    with tracking.start_parent(
        sqlite_cfg, "sweep max_num_seqs", params={"knob": "max_num_seqs"}
    ) as parent:
        for value in (64, 128):
            with tracking.child(
                parent, f"max_num_seqs={value}", params={"engine.max_num_seqs": value}
            ) as point:
                point.log_metrics({"tokens_per_second": value * 1.5})
        env = parent.child_env()
    assert env[tracking.PARENT_ENV] == parent.run_id
    assert env["MLFLOW_TRACKING_URI"] == sqlite_cfg.uri
    children = client.search_runs(
        [parent.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.run_id}'"
    )
    assert sorted(r.data.params["engine.max_num_seqs"] for r in children) == ["128", "64"]
    assert all(r.info.status == "FINISHED" for r in children)
    # A subprocess given child_env() resolves the parent from the environment.
    assert tracking.resolve_tracking(None, environ=env).parent_run_id == parent.run_id


def test_a_sqlite_store_elsewhere_keeps_the_artifacts_beside_it(tmp_path, monkeypatch):
    """MLflow would put a new experiment's artifacts under `./mlruns` of the working directory;
    they go beside the database instead, and the working directory stays as it was."""
    cwd, store, out = tmp_path / "cwd", tmp_path / "store", tmp_path / "out"
    for folder in (cwd, store, out):
        folder.mkdir()
    monkeypatch.chdir(cwd)
    cfg = tracking.TrackingConfig(f"sqlite:///{store}/mlflow.db", experiment="a b/c")
    tracking.check_reachable(cfg)
    with tracking.tracked_run(cfg, "run", output_dir=out) as run:
        (out / "result.json").write_text(json.dumps({"status": "completed"}))
    exp = _client(cfg).get_experiment_by_name("a b/c")
    assert exp.artifact_location == str(store / "mlruns" / "a_b_c")
    assert (store / "mlruns" / "a_b_c" / run.run_id / "artifacts" / "result.json").is_file()
    assert list(cwd.iterdir()) == []


def test_disabled_tracking_logs_nothing_but_keeps_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cfg = tracking.TrackingConfig("http://127.0.0.1:1", enabled=False)
    assert tracking.check_reachable(cfg) is None
    with tracking.tracked_run(cfg, "off", output_dir=out) as run:
        assert not run.active and run.log_params({"a": 1}) == 0
    env = json.loads((out / "environment.json").read_text())
    assert env["cpu_model"] and "versions" in env
    assert not (tmp_path / "mlflow.db").exists()


def test_log_run_of_a_folder_without_result_json_is_a_usage_error(tmp_path):
    proc = cli("log-run", str(tmp_path), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db", timeout=120)
    assert proc.returncode == 2 and "result.json" in proc.stderr
