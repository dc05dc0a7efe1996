"""One engine's front end in a process of its own: the worker side of sut.engine_pool.

A worker owns one vLLM `AsyncLLM` over one engine (its GPUs named by the pool through
CUDA_VISIBLE_DEVICES before vLLM is imported), so vLLM's input and output processing of that
engine, every streamed token included, runs here and not in the SUT's process. The SUT's
process sends requests and hears back two events per request: its first token ids and, at
the end, the rest of them. Everything that crosses the pipe is batched per event-loop turn:
one message for all the requests or events that became ready together.

Messages (tuples, pickled by multiprocessing.Connection):
- to the worker: ("add", [(request_id, prompt_ids, max_tokens), ...]), ("abort", [ids]),
  ("profile", call_id, start), ("sync", call_id), ("stop",)
- from the worker: ("ready", info), ("start_failed", text), ("out", [(id, kind, ids), ...])
  with kind FIRST, DONE or FAILED (then (error type name, text)), ("tick", outputs, stats),
  ("dead", text), ("called", call_id, error or None) (a profile or sync call's answer)

The worker ignores SIGINT: a Ctrl-C reaches the whole process group, and the SUT's process
decides what happens (it stops the worker, or kills it). When the SUT's process goes away
without a word, the pipe's end tells the worker to stop its engine and leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from sut.engine import describe_error as describe
from sut.imports import hide_unused_packages

# A spawned worker imports this module (its entry's) before it unpickles its spec, whose
# sampling parameters import vLLM: the packages nothing here uses are hidden from it first.
hide_unused_packages()

FIRST = 0
DONE = 1
FAILED = 2
TICK_S = 0.5  # how often stats and a sign of progress go to the SUT's process


class Worker:
    def __init__(self, conn: Any, spec: dict[str, Any]) -> None:
        self.conn = conn
        self.spec = spec
        self.engine: Any = None
        self.view: Any = None
        self.loop = asyncio.get_running_loop()
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.events: list[tuple[str, int, Any]] = []
        self.flush_scheduled = False
        self.outputs = 0  # outputs since the last tick: the SUT's stall watch
        self.stopping = asyncio.Event()
        self.params_by_length: dict[int, Any] = {}

    # -- start ---------------------------------------------------------------------------------
    def build(self) -> None:
        from sut.engine import EngineConfig, create_async_engine

        loggers = None
        if self.spec.get("engine_stats"):
            from sut.engine_stats import EngineView

            self.view = EngineView()
            loggers = [self.view.logger_factory()]
        config = EngineConfig(self.spec["model"], dict(self.spec["kwargs"]))
        self.engine = create_async_engine(config, gpu=self.spec.get("gpu"), stat_loggers=loggers)
        self.base_params = self.spec["params"]

    def info(self) -> dict[str, Any]:
        config = getattr(self.engine, "vllm_config", None)
        info: dict[str, Any] = {"pid": os.getpid()}
        try:
            import pickle

            pickle.dumps(config)
            info["vllm_config"] = config
        except Exception:  # a config that does not pickle: the pool builds its own view
            info["vllm_config"] = None
        return info

    # -- pipe ----------------------------------------------------------------------------------
    def on_readable(self) -> None:
        try:
            while self.conn.poll():
                self.handle(self.conn.recv())
        except (EOFError, OSError):  # the SUT's process is gone: stop and leave
            self.stopping.set()

    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "add":
            for request_id, prompt, max_tokens in msg[1]:
                task = self.loop.create_task(self.serve(request_id, prompt, max_tokens))
                self.tasks[request_id] = task
        elif kind == "abort":
            for request_id in msg[1]:
                running = self.tasks.get(request_id)
                if running is not None:
                    running.cancel()
        elif kind == "profile":
            self.loop.create_task(self.profile(msg[1], msg[2]))
        elif kind == "sync":  # the SUT reads the test's stats: what this engine has, now
            self.send_tick()
            self.send(("called", msg[1], None))
        elif kind == "stop":
            self.stopping.set()

    def send(self, msg: tuple) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):
            self.stopping.set()

    def emit(self, request_id: str, kind: int, payload: Any) -> None:
        self.events.append((request_id, kind, payload))
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        events, self.events = self.events, []
        if events:
            self.send(("out", events))

    # -- requests ------------------------------------------------------------------------------
    def params(self, max_tokens: int | None) -> Any:
        base = self.base_params
        if max_tokens is None or max_tokens == base.max_tokens:
            return base
        params = self.params_by_length.get(max_tokens)
        if params is None:
            params = base.clone()
            params.max_tokens = max_tokens
            self.params_by_length[max_tokens] = params
        return params

    async def serve(self, request_id: str, prompt: list[int], max_tokens: int | None) -> None:
        tokens: list[int] = []
        first_sent = False
        try:
            request = {"prompt_token_ids": prompt}
            params = self.params(max_tokens)
            async for out in self.engine.generate(request, params, request_id):
                self.outputs += 1
                new = out.outputs[0].token_ids if out.outputs else ()
                if new:
                    if not first_sent and self.spec.get("report_first", True):
                        first_sent = True
                        self.emit(request_id, FIRST, list(new))
                    else:
                        tokens.extend(new)
            self.emit(request_id, DONE, tokens)
        except asyncio.CancelledError:
            pass  # aborted by the SUT (it answers the sample itself); vLLM aborts the request
        except Exception as exc:  # the SUT's process raises it again, by its type's name
            self.emit(request_id, FAILED, (type(exc).__name__, describe(exc)))
        finally:
            self.tasks.pop(request_id, None)

    async def profile(self, call_id: int, start: bool) -> None:
        try:
            await (self.engine.start_profile() if start else self.engine.stop_profile())
            self.send(("called", call_id, None))
        except Exception as exc:
            self.send(("called", call_id, describe(exc)))

    # -- watch ---------------------------------------------------------------------------------
    async def tick(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(TICK_S)
            engine = self.engine
            if getattr(engine, "errored", False):
                self.send(("dead", describe(_dead_error(engine))))
                self.stopping.set()
                return
            self.send_tick()

    def send_tick(self) -> None:
        stats = self.view.take() if self.view is not None else None
        outputs, self.outputs = self.outputs, 0
        self.send(("tick", outputs, stats))

    async def run(self) -> None:
        self.loop.add_reader(self.conn.fileno(), self.on_readable)
        ticker = self.loop.create_task(self.tick())
        await self.stopping.wait()
        ticker.cancel()
        self.loop.remove_reader(self.conn.fileno())
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.flush()


def _dead_error(engine: Any) -> BaseException:
    err = getattr(engine, "dead_error", None)
    if isinstance(err, BaseException):
        return err
    return RuntimeError("the vLLM engine stopped (its process exited)")


async def _main(conn: Any, spec: dict[str, Any]) -> int:
    worker = Worker(conn, spec)
    try:
        worker.build()
    except BaseException as exc:
        worker.send(("start_failed", describe(exc)))
        return 1
    worker.send(("ready", worker.info()))
    try:
        await worker.run()
    finally:
        engine, worker.engine = worker.engine, None
        if engine is not None:
            from sut.engine import shutdown_engine

            shutdown_engine(engine, getattr(engine, "vllm_config", None))
    return 0


def worker_main(conn: Any, spec: dict[str, Any]) -> None:
    """The worker process's entry (multiprocessing, spawn): `spec` names its devices, engine
    config, sampling parameters and options (see sut.engine_pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devices = spec.get("devices")
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices
    for key, value in spec.get(
        "env", {}
    ).items():  # only what differs: sut.engine.restore_environment
        if os.environ.get(key) != value:
            os.environ[key] = value
    rc = 1
    try:
        rc = asyncio.run(_main(conn, spec))
    finally:
        with_conn_closed(conn)
        sys.stdout.flush()
        sys.stderr.flush()
    # Leave without the interpreter's teardown (seconds with vLLM loaded); the engine is down.
    os._exit(rc)


def with_conn_closed(conn: Any) -> None:
    with contextlib.suppress(OSError):
        conn.close()
