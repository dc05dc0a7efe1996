"""Watching a run's processes from a test: wait for a condition, list a process tree, check
that nothing of it is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import REPO


def default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored and children inherit that; a terminal's
    # Ctrl-C reaches a foreground run whose SIGINT is at its default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(*args: str) -> subprocess.Popen:
    """`python -m harness.cli ARGS` in a new session (its own process group), as a terminal
    or a scheduler would start it."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        start_new_session=True,
        preexec_fn=default_sigint,
    )


def wait_for(predicate, timeout: float, what: str, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"run exited ({p.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def loadgen_issuing(out: Path) -> bool:
    detail = out / "performance" / "mlperf_log_detail.txt"
    return detail.exists() and "generated_query_count" in detail.read_text(errors="replace")


def family(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def engine_cores(pid: int) -> list[psutil.Process]:
    found = []
    for q in family(pid):
        try:
            if "EngineCore" in " ".join(q.cmdline() or [q.name()]):
                found.append(q)
        except psutil.Error:
            pass
    return found


def group_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def alive(procs: list[psutil.Process]) -> list[int]:
    found = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_all_gone(procs: list[psutil.Process], pgids: list[int], what: str) -> None:
    # A killed process can take a few seconds to finish exiting on a loaded machine.
    wait_for(lambda: not alive(procs), 30, f"{what}: processes to exit")
    for pgid in pgids:  # ... and then nothing at all is left in the process groups
        wait_for(lambda pg=pgid: group_empty(pg), 30, f"{what}: process group {pgid} to empty")


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
