"""One engine, started once, for a list of LoadGen tests: the part every caller that measures
shares (a run's performance / accuracy / TEST06 tests in harness.run.execute.runner, a calibration's
trials and its Offline ceiling in harness.calibrate.trials, the capacity benches).

`EngineSession` owns what must be done the same way each time, so that callers cannot drift:
- the start: vLLM's own output held back until the start is decided, then routed to the
  folder's `engine.log` (the terminal keeps our lines; `verbose` shows vLLM's as well); a line
  every 30 s while it starts; a failed start becomes one line with vLLM's root cause, its output
  kept in `engine_start.log`;
- each phase (`run(Phase) -> PhaseResult`: the warm-up, a run's LoadGen test, a calibration's
  trial): LoadGen on its worker thread, watched from this thread for Ctrl-C, a stalled engine
  and a lost worker (vLLM's own line, `FatalWatch`), failed on an engine error with what vLLM
  logged first; the phase's figures (the SUT's stats, its timeline) read back in one record, so
  that callers never reach the SUT itself;
- the quick stop: decided in one place (`_ends_quickly`), for a failed phase and for a failure
  between phases alike (`close(exc)`, or leaving `with session:` on an exception);
- the stop, whatever happened: a test LoadGen still runs is abandoned (its ledger too: nobody
  waits for those samples), the engine is stopped (quickly after Ctrl-C or a dead engine, whose
  core may sit minutes in a step), the QSL freed and vLLM's output pipes closed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from harness import files
from harness.run.execute.loadgen_call import (
    EngineFailure,
    OutputFull,
    failure_of,
    loadgen_still_running,
    run_loadgen_test,
)
from harness.run.execute.warmup import warm_up
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
from harness.run.setup.settings import build_log_settings
from sut.engine import resolved_engine_args, resolved_settings, vllm_reason
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


@dataclass(frozen=True)
class Phase:
    """One phase on a started engine. `settings` None: the untimed warm-up of `warmup_samples`
    prompts (no LoadGen); else one LoadGen test with these TestSettings, its logs in `log_dir`
    and LoadGen's audit file looked up at `audit`.

    `progress`: the bar's label (None: no bar), over `planned` samples when known; `profile`:
    the engine's profiler on for the test; `timeline`: read the SUT's timeline when it ends
    (Server-like SUTs keep one); `limit_in_flight`: cap the requests in the engine at
    `max_in_flight` for this test (None lifts the cap) where the SUT can."""

    label: str
    settings: Any = None
    log_dir: Path | None = None
    audit: Path | None = None
    progress: str | None = None
    planned: int | None = None
    profile: bool = False
    timeline: bool = False
    limit_in_flight: bool = False
    max_in_flight: int | None = None
    warmup_samples: int = 0

    @classmethod
    def warm_up(cls, samples: int) -> Phase:
        return cls("warm-up", warmup_samples=samples)


@dataclass
class PhaseResult:
    """What a phase leaves: its wall time, the SUT's stats record after it (result.json's
    `sut_stats`), the peak of requests in the engine, the timeline when asked, and for the
    warm-up what it did (result.json's `warmup`)."""

    label: str
    wall_s: float
    stats: dict[str, Any] = field(default_factory=dict)
    peak_engine_in_flight: int | None = None
    log_dir: Path | None = None
    timeline: Any = None
    warmup: dict[str, Any] | None = None


def _ends_quickly(exc: BaseException | None) -> bool:
    """Whether an ending leaves nothing to drain: an interrupt or a failed engine (a core whose
    worker is gone may sit minutes in its step), so the engine is stopped as after Ctrl-C."""
    return isinstance(exc, (KeyboardInterrupt, EngineFailure))


class EngineSession:
    """The engine of `prep` (harness.run.setup.prepare.PreparedRun) with its
    QSL: `start()`, `run(phase)` as often as needed, `close()` (or `with session:`).

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

    def run(self, phase: Phase) -> PhaseResult:
        """One phase under the run's watches; its result. A failed phase raises (EngineFailure
        with what vLLM logged first when the engine died; OutputFull when the file system
        filled) and leaves the engine to be stopped quickly where nothing is left to drain."""
        t0 = time.monotonic()
        try:
            warmup = None
            if phase.settings is None:
                warmup = self._warm_up(phase)
            else:
                self._test(phase)
        except BaseException as exc:
            if _ends_quickly(exc):
                self.stop_quickly()
            said = self._said_first_about(exc)
            if said is not None:  # for a run and a calibration's trial alike
                raise EngineFailure(f"{exc} (vLLM logged first: {said})") from exc
            raise
        wall = time.monotonic() - t0
        sut = self.sut
        timeline = sut.timeline() if phase.timeline and hasattr(sut, "timeline") else None
        stats = sut.stats_record()
        return PhaseResult(
            label=phase.label,
            wall_s=wall,
            stats=stats,
            peak_engine_in_flight=stats.get("peak_engine_in_flight"),
            log_dir=phase.log_dir,
            timeline=timeline,
            warmup=warmup,
        )

    def _warm_up(self, phase: Phase) -> dict[str, Any]:
        """The untimed warm-up (harness.run.execute.warmup); what it did, for result.json."""
        return warm_up(self.sut, self.prep.dataset.prompts, phase.warmup_samples)

    def _test(self, phase: Phase) -> None:
        """One LoadGen test; raises EngineFailure when the engine failed during it."""
        assert phase.log_dir is not None and phase.audit is not None
        sut = self.sut
        if phase.limit_in_flight:
            limiter = getattr(sut, "limit_in_flight", None)
            if limiter is not None:
                limiter(phase.max_in_flight)
        if phase.profile:
            sut.profile(True)
        sut.reset_stats()
        if phase.progress is not None:
            sut.begin_progress(phase.progress, phase.planned)
        run_loadgen_test(
            self.lg,
            sut,
            self.qsl,
            phase.settings,
            build_log_settings(phase.log_dir),
            phase.audit,
            phase.label,
            self.prep.request.stall_timeout_s,
            fatal=self.fatal,
            space=self.folder,
        )
        if phase.progress is not None:
            sut.end_progress()
        if sut.error is not None:
            raise failure_of(phase.label, sut.error)
        if phase.profile:
            sut.profile(False)  # returns once every rank wrote its trace

    # -- what the engine is ------------------------------------------------------------------

    def engine_resolved(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The engine's settings as vLLM resolved them: (result.json's `engine_resolved`,
        `engine_resolved_args`)."""
        config = getattr(self.sut, "vllm_config", None)
        return resolved_settings(config), resolved_engine_args(config)

    def stats_record(self) -> dict[str, Any]:
        """The SUT's stats record now (also after a failed phase: what it got through)."""
        return dict(self.sut.stats_record()) if self.sut is not None else {}

    def failure_line(self, exc: BaseException) -> str:
        """result.json's error line for an ending: the start's own line when the start failed
        (vLLM's root cause), else the exception's, which for an engine that died in a phase
        already carries what vLLM logged first."""
        return self.start_error or f"{type(exc).__name__}: {exc}"

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

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    def close(self, ending: BaseException | None = None) -> None:
        """Stop everything `start()` started; safe after a failed start. `ending`: what ended
        the caller's work, when it failed (an interrupt or a dead engine between phases stops
        the engine quickly, as a failed phase does)."""
        if _ends_quickly(ending):
            self.stop_quickly()
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
