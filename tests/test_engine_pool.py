"""sut/engine_pool.py's choices, without an engine: which front end a run gets, which GPUs each
engine's front-end process sees, what one engine's arguments are, where its profiler writes.
The pool itself runs in tests/test_frontend_e2e.py (and test_parallel_e2e.py's Offline run)."""

from __future__ import annotations

import pytest

from sut.engine_pool import _own_profile_dir, device_slices, replica_kwargs
from sut.frontend import FrontendError, resolve_frontend


@pytest.mark.parametrize(
    ("kwargs", "routing", "expected"),
    [
        ({}, "ours", "shared"),  # one engine: no second process
        ({"data_parallel_size": 4}, "ours", "per-engine"),
        ({"data_parallel_size": 4}, "vllm", "shared"),  # vLLM's balancer is in the shared one
        ({"data_parallel_size": 2, "data_parallel_backend": "ray"}, "ours", "shared"),
        ({"data_parallel_size": 2, "data_parallel_size_local": 1}, "ours", "shared"),
        ({"data_parallel_size": 2, "distributed_executor_backend": "ray"}, "ours", "shared"),
    ],
)
def test_auto_picks_per_engine_front_ends_for_local_engines_we_route(kwargs, routing, expected):
    assert resolve_frontend("auto", kwargs, routing) == expected


def test_an_explicit_front_end_is_kept_and_a_wrong_name_refused():
    assert resolve_frontend("shared", {"data_parallel_size": 4}, "ours") == "shared"
    assert resolve_frontend("per-engine", {}, "ours") == "per-engine"
    with pytest.raises(FrontendError, match="choose auto or shared or per-engine"):
        resolve_frontend("each", {}, "ours")


def test_each_engine_sees_its_own_gpus():
    assert device_slices(4, 1, ["0", "1", "2", "3"]) == ["0", "1", "2", "3"]
    assert device_slices(2, 2, ["4", "5", "6", "7"]) == ["4,5", "6,7"]  # TP 2, from the visible
    assert device_slices(2, 1, []) == [None, None]  # no GPU: the environment as it is
    with pytest.raises(FrontendError, match="needs 8 GPUs, but 4 are visible"):
        device_slices(4, 2, ["0", "1", "2", "3"])


def test_one_engine_runs_without_the_data_parallel_layout_and_profiles_apart(tmp_path):
    kwargs = {"data_parallel_size": 4, "max_num_seqs": 512, "data_parallel_rpc_port": 1}
    assert replica_kwargs(kwargs) == {"max_num_seqs": 512}
    profiled = {"profiler_config": {"torch_profiler_dir": str(tmp_path), "max_iterations": 4}}
    own = _own_profile_dir(profiled, 3)["profiler_config"]
    assert own == {"torch_profiler_dir": str(tmp_path / "engine3"), "max_iterations": 4}
    assert profiled["profiler_config"]["torch_profiler_dir"] == str(tmp_path)  # not changed
