"""Offline SUT: the whole LoadGen query goes to vLLM's scheduler at once.

The reference SUT slices the query into fixed batches and waits for each `generate` call, so
the GPU idles between batches and every sample waits for the slowest one of its batch. Here
one worker thread owns the engine: it adds every issued sample as a request, then drives the
engine's step loop (the loop `LLM.generate` runs internally) and completes each sample with
LoadGen the moment vLLM reports it finished. Continuous batching stays full until the end.

Failures: any exception in the worker (adding a request, a step, reporting) sets `error` and
answers every outstanding sample, empty, through the ledger (sut.ledger), so LoadGen ends
and writes its logs; the runner then fails the run with that error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import mlperf_loadgen as lg

from sut.engine import SampleParams, tokens_prompt
from sut.ledger import Ledger
from sut.lifecycle import DEFAULT_STOP_TIMEOUT_S, EngineSUT, engine_dead_error
from sut.progress import Progress
from sut.reaper import EngineSegments, exited, reap
from sut.stats import SUTStats

log = logging.getLogger(__name__)

# The order in which a query's samples go to the engine (a SUT may process them in any order).
ORDERS = ("arrival", "longest-first", "shortest-first")


def order_samples(
    batch: list[tuple[int, int]], prompts: Sequence[Sequence[int]], order: str
) -> list[tuple[int, int]]:
    """(response id, sample index) pairs in `order` of prompt length; "arrival" keeps LoadGen's."""
    if order == "arrival":
        return batch
    return sorted(batch, key=lambda item: len(prompts[item[1]]), reverse=order == "longest-first")


FAILED_ENGINE_GRACE_S = 2.0
# Samples handed to the engine between two looks at the stop flag (~0.1 s of adding here).
ADD_CHUNK = 1024


class OfflineSUT(EngineSUT):
    """LoadGen SUT over a `vllm.LLM` (its `llm_engine` request loop).

    `prompts[i]` are the token ids of LoadGen sample index i. `issue_queries` returns at once.
    Built with `OfflineSUT.create(engine_config, ...)` the SUT owns its engine: `stop()` shuts
    it down and reaps its processes. Built over a given `llm`, `stop()` leaves the engine up.
    """

    def __init__(
        self,
        llm: Any,
        prompts: Sequence[Sequence[int]],
        sampling_params: Any,
        *,
        progress: bool = True,
        name: str = "Offline",
        order: str = "arrival",
        engine_procs: Sequence[Any] | None = None,
        output_lengths: Sequence[int] | None = None,
        engine_segments: EngineSegments | None = None,
    ):
        super().__init__(name, Ledger(streaming=False, on_error=self.fail))
        self._llm = llm
        self._order = order  # one of ORDERS
        self._engine = llm.llm_engine
        self._owns_engine = engine_procs is not None
        self._engine_procs = list(engine_procs or ())
        # the engine's /dev/shm segments, removed once its processes are gone (engine owners)
        self._segments = engine_segments or EngineSegments()
        # Our direct children among them: the engine core(s). Their workers, and any helper
        # processes those start and end, are theirs to watch.
        self._engine_cores = [p for p in self._engine_procs if _parent(p) == os.getpid()]
        self.vllm_config = getattr(self._engine, "vllm_config", None)
        self._prompt_type = tokens_prompt
        self._prompts = prompts
        self._params_of = SampleParams(sampling_params, output_lengths)
        self._inbox: queue.Queue[list[tuple[int, int]] | None] = queue.Queue()
        self._progress = Progress(progress, name)
        self.stats = SUTStats()
        self._thread = threading.Thread(target=self._run, name="offline-sut", daemon=True)
        self._thread.start()
        self.handle = lg.ConstructSUT(self.issue_queries, self.flush_queries)

    @classmethod
    def create(
        cls,
        engine_config: Any,
        prompts: Sequence[Sequence[int]],
        sampling: Mapping[str, Any],
        *,
        progress: bool = True,
        name: str = "Offline",
        start_timeout_s: float | None = None,
        order: str = "arrival",
        output_lengths: Sequence[int] | None = None,
    ) -> OfflineSUT:
        """The runner's entry: an `EngineConfig` and `make_sampling_params` keyword arguments;
        `output_lengths[i]`: sample index i's `max_tokens` (sut.engine.SampleParams)."""
        from sut.engine import create_offline_engine, make_sampling_params
        from sut.lifecycle import start_engine

        segments = EngineSegments()
        llm, procs = start_engine(
            lambda: create_offline_engine(engine_config), start_timeout_s, name, segments
        )
        return cls(
            llm,
            prompts,
            make_sampling_params(**dict(sampling)),
            progress=progress,
            name=name,
            engine_procs=procs,
            order=order,
            output_lengths=output_lengths,
            engine_segments=segments,
        )

    # LoadGen callbacks --------------------------------------------------------------------
    def issue_queries(self, query_samples) -> None:
        # Copy out (id, index) now: LoadGen owns the QuerySample objects.
        batch = [(q.id, q.index) for q in query_samples]
        self._note_issued([rid for rid, _ in batch])
        if self.error is not None or self._stopped:
            self._fail_outstanding()
            return
        self._inbox.put(batch)

    def flush_queries(self) -> None:
        pass

    # Engine loop ---------------------------------------------------------------------------
    def _add(self, batch: list[tuple[int, int]], pending: dict[str, int]) -> None:
        """Hand the samples to the engine, ADD_CHUNK at a time: between chunks the worker
        looks up, so a stop (an interrupt) or a failure is seen within one chunk's time
        even when the query holds a million samples. The engine still gets the whole query
        before its first step: chunks only bound how long the worker is deaf."""
        self._progress.add_total(len(batch))
        add_request = self._engine.add_request
        batch = [
            (rid, index)
            for rid, index in order_samples(batch, self._prompts, self._order)
            if self.ledger.is_open(rid)  # else already answered (the run failed meanwhile)
        ]
        for start in range(0, len(batch), ADD_CHUNK):
            if self._stopped or self.error is not None:
                return  # what is not added is answered by stop() / fail()
            chunk = batch[start : start + ADD_CHUNK]
            prompts = self._engine_inputs([index for _, index in chunk])
            for (rid, index), prompt in zip(chunk, prompts, strict=True):
                key = str(rid)
                add_request(key, prompt, self._params_of(index))
                pending[key] = rid
            self.ledger.progress()  # adding is work: the stall clock must not run meanwhile

    def _engine_inputs(self, indices: Sequence[int]) -> list[Any]:
        return self._render([self._prompts[i] for i in indices])

    def _render(self, token_lists: Sequence[Sequence[int]]) -> list[Any]:
        prompts = [self._prompt_type(prompt_token_ids=list(t)) for t in token_lists]
        # vLLM >= 0.32 wants rendered engine inputs (raw prompts are deprecated there); older
        # engines (0.26) have no renderer and take the token prompt itself.
        renderer: Any = getattr(self._engine, "renderer", None)
        if hasattr(renderer, "render_cmpl"):
            prompts = renderer.render_cmpl(prompts)
        return prompts

    def _run(self) -> None:
        pending: dict[str, int] = {}
        while True:
            try:
                batch = self._inbox.get(block=not pending)
            except queue.Empty:
                batch = []
            if batch is None or self._stopped:
                break
            try:
                if batch:
                    self._add(batch, pending)
                    self.ledger.progress()  # the engine has its requests only now
                    continue  # drain the inbox before stepping: one big batch, not slices
                if self.error is not None:
                    pending.clear()  # answered by fail(); the engine is stopped with the SUT
                    continue
                outputs = self._engine.step()
                self.ledger.progress()
                done = [
                    (pending.pop(out.request_id), out.outputs[0].token_ids)
                    for out in outputs
                    if out.finished
                ]
                if done:
                    self._complete(done)
            except Exception as exc:  # engine died, a request or a report failed
                if self._stopped:
                    # the engine is being shut down under us (an interrupt, the end of the
                    # run): a consequence of stopping, not a failure of the SUT
                    break
                self.fail(exc)
                pending.clear()
        self._progress.close()

    def warm_up(self, prompts: Sequence[Sequence[int]]) -> int:
        """Generate these prompts (token ids) on the engine before the LoadGen test, outside its
        timing (the rules allow warm-up): the first passes pay for compilation and graph
        capture. Call it before LoadGen starts only: the worker thread drives the engine once
        samples come. Returns the number of warm-up requests that finished."""
        for i, prompt in enumerate(self._render(prompts)):
            self._engine.add_request(f"warmup-{i}", prompt, self._params_of.base)
        finished = 0
        while self._engine.has_unfinished_requests():
            finished += sum(out.finished for out in self._engine.step())
        return finished

    def profile(self, start: bool) -> None:
        # between tests the request loop is idle (it steps only while requests are pending)
        if start:
            self._engine.start_profile()
        else:
            self._engine.stop_profile()

    def _complete(self, done: list[tuple[int, Sequence[int]]]) -> None:
        n, tokens = self.ledger.complete(done)
        stats = self.stats
        stats.completed += n
        stats.output_tokens += tokens
        stats.last_complete_s = time.monotonic()
        self._progress.update(n, stats)

    def engine_failure(self) -> BaseException | None:
        """vLLM's synchronous client never wakes a `step()` blocked on a dead engine core (it
        only flags it dead), so the death is read from the engine's processes here."""
        gone = exited(self._engine_cores)
        if not gone:
            return None
        names = ", ".join(sorted({_name(p) for p in gone}))
        return engine_dead_error(f"its process {names} exited")

    def _wake_worker(self) -> None:
        """Unblock a worker waiting in `step()` on an engine that will never answer."""
        core = getattr(self._engine, "engine_core", None)
        outputs = getattr(core, "outputs_queue", None)
        if outputs is not None:
            with contextlib.suppress(Exception):
                outputs.put_nowait(self.error or engine_dead_error("the SUT stopped"))

    # Lifecycle -----------------------------------------------------------------------------
    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Answer what is outstanding, end the worker, shut the engine down if it is ours."""
        if self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        self._inbox.put(None)
        failed = self.error is not None
        if failed and self._owns_engine:
            # The worker may be blocked inside a step of a dead or stopped engine: stop the
            # engine first, which ends that step. A failed engine gets little time to say
            # goodbye before its processes are killed.
            self._shutdown_engine(min(timeout_s, FAILED_ENGINE_GRACE_S))
            self._wake_worker()
        self._thread.join(timeout_s if not failed else FAILED_ENGINE_GRACE_S)
        if self._thread.is_alive():
            log.error("the offline SUT worker did not end within its timeout")
        self._fail_outstanding()
        if self._owns_engine and not failed:
            self._shutdown_engine(timeout_s)
        self._progress.close()
        self._destroy_handle()
        log.info("offline SUT stopped in %.1f s", time.monotonic() - t0)

    def _shutdown_engine(self, timeout_s: float) -> None:
        from sut.engine import shutdown_llm

        done = threading.Event()

        def target() -> None:
            try:
                shutdown_llm(self._llm)
            except Exception as exc:
                log.error("engine shutdown failed: %s", exc)
            finally:
                done.set()

        self._segments.note(self._engine_procs, force=True)
        threading.Thread(target=target, name="engine-shutdown", daemon=True).start()
        try:
            if not done.wait(timeout_s):
                log.error("engine shutdown did not finish within %.0f s", timeout_s)
        finally:  # an interrupt while waiting still leaves nothing of the engine
            reap(self._engine_procs, routine=self.error is None and done.is_set())
            self._segments.remove()


def _name(proc: Any) -> str:
    try:
        return f"{proc.name()} (pid {proc.pid})"
    except Exception:
        return f"pid {proc.pid}"


def _parent(proc: Any) -> int | None:
    try:
        return int(proc.ppid())
    except Exception:
        return None
