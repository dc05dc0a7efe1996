"""One LoadGen test on a worker thread, watched from the main thread: the call every test of a
run, a calibration or a bench goes through (harness.run.execute.runner, harness.calibrate.trials)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import files
from sut.engine import describe_error

LOADGEN_THREAD = "loadgen-test"
ENGINE_FAILURE_GRACE_S = 3.0  # time LoadGen gets to end on its own once the engine failed


# Below this many bytes free on the output folder's file system, LoadGen's logs are being lost
# (its logger drops what it cannot write, silently): the test is stopped, not finished over
# logs that were not written.
SPACE_FLOOR_BYTES = 256 * 1024


class EngineFailure(RuntimeError):
    """The engine died or failed a request during a LoadGen test (the run's results are void)."""


class OutputFull(EngineFailure):
    """The output folder's file system filled during a test: its logs are incomplete."""


def failure_of(mode: str, error: BaseException) -> EngineFailure:
    """The one-line failure of a test whose SUT failed with `error`."""
    if isinstance(error, OutputFull):
        return OutputFull(f"the {mode} test was stopped: {error}")
    return EngineFailure(f"vLLM engine failed during the {mode} test: {describe_error(error)}")


def output_full(folder: Path | None) -> str | None:
    """Why `folder`'s file system can no longer take a test's logs, or None."""
    if folder is None:
        return None
    try:
        free = files.free_bytes(folder)
    except OSError:
        return None  # gone (a folder removed under the run): the writes will say so
    if free >= SPACE_FLOOR_BYTES:
        return None
    return (
        f"{folder}: its file system is full ({free / 1024:.0f} KB free), so LoadGen's logs "
        "of the test are no longer written; free space there or pass another --output"
    )


def loadgen_still_running() -> bool:
    """True while an abandoned LoadGen test thread of this process is alive."""
    return any(t.name == LOADGEN_THREAD and t.is_alive() for t in threading.enumerate())


def run_loadgen_test(
    lg: Any,
    sut: Any,
    qsl: Any,
    settings: Any,
    log_settings: Any,
    audit: Path,
    mode: str,
    stall_timeout_s: float | None = None,
    fatal: Callable[[], str | None] | None = None,
    space: Path | None = None,
) -> None:
    """StartTest on a worker thread, so this (main) thread keeps taking Ctrl-C, notices a
    dead engine and watches for a stalled one (`sut.check`: no token for
    `stall_timeout_s` while samples are in flight fails the SUT, which answers them), and
    `fatal()`, what vLLM's executor logged when a worker died (the engine core may wait minutes
    before it fails: the SUT is failed on the line itself), and the file system of `space`, the
    output folder (filled up, LoadGen's logs are lost silently: the test is stopped).
    LoadGen has no way to cut a test short: a Server test lasts its scheduled duration
    whatever the SUT does. So on Ctrl-C, or when the engine failed and LoadGen does not end
    within a grace period, the test is abandoned: the caller stops the engine and the process
    exits; LoadGen's logs up to that moment are on disk (its logger flushes as it goes).
    """
    done = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            lg.StartTestWithLogSettings(sut.handle, qsl.handle, settings, log_settings, str(audit))
        except BaseException as exc:  # pragma: no cover - LoadGen reports errors in its log
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=target, name=LOADGEN_THREAD, daemon=True)
    thread.start()
    failed_at: float | None = None
    while not done.wait(0.2):
        if sut.error is None:
            said = fatal() if fatal is not None else None
            if said:
                sut.fail(EngineFailure(f"the engine lost a worker: {said}"))
                continue
            full = output_full(space)
            if full:
                sut.fail(OutputFull(full))
                continue
            sut.check(stall_timeout_s)
            continue
        failed_at = failed_at or time.monotonic()
        if time.monotonic() - failed_at > ENGINE_FAILURE_GRACE_S:
            raise failure_of(mode, sut.error)
    thread.join()
    if failure:
        raise failure[0]
    full = output_full(space) if sut.error is None else None
    if full:  # filled as the test ended: its last logs (the summary) may be cut short
        sut.fail(OutputFull(full))
