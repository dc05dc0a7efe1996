"""Requests in transit: handed to vLLM by our SUT and in neither list of vLLM's schedulers.

A request the SUT has handed to `AsyncLLM.generate` (its in-engine count) is either in a
scheduler's running or waiting list, or in transit: queued in the SUT's own process or in vLLM's
front end and transport on its way in, or finished in the engine and not yet processed back on
its way out. Requests in transit wait on the host path (one Python process carries LoadGen's
callbacks, one task per request and vLLM's input and output processing of every engine), not on
the GPU: on a 4x H200 host at data parallel 4 a mean of 336 (max 1,401) were in transit while
the schedulers had room, and TTFT p99 rose to 6.6 s. The scheduler counts come from
`run --engine-stats` (sut.engine_stats), so without them nothing here is computed.

Total: the SUT's in-engine count minus vLLM's running and waiting summed over engines. Per
data-parallel engine: what our router has in flight there minus that engine's running and
waiting. The SUT samples all of these at the same instants (sut.server), so they pair one to one.
vLLM's counts are those of each engine's latest step, a little older than ours; a request
counted by the engine and already answered by us would make a negative difference, so each
value is at least 0 (per engine values are clamped one by one and may sum to a little more than
the total).

The summary covers the steady part of the test, the window the sustained verdict uses
(harness.run.record.timeline.judge_sustained: from the engine filling up to the last issue), so the
ramp-up and the drain do not dilute it. Its share is mean in transit / mean in flight over that
window (a ratio of means: gauges with few requests in flight do not swing it).

When it counts as fallen behind (`behind`): the goal on GPUs is at most GOAL_SHARE of in flight
in transit. A run is flagged above WARN_SHARE and at least WARN_MIN_REQUESTS on average:
- the share leaves room for what the measurement itself shows: vLLM's counts lag ours by about
  a step, so requests that arrived or finished within it read as in transit;
- the floor keeps small runs quiet: at the H200 line's 208 requests/s a 30-40 ms step alone
  reads as 6-8 requests in transit, and a CPU run with 4-16 in flight would pass 5% with one.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

GOAL_SHARE = 0.02  # what a host path that keeps up holds on GPUs
WARN_SHARE = 0.05
WARN_MIN_REQUESTS = 8

Gauge = tuple[float, int, int, int]  # time, issued, completed, in the engine
EngineGauge = tuple[float, int, int, float, int]  # time, running, waiting, KV use, preemptions
PerEngineGauge = tuple[float, tuple[tuple[int, int], ...]]


def _paired(
    gauges: Sequence[Gauge], engine: Sequence[EngineGauge]
) -> list[tuple[float, int, int, int]]:
    """(time, in the engine by our count, vLLM's running, vLLM's waiting) at each sample of
    vLLM's stats, with our gauge of the same instant."""
    times = [g[0] for g in gauges]
    out = []
    for t, running, waiting, *_ in engine:
        g = bisect.bisect_right(times, t) - 1
        if g >= 0:
            out.append((t, gauges[g][3], running, waiting))
    return out


def in_transit(gauges: Sequence[Gauge], engine: Sequence[EngineGauge]) -> list[tuple[float, int]]:
    """(time, requests in transit) at each sample of vLLM's scheduler stats."""
    return [
        (t, max(0, ours - running - waiting))
        for t, ours, running, waiting in _paired(gauges, engine)
    ]


def in_transit_per_engine(
    engines: Sequence[PerEngineGauge], routed: Sequence[PerEngineGauge]
) -> list[tuple[float, tuple[int, ...]]]:
    """(time, requests in transit per data-parallel engine): our router's in flight there minus
    vLLM's running and waiting there. An engine that has not reported yet counts (0, 0)."""
    times = [r[0] for r in routed]
    out = []
    for t, vllm in engines:
        k = bisect.bisect_right(times, t) - 1
        if k < 0:
            continue
        ours = routed[k][1]
        n = max(len(ours), len(vllm))
        values = tuple(max(0, _at(ours, e)[0] - sum(_at(vllm, e))) for e in range(n))
        out.append((t, values))
    return out


def _at(pairs: tuple[tuple[int, int], ...], e: int) -> tuple[int, int]:
    return pairs[e] if e < len(pairs) else (0, 0)


@dataclass(frozen=True)
class HostPathSummary:
    """In transit over the steady part of one test (result.json `performance.in_transit`)."""

    window_start_s: float  # seconds after the first issue, as the sustained verdict's
    window_end_s: float
    gauges: int  # samples of vLLM's stats in the window
    mean_in_transit: float
    max_in_transit: int
    mean_in_flight: float  # the SUT's in-engine count
    share_of_in_flight: float  # mean in transit / mean in flight
    mean_waiting: float  # vLLM's waiting, summed over engines
    behind: bool  # see fell_behind
    per_engine_mean: list[float] | None = None  # data parallel, our router on
    per_engine_max: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _rounded(v) for k, v in asdict(self).items()}


def _rounded(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 4)
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def fell_behind(mean_in_transit: float, mean_in_flight: float) -> bool:
    """The flag's one rule (module docstring): over WARN_SHARE of in flight and at least
    WARN_MIN_REQUESTS on average."""
    return mean_in_transit >= WARN_MIN_REQUESTS and mean_in_transit > WARN_SHARE * mean_in_flight


def summarize_host_path(
    gauges: Sequence[Gauge],
    engine: Sequence[EngineGauge],
    t0: float,
    window_s: tuple[float, float],
    engines: Sequence[PerEngineGauge] = (),
    routed: Sequence[PerEngineGauge] = (),
) -> HostPathSummary | None:
    """In transit over `window_s` (seconds after `t0`, the first issue); None without vLLM's
    stats or without a sample of them in the window."""
    start, end = t0 + window_s[0], t0 + window_s[1]
    transit, flight, waiting = [], [], []
    for t, ours, running, queued in _paired(gauges, engine):
        if start <= t <= end:
            transit.append(max(0, ours - running - queued))
            flight.append(ours)
            waiting.append(queued)
    if not transit:
        return None
    mean, mean_flight = sum(transit) / len(transit), sum(flight) / len(flight)
    per = [v for t, v in in_transit_per_engine(engines, routed) if start <= t <= end]
    n = max((len(v) for v in per), default=0)
    columns = [[v[e] if e < len(v) else 0 for v in per] for e in range(n)]
    return HostPathSummary(
        window_start_s=window_s[0],
        window_end_s=window_s[1],
        gauges=len(transit),
        mean_in_transit=mean,
        max_in_transit=max(transit),
        mean_in_flight=mean_flight,
        share_of_in_flight=mean / mean_flight if mean_flight else 0.0,
        mean_waiting=sum(waiting) / len(waiting),
        behind=fell_behind(mean, mean_flight),
        per_engine_mean=[sum(c) / len(c) for c in columns] if per else None,
        per_engine_max=[max(c) for c in columns] if per else None,
    )


def host_path_warning(summary: Mapping[str, Any] | None) -> str | None:
    """One line for the result table when in transit grew (fell_behind), else None; read from
    result.json's record, so a file written before this rule changed is judged by today's.
    The schedulers "had room" when their own waiting stayed under the same bar."""
    if not summary:
        return None
    mean, flight = summary["mean_in_transit"], summary["mean_in_flight"]
    if not fell_behind(mean, flight):
        return None
    waiting = summary.get("mean_waiting") or 0.0
    room = (
        "the engines' schedulers had room"
        if not fell_behind(waiting, flight)
        else f"the engines' schedulers had {waiting:,.0f} waiting as well"
    )
    return (
        f"the SUT's host path fell behind: {mean:,.0f} requests "
        f"({summary['share_of_in_flight']:.1%} of those in flight) were between LoadGen and the "
        f"engines on average (max {summary['max_in_transit']:,}); {room}"
    )
