"""The sustained-rate rule, the trial rule and the bounded search, without an engine: queues
built from known arrival and service rates, so the right verdict is known in advance."""

from __future__ import annotations

import bisect
import heapq
import json
import random

import pytest

from harness.calibrate.trials import bounded_search
from harness.run.record.host_path import (
    WARN_MIN_REQUESTS,
    WARN_SHARE,
    fell_behind,
    host_path_warning,
    in_transit,
    in_transit_per_engine,
)
from harness.run.record.timeline import (
    EARLY_STOPPING_MIN_QUERIES,
    host_path,
    judge_sustained,
    judge_trial,
    record_timeline,
    series,
    write_timeline,
)
from sut.stats import Timeline


def queue(rate: float, capacity: float, seconds: float, latency: float = 2.0, seed: int = 0):
    """Samples (issued, first, completed, tokens) of a system that completes at most `capacity`
    samples per second, each no sooner than `latency` after its Poisson issue at `rate`."""
    rng = random.Random(seed)
    t, last_done, out = 0.0, 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        done = max(t + latency, last_done + 1.0 / capacity)
        last_done = done
        out.append((t, t + 0.1, done, 64))
    return out


@pytest.mark.parametrize("rate, capacity", [(40, 50), (49, 50), (10, 50)])
def test_a_rate_under_capacity_keeps_up(rate, capacity):
    v = judge_sustained(queue(rate, capacity, 120), target_qps=rate)
    assert v.kept_up is True, v.reason
    assert abs(v.completed_to_issued - 1) < 0.03 and v.backlog_growth < 0.03 * v.issued_in_window
    assert v.allowed_growth == pytest.approx(
        max(0.03 * v.issued_in_window, 2 * v.mean_backlog**0.5)
    )


@pytest.mark.parametrize("rate, capacity", [(53, 50), (60, 50)])
def test_a_rate_over_capacity_falls_behind_although_short_p99s_look_fine(rate, capacity):
    samples = queue(rate, capacity, 120)
    v = judge_sustained(samples, target_qps=rate)
    assert v.kept_up is False
    assert v.completed_qps_in_window == pytest.approx(capacity, rel=0.03)
    assert v.backlog_end > v.backlog_start
    # The trap the rule exists for: a 10 s trial sees a fraction of the latency a long run does.
    early = max(s[2] - s[0] for s in samples if s[0] < 10)
    late = max(s[2] - s[0] for s in samples if s[0] > 110)
    assert late > 3 * early


def slots(rate: float, slots: int, seconds: float, seed: int):
    """Samples of an engine with `slots` sequences at once, each served in 0.15 s plus an
    exponential 0.15 s (capacity slots / 0.3 per second), Poisson issues at `rate`."""
    rng = random.Random(seed)
    t, free, out = 0.0, [0.0] * slots, []
    while t < seconds:
        t += rng.expovariate(rate)
        start = max(t, heapq.heappop(free))
        done = start + 0.15 + rng.expovariate(1 / 0.15)
        heapq.heappush(free, done)
        out.append((t, start + 0.05, done, 16))
    return out


def test_a_short_trial_that_keeps_up_is_not_called_behind_for_the_queues_own_noise():
    """An 8 s trial at 60% of a 4-slot engine's capacity (a calibration trial on the tiny
    model): its backlog at two instants differs by noise alone. Judged by completions against
    issues, 29% of these seeds "fell behind"; the rule calls at most 5%."""
    verdicts = [judge_sustained(slots(8, 4, 8, seed), target_qps=8) for seed in range(100)]
    judged = [v for v in verdicts if v.kept_up is not None]
    behind = [v for v in judged if not v.kept_up]
    assert len(judged) >= 80 and len(behind) <= 0.05 * len(judged), [v.reason for v in behind]
    assert sum(v.completed_to_issued < 0.97 for v in judged) >= 0.2 * len(judged)


def test_a_trial_over_capacity_is_not_called_kept_up():
    """1.5 times a 4-slot engine's capacity for 8 s, 1.2 times it for 30 s: the noise allowance
    does not hide a queue that grows (at most 5 of 100 seeds pass; a trial too short to tell is
    "not judged", which does not pass either)."""
    for rate, seconds in ((20, 8), (16, 30)):
        verdicts = [judge_sustained(slots(rate, 4, seconds, seed)) for seed in range(100)]
        assert sum(v.kept_up is True for v in verdicts) <= 5, (rate, seconds)
        assert all(v.allowed_growth < v.backlog_growth for v in verdicts if v.kept_up is False)


def test_a_test_too_short_to_tell_is_not_judged():
    v = judge_sustained(queue(53, 50, 4, latency=2.0), target_qps=53)
    assert v.kept_up is None and "longer" in v.reason
    assert judge_sustained([], target_qps=1).kept_up is None


def _perf(**kw):
    base = {"ttft_p99_ms": 100.0, "tpot_p99_ms": 10.0, "sample_count": 5000}
    base["early_stopping_met"] = True
    return {**base, **kw}


def test_trial_rule_needs_limits_early_stopping_and_keeping_up():
    kept = judge_sustained(queue(40, 50, 120), target_qps=40)
    behind = judge_sustained(queue(60, 50, 120), target_qps=60)
    short = judge_sustained(queue(53, 50, 4), target_qps=53)
    assert judge_trial(_perf(), kept, 2000, 100).passed
    assert not judge_trial(_perf(ttft_p99_ms=2001.0), kept, 2000, 100).passed
    assert not judge_trial(_perf(tpot_p99_ms=101.0), kept, 2000, 100).passed
    assert not judge_trial(_perf(tpot_p99_ms=None), kept, 2000, 100).passed
    fell = judge_trial(_perf(), behind, 2000, 100)
    assert not fell.passed and "fell behind" in fell.reasons[0]
    assert not judge_trial(_perf(), short, 2000, 100).passed
    # Early stopping counts only where the trial had queries enough to judge it.
    assert not judge_trial(_perf(early_stopping_met=False), kept, 2000, 100).passed
    few = _perf(early_stopping_met=False, sample_count=EARLY_STOPPING_MIN_QUERIES - 1)
    judged = judge_trial(few, kept, 2000, 100)
    assert judged.passed and "not judged" in judged.notes[0]


def test_timeline_files_show_the_backlog(tmp_path):
    samples = queue(60, 50, 60)
    v = judge_sustained(samples, target_qps=60)
    written = write_timeline(tmp_path, samples, [], v, title="t", limits_ms=(2000, 100))
    doc = json.loads((tmp_path / "timeline.json").read_text())
    assert doc["verdict"]["kept_up"] is False and doc["limits_ms"] == [2000, 100]
    rows = doc["series"]
    assert rows[-1]["completed"] == len(samples) and rows[-1]["backlog"] == 0
    assert max(r["backlog"] for r in rows) > 300  # 10/s over capacity for a minute
    assert (tmp_path / "timeline.png").stat().st_size > 1000 and "png" in written
    assert not list(tmp_path.glob("*.tmp*"))
    assert series([], []) == []


@pytest.mark.parametrize("capacity", [7.3, 30.0, 49.9, 12.0])
def test_search_finds_the_highest_pass_and_never_tries_above_the_ceiling(capacity):
    tried = []

    def measure(q):
        tried.append(q)
        return q <= capacity

    best, history = bounded_search(measure, 45.0, 50.0, trials=12, precision=0.02)
    assert all(q < 50.0 for q in tried)
    assert best is not None and best <= capacity
    assert capacity - best <= 0.05 * capacity + 0.002
    assert [q for q, _ in history] == tried and len(tried) <= 12


def test_search_spends_at_most_its_trials_and_reports_no_pass():
    best, history = bounded_search(lambda q: False, 10.0, 20.0, trials=3)
    assert best is None and [q for q, _ in history] == [10.0, 8.0, 6.4]
    best, history = bounded_search(lambda q: True, 10.0, None, trials=3)
    assert best == 40.0 and len(history) == 3


# Requests in transit (harness.run.record.host_path): handed to vLLM, in neither scheduler list.


def engine_run(transit, rate: float = 20.0, seconds: float = 60.0, waiting: int = 0):
    """A Timeline of a queue that keeps up (about rate x 2 s in flight) with engine stats from
    two data-parallel engines: at each gauge `transit(t)` of the requests in flight sit on
    engine 0's way in (our router has them there, vLLM's scheduler does not), and `waiting` of
    those vLLM holds wait in its scheduler (engine 1's)."""
    samples = queue(rate, 50, seconds)
    issues, dones = sorted(s[0] for s in samples), sorted(s[2] for s in samples)
    tl = Timeline(samples, [])
    t = 0.5
    while t < dones[-1]:
        issued, completed = bisect.bisect_right(issues, t), bisect.bisect_right(dones, t)
        in_engine = issued - completed
        on_0, on_1 = in_engine - in_engine // 2, in_engine // 2
        x = min(transit(t), on_0)
        queued = min(waiting, on_1)
        tl.gauges.append((t, issued, completed, in_engine))
        tl.engine.append((t, in_engine - x - queued, queued, 0.4, 0))
        tl.engines.append((t, ((on_0 - x, 0), (on_1 - queued, queued))))
        tl.routed.append((t, ((on_0, 0), (on_1, 0))))
        t += 0.5
    return tl


def test_in_transit_is_in_flight_less_vllms_running_and_waiting():
    gauges = [(1.0, 30, 0, 30), (2.0, 50, 10, 40), (3.0, 60, 30, 30)]
    engine = [(1.0, 20, 4, 0.1, 0), (2.0, 38, 2, 0.2, 0), (3.0, 29, 3, 0.2, 0)]
    assert in_transit(gauges, engine) == [(1.0, 6), (2.0, 0), (3.0, 0)]  # 30 - 32 reads as 0
    engines = [(1.0, ((10, 2), (10, 2))), (2.0, ((20, 1), (18, 1)))]
    routed = [(1.0, ((16, 9), (14, 4))), (2.0, ((21, 0), (19, 0)))]
    assert in_transit_per_engine(engines, routed) == [(1.0, (4, 2)), (2.0, (0, 0))]
    # an engine vLLM has not reported yet holds nothing
    assert in_transit_per_engine([(1.0, ((5, 0),))], [(1.0, ((5, 0), (3, 3)))]) == [(1.0, (0, 3))]


def test_the_series_carries_in_transit_only_where_engine_stats_were_recorded():
    tl = engine_run(lambda t: 6)
    rows = series(tl.samples, tl.gauges, step_s=1.0, engine=tl.engine)
    steady = [r for r in rows if 10 <= r["t"] <= 55]
    assert steady and all(r["in_transit"] == 6 for r in steady)
    assert all(r["in_transit"] == r["in_engine"] - r["running"] - r["waiting"] for r in rows)
    assert "in_transit_per_engine" not in rows[0]  # no per-engine records given
    rows = series(tl.samples, tl.gauges, 1.0, tl.engine, tl.engines, tl.routed)
    assert all(r["in_transit_per_engine"] == [6, 0] for r in rows if 10 <= r["t"] <= 55)
    plain = series(tl.samples, tl.gauges, step_s=1.0)
    assert not any("in_transit" in r or "in_transit_per_engine" in r for r in plain)
    # routed without vLLM's per-engine counts (engine stats off): no per-engine value
    rows = series(tl.samples, tl.gauges, 1.0, routed=tl.routed)
    assert not any("in_transit_per_engine" in r for r in rows)


def test_the_summary_covers_the_steady_part_only():
    # many in transit while the engine fills (before the steady part), 3 after
    tl = engine_run(lambda t: 15 if t < 4 else 3)
    v = judge_sustained(tl.samples, tl.gauges, target_qps=20)
    assert v.window_start_s >= 4  # the ramp is outside the window
    host = host_path(tl.samples, tl.gauges, v, tl.engine, tl.engines, tl.routed)
    assert host is not None
    t0 = tl.samples[0][0]
    inside = [g for g in tl.gauges if v.window_start_s <= g[0] - t0 <= v.window_end_s]
    flight = sum(g[3] for g in inside) / len(inside)
    assert host.gauges == len(inside) and host.mean_in_transit == 3 and host.max_in_transit == 3
    assert host.mean_in_flight == pytest.approx(flight)
    assert host.share_of_in_flight == pytest.approx(3 / flight) and 0.05 < 3 / flight < 0.1
    assert host.per_engine_mean == [3, 0] and host.per_engine_max == [3, 0]
    assert not host.behind  # 3 requests: under the floor although over 5% of ~40
    # without engine stats there is nothing to summarize
    assert host_path(tl.samples, tl.gauges, v) is None


def test_a_growing_host_path_is_flagged_and_a_small_one_is_not():
    big = engine_run(lambda t: 12)
    v = judge_sustained(big.samples, big.gauges, target_qps=20)
    host = host_path(big.samples, big.gauges, v, big.engine)
    assert host is not None and host.behind and host.per_engine_mean is None
    assert host.share_of_in_flight > 0.25 and host.mean_waiting == 0
    warning = host_path_warning(host.to_dict())
    assert warning is not None and warning.startswith("the SUT's host path fell behind: 12 ")
    assert "(max 12); the engines' schedulers had room" in warning
    small = engine_run(lambda t: 1)
    host = host_path(small.samples, small.gauges, v, small.engine)
    assert host is not None and not host.behind and host_path_warning(host.to_dict()) is None
    assert host_path_warning(None) is None


def test_the_flag_needs_both_the_share_and_the_floor():
    assert fell_behind(WARN_MIN_REQUESTS, 100)  # 8 of 100 in flight
    assert not fell_behind(WARN_MIN_REQUESTS - 0.1, 20)  # 40% but under the floor
    assert not fell_behind(40, 1000)  # 4%: above the goal, within the measurement's lag
    assert fell_behind(51, 1000) and WARN_SHARE * 1000 == 50


def test_the_warning_says_when_vllms_schedulers_were_queueing_too():
    tl = engine_run(lambda t: 12, waiting=9)
    v = judge_sustained(tl.samples, tl.gauges, target_qps=20)
    host = host_path(tl.samples, tl.gauges, v, tl.engine)
    assert host is not None and host.mean_waiting == 9
    warning = host_path_warning(host.to_dict())
    assert warning and warning.endswith("the engines' schedulers had 9 waiting as well")
    assert "had room" not in warning


def test_record_timeline_keeps_the_summary_and_the_files_show_it(tmp_path, capsys):
    tl = engine_run(lambda t: 12)
    settings = type("Settings", (), {"server_target_qps": 20})()
    record = record_timeline(tl, settings, tmp_path, "t")
    summary = record["in_transit"]
    assert summary["mean_in_transit"] == 12 and summary["behind"] is True
    assert summary["per_engine_mean"] == [12, 0] and summary["per_engine_max"] == [12, 0]
    assert "warning: the SUT's host path fell behind: 12 requests" in capsys.readouterr().out
    doc = json.loads((tmp_path / "timeline.json").read_text())
    assert doc["in_transit"] == summary
    assert doc["series"][30]["in_transit"] == 12 and doc["series"][30]["in_transit_per_engine"]
    assert "png" in record["timeline"], record["timeline"]
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    # the same test without engine stats records no in-transit figure anywhere
    plain = Timeline(tl.samples, tl.gauges, routed=tl.routed)
    record = record_timeline(plain, settings, tmp_path / "plain", "t")
    assert "in_transit" not in record and "png" in record["timeline"]
    doc = json.loads((tmp_path / "plain" / "timeline.json").read_text())
    assert "in_transit" not in doc and "in_transit" not in doc["series"][30]
    assert "host path" not in capsys.readouterr().out
