"""The engine's own view of itself during a run: vLLM's scheduler stats (requests running and
waiting, KV cache use) and its preemption count, as the engine reports them after each step.

vLLM hands these to stat loggers only while stats are on (`disable_log_stats=False`), which
costs the front end some work per token (vLLM's own Prometheus metrics are then kept too), so a
run records them when asked (`run --engine-stats`). A logger of ours keeps only the latest
values; the SUT samples them with its other gauges twice a second (sut.server), and the harness
draws them into the run's timeline beside the backlog, so a TTFT that grew can be read against
a full batch, a growing waiting queue, a full KV cache or preemptions.
"""

from __future__ import annotations

from typing import Any

WARMUP_PREFIX = "warmup-"  # request ids of the SUT's untimed warm-up


class EngineView:
    """Latest scheduler stats of one engine (or the sum over data-parallel engines)."""

    def __init__(self) -> None:
        self._latest: dict[int, tuple[int, int, float]] = {}
        self.preemptions = 0
        self.steps = 0
        # per engine index: [requests finished, their prompt tokens] since mark()
        self._served: dict[int, list[int]] = {}
        self._preempted: dict[int, int] = {}  # merged views: preemptions so far per engine

    def record(self, engine_idx: int, scheduler_stats: Any, iteration_stats: Any) -> None:
        if scheduler_stats is not None:
            self._latest[engine_idx] = (
                int(getattr(scheduler_stats, "num_running_reqs", 0)),
                int(getattr(scheduler_stats, "num_waiting_reqs", 0)),
                float(getattr(scheduler_stats, "kv_cache_usage", 0.0)),
            )
            self.steps += 1
        if iteration_stats is not None:
            self.preemptions += int(getattr(iteration_stats, "num_preempted_reqs", 0))
            for done in getattr(iteration_stats, "finished_requests", ()):
                if str(getattr(done, "request_id", "")).startswith(WARMUP_PREFIX):
                    continue
                served = self._served.setdefault(engine_idx, [0, 0])
                served[0] += 1
                served[1] += int(getattr(done, "num_prompt_tokens", 0))

    def mark(self) -> None:
        """A test starts: count finished requests from here."""
        self._served = {}

    def served(self) -> list[dict[str, int]]:
        """Per engine index, the requests finished since mark() and their prompt tokens."""
        n = max(self._served, default=-1) + 1
        return [
            {"finished": v[0], "prompt_tokens": v[1]}
            for v in (self._served.get(i, [0, 0]) for i in range(n))
        ]

    def snapshot(self) -> tuple[int, int, float, int]:
        """(running, waiting, KV cache use 0-1 (the fullest engine), preemptions so far)."""
        views = list(self._latest.values())
        if not views:
            return 0, 0, 0.0, self.preemptions
        return (
            sum(v[0] for v in views),
            sum(v[1] for v in views),
            max(v[2] for v in views),
            self.preemptions,
        )

    def per_engine(self) -> tuple[tuple[int, int], ...]:
        """(running, waiting) of each data-parallel engine, by engine index."""
        n = max(self._latest, default=-1) + 1
        return tuple(self._latest[i][:2] if i in self._latest else (0, 0) for i in range(n))

    # A view in a front-end worker process (sut.engine_worker) hands its engine's latest
    # counts to the SUT's process, which merges them by engine index (sut.engine_pool).
    def take(self) -> tuple[int, int, float, int, int, int]:
        """(running, waiting, KV use, preemptions so far, requests finished and their prompt
        tokens since the last take) of this view's engine (the sum, if it has several)."""
        running, waiting, kv, preemptions = self.snapshot()
        finished = sum(v[0] for v in self._served.values())
        prompt_tokens = sum(v[1] for v in self._served.values())
        self._served = {}
        return running, waiting, kv, preemptions, finished, prompt_tokens

    def merge(self, engine_idx: int, taken: tuple[int, int, float, int, int, int]) -> None:
        """Fold in what a worker's view `take()`-d for the engine it runs as `engine_idx`."""
        running, waiting, kv, preemptions, finished, prompt_tokens = taken
        self._latest[engine_idx] = (running, waiting, kv)
        self._preempted[engine_idx] = preemptions
        self.preemptions = sum(self._preempted.values())
        self.steps += 1
        if finished:
            served = self._served.setdefault(engine_idx, [0, 0])
            served[0] += finished
            served[1] += prompt_tokens

    def logger_factory(self) -> Any:
        """A vLLM stat-logger factory (`AsyncLLM(stat_loggers=[...])`) feeding this view."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        view = self

        class _Recorder(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                self.engine_index = engine_index

            def record(
                self,
                scheduler_stats: Any,
                iteration_stats: Any,
                mm_cache_stats: Any = None,
                engine_idx: int = 0,
            ) -> None:
                view.record(engine_idx, scheduler_stats, iteration_stats)

            def log_engine_initialized(self) -> None:
                pass

        return _Recorder
