"""Calibrate's logic without an engine: the QPS search, the conf it writes, its bad input.

The end-to-end check (calibrate on the tiny model, then an Offline run with the written conf
meets min duration) is in test_package_e2e.py, which reuses that run for packaging.
"""

from __future__ import annotations

import pytest

from harness.submission.calibrate import conf_key_lines, latency_ok, search_qps
from tests.conftest import cli


@pytest.mark.parametrize("capacity, start", [(7.3, 1.0), (0.3, 1.0), (40.0, 64.0), (5.0, 5.0)])
def test_search_finds_highest_passing_qps(capacity, start):
    tried = []

    def measure(q):
        tried.append(q)
        return q <= capacity  # the system keeps its limits up to `capacity` QPS

    best, history = search_qps(measure, start, trials=12)
    assert best is not None and best <= capacity
    assert capacity - best <= max(0.05 * capacity, 0.002)
    assert [q for q, _ in history] == tried and len(tried) <= 12


def test_search_reports_none_when_nothing_passes():
    best, history = search_qps(lambda q: False, 1.0, trials=4)
    assert best is None and [q for q, _ in history] == [1.0, 0.5, 0.25, 0.125]


def test_search_spends_at_most_the_trials():
    best, history = search_qps(lambda q: True, 1.0, trials=3)
    assert best == 4.0 and len(history) == 3


def test_latency_ok_needs_both_percentiles_within_limits():
    assert latency_ok({"ttft_p99_ms": 1900, "tpot_p99_ms": 99}, 2000, 100)
    assert not latency_ok({"ttft_p99_ms": 2100, "tpot_p99_ms": 50}, 2000, 100)
    assert not latency_ok({"ttft_p99_ms": 100, "tpot_p99_ms": 101}, 2000, 100)
    assert not latency_ok({"ttft_p99_ms": None, "tpot_p99_ms": 1}, 2000, 100)


def test_base_conf_lines_we_set_are_commented_out():
    base = (
        "# header\nllama3_1-8b.Offline.target_qps = 1\n"
        "llama3_1-8b.Server.target_qps = 3 # keep\n*.Offline.min_duration = 5\n"
    )
    out = conf_key_lines(base, ["target_qps"])
    assert "# (replaced by calibrate) llama3_1-8b.Offline.target_qps = 1" in out
    assert "# (replaced by calibrate) llama3_1-8b.Server.target_qps = 3 # keep" in out
    assert "\n*.Offline.min_duration = 5" in out


def test_calibrate_bad_input_is_one_line(tmp_path):
    proc = cli(
        "calibrate",
        "--benchmark",
        "llama3_1-8b",
        "--scenario",
        "Offline",
        "--model",
        str(tmp_path / "nope"),
        "--dataset",
        str(tmp_path / "d.json"),
        "--output",
        str(tmp_path / "out"),
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: model") and "--model" in proc.stderr
