"""One engine, many short LoadGen tests: Server / Interactive trials at fixed targets and an
Offline measurement on the same engine (calibration, capacity benches).

A `mlperf-vllm run` per trial costs an engine start each (~1 min for an 8B on a GPU, over two
for a 70B), and a search takes five to eight trials. Here the engine starts once; each trial is
one LoadGen test in this process. LoadGen reads its built-in mlperf.conf only on the first
`FromConfig` of a process, so the settings are built once (mlperf.conf + the user.conf: latency
limits, seeds) and each trial then sets only its own fields: target QPS, duration, query count
and the samples loaded. A trial loads about `target x duration` samples, because LoadGen rounds
an LLM Server test up to whole passes over the loaded samples (a 60 s trial at 50 QPS over all
13,368 would run 267 s).

Each trial is judged by the one rule (harness.run.record.timeline.judge_trial: p99 limits, early
stopping where judgeable, and the engine keeping up over the steady part), and leaves its LoadGen
logs and its timeline (json + png) in its own folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.calibrate.record import TrialResult
from harness.run.execute.runner import add_latency_fields, run_identity
from harness.run.execute.session import EngineSession, Phase, PhaseResult
from harness.run.record.logs import parse_detail_log, performance_result
from harness.run.record.timeline import judge_sustained, judge_trial, write_timeline
from harness.run.setup.prepare import PreparedRun
from harness.run.setup.settings import audit_path_for


def trial_counts(qps: float, duration_s: float, min_queries: int, size: int) -> tuple[int, int]:
    """(min_query_count, loaded samples) of one Server-like trial of `duration_s` at `qps`.

    Equal issue pads the test to whole passes over the loaded samples, and LoadGen pads one
    more pass when all of the last pass's arrivals fall before min_duration. Loading just the
    count the arrivals reach on average made that a coin flip: half the trials ran twice as
    long. Three standard deviations of the Poisson count more (what the dataset holds) make
    it one pass, about 3/sqrt(count) longer than `duration_s`, with a ~0.1% chance of two."""
    arrivals = qps * duration_s
    wanted = max(1, min_queries, math.ceil(arrivals))
    one_pass = math.ceil(arrivals + 3 * math.sqrt(arrivals))
    return wanted, min(max(wanted, one_pass), size)


class TrialEngine:
    """Start the engine of `prep` once (an EngineSession: vLLM's output in LOGS/engine.log, the
    run's watches over every trial); run trials on it; `close()` stops it."""

    def __init__(
        self,
        prep: PreparedRun,
        logs: Path,
        *,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
    ):
        self.prep, self.logs = prep, logs
        # Built once by prepare() (mlperf.conf + the user.conf; Interactive is LoadGen's Server
        # scenario under the `-interactive` model name); each trial sets only its own fields.
        self.settings = prep.settings
        limits = prep.bench.server_limits
        self.ttft_ms = ttft_ms or (limits.ttft_ms if limits else None)
        self.tpot_ms = tpot_ms or (limits.tpot_ms if limits else None)
        if ttft_ms:
            self.settings.ttft_latency = int(ttft_ms * 1e6)
        if tpot_ms:
            self.settings.tpot_latency = int(tpot_ms * 1e6)
        self.size = prep.dataset.size
        self.session = EngineSession(prep, logs)
        try:
            self.engine_start_s = self.session.start()
        except BaseException:
            self.session.close()
            raise
        self.lg = self.session.lg
        self.audit = audit_path_for(logs, None)
        self.n = 0
        self.trials: list[TrialResult] = []

    def _test(self, settings: Any, name: str, **phase: Any) -> PhaseResult:
        """One LoadGen test in its own numbered folder (`phase`: Phase's other fields)."""
        self.n += 1
        log_dir = self.logs / f"{self.n:02d}-{name}"
        return self.session.run(Phase(name, settings, log_dir, self.audit, **phase))

    def offline_rate(self, samples: int) -> dict[str, Any]:
        """One Offline test of `samples` samples on this engine: its samples/s is the ceiling
        no Server target on the same engine can sustain."""
        lg = self.lg
        s = lg.TestSettings()
        s.scenario = lg.TestScenario.Offline
        s.mode = lg.TestMode.PerformanceOnly
        s.use_token_latencies = True
        s.min_duration_ms = 0
        s.min_query_count = samples
        s.offline_expected_qps = float(samples)
        s.performance_sample_count_override = min(samples, self.size)
        done = self._test(s, f"offline-{samples}")
        assert done.log_dir is not None
        perf = performance_result(done.log_dir).to_dict()
        perf["wall_s"] = round(done.wall_s, 2)
        perf["log_dir"] = str(done.log_dir)
        return perf

    def trial(
        self,
        qps: float,
        duration_s: float,
        *,
        name: str = "trial",
        max_in_flight: int | None = None,
        min_queries: int = 0,
    ) -> TrialResult:
        """One Server-like test at `qps` for about `duration_s`, judged by the one rule."""
        s = self.settings
        lg = self.lg
        s.mode = lg.TestMode.PerformanceOnly
        s.server_target_qps = qps
        s.min_duration_ms = int(duration_s * 1000)
        wanted, loaded = trial_counts(qps, duration_s, min_queries, self.size)
        s.min_query_count = wanted
        s.performance_sample_count_override = loaded
        done = self._test(
            s, f"{name}-{qps:g}", timeline=True, limit_in_flight=True, max_in_flight=max_in_flight
        )
        log_dir, wall, tl = done.log_dir, done.wall_s, done.timeline
        assert log_dir is not None and tl is not None  # a Server-like SUT keeps a timeline
        detail = parse_detail_log(log_dir / "mlperf_log_detail.txt")
        perf = performance_result(log_dir, detail).to_dict()
        add_latency_fields(perf, detail.values)
        verdict = judge_sustained(tl.samples, tl.gauges, qps)
        write_timeline(
            log_dir,
            tl.samples,
            tl.gauges,
            verdict,
            title=f"{self.prep.loadgen_model} {name} at {qps:g} QPS",
            limits_ms=(self.ttft_ms, self.tpot_ms),
            engine=tl.engine,
            engines=tl.engines,
            routed=tl.routed,
        )
        judged = judge_trial(perf, verdict, self.ttft_ms, self.tpot_ms)
        record = done.stats
        result = TrialResult(
            name=name,
            target_qps=qps,
            duration_s=duration_s,
            loaded_samples=loaded,
            passed=judged.passed,
            reasons=judged.reasons,
            notes=judged.notes,
            validity=str(perf.get("validity")),
            ttft_p99_ms=perf.get("ttft_p99_ms"),
            tpot_p99_ms=perf.get("tpot_p99_ms"),
            completed_qps=perf.get("samples_per_second"),
            queries=int(perf.get("sample_count") or 0),
            wall_s=round(wall, 2),
            sustained=verdict.to_dict(),
            log_dir=str(log_dir),
            extra={
                "peak_engine_in_flight": done.peak_engine_in_flight,
                "completed_tokens_per_s": perf.get("tokens_per_second"),
                "early_stopping_met": perf.get("early_stopping_met"),
                **{k: record.get(k) for k in ("dp_routing", "routed", "engine_served")},
            },
        )
        self.trials.append(result)
        return result

    def run_record(self) -> dict[str, Any]:
        """What this engine runs, as a run's result.json records it (run_identity), with the
        engine args as the engine resolved them."""
        _, resolved = self.session.engine_resolved()
        return {**run_identity(self.prep), "engine_resolved_args": resolved}

    def close(self) -> None:
        self.session.close()


def bounded_search(
    measure: Callable[[float], bool],
    start: float,
    ceiling: float | None,
    trials: int,
    precision: float = 0.02,
    decimals: int = 3,
) -> tuple[float | None, list[tuple[float, bool]]]:
    """Highest passing rate, never above `ceiling` (the same engine's Offline samples/s, which
    counts as a failure without being tried). `measure(qps) -> bool` runs one trial; at most
    `trials` of them. Below the first failure the step is x0.8; between a pass and a failure,
    bisection, until they are within `precision` of each other."""
    lo: float | None = None
    hi: float | None = ceiling
    history: list[tuple[float, bool]] = []
    q = min(start, ceiling) if ceiling else start
    for _ in range(trials):
        q = round(q, decimals)
        if q <= 0 or any(q == h for h, _ in history):
            break
        ok = measure(q)
        history.append((q, ok))
        if ok:
            lo = q if lo is None else max(lo, q)
        else:
            hi = q if hi is None else min(hi, q)
        if lo is None:
            q = q * 0.8
        elif hi is None:
            q = lo * 2
        else:
            if (hi - lo) <= precision * lo:
                break
            q = (lo + hi) / 2
    return lo, history
