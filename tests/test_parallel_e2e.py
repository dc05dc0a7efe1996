"""vLLM's own data parallelism behind one LoadGen SUT, on the CPU build: an Offline run with
--data-parallel-size 2 goes through AsyncLLM (vllm.LLM refuses DP in one process), answers every
sample from final outputs only and records the parallel sizes it ran with.

Time budget: 120 s: one run, two engines (data parallel ranks) started side by side.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMOKE, cli, run_args

pytestmark = pytest.mark.e2e


def test_offline_data_parallel_2_is_valid_and_recorded(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "dp2"
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "offline.conf",
            "--no-evaluate",
            "--data-parallel-size",
            "2",
            # Long enough that two engines cannot finish the smoke query inside its 200 ms minimum.
            "--max-tokens",
            "64",
            mode="both",
        ),
        # vLLM's own core binding, one list per rank (conftest binds an xdist worker's engines
        # to one core, which a second rank cannot share)
        env={"VLLM_CPU_OMP_THREADS_BIND": "auto"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["engine_args"]["data_parallel_size"] == 2
    perf = result["performance"]
    assert perf["validity"] == "VALID", perf
    stats = result["sut_stats"]
    assert stats["completed"] == stats["issued"] > 0 and stats["failed_samples"] == 0
    # Offline asks the engine for final outputs only: one output per sample (not one per
    # token, 64 here) and no first-token reports, which Offline has no use for.
    assert stats["engine_outputs"] == stats["issued"], stats
    assert stats["first_tokens_reported"] == 0 and stats["loadgen_first_token_calls"] == 0
    assert result["engine_resolved_args"]["data_parallel_size"] == 2
    entries = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(result["dataset_size"]))
