"""What the bench scripts print at the end, without an engine: the lines a reader copies into
bench/RESULTS.md must not claim measurements that were not made."""

from __future__ import annotations

from bench.server_capacity import Trial, summary


def _trial(qps: float, tps: float) -> Trial:
    return Trial("ours", qps, 800.0, 40.0, tps, qps, 400, True, True, 120, 0, 20.0)


def test_skip_reference_prints_no_reference_verdict():
    text = summary(_trial(48, 6000.0), None, 7000.0, reference_ran=False)
    assert "no tested QPS met the limits" not in text
    assert "reference: not measured (--skip-reference)" in text
    assert "ours     : 48 qps" in text and "0.86 of Offline" in text
    assert "capacity ratio" not in text


def test_reference_that_ran_and_missed_is_reported():
    text = summary(_trial(48, 6000.0), None, 7000.0, reference_ran=True)
    assert "reference: no tested QPS met the limits" in text
    both = summary(_trial(48, 6000.0), _trial(4, 500.0), 7000.0, reference_ran=True)
    assert "capacity ratio ours / reference pattern: 12.0x" in both
