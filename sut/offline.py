"""Offline SUT: the whole LoadGen query goes to vLLM's scheduler at once.

The reference SUT slices the query into fixed batches and waits for each `generate` call, so
the GPU idles between batches and every sample waits for the slowest one of its batch. Here
one worker thread owns the engine: it adds every issued sample as a request, then drives the
engine's step loop (the loop `LLM.generate` runs internally) and completes each sample with
LoadGen the moment vLLM reports it finished. Continuous batching stays full until the end.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlperf_loadgen as lg

from sut.responses import complete_samples

log = logging.getLogger(__name__)


@dataclass
class SUTStats:
    issued: int = 0
    completed: int = 0
    output_tokens: int = 0
    first_issue_s: float = 0.0
    last_complete_s: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        span = self.last_complete_s - self.first_issue_s
        return self.output_tokens / span if span > 0 else 0.0


class _Progress:
    """Completed samples and live output tokens/s on a tqdm bar, refreshed at most 2x a second."""

    def __init__(self, enabled: bool, desc: str):
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=0, unit="sample", desc=desc, mininterval=0.5, smoothing=0.1)
        self._last = 0.0

    def add_total(self, n: int) -> None:
        if self._bar is not None:
            self._bar.total += n
            self._bar.refresh()

    def update(self, n: int, stats: SUTStats) -> None:
        if self._bar is None or n == 0:
            return
        self._bar.update(n)
        now = time.monotonic()
        if now - self._last >= 0.5:
            self._last = now
            self._bar.set_postfix_str(f"{stats.tokens_per_second:,.0f} tok/s", refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class OfflineSUT:
    """LoadGen SUT over a `vllm.LLM` (its `llm_engine` request loop).

    `prompts[i]` are the token ids of LoadGen sample index i. `issue_queries` returns at once;
    `stop()` ends the worker thread. If the engine fails, every outstanding sample is completed
    with an empty payload so LoadGen can finish and write its logs, and `error` holds the cause.
    """

    def __init__(
        self,
        llm: Any,
        prompts: Sequence[Sequence[int]],
        sampling_params: Any,
        *,
        progress: bool = True,
        name: str = "Offline",
    ):
        from vllm.inputs import TokensPrompt

        self._engine = llm.llm_engine
        # The engine's resolved configuration (see sut.engine.resolved_settings).
        self.vllm_config: Any = getattr(self._engine, "vllm_config", None)
        self._prompt_type = TokensPrompt
        self._prompts = prompts
        self._params = sampling_params
        self._inbox: queue.Queue[list[tuple[int, int]] | None] = queue.Queue()
        self._progress = _Progress(progress, name)
        self.stats = SUTStats()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="offline-sut", daemon=True)
        self._thread.start()
        self.handle = lg.ConstructSUT(self.issue_queries, self.flush_queries)

    # LoadGen callbacks --------------------------------------------------------------------
    def issue_queries(self, query_samples) -> None:
        # Copy out (id, index) now: LoadGen owns the QuerySample objects.
        self._inbox.put([(q.id, q.index) for q in query_samples])

    def flush_queries(self) -> None:
        pass

    # Engine loop ---------------------------------------------------------------------------
    def _add(self, batch: list[tuple[int, int]], pending: dict[str, int]) -> None:
        if not self.stats.issued:
            self.stats.first_issue_s = time.monotonic()
        self.stats.issued += len(batch)
        self._progress.add_total(len(batch))
        if self.error is not None:
            self._fail([rid for rid, _ in batch])
            return
        add_request = self._engine.add_request
        prompts = [self._prompt_type(prompt_token_ids=list(self._prompts[i])) for _, i in batch]
        # vLLM >= 0.32 wants rendered engine inputs (raw prompts are deprecated there); older
        # engines (0.26) have no renderer and take the token prompt itself.
        renderer: Any = getattr(self._engine, "renderer", None)
        if hasattr(renderer, "render_cmpl"):
            prompts = renderer.render_cmpl(prompts)
        for (rid, _), prompt in zip(batch, prompts, strict=True):
            key = str(rid)
            add_request(key, prompt, self._params)
            pending[key] = rid

    def _fail(self, response_ids: list[int]) -> None:
        complete_samples([(rid, ()) for rid in response_ids])
        self.stats.completed += len(response_ids)

    def _run(self) -> None:
        pending: dict[str, int] = {}
        while True:
            try:
                batch = self._inbox.get(block=not pending)
            except queue.Empty:
                batch = []
            if batch is None:
                break
            try:
                if batch:
                    self._add(batch, pending)
                    continue  # drain the inbox before stepping: one big batch, not slices
                outputs = self._engine.step()
            except Exception as exc:  # engine died: let LoadGen finish, keep the cause
                log.error("vLLM engine failed: %s", exc)
                self.error = exc
                self._fail(list(pending.values()))
                pending.clear()
                continue
            done = []
            for out in outputs:
                if out.finished:
                    done.append((pending.pop(out.request_id), out.outputs[0].token_ids))
            if done:
                self.stats.output_tokens += complete_samples(done)
                self.stats.completed += len(done)
                self.stats.last_complete_s = time.monotonic()
                self._progress.update(len(done), self.stats)
        self._progress.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._inbox.put(None)
            self._thread.join()
        if self.handle is not None:
            lg.DestroySUT(self.handle)
            self.handle = None
