"""Data-parallel engines behind one LoadGen SUT, on the CPU build, with our router choosing
each request's engine (sut/routing.py).

- Offline, --data-parallel-size 2: goes through the streaming SUT (vllm.LLM refuses DP in one
  process) with a front-end process per engine (auto's choice, sut/engine_pool.py), answers
  every sample from final outputs only and records the parallel sizes it ran with.
- Server, --data-parallel-size 2, --frontend shared: vLLM's own layout, one AsyncLLM over two
  engine cores; a stream of arrivals, every request streamed.
In both, the engine our router chose is the one that served the request, by the engine side's own
account: vLLM's engine cores stamp their index on what they return, and with --engine-stats the
SUT counts, per index, the requests they finished and their prompt tokens (`engine_served`),
which must equal what the router sent each engine (`routed`); prompts of many lengths make the
token sums a per-request check in all but name. And the work is spread: the Offline query (one
burst) by prompt tokens, the Server's arrivals so that each engine got its share and vLLM saw
both running at once. The Server run is also profiled (`--profile`): each engine core writes
its own trace of the window.

Time budget: 150 s: two runs, each starting two engines side by side.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMOKE, cli, run_args

pytestmark = pytest.mark.e2e

# vLLM's own core binding, one list per rank (conftest binds an xdist worker's engines to one
# core, which a second rank cannot share)
DP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}


def _run_dp2(tiny_model, tiny_dataset, out, conf, *extra: str, **kw: str):
    """`run` on two data-parallel engines with vLLM's per-engine stats on; checked to succeed."""
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            conf,
            *("--data-parallel-size", "2", "--engine-stats", *extra),
            **kw,
        ),
        env=DP_ENV,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


def _served_as_routed(stats: dict) -> None:
    assert stats["dp_routing"] == "ours"
    routed, served = stats["routed"], stats["engine_served"]
    assert len(routed) == len(served) == 2, stats
    for rank, (sent, done) in enumerate(zip(routed, served, strict=True)):
        assert sent["sent"] == done["finished"] > 0, (rank, routed, served)
        assert sent["prompt_tokens"] == done["prompt_tokens"], (rank, routed, served)
    assert sum(s["sent"] for s in routed) == stats["issued"]


def test_offline_data_parallel_2_is_valid_and_recorded(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "dp2"
    # 64 tokens: long enough that two engines cannot finish the smoke query inside its 200 ms
    # minimum
    result = _run_dp2(
        tiny_model,
        tiny_dataset,
        out,
        SMOKE / "offline.conf",
        *("--no-evaluate", "--max-tokens", "64"),
        mode="both",
    )
    assert result["engine_args"]["data_parallel_size"] == 2
    assert result["sut_options"]["dp_routing"] == "ours"
    # auto's choice for two local engines we route: a front-end process each
    assert result["sut_options"]["frontend"] == "per-engine"
    perf = result["performance"]
    assert perf["validity"] == "VALID", perf
    stats = result["sut_stats"]
    assert stats["completed"] == stats["issued"] > 0 and stats["failed_samples"] == 0
    # Offline asks the engine for final outputs only: one output per sample (not one per
    # token, 64 here) and no first-token reports, which Offline has no use for.
    assert stats["engine_outputs"] == stats["issued"], stats
    assert stats["first_tokens_reported"] == 0 and stats["loadgen_first_token_calls"] == 0
    _served_as_routed(stats)
    # the whole query at once, split by prompt tokens: neither engine got much more than half
    tokens = [s["prompt_tokens"] for s in stats["routed"]]
    assert max(tokens) <= 0.6 * sum(tokens), stats["routed"]
    _served_as_routed(result["sut_stats_by_mode"]["accuracy"])
    assert result["engine_resolved_args"]["data_parallel_size"] == 2
    entries = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(result["dataset_size"]))


def test_server_data_parallel_2_routes_each_request_to_the_engine_that_serves_it(
    tiny_model, tiny_dataset, tmp_path
):
    out = tmp_path / "server-dp2"
    # Arrivals three times the smoke conf's, in 300 queries: a burst for two engines, in seconds
    # (this test judges where requests went, not latencies)
    conf = tmp_path / "server-dp2.conf"
    conf.write_text(
        "*.Server.min_duration = 2000\n*.Server.min_query_count = 300\n*.Server.target_qps = 24\n"
    )
    result = _run_dp2(
        tiny_model,
        tiny_dataset,
        out,
        conf,
        # the shared front end (vLLM's own layout, one AsyncLLM over both cores): the
        # per-engine one, auto's choice here, runs in the Offline test above and in
        # tests/test_frontend_e2e.py
        *("--max-tokens", "16", "--profile", "4@2", "--frontend", "shared"),
        scenario="Server",
    )
    # the layout reached the engine as asked: two engine cores, each of one GPU's worth
    resolved = result["engine_resolved_args"]
    assert resolved["data_parallel_size"] == 2 and resolved["tensor_parallel_size"] == 1
    # vLLM's profiler ran on both engines: a trace each, the window's four steps in each
    ranks = result["profile"]["ranks"]
    assert len(ranks) == 2 and all(r["steps"] == 4 for r in ranks), ranks
    stats = result["sut_stats"]
    assert stats["completed"] == stats["issued"] >= 300 and stats["failed_samples"] == 0
    assert stats["first_token_order_violations"] == 0
    _served_as_routed(stats)
    sent = [s["sent"] for s in stats["routed"]]
    assert min(sent) >= 0.4 * sum(sent), stats["routed"]  # each engine got its share
    # The picture's data: per engine, what our router had there and what vLLM ran, each step.
    rows = json.loads((out / "timeline.json").read_text())["series"]
    assert all(len(r["routed"]) == 2 and len(r["engines"]) == 2 for r in rows), rows[-1]
    # each engine's own scheduler counts reach the timeline: some row shows it running. (Not
    # both in one row: at ~1 request in flight per engine, a 1 s sample often finds one idle.)
    for k in (0, 1):
        assert any(r["engines"][k][0] > 0 for r in rows), (k, rows)
    assert (out / "timeline.png").stat().st_size > 0
