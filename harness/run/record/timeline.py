"""Did the engine keep up? The backlog of a Server / Interactive test over time, and the one
sustained-rate rule every judge of such a test uses (run, calibrate, bench/server_capacity.py).

A Server test's p99 latencies say nothing about whether the engine keeps up: above its capacity
the backlog (samples issued and not yet completed) grows by (target - capacity) every second,
and a 10-30 s test is over before that shows in a p99, while a 600 s run at the same rate is
INVALID. So a test is judged also by its steady part: from the moment the engine filled up (twice
the median sample latency after the first issue, at least a tenth of the issue span) to the last
issue (what follows is the drain). Over that window the backlog's trend (least-squares slope x
window length) must not grow by more than the larger of
- `tolerance` of the samples issued in the window, and
- the backlog's own noise: twice the standard deviation of a Poisson count with the window's
  mean backlog (a queue that keeps up still holds rate x latency samples, and that number
  wanders by about its square root).
The samples completed in the window against those issued are reported, not judged: that ratio
is the backlog at two instants, and in a short trial its noise alone says "fell behind" for a
queue that keeps up (an 8 s trial at 60% of a 4-slot engine's capacity: 29% of seeds, against
3% for the rule above; tests/test_timeline.py).
A window shorter than three median latencies, or with fewer than MIN_WINDOW_SAMPLES issued,
cannot tell a queue that grows from one that fills: the verdict is then "not judged" and a
calibration trial so judged does not pass (make it longer).

The SUT records the raw events (sut.stats.Timeline); this module turns them into the verdict,
a compact per-second series (timeline.json) and a chart (timeline.png) beside result.json. With
vLLM's scheduler stats (`run --engine-stats`) both also show the requests in transit, handed to
vLLM and in none of its schedulers' lists, and their summary over the same steady part
(harness.run.record.host_path).
"""

from __future__ import annotations

import bisect
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.run.record.host_path import (
    HostPathSummary,
    host_path_warning,
    in_transit,
    in_transit_per_engine,
    summarize_host_path,
)

log = logging.getLogger(__name__)

TIMELINE_JSON = "timeline.json"
TIMELINE_PNG = "timeline.png"
DEFAULT_TOLERANCE = 0.03
MIN_WINDOW_SAMPLES = 50

Sample = tuple[float, float, float, int]  # issued, first token, completed, tokens
Gauge = tuple[float, int, int, int]  # time, issued, completed, in the engine
# time, running, waiting, KV cache use (0-1), preemptions since the engine started (vLLM's own)
EngineGauge = tuple[float, int, int, float, int]
# time, and per data-parallel engine a pair: vLLM's (running, waiting), or what our router has
# (in flight, awaiting a first token) there
PerEngineGauge = tuple[float, tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class SustainedVerdict:
    """The steady part of one test. `kept_up`: True, False, or None (too short to judge)."""

    kept_up: bool | None
    reason: str
    target_qps: float | None
    issued_qps: float  # over the whole issue span
    window_start_s: float  # seconds after the first issue
    window_end_s: float
    issued_in_window: int
    completed_in_window: int
    completed_qps_in_window: float
    completed_to_issued: float
    backlog_start: float  # fitted backlog at the window's start and end
    backlog_end: float
    backlog_growth: float  # fitted end - start
    mean_backlog: float  # over the window
    allowed_growth: float  # max(tolerance x issued in the window, 2 sqrt(mean backlog))
    peak_backlog: int
    peak_in_engine: int
    drain_s: float  # last completion - last issue
    median_latency_s: float
    tolerance: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def line(self) -> str:
        """One line for logs, confs and tables."""
        if self.kept_up is None:
            return f"sustained: not judged ({self.reason})"
        return (
            f"{'kept up' if self.kept_up else 'FELL BEHIND'}: completed "
            f"{self.completed_to_issued:.3f} of issued over {self.window_start_s:.0f}-"
            f"{self.window_end_s:.0f} s ({self.completed_qps_in_window:.2f}/s), backlog "
            f"{self.backlog_start:.0f} -> {self.backlog_end:.0f} (peak {self.peak_backlog})"
        )


def _backlog_at(issues: Sequence[float], dones: Sequence[float], t: float) -> int:
    return bisect.bisect_right(issues, t) - bisect.bisect_right(dones, t)


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares line: (slope, intercept)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def judge_sustained(
    samples: Sequence[Sample],
    gauges: Sequence[Gauge] = (),
    target_qps: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> SustainedVerdict:
    """The sustained-rate verdict of one test (see the module docstring)."""
    issues = sorted(s[0] for s in samples)
    dones = sorted(s[2] for s in samples)
    if len(samples) < 2:
        zero = dict.fromkeys(
            ("issued_qps", "window_start_s", "window_end_s", "completed_qps_in_window"), 0.0
        )
        return SustainedVerdict(
            kept_up=None,
            reason="fewer than two samples",
            target_qps=target_qps,
            issued_in_window=0,
            completed_in_window=0,
            completed_to_issued=0.0,
            backlog_start=0.0,
            backlog_end=0.0,
            backlog_growth=0.0,
            mean_backlog=0.0,
            allowed_growth=0.0,
            peak_backlog=0,
            peak_in_engine=0,
            drain_s=0.0,
            median_latency_s=0.0,
            tolerance=tolerance,
            **zero,
        )
    t0, last_issue = issues[0], issues[-1]
    span = last_issue - t0
    latencies = sorted(s[2] - s[0] for s in samples)
    median = latencies[len(latencies) // 2]
    start = t0 + min(max(2 * median, 0.1 * span), 0.5 * span)
    end = last_issue
    window = end - start
    issued_w = _count_between(issues, start, end)
    completed_w = _count_between(dones, start, end)
    # Backlog at evenly spaced times in the window (200 points at most).
    n_points = max(2, min(200, int(window * 4) + 2))
    xs = [start + window * i / (n_points - 1) for i in range(n_points)]
    ys = [_backlog_at(issues, dones, x) for x in xs]
    slope, icept = _fit(xs, ys)
    b_start, b_end = slope * start + icept, slope * end + icept
    growth = b_end - b_start
    mean_backlog = sum(ys) / len(ys)
    by_share, by_noise = tolerance * issued_w, 2 * math.sqrt(mean_backlog)
    allowed = max(by_share, by_noise)
    peak = max((_backlog_at(issues, dones, t) for t in issues), default=0)
    peak_engine = max((g[3] for g in gauges), default=0)
    ratio = completed_w / issued_w if issued_w else 0.0
    common = dict(
        target_qps=target_qps,
        issued_qps=(len(issues) - 1) / span if span > 0 else 0.0,
        window_start_s=start - t0,
        window_end_s=end - t0,
        issued_in_window=issued_w,
        completed_in_window=completed_w,
        completed_qps_in_window=completed_w / window if window > 0 else 0.0,
        completed_to_issued=ratio,
        backlog_start=b_start,
        backlog_end=b_end,
        backlog_growth=growth,
        mean_backlog=mean_backlog,
        allowed_growth=allowed,
        peak_backlog=peak,
        peak_in_engine=peak_engine,
        drain_s=max(dones[-1] - last_issue, 0.0),
        median_latency_s=median,
        tolerance=tolerance,
    )
    if window < 3 * median or issued_w < MIN_WINDOW_SAMPLES:
        reason = (
            f"the steady part ({window:.1f} s, {issued_w} issued) is shorter than 3 median "
            f"latencies ({3 * median:.1f} s) or {MIN_WINDOW_SAMPLES} samples: a longer test is "
            "needed to tell a growing queue from a filling one"
        )
        return SustainedVerdict(kept_up=None, reason=reason, **common)  # type: ignore[arg-type]
    if growth > allowed:
        bound = (
            f"{tolerance:.0%} of {issued_w} issued"
            if by_share >= by_noise
            else f"2 sqrt of its mean {mean_backlog:.0f}"
        )
        reason = (
            f"the backlog grew by {growth:.0f} samples over {window:.0f} s (> {allowed:.1f}: "
            f"{bound}); completed {completed_w} of {issued_w} issued in the steady part"
        )
        return SustainedVerdict(kept_up=False, reason=reason, **common)  # type: ignore[arg-type]
    reason = (
        f"the backlog stayed flat ({growth:+.0f} samples over {window:.0f} s, within {allowed:.1f})"
    )
    return SustainedVerdict(kept_up=True, reason=reason, **common)  # type: ignore[arg-type]


def _count_between(times: Sequence[float], start: float, end: float) -> int:
    return bisect.bisect_right(times, end) - bisect.bisect_right(times, start)


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    return values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]


def series(
    samples: Sequence[Sample],
    gauges: Sequence[Gauge],
    step_s: float | None = None,
    engine: Sequence[EngineGauge] = (),
    engines: Sequence[PerEngineGauge] = (),
    routed: Sequence[PerEngineGauge] = (),
):
    """Per-step rows: t, issued, completed, backlog, in the engine, and the p99 TTFT / TPOT (ms)
    of the samples whose first token / completion fell in the step (the SUT's own clock: close
    to LoadGen's, which starts at the scheduled issue time). With `engine` (vLLM's scheduler
    stats, sampled with the gauges) also running, waiting, kv_cache_pct and preemptions (since
    the test started) at the step's end. With data-parallel engines, `engines` (vLLM's running
    and waiting per engine) and `routed` (our router's in flight and awaiting a first token per
    engine) at the step's end, as lists of pairs. With `engine`, `in_transit` (requests handed
    to vLLM in neither scheduler list, harness.run.record.host_path) at the step's end, and with both
    per-engine records `in_transit_per_engine` (a list, one value per engine)."""
    if not samples:
        return []
    issues = sorted(s[0] for s in samples)
    dones = sorted(s[2] for s in samples)
    t0, t_end = issues[0], max(dones[-1], issues[-1])
    if step_s is None:  # about 120 rows, whole seconds for runs over two minutes
        step_s = max(0.25, math.ceil((t_end - t0) / 120)) if t_end - t0 > 120 else 1.0
    n = int((t_end - t0) / step_s) + 1
    ttft: list[list[float]] = [[] for _ in range(n)]
    tpot: list[list[float]] = [[] for _ in range(n)]
    for issued, first, done, tokens in samples:
        ttft[min(n - 1, int((first - t0) / step_s))].append((first - issued) * 1e3)
        if tokens > 1:
            tpot[min(n - 1, int((done - t0) / step_s))].append((done - first) * 1e3 / (tokens - 1))
    gauge_times = [g[0] for g in gauges]
    engine_times = [e[0] for e in engine]
    preempted_before = engine[0][4] if engine else 0
    # series read at each step's end: (key, [(time, value)])
    at_end: list[tuple[str, Sequence[tuple[float, Any]]]] = [
        (key, per) for key, per in (("engines", engines), ("routed", routed)) if per
    ]
    if engine:
        at_end.append(("in_transit", in_transit(gauges, engine)))
    if engines and routed:
        at_end.append(("in_transit_per_engine", in_transit_per_engine(engines, routed)))
    indexed = [(key, per, [p[0] for p in per]) for key, per in at_end if per]
    rows: list[dict[str, Any]] = []
    for i in range(n):
        t = t0 + (i + 1) * step_s
        g = bisect.bisect_right(gauge_times, t) - 1
        rows.append(
            {
                "t": round((i + 1) * step_s, 3),
                "issued": bisect.bisect_right(issues, t),
                "completed": bisect.bisect_right(dones, t),
                "backlog": _backlog_at(issues, dones, t),
                "in_engine": gauges[g][3] if g >= 0 else 0,
                "ttft_p99_ms": _round(_p99(ttft[i])),
                "tpot_p99_ms": _round(_p99(tpot[i])),
            }
        )
        for key, per, times in indexed:
            rows[-1][key] = _listed(per[max(0, bisect.bisect_right(times, t) - 1)][1])
        if engine:
            e = engine[max(0, bisect.bisect_right(engine_times, t) - 1)]
            rows[-1].update(
                running=e[1],
                waiting=e[2],
                kv_cache_pct=round(100 * e[3], 3),  # a few blocks of thousands: not 0.0
                preemptions=e[4] - preempted_before,
            )
    return rows


def _listed(v: Any) -> Any:
    """Tuples (of tuples) as JSON's lists."""
    return [_listed(x) for x in v] if isinstance(v, tuple) else v


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def write_timeline(
    out_dir: Path,
    samples: Sequence[Sample],
    gauges: Sequence[Gauge],
    verdict: SustainedVerdict,
    *,
    title: str = "",
    limits_ms: tuple[float | None, float | None] = (None, None),
    engine: Sequence[EngineGauge] = (),
    engines: Sequence[PerEngineGauge] = (),
    routed: Sequence[PerEngineGauge] = (),
) -> dict[str, str]:
    """timeline.json (verdict + per-step series) and timeline.png in `out_dir`, each written
    aside and renamed into place. Returns the paths written; a chart that fails is reported,
    not raised (the measurement is on disk already)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = series(samples, gauges, engine=engine, engines=engines, routed=routed)
    doc: dict[str, Any] = {"verdict": verdict.to_dict(), "limits_ms": list(limits_ms)}
    host = host_path(samples, gauges, verdict, engine, engines, routed)
    if host is not None:
        doc["in_transit"] = host.to_dict()
    doc["series"] = rows
    path = out_dir / TIMELINE_JSON
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    tmp.replace(path)
    written = {"json": str(path)}
    try:
        png = plot_timeline(out_dir / TIMELINE_PNG, rows, verdict, title, limits_ms, host)
        written["png"] = str(png)
    except Exception as exc:  # the chart is a convenience; the data is written
        written["png_error"] = f"{type(exc).__name__}: {exc}"
    return written


def host_path(
    samples: Sequence[Sample],
    gauges: Sequence[Gauge],
    verdict: SustainedVerdict,
    engine: Sequence[EngineGauge] = (),
    engines: Sequence[PerEngineGauge] = (),
    routed: Sequence[PerEngineGauge] = (),
) -> HostPathSummary | None:
    """Requests in transit over the verdict's steady part (harness.run.record.host_path); None for a
    test without vLLM's scheduler stats (`run --engine-stats`)."""
    if not engine or not samples:
        return None
    t0 = min(s[0] for s in samples)
    window = (verdict.window_start_s, verdict.window_end_s)
    return summarize_host_path(gauges, engine, t0, window, engines, routed)


def record_timeline(
    tl: Any, settings: Any, out_dir: Path, title: str, limits: Any = None
) -> dict[str, Any]:
    """A Server-like test's verdict and picture beside result.json, from the SUT's timeline `tl`
    as the test left it (None: the SUT keeps none; `limits`: the benchmark's ServerLimits, or
    None). Nothing here may fail the run: the LoadGen logs are the result."""
    if tl is None:
        return {}
    try:
        target = float(getattr(settings, "server_target_qps", 0) or 0) or None
        verdict = judge_sustained(tl.samples, tl.gauges, target)
        engine_side = {k: getattr(tl, k, ()) for k in ("engine", "engines", "routed")}
        written = write_timeline(
            out_dir,
            tl.samples,
            tl.gauges,
            verdict,
            title=f"{title} at {target or 0:g} QPS",
            limits_ms=(limits.ttft_ms, limits.tpot_ms) if limits else (None, None),
            **engine_side,
        )
        print(verdict.line(), flush=True)
        record = {"sustained": verdict.to_dict(), "timeline": written}
        host = host_path(tl.samples, tl.gauges, verdict, **engine_side)
        if host is not None:  # with engine stats only: result.json `performance.in_transit`
            record["in_transit"] = host.to_dict()
            warning = host_path_warning(record["in_transit"])
            if warning:
                print(f"warning: {warning}", flush=True)
        return record
    except Exception as exc:  # pragma: no cover - a bug here must not cost the measurement
        log.exception("timeline not recorded")
        return {"timeline": {"error": f"{type(exc).__name__}: {exc}"}}


def plot_timeline(
    path: Path,
    rows: list[dict[str, Any]],
    verdict: SustainedVerdict,
    title: str,
    limits_ms: tuple[float | None, float | None],
    host: HostPathSummary | None = None,
) -> Path:
    """Backlog and in-engine counts (with engine stats: vLLM's running, waiting and KV use, and
    requests in transit), per-step p99s, and with data-parallel engines a panel per-engine (and
    one of in transit per engine where both per-engine records exist)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    per_engine = bool(rows) and ("engines" in rows[-1] or "routed" in rows[-1])
    transit_per_engine = bool(rows) and "in_transit_per_engine" in rows[-1]
    n_axes = 2 + per_engine + transit_per_engine
    fig, axes = plt.subplots(n_axes, 1, figsize=(8, 2.75 * n_axes), sharex=True)
    ax1, ax2 = axes[0], axes[1]
    if per_engine:
        _plot_per_engine(axes[2], t, rows)
    if transit_per_engine:
        _plot_in_transit_per_engine(axes[-1], t, rows)
    ax1.plot(t, [r["backlog"] for r in rows], label="backlog (issued - completed)")
    ax1.plot(t, [r["in_engine"] for r in rows], label="in the engine", alpha=0.7)
    if rows and "running" in rows[0]:  # vLLM's own view (run --engine-stats)
        ax1.plot(t, [r["running"] for r in rows], ":", label="running (vLLM)")
        ax1.plot(t, [r["waiting"] for r in rows], ":", label="waiting (vLLM)")
        if "in_transit" in rows[0]:  # handed to vLLM, in neither list: the host path's queue
            ax1.plot(
                t,
                [r["in_transit"] for r in rows],
                color="k",
                lw=1.2,
                label="in transit (in no vLLM list)",
            )
        kv = ax1.twinx()
        kv.plot(t, [r["kv_cache_pct"] for r in rows], color="0.5", lw=0.8, label="KV cache %")
        kv.set_ylim(0, 100)
        kv.set_ylabel("KV cache use %", fontsize=8)
        preempted = rows[-1]["preemptions"]
        if preempted:
            title = f"{title} ({preempted} preemptions)"
    ax1.axvspan(verdict.window_start_s, verdict.window_end_s, color="0.9", label="steady part")
    ax1.set_ylabel("samples")
    ax1.legend(loc="upper left", fontsize=8)
    lines = [title, verdict.line()]
    if host is not None:
        lines.append(
            f"in transit over the steady part: mean {host.mean_in_transit:,.1f} "
            f"({host.share_of_in_flight:.1%} of in flight), max {host.max_in_transit:,}"
        )
    ax1.set_title("\n".join(lines), fontsize=9)
    for key, label, limit, style in (
        ("ttft_p99_ms", "TTFT p99 (per step)", limits_ms[0], "-"),
        ("tpot_p99_ms", "TPOT p99 (per step)", limits_ms[1], "-"),
    ):
        pts = [(r["t"], r[key]) for r in rows if r[key] is not None]
        if pts:
            (line,) = ax2.plot(*zip(*pts, strict=True), style, label=label)
            if limit:
                ax2.axhline(limit, color=line.get_color(), ls="--", lw=0.8)
    ax2.set_yscale("log")
    ax2.set_ylabel("ms (dashed: limits)")
    axes[-1].set_xlabel("seconds since the first issue")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(path)
    return path


def _plot_per_engine(ax: Any, t: list[float], rows: list[dict[str, Any]]) -> None:
    """Data-parallel engines, one colour each: vLLM's waiting (solid) and running (dotted) with
    engine stats on, else what our router has in flight (solid) and awaiting a first token
    (dotted) there."""
    key = "engines" if "engines" in rows[-1] else "routed"
    labels = (
        ("waiting", "running") if key == "engines" else ("sent, in flight", "awaiting 1st token")
    )
    n = max(len(r.get(key, ())) for r in rows)
    for e in range(n):

        def pick(r: dict[str, Any], i: int, e: int = e) -> int:
            pairs = r.get(key) or []
            return pairs[e][i] if e < len(pairs) else 0

        solid, dotted = (1, 0) if key == "engines" else (0, 1)
        color = f"C{e % 10}"  # engine e's colour in every per-engine panel
        ax.plot(t, [pick(r, solid) for r in rows], color=color, label=f"engine {e} {labels[0]}")
        ax.plot(t, [pick(r, dotted) for r in rows], ":", color=color, lw=0.8)
    source = "vLLM's scheduler" if key == "engines" else "our router"
    ax.set_ylabel(f"per engine ({source})", fontsize=8)
    ax.set_title(f"dotted: {labels[1]}", fontsize=8)
    ax.legend(loc="upper left", fontsize=7, ncol=2)


def _plot_in_transit_per_engine(ax: Any, t: list[float], rows: list[dict[str, Any]]) -> None:
    """Per data-parallel engine, what our router has in flight there and vLLM's scheduler does
    not hold (harness.run.record.host_path), in the engine's colour of the panel above."""
    per = [r.get("in_transit_per_engine") or [] for r in rows]
    for e in range(max(len(v) for v in per)):
        values = [v[e] if e < len(v) else 0 for v in per]
        ax.plot(t, values, color=f"C{e % 10}", label=f"engine {e}")
    ax.set_ylabel("in transit per engine", fontsize=8)
    ax.set_title("routed in flight - vLLM's running - waiting, per engine", fontsize=8)
    ax.legend(loc="upper left", fontsize=7, ncol=4)


def early_stopping_min_queries(over_limit: int = 1, percentile: float = 0.99) -> int:
    """The fewest queries with which LoadGen's Server early stopping (99% confidence) certifies
    the percentile when `over_limit` of them are over the latency limit: the smallest n such
    that n - over_limit queries under the limit would be seen with probability below 1% if the
    true share under it were only `percentile` (a binomial tail, as LoadGen computes it).
    p99: 459 queries with none over the limit, 662 with one."""
    q = 1.0 - percentile
    n = over_limit + 1
    while True:
        tail = sum(
            math.exp(
                math.lgamma(n + 1)
                - math.lgamma(x + 1)
                - math.lgamma(n - x + 1)
                + x * math.log(q)
                + (n - x) * math.log(percentile)
            )
            for x in range(over_limit + 1)
        )
        if tail < 0.01:
            return n
        n += 1


# A p99 early-stopping estimate needs some hundreds of queries even with none over the limit;
# below this count (one over the limit allowed) LoadGen's "early stopping not satisfied" says
# only that the test was short.
EARLY_STOPPING_MIN_QUERIES = early_stopping_min_queries(1)


@dataclass(frozen=True)
class TrialJudgement:
    passed: bool
    reasons: list[str]  # why it did not pass (empty when it passed)
    notes: list[str]  # what was not judged, and why


def judge_trial(
    perf: dict[str, Any],
    verdict: SustainedVerdict,
    ttft_limit_ms: float | None,
    tpot_limit_ms: float | None,
) -> TrialJudgement:
    """The one rule for a Server / Interactive trial at a fixed target: p99 TTFT and TPOT within
    the limits, early stopping met (where the trial had enough queries to judge it), and the
    engine kept up over the trial's steady part (judge_sustained). A rate passes only when a
    run of any length at it would: a p99 alone says nothing about a queue that grows."""
    reasons: list[str] = []
    notes: list[str] = []
    for label, key, limit in (
        ("TTFT", "ttft_p99_ms", ttft_limit_ms),
        ("TPOT", "tpot_p99_ms", tpot_limit_ms),
    ):
        value = perf.get(key)
        if not limit:
            continue
        if value is None:
            reasons.append(f"no {label} p99 in the LoadGen log")
        elif value > limit:
            reasons.append(f"{label} p99 {value:,.1f} ms > {limit:,.0f} ms")
    queries = int(perf.get("sample_count") or 0)
    if perf.get("early_stopping_met") is False:
        if queries >= EARLY_STOPPING_MIN_QUERIES:
            reasons.append("LoadGen's early stopping not satisfied")
        else:
            notes.append(f"early stopping not judged ({queries} < {EARLY_STOPPING_MIN_QUERIES})")
    if verdict.kept_up is None:
        reasons.append(f"sustained rate not judged: {verdict.reason}")
    elif not verdict.kept_up:
        reasons.append(f"the engine fell behind: {verdict.reason}")
    if int(perf.get("num_errors") or 0):
        notes.append(f"LoadGen logged {perf['num_errors']} error(s)")
    return TrialJudgement(not reasons, reasons, notes)
