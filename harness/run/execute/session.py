"""One engine, started once, for a list of LoadGen tests: the part every caller that measures
shares (a run's performance / accuracy / TEST06 tests in harness.run.execute.runner, a calibration's
trials and its Offline ceiling in harness.calibrate.trials, the capacity benches).

`EngineSession` owns what must be done the same way each time, so that callers cannot drift:
- the start: vLLM's own output held back until the start is decided, then routed to the
  folder's `engine.log` (the terminal keeps our lines; `verbose` shows vLLM's as well); a line
  every 30 s while it starts; a failed start becomes one line with vLLM's root cause, its output
  kept in `engine_start.log`;
- each test: LoadGen on its worker thread, watched from this thread for Ctrl-C, a stalled
  engine and a lost worker (vLLM's own line, `FatalWatch`), and failed on an engine error;
- the stop, whatever happened: a test LoadGen still runs is abandoned (its ledger too: nobody
  waits for those samples), the engine is stopped (quickly after Ctrl-C or a dead engine, whose
  core may sit minutes in a step), the QSL freed and vLLM's output pipes closed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import files
from harness.run.execute.loadgen_call import (
    EngineFailure,
    OutputFull,
    failure_of,
    loadgen_still_running,
    run_loadgen_test,
)
from harness.run.record.engine_log import (
    ENGINE_LOG,
    ENGINE_START_LOG,
    EngineStartLog,
    first_error,
    root_cause,
    route_vllm_logger,
)
from harness.run.setup.prepare import PreparedRun, uses_offline_sut
from harness.run.setup.ray_cluster import mark_ray_workers
from sut.engine import vllm_reason
from sut.lifecycle import DEFAULT_STOP_TIMEOUT_S, INTERRUPT_STOP_TIMEOUT_S, EngineStartTimeout

STILL_GOING_S = 30.0  # a line this often while the engine starts


@contextlib.contextmanager
def still_going(
    what: str, say: Callable[[str], None], every_s: float = STILL_GOING_S
) -> Iterator[None]:
    """While the block runs, a line every `every_s` seconds saying so, with the time it has
    taken: a start that takes minutes is not a hang. `say` writes a line to the terminal."""
    done = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            say(f"{what} ({time.monotonic() - t0:.0f} s)")

    ticker = threading.Thread(target=tick, name="still-going", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()


def build_sut(prep: PreparedRun) -> Any:
    """The SUT for the scenario of `prep`, its engine started. Offline: `vllm.LLM` and its request loop;
    everything else: the streaming SUT over `AsyncLLM`. The SUT owns its engine: `stop()`."""
    req = prep.request
    scenario = req.scenario
    if prep.cluster is not None:
        mark_ray_workers()  # the workers Ray starts for this run carry its owner token
    # what both SUTs take: the engine, the prompts, sampling and the run's own options
    common: dict[str, Any] = {
        "progress": req.progress,
        "name": scenario,
        "start_timeout_s": req.engine_start_timeout_s,
        "output_lengths": prep.output_lengths,
    }
    args = (prep.engine_config, prep.dataset.prompts, prep.sampling)
    if uses_offline_sut(scenario, prep.engine_config.kwargs, req.frontend_in_use):
        from sut.offline import OfflineSUT

        return OfflineSUT.create(*args, order=req.offline_order, **common)
    # Server-like scenarios, and Offline with data parallelism: `vllm.LLM` refuses
    # data_parallel_size > 1 in one process, while AsyncLLM runs one engine core per replica
    # behind one front end and balances requests across them (one LoadGen SUT, no router).
    from sut.server import ServerSUT

    return ServerSUT.create(
        *args,
        final_only=scenario == "Offline",  # no per-token outputs, no first-token reports
        engine_stats=req.engine_stats,
        dp_routing=req.dp_routing,
        frontend=req.frontend_in_use,
        **common,
    )


class EngineSession:
    """The engine of `prep` (harness.run.setup.prepare.PreparedRun) with its
    QSL: `start()`, `test()` as often as needed, `close()`.

    `folder` takes vLLM's output (`engine.log`, or `engine_start.log` for a failed start);
    `qsl_samples`: the samples the QSL reports as its performance count (None: all)."""

    def __init__(self, prep: PreparedRun, folder: Path, qsl_samples: int | None = None) -> None:
        self.prep = prep
        self.folder = folder
        self.qsl_samples = qsl_samples
        self.verbose = bool(prep.request.verbose)
        self.sut: Any = None
        self.qsl: Any = None
        self.lg: Any = None
        self.start_s: float | None = None
        # set when the start failed: result.json's error line for it
        self.start_error: str | None = None
        self._log: EngineStartLog | None = None
        self._unroute: Callable[[], None] = lambda: None
        self._quick_stop = False

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> float:
        """Start the engine; its start time in seconds. A failed start leaves nothing running,
        sets `start_error` and raises: EngineFailure with vLLM's root cause for a start that
        failed, the exception itself for an interrupted or timed-out one."""
        import mlperf_loadgen as lg

        from sut.qsl import TokenQSL

        self.lg = lg
        self.folder.mkdir(parents=True, exist_ok=True)
        self.qsl = TokenQSL(self.prep.dataset.prompts, self.qsl_samples)
        log_path = None if self.verbose else self.folder / ENGINE_LOG
        t0 = time.monotonic()
        print("starting the vLLM engine (a large model takes minutes)", flush=True)
        # vLLM's processes' output, held until the start is decided; the resource tracker's to
        # the log
        self._log = EngineStartLog.begin(log_path)
        try:
            with still_going("the engine is still starting", self._log.say):
                self.sut = build_sut(self.prep)
        except BaseException as exc:  # the engine failed to start, or the start was interrupted
            failure = self._start_failed(exc)
            if failure is None:
                raise
            raise failure from exc
        self._log.started(log_path)
        if not self.verbose:
            self._unroute = route_vllm_logger(self.folder / ENGINE_LOG)
        self.start_s = round(time.monotonic() - t0, 2)
        shown = "" if self.verbose else f" (vLLM's own output: {log_path}; --verbose shows it)"
        print(f"engine started in {self.start_s:.0f} s{shown}", flush=True)
        return self.start_s

    def _start_failed(self, exc: BaseException) -> EngineFailure | None:
        """Record a failed start; the one-line failure to raise instead of `exc` (None: raise
        `exc` itself, an interrupt or the start timeout)."""
        assert self._log is not None
        printed = self._log.failed()
        self._log = None  # stdout and stderr are ours again; dying processes' output dropped
        self.qsl.destroy()
        self.qsl = None
        failed = isinstance(exc, Exception) and not isinstance(exc, EngineStartTimeout)
        # vLLM's root cause, printed by its own processes, over the wrapper that reached us
        cause = root_cause(printed) if failed else None
        self.start_error = f"engine start failed: {cause or f'{type(exc).__name__}: {exc}'}"
        kept = ""
        if printed.strip():
            files.write_text(self.folder / ENGINE_START_LOG, printed)
            kept = f" (vLLM's output of the start: {self.folder / ENGINE_START_LOG})"
        if not failed:
            return None
        reason = cause or vllm_reason(exc)  # one line instead of tracebacks from vLLM's processes
        return EngineFailure(f"the vLLM engine did not start: {reason}{kept}")

    # -- tests ---------------------------------------------------------------------------------

    def test(
        self,
        settings: Any,
        log_settings: Any,
        audit: Path,
        label: str,
        *,
        progress: str | None = None,
        planned: int | None = None,
    ) -> None:
        """One LoadGen test under the run's watches (stall timeout, lost worker, a full output
        file system); raises EngineFailure when the engine failed during it (OutputFull when
        the file system filled). `progress`: the bar's label (None: no
        bar), over `planned` samples when known."""
        sut = self.sut
        sut.reset_stats()
        if progress is not None:
            sut.begin_progress(progress, planned)
        try:
            run_loadgen_test(
                self.lg,
                sut,
                self.qsl,
                settings,
                log_settings,
                audit,
                label,
                self.prep.request.stall_timeout_s,
                fatal=self.fatal,
                space=self.folder,
            )
            if progress is not None:
                sut.end_progress()
            if sut.error is not None:
                raise failure_of(label, sut.error)
        except (KeyboardInterrupt, EngineFailure) as exc:
            self.stop_quickly()  # interrupted, or the engine failed: nothing to drain
            said = self._said_first_about(exc)
            if said is not None:  # for a run and a calibration's trial alike
                raise EngineFailure(f"{exc} (vLLM logged first: {said})") from exc
            raise

    def _said_first_about(self, exc: BaseException) -> str | None:
        """vLLM's own first line about an engine that died during a test (its front end only
        heard "EngineDeadError"); None when the failure's line already says it (the watchdog
        quotes a worker's death as vLLM logged it) or it was no engine's death."""
        if not isinstance(exc, EngineFailure) or isinstance(exc, OutputFull):
            return None
        said = self.first_said()
        return None if not said or said in str(exc) else said

    def fatal(self) -> str | None:
        """vLLM's line for a lost worker or peer, once its processes printed one."""
        return self._log.fatal() if self._log is not None else None

    def first_said(self) -> str | None:
        """What vLLM logged first about a failure: a lost worker or peer, else its first ERROR
        line (the engine's front end only hears `EngineDeadError`)."""
        if self._log is None:
            return None
        return self._log.fatal() or first_error(self._log.recent())

    # -- stop ----------------------------------------------------------------------------------

    def stop_quickly(self) -> None:
        """The engine is dead or the run interrupted: nothing to drain, so `close()` stops it
        as after Ctrl-C (a core whose worker is gone may sit minutes in its step)."""
        self._quick_stop = True

    def close(self) -> None:
        """Stop everything `start()` started; safe after a failed start."""
        sut, qsl = self.sut, self.qsl
        try:
            if sut is not None:
                if loadgen_still_running():
                    # Ctrl-C or a dead engine while LoadGen still runs: its threads keep calling
                    # the SUT and QSL, so leave those allocated (the CLI exits the process right
                    # after) and stop only the engine, its processes and our threads. The
                    # samples in flight are not answered: nobody waits for this test any more.
                    sut.handle = None
                    if qsl is not None:
                        qsl.handle = None
                    sut.ledger.abandon()
                timeout = INTERRUPT_STOP_TIMEOUT_S if self._quick_stop else DEFAULT_STOP_TIMEOUT_S
                sut.stop(timeout)
        finally:
            if qsl is not None:
                qsl.destroy()
            if self._log is not None:
                self._log.close()  # the engine's processes are gone: their output pipes closed
            self._unroute()
            self.sut = self.qsl = None
