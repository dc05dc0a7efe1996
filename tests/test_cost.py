"""Dollars per million output tokens from an hourly price: the arithmetic, and where it shows
(result table, MLflow metrics, sweep rows)."""

from __future__ import annotations

import pytest

from harness.run.record.cost import add_cost, usd_per_million_tokens
from harness.run.record.summary import result_rows
from harness.tracking import performance_metrics


def test_usd_per_million_tokens():
    # $3.50/h at 7,000 tok/s: 25.2 M tokens an hour -> $0.1389 per million
    assert usd_per_million_tokens(7000.0, 3.5) == pytest.approx(3.5 / 25.2)
    assert usd_per_million_tokens(1_000_000 / 3600, 1.0) == pytest.approx(1.0)
    assert usd_per_million_tokens(0.0, 3.5) is None
    assert usd_per_million_tokens(None, 3.5) is None


def test_cost_in_result_table_and_mlflow_metrics():
    perf = {"scenario": "Offline", "validity": "VALID", "tokens_per_second": 7000.0}
    add_cost(perf, None)
    assert "usd_per_million_tokens" not in perf  # no price, no cost
    add_cost(perf, 3.5)
    assert perf["price_per_hour"] == 3.5
    assert perf["usd_per_million_tokens"] == pytest.approx(0.13889, rel=1e-4)
    result = {
        "benchmark": "llama3_1-8b",
        "loadgen_model": "llama3_1-8b",
        "scenario": "Offline",
        "mode": "performance",
        "performance": perf,
    }
    rows = dict(result_rows(result))
    assert rows["cost"] == "$0.1389 per million output tokens at $3.50/h"
    metrics = performance_metrics(perf)
    assert metrics["usd_per_million_tokens"] == pytest.approx(0.13889, rel=1e-4)
    assert metrics["price_per_hour"] == 3.5
