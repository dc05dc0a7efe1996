"""Data-parallel engines with one front-end process each: the SUT's side of the pool.

Why: with `data_parallel_size N`, vLLM's own layout is one `AsyncLLM` in the SUT's process over
N engine cores. That one process then carries LoadGen's callbacks, our event loop and vLLM's
input and output processing for every engine: every streamed token of every request is
decoded, bookkept and handed out there. On a 4x H200 host (8B, DP 4, Server at 0.96: ~208
requests/s, ~26,600 tokens/s) hundreds of requests sat between the SUT and the engine cores
while vLLM's schedulers had room, and TTFT p99 grew to seconds. LoadGen needs two events per
request, the first token and the completion; the per-token work need not be in its process.

So here each engine gets a worker process (sut.engine_worker) that runs its own `AsyncLLM` over
that engine alone, on its own GPUs, and sends back two messages' worth per request; the SUT's
process keeps LoadGen, the ledger, the router (which now picks a worker) and the timeline.
`EnginePool` stands where the `AsyncLLM` stood: `generate()` yields the first token ids, then
the rest with `finished` set, so the streaming SUT (sut.server) drives it unchanged, and every
promise it keeps (each sample answered once, first token before completion, the engine-death
and stall watches, Ctrl-C, engine stats, the timeline) holds the same way.

Requests and events cross the pipes batched per event-loop turn (one message for all that
became ready together). A worker that dies, or whose engine dies, fails every request it held
and marks the pool `errored`, which the SUT's watchdog reads as it reads AsyncLLM's.

Devices: worker k sees GPUs k*P .. k*P+P-1 of the visible ones (P = tensor x pipeline parallel
size), through CUDA_VISIBLE_DEVICES set before it imports vLLM. Each engine is vLLM's plain
one-replica engine: no data-parallel coordination between them (a dense model needs none).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sut.engine_worker import DONE, FAILED, FIRST, worker_main
from sut.frontend import DATA_PARALLEL_KEYS, FrontendError
from sut.lifecycle import engine_dead_error

log = logging.getLogger(__name__)

# How long the pool waits for its workers to stop their engines and exit before it kills them.
WORKER_EXIT_GRACE_S = 4.0


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (or all of them)."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [d.strip() for d in named.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def device_slices(engines: int, per_engine: int, gpus: list[str] | None) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES of each engine's worker (None: no GPUs, leave it as it is)."""
    if not gpus:
        return [None] * engines
    need = engines * per_engine
    if len(gpus) < need:
        raise FrontendError(
            f"--frontend per-engine runs {engines} engine(s) of {per_engine} GPU(s) each and "
            f"needs {need} GPUs, but {len(gpus)} are visible ({','.join(gpus)}): lower "
            "--data-parallel-size or make more GPUs visible (CUDA_VISIBLE_DEVICES)"
        )
    return [",".join(gpus[k * per_engine : (k + 1) * per_engine]) for k in range(engines)]


def replica_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """One engine's arguments: the run's, without vLLM's data-parallel layout."""
    return {k: v for k, v in kwargs.items() if k not in DATA_PARALLEL_KEYS}


class _Completion:
    __slots__ = ("token_ids",)

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids


class PoolOutput:
    """What `EnginePool.generate` yields: the shape of vLLM's RequestOutput that the SUT reads
    (`outputs[0].token_ids`, `finished`)."""

    __slots__ = ("outputs", "finished")

    def __init__(self, token_ids: list[int], finished: bool) -> None:
        self.outputs = (_Completion(token_ids),)
        self.finished = finished


class _Stream:
    __slots__ = ("items", "waiter", "rank")

    def __init__(self, rank: int) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.waiter: asyncio.Future | None = None
        self.rank = rank

    def push(self, item: Any) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class EnginePool:
    """N engines, each behind a front-end worker process; looks like an `AsyncLLM` to the
    streaming SUT: `generate`, `errored`, `dead_error`, `start_profile`, `stop_profile`,
    `shutdown`, `vllm_config`; plus `engines` (how many) and `on_progress` (called when a
    worker's engine produced output since its last tick: the SUT's stall watch).

    Build it on the event loop that will drive it (`EnginePool.start(...)` blocks that loop
    until every engine is up, which is how the SUT builds an AsyncLLM too)."""

    def __init__(self, engines: int) -> None:
        self.engines = engines
        self.vllm_config: Any = None
        self.on_progress: Any = None
        self.view: Any = None  # sut.engine_stats.EngineView fed by the workers' ticks
        self.dead_error: BaseException | None = None
        self.pids: list[int] = []
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._outbox: list[list[Any]] = [[] for _ in range(engines)]
        self._aborts: list[list[str]] = [[] for _ in range(engines)]
        self._flush_scheduled = False
        self._streams: dict[str, _Stream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_rank = 0
        self._calls: dict[int, tuple[asyncio.Future, set[int]]] = {}
        self._next_call = 0
        self._closing = False

    @property
    def errored(self) -> bool:
        return self.dead_error is not None

    # -- start ---------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        model: str,
        kwargs: Mapping[str, Any],
        engines: int,
        params: Any,
        *,
        report_first: bool = True,
        view: Any = None,
        gpu: bool | None = None,
    ) -> EnginePool:
        """Start `engines` workers, each an AsyncLLM over one replica of `model` with
        `kwargs`; return once all are up. A worker that fails to start fails the whole start
        (the others are stopped) with its error."""
        from sut.engine import _prepare_environment, has_nvidia_gpu

        gpu = has_nvidia_gpu() if gpu is None else gpu
        _prepare_environment(gpu)  # the IPC folder the workers' engines inherit
        one = replica_kwargs(kwargs)
        per_engine = int(one.get("tensor_parallel_size") or 1) * int(
            one.get("pipeline_parallel_size") or 1
        )
        # vLLM's own executors take GPUs; a class of one's own (a stand-in engine) decides itself
        own_executor = one.get("distributed_executor_backend") not in (None, "mp", "uni", "ray")
        devices = device_slices(
            engines, per_engine, visible_gpus() if gpu and not own_executor else None
        )
        pool = cls(engines)
        pool.view = view
        ctx = multiprocessing.get_context("spawn")
        try:
            for rank in range(engines):
                mine, theirs = ctx.Pipe(duplex=True)
                spec = {
                    "model": model,
                    "kwargs": _own_profile_dir(one, rank),
                    "params": params,
                    "report_first": report_first,
                    "engine_stats": view is not None,
                    "devices": devices[rank],
                    "gpu": gpu,
                }
                proc = ctx.Process(
                    target=worker_main,
                    args=(theirs, spec),
                    name=f"mlperf-vllm-engine-{rank}",
                    daemon=False,
                )
                proc.start()
                theirs.close()
                pool._procs.append(proc)
                pool._conns.append(mine)
                pool.pids.append(int(proc.pid or 0))
            pool._await_ready()
        except BaseException:
            pool._closing = True
            pool._stop_workers(grace_s=1.0)
            raise
        pool._loop = asyncio.get_running_loop()
        for rank, conn in enumerate(pool._conns):
            pool._loop.add_reader(conn.fileno(), pool._on_readable, rank)
        return pool

    def _await_ready(self) -> None:
        pending = set(range(self.engines))
        while pending:
            for rank in sorted(pending):
                conn = self._conns[rank]
                if not conn.poll(0.2):
                    if not self._procs[rank].is_alive():
                        raise RuntimeError(
                            f"engine {rank}'s front-end process exited during the start "
                            f"(exit code {self._procs[rank].exitcode})"
                        )
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    raise RuntimeError(
                        f"engine {rank}'s front-end process exited during the start"
                    ) from None
                if msg[0] == "start_failed":
                    raise RuntimeError(f"engine {rank} failed to start: {msg[1]}")
                if msg[0] == "ready":
                    pending.discard(rank)
                    if self.vllm_config is None:
                        self.vllm_config = msg[1].get("vllm_config")
                        _record_engines(self.vllm_config, self.engines)

    # -- requests ------------------------------------------------------------------------------
    async def generate(
        self,
        prompt: Mapping[str, Any],
        params: Any,
        request_id: str,
        data_parallel_rank: int | None = None,
    ) -> AsyncIterator[PoolOutput]:
        if self.dead_error is not None:
            raise self.dead_error
        rank = data_parallel_rank
        if rank is None:  # no router (vLLM's routing is not available here): in turn
            rank = self._next_rank
            self._next_rank = (rank + 1) % self.engines
        stream = _Stream(rank)
        self._streams[request_id] = stream
        # the caller's own list (the SUT builds one per request): pickled as it is, not copied
        prompt_ids = prompt["prompt_token_ids"]
        self._post(rank, (request_id, prompt_ids, getattr(params, "max_tokens", None)))
        finished = False
        loop = self._loop or asyncio.get_running_loop()
        try:
            while True:
                if not stream.items:
                    stream.waiter = loop.create_future()
                    await stream.waiter
                    stream.waiter = None
                item = stream.items.popleft()
                if isinstance(item, BaseException):
                    finished = True  # the worker dropped it already
                    raise item
                if item.finished:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not finished and not self._closing and self.dead_error is None:
                self._aborts[rank].append(request_id)
                self._schedule_flush()

    def _post(self, rank: int, item: Any) -> None:
        self._outbox[rank].append(item)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """One message per worker for what this loop turn gave it."""
        self._flush_scheduled = False
        for rank in range(self.engines):
            adds, aborts = self._outbox[rank], self._aborts[rank]
            if not adds and not aborts:
                continue
            self._outbox[rank], self._aborts[rank] = [], []
            try:
                if adds:
                    self._conns[rank].send(("add", adds))
                if aborts:
                    self._conns[rank].send(("abort", aborts))
            except (BrokenPipeError, EOFError, OSError):
                self._lost(rank)

    # -- events --------------------------------------------------------------------------------
    def _on_readable(self, rank: int) -> None:
        conn = self._conns[rank]
        try:
            while conn.poll():
                self._handle(rank, conn.recv())
        except (EOFError, OSError):
            self._lost(rank)

    def _handle(self, rank: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == "out":
            streams = self._streams
            for request_id, what, payload in msg[1]:
                stream = streams.get(request_id)
                if stream is None:
                    continue  # aborted meanwhile
                if what == FIRST:
                    stream.push(PoolOutput(payload, False))
                elif what == DONE:
                    stream.push(PoolOutput(payload, True))
                elif what == FAILED:
                    stream.push(_request_error(rank, *payload))
        elif kind == "tick":
            if msg[1] and self.on_progress is not None:
                self.on_progress()
            if msg[2] is not None and self.view is not None:
                self.view.merge(rank, msg[2])
        elif kind == "dead":
            self._fail_engine(rank, engine_dead_error(f"engine {rank}: {msg[1]}"))
        elif kind == "called":
            call = self._calls.get(msg[1])
            if call is not None:
                future, waiting = call
                waiting.discard(rank)
                if msg[2] is not None and not future.done():
                    future.set_exception(RuntimeError(f"engine {rank}: {msg[2]}"))
                elif not waiting and not future.done():
                    future.set_result(None)

    def _lost(self, rank: int) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self._conns[rank].fileno())
        if self._closing:
            return
        proc = self._procs[rank]
        proc.join(0.5)
        code = proc.exitcode
        how = f"exit code {code}" if code is not None else "still running, pipe closed"
        self._fail_engine(
            rank,
            engine_dead_error(f"engine {rank}'s front-end process (pid {proc.pid}) ended ({how})"),
        )

    def _fail_engine(self, rank: int, err: BaseException) -> None:
        if self.dead_error is None:
            self.dead_error = err
        for stream in list(self._streams.values()):
            if stream.rank == rank:
                stream.push(err)
        for future, _ in self._calls.values():
            if not future.done():
                future.set_exception(err)

    # -- profiler ------------------------------------------------------------------------------
    async def _call_all(self, kind: str, *args: Any) -> None:
        """Send (kind, call_id, *args) to every worker; return once each has answered."""
        if self.dead_error is not None:
            raise self.dead_error
        loop = self._loop or asyncio.get_running_loop()
        call_id = self._next_call
        self._next_call += 1
        future: asyncio.Future = loop.create_future()
        self._calls[call_id] = (future, set(range(self.engines)))
        try:
            for conn in self._conns:
                conn.send((kind, call_id, *args))
            await future
        finally:
            self._calls.pop(call_id, None)

    async def start_profile(self) -> None:
        await self._call_all("profile", True)

    async def stop_profile(self) -> None:
        await self._call_all("profile", False)

    async def sync_stats(self) -> None:
        """Every worker's latest engine stats, here: a test's record is read once its last
        answer is in, which can be sooner than the workers' next tick."""
        await self._call_all("sync")

    # -- stop ----------------------------------------------------------------------------------
    def shutdown(self, timeout: float | None = None) -> None:
        """Ask every worker to stop its engine and exit; kill those that have not within
        WORKER_EXIT_GRACE_S (a worker's engine itself gets vLLM's short exit grace)."""
        self._closing = True
        loop = self._loop
        for conn in self._conns:
            if loop is not None:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(conn.fileno())
        self._stop_workers(grace_s=WORKER_EXIT_GRACE_S)

    def _stop_workers(self, grace_s: float) -> None:
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, EOFError, OSError):
                conn.send(("stop",))
        deadline = time.monotonic() + grace_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        left = [p for p in self._procs if p.is_alive()]
        if left:
            import psutil

            from sut.reaper import terminate_then_kill

            alive = []
            for p in left:
                with contextlib.suppress(psutil.Error):
                    alive.append(psutil.Process(p.pid))
            log.warning(
                "%d engine front-end process(es) did not exit within %.0f s: stopped",
                len(alive),
                grace_s,
            )
            terminate_then_kill(alive, grace_s=1.0)
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


def _record_engines(vllm_config: Any, engines: int) -> None:
    """The first worker's resolved config stands for the run: it says how many engines run."""
    parallel = getattr(vllm_config, "parallel_config", None)
    if parallel is not None:
        try:
            parallel.data_parallel_size = engines
        except Exception:  # a config that refuses it: the record keeps one replica's view
            log.debug("could not record %d engines on the resolved config", engines)


def _request_error(rank: int, type_name: str, text: str) -> BaseException:
    """A request's failure in a worker, as the SUT's process raises it: a dead engine as vLLM's
    own EngineDeadError (what the run reports and the watches expect), anything else as is."""
    if "EngineDead" in type_name:
        return engine_dead_error(f"engine {rank}: {text}")
    return RuntimeError(f"engine {rank}: {text}")


def _own_profile_dir(kwargs: dict[str, Any], rank: int) -> dict[str, Any]:
    """Each engine's profiler writes into a folder of its own (PROFILE/engineK): the engines are
    each vLLM's rank 0, and their kernel tables would overwrite one another."""
    profiler = kwargs.get("profiler_config")
    if not isinstance(profiler, Mapping) or not profiler.get("torch_profiler_dir"):
        return kwargs
    own = dict(profiler)
    own["torch_profiler_dir"] = os.path.join(str(profiler["torch_profiler_dir"]), f"engine{rank}")
    return {**kwargs, "profiler_config": own}
