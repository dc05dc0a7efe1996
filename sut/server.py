"""Server / Interactive / SingleStream SUT: every issued query in flight at once, streamed.

The MLCommons reference Server SUT takes one query off a queue, runs `asyncio.run` over its
stream until it finishes, then takes the next: one query in flight, so the queue grows without
bound at any QPS above 1 / latency. Here one event-loop thread owns vLLM's `AsyncLLM`;
`issue_queries` (called from LoadGen's issue thread) hands the samples to that loop with
`call_soon_threadsafe` and returns at once; each sample becomes one asyncio task streaming
`RequestOutputKind.DELTA` outputs, and vLLM's scheduler batches all of them.

Reporting to LoadGen
- FirstTokenComplete carries the first delta's token id(s) the moment the engine emits them.
- QuerySamplesComplete carries every generated id (the first ones included), int32, with
  n_tokens == len(payload), which is what LoadGen's TPOT and TEST06 expect.
- Reports that become ready in the same event-loop iteration go to LoadGen in one call per
  kind (first tokens before completions), so a step that finishes 200 streams costs one
  LoadGen call, not 200.

Single-token outputs (decision): LoadGen logs an error for n_tokens <= 1 because it cannot
form a time-per-output-token from one token. We still report exactly what the model produced
(one id, n_tokens=1): padding with a made-up second token would change the accuracy log and,
when the one token is EOS, break TEST06's "at most one trailing EOS" rule; raising min_tokens
to 2 would change the model's greedy output and depart from the reference sampling settings.
Such samples are counted in `stats.single_token_outputs` and logged once, so a run that has them
says why LoadGen reported errors. With real checkpoints on the MLPerf datasets they do not occur
(the model does not end a summary on its first token); a `--max-tokens 1` run produces only them.

Data parallelism (`data_parallel_size N`): one `AsyncLLM` over N engine cores. With
`dp_routing="ours"` (the default) the SUT picks each request's core itself (sut.routing: least
outstanding work, from its own records of what it sent and what came back) and passes it as
`data_parallel_rank`; `"vllm"` leaves the choice to vLLM's balancer. Either way the SUT records,
per engine, what its router sent and (with engine stats) what vLLM reports running and waiting.

Offline with data parallelism (`final_only=True`): vllm.LLM refuses data_parallel_size > 1, so
Offline DP runs here too, but asks the engine for final outputs only (`FINAL_ONLY`): one output
per request instead of one per token waking the loop, and no first-token reports (Offline has
no TTFT).

What a run looked like (`timeline()`): per sample its issue, first-token and completion times
and its token count, plus a gauge sampled twice a second of samples issued, completed and inside
the engine. The harness turns these into the backlog-over-time picture and the sustained-rate
verdict (harness/run/record/timeline.py): a Server run can meet its p99 limits early and still be
falling behind, which only the backlog's trend shows. Recording costs two clock reads and one
tuple per sample.

Failures and shutdown
- Every sample is answered through the ledger (sut.ledger): exactly once, first token
  before completion, whatever fails. Any exception (the engine died, a request failed, a
  report to LoadGen failed) sets `error`, cancels the streams and answers every outstanding
  sample, empty where it produced nothing; later samples are answered empty at once, so
  LoadGen never waits on a dead engine. A watchdog polls `AsyncLLM.errored` so a death with
  no output pending is noticed within a second; the runner's stall watchdog catches an
  engine that neither dies nor produces (`check_stall`).
- `stop()` cancels outstanding streams (vLLM aborts their requests), shuts the engine down
  (its worker processes exit), stops the loop thread and joins it, reaps any engine process
  left, then destroys the LoadGen SUT. After stop `issue_queries` still answers, at once,
  with empty payloads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mlperf_loadgen as lg

from sut.engine import SampleParams, describe_error, shutdown_engine, tokens_prompt
from sut.engine_pool import EnginePool
from sut.engine_stats import WARMUP_PREFIX
from sut.frontend import DEFAULT_FRONTEND, FrontendError, resolve_frontend
from sut.ledger import Ledger
from sut.lifecycle import DEFAULT_STOP_TIMEOUT_S, EngineSUT, start_engine
from sut.progress import Progress
from sut.reaper import EngineSegments, descendants, new_processes, reap
from sut.routing import (
    DEFAULT_ROUTING,
    LeastWorkRouter,
    check_routing,
    engines_to_route,
    mean_length,
)
from sut.stats import InFlight, ServerStats, Timeline

log = logging.getLogger(__name__)

WATCHDOG_PERIOD_S = 0.5
GAUGE_PERIOD_S = 0.5
FAILED_ENGINE_GRACE_S = 2.0
# how long the record of a test waits for the per-engine front ends' last stats
POOL_SYNC_TIMEOUT_S = 5.0
# a profiler stop waits for every rank to write its trace (seconds for a large model's window)
PROFILE_CALL_TIMEOUT_S = 300.0

# LoadGen needs two events of a request: its first token and its completion (TPOT is the time
# between them over the tokens after the first). vLLM's output processor sends the first token
# at once, the finished output at once, and otherwise one output per `stream_interval` tokens;
# at vLLM's default of 1 every token of every stream wakes the SUT's process, which carries
# LoadGen and vLLM's front end for every engine. Measured with stand-in engines (the host path
# bench, bench/host_path.py, 2-core CPU, DP 4 at 208 requests/s): TTFT p99 4,474 -> 616 ms, in
# transit 294 -> 24 requests. A run's own --stream-interval (an engine line's) still wins.
STREAM_INTERVAL = 128
# The async engine logs throughput every few seconds by default; LoadGen measures that itself.
SERVER_ENGINE_DEFAULTS: Mapping[str, Any] = {
    "disable_log_stats": True,
    "stream_interval": STREAM_INTERVAL,
}


class ServerSUT(EngineSUT):
    """LoadGen SUT over `vllm.v1.engine.async_llm.AsyncLLM` for the latency-bound scenarios.

    Build it with `ServerSUT.create(engine_config, prompts, sampling)`; `prompts[i]` are the
    token ids of LoadGen sample index i. `max_in_flight` limits how many samples are handed to
    the engine at once (None: all of them); `max_in_flight=1` is the reference SUT's pattern,
    kept for side-by-side measurements (bench/server_capacity.py).
    """

    stats: ServerStats

    def __init__(
        self,
        engine_factory: Callable[[], Any],
        prompts: Sequence[Sequence[int]],
        sampling_params: Any,
        *,
        progress: bool = False,
        name: str = "Server",
        max_in_flight: int | None = None,
        final_only: bool = False,
        start_timeout_s: float | None = None,
        engine_view: Any = None,
        output_lengths: Sequence[int] | None = None,
        dp_routing: str = DEFAULT_ROUTING,
    ):
        super().__init__(name, Ledger(streaming=True, on_error=self.fail))
        self._dp_routing = check_routing(dp_routing)
        self._router: LeastWorkRouter | None = None
        self._engine_view = engine_view  # sut.engine_stats.EngineView, or None
        self._prompt_type = tokens_prompt
        self._report_first = not final_only  # `sampling_params` must then be FINAL_ONLY
        self._prompts = prompts
        self._params_of = SampleParams(sampling_params, output_lengths)
        self.stats = ServerStats()
        self._in_engine = InFlight()  # requests inside vLLM: the one count of them
        self._engine: Any = None
        self._engine_procs: list[Any] = []
        # the engine's /dev/shm segments, removed once its processes are gone
        self._segments = EngineSegments()
        self._pool_size = 0  # engines behind a sut.engine_pool front end (0: an AsyncLLM)
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        self._first: list[tuple[int, Sequence[int]]] = []
        self._done: list[tuple[int, Sequence[int]]] = []
        self._first_reported: set[int] = set()
        self._flush_scheduled = False
        self._next_request = 0
        self._warned_single = False
        self._samples: list[tuple[float, float, float, int]] = []
        self._gauges: list[tuple[float, int, int, int]] = []
        self._engine_gauges: list[tuple[float, int, int, float, int]] = []
        self._per_engine: list[tuple[float, tuple[tuple[int, int], ...]]] = []
        self._routed: list[tuple[float, tuple[tuple[int, int], ...]]] = []
        self._progress = Progress(progress, name)
        self._loop = asyncio.new_event_loop()
        self._limit: asyncio.Semaphore | None = None
        self.limit_in_flight(max_in_flight)
        self._thread = threading.Thread(target=self._run_loop, name="server-sut-loop", daemon=True)
        self._thread.start()
        # The engine is built on the loop thread, inside the running loop, so its output
        # handler task and its asyncio sockets belong to the loop that drives them.
        builds: list[concurrent.futures.Future] = []

        def on_loop(factory: Callable[[], Any]) -> concurrent.futures.Future:
            builds.append(asyncio.run_coroutine_threadsafe(self._build(factory), self._loop))
            return builds[0]

        try:
            start_engine(engine_factory, start_timeout_s, name, self._segments, launch=on_loop)
        except BaseException:
            if builds and builds[0].done():
                self.stop()
            else:  # Ctrl-C or a timeout while the engine loads: do not wait for the load
                self._closed = True
                if builds:
                    builds[0].cancel()
            raise
        self._loop.call_soon_threadsafe(self._start_watchdog)
        self.handle = lg.ConstructSUT(self.issue_queries, self.flush_queries)

    @classmethod
    def create(
        cls,
        engine_config: Any,
        prompts: Sequence[Sequence[int]],
        sampling: Mapping[str, Any],
        *,
        progress: bool = False,
        name: str = "Server",
        max_in_flight: int | None = None,
        final_only: bool = False,
        start_timeout_s: float | None = None,
        engine_stats: bool = False,
        output_lengths: Sequence[int] | None = None,
        dp_routing: str = DEFAULT_ROUTING,
        frontend: str = DEFAULT_FRONTEND,
    ) -> ServerSUT:
        """The runner's entry: an `EngineConfig` and `make_sampling_params` keyword arguments.
        `final_only`: Offline (data parallel): final outputs only, no first-token reports.
        `engine_stats`: sample vLLM's scheduler stats into the timeline (turns its stats on).
        `output_lengths[i]`: sample index i's `max_tokens` (sut.engine.SampleParams).
        `dp_routing`: with data_parallel_size > 1, "ours" (sut.routing) or "vllm".
        `frontend`: "shared" (one AsyncLLM in this process over every engine, vLLM's own
        data-parallel layout), "per-engine" (one front-end process per engine,
        sut.engine_pool; our router picks the engine) or "auto" (sut.engine_pool's choice)."""
        from sut.engine import EngineConfig, create_async_engine, make_sampling_params

        defaults = dict(SERVER_ENGINE_DEFAULTS)
        view = None
        loggers = None
        if engine_stats:
            from sut.engine_stats import EngineView

            defaults["disable_log_stats"] = False
            view = EngineView()
            loggers = [view.logger_factory()]
        config = EngineConfig(engine_config.model, {**defaults, **dict(engine_config.kwargs)})
        params = make_sampling_params(**dict(sampling), stream=not final_only)
        factory: Callable[[], Any]
        engines = int(config.kwargs.get("data_parallel_size") or 1)
        if resolve_frontend(frontend, config.kwargs, dp_routing) == "per-engine":
            if dp_routing != "ours":
                raise FrontendError(
                    "--frontend per-engine routes with our router: --dp-routing vllm needs "
                    "--frontend shared (vLLM's balancer lives in the one shared front end)"
                )

            def factory() -> Any:
                return EnginePool.start(
                    config.model,
                    config.kwargs,
                    engines,
                    params,
                    report_first=not final_only,
                    view=view,
                )
        else:

            def factory() -> Any:
                return create_async_engine(config, stat_loggers=loggers)

        return cls(
            factory,
            prompts,
            params,
            progress=progress,
            name=name,
            max_in_flight=max_in_flight,
            final_only=final_only,
            start_timeout_s=start_timeout_s,
            engine_view=view,
            output_lengths=output_lengths,
            dp_routing=dp_routing,
        )

    def limit_in_flight(self, max_in_flight: int | None) -> None:
        """Between LoadGen tests only: at most this many samples in the engine at once."""
        self._limit = asyncio.Semaphore(max_in_flight) if max_in_flight else None

    # Loop plumbing ---------------------------------------------------------------------------
    def _run_loop(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _call(self, coro, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _build(self, engine_factory: Callable[[], Any]) -> None:
        before = {p.pid for p in descendants()}
        try:
            self._engine = engine_factory()
            self.vllm_config = getattr(self._engine, "vllm_config", None)
            self._pool_size = int(getattr(self._engine, "engines", 0) or 0)
            if self._pool_size:  # sut.engine_pool: its stall watch hears from its workers
                self._engine.on_progress = self.ledger.progress
            self.stats.dp_routing = self._routing_name()
            if self._dp_routing == "ours":
                n = self._pool_size or engines_to_route(self.vllm_config)
                if n > 1:
                    self._router = LeastWorkRouter(n, mean_length(self._prompts))
        finally:
            # The engine's processes (engine core, its workers), remembered so shutdown can
            # reap the ones vLLM leaves behind: when the engine core is killed outright, its
            # worker is orphaned and keeps running.
            self._engine_procs = new_processes(before)
            self._segments.note(self._engine_procs, force=True)

    def _routing_name(self) -> str | None:
        parallel = getattr(self.vllm_config, "parallel_config", None)
        dp = self._pool_size or int(getattr(parallel, "data_parallel_size", 1) or 1)
        return self._dp_routing if dp > 1 else None

    def _start_watchdog(self) -> None:
        self._tasks.add(self._loop.create_task(self._watch_engine()))
        self._tasks.add(self._loop.create_task(self._sample_gauges()))

    async def _sample_gauges(self) -> None:
        """Issued / completed / in the engine, twice a second while samples are issued."""
        while not self._closed:
            await asyncio.sleep(GAUGE_PERIOD_S)
            stats = self.stats
            if stats.issued:
                now = time.monotonic()
                self._gauges.append((now, stats.issued, stats.completed, self._in_engine.now))
                view = self._engine_view
                if view is not None:
                    self._engine_gauges.append((now, *view.snapshot()))
                    if stats.dp_routing is not None:
                        self._per_engine.append((now, view.per_engine()))
                if self._router is not None:
                    self._routed.append((now, self._router.gauge()))

    def reset_stats(self) -> None:
        super().reset_stats()
        self.ledger.mark_peak()
        self._in_engine.mark()
        self.stats.dp_routing = self._routing_name()
        if self._router is not None:
            self._router.reset_counts()
        if self._engine_view is not None:
            self._engine_view.mark()
        self._samples = []
        self._gauges = []
        self._engine_gauges = []
        self._per_engine = []
        self._routed = []

    def timeline(self) -> Timeline:
        """The current test's record (see the module docstring); copies, safe from any thread."""
        return Timeline(
            list(self._samples),
            list(self._gauges),
            list(self._engine_gauges),
            list(self._per_engine),
            list(self._routed),
        )

    def stats_record(self) -> dict[str, Any]:
        """The stats, with per data-parallel engine what our router sent and what vLLM's
        engines say they finished (engine stats on): the engine side's own count."""
        stats = self.stats
        live = self._engine is not None and not self._loop.is_closed() and self.error is None
        if self._pool_size and self._engine_view is not None and live:
            try:  # the workers' stats of the last moments (sut.engine_pool)
                self._call(self._engine.sync_stats(), timeout=POOL_SYNC_TIMEOUT_S)
            except Exception as exc:  # a record a little short, not a failed run
                log.warning("engine stats of the front-end processes not read: %s", exc)
        if self._router is not None:
            stats.routed = self._router.summary()
        if self._engine_view is not None and stats.dp_routing is not None:
            stats.engine_served = self._engine_view.served()
        stats.in_flight, stats.peak_in_flight = self.ledger.in_flight, self.ledger.peak_in_flight
        stats.engine_in_flight, stats.peak_engine_in_flight = (
            self._in_engine.now,
            self._in_engine.peak,
        )
        return dict(vars(stats))

    async def _watch_engine(self) -> None:
        while not self._closed:
            await asyncio.sleep(WATCHDOG_PERIOD_S)
            engine = self._engine
            if self.error is None and engine is not None and getattr(engine, "errored", False):
                self.fail(_engine_dead_error(engine))

    def warm_up(self, prompts: Sequence[Sequence[int]], timeout_s: float | None = None) -> int:
        """Generate these prompts (token ids) all at once before the LoadGen test, outside its
        timing and outside every record of the test (stats, ledger, timeline). Call it before
        LoadGen starts. Returns the number of warm-up requests that finished."""

        async def one(i: int, prompt: Sequence[int]) -> bool:
            finished = False
            request = self._prompt_type(prompt_token_ids=list(prompt))
            # every engine gets its share of the warm-up, whatever routes the test
            rank = {"data_parallel_rank": i % self._router.n} if self._router else {}
            stream = self._engine.generate(
                request, self._params_of.base, f"{WARMUP_PREFIX}{i}", **rank
            )
            async for out in stream:
                finished = bool(out.finished)
            return finished

        async def all_of_them() -> int:
            done = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
            return sum(done)

        if self.error is not None or self._engine is None:
            return 0
        return int(self._call(all_of_them(), timeout=timeout_s))

    # LoadGen callbacks -----------------------------------------------------------------------
    def profile(self, start: bool) -> None:
        call = self._engine.start_profile() if start else self._engine.stop_profile()
        self._call(call, PROFILE_CALL_TIMEOUT_S)

    def issue_queries(self, query_samples) -> None:
        # Copy (id, index) out now: LoadGen owns the QuerySample objects. Never block here.
        items = [(q.id, q.index) for q in query_samples]
        issued_at = time.monotonic()
        self._note_issued([rid for rid, _ in items])
        if self.error is not None or self._closed:
            self._fail_outstanding()
            return
        try:
            self._loop.call_soon_threadsafe(self._start, items, issued_at)
        except RuntimeError:  # loop closed: the SUT was shut down while LoadGen still runs
            self._fail_outstanding()

    def flush_queries(self) -> None:
        pass

    # Per-sample work (loop thread) ---------------------------------------------------------
    def _start(self, items: list[tuple[int, int]], issued_at: float) -> None:
        try:
            self._progress.add_total(len(items))
            for rid, index in items:
                if self.error is not None or self._closed or not self.ledger.is_open(rid):
                    continue  # answered already (fail() answers every outstanding sample)
                task = self._loop.create_task(self._serve(rid, index, issued_at))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception as exc:
            self.fail(exc)

    async def _serve(self, rid: int, index: int, issued_at: float) -> None:
        tokens: list[int] = []
        failed = True
        first_at = 0.0
        router = self._router
        rank = -1
        try:
            limit = self._limit
            if limit is not None:
                await limit.acquire()
            try:
                request_id = f"{self._next_request}"
                self._next_request += 1
                stats = self.stats
                self._in_engine.add()
                ids = self._prompts[index]
                prompt = self._prompt_type(prompt_token_ids=list(ids))
                route = {}
                if router is not None:
                    rank = router.pick(len(ids))
                    route = {"data_parallel_rank": rank}
                params = self._params_of(index)
                async for out in self._engine.generate(prompt, params, request_id, **route):
                    stats.engine_outputs += 1
                    self.ledger.progress()
                    new = out.outputs[0].token_ids if out.outputs else ()
                    if new:
                        if not tokens:
                            first_at = time.monotonic()
                            if self._report_first:
                                self._queue_first(rid, list(new))
                                if rank >= 0:
                                    router.first_token(rank, len(ids))  # type: ignore[union-attr]
                        tokens.extend(new)
                    # No break on `finished`: the generator ends by itself after its last
                    # output; leaving it suspended would make vLLM abort the request at GC.
                failed = False
            finally:
                self._in_engine.done()
                if rank >= 0:
                    had_first = bool(tokens) and self._report_first
                    router.finished(rank, len(ids), had_first=had_first)  # type: ignore[union-attr]
                if limit is not None:
                    limit.release()
        except asyncio.CancelledError:
            pass  # shutdown or engine death: complete with what was produced
        except Exception as exc:
            self._finish(rid, tokens, failed=True)
            self.fail(exc)
            return
        done_at = time.monotonic()
        self._samples.append((issued_at, first_at or done_at, done_at, len(tokens)))
        self._finish(rid, tokens, failed=failed)

    def fail(self, exc: BaseException) -> None:
        """Record `exc`, answer every outstanding sample, cancel the streams (from any thread)."""
        first = self._set_error(exc)
        self._fail_outstanding()
        if first and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._cancel_streams)

    def _cancel_streams(self) -> None:
        current = asyncio.current_task(self._loop)
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    def _queue_first(self, rid: int, tokens: Sequence[int]) -> None:
        self._first.append((rid, tokens))
        self._schedule_flush()

    def _finish(self, rid: int, tokens: Sequence[int], *, failed: bool) -> None:
        if not self.ledger.is_open(rid):
            return  # answered already, by fail()
        if failed:
            self.stats.failed_samples += 1
        if (
            self._report_first
            and rid not in self._first_reported
            and not any(r == rid for r, _ in self._first)
        ):
            # No token ever came (failure, or an empty generation): LoadGen still needs a
            # first-token record before the completion.
            self._first.append((rid, tuple(tokens[:1])))
        elif len(tokens) == 1 and not failed:
            self.stats.single_token_outputs += 1
            if not self._warned_single:
                self._warned_single = True
                log.warning(
                    "a generation ended after one token; LoadGen logs n_tokens <= 1 "
                    "as an error (reported as produced, see sut/server.py)"
                )
        self._done.append((rid, tokens))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """One LoadGen call per kind for everything that became ready in this loop iteration."""
        self._flush_scheduled = False
        first, self._first = self._first, []
        done, self._done = self._done, []
        stats = self.stats
        try:
            if first:
                self.ledger.first_tokens(first)
                stats.loadgen_first_token_calls += 1
                stats.first_tokens_reported += len(first)
                self._first_reported.update(rid for rid, _ in first)
            if done:
                for rid, _ in done if self._report_first else ():
                    if rid in self._first_reported:
                        self._first_reported.discard(rid)
                        stats.first_token_before_complete += 1
                    else:
                        stats.first_token_order_violations += 1
                n, tokens = self.ledger.complete(done)
                stats.output_tokens += tokens
                stats.loadgen_complete_calls += 1
                stats.completed += n
                stats.last_complete_s = time.monotonic()
                self._progress.update(n, stats)
        except Exception as exc:  # whatever was taken off the lists is answered by fail()
            self.fail(exc)

    # Lifecycle -------------------------------------------------------------------------------
    async def _close(self) -> None:
        self._closed = True
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._flush()
        engine, self._engine = self._engine, None
        if engine is not None:
            shutdown_engine(engine, getattr(engine, "vllm_config", None))
        await asyncio.sleep(0)  # let the engine's cancelled output handler unwind

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop everything this SUT started. Safe to call twice and after a failed start."""
        t0 = time.monotonic()
        if self.error is not None:  # a failed engine gets little time before it is killed
            timeout_s = min(timeout_s, FAILED_ENGINE_GRACE_S)
        self._segments.note(self._engine_procs, force=True)
        try:
            if self._thread.is_alive() and not self._loop.is_closed():
                if self._engine is not None or self._tasks:
                    try:
                        self._call(self._close(), timeout=timeout_s)
                    except concurrent.futures.TimeoutError:
                        log.error("engine shutdown did not finish within %.0f s", timeout_s)
                    except RuntimeError as exc:
                        log.error("engine shutdown did not finish cleanly: %s", describe_error(exc))
                self._closed = True
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=timeout_s)
        finally:  # an interrupt while waiting still leaves nothing of the engine
            self._closed = True
            self._stopped = True
            routine = self.error is None  # not after a failure, which the warning helps read
            self._fail_outstanding()
            reap(self._engine_procs, routine=routine)
            self._segments.remove()
        log.info("server SUT stopped in %.1f s", time.monotonic() - t0)
        self._destroy_handle()
        self._progress.close()


def _engine_dead_error(engine: Any) -> BaseException:
    try:
        err = engine.dead_error
    except Exception:  # pragma: no cover - depends on the vLLM release
        err = None
    if isinstance(err, BaseException):
        return err
    return RuntimeError("the vLLM engine stopped (its process exited)")
