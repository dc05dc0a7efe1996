"""An engine's life inside an SUT, and the base both SUTs build on (EngineSUT).

The engine starts on a helper thread (`start_engine`), so a start that never ends fails after
its limit and Ctrl-C is taken at once; during a test the runner's watchdog (`EngineSUT.check`)
fails the SUT when its engine died or stalled; `stop` answers what is outstanding, shuts the
engine down and reaps its processes (sut.reaper). The samples themselves are answered through
the ledger (sut.ledger); the stats are sut.stats's, the progress bar sut.progress's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sut.ledger import Ledger
from sut.progress import Progress
from sut.reaper import EngineSegments, descendants, new_processes, reap
from sut.stats import SUTStats

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT_S = 60.0
SEGMENT_LOOK_S = 0.5  # how often a starting engine's new shared-memory segments are noted
# After an interrupt the engine gets as long as vLLM's own process manager gives it (SIGTERM,
# then SIGKILL after 5 s): the user asked to stop, not to drain.
INTERRUPT_STOP_TIMEOUT_S = 5.0


class StallError(RuntimeError):
    """Samples were in flight and the engine produced nothing for longer than the limit."""


class EngineStartTimeout(RuntimeError):
    """The engine did not finish starting within the limit."""


def engine_dead_error(detail: str) -> BaseException:
    """vLLM's own EngineDeadError (what a request on a dead engine raises), with `detail`."""
    try:
        from vllm.v1.engine.exceptions import EngineDeadError
    except ImportError:  # pragma: no cover - depends on the vLLM release
        return RuntimeError(f"the vLLM engine died: {detail}")
    err = EngineDeadError()
    err.args = (f"the vLLM engine died: {detail}",)
    return err


ENGINE_START_THREAD = "engine-start"


def engine_start_abandoned() -> bool:
    """True while an engine start given up on (timeout, Ctrl-C) still runs in this process:
    the process should exit at once rather than wait for it at interpreter shutdown."""
    return any(t.name == ENGINE_START_THREAD and t.is_alive() for t in threading.enumerate())


def start_engine(
    factory: Callable[[], Any],
    timeout_s: float | None,
    what: str,
    segments: EngineSegments | None = None,
    *,
    launch: Callable[[Callable[[], Any]], concurrent.futures.Future] | None = None,
) -> tuple[Any, list]:
    """Build an engine away from the calling thread, so a start that never ends (a node that
    never joins, a hung collective) fails after `timeout_s` and Ctrl-C is taken at once: the
    one place an engine start is waited for, by both SUTs. `launch(factory)` runs the build
    and returns its future (default: a thread of its own, ENGINE_START_THREAD; the Server SUT
    builds on its event loop's thread). Returns (engine, the processes it started). The
    shared-memory segments those processes map are noted into `segments` as they appear. On
    failure the processes are reaped and the noted segments removed (an engine that refuses
    its configuration exits without unlinking the queues it made)."""
    before = {p.pid for p in descendants()}
    segments = segments if segments is not None else EngineSegments()
    t0 = time.monotonic()
    build = (launch or _on_own_thread)(factory)
    try:
        while True:
            left = None if timeout_s is None else timeout_s - (time.monotonic() - t0)
            if left is not None and left <= 0:
                raise EngineStartTimeout(
                    f"the {what} engine did not start within {timeout_s:g} s: raise "
                    "--engine-start-timeout if a cold start legitimately takes longer"
                )
            try:
                engine = build.result(SEGMENT_LOOK_S if left is None else min(SEGMENT_LOOK_S, left))
                break
            except concurrent.futures.TimeoutError:
                if build.done():  # the build's own TimeoutError, not the wait's
                    raise
                segments.note(new_processes(before))
    except BaseException as exc:
        procs = new_processes(before)
        if not build.done():  # given up on (timeout, Ctrl-C) while the engine loads
            reap(procs, kill_at_once=isinstance(exc, KeyboardInterrupt))
        else:  # the build failed
            segments.note(procs, force=True)
            reap(procs)
        segments.remove()
        raise
    procs = new_processes(before)
    segments.note(procs, force=True)
    return engine, procs


def _on_own_thread(factory: Callable[[], Any]) -> concurrent.futures.Future:
    """`factory()` on a daemon thread named ENGINE_START_THREAD; its future."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(factory())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name=ENGINE_START_THREAD, daemon=True).start()
    return future


@contextlib.contextmanager
def direct_llm(
    config: Any,
    *,
    gpu: bool | None = None,
    timeout_s: float | None = None,
    build: Callable[..., Any] | None = None,
) -> Iterator[Any]:
    """A `vllm.LLM` outside any SUT (a direct generation to compare against, a bench's raw
    engine), started and ended as the SUTs' engines are: on a helper thread with `timeout_s`,
    and on the way out shut down, its processes reaped and the shared-memory segments they
    mapped removed. `shutdown_llm` alone leaves vLLM's queue segment in /dev/shm whenever its
    finalizer does not run before the engine core is gone. `build(config, gpu=...)`: another
    builder of an engine with an `llm_engine` (default `create_llm`; the Offline SUT's is
    `create_offline_engine`)."""
    from sut.engine import create_llm, shutdown_llm

    build = build or create_llm
    segments = EngineSegments()
    llm, procs = start_engine(lambda: build(config, gpu=gpu), timeout_s, "direct", segments)
    try:
        yield llm
    finally:
        segments.note(procs, force=True)
        try:
            shutdown_llm(llm)
        finally:
            reap(procs, routine=True)
            segments.remove()


def stall_message(
    stalled_s: float, in_flight: int, oldest_s: float, what: str, limit_s: float
) -> str:
    return (
        f"stall: the {what} engine produced nothing for {stalled_s:.0f} s with {in_flight} "
        f"sample(s) in flight (oldest issued {oldest_s:.0f} s ago); raise --stall-timeout "
        f"(now {limit_s:g} s) if that is expected"
    )


class EngineSUT:
    """The interface the runner drives, the same for both SUTs.

    - `handle`: the LoadGen SUT; `stats`: what the current test saw (`reset_stats()` between
      tests); `vllm_config`: the engine's resolved configuration.
    - `begin_progress(label, planned)` / `end_progress()`: around each test, its progress bar
      (its name and total).
    - `error`: the first failure; once set, every outstanding and later sample is answered
      empty at once.
    - `fail(exc)`, `check_stall(limit_s)`: the runner's watchdog ends a stalled test.
    - `stop(timeout_s)`: answer what is outstanding, stop threads, shut the engine down and
      reap its processes; safe to call twice.
    """

    stats: SUTStats
    _progress: Progress

    def __init__(self, name: str, ledger: Ledger):
        self.name = name
        self.ledger = ledger
        self.error: BaseException | None = None
        self.vllm_config: Any = None
        self.handle: Any = None
        self._stopped = False

    def reset_stats(self) -> None:
        self.stats = type(self.stats)()

    def begin_progress(self, label: str, planned: int | None = None) -> None:
        """The next test's progress bar (see Progress): named `label`, counting from 0 against
        `planned` samples when the caller knows how many the test will issue."""
        self._progress.begin(label, planned)

    def end_progress(self) -> None:
        """The test ended: its bar is done (before the caller prints its verdicts)."""
        self._progress.end()

    def stats_record(self) -> dict[str, Any]:
        """What the current test saw, as result.json records it (after the test)."""
        return dict(vars(self.stats))

    def _note_issued(self, response_ids: Sequence[int]) -> None:
        stats = self.stats
        if not stats.issued:
            stats.first_issue_s = time.monotonic()
        stats.issued += len(response_ids)
        self.ledger.issue(response_ids)

    def _set_error(self, exc: BaseException) -> bool:
        """Keep the first failure; True if this one is it."""
        if self.error is not None:
            return False
        self.error = exc
        from sut.engine import describe_error

        log.error("%s SUT failed: %s", self.name, describe_error(exc))
        return True

    def _fail_outstanding(self) -> int:
        n = self.ledger.fail_all()
        self.stats.failed_samples += n
        self.stats.completed += n
        return n

    def fail(self, exc: BaseException) -> None:
        """Record `exc` (the first failure wins) and answer every outstanding sample."""
        self._set_error(exc)
        self._fail_outstanding()

    def engine_failure(self) -> BaseException | None:
        """The engine's death, if the SUT can see it without a call into the engine."""
        return None

    def check(self, stall_limit_s: float | None) -> None:
        """The runner's watchdog, called about 5x a second during a test: fail the SUT when
        its engine died or stalled (which answers every outstanding sample)."""
        if self.error is not None:
            return
        dead = self.engine_failure()
        if dead is not None:
            self.fail(dead)
            return
        self.check_stall(stall_limit_s)

    def check_stall(self, limit_s: float | None) -> str | None:
        """Fail the test when samples are in flight and nothing moved for `limit_s`."""
        if not limit_s or self.error is not None:
            return None
        stalled = self.ledger.stalled_for()
        if stalled <= limit_s:
            return None
        message = stall_message(
            stalled, self.ledger.in_flight, self.ledger.oldest_s(), self.name, limit_s
        )
        self.fail(StallError(message))
        return message

    def profile(self, start: bool) -> None:  # pragma: no cover
        """Start or stop vLLM's profiler; the engine must have been built with a
        `profiler_config` (its window: that config's delay and max iterations). Called between
        tests, when no request is in flight; a stop returns once every rank wrote its trace."""
        raise NotImplementedError

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:  # pragma: no cover
        raise NotImplementedError

    def _destroy_handle(self) -> None:
        if self.handle is not None:
            import mlperf_loadgen as lg

            lg.DestroySUT(self.handle)
            self.handle = None
