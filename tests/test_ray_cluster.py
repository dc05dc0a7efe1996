"""The Ray layout check's rules and the engine's mid-run reason, without a cluster or an
engine (the real cluster: tests/test_ray_e2e.py)."""

from __future__ import annotations

import json

import pytest

from harness.proc.orphans import OWNERS_ENV
from harness.run.record.engine_log import FatalWatch, first_error, root_cause
from harness.run.setup.ray_cluster import (
    ClusterView,
    RayLayout,
    job_config_env,
    layout_of,
    shortfall,
)
from harness.tracking.params import cluster_params


def _view(*nodes: tuple[str, float, bool, bool]) -> ClusterView:
    return ClusterView.from_probe(
        {
            "address": "10.0.0.1:6379",
            "ray_version": "2.60.0",
            "nodes": [
                {
                    "node_id": ip,
                    "ip": ip,
                    "alive": alive,
                    "resources": {"GPU": gpus, "CPU": 8},
                    "local": local,
                }
                for ip, gpus, alive, local in nodes
            ],
        }
    )


def test_which_layouts_run_over_ray():
    assert not layout_of({"tensor_parallel_size": 8}).uses_ray
    assert layout_of({"distributed_executor_backend": "ray"}).uses_ray
    assert not layout_of({"data_parallel_backend": "ray"}).uses_ray  # one replica: no Ray
    dp = layout_of(
        {"data_parallel_size": 4, "data_parallel_backend": "ray", "tensor_parallel_size": 2}
    )
    assert dp.uses_ray and dp.devices == 8 and dp.describe() == "TP 2 x DP 4"


def test_the_cluster_must_hold_the_layout_with_a_device_on_this_node():
    two = _view(("10.0.0.1", 8, True, True), ("10.0.0.2", 8, True, False))
    tp8pp2 = RayLayout(tensor_parallel=8, pipeline_parallel=2, executor="ray")
    assert shortfall(tp8pp2, two, "GPU", nodes_needed=2) is None
    one_dead = _view(("10.0.0.1", 8, True, True), ("10.0.0.2", 8, False, False))
    why = shortfall(tp8pp2, one_dead, "GPU", nodes_needed=2)
    assert why and "has 8 GPU(s) on 1 live node(s); TP 8 x PP 2 needs 16" in why
    assert "needs 3 nodes" in (shortfall(RayLayout(executor="ray"), two, "GPU", 3) or "")
    elsewhere = _view(("10.0.0.1", 0, True, True), ("10.0.0.2", 8, True, False))
    why = shortfall(RayLayout(tensor_parallel=2, executor="ray"), elsewhere, "GPU")
    assert why and "none on this node (10.0.0.1)" in why


def test_the_cluster_as_mlflow_params():
    view = _view(("10.0.0.2", 8, True, False), ("10.0.0.1", 8, True, True))  # Ray's order
    record = {**view.to_record(), "device": "GPU", "layout": RayLayout(8, 2, 1, "ray").to_record()}
    params = cluster_params(record)
    assert params["cluster.nodes"] == 2 and params["cluster.GPU"] == 16.0
    assert params["cluster.node_ips"] == "10.0.0.1,10.0.0.2"
    assert params["cluster.layout.pipeline_parallel_size"] == 2
    assert [n["ip"] for n in record["nodes"]] == ["10.0.0.1", "10.0.0.2"]
    assert cluster_params(None) == {}


def test_the_owner_token_goes_into_the_rays_job_environment(monkeypatch):
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    doc = json.loads(job_config_env("a:b"))
    assert doc["runtime_env"]["env_vars"] == {OWNERS_ENV: "a:b"}
    # a run that is itself a Ray job keeps its job's runtime environment
    given = {"runtime_env": {"env_vars": {"X": "1"}, "pip": ["p"]}, "metadata": {"k": "v"}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(given))
    doc = json.loads(job_config_env("t"))
    assert doc["runtime_env"]["env_vars"] == {"X": "1", OWNERS_ENV: "t"}
    assert doc["runtime_env"]["pip"] == ["p"] and doc["metadata"] == {"k": "v"}


def test_the_first_error_vllm_logged_is_the_reason_not_its_traceback():
    text = (
        "(EngineCore pid=7) INFO 11-25 20:22:11 [core.py:1] fine\n"
        "(EngineCore pid=7) ERROR 11-25 20:22:12 [ray_executor_v2.py:522] RayWorkerProc "
        "rank=[1] died unexpectedly, shutting down executor.\n"
        "(EngineCore pid=7) ERROR 11-25 20:22:12 [dump_input.py:72] Dumping input data\n"
        "(EngineCore pid=7) ERROR 11-25 20:22:12 [core.py:1512] EngineCore encountered a fatal error.\n"
        "(EngineCore pid=7) ERROR 11-25 20:22:12 [core.py:1512] Traceback (most recent call last):\n"
    )
    assert first_error(text) == "RayWorkerProc rank=[1] died unexpectedly, shutting down executor."
    assert first_error(text.splitlines()[0] + "\n" + text.splitlines()[3]) is None


# what vLLM 0.26 printed on four H100s when a pipeline-parallel step ran out of memory
# (bench/record/results/h100-x4-ray-pp/first-try-oom): the cause sits inside a "see above" wrapper
OOM = (
    "(EngineCore pid=6201) ERROR 11-28 01:29:57 [core.py:1332] EngineCore encountered a fatal error.\n"
    "(EngineCore pid=6201) ERROR 11-28 01:29:57 [core.py:1332] Traceback (most recent call last):\n"
    '(EngineCore pid=6201) ERROR 11-28 01:29:57 [core.py:1332]   File "/x/multiproc_executor.py", '
    "line 394, in get_response\n"
    "(EngineCore pid=6201) ERROR 11-28 01:29:57 [core.py:1332] RuntimeError: Worker failed with "
    "error 'CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
    "79.18 GiB of which 888.12 MiB is free.', please check the stack trace above for the root cause\n"
)


def test_the_cause_a_wrapper_quotes_is_the_reason():
    assert first_error(OOM) == (
        "CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
        "79.18 GiB of which 888.12 MiB is free."
    )
    assert root_cause(OOM).startswith("CUDA out of memory. Tried to allocate 896.00 MiB")
    # a wrapper that quotes nothing is still no reason
    assert (
        root_cause("RuntimeError: Engine core initialization failed. See root cause above.") is None
    )


@pytest.mark.parametrize("cut", [0, 10, 40, 75, 120])
def test_a_workers_death_is_seen_in_the_engines_output_however_it_is_cut(cut):
    line = (
        "(EngineCore pid=16364) ERROR 11-28 01:40:35 [ray_executor_v2.py:514] "
        "RayWorkerProc rank=[2] died unexpectedly, shutting down executor.\n"
    )
    text = "(EngineCore pid=1) INFO 11-28 01:40:02 [core.py:1] step\n" + line + "more\n"
    watch = FatalWatch()
    watch.feed(text[:cut])
    watch.feed(text[cut:])
    assert watch.line == "RayWorkerProc rank=[2] died unexpectedly, shutting down executor."
    mp = FatalWatch()
    mp.feed(
        "(EngineCore pid=9) ERROR 11-28 02:00:00 [multiproc_executor.py:300] "
        "Worker proc VllmWorker-1 died unexpectedly, shutting down executor.\n"
    )
    assert mp.line == "Worker proc VllmWorker-1 died unexpectedly, shutting down executor."
    # or a worker that saw its peer go first (Gloo, under vLLM's and Ray's prefixes)
    gloo = FatalWatch()
    gloo.feed(
        "(EngineCore pid=1) \x1b[36m(RayWorkerProc pid=2)\x1b[0m (Worker_PP0_TP0 pid=2) ERROR "
        "11-28 01:40:34 [multiproc_executor.py:1007] RuntimeError: [/pytorch/third_party/gloo/"
        "gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:932\n"
    )
    assert gloo.line is not None and gloo.line.startswith("RuntimeError: [")
    assert gloo.line.endswith("Connection closed by peer [127.0.0.1]:932")
    # a line that only mentions it (a warning, a test's own text), or half a line, is nothing
    quiet = FatalWatch()
    quiet.feed("WARNING 11-28 [x.py:1] a worker died unexpectedly, shutting down executor.\n")
    quiet.feed(line[:-1])
    assert quiet.line is None


def test_a_local_model_folder_reaches_vllm_as_an_absolute_path(tmp_path, monkeypatch):
    """Ray's workers open the model in the raylet's directory, not the command's."""
    from sut.engine import local_path_arg

    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    assert local_path_arg("m") == str(tmp_path / "m")
    assert local_path_arg("./m/") == str(tmp_path / "m")
    assert local_path_arg("meta-llama/Llama-2-70b-chat-hf") == "meta-llama/Llama-2-70b-chat-hf"
