"""SingleStream (llama3_1-8b-edge) end to end: real LoadGen, real vLLM (CPU build), tiny model.

One `run --mode both` in its own process: the performance run is VALID under the smoke conf,
LoadGen issues one query at a time (so the engine never holds more than one), every query gets
its first token before completion, and the accuracy run answers every dataset sample once.

Time budget: 75 s: one engine start, ~15 s of SingleStream queries.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMOKE, cli, run_args

pytestmark = [pytest.mark.e2e, pytest.mark.untimed]


def test_singlestream_edge_run_is_valid_one_query_at_a_time(tiny_model, tiny_dataset, tmp_path):
    from harness.run.record.logs import parse_detail_log

    out = tmp_path / "edge"
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "singlestream.conf",
            "--no-evaluate",
            "--max-tokens",
            "32",
            benchmark="llama3_1-8b-edge",
            scenario="SingleStream",
            mode="both",
        )
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    perf, stats = result["performance"], result["sut_stats"]
    assert result["scenario"] == "SingleStream"
    assert perf["validity"] == "VALID", (perf.get("invalid_reasons"), perf)
    assert perf["num_errors"] == 0, perf.get("errors")

    detail = parse_detail_log(out / "performance" / "mlperf_log_detail.txt").values
    assert detail["effective_scenario"] == "SingleStream"
    queries = detail["result_query_count"]
    assert queries >= 32
    # SingleStream: the next query is issued only when the previous one completes.
    assert stats["peak_engine_in_flight"] == 1, stats
    assert stats["first_token_before_complete"] == stats["completed"]
    assert stats["first_token_order_violations"] == 0 and stats["failed_samples"] == 0
    # The edge SingleStream result is the 90th percentile latency, shown and recorded.
    assert perf["latency_p90_ms"] == detail["result_90.00_percentile_latency_ns"] / 1e6 > 0
    assert perf["samples_per_second"] > 0 and perf["duration_s"] > 0
    assert "latency p90" in proc.stdout and "(limit" not in proc.stdout

    entries = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(result["dataset_size"]))
