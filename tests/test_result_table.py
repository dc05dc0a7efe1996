"""The result table printed at the end of a run, without an engine: what `validity VALID` beside
`engine kept up NO` means, the run's warnings repeated under it, and its width fitted to the
terminal."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.record.result import RunResult
from harness.run.record.summary import (
    MAX_WARNINGS,
    MAX_WIDTH,
    MIN_WIDTH,
    render_result,
    result_rows,
    table_width,
)
from harness.run.record.timeline import judge_sustained

REPO = Path(__file__).resolve().parent.parent


def _queue(rate: float, capacity: float, seconds: float = 120.0) -> list:
    """(issued, first, completed, tokens) of a system completing at most `capacity` a second
    under Poisson arrivals at `rate` (as test_timeline's queue)."""
    rng = random.Random(0)
    t, last, out = 0.0, 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        last = max(t + 2.0, last + 1.0 / capacity)
        out.append((t, t + 0.1, last, 64))
    return out


def _server(validity: str, rate: float, capacity: float, **fields) -> RunResult:
    sustained = judge_sustained(_queue(rate, capacity), target_qps=rate).to_dict()
    perf = {
        "scenario": "Server",
        "validity": validity,
        "tokens_per_second": 3000.0,
        "samples_per_second": rate,
        "ttft_p99_ms": 800.0,
        "ttft_limit_ms": 2000.0,
        "tpot_p99_ms": 40.0,
        "tpot_limit_ms": 100.0,
        "early_stopping_met": True,
        "sustained": sustained,
    }
    return RunResult(
        status="completed",
        benchmark="llama3_1-8b",
        loadgen_model="llama3_1-8b",
        scenario="Server",
        mode="performance",
        performance=perf,
        **fields,
    )


def test_valid_beside_kept_up_no_says_what_it_means():
    rows = result_rows(_server("VALID", rate=60, capacity=50))
    keys = [k for k, _ in rows]
    assert dict(rows)["engine kept up"].startswith("NO")
    # the line sits right under the verdict it explains
    assert keys[keys.index("engine kept up") + 1] == "  meaning"
    meaning = dict(rows)["  meaning"]
    for words in ("held over this run's length", "would fail", "ship a lower target"):
        assert words in meaning
    # with the rate it completed against the arrival rate: ~50/s against 60 QPS
    completed = float(meaning.split("arrived (")[1].split("/s")[0])
    assert completed == pytest.approx(50, rel=0.05) and "/s against 60 QPS)" in meaning


@pytest.mark.parametrize(
    "validity, rate, capacity",
    [("VALID", 40, 50), ("INVALID", 60, 50)],  # kept up; or INVALID, which says enough
)
def test_no_meaning_line_where_the_verdicts_agree(validity, rate, capacity):
    rows = dict(result_rows(_server(validity, rate, capacity)))
    assert "engine kept up" in rows and "  meaning" not in rows


def test_the_runs_warnings_are_repeated_under_the_table_one_line_each():
    long = (
        "user.conf /very/long/path/" + "deep/" * 30 + "server.conf has line(s) LoadGen ignores: "
        "line 7 `*.Server.target_qsp`: unknown key (did you mean target_qps?)"
    )
    warnings = [
        "user.conf line 3: unknown key 'target_qsp' (did you mean 'target_qps'?): ignored",
        long,
        "prefix caching is on: not compliant with the MLPerf LLM rules",
        "prefix caching is on: not compliant with the MLPerf LLM rules",  # said twice, shown once
    ]
    result = _server(
        "VALID", 40, 50, warnings=warnings, not_compliant=["min_duration 5000 ms"], round="v6.1"
    )
    text = render_result(result, width=100)
    table, block = text.split("warnings (3; in full in result.json):\n")
    lines = block.splitlines()
    assert lines[0] == "  - " + warnings[0] and lines[2] == "  - " + warnings[2]
    # cut in the middle: what is wrong stays at the start, what to do at the end
    assert lines[1].startswith("  - user.conf /very/long/path/deep/") and " ... " in lines[1]
    assert lines[1].endswith("(did you mean target_qps?)")
    assert len(lines) == 3 and all(len(line) <= 100 for line in lines)
    # the not-compliant row points at them where they are now
    assert "(see the warnings below)" in " ".join(table.split())


def test_many_warnings_are_capped_and_none_leave_no_block():
    many = [f"warning number {i}" for i in range(MAX_WARNINGS + 3)]
    text = render_result(_server("VALID", 40, 50, warnings=many), width=100)
    block = text.split(f"warnings ({len(many)}; in full in result.json):\n")[1].splitlines()
    assert block[:MAX_WARNINGS] == [f"  - warning number {i}" for i in range(MAX_WARNINGS)]
    assert block[MAX_WARNINGS:] == ["  ... and 3 more in result.json"]
    assert "warnings (" not in render_result(_server("VALID", 40, 50), width=100)


@pytest.mark.parametrize(
    "columns, width", [("100", 100), ("80", 80), ("200", MAX_WIDTH), ("40", MIN_WIDTH)]
)
def test_the_table_fits_the_terminal_within_bounds(monkeypatch, columns, width):
    monkeypatch.setenv("COLUMNS", columns)
    assert table_width() == width
    result = _server("VALID", 60, 50, warnings=["w " * 200])
    lines = render_result(result).splitlines()
    assert max(len(line) for line in lines) <= width
    # wide enough content fills it: the table is laid out for this terminal, not for 110
    assert max(len(line) for line in lines) >= width - 2


def test_no_terminal_keeps_the_full_width():
    # output to a pipe, COLUMNS unset: no terminal to fit
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    code = "from harness.run.record.summary import table_width; print(table_width())"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True
    )
    assert int(proc.stdout) == MAX_WIDTH


def _in_transit(mean: float, in_flight: float, waiting: float = 0.0) -> dict:
    """result.json's `performance.in_transit` of a run with engine stats (host_path)."""
    return {
        "window_start_s": 20.0,
        "window_end_s": 580.0,
        "gauges": 1120,
        "mean_in_transit": mean,
        "max_in_transit": 1401,
        "mean_in_flight": in_flight,
        "share_of_in_flight": mean / in_flight,
        "mean_waiting": waiting,
        "behind": True,
        "per_engine_mean": [84.0] * 4,
        "per_engine_max": [400] * 4,
    }


def _with_in_transit(summary: dict | None) -> RunResult:
    result = _server("VALID", 40, 50)
    assert result.performance is not None
    if summary is not None:
        result.performance["in_transit"] = summary
    return result


def test_a_host_path_that_fell_behind_is_named_in_one_line():
    rows = result_rows(_with_in_transit(_in_transit(336.0, 1200.0, waiting=2.0)))
    keys = [k for k, _ in rows]
    assert keys.count("warning") == 1 and keys.index("warning") > keys.index("engine kept up")
    assert dict(rows)["warning"] == (
        "the SUT's host path fell behind: 336 requests (28.0% of those in flight) were between "
        "LoadGen and the engines on average (max 1,401); the engines' schedulers had room"
    )
    text = render_result(_with_in_transit(_in_transit(336.0, 1200.0)), width=110)
    assert "the SUT's host path fell behind" in text and "warnings (" not in text


@pytest.mark.parametrize(
    "summary",
    [
        None,  # no engine stats: nothing measured, nothing said
        _in_transit(20.0, 1200.0),  # 1.7%: within the goal
        _in_transit(55.0, 1200.0),  # 4.6%: above the goal, within the warning's margin
        _in_transit(6.0, 30.0),  # 20% of a small run, under the floor of 8 requests
    ],
)
def test_no_host_path_warning_while_in_transit_stays_small(summary):
    rows = result_rows(_with_in_transit(summary))
    assert "warning" not in dict(rows)
    assert "host path" not in render_result(_with_in_transit(summary), width=110)
